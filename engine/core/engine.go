package core

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/kvcache"
	"github.com/npuserve/npuserve/engine/model"
	"github.com/npuserve/npuserve/engine/sampling"
	"github.com/npuserve/npuserve/engine/scheduler"
	"github.com/npuserve/npuserve/npu"
)

// Model is what the engine needs of a model (engine/model); any
// registered implementation (glm5next.Model.Engine) provides it.
type Model = model.Model

// Defaults of Options (vLLM's for the OpenAI server where it has one).
const (
	DefaultMaxNumSeqs          = 256
	DefaultMaxNumBatchedTokens = 8192
	// DefaultBlockSize is rounded up to a multiple of index_kpool.
	DefaultBlockSize = 64
)

// Options configure an engine. Zero fields take defaults.
type Options struct {
	// MaxNumSeqs bounds the running requests (--max-num-seqs); it is also
	// the number of per-sequence state slots. Default 256.
	MaxNumSeqs int
	// MaxNumBatchedTokens is the token budget of a step
	// (--max-num-batched-tokens); at least MaxNumSeqs. Default 8192, or
	// MaxNumSeqs when that is larger.
	MaxNumBatchedTokens int
	// LongPrefillTokenThreshold caps one request's prefill chunk per step
	// (--long-prefill-token-threshold; 0: no cap).
	LongPrefillTokenThreshold int
	// MaxModelLen is the context window (prompt + generated tokens).
	// Default: max_position_embeddings, lowered to what the cache holds.
	// Set explicitly, it must fit in the cache (as vLLM requires).
	MaxModelLen int
	// BlockSize is the cache block size in tokens, a multiple of the
	// model's index_kpool. Default 64 rounded up to such a multiple.
	BlockSize int
	// NumBlocks is the number of cache blocks. When 0, CacheBytes sizes
	// the cache: its state slots (MaxNumSeqs × BytesPerSequenceState)
	// first, then as many blocks as the rest holds.
	NumBlocks  int
	CacheBytes int64
	// EOSTokenIDs are the model's end-of-sequence ids: the first is the
	// tokenizer's EOS token, the others generation_config.json's extra
	// eos_token_id values (vLLM update_from_generation_config; see
	// sampling.Params.ApplyEOS, which Add calls). Empty: no EOS.
	EOSTokenIDs []int32
	// MaxLogprobs bounds the logprobs a request may ask for
	// (--max-logprobs; -1: the vocabulary). Default 20.
	MaxLogprobs int
	// OnStep, when set, is called on the engine goroutine after every
	// step (vllm:iteration_tokens_total, step timing logs). It must not
	// block and must not call the engine.
	OnStep func(StepStats)
	// Logf, when set, receives failures the engine recovers from (a step
	// that panicked, with its stack).
	Logf func(format string, args ...any)
	// Lockstep, when set, steps this DP rank in lockstep with the others
	// (expert parallelism; see Lockstep). The model must then be a
	// CollectiveModel.
	Lockstep Lockstep
	// NumSpeculativeTokens, when positive, turns on MTP speculative
	// decoding with that many drafts per sequence per step
	// (--speculative-config num_speculative_tokens, 1..MaxSpeculativeTokens).
	// The model must be a model.Speculative with its draft layer loaded;
	// tensor, expert and data parallelism are refused.
	NumSpeculativeTokens int

	// wholeRows makes sample download every row whole, as on a backend
	// without npu.SampleReducer (the tests' reference for the reduction).
	wholeRows bool
	// crossCheck makes sample also sample every row whole, on the same
	// logits with copies of the samplers, and record every row whose
	// reduced result differs in crossMismatches (tests).
	crossCheck bool
	// DecodeGraphs, when set, are the batch sizes whose decode steps are
	// captured as device graphs at start-up (config.GraphPlan.Sizes:
	// --compilation-config), once the cache is allocated; decode steps
	// of at most the largest size then replay the graph of the next size
	// up. The cache gets one block and GraphPadSlots state slots more
	// for the padding rows. Graphs are not captured (OnGraphs says why)
	// on a backend or model without them, with lockstep or speculative
	// decoding.
	DecodeGraphs []int
	// OnGraphs, when set, is called once at start-up when DecodeGraphs is
	// set: with the capture's report, or an error wrapping
	// model.ErrNoGraphs when graphs are not used here (every step runs
	// eagerly; the option is without effect). A failed capture fails New.
	OnGraphs func(model.GraphReport, error)
}

