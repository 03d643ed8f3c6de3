package chattemplate

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/npuserve/npuserve/engine/pyfmt"
)

// Kind is the dynamic type of a [Value].
type Kind uint8

// The kinds of values. They mirror the Python types a Jinja2 template sees.
const (
	// UndefinedKind is Jinja2's Undefined: a missing variable, key or
	// attribute. It prints as "", is falsy and iterates as empty.
	UndefinedKind Kind = iota
	// NoneKind is Python's None (JSON null).
	NoneKind
	// BoolKind is a Python bool.
	BoolKind
	// IntKind is a Python int (limited to int64 here).
	IntKind
	// FloatKind is a Python float.
	FloatKind
	// StringKind is a Python str.
	StringKind
	// ListKind is a Python list.
	ListKind
	// TupleKind is a Python tuple.
	TupleKind
	// MapKind is a Python dict; insertion ordered.
	MapKind
	// NamespaceKind is the object namespace() returns; mutable.
	NamespaceKind
	// FuncKind is anything callable: macros, globals, bound methods.
	FuncKind
	// ObjectKind is another built-in object such as the loop variable.
	ObjectKind
)

var kindNames = [...]string{"undefined", "none", "bool", "int", "float", "string", "list", "tuple", "map", "namespace", "func", "object"}

// String returns the kind's name.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Value is a template value. The zero Value is Undefined. Values are
// immutable, except the [Map] behind a MapKind value built by the caller
// and namespaces, which templates change through {% set ns.x = ... %}.
type Value struct {
	kind Kind
	num  uint64 // bool, int64 bits or float64 bits
	str  string
	ref  any // *undefInfo, []Value, *Map, *Namespace, *function, object
}

// undefInfo says why a value is undefined, for error messages.
type undefInfo struct {
	name   string    // the missing name or attribute
	hasObj bool      // the attribute was looked up on obj
	obj    string    // Python type description of the object, e.g. "dict object"
	index  bool      // name was an item (non-string) lookup
	hint   string    // explicit message, wins over the rest
	exc    ErrorKind // error raised when used (default UndefinedError)
}

// Undefined returns Jinja2's Undefined.
func Undefined() Value { return Value{} }

// None returns Python's None.
func None() Value { return Value{kind: NoneKind} }

// Bool returns a bool value.
func Bool(b bool) Value {
	v := Value{kind: BoolKind}
	if b {
		v.num = 1
	}
	return v
}

// Int returns an int value.
func Int(i int64) Value { return Value{kind: IntKind, num: uint64(i)} }

// Float returns a float value.
func Float(f float64) Value { return Value{kind: FloatKind, num: math.Float64bits(f)} }

// String returns a str value. Invalid UTF-8 is kept as is.
func String(s string) Value { return Value{kind: StringKind, str: s} }

// List returns a list of the given items. The slice is not copied.
func List(items ...Value) Value {
	if items == nil {
		items = []Value{}
	}
	return Value{kind: ListKind, ref: items}
}

// Tuple returns a tuple of the given items. The slice is not copied.
func Tuple(items ...Value) Value {
	if items == nil {
		items = []Value{}
	}
	return Value{kind: TupleKind, ref: items}
}

// MapValue wraps an ordered map. A nil map becomes an empty one.
func MapValue(m *Map) Value {
	if m == nil {
		m = NewMap()
	}
	return Value{kind: MapKind, ref: m}
}

// Strings returns a list of strings.
func Strings(ss ...string) Value {
	items := make([]Value, len(ss))
	for i, s := range ss {
		items[i] = String(s)
	}
	return List(items...)
}

// undefinedNamed is the Undefined for a missing variable.
func undefinedNamed(name string) Value {
	return Value{ref: &undefInfo{name: name}}
}

// undefinedAttr is the Undefined for a missing attribute or item of obj.
func undefinedAttr(obj Value, name Value) Value {
	u := &undefInfo{hasObj: true, obj: objectTypeRepr(obj)}
	if name.kind == StringKind {
		u.name = name.str
	} else {
		u.index = true
		u.name = name.Repr()
	}
	return Value{ref: u}
}

// undefinedHint is an Undefined with an explicit message.
func undefinedHint(hint string) Value { return Value{ref: &undefInfo{hint: hint}} }

