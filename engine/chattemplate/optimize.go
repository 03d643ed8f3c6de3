package chattemplate

// Jinja2 folds constant expressions at compile time (jinja2.optimizer):
// every expression whose value can be computed from literals alone is
// replaced by that value when it has a "safe repr" (None, bools,
// numbers, strings, ranges and containers of those). This is observable
// in one way: a constant subscript is folded through
// environment.getitem, which turns errors into Undefined, while at run
// time a slice is a plain Python subscript that raises. So
// "{{ (1)[1:] is defined }}" renders "False" instead of failing. The
// folding below reproduces that; everything else it folds evaluates the
// same either way.

// contextFilters are filters Jinja2 never folds (@pass_context).
var contextFilters = map[string]bool{"random": true, "map": true, "select": true, "reject": true, "selectattr": true, "rejectattr": true}

// errImpossible stops constant evaluation at a node Jinja2's as_const
// cannot evaluate (names, calls, context filters).
var errImpossible = &Error{Kind: UnsupportedError, Message: "not a constant", pos: -1}

// safeRepr is jinja2.compiler.has_safe_repr.
func safeRepr(v Value) bool {
	switch v.kind {
	case NoneKind, BoolKind, IntKind, FloatKind, StringKind:
		return true
	case ListKind, TupleKind:
		for _, x := range v.list() {
			if !safeRepr(x) {
				return false
			}
		}
		return true
	case MapKind:
		m := v.ref.(*Map)
		for i, k := range m.keys {
			if !safeRepr(k) || !safeRepr(m.vals[i]) {
				return false
			}
		}
		return true
	}
	return false
}

// folder evaluates constant expressions at compile time.
type folder struct {
	r *renderer
}

// foldLimits bound the work of constant folding for a whole template: a
// template full of huge constants is then evaluated at render time, under
// the render limits, instead of being built while compiling.
var foldLimits = Limits{MaxOutputBytes: 1 << 20, MaxAllocBytes: 16 << 20, MaxSteps: 1_000_000, MaxDepth: 20, MaxRange: 100_000}

func newFolder(t *Template) *folder {
	return &folder{r: &renderer{t: t, vars: NewMap(), lim: foldLimits, constMode: true}}
}

// fold returns e with its constant subexpressions replaced by their
// values (bottom-up, like Optimizer.generic_visit).
func (f *folder) fold(e expr) expr {
	if e == nil {
		return nil
	}
	foldArgs := func(ca *callArgs) {
		for i := range ca.args {
			ca.args[i] = f.fold(ca.args[i])
		}
		for i := range ca.kwargs {
			ca.kwargs[i].e = f.fold(ca.kwargs[i].e)
		}
		ca.dynArgs = f.fold(ca.dynArgs)
		ca.dynKwargs = f.fold(ca.dynKwargs)
	}
	switch x := e.(type) {
	case *constExpr, *nameExpr:
		return e
	case *listExpr:
		for i := range x.items {
			x.items[i] = f.fold(x.items[i])
		}
	case *tupleExpr:
		for i := range x.items {
			x.items[i] = f.fold(x.items[i])
		}
	case *dictExpr:
		for i := range x.keys {
			x.keys[i] = f.fold(x.keys[i])
			x.vals[i] = f.fold(x.vals[i])
		}
	case *notExpr:
		x.e = f.fold(x.e)
	case *negExpr:
		x.e = f.fold(x.e)
	case *binExpr:
		x.l, x.r = f.fold(x.l), f.fold(x.r)
	case *concatExpr:
		for i := range x.items {
			x.items[i] = f.fold(x.items[i])
		}
	case *compareExpr:
		x.first = f.fold(x.first)
		for i := range x.ops {
			x.ops[i].e = f.fold(x.ops[i].e)
		}
	case *andExpr:
		x.l, x.r = f.fold(x.l), f.fold(x.r)
	case *orExpr:
		x.l, x.r = f.fold(x.l), f.fold(x.r)
	case *condExpr:
		x.test, x.yes, x.no = f.fold(x.test), f.fold(x.yes), f.fold(x.no)
	case *getattrExpr:
		x.obj = f.fold(x.obj)
	case *getitemExpr:
		x.obj = f.fold(x.obj)
		if s, ok := x.key.(*sliceExpr); ok {
			s.start, s.stop, s.step = f.fold(s.start), f.fold(s.stop), f.fold(s.step)
		} else {
			x.key = f.fold(x.key)
		}
	case *callExpr:
		x.fn = f.fold(x.fn)
		foldArgs(&x.callArgs)
		return e
	case *filterExpr:
		x.in = f.fold(x.in)
		foldArgs(&x.callArgs)
	case *testExpr:
		x.in = f.fold(x.in)
		foldArgs(&x.callArgs)
	default:
		return e
	}
	v, err := f.eval(e)
	if err != nil || !safeRepr(v) {
		return e
	}
	return &constExpr{v: v, p: e.position()}
}

// eval is as_const: it fails (errImpossible) when evaluation reaches a
// node that is not constant, and only evaluates what Python would (so
// "x if true else 1" folds although x is a name).
func (f *folder) eval(e expr) (Value, error) {
	f.r.depth = 0
	return f.r.eval(e, &scope{})
}

// foldNodes folds the expressions of a statement list in place. A
// constant {{ }} becomes text whatever its value (CodeGenerator.visit_Output
// writes str(as_const) without the safe-repr check).
func (f *folder) foldNodes(body []node) {
	for i, n := range body {
		switch x := n.(type) {
		case *outputNode:
			x.e = f.fold(x.e)
			if _, ok := x.e.(*constExpr); !ok {
				if v, err := f.eval(x.e); err == nil {
					if _, gen := v.ref.(*genObj); !gen {
						body[i] = &textNode{text: v.String()}
					}
				}
			}
		case *ifNode:
			for i := range x.conds {
				x.conds[i] = f.fold(x.conds[i])
				f.foldNodes(x.bodies[i])
			}
			f.foldNodes(x.els)
		case *forNode:
			x.iter = f.fold(x.iter)
			x.filter = f.fold(x.filter)
			f.foldNodes(x.body)
			f.foldNodes(x.els)
		case *setNode:
			x.value = f.fold(x.value)
		case *setBlockNode:
			f.foldNodes(x.body)
		case *macroNode:
			for i := range x.def.defaults {
				x.def.defaults[i] = f.fold(x.def.defaults[i])
			}
			f.foldNodes(x.def.body)
		case *callBlockNode:
			f.fold(x.call)
			f.foldNodes(x.caller.body)
		case *filterBlockNode:
			f.foldNodes(x.body)
		case *withNode:
			for i := range x.values {
				x.values[i] = f.fold(x.values[i])
			}
			f.foldNodes(x.body)
		case *generationNode:
			f.foldNodes(x.body)
		}
	}
}
