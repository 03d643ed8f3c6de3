package pyfmt

import (
	"encoding/json"
	"math"
	"testing"
	"unicode/utf8"
)

// point1 is a variable so that 0.1 + 0.2 is computed in float64, not exactly.
var point1 = 0.1

// TestFloatRepr: the expected values are Python's repr(float) and
// json.dumps(float).
func TestFloatRepr(t *testing.T) {
	cases := []struct {
		f          float64
		repr, json string
	}{
		{0, "0.0", "0.0"},
		{math.Copysign(0, -1), "-0.0", "-0.0"},
		{1, "1.0", "1.0"},
		{-1, "-1.0", "-1.0"},
		{0.1, "0.1", "0.1"},
		{1.5, "1.5", "1.5"},
		{1.0 / 3, "0.3333333333333333", "0.3333333333333333"},
		{2.5, "2.5", "2.5"},
		{-2.5, "-2.5", "-2.5"},
		{100, "100.0", "100.0"},
		{point1 + 0.2, "0.30000000000000004", "0.30000000000000004"},
		{123456789, "123456789.0", "123456789.0"},
		{123456789.123, "123456789.123", "123456789.123"},
		{1e15, "1000000000000000.0", "1000000000000000.0"},
		{9999999999999998, "9999999999999998.0", "9999999999999998.0"},
		{1e16, "1e+16", "1e+16"},
		{1.5e16, "1.5e+16", "1.5e+16"},
		{123456789012345680, "1.2345678901234568e+17", "1.2345678901234568e+17"},
		{1e100, "1e+100", "1e+100"},
		{1.25e100, "1.25e+100", "1.25e+100"},
		{1e300, "1e+300", "1e+300"},
		{math.MaxFloat64, "1.7976931348623157e+308", "1.7976931348623157e+308"},
		{0.0001, "0.0001", "0.0001"},
		{0.00001, "1e-05", "1e-05"},
		{-0.00001, "-1e-05", "-1e-05"},
		{1.5e-7, "1.5e-07", "1.5e-07"},
		{-2.5e-300, "-2.5e-300", "-2.5e-300"},
		{5e-324, "5e-324", "5e-324"},
		{math.NaN(), "nan", "NaN"},
		{math.Inf(1), "inf", "Infinity"},
		{math.Inf(-1), "-inf", "-Infinity"},
	}
	for _, c := range cases {
		if got := FloatRepr(c.f); got != c.repr {
			t.Errorf("FloatRepr(%v) = %q, want %q", c.f, got, c.repr)
		}
		if got := string(AppendFloatRepr([]byte("x"), c.f)); got != "x"+c.repr {
			t.Errorf("AppendFloatRepr(x, %v) = %q, want %q", c.f, got, "x"+c.repr)
		}
		if got := JSONFloat(c.f); got != c.json {
			t.Errorf("JSONFloat(%v) = %q, want %q", c.f, got, c.json)
		}
	}
}

// TestJSONString: the expected values are Python's json.dumps(s,
// ensure_ascii=False) and json.dumps(s).
func TestJSONString(t *testing.T) {
	cases := []struct{ in, raw, ascii string }{
		{"", `""`, `""`},
		{"plain", `"plain"`, `"plain"`},
		{`q"b\s`, `"q\"b\\s"`, `"q\"b\\s"`},
		{"nl\nt\tr\rb\bf\f", `"nl\nt\tr\rb\bf\f"`, `"nl\nt\tr\rb\bf\f"`},
		{"\x00\x1f\x7f", `"\u0000\u001f` + "\x7f" + `"`, `"\u0000\u001f\u007f"`},
		{"é", "\"é\"", `"\u00e9"`},
		{"中文", "\"中文\"", `"\u4e2d\u6587"`},
		{"😀", "\"😀\"", `"\ud83d\ude00"`},                       // beyond the BMP: a surrogate pair
		{"\U0010ffff", "\"\U0010ffff\"", `"\udbff\udfff"`},     // the last code point
		{"\u2028\u2029", "\"\u2028\u2029\"", `"\u2028\u2029"`}, // not escaped without ensure_ascii
		{"\u0085\u00a0", "\"\u0085\u00a0\"", `"\u0085\u00a0"`},
		{"</tag>&", `"</tag>&"`, `"</tag>&"`},
		{"bad\xffutf8", "\"bad\uFFFDutf8\"", `"bad\ufffdutf8"`},
		{"\xed\xa0\x80", "\"\uFFFD\uFFFD\uFFFD\"", `"\ufffd\ufffd\ufffd"`}, // a UTF-8-encoded surrogate is invalid
	}
	for _, c := range cases {
		for _, m := range []struct {
			ensureASCII bool
			want        string
		}{{false, c.raw}, {true, c.ascii}} {
			got := string(AppendJSONString([]byte("x"), c.in, m.ensureASCII))
			if got != "x"+m.want {
				t.Errorf("AppendJSONString(%q, ensureASCII=%v) = %s, want %s", c.in, m.ensureASCII, got[1:], m.want)
			}
			if !json.Valid([]byte(got[1:])) {
				t.Errorf("AppendJSONString(%q, ensureASCII=%v) = %s is not valid JSON", c.in, m.ensureASCII, got[1:])
			}
			var back string
			if err := json.Unmarshal([]byte(got[1:]), &back); err != nil || (utf8.ValidString(c.in) && back != c.in) {
				t.Errorf("AppendJSONString(%q, ensureASCII=%v) decodes to %q (%v)", c.in, m.ensureASCII, back, err)
			}
			body := string(AppendJSONStringBody(nil, c.in, m.ensureASCII))
			if `"`+body+`"` != m.want {
				t.Errorf("AppendJSONStringBody(%q, ensureASCII=%v) = %s, want the quoted form %s", c.in, m.ensureASCII, body, m.want)
			}
		}
	}
}

