package chattemplate

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/npuserve/npuserve/engine/pyfmt"
)

// object is a built-in object with attributes (the loop variable,
// cycler, joiner).
type object interface {
	getAttr(name string) (Value, bool)
	repr() string
	typeName() string
}

// iterableObject is an object Python can iterate.
type iterableObject interface {
	iter() ([]Value, error)
}

// namedArg is a keyword argument of a call.
type namedArg struct {
	name string
	v    Value
}

// function is a callable value: a builtin, a bound method or a macro.
type function struct {
	name    string
	self    Value // receiver of a bound method (kind Undefined otherwise)
	fn      func(r *renderer, args []Value, kw []namedArg) (Value, error)
	macro   *macroDef
	closure *scope
}

func (f *function) typeName() string {
	switch {
	case f.macro != nil:
		return "Macro"
	case f.self.kind != UndefinedKind:
		return "builtin_function_or_method"
	}
	return "function"
}

func (f *function) repr() string {
	switch {
	case f.macro != nil:
		return "<Macro '" + f.name + "'>"
	case f.self.kind != UndefinedKind:
		return "<built-in method " + f.name + " of " + f.self.typeName() + " object>"
	}
	return "<function " + f.name + ">"
}

func builtinFunc(name string, fn func(r *renderer, args []Value, kw []namedArg) (Value, error)) Value {
	return Value{kind: FuncKind, ref: &function{name: name, fn: fn}}
}

func (r *renderer) newMacro(def *macroDef, sc *scope) Value {
	return Value{kind: FuncKind, ref: &function{name: def.name, macro: def, closure: sc}}
}

func (r *renderer) eval(e expr, sc *scope) (Value, error) {
	if err := r.step(); err != nil {
		return Value{}, withPos(err, e.position())
	}
	v, err := r.eval1(e, sc)
	if err != nil {
		return Value{}, withPos(err, e.position())
	}
	return v, nil
}