// StepStats describe one engine step.
type StepStats struct {
	// Start is when the step began.
	Start time.Time
	// NumSeqs requests fed NumTokens tokens; NumDecodes of them one
	// decode token each; NumSampled sampled a token.
	NumSeqs, NumTokens, NumDecodes, NumSampled int
	// NumWholeRows of the sampled rows had their whole vocabulary row
	// downloaded; the others were sampled from the device's reduction
	// (Stats.NumWholeRows).
	NumWholeRows int
	// NumPreempted requests were preempted while scheduling.
	NumPreempted int
	// Schedule is the scheduler's time; Forward the model's (enqueueing
	// the forward; on the eager CPU backend its computation); Sample the
	// sync point (the reduced or whole logits rows' download, so on an
	// asynchronous backend the device's remaining work) and the samplers';
	// Total the whole step including output delivery. Total - Forward -
	// Sample is the engine's overhead beside the model and sampling.
	Schedule, Forward, Sample, Total time.Duration
	// Draft is the speculative step's rollback, MTP layer and draft
	// download (zero without speculative decoding).
	Draft time.Duration
}

// ErrClosed is returned by Add after Close, and carried (FinishReason
// "abort") by the final output of requests in flight at Close.
var ErrClosed = errors.New("engine: closed")

// Engine is the continuous-batching loop of one DP rank. One goroutine,
// locked to its OS thread, owns the model, the backend and the cache;
// Add, Abort, Stats and Close are safe for concurrent use.
type Engine struct {
	model Model
	be    npu.Backend
	opt   Options
	vocab int
	kv    *kvcache.Manager
	sched *scheduler.Scheduler
	cache model.Cache

	mu     sync.Mutex
	ops    []op
	live   map[string]bool
	closed bool
	dead   error // set when the loop gave up
	stats  Stats
	wake   chan struct{} // buffered 1
	done   chan struct{} // closed when the loop exits

	// Loop-owned.
	cur       []*reqState // requests of the step in progress
	tokens    []int32
	seqs      []*kvcache.Seq
	rows      []int
	logitRows []int
	sampled   []*reqState
	samplers  []*sampling.Sampler
	wholeRows int // this step's rows downloaded whole (sample)
	// crossMismatches are the rows crossCheck found differing.
	crossMismatches []string
	crossChecked    int
	counters        counters

	spec  model.Speculative // set with Options.NumSpeculativeTokens
	specN model.SpecStats
}

// counters are the loop's running totals, published into stats.
type counters struct {
	prompt, generation, steps int64
	dummy                     int64 // lockstep dummy steps
	wholeRows                 int64 // logits rows downloaded whole
	finished                  map[string]int64
}

// op is a queued Add or Abort.
type op struct {
	add   *reqState
	abort string
}

// reqState is the engine's per-request state.
type reqState struct {
	id      string
	sr      *scheduler.Request
	sampler *sampling.Sampler
	out     *outbox
	wantLP  bool
	m       Metrics
}

