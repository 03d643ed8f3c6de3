package chattemplate

import (
	"context"
	"errors"
	"strings"
	"time"
)

// Template is a compiled template. It is immutable and safe for
// concurrent use.
type Template struct {
	src  string // normalized source
	body []node
	root *frameInfo
}

// Compile parses a template. Syntax errors are *Error values with Kind
// SyntaxError and the line and column of the offending token.
func Compile(src string) (*Template, error) {
	norm := normalizeSource(src)
	toks, err := tokenize(norm)
	if err != nil {
		var le *lexError
		if errors.As(err, &le) {
			return nil, syntaxErr(norm, le.pos, le.msg)
		}
		return nil, err
	}
	body, err := parseTemplate(toks)
	if err != nil {
		var pe *parseError
		if errors.As(err, &pe) {
			return nil, syntaxErr(norm, pe.pos, pe.msg)
		}
		return nil, err
	}
	t := &Template{src: norm, body: body}
	newFolder(t).foldNodes(body)
	t.root = analyzeTemplate(body)
	return t, nil
}

func syntaxErr(src string, pos int, msg string) *Error {
	line, col := lineCol(src, pos)
	return &Error{Kind: SyntaxError, Message: msg, Line: line, Col: col, pos: pos}
}

// Limits bound the resources one render may use, so that a hostile
// template cannot hang or exhaust the server. Zero fields take the
// defaults of [DefaultLimits].
type Limits struct {
	// MaxOutputBytes bounds the rendered text and every string built
	// while rendering.
	MaxOutputBytes int
	// MaxAllocBytes bounds the total bytes of strings and list elements
	// (48 bytes each) created while rendering.
	MaxAllocBytes int64
	// MaxSteps bounds evaluated statements, expressions and loop
	// iterations.
	MaxSteps int64
	// MaxDepth bounds nested macro calls.
	MaxDepth int
	// MaxRange is the largest range() (the sandbox's MAX_RANGE).
	MaxRange int
}

// DefaultLimits are generous for real chat templates (which render a few
// megabytes at most) and stop runaway ones within about a second.
var DefaultLimits = Limits{
	MaxOutputBytes: 64 << 20,
	MaxAllocBytes:  1 << 30,
	MaxSteps:       5_000_000,
	MaxDepth:       100,
	MaxRange:       100_000,
}

func (l Limits) withDefaults() Limits {
	if l.MaxOutputBytes <= 0 {
		l.MaxOutputBytes = DefaultLimits.MaxOutputBytes
	}
	if l.MaxAllocBytes <= 0 {
		l.MaxAllocBytes = DefaultLimits.MaxAllocBytes
	}
	if l.MaxSteps <= 0 {
		l.MaxSteps = DefaultLimits.MaxSteps
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultLimits.MaxDepth
	}
	if l.MaxRange <= 0 {
		l.MaxRange = DefaultLimits.MaxRange
	}
	return l
}

// RenderOptions adjust one render.
type RenderOptions struct {
	// Context cancels a long render.
	Context context.Context
	// Limits bound the render; zero fields take DefaultLimits.
	Limits Limits
	// Now is strftime_now's clock (default time.Now), for reproducible
	// output.
	Now func() time.Time
	// Globals are extra global functions or values, visible below the
	// render variables (as Environment.globals are in Jinja2).
	Globals map[string]Value
}

// Render renders the template with the given variables. Map iteration
// order does not matter here: the variables are looked up by name.
func (t *Template) Render(vars map[string]Value) (string, error) {
	m := NewMap()
	for k, v := range vars {
		m.Set(k, v)
	}
	return t.RenderValue(MapValue(m), nil)
}

// RenderValue renders with the variables of a MapKind value (Undefined
// or None mean no variables). opts may be nil.
func (t *Template) RenderValue(vars Value, opts *RenderOptions) (string, error) {
	var m *Map
	switch vars.kind {
	case MapKind:
		m = vars.ref.(*Map)
	case UndefinedKind, NoneKind:
		m = NewMap()
	default:
		return "", &Error{Kind: TypeError, Message: "template variables must be a mapping, not " + vars.typeName()}
	}
	if opts == nil {
		opts = &RenderOptions{}
	}
	r := &renderer{
		t:       t,
		vars:    m,
		lim:     opts.Limits.withDefaults(),
		ctx:     opts.Context,
		nowFn:   opts.Now,
		globals: opts.Globals,
	}
	if r.nowFn == nil {
		r.nowFn = time.Now
	}
	var out strings.Builder
	r.out = &out
	root := r.enterFrame(nil, t.root)
	if _, err := r.exec(t.body, root); err != nil {
		return "", r.finishErr(err)
	}
	return out.String(), nil
}

