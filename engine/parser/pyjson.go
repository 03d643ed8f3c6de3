package parser

import (
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/npuserve/npuserve/engine/pyfmt"
)

// vLLM builds tool-call arguments with Python: values are decoded with
// json.loads (falling back to ast.literal_eval) and the result is written
// with json.dumps(..., ensure_ascii=False). This file reproduces exactly
// that round trip on an ordered value tree, so that the argument strings
// are byte-identical: ", " and ": " separators, Python float repr
// ("1.0", "1e+16"), arbitrary-precision integers, raw non-ASCII text, and
// dict semantics for duplicate keys (last value, first position).

type valueKind uint8

const (
	kindNull valueKind = iota
	kindBool
	kindInt    // num holds the canonical decimal text
	kindFloat  // f holds the value
	kindString // s holds the text
	kindArray
	kindObject
)

// value is a decoded JSON/Python value with object key order preserved.
type value struct {
	kind valueKind
	b    bool
	num  string
	f    float64
	s    string
	arr  []value
	keys []string
	vals []value
}

// set stores key → v with Python dict semantics.
func (v *value) set(key string, x value) {
	for i, k := range v.keys {
		if k == key {
			v.vals[i] = x
			return
		}
	}
	v.keys = append(v.keys, key)
	v.vals = append(v.vals, x)
}

// get returns the value stored under key.
func (v *value) get(key string) (value, bool) {
	for i, k := range v.keys {
		if k == key {
			return v.vals[i], true
		}
	}
	return value{}, false
}

// dumps is json.dumps(v, ensure_ascii=False).
func (v value) dumps() string { return string(v.appendTo(nil)) }

func (v value) appendTo(dst []byte) []byte {
	switch v.kind {
	case kindNull:
		return append(dst, "null"...)
	case kindBool:
		if v.b {
			return append(dst, "true"...)
		}
		return append(dst, "false"...)
	case kindInt:
		return append(dst, v.num...)
	case kindFloat:
		return pyfmt.AppendFloatRepr(dst, v.f)
	case kindString:
		return pyfmt.AppendJSONString(dst, v.s, false)
	case kindArray:
		dst = append(dst, '[')
		for i, x := range v.arr {
			if i > 0 {
				dst = append(dst, pyfmt.ItemSep...)
			}
			dst = x.appendTo(dst)
		}
		return append(dst, ']')
	default:
		dst = append(dst, '{')
		for i, k := range v.keys {
			if i > 0 {
				dst = append(dst, pyfmt.ItemSep...)
			}
			dst = pyfmt.AppendJSONString(dst, k, false)
			dst = append(dst, pyfmt.KeySep...)
			dst = v.vals[i].appendTo(dst)
		}
		return append(dst, '}')
	}
}

// canonicalInt turns an integer literal (optional sign, decimal digits,
// possibly with leading zeros or '_' already removed) into Python's
// str(int(...)).
func canonicalInt(neg bool, digits string) string {
	digits = strings.TrimLeft(digits, "0")
	if digits == "" {
		return "0"
	}
	if neg {
		return "-" + digits
	}
	return digits
}

// parseJSON decodes s as Python's json.loads does, except that NaN and
// ±Infinity (which json.dumps would write back as invalid JSON) and
// numbers that overflow to infinity are rejected.
func parseJSON(s string) (value, bool) {
	p := jsonParser{s: s}
	p.ws()
	v, ok := p.value(0)
	if !ok {
		return value{}, false
	}
	p.ws()
	return v, p.i == len(p.s)
}

// maxDepth bounds nesting so hostile input cannot exhaust the stack.
const maxDepth = 512

type jsonParser struct {
	s string
	i int
}

func (p *jsonParser) ws() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonParser) lit(w string) bool {
	if strings.HasPrefix(p.s[p.i:], w) {
		p.i += len(w)
		return true
	}
	return false
}

// items parses comma-separated items up to the closing end (json.loads
// allows no trailing comma); item starts at a non-space byte.
func (p *jsonParser) items(end string, item func() bool) bool {
	p.ws()
	if p.lit(end) {
		return true
	}
	for {
		p.ws()
		if !item() {
			return false
		}
		p.ws()
		if p.lit(",") {
			continue
		}
		return p.lit(end)
	}
}