// New resolves opt against the model, allocates the cache and starts the
// engine loop.
func New(model Model, opt Options) (*Engine, error) {
	cfg := model.Config()
	if opt.MaxNumSeqs == 0 {
		opt.MaxNumSeqs = DefaultMaxNumSeqs
	}
	if opt.MaxNumBatchedTokens == 0 {
		opt.MaxNumBatchedTokens = max(DefaultMaxNumBatchedTokens, opt.MaxNumSeqs)
	}
	if opt.MaxLogprobs == 0 {
		opt.MaxLogprobs = sampling.DefaultMaxLogprobs
	}
	kp := max(cfg.IndexKPool, 1)
	if opt.BlockSize == 0 {
		opt.BlockSize = (DefaultBlockSize + kp - 1) / kp * kp
	}
	switch {
	case opt.MaxNumSeqs < 1:
		return nil, fmt.Errorf("engine: max_num_seqs %d must be positive", opt.MaxNumSeqs)
	case opt.MaxNumBatchedTokens < opt.MaxNumSeqs:
		return nil, fmt.Errorf("engine: max_num_batched_tokens (%d) must be greater than or equal to max_num_seqs (%d)", opt.MaxNumBatchedTokens, opt.MaxNumSeqs)
	case opt.BlockSize < 1 || opt.BlockSize%kp != 0:
		return nil, fmt.Errorf("engine: block size %d must be a positive multiple of index_kpool %d", opt.BlockSize, kp)
	case opt.NumBlocks < 0 || opt.CacheBytes < 0 || opt.MaxModelLen < 0 || opt.LongPrefillTokenThreshold < 0:
		return nil, errors.New("engine: negative cache size, max_model_len or long_prefill_token_threshold")
	}
	if opt.NumBlocks == 0 {
		if opt.CacheBytes == 0 {
			return nil, errors.New("engine: set the cache size (NumBlocks or CacheBytes)")
		}
		nb, err := config.CacheBlocks(opt.CacheBytes, opt.BlockSize, opt.MaxNumSeqs, model.BytesPerToken(), model.BytesPerSequenceState())
		if err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
		opt.NumBlocks = nb
	}
	capacity := opt.NumBlocks * opt.BlockSize
	if opt.MaxModelLen == 0 {
		opt.MaxModelLen = capacity
		if cfg.MaxPositionEmbeddings > 0 {
			opt.MaxModelLen = min(opt.MaxModelLen, cfg.MaxPositionEmbeddings)
		}
		if opt.MaxModelLen < 1 {
			return nil, errors.New("engine: the cache holds no token")
		}
	}
	if opt.MaxModelLen > capacity {
		return nil, fmt.Errorf("The model's max seq len (%d) is larger than the maximum number of tokens that can be stored in KV cache (%d). Try increasing the cache memory or decreasing `max_model_len` when initializing the engine.",
			opt.MaxModelLen, capacity)
	}
	opt.EOSTokenIDs = append([]int32(nil), opt.EOSTokenIDs...)
	for _, id := range opt.EOSTokenIDs {
		if id < 0 || int(id) >= cfg.VocabSize {
			return nil, fmt.Errorf("engine: EOS id %d outside the vocabulary of %d", id, cfg.VocabSize)
		}
	}

	spec, err := checkSpeculative(model, &opt)
	if err != nil {
		return nil, err
	}
	if opt.Lockstep != nil {
		if _, ok := model.(CollectiveModel); !ok {
			return nil, errors.New("engine: lockstep needs a model with DummyStep (a CollectiveModel)")
		}
	}
	kv, err := kvcache.New(kvcache.Config{BlockSize: opt.BlockSize, NumBlocks: opt.NumBlocks, NumStateSlots: opt.MaxNumSeqs, KPool: kp})
	if err != nil {
		return nil, err
	}
	sched, err := scheduler.New(scheduler.Config{
		MaxNumSeqs: opt.MaxNumSeqs, MaxNumBatchedTokens: opt.MaxNumBatchedTokens,
		MaxModelLen: opt.MaxModelLen, LongPrefillTokenThreshold: opt.LongPrefillTokenThreshold,
	}, kv)
	if err != nil {
		return nil, err
	}
	e := &Engine{
		model: model, be: model.Backend(), opt: opt, vocab: cfg.VocabSize, kv: kv, sched: sched,
		live: map[string]bool{}, wake: make(chan struct{}, 1), done: make(chan struct{}),
		counters: counters{finished: map[string]int64{}}, spec: spec,
	}
	e.publish()
	started := make(chan error, 1)
	go e.loop(started)
	if err := <-started; err != nil {
		return nil, err
	}
	return e, nil
}