// finishErr converts an error's byte position into a line and column.
func (r *renderer) finishErr(err error) error {
	var e *Error
	if errors.As(err, &e) {
		if e.pos >= 0 && e.Line == 0 {
			e.Line, e.Col = lineCol(r.t.src, e.pos)
		}
		return e
	}
	return err
}

// scope is one level of variables: the template, a loop iteration, a
// macro call, a with or block-set body.
type scope struct {
	names  []string
	vals   []Value
	index  map[string]int // for scopes with many names
	parent *scope
	// Inline storage for the few variables a frame usually has, so that
	// a loop iteration costs one allocation.
	nameBuf [4]string
	valBuf  [4]Value
}

func newScope(parent *scope) *scope {
	sc := &scope{parent: parent}
	sc.names, sc.vals = sc.nameBuf[:0], sc.valBuf[:0]
	return sc
}

const scopeIndexAt = 16

func (s *scope) find(name string) int {
	if s.index != nil {
		if i, ok := s.index[name]; ok {
			return i
		}
		return -1
	}
	for i, n := range s.names {
		if n == name {
			return i
		}
	}
	return -1
}

func (s *scope) lookup(name string) (Value, bool) {
	for ; s != nil; s = s.parent {
		if i := s.find(name); i >= 0 {
			return s.vals[i], true
		}
	}
	return Value{}, false
}

func (s *scope) set(name string, v Value) {
	if i := s.find(name); i >= 0 {
		s.vals[i] = v
		return
	}
	s.names = append(s.names, name)
	s.vals = append(s.vals, v)
	if s.index != nil {
		s.index[name] = len(s.names) - 1
	} else if len(s.names) > scopeIndexAt {
		s.index = make(map[string]int, 2*len(s.names))
		for i, n := range s.names {
			s.index[n] = i
		}
	}
}

type renderer struct {
	t       *Template
	vars    *Map
	globals map[string]Value
	out     *strings.Builder
	lim     Limits
	steps   int64
	alloc   int64
	depth   int
	ctx     context.Context
	nowFn   func() time.Time
	// constMode is set while folding constants at compile time.
	constMode bool
}

// ctrl is the control flow result of executing statements.
type ctrl uint8

const (
	ctrlNone ctrl = iota
	ctrlBreak
	ctrlContinue
)

// step counts one unit of work and enforces MaxSteps and cancellation.
func (r *renderer) step() error {
	r.steps++
	if r.steps > r.lim.MaxSteps {
		return newErr(LimitError, "template exceeded %d evaluation steps", r.lim.MaxSteps)
	}
	if r.ctx != nil && r.steps&1023 == 0 {
		if err := r.ctx.Err(); err != nil {
			return newErr(LimitError, "render cancelled: %v", err)
		}
	}
	return nil
}

// charge accounts for n bytes of newly built data.
func (r *renderer) charge(n int) error {
	if n > r.lim.MaxOutputBytes {
		return newErr(LimitError, "template built a value of %d bytes (limit %d)", n, r.lim.MaxOutputBytes)
	}
	r.alloc += int64(n)
	if r.alloc > r.lim.MaxAllocBytes {
		return newErr(LimitError, "template allocated more than %d bytes", r.lim.MaxAllocBytes)
	}
	return nil
}

// write appends rendered text to the current output.
func (r *renderer) write(s string) error {
	if r.out.Len()+len(s) > r.lim.MaxOutputBytes {
		return newErr(LimitError, "rendered output exceeds %d bytes", r.lim.MaxOutputBytes)
	}
	if err := r.charge(len(s)); err != nil {
		return err
	}
	r.out.WriteString(s)
	return nil
}

// capture renders body into a string in scope sc.
func (r *renderer) capture(body []node, sc *scope) (string, error) {
	saved := r.out
	var b strings.Builder
	r.out = &b
	_, err := r.exec(body, sc)
	r.out = saved
	return b.String(), err
}

// enterFrame starts a frame below parent: its assigned names get their
// initial values (see symbols.go).
func (r *renderer) enterFrame(parent *scope, f *frameInfo) *scope {
	sc := newScope(parent)
	r.initFrame(sc, f)
	return sc
}

// initFrame (re)initializes the assigned names of frame f in sc.
func (r *renderer) initFrame(sc *scope, f *frameInfo) {
	sc.names, sc.vals, sc.index = sc.names[:0], sc.vals[:0], nil
	if f == nil {
		return
	}
	parent := sc.parent
	for _, sl := range f.slots {
		if sl.undefined {
			sc.set(sl.name, undefinedNamed(sl.name))
		} else {
			sc.set(sl.name, r.lookup(sl.name, parent))
		}
	}
}

func (r *renderer) lookup(name string, sc *scope) Value {
	if v, ok := sc.lookup(name); ok {
		return v
	}
	if v, ok := r.vars.Get(name); ok {
		return v
	}
	if v, ok := r.globals[name]; ok {
		return v
	}
	if v, ok := builtinGlobals[name]; ok {
		return v
	}
	return undefinedNamed(name)
}