func (p *jsonParser) value(depth int) (value, bool) {
	if p.i >= len(p.s) || depth > maxDepth {
		return value{}, false
	}
	switch c := p.s[p.i]; {
	case c == '{':
		p.i++
		obj := value{kind: kindObject}
		ok := p.items("}", func() bool {
			if p.i >= len(p.s) || p.s[p.i] != '"' {
				return false
			}
			k, ok := p.str()
			if !ok {
				return false
			}
			p.ws()
			if !p.lit(":") {
				return false
			}
			p.ws()
			x, ok := p.value(depth + 1)
			if ok {
				obj.set(k, x)
			}
			return ok
		})
		if !ok {
			return value{}, false
		}
		return obj, true
	case c == '[':
		p.i++
		arr := value{kind: kindArray, arr: []value{}}
		ok := p.items("]", func() bool {
			x, ok := p.value(depth + 1)
			if ok {
				arr.arr = append(arr.arr, x)
			}
			return ok
		})
		if !ok {
			return value{}, false
		}
		return arr, true
	case c == '"':
		s, ok := p.str()
		return value{kind: kindString, s: s}, ok
	case p.lit("true"):
		return value{kind: kindBool, b: true}, true
	case p.lit("false"):
		return value{kind: kindBool}, true
	case p.lit("null"):
		return value{kind: kindNull}, true
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	}
	return value{}, false
}

// number parses a JSON number: -?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?
func (p *jsonParser) number() (value, bool) {
	start := p.i
	neg := p.lit("-")
	intStart := p.i
	if p.i < len(p.s) && p.s[p.i] == '0' {
		p.i++
	} else if !p.digits() {
		return value{}, false
	}
	intEnd := p.i
	isFloat := false
	if p.i < len(p.s) && p.s[p.i] == '.' {
		p.i++
		if !p.digits() {
			return value{}, false
		}
		isFloat = true
	}
	if p.i < len(p.s) && (p.s[p.i] == 'e' || p.s[p.i] == 'E') {
		p.i++
		if p.i < len(p.s) && (p.s[p.i] == '+' || p.s[p.i] == '-') {
			p.i++
		}
		if !p.digits() {
			return value{}, false
		}
		isFloat = true
	}
	if !isFloat {
		return value{kind: kindInt, num: canonicalInt(neg, p.s[intStart:intEnd])}, true
	}
	return floatValue(p.s[start:p.i])
}

func floatValue(text string) (value, bool) {
	f, err := strconv.ParseFloat(text, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return value{}, false
	}
	return value{kind: kindFloat, f: f}, true
}

func (p *jsonParser) digits() bool {
	start := p.i
	for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		p.i++
	}
	return p.i > start
}

// str parses a JSON string at p.i (which is '"'). Control characters are
// rejected (json.loads strict mode); lone surrogates become U+FFFD.
func (p *jsonParser) str() (string, bool) {
	p.i++
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			return b.String(), true
		case c < 0x20:
			return "", false
		case c == '\\':
			if p.i+1 >= len(p.s) {
				return "", false
			}
			e := p.s[p.i+1]
			p.i += 2
			switch e {
			case '"', '\\', '/':
				b.WriteByte(e)
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'u':
				r, ok := p.hex4()
				if !ok {
					return "", false
				}
				if utf16.IsSurrogate(r) && r < 0xDC00 && strings.HasPrefix(p.s[p.i:], "\\u") {
					save := p.i
					p.i += 2
					r2, ok2 := p.hex4()
					if ok2 && r2 >= 0xDC00 && r2 <= 0xDFFF {
						r = utf16.DecodeRune(r, r2)
					} else {
						p.i = save
					}
				}
				if utf16.IsSurrogate(r) {
					r = utf8.RuneError
				}
				b.WriteRune(r)
			default:
				return "", false
			}
		default:
			b.WriteByte(c)
			p.i++
		}
	}
	return "", false
}

func (p *jsonParser) hex4() (rune, bool) {
	if p.i+4 > len(p.s) {
		return 0, false
	}
	n, err := strconv.ParseUint(p.s[p.i:p.i+4], 16, 32)
	if err != nil {
		return 0, false
	}
	p.i += 4
	return rune(n), true
}

