package parser

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func streamCfg(t testing.TB, choice ToolChoice) StreamConfig {
	return StreamConfig{
		ReasoningParser: "glm45", PromptEndsInThink: true, ThinkingEnabled: true,
		ToolParser: "glm47", Tools: testTools(t), ToolChoice: choice,
		NewID: SequentialIDs("call_"),
	}
}

var auto = ToolChoice{Mode: ToolChoiceAuto}

// streamed is what a client reassembles from the chunks.
type streamed struct {
	reasoning, content string
	calls              []ToolCall
	finish             string
}

func runStream(t testing.TB, cfg StreamConfig, pieces []string, engineFinish string) (streamed, []ChatDelta) {
	t.Helper()
	s, err := NewStream(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out streamed
	var deltas []ChatDelta
	add := func(d ChatDelta) {
		deltas = append(deltas, d)
		out.reasoning += d.Reasoning
		out.content += d.Content
		for _, tc := range d.ToolCalls {
			if tc.ID != "" {
				if tc.Index != len(out.calls) || tc.Type != "function" || tc.Function.Name == "" {
					t.Fatalf("bad first tool chunk %+v", tc)
				}
				out.calls = append(out.calls, ToolCall{ID: tc.ID, Name: tc.Function.Name})
			} else if tc.Type != "" || tc.Function.Name != "" {
				t.Fatalf("later tool chunk repeats the header: %+v", tc)
			}
			if tc.Index >= len(out.calls) {
				t.Fatalf("tool chunk for unknown index %d", tc.Index)
			}
			out.calls[tc.Index].Arguments += tc.Function.Arguments
		}
	}
	for _, p := range pieces {
		add(s.Feed(p, nil))
	}
	add(s.Finish())
	out.finish = s.FinishReason(engineFinish)
	if got := s.ToolCalls(); !reflect.DeepEqual(got, out.calls) && len(out.calls)+len(got) > 0 {
		t.Fatalf("ToolCalls() = %v, chunks give %v", got, out.calls)
	}
	return out, deltas
}

func TestStreamEndToEnd(t *testing.T) {
	out := "The user wants weather. I should call the tool.\n</think>\nLet me check that.\n" +
		"<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>北京</arg_value>\n" +
		"<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>"
	m, err := Parse(streamCfg(t, auto), out, nil, "stop")
	if err != nil {
		t.Fatal(err)
	}
	if m.Reasoning != "The user wants weather. I should call the tool." || m.Content == nil ||
		*m.Content != "Let me check that." || m.FinishReason != "tool_calls" {
		t.Fatalf("Parse = %+v", m)
	}
	wantCalls := []ToolCall{{ID: "call_0", Name: "get_weather", Arguments: `{"city": "北京", "days": 3}`}}
	if !reflect.DeepEqual(m.ToolCalls, wantCalls) {
		t.Fatalf("calls %v", m.ToolCalls)
	}
	b, _ := json.Marshal(m.ToolCalls)
	if string(b) != `[{"id":"call_0","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"北京\", \"days\": 3}"}}]` {
		t.Fatalf("tool_calls JSON %s", b)
	}

	got, deltas := runStream(t, streamCfg(t, auto), tokenPieces(out), "stop")
	if got.reasoning != m.Reasoning || pyStrip(got.content) != *m.Content || !reflect.DeepEqual(got.calls, wantCalls) ||
		got.finish != "tool_calls" {
		t.Fatalf("stream = %+v", got)
	}
	// The first tool chunk is the header with empty arguments, as
	// vLLM's glm4_moe parser sends it.
	var first []byte
	for _, d := range deltas {
		if len(d.ToolCalls) > 0 {
			first, _ = json.Marshal(d)
			break
		}
	}
	if string(first) != `{"tool_calls":[{"index":0,"id":"call_0","type":"function","function":{"name":"get_weather","arguments":""}}]}` {
		t.Fatalf("first tool chunk %s", first)
	}
}

func TestChatDeltaJSON(t *testing.T) {
	d := ChatDelta{Reasoning: "r<x>", Content: "c&", ToolCalls: []DeltaToolCall{{Index: 1, Function: DeltaFunction{Arguments: `{"a"`}}}}
	b, err := marshalNoEscape(d) // as a server's json.Encoder with SetEscapeHTML(false)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"content":"c&","reasoning":"r<x>","reasoning_content":"r<x>","tool_calls":[{"index":1,"function":{"arguments":"{\"a\""}}]}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	if !(ChatDelta{}).Empty() || d.Empty() {
		t.Fatal("Empty")
	}
}

