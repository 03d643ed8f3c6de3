// Package scheduler decides, step by step, which tokens of which requests
// the model computes, with vLLM v1's continuous-batching semantics
// (vllm/v1/core/sched/scheduler.py):
//
//   - Every request is a token sequence (prompt, then the tokens generated
//     so far) of which NumComputed are in the cache. A step feeds each
//     scheduled request its next run of uncomputed tokens: the rest of its
//     prompt (in chunks: chunked prefill) or its last generated token (a
//     decode). A request whose run reaches the end of its tokens samples its
//     next token from the step's logits.
//   - A step holds at most MaxNumBatchedTokens tokens (the token budget) and
//     at most MaxNumSeqs requests run concurrently (each holds one state
//     slot of the cache).
//   - Running requests come first: decodes, then the next prefill chunks of
//     requests still prefilling; new requests are admitted from the waiting
//     queue (first come, first served) into what budget is left, their
//     prompt chunk cut to that budget.
//   - Cache blocks are allocated as tokens are scheduled (kvcache). When a
//     running request needs a block and none is free, the lowest-priority
//     (latest-arrived) running request not yet scheduled this step is
//     preempted by recompute: all its blocks and its state slot are freed
//     and it goes back to the waiting queue, in arrival order (so before
//     every request that arrived after it), with its generated tokens
//     appended to its prompt, to be prefilled again when re-admitted.
//     A step that preempted admits no new request (as vLLM).
//   - A request that could never fit (prompt longer than MaxModelLen, or
//     its worst-case length needs more blocks than the whole cache has) is
//     rejected by Add, so a request alone always completes: the scheduler
//     never waits on something that cannot happen.
//
// The scheduler is pure host logic over a kvcache.Manager: no model, no
// clock, no goroutines. It is not safe for concurrent use (one engine loop
// owns it), except Check, which reads only the configuration.
package scheduler

import (
	"errors"
	"fmt"
	"slices"

	"github.com/npuserve/npuserve/engine/kvcache"
)

// Config bounds the scheduler.
type Config struct {
	// MaxNumSeqs is the most requests running at once (vLLM
	// --max-num-seqs). The cache must have at least that many state slots.
	MaxNumSeqs int
	// MaxNumBatchedTokens is the token budget of one step (vLLM
	// --max-num-batched-tokens).
	MaxNumBatchedTokens int
	// MaxModelLen is the context window: prompt plus generated tokens.
	MaxModelLen int
	// LongPrefillTokenThreshold caps the prompt tokens one request feeds per
	// step (vLLM --long-prefill-token-threshold), so a long prompt leaves
	// budget for others; 0: no cap beyond the budget.
	LongPrefillTokenThreshold int
}

// Status is where a request is.
type Status int

// Request states.
const (
	// Waiting: queued, never scheduled; holds no cache.
	Waiting Status = iota
	// Running: holds a state slot and the blocks of its computed tokens.
	Running
	// Preempted: back in the waiting queue after a preemption; holds no
	// cache and recomputes its prompt and generated tokens when re-admitted.
	Preempted
	// Finished: finished or aborted; removed from the scheduler.
	Finished
)

