package server

import (
	"bytes"
	"encoding/json"
	"math"
	"math/big"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/npuserve/npuserve/engine/parser"
	"github.com/npuserve/npuserve/engine/pyfmt"
)

// body is a JSON request object read field by field with pydantic's lax
// conversions (vLLM validates request bodies with pydantic models): "1.5"
// is a valid float, 1.0 a valid int, "yes" a valid bool. Every problem is
// recorded as a pydanticError at loc "body.<field>".
type body struct {
	fields map[string]json.RawMessage
	keys   []string // in request order
	used   map[string]bool
	errs   []pydanticError
}

// parseBody decodes data as a JSON object, answering FastAPI's errors for
// an empty body, invalid JSON or a non-object. A body that is not UTF-8, or
// whose strings hold a lone surrogate (\ud800 without its pair), is refused
// as Starlette refuses a body it cannot decode ("There was an error parsing
// the body"), instead of being read with U+FFFD in place of the bad bytes
// as Go's decoder would.
//
// Memory is a small multiple of len(data): validation allocates nothing and
// each field is kept once, as raw JSON.
func parseBody(data []byte) (*body, *APIError) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, validationError([]pydanticError{{Type: "missing", Loc: "body", Msg: "Field required", Input: "None"}})
	}
	if !utf8.Valid(data) {
		return nil, bodyParseError()
	}
	var v validOnly
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, jsonDecodeError(data, err)
	}
	if hasLoneSurrogate(data) {
		return nil, bodyParseError()
	}
	if t := bytes.TrimSpace(data); t[0] != '{' {
		return nil, validationError([]pydanticError{{Type: "model_attributes_type", Loc: "body",
			Msg: "Input should be a valid dictionary or object to extract fields from", Input: pyInput(data)}})
	}
	b := &body{fields: map[string]json.RawMessage{}, used: map[string]bool{}}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.Token() // {
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, jsonDecodeError(data, err)
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, jsonDecodeError(data, err)
		}
		if _, dup := b.fields[k]; !dup {
			b.keys = append(b.keys, k)
		}
		b.fields[k] = v // Python's json keeps the last duplicate
	}
	return b, nil
}

// validOnly is a json.Unmarshal target that only validates: Unmarshal
// checks the whole input's syntax before calling UnmarshalJSON, which
// keeps nothing.
type validOnly struct{}

// UnmarshalJSON accepts any (already validated) value.
func (*validOnly) UnmarshalJSON([]byte) error { return nil }

// bodyParseError is Starlette's answer to a body it cannot decode (FastAPI
// raises HTTPException(400, "There was an error parsing the body")).
func bodyParseError() *APIError {
	return httpError(http.StatusBadRequest, "There was an error parsing the body")
}

// hasLoneSurrogate reports whether a valid JSON text has a \u escape of a
// UTF-16 surrogate that is not part of a high-low pair. In valid JSON a
// backslash only occurs inside strings, each starting an escape.
func hasLoneSurrogate(data []byte) bool {
	for i := 0; i < len(data); i++ {
		if data[i] != '\\' {
			continue
		}
		i++
		if i >= len(data) || data[i] != 'u' {
			continue // \" \\ \n ...: the escaped byte is skipped
		}
		r, ok := hex4(data, i+1)
		if !ok {
			return false // not valid JSON; the decoder reports it
		}
		i += 4
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return true // a low surrogate first
		case r >= 0xD800 && r <= 0xDBFF:
			if i+6 >= len(data) || data[i+1] != '\\' || data[i+2] != 'u' {
				return true
			}
			lo, ok := hex4(data, i+3)
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return true
			}
			i += 6
		}
	}
	return false
}