// Options returns the resolved options (defaults filled in).
func (e *Engine) Options() Options {
	o := e.opt
	o.EOSTokenIDs = append([]int32(nil), o.EOSTokenIDs...)
	return o
}

// Add validates r and queues it. Validation errors (*sampling.
// ValidationError with vLLM's message, or a plain error) return before
// anything is queued. The channel carries the request's outputs in order;
// the last has Finished set, after which the channel is closed. The
// consumer must read the channel until it is closed (also after Abort):
// outputs never block the engine, they queue up for the consumer.
func (e *Engine) Add(r *Request) (<-chan Output, error) {
	rs, err := e.prepare(r)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	switch {
	case e.closed:
		e.mu.Unlock()
		return nil, ErrClosed
	case e.dead != nil:
		e.mu.Unlock()
		return nil, e.dead
	case e.live[r.ID]:
		e.mu.Unlock()
		return nil, fmt.Errorf("engine: request id %q is already in use", r.ID)
	}
	e.live[r.ID] = true
	rs.out = newOutbox()
	e.ops = append(e.ops, op{add: rs})
	e.mu.Unlock()
	e.signal()
	return rs.out.ch, nil
}

// prepare validates r and builds its state (everything but the outbox).
func (e *Engine) prepare(r *Request) (*reqState, error) {
	if r.ID == "" {
		return nil, errors.New("engine: empty request id")
	}
	p := r.Params
	if p.N > 1 {
		return nil, fmt.Errorf("engine: request %q has n=%d; fan n > 1 out into requests with Params.Child", r.ID, p.N)
	}
	for _, id := range r.PromptTokens {
		if id < 0 || int(id) >= e.vocab {
			return nil, fmt.Errorf("Token id %d is out of vocabulary", id)
		}
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := p.Verify(e.opt.MaxLogprobs, e.vocab); err != nil {
		return nil, err
	}
	eos, extra := int32(-1), []int32(nil)
	if len(e.opt.EOSTokenIDs) > 0 {
		eos, extra = e.opt.EOSTokenIDs[0], e.opt.EOSTokenIDs[1:]
	}
	p.ApplyEOS(eos, extra)
	maxTokens := 0
	if p.MaxTokens != nil {
		maxTokens = *p.MaxTokens
	}
	if err := e.sched.Check(len(r.PromptTokens), maxTokens); err != nil {
		return nil, err
	}
	s, err := sampling.NewSampler(p, r.PromptTokens)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	rs := &reqState{id: r.ID, sampler: s, wantLP: p.Logprobs != nil}
	rs.sr = scheduler.NewRequest(r.ID, r.PromptTokens, maxTokens)
	rs.sr.Data = rs
	rs.m.Arrival, rs.m.Queued = r.Arrival, now
	if rs.m.Arrival.IsZero() {
		rs.m.Arrival = now
	}
	rs.m.PromptTokens = len(r.PromptTokens)
	return rs, nil
}

// Abort cancels a request (client gone): its blocks and state slot are
// freed before the next step and its channel gets a final output with
// FinishReason "abort". It reports whether the request was live; one that
// completes in the step already running ends with its own reason instead.
func (e *Engine) Abort(id string) bool {
	e.mu.Lock()
	if e.closed || !e.live[id] {
		e.mu.Unlock()
		return false
	}
	e.ops = append(e.ops, op{abort: id})
	e.mu.Unlock()
	e.signal()
	return true
}

// Stats returns a snapshot of the engine's gauges and counters.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.stats
	s.FinishedByReason = make(map[string]int64, len(e.stats.FinishedByReason))
	for k, v := range e.stats.FinishedByReason {
		s.FinishedByReason[k] = v
	}
	s.SpecAcceptedPerPos = append([]int64(nil), e.stats.SpecAcceptedPerPos...)
	return s
}

// Close aborts every request (final outputs with FinishReason "abort" and
// Err ErrClosed), stops the loop, frees the cache and waits for the loop
// to exit. The model stays open. Close is idempotent.
func (e *Engine) Close() error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.signal()
	<-e.done
	return nil
}