func (r *renderer) exec(body []node, sc *scope) (ctrl, error) {
	for _, n := range body {
		if err := r.step(); err != nil {
			return ctrlNone, err
		}
		switch x := n.(type) {
		case *textNode:
			if err := r.write(x.text); err != nil {
				return ctrlNone, err
			}
		case *outputNode:
			v, err := r.eval(x.e, sc)
			if err != nil {
				return ctrlNone, err
			}
			if err := r.write(v.String()); err != nil {
				return ctrlNone, withPos(err, x.e.position())
			}
		case *ifNode:
			matched := false
			for i, c := range x.conds {
				v, err := r.eval(c, sc)
				if err != nil {
					return ctrlNone, err
				}
				if v.Truth() {
					matched = true
					if c, err := r.exec(x.bodies[i], sc); c != ctrlNone || err != nil {
						return c, err
					}
					break
				}
			}
			if !matched && x.els != nil {
				if c, err := r.exec(x.els, sc); c != ctrlNone || err != nil {
					return c, err
				}
			}
		case *forNode:
			if err := r.execFor(x, sc); err != nil {
				return ctrlNone, err
			}
		case *setNode:
			v, err := r.eval(x.value, sc)
			if err != nil {
				return ctrlNone, err
			}
			if err := r.assign(x.target, v, sc); err != nil {
				return ctrlNone, withPos(err, x.pos)
			}
		case *setBlockNode:
			s, err := r.capture(x.body, r.enterFrame(sc, x.frame))
			if err != nil {
				return ctrlNone, err
			}
			v := String(s)
			if x.filter != nil {
				if v, err = r.applyFilterChain(x.filter, v, sc); err != nil {
					return ctrlNone, err
				}
			}
			if err := r.assign(x.target, v, sc); err != nil {
				return ctrlNone, withPos(err, x.pos)
			}
		case *macroNode:
			sc.set(x.def.name, r.newMacro(x.def, sc))
		case *callBlockNode:
			caller := r.newMacro(x.caller, sc)
			v, err := r.evalCall(x.call, sc, &caller)
			if err != nil {
				return ctrlNone, err
			}
			if err := r.write(v.String()); err != nil {
				return ctrlNone, err
			}
		case *filterBlockNode:
			fs := r.enterFrame(sc, x.frame)
			s, err := r.capture(x.body, fs)
			if err != nil {
				return ctrlNone, err
			}
			v, err := r.applyFilterChain(x.filter, String(s), fs)
			if err != nil {
				return ctrlNone, err
			}
			if err := r.write(v.String()); err != nil {
				return ctrlNone, err
			}
		case *withNode:
			inner := r.enterFrame(sc, x.frame)
			vals := make([]Value, len(x.values))
			for i, e := range x.values {
				v, err := r.eval(e, sc)
				if err != nil {
					return ctrlNone, err
				}
				vals[i] = v
			}
			for i, t := range x.targets {
				if err := r.assign(t, vals[i], inner); err != nil {
					return ctrlNone, err
				}
			}
			if c, err := r.exec(x.body, inner); c != ctrlNone || err != nil {
				return c, err
			}
		case *generationNode:
			s, err := r.capture(x.body, r.enterFrame(sc, x.frame))
			if err != nil {
				return ctrlNone, err
			}
			if err := r.write(s); err != nil {
				return ctrlNone, err
			}
		case *breakNode:
			return ctrlBreak, nil
		case *continueNode:
			return ctrlContinue, nil
		}
	}
	return ctrlNone, nil
}

