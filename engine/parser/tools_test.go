package parser

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

const testToolsJSON = `[
 {"type": "function", "function": {"name": "get_weather", "description": "w",
  "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "unit": {"type": "string", "enum": ["c", "f"]}},
   "required": ["city"]}}},
 {"type": "function", "function": {"name": "search",
  "parameters": {"type": "object", "properties": {
    "query": {"type": "string"}, "filters": {"type": "object"}, "limit": {"type": "number"},
    "exact": {"type": "boolean"}, "tags": {"type": "array", "items": {"type": "string"}},
    "note": {"type": ["string", "null"]}}}}},
 {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}},
 {"type": "function", "function": {"name": "noschema"}}
]`

func testTools(t testing.TB) []Tool {
	t.Helper()
	tools, err := ParseTools(json.RawMessage(testToolsJSON))
	if err != nil {
		t.Fatal(err)
	}
	return tools
}

type wantCall struct{ name, args string }

type toolCase struct {
	name    string
	text    string
	content string
	calls   []wantCall
}

// Expected values follow vLLM's glm47 tool parser (glm4_moe_tool_parser.py
// value typing, json.dumps formatting) and parser engine (content outside
// calls, stripped when calls exist; unknown names dropped).
var toolCases = []toolCase{
	{"no call", "Hello <b>world</b> 1 < 2", "Hello <b>world</b> 1 < 2", nil},
	{"no call keeps whitespace", "\n  Hello\n\n", "\n  Hello\n\n", nil},
	{"glm45 newline format",
		"I'll check.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
		"I'll check.", []wantCall{{"get_weather", `{"city": "Beijing", "days": 3}`}}},
	{"glm47 inline format",
		"<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>unit</arg_key><arg_value>c</arg_value></tool_call>",
		"", []wantCall{{"get_weather", `{"city": "Paris", "unit": "c"}`}}},
	{"zero args", "<tool_call>ping</tool_call>", "", []wantCall{{"ping", `{}`}}},
	{"zero args newline", "<tool_call>ping\n</tool_call>", "", []wantCall{{"ping", `{}`}}},
	{"zero args no schema", "<tool_call> noschema \n\n</tool_call>", "", []wantCall{{"noschema", `{}`}}},
	{"several calls with content around",
		"A<tool_call>ping</tool_call> B <tool_call>get_weather\n<arg_key>city</arg_key><arg_value>X</arg_value></tool_call>C",
		"A B C", []wantCall{{"ping", `{}`}, {"get_weather", `{"city": "X"}`}}},
	{"whitespace-only content dropped",
		"\n\n<tool_call>ping</tool_call>\n", "", []wantCall{{"ping", `{}`}}},
	{"typed values and nested JSON",
		"<tool_call>search\n<arg_key>query</arg_key>\n<arg_value>  GLM \"5\"\nnew line </arg_value>\n" +
			"<arg_key>filters</arg_key>\n<arg_value>{\"a\":{\"b\":[1,{\"c\":null}]},\"d\":\"é\"}</arg_value>\n" +
			"<arg_key>limit</arg_key>\n<arg_value> 2.50 </arg_value>\n" +
			"<arg_key>exact</arg_key>\n<arg_value>True</arg_value>\n" +
			"<arg_key>tags</arg_key>\n<arg_value>['x', \"y\"]</arg_value>\n</tool_call>",
		"", []wantCall{{"search", `{"query": "  GLM \"5\"\nnew line ", "filters": {"a": {"b": [1, {"c": null}]}, "d": "é"}, "limit": 2.5, "exact": true, "tags": ["x", "y"]}`}}},
	{"unparseable typed value stays a string",
		"<tool_call>get_weather<arg_key>city</arg_key><arg_value>Rome</arg_value><arg_key>days</arg_key><arg_value> three </arg_value></tool_call>",
		"", []wantCall{{"get_weather", `{"city": "Rome", "days": "three"}`}}},
	{"string type is never parsed",
		"<tool_call>get_weather<arg_key>city</arg_key><arg_value>123</arg_value></tool_call>",
		"", []wantCall{{"get_weather", `{"city": "123"}`}}},
	{"unknown argument is json-decoded",
		"<tool_call>noschema<arg_key>n</arg_key><arg_value>42</arg_value><arg_key>s</arg_key><arg_value> hi </arg_value><arg_key>b</arg_key><arg_value>false</arg_value></tool_call>",
		"", []wantCall{{"noschema", `{"n": 42, "s": "hi", "b": false}`}}},
	{"nullable string",
		"<tool_call>search<arg_key>note</arg_key><arg_value>null</arg_value></tool_call><tool_call>search<arg_key>note</arg_key><arg_value>n/a</arg_value></tool_call>",
		"", []wantCall{{"search", `{"note": null}`}, {"search", `{"note": "n/a"}`}}},
	{"keys are stripped",
		"<tool_call>get_weather<arg_key> city \n</arg_key><arg_value>Oslo</arg_value></tool_call>",
		"", []wantCall{{"get_weather", `{"city": "Oslo"}`}}},
	{"literal backslash-n between key and value",
		`<tool_call>get_weather<arg_key>city</arg_key>\n<arg_value>Lima</arg_value></tool_call>`,
		"", []wantCall{{"get_weather", `{"city": "Lima"}`}}},
	{"junk between key and value drops the pair",
		"<tool_call>get_weather<arg_key>city</arg_key>junk<arg_value>Lima</arg_value><arg_key>days</arg_key><arg_value>2</arg_value></tool_call>",
		"", []wantCall{{"get_weather", `{"days": 2}`}}},
	{"duplicate key keeps the first value",
		"<tool_call>get_weather<arg_key>city</arg_key><arg_value>A</arg_value><arg_key>city</arg_key><arg_value>B</arg_value></tool_call>",
		"", []wantCall{{"get_weather", `{"city": "A"}`}}},
	{"tags inside a value are text",
		"<tool_call>search<arg_key>query</arg_key><arg_value>use <arg_key> and <think> and <tool_call></arg_value></tool_call>",
		"", []wantCall{{"search", `{"query": "use <arg_key> and <think> and <tool_call>"}`}}},
	{"unicode everywhere",
		"好的😀<tool_call>get_weather\n<arg_key>city</arg_key><arg_value>北京市 🌧</arg_value></tool_call>",
		"好的😀", []wantCall{{"get_weather", `{"city": "北京市 🌧"}`}}},
	{"control characters escaped",
		"<tool_call>search<arg_key>query</arg_key><arg_value>a\tb\x01c\\d</arg_value></tool_call>",
		"", []wantCall{{"search", `{"query": "a\tb\u0001c\\d"}`}}},
	{"unknown tool dropped",
		"<tool_call>rm_rf\n<arg_key>path</arg_key><arg_value>/</arg_value></tool_call>done",
		"done", nil},
	{"unknown tool does not take an index",
		"<tool_call>nope</tool_call><tool_call>ping</tool_call>",
		"", []wantCall{{"ping", `{}`}}},
	{"empty name dropped", "x<tool_call><arg_key>a</arg_key><arg_value>1</arg_value></tool_call>", "x", nil},
	{"name with trailing > and group prefix (GLM-5.3-Flash)",
		"<tool_call>Weather/get_weather>{\"city\": \"Beijing\"}</tool_call>",
		"", []wantCall{{"get_weather", `{"city": "Beijing"}`}}},
	{"JSON arguments after the name",
		"<tool_call>get_weather\n{\"city\": \"Rome\", \"days\": \"5\", \"unit\": \"c\"}\n</tool_call>",
		"", []wantCall{{"get_weather", `{"city": "Rome", "days": 5, "unit": "c"}`}}},
	{"JSON name/arguments object",
		"<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 2}}</tool_call>",
		"", []wantCall{{"get_weather", `{"city": "Oslo", "days": 2}`}}},
	{"JSON name/parameters with arguments as a string",
		"<tool_call>\n{\"name\": \"get_weather\", \"parameters\": \"{\\\"city\\\":\\\"Nice\\\"}\"}\n</tool_call>",
		"", []wantCall{{"get_weather", `{"city": "Nice"}`}}},
	{"JSON object without closing tag, content after",
		"<tool_call>get_weather\n{\"city\": \"Kyiv\", \"note\": \"}{\"} and more",
		"and more", []wantCall{{"get_weather", `{"city": "Kyiv", "note": "}{"}`}}},
	{"JSON name only object",
		"<tool_call>{\"name\": \"get_weather\", \"city\": \"Bern\"}</tool_call>",
		"", []wantCall{{"get_weather", `{"city": "Bern"}`}}},
	{"unterminated call closed at end",
		"Sure.<tool_call>get_weather\n<arg_key>city</arg_key><arg_value>Ber",
		"Sure.", []wantCall{{"get_weather", `{"city": "Ber"}`}}},
	{"unterminated call after a complete pair",
		"<tool_call>get_weather\n<arg_key>days</arg_key><arg_value>4</arg_value><arg_key>ci",
		"", []wantCall{{"get_weather", `{"days": 4}`}}},
	{"unterminated typed value closed at end",
		"<tool_call>get_weather\n<arg_key>days</arg_key><arg_value>4",
		"", []wantCall{{"get_weather", `{"days": 4}`}}},
	{"name never finished is content", "Sure.<tool_call>get_wea", "Sure.<tool_call>get_wea", nil},
	{"partial tag at end is content", "text <tool_ca", "text <tool_ca", nil},
	{"unparseable JSON without name is content", "<tool_call>{oops", "<tool_call>{oops", nil},
	{"closing tag inside a value ends the call",
		"<tool_call>search<arg_key>query</arg_key><arg_value>abc</tool_call>tail",
		"tail", []wantCall{{"search", `{"query": "abc"}`}}},
	{"stray closing tags are content", "a</arg_value></tool_call>b", "a</arg_value></tool_call>b", nil},
}

