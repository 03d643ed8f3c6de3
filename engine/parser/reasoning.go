package parser

import (
	"fmt"
	"strings"
)

// Reasoning separates reasoning text from content.
type Reasoning interface {
	// Extract splits a whole output. It does not touch streaming state.
	Extract(text string) (reasoning, content string)
	// Feed consumes one text delta and returns the newly decided reasoning
	// and content text. Text that may still be the start of a tag is held
	// back until a later Feed or Flush.
	Feed(delta string) (reasoningDelta, contentDelta string)
	// Flush ends the output and returns everything still held back.
	Flush() (reasoningDelta, contentDelta string)
	// InReasoning reports whether the parser is inside reasoning, that is
	// whether the next generated text would be reasoning.
	InReasoning() bool
}

// NewReasoning returns the reasoning parser registered under name:
// "glm45" or "glm47" (vLLM maps both names to the same GLM parser).
//
// thinkingEnabled is false when the request's chat_template_kwargs set
// "enable_thinking" or "thinking" to false (see ThinkingEnabled); the
// parser then recognises no think tags at all and everything is content,
// as in vLLM's glm47_moe config with thinking=False. Otherwise the parser
// starts inside reasoning when promptEndsInThink (the GLM-4.7/5 templates
// end the generation prompt with <think>, so the output has no opening
// tag), and in content otherwise (an opening <think> then starts
// reasoning).
func NewReasoning(name string, promptEndsInThink, thinkingEnabled bool) (Reasoning, error) {
	switch name {
	case "glm45", "glm47":
		return NewGLM45Reasoning(promptEndsInThink, thinkingEnabled), nil
	}
	return nil, fmt.Errorf("parser: unknown reasoning parser %q (have glm45, glm47)", name)
}

// ThinkingEnabled reads chat_template_kwargs the way vLLM's Glm47MoeParser
// does: thinking is on unless "thinking" or "enable_thinking" is present,
// in which case it is on if either of them is truthy.
func ThinkingEnabled(chatTemplateKwargs map[string]any) bool {
	t, okT := chatTemplateKwargs["thinking"]
	e, okE := chatTemplateKwargs["enable_thinking"]
	if (!okT || t == nil) && (!okE || e == nil) {
		return true
	}
	return Truthy(t) || Truthy(e)
}

// Truthy is Python's bool() for JSON-decoded values.
func Truthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case float64:
		return x != 0
	case string:
		return x != ""
	case []any:
		return len(x) > 0
	case map[string]any:
		return len(x) > 0
	}
	return true
}

// PromptEndsInThink reports whether a rendered prompt ends with <think>
// (ignoring trailing whitespace), i.e. whether generation starts inside
// reasoning.
func PromptEndsInThink(prompt string) bool {
	return strings.HasSuffix(pyRStrip(prompt), TagThinkStart)
}

type reasoningState uint8

const (
	rsContent   reasoningState = iota
	rsReasoning                // inside <think>…</think>
	rsToolCall                 // inside <tool_call>…</tool_call> (tool-aware mode)
)

// GLM45Reasoning is the GLM reasoning parser (vLLM `--reasoning-parser
// glm45`/`glm47`), following the state machine of vLLM's Glm47MoeParser
// (vllm/parser/glm47_moe.py, PR #45915):
//
//   - REASONING --</think>--> CONTENT; a stray <think> inside reasoning is
//     dropped;
//   - CONTENT --<think>--> REASONING; a stray </think> in content is dropped;
//   - REASONING --<tool_call>--> CONTENT: a tool call may end reasoning
//     without </think>; the <tool_call> tag itself is passed on as content
//     so that a tool parser (or, without one, the client) sees it.
//
// With tool-call awareness on (SetToolCalls, set by Stream when a tool
// parser runs), the text of a tool call, from <tool_call> to </tool_call>,
// is content that the think tags do not apply to, as in vLLM where the
// TOOL_NAME/TOOL_ARGS states have no think transitions.
//
// Trailing whitespace of the reasoning is removed (vLLM
// strip_trailing_reasoning_whitespace): while streaming, whitespace at the
// end of the reasoning so far is held back until more reasoning follows,
// and dropped at Flush.
type GLM45Reasoning struct {
	thinking   bool
	startInRsn bool
	toolAware  bool

	state  reasoningState
	sc     scanner
	wsHeld string // reasoning whitespace not yet emitted
	rsn    strings.Builder
	cnt    strings.Builder
}

