package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/npuserve/npuserve/engine/core"
	"github.com/npuserve/npuserve/engine/sampling"
	"github.com/npuserve/npuserve/engine/tokenizer"
)

// seqSpec is one sequence to generate: choice index, prompt and its
// parameters (n = 1).
type seqSpec struct {
	index  int
	prompt int
	params sampling.Params
}

// outputOpts say how generated tokens become text.
type outputOpts struct {
	stop        []string
	includeStop bool
	skipSpecial bool
	minTokens   int
	// noText: detokenization is off (no tokenizer).
	noText bool
}

// choice is one running sequence and its output state. Fields below the
// line are owned by the handler goroutine; final and override are shared
// with the sequence's forwarder.
type choice struct {
	index  int
	prompt int
	id     string
	params sampling.Params
	ch     <-chan core.Output

	final    atomic.Bool // the engine's final output was seen
	mu       sync.Mutex
	override string // finish reason decided by the server (stop string)

	opts     outputOpts
	detok    *tokenizer.Stream
	tok      *tokenizer.Tokenizer
	ids      []int32
	lps      []sampling.Token
	text     string
	released int
	done     bool
	reason   string
	// stopReason is nil, the stop token id (int32) or the stop string.
	stopReason any
	err        *APIError
	promptLen  int
}

// delta is what one engine output added to a choice.
type delta struct {
	text     string
	tokens   []int32
	logprobs []sampling.Token
	finished bool
	// stopped: a stop string ended the sequence (the engine request must
	// be aborted).
	stopped bool
}

func (c *choice) setOverride(r string) {
	c.mu.Lock()
	c.override = r
	c.mu.Unlock()
}

func (c *choice) overrideReason() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.override
}

// consume applies one engine output.
func (c *choice) consume(out core.Output) delta {
	var d delta
	if c.done {
		return d
	}
	if out.PromptTokens > 0 {
		c.promptLen = out.PromptTokens
	}
	// Tokens are taken one at a time so that a stop string inside a
	// multi-token output (an accepted speculative run) ends the sequence
	// at the token that completed it: token_ids and logprobs then hold
	// nothing after it, as without speculation.
	toks := out.Tokens
	kept := len(toks)
	// A sequence ended by a stop or EOS token does not show that token's
	// text unless include_stop_str_in_output (vLLM's detokenizer).
	hideLast := out.Finished && out.StopToken != nil && !c.opts.includeStop
	for i, t := range toks {
		c.ids = append(c.ids, t)
		if i < len(out.Logprobs) {
			c.lps = append(c.lps, out.Logprobs[i])
		}
		if c.detok == nil || (hideLast && i == len(toks)-1) || (c.opts.skipSpecial && c.tok.IsSpecial(int(t))) {
			continue
		}
		if c.addText(c.detok.Add(int(t)), out.Finished, &d) {
			kept = i + 1
			break
		}
	}
	if out.Finished && !c.done && c.detok != nil {
		c.addText(c.detok.Flush(), true, &d)
	}
	d.tokens = toks[:kept]
	d.logprobs = out.Logprobs[:min(kept, len(out.Logprobs))]
	if out.Finished && !c.done {
		c.done = true
		c.reason = out.FinishReason
		switch out.FinishReason {
		case "stop":
			if out.StopToken != nil && !out.EOS {
				c.stopReason = *out.StopToken
			}
		case "error":
			err := out.Err
			if err == nil {
				err = errors.New("the engine failed the request")
			}
			c.err = internalError(err)
		case "abort":
			if out.Err != nil {
				c.err = fromError(out.Err)
			} else {
				c.err = &APIError{Status: 503, Type: "ServiceUnavailableError", Message: "the request was aborted by the engine"}
			}
		}
	}
	end := len(c.text)
	if !c.done && !c.opts.includeStop {
		end -= stopHoldback(c.text, c.opts.stop)
	}
	if end > c.released {
		d.text = c.text[c.released:end]
		c.released = end
	}
	d.finished = c.done
	return d
}

// addText appends newly decoded text and reports whether a stop string
// (checked once min_tokens are out) ended the sequence there; the text is
// then cut and d.stopped says whether the engine request must be aborted
// (final: the engine has finished it).
func (c *choice) addText(newText string, final bool, d *delta) bool {
	c.text += newText
	if len(c.opts.stop) == 0 || newText == "" || len(c.ids) <= c.opts.minTokens {
		return false
	}
	stop, idx := checkStopStrings(c.text, len(newText), c.opts.stop, c.opts.includeStop)
	if stop == "" {
		return false
	}
	if idx >= 0 {
		c.text = c.text[:idx]
	}
	c.done, c.reason, c.stopReason = true, "stop", stop
	d.stopped = !final
	return true
}

