package parser

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/npuserve/npuserve/engine/pyfmt"
)

// ToolCall is one parsed call, as it goes into message.tool_calls.
type ToolCall struct {
	ID   string
	Name string
	// Arguments is a JSON text, written as Python's json.dumps(...,
	// ensure_ascii=False) writes it ({"k": "v", "n": 1}); "{}" when the
	// call has no arguments.
	Arguments string
}

// EventKind says what a DeltaEvent carries.
type EventKind uint8

// The kinds of DeltaEvent.
const (
	// EventContent: Text is content.
	EventContent EventKind = iota + 1
	// EventToolStart: a new call: Index, ID and Name are set. Its
	// arguments follow in EventToolArgs events.
	EventToolStart
	// EventToolArgs: Text is the next fragment of call Index's arguments.
	EventToolArgs
)

// DeltaEvent is one step of streamed tool-parser output.
type DeltaEvent struct {
	Kind  EventKind
	Text  string
	Index int
	ID    string
	Name  string
}

// ToolsConfig is the request context of a tool parser.
type ToolsConfig struct {
	Tools  []Tool
	Choice ToolChoice
	// NewID makes tool-call ids; nil means NewToolCallID.
	NewID func() string
}

// NewTools returns the tool-call parser registered under name: "glm47"
// (vLLM `--tool-call-parser glm47`) or "glm45", which here is the same
// parser (the glm47 format is a superset: the name may be followed by
// <arg_key> without a newline).
func NewTools(name string, cfg ToolsConfig) (*GLM47Tools, error) {
	switch name {
	case "glm47", "glm45":
		return NewGLM47Tools(cfg), nil
	}
	return nil, fmt.Errorf("parser: unknown tool-call parser %q (have glm47, glm45)", name)
}

type toolState uint8

const (
	tsContent   toolState = iota
	tsName                // after <tool_call>, reading the function name
	tsBody                // after the name, between argument pairs
	tsKey                 // inside <arg_key>
	tsAfterKey            // between </arg_key> and <arg_value>
	tsValue               // inside <arg_value>
	tsJSON                // reading a JSON object of arguments
	tsAfterJSON           // the JSON object is complete; </tool_call> may follow
	tsSkip                // a call to an unknown function: dropped up to </tool_call>
)

var toolTags = [...][]string{
	tsContent:   {TagToolCallStart},
	tsName:      {TagToolCallEnd, TagArgKeyStart},
	tsBody:      {TagToolCallEnd, TagArgKeyStart},
	tsKey:       {TagArgKeyEnd, TagToolCallEnd},
	tsAfterKey:  {TagArgValueStart, TagArgKeyStart, TagToolCallEnd},
	tsValue:     {TagArgValueEnd, TagToolCallEnd},
	tsJSON:      {TagToolCallEnd},
	tsAfterJSON: {TagToolCallEnd, TagToolCallStart},
	tsSkip:      {TagToolCallEnd},
}

// callState is the call being read.
type callState struct {
	nameBuf   strings.Builder
	nameNonWS bool
	name      string
	index     int              // index into calls once accepted, else -1
	raw       *strings.Builder // the call's text while it is not accepted
	argsOpen  bool             // "{" has been emitted
	seen      map[string]bool

	// the current <arg_key>/<arg_value> pair
	keyBuf    strings.Builder
	afterKey  strings.Builder
	key       string
	kind      argKind
	streaming bool // a string value is being streamed
	valBuf    strings.Builder
	pairs     int  // pairs completed (or started streaming)
	junk      bool // non-JSON text after the name: no JSON arguments

	// JSON arguments
	js     strings.Builder
	depth  int
	inStr  bool
	escNxt bool
}