// runTools streams pieces through a fresh parser and returns the streamed
// content, the calls rebuilt from the events, and the events.
func runTools(t testing.TB, cfg ToolsConfig, pieces []string) (string, []ToolCall) {
	t.Helper()
	p := NewGLM47Tools(cfg)
	var evs []DeltaEvent
	for _, d := range pieces {
		evs = append(evs, p.Feed(d)...)
	}
	evs = append(evs, p.Flush()...)
	var content strings.Builder
	var calls []ToolCall
	for _, ev := range evs {
		switch ev.Kind {
		case EventContent:
			content.WriteString(ev.Text)
		case EventToolStart:
			if ev.Index != len(calls) {
				t.Fatalf("call index %d, want %d", ev.Index, len(calls))
			}
			if ev.Text != "" {
				t.Fatalf("start event carries text %q", ev.Text)
			}
			calls = append(calls, ToolCall{ID: ev.ID, Name: ev.Name})
		case EventToolArgs:
			if ev.Index >= len(calls) {
				t.Fatalf("arguments for call %d before its start", ev.Index)
			}
			calls[ev.Index].Arguments += ev.Text
		default:
			t.Fatalf("bad event kind %d", ev.Kind)
		}
	}
	if !reflect.DeepEqual(calls, p.Calls()) && !(len(calls) == 0 && len(p.Calls()) == 0) {
		t.Fatalf("events give %v, Calls() = %v", calls, p.Calls())
	}
	return content.String(), calls
}