func (r *renderer) eval1(e expr, sc *scope) (Value, error) {
	switch x := e.(type) {
	case *constExpr:
		return x.v, nil
	case *nameExpr:
		if r.constMode {
			return Value{}, errImpossible
		}
		return r.lookup(x.name, sc), nil
	case *getattrExpr:
		obj, err := r.eval(x.obj, sc)
		if err != nil {
			return Value{}, err
		}
		return getAttr(obj, x.attr)
	case *getitemExpr:
		obj, err := r.eval(x.obj, sc)
		if err != nil {
			return Value{}, err
		}
		if s, ok := x.key.(*sliceExpr); ok {
			return r.evalSlice(obj, s, sc)
		}
		key, err := r.eval(x.key, sc)
		if err != nil {
			return Value{}, err
		}
		return getItem(obj, key)
	case *callExpr:
		if r.constMode {
			return Value{}, errImpossible
		}
		return r.evalCall(x, sc, nil)
	case *filterExpr:
		if r.constMode && (contextFilters[x.name] || x.in == nil) {
			return Value{}, errImpossible
		}
		return r.applyFilterChain(x, Value{}, sc)
	case *testExpr:
		v, err := r.eval(x.in, sc)
		if err != nil {
			return Value{}, err
		}
		args, kw, err := r.evalArgs(x.callArgs, sc)
		if err != nil {
			return Value{}, err
		}
		ok, err := r.callTest(x.name, v, args, kw)
		return Bool(ok), err
	case *notExpr:
		v, err := r.eval(x.e, sc)
		if err != nil {
			return Value{}, err
		}
		return Bool(!v.Truth()), nil
	case *negExpr:
		v, err := r.eval(x.e, sc)
		if err != nil {
			return Value{}, err
		}
		return unaryOp(x.neg, v)
	case *binExpr:
		a, err := r.eval(x.l, sc)
		if err != nil {
			return Value{}, err
		}
		b, err := r.eval(x.r, sc)
		if err != nil {
			return Value{}, err
		}
		return r.binaryOp(x.op, a, b)
	case *concatExpr:
		var b strings.Builder
		for _, it := range x.items {
			v, err := r.eval(it, sc)
			if err != nil {
				return Value{}, err
			}
			b.WriteString(v.String())
			if b.Len() > r.lim.MaxOutputBytes {
				return Value{}, newErr(LimitError, "string exceeds %d bytes", r.lim.MaxOutputBytes)
			}
		}
		if err := r.charge(b.Len()); err != nil {
			return Value{}, err
		}
		return String(b.String()), nil
	case *compareExpr:
		a, err := r.eval(x.first, sc)
		if err != nil {
			return Value{}, err
		}
		for _, op := range x.ops {
			b, err := r.eval(op.e, sc)
			if err != nil {
				return Value{}, err
			}
			ok, err := compareOp(op.op, a, b)
			if err != nil {
				return Value{}, withPos(err, op.e.position())
			}
			if !ok {
				return Bool(false), nil
			}
			a = b
		}
		return Bool(true), nil
	case *andExpr:
		a, err := r.eval(x.l, sc)
		if err != nil || !a.Truth() {
			return a, err
		}
		return r.eval(x.r, sc)
	case *orExpr:
		a, err := r.eval(x.l, sc)
		if err != nil || a.Truth() {
			return a, err
		}
		return r.eval(x.r, sc)
	case *condExpr:
		c, err := r.eval(x.test, sc)
		if err != nil {
			return Value{}, err
		}
		if c.Truth() {
			return r.eval(x.yes, sc)
		}
		if x.no == nil {
			line, _ := lineCol(r.t.src, x.p)
			return undefinedHint(fmt.Sprintf("the inline if-expression on line %d evaluated to false and no else section was defined.", line)), nil
		}
		return r.eval(x.no, sc)
	case *listExpr, *tupleExpr:
		var src []expr
		kind := ListKind
		if l, ok := x.(*listExpr); ok {
			src = l.items
		} else {
			src = x.(*tupleExpr).items
			kind = TupleKind
		}
		items := make([]Value, len(src))
		for i, it := range src {
			v, err := r.eval(it, sc)
			if err != nil {
				return Value{}, err
			}
			items[i] = v
		}
		if err := r.charge(valueSize * len(items)); err != nil {
			return Value{}, err
		}
		return Value{kind: kind, ref: items}, nil
	case *dictExpr:
		m := NewMap()
		for i := range x.keys {
			k, err := r.eval(x.keys[i], sc)
			if err != nil {
				return Value{}, err
			}
			v, err := r.eval(x.vals[i], sc)
			if err != nil {
				return Value{}, err
			}
			if !m.SetKey(k, v) {
				return Value{}, withPos(newErr(TypeError, "unhashable type: '%s'", k.typeName()), x.keys[i].position())
			}
		}
		if err := r.charge(2 * valueSize * m.Len()); err != nil {
			return Value{}, err
		}
		return MapValue(m), nil
	case *sliceExpr:
		return Value{}, newErr(TypeError, "slice outside of a subscript")
	}
	return Value{}, newErr(UnsupportedError, "unknown expression %T", e)
}

// evalArgs evaluates call arguments, expanding *args and **kwargs.
func (r *renderer) evalArgs(ca callArgs, sc *scope) ([]Value, []namedArg, error) {
	var args []Value
	if len(ca.args) > 0 {
		args = make([]Value, 0, len(ca.args))
	}
	for _, a := range ca.args {
		v, err := r.eval(a, sc)
		if err != nil {
			return nil, nil, err
		}
		args = append(args, v)
	}
	var kw []namedArg
	for _, k := range ca.kwargs {
		v, err := r.eval(k.e, sc)
		if err != nil {
			return nil, nil, err
		}
		kw = append(kw, namedArg{k.name, v})
	}
	if ca.dynArgs != nil {
		v, err := r.eval(ca.dynArgs, sc)
		if err != nil {
			return nil, nil, err
		}
		items, err := iterate(v)
		if err != nil {
			return nil, nil, withPos(err, ca.dynArgs.position())
		}
		args = append(args, items...)
	}
	if ca.dynKwargs != nil {
		v, err := r.eval(ca.dynKwargs, sc)
		if err != nil {
			return nil, nil, err
		}
		m := v.AsMap()
		if m == nil {
			return nil, nil, withPos(newErr(TypeError, "argument after ** must be a mapping, not %s", v.typeName()), ca.dynKwargs.position())
		}
		for i, k := range m.keys {
			if k.kind != StringKind {
				return nil, nil, newErr(TypeError, "keywords must be strings")
			}
			kw = append(kw, namedArg{k.str, m.vals[i]})
		}
	}
	return args, kw, nil
}