// hex4 reads four hex digits at data[i:].
func hex4(data []byte, i int) (rune, bool) {
	if i+4 > len(data) {
		return 0, false
	}
	var r rune
	for _, c := range data[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// get returns a field's raw value and whether it is present and not null.
func (b *body) get(name string) (json.RawMessage, bool) {
	b.used[name] = true
	raw, ok := b.fields[name]
	if !ok || isNull(raw) {
		return nil, false
	}
	return raw, true
}

// present reports whether the field is in the body (null included).
func (b *body) present(name string) bool {
	_, ok := b.fields[name]
	return ok
}

// null reports whether the field is present with the value null.
func (b *body) null(name string) bool {
	raw, ok := b.fields[name]
	return ok && isNull(raw)
}

// truthy is Python truthiness of a field (absent: false), as the
// request models' "before" validators test data.get(name). Containers are
// judged by emptiness without decoding them.
func (b *body) truthy(name string) bool {
	raw, ok := b.fields[name]
	if !ok {
		return false
	}
	t := bytes.TrimSpace(raw)
	if len(t) > 0 && (t[0] == '[' || t[0] == '{') {
		return len(bytes.TrimSpace(t[1:len(t)-1])) > 0
	}
	var v any
	if json.Unmarshal(t, &v) != nil {
		return false
	}
	return parser.Truthy(v)
}

// missing is pydantic's "Field required" error for a field of the body.
func (b *body) missing(name string) pydanticError {
	return pydanticError{Type: "missing", Loc: "body." + name, Msg: "Field required",
		Input: pyfmt.Repr("<dict of " + strconv.Itoa(len(b.keys)) + " items>")}
}

func (b *body) fail(name, typ, msg string, raw json.RawMessage) {
	b.errs = append(b.errs, pydanticError{Type: typ, Loc: "body." + name, Msg: msg, Input: pyInput(raw)})
}

// unknown returns the fields no reader asked for (vLLM logs them as
// ignored), sorted.
func (b *body) unknown() []string {
	var out []string
	for _, k := range b.keys {
		if !b.used[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func isNull(raw json.RawMessage) bool {
	return string(bytes.TrimSpace(raw)) == "null"
}

// optFloat reads a `float | None` field.
func (b *body) optFloat(name string) *float64 {
	raw, ok := b.get(name)
	if !ok {
		return nil
	}
	f, typ, msg := laxFloat(raw)
	if typ != "" {
		b.fail(name, typ, msg, raw)
		return nil
	}
	return &f
}

// float reads a `float = def` field (null is invalid).
func (b *body) float(name string, def float64) float64 {
	if b.null(name) {
		b.used[name] = true
		b.fail(name, "float_type", "Input should be a valid number", b.fields[name])
		return def
	}
	if p := b.optFloat(name); p != nil {
		return *p
	}
	return def
}

// floatOrNull reads a `float | None = def` field (null means def).
func (b *body) floatOrNull(name string, def float64) float64 {
	if p := b.optFloat(name); p != nil {
		return *p
	}
	return def
}

// optInt reads an `int | None` field.
func (b *body) optInt(name string) *int64 {
	raw, ok := b.get(name)
	if !ok {
		return nil
	}
	i, typ, msg := laxInt(raw)
	if typ != "" {
		b.fail(name, typ, msg, raw)
		return nil
	}
	return &i
}

// int reads an `int = def` field (null is invalid).
func (b *body) int(name string, def int64) int64 {
	if b.null(name) {
		b.used[name] = true
		b.fail(name, "int_type", "Input should be a valid integer", b.fields[name])
		return def
	}
	if p := b.optInt(name); p != nil {
		return *p
	}
	return def
}

// optBool reads a `bool | None` field.
func (b *body) optBool(name string) *bool {
	raw, ok := b.get(name)
	if !ok {
		return nil
	}
	v, typ, msg := laxBool(raw)
	if typ != "" {
		b.fail(name, typ, msg, raw)
		return nil
	}
	return &v
}

// bool reads a `bool = def` field (null is invalid).
func (b *body) bool(name string, def bool) bool {
	if b.null(name) {
		b.used[name] = true
		b.fail(name, "bool_type", "Input should be a valid boolean", b.fields[name])
		return def
	}
	if p := b.optBool(name); p != nil {
		return *p
	}
	return def
}

// boolOrNull reads a `bool | None = def` field (null means def).
func (b *body) boolOrNull(name string, def bool) bool {
	if p := b.optBool(name); p != nil {
		return *p
	}
	return def
}

// optString reads a `str | None` field.
func (b *body) optString(name string) *string {
	raw, ok := b.get(name)
	if !ok {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		b.fail(name, "string_type", "Input should be a valid string", raw)
		return nil
	}
	return &s
}

// literal reads a `Literal[choices...] | None` field of strings.
func (b *body) literal(name string, choices ...string) *string {
	raw, ok := b.get(name)
	if !ok {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		for _, c := range choices {
			if s == c {
				return &s
			}
		}
	}
	expected := literalChoices(choices)
	b.errs = append(b.errs, pydanticError{Type: "literal_error", Loc: "body." + name, Msg: "Input should be " + expected,
		Input: pyInput(raw), Ctx: "{'expected': " + pyfmt.Repr(expected) + "}"})
	return nil
}

// literalChoices is pydantic's rendering of a Literal's values: "'a'",
// "'a' or 'b'", "'a', 'b' or 'c'".
func literalChoices(choices []string) string {
	q := make([]string, len(choices))
	for i, c := range choices {
		q[i] = pyfmt.Repr(c)
	}
	if len(q) == 1 {
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}

// intList reads a `list[int] | None` field.
func (b *body) intList(name string) []int64 {
	raw, ok := b.get(name)
	if !ok {
		return nil
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		b.fail(name, "list_type", "Input should be a valid list", raw)
		return nil
	}
	out := make([]int64, 0, len(items))
	for i, it := range items {
		v, typ, msg := laxInt(it)
		if typ != "" {
			b.fail(name+"."+strconv.Itoa(i), typ, msg, it)
			continue
		}
		out = append(out, v)
	}
	return out
}

// stringList reads a `str | list[str] | None` field as a list.
func (b *body) stringOrList(name string) []string {
	raw, ok := b.get(name)
	if !ok {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		b.fail(name, "string_type", "Input should be a valid string or a list of strings", raw)
		return nil
	}
	out := make([]string, 0, len(items))
	for i, it := range items {
		var s string
		if json.Unmarshal(it, &s) != nil {
			b.fail(name+"."+strconv.Itoa(i), "string_type", "Input should be a valid string", it)
			continue
		}
		out = append(out, s)
	}
	return out
}

// object reads a `dict | None` field, keeping the raw value.
func (b *body) object(name string) json.RawMessage {
	raw, ok := b.get(name)
	if !ok {
		return nil
	}
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		b.fail(name, "dict_type", "Input should be a valid dictionary", raw)
		return nil
	}
	return raw
}

// laxFloat converts a JSON value to a float as pydantic's lax mode does.
func laxFloat(raw json.RawMessage) (float64, string, string) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0:
	case raw[0] == '"':
		var s string
		json.Unmarshal(raw, &s)
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil && !isRangeErr(err) {
			return 0, "float_parsing", "Input should be a valid number, unable to parse string as a number"
		}
		return f, "", ""
	case string(raw) == "true":
		return 1, "", ""
	case string(raw) == "false":
		return 0, "", ""
	case raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9'):
		f, err := strconv.ParseFloat(string(raw), 64)
		if err != nil && !isRangeErr(err) {
			break
		}
		return f, "", ""
	}
	return 0, "float_type", "Input should be a valid number"
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// laxInt converts a JSON value to an int as pydantic's lax mode does
// (integers beyond int64 are refused: nothing in a request needs them).
func laxInt(raw json.RawMessage) (int64, string, string) {
	raw = bytes.TrimSpace(raw)
	tooBig := func() (int64, string, string) {
		return 0, "int_parsing_size", "Unable to parse input string as an integer, exceeded maximum size"
	}
	switch {
	case len(raw) == 0:
	case raw[0] == '"':
		var s string
		json.Unmarshal(raw, &s)
		s = strings.TrimSpace(s)
		i, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			if isRangeErr(err) {
				return tooBig()
			}
			return 0, "int_parsing", "Input should be a valid integer, unable to parse string as an integer"
		}
		return i, "", ""
	case string(raw) == "true":
		return 1, "", ""
	case string(raw) == "false":
		return 0, "", ""
	case raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9'):
		if i, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
			return i, "", ""
		}
		f, ok := new(big.Float).SetString(string(raw))
		if !ok {
			break
		}
		if !f.IsInt() {
			return 0, "int_from_float", "Input should be a valid integer, got a number with a fractional part"
		}
		i, acc := f.Int64()
		if acc != big.Exact {
			return tooBig()
		}
		return i, "", ""
	}
	return 0, "int_type", "Input should be a valid integer"
}

// laxBool converts a JSON value to a bool as pydantic's lax mode does.
func laxBool(raw json.RawMessage) (bool, string, string) {
	raw = bytes.TrimSpace(raw)
	const parsing = "Input should be a valid boolean, unable to interpret input"
	switch {
	case string(raw) == "true":
		return true, "", ""
	case string(raw) == "false":
		return false, "", ""
	case len(raw) > 0 && raw[0] == '"':
		var s string
		json.Unmarshal(raw, &s)
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "0", "off", "f", "false", "n", "no":
			return false, "", ""
		case "1", "on", "t", "true", "y", "yes":
			return true, "", ""
		}
		return false, "bool_parsing", parsing
	case len(raw) > 0 && (raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9')):
		f, err := strconv.ParseFloat(string(raw), 64)
		if err == nil && f == 0 {
			return false, "", ""
		}
		if err == nil && f == 1 {
			return true, "", ""
		}
		return false, "bool_parsing", parsing
	}
	return false, "bool_type", "Input should be a valid boolean"
}

// clampInt converts v to int, saturating at the int range.
func clampInt(v int64) int {
	if v > math.MaxInt32 && strconv.IntSize == 32 {
		return math.MaxInt32
	}
	return int(v)
}
