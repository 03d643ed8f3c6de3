package pyfmt

import "unicode/utf8"

// ItemSep and KeySep are json.dumps' default separators (indent=None).
const (
	ItemSep = ", "
	KeySep  = ": "
)

// AppendJSONString appends s as a JSON string literal written by Python's
// json.dumps: '"', '\\', \n, \r, \t, \b and \f as two-character escapes,
// other control characters as \u00hh; with ensureASCII (json.dumps'
// default) also DEL and every non-ASCII character as \uhhhh, characters
// beyond the BMP as a UTF-16 surrogate pair. '<', '>', '&', U+2028 and
// U+2029 are not escaped (unlike Go's encoding/json). Invalid UTF-8,
// which a Python str cannot hold, is written as U+FFFD, so the result is
// always valid JSON.
func AppendJSONString(dst []byte, s string, ensureASCII bool) []byte {
	dst = append(dst, '"')
	dst = AppendJSONStringBody(dst, s, ensureASCII)
	return append(dst, '"')
}

// AppendJSONStringBody is AppendJSONString without the quotes. The
// escaping of a prefix of s is a prefix of the escaping of s, so text
// that arrives in pieces can be escaped piece by piece (cut at character
// boundaries).
func AppendJSONStringBody(dst []byte, s string, ensureASCII bool) []byte {
	u4 := func(dst []byte, r rune) []byte {
		return append(dst, '\\', 'u', hexDigits[r>>12&0xf], hexDigits[r>>8&0xf], hexDigits[r>>4&0xf], hexDigits[r&0xf])
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch c {
			case '"':
				dst = append(dst, '\\', '"')
			case '\\':
				dst = append(dst, '\\', '\\')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			default:
				if c < 0x20 || (ensureASCII && c == 0x7f) {
					dst = u4(dst, rune(c))
				} else {
					dst = append(dst, c)
				}
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case ensureASCII && r >= 0x10000:
			r -= 0x10000
			dst = u4(u4(dst, 0xd800+(r>>10)&0x3ff), 0xdc00+r&0x3ff)
		case ensureASCII:
			dst = u4(dst, r) // U+FFFD for invalid UTF-8
		case r == utf8.RuneError && n == 1:
			dst = append(dst, "\uFFFD"...)
		default:
			dst = append(dst, s[i:i+n]...)
		}
		i += n
	}
	return dst
}