// checkStopStrings is vLLM's StopChecker.check_stop_strings: the first
// stop string (in request order) found in the text that overlaps the
// newly added characters. It returns the stop string and where to cut
// the text (-1: no cut).
func checkStopStrings(text string, newLen int, stops []string, include bool) (string, int) {
	for _, s := range stops {
		if s == "" {
			continue
		}
		start := max(len(text)-newLen-len(s)+1, 0)
		i := strings.Index(text[start:], s)
		if i < 0 {
			continue
		}
		i += start
		if include {
			i += len(s)
			if i >= len(text) {
				return s, -1
			}
		}
		return s, i
	}
	return "", -1
}

// stopHoldback is how many trailing bytes of text could still become a
// stop string: the longest suffix that is a proper prefix of one. Those
// bytes are not streamed until the next tokens decide, so a stop string
// is never sent, not even in part.
func stopHoldback(text string, stops []string) int {
	best := 0
	for _, s := range stops {
		for k := min(len(s)-1, len(text)); k > best; k-- {
			if strings.HasSuffix(text, s[:k]) {
				best = k
				break
			}
		}
	}
	return best
}

// finishReasonPtr is the choice's finish_reason for a final chunk.
func (c *choice) finishReasonPtr() *string {
	if !c.done {
		return nil
	}
	r := c.reason
	return &r
}

// event is one output of one choice.
type event struct {
	c   *choice
	out core.Output
}

// run is a request's sequences in the engine.
type run struct {
	s       *Server
	choices []*choice
	events  chan event
	done    chan struct{}
	once    sync.Once
	queued  int // sequences counted against MaxQueuedRequests
}

// launch adds every sequence to the engine. If one is refused, those
// already added are aborted and the error is returned. With
// --max-num-queued-reqs, a request whose sequences do not fit the
// in-flight budget is answered 503 before anything is added.
func (s *Server) launch(base string, prompts []prompt, specs []seqSpec, oo outputOpts, arrival time.Time) (*run, *APIError) {
	if aerr := s.admitQueued(len(specs)); aerr != nil {
		return nil, aerr
	}
	r := &run{s: s, events: make(chan event, 4*len(specs)+4), done: make(chan struct{}), queued: len(specs)}
	for _, sp := range specs {
		c := &choice{index: sp.index, prompt: sp.prompt, params: sp.params, opts: oo,
			id: fmt.Sprintf("%s-%d-%x", base, sp.index, s.seq.Add(1)), promptLen: len(prompts[sp.prompt].ids)}
		if s.tok != nil && !oo.noText {
			c.tok = s.tok
			// Special tokens are filtered before the stream so that
			// skip_special_tokens can keep the parsers' tags.
			c.detok = s.tok.NewStream(false)
		}
		ch, err := s.eng.Add(&core.Request{ID: c.id, PromptTokens: prompts[sp.prompt].ids, Params: sp.params, Arrival: arrival})
		if err != nil {
			r.abort()
			return nil, fromError(err)
		}
		c.ch = ch
		r.choices = append(r.choices, c)
		s.metrics.requestStarted(sp.params)
		go r.forward(c)
	}
	return r, nil
}

// forward moves a choice's engine outputs to the run's event channel,
// records the request's metrics, and drains the channel after the
// handler has gone.
func (r *run) forward(c *choice) {
	var last time.Time
	for out := range c.ch {
		if len(out.Tokens) > 0 {
			if !last.IsZero() {
				r.s.metrics.observeITL(out.Time.Sub(last))
			}
			last = out.Time
		}
		if out.Finished {
			c.final.Store(true)
			reason := out.FinishReason
			if o := c.overrideReason(); o != "" {
				reason = o
			}
			r.s.metrics.requestFinished(reason, out.Metrics, c.params)
		}
		select {
		case r.events <- event{c, out}:
		case <-r.done:
		}
	}
}

// next returns the next output, or false when ctx ends first.
func (r *run) next(ctx context.Context) (event, bool) {
	select {
	case ev := <-r.events:
		return ev, true
	case <-ctx.Done():
		return event{}, false
	}
}

// abort ends the run: sequences still in the engine are aborted (their
// cache is freed at the next step), further outputs are dropped and the
// in-flight budget is given back. Every run ends with it.
func (r *run) abort() {
	r.once.Do(func() {
		r.s.releaseQueued(r.queued)
		close(r.done)
		for _, c := range r.choices {
			if !c.final.Load() {
				r.s.eng.Abort(c.id)
			}
		}
	})
}

// apply consumes one event and aborts the engine request when a stop
// string ended it.
func (r *run) apply(ev event) delta {
	d := ev.c.consume(ev.out)
	if d.stopped {
		ev.c.setOverride("stop")
		r.s.eng.Abort(ev.c.id)
	}
	return d
}