// Done is closed when the engine loop has exited (after Close, or after a
// failure it could not recover from).
func (e *Engine) Done() <-chan struct{} { return e.done }

// Err is the failure that stopped the loop, if any.
func (e *Engine) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.dead
}

func (e *Engine) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// loop is the engine goroutine.
func (e *Engine) loop(started chan<- error) {
	// Accelerator contexts belong to one OS thread: everything that
	// touches the backend runs here.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer close(e.done)
	cache, release, err := e.newCache()
	if err != nil {
		started <- err
		return
	}
	e.cache = cache
	defer release()
	started <- nil

	for {
		e.mu.Lock()
		ops := e.ops
		e.ops = nil
		closing := e.closed
		e.mu.Unlock()
		for _, o := range ops {
			if o.add != nil {
				e.admit(o.add)
			} else if r, ok := e.sched.Get(o.abort); ok {
				e.finish(r.Data.(*reqState), "abort", nil, time.Now())
			}
		}
		if e.opt.Lockstep != nil {
			if e.lockstepIteration(closing) {
				return
			}
			continue
		}
		if closing {
			e.failAll("abort", ErrClosed)
			e.publish()
			return
		}
		if !e.sched.HasWork() {
			e.publish()
			<-e.wake
			continue
		}
		if err := e.safeStep(); err != nil {
			// The scheduler's state can no longer be trusted: fail
			// everything and stop.
			e.mu.Lock()
			e.dead = err
			e.mu.Unlock()
			e.failAll("error", err)
			e.publish()
			return
		}
		e.publish()
	}
}

// admit hands a new request to the scheduler.
func (e *Engine) admit(rs *reqState) {
	if err := e.sched.Add(rs.sr); err != nil {
		// Check passed in Add, so only an impossible state gets here.
		e.finish(rs, "error", err, time.Now())
	}
}

// safeStep runs one step. A failure inside it (an error from the model,
// or a panic anywhere on this goroutine) fails the step's requests and the
// engine goes on; it returns an error only when even that failed, or when
// the model runs collectives (other ranks' collective sequences may now
// differ from this rank's: stop rather than go on).
func (e *Engine) safeStep() (fatal error) {
	var err error
	var stack []byte
	func() {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("engine: step failed: %v", p)
				if perr, ok := p.(error); ok {
					err = fmt.Errorf("engine: step failed: %w", perr)
				}
				stack = debug.Stack()
				if ps, ok := p.(interface{ Stack() []byte }); ok {
					stack = ps.Stack() // the goroutine that panicked (a backend worker)
				}
			}
		}()
		if _, serr := e.step(); serr != nil {
			err = fmt.Errorf("engine: step failed: %w", serr)
		}
	}()
	if err == nil {
		return nil
	}
	if collective(e.model) {
		return err
	}
	if e.opt.Logf != nil {
		e.opt.Logf("%v; failing the step's %d requests\n%s", err, len(e.cur), stack)
	}
	return e.failStep(err)
}

// failStep finishes the current step's live requests with err. A failure
// that hit no request (inside the scheduler) or that recurs while failing
// them is fatal: retrying could spin forever.
func (e *Engine) failStep(err error) (fatal error) {
	if len(e.cur) == 0 {
		return err
	}
	defer func() {
		if p := recover(); p != nil {
			fatal = fmt.Errorf("%w; then failing its requests: %v", err, p)
		}
	}()
	now := time.Now()
	for _, rs := range e.cur {
		if rs.sr.Status() != scheduler.Finished {
			e.finish(rs, "error", err, now)
		}
	}
	e.cur = e.cur[:0]
	return nil
}

// failAll finishes every live request without touching the scheduler's
// queues beyond removing them (used at shutdown).
func (e *Engine) failAll(reason string, err error) {
	now := time.Now()
	var all []*reqState
	for _, r := range e.sched.Running() {
		all = append(all, r.Data.(*reqState))
	}
	for _, r := range e.sched.Waiting() {
		all = append(all, r.Data.(*reqState))
	}
	for _, rs := range all {
		func() {
			defer func() {
				if recover() != nil { // broken scheduler: still end the stream
					e.deliverFinal(rs, reason, err, now)
				}
			}()
			e.finish(rs, reason, err, now)
		}()
	}
	// Requests accepted after the last drain of the queue.
	e.mu.Lock()
	ops := e.ops
	e.ops = nil
	e.mu.Unlock()
	for _, o := range ops {
		if o.add != nil {
			e.deliverFinal(o.add, reason, err, now)
		}
	}
}