func TestStreamCases(t *testing.T) {
	named := ToolChoice{Mode: ToolChoiceFunction, Name: "get_weather"}
	required := ToolChoice{Mode: ToolChoiceRequired}
	none := ToolChoice{Mode: ToolChoiceNone}
	type tc struct {
		name         string
		cfg          func(StreamConfig) StreamConfig
		text         string
		engine       string
		rsn          string
		content      *string // Parse's content (nil = null)
		calls        []wantCall
		finish       string // Parse
		streamFinish string
	}
	str := func(s string) *string { return &s }
	id := func(c StreamConfig) StreamConfig { return c }
	cases := []tc{
		{"tool call inside reasoning", id,
			"I need the weather first.\n<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call>",
			"stop", "I need the weather first.", nil, []wantCall{{"get_weather", `{"city": "Oslo"}`}}, "tool_calls", "tool_calls"},
		{"reasoning only, cut by length", id, "Hmm, let me think about", "length",
			"Hmm, let me think about", nil, nil, "length", "length"},
		{"several calls", id,
			"ok</think><tool_call>ping</tool_call>\n<tool_call>get_weather\n<arg_key>city</arg_key><arg_value>A</arg_value>\n</tool_call>",
			"stop", "ok", nil, []wantCall{{"ping", "{}"}, {"get_weather", `{"city": "A"}`}}, "tool_calls", "tool_calls"},
		{"parallel_tool_calls false keeps the first", func(c StreamConfig) StreamConfig { c.SingleToolCall = true; return c },
			"ok</think><tool_call>ping</tool_call><tool_call>get_weather<arg_key>city</arg_key><arg_value>A</arg_value></tool_call>",
			"stop", "ok", nil, []wantCall{{"ping", "{}"}}, "tool_calls", "tool_calls"},
		{"calls cut by length", id, "x</think><tool_call>get_weather<arg_key>city</arg_key><arg_value>Ab", "length",
			"x", nil, []wantCall{{"get_weather", `{"city": "Ab"}`}}, "tool_calls", "length"},
		{"tool_choice none: no tool parsing", func(c StreamConfig) StreamConfig { c.ToolChoice = none; return c },
			"r</think>a<tool_call>ping</tool_call>", "stop", "r", str("a<tool_call>ping</tool_call>"), nil, "stop", "stop"},
		{"tool_choice none: tool call still ends reasoning", func(c StreamConfig) StreamConfig { c.ToolChoice = none; return c },
			"r<tool_call>ping</tool_call><think>x</think>", "stop", "rx", str("<tool_call>ping</tool_call>"), nil, "stop", "stop"},
		{"no tool parser", func(c StreamConfig) StreamConfig { c.ToolParser = ""; return c },
			"r</think><tool_call>ping</tool_call>", "stop", "r", str("<tool_call>ping</tool_call>"), nil, "stop", "stop"},
		{"no reasoning parser", func(c StreamConfig) StreamConfig { c.ReasoningParser = ""; return c },
			"r</think>hello", "stop", "", str("r</think>hello"), nil, "stop", "stop"},
		{"thinking disabled", func(c StreamConfig) StreamConfig { c.ThinkingEnabled = false; c.PromptEndsInThink = false; return c },
			"<think>x</think>hello<tool_call>ping</tool_call>", "stop", "", str("<think>x</think>hello"), []wantCall{{"ping", "{}"}}, "tool_calls", "tool_calls"},
		{"named: finish stays stop, content empty string", func(c StreamConfig) StreamConfig { c.ToolChoice = named; return c },
			"r</think><tool_call>get_weather<arg_key>city</arg_key><arg_value>A</arg_value></tool_call>", "stop",
			"r", str(""), []wantCall{{"get_weather", `{"city": "A"}`}}, "stop", "stop"},
		{"required without calls", func(c StreamConfig) StreamConfig { c.ToolChoice = required; return c },
			"r</think>no tool", "stop", "r", str("no tool"), nil, "tool_calls", "stop"},
		{"required with calls, length", func(c StreamConfig) StreamConfig { c.ToolChoice = required; return c },
			"r</think><tool_call>ping</tool_call>", "length", "r", str(""), []wantCall{{"ping", "{}"}}, "length", "length"},
		{"auto, no call", id, "r</think>\nJust text.\n", "stop", "r", str("\nJust text.\n"), nil, "stop", "stop"},
		{"unknown tool dropped", id, "r</think>before <tool_call>evil\n<arg_key>a</arg_key><arg_value>1</arg_value></tool_call> after",
			"stop", "r", str("before  after"), nil, "stop", "stop"},
		{"malformed call at end is content", id, "r</think>see <tool_call>get_wea", "length", "r", str("see <tool_call>get_wea"), nil, "length", "length"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg(streamCfg(t, auto))
			m, err := Parse(cfg, c.text, nil, c.engine)
			if err != nil {
				t.Fatal(err)
			}
			if m.Reasoning != c.rsn {
				t.Fatalf("reasoning %q, want %q", m.Reasoning, c.rsn)
			}
			if (m.Content == nil) != (c.content == nil) || (m.Content != nil && *m.Content != *c.content) {
				t.Fatalf("content %v, want %v", fmtPtr(m.Content), fmtPtr(c.content))
			}
			checkCalls(t, m.ToolCalls, c.calls)
			if m.FinishReason != c.finish {
				t.Fatalf("finish %q, want %q", m.FinishReason, c.finish)
			}
			var ref streamed
			for i, plan := range splitPlans(c.text) {
				cfg := c.cfg(streamCfg(t, auto))
				got, _ := runStream(t, cfg, plan, c.engine)
				if i == 0 {
					ref = got
					if got.reasoning != c.rsn || got.finish != c.streamFinish {
						t.Fatalf("stream reasoning %q finish %q", got.reasoning, got.finish)
					}
					want := ""
					if c.content != nil {
						want = *c.content
					}
					if pyStrip(got.content) != pyStrip(want) {
						t.Fatalf("stream content %q, want %q", got.content, want)
					}
					checkCalls(t, got.calls, c.calls)
					continue
				}
				if !reflect.DeepEqual(got, ref) {
					t.Fatalf("split %q gives %+v, whole gives %+v", plan, got, ref)
				}
			}
		})
	}
}

