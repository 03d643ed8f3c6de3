package server

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/npuserve/npuserve/engine/pyfmt"
	"github.com/npuserve/npuserve/engine/sampling"
)

// baseRequestID is vLLM's _base_request_id: the X-Request-Id header, else
// the request's request_id, else a random id.
func baseRequestID(c *gin.Context, fromBody string) string {
	if h := c.GetHeader("X-Request-Id"); h != "" {
		return h
	}
	if fromBody != "" {
		return fromBody
	}
	return randomHex()
}

// decodeRequest reads the body the limit middleware stored.
func (s *Server) decodeRequest(c *gin.Context) (*body, *APIError) {
	data, _ := c.Get(bodyKey)
	raw, _ := data.([]byte)
	return parseBody(raw)
}

// warnIgnored logs the request fields nobody read, as vLLM does.
func (s *Server) warnIgnored(b *body) {
	if u := b.unknown(); len(u) > 0 {
		s.log.Warnf("The following fields were present in the request but ignored: {%s}", "'"+strings.Join(u, "', '")+"'")
	}
}

// generationRequest is a decoded completions or chat body.
type generationRequest interface{ common() *commonRequest }

func (r *commonRequest) common() *commonRequest { return r }

// decodeGeneration reads a completions or chat body with decode, logs the
// fields nobody read and runs the checks both endpoints share.
func decodeGeneration[R generationRequest](s *Server, c *gin.Context, decode func(*body) (R, *APIError)) (R, *APIError) {
	var zero R
	b, aerr := s.decodeRequest(c)
	if aerr != nil {
		return zero, aerr
	}
	req, aerr := decode(b)
	if aerr != nil {
		return zero, aerr
	}
	s.warnIgnored(b)
	if aerr = s.commonChecks(req.common()); aerr != nil {
		return zero, aerr
	}
	return req, nil
}

// tokensAsIDs resolves return_tokens_as_token_ids (the request's value,
// else the server's); logprobs without a tokenizer need token ids.
func (s *Server) tokensAsIDs(r *commonRequest, logprobs bool) (bool, *APIError) {
	asIDs := s.opt.ReturnTokensAsTokenIDs
	if r.returnTokensAsTokenIDs != nil {
		asIDs = *r.returnTokensAsTokenIDs
	}
	if logprobs && s.tok == nil && !asIDs {
		return asIDs, skipTokenizerError()
	}
	return asIDs, nil
}

// stopOptions checks the stop-string settings against the tokenizer.
func (s *Server) stopOptions(r *commonRequest, skipSpecial bool) (outputOpts, *APIError) {
	oo := outputOpts{stop: r.stop, includeStop: r.includeStopStrInOutput, skipSpecial: skipSpecial, minTokens: int(r.minTokens)}
	if s.tok == nil {
		oo.noText = true
		if len(r.stop) > 0 {
			return oo, badParam("stop", "Stop strings are not supported when the tokenizer is not loaded (--skip-tokenizer-init); use stop_token_ids.")
		}
	}
	return oo, nil
}

// commonChecks answers the model check and the fields npuserve cannot
// honour.
func (s *Server) commonChecks(r *commonRequest) *APIError {
	if err := s.checkModel(r.model); err != nil {
		return err
	}
	if err := r.unsupportedError(); err != nil {
		return err
	}
	if r.priority != 0 {
		return badParam("priority", "Got priority %d but Priority scheduling is not enabled.", r.priority)
	}
	return nil
}

