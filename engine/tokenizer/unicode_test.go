package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"
)

// TestUnicodeClassesMatchOniguruma checks every code point of every class
// predicate against the classes HF tokenizers' regex engine reported
// (testdata/unicode_classes.json, written by tools/tokgolden/unicode.js).
func TestUnicodeClassesMatchOniguruma(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "unicode_classes.json"))
	if err != nil {
		t.Fatal(err)
	}
	var in struct {
		Classes map[string][][2]rune `json:"classes"`
	}
	if err := json.Unmarshal(data, &in); err != nil {
		t.Fatal(err)
	}
	sets := map[string][]bool{}
	for name, ranges := range in.Classes {
		set := make([]bool, utf8.MaxRune+1)
		for _, rg := range ranges {
			for c := rg[0]; c <= rg[1]; c++ {
				set[c] = true
			}
		}
		sets[name] = set
	}
	class := func(name string) []bool {
		s, ok := sets[name]
		if !ok {
			t.Fatalf("class %s missing from unicode_classes.json", name)
		}
		return s
	}
	L, N, Nd, Lu, Ll, Lt, Lm, Lo, M, P, Pc, S, Space := class("L"), class("N"), class("Nd"), class("Lu"),
		class("Ll"), class("Lt"), class("Lm"), class("Lo"), class("M"), class("P"), class("Pc"), class("S"), class("Space")
	tests := []struct {
		name string
		got  func(rune) bool
		want func(rune) bool
	}{
		{`\p{L}`, isLetter, func(r rune) bool { return L[r] }},
		{`\p{N}`, isNumber, func(r rune) bool { return N[r] }},
		{`\s`, isSpace, func(r rune) bool { return Space[r] }},
		{`[^\s\p{L}\p{N}]`, isOther, func(r rune) bool { return !Space[r] && !L[r] && !N[r] }},
		{`[^\r\n\p{L}\p{N}]`, isPrefixChar, func(r rune) bool { return r != '\r' && r != '\n' && !L[r] && !N[r] }},
		{`[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]`, isUpperish, func(r rune) bool { return Lu[r] || Lt[r] || Lm[r] || Lo[r] || M[r] }},
		{`[\p{Ll}\p{Lm}\p{Lo}\p{M}]`, isLowerish, func(r rune) bool { return Ll[r] || Lm[r] || Lo[r] || M[r] }},
		{`[\p{L}\p{M}]`, isLetterOrMark, func(r rune) bool { return L[r] || M[r] }},
		{`[\p{P}\p{S}]`, isPunctOrSymbol, func(r rune) bool { return P[r] || S[r] }},
		// Rust's \w also has Other_Alphabetic and Nl; only the parts the
		// probe covers are compared.
		{`\w (L, M, Nd, Pc)`, isWordChar, func(r rune) bool { return L[r] || M[r] || Nd[r] || Pc[r] }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bad := 0
			for r := rune(0); r <= utf8.MaxRune; r++ {
				if 0xD800 <= r && r <= 0xDFFF {
					continue
				}
				got, want := tc.got(r), tc.want(r)
				if tc.name == `\w (L, M, Nd, Pc)` && got && !want {
					continue // Other_Alphabetic, Nl, join controls
				}
				if got != want {
					if bad++; bad <= 5 {
						t.Errorf("%U: got %v, want %v", r, got, want)
					}
				}
			}
			if bad > 5 {
				t.Errorf("... %d code points differ", bad)
			}
		})
	}
}
