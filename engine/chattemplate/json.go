package chattemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/npuserve/npuserve/engine/pyfmt"
)

// maxJSONDepth bounds the nesting FromJSON accepts.
const maxJSONDepth = 1000

// FromJSON decodes one JSON document into a Value the way Python's
// json.loads would see it, but with objects as insertion-ordered [Map]s:
// integers become IntKind (floats when they overflow int64), numbers with
// a fraction or exponent FloatKind, null None. Duplicate keys keep the
// first position and the last value, as in Python.
func FromJSON(data []byte) (Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeJSONValue(dec, 0)
	if err != nil {
		return Value{}, fmt.Errorf("chattemplate: decode JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			err = errors.New("unexpected data after the JSON value")
		}
		return Value{}, fmt.Errorf("chattemplate: decode JSON: %w", err)
	}
	return v, nil
}

func decodeJSONValue(dec *json.Decoder, depth int) (Value, error) {
	if depth > maxJSONDepth {
		return Value{}, fmt.Errorf("nesting deeper than %d", maxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Value{}, err
	}
	return decodeJSONToken(dec, tok, depth)
}

func decodeJSONToken(dec *json.Decoder, tok json.Token, depth int) (Value, error) {
	switch t := tok.(type) {
	case nil:
		return None(), nil
	case bool:
		return Bool(t), nil
	case string:
		return String(t), nil
	case json.Number:
		return jsonNumber(string(t))
	case json.Delim:
		switch t {
		case '{':
			m := NewMap()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return Value{}, err
				}
				k, ok := kt.(string)
				if !ok {
					return Value{}, fmt.Errorf("object key is %T", kt)
				}
				v, err := decodeJSONValue(dec, depth+1)
				if err != nil {
					return Value{}, err
				}
				m.Set(k, v)
			}
			if _, err := dec.Token(); err != nil {
				return Value{}, err
			}
			return MapValue(m), nil
		case '[':
			items := []Value{}
			for dec.More() {
				v, err := decodeJSONValue(dec, depth+1)
				if err != nil {
					return Value{}, err
				}
				items = append(items, v)
			}
			if _, err := dec.Token(); err != nil {
				return Value{}, err
			}
			return List(items...), nil
		}
	}
	return Value{}, fmt.Errorf("unexpected JSON token %v", tok)
}

func jsonNumber(s string) (Value, error) {
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return Int(i), nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !math.IsInf(f, 0) {
		return Value{}, fmt.Errorf("bad number %q", s)
	}
	return Float(f), nil
}

// FromGo converts plain Go data into a Value: nil, bool, integers,
// floats, string, []any, []string, []Value, map[string]any (keys sorted,
// since Go maps have no order; use *Map or FromJSON to keep an order),
// *Map, Value and json.RawMessage.
func FromGo(x any) (Value, error) {
	switch t := x.(type) {
	case nil:
		return None(), nil
	case Value:
		return t, nil
	case *Map:
		return MapValue(t), nil
	case bool:
		return Bool(t), nil
	case int:
		return Int(int64(t)), nil
	case int8:
		return Int(int64(t)), nil
	case int16:
		return Int(int64(t)), nil
	case int32:
		return Int(int64(t)), nil
	case int64:
		return Int(t), nil
	case uint:
		return Int(int64(t)), nil
	case uint8:
		return Int(int64(t)), nil
	case uint16:
		return Int(int64(t)), nil
	case uint32:
		return Int(int64(t)), nil
	case uint64:
		if t > math.MaxInt64 {
			return Float(float64(t)), nil
		}
		return Int(int64(t)), nil
	case float32:
		return Float(float64(t)), nil
	case float64:
		return Float(t), nil
	case string:
		return String(t), nil
	case json.RawMessage:
		return FromJSON(t)
	case json.Number:
		return jsonNumber(string(t))
	case []string:
		return Strings(t...), nil
	case []Value:
		return List(t...), nil
	case []any:
		items := make([]Value, len(t))
		for i, e := range t {
			v, err := FromGo(e)
			if err != nil {
				return Value{}, err
			}
			items[i] = v
		}
		return List(items...), nil
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		m := NewMap()
		for _, k := range keys {
			v, err := FromGo(t[k])
			if err != nil {
				return Value{}, err
			}
			m.Set(k, v)
		}
		return MapValue(m), nil
	case map[string]string:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		m := NewMap()
		for _, k := range keys {
			m.Set(k, String(t[k]))
		}
		return MapValue(m), nil
	}
	return Value{}, fmt.Errorf("chattemplate: cannot convert %T to a template value", x)
}