// completions is POST /v1/completions.
func (s *Server) completions(c *gin.Context) {
	arrival := time.Now()
	s.inflight.Add(1)
	defer s.inflight.Done()
	req, aerr := decodeGeneration(s, c, decodeCompletion)
	if aerr != nil {
		s.writeError(c, aerr)
		return
	}
	if req.suffix != nil {
		s.writeError(c, badRequest("suffix is not currently supported"))
		return
	}
	if req.echo && req.logprobs != nil {
		s.writeError(c, badParam("logprobs", "echo with logprobs needs prompt logprobs, which npuserve does not support yet."))
		return
	}
	asIDs, aerr := s.tokensAsIDs(&req.commonRequest, req.logprobs != nil)
	if aerr != nil {
		s.writeError(c, aerr)
		return
	}
	prompts, aerr := tokenizePrompts(s.tok, req.prompts, req.addSpecialTokens, s.promptLimit)
	if aerr != nil {
		s.writeError(c, aerr)
		return
	}
	oo, aerr := s.stopOptions(&req.commonRequest, req.skipSpecialTokens)
	if aerr != nil {
		s.writeError(c, aerr)
		return
	}
	echoOnly := req.echo && req.maxTokens != nil && *req.maxTokens == 0
	var lp *int
	if req.logprobs != nil {
		lp = ptr(clampInt(*req.logprobs))
	}
	var specs []seqSpec
	for i := range prompts {
		if prompts[i].ids, aerr = s.truncate(prompts[i].ids, req.truncatePromptTokens); aerr != nil {
			s.writeError(c, aerr)
			return
		}
		n := len(prompts[i].ids)
		if aerr = s.checkContext(n, req.maxTokens); aerr != nil {
			s.writeError(c, aerr)
			return
		}
		maxTokens := req.maxTokens
		if echoOnly {
			maxTokens = ptr(int64(1)) // vLLM generates one token and returns only the prompt
		}
		p, aerr := s.samplingParams(&req.commonRequest, maxTokens, n, lp)
		if aerr != nil {
			s.writeError(c, aerr)
			return
		}
		for j := 0; j < p.N; j++ {
			specs = append(specs, seqSpec{index: i*p.N + j, prompt: i, params: p.Child(j)})
		}
	}
	id := "cmpl-" + baseRequestID(c, req.requestID)
	if s.opt.LogRequests {
		for i, p := range prompts {
			s.log.Infof("Received request %s-%d: prompt: %s, params: %s, prompt_token_ids: %v", id, i, pyfmt.Repr(p.text), paramsRepr(specs[0].params, &req.commonRequest), p.ids)
		}
	}
	r, aerr := s.launch(id, prompts, specs, oo, arrival)
	if aerr != nil {
		s.writeError(c, aerr)
		return
	}
	s.metrics.requestParamsN(int(req.n))
	cc := &completionCall{s: s, req: req, prompts: prompts, id: id, created: arrival.Unix(), asIDs: asIDs, echoOnly: echoOnly}
	if req.stream {
		cc.stream(c, r)
		return
	}
	if !r.wait(c.Request.Context()) {
		return // client gone
	}
	if err := r.firstError(); err != nil {
		s.writeError(c, err)
		return
	}
	s.writeJSON(c, http.StatusOK, cc.response(r))
}

// completionCall is one completions request being answered.
type completionCall struct {
	s        *Server
	req      *completionRequest
	prompts  []prompt
	id       string
	created  int64
	asIDs    bool
	echoOnly bool
}

// promptText is the prompt as echoed ("" with return_token_ids, as in
// vLLM).
func (cc *completionCall) promptText(i int) string {
	if cc.req.returnTokenIDs {
		return ""
	}
	p := &cc.prompts[i]
	if !p.textKnow && cc.s.tok != nil {
		p.text, p.textKnow = cc.s.tok.Decode(intIDs(p.ids), false), true
	}
	return p.text
}

