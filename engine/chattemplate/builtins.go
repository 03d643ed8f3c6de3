package chattemplate

// Jinja2 tests and global functions, plus transformers' globals.

type testFunc func(r *renderer, v Value, args []Value, kw []namedArg) (bool, error)

// knownJinjaTests are Jinja2's built-in test names.
var knownJinjaTests = map[string]bool{
	"odd": true, "even": true, "divisibleby": true, "defined": true, "undefined": true, "filter": true,
	"test": true, "none": true, "boolean": true, "false": true, "true": true, "integer": true, "float": true,
	"lower": true, "upper": true, "string": true, "mapping": true, "number": true, "sequence": true,
	"iterable": true, "callable": true, "sameas": true, "escaped": true, "in": true, "==": true, "eq": true,
	"equalto": true, "!=": true, "ne": true, ">": true, "gt": true, "greaterthan": true, ">=": true,
	"ge": true, "<": true, "lt": true, "lessthan": true, "<=": true, "le": true,
}

var tests map[string]testFunc

func noArgTest(name string, f func(v Value) bool) testFunc {
	return func(r *renderer, v Value, args []Value, kw []namedArg) (bool, error) {
		if _, _, err := bindArgs(name, args, kw, nil, 0); err != nil {
			return false, err
		}
		return f(v), nil
	}
}

func cmpTest(name, op string) testFunc {
	return func(r *renderer, v Value, args []Value, kw []namedArg) (bool, error) {
		a, _, err := bindArgs(name, args, kw, []string{"other"}, 1)
		if err != nil {
			return false, err
		}
		return compareOp(op, v, a[0])
	}
}

func init() {
	tests = map[string]testFunc{
		"defined":   noArgTest("defined", func(v Value) bool { return v.kind != UndefinedKind }),
		"undefined": noArgTest("undefined", func(v Value) bool { return v.kind == UndefinedKind }),
		"none":      noArgTest("none", func(v Value) bool { return v.kind == NoneKind }),
		"boolean":   noArgTest("boolean", func(v Value) bool { return v.kind == BoolKind }),
		"true":      noArgTest("true", func(v Value) bool { return v.kind == BoolKind && v.b() }),
		"false":     noArgTest("false", func(v Value) bool { return v.kind == BoolKind && !v.b() }),
		"integer":   noArgTest("integer", func(v Value) bool { return v.kind == IntKind }),
		"float":     noArgTest("float", func(v Value) bool { return v.kind == FloatKind }),
		"number":    noArgTest("number", func(v Value) bool { return v.isNumber() }),
		"string":    noArgTest("string", func(v Value) bool { return v.kind == StringKind }),
		"mapping":   noArgTest("mapping", func(v Value) bool { return v.kind == MapKind }),
		"sequence": noArgTest("sequence", func(v Value) bool {
			switch v.kind {
			case StringKind, ListKind, TupleKind, MapKind, UndefinedKind:
				return true // Undefined has __len__ and __getitem__
			}
			return false
		}),
		"iterable": noArgTest("iterable", func(v Value) bool {
			switch v.kind {
			case StringKind, ListKind, TupleKind, MapKind, UndefinedKind:
				return true
			case ObjectKind:
				_, ok := v.ref.(iterableObject)
				return ok
			}
			return false
		}),
		"callable": noArgTest("callable", func(v Value) bool {
			// Undefined and the loop object define __call__.
			_, isLoop := v.ref.(*loopObj)
			return v.kind == FuncKind || v.kind == UndefinedKind || isLoop
		}),
		"lower": noArgTest("lower", func(v Value) bool {
			return pyIsLower(softStr(v))
		}),
		"upper": noArgTest("upper", func(v Value) bool {
			return pyIsUpper(softStr(v))
		}),
		"escaped": noArgTest("escaped", func(v Value) bool { return false }),
		"odd": func(r *renderer, v Value, args []Value, kw []namedArg) (bool, error) {
			if v.kind == UndefinedKind {
				return false, undefErr(v)
			}
			m, err := numericOp("%", v, Int(2))
			if err != nil || !v.isNumber() {
				return false, newErr(TypeError, "not all arguments converted during string formatting")
			}
			return Equal(m, Int(1)), nil
		},
		"even": func(r *renderer, v Value, args []Value, kw []namedArg) (bool, error) {
			if v.kind == UndefinedKind {
				return false, undefErr(v)
			}
			m, err := numericOp("%", v, Int(2))
			if err != nil || !v.isNumber() {
				return false, newErr(TypeError, "not all arguments converted during string formatting")
			}
			return Equal(m, Int(0)), nil
		},
		"divisibleby": func(r *renderer, v Value, args []Value, kw []namedArg) (bool, error) {
			a, _, err := bindArgs("divisibleby", args, kw, []string{"num"}, 1)
			if err != nil {
				return false, err
			}
			if v.kind == UndefinedKind {
				return false, undefErr(v)
			}
			if a[0].kind == UndefinedKind {
				return false, undefErr(a[0])
			}
			if !v.isNumber() || !a[0].isNumber() {
				return false, newErr(TypeError, "unsupported operand type(s) for %%: '%s' and '%s'", v.typeName(), a[0].typeName())
			}
			m, err := numericOp("%", v, a[0])
			if err != nil {
				return false, err
			}
			return Equal(m, Int(0)), nil
		},
		"sameas": func(r *renderer, v Value, args []Value, kw []namedArg) (bool, error) {
			a, _, err := bindArgs("sameas", args, kw, []string{"other"}, 1)
			if err != nil {
				return false, err
			}
			o := a[0]
			switch v.kind {
			case NoneKind, BoolKind:
				return v.kind == o.kind && v.num == o.num, nil
			case IntKind:
				// CPython caches small ints.
				return o.kind == IntKind && v.i() == o.i() && v.i() >= -5 && v.i() <= 256, nil
			case ListKind, TupleKind:
				return o.kind == v.kind && len(v.list()) == len(o.list()) && (len(v.list()) == 0 && v.kind == TupleKind ||
					len(v.list()) > 0 && &v.list()[0] == &o.list()[0]), nil
			case MapKind, NamespaceKind, FuncKind, ObjectKind:
				return v.kind == o.kind && v.ref == o.ref, nil
			case StringKind:
				return o.kind == StringKind && o.str == v.str && len(v.str) <= 1, nil
			}
			return false, nil
		},
		"in": func(r *renderer, v Value, args []Value, kw []namedArg) (bool, error) {
			a, _, err := bindArgs("in", args, kw, []string{"seq"}, 1)
			if err != nil {
				return false, err
			}
			return contains(a[0], v)
		},
		"filter": func(r *renderer, v Value, args []Value, kw []namedArg) (bool, error) {
			_, ok := filters[softStr(v)]
			return ok, nil
		},
		"test": func(r *renderer, v Value, args []Value, kw []namedArg) (bool, error) {
			_, ok := tests[softStr(v)]
			return ok, nil
		},
		"==": cmpTest("eq", "eq"), "eq": cmpTest("eq", "eq"), "equalto": cmpTest("eq", "eq"),
		"!=": cmpTest("ne", "ne"), "ne": cmpTest("ne", "ne"),
		">": cmpTest("gt", "gt"), "gt": cmpTest("gt", "gt"), "greaterthan": cmpTest("gt", "gt"),
		">=": cmpTest("ge", "ge"), "ge": cmpTest("ge", "ge"),
		"<": cmpTest("lt", "lt"), "lt": cmpTest("lt", "lt"), "lessthan": cmpTest("lt", "lt"),
		"<=": cmpTest("le", "le"), "le": cmpTest("le", "le"),
	}
}