// undefinedMessage is the text of the UndefinedError raised when an
// undefined value is used in an operation it does not support.
func (v Value) undefinedMessage() string {
	u, _ := v.ref.(*undefInfo)
	switch {
	case u == nil:
		return "undefined value"
	case u.hint != "":
		return u.hint
	case !u.hasObj:
		return pyfmt.Repr(u.name) + " is undefined"
	case u.index:
		return u.obj + " has no element " + u.name
	default:
		return pyfmt.Repr(u.obj) + " has no attribute " + pyfmt.Repr(u.name)
	}
}

// Kind returns the value's kind.
func (v Value) Kind() Kind { return v.kind }

// IsUndefined reports whether v is Undefined.
func (v Value) IsUndefined() bool { return v.kind == UndefinedKind }

// IsNone reports whether v is None.
func (v Value) IsNone() bool { return v.kind == NoneKind }

// AsBool returns the bool of a BoolKind value.
func (v Value) AsBool() (bool, bool) { return v.num != 0, v.kind == BoolKind }

// AsInt returns the integer of an IntKind (or BoolKind) value.
func (v Value) AsInt() (int64, bool) {
	switch v.kind {
	case IntKind, BoolKind:
		return int64(v.num), true
	}
	return 0, false
}

// needInt is AsInt with Python's TypeError for any other value.
func (v Value) needInt() (int64, error) {
	n, ok := v.AsInt()
	if !ok {
		return 0, newErr(TypeError, "'%s' object cannot be interpreted as an integer", v.typeName())
	}
	return n, nil
}

// AsFloat returns the number of an int, bool or float value as a float64.
func (v Value) AsFloat() (float64, bool) {
	switch v.kind {
	case FloatKind:
		return math.Float64frombits(v.num), true
	case IntKind, BoolKind:
		return float64(int64(v.num)), true
	}
	return 0, false
}

// AsString returns the text of a StringKind value.
func (v Value) AsString() (string, bool) { return v.str, v.kind == StringKind }

// Items returns the elements of a list or tuple (not a copy).
func (v Value) Items() []Value {
	if v.kind == ListKind || v.kind == TupleKind {
		return v.ref.([]Value)
	}
	return nil
}

// AsMap returns the map of a MapKind value.
func (v Value) AsMap() *Map {
	if v.kind == MapKind {
		return v.ref.(*Map)
	}
	return nil
}

// Get returns the value stored under a string key of a map, or
// Undefined.
func (v Value) Get(key string) Value {
	if m := v.AsMap(); m != nil {
		if x, ok := m.Get(key); ok {
			return x
		}
	}
	return Undefined()
}

func (v Value) i() int64   { return int64(v.num) }
func (v Value) f() float64 { return math.Float64frombits(v.num) }
func (v Value) b() bool    { return v.num != 0 }
func (v Value) list() []Value {
	l, _ := v.ref.([]Value)
	return l
}
func (v Value) isNumber() bool {
	return v.kind == IntKind || v.kind == FloatKind || v.kind == BoolKind
}
func (v Value) isSeq() bool { return v.kind == ListKind || v.kind == TupleKind }

// Truth is Python's bool(v).
func (v Value) Truth() bool {
	switch v.kind {
	case UndefinedKind, NoneKind:
		return false
	case BoolKind, IntKind:
		return v.num != 0
	case FloatKind:
		return v.f() != 0
	case StringKind:
		return v.str != ""
	case ListKind, TupleKind:
		return len(v.list()) > 0
	case MapKind:
		return v.ref.(*Map).Len() > 0
	case ObjectKind:
		if t, ok := v.ref.(truthObject); ok {
			return t.truth()
		}
	}
	return true
}

// String is Python's str(v), as {{ v }} prints it. Undefined prints as "".
func (v Value) String() string {
	switch v.kind {
	case UndefinedKind:
		return ""
	case StringKind:
		return v.str
	}
	var b strings.Builder
	v.writeRepr(&b, false)
	return b.String()
}

// Repr is Python's repr(v).
func (v Value) Repr() string {
	var b strings.Builder
	v.writeRepr(&b, true)
	return b.String()
}