// GLM47Tools is the GLM tool-call parser (vLLM `--tool-call-parser
// glm47`). It reads content text (reasoning already removed) and finds
//
//	<tool_call>NAME[\n]<arg_key>K</arg_key>\s*<arg_value>V</arg_value>…</tool_call>
//
// Behaviour, and the vLLM code it follows:
//
//   - No parsing at all when the request has no tools or tool_choice is
//     "none" (glm4_moe_tool_parser.py _tools_enabled): all text is content.
//   - The name ends at a newline (after some non-space text), <arg_key>,
//     </tool_call> or a '{' that starts JSON arguments; it is stripped
//     (glm47_moe.py _emit_name_delta). A call whose name is not among the
//     request's tools is dropped with all its text, as vLLM's parser engine
//     does with validate_tool_names=True (parser_engine.py
//     _accept_tool_name). As an extension for GLM-5.3-Flash, a trailing '>'
//     is removed and "Group/func" resolves to a listed "func" (SGLang
//     glm53_flash_detector.py).
//   - Keys are stripped; a value whose schema type is "string" is the raw
//     text, any other value is json.loads of the stripped text, else
//     ast.literal_eval, else the stripped text (glm4_moe_tool_parser.py
//     _is_string_type/_deserialize). Arguments are json.dumps of the
//     ordered dict with ensure_ascii=False; no arguments give "{}".
//   - Streaming: the call header (index, id, name) is sent once the name
//     is complete (never a prefix of it, vLLM #39757); arguments follow as
//     fragments whose concatenation is the final Arguments. A string-typed
//     value streams as it is generated (vLLM #32829); other values are sent
//     when </arg_value> arrives, since their JSON form is not known before;
//     "}" is sent at </tool_call>.
//   - Content is all text outside calls (vLLM's parser engine). Extract
//     strips it when at least one call was found and returns "" for
//     whitespace-only content (parser_engine.py _strip_content_whitespace).
//     Feed holds back whitespace at the start of the content until non-space
//     text arrives (it is dropped if a call came first) and whitespace at the
//     end until more text arrives (dropped at Flush if calls were made).
//   - JSON arguments (GLM-5.3-Flash): after the name, a JSON object
//     ({"k": v}, or {"name": …, "arguments"/"parameters": …} with or
//     without a name before it) is accepted; string values are typed by
//     the schema as above when it declares a non-string type.
//   - An unterminated call at the end of the output is closed (its
//     complete arguments kept, a half-written value kept as written); a
//     <tool_call> whose name never completed is returned as content text.
type GLM47Tools struct {
	cfg     ToolsConfig
	schemas toolSchemas
	active  bool
	newID   func() string
	raw     bool // Extract mode: content is collected raw, no events

	sc        scanner
	state     toolState
	cur       *callState
	calls     []ToolCall
	argBufs   []*strings.Builder // arguments of calls[i] so far
	events    []DeltaEvent
	extracted strings.Builder // content, in Extract mode

	sawNonWS bool
	leadWS   string
	trailWS  string
}

// NewGLM47Tools returns a parser for one request.
func NewGLM47Tools(cfg ToolsConfig) *GLM47Tools {
	p := &GLM47Tools{
		cfg:     cfg,
		schemas: buildSchemas(cfg.Tools),
		active:  len(cfg.Tools) > 0 && cfg.Choice.Mode != ToolChoiceNone,
		newID:   cfg.NewID,
	}
	if p.newID == nil {
		p.newID = NewToolCallID
	}
	return p
}

// Active reports whether tool calls are parsed at all (the request has
// tools and tool_choice is not "none").
func (p *GLM47Tools) Active() bool { return p.active }

// Calls returns (a copy of) the calls accepted so far. Arguments are
// complete only after the call's </tool_call> (or Flush).
func (p *GLM47Tools) Calls() []ToolCall {
	if len(p.calls) == 0 {
		return nil
	}
	out := make([]ToolCall, len(p.calls))
	for i, c := range p.calls {
		c.Arguments = p.argBufs[i].String()
		out[i] = c
	}
	return out
}

// Extract parses a whole content text and returns the remaining content
// and the calls. It does not touch streaming state, but it draws ids from
// the configured generator.
func (p *GLM47Tools) Extract(content string) (string, []ToolCall) {
	if !p.active {
		return content, nil
	}
	q := &GLM47Tools{cfg: p.cfg, schemas: p.schemas, active: true, newID: p.newID, raw: true}
	q.Feed(content)
	q.Flush()
	out := q.extracted.String()
	calls := q.Calls()
	if len(calls) > 0 {
		out = pyStrip(out)
	}
	return out, calls
}

// Feed consumes a content delta.
func (p *GLM47Tools) Feed(delta string) []DeltaEvent {
	if !p.active {
		if delta == "" {
			return nil
		}
		return []DeltaEvent{{Kind: EventContent, Text: delta}}
	}
	p.sc.feed(delta)
	p.run(false)
	return p.take()
}

// Flush ends the output: held-back text is released, an open call is
// closed.
func (p *GLM47Tools) Flush() []DeltaEvent {
	if !p.active {
		return nil
	}
	p.run(true)
	switch p.state {
	case tsName:
		p.abandonCall()
	case tsValue:
		p.completePair()
		p.endCall()
	case tsBody, tsKey, tsAfterKey:
		p.endCall()
	case tsJSON:
		p.finishJSON(p.cur.js.String())
	}
	p.state = tsContent
	p.cur = nil
	if !p.raw {
		if len(p.calls) == 0 {
			p.emit(DeltaEvent{Kind: EventContent, Text: p.leadWS + p.trailWS})
		}
		p.leadWS, p.trailWS = "", ""
	}
	return p.take()
}

