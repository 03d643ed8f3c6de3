package chattemplate

import (
	"fmt"
	"strings"
)

// The parser follows jinja2.parser.Parser (3.1) rule for rule, so
// precedence, tuple handling and error cases match.

// maxParseDepth bounds the nesting of expressions and blocks; deeper
// templates are rejected instead of exhausting the stack.
const maxParseDepth = 400

type parser struct {
	toks  []token
	i     int
	depth int
}

type parseError struct {
	pos int
	msg string
}

func (e *parseError) Error() string { return e.msg }

// bail aborts parsing; parse recovers it.
func (p *parser) fail(pos int, format string, args ...any) {
	panic(&parseError{pos: pos, msg: fmt.Sprintf(format, args...)})
}

func (p *parser) cur() token { return p.toks[p.i] }

func (p *parser) look() token {
	if p.i+1 < len(p.toks) {
		return p.toks[p.i+1]
	}
	return p.toks[len(p.toks)-1]
}

func (p *parser) next() token {
	t := p.toks[p.i]
	if p.i < len(p.toks)-1 {
		p.i++
	}
	return t
}

// is reports whether the current token is the operator or name s.
func (t token) is(s string) bool {
	return (t.typ == tOp || t.typ == tName) && t.val == s
}

func (t token) isName(s string) bool { return t.typ == tName && t.val == s }

func (p *parser) skipOp(s string) bool {
	if t := p.cur(); t.typ == tOp && t.val == s {
		p.next()
		return true
	}
	return false
}

func (p *parser) skipName(s string) bool {
	if p.cur().isName(s) {
		p.next()
		return true
	}
	return false
}

func (p *parser) expectOp(s string) token {
	t := p.cur()
	if t.typ != tOp || t.val != s {
		if t.typ == tEOF {
			p.fail(t.pos, "unexpected end of template, expected '%s'.", s)
		}
		p.fail(t.pos, "expected token '%s', got '%s'", s, t.describe())
	}
	return p.next()
}

func (p *parser) expectType(typ tokType, what string) token {
	t := p.cur()
	if t.typ != typ {
		if t.typ == tEOF {
			p.fail(t.pos, "unexpected end of template, expected '%s'.", what)
		}
		p.fail(t.pos, "expected token '%s', got '%s'", what, t.describe())
	}
	return p.next()
}

func (p *parser) expectName() token { return p.expectType(tName, "name") }

func (p *parser) enter(pos int) {
	p.depth++
	if p.depth > maxParseDepth {
		p.fail(pos, "template nesting is too deep (more than %d levels)", maxParseDepth)
	}
}

func (p *parser) leave() { p.depth-- }

// restoreDepth undoes the enter calls of an operator chain (a + b + c
// nests as deeply as (a + (b + c)) in the tree).
func (p *parser) restoreDepth(d int) { p.depth = d }

// parseTemplate parses a token stream into the template body.
func parseTemplate(toks []token) (body []node, err error) {
	p := &parser{toks: toks}
	defer func() {
		if r := recover(); r != nil {
			pe, ok := r.(*parseError)
			if !ok {
				panic(r)
			}
			err = pe
		}
	}()
	body = p.subparse(nil)
	if t := p.cur(); t.typ != tEOF {
		p.fail(t.pos, "unexpected '%s'", t.describe())
	}
	return body, nil
}

// subparse parses nodes until EOF or a block whose first name is one of
// end. It stops with the current token on that name.
func (p *parser) subparse(end []string) []node {
	var body []node
	for {
		t := p.cur()
		switch t.typ {
		case tEOF:
			return body
		case tData:
			p.next()
			body = append(body, &textNode{text: t.val})
		case tVarBegin:
			p.next()
			e := p.parseTuple(false, true, nil, false)
			body = append(body, &outputNode{e: e})
			p.expectType(tVarEnd, "end of print statement")
		case tBlockBegin:
			p.next()
			if c := p.cur(); c.typ == tName {
				for _, e := range end {
					if c.val == e {
						return body
					}
				}
			}
			body = append(body, p.parseStatement(end)...)
			p.expectType(tBlockEnd, "end of statement block")
		default:
			p.fail(t.pos, "internal parsing error: unexpected %s", t.describe())
		}
	}
}