// evalCall evaluates a call; caller, when set, is passed as the caller
// keyword argument ({% call %} blocks).
func (r *renderer) evalCall(x *callExpr, sc *scope, caller *Value) (Value, error) {
	fn, err := r.eval(x.fn, sc)
	if err != nil {
		return Value{}, err
	}
	args, kw, err := r.evalArgs(x.callArgs, sc)
	if err != nil {
		return Value{}, err
	}
	if caller != nil {
		kw = append(kw, namedArg{"caller", *caller})
	}
	v, err := r.call(fn, args, kw)
	return v, withPos(err, x.p)
}

// call calls a callable value.
func (r *renderer) call(fn Value, args []Value, kw []namedArg) (Value, error) {
	switch fn.kind {
	case FuncKind:
		f := fn.ref.(*function)
		if f.macro != nil {
			return r.callMacro(f, args, kw)
		}
		return f.fn(r, args, kw)
	case UndefinedKind:
		return Value{}, undefErr(fn)
	}
	return Value{}, newErr(TypeError, "'%s' object is not callable", fn.typeName())
}

// callMacro is jinja2.runtime.Macro.__call__ followed by the macro body.
func (r *renderer) callMacro(f *function, args []Value, kw []namedArg) (Value, error) {
	def := f.macro
	if r.depth >= r.lim.MaxDepth {
		return Value{}, newErr(LimitError, "macro calls nested deeper than %d", r.lim.MaxDepth)
	}
	kwLeft := append([]namedArg(nil), kw...)
	pop := func(name string) (Value, bool) {
		for i, k := range kwLeft {
			if k.name == name {
				kwLeft = append(kwLeft[:i], kwLeft[i+1:]...)
				return k.v, true
			}
		}
		return Value{}, false
	}
	n := len(def.params)
	sc := r.enterFrame(f.closure, def.frame)
	given := make([]bool, n)
	vals := make([]Value, n)
	for i := 0; i < n && i < len(args); i++ {
		vals[i], given[i] = args[i], true
	}
	for i := len(args); i < n; i++ {
		vals[i], given[i] = pop(def.params[i])
	}
	if def.usesCall {
		c, ok := pop("caller")
		if !ok {
			c = undefinedHint("No caller defined")
		}
		sc.set("caller", c)
	}
	if def.usesKw {
		m := NewMap()
		for _, k := range kwLeft {
			m.Set(k.name, k.v)
		}
		sc.set("kwargs", MapValue(m))
	} else if len(kwLeft) > 0 {
		if kwLeft[0].name == "caller" {
			return Value{}, newErr(TypeError, "macro '%s' was invoked with two values for the special caller argument. This is most likely a bug.", def.name)
		}
		return Value{}, newErr(TypeError, "macro '%s' takes no keyword argument '%s'", def.name, kwLeft[0].name)
	}
	if def.usesVar {
		var extra []Value
		if len(args) > n {
			extra = append(extra, args[n:]...)
		}
		sc.set("varargs", Tuple(extra...))
	} else if len(args) > n {
		return Value{}, newErr(TypeError, "macro '%s' takes not more than %d argument(s)", def.name, n)
	}
	firstDefault := n - len(def.defaults)
	for i, name := range def.params {
		v := vals[i]
		if !given[i] {
			if i >= firstDefault {
				d, err := r.eval(def.defaults[i-firstDefault], sc)
				if err != nil {
					return Value{}, err
				}
				v = d
			} else {
				v = Value{ref: &undefInfo{name: name, hint: fmt.Sprintf("parameter '%s' was not provided", name)}}
			}
		}
		sc.set(name, v)
	}
	r.depth++
	s, err := r.capture(def.body, sc)
	r.depth--
	if err != nil {
		return Value{}, err
	}
	return String(s), nil
}

// evalSlice evaluates obj[start:stop:step].
func (r *renderer) evalSlice(obj Value, s *sliceExpr, sc *scope) (Value, error) {
	var parts [3]Value
	for i, e := range []expr{s.start, s.stop, s.step} {
		if e == nil {
			parts[i] = None()
			continue
		}
		v, err := r.eval(e, sc)
		if err != nil {
			return Value{}, err
		}
		parts[i] = v
	}
	if obj.kind == UndefinedKind {
		return Value{}, undefErr(obj)
	}
	v, err := sliceValue(obj, parts[0], parts[1], parts[2])
	if err != nil && r.constMode {
		// Constant folding goes through environment.getitem, which turns
		// the TypeError into Undefined (see optimize.go).
		if e, ok := err.(*Error); ok && e.Kind == TypeError {
			name := "slice(" + parts[0].Repr() + ", " + parts[1].Repr() + ", " + parts[2].Repr() + ")"
			return Value{ref: &undefInfo{hasObj: true, obj: objectTypeRepr(obj), index: true, name: name}}, nil
		}
	}
	return v, err
}