// parsePyLiteral decodes the subset of ast.literal_eval whose results
// json.dumps can write: True/False/None, int and float literals with an
// optional sign and '_' separators, single- or double-quoted strings,
// lists, tuples (as arrays, including a bare top-level "1, 2"), and dicts
// whose keys are strings, numbers, booleans or None (converted to strings
// as json.dumps does). Anything else (sets, bytes, complex numbers,
// triple-quoted or prefixed strings) fails, as does json.dumps on it.
func parsePyLiteral(s string) (value, bool) {
	p := pyParser{s: s}
	p.ws()
	v, ok := p.value(0)
	if !ok {
		return value{}, false
	}
	p.ws()
	if p.i < len(p.s) && p.s[p.i] == ',' { // a bare tuple
		items := []value{v}
		for p.i < len(p.s) && p.s[p.i] == ',' {
			p.i++
			p.ws()
			if p.i == len(p.s) {
				break
			}
			x, ok := p.value(0)
			if !ok {
				return value{}, false
			}
			items = append(items, x)
			p.ws()
		}
		v = value{kind: kindArray, arr: items}
	}
	return v, p.i == len(p.s)
}

type pyParser struct {
	s string
	i int
}

func (p *pyParser) ws() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r', '\f', '\v':
			p.i++
		default:
			return
		}
	}
}

// seq parses items up to the closing byte, allowing a trailing comma. It
// reports how many commas were seen (a tuple needs one to be a tuple).
func (p *pyParser) seq(end byte, depth int, item func() bool) (commas int, ok bool) {
	for {
		p.ws()
		if p.i < len(p.s) && p.s[p.i] == end {
			p.i++
			return commas, true
		}
		if !item() {
			return 0, false
		}
		p.ws()
		if p.i < len(p.s) && p.s[p.i] == ',' {
			p.i++
			commas++
			continue
		}
		if p.i < len(p.s) && p.s[p.i] == end {
			p.i++
			return commas, true
		}
		return 0, false
	}
}

func (p *pyParser) value(depth int) (value, bool) {
	if p.i >= len(p.s) || depth > maxDepth {
		return value{}, false
	}
	c := p.s[p.i]
	switch {
	case c == '[' || c == '(':
		end := byte(']')
		if c == '(' {
			end = ')'
		}
		p.i++
		arr := value{kind: kindArray, arr: []value{}}
		commas, ok := p.seq(end, depth, func() bool {
			x, ok := p.value(depth + 1)
			arr.arr = append(arr.arr, x)
			return ok
		})
		if !ok {
			return value{}, false
		}
		if c == '(' && len(arr.arr) == 1 && commas == 0 {
			return arr.arr[0], true // parenthesised expression, not a tuple
		}
		return arr, true
	case c == '{':
		p.i++
		obj := value{kind: kindObject}
		_, ok := p.seq('}', depth, func() bool {
			k, ok := p.value(depth + 1)
			if !ok {
				return false
			}
			key, ok := pyDictKey(k)
			if !ok {
				return false
			}
			p.ws()
			if p.i >= len(p.s) || p.s[p.i] != ':' {
				return false
			}
			p.i++
			p.ws()
			x, ok := p.value(depth + 1)
			if !ok {
				return false
			}
			obj.set(key, x)
			return true
		})
		if !ok {
			return value{}, false
		}
		return obj, true
	case c == '\'' || c == '"':
		s, ok := p.str()
		return value{kind: kindString, s: s}, ok
	case c == '+' || c == '-' || c == '.' || (c >= '0' && c <= '9'):
		return p.number()
	}
	for _, w := range [...]struct {
		name string
		v    value
	}{{"True", value{kind: kindBool, b: true}}, {"False", value{kind: kindBool}}, {"None", value{kind: kindNull}}} {
		if strings.HasPrefix(p.s[p.i:], w.name) && !identByte(p.s, p.i+len(w.name)) {
			p.i += len(w.name)
			return w.v, true
		}
	}
	return value{}, false
}

func identByte(s string, i int) bool {
	if i >= len(s) {
		return false
	}
	c := s[i]
	return c == '_' || c >= 0x80 || (c >= '0' && c <= '9') || (c|0x20 >= 'a' && c|0x20 <= 'z')
}