// execFor runs a for loop. Every iteration gets a fresh scope, so
// assignments in the body neither leak out nor survive into the next
// iteration, as in Jinja2.
func (r *renderer) execFor(x *forNode, sc *scope) error {
	seq, err := r.eval(x.iter, sc)
	if err != nil {
		return err
	}
	items, err := iterate(seq)
	if err != nil {
		return withPos(err, x.iter.position())
	}
	if x.filter != nil {
		kept := make([]Value, 0, len(items))
		fs := newScope(sc)
		for _, it := range items {
			if err := r.step(); err != nil {
				return err
			}
			fs.names, fs.vals, fs.index = fs.names[:0], fs.vals[:0], nil
			if err := r.assign(x.target, it, fs); err != nil {
				return withPos(err, x.pos)
			}
			ok, err := r.eval(x.filter, fs)
			if err != nil {
				return err
			}
			if ok.Truth() {
				kept = append(kept, it)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		if x.els != nil {
			_, err := r.exec(x.els, r.enterFrame(sc, x.elseFrame))
			return err
		}
		return nil
	}
	loop := &loopObj{items: items}
	loopVal := Value{kind: ObjectKind, ref: loop}
	var is *scope
	for i, it := range items {
		if err := r.step(); err != nil {
			return err
		}
		loop.i = i
		if is == nil || !x.reuseScope {
			is = r.enterFrame(sc, x.bodyFrame)
		} else {
			r.initFrame(is, x.bodyFrame)
		}
		is.set("loop", loopVal)
		if err := r.assign(x.target, it, is); err != nil {
			return withPos(err, x.pos)
		}
		c, err := r.exec(x.body, is)
		if err != nil {
			return err
		}
		if c == ctrlBreak {
			break
		}
	}
	return nil
}

// assign binds a value to a target in scope sc.
func (r *renderer) assign(t target, v Value, sc *scope) error {
	switch x := t.(type) {
	case *nameTarget:
		sc.set(x.name, v)
	case *tupleTarget:
		items, err := iterate(v)
		if err != nil {
			return newErr(TypeError, "cannot unpack non-iterable %s object", v.typeName())
		}
		if len(items) < len(x.items) {
			return newErr(ValueError, "not enough values to unpack (expected %d, got %d)", len(x.items), len(items))
		}
		if len(items) > len(x.items) {
			return newErr(ValueError, "too many values to unpack (expected %d)", len(x.items))
		}
		for i, sub := range x.items {
			if err := r.assign(sub, items[i], sc); err != nil {
				return err
			}
		}
	case *nsTarget:
		ns := r.lookup(x.name, sc)
		n, ok := ns.ref.(*Namespace)
		if !ok || ns.kind != NamespaceKind {
			return newErr(RuntimeError, "cannot assign attribute on non-namespace object")
		}
		n.attrs.Set(x.attr, v)
	}
	return nil
}

// iterate lists what Python's iter(v) yields.
func iterate(v Value) ([]Value, error) {
	switch v.kind {
	case ListKind, TupleKind:
		return v.list(), nil
	case MapKind:
		return v.ref.(*Map).keys, nil
	case StringKind:
		out := make([]Value, 0, len(v.str))
		for _, c := range v.str {
			out = append(out, String(string(c)))
		}
		return out, nil
	case UndefinedKind:
		return nil, nil
	case ObjectKind:
		if it, ok := v.ref.(iterableObject); ok {
			return it.iter()
		}
	}
	return nil, newErr(TypeError, "'%s' object is not iterable", v.typeName())
}

// loopObj is Jinja2's LoopContext.
type loopObj struct {
	items       []Value
	i           int
	changedLast []Value
	changedSet  bool
}

func (l *loopObj) typeName() string { return "LoopContext" }
func (l *loopObj) repr() string {
	return "<LoopContext " + itoa(l.i+1) + "/" + itoa(len(l.items)) + ">"
}

func (l *loopObj) getAttr(name string) (Value, bool) {
	n := len(l.items)
	switch name {
	case "index":
		return Int(int64(l.i + 1)), true
	case "index0":
		return Int(int64(l.i)), true
	case "revindex":
		return Int(int64(n - l.i)), true
	case "revindex0":
		return Int(int64(n - l.i - 1)), true
	case "first":
		return Bool(l.i == 0), true
	case "last":
		return Bool(l.i == n-1), true
	case "length":
		return Int(int64(n)), true
	case "depth":
		return Int(1), true
	case "depth0":
		return Int(0), true
	case "previtem":
		if l.i == 0 {
			return undefinedHint("there is no previous item"), true
		}
		return l.items[l.i-1], true
	case "nextitem":
		if l.i == n-1 {
			return undefinedHint("there is no next item"), true
		}
		return l.items[l.i+1], true
	case "cycle":
		return builtinFunc("cycle", func(r *renderer, args []Value, kw []namedArg) (Value, error) {
			if len(args) == 0 {
				return Value{}, newErr(TypeError, "no items for cycling given")
			}
			return args[l.i%len(args)], nil
		}), true
	case "changed":
		return builtinFunc("changed", func(r *renderer, args []Value, kw []namedArg) (Value, error) {
			if l.changedSet && len(args) == len(l.changedLast) {
				same := true
				for i := range args {
					if !Equal(args[i], l.changedLast[i]) {
						same = false
						break
					}
				}
				if same {
					return Bool(false), nil
				}
			}
			l.changedLast = append([]Value(nil), args...)
			l.changedSet = true
			return Bool(true), nil
		}), true
	}
	return Value{}, false
}

func itoa(i int) string {
	const digits = "0123456789"
	if i == 0 {
		return "0"
	}
	neg := i < 0
	if neg {
		i = -i
	}
	var buf [20]byte
	p := len(buf)
	for i > 0 {
		p--
		buf[p] = digits[i%10]
		i /= 10
	}
	if neg {
		p--
		buf[p] = '-'
	}
	return string(buf[p:])
}
