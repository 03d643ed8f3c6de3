package pyfmt

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// IsSpace is Python's str.isspace for one character, which is also what
// str.strip, str.split and the \s class of Python's re module (on str
// patterns) treat as whitespace: the Unicode White_Space characters plus
// the ASCII separators U+001C…U+001F.
func IsSpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

// IsPrintable is Python's str.isprintable for one character; repr escapes
// the characters that are not.
func IsPrintable(r rune) bool { return unicode.IsPrint(r) }

const hexDigits = "0123456789abcdef"

// Repr is Python's repr of a str: single quotes unless the text has a
// single quote and no double quote; backslash, the quote, \t, \n and \r
// escaped; other non-printable characters as \xhh, \uhhhh or \Uhhhhhhhh.
// Invalid UTF-8 is read as U+FFFD (a Python str cannot hold it).
func Repr(s string) string { return string(AppendRepr(nil, s)) }

// AppendRepr appends Repr(s) to dst.
func AppendRepr(dst []byte, s string) []byte {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	dst = append(dst, q)
	hex := func(dst []byte, prefix byte, r rune, n int) []byte {
		dst = append(dst, '\\', prefix)
		for shift := 4 * (n - 1); shift >= 0; shift -= 4 {
			dst = append(dst, hexDigits[r>>shift&0xf])
		}
		return dst
	}
	for _, r := range s {
		switch {
		case r == rune(q) || r == '\\':
			dst = append(dst, '\\', byte(r))
		case r == '\t':
			dst = append(dst, '\\', 't')
		case r == '\n':
			dst = append(dst, '\\', 'n')
		case r == '\r':
			dst = append(dst, '\\', 'r')
		case r < ' ' || r == 0x7f:
			dst = hex(dst, 'x', r, 2)
		case r < 0x7f:
			dst = append(dst, byte(r))
		case IsPrintable(r):
			dst = utf8.AppendRune(dst, r)
		case r < 0x100:
			dst = hex(dst, 'x', r, 2)
		case r < 0x10000:
			dst = hex(dst, 'u', r, 4)
		default:
			dst = hex(dst, 'U', r, 8)
		}
	}
	return append(dst, q)
}