// builtinGlobals are Jinja2's default globals plus transformers'
// raise_exception and strftime_now.
var builtinGlobals map[string]Value

func init() {
	builtinGlobals = map[string]Value{
		"range":           builtinFunc("range", globalRange),
		"dict":            builtinFunc("dict", globalDict),
		"namespace":       builtinFunc("namespace", globalNamespace),
		"joiner":          builtinFunc("joiner", globalJoiner),
		"cycler":          builtinFunc("cycler", globalCycler),
		"raise_exception": builtinFunc("raise_exception", globalRaise),
		"strftime_now":    builtinFunc("strftime_now", globalStrftimeNow),
		"lipsum": builtinFunc("lipsum", func(r *renderer, args []Value, kw []namedArg) (Value, error) {
			return Value{}, newErr(UnsupportedError, "lipsum() is not supported")
		}),
	}
}

func globalRaise(r *renderer, args []Value, kw []namedArg) (Value, error) {
	a, _, err := bindArgs("raise_exception", args, kw, []string{"message"}, 1)
	if err != nil {
		return Value{}, err
	}
	msg := softStr(a[0])
	if a[0].kind != StringKind {
		msg = a[0].String()
	}
	return Value{}, newErr(TemplateError, "%s", msg)
}

func globalStrftimeNow(r *renderer, args []Value, kw []namedArg) (Value, error) {
	a, _, err := bindArgs("strftime_now", args, kw, []string{"format"}, 1)
	if err != nil {
		return Value{}, err
	}
	if a[0].kind != StringKind {
		return Value{}, newErr(TypeError, "strftime() argument 1 must be str, not %s", a[0].typeName())
	}
	return String(pyStrftime(r.nowFn(), a[0].str)), nil
}