// TestJSONStringBodyPrefix: escaping a string piece by piece (cut at
// character boundaries) gives the escaping of the whole.
func TestJSONStringBodyPrefix(t *testing.T) {
	s := "a\"é\n😀\x01\\z"
	for _, ensureASCII := range []bool{false, true} {
		whole := string(AppendJSONStringBody(nil, s, ensureASCII))
		var pieces []byte
		for _, r := range s {
			pieces = AppendJSONStringBody(pieces, string(r), ensureASCII)
		}
		if string(pieces) != whole {
			t.Errorf("ensureASCII=%v: piece by piece %s, whole %s", ensureASCII, pieces, whole)
		}
	}
}

// TestRepr: the expected values are Python's repr(str).
func TestRepr(t *testing.T) {
	cases := []struct{ in, want string }{
		{"", `''`},
		{"abc", `'abc'`},
		{"it's", `"it's"`},
		{`say "hi"`, `'say "hi"'`},
		{`it's "x"`, `'it\'s "x"'`},
		{`back\slash`, `'back\\slash'`},
		{"a\nb\tc\rd", `'a\nb\tc\rd'`},
		{"\x00\x1b\x7f", `'\x00\x1b\x7f'`},
		{"\b\f\v", `'\x08\x0c\x0b'`},
		{"é中文😀", "'é中文😀'"},
		{"\u0085\u00a0\u00ad", `'\x85\xa0\xad'`},
		{"\u2028\u2029\ufeff", `'\u2028\u2029\ufeff'`},
		{"\U000e0001", `'\U000e0001'`},
		{"\u3000", `'\u3000'`},
		{"bad\xff", "'bad\uFFFD'"},
	}
	for _, c := range cases {
		if got := Repr(c.in); got != c.want {
			t.Errorf("Repr(%q) = %s, want %s", c.in, got, c.want)
		}
		if got := string(AppendRepr([]byte("x"), c.in)); got != "x"+c.want {
			t.Errorf("AppendRepr(x, %q) = %s, want x%s", c.in, got, c.want)
		}
	}
}

// TestIsSpace: the expected values are Python's str.isspace.
func TestIsSpace(t *testing.T) {
	space := []rune{'\t', '\n', '\v', '\f', '\r', ' ', 0x1c, 0x1d, 0x1e, 0x1f, 0x85, 0xa0, 0x1680,
		0x2000, 0x2005, 0x200a, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000}
	notSpace := []rune{0, 0x08, 0x1b, 'a', '_', 0x7f, 0x180e, 0x200b, 0x200c, 0x2060, 0xfeff, 0xfffd, 0x10ffff}
	for _, r := range space {
		if !IsSpace(r) {
			t.Errorf("IsSpace(%U) = false, want true", r)
		}
	}
	for _, r := range notSpace {
		if IsSpace(r) {
			t.Errorf("IsSpace(%U) = true, want false", r)
		}
	}
}

// TestIsPrintable: the expected values are Python's str.isprintable.
func TestIsPrintable(t *testing.T) {
	cases := []struct {
		r    rune
		want bool
	}{{' ', true}, {'a', true}, {'é', true}, {'😀', true}, {'\n', false}, {0x7f, false}, {0xa0, false},
		{0xad, false}, {0x2028, false}, {0x3000, false}, {0xe000, false}, {0x10ffff, false}}
	for _, c := range cases {
		if got := IsPrintable(c.r); got != c.want {
			t.Errorf("IsPrintable(%U) = %v, want %v", c.r, got, c.want)
		}
	}
}
