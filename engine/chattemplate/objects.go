package chattemplate

import "strings"

// Python's lazy iterators and dict views. Jinja2's map, select, reject,
// selectattr, rejectattr, unique and items filters return generators,
// reverse returns a reverse iterator, and dict.items()/keys()/values()
// return views. They differ from lists in ways templates can observe: a
// generator is always true (even when empty), has no len(), can be
// iterated once and prints as "<generator object ...>".

// sizedObject is an object with len().
type sizedObject interface {
	length() int
}

// truthObject is an object with its own truth value.
type truthObject interface {
	truth() bool
}

// genObj is a one-shot iterator. Like a Python generator it computes
// its items (and raises its errors) only when first iterated.
type genObj struct {
	typ     string // generator, list_reverseiterator, ...
	items   []Value
	compute func() ([]Value, error)
	used    bool
}

func newGenerator(typ string, items []Value) Value {
	return Value{kind: ObjectKind, ref: &genObj{typ: typ, items: items}}
}

// lazyGenerator is a generator whose items come from compute.
func lazyGenerator(compute func() ([]Value, error)) Value {
	return Value{kind: ObjectKind, ref: &genObj{typ: "generator", compute: compute}}
}

func (g *genObj) typeName() string { return g.typ }
func (g *genObj) repr() string {
	if g.typ == "generator" {
		return "<generator object>"
	}
	return "<" + g.typ + " object>"
}
func (g *genObj) getAttr(name string) (Value, bool) { return Value{}, false }
func (g *genObj) iter() ([]Value, error) {
	if g.used {
		return nil, nil
	}
	g.used = true
	if g.compute != nil {
		return g.compute()
	}
	return g.items, nil
}

// viewObj is a dict view (dict_items, dict_keys, dict_values).
type viewObj struct {
	typ   string
	items []Value
}

func newView(typ string, items []Value) Value {
	return Value{kind: ObjectKind, ref: &viewObj{typ: typ, items: items}}
}

func (v *viewObj) typeName() string                  { return v.typ }
func (v *viewObj) getAttr(name string) (Value, bool) { return Value{}, false }
func (v *viewObj) iter() ([]Value, error)            { return v.items, nil }
func (v *viewObj) length() int                       { return len(v.items) }
func (v *viewObj) truth() bool                       { return len(v.items) > 0 }
func (v *viewObj) repr() string {
	var b strings.Builder
	b.WriteString(v.typ)
	b.WriteString("([")
	for i, x := range v.items {
		if i > 0 {
			b.WriteString(", ")
		}
		x.writeRepr(&b, true)
	}
	b.WriteString("])")
	return b.String()
}

// rangeRepr is how a range() result prints; range values are lists
// carrying this text in their str field.
func rangeRepr(start, stop, step int64) string {
	s := "range(" + itoa(int(start)) + ", " + itoa(int(stop))
	if step != 1 {
		s += ", " + itoa(int(step))
	}
	return s + ")"
}

// isRange reports whether v is a range() result.
func (v Value) isRange() bool { return v.kind == ListKind && v.str != "" }
