package parser

import "testing"

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
