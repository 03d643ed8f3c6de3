package chattemplate

// Statement nodes. pos fields are byte offsets into the normalized source.

type node interface{}

type textNode struct{ text string }

// outputNode is {{ e }} or one expression of {% print %}.
type outputNode struct{ e expr }

type ifNode struct {
	conds  []expr
	bodies [][]node
	els    []node
}

type forNode struct {
	target target
	iter   expr
	filter expr // the "if" of "for x in y if cond"; may be nil
	body   []node
	els    []node
	pos    int

	bodyFrame, elseFrame *frameInfo
	// reuseScope: nothing in the body keeps a reference to the iteration
	// scope (no macro or call block), so one scope serves every iteration.
	reuseScope bool
}

type setNode struct {
	target target
	value  expr
	pos    int
}

// setBlockNode is {% set x %}...{% endset %}, optionally filtered
// ({% set x | upper %}).
type setBlockNode struct {
	target target
	filter *filterExpr // chain whose innermost input is nil; may be nil
	body   []node
	pos    int
	frame  *frameInfo
}

type macroNode struct{ def *macroDef }

type callBlockNode struct {
	call   *callExpr
	caller *macroDef
}

type filterBlockNode struct {
	filter *filterExpr // innermost input is nil
	body   []node
	frame  *frameInfo
}

type withNode struct {
	targets []target
	values  []expr
	body    []node
	frame   *frameInfo
}

type breakNode struct{}
type continueNode struct{}

// generationNode is transformers' {% generation %} extension; it renders
// its body (as a caller block, so in its own scope).
type generationNode struct {
	body  []node
	frame *frameInfo
}

// macroDef is a macro (or a call block's caller).
type macroDef struct {
	name     string
	params   []string
	defaults []expr // defaults for the last len(defaults) params
	body     []node
	usesVar  bool // body references varargs
	usesKw   bool // body references kwargs
	usesCall bool // body references caller
	pos      int
	frame    *frameInfo
}

// Assignment targets.
type target interface{}

type nameTarget struct{ name string }
type tupleTarget struct{ items []target }
type nsTarget struct {
	name, attr string
	pos        int
}

// Expressions.
type expr interface{ position() int }

type constExpr struct {
	v Value
	p int
}
type nameExpr struct {
	name string
	p    int
}
type getattrExpr struct {
	obj  expr
	attr string
	p    int
}
type getitemExpr struct {
	obj expr
	key expr
	p   int
}
type sliceExpr struct {
	start, stop, step expr // any may be nil
	p                 int
}
type kwarg struct {
	name string
	e    expr
}
type callArgs struct {
	args      []expr
	kwargs    []kwarg
	dynArgs   expr
	dynKwargs expr
}
type callExpr struct {
	fn expr
	callArgs
	p int
}
type filterExpr struct {
	in   expr // nil inside filter blocks and set blocks
	name string
	callArgs
	p int
}
type testExpr struct {
	in   expr
	name string
	callArgs
	p int
}
type notExpr struct {
	e expr
	p int
}
type negExpr struct {
	e   expr
	neg bool // false: unary plus
	p   int
}
type binExpr struct {
	op   string
	l, r expr
	p    int
}
type concatExpr struct {
	items []expr
	p     int
}
type cmpOp struct {
	op string // eq ne lt le gt ge in notin
	e  expr
}
type compareExpr struct {
	first expr
	ops   []cmpOp
	p     int
}
type andExpr struct {
	l, r expr
	p    int
}
type orExpr struct {
	l, r expr
	p    int
}
type condExpr struct {
	test, yes, no expr // no may be nil
	p             int
}
type listExpr struct {
	items []expr
	p     int
}
type tupleExpr struct {
	items []expr
	p     int
}
type dictExpr struct {
	keys, vals []expr
	p          int
}

func (e *constExpr) position() int   { return e.p }
func (e *nameExpr) position() int    { return e.p }
func (e *getattrExpr) position() int { return e.p }
func (e *getitemExpr) position() int { return e.p }
func (e *sliceExpr) position() int   { return e.p }
func (e *callExpr) position() int    { return e.p }
func (e *filterExpr) position() int  { return e.p }
func (e *testExpr) position() int    { return e.p }
func (e *notExpr) position() int     { return e.p }
func (e *negExpr) position() int     { return e.p }
func (e *binExpr) position() int     { return e.p }
func (e *concatExpr) position() int  { return e.p }
func (e *compareExpr) position() int { return e.p }
func (e *andExpr) position() int     { return e.p }
func (e *orExpr) position() int      { return e.p }
func (e *condExpr) position() int    { return e.p }
func (e *listExpr) position() int    { return e.p }
func (e *tupleExpr) position() int   { return e.p }
func (e *dictExpr) position() int    { return e.p }
