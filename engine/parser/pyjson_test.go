package parser

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/npuserve/npuserve/engine/pyfmt"
)

// The expected strings are what CPython 3.12 prints for
// json.dumps(v, ensure_ascii=False).
func TestPyFloatRepr(t *testing.T) {
	cases := []struct {
		f    float64
		want string
	}{
		{1, "1.0"},
		{-1, "-1.0"},
		{0, "0.0"},
		{math.Copysign(0, -1), "-0.0"},
		{2.5, "2.5"},
		{0.1, "0.1"},
		{1.0 / 3, "0.3333333333333333"},
		{1e15, "1000000000000000.0"},
		{1e16, "1e+16"},
		{1.5e16, "1.5e+16"},
		{123456789012345680, "1.2345678901234568e+17"},
		{9999999999999998, "9999999999999998.0"},
		{0.0001, "0.0001"},
		{0.00001, "1e-05"},
		{1.5e-7, "1.5e-07"},
		{1e100, "1e+100"},
		{-2.5e-300, "-2.5e-300"},
		{5e-324, "5e-324"},
		{math.MaxFloat64, "1.7976931348623157e+308"},
		{100, "100.0"},
	}
	for _, c := range cases {
		if got := string(pyfmt.AppendFloatRepr(nil, c.f)); got != c.want {
			t.Errorf("repr(%v) = %q, want %q", c.f, got, c.want)
		}
	}
}

func TestPyStringEscape(t *testing.T) {
	cases := []struct{ in, want string }{
		{"plain", `"plain"`},
		{`q"b\s`, `"q\"b\\s"`},
		{"nl\nt\tr\rb\bf\f", `"nl\nt\tr\rb\bf\f"`},
		{"\x00\x1f\x7f", `"\u0000\u001f` + "\x7f" + `"`},
		{"中文 émoji 😀 \u2028", "\"中文 émoji 😀 \u2028\""},
		{"bad\xffutf8", "\"bad\uFFFDutf8\""},
		{"</tag>&", `"</tag>&"`},
	}
	for _, c := range cases {
		got := string(appendPyString(nil, c.in))
		if got != c.want {
			t.Errorf("dumps(%q) = %s, want %s", c.in, got, c.want)
		}
		if !json.Valid([]byte(got)) {
			t.Errorf("dumps(%q) = %s is not valid JSON", c.in, got)
		}
	}
}

