package parser

import (
	"strings"
	"unicode/utf8"

	"github.com/npuserve/npuserve/engine/pyfmt"
)

// The tags GLM models use. In GLM tokenizers each is one added token.
const (
	TagThinkStart    = "<think>"
	TagThinkEnd      = "</think>"
	TagToolCallStart = "<tool_call>"
	TagToolCallEnd   = "</tool_call>"
	TagArgKeyStart   = "<arg_key>"
	TagArgKeyEnd     = "</arg_key>"
	TagArgValueStart = "<arg_value>"
	TagArgValueEnd   = "</arg_value>"
)

// scanner splits an incrementally fed text into plain text and tags. The
// set of tags it recognises is chosen by the caller on every call to next,
// because it depends on the caller's state. Text that may still turn into
// a tag (a suffix that is a proper prefix of a tag in the set) and an
// unfinished UTF-8 sequence at the end are held back until more input
// arrives or the caller asks for a final scan.
type scanner struct {
	buf string
}

// feed appends input.
func (s *scanner) feed(text string) { s.buf += text }

// empty reports whether nothing is buffered.
func (s *scanner) empty() bool { return s.buf == "" }

// next returns the next item under tag set set: either a run of plain text
// (tag == "") or one tag (text == ""). ok is false when nothing can be
// returned yet; with final set, everything buffered is released.
func (s *scanner) next(set []string, final bool) (text, tag string, ok bool) {
	if s.buf == "" {
		return "", "", false
	}
	at, which := -1, ""
	for _, t := range set {
		i := strings.Index(s.buf, t)
		if i < 0 {
			continue
		}
		if at < 0 || i < at || (i == at && len(t) > len(which)) {
			at, which = i, t
		}
	}
	switch {
	case at == 0:
		s.buf = s.buf[len(which):]
		return "", which, true
	case at > 0:
		text = s.buf[:at]
		s.buf = s.buf[at:]
		return text, "", true
	}
	n := len(s.buf)
	if !final {
		hold := partialTagLen(s.buf, set)
		if u := incompleteUTF8(s.buf); u > hold {
			hold = u
		}
		n -= hold
	}
	if n == 0 {
		return "", "", false
	}
	text = s.buf[:n]
	s.buf = s.buf[n:]
	return text, "", true
}

// partialTagLen is the length of the longest suffix of s that is a proper,
// non-empty prefix of some tag in set.
func partialTagLen(s string, set []string) int {
	best := 0
	for _, t := range set {
		m := len(t) - 1
		if m > len(s) {
			m = len(s)
		}
		for k := m; k > best; k-- {
			if strings.HasSuffix(s, t[:k]) {
				best = k
				break
			}
		}
	}
	return best
}

// incompleteUTF8 is the number of trailing bytes of s that begin a UTF-8
// sequence which is not finished yet (0 if s ends on a rune boundary or in
// invalid bytes, which are passed through unchanged).
func incompleteUTF8(s string) int {
	for k := 1; k <= 3 && k <= len(s); k++ {
		c := s[len(s)-k]
		if c < 0x80 {
			return 0
		}
		if c >= 0xC0 { // a leading byte
			need := 0
			switch {
			case c > 0xF4:
				return 0
			case c >= 0xF0:
				need = 4
			case c >= 0xE0:
				need = 3
			case c >= 0xC2:
				need = 2
			default:
				return 0
			}
			if need > k && !utf8.FullRuneInString(s[len(s)-k:]) {
				return k
			}
			return 0
		}
	}
	return 0
}

// pyStrip trims leading and trailing whitespace as Python's str.strip().
func pyStrip(s string) string { return strings.TrimFunc(s, pyfmt.IsSpace) }

// pyRStrip trims trailing whitespace as Python's str.rstrip().
func pyRStrip(s string) string { return strings.TrimRightFunc(s, pyfmt.IsSpace) }

// isAllSpace reports whether s is empty or only whitespace.
func isAllSpace(s string) bool { return pyStrip(s) == "" }
