package tokenizer

import "unicode/utf8"

// Decode turns ids back into text the way HF's Tokenizer::decode does: ids
// with no token are dropped, special tokens are dropped when skipSpecial
// is set, and the bytes of the remaining tokens are read as UTF-8 with each
// ill-formed sequence replaced by U+FFFD (Rust's String::from_utf8_lossy).
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) string {
	return string(appendLossy(nil, t.decodeBytes(nil, ids, skipSpecial)))
}

// decodeBytes appends the raw bytes of ids, before UTF-8 repair.
func (t *Tokenizer) decodeBytes(dst []byte, ids []int, skipSpecial bool) []byte {
	first := true
	for _, id := range ids {
		p, ok := t.piece(id, skipSpecial)
		if !ok {
			continue
		}
		if t.joinWithSpace && !first {
			dst = append(dst, ' ')
		}
		dst = append(dst, p...)
		first = false
	}
	return dst
}

// piece returns what id contributes to decoded text, or false when it
// contributes nothing (unknown id, or a skipped special token).
func (t *Tokenizer) piece(id int, skipSpecial bool) (string, bool) {
	if id < 0 || id >= len(t.pieces) || !t.known[id] {
		return "", false
	}
	if skipSpecial && t.skippable[id] {
		return "", false
	}
	return t.pieces[id], true
}

// utf8PrefixLen returns how many leading bytes of b (1 to 3) are a proper
// prefix of some well-formed UTF-8 sequence, or 0 when b[0] cannot start
// one. It follows the table of well-formed byte sequences in the Unicode
// standard (no overlong forms, no surrogates, nothing above U+10FFFF).
func utf8PrefixLen(b []byte) (n, need int) {
	c := b[0]
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case 0xC2 <= c && c <= 0xDF:
		need = 2
	case c == 0xE0:
		need, lo = 3, 0xA0
	case c == 0xED:
		need, hi = 3, 0x9F
	case 0xE1 <= c && c <= 0xEF:
		need = 3
	case c == 0xF0:
		need, lo = 4, 0x90
	case c == 0xF4:
		need, hi = 4, 0x8F
	case 0xF1 <= c && c <= 0xF3:
		need = 4
	default:
		return 0, 0
	}
	n = 1
	for n < need && n < len(b) {
		if b[n] < lo || b[n] > hi {
			break
		}
		lo, hi = 0x80, 0xBF
		n++
	}
	return n, need
}

// appendLossy appends b to dst, replacing every maximal ill-formed
// subsequence with U+FFFD exactly as Rust's String::from_utf8_lossy does.
func appendLossy(dst, b []byte) []byte {
	for i := 0; i < len(b); {
		if c := b[i]; c < utf8.RuneSelf {
			dst = append(dst, c)
			i++
			continue
		}
		if r, size := utf8.DecodeRune(b[i:]); r != utf8.RuneError || size > 1 {
			dst = append(dst, b[i:i+size]...)
			i += size
			continue
		}
		n, _ := utf8PrefixLen(b[i:])
		dst = append(dst, "\uFFFD"...)
		i += max(n, 1)
	}
	return dst
}

// incompleteTail returns how many trailing bytes of b form a truncated but
// so far well-formed UTF-8 sequence, which later bytes may complete.
func incompleteTail(b []byte) int {
	for k := 1; k <= 3 && k <= len(b); k++ {
		c := b[len(b)-k]
		if c&0xC0 == 0x80 {
			continue // continuation byte: look further back
		}
		if n, need := utf8PrefixLen(b[len(b)-k:]); n == k && need > k {
			return k
		}
		return 0
	}
	return 0
}

// Stream decodes generated ids incrementally. Add returns the text that
// the new id completes; bytes of a UTF-8 sequence split across tokens are
// held back until the sequence is complete, so valid output never shows a
// transient U+FFFD. The concatenation of everything Add and Flush return
// equals Decode of all the ids, for any ids.
//
// vLLM's detokenize_incrementally re-decodes a window of tokens (prefix and
// read offsets) because a general decoder may rewrite text across token
// boundaries. The decoders this package accepts (ByteLevel, or joining
// with spaces) map each token to fixed bytes, so holding back an
// incomplete UTF-8 tail is exact and costs O(1) per token.
//
// A Stream is not safe for concurrent use.
type Stream struct {
	t           *Tokenizer
	skipSpecial bool
	pending     []byte
	started     bool // a token has been emitted (for space joining)
}

// NewStream returns a Stream; skipSpecial drops special tokens as Decode
// does.
func (t *Tokenizer) NewStream(skipSpecial bool) *Stream {
	return &Stream{t: t, skipSpecial: skipSpecial}
}

// Add feeds one id and returns the newly completed text (often "").
func (s *Stream) Add(id int) string {
	p, ok := s.t.piece(id, s.skipSpecial)
	if !ok {
		return ""
	}
	if s.t.joinWithSpace && s.started {
		s.pending = append(s.pending, ' ')
	}
	s.started = true
	s.pending = append(s.pending, p...)
	keep := incompleteTail(s.pending)
	if keep == len(s.pending) {
		return ""
	}
	out := string(appendLossy(nil, s.pending[:len(s.pending)-keep]))
	s.pending = append(s.pending[:0], s.pending[len(s.pending)-keep:]...)
	return out
}

// Flush returns whatever is held back, with an unfinished UTF-8 sequence
// replaced by U+FFFD, and resets the Stream for a new sequence.
func (s *Stream) Flush() string {
	out := string(appendLossy(nil, s.pending))
	s.pending = s.pending[:0]
	s.started = false
	return out
}

// Pending reports whether bytes are held back waiting for the rest of a
// UTF-8 sequence.
func (s *Stream) Pending() bool { return len(s.pending) > 0 }