func (p *GLM47Tools) take() []DeltaEvent {
	ev := p.events
	p.events = nil
	return ev
}

// emit appends an event, merging it into the previous one when both are
// content or both are argument fragments of the same call.
func (p *GLM47Tools) emit(ev DeltaEvent) {
	if p.raw {
		if ev.Kind == EventContent {
			p.extracted.WriteString(ev.Text)
		}
		return
	}
	if ev.Kind != EventToolStart && ev.Text == "" {
		return
	}
	if n := len(p.events); n > 0 && ev.Kind != EventToolStart {
		last := &p.events[n-1]
		if last.Kind == ev.Kind && (ev.Kind == EventContent || last.Index == ev.Index) {
			last.Text += ev.Text
			return
		}
	}
	p.events = append(p.events, ev)
}

func (p *GLM47Tools) run(final bool) {
	for {
		text, tag, ok := p.sc.next(toolTags[p.state], final)
		if !ok {
			return
		}
		if p.cur != nil && p.cur.raw != nil {
			p.cur.raw.WriteString(text)
			p.cur.raw.WriteString(tag)
		}
		if tag == "" {
			p.text(text)
		} else {
			p.tag(tag)
		}
	}
}

// text handles plain text in the current state.
func (p *GLM47Tools) text(s string) {
outer:
	for s != "" {
		switch p.state {
		case tsContent:
			p.content(s)
			return
		case tsName:
			c := p.cur
			for i, r := range s {
				switch {
				case r == '{':
					c.nameBuf.WriteString(s[:i])
					p.endName(true)
					if p.state == tsBody {
						p.startJSON()
					}
					s = s[i:]
					continue outer
				case r == '\n' && c.nameNonWS:
					c.nameBuf.WriteString(s[:i])
					p.endName(false)
					s = s[i+1:]
					continue outer
				case !pyfmt.IsSpace(r):
					c.nameNonWS = true
				}
			}
			c.nameBuf.WriteString(s)
			return
		case tsBody:
			c := p.cur
			if c.pairs == 0 && !c.junk {
				t := strings.TrimLeftFunc(s, pyfmt.IsSpace)
				if t == "" {
					return
				}
				if t[0] == '{' {
					p.startJSON()
					s = t
					continue
				}
				c.junk = true
			}
			return // text between pairs is ignored, as by vLLM's regex
		case tsKey:
			p.cur.keyBuf.WriteString(s)
			return
		case tsAfterKey:
			p.cur.afterKey.WriteString(s)
			if ok, _ := betweenKeyAndValue(p.cur.afterKey.String()); !ok {
				p.cur.junk = true
				p.state = tsBody // the key is dropped
			}
			return
		case tsValue:
			c := p.cur
			if c.streaming {
				p.args(string(pyfmt.AppendJSONStringBody(nil, s, false)))
			} else {
				c.valBuf.WriteString(s)
			}
			return
		case tsJSON:
			c := p.cur
			for i := 0; i < len(s); i++ {
				ch := s[i]
				if c.inStr {
					switch {
					case c.escNxt:
						c.escNxt = false
					case ch == '\\':
						c.escNxt = true
					case ch == '"':
						c.inStr = false
					}
					continue
				}
				switch ch {
				case '"':
					c.inStr = true
				case '{', '[':
					c.depth++
				case '}', ']':
					c.depth--
				}
				if c.depth == 0 {
					c.js.WriteString(s[:i+1])
					p.finishJSON(c.js.String())
					p.state = tsAfterJSON
					s = s[i+1:]
					continue outer
				}
			}
			c.js.WriteString(s)
			return
		case tsAfterJSON:
			t := strings.TrimLeftFunc(s, pyfmt.IsSpace)
			if t == "" {
				return
			}
			p.state = tsContent
			s = t
		default: // tsSkip
			return
		}
	}
}