// NewGLM45Reasoning returns a parser; see NewReasoning for the arguments.
func NewGLM45Reasoning(promptEndsInThink, thinkingEnabled bool) *GLM45Reasoning {
	p := &GLM45Reasoning{thinking: thinkingEnabled, startInRsn: thinkingEnabled && promptEndsInThink}
	p.reset()
	return p
}

// SetToolCalls turns tool-call awareness on or off; call it before the
// first Feed. Without it <tool_call> only matters inside reasoning.
func (p *GLM45Reasoning) SetToolCalls(on bool) { p.toolAware = on }

func (p *GLM45Reasoning) reset() {
	p.state = rsContent
	if p.startInRsn {
		p.state = rsReasoning
	}
	p.sc = scanner{}
	p.wsHeld = ""
}

// InReasoning implements Reasoning.
func (p *GLM45Reasoning) InReasoning() bool { return p.state == rsReasoning }

// Extract implements Reasoning. The result equals the concatenation of
// what Feed and Flush return for any split of text.
func (p *GLM45Reasoning) Extract(text string) (reasoning, content string) {
	q := &GLM45Reasoning{thinking: p.thinking, startInRsn: p.startInRsn, toolAware: p.toolAware}
	q.reset()
	r1, c1 := q.Feed(text)
	r2, c2 := q.Flush()
	return r1 + r2, c1 + c2
}

// Feed implements Reasoning.
func (p *GLM45Reasoning) Feed(delta string) (reasoningDelta, contentDelta string) {
	p.sc.feed(delta)
	p.run(false)
	return p.take()
}

// Flush implements Reasoning.
func (p *GLM45Reasoning) Flush() (reasoningDelta, contentDelta string) {
	p.run(true)
	p.wsHeld = ""
	return p.take()
}

func (p *GLM45Reasoning) take() (string, string) {
	r, c := p.rsn.String(), p.cnt.String()
	p.rsn.Reset()
	p.cnt.Reset()
	return r, c
}

var (
	tagsReasoning       = []string{TagThinkStart, TagThinkEnd, TagToolCallStart}
	tagsContentThink    = []string{TagThinkStart, TagThinkEnd}
	tagsContentThinkTC  = []string{TagThinkStart, TagThinkEnd, TagToolCallStart}
	tagsContentToolOnly = []string{TagToolCallStart}
	tagsInToolCall      = []string{TagToolCallEnd}
)

func (p *GLM45Reasoning) tags() []string {
	switch p.state {
	case rsReasoning:
		return tagsReasoning
	case rsToolCall:
		return tagsInToolCall
	}
	switch {
	case p.thinking && p.toolAware:
		return tagsContentThinkTC
	case p.thinking:
		return tagsContentThink
	case p.toolAware:
		return tagsContentToolOnly
	}
	return nil
}

func (p *GLM45Reasoning) run(final bool) {
	for {
		text, tag, ok := p.sc.next(p.tags(), final)
		if !ok {
			return
		}
		if text != "" {
			if p.state == rsReasoning {
				p.emitReasoning(text)
			} else {
				p.cnt.WriteString(text)
			}
			continue
		}
		switch p.state {
		case rsReasoning:
			switch tag {
			case TagThinkEnd:
				p.state = rsContent
			case TagToolCallStart:
				p.cnt.WriteString(tag)
				p.state = rsContent
				if p.toolAware {
					p.state = rsToolCall
				}
			} // a nested <think> is dropped
		case rsToolCall:
			p.cnt.WriteString(tag)
			p.state = rsContent
		default:
			switch tag {
			case TagThinkStart:
				p.state = rsReasoning
			case TagToolCallStart:
				p.cnt.WriteString(tag)
				p.state = rsToolCall
			} // a stray </think> is dropped
		}
	}
}

// emitReasoning writes reasoning text, holding back trailing whitespace.
func (p *GLM45Reasoning) emitReasoning(text string) {
	all := p.wsHeld + text
	kept := pyRStrip(all)
	p.wsHeld = all[len(kept):]
	p.rsn.WriteString(kept)
}
