package server

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/npuserve/npuserve/engine/parser"
	"github.com/npuserve/npuserve/engine/pyfmt"
)

// chatCall is one chat request being answered.
type chatCall struct {
	s        *Server
	req      *chatRequest
	rendered *RenderedChat
	prompt   prompt
	id       string
	created  int64
	asIDs    bool
	// parse is the parser configuration; parsing is nil when neither a
	// reasoning nor a tool parser applies.
	parse   parser.StreamConfig
	parsing bool
	// echo is the text echoed before the output (echo=true with a final
	// message of the response's role).
	echo string
}

// chatCompletions is POST /v1/chat/completions.
func (s *Server) chatCompletions(c *gin.Context) {
	arrival := time.Now()
	s.inflight.Add(1)
	defer s.inflight.Done()
	req, aerr := decodeGeneration(s, c, decodeChat)
	if aerr != nil {
		s.writeError(c, aerr)
		return
	}
	cc := &chatCall{s: s, req: req, created: arrival.Unix()}
	if cc.asIDs, aerr = s.tokensAsIDs(&req.commonRequest, req.logprobs); aerr != nil {
		s.writeError(c, aerr)
		return
	}
	skipSpecial, aerr := cc.configureParsers()
	if aerr != nil {
		s.writeError(c, aerr)
		return
	}
	rc, aerr := s.render.RenderChat(c.Request.Context(), req.chatInput())
	if aerr != nil {
		s.writeError(c, aerr)
		return
	}
	cc.rendered = rc
	if cc.parsing {
		cc.parse.PromptEndsInThink = parser.PromptEndsInThink(rc.Prompt)
		cc.parse.ThinkingEnabled = parser.ThinkingEnabled(rc.Kwargs)
	}
	ids, aerr := s.truncate(rc.TokenIDs, req.truncatePromptTokens)
	if aerr != nil {
		s.writeError(c, aerr)
		return
	}
	cc.prompt = prompt{text: rc.Prompt, textKnow: true, ids: ids}
	if aerr = s.checkContext(len(ids), req.maxTokens); aerr != nil {
		s.writeError(c, aerr)
		return
	}
	var lp *int
	if req.logprobs {
		lp = ptr(clampInt(req.topLogprobs))
	}
	p, aerr := s.samplingParams(&req.commonRequest, req.maxTokens, len(ids), lp)
	if aerr != nil {
		s.writeError(c, aerr)
		return
	}
	oo, aerr := s.stopOptions(&req.commonRequest, skipSpecial)
	if aerr != nil {
		s.writeError(c, aerr)
		return
	}
	if req.echo && rc.LastRole == cc.role() {
		cc.echo = rc.LastContent
	}
	specs := make([]seqSpec, p.N)
	for j := range specs {
		specs[j] = seqSpec{index: j, params: p.Child(j)}
	}
	cc.id = "chatcmpl-" + baseRequestID(c, req.requestID)
	if s.opt.LogRequests {
		s.log.Infof("Received request %s: prompt: %s, params: %s, prompt_token_ids: %v", cc.id, pyfmt.Repr(rc.Prompt), paramsRepr(p, &req.commonRequest), ids)
	}
	r, aerr := s.launch(cc.id, []prompt{cc.prompt}, specs, oo, arrival)
	if aerr != nil {
		s.writeError(c, aerr)
		return
	}
	s.metrics.requestParamsN(p.N)
	if req.stream {
		cc.stream(c, r)
		return
	}
	if !r.wait(c.Request.Context()) {
		return
	}
	if err := r.firstError(); err != nil {
		s.writeError(c, err)
		return
	}
	resp, aerr := cc.response(r)
	if aerr != nil {
		s.writeError(c, aerr)
		return
	}
	s.writeJSON(c, http.StatusOK, resp)
}

// role is the response message's role (vLLM get_chat_request_role).
func (cc *chatCall) role() string {
	if cc.req.addGenerationPrompt {
		return "assistant"
	}
	if cc.rendered != nil && cc.rendered.LastRole != "" {
		return cc.rendered.LastRole
	}
	return "assistant"
}