func checkCalls(t testing.TB, got []ToolCall, want []wantCall) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d calls %v, want %d %v", len(got), got, len(want), want)
	}
	for i, w := range want {
		if got[i].Name != w.name || got[i].Arguments != w.args {
			t.Fatalf("call %d = %s(%s), want %s(%s)", i, got[i].Name, got[i].Arguments, w.name, w.args)
		}
	}
}

func TestToolsExtract(t *testing.T) {
	tools := testTools(t)
	for _, c := range toolCases {
		t.Run(c.name, func(t *testing.T) {
			p := NewGLM47Tools(ToolsConfig{Tools: tools, Choice: ToolChoice{Mode: ToolChoiceAuto}, NewID: SequentialIDs("id")})
			content, calls := p.Extract(c.text)
			if content != c.content {
				t.Fatalf("content = %q, want %q", content, c.content)
			}
			checkCalls(t, calls, c.calls)
			for i, call := range calls {
				if want := "id" + string(rune('0'+i)); call.ID != want {
					t.Fatalf("id %q, want %q", call.ID, want)
				}
				if !json.Valid([]byte(call.Arguments)) {
					t.Fatalf("arguments %q are not valid JSON", call.Arguments)
				}
			}
		})
	}
}

// Every way of cutting the output into deltas gives the same content and
// the same calls as Extract; streamed content differs from the extracted
// content only by the whitespace Extract strips.
func TestToolsStreamSplitInvariance(t *testing.T) {
	tools := testTools(t)
	for _, c := range toolCases {
		t.Run(c.name, func(t *testing.T) {
			cfg := ToolsConfig{Tools: tools, Choice: ToolChoice{Mode: ToolChoiceAuto}}
			cfg.NewID = SequentialIDs("id")
			wantContent, wantCalls := NewGLM47Tools(cfg).Extract(c.text)
			cfg.NewID = SequentialIDs("id")
			refContent, refCalls := runTools(t, cfg, []string{c.text})
			if !reflect.DeepEqual(refCalls, wantCalls) && !(len(refCalls) == 0 && len(wantCalls) == 0) {
				t.Fatalf("stream calls %v, Extract %v", refCalls, wantCalls)
			}
			if len(wantCalls) == 0 && refContent != wantContent {
				t.Fatalf("stream content %q, Extract %q", refContent, wantContent)
			}
			if len(wantCalls) > 0 && (pyStrip(refContent) != wantContent || pyRStrip(refContent) != refContent) {
				t.Fatalf("stream content %q vs Extract %q", refContent, wantContent)
			}
			for _, plan := range splitPlans(c.text) {
				cfg.NewID = SequentialIDs("id")
				content, calls := runTools(t, cfg, plan)
				if content != refContent || !reflect.DeepEqual(calls, refCalls) {
					t.Fatalf("split %q: (%q, %v), want (%q, %v)", plan, content, calls, refContent, refCalls)
				}
			}
		})
	}
}

