package tokenizer

import "strings"

// A scanner reports the end of the match of a split pattern that starts
// exactly at s[i] (i < len(s)), or -1 when the pattern does not match
// there. Scanners never return a zero-length match. Each one reproduces,
// alternative by alternative, the leftmost-first backtracking semantics of
// the regular expression it is registered under.
type scanner func(s string, i int) int

// The Split regular expressions recognised by this package, exactly as they
// appear in tokenizer.json (after canonicalPattern).
const (
	// PatternGPT2 is GPT-2's pre-tokenizer regex; it is also what the
	// ByteLevel pre-tokenizer applies when use_regex is true.
	PatternGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	// PatternCL100K is tiktoken's cl100k_base regex, used by Llama 3 and
	// GLM-4.
	PatternCL100K = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// PatternQwen2 is the Qwen 2/3 regex: cl100k with single digits.
	PatternQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// PatternO200K is tiktoken's o200k_base regex as used by gpt-oss.
	PatternO200K = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// PatternDigits3 isolates runs of up to three digits (DeepSeek V3).
	PatternDigits3 = `\p{N}{1,3}`
	// PatternDeepSeekCJK isolates runs of CJK ideographs and kana (DeepSeek V3).
	PatternDeepSeekCJK = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
	// PatternDeepSeek is DeepSeek V3's word regex.
	PatternDeepSeek = `[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_` + "`" + `{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

var scanners = map[string]scanner{
	PatternGPT2:        scanGPT2,
	PatternCL100K:      func(s string, i int) int { return scanCL100K(s, i, 3) },
	PatternQwen2:       func(s string, i int) int { return scanCL100K(s, i, 1) },
	PatternO200K:       scanO200K,
	PatternDigits3:     scanDigits3,
	PatternDeepSeekCJK: scanDeepSeekCJK,
	PatternDeepSeek:    scanDeepSeek,
}

// canonicalPattern rewrites literal control characters into the escapes
// that mean the same thing to a regex engine, so a pattern written with a
// literal newline (as DeepSeek's tokenizer.json does) and one written with
// `\n` find the same scanner.
var canonicalPattern = strings.NewReplacer("\r", `\r`, "\n", `\n`, "\t", `\t`).Replace

// lookupScanner returns the scanner registered for a Split regex.
func lookupScanner(pattern string) (scanner, bool) {
	sc, ok := scanners[canonicalPattern(pattern)]
	return sc, ok
}

// contraction matches (?i:s|t|re|ve|m|ll|d) (or its case-sensitive form) at
// s[i], the byte after an apostrophe, and returns the match length in bytes
// or 0. Case folding follows Oniguruma: long s (U+017F) folds to s.
func contraction(s string, i int, fold bool) int {
	if i >= len(s) {
		return 0
	}
	lower := func(c byte) byte {
		if fold && 'A' <= c && c <= 'Z' {
			return c + 'a' - 'A'
		}
		return c
	}
	switch lower(s[i]) {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if i+1 < len(s) && lower(s[i+1]) == 'e' {
			return 2
		}
	case 'l':
		if i+1 < len(s) && lower(s[i+1]) == 'l' {
			return 2
		}
	case 0xC5: // U+017F LATIN SMALL LETTER LONG S is C5 BF.
		if fold && i+1 < len(s) && s[i+1] == 0xBF {
			return 2
		}
	}
	return 0
}

// runWhile returns the end of the longest run starting at i whose runes all
// satisfy pred.
func runWhile(s string, i int, pred func(rune) bool) int {
	for i < len(s) {
		r, w := decode(s, i)
		if !pred(r) {
			break
		}
		i += w
	}
	return i
}

// scanSpaces matches `\s*[\r\n]+|\s+(?!\S)|\s+` at a whitespace rune, or,
// when withNewlines is false, `\s+(?!\S)|\s+`.
func scanSpaces(s string, i int, withNewlines bool) int {
	end, lastNL, lastStart := i, -1, i
	for end < len(s) {
		r, w := decode(s, end)
		if !isSpace(r) {
			break
		}
		if r == '\r' || r == '\n' {
			lastNL = end
		}
		lastStart = end
		end += w
	}
	if withNewlines && lastNL >= 0 {
		// \s* backs off to the last newline; [\r\n]+ then takes just it.
		return lastNL + 1
	}
	if end == len(s) || lastStart == i {
		// \s+ reaches the end of the text, or (the (?!\S) branch having
		// failed for a single whitespace rune) \s+ takes that one rune.
		return end
	}
	// \s+(?!\S): give back the last whitespace rune.
	return lastStart
}

// scanGPT2 implements PatternGPT2.
func scanGPT2(s string, i int) int {
	r, w := decode(s, i)
	if r == '\'' {
		if n := contraction(s, i+1, false); n > 0 {
			return i + 1 + n
		}
	}
	j := i
	if r == ' ' && i+1 < len(s) {
		j = i + 1
		r, w = decode(s, j)
	}
	switch {
	case isLetter(r):
		return runWhile(s, j+w, isLetter)
	case isNumber(r):
		return runWhile(s, j+w, isNumber)
	case isOther(r):
		return runWhile(s, j+w, isOther)
	}
	return scanSpaces(s, i, false)
}

// scanCL100K implements PatternCL100K (maxDigits 3) and PatternQwen2
// (maxDigits 1).
func scanCL100K(s string, i int, maxDigits int) int {
	r, w := decode(s, i)
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if r == '\'' {
		if n := contraction(s, i+1, true); n > 0 {
			return i + 1 + n
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if isLetter(r) {
		return runWhile(s, i+w, isLetter)
	}
	if isPrefixChar(r) && i+w < len(s) {
		if r2, w2 := decode(s, i+w); isLetter(r2) {
			return runWhile(s, i+w+w2, isLetter)
		}
	}
	// \p{N}{1,maxDigits}
	if isNumber(r) {
		j := i + w
		for k := 1; k < maxDigits && j < len(s); k++ {
			r2, w2 := decode(s, j)
			if !isNumber(r2) {
				break
			}
			j += w2
		}
		return j
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	if e := scanSpacePunct(s, i, r, w, isOther, "\r\n"); e > 0 {
		return e
	}
	if isSpace(r) {
		return scanSpaces(s, i, true)
	}
	return -1
}

// scanSpacePunct matches ` ?C+[T]*` at s[i] (whose rune r, width w, the
// caller already decoded), where C is the class and T the set of trailing
// ASCII bytes. It returns -1 when there is no match.
func scanSpacePunct(s string, i int, r rune, w int, class func(rune) bool, trail string) int {
	j := i
	if r == ' ' {
		if i+1 >= len(s) {
			return -1
		}
		j = i + 1
		r, w = decode(s, j)
	}
	if !class(r) {
		return -1
	}
	j = runWhile(s, j+w, class)
	for j < len(s) && strings.IndexByte(trail, s[j]) >= 0 {
		j++
	}
	return j
}

// scanO200K implements PatternO200K.
func scanO200K(s string, i int) int {
	r, w := decode(s, i)
	// [^\r\n\p{L}\p{N}]?[U]*[L]+C? with U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
	// and L = [\p{Ll}\p{Lm}\p{Lo}\p{M}]: first with the optional lead
	// character, then without it.
	lead := isPrefixChar(r)
	if lead {
		if e := o200kUpperLower(s, i+w); e > 0 {
			return e
		}
	}
	if e := o200kUpperLower(s, i); e > 0 {
		return e
	}
	// [^\r\n\p{L}\p{N}]?[U]+[L]*C?
	if lead {
		if e := o200kUpperPlus(s, i+w); e > 0 {
			return e
		}
	}
	if e := o200kUpperPlus(s, i); e > 0 {
		return e
	}
	// \p{N}{1,3}
	if isNumber(r) {
		return scanDigits3(s, i)
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n/]*`
	if e := scanSpacePunct(s, i, r, w, isOther, "\r\n/"); e > 0 {
		return e
	}
	if isSpace(r) {
		return scanSpaces(s, i, true)
	}
	return -1
}