// configureParsers decides which parsers run (vLLM's chat serving
// rules) and whether special tokens are skipped.
func (cc *chatCall) configureParsers() (skipSpecial bool, err *APIError) {
	s, req := cc.s, cc.req
	skipSpecial = req.skipSpecialTokens
	tools, perr := parser.ParseTools(req.tools)
	if perr != nil {
		return false, badParam("tools", "%v", perr)
	}
	choice, perr := parser.ParseToolChoice(req.toolChoice, len(tools) > 0)
	if perr != nil {
		return false, badParam("tool_choice", "%v", perr)
	}
	cfg := parser.StreamConfig{ReasoningParser: s.opt.ReasoningParser, Tools: tools, ToolChoice: choice,
		SingleToolCall: !req.parallelToolCalls, TagIDs: map[string]int{}}
	if s.tok != nil {
		for _, tag := range []string{parser.TagThinkStart, parser.TagThinkEnd, parser.TagToolCallStart} {
			if id, ok := s.tok.TokenID(tag); ok {
				cfg.TagIDs[tag] = id
			}
		}
	}
	if len(tools) > 0 {
		switch choice.Mode {
		case parser.ToolChoiceAuto:
			if !s.opt.EnableAutoToolChoice || s.opt.ToolCallParser == "" {
				return false, badRequest("\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set")
			}
			cfg.ToolParser = s.opt.ToolCallParser
		case parser.ToolChoiceRequired, parser.ToolChoiceFunction:
			if s.opt.ToolCallParser == "" {
				return false, badParam("tool_choice", "tool_choice %q needs --tool-call-parser on npuserve (structured outputs, which vLLM would use without a parser, are not supported yet)", string(choice.Mode))
			}
			cfg.ToolParser = s.opt.ToolCallParser
		}
		if cfg.ToolParser != "" {
			// The GLM tool parsers keep special tokens so that their tags
			// survive detokenization (adjust_request).
			skipSpecial = false
		}
	}
	cc.parse = cfg
	cc.parsing = cfg.ReasoningParser != "" || cfg.ToolParser != ""
	return skipSpecial, nil
}

// newStream starts a parser stream for one choice.
func (cc *chatCall) newStream() (*parser.Stream, *APIError) {
	st, err := parser.NewStream(cc.parse)
	if err != nil {
		return nil, internalError(err)
	}
	return st, nil
}