// String arguments stream as they are generated; other values only when
// complete; the name is never sent before it is complete.
func TestToolsStreamGranularity(t *testing.T) {
	p := NewGLM47Tools(ToolsConfig{Tools: testTools(t), Choice: ToolChoice{Mode: ToolChoiceAuto}, NewID: SequentialIDs("c")})
	steps := []struct {
		in   string
		want []DeltaEvent
	}{
		{"Checking", []DeltaEvent{{Kind: EventContent, Text: "Checking"}}},
		{".\n<tool_call>get_", nil}, // ".": held? no: "." is content, "\n" trailing whitespace is held
		{"weather", nil},
		{"\n<arg_key>ci", []DeltaEvent{{Kind: EventToolStart, Index: 0, ID: "c0", Name: "get_weather"}}},
		{"ty</arg_key><arg_value>San", []DeltaEvent{{Kind: EventToolArgs, Text: `{"city": "San`}}},
		{" Fran", []DeltaEvent{{Kind: EventToolArgs, Text: ` Fran`}}},
		{"cisco</arg_", []DeltaEvent{{Kind: EventToolArgs, Text: `cisco`}}},
		{"value><arg_key>days</arg_key><arg_value>1", []DeltaEvent{{Kind: EventToolArgs, Text: `"`}}},
		{"0</arg_value>", []DeltaEvent{{Kind: EventToolArgs, Text: `, "days": 10`}}},
		{"</tool_call>", []DeltaEvent{{Kind: EventToolArgs, Text: `}`}}},
	}
	steps[1].want = []DeltaEvent{{Kind: EventContent, Text: "."}}
	for i, s := range steps {
		got := p.Feed(s.in)
		if !reflect.DeepEqual(got, s.want) {
			t.Fatalf("step %d Feed(%q) = %+v, want %+v", i, s.in, got, s.want)
		}
	}
	if got := p.Flush(); len(got) != 0 {
		t.Fatalf("Flush = %+v (trailing whitespace must be dropped after a call)", got)
	}
}

func TestToolsInactive(t *testing.T) {
	text := "a<tool_call>ping</tool_call>"
	for _, cfg := range []ToolsConfig{
		{Tools: testTools(t), Choice: ToolChoice{Mode: ToolChoiceNone}},
		{Tools: nil, Choice: ToolChoice{Mode: ToolChoiceAuto}},
	} {
		p := NewGLM47Tools(cfg)
		if p.Active() {
			t.Fatal("parser active")
		}
		if c, calls := p.Extract(text); c != text || calls != nil {
			t.Fatalf("Extract = %q, %v", c, calls)
		}
		if c, calls := runTools(t, cfg, []string{"a<tool_", "call>ping</tool_call>"}); c != text || len(calls) != 0 {
			t.Fatalf("stream = %q, %v", c, calls)
		}
	}
}