// parseStatements parses the body of a block statement up to one of end,
// leaving the current token on the end name (dropped if drop).
func (p *parser) parseStatements(end []string, drop bool) []node {
	p.skipOp(":")
	p.expectType(tBlockEnd, "end of statement block")
	start := p.cur().pos
	p.enter(start)
	body := p.subparse(end)
	p.leave()
	if t := p.cur(); t.typ == tEOF {
		p.failEOF(t.pos, end)
	}
	if drop {
		p.next()
	}
	return body
}

func (p *parser) failEOF(pos int, end []string) {
	if len(end) == 0 {
		p.fail(pos, "Unexpected end of template.")
	}
	quoted := make([]string, len(end))
	for i, e := range end {
		quoted[i] = "'" + e + "'"
	}
	p.fail(pos, "Unexpected end of template. Jinja was looking for the following tags: %s. The innermost block that needs to be closed is '%s'.",
		strings.Join(quoted, " or "), blockNameFor(end[len(end)-1]))
}

func blockNameFor(end string) string { return strings.TrimPrefix(end, "end") }

var endTagNames = map[string]bool{
	"endif": true, "endfor": true, "endmacro": true, "endset": true, "endcall": true,
	"endfilter": true, "endwith": true, "endgeneration": true, "else": true, "elif": true,
	"endblock": true, "endraw": true, "endautoescape": true,
}

func (p *parser) parseStatement(end []string) []node {
	t := p.cur()
	if t.typ != tName {
		p.fail(t.pos, "tag name expected")
	}
	p.enter(t.pos)
	defer p.leave()
	switch t.val {
	case "if":
		return []node{p.parseIf()}
	case "for":
		return []node{p.parseFor()}
	case "set":
		return []node{p.parseSet()}
	case "macro":
		return []node{p.parseMacro()}
	case "call":
		return []node{p.parseCallBlock()}
	case "filter":
		return []node{p.parseFilterBlock()}
	case "with":
		return []node{p.parseWith()}
	case "print":
		p.next()
		var out []node
		for p.cur().typ != tBlockEnd {
			if len(out) > 0 {
				p.expectOp(",")
			}
			out = append(out, &outputNode{e: p.parseExpression(true)})
		}
		return out
	case "break":
		p.next()
		return []node{&breakNode{}}
	case "continue":
		p.next()
		return []node{&continueNode{}}
	case "generation":
		p.next()
		body := p.parseStatements([]string{"endgeneration"}, true)
		return []node{&generationNode{body: body}}
	case "block", "extends", "include", "import", "from", "autoescape":
		p.fail(t.pos, "the '%s' tag is not supported in chat templates", t.val)
	}
	if endTagNames[t.val] && len(end) > 0 {
		p.fail(t.pos, "Encountered unknown tag '%s'. Jinja was looking for the following tags: %s. The innermost block that needs to be closed is '%s'.",
			t.val, quoteJoin(end), blockNameFor(end[len(end)-1]))
	}
	p.fail(t.pos, "Encountered unknown tag '%s'.", t.val)
	return nil
}

func quoteJoin(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = "'" + n + "'"
	}
	return strings.Join(q, " or ")
}

func (p *parser) parseIf() node {
	p.next()
	n := &ifNode{}
	for {
		n.conds = append(n.conds, p.parseTuple(false, false, nil, false))
		n.bodies = append(n.bodies, p.parseStatements([]string{"elif", "else", "endif"}, false))
		t := p.next()
		if t.val == "elif" {
			continue
		}
		if t.val == "else" {
			n.els = p.parseStatements([]string{"endif"}, true)
		}
		return n
	}
}

