package parser

import (
	"bytes"
	"encoding/json"
)

// StreamConfig describes how one request choice is parsed.
type StreamConfig struct {
	// ReasoningParser is the --reasoning-parser name ("glm45", "glm47"),
	// or "" for no reasoning parsing.
	ReasoningParser string
	// PromptEndsInThink: the rendered prompt ends with <think> (see
	// PromptEndsInThink), so the output starts inside reasoning.
	PromptEndsInThink bool
	// ThinkingEnabled is ThinkingEnabled(chat_template_kwargs).
	ThinkingEnabled bool

	// ToolParser is the --tool-call-parser name ("glm47", "glm45"), or ""
	// for none. The server sets it when the request has tools and either
	// --enable-auto-tool-choice is on or tool_choice is "required" or
	// names a function (vLLM parses those with the tool parser too,
	// since GLM parsers set supports_required_and_named = False).
	ToolParser string
	Tools      []Tool
	ToolChoice ToolChoice
	// SingleToolCall is parallel_tool_calls=false: only the first call
	// (index 0) is returned (vLLM maybe_filter_parallel_tool_calls).
	SingleToolCall bool
	// NewID makes tool-call ids; nil means NewToolCallID.
	NewID func() string

	// TagIDs optionally maps tag text (TagThinkStart, TagThinkEnd,
	// TagToolCallStart) to its token id; it sharpens ReasoningTokens when
	// one delta carries several tokens.
	TagIDs map[string]int
}

// Stream turns generated text deltas into OpenAI chat-completion chunk
// deltas. Use one Stream per choice; it is not safe for concurrent use.
type Stream struct {
	cfg   StreamConfig
	rsn   *GLM45Reasoning
	tools *GLM47Tools

	emitted   bool // a tool call was streamed
	rsnTokens int
	done      bool
}

// NewStream validates cfg and returns a Stream.
func NewStream(cfg StreamConfig) (*Stream, error) {
	s := &Stream{cfg: cfg}
	if cfg.ToolParser != "" {
		t, err := NewTools(cfg.ToolParser, ToolsConfig{Tools: cfg.Tools, Choice: cfg.ToolChoice, NewID: cfg.NewID})
		if err != nil {
			return nil, err
		}
		if t.Active() {
			s.tools = t
		}
	}
	if cfg.ReasoningParser != "" {
		if _, err := NewReasoning(cfg.ReasoningParser, cfg.PromptEndsInThink, cfg.ThinkingEnabled); err != nil {
			return nil, err
		}
		s.rsn = NewGLM45Reasoning(cfg.PromptEndsInThink, cfg.ThinkingEnabled)
		s.rsn.SetToolCalls(s.tools != nil)
	}
	return s, nil
}

// ChatDelta is the "delta" of one chat.completion.chunk choice.
type ChatDelta struct {
	Reasoning string
	Content   string
	ToolCalls []DeltaToolCall
}

// DeltaToolCall is one entry of delta.tool_calls: the first chunk of a
// call carries ID, Type "function" and Function.Name (with Arguments ""
// or the first fragment); later chunks carry only Index and an Arguments
// fragment.
type DeltaToolCall struct {
	Index    int           `json:"index"`
	ID       string        `json:"id,omitempty"`
	Type     string        `json:"type,omitempty"`
	Function DeltaFunction `json:"function"`
}

// DeltaFunction is the function part of a DeltaToolCall.
type DeltaFunction struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// Empty reports whether the delta carries nothing (no chunk needs to be
// sent for it, unless it is the last one).
func (d ChatDelta) Empty() bool {
	return d.Reasoning == "" && d.Content == "" && len(d.ToolCalls) == 0
}

