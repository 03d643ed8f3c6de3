package parser

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// splitPlans returns ways to cut s into deltas: whole, every byte, every
// two-piece split, tag-aware "token" pieces, and (for short s) every
// three-piece split.
func splitPlans(s string) [][]string {
	plans := [][]string{{s}, tokenPieces(s)}
	var bytesPlan []string
	for i := 0; i < len(s); i++ {
		bytesPlan = append(bytesPlan, s[i:i+1])
	}
	plans = append(plans, bytesPlan)
	for i := 0; i <= len(s); i++ {
		plans = append(plans, []string{s[:i], s[i:]})
	}
	if len(s) <= 120 {
		for i := 1; i < len(s); i++ {
			for j := i + 1; j < len(s); j++ {
				plans = append(plans, []string{s[:i], s[i:j], s[j:]})
			}
		}
	}
	return plans
}

var allTags = []string{TagThinkStart, TagThinkEnd, TagToolCallStart, TagToolCallEnd,
	TagArgKeyStart, TagArgKeyEnd, TagArgValueStart, TagArgValueEnd}

// tokenPieces cuts s the way a GLM tokenizer stream would: every tag is
// one delta, other text comes one rune at a time.
func tokenPieces(s string) []string {
	var out []string
	for s != "" {
		matched := false
		for _, t := range allTags {
			if strings.HasPrefix(s, t) {
				out = append(out, t)
				s = s[len(t):]
				matched = true
				break
			}
		}
		if matched {
			continue
		}
		_, n := utf8.DecodeRuneInString(s)
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}

func TestReasoningExtract(t *testing.T) {
	type tc struct {
		name            string
		inThink, enable bool
		text            string
		rsn, content    string
	}
	cases := []tc{
		{"basic", true, true, "abc</think>xyz", "abc", "xyz"},
		{"reasoning only", true, true, "still thinking", "still thinking", ""},
		{"trailing reasoning ws stripped", true, true, "abc  \n</think>\n\nxyz", "abc", "\n\nxyz"},
		{"leading reasoning ws kept", true, true, "\nabc</think>x", "\nabc", "x"},
		{"stray open tag dropped", true, true, "<think>abc</think>xyz", "abc", "xyz"},
		{"stray close in content dropped", true, true, "a</think>b</think>c", "a", "bc"},
		{"prompt without think", false, true, "<think>abc</think>xyz", "abc", "xyz"},
		{"no tags no reasoning", false, true, "xyz", "", "xyz"},
		{"content then think", false, true, "x<think>r</think>y", "r", "xy"},
		{"re-entry", true, true, "a</think>b<think>c</think>d", "ac", "bd"},
		{"ws between reasoning segments kept", true, true, "a \n</think>b<think> c </think>d", "a \n c", "bd"},
		{"thinking disabled", true, false, "<think>abc</think>xyz", "", "<think>abc</think>xyz"},
		{"tool call ends reasoning", true, true, "need data\n<tool_call>f\n</tool_call>", "need data", "<tool_call>f\n</tool_call>"},
		{"partial close at end", true, true, "abc</thi", "abc</thi", ""},
		{"partial open in content", true, true, "r</think>x<thi", "r", "x<thi"},
		{"lookalike tags", true, true, "a<thinker>b</think >c</think>d", "a<thinker>b</think >c", "d"},
		{"unicode", true, true, "思考中…😀</think>答案：42", "思考中…😀", "答案：42"},
		{"empty", true, true, "", "", ""},
		{"only close", true, true, "</think>", "", ""},
		{"whitespace reasoning", true, true, " \n </think>x", "", "x"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := NewReasoning("glm45", c.inThink, c.enable)
			if err != nil {
				t.Fatal(err)
			}
			r, ct := p.Extract(c.text)
			if r != c.rsn || ct != c.content {
				t.Fatalf("Extract(%q) = (%q, %q), want (%q, %q)", c.text, r, ct, c.rsn, c.content)
			}
			for _, plan := range splitPlans(c.text) {
				p, _ := NewReasoning("glm47", c.inThink, c.enable)
				var rb, cb strings.Builder
				for _, d := range plan {
					r, c := p.Feed(d)
					rb.WriteString(r)
					cb.WriteString(c)
				}
				r, ct := p.Flush()
				rb.WriteString(r)
				cb.WriteString(ct)
				if rb.String() != c.rsn || cb.String() != c.content {
					t.Fatalf("stream %q = (%q, %q), want (%q, %q)", plan, rb.String(), cb.String(), c.rsn, c.content)
				}
			}
		})
	}
}