// sliceIndices is PySlice_GetIndicesEx: it resolves slice parts against a
// sequence of length n.
func sliceIndices(n int, start, stop, step Value) (int, int, int, bool, error) {
	get := func(v Value) (int, bool, bool) {
		switch v.kind {
		case NoneKind:
			return 0, false, true
		case IntKind, BoolKind:
			return int(v.i()), true, true
		}
		return 0, false, false
	}
	st, hasStep, ok := get(step)
	if !ok {
		return 0, 0, 0, false, nil
	}
	if !hasStep {
		st = 1
	}
	if st == 0 {
		return 0, 0, 0, false, newErr(ValueError, "slice step cannot be zero")
	}
	a, hasA, ok1 := get(start)
	b, hasB, ok2 := get(stop)
	if !ok1 || !ok2 {
		return 0, 0, 0, false, nil
	}
	adjust := func(x int, has bool, def int) int {
		if !has {
			return def
		}
		if x < 0 {
			x += n
			if x < 0 {
				if st < 0 {
					return -1
				}
				return 0
			}
		} else if x >= n {
			if st < 0 {
				return n - 1
			}
			return n
		}
		return x
	}
	if st > 0 {
		a = adjust(a, hasA, 0)
		b = adjust(b, hasB, n)
	} else {
		a = adjust(a, hasA, n-1)
		b = adjust(b, hasB, -1)
	}
	return a, b, st, true, nil
}

func sliceValue(obj, start, stop, step Value) (Value, error) {
	var n int
	var runes []rune
	switch obj.kind {
	case ListKind, TupleKind:
		n = len(obj.list())
	case StringKind:
		if isASCII(obj.str) {
			n = len(obj.str)
		} else {
			runes = []rune(obj.str)
			n = len(runes)
		}
	case MapKind:
		return Value{}, newErr(TypeError, "unhashable type: 'slice'")
	default:
		return Value{}, newErr(TypeError, "'%s' object is not subscriptable", obj.typeName())
	}
	a, b, st, ok, err := sliceIndices(n, start, stop, step)
	if err != nil {
		return Value{}, err
	}
	if !ok {
		return Value{}, newErr(TypeError, "slice indices must be integers or None or have an __index__ method")
	}
	var idx []int
	if st > 0 {
		for i := a; i < b; i += st {
			idx = append(idx, i)
		}
	} else {
		for i := a; i > b; i += st {
			idx = append(idx, i)
		}
	}
	switch obj.kind {
	case StringKind:
		if st == 1 {
			if runes == nil {
				if a >= b {
					return String(""), nil
				}
				return String(obj.str[a:b]), nil
			}
			if a >= b {
				return String(""), nil
			}
			return String(string(runes[a:b])), nil
		}
		var sb strings.Builder
		for _, i := range idx {
			if runes == nil {
				sb.WriteByte(obj.str[i])
			} else {
				sb.WriteRune(runes[i])
			}
		}
		return String(sb.String()), nil
	default:
		l := obj.list()
		out := make([]Value, len(idx))
		for j, i := range idx {
			out[j] = l[i]
		}
		v := Value{kind: obj.kind, ref: out}
		if obj.isRange() {
			// range(a, b, s)[i:j:k] is range(a+i*s, a+j*s, s*k).
			var ra, rb, rs int64 = 0, 0, 1
			if p := strings.Split(strings.TrimSuffix(strings.TrimPrefix(obj.str, "range("), ")"), ", "); len(p) >= 2 {
				ra, _ = strconv.ParseInt(p[0], 10, 64)
				if len(p) == 3 {
					rs, _ = strconv.ParseInt(p[2], 10, 64)
				}
			}
			rb = ra + int64(b)*rs
			if st < 0 && b < 0 {
				rb = ra - rs
			}
			v.str = rangeRepr(ra+int64(a)*rs, rb, rs*int64(st))
		}
		return v, nil
	}
}

// unsafeMethods are the mutating methods the immutable sandbox refuses
// (ImmutableSandboxedEnvironment's modifies_known_mutable).
var unsafeMethods = map[Kind]map[string]bool{
	MapKind:  {"clear": true, "pop": true, "popitem": true, "setdefault": true, "update": true},
	ListKind: {"append": true, "clear": true, "extend": true, "insert": true, "pop": true, "remove": true, "reverse": true, "sort": true},
}

