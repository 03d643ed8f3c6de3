package core

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/internal/runner"
	"github.com/npuserve/npuserve/engine/model"
	"github.com/npuserve/npuserve/engine/model/glm5next"
	"github.com/npuserve/npuserve/engine/sampling"
	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/nputest"
)

const tinyDir = "../../testdata/glm5next/tiny"

var (
	tinyOnce  sync.Once
	tinyModel *glm5next.Model
	tinyErr   error
)

// tiny returns the golden tiny model (vocab 512, index_kpool 4), loaded
// once. Tests using it run sequentially: Forward is not concurrency-safe.
func tiny(t testing.TB) *glm5next.Model {
	t.Helper()
	tinyOnce.Do(func() { tinyModel, tinyErr = glm5next.Load(nputest.Open(0), tinyDir, glm5next.LoadOptions{}) })
	if tinyErr != nil {
		t.Fatal(tinyErr)
	}
	return tinyModel
}

// prompts returns n random prompts of lengths 3, 10, 17, ...
func prompts(n int, seed uint64) [][]int32 {
	r := rand.New(rand.NewPCG(seed, 7))
	out := make([][]int32, n)
	for i := range out {
		out[i] = make([]int32, 3+7*i)
		for j := range out[i] {
			out[i][j] = int32(r.IntN(480)) // below the special ids
		}
	}
	return out
}

func greedy(maxTokens int) sampling.Params {
	p := sampling.DefaultParams()
	p.Temperature = sampling.Ptr(0.0)
	p.MaxTokens = sampling.Ptr(maxTokens)
	p.IgnoreEOS = true
	return p
}

func seeded(maxTokens int, seed uint64) sampling.Params {
	p := sampling.DefaultParams()
	p.Temperature = sampling.Ptr(0.9)
	p.TopP = sampling.Ptr(0.95)
	p.TopK = sampling.Ptr(50)
	p.Seed = sampling.Ptr(seed)
	p.MaxTokens = sampling.Ptr(maxTokens)
	p.IgnoreEOS = true
	return p
}