// MarshalJSON writes the delta object: "content", then "reasoning" and
// its older name "reasoning_content" with the same text, then
// "tool_calls"; empty parts are left out. Like Python's json, it does not
// escape '<', '>' and '&'; note that json.Marshal escapes them again in
// any case, so use a json.Encoder with SetEscapeHTML(false) to keep tags
// readable (both forms are valid JSON).
func (d ChatDelta) MarshalJSON() ([]byte, error) {
	type out struct {
		Content          string          `json:"content,omitempty"`
		Reasoning        string          `json:"reasoning,omitempty"`
		ReasoningContent string          `json:"reasoning_content,omitempty"`
		ToolCalls        []DeltaToolCall `json:"tool_calls,omitempty"`
	}
	return marshalNoEscape(out{d.Content, d.Reasoning, d.Reasoning, d.ToolCalls})
}

func marshalNoEscape(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// Feed consumes one detokenized delta and the ids of the tokens it came
// from (ids may be nil).
func (s *Stream) Feed(text string, ids []int) ChatDelta {
	if s.done {
		return ChatDelta{}
	}
	was := s.InReasoning()
	var d ChatDelta
	content := text
	if s.rsn != nil {
		d.Reasoning, content = s.rsn.Feed(text)
	}
	s.addContent(&d, content, false)
	s.countReasoning(was, ids)
	return d
}

// Finish ends the stream and returns the held-back remainder (call it
// once, when the engine reports a finish reason; its delta goes into the
// final chunk).
func (s *Stream) Finish() ChatDelta {
	if s.done {
		return ChatDelta{}
	}
	s.done = true
	var d ChatDelta
	content := ""
	if s.rsn != nil {
		d.Reasoning, content = s.rsn.Flush()
	}
	s.addContent(&d, content, true)
	return d
}

func (s *Stream) addContent(d *ChatDelta, content string, final bool) {
	if s.tools == nil {
		d.Content = content
		return
	}
	evs := s.tools.Feed(content)
	if final {
		evs = append(evs, s.tools.Flush()...)
	}
	for _, ev := range evs {
		switch ev.Kind {
		case EventContent:
			d.Content += ev.Text
			continue
		case EventToolStart, EventToolArgs:
			s.emitted = true
		}
		if s.cfg.SingleToolCall && ev.Index != 0 {
			continue
		}
		var tc *DeltaToolCall
		for i := range d.ToolCalls {
			if d.ToolCalls[i].Index == ev.Index {
				tc = &d.ToolCalls[i]
			}
		}
		if tc == nil {
			d.ToolCalls = append(d.ToolCalls, DeltaToolCall{Index: ev.Index})
			tc = &d.ToolCalls[len(d.ToolCalls)-1]
		}
		if ev.Kind == EventToolStart {
			tc.ID, tc.Type, tc.Function.Name = ev.ID, "function", ev.Name
		} else {
			tc.Function.Arguments += ev.Text
		}
	}
}

// countReasoning adds the tokens of one delta that were reasoning.
func (s *Stream) countReasoning(was bool, ids []int) {
	if len(ids) == 0 {
		return
	}
	if n, ok := walkReasoningIDs(ids, was, s.cfg.TagIDs); ok {
		s.rsnTokens += n
		return
	}
	// Without tag ids: a delta that ends reasoning is taken to end with
	// the closing tag's token, one that starts it to start with <think>.
	switch now := s.InReasoning(); {
	case was && now:
		s.rsnTokens += len(ids)
	case was:
		s.rsnTokens += len(ids) - 1
	}
}

// walkReasoningIDs counts reasoning tokens in ids by their tag ids,
// starting inside reasoning if in is set. The tag tokens themselves are
// not counted. ok is false when tagIDs lacks </think>.
func walkReasoningIDs(ids []int, in bool, tagIDs map[string]int) (n int, ok bool) {
	end, ok := tagIDs[TagThinkEnd]
	if !ok {
		return 0, false
	}
	start, hasStart := tagIDs[TagThinkStart]
	tc, hasTC := tagIDs[TagToolCallStart]
	for _, t := range ids {
		switch {
		case in && (t == end || (hasTC && t == tc)):
			in = false
		case in:
			if !(hasStart && t == start) {
				n++
			}
		case hasStart && t == start:
			in = true
		}
	}
	return n, true
}

// InReasoning reports whether the output is inside reasoning.
func (s *Stream) InReasoning() bool { return s.rsn != nil && s.rsn.InReasoning() }

// ReasoningTokens is the number of generated tokens that were reasoning
// (usage.completion_tokens_details.reasoning_tokens), tag tokens not
// included. It is exact when TagIDs are set and the tags are generated as
// their single tokens; without TagIDs, a delta that ends reasoning is
// assumed to end with the closing tag's token.
func (s *Stream) ReasoningTokens() int { return s.rsnTokens }

// ToolCallsEmitted reports whether any tool call was streamed.
func (s *Stream) ToolCallsEmitted() bool { return s.emitted }

// ToolCalls returns the calls parsed so far (complete after Finish),
// honouring SingleToolCall.
func (s *Stream) ToolCalls() []ToolCall {
	if s.tools == nil {
		return nil
	}
	calls := s.tools.Calls()
	if s.cfg.SingleToolCall && len(calls) > 1 {
		calls = calls[:1]
	}
	return calls
}

// FinishReason maps the engine's finish reason ("stop", "length", …) to
// the one a streamed response reports: "tool_calls" when calls were
// streamed, the engine stopped normally and tool_choice did not name a
// function (vLLM chat_completion_stream_generator).
func (s *Stream) FinishReason(engine string) string {
	if s.emitted && s.cfg.ToolChoice.Mode != ToolChoiceFunction && engine == "stop" {
		return "tool_calls"
	}
	if engine == "" {
		return "stop"
	}
	return engine
}

// Message is a parsed non-streaming response.
type Message struct {
	// Reasoning is message.reasoning (and reasoning_content); "" is null.
	Reasoning string
	// Content is message.content; nil is null. As in vLLM it is "" rather
	// than null when tool_choice is "required" or names a function.
	Content   *string
	ToolCalls []ToolCall
	// FinishReason is the choice's finish_reason.
	FinishReason string
	// ReasoningTokens counts the reasoning tokens among the ids given to
	// Parse; it needs cfg.TagIDs[TagThinkEnd] and is 0 without it.
	ReasoningTokens int
}

// MarshalJSON writes {"id", "type": "function", "function": {"name",
// "arguments"}}.
func (c ToolCall) MarshalJSON() ([]byte, error) {
	type fn struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	type out struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	return marshalNoEscape(out{c.ID, "function", fn{c.Name, c.Arguments}})
}

// Parse parses a whole output (non-streaming). engineFinish is the
// engine's finish reason; ids (optional) are the generated token ids.
//
// The finish reason is "tool_calls" when calls were found and tool_choice
// is "auto", or when tool_choice is "required" and the engine stopped
// normally (vLLM chat_completion_full_generator).
func Parse(cfg StreamConfig, text string, ids []int, engineFinish string) (Message, error) {
	s, err := NewStream(cfg)
	if err != nil {
		return Message{}, err
	}
	var reasoning, content string
	content = text
	if s.rsn != nil {
		reasoning, content = s.rsn.Extract(text)
	}
	var calls []ToolCall
	if s.tools != nil {
		content, calls = s.tools.Extract(content)
	}
	if cfg.SingleToolCall && len(calls) > 1 {
		calls = calls[:1]
	}
	m := Message{Reasoning: reasoning, ToolCalls: calls, FinishReason: engineFinish}
	if m.FinishReason == "" {
		m.FinishReason = "stop"
	}
	mode := cfg.ToolChoice.Mode
	forced := s.tools != nil && (mode == ToolChoiceRequired || mode == ToolChoiceFunction)
	// Parsers turn empty content into null; without any parser vLLM
	// returns the output text as it is.
	if content != "" || forced || (s.rsn == nil && s.tools == nil) {
		m.Content = &content
	}
	if s.tools != nil && ((mode == ToolChoiceAuto && len(calls) > 0) || (mode == ToolChoiceRequired && engineFinish == "stop")) {
		m.FinishReason = "tool_calls"
	}
	if s.rsn != nil && cfg.ThinkingEnabled {
		m.ReasoningTokens, _ = walkReasoningIDs(ids, cfg.PromptEndsInThink, cfg.TagIDs)
	}
	return m, nil
}