// tag handles a tag in the current state.
func (p *GLM47Tools) tag(t string) {
	switch p.state {
	case tsContent, tsAfterJSON:
		if t == TagToolCallStart {
			p.startCall()
			return
		}
		p.state = tsContent // </tool_call> after JSON arguments
	case tsName:
		p.endName(false)
		if p.state == tsSkip {
			if t == TagToolCallEnd {
				p.state = tsContent
				p.cur = nil
			}
			return
		}
		if t == TagArgKeyStart {
			p.startKey()
		} else {
			p.endCall()
		}
	case tsBody:
		if t == TagArgKeyStart {
			p.startKey()
		} else {
			p.endCall()
		}
	case tsKey:
		if t == TagArgKeyEnd {
			p.cur.afterKey.Reset()
			p.state = tsAfterKey
		} else {
			p.endCall()
		}
	case tsAfterKey:
		switch t {
		case TagArgValueStart:
			if _, done := betweenKeyAndValue(p.cur.afterKey.String()); done {
				p.startValue()
			} else {
				p.cur.junk = true
				p.state = tsBody
			}
		case TagArgKeyStart:
			p.startKey()
		default:
			p.endCall()
		}
	case tsValue:
		p.completePair()
		if t == TagArgValueEnd {
			p.state = tsBody
		} else {
			p.endCall()
		}
	case tsJSON:
		p.finishJSON(p.cur.js.String())
		p.state = tsContent
		p.cur = nil
	case tsSkip:
		p.state = tsContent
		p.cur = nil
	}
}

// betweenKeyAndValue checks the text between </arg_key> and <arg_value>
// against vLLM glm47's (?:\\n|\s)*: whitespace and literal backslash-n.
// ok is false once the text cannot match; done is true if it matches as
// it stands (no dangling backslash).
func betweenKeyAndValue(s string) (ok, done bool) {
	for i := 0; i < len(s); {
		switch {
		case s[i] == '\\':
			if i+1 == len(s) {
				return true, false
			}
			if s[i+1] != 'n' {
				return false, false
			}
			i += 2
		default:
			r, n := rune(s[i]), 1
			if r >= 0x80 {
				r, n = utf8.DecodeRuneInString(s[i:])
			}
			if !pyfmt.IsSpace(r) {
				return false, false
			}
			i += n
		}
	}
	return true, true
}

// content emits content text with the streaming whitespace rules.
func (p *GLM47Tools) content(s string) {
	if p.raw {
		p.emit(DeltaEvent{Kind: EventContent, Text: s})
		return
	}
	if !p.sawNonWS {
		all := p.leadWS + s
		t := strings.TrimLeftFunc(all, pyfmt.IsSpace)
		if t == "" {
			p.leadWS = all
			return
		}
		p.sawNonWS = true
		if len(p.calls) == 0 {
			p.emit(DeltaEvent{Kind: EventContent, Text: all[:len(all)-len(t)]})
		}
		p.leadWS = ""
		s = t
	}
	all := p.trailWS + s
	kept := pyRStrip(all)
	p.trailWS = all[len(kept):]
	p.emit(DeltaEvent{Kind: EventContent, Text: kept})
}

func (p *GLM47Tools) startCall() {
	p.cur = &callState{index: -1, raw: &strings.Builder{}, seen: map[string]bool{}}
	p.cur.raw.WriteString(TagToolCallStart)
	p.state = tsName
}

// endName resolves the name once it is complete. With jsonArgs and an
// empty name the name is expected inside the JSON object. A name that is
// not a listed tool sends the call to tsSkip.
func (p *GLM47Tools) endName(jsonArgs bool) {
	c := p.cur
	name := pyStrip(c.nameBuf.String())
	name = pyStrip(strings.TrimSuffix(name, ">"))
	p.state = tsBody
	if name == "" && jsonArgs {
		return
	}
	if !p.accept(name) {
		p.state = tsSkip
	}
}

// accept validates name and, if it names a tool, emits the call header.
func (p *GLM47Tools) accept(name string) bool {
	resolved, ok := p.resolve(name)
	if !ok {
		return false
	}
	c := p.cur
	c.name = resolved
	c.index = len(p.calls)
	c.raw = nil
	id := p.newID()
	p.calls = append(p.calls, ToolCall{ID: id, Name: resolved})
	p.argBufs = append(p.argBufs, &strings.Builder{})
	p.emit(DeltaEvent{Kind: EventToolStart, Index: c.index, ID: id, Name: resolved})
	return true
}

// resolve maps a generated name to a tool name.
func (p *GLM47Tools) resolve(name string) (string, bool) {
	if name == "" {
		return "", false
	}
	if _, ok := p.schemas[name]; ok {
		return name, true
	}
	if strings.Contains(name, "/") {
		for _, part := range strings.Split(name, "/") {
			part = pyStrip(part)
			if _, ok := p.schemas[part]; ok && part != "" {
				return part, true
			}
		}
	}
	return "", false
}

// abandonCall turns an unfinished, unaccepted call back into content.
func (p *GLM47Tools) abandonCall() {
	if c := p.cur; c != nil && c.index < 0 && c.raw != nil {
		p.state = tsContent
		p.content(c.raw.String())
	}
}

func (p *GLM47Tools) startKey() {
	c := p.cur
	c.keyBuf.Reset()
	p.state = tsKey
}

