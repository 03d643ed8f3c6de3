package chattemplate

// Jinja2 resolves variables statically, per frame (jinja2.idtracking). A
// frame is the template itself, a loop body (fresh every iteration), a
// loop's else block, a macro or call-block body, and the bodies of with,
// filter and set blocks. A name assigned in a frame is local to the whole
// frame. Its value when the frame starts is
//
//   - the enclosing frames' value (or the render variable), when the name
//     was read before it was first assigned, when some enclosing frame
//     refers to it, or when it is first assigned inside an if;
//   - undefined otherwise: an unconditional {% set x %} at the top level
//     hides the render variable x from loops and macros that run before it.
//
// This file computes, per frame, the assigned names and which of them
// start undefined, mirroring Symbols.load/store/branch_update and the
// visitors' order. Names a frame only reads need no slot: they resolve
// through the enclosing scopes at run time, which gives the same values.

const (
	refParam uint8 = iota + 1
	refResolve
	refAlias
	refUndefined
)

// frameInfo lists the names a frame assigns (parameters excluded) and
// how each starts.
type frameInfo struct {
	slots []slotInit
}

type slotInit struct {
	name      string
	undefined bool // starts undefined; otherwise it starts as the outer value
}

// symbols are the names of one frame. An if branch works on a copy of
// its frame's symbols; the copy is an overlay over them (base), so that
// branches cost what they touch, not the size of the frame.
type symbols struct {
	parent *symbols // enclosing frame
	base   *symbols // the symbols this branch copy overlays
	refs   map[string]uint8
	stores map[string]bool
}

func newSymbols(parent *symbols) *symbols {
	return &symbols{parent: parent, refs: map[string]uint8{}, stores: map[string]bool{}}
}

// copy is Symbols.copy.
func (s *symbols) copy() *symbols {
	c := newSymbols(s.parent)
	c.base = s
	return c
}

// ref returns the frame's own ref of name (through branch overlays).
func (s *symbols) ref(name string) (uint8, bool) {
	for ; s != nil; s = s.base {
		if k, ok := s.refs[name]; ok {
			return k, true
		}
	}
	return 0, false
}

// stored reports whether the frame stores name.
func (s *symbols) stored(name string) bool {
	for ; s != nil; s = s.base {
		if s.stores[name] {
			return true
		}
	}
	return false
}

func (s *symbols) findRef(name string) bool {
	for ; s != nil; s = s.parent {
		if _, ok := s.ref(name); ok {
			return true
		}
	}
	return false
}

func (s *symbols) load(name string) {
	if !s.findRef(name) {
		s.refs[name] = refResolve
	}
}

func (s *symbols) store(name string) {
	s.stores[name] = true
	if _, ok := s.ref(name); ok {
		return
	}
	if s.parent != nil && s.parent.findRef(name) {
		s.refs[name] = refAlias
		return
	}
	s.refs[name] = refUndefined
}

func (s *symbols) param(name string) {
	s.stores[name] = true
	s.refs[name] = refParam
}

// branchUpdate merges the symbols of the branches of an if (copies of
// s: their own maps hold exactly what the branch changed). A name first
// assigned inside an if starts as the outer value, never as undefined.
func (s *symbols) branchUpdate(branches ...*symbols) {
	newStores := map[string]bool{}
	for _, b := range branches {
		for t := range b.stores {
			if !s.stored(t) {
				newStores[t] = true
			}
		}
	}
	for _, b := range branches {
		for k, v := range b.refs {
			s.refs[k] = v
		}
		for t := range b.stores {
			s.stores[t] = true
		}
	}
	for name := range newStores {
		if s.parent != nil && s.parent.findRef(name) {
			s.refs[name] = refAlias
		} else {
			s.refs[name] = refResolve
		}
	}
}

// info returns the slots of the frame.
func (s *symbols) info() *frameInfo {
	f := &frameInfo{}
	for name := range s.stores {
		k, _ := s.ref(name)
		switch k {
		case refParam:
		case refUndefined:
			f.slots = append(f.slots, slotInit{name: name, undefined: true})
		default:
			f.slots = append(f.slots, slotInit{name: name})
		}
	}
	// Deterministic order (the initial values do not depend on it).
	for i := 1; i < len(f.slots); i++ {
		for j := i; j > 0 && f.slots[j].name < f.slots[j-1].name; j-- {
			f.slots[j], f.slots[j-1] = f.slots[j-1], f.slots[j]
		}
	}
	return f
}

// analyzeTemplate analyzes the root frame and, recursively, every frame
// below it.
func analyzeTemplate(body []node) *frameInfo {
	s := newSymbols(nil)
	s.visitNodes(body)
	f := s.info()
	analyzeChildren(body, s)
	return f
}