// step schedules, runs and samples one batch. It reports whether it ran
// a forward (a step that only preempts does not), and the model's failure.
func (e *Engine) step() (bool, error) {
	start := time.Now()
	st := e.sched.Schedule()
	ss := StepStats{Start: start, NumSeqs: len(st.Seqs), NumTokens: st.NumTokens, NumDecodes: st.NumDecodes, NumPreempted: len(st.Preempted)}
	e.cur = e.cur[:0]
	for _, sc := range st.Seqs {
		rs := sc.Req.Data.(*reqState)
		e.cur = append(e.cur, rs)
		if rs.m.FirstScheduled.IsZero() {
			rs.m.FirstScheduled = start
		}
	}
	if len(st.Seqs) == 0 {
		if len(st.Preempted) == 0 {
			// Cannot happen (see package scheduler); never spin on it:
			// fail every queued request.
			for _, q := range [][]*scheduler.Request{e.sched.Running(), e.sched.Waiting()} {
				for _, r := range q {
					e.cur = append(e.cur, r.Data.(*reqState))
				}
			}
			panic("scheduler made no progress")
		}
		return false, nil
	}
	if e.spec != nil {
		return e.stepSpec(st, ss, start)
	}

	// Batch: sequences back to back, logits for those that sample.
	e.tokens, e.seqs, e.rows = e.tokens[:0], e.seqs[:0], e.rows[:0]
	e.logitRows, e.sampled = e.logitRows[:0], e.sampled[:0]
	if e.logitRows == nil {
		e.logitRows = make([]int, 0, e.opt.MaxNumSeqs)
	}
	for _, sc := range st.Seqs {
		e.tokens = append(e.tokens, sc.Tokens()...)
		e.seqs = append(e.seqs, sc.Req.Seq())
		e.rows = append(e.rows, sc.NumTokens)
		if sc.Sample {
			e.logitRows = append(e.logitRows, len(e.tokens)-1)
			e.sampled = append(e.sampled, sc.Req.Data.(*reqState))
		}
	}
	batch := &model.Batch{Tokens: e.tokens, Layout: e.kv.Layout(e.seqs, e.rows), LogitRows: e.logitRows}
	tf := time.Now()
	ss.Schedule = tf.Sub(start)
	logits, err := e.model.Forward(e.cache, batch)
	if err != nil {
		return false, err
	}
	ts := time.Now()
	ss.Forward = ts.Sub(tf)

	// Sample (the step's sync point). Each request has its own generator
	// and history, so its tokens do not depend on the batch.
	e.samplers = e.samplers[:0]
	for _, rs := range e.sampled {
		e.samplers = append(e.samplers, rs.sampler)
	}
	toks, errs, err := e.sample(logits)
	e.be.Free(logits)
	if err != nil {
		return false, err
	}
	now := time.Now()
	ss.Sample = now.Sub(ts)
	ss.NumSampled, ss.NumWholeRows = len(e.sampled), e.wholeRows

	for i, rs := range e.sampled {
		if errs[i] != nil {
			e.finish(rs, "error", fmt.Errorf("engine: request %s: %w", rs.id, errs[i]), now)
			continue
		}
		tok := toks[i]
		e.sched.AppendToken(rs.sr, tok.ID)
		e.counters.generation++
		if rs.m.FirstToken.IsZero() {
			rs.m.FirstToken = now
			e.counters.prompt += int64(rs.m.PromptTokens)
		}
		rs.m.LastToken = now
		out := Output{RequestID: rs.id, Tokens: []int32{tok.ID}, PromptTokens: rs.m.PromptTokens, Time: now}
		if rs.wantLP {
			out.Logprobs = []sampling.Token{tok}
		}
		reason, stop := e.checkStop(rs, 0)
		if reason == sampling.NotFinished {
			rs.out.push(out)
			continue
		}
		if reason == sampling.FinishStop {
			id := tok.ID
			out.StopToken, out.EOS = &id, stop < 0
		}
		e.complete(rs, out, reason.String(), nil, now)
	}
	e.cur = e.cur[:0]
	e.counters.steps++
	ss.Total = time.Since(start)
	if e.opt.OnStep != nil {
		e.opt.OnStep(ss)
	}
	return true, nil
}