// String names the status.
func (s Status) String() string {
	switch s {
	case Waiting:
		return "waiting"
	case Running:
		return "running"
	case Preempted:
		return "preempted"
	case Finished:
		return "finished"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// Request is one sequence's scheduling state. Create it with NewRequest.
type Request struct {
	// ID identifies the request (unique among live requests).
	ID string
	// Data is the owner's per-request state; the scheduler ignores it.
	Data any

	maxTokens   int     // generated-token limit; 0: only MaxModelLen bounds it
	arrival     uint64  // FCFS priority: lower is earlier, set by Add
	tokens      []int32 // prompt followed by the generated tokens
	numPrompt   int
	numComputed int // tokens in the cache (including this step's once scheduled)
	seq         *kvcache.Seq
	status      Status
	preemptions int
	lastStep    uint64  // number of the step that last scheduled it
	drafts      []int32 // speculative tokens for the next decode (SetDrafts)
	verifying   int     // drafts fed by the step that last scheduled it
}

// NewRequest returns a request for prompt that generates at most maxTokens
// tokens (0: until MaxModelLen). The prompt is copied.
func NewRequest(id string, prompt []int32, maxTokens int) *Request {
	toks := make([]int32, len(prompt), len(prompt)+min(max(maxTokens, 0), 1024))
	copy(toks, prompt)
	return &Request{ID: id, maxTokens: maxTokens, tokens: toks, numPrompt: len(prompt)}
}

// Tokens returns the prompt followed by the generated tokens (do not
// modify).
func (r *Request) Tokens() []int32 { return r.tokens }

// MaxTokens is the generated-token limit (0: only MaxModelLen bounds it).
func (r *Request) MaxTokens() int { return r.maxTokens }

// NumPromptTokens is the length of the original prompt.
func (r *Request) NumPromptTokens() int { return r.numPrompt }

// OutputTokens returns the generated tokens (do not modify).
func (r *Request) OutputTokens() []int32 { return r.tokens[r.numPrompt:] }

// NumOutputTokens is the number of generated tokens.
func (r *Request) NumOutputTokens() int { return len(r.tokens) - r.numPrompt }

// NumComputed is the number of tokens in the cache, counting those of the
// current step once it is scheduled.
func (r *Request) NumComputed() int { return r.numComputed }

// Seq is the request's cache handle while it runs (nil otherwise).
func (r *Request) Seq() *kvcache.Seq { return r.seq }

// Status is where the request is.
func (r *Request) Status() Status { return r.status }

// NumPreemptions is how many times the request was preempted.
func (r *Request) NumPreemptions() int { return r.preemptions }

// pending is the number of tokens not yet computed.
func (r *Request) pending() int { return len(r.tokens) - r.numComputed }

// Scheduled is one request's share of a step: tokens
// Req.Tokens()[Start:Start+NumTokens] are fed at positions Start...
type Scheduled struct {
	Req       *Request
	Start     int
	NumTokens int
	// Sample is set when the run reaches the end of the request's tokens:
	// the step's logits at its last row give the request's next token,
	// which the owner reports with AppendToken.
	Sample bool
	// Drafts are the speculative tokens (SetDrafts) a decode verifies:
	// they are fed after Tokens(), at the next positions, and the owner
	// reports the outcome with AppendVerified.
	Drafts []int32
}

// Tokens returns the input ids of the run.
func (s Scheduled) Tokens() []int32 { return s.Req.tokens[s.Start : s.Start+s.NumTokens] }

// Step is the outcome of one Schedule call.
type Step struct {
	// Seqs are the scheduled requests: decodes first (in arrival order),
	// then prefill chunks of running requests, then newly admitted requests.
	Seqs []Scheduled
	// NumTokens is the total tokens of the step (at most the budget).
	NumTokens int
	// NumDecodes counts the Seqs fed their single last generated token.
	NumDecodes int
	// Preempted are the requests preempted while building the step (now in
	// the waiting queue), in preemption order.
	Preempted []*Request
	// Admitted are the Seqs' requests that started running this step
	// (new, or re-admitted after a preemption).
	Admitted []*Request
}

// Scheduler holds the waiting and running queues.
type Scheduler struct {
	cfg         Config
	kv          *kvcache.Manager
	waiting     []*Request // arrival order
	running     []*Request // arrival order
	byID        map[string]*Request
	nextArrival uint64
	stepNo      uint64
	preemptions int64
	step        Step
}

// ErrDuplicateID is returned by Add for an ID that is already live.
var ErrDuplicateID = errors.New("scheduler: duplicate request id")

// New returns a scheduler allocating from kv.
func New(cfg Config, kv *kvcache.Manager) (*Scheduler, error) {
	if cfg.MaxNumSeqs < 1 || cfg.MaxNumBatchedTokens < 1 || cfg.MaxModelLen < 1 || cfg.LongPrefillTokenThreshold < 0 {
		return nil, fmt.Errorf("scheduler: max_num_seqs %d, max_num_batched_tokens %d and max_model_len %d must be positive (long_prefill_token_threshold %d: >= 0)",
			cfg.MaxNumSeqs, cfg.MaxNumBatchedTokens, cfg.MaxModelLen, cfg.LongPrefillTokenThreshold)
	}
	if kv == nil {
		return nil, errors.New("scheduler: nil cache manager")
	}
	if n := kv.Config().NumStateSlots; n < cfg.MaxNumSeqs {
		return nil, fmt.Errorf("scheduler: max_num_seqs %d exceeds the cache's %d state slots", cfg.MaxNumSeqs, n)
	}
	return &Scheduler{cfg: cfg, kv: kv, byID: map[string]*Request{}}, nil
}

// Config returns the scheduler's configuration.
func (s *Scheduler) Config() Config { return s.cfg }

// Check reports whether a request with a prompt of promptLen tokens that
// generates at most maxTokens tokens (0: until MaxModelLen) can be
// scheduled at all: a non-empty prompt of at most MaxModelLen tokens whose
// worst-case cache footprint fits in the whole cache. It reads only the
// configuration and is safe for concurrent use.
func (s *Scheduler) Check(promptLen, maxTokens int) error {
	if promptLen == 0 {
		return errors.New("The decoder prompt cannot be empty")
	}
	if promptLen > s.cfg.MaxModelLen {
		return fmt.Errorf("The decoder prompt (length %d) is longer than the maximum model length of %d. Make sure that `max_model_len` is no smaller than the number of text tokens.",
			promptLen, s.cfg.MaxModelLen)
	}
	if maxTokens < 0 {
		return fmt.Errorf("scheduler: max_tokens %d is negative", maxTokens)
	}
	kc := s.kv.Config()
	need := footprint(promptLen, maxTokens, s.cfg.MaxModelLen)
	if blocks := (need + kc.BlockSize - 1) / kc.BlockSize; blocks > kc.NumBlocks {
		return fmt.Errorf("request needs up to %d tokens of cache (%d blocks of %d) but the whole cache holds %d blocks (%d tokens); reduce max_tokens or the prompt, or give the cache more memory",
			need, blocks, kc.BlockSize, kc.NumBlocks, kc.NumBlocks*kc.BlockSize)
	}
	return nil
}

// footprint is the most positions a request ever has in the cache: every
// token but the last generated one is fed, and generation stops at
// maxModelLen total tokens.
func footprint(promptLen, maxTokens, maxModelLen int) int {
	n := maxModelLen
	if maxTokens > 0 {
		n = min(promptLen+maxTokens-1, maxModelLen)
	}
	return max(n, promptLen)
}

// Add queues r at the back of the waiting queue after Check.
func (s *Scheduler) Add(r *Request) error {
	if r.status != Waiting || r.arrival != 0 || r.numComputed != 0 || len(r.tokens) != r.numPrompt {
		return fmt.Errorf("scheduler: request %q was already added", r.ID)
	}
	if _, dup := s.byID[r.ID]; dup {
		return fmt.Errorf("%w %q", ErrDuplicateID, r.ID)
	}
	if err := s.Check(r.numPrompt, r.maxTokens); err != nil {
		return err
	}
	s.nextArrival++
	r.arrival = s.nextArrival
	s.byID[r.ID] = r
	s.waiting = append(s.waiting, r)
	return nil
}

// Get returns the live request with the given ID.
func (s *Scheduler) Get(id string) (*Request, bool) {
	r, ok := s.byID[id]
	return r, ok
}

// NumWaiting is the number of waiting requests (preempted included).
func (s *Scheduler) NumWaiting() int { return len(s.waiting) }

// NumRunning is the number of running requests.
func (s *Scheduler) NumRunning() int { return len(s.running) }

// HasWork reports whether any request is waiting or running.
func (s *Scheduler) HasWork() bool { return len(s.waiting)+len(s.running) > 0 }

// Preemptions is the number of preemptions since the start.
func (s *Scheduler) Preemptions() int64 { return s.preemptions }

// KVUsage is the fraction of cache blocks in use (vLLM
// kv_cache_usage_perc), 0..1.
func (s *Scheduler) KVUsage() float64 {
	n := s.kv.Config().NumBlocks
	if n == 0 {
		return 0
	}
	return float64(s.kv.UsedBlocks()) / float64(n)
}

// Running returns the running requests in arrival order (do not modify).
func (s *Scheduler) Running() []*Request { return s.running }

// Waiting returns the waiting requests in queue order (do not modify).
func (s *Scheduler) Waiting() []*Request { return s.waiting }

// Schedule builds the next step. Scheduled tokens count as computed as soon
// as Schedule returns (their cache slots are allocated); the owner runs the
// step and calls AppendToken for every Seq with Sample set (or Finish). The
// returned Step is reused by the next call.
func (s *Scheduler) Schedule() *Step {
	s.stepNo++
	st := &s.step
	clear(st.Seqs)
	st.Seqs, st.Preempted, st.Admitted = st.Seqs[:0], st.Preempted[:0], st.Admitted[:0]
	st.NumTokens, st.NumDecodes = 0, 0
	budget := s.cfg.MaxNumBatchedTokens

	// Decodes. A request that cannot get its block preempts the latest
	// arrived running requests, itself last.
	for i := 0; i < len(s.running) && budget > 0; i++ {
		r := s.running[i]
		if r.pending() != 1 {
			continue
		}
		d := min(len(r.drafts), budget-1)
		if !s.reserve(i, 1+d, true) {
			i-- // r preempted itself: running[i] is the next request
			continue
		}
		s.schedule(r, 1)
		st.Seqs[len(st.Seqs)-1].Drafts = r.drafts[:d:d]
		st.NumTokens += d
		r.verifying, r.drafts = d, nil
		st.NumDecodes++
		budget -= 1 + d
	}

	// Prefill chunks of running requests. These preempt only later
	// arrivals not scheduled yet, then shrink the chunk to the free blocks.
	for i := 0; i < len(s.running) && budget > 0; i++ {
		r := s.running[i]
		if r.lastStep == s.stepNo {
			continue
		}
		n := s.chunk(r, budget)
		if !s.reserve(i, n, false) {
			n = min(n, s.room(r))
			if n == 0 {
				continue
			}
			if err := s.kv.Append(r.seq, n); err != nil {
				panic("scheduler: " + err.Error()) // room said it fits
			}
		}
		s.schedule(r, n)
		budget -= n
	}

	// New requests, first come first served, while budget, sequences and
	// cache allow; none after a preemption.
	for len(st.Preempted) == 0 && len(s.waiting) > 0 && budget > 0 && len(s.running) < s.cfg.MaxNumSeqs {
		r := s.waiting[0]
		n := s.chunk(r, budget)
		if s.kv.FreeStateSlots() == 0 || (n+s.kv.Config().BlockSize-1)/s.kv.Config().BlockSize > s.kv.FreeBlocks() {
			break
		}
		seq, err := s.kv.Allocate()
		if err != nil {
			panic("scheduler: " + err.Error()) // checked above
		}
		if err := s.kv.Append(seq, n); err != nil {
			panic("scheduler: " + err.Error())
		}
		s.waiting = slices.Delete(s.waiting, 0, 1)
		r.seq, r.status = seq, Running
		s.running = insertByArrival(s.running, r)
		st.Admitted = append(st.Admitted, r)
		s.schedule(r, n)
		budget -= n
	}
	return st
}

// chunk is the number of r's pending tokens to feed within budget.
func (s *Scheduler) chunk(r *Request, budget int) int {
	n := min(r.pending(), budget)
	if t := s.cfg.LongPrefillTokenThreshold; t > 0 {
		n = min(n, t)
	}
	return n
}

// room is the number of positions r can append without new blocks beyond
// the free ones.
func (s *Scheduler) room(r *Request) int {
	bs := s.kv.Config().BlockSize
	return (len(r.seq.Blocks())+s.kv.FreeBlocks())*bs - r.seq.Len()
}

// schedule records n tokens of r in the step (cache already allocated).
func (s *Scheduler) schedule(r *Request, n int) {
	st := &s.step
	st.Seqs = append(st.Seqs, Scheduled{Req: r, Start: r.numComputed, NumTokens: n, Sample: r.numComputed+n == len(r.tokens)})
	st.NumTokens += n
	r.numComputed += n
	r.lastStep = s.stepNo
	r.verifying = 0
}

// reserve allocates n positions for s.running[i], preempting the
// latest-arrived running requests after it that this step has not
// scheduled. With self set, it finally preempts the request itself. It
// reports whether the positions were allocated; false leaves the request
// without new positions (preempted when self is set).
func (s *Scheduler) reserve(i, n int, self bool) bool {
	r := s.running[i]
	for !s.kv.CanAppend(r.seq, n) {
		v := -1
		for j := len(s.running) - 1; j > i; j-- {
			if s.running[j].lastStep != s.stepNo {
				v = j
				break
			}
		}
		if v < 0 {
			if self {
				s.preempt(i)
			}
			return false
		}
		s.preempt(v)
	}
	if err := s.kv.Append(r.seq, n); err != nil {
		panic("scheduler: " + err.Error()) // CanAppend said it fits
	}
	return true
}

// preempt frees s.running[i] and puts it back into the waiting queue.
func (s *Scheduler) preempt(i int) {
	r := s.running[i]
	s.running = slices.Delete(s.running, i, i+1)
	s.kv.Free(r.seq)
	r.seq, r.numComputed, r.status = nil, 0, Preempted
	r.drafts, r.verifying = nil, 0
	r.preemptions++
	s.preemptions++
	s.waiting = insertByArrival(s.waiting, r)
	s.step.Preempted = append(s.step.Preempted, r)
}

// insertByArrival inserts r into q (sorted by arrival) at its place.
func insertByArrival(q []*Request, r *Request) []*Request {
	i, _ := slices.BinarySearchFunc(q, r.arrival, func(x *Request, a uint64) int {
		switch {
		case x.arrival < a:
			return -1
		case x.arrival > a:
			return 1
		}
		return 0
	})
	return slices.Insert(q, i, r)
}

// AppendToken records the token sampled for r, which must be running with
// every token computed (a Seq of the last step with Sample set).
func (s *Scheduler) AppendToken(r *Request, tok int32) {
	if r.status != Running || r.pending() != 0 {
		panic(fmt.Sprintf("scheduler: AppendToken on request %q (%v, %d tokens pending)", r.ID, r.status, r.pending()))
	}
	r.tokens = append(r.tokens, tok)
}

// SetDrafts gives a running request whose tokens are all computed the
// speculative tokens its next decode verifies (MTP drafts). The owner
// must have reserved their cache positions (kvcache.Manager.Reserve) or
// the decode preempts for them like for its own token.
func (s *Scheduler) SetDrafts(r *Request, drafts []int32) {
	if r.status != Running || r.pending() != 1 {
		panic(fmt.Sprintf("scheduler: SetDrafts on request %q (%v, %d tokens pending)", r.ID, r.status, r.pending()))
	}
	r.drafts = drafts
}

// AppendVerified records the outcome of a decode that verified drafts
// (Scheduled.Drafts): toks are the accepted drafts then the token after
// them (1..len(Drafts)+1 tokens; fewer when the sequence stops inside the
// run). The accepted drafts count as computed, and the cache positions of
// the rejected ones are given back to the sequence's lookahead.
func (s *Scheduler) AppendVerified(r *Request, toks []int32) {
	if r.status != Running || r.pending() != 0 || len(toks) < 1 || len(toks) > r.verifying+1 {
		panic(fmt.Sprintf("scheduler: AppendVerified of %d tokens on request %q (%v, %d pending, %d drafts)", len(toks), r.ID, r.status, r.pending(), r.verifying))
	}
	r.tokens = append(r.tokens, toks...)
	r.numComputed += len(toks) - 1
	r.verifying = 0
	s.kv.Truncate(r.seq, r.numComputed)
}

// Finish removes r (finished, aborted or failed) from its queue and frees
// its cache. It reports false when r is not live.
func (s *Scheduler) Finish(r *Request) bool {
	if s.byID[r.ID] != r {
		return false
	}
	delete(s.byID, r.ID)
	switch r.status {
	case Running:
		s.running = slices.DeleteFunc(s.running, func(x *Request) bool { return x == r })
		s.kv.Free(r.seq)
		r.seq = nil
	default:
		s.waiting = slices.DeleteFunc(s.waiting, func(x *Request) bool { return x == r })
	}
	r.status = Finished
	return true
}
