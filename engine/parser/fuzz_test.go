package parser

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// cutPieces splits text into deltas whose lengths come from cuts (a zero
// gives an empty delta); the rest of text is the last delta.
func cutPieces(text string, cuts []byte) []string {
	var out []string
	for _, c := range cuts {
		n := int(c % 24)
		if n > len(text) {
			n = len(text)
		}
		out = append(out, text[:n])
		text = text[n:]
	}
	return append(out, text)
}

var fuzzSeeds = []string{
	"abc</think>xyz",
	"I need data\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>北京</arg_value>\n</tool_call>",
	"r</think>a<tool_call>search<arg_key>filters</arg_key><arg_value>{\"a\": [1, {\"b\": null}]}</arg_value><arg_key>query</arg_key><arg_value>q <think></arg_value></tool_call>b",
	"<think>x</think><tool_call>ping</tool_call><tool_call>nope</tool_call>",
	"<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}</tool_call>",
	"<tool_call>Weather/get_weather>{\"city\": \"Beijing\"} trailing",
	"a</thi",
	"<tool_call>get_wea",
	"<tool_call>get_weather<arg_key>city</arg_key>\\n<arg_value>Lima",
	"\xe4\xb8\xad</think>\xf0\x9f\x98",
}

// FuzzReasoningStream: any split of any output gives exactly what
// Extract gives, never panics, and never splits a rune of valid input.
func FuzzReasoningStream(f *testing.F) {
	for i, s := range fuzzSeeds {
		f.Add(s, []byte{3, 0, 7, 1, 11}, uint8(i))
	}
	f.Fuzz(func(t *testing.T, text string, cuts []byte, flags uint8) {
		inThink, thinking, toolAware := flags&1 != 0, flags&2 != 0, flags&4 != 0
		p := NewGLM45Reasoning(inThink, thinking)
		p.SetToolCalls(toolAware)
		wantR, wantC := p.Extract(text)
		var rb, cb strings.Builder
		valid := utf8.ValidString(text)
		check := func(r, c string) {
			if valid && (!utf8.ValidString(r) || !utf8.ValidString(c)) {
				t.Fatalf("delta (%q, %q) splits a rune", r, c)
			}
			rb.WriteString(r)
			cb.WriteString(c)
		}
		for _, d := range cutPieces(text, cuts) {
			check(p.Feed(d))
		}
		check(p.Flush())
		if rb.String() != wantR || cb.String() != wantC {
			t.Fatalf("stream (%q, %q) != Extract (%q, %q)", rb.String(), cb.String(), wantR, wantC)
		}
		if len(wantR)+len(wantC) > len(text) {
			t.Fatalf("output longer than input")
		}
		if !strings.Contains(text, "<") {
			switch {
			case thinking && inThink:
				if wantR != pyRStrip(text) || wantC != "" {
					t.Fatalf("tag-free reasoning (%q, %q)", wantR, wantC)
				}
			default:
				if wantR != "" || wantC != text {
					t.Fatalf("tag-free content (%q, %q)", wantR, wantC)
				}
			}
		}
		if !thinking && !toolAware && (wantR != "" || wantC != text) {
			t.Fatalf("thinking off must pass text through: (%q, %q)", wantR, wantC)
		}
	})
}

// FuzzToolStream runs the combined Stream (reasoning + tools) over random
// deltas and checks it against Parse and against the unsplit stream.
func FuzzToolStream(f *testing.F) {
	for i, s := range fuzzSeeds {
		f.Add(s, []byte{5, 2, 0, 9, 13, 1}, uint8(i))
	}
	tools := testTools(f)
	f.Fuzz(func(t *testing.T, text string, cuts []byte, flags uint8) {
		cfg := StreamConfig{ToolParser: "glm47", Tools: tools, ToolChoice: ToolChoice{Mode: ToolChoiceAuto}}
		if flags&1 != 0 {
			cfg.ReasoningParser, cfg.ThinkingEnabled, cfg.PromptEndsInThink = "glm45", true, flags&2 != 0
		}
		cfg.SingleToolCall = flags&4 != 0
		if flags&8 != 0 {
			cfg.ToolChoice = ToolChoice{Mode: ToolChoiceRequired}
		}
		cfg.NewID = SequentialIDs("c")
		m, err := Parse(cfg, text, nil, "stop")
		if err != nil {
			t.Fatal(err)
		}
		cfg.NewID = SequentialIDs("c")
		whole, _ := runStream(t, cfg, []string{text}, "stop")
		cfg.NewID = SequentialIDs("c")
		got, deltas := runStream(t, cfg, cutPieces(text, cuts), "stop")
		if !reflect.DeepEqual(got, whole) {
			t.Fatalf("split stream %+v != whole stream %+v", got, whole)
		}
		if got.reasoning != m.Reasoning {
			t.Fatalf("stream reasoning %q != Parse %q", got.reasoning, m.Reasoning)
		}
		if len(got.calls)+len(m.ToolCalls) > 0 && !reflect.DeepEqual(got.calls, m.ToolCalls) {
			t.Fatalf("stream calls %v != Parse %v", got.calls, m.ToolCalls)
		}
		content := ""
		if m.Content != nil {
			content = *m.Content
		}
		if len(m.ToolCalls) == 0 && got.content != content {
			t.Fatalf("stream content %q != Parse %q", got.content, content)
		}
		if len(m.ToolCalls) > 0 && pyStrip(got.content) != content {
			t.Fatalf("stream content %q !~ Parse %q", got.content, content)
		}
		if cfg.SingleToolCall && len(m.ToolCalls) > 1 {
			t.Fatalf("%d calls with parallel_tool_calls=false", len(m.ToolCalls))
		}
		for _, c := range m.ToolCalls {
			if !strings.Contains(text, "{") && !json.Valid([]byte(c.Arguments)) {
				t.Fatalf("arguments %q are not JSON", c.Arguments)
			}
		}
		if utf8.ValidString(text) {
			for _, d := range deltas {
				b, err := marshalNoEscape(d)
				if err != nil || strings.ContainsRune(string(b), utf8.RuneError) && !strings.ContainsRune(text, utf8.RuneError) {
					t.Fatalf("delta %s: %v", b, err)
				}
			}
		}
	})
}