func (p *parser) parseFor() node {
	pos := p.next().pos
	n := &forNode{pos: pos}
	n.target = p.parseAssignTarget(true, false, []string{"in"}, false)
	if !p.skipName("in") {
		t := p.cur()
		p.fail(t.pos, "expected token 'in', got '%s'", t.describe())
	}
	n.iter = p.parseTuple(false, false, []string{"recursive"}, false)
	if p.skipName("if") {
		n.filter = p.parseExpression(true)
	}
	if p.cur().isName("recursive") {
		p.fail(p.cur().pos, "recursive loops are not supported")
	}
	n.body = p.parseStatements([]string{"endfor", "else"}, false)
	if p.next().val == "else" {
		n.els = p.parseStatements([]string{"endfor"}, true)
	}
	return n
}

func (p *parser) parseSet() node {
	pos := p.next().pos
	tgt := p.parseAssignTarget(true, false, nil, true)
	if p.skipOp("=") {
		return &setNode{target: tgt, value: p.parseTuple(false, true, nil, false), pos: pos}
	}
	var f *filterExpr
	if p.cur().is("|") {
		f = p.parseFilter(nil, false).(*filterExpr)
	}
	body := p.parseStatements([]string{"endset"}, true)
	return &setBlockNode{target: tgt, filter: f, body: body, pos: pos}
}

func (p *parser) parseMacro() node {
	pos := p.next().pos
	name := p.expectName().val
	if name == "true" || name == "false" || name == "none" || name == "True" || name == "False" || name == "None" {
		p.fail(pos, "can't assign to 'const'")
	}
	def := &macroDef{name: name, pos: pos}
	p.parseSignature(def)
	def.body = p.parseStatements([]string{"endmacro"}, true)
	def.scanNames()
	return &macroNode{def: def}
}

func (p *parser) parseSignature(def *macroDef) {
	p.expectOp("(")
	for p.cur().typ != tOp || p.cur().val != ")" {
		if len(def.params) > 0 {
			p.expectOp(",")
		}
		name := p.expectName().val
		if p.skipOp("=") {
			def.defaults = append(def.defaults, p.parseExpression(true))
		} else if len(def.defaults) > 0 {
			p.fail(p.cur().pos, "non-default argument follows default argument")
		}
		def.params = append(def.params, name)
	}
	p.expectOp(")")
}

func (p *parser) parseCallBlock() node {
	pos := p.next().pos
	def := &macroDef{name: "caller", pos: pos}
	if p.cur().is("(") {
		p.parseSignature(def)
	}
	e := p.parseExpression(true)
	call, ok := e.(*callExpr)
	if !ok {
		p.fail(pos, "expected call")
	}
	def.body = p.parseStatements([]string{"endcall"}, true)
	def.scanNames()
	return &callBlockNode{call: call, caller: def}
}

func (p *parser) parseFilterBlock() node {
	p.next()
	f := p.parseFilter(nil, true).(*filterExpr)
	body := p.parseStatements([]string{"endfilter"}, true)
	return &filterBlockNode{filter: f, body: body}
}

func (p *parser) parseWith() node {
	p.next()
	n := &withNode{}
	for p.cur().typ != tBlockEnd {
		if len(n.targets) > 0 {
			p.expectOp(",")
		}
		n.targets = append(n.targets, p.parseAssignTarget(true, false, nil, false))
		p.expectOp("=")
		n.values = append(n.values, p.parseExpression(true))
	}
	n.body = p.parseStatements([]string{"endwith"}, true)
	return n
}

// parseAssignTarget parses the left side of set/for/with.
func (p *parser) parseAssignTarget(withTuple, nameOnly bool, extraEnd []string, withNamespace bool) target {
	t := p.cur()
	if withNamespace && t.typ == tName && p.look().is(".") {
		p.next()
		p.next()
		attr := p.expectName()
		return &nsTarget{name: t.val, attr: attr.val, pos: t.pos}
	}
	var e expr
	if nameOnly {
		e = &nameExpr{name: p.expectName().val, p: t.pos}
	} else if withTuple {
		e = p.parseTuple(true, true, extraEnd, false)
	} else {
		e = p.parsePrimary()
	}
	tg, ok := toTarget(e)
	if !ok {
		p.fail(t.pos, "can't assign to %s", targetKindName(e))
	}
	return tg
}