func fmtPtr(s *string) string {
	if s == nil {
		return "null"
	}
	return "\"" + *s + "\""
}

func TestReasoningTokens(t *testing.T) {
	ids := map[string]int{TagThinkStart: 900, TagThinkEnd: 901, TagToolCallStart: 902}
	cfg := StreamConfig{ReasoningParser: "glm45", PromptEndsInThink: true, ThinkingEnabled: true, TagIDs: ids}
	// "a b c" </think> "x y"
	pieces := []struct {
		text string
		ids  []int
	}{{"a", []int{1}}, {" b", []int{2}}, {" c", []int{3}}, {"</think>", []int{901}}, {"x", []int{4}}, {" y", []int{5}}}
	s, _ := NewStream(cfg)
	for _, p := range pieces {
		s.Feed(p.text, p.ids)
	}
	s.Finish()
	if s.ReasoningTokens() != 3 {
		t.Fatalf("ReasoningTokens = %d, want 3", s.ReasoningTokens())
	}
	// Same with one multi-token delta (MTP) and without tag ids.
	s2, _ := NewStream(cfg)
	s2.Feed("a b", []int{1, 2})
	s2.Feed(" c</think>x", []int{3, 901, 4})
	if s2.ReasoningTokens() != 3 {
		t.Fatalf("multi-token ReasoningTokens = %d, want 3", s2.ReasoningTokens())
	}
	cfg.TagIDs = nil
	s3, _ := NewStream(cfg)
	for _, p := range pieces {
		s3.Feed(p.text, p.ids)
	}
	if s3.ReasoningTokens() != 3 {
		t.Fatalf("no-tag-id ReasoningTokens = %d, want 3", s3.ReasoningTokens())
	}
	cfg.TagIDs = ids
	m, _ := Parse(cfg, "a b c</think>x y", []int{1, 2, 3, 901, 4, 5}, "stop")
	if m.ReasoningTokens != 3 {
		t.Fatalf("Parse ReasoningTokens = %d, want 3", m.ReasoningTokens)
	}
}

func TestStreamConfigErrors(t *testing.T) {
	if _, err := NewStream(StreamConfig{ReasoningParser: "qwen3"}); err == nil {
		t.Fatal("unknown reasoning parser accepted")
	}
	if _, err := NewStream(StreamConfig{ToolParser: "hermes"}); err == nil {
		t.Fatal("unknown tool parser accepted")
	}
	if _, err := Parse(StreamConfig{ToolParser: "x"}, "", nil, "stop"); err == nil {
		t.Fatal("Parse accepted a bad config")
	}
}

// After Finish nothing more comes out, and every delta is valid UTF-8
// even when the input is cut inside runes.
func TestStreamUTF8AndFinish(t *testing.T) {
	text := "思考😀</think>答<tool_call>get_weather<arg_key>city</arg_key><arg_value>東京😀</arg_value></tool_call>"
	s, _ := NewStream(streamCfg(t, auto))
	var all strings.Builder
	for i := 0; i < len(text); i++ {
		d := s.Feed(text[i:i+1], nil)
		b, _ := json.Marshal(d)
		if strings.Contains(string(b), `\ufffd`) || strings.ContainsRune(string(b), '\uFFFD') {
			t.Fatalf("delta %s has a replacement character", b)
		}
		all.Write(b)
	}
	s.Finish()
	if !s.Feed("more", nil).Empty() || !s.Finish().Empty() {
		t.Fatal("output after Finish")
	}
	if s.ToolCalls()[0].Arguments != `{"city": "東京😀"}` {
		t.Fatalf("args %q", s.ToolCalls()[0].Arguments)
	}
}