// finish ends a request with a final output carrying no tokens.
func (e *Engine) finish(rs *reqState, reason string, err error, now time.Time) {
	e.complete(rs, Output{RequestID: rs.id, PromptTokens: rs.m.PromptTokens, Time: now}, reason, err, now)
}

// complete removes the request from the scheduler, counts it and sends
// out as its final output.
func (e *Engine) complete(rs *reqState, out Output, reason string, err error, now time.Time) {
	e.sched.Finish(rs.sr)
	e.counters.finished[reason]++
	out.Finished, out.FinishReason, out.Err = true, reason, err
	rs.m.Finished = now
	rs.m.GenerationTokens = rs.sr.NumOutputTokens()
	rs.m.Preemptions = rs.sr.NumPreemptions()
	m := rs.m
	out.Metrics = &m
	e.mu.Lock()
	delete(e.live, rs.id)
	e.mu.Unlock()
	rs.out.push(out)
}

// deliverFinal ends a request's stream without the scheduler (shutdown
// paths where the scheduler is broken or never saw the request).
func (e *Engine) deliverFinal(rs *reqState, reason string, err error, now time.Time) {
	rs.m.Finished = now
	m := rs.m
	e.mu.Lock()
	delete(e.live, rs.id)
	e.mu.Unlock()
	rs.out.push(Output{RequestID: rs.id, PromptTokens: rs.m.PromptTokens, Time: now, Finished: true, FinishReason: reason, Err: err, Metrics: &m})
}

// publish copies the loop's state into the Stats snapshot.
func (e *Engine) publish() {
	s := Stats{
		Running: e.sched.NumRunning(), Waiting: e.sched.NumWaiting(), KVUsage: e.sched.KVUsage(),
		PromptTokens: e.counters.prompt, GenerationTokens: e.counters.generation,
		Preemptions: e.sched.Preemptions(), Steps: e.counters.steps, DummySteps: e.counters.dummy,
		NumWholeRows:     e.counters.wholeRows,
		FinishedByReason: make(map[string]int64, len(e.counters.finished)),
		NumBlocks:        e.opt.NumBlocks, BlockSize: e.opt.BlockSize, NumStateSlots: e.opt.MaxNumSeqs,
		MaxModelLen: e.opt.MaxModelLen, UsedBlocks: e.kv.UsedBlocks(), UsedStateSlots: e.kv.UsedStateSlots(),
		NumSpeculativeTokens: e.opt.NumSpeculativeTokens,
		SpecDrafts:           e.specN.Drafts, SpecDraftTokens: e.specN.DraftTokens, SpecAcceptedTokens: e.specN.Accepted,
		SpecAcceptedPerPos: append([]int64(nil), e.specN.PerPos...),
	}
	for k, v := range e.counters.finished {
		s.FinishedByReason[k] = v
	}
	e.mu.Lock()
	e.stats = s
	e.mu.Unlock()
}

// checkStop is rs's sampler's CheckStop after its last token, with pending
// more tokens not yet in the sequence: the window also ends a request that
// min_tokens keeps running.
func (e *Engine) checkStop(rs *reqState, pending int) (sampling.FinishReason, int32) {
	reason, stop := rs.sampler.CheckStop(e.opt.MaxModelLen)
	if reason == sampling.NotFinished && len(rs.sr.Tokens())+pending >= e.opt.MaxModelLen {
		reason = sampling.FinishLength // min_tokens never runs past the window
	}
	return reason, stop
}