// analyzeChildren analyzes the frames that start inside body (whose own
// frame has symbols s).
func analyzeChildren(body []node, s *symbols) {
	for _, n := range body {
		switch x := n.(type) {
		case *ifNode:
			for _, b := range x.bodies {
				analyzeChildren(b, s)
			}
			analyzeChildren(x.els, s)
		case *forNode:
			bs := newSymbols(s)
			if walksLoop(x.body) {
				bs.param("loop")
			}
			bs.visitTarget(x.target, true)
			bs.visitNodes(x.body)
			x.bodyFrame = bs.info()
			x.reuseScope = !definesClosure(x.body)
			analyzeChildren(x.body, bs)
			if x.els != nil {
				es := newSymbols(s)
				es.visitNodes(x.els)
				x.elseFrame = es.info()
				analyzeChildren(x.els, es)
			}
		case *macroNode:
			analyzeMacro(x.def, s)
		case *callBlockNode:
			analyzeMacro(x.caller, s)
		case *setBlockNode:
			bs := newSymbols(s)
			bs.visitNodes(x.body)
			x.frame = bs.info()
			analyzeChildren(x.body, bs)
		case *filterBlockNode:
			fs := newSymbols(s)
			fs.visitNodes(x.body)
			fs.visitExpr(x.filter)
			x.frame = fs.info()
			analyzeChildren(x.body, fs)
		case *withNode:
			ws := newSymbols(s)
			for _, t := range x.targets {
				ws.visitTarget(t, true)
			}
			ws.visitNodes(x.body)
			x.frame = ws.info()
			analyzeChildren(x.body, ws)
		case *generationNode:
			gs := newSymbols(s)
			gs.visitNodes(x.body)
			x.frame = gs.info()
			analyzeChildren(x.body, gs)
		}
	}
}

func analyzeMacro(d *macroDef, parent *symbols) {
	ms := newSymbols(parent)
	for _, p := range d.params {
		ms.param(p)
	}
	for _, e := range d.defaults {
		ms.visitExpr(e)
	}
	ms.visitNodes(d.body)
	if d.usesCall {
		ms.param("caller")
	}
	if d.usesKw {
		ms.param("kwargs")
	}
	if d.usesVar {
		ms.param("varargs")
	}
	d.frame = ms.info()
	analyzeChildren(d.body, ms)
}

// definesClosure reports whether body contains a macro or call block,
// which keep a reference to the scope they are defined in.
func definesClosure(body []node) bool {
	for _, n := range body {
		switch x := n.(type) {
		case *macroNode, *callBlockNode:
			return true
		case *ifNode:
			for _, b := range x.bodies {
				if definesClosure(b) {
					return true
				}
			}
			if definesClosure(x.els) {
				return true
			}
		case *forNode:
			if definesClosure(x.body) || definesClosure(x.els) {
				return true
			}
		case *setBlockNode:
			if definesClosure(x.body) {
				return true
			}
		case *filterBlockNode:
			if definesClosure(x.body) {
				return true
			}
		case *withNode:
			if definesClosure(x.body) {
				return true
			}
		case *generationNode:
			if definesClosure(x.body) {
				return true
			}
		}
	}
	return false
}

// walksLoop reports whether a loop body refers to the name "loop".
func walksLoop(body []node) bool {
	found := false
	walkNodes(body, func(e expr) {
		if n, ok := e.(*nameExpr); ok && n.name == "loop" {
			found = true
		}
	})
	return found
}

// visitNodes is FrameSymbolVisitor over the statements of one frame: it
// does not descend into nested frames.
func (s *symbols) visitNodes(body []node) {
	for _, n := range body {
		switch x := n.(type) {
		case *outputNode:
			s.visitExpr(x.e)
		case *ifNode:
			s.visitIf(x, 0)
		case *forNode:
			s.visitExpr(x.iter)
		case *setNode:
			s.visitExpr(x.value)
			s.visitTarget(x.target, false)
		case *setBlockNode:
			s.visitTarget(x.target, false)
		case *macroNode:
			s.store(x.def.name)
		case *callBlockNode:
			s.visitExpr(x.call)
		case *filterBlockNode:
			// the filter is analyzed in the block's frame
		case *withNode:
			for _, v := range x.values {
				s.visitExpr(v)
			}
		}
	}
}

// visitIf mirrors FrameSymbolVisitor.visit_If for the if whose branches
// start at index i (elif branches are nested If nodes in Jinja2).
func (s *symbols) visitIf(x *ifNode, i int) {
	s.visitExpr(x.conds[i])
	branch := func(f func(b *symbols)) *symbols {
		b := s.copy()
		f(b)
		return b
	}
	body := branch(func(b *symbols) { b.visitNodes(x.bodies[i]) })
	if i > 0 {
		// An elif node has no elif or else of its own.
		s.branchUpdate(body, s.copy(), s.copy())
		return
	}
	elif := branch(func(b *symbols) {
		for k := 1; k < len(x.conds); k++ {
			b.visitIf(x, k)
		}
	})
	els := branch(func(b *symbols) { b.visitNodes(x.els) })
	s.branchUpdate(body, elif, els)
}

func (s *symbols) visitTarget(t target, asParam bool) {
	switch x := t.(type) {
	case *nameTarget:
		if asParam {
			s.param(x.name)
		} else {
			s.store(x.name)
		}
	case *tupleTarget:
		for _, it := range x.items {
			s.visitTarget(it, asParam)
		}
	case *nsTarget:
		s.load(x.name)
	}
}

func (s *symbols) visitExpr(e expr) {
	walkExpr(e, func(e expr) {
		if n, ok := e.(*nameExpr); ok {
			s.load(n.name)
		}
	})
}