// JSON returns json.dumps(v, ensure_ascii=False) with Python's default
// separators, keeping map order.
func (v Value) JSON() (string, error) {
	var b strings.Builder
	err := dumpJSON(&b, v, &jsonOptions{itemSep: pyfmt.ItemSep, keySep: pyfmt.KeySep}, 0)
	return b.String(), err
}

// jsonOptions are json.dumps' arguments.
type jsonOptions struct {
	ensureASCII bool
	indent      *string // nil: no newlines
	itemSep     string
	keySep      string
	sortKeys    bool
	budget      *int64 // bytes left; nil: unlimited
}

var errJSONBudget = errors.New("output too large")

// dumpJSON is Python's json.dumps.
func dumpJSON(b *strings.Builder, v Value, o *jsonOptions, level int) error {
	if o.budget != nil && int64(b.Len()) > *o.budget {
		return errJSONBudget
	}
	if level > maxJSONDepth {
		return &Error{Kind: ValueError, Message: "Circular reference detected"}
	}
	switch v.kind {
	case NoneKind:
		b.WriteString("null")
	case BoolKind:
		if v.b() {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case IntKind:
		b.WriteString(strconv.FormatInt(v.i(), 10))
	case FloatKind:
		b.WriteString(pyfmt.JSONFloat(v.f()))
	case StringKind:
		b.Write(pyfmt.AppendJSONString(nil, v.str, o.ensureASCII))
	case ListKind, TupleKind:
		if v.isRange() {
			return &Error{Kind: TypeError, Message: "Object of type range is not JSON serializable"}
		}
		items := v.list()
		if len(items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		nl := o.newline(level + 1)
		b.WriteString(nl)
		for i, x := range items {
			if i > 0 {
				b.WriteString(o.itemSep)
				b.WriteString(nl)
			}
			if err := dumpJSON(b, x, o, level+1); err != nil {
				return err
			}
		}
		b.WriteString(o.newline(level))
		b.WriteByte(']')
	case MapKind:
		m := v.ref.(*Map)
		if m.Len() == 0 {
			b.WriteString("{}")
			return nil
		}
		order := make([]int, m.Len())
		for i := range order {
			order[i] = i
		}
		if o.sortKeys {
			var err error
			if order, err = sortedIndexes(m.keys); err != nil {
				return err
			}
		}
		b.WriteByte('{')
		nl := o.newline(level + 1)
		b.WriteString(nl)
		for n, i := range order {
			if n > 0 {
				b.WriteString(o.itemSep)
				b.WriteString(nl)
			}
			k := m.keys[i]
			switch k.kind {
			case StringKind:
				b.Write(pyfmt.AppendJSONString(nil, k.str, o.ensureASCII))
			case IntKind, BoolKind, FloatKind, NoneKind:
				var ks string
				switch k.kind {
				case IntKind:
					ks = strconv.FormatInt(k.i(), 10)
				case FloatKind:
					ks = pyfmt.JSONFloat(k.f())
				default:
					var kb strings.Builder
					_ = dumpJSON(&kb, k, o, level)
					ks = kb.String()
				}
				b.Write(pyfmt.AppendJSONString(nil, ks, o.ensureASCII))
			default:
				return &Error{Kind: TypeError, Message: fmt.Sprintf("keys must be str, int, float, bool or None, not %s", k.typeName())}
			}
			b.WriteString(o.keySep)
			if err := dumpJSON(b, m.vals[i], o, level+1); err != nil {
				return err
			}
		}
		b.WriteString(o.newline(level))
		b.WriteByte('}')
	default:
		return &Error{Kind: TypeError, Message: fmt.Sprintf("Object of type %s is not JSON serializable", v.typeName())}
	}
	return nil
}

func (o *jsonOptions) newline(level int) string {
	if o.indent == nil {
		return ""
	}
	return "\n" + strings.Repeat(*o.indent, level)
}