func targetKindName(e expr) string {
	switch e.(type) {
	case *constExpr:
		return "'const'"
	case *tupleExpr:
		return "'tuple'"
	case *listExpr:
		return "'list'"
	}
	return "expression"
}

func toTarget(e expr) (target, bool) {
	switch x := e.(type) {
	case *nameExpr:
		switch x.name {
		case "true", "false", "none", "True", "False", "None":
			return nil, false
		}
		return &nameTarget{name: x.name}, true
	case *tupleExpr:
		tt := &tupleTarget{}
		for _, it := range x.items {
			sub, ok := toTarget(it)
			if !ok {
				return nil, false
			}
			tt.items = append(tt.items, sub)
		}
		return tt, true
	}
	return nil, false
}

// parseExpression is parse_expression(with_condexpr).
func (p *parser) parseExpression(withCond bool) expr {
	p.enter(p.cur().pos)
	defer p.leave()
	if withCond {
		return p.parseCondExpr()
	}
	return p.parseOr()
}

func (p *parser) parseCondExpr() expr {
	pos := p.cur().pos
	e1 := p.parseOr()
	for p.skipName("if") {
		e2 := p.parseOr()
		var e3 expr
		if p.skipName("else") {
			e3 = p.parseCondExpr()
		}
		e1 = &condExpr{test: e2, yes: e1, no: e3, p: pos}
		pos = p.cur().pos
	}
	return e1
}

func (p *parser) parseOr() expr {
	defer p.restoreDepth(p.depth)
	l := p.parseAnd()
	for p.cur().isName("or") {
		pos := p.next().pos
		p.enter(pos)
		l = &orExpr{l: l, r: p.parseAnd(), p: pos}
	}
	return l
}

func (p *parser) parseAnd() expr {
	defer p.restoreDepth(p.depth)
	l := p.parseNot()
	for p.cur().isName("and") {
		pos := p.next().pos
		p.enter(pos)
		l = &andExpr{l: l, r: p.parseNot(), p: pos}
	}
	return l
}

func (p *parser) parseNot() expr {
	if t := p.cur(); t.isName("not") {
		p.next()
		p.enter(t.pos)
		defer p.leave()
		return &notExpr{e: p.parseNot(), p: t.pos}
	}
	return p.parseCompare()
}