// A partial tag must never leak: while "</thi" could still become
// </think>, nothing of it is emitted.
func TestReasoningHoldsBackPartialTags(t *testing.T) {
	p := NewGLM45Reasoning(true, true)
	steps := []struct{ in, rsn, content string }{
		{"Let me", "Let me", ""},
		{" think </", " think", ""}, // " " held as trailing whitespace, "</" as a tag prefix
		{"thi", "", ""},
		{"nk>", "", ""},
		{"\nAnswer <", "", "\nAnswer "},
		{"b>", "", "<b>"},
	}
	for i, s := range steps {
		r, c := p.Feed(s.in)
		if r != s.rsn || c != s.content {
			t.Fatalf("step %d Feed(%q) = (%q, %q), want (%q, %q)", i, s.in, r, c, s.rsn, s.content)
		}
	}
	if p.InReasoning() {
		t.Fatal("still in reasoning after </think>")
	}
}

func TestReasoningToolAware(t *testing.T) {
	// With a tool parser downstream, think tags inside a call are text.
	text := "r</think>a<tool_call>f\n<arg_key>k</arg_key><arg_value><think>x</think></arg_value></tool_call><think>s</think>b"
	p := NewGLM45Reasoning(true, true)
	p.SetToolCalls(true)
	r, c := p.Extract(text)
	if r != "rs" || c != "a<tool_call>f\n<arg_key>k</arg_key><arg_value><think>x</think></arg_value></tool_call>b" {
		t.Fatalf("tool-aware Extract = (%q, %q)", r, c)
	}
	q := NewGLM45Reasoning(true, true)
	r, c = q.Extract(text)
	if r != "rxs" || c != "a<tool_call>f\n<arg_key>k</arg_key><arg_value></arg_value></tool_call>b" {
		t.Fatalf("plain Extract = (%q, %q)", r, c)
	}
}

func TestReasoningSplitUTF8(t *testing.T) {
	// A delta boundary inside a rune never produces a broken delta.
	text := "é😀中</think>文"
	p := NewGLM45Reasoning(true, true)
	var rb, cb strings.Builder
	for i := 0; i < len(text); i++ {
		r, c := p.Feed(text[i : i+1])
		for _, s := range []string{r, c} {
			if !utf8.ValidString(s) {
				t.Fatalf("delta %q is not valid UTF-8", s)
			}
		}
		rb.WriteString(r)
		cb.WriteString(c)
	}
	r, c := p.Flush()
	rb.WriteString(r)
	cb.WriteString(c)
	if rb.String() != "é😀中" || cb.String() != "文" {
		t.Fatalf("got (%q, %q)", rb.String(), cb.String())
	}
}

func TestNewReasoningErrors(t *testing.T) {
	if _, err := NewReasoning("deepseek_r1", true, true); err == nil {
		t.Fatal("unknown parser accepted")
	}
}

func TestThinkingEnabled(t *testing.T) {
	cases := []struct {
		kw   map[string]any
		want bool
	}{
		{nil, true},
		{map[string]any{}, true},
		{map[string]any{"enable_thinking": false}, false},
		{map[string]any{"thinking": false}, false},
		{map[string]any{"enable_thinking": true}, true},
		{map[string]any{"thinking": false, "enable_thinking": true}, true},
		{map[string]any{"enable_thinking": nil}, true},
		{map[string]any{"enable_thinking": 0.0}, false},
		{map[string]any{"other": false}, true},
	}
	for _, c := range cases {
		if got := ThinkingEnabled(c.kw); got != c.want {
			t.Errorf("ThinkingEnabled(%v) = %v, want %v", c.kw, got, c.want)
		}
	}
	if !PromptEndsInThink("[gMASK]<sop><|user|>\nhi<|assistant|><think>") ||
		!PromptEndsInThink("<|assistant|><think>\n") ||
		PromptEndsInThink("<|assistant|><think></think>") {
		t.Fatal("PromptEndsInThink")
	}
}