// wait runs every choice to completion (non-streaming requests). It
// returns false if ctx ended first (the run is then aborted).
func (r *run) wait(ctx context.Context) bool {
	pending := len(r.choices)
	for pending > 0 {
		ev, ok := r.next(ctx)
		if !ok {
			r.abort()
			return false
		}
		was := ev.c.done
		r.apply(ev)
		if !was && ev.c.done {
			pending--
		}
	}
	r.abort()
	return true
}

// firstError is the first choice that failed, if any.
func (r *run) firstError() *APIError {
	for _, c := range r.choices {
		if c.err != nil {
			return c.err
		}
	}
	return nil
}

// tokenString is a token's text as vLLM shows it in logprobs: the token
// decoded alone (a partial UTF-8 sequence shows as U+FFFD), or
// "token_id:N" with return_tokens_as_token_ids.
func (s *Server) tokenString(id int32, asIDs bool) string {
	if asIDs || s.tokenText == nil || int(id) >= len(s.tokenText) || id < 0 {
		return fmt.Sprintf("token_id:%d", id)
	}
	return s.tokenText[id]
}

// clampLogprob maps -inf to vLLM's JSON-safe -9999.0.
func clampLogprob(v float32) float64 {
	return max(float64(v), -9999.0)
}

// completionLogprobs builds the completions logprobs object for tokens
// (vLLM _create_completion_logprobs): each position's top_logprobs holds
// the sampled token and the requested number of most likely ones.
func (s *Server) completionLogprobs(ids []int32, lps []sampling.Token, num int, offset int, asIDs bool) *completionLogprobs {
	out := &completionLogprobs{TextOffset: []int{}, TokenLogprobs: []*float64{}, Tokens: []string{}, TopLogprobs: []*orderedFloatMap{}}
	lastLen := 0
	for i, id := range ids {
		tok := s.tokenString(id, asIDs)
		out.Tokens = append(out.Tokens, tok)
		if i < len(lps) {
			lp := clampLogprob(lps[i].Logprob)
			out.TokenLogprobs = append(out.TokenLogprobs, &lp)
			// The position's logprobs: the sampled token, then the num
			// most likely (ids deduplicated); vLLM keeps the first num+1.
			top := &orderedFloatMap{}
			top.set(tok, lp)
			for j, t := range lps[i].TopLogprobs {
				if j >= num {
					break
				}
				if t.ID != id {
					top.set(s.tokenString(t.ID, asIDs), clampLogprob(t.Logprob))
				}
			}
			out.TopLogprobs = append(out.TopLogprobs, top)
		} else {
			out.TokenLogprobs = append(out.TokenLogprobs, nil)
			out.TopLogprobs = append(out.TopLogprobs, nil)
		}
		if i == 0 {
			out.TextOffset = append(out.TextOffset, offset)
		} else {
			out.TextOffset = append(out.TextOffset, out.TextOffset[i-1]+lastLen)
		}
		lastLen = len([]rune(tok))
	}
	return out
}

// chatLogprobs builds the chat logprobs object for tokens (vLLM
// _create_chat_logprobs): top_logprobs lists the first num entries of the
// position's logprobs, which start with the sampled token followed by the
// most likely ones (num -1: all of them).
func (s *Server) chatLogprobs(ids []int32, lps []sampling.Token, num int, asIDs bool) *chatLogprobs {
	out := &chatLogprobs{Content: []chatLogprobsContent{}}
	for i, id := range ids {
		if i >= len(lps) {
			break
		}
		tok := s.tokenString(id, asIDs)
		lp := clampLogprob(lps[i].Logprob)
		c := chatLogprobsContent{Token: tok, Logprob: lp, Bytes: utf8Bytes(tok), TopLogprobs: []chatLogprob{}}
		if num != 0 {
			c.TopLogprobs = append(c.TopLogprobs, chatLogprob{Token: tok, Logprob: lp, Bytes: utf8Bytes(tok)})
			for _, t := range lps[i].TopLogprobs {
				if num > 0 && len(c.TopLogprobs) >= num {
					break
				}
				if t.ID == id {
					continue
				}
				ts := s.tokenString(t.ID, asIDs)
				c.TopLogprobs = append(c.TopLogprobs, chatLogprob{Token: ts, Logprob: clampLogprob(t.Logprob), Bytes: utf8Bytes(ts)})
			}
		}
		out.Content = append(out.Content, c)
	}
	return out
}

// intIDs converts token ids to the int ids the tokenizer and parsers take.
func intIDs(ids []int32) []int {
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out
}

// utf8Bytes is list(token.encode("utf-8")).
func utf8Bytes(s string) []int {
	b := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		b[i] = int(s[i])
	}
	return b
}