var compareOps = map[string]string{"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}

func (p *parser) parseCompare() expr {
	pos := p.cur().pos
	e := p.parseMath1()
	var ops []cmpOp
	for {
		t := p.cur()
		if op, ok := compareOps[t.val]; ok && t.typ == tOp {
			p.next()
			ops = append(ops, cmpOp{op: op, e: p.parseMath1()})
		} else if t.isName("in") {
			p.next()
			ops = append(ops, cmpOp{op: "in", e: p.parseMath1()})
		} else if t.isName("not") && p.look().isName("in") {
			p.next()
			p.next()
			ops = append(ops, cmpOp{op: "notin", e: p.parseMath1()})
		} else {
			break
		}
	}
	if len(ops) == 0 {
		return e
	}
	return &compareExpr{first: e, ops: ops, p: pos}
}

func (p *parser) parseMath1() expr {
	defer p.restoreDepth(p.depth)
	l := p.parseConcat()
	for t := p.cur(); t.typ == tOp && (t.val == "+" || t.val == "-"); t = p.cur() {
		p.next()
		p.enter(t.pos)
		l = &binExpr{op: t.val, l: l, r: p.parseConcat(), p: t.pos}
	}
	return l
}

func (p *parser) parseConcat() expr {
	pos := p.cur().pos
	items := []expr{p.parseMath2()}
	for p.cur().is("~") && p.cur().typ == tOp {
		p.next()
		items = append(items, p.parseMath2())
	}
	if len(items) == 1 {
		return items[0]
	}
	return &concatExpr{items: items, p: pos}
}

func (p *parser) parseMath2() expr {
	defer p.restoreDepth(p.depth)
	l := p.parsePow()
	for t := p.cur(); t.typ == tOp && (t.val == "*" || t.val == "/" || t.val == "//" || t.val == "%"); t = p.cur() {
		p.next()
		p.enter(t.pos)
		l = &binExpr{op: t.val, l: l, r: p.parsePow(), p: t.pos}
	}
	return l
}

func (p *parser) parsePow() expr {
	defer p.restoreDepth(p.depth)
	l := p.parseUnary(true)
	for t := p.cur(); t.typ == tOp && t.val == "**"; t = p.cur() {
		p.next()
		p.enter(t.pos)
		l = &binExpr{op: "**", l: l, r: p.parseUnary(true), p: t.pos}
	}
	return l
}

func (p *parser) parseUnary(withFilter bool) expr {
	t := p.cur()
	var e expr
	if t.typ == tOp && (t.val == "-" || t.val == "+") {
		p.next()
		p.enter(t.pos)
		e = &negExpr{e: p.parseUnary(false), neg: t.val == "-", p: t.pos}
		p.leave()
	} else {
		e = p.parsePrimary()
	}
	e = p.parsePostfix(e)
	if withFilter {
		e = p.parseFilterExpr(e)
	}
	return e
}

func (p *parser) parsePrimary() expr {
	t := p.cur()
	switch t.typ {
	case tName:
		p.next()
		switch t.val {
		case "true", "True":
			return &constExpr{v: Bool(true), p: t.pos}
		case "false", "False":
			return &constExpr{v: Bool(false), p: t.pos}
		case "none", "None":
			return &constExpr{v: None(), p: t.pos}
		}
		return &nameExpr{name: t.val, p: t.pos}
	case tString:
		p.next()
		if p.cur().typ != tString {
			return &constExpr{v: String(t.val), p: t.pos}
		}
		var b strings.Builder
		b.WriteString(t.val)
		for p.cur().typ == tString {
			b.WriteString(p.next().val)
		}
		return &constExpr{v: String(b.String()), p: t.pos}
	case tInt, tFloat:
		p.next()
		return &constExpr{v: t.num, p: t.pos}
	case tOp:
		switch t.val {
		case "(":
			p.next()
			p.enter(t.pos)
			e := p.parseTuple(false, true, nil, true)
			p.leave()
			p.expectOp(")")
			return e
		case "[":
			return p.parseList()
		case "{":
			return p.parseDict()
		}
	}
	if t.typ == tEOF {
		p.fail(t.pos, "unexpected end of template")
	}
	p.fail(t.pos, "unexpected '%s'", t.describe())
	return nil
}

// isTupleEnd is Parser.is_tuple_end.
func (p *parser) isTupleEnd(extraEnd []string) bool {
	t := p.cur()
	if t.typ == tVarEnd || t.typ == tBlockEnd || (t.typ == tOp && t.val == ")") {
		return true
	}
	for _, e := range extraEnd {
		if t.isName(e) {
			return true
		}
	}
	return false
}

// parseTuple is Parser.parse_tuple.
func (p *parser) parseTuple(simplified, withCond bool, extraEnd []string, explicitParens bool) expr {
	pos := p.cur().pos
	var items []expr
	isTuple := false
	for {
		if len(items) > 0 {
			p.expectOp(",")
		}
		if p.isTupleEnd(extraEnd) {
			break
		}
		if simplified {
			items = append(items, p.parsePrimary())
		} else {
			items = append(items, p.parseExpression(withCond))
		}
		if p.cur().typ == tOp && p.cur().val == "," {
			isTuple = true
		} else {
			break
		}
	}
	if !isTuple {
		if len(items) > 0 {
			return items[0]
		}
		if !explicitParens {
			p.fail(p.cur().pos, "Expected an expression, got '%s'", p.cur().describe())
		}
	}
	return &tupleExpr{items: items, p: pos}
}

func (p *parser) parseList() expr {
	pos := p.expectOp("[").pos
	p.enter(pos)
	defer p.leave()
	var items []expr
	for !p.cur().is("]") || p.cur().typ != tOp {
		if len(items) > 0 {
			p.expectOp(",")
		}
		if p.cur().typ == tOp && p.cur().val == "]" {
			break
		}
		items = append(items, p.parseExpression(true))
	}
	p.expectOp("]")
	return &listExpr{items: items, p: pos}
}

func (p *parser) parseDict() expr {
	pos := p.expectOp("{").pos
	p.enter(pos)
	defer p.leave()
	d := &dictExpr{p: pos}
	for !p.cur().is("}") || p.cur().typ != tOp {
		if len(d.keys) > 0 {
			p.expectOp(",")
		}
		if p.cur().typ == tOp && p.cur().val == "}" {
			break
		}
		k := p.parseExpression(true)
		p.expectOp(":")
		d.keys = append(d.keys, k)
		d.vals = append(d.vals, p.parseExpression(true))
	}
	p.expectOp("}")
	return d
}

func (p *parser) parsePostfix(e expr) expr {
	defer p.restoreDepth(p.depth)
	for {
		t := p.cur()
		if t.typ != tOp {
			return e
		}
		p.enter(t.pos)
		switch t.val {
		case ".", "[":
			e = p.parseSubscript(e)
		case "(":
			e = p.parseCall(e)
		default:
			return e
		}
	}
}

func (p *parser) parseFilterExpr(e expr) expr {
	defer p.restoreDepth(p.depth)
	for {
		t := p.cur()
		p.enter(t.pos)
		switch {
		case t.typ == tOp && t.val == "|":
			e = p.parseFilter(e, false)
		case t.isName("is"):
			e = p.parseTest(e)
		case t.typ == tOp && t.val == "(":
			e = p.parseCall(e)
		default:
			return e
		}
	}
}

func (p *parser) parseSubscript(e expr) expr {
	t := p.next()
	if t.val == "." {
		a := p.next()
		switch a.typ {
		case tName:
			return &getattrExpr{obj: e, attr: a.val, p: t.pos}
		case tInt:
			return &getitemExpr{obj: e, key: &constExpr{v: a.num, p: a.pos}, p: t.pos}
		}
		p.fail(a.pos, "expected name or number")
	}
	p.enter(t.pos)
	defer p.leave()
	var args []expr
	for !(p.cur().typ == tOp && p.cur().val == "]") {
		if len(args) > 0 {
			p.expectOp(",")
		}
		args = append(args, p.parseSubscribed())
	}
	p.expectOp("]")
	if len(args) == 1 {
		return &getitemExpr{obj: e, key: args[0], p: t.pos}
	}
	return &getitemExpr{obj: e, key: &tupleExpr{items: args, p: t.pos}, p: t.pos}
}

func (p *parser) parseSubscribed() expr {
	pos := p.cur().pos
	var args []expr
	isColon := func() bool { return p.cur().typ == tOp && p.cur().val == ":" }
	if isColon() {
		p.next()
		args = []expr{nil}
	} else {
		e := p.parseExpression(true)
		if !isColon() {
			return e
		}
		p.next()
		args = []expr{e}
	}
	endish := func() bool {
		t := p.cur()
		return t.typ == tOp && (t.val == "]" || t.val == ",")
	}
	switch {
	case isColon():
		args = append(args, nil)
	case !endish():
		args = append(args, p.parseExpression(true))
	default:
		args = append(args, nil)
	}
	if isColon() {
		p.next()
		if !endish() {
			args = append(args, p.parseExpression(true))
		} else {
			args = append(args, nil)
		}
	} else {
		args = append(args, nil)
	}
	return &sliceExpr{start: args[0], stop: args[1], step: args[2], p: pos}
}

func (p *parser) parseCallArgs() callArgs {
	open := p.expectOp("(")
	var ca callArgs
	requireComma := false
	ensure := func(ok bool) {
		if !ok {
			p.fail(open.pos, "invalid syntax for function call expression")
		}
	}
	for !(p.cur().typ == tOp && p.cur().val == ")") {
		if requireComma {
			p.expectOp(",")
			if p.cur().typ == tOp && p.cur().val == ")" {
				break
			}
		}
		t := p.cur()
		switch {
		case t.typ == tOp && t.val == "*":
			ensure(ca.dynArgs == nil && ca.dynKwargs == nil)
			p.next()
			ca.dynArgs = p.parseExpression(true)
		case t.typ == tOp && t.val == "**":
			ensure(ca.dynKwargs == nil)
			p.next()
			ca.dynKwargs = p.parseExpression(true)
		case t.typ == tName && p.look().typ == tOp && p.look().val == "=":
			ensure(ca.dynKwargs == nil)
			p.next()
			p.next()
			ca.kwargs = append(ca.kwargs, kwarg{name: t.val, e: p.parseExpression(true)})
		default:
			ensure(ca.dynArgs == nil && ca.dynKwargs == nil && len(ca.kwargs) == 0)
			ca.args = append(ca.args, p.parseExpression(true))
		}
		requireComma = true
	}
	p.expectOp(")")
	return ca
}

func (p *parser) parseCall(e expr) expr {
	pos := p.cur().pos
	p.enter(pos)
	defer p.leave()
	return &callExpr{fn: e, callArgs: p.parseCallArgs(), p: pos}
}

func (p *parser) dottedName() string {
	name := p.expectName().val
	for p.cur().typ == tOp && p.cur().val == "." {
		p.next()
		name += "." + p.expectName().val
	}
	return name
}

// parseFilter parses "| name(args) | ..." (or, with startInline, the
// first filter without its bar).
func (p *parser) parseFilter(e expr, startInline bool) expr {
	defer p.restoreDepth(p.depth)
	for (p.cur().typ == tOp && p.cur().val == "|") || startInline {
		p.enter(p.cur().pos)
		if !startInline {
			p.next()
		}
		pos := p.cur().pos
		name := p.dottedName()
		var ca callArgs
		if p.cur().typ == tOp && p.cur().val == "(" {
			p.enter(pos)
			ca = p.parseCallArgs()
			p.leave()
		}
		if _, ok := filters[name]; !ok {
			if !knownJinjaFilters[name] {
				p.fail(pos, "No filter named '%s'.", name)
			}
		}
		e = &filterExpr{in: e, name: name, callArgs: ca, p: pos}
		startInline = false
	}
	return e
}

func (p *parser) parseTest(e expr) expr {
	isPos := p.next().pos
	negated := p.skipName("not")
	pos := p.cur().pos
	name := p.dottedName()
	var ca callArgs
	t := p.cur()
	switch {
	case t.typ == tOp && t.val == "(":
		p.enter(pos)
		ca = p.parseCallArgs()
		p.leave()
	case (t.typ == tName || t.typ == tString || t.typ == tInt || t.typ == tFloat ||
		(t.typ == tOp && (t.val == "(" || t.val == "[" || t.val == "{"))) &&
		!t.isName("else") && !t.isName("or") && !t.isName("and"):
		if t.isName("is") {
			p.fail(t.pos, "You cannot chain multiple tests with is")
		}
		arg := p.parsePostfix(p.parsePrimary())
		ca.args = []expr{arg}
	}
	if _, ok := tests[name]; !ok && !knownJinjaTests[name] {
		p.fail(pos, "No test named '%s'.", name)
	}
	var out expr = &testExpr{in: e, name: name, callArgs: ca, p: pos}
	if negated {
		out = &notExpr{e: out, p: isPos}
	}
	return out
}

// scanNames records whether a macro body references varargs, kwargs or
// caller, which decides how extra call arguments are accepted.
func (d *macroDef) scanNames() {
	walkNodes(d.body, func(e expr) {
		if n, ok := e.(*nameExpr); ok {
			switch n.name {
			case "varargs":
				d.usesVar = true
			case "kwargs":
				d.usesKw = true
			case "caller":
				d.usesCall = true
			}
		}
	})
}

// walkNodes calls f for every expression in the statements.
func walkNodes(body []node, f func(expr)) {
	for _, n := range body {
		switch x := n.(type) {
		case *outputNode:
			walkExpr(x.e, f)
		case *ifNode:
			for i, c := range x.conds {
				walkExpr(c, f)
				walkNodes(x.bodies[i], f)
			}
			walkNodes(x.els, f)
		case *forNode:
			walkExpr(x.iter, f)
			walkExpr(x.filter, f)
			walkNodes(x.body, f)
			walkNodes(x.els, f)
		case *setNode:
			walkExpr(x.value, f)
		case *setBlockNode:
			if x.filter != nil {
				walkExpr(x.filter, f)
			}
			walkNodes(x.body, f)
		case *macroNode:
			for _, d := range x.def.defaults {
				walkExpr(d, f)
			}
			walkNodes(x.def.body, f)
		case *callBlockNode:
			walkExpr(x.call, f)
			walkNodes(x.caller.body, f)
		case *filterBlockNode:
			walkExpr(x.filter, f)
			walkNodes(x.body, f)
		case *withNode:
			for _, v := range x.values {
				walkExpr(v, f)
			}
			walkNodes(x.body, f)
		case *generationNode:
			walkNodes(x.body, f)
		}
	}
}

func walkExpr(e expr, f func(expr)) {
	if e == nil {
		return
	}
	f(e)
	walkArgs := func(ca callArgs) {
		for _, a := range ca.args {
			walkExpr(a, f)
		}
		for _, k := range ca.kwargs {
			walkExpr(k.e, f)
		}
		walkExpr(ca.dynArgs, f)
		walkExpr(ca.dynKwargs, f)
	}
	switch x := e.(type) {
	case *getattrExpr:
		walkExpr(x.obj, f)
	case *getitemExpr:
		walkExpr(x.obj, f)
		walkExpr(x.key, f)
	case *sliceExpr:
		walkExpr(x.start, f)
		walkExpr(x.stop, f)
		walkExpr(x.step, f)
	case *callExpr:
		walkExpr(x.fn, f)
		walkArgs(x.callArgs)
	case *filterExpr:
		walkExpr(x.in, f)
		walkArgs(x.callArgs)
	case *testExpr:
		walkExpr(x.in, f)
		walkArgs(x.callArgs)
	case *notExpr:
		walkExpr(x.e, f)
	case *negExpr:
		walkExpr(x.e, f)
	case *binExpr:
		walkExpr(x.l, f)
		walkExpr(x.r, f)
	case *concatExpr:
		for _, it := range x.items {
			walkExpr(it, f)
		}
	case *compareExpr:
		walkExpr(x.first, f)
		for _, o := range x.ops {
			walkExpr(o.e, f)
		}
	case *andExpr:
		walkExpr(x.l, f)
		walkExpr(x.r, f)
	case *orExpr:
		walkExpr(x.l, f)
		walkExpr(x.r, f)
	case *condExpr:
		walkExpr(x.test, f)
		walkExpr(x.yes, f)
		walkExpr(x.no, f)
	case *listExpr:
		for _, it := range x.items {
			walkExpr(it, f)
		}
	case *tupleExpr:
		for _, it := range x.items {
			walkExpr(it, f)
		}
	case *dictExpr:
		for i := range x.keys {
			walkExpr(x.keys[i], f)
			walkExpr(x.vals[i], f)
		}
	}
}