// o200kUpperLower matches [U]*[L]+C? at s[j], or returns -1. U* is greedy,
// so it backs off to the last position from which L+ can start.
func o200kUpperLower(s string, j int) int {
	end, lastL := j, -1
	for end < len(s) {
		r, w := decode(s, end)
		if !isUpperish(r) {
			break
		}
		if isLowerish(r) {
			lastL = end
		}
		end += w
	}
	start := lastL
	if end < len(s) {
		if r, _ := decode(s, end); isLowerish(r) {
			start = end
		}
	}
	if start < 0 {
		return -1
	}
	return o200kContraction(s, runWhile(s, start, isLowerish))
}

// o200kUpperPlus matches [U]+[L]*C? at s[j], or returns -1.
func o200kUpperPlus(s string, j int) int {
	if j >= len(s) {
		return -1
	}
	end := runWhile(s, j, isUpperish)
	if end == j {
		return -1
	}
	return o200kContraction(s, runWhile(s, end, isLowerish))
}

// o200kContraction extends a match ending at e by an optional
// (?i:'s|'t|'re|'ve|'m|'ll|'d).
func o200kContraction(s string, e int) int {
	if e < len(s) && s[e] == '\'' {
		if n := contraction(s, e+1, true); n > 0 {
			return e + 1 + n
		}
	}
	return e
}