func (p *GLM47Tools) startValue() {
	c := p.cur
	c.key = pyStrip(c.keyBuf.String())
	c.kind = p.schemas.kind(c.name, c.key)
	c.valBuf.Reset()
	c.streaming = false
	if c.kind == argString && !c.seen[c.key] {
		c.seen[c.key] = true
		c.streaming = true
		c.pairs++
		p.args(p.sep() + value{kind: kindString, s: c.key}.dumps() + `: "`)
	}
	p.state = tsValue
}

// completePair finishes the current value (at </arg_value>, or
// implicitly at </tool_call> or the end of the output).
func (p *GLM47Tools) completePair() {
	c := p.cur
	if c.streaming {
		p.args(`"`)
		c.streaming = false
		return
	}
	if c.seen[c.key] {
		return // a repeated key keeps its first value (see package notes)
	}
	c.seen[c.key] = true
	c.pairs++
	v := typedValue(c.valBuf.String(), c.kind)
	p.args(p.sep() + value{kind: kindString, s: c.key}.dumps() + ": " + v.dumps())
}

// sep returns what precedes the next "key": value in the arguments.
func (p *GLM47Tools) sep() string {
	if p.cur.argsOpen {
		return ", "
	}
	p.cur.argsOpen = true
	return "{"
}

// args appends an argument fragment to the current call.
func (p *GLM47Tools) args(s string) { p.argsFor(p.cur, s) }

// argsFor appends an argument fragment to call c.
func (p *GLM47Tools) argsFor(c *callState, s string) {
	if c == nil || c.index < 0 || s == "" {
		return
	}
	p.argBufs[c.index].WriteString(s)
	p.emit(DeltaEvent{Kind: EventToolArgs, Index: c.index, Text: s})
}

// endCall closes the current call's arguments and returns to content.
func (p *GLM47Tools) endCall() {
	if c := p.cur; c != nil && c.index >= 0 {
		if c.argsOpen {
			p.args("}")
		} else {
			p.args("{}")
		}
	}
	p.state = tsContent
	p.cur = nil
}

func (p *GLM47Tools) startJSON() {
	c := p.cur
	c.js.Reset()
	c.depth, c.inStr, c.escNxt = 0, false, false
	p.state = tsJSON
}

// finishJSON handles JSON arguments once the object is complete, at
// </tool_call>, or at the end of the output.
func (p *GLM47Tools) finishJSON(text string) {
	c := p.cur
	p.cur = nil
	v, ok := parseJSON(text)
	if !ok {
		v, ok = parsePyLiteral(text)
	}
	nameFromJSON := c.index < 0
	if nameFromJSON {
		name := ""
		if ok && v.kind == kindObject {
			if n, has := v.get("name"); has && n.kind == kindString {
				name = pyStrip(n.s)
			}
		}
		p.cur = c
		if name == "" {
			p.abandonCall()
			p.cur = nil
			return
		}
		accepted := p.accept(name)
		p.cur = nil
		if !accepted {
			return
		}
	}
	var args string
	switch {
	case !ok:
		args = pyStrip(text) // as vLLM's _extract_name_and_args: the raw body
	case v.kind == kindObject:
		args = p.jsonArgs(c.name, v, nameFromJSON)
	default:
		args = v.dumps()
	}
	p.argsFor(c, args)
}

// jsonArgs unwraps {"name", "arguments"/"parameters"} the way vLLM's
// _extract_name_and_args does, and types string values whose schema
// declares a non-string type.
func (p *GLM47Tools) jsonArgs(tool string, v value, nameFromJSON bool) string {
	if n, has := v.get("name"); has && n.kind == kindString {
		wrapped := false
		for _, k := range [...]string{"arguments", "parameters"} {
			if a, has := v.get(k); has {
				if a.kind == kindString {
					inner, ok := parseJSON(a.s)
					if !ok || inner.kind != kindObject {
						return a.s
					}
					a = inner
				}
				v, wrapped = a, true
				break
			}
		}
		if !wrapped && nameFromJSON {
			rest := value{kind: kindObject}
			for i, k := range v.keys {
				if k != "name" {
					rest.set(k, v.vals[i])
				}
			}
			v = rest
		}
	}
	if v.kind != kindObject {
		return v.dumps()
	}
	props := p.schemas[tool]
	for i, k := range v.keys {
		x := v.vals[i]
		if x.kind != kindString {
			continue
		}
		if kind, has := props[k]; has && kind == argTyped {
			if y := deserialize(pyStrip(x.s)); y.kind != kindString {
				v.vals[i] = y
			}
		}
	}
	return v.dumps()
}