// reference generates greedily with the offline runner.
func reference(t *testing.T, m *glm5next.Model, ps [][]int32, maxTokens func(i int) int) [][]int32 {
	t.Helper()
	var reqs []runner.Request
	for i, p := range ps {
		reqs = append(reqs, runner.Request{Prompt: p, MaxNewTokens: maxTokens(i)})
	}
	out, err := runner.Generate(m, reqs, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// newEngine starts an engine on m: a Model, or a *glm5next.Model (its
// Engine form).
func newEngine(t *testing.T, m any, opt Options) *Engine {
	t.Helper()
	mm, ok := m.(Model)
	if g, isG := m.(*glm5next.Model); isG {
		mm, ok = g.Engine(), true
	}
	if !ok {
		t.Fatalf("newEngine: %T is not a model", m)
	}
	e, err := New(mm, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// collect drains a request's channel: its tokens and final output.
func collect(t *testing.T, ch <-chan Output) ([]int32, Output) {
	t.Helper()
	var toks []int32
	var last Output
	n := 0
	timeout := time.After(60 * time.Second)
	for {
		select {
		case out, ok := <-ch:
			if !ok {
				if !last.Finished {
					t.Fatal("channel closed without a final output")
				}
				return toks, last
			}
			if last.Finished {
				t.Fatal("output after the final one")
			}
			if len(out.Logprobs) != 0 && len(out.Logprobs) != len(out.Tokens) {
				t.Fatalf("%d logprobs for %d tokens", len(out.Logprobs), len(out.Tokens))
			}
			toks = append(toks, out.Tokens...)
			last = out
			n++
		case <-timeout:
			t.Fatalf("request stuck after %d outputs", n)
		}
	}
}

// runAll submits every request at once and collects the outputs.
func runAll(t *testing.T, e *Engine, ps [][]int32, params func(i int) sampling.Params) ([][]int32, []Output) {
	t.Helper()
	chans := make([]<-chan Output, len(ps))
	for i, p := range ps {
		ch, err := e.Add(&Request{ID: fmt.Sprint("r", i), PromptTokens: p, Params: params(i)})
		if err != nil {
			t.Fatal(err)
		}
		chans[i] = ch
	}
	toks := make([][]int32, len(ps))
	finals := make([]Output, len(ps))
	for i, ch := range chans {
		toks[i], finals[i] = collect(t, ch)
	}
	return toks, finals
}

// waitIdle waits until the engine holds no request and no cache.
func waitIdle(t *testing.T, e *Engine) Stats {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := e.Stats()
		if s.Running == 0 && s.Waiting == 0 && s.UsedBlocks == 0 && s.UsedStateSlots == 0 && s.KVUsage == 0 {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine not idle: %+v", s)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGreedyMatchesRunner: greedy outputs through the engine equal the
// offline runner's, alone and in busy batches, whatever the token budget
// (chunked prefill), block size, concurrency or prefill threshold.
func TestGreedyMatchesRunner(t *testing.T) {
	m := tiny(t)
	ps := prompts(6, 1) // lengths 3..38
	maxTk := func(i int) int { return 6 + 2*i }
	ref := reference(t, m, ps, maxTk)
	variants := []struct {
		name string
		opt  Options
	}{
		{"defaults", Options{NumBlocks: 64}},
		{"budget 16 forces chunking", Options{MaxNumSeqs: 4, MaxNumBatchedTokens: 16, BlockSize: 8, NumBlocks: 64}},
		{"budget 6 and block 4", Options{MaxNumSeqs: 6, MaxNumBatchedTokens: 6, BlockSize: 4, NumBlocks: 128}},
		{"one sequence at a time", Options{MaxNumSeqs: 1, MaxNumBatchedTokens: 32, BlockSize: 4, NumBlocks: 32}},
		{"long prefill threshold", Options{MaxNumSeqs: 8, MaxNumBatchedTokens: 64, LongPrefillTokenThreshold: 5, BlockSize: 4, NumBlocks: 128}},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			e := newEngine(t, m, v.opt)
			got, finals := runAll(t, e, ps, func(i int) sampling.Params { return greedy(maxTk(i)) })
			for i := range ps {
				if !slices.Equal(got[i], ref[i]) {
					t.Fatalf("request %d: %v, runner %v", i, got[i], ref[i])
				}
				if f := finals[i]; f.FinishReason != "length" || f.Metrics == nil || f.Metrics.GenerationTokens != maxTk(i) || f.PromptTokens != len(ps[i]) {
					t.Fatalf("request %d final %+v", i, f)
				}
			}
			waitIdle(t, e)
		})
	}
	t.Run("alone", func(t *testing.T) {
		e := newEngine(t, m, Options{MaxNumSeqs: 4, MaxNumBatchedTokens: 16, BlockSize: 4, NumBlocks: 64})
		for i, p := range ps {
			got, _ := runAll(t, e, [][]int32{p}, func(int) sampling.Params { return greedy(maxTk(i)) })
			if !slices.Equal(got[0], ref[i]) {
				t.Fatalf("request %d alone: %v, runner %v", i, got[0], ref[i])
			}
		}
	})
}

// TestPreemptionUnderTinyCache: a cache far too small for the batch
// forces preemptions by recompute; greedy outputs stay the runner's and
// seeded samples stay those of the request alone.
func TestPreemptionUnderTinyCache(t *testing.T) {
	m := tiny(t)
	ps := prompts(5, 2) // lengths 3..31
	maxTk := func(i int) int { return 12 }
	ref := reference(t, m, ps, maxTk)
	opt := Options{MaxNumSeqs: 5, MaxNumBatchedTokens: 24, BlockSize: 4, NumBlocks: 11, MaxModelLen: 44}

	e := newEngine(t, m, opt)
	got, finals := runAll(t, e, ps, func(i int) sampling.Params { return greedy(maxTk(i)) })
	preempted := 0
	for i := range ps {
		if !slices.Equal(got[i], ref[i]) {
			t.Fatalf("request %d: %v, runner %v", i, got[i], ref[i])
		}
		preempted += finals[i].Metrics.Preemptions
	}
	s := waitIdle(t, e)
	if s.Preemptions == 0 || int64(preempted) != s.Preemptions {
		t.Fatalf("%d preemptions counted by the engine, %d by the requests; want > 0 and equal", s.Preemptions, preempted)
	}
	if s.GenerationTokens != 5*12 || s.FinishedByReason["length"] != 5 {
		t.Fatalf("stats %+v", s)
	}

	// Seeded sampling: batched under preemption equals alone.
	sp := func(i int) sampling.Params { return seeded(12, uint64(100+i)) }
	batched, _ := runAll(t, e, ps, sp)
	if e.Stats().Preemptions == s.Preemptions {
		t.Fatal("the seeded run did not preempt")
	}
	alone := newEngine(t, m, Options{MaxNumSeqs: 1, MaxNumBatchedTokens: 64, BlockSize: 4, NumBlocks: 11, MaxModelLen: 44})
	for i, p := range ps {
		one, _ := runAll(t, alone, [][]int32{p}, func(int) sampling.Params { return sp(i) })
		if !slices.Equal(one[0], batched[i]) {
			t.Fatalf("seeded request %d: alone %v, batched %v", i, one[0], batched[i])
		}
	}
}

// TestSeededSamplingBatchInvariant: a seeded request samples the same
// tokens alone and in a chunked busy batch; different seeds differ.
func TestSeededSamplingBatchInvariant(t *testing.T) {
	m := tiny(t)
	ps := prompts(6, 3)
	sp := func(i int) sampling.Params { return seeded(10, uint64(7+i)) }
	e := newEngine(t, m, Options{MaxNumSeqs: 6, MaxNumBatchedTokens: 16, BlockSize: 4, NumBlocks: 128})
	batched, _ := runAll(t, e, ps, sp)
	for i, p := range ps {
		one, _ := runAll(t, e, [][]int32{p}, func(int) sampling.Params { return sp(i) })
		if !slices.Equal(one[0], batched[i]) {
			t.Fatalf("request %d: alone %v, batched %v", i, one[0], batched[i])
		}
	}
	other, _ := runAll(t, e, ps[:1], func(int) sampling.Params { return seeded(10, 12345) })
	if slices.Equal(other[0], batched[0]) {
		t.Fatalf("seeds 7 and 12345 sampled the same %v", other[0])
	}
}

// TestStopConditions checks EOS, stop_token_ids, ignore_eos, min_tokens,
// max_tokens and max_model_len endings.
func TestStopConditions(t *testing.T) {
	m := tiny(t)
	p := prompts(3, 4)[2] // 17 tokens
	ref := reference(t, m, [][]int32{p}, func(int) int { return 16 })[0]
	// A token of the greedy continuation that first appears at index k > 0.
	k := 3
	for slices.Index(ref, ref[k]) != k {
		k++
	}
	stopAt := ref[k]
	cases := []struct {
		name       string
		opt        Options
		params     func() sampling.Params
		want       []int32
		reason     string
		stopToken  int32 // -1: none
		eos        bool
		checkOnlyN bool // only the length is known (min_tokens changes the text)
	}{
		{"max_tokens", Options{}, func() sampling.Params { return greedy(5) }, ref[:5], "length", -1, false, false},
		{"eos stops", Options{EOSTokenIDs: []int32{stopAt}}, func() sampling.Params {
			q := greedy(16)
			q.IgnoreEOS = false
			return q
		}, ref[:k+1], "stop", stopAt, true, false},
		{"ignore_eos", Options{EOSTokenIDs: []int32{stopAt}}, func() sampling.Params { return greedy(16) }, ref, "length", -1, false, false},
		{"generation_config eos stops as a stop id", Options{EOSTokenIDs: []int32{500, stopAt}}, func() sampling.Params {
			q := greedy(16)
			q.IgnoreEOS = false
			return q
		}, ref[:k+1], "stop", stopAt, false, false},
		{"stop_token_ids", Options{}, func() sampling.Params {
			q := greedy(16)
			q.StopTokenIDs = []int32{stopAt}
			return q
		}, ref[:k+1], "stop", stopAt, false, false},
		{"stop_token_ids despite ignore_eos", Options{EOSTokenIDs: []int32{501}}, func() sampling.Params {
			q := greedy(16)
			q.StopTokenIDs = []int32{stopAt}
			return q
		}, ref[:k+1], "stop", stopAt, false, false},
		{"max_model_len", Options{MaxModelLen: 17 + 4}, func() sampling.Params {
			q := greedy(16)
			q.MaxTokens = nil
			return q
		}, ref[:4], "length", -1, false, false},
		{"min_tokens masks the stop id", Options{}, func() sampling.Params {
			q := greedy(k + 3)
			q.StopTokenIDs = []int32{stopAt}
			q.MinTokens = k + 3
			return q
		}, nil, "length", -1, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.opt.NumBlocks, c.opt.BlockSize = 32, 4
			e := newEngine(t, m, c.opt)
			got, fin := runAll(t, e, [][]int32{p}, func(int) sampling.Params { return c.params() })
			if c.checkOnlyN {
				if len(got[0]) != k+3 || slices.Contains(got[0], stopAt) {
					t.Fatalf("got %v: want %d tokens without %d", got[0], k+3, stopAt)
				}
				if !slices.Equal(got[0][:k], ref[:k]) {
					t.Fatalf("got %v, prefix of %v", got[0], ref)
				}
			} else if !slices.Equal(got[0], c.want) {
				t.Fatalf("got %v, want %v", got[0], c.want)
			}
			f := fin[0]
			if f.FinishReason != c.reason || f.EOS != c.eos {
				t.Fatalf("finish %q eos %v, want %q %v", f.FinishReason, f.EOS, c.reason, c.eos)
			}
			if (c.stopToken < 0) != (f.StopToken == nil) || (f.StopToken != nil && *f.StopToken != c.stopToken) {
				t.Fatalf("stop token %v, want %d", f.StopToken, c.stopToken)
			}
		})
	}
}

// TestAbort: aborting a running and a waiting request ends their streams
// with "abort" and gives every block and state slot back.
func TestAbort(t *testing.T) {
	m := tiny(t)
	ps := prompts(3, 5)
	e := newEngine(t, m, Options{MaxNumSeqs: 1, MaxNumBatchedTokens: 8, BlockSize: 4, NumBlocks: 128})
	run, err := e.Add(&Request{ID: "running", PromptTokens: ps[2], Params: greedy(400)})
	if err != nil {
		t.Fatal(err)
	}
	wait, err := e.Add(&Request{ID: "waiting", PromptTokens: ps[1], Params: greedy(5)})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 { // mid-generation
		if out := <-run; out.Finished {
			t.Fatal("finished early")
		}
	}
	if s := e.Stats(); s.UsedBlocks == 0 || s.UsedStateSlots != 1 || s.Waiting != 1 {
		t.Fatalf("before the abort: %+v", s)
	}
	if e.Abort("nope") {
		t.Fatal("Abort of an unknown id reported true")
	}
	if !e.Abort("waiting") || !e.Abort("running") {
		t.Fatal("Abort of a live request reported false")
	}
	for _, ch := range []<-chan Output{wait, run} {
		_, f := collect(t, ch)
		if f.FinishReason != "abort" || f.Err != nil || f.Metrics == nil {
			t.Fatalf("final %+v", f)
		}
	}
	s := waitIdle(t, e)
	if s.FinishedByReason["abort"] != 2 {
		t.Fatalf("stats %+v", s)
	}
	if e.Abort("running") {
		t.Fatal("Abort of a finished request reported true")
	}
	// The ids are free again and the engine still serves.
	ref := reference(t, m, ps[:1], func(int) int { return 4 })
	got, _ := runAll(t, e, ps[:1], func(int) sampling.Params { return greedy(4) })
	if !slices.Equal(got[0], ref[0]) {
		t.Fatalf("after aborts: %v, want %v", got[0], ref[0])
	}
}

// TestCloseEndsEveryChannel: Close with requests running and waiting ends
// every stream; the engine's goroutines are gone afterwards.
func TestCloseEndsEveryChannel(t *testing.T) {
	m := tiny(t)
	before := runtime.NumGoroutine()
	e, err := New(m.Engine(), Options{MaxNumSeqs: 2, MaxNumBatchedTokens: 8, BlockSize: 4, NumBlocks: 256})
	if err != nil {
		t.Fatal(err)
	}
	var chans []<-chan Output
	for i, p := range prompts(6, 6) {
		ch, err := e.Add(&Request{ID: fmt.Sprint(i), PromptTokens: p, Params: greedy(500)})
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	<-chans[0] // something is running
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	for _, ch := range chans {
		_, f := collect(t, ch)
		if f.FinishReason != "abort" || !errors.Is(f.Err, ErrClosed) {
			t.Fatalf("final %+v", f)
		}
	}
	if _, err := e.Add(&Request{ID: "late", PromptTokens: []int32{1}, Params: greedy(1)}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Add after Close: %v", err)
	}
	if e.Abort("0") {
		t.Fatal("Abort after Close reported true")
	}
	e.Close() // idempotent
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after Close, %d before", runtime.NumGoroutine(), before)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestConcurrentAdds: many goroutines add, stream and (some) abort
// requests at once; every greedy output equals the runner's.
func TestConcurrentAdds(t *testing.T) {
	m := tiny(t)
	ps := prompts(4, 8)
	ref := reference(t, m, ps, func(int) int { return 5 })
	e := newEngine(t, m, Options{MaxNumSeqs: 8, MaxNumBatchedTokens: 24, BlockSize: 4, NumBlocks: 40})
	const n = 32
	var wg sync.WaitGroup
	var aborted atomic.Int32
	errs := make(chan error, n)
	for g := range n {
		wg.Go(func() {
			i := g % len(ps)
			ch, err := e.Add(&Request{ID: fmt.Sprint("g", g), PromptTokens: ps[i], Params: greedy(5)})
			if err != nil {
				errs <- err
				return
			}
			if g%8 == 7 {
				e.Abort(fmt.Sprint("g", g))
			}
			var got []int32
			var last Output
			for out := range ch {
				got = append(got, out.Tokens...)
				last = out
			}
			switch {
			case last.FinishReason == "abort":
				aborted.Add(1)
				if !slices.Equal(got, ref[i][:len(got)]) {
					errs <- fmt.Errorf("aborted request %d: %v is no prefix of %v", g, got, ref[i])
				}
			case !slices.Equal(got, ref[i]) || last.FinishReason != "length":
				errs <- fmt.Errorf("request %d: %v (%s), want %v", g, got, last.FinishReason, ref[i])
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	s := waitIdle(t, e)
	if total := s.FinishedByReason["length"] + s.FinishedByReason["abort"]; total != n || int(s.FinishedByReason["abort"]) != int(aborted.Load()) {
		t.Fatalf("stats %+v, %d aborted", s, aborted.Load())
	}
}

// TestAddValidation: invalid requests are rejected synchronously and
// nothing is queued.
func TestAddValidation(t *testing.T) {
	m := tiny(t)
	e := newEngine(t, m, Options{MaxNumSeqs: 2, MaxNumBatchedTokens: 16, BlockSize: 4, NumBlocks: 16, MaxModelLen: 40})
	long := make([]int32, 41)
	hold, err := e.Add(&Request{ID: "held", PromptTokens: []int32{1, 2, 3}, Params: greedy(30)})
	if err != nil {
		t.Fatal(err)
	}
	mod := func(f func(*sampling.Params)) sampling.Params {
		p := greedy(4)
		f(&p)
		return p
	}
	cases := []struct {
		name   string
		req    Request
		errHas string
	}{
		{"empty id", Request{PromptTokens: []int32{1}, Params: greedy(1)}, "empty request id"},
		{"duplicate id", Request{ID: "held", PromptTokens: []int32{1}, Params: greedy(1)}, "already in use"},
		{"empty prompt", Request{ID: "a", Params: greedy(1)}, "The decoder prompt cannot be empty"},
		{"prompt over max_model_len", Request{ID: "a", PromptTokens: long, Params: greedy(1)}, "The decoder prompt (length 41) is longer than the maximum model length of 40"},
		{"token out of vocab", Request{ID: "a", PromptTokens: []int32{1, 512}, Params: greedy(1)}, "Token id 512 is out of vocabulary"},
		{"negative token", Request{ID: "a", PromptTokens: []int32{-1}, Params: greedy(1)}, "Token id -1 is out of vocabulary"},
		{"n > 1", Request{ID: "a", PromptTokens: []int32{1}, Params: mod(func(p *sampling.Params) { p.N = 2 })}, "fan n > 1 out"},
		{"bad temperature", Request{ID: "a", PromptTokens: []int32{1}, Params: mod(func(p *sampling.Params) { p.Temperature = sampling.Ptr(-1.0) })}, "temperature must be non-negative, got -1.0."},
		{"too many logprobs", Request{ID: "a", PromptTokens: []int32{1}, Params: mod(func(p *sampling.Params) { p.Logprobs = sampling.Ptr(21) })}, "Requested sample logprobs of 21, which is greater than max allowed: 20"},
		{"stop id out of vocab", Request{ID: "a", PromptTokens: []int32{1}, Params: mod(func(p *sampling.Params) { p.StopTokenIDs = []int32{999} })}, "in stop_token_ids contain out-of-vocab token ids"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ch, err := e.Add(&c.req)
			if err == nil || !strings.Contains(err.Error(), c.errHas) || ch != nil {
				t.Fatalf("error %v, want one containing %q", err, c.errHas)
			}
		})
	}
	var ve *sampling.ValidationError
	if _, err := e.Add(&cases[7].req); !errors.As(err, &ve) || ve.Param != "temperature" {
		t.Fatalf("temperature error %v is not a *sampling.ValidationError", err)
	}
	e.Abort("held")
	collect(t, hold)
	if s := waitIdle(t, e); len(s.FinishedByReason) != 1 || s.FinishedByReason["abort"] != 1 {
		t.Fatalf("rejected requests were queued: %+v", s)
	}

	for _, o := range []Options{
		{NumBlocks: 4, BlockSize: 4, MaxModelLen: 17},         // max_model_len over the cache
		{NumBlocks: 4, BlockSize: 6},                          // not a multiple of index_kpool
		{MaxNumSeqs: 8, MaxNumBatchedTokens: 4, NumBlocks: 4}, // budget below max_num_seqs
		{},                             // no cache size
		{CacheBytes: 1, MaxNumSeqs: 1}, // no room for a block
		{NumBlocks: 4, EOSTokenIDs: []int32{512}}, // EOS outside the vocab
	} {
		if e, err := New(m.Engine(), o); err == nil {
			e.Close()
			t.Errorf("New(%+v) succeeded", o)
		}
	}
}

// TestCacheBytesSizing: a memory budget becomes blocks after the state
// slots, and the default max_model_len is what fits.
func TestCacheBytesSizing(t *testing.T) {
	m := tiny(t)
	budget := 3*m.BytesPerSequenceState() + 10*m.BytesPerToken()*8 + m.BytesPerToken()
	e := newEngine(t, m, Options{MaxNumSeqs: 3, BlockSize: 8, CacheBytes: budget})
	if o := e.Options(); o.NumBlocks != 10 || o.MaxModelLen != 80 || o.MaxNumBatchedTokens != DefaultMaxNumBatchedTokens {
		t.Fatalf("resolved %+v", o)
	}
	if s := e.Stats(); s.NumBlocks != 10 || s.BlockSize != 8 || s.NumStateSlots != 3 || s.MaxModelLen != 80 {
		t.Fatalf("stats %+v", s)
	}
}

// faultyModel wraps a model to fail chosen Forward calls.
type faultyModel struct {
	model.Model
	calls   atomic.Int32
	panicAt int32 // call number that panics (1-based); 0: none
	nanAt   int32 // call number whose first logits row becomes NaN
	errAt   int32 // call number that returns an error (a device failure)
}

func (f *faultyModel) Forward(c model.Cache, b *model.Batch) (*npu.Tensor, error) {
	n := f.calls.Add(1)
	if n == f.panicAt {
		panic("injected device fault")
	}
	if n == f.errAt {
		return nil, errors.New("injected device error")
	}
	logits, err := f.Model.Forward(c, b)
	if err == nil && n == f.nanAt && logits.Dim(0) > 0 {
		row := make([]byte, 4*logits.Dim(1))
		for i := 0; i < len(row); i += 4 {
			putF32(row[i:], float32(math.NaN()))
		}
		err = f.Backend().Upload(logits.Rows(0, 1), row)
	}
	return logits, err
}

func putF32(b []byte, v float32) {
	u := math.Float32bits(v)
	b[0], b[1], b[2], b[3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
}

// TestStepFailures: a panicking step fails its requests with "error" and
// the engine keeps serving; bad logits fail only their request.
func TestStepFailures(t *testing.T) {
	m := tiny(t)
	ps := prompts(2, 9)
	ref := reference(t, m, ps, func(int) int { return 4 })
	var logged atomic.Int32
	fm := &faultyModel{Model: m.Engine(), panicAt: 2}
	e := newEngine(t, fm, Options{MaxNumSeqs: 4, MaxNumBatchedTokens: 64, BlockSize: 4, NumBlocks: 32,
		Logf: func(string, ...any) { logged.Add(1) }})
	_, fin := runAll(t, e, ps, func(int) sampling.Params { return greedy(4) })
	for i, f := range fin {
		if f.FinishReason != "error" || f.Err == nil || !strings.Contains(f.Err.Error(), "injected device fault") {
			t.Fatalf("request %d final %+v", i, f)
		}
	}
	if logged.Load() != 1 {
		t.Fatalf("%d failures logged", logged.Load())
	}
	waitIdle(t, e)
	got, _ := runAll(t, e, ps, func(int) sampling.Params { return greedy(4) })
	for i := range ps {
		if !slices.Equal(got[i], ref[i]) {
			t.Fatalf("after the fault, request %d: %v, want %v", i, got[i], ref[i])
		}
	}

	// NaN logits in the first sampled row: that request fails, the other
	// one completes.
	fm.nanAt = fm.calls.Load() + 1
	got, fin = runAll(t, e, ps, func(int) sampling.Params { return greedy(4) })
	if fin[0].FinishReason != "error" || !errors.Is(fin[0].Err, sampling.ErrBadLogits) {
		t.Fatalf("NaN row final %+v", fin[0])
	}
	if !slices.Equal(got[1], ref[1]) || fin[1].FinishReason != "length" {
		t.Fatalf("neighbour of the NaN row: %v (%s), want %v", got[1], fin[1].FinishReason, ref[1])
	}
	if s := waitIdle(t, e); s.FinishedByReason["error"] != 3 {
		t.Fatalf("stats %+v", s)
	}

	// A Forward that returns an error (an out-of-memory or a failed
	// device op): the step's requests fail, the engine serves on.
	fm.errAt = fm.calls.Load() + 1
	_, fin = runAll(t, e, ps, func(int) sampling.Params { return greedy(4) })
	for i, f := range fin {
		if f.FinishReason != "error" || f.Err == nil || !strings.Contains(f.Err.Error(), "injected device error") {
			t.Fatalf("request %d final %+v", i, f)
		}
	}
	got, _ = runAll(t, e, ps, func(int) sampling.Params { return greedy(4) })
	for i := range ps {
		if !slices.Equal(got[i], ref[i]) {
			t.Fatalf("after the device error, request %d: %v, want %v", i, got[i], ref[i])
		}
	}
	if s := waitIdle(t, e); s.FinishedByReason["error"] != 5 || s.UsedBlocks != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestFatalFailureShutsDown: a failure outside any request (here the step
// hook panics) stops the engine cleanly: every stream ends with "error",
// Done closes, Err and Add report the failure.
func TestFatalFailureShutsDown(t *testing.T) {
	m := tiny(t)
	var steps atomic.Int32
	e := newEngine(t, m, Options{MaxNumSeqs: 2, MaxNumBatchedTokens: 8, BlockSize: 4, NumBlocks: 64,
		OnStep: func(StepStats) {
			if steps.Add(1) == 3 {
				panic("hook bug")
			}
		}})
	var chans []<-chan Output
	for i, p := range prompts(4, 11) {
		ch, err := e.Add(&Request{ID: fmt.Sprint(i), PromptTokens: p, Params: greedy(50)})
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	for i, ch := range chans {
		if _, f := collect(t, ch); f.FinishReason != "error" || f.Err == nil || !strings.Contains(f.Err.Error(), "hook bug") {
			t.Fatalf("request %d final %+v", i, f)
		}
	}
	select {
	case <-e.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the loop did not exit")
	}
	if e.Err() == nil {
		t.Fatal("Err is nil after a fatal failure")
	}
	if _, err := e.Add(&Request{ID: "late", PromptTokens: []int32{1}, Params: greedy(1)}); err == nil || !strings.Contains(err.Error(), "hook bug") {
		t.Fatalf("Add after the failure: %v", err)
	}
}

// TestMetricsStatsAndLogprobs: timings are ordered, counters add up, the
// step hook sees every step, logprobs come with the tokens, and an idle
// engine runs no steps.
func TestMetricsStatsAndLogprobs(t *testing.T) {
	m := tiny(t)
	ps := prompts(3, 10)
	var steps, tokens atomic.Int64
	e := newEngine(t, m, Options{MaxNumSeqs: 4, MaxNumBatchedTokens: 8, BlockSize: 4, NumBlocks: 64,
		OnStep: func(s StepStats) {
			steps.Add(1)
			tokens.Add(int64(s.NumTokens))
			if s.Forward <= 0 || s.Total < s.Forward+s.Sample {
				panic(fmt.Sprintf("step timing %+v", s))
			}
		}})
	start := time.Now()
	ch, err := e.Add(&Request{ID: "lp", PromptTokens: ps[2], Arrival: start,
		Params: func() sampling.Params { p := greedy(6); p.Logprobs = sampling.Ptr(3); return p }()})
	if err != nil {
		t.Fatal(err)
	}
	var prev time.Time
	var last Output
	n := 0
	for out := range ch {
		if len(out.Tokens) > 0 {
			n++
			lp := out.Logprobs[0]
			if lp.ID != out.Tokens[0] || len(lp.TopLogprobs) != 3 || lp.Rank != 1 || lp.TopLogprobs[0].ID != lp.ID {
				t.Fatalf("greedy token %d with logprobs %+v", out.Tokens[0], lp)
			}
		}
		if out.Time.Before(prev) {
			t.Fatal("output times go backwards")
		}
		prev = out.Time
		last = out
	}
	mt := last.Metrics
	ordered := []time.Time{mt.Arrival, mt.Queued, mt.FirstScheduled, mt.FirstToken, mt.LastToken, mt.Finished}
	for i := 1; i < len(ordered); i++ {
		if ordered[i].Before(ordered[i-1]) || ordered[i].IsZero() {
			t.Fatalf("timings out of order: %+v", mt)
		}
	}
	if !mt.Arrival.Equal(start) || mt.PromptTokens != 17 || mt.GenerationTokens != 6 || n != 6 ||
		mt.TTFT() <= 0 || mt.E2E() < mt.TTFT() || mt.PrefillTime() <= 0 || mt.MeanTPOT() <= 0 || mt.InferenceTime() != mt.PrefillTime()+mt.DecodeTime() {
		t.Fatalf("metrics %+v (%d tokens)", mt, n)
	}
	runAll(t, e, ps[:2], func(int) sampling.Params { return greedy(3) })
	s := waitIdle(t, e)
	wantPrompt := int64(17 + len(ps[0]) + len(ps[1]))
	if s.PromptTokens != wantPrompt || s.GenerationTokens != 12 || s.FinishedByReason["length"] != 3 || s.Steps != steps.Load() {
		t.Fatalf("stats %+v, hook saw %d steps", s, steps.Load())
	}
	// 17 + 3 + 10 prompt tokens and 6 + 2 + 2 decode inputs.
	if tokens.Load() != wantPrompt+5+2+2 {
		t.Fatalf("steps carried %d tokens", tokens.Load())
	}
	time.Sleep(30 * time.Millisecond)
	if e.Stats().Steps != s.Steps {
		t.Fatal("the idle engine kept stepping")
	}
}

// benchConfig is a small random glm5_next: 3 KDA + 1 DSA layers, 16
// experts, vocab 8192.
const benchConfig = `{
  "model_type": "glm5_next_text", "vocab_size": 8192, "hidden_size": 256, "intermediate_size": 512,
  "moe_intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4,
  "mlp_layer_types": ["dense", "sparse", "sparse", "sparse"],
  "layer_types": ["linear_attention", "linear_attention", "linear_attention", "deepseek_sparse_attention"],
  "indexer_types": ["full", "full", "full", "full"], "n_routed_experts": 16, "num_experts_per_tok": 4,
  "q_lora_rank": 64, "kv_lora_rank": 64, "qk_nope_head_dim": 32, "v_head_dim": 32,
  "index_n_heads": 4, "index_head_dim": 32, "index_topk": 64, "index_kpool": 4,
  "linear_attn_config": {"num_heads": 4, "head_dim": 32, "short_conv_kernel_size": 4}
}`

// BenchmarkEngineDecode measures decode steps of a full batch (seeded
// top-k/top-p sampling) and splits each step into the model's time
// (forward: Forward + DownloadRows) and the rest (overhead): the
// samplers' time (sample) and the engine's own (engine: scheduling,
// batch building, stop checks, bookkeeping, output delivery; schedule is
// the scheduler's part of it). overhead-% and engine-% are shares of the
// whole step.
func BenchmarkEngineDecode(b *testing.B) {
	// NPUSERVE_BENCH_CONFIG=configs/small/config.json measures the "small"
	// config with bf16 weights (docs/performance.md).
	src, dtype := []byte(benchConfig), "float32"
	if path := os.Getenv("NPUSERVE_BENCH_CONFIG"); path != "" {
		var err error
		if src, err = os.ReadFile(path); err != nil {
			b.Fatal(err)
		}
		dtype = "bfloat16"
	}
	cfg, err := config.ParseModel(src)
	if err != nil {
		b.Fatal(err)
	}
	m := glm5next.NewRandom(nputest.Open(0), cfg, dtype, 1)
	defer m.Close()
	for _, batch := range []int{1, 8, 64} {
		b.Run(fmt.Sprint("batch=", batch), func(b *testing.B) {
			const prompt = 16
			steps := b.N
			var mu sync.Mutex
			var fwd, sched, sample, total time.Duration
			var n int
			e, err := New(m.Engine(), Options{
				MaxNumSeqs: batch, MaxNumBatchedTokens: max(batch, prompt*batch), BlockSize: 16,
				NumBlocks: batch * ((prompt + steps + 16) / 16), MaxModelLen: prompt + steps + 1,
				OnStep: func(s StepStats) {
					if s.NumDecodes != batch || s.NumSeqs != batch {
						return // the prefill step
					}
					mu.Lock()
					fwd, sched, sample, total, n = fwd+s.Forward, sched+s.Schedule, sample+s.Sample, total+s.Total, n+1
					mu.Unlock()
				},
			})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			ps := make([]sampling.Params, batch)
			var chans []<-chan Output
			r := rand.New(rand.NewPCG(1, 1))
			b.ResetTimer()
			for i := range batch {
				ps[i] = seeded(steps+1, uint64(i))
				toks := make([]int32, prompt)
				for j := range toks {
					toks[j] = int32(r.IntN(cfg.VocabSize))
				}
				ch, err := e.Add(&Request{ID: fmt.Sprint(i), PromptTokens: toks, Params: ps[i]})
				if err != nil {
					b.Fatal(err)
				}
				chans = append(chans, ch)
			}
			var wg sync.WaitGroup
			for _, ch := range chans {
				wg.Go(func() {
					for range ch {
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			if n == 0 {
				return
			}
			per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
			b.ReportMetric(per(fwd), "forward-us/step")
			b.ReportMetric(per(total-fwd), "overhead-us/step")
			b.ReportMetric(per(sched), "schedule-us/step")
			b.ReportMetric(per(sample), "sample-us/step")
			b.ReportMetric(per(total-fwd-sample), "engine-us/step")
			b.ReportMetric(100*float64(total-fwd)/float64(total), "overhead-%")
			b.ReportMetric(100*float64(total-fwd-sample)/float64(total), "engine-%")
		})
	}
}