// scanDigits3 implements PatternDigits3.
func scanDigits3(s string, i int) int {
	j := i
	for k := 0; k < 3 && j < len(s); k++ {
		r, w := decode(s, j)
		if !isNumber(r) {
			break
		}
		j += w
	}
	if j == i {
		return -1
	}
	return j
}

// isDeepSeekCJK reports [\x{4e00}-\x{9fa5}\x{3040}-\x{309f}\x{30a0}-\x{30ff}].
func isDeepSeekCJK(r rune) bool {
	return (0x4e00 <= r && r <= 0x9fa5) || (0x3040 <= r && r <= 0x30ff)
}

// scanDeepSeekCJK implements PatternDeepSeekCJK.
func scanDeepSeekCJK(s string, i int) int {
	j := runWhile(s, i, isDeepSeekCJK)
	if j == i {
		return -1
	}
	return j
}

// isASCIIPunct reports DeepSeek's [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~].
func isASCIIPunct(c byte) bool {
	return ('!' <= c && c <= '/') || (':' <= c && c <= '@') || ('[' <= c && c <= '`') || ('{' <= c && c <= '~')
}

func isASCIILetter(c byte) bool { return ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') }

// scanDeepSeek implements PatternDeepSeek.
func scanDeepSeek(s string, i int) int {
	// [!"#...~][A-Za-z]+
	if isASCIIPunct(s[i]) && i+1 < len(s) && isASCIILetter(s[i+1]) {
		j := i + 2
		for j < len(s) && isASCIILetter(s[j]) {
			j++
		}
		return j
	}
	r, w := decode(s, i)
	// [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
	if r != '\r' && r != '\n' && !isLetter(r) && !isPunctOrSymbol(r) && i+w < len(s) {
		if r2, w2 := decode(s, i+w); isLetterOrMark(r2) {
			return runWhile(s, i+w+w2, isLetterOrMark)
		}
	}
	if isLetterOrMark(r) {
		return runWhile(s, i+w, isLetterOrMark)
	}
	// ` ?[\p{P}\p{S}]+[\r\n]*`
	if e := scanSpacePunct(s, i, r, w, isPunctOrSymbol, "\r\n"); e > 0 {
		return e
	}
	if isSpace(r) {
		return scanSpaces(s, i, true)
	}
	return -1
}
