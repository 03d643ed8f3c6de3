package server

import (
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/npuserve/npuserve/engine/core"
	"github.com/npuserve/npuserve/engine/sampling"
)

// fakeEngine plays scripted outputs: script returns the tokens a request
// generates (the engine stops earlier at max_tokens, a stop token id or an
// abort). It behaves like core.Engine at its interface: validation errors
// from Add, outputs in order ending with one Finished output, a closed
// channel after it, an abort that ends the stream with "abort".
type fakeEngine struct {
	maxLen int
	vocab  int
	eos    int32
	delay  time.Duration
	// chunk > 1 sends up to chunk tokens per output, as an accepted
	// speculative run does.
	chunk  int
	script func(r *core.Request) []int32

	mu      sync.Mutex
	live    map[string]chan struct{}
	added   []core.Request
	aborted []string
	failAdd error
}

func newFakeEngine(script func(r *core.Request) []int32) *fakeEngine {
	return &fakeEngine{maxLen: 4096, vocab: 512, eos: 480, delay: time.Millisecond, script: script, live: map[string]chan struct{}{}}
}

func (f *fakeEngine) Add(r *core.Request) (<-chan core.Output, error) {
	p := r.Params
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := p.Verify(sampling.DefaultMaxLogprobs, f.vocab); err != nil {
		return nil, err
	}
	if len(r.PromptTokens) == 0 {
		return nil, errors.New("The decoder prompt cannot be empty")
	}
	for _, id := range r.PromptTokens {
		if id < 0 || int(id) >= f.vocab {
			return nil, errors.New("Token id out of vocabulary")
		}
	}
	f.mu.Lock()
	if f.failAdd != nil {
		err := f.failAdd
		f.mu.Unlock()
		return nil, err
	}
	if _, dup := f.live[r.ID]; dup {
		f.mu.Unlock()
		return nil, errors.New("duplicate id")
	}
	abort := make(chan struct{})
	f.live[r.ID] = abort
	f.added = append(f.added, *r)
	f.mu.Unlock()

	toks := f.script(r)
	ch := make(chan core.Output, len(toks)+2)
	go func() {
		defer close(ch)
		defer func() {
			f.mu.Lock()
			delete(f.live, r.ID)
			f.mu.Unlock()
		}()
		m := &core.Metrics{Arrival: r.Arrival, Queued: time.Now(), FirstScheduled: time.Now(), PromptTokens: len(r.PromptTokens)}
		final := func(out core.Output, reason string) {
			m.Finished = time.Now()
			out.Finished, out.FinishReason, out.Metrics, out.Time = true, reason, m, time.Now()
			out.PromptTokens = len(r.PromptTokens)
			ch <- out
		}
		n := 0
		var pend core.Output // tokens held back to make a chunk
		merge := func(out core.Output) core.Output {
			if len(pend.Tokens) == 0 {
				return out
			}
			out.Tokens = append(pend.Tokens, out.Tokens...)
			if pend.Logprobs != nil {
				out.Logprobs = append(pend.Logprobs, out.Logprobs...)
			}
			pend = core.Output{}
			return out
		}
		for _, t := range toks {
			if t < 0 { // scripted engine failure
				final(core.Output{RequestID: r.ID, Err: errors.New("engine: step failed: boom")}, "error")
				return
			}
			select {
			case <-abort:
				final(core.Output{RequestID: r.ID}, "abort")
				return
			case <-time.After(f.delay):
			}
			n++
			now := time.Now()
			if m.FirstToken.IsZero() {
				m.FirstToken = now
			}
			m.LastToken, m.GenerationTokens = now, n
			out := core.Output{RequestID: r.ID, Tokens: []int32{t}, PromptTokens: len(r.PromptTokens), Time: now}
			if p.Logprobs != nil {
				lp := sampling.Token{ID: t, Logprob: -0.25, Rank: 1}
				for k := 0; k < *p.Logprobs; k++ {
					lp.TopLogprobs = append(lp.TopLogprobs, sampling.TokenLogprob{ID: int32((int(t) + k) % 400), Logprob: -0.25 - float32(k)})
				}
				out.Logprobs = []sampling.Token{lp}
			}
			out = merge(out)
			stopID := slices.Contains(p.StopTokenIDs, t)
			switch {
			case t == f.eos && !p.IgnoreEOS && n > p.MinTokens:
				id := t
				out.StopToken, out.EOS = &id, true
				final(out, "stop")
				return
			case stopID && n > p.MinTokens:
				id := t
				out.StopToken = &id
				final(out, "stop")
				return
			case p.MaxTokens != nil && n >= *p.MaxTokens:
				final(out, "length")
				return
			}
			if len(out.Tokens) < f.chunk {
				pend = out
				continue
			}
			ch <- out
		}
		final(merge(core.Output{RequestID: r.ID}), "length")
	}()
	return ch, nil
}

func (f *fakeEngine) Abort(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch, ok := f.live[id]
	if ok {
		close(ch)
		delete(f.live, id)
		f.aborted = append(f.aborted, id)
	}
	return ok
}

func (f *fakeEngine) Stats() core.Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := core.Stats{MaxModelLen: f.maxLen, Running: len(f.live), NumBlocks: 64, BlockSize: 64, NumStateSlots: 8,
		FinishedByReason: map[string]int64{}}
	if len(f.live) > 0 {
		st.KVUsage = 0.5
	}
	return st
}

// liveCount is the number of requests still in the fake engine.
func (f *fakeEngine) liveCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.live)
}

// requests returns the requests added so far.
func (f *fakeEngine) requests() []core.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.added)
}
