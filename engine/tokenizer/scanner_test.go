package tokenizer

import (
	"slices"
	"strings"
	"testing"
)

// Expected pieces come from HF tokenizers' Split pre-tokenizer (Isolated)
// with the same pattern.
func TestScanners(t *testing.T) {
	tests := []struct {
		pattern string
		text    string
		want    []string
	}{
		{PatternGPT2, "Hello world", []string{"Hello", " world"}},
		{PatternGPT2, "I'm here", []string{"I", "'m", " here"}},
		{PatternGPT2, "  x", []string{" ", " x"}},
		{PatternGPT2, " 123abc", []string{" 123", "abc"}},
		{PatternGPT2, "a\t\tb", []string{"a", "\t", "\t", "b"}},
		{PatternGPT2, "x  \n  y", []string{"x", "  \n ", " y"}},
		{PatternGPT2, "don'T", []string{"don", "'", "T"}},
		{PatternCL100K, "\t\t}\n", []string{"\t", "\t", "}\n"}},
		{PatternCL100K, "Hello world 12345", []string{"Hello", " world", " ", "123", "45"}},
		{PatternCL100K, " 123", []string{" ", "123"}},
		{PatternCL100K, "I'M they'Ll x'ſab", []string{"I", "'M", " they", "'Ll", " x", "'ſ", "ab"}},
		{PatternCL100K, "a \n\n b", []string{"a", " \n\n", " b"}},
		{PatternCL100K, "foo  bar", []string{"foo", " ", " bar"}},
		{PatternCL100K, "x'y", []string{"x", "'y"}},
		{PatternCL100K, "$hello", []string{"$hello"}},
		{PatternCL100K, "\r\nend\r\n", []string{"\r\n", "end", "\r\n"}},
		{PatternQwen2, "123", []string{"1", "2", "3"}},
		{PatternQwen2, "v1.25", []string{"v", "1", ".", "2", "5"}},
		{PatternQwen2, "  \tx", []string{"  ", "\tx"}},
		{PatternO200K, "HelloWorld", []string{"Hello", "World"}},
		{PatternO200K, "HELLOworld's", []string{"HELLOworld's"}},
		{PatternO200K, "foo/bar//\n", []string{"foo", "/bar", "//\n"}},
		{PatternO200K, " ABC def", []string{" ABC", " def"}},
		{PatternO200K, "a\u0301b\u0301C", []string{"a\u0301b\u0301", "C"}},
		{PatternO200K, "ǅx'S", []string{"ǅx'S"}},
		{PatternO200K, "ʰello", []string{"ʰello"}},
		{PatternO200K, "12345", []string{"123", "45"}},
		{PatternDeepSeek, "hello,world", []string{"hello", ",world"}},
		{PatternDeepSeek, ".NET and ,x", []string{".NET", " and", " ,", "x"}},
		{PatternDeepSeek, " 123 abc", []string{" ", "123", " abc"}},
		{PatternDeepSeek, "a\u200db", []string{"a", "\u200db"}},
		{PatternDeepSeek, "café!!\n", []string{"café", "!!\n"}},
		{PatternDeepSeek, "x  y", []string{"x", " ", " y"}},
		{PatternDigits3, "a1234b", []string{"a", "123", "4", "b"}},
		{PatternDeepSeekCJK, "日本語のtextです", []string{"日本語の", "text", "です"}},
	}
	for _, tc := range tests {
		sc, ok := lookupScanner(tc.pattern)
		if !ok {
			t.Fatalf("no scanner for %q", tc.pattern)
		}
		sp := &splitPT{scan: sc, behavior: behaviorIsolated}
		if got := sp.split(nil, tc.text); !slices.Equal(got, tc.want) {
			t.Errorf("%.20s… on %q:\n got  %q\n want %q", tc.pattern, tc.text, got, tc.want)
		}
	}
}

// TestCanonicalPattern checks that literal control characters in a pattern
// (as DeepSeek's tokenizer.json writes them) find the same scanner.
func TestCanonicalPattern(t *testing.T) {
	literal := strings.NewReplacer(`\r`, "\r", `\n`, "\n").Replace(PatternCL100K)
	if literal == PatternCL100K {
		t.Fatal("test pattern has no escapes to replace")
	}
	if _, ok := lookupScanner(literal); !ok {
		t.Error("pattern with literal CR/LF not recognised")
	}
	if _, ok := lookupScanner(PatternCL100K + "|x"); ok {
		t.Error("a modified pattern was accepted")
	}
}

// TestSplitBehaviors checks every delimiter behavior on a literal pattern;
// expectations follow HF's SplitDelimiterBehavior documentation.
func TestSplitBehaviors(t *testing.T) {
	tests := []struct {
		behavior splitBehavior
		invert   bool
		want     []string
	}{
		{behaviorRemoved, false, []string{"the", "final", "countdown"}},
		{behaviorIsolated, false, []string{"the", "-", "final", "-", "-", "countdown"}},
		{behaviorMergedWithPrevious, false, []string{"the-", "final-", "-", "countdown"}},
		{behaviorMergedWithNext, false, []string{"the", "-final", "-", "-countdown"}},
		{behaviorContiguous, false, []string{"the", "-", "final", "--", "countdown"}},
		{behaviorRemoved, true, []string{"-", "-", "-"}},
	}
	for _, tc := range tests {
		sp := &splitPT{literal: "-", behavior: tc.behavior, invert: tc.invert}
		if got := sp.split(nil, "the-final--countdown"); !slices.Equal(got, tc.want) {
			t.Errorf("behavior %d invert %v: got %q, want %q", tc.behavior, tc.invert, got, tc.want)
		}
	}
}