// pyDictKey converts a literal dict key the way json.dumps does.
func pyDictKey(k value) (string, bool) {
	switch k.kind {
	case kindString:
		return k.s, true
	case kindInt:
		return k.num, true
	case kindFloat:
		return string(pyfmt.AppendFloatRepr(nil, k.f)), true
	case kindBool:
		if k.b {
			return "true", true
		}
		return "false", true
	case kindNull:
		return "null", true
	}
	return "", false
}

// number parses [+-]? (int | float) in Python syntax (decimal only).
func (p *pyParser) number() (value, bool) {
	neg := false
	if c := p.s[p.i]; c == '+' || c == '-' {
		neg = c == '-'
		p.i++
		p.ws()
	}
	intPart, ok := p.digitRun()
	if !ok {
		return value{}, false
	}
	var frac, exp string
	isFloat := false
	if p.i < len(p.s) && p.s[p.i] == '.' {
		p.i++
		isFloat = true
		if frac, ok = p.digitRun(); !ok {
			return value{}, false
		}
	}
	if intPart == "" && frac == "" {
		return value{}, false
	}
	if p.i < len(p.s) && (p.s[p.i] == 'e' || p.s[p.i] == 'E') {
		p.i++
		sign := ""
		if p.i < len(p.s) && (p.s[p.i] == '+' || p.s[p.i] == '-') {
			sign = p.s[p.i : p.i+1]
			p.i++
		}
		d, ok := p.digitRun()
		if !ok || d == "" {
			return value{}, false
		}
		exp = sign + d
		isFloat = true
	}
	if identByte(p.s, p.i) { // 1j, 0x10, 1L, …
		return value{}, false
	}
	if !isFloat {
		if len(intPart) > 1 && strings.Trim(intPart, "0") != "" && intPart[0] == '0' {
			return value{}, false // 007 is a syntax error in Python 3
		}
		return value{kind: kindInt, num: canonicalInt(neg, intPart)}, true
	}
	text := intPart
	if text == "" {
		text = "0"
	}
	if frac != "" {
		text += "." + frac
	}
	if exp != "" {
		text += "e" + exp
	}
	if neg {
		text = "-" + text
	}
	return floatValue(text)
}

// digitRun reads decimal digits with single '_' separators between them
// and returns them without the separators.
func (p *pyParser) digitRun() (string, bool) {
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c >= '0' && c <= '9' {
			b.WriteByte(c)
			p.i++
			continue
		}
		if c == '_' && b.Len() > 0 && p.i+1 < len(p.s) && p.s[p.i+1] >= '0' && p.s[p.i+1] <= '9' {
			p.i++
			continue
		}
		break
	}
	return b.String(), true
}

// str parses a one-line Python string literal with the common escapes.
func (p *pyParser) str() (string, bool) {
	q := p.s[p.i]
	if strings.HasPrefix(p.s[p.i:], string([]byte{q, q, q})) {
		return "", false
	}
	p.i++
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == q:
			p.i++
			return b.String(), true
		case c == '\n' || c == '\r':
			return "", false
		case c == '\\':
			if p.i+1 >= len(p.s) {
				return "", false
			}
			e := p.s[p.i+1]
			p.i += 2
			switch e {
			case '\n':
			case '\\', '\'', '"':
				b.WriteByte(e)
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'v':
				b.WriteByte('\v')
			case 'a':
				b.WriteByte('\a')
			case '0':
				b.WriteByte(0)
			case 'x', 'u', 'U':
				n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
				if p.i+n > len(p.s) {
					return "", false
				}
				r, err := strconv.ParseUint(p.s[p.i:p.i+n], 16, 32)
				if err != nil || r > utf8.MaxRune {
					return "", false
				}
				p.i += n
				if utf16.IsSurrogate(rune(r)) {
					r = utf8.RuneError
				}
				b.WriteRune(rune(r))
			default: // unknown escapes keep the backslash in Python
				b.WriteByte('\\')
				b.WriteByte(e)
			}
		default:
			b.WriteByte(c)
			p.i++
		}
	}
	return "", false
}