func TestParseJSONRoundTrip(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{"a":1,"b":[true,false,null],"c":{"d":"e"}}`, `{"a": 1, "b": [true, false, null], "c": {"d": "e"}}`},
		{` [ ] `, `[]`},
		{`{}`, `{}`},
		{`-0`, `0`},
		{`-0.0`, `-0.0`},
		{`1.50`, `1.5`},
		{`1E2`, `100.0`},
		{`123456789012345678901234567890`, `123456789012345678901234567890`},
		{`"\u00e9\ud83d\ude00\n\/"`, "\"é😀\\n/\""},
		{`"\ud800"`, "\"\uFFFD\""},
		{`{"k":1,"k":2,"j":3}`, `{"k": 2, "j": 3}`}, // dict: last value, first position
		{`"<tool_call>"`, `"<tool_call>"`},
	}
	for _, c := range cases {
		v, ok := parseJSON(c.in)
		if !ok {
			t.Errorf("parseJSON(%q) failed", c.in)
			continue
		}
		if got := v.dumps(); got != c.want {
			t.Errorf("dumps(loads(%q)) = %s, want %s", c.in, got, c.want)
		}
	}
	for _, bad := range []string{``, `{`, `[1,]`, `{"a":1,}`, `01`, `1.`, `.5`, `+1`, `NaN`, `Infinity`, `1e400`,
		`"raw` + "\n" + `newline"`, `'single'`, `True`, `{"a" 1}`, `[1 2]`, `"\x"`, `tru`, `1 2`} {
		if v, ok := parseJSON(bad); ok {
			t.Errorf("parseJSON(%q) = %s, want failure", bad, v.dumps())
		}
	}
}

func TestParsePyLiteral(t *testing.T) {
	cases := []struct{ in, want string }{
		{`True`, `true`},
		{`None`, `null`},
		{`{'a': True, 'b': None, "c": [1, 2.0, -3]}`, `{"a": true, "b": null, "c": [1, 2.0, -3]}`},
		{`(1, 2)`, `[1, 2]`},
		{`(1,)`, `[1]`},
		{`(1)`, `1`},
		{`()`, `[]`},
		{`1, 2`, `[1, 2]`},
		{`[1, 2,]`, `[1, 2]`},
		{`1_000`, `1000`},
		{`+5`, `5`},
		{`1.`, `1.0`},
		{`.5`, `0.5`},
		{`'it\'s'`, `"it's"`},
		{`'\x41\u00e9\n'`, `"Aé\n"`},
		{`{7: 'a', 2.5: 'b', True: 'c', None: 'd'}`, `{"7": "a", "2.5": "b", "true": "c", "null": "d"}`},
	}
	for _, c := range cases {
		v, ok := parsePyLiteral(c.in)
		if !ok {
			t.Errorf("parsePyLiteral(%q) failed", c.in)
			continue
		}
		if got := v.dumps(); got != c.want {
			t.Errorf("parsePyLiteral(%q) = %s, want %s", c.in, got, c.want)
		}
	}
	for _, bad := range []string{`{1, 2}`, `b'x'`, `1j`, `0x10`, `007`, `'''x'''`, `Truee`, `abc`, `--1`, `[1`, `{'a'}`, `{(1,2): 3}`} {
		if v, ok := parsePyLiteral(bad); ok {
			t.Errorf("parsePyLiteral(%q) = %s, want failure", bad, v.dumps())
		}
	}
}

// typedValue follows glm4_moe_tool_parser.py: "string" keeps the raw
// text; anything else is json.loads / ast.literal_eval of the stripped
// text, else the stripped text.
func TestTypedValue(t *testing.T) {
	cases := []struct {
		raw  string
		kind argKind
		want string
	}{
		{" Beijing \n", argString, `" Beijing \n"`},
		{"123", argString, `"123"`},
		{" 3 ", argTyped, `3`},
		{"3.0", argTyped, `3.0`},
		{"three", argTyped, `"three"`},
		{"  spaced text  ", argAny, `"spaced text"`},
		{"true", argAny, `true`},
		{"False", argAny, `false`},
		{`{"a": [1, {"b": null}]}`, argTyped, `{"a": [1, {"b": null}]}`},
		{`['x', 'y']`, argTyped, `["x", "y"]`},
		{"", argAny, `""`},
		{"null", argNullableString, `null`},
		{" null ", argNullableString, `null`},
		{"nullable", argNullableString, `"nullable"`},
	}
	for _, c := range cases {
		if got := typedValue(c.raw, c.kind).dumps(); got != c.want {
			t.Errorf("typedValue(%q, %d) = %s, want %s", c.raw, c.kind, got, c.want)
		}
	}
}

func TestIncompleteUTF8(t *testing.T) {
	cases := []struct {
		s    string
		want int
	}{
		{"abc", 0},
		{"a\xe4", 1},
		{"a\xe4\xb8", 2},
		{"a\xe4\xb8\xad", 0},
		{"\xf0\x9f\x98", 3},
		{"\xf0\x9f\x98\x80", 0},
		{"\xff", 0},
		{"\x80", 0},
		{"\xc0", 0},
		{"\xe0\x80", 0}, // invalid sequence: passed through
	}
	for _, c := range cases {
		if got := incompleteUTF8(c.s); got != c.want {
			t.Errorf("incompleteUTF8(%q) = %d, want %d", c.s, got, c.want)
		}
	}
}
