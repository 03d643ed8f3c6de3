package chattemplate

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// fuzzLimits keep each fuzz input cheap.
var fuzzLimits = Limits{MaxOutputBytes: 64 << 10, MaxAllocBytes: 8 << 20, MaxSteps: 100_000, MaxDepth: 20, MaxRange: 1000}

const fuzzMessages = `[{"role": "system", "content": "sys"},
 {"role": "user", "content": "hi <think>x</think>"},
 {"role": "assistant", "content": "", "reasoning_content": "r", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": 1, "b": [true, null]}}}]},
 {"role": "tool", "content": "ok"},
 {"role": "user", "content": [{"type": "text", "text": "t"}, {"type": "image"}]}]`

// FuzzCompile checks that no template source makes the engine panic or
// hang: compile errors are positioned *Errors, and a render is bounded by
// the limits and deterministic.
func FuzzCompile(f *testing.F) {
	paths, _ := filepath.Glob("testdata/templates/*.jinja")
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(data))
	}
	for _, s := range []string{
		"{%- if x -%}\n  {{ y }}\n{%+ endif +%}", "{% for a, b in d|items if a %}{{ loop.index }}{% else %}e{% endfor %}",
		"{% macro m(a, b=1) %}{{ caller() if caller is defined }}{% endmacro %}{% call m(1) %}c{% endcall %}",
		"{% raw %}{{ x }}{% endraw %}{# c #}", "{{ 'a' ~ [1, {'k': (1,)}]|tojson(indent=2) }}",
		"{% set ns = namespace(a=[]) %}{% set ns.a = ns.a + [1] %}{{ ns.a }}", "{{ x[1:-1:2] }}{{ 'abc'.split('b', 1) }}",
		"{% generation %}{{ messages[0].content }}{% endgeneration %}",
	} {
		f.Add(s)
	}
	msgs, err := FromJSON([]byte(fuzzMessages))
	if err != nil {
		f.Fatal(err)
	}
	kw := NewMap()
	kw.Set("enable_thinking", Bool(false))
	f.Fuzz(func(t *testing.T, src string) {
		tpl, err := Compile(src)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Kind != SyntaxError || e.Line < 1 || e.Col < 1 {
				t.Fatalf("compile error %v is not a positioned syntax error", err)
			}
			return
		}
		chat := Chat{
			Messages: msgs, AddGenerationPrompt: true, Kwargs: kw, Tokens: SpecialTokens{BOS: "<s>"},
			Options: &RenderOptions{Limits: fuzzLimits, Now: FixedClock(time.Unix(0, 0))},
		}
		out1, err1 := RenderChat(tpl, chat)
		out2, err2 := RenderChat(tpl, chat)
		if out1 != out2 || (err1 == nil) != (err2 == nil) {
			t.Fatalf("nondeterministic render: %q (%v) vs %q (%v)", out1, err1, out2, err2)
		}
		if len(out1) > fuzzLimits.MaxOutputBytes {
			t.Fatalf("output of %d bytes exceeds the limit", len(out1))
		}
		if err1 != nil {
			var e *Error
			if !errors.As(err1, &e) {
				t.Fatalf("render error %v is not an *Error", err1)
			}
		}
	})
}