// writeRepr writes str(v) (top=false) or repr(v) (top=true). Containers
// always use repr for their elements.
func (v Value) writeRepr(b *strings.Builder, quote bool) {
	switch v.kind {
	case UndefinedKind:
		if quote {
			b.WriteString("Undefined")
		}
	case NoneKind:
		b.WriteString("None")
	case BoolKind:
		if v.b() {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case IntKind:
		b.WriteString(strconv.FormatInt(v.i(), 10))
	case FloatKind:
		b.WriteString(pyfmt.FloatRepr(v.f()))
	case StringKind:
		if quote {
			b.WriteString(pyfmt.Repr(v.str))
		} else {
			b.WriteString(v.str)
		}
	case ListKind:
		if v.str != "" {
			b.WriteString(v.str) // range()
			return
		}
		b.WriteByte('[')
		for i, x := range v.list() {
			if i > 0 {
				b.WriteString(", ")
			}
			x.writeRepr(b, true)
		}
		b.WriteByte(']')
	case TupleKind:
		l := v.list()
		b.WriteByte('(')
		for i, x := range l {
			if i > 0 {
				b.WriteString(", ")
			}
			x.writeRepr(b, true)
		}
		if len(l) == 1 {
			b.WriteByte(',')
		}
		b.WriteByte(')')
	case MapKind:
		v.ref.(*Map).writeRepr(b)
	case NamespaceKind:
		b.WriteString("<Namespace ")
		v.ref.(*Namespace).attrs.writeRepr(b)
		b.WriteByte('>')
	case FuncKind:
		b.WriteString(v.ref.(*function).repr())
	case ObjectKind:
		b.WriteString(v.ref.(object).repr())
	}
}

// objectTypeRepr is jinja2.utils.object_type_repr: how error messages
// name the type of an object.
func objectTypeRepr(v Value) string {
	switch v.kind {
	case NoneKind:
		return "None"
	case UndefinedKind:
		return "jinja2.runtime.Undefined object"
	}
	return v.typeName() + " object"
}

// typeName is Python's type(v).__name__.
func (v Value) typeName() string {
	switch v.kind {
	case UndefinedKind:
		return "Undefined"
	case NoneKind:
		return "NoneType"
	case BoolKind:
		return "bool"
	case IntKind:
		return "int"
	case FloatKind:
		return "float"
	case StringKind:
		return "str"
	case ListKind:
		if v.str != "" {
			return "range"
		}
		return "list"
	case TupleKind:
		return "tuple"
	case MapKind:
		return "dict"
	case NamespaceKind:
		return "Namespace"
	case FuncKind:
		return v.ref.(*function).typeName()
	case ObjectKind:
		return v.ref.(object).typeName()
	}
	return "object"
}

// Map is an insertion-ordered dictionary, the Python dict of template
// values. Keys are usually strings (JSON objects); numbers, bools, None
// and tuples are allowed as in Python and compare as Python does
// (1, 1.0 and True are the same key).
type Map struct {
	keys  []Value
	vals  []Value
	index map[mapKey]int // built once the map grows past smallMap entries
}

const smallMap = 8

// mapKey is the hashable identity of a key.
type mapKey struct {
	kind uint8 // 0 string, 1 int, 2 float, 3 none, 4 other (by repr)
	s    string
	n    uint64
}

// NewMap returns an empty map.
func NewMap() *Map { return &Map{} }

func keyOf(k Value) (mapKey, bool) {
	switch k.kind {
	case StringKind:
		return mapKey{s: k.str}, true
	case IntKind, BoolKind:
		return mapKey{kind: 1, n: k.num}, true
	case FloatKind:
		f := k.f()
		if f == math.Trunc(f) && math.Abs(f) < 1<<63 {
			return mapKey{kind: 1, n: uint64(int64(f))}, true
		}
		return mapKey{kind: 2, n: k.num}, true
	case NoneKind:
		return mapKey{kind: 3}, true
	case ListKind:
		if k.isRange() {
			return mapKey{kind: 6, s: k.str}, true
		}
	case ObjectKind, FuncKind, NamespaceKind:
		// Hashed by identity, like Python objects without __hash__.
		return mapKey{kind: 5, s: fmt.Sprintf("%p", k.ref)}, true
	case TupleKind:
		for _, x := range k.list() {
			if _, ok := keyOf(x); !ok {
				return mapKey{}, false
			}
		}
		return mapKey{kind: 4, s: k.Repr()}, true
	}
	return mapKey{}, false
}

// Len returns the number of entries.
func (m *Map) Len() int {
	if m == nil {
		return 0
	}
	return len(m.keys)
}

func (m *Map) find(k mapKey) int {
	if m.index != nil {
		if i, ok := m.index[k]; ok {
			return i
		}
		return -1
	}
	for i, x := range m.keys {
		if xk, _ := keyOf(x); xk == k {
			return i
		}
	}
	return -1
}

// Set stores v under the string key k, keeping the position of an
// existing key as Python does.
func (m *Map) Set(k string, v Value) { m.set(String(k), mapKey{s: k}, v) }

// SetKey stores v under a key of any hashable kind. It reports false for
// unhashable keys (lists, dicts).
func (m *Map) SetKey(k, v Value) bool {
	mk, ok := keyOf(k)
	if !ok {
		return false
	}
	m.set(k, mk, v)
	return true
}

func (m *Map) set(k Value, mk mapKey, v Value) {
	if i := m.find(mk); i >= 0 {
		m.vals[i] = v
		return
	}
	m.keys = append(m.keys, k)
	m.vals = append(m.vals, v)
	if m.index != nil {
		m.index[mk] = len(m.keys) - 1
	} else if len(m.keys) > smallMap {
		m.index = make(map[mapKey]int, len(m.keys)*2)
		for i, x := range m.keys {
			xk, _ := keyOf(x)
			m.index[xk] = i
		}
	}
}

// Get returns the value under the string key k.
func (m *Map) Get(k string) (Value, bool) {
	if m == nil {
		return Value{}, false
	}
	if i := m.find(mapKey{s: k}); i >= 0 {
		return m.vals[i], true
	}
	return Value{}, false
}

// GetKey returns the value under a key of any kind.
func (m *Map) GetKey(k Value) (Value, bool) {
	if m == nil {
		return Value{}, false
	}
	mk, ok := keyOf(k)
	if !ok {
		return Value{}, false
	}
	if i := m.find(mk); i >= 0 {
		return m.vals[i], true
	}
	return Value{}, false
}

// Keys returns the keys in insertion order (not a copy).
func (m *Map) Keys() []Value {
	if m == nil {
		return nil
	}
	return m.keys
}

// Values returns the values in insertion order (not a copy).
func (m *Map) Values() []Value {
	if m == nil {
		return nil
	}
	return m.vals
}

// Clone returns a shallow copy.
func (m *Map) Clone() *Map {
	c := &Map{keys: append([]Value(nil), m.keys...), vals: append([]Value(nil), m.vals...)}
	if m.index != nil {
		c.index = make(map[mapKey]int, len(m.index))
		for k, i := range m.index {
			c.index[k] = i
		}
	}
	return c
}

func (m *Map) writeRepr(b *strings.Builder) {
	b.WriteByte('{')
	for i, k := range m.keys {
		if i > 0 {
			b.WriteString(", ")
		}
		k.writeRepr(b, true)
		b.WriteString(": ")
		m.vals[i].writeRepr(b, true)
	}
	b.WriteByte('}')
}

// Namespace is the mutable attribute bag returned by namespace().
type Namespace struct{ attrs *Map }

// Equal is Python's ==.
func Equal(a, b Value) bool {
	if a.isNumber() && b.isNumber() {
		if a.kind == FloatKind || b.kind == FloatKind {
			x, _ := a.AsFloat()
			y, _ := b.AsFloat()
			return x == y
		}
		return a.num == b.num
	}
	if a.kind != b.kind {
		return false
	}
	switch a.kind {
	case UndefinedKind, NoneKind:
		return true
	case StringKind:
		return a.str == b.str
	case ListKind, TupleKind:
		if a.isRange() != b.isRange() {
			return false
		}
		x, y := a.list(), b.list()
		if len(x) != len(y) {
			return false
		}
		for i := range x {
			if !Equal(x[i], y[i]) {
				return false
			}
		}
		return true
	case MapKind:
		x, y := a.ref.(*Map), b.ref.(*Map)
		if x.Len() != y.Len() {
			return false
		}
		for i, k := range x.keys {
			v, ok := y.GetKey(k)
			if !ok || !Equal(x.vals[i], v) {
				return false
			}
		}
		return true
	}
	return a.ref == b.ref
}

// sortedIndexes returns the indexes of keys in sorted order, or an error
// when the keys are not mutually comparable (Python's TypeError).
func sortedIndexes(keys []Value) ([]int, error) {
	idx := make([]int, len(keys))
	for i := range idx {
		idx[i] = i
	}
	var err error
	sort.SliceStable(idx, func(i, j int) bool {
		c, e := compare(keys[idx[i]], keys[idx[j]])
		if e != nil && err == nil {
			err = e
		}
		return c < 0
	})
	return idx, err
}

// valueSize is the memory a Value takes, for the allocation accounting of
// Limits.MaxAllocBytes.
const valueSize = 48 // unsafe.Sizeof(Value{}) on 64-bit platforms