func globalRange(r *renderer, args []Value, kw []namedArg) (Value, error) {
	if len(kw) > 0 {
		return Value{}, newErr(TypeError, "range() takes no keyword arguments")
	}
	if len(args) < 1 || len(args) > 3 {
		return Value{}, newErr(TypeError, "range expected at most 3 arguments, got %d", len(args))
	}
	n := make([]int64, len(args))
	for i, a := range args {
		x, err := a.needInt()
		if err != nil {
			return Value{}, err
		}
		n[i] = x
	}
	start, stop, step := int64(0), int64(0), int64(1)
	switch len(n) {
	case 1:
		stop = n[0]
	case 2:
		start, stop = n[0], n[1]
	case 3:
		start, stop, step = n[0], n[1], n[2]
	}
	if step == 0 {
		return Value{}, newErr(ValueError, "range() arg 3 must not be zero")
	}
	var count int64
	if step > 0 && start < stop {
		count = (stop - start + step - 1) / step
	} else if step < 0 && start > stop {
		count = (start - stop - step - 1) / -step
	}
	if count > int64(r.lim.MaxRange) {
		return Value{}, newErr(OverflowError, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", r.lim.MaxRange)
	}
	if err := r.charge(valueSize * int(count)); err != nil {
		return Value{}, err
	}
	out := make([]Value, count)
	for i := range out {
		out[i] = Int(start + int64(i)*step)
	}
	v := List(out...)
	v.str = rangeRepr(start, stop, step)
	return v, nil
}

// mapFromArgs is dict(*args, **kwargs).
func mapFromArgs(fname string, args []Value, kw []namedArg) (*Map, error) {
	m := NewMap()
	if len(args) > 1 {
		return nil, newErr(TypeError, "%s expected at most 1 argument, got %d", fname, len(args))
	}
	if len(args) == 1 {
		a := args[0]
		switch a.kind {
		case MapKind:
			src := a.ref.(*Map)
			for i, k := range src.keys {
				m.SetKey(k, src.vals[i])
			}
		default:
			items, err := iterate(a)
			if err != nil {
				return nil, err
			}
			for i, it := range items {
				pair, err := iterate(it)
				if err != nil || len(pair) != 2 {
					return nil, newErr(ValueError, "dictionary update sequence element #%d has the wrong length", i)
				}
				if !m.SetKey(pair[0], pair[1]) {
					return nil, newErr(TypeError, "unhashable type: '%s'", pair[0].typeName())
				}
			}
		}
	}
	for _, k := range kw {
		m.Set(k.name, k.v)
	}
	return m, nil
}

func globalDict(r *renderer, args []Value, kw []namedArg) (Value, error) {
	m, err := mapFromArgs("dict", args, kw)
	if err != nil {
		return Value{}, err
	}
	return MapValue(m), nil
}

func globalNamespace(r *renderer, args []Value, kw []namedArg) (Value, error) {
	m, err := mapFromArgs("namespace", args, kw)
	if err != nil {
		return Value{}, err
	}
	return Value{kind: NamespaceKind, ref: &Namespace{attrs: m}}, nil
}

// globalJoiner is Jinja2's joiner(): a callable that returns "" on the
// first call and the separator after.
func globalJoiner(r *renderer, args []Value, kw []namedArg) (Value, error) {
	a, set, err := bindArgs("joiner", args, kw, []string{"sep"}, 0)
	if err != nil {
		return Value{}, err
	}
	sep := ", "
	if set[0] {
		sep = softStr(a[0])
	}
	used := false
	return builtinFunc("joiner", func(r *renderer, args []Value, kw []namedArg) (Value, error) {
		if !used {
			used = true
			return String(""), nil
		}
		return String(sep), nil
	}), nil
}

// cyclerObj is Jinja2's cycler.
type cyclerObj struct {
	items []Value
	pos   int
}

func (c *cyclerObj) typeName() string { return "Cycler" }
func (c *cyclerObj) repr() string     { return "<Cycler>" }
func (c *cyclerObj) getAttr(name string) (Value, bool) {
	switch name {
	case "current":
		return c.items[c.pos], true
	case "next", "__next__":
		return builtinFunc("next", func(r *renderer, args []Value, kw []namedArg) (Value, error) {
			v := c.items[c.pos]
			c.pos = (c.pos + 1) % len(c.items)
			return v, nil
		}), true
	case "reset":
		return builtinFunc("reset", func(r *renderer, args []Value, kw []namedArg) (Value, error) {
			c.pos = 0
			return None(), nil
		}), true
	}
	return Value{}, false
}

func globalCycler(r *renderer, args []Value, kw []namedArg) (Value, error) {
	if len(args) == 0 {
		return Value{}, newErr(ValueError, "at least one item has to be provided")
	}
	return Value{kind: ObjectKind, ref: &cyclerObj{items: append([]Value(nil), args...)}}, nil
}