func TestToolsRequiredAndNamedParseLikeAuto(t *testing.T) {
	text := "<tool_call>ping</tool_call>"
	for _, ch := range []ToolChoice{{Mode: ToolChoiceRequired}, {Mode: ToolChoiceFunction, Name: "get_weather"}} {
		_, calls := NewGLM47Tools(ToolsConfig{Tools: testTools(t), Choice: ch}).Extract(text)
		checkCalls(t, calls, []wantCall{{"ping", "{}"}})
	}
}

func TestParseToolsAndChoice(t *testing.T) {
	tools := testTools(t)
	if len(tools) != 4 || tools[0].Name != "get_weather" || tools[3].Parameters != nil {
		t.Fatalf("ParseTools = %+v", tools)
	}
	for _, bad := range []string{`{}`, `[{"type": "function"}]`, `[{"type": "retrieval", "function": {"name": "x"}}]`} {
		if _, err := ParseTools(json.RawMessage(bad)); err == nil {
			t.Errorf("ParseTools(%s) accepted", bad)
		}
	}
	if tools, err := ParseTools(nil); err != nil || tools != nil {
		t.Fatal("ParseTools(nil)")
	}
	cases := []struct {
		raw      string
		hasTools bool
		want     ToolChoice
	}{
		{``, true, ToolChoice{Mode: ToolChoiceAuto}},
		{`null`, false, ToolChoice{Mode: ToolChoiceNone}},
		{`"none"`, true, ToolChoice{Mode: ToolChoiceNone}},
		{`"required"`, true, ToolChoice{Mode: ToolChoiceRequired}},
		{`{"type": "function", "function": {"name": "ping"}}`, true, ToolChoice{Mode: ToolChoiceFunction, Name: "ping"}},
	}
	for _, c := range cases {
		got, err := ParseToolChoice(json.RawMessage(c.raw), c.hasTools)
		if err != nil || got != c.want {
			t.Errorf("ParseToolChoice(%s) = %+v, %v", c.raw, got, err)
		}
	}
	for _, bad := range []string{`"maybe"`, `{"type": "function"}`, `3`} {
		if _, err := ParseToolChoice(json.RawMessage(bad), true); err == nil {
			t.Errorf("ParseToolChoice(%s) accepted", bad)
		}
	}
	if _, err := NewTools("hermes", ToolsConfig{}); err == nil {
		t.Fatal("unknown tool parser accepted")
	}
}

func TestToolCallIDFormat(t *testing.T) {
	id := NewToolCallID()
	if len(id) != len("chatcmpl-tool-")+32 || !strings.HasPrefix(id, "chatcmpl-tool-") {
		t.Fatalf("id %q", id)
	}
	hex := id[len("chatcmpl-tool-"):]
	if hex[12] != '4' || !strings.ContainsRune("89ab", rune(hex[16])) {
		t.Fatalf("id %q is not a version-4 UUID", id)
	}
	if NewToolCallID() == id {
		t.Fatal("ids repeat")
	}
}

// A long string argument streamed one byte at a time costs linear time
// (a quadratic rebuild of the arguments would take minutes here).
func TestToolsLongArgumentIsLinear(t *testing.T) {
	body := strings.Repeat("line of file content \"quoted\" 中文\n", 8000) // ~300 KB
	text := "<tool_call>search\n<arg_key>query</arg_key>\n<arg_value>" + body + "</arg_value>\n</tool_call>"
	start := time.Now()
	p := NewGLM47Tools(ToolsConfig{Tools: testTools(t), Choice: ToolChoice{Mode: ToolChoiceAuto}, NewID: SequentialIDs("c")})
	n := 0
	for i := 0; i < len(text); i++ {
		n += len(p.Feed(text[i : i+1]))
	}
	p.Flush()
	want := `{"query": ` + value{kind: kindString, s: body}.dumps() + `}`
	if got := p.Calls()[0].Arguments; got != want {
		t.Fatalf("arguments differ (len %d vs %d)", len(got), len(want))
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("streaming %d bytes took %v", len(text), d)
	}
	if n < len(body)/2 {
		t.Fatalf("only %d events: the value was not streamed", n)
	}
}