// usage totals the prompt and the choices' tokens.
func (cc *chatCall) usage(r *run) usage {
	u := usage{PromptTokens: len(cc.prompt.ids)}
	for _, c := range r.choices {
		u.CompletionTokens += len(c.ids)
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// response builds the non-streaming response.
func (cc *chatCall) response(r *run) (chatResponse, *APIError) {
	resp := chatResponse{ID: cc.id, Object: "chat.completion", Created: cc.created, Model: cc.s.model,
		Choices: make([]chatChoice, 0, len(r.choices)), Usage: cc.usage(r)}
	for _, c := range r.choices {
		msg := chatMessage{Role: cc.role(), ToolCalls: []parser.ToolCall{}}
		reason := c.reason
		if cc.parsing {
			m, err := parser.Parse(cc.parse, c.text, intIDs(c.ids), c.reason)
			if err != nil {
				return resp, internalError(err)
			}
			msg.Content = m.Content
			if m.Reasoning != "" && cc.req.includeReasoning {
				msg.Reasoning, msg.ReasoningContent = strPtr(m.Reasoning), strPtr(m.Reasoning)
			}
			if len(m.ToolCalls) > 0 {
				msg.ToolCalls = m.ToolCalls
			}
			reason = m.FinishReason
		} else {
			msg.Content = strPtr(c.text)
		}
		if cc.echo != "" {
			content := cc.echo
			if msg.Content != nil {
				content += *msg.Content
			}
			msg.Content = &content
		}
		ch := chatChoice{Index: c.index, Message: msg, FinishReason: &reason, StopReason: c.stopReason}
		if cc.req.logprobs {
			ch.Logprobs = cc.s.chatLogprobs(c.ids, c.lps, int(cc.req.topLogprobs), cc.asIDs)
		}
		if cc.req.returnTokenIDs || cc.s.tok == nil {
			ch.TokenIDs = nonNil(c.ids)
		}
		resp.Choices = append(resp.Choices, ch)
	}
	if cc.req.returnTokenIDs {
		resp.PromptTokenIDs = cc.prompt.ids
	}
	return resp, nil
}

// stream answers with server-sent events (vLLM
// chat_completion_stream_generator).
func (cc *chatCall) stream(c *gin.Context, r *run) {
	defer r.abort()
	w := cc.s.newSSE(c)
	includeUsage, continuous := cc.s.includeUsage(cc.req.streamOptions)
	promptLen := len(cc.prompt.ids)
	n := len(r.choices)
	streams := make([]*parser.Stream, n)
	tokens := make([]int, n)
	byIndex := map[*choice]int{}
	for i, ch := range r.choices {
		byIndex[ch] = i
		if cc.parsing {
			st, err := cc.newStream()
			if err != nil {
				w.error(err)
				w.done()
				return
			}
			streams[i] = st
		}
	}
	chunk := func(choices ...chatStreamChoice) chatStreamResponse {
		return chatStreamResponse{ID: cc.id, Object: "chat.completion.chunk", Created: cc.created, Model: cc.s.model, Choices: choices}
	}
	// First chunks: the role of every choice (and the echo).
	for i, ch := range r.choices {
		first := chunk(chatStreamChoice{Index: ch.index, Delta: chatDelta{Role: cc.role(), ContentSet: true}})
		if continuous {
			first.Usage = &usage{PromptTokens: promptLen, TotalTokens: promptLen}
		}
		if i == 0 && cc.req.returnTokenIDs {
			first.PromptTokenIDs = cc.prompt.ids
		}
		if !w.send(first) {
			return
		}
		if cc.echo != "" {
			e := chunk(chatStreamChoice{Index: ch.index, Delta: chatDelta{Delta: parser.ChatDelta{Content: cc.echo}}})
			if continuous {
				e.Usage = &usage{PromptTokens: promptLen, TotalTokens: promptLen}
			}
			if !w.send(e) {
				return
			}
		}
	}
	pending := n
	for pending > 0 {
		ch, d, ok := r.nextDelta(c.Request.Context(), w, &pending)
		if !ok {
			return
		}
		i := byIndex[ch]
		tokens[i] += len(d.tokens)
		var delta parser.ChatDelta
		reason := ch.reason
		if st := streams[i]; st != nil {
			delta = st.Feed(d.text, intIDs(d.tokens))
			if d.finished {
				delta = mergeDelta(delta, st.Finish())
				reason = st.FinishReason(ch.reason)
			}
		} else {
			delta.Content = d.text
		}
		if !cc.req.includeReasoning {
			delta.Reasoning = ""
		}
		wantTokens := cc.req.returnTokenIDs || cc.s.tok == nil
		if delta.Empty() && !d.finished && !cc.req.logprobs && !wantTokens && streams[i] != nil {
			continue
		}
		// Without parsers vLLM sends DeltaMessage(content=text), so
		// "content" is present even when empty.
		sc := chatStreamChoice{Index: ch.index, Delta: chatDelta{Delta: delta, ContentSet: streams[i] == nil},
			WantTokenIDs: wantTokens, TokenIDs: nonNil(d.tokens)}
		if cc.req.logprobs {
			sc.Logprobs = cc.s.chatLogprobs(d.tokens, d.logprobs, int(cc.req.topLogprobs), cc.asIDs)
		}
		if d.finished {
			sc.FinishReason = &reason
			sc.StopReason, sc.HasStopReason = ch.stopReason, true
		}
		out := chunk(sc)
		if continuous {
			out.Usage = &usage{PromptTokens: promptLen, CompletionTokens: tokens[i], TotalTokens: promptLen + tokens[i]}
		}
		if !w.send(out) {
			return
		}
	}
	if includeUsage {
		u := cc.usage(r)
		w.send(usageChunk{ID: cc.id, Object: "chat.completion.chunk", Created: cc.created, Model: cc.s.model, Choices: []struct{}{},
			Usage: usageNoNull(u)})
	}
	w.done()
}

// mergeDelta appends b to a (tool-call fragments of the same index are
// joined).
func mergeDelta(a, b parser.ChatDelta) parser.ChatDelta {
	a.Reasoning += b.Reasoning
	a.Content += b.Content
	for _, tc := range b.ToolCalls {
		merged := false
		for k := range a.ToolCalls {
			if a.ToolCalls[k].Index == tc.Index {
				if tc.ID != "" {
					a.ToolCalls[k].ID, a.ToolCalls[k].Type = tc.ID, tc.Type
				}
				if tc.Function.Name != "" {
					a.ToolCalls[k].Function.Name = tc.Function.Name
				}
				a.ToolCalls[k].Function.Arguments += tc.Function.Arguments
				merged = true
			}
		}
		if !merged {
			a.ToolCalls = append(a.ToolCalls, tc)
		}
	}
	return a
}