// getAttr is the sandboxed environment's getattr(obj, name): Python
// attributes first (methods), then obj[name].
func getAttr(obj Value, name string) (Value, error) {
	switch obj.kind {
	case UndefinedKind:
		return Value{}, undefErr(obj)
	case MapKind, StringKind, ListKind, TupleKind:
		if unsafeMethods[obj.kind][name] {
			return unsafeUndefined(obj, name), nil
		}
		if m, ok := lookupMethod(obj, name); ok {
			return m, nil
		}
		if strings.HasPrefix(name, "__") && strings.HasSuffix(name, "__") {
			return unsafeUndefined(obj, name), nil
		}
		if obj.kind == MapKind {
			if v, ok := obj.ref.(*Map).Get(name); ok {
				return v, nil
			}
		}
	case NamespaceKind:
		if v, ok := obj.ref.(*Namespace).attrs.Get(name); ok {
			return v, nil
		}
	case ObjectKind:
		if v, ok := obj.ref.(object).getAttr(name); ok {
			return v, nil
		}
	}
	return undefinedAttr(obj, String(name)), nil
}

func unsafeUndefined(obj Value, name string) Value {
	return Value{ref: &undefInfo{
		hint: fmt.Sprintf("access to attribute %s of %s object is unsafe.", pyfmt.Repr(name), pyfmt.Repr(obj.typeName())),
		exc:  SecurityError,
	}}
}

// getItem is the sandboxed environment's getitem(obj, key): obj[key]
// first, then, for string keys, the attribute.
func getItem(obj Value, key Value) (Value, error) {
	switch obj.kind {
	case UndefinedKind:
		return Value{}, undefErr(obj)
	case MapKind:
		if v, ok := obj.ref.(*Map).GetKey(key); ok {
			return v, nil
		}
	case ListKind, TupleKind, StringKind:
		if key.kind == IntKind || key.kind == BoolKind {
			i := key.i()
			if obj.kind == StringKind {
				s := obj.str
				if isASCII(s) {
					n := int64(len(s))
					if i < 0 {
						i += n
					}
					if i >= 0 && i < n {
						return String(s[i : i+1]), nil
					}
				} else {
					rs := []rune(s)
					n := int64(len(rs))
					if i < 0 {
						i += n
					}
					if i >= 0 && i < n {
						return String(string(rs[i])), nil
					}
				}
			} else {
				l := obj.list()
				n := int64(len(l))
				if i < 0 {
					i += n
				}
				if i >= 0 && i < n {
					return l[i], nil
				}
			}
			return undefinedAttr(obj, key), nil
		}
	}
	if key.kind == StringKind {
		switch obj.kind {
		case MapKind:
			if unsafeMethods[obj.kind][key.str] {
				return unsafeUndefined(obj, key.str), nil
			}
			if m, ok := lookupMethod(obj, key.str); ok {
				return m, nil
			}
			return undefinedAttr(obj, key), nil
		default:
			return getAttr(obj, key.str)
		}
	}
	return undefinedAttr(obj, key), nil
}

// applyFilterChain applies a filter expression; a chain whose innermost
// input is nil starts from base (filter and set blocks).
func (r *renderer) applyFilterChain(f *filterExpr, base Value, sc *scope) (Value, error) {
	var in Value
	var err error
	switch x := f.in.(type) {
	case nil:
		in = base
	case *filterExpr:
		in, err = r.applyFilterChain(x, base, sc)
	default:
		in, err = r.eval(x, sc)
	}
	if err != nil {
		return Value{}, err
	}
	args, kw, err := r.evalArgs(f.callArgs, sc)
	if err != nil {
		return Value{}, err
	}
	v, err := r.callFilter(f.name, in, args, kw)
	return v, withPos(err, f.p)
}

func (r *renderer) callFilter(name string, in Value, args []Value, kw []namedArg) (Value, error) {
	fn, ok := filters[name]
	if !ok {
		return Value{}, newErr(UnsupportedError, "filter '%s' is not supported", name)
	}
	if err := r.step(); err != nil {
		return Value{}, err
	}
	return fn(r, in, args, kw)
}

func (r *renderer) callTest(name string, v Value, args []Value, kw []namedArg) (bool, error) {
	fn, ok := tests[name]
	if !ok {
		return false, newErr(UnsupportedError, "test '%s' is not supported", name)
	}
	return fn(r, v, args, kw)
}