func (cc *completionCall) usage(r *run) usage {
	u := usage{}
	for _, p := range cc.prompts {
		u.PromptTokens += len(p.ids)
	}
	for _, c := range r.choices {
		u.CompletionTokens += len(c.ids)
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// response builds the non-streaming response.
func (cc *completionCall) response(r *run) completionResponse {
	resp := completionResponse{ID: cc.id, Object: "text_completion", Created: cc.created, Model: cc.s.model,
		Choices: make([]completionChoice, 0, len(r.choices)), Usage: cc.usage(r)}
	for _, c := range r.choices {
		p := cc.prompts[c.prompt]
		text, ids := c.text, c.ids
		if cc.req.echo {
			if cc.echoOnly {
				text, ids = cc.promptText(c.prompt), p.ids
			} else {
				text = cc.promptText(c.prompt) + text
				ids = append(append([]int32(nil), p.ids...), ids...)
			}
		}
		ch := completionChoice{Index: len(resp.Choices), Text: text, FinishReason: c.finishReasonPtr(), StopReason: c.stopReason}
		if cc.req.logprobs != nil {
			ch.Logprobs = cc.s.completionLogprobs(ids, c.lps, int(*cc.req.logprobs), 0, cc.asIDs)
		}
		if cc.req.returnTokenIDs || cc.s.tok == nil {
			ch.PromptTokenIDs = p.ids
			ch.TokenIDs = nonNil(c.ids)
		}
		resp.Choices = append(resp.Choices, ch)
	}
	return resp
}

func nonNil(ids []int32) []int32 {
	if ids == nil {
		return []int32{}
	}
	return ids
}

// includeUsage is vLLM's should_include_usage.
func (s *Server) includeUsage(so *streamOptions) (final, continuous bool) {
	if so != nil {
		final = so.IncludeUsage || s.opt.EnableForceIncludeUsage
		return final, final && so.ContinuousUsageStats
	}
	return s.opt.EnableForceIncludeUsage, false
}

// stream answers with server-sent events (vLLM completion_stream_generator).
func (cc *completionCall) stream(c *gin.Context, r *run) {
	defer r.abort()
	w := cc.s.newSSE(c)
	includeUsage, continuous := cc.s.includeUsage(cc.req.streamOptions)
	n := len(r.choices)
	prevTextLen := make([]int, n)
	prevTokens := make([]int, n)
	echoed := make([]bool, n)
	pending := n
	byIndex := map[*choice]int{}
	for i, ch := range r.choices {
		byIndex[ch] = i
	}
	for pending > 0 {
		ch, d, ok := r.nextDelta(c.Request.Context(), w, &pending)
		if !ok {
			return
		}
		i := byIndex[ch]
		p := cc.prompts[ch.prompt]
		text, tokens := d.text, d.tokens
		var promptIDs []int32
		if cc.req.echo && !echoed[i] {
			if cc.echoOnly {
				text, tokens = cc.promptText(ch.prompt), p.ids
			} else {
				text = cc.promptText(ch.prompt) + text
				tokens = append(append([]int32(nil), p.ids...), tokens...)
			}
			promptIDs, echoed[i] = p.ids, true
		} else {
			if cc.echoOnly {
				text, tokens = "", nil
			}
			if !echoed[i] && cc.req.returnTokenIDs {
				promptIDs, echoed[i] = p.ids, true
			}
		}
		if text == "" && len(tokens) == 0 && prevTokens[i] == 0 && !d.finished {
			continue
		}
		sc := completionStreamChoice{Index: ch.index, Text: text, FinishReason: ch.finishReasonPtr(), PromptTokenIDs: promptIDs}
		if d.finished {
			sc.StopReason = ch.stopReason
		}
		if cc.req.logprobs != nil {
			sc.Logprobs = cc.s.completionLogprobs(tokens, d.logprobs, int(*cc.req.logprobs), prevTextLen[i], cc.asIDs)
		}
		if cc.req.returnTokenIDs || cc.s.tok == nil {
			sc.TokenIDs = nonNil(d.tokens)
		}
		prevTextLen[i] += len([]rune(d.text))
		prevTokens[i] += len(d.tokens)
		chunk := completionStreamResponse{ID: cc.id, Object: "text_completion", Created: cc.created, Model: cc.s.model,
			Choices: []completionStreamChoice{sc}}
		if continuous {
			pt := len(p.ids)
			chunk.Usage = &usage{PromptTokens: pt, CompletionTokens: prevTokens[i], TotalTokens: pt + prevTokens[i]}
		}
		if !w.send(chunk) {
			return
		}
	}
	if includeUsage {
		u := cc.usage(r)
		w.send(usageChunk{ID: cc.id, Object: "text_completion", Created: cc.created, Model: cc.s.model, Choices: []struct{}{},
			Usage: usageNoNull(u)})
	}
	w.done()
}

// nextDelta waits for the next output of a choice still running and
// applies it (outputs after a stop string are dropped); pending counts the
// choices that have not finished. It returns false when the stream ends
// early: the client is gone, or the choice failed (the error event and
// [DONE] are then sent).
func (r *run) nextDelta(ctx context.Context, w *sse, pending *int) (*choice, delta, bool) {
	for {
		ev, ok := r.next(ctx)
		if !ok {
			return nil, delta{}, false
		}
		ch := ev.c
		if ch.done {
			continue // after a stop string: the rest is dropped
		}
		d := r.apply(ev)
		if d.finished {
			*pending--
		}
		if ch.err != nil {
			w.error(ch.err)
			w.done()
			return nil, delta{}, false
		}
		return ch, d, true
	}
}

// sse writes server-sent events: "data: <json>\n\n" frames and the final
// "data: [DONE]\n\n".
type sse struct {
	c   *gin.Context
	bw  *bufio.Writer
	err error
	// deadline renews the connection's write deadline before each event:
	// a client that stops reading is cut after WriteTimeout.
	deadline func()
}

func (s *Server) newSSE(c *gin.Context) *sse {
	h := c.Writer.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	s.writeDeadline(c)
	c.Status(http.StatusOK)
	c.Writer.WriteHeaderNow()
	c.Writer.Flush()
	return &sse{c: c, bw: bufio.NewWriterSize(c.Writer, 4096), deadline: func() { s.writeDeadline(c) }}
}

// send writes one event and flushes it; false when the client is gone.
func (w *sse) send(v any) bool {
	if w.err != nil {
		return false
	}
	b, err := marshal(v)
	if err != nil {
		w.err = err
		return false
	}
	w.deadline()
	w.bw.WriteString("data: ")
	w.bw.Write(b)
	w.bw.WriteString("\n\n")
	if w.err = w.bw.Flush(); w.err != nil {
		return false
	}
	w.c.Writer.Flush()
	return true
}

// error sends an error event (vLLM create_streaming_error_response).
func (w *sse) error(e *APIError) {
	b, _ := e.MarshalJSON()
	if w.err != nil {
		return
	}
	w.deadline()
	fmt.Fprintf(w.bw, "data: %s\n\n", b)
	w.err = w.bw.Flush()
	w.c.Writer.Flush()
}

// done sends the closing [DONE] event.
func (w *sse) done() {
	if w.err != nil {
		return
	}
	w.deadline()
	w.bw.WriteString("data: [DONE]\n\n")
	w.err = w.bw.Flush()
	w.c.Writer.Flush()
}

// paramsRepr renders sampling parameters the way vLLM logs them
// (SamplingParams(...)) for --enable-log-requests.
func paramsRepr(p sampling.Params, r *commonRequest) string {
	f := func(x *float64) string {
		if x == nil {
			return "None"
		}
		return pyfmt.FloatRepr(*x)
	}
	i := func(x *int) string {
		if x == nil {
			return "None"
		}
		return fmt.Sprint(*x)
	}
	seed := "None"
	if p.Seed != nil {
		seed = fmt.Sprint(*p.Seed)
	}
	stops := make([]string, len(r.stop))
	for k, s := range r.stop {
		stops[k] = pyfmt.Repr(s)
	}
	return fmt.Sprintf("SamplingParams(n=%d, presence_penalty=%s, frequency_penalty=%s, repetition_penalty=%s, temperature=%s, top_p=%s, top_k=%s, min_p=%s, seed=%s, stop=[%s], stop_token_ids=%v, include_stop_str_in_output=%s, ignore_eos=%s, max_tokens=%s, min_tokens=%d, logprobs=%s, skip_special_tokens=%s)",
		p.N, pyfmt.FloatRepr(p.PresencePenalty), pyfmt.FloatRepr(p.FrequencyPenalty), f(p.RepetitionPenalty), f(p.Temperature), f(p.TopP), i(p.TopK), f(p.MinP),
		seed, strings.Join(stops, ", "), p.StopTokenIDs, pyBool(r.includeStopStrInOutput), pyBool(p.IgnoreEOS), i(p.MaxTokens), p.MinTokens, i(p.Logprobs), pyBool(r.skipSpecialTokens))
}

func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}
