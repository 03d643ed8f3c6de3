package scheduler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/engine/kvcache"
)

// sim drives a scheduler the way the engine does, with a fake model whose
// k-th generated token of request id is tokenFor(id, k). It checks the
// scheduler's invariants after every step.
type sim struct {
	t    *testing.T
	cfg  Config
	kv   *kvcache.Manager
	s    *Scheduler
	reqs map[string]*simReq
	// steps with work and neither tokens nor preemptions
	stalls int
}

type simReq struct {
	r         *Request
	prompt    []int32
	maxTokens int
	done      bool
	aborted   bool
}

func tokenFor(id string, k int) int32 {
	h := int32(7)
	for _, c := range id {
		h = h*31 + c
	}
	return (h*131 + int32(k)*17) & 0xffff
}

func newSim(t *testing.T, cfg Config, blockSize, numBlocks int) *sim {
	t.Helper()
	kv, err := kvcache.New(kvcache.Config{BlockSize: blockSize, NumBlocks: numBlocks, NumStateSlots: cfg.MaxNumSeqs, KPool: 1})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, kv)
	if err != nil {
		t.Fatal(err)
	}
	return &sim{t: t, cfg: cfg, kv: kv, s: s, reqs: map[string]*simReq{}}
}

// add queues a request with a prompt of n tokens.
func (m *sim) add(id string, n, maxTokens int) error {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(i%50 + 1)
	}
	r := NewRequest(id, p, maxTokens)
	if err := m.s.Add(r); err != nil {
		return err
	}
	m.reqs[id] = &simReq{r: r, prompt: p, maxTokens: maxTokens}
	return nil
}

// want is the token at position p of request sr.
func (sr *simReq) want(p int) int32 {
	if p < len(sr.prompt) {
		return sr.prompt[p]
	}
	return tokenFor(sr.r.ID, p-len(sr.prompt))
}

// step runs one step and returns its description, e.g. "a0+16 b4+1* !c":
// request a fed 16 tokens from position 0, b one token at 4 and sampled,
// c preempted.
func (m *sim) step() string {
	t := m.t
	t.Helper()
	hadWork := m.s.HasWork()
	st := m.s.Schedule()
	m.check(st)
	if hadWork && st.NumTokens == 0 && len(st.Preempted) == 0 {
		m.stalls++
	}
	var parts []string
	for _, sc := range st.Seqs {
		sr := m.reqs[sc.Req.ID]
		for i, tok := range sc.Tokens() {
			if w := sr.want(sc.Start + i); tok != w {
				t.Fatalf("request %s fed %d at position %d, want %d", sc.Req.ID, tok, sc.Start+i, w)
			}
		}
		mark := ""
		if sc.Sample {
			mark = "*"
			r := sc.Req
			m.s.AppendToken(r, tokenFor(r.ID, r.NumOutputTokens()))
			if (sr.maxTokens > 0 && r.NumOutputTokens() >= sr.maxTokens) || len(r.Tokens()) >= m.cfg.MaxModelLen {
				if !m.s.Finish(r) {
					t.Fatalf("Finish(%s) of a live request returned false", r.ID)
				}
				sr.done = true
			}
		}
		parts = append(parts, fmt.Sprintf("%s%d+%d%s", sc.Req.ID, sc.Start, sc.NumTokens, mark))
	}
	for _, r := range st.Preempted {
		parts = append(parts, "!"+r.ID)
	}
	return strings.Join(parts, " ")
}

// check verifies the invariants of a step and of the queues after it.
func (m *sim) check(st *Step) {
	t := m.t
	t.Helper()
	total := 0
	seen := map[*Request]bool{}
	for i, sc := range st.Seqs {
		r := sc.Req
		if seen[r] {
			t.Fatalf("request %s scheduled twice in a step", r.ID)
		}
		seen[r] = true
		if sc.NumTokens < 1 {
			t.Fatalf("request %s scheduled with %d tokens", r.ID, sc.NumTokens)
		}
		if r.Status() != Running || r.Seq() == nil {
			t.Fatalf("scheduled request %s is %v", r.ID, r.Status())
		}
		if end := sc.Start + sc.NumTokens; end != r.NumComputed() || end != r.Seq().Len() || end > len(r.Tokens()) {
			t.Fatalf("request %s run %d+%d: computed %d, cache length %d, %d tokens", r.ID, sc.Start, sc.NumTokens, r.NumComputed(), r.Seq().Len(), len(r.Tokens()))
		}
		if sc.Sample != (sc.Start+sc.NumTokens == len(r.Tokens())) {
			t.Fatalf("request %s: Sample %v with run %d+%d of %d tokens", r.ID, sc.Sample, sc.Start, sc.NumTokens, len(r.Tokens()))
		}
		isDecode := i < st.NumDecodes
		if isDecode && (sc.NumTokens != 1 || !sc.Sample) {
			t.Fatalf("decode %d of request %s is a run of %d tokens", i, r.ID, sc.NumTokens)
		}
		total += sc.NumTokens
	}
	if total != st.NumTokens || total > m.cfg.MaxNumBatchedTokens {
		t.Fatalf("step has %d tokens (reported %d), budget %d", total, st.NumTokens, m.cfg.MaxNumBatchedTokens)
	}
	if len(st.Preempted) > 0 && len(st.Admitted) > 0 {
		t.Fatalf("step preempted %d and admitted %d requests", len(st.Preempted), len(st.Admitted))
	}
	for _, v := range st.Preempted {
		if seen[v] || v.Status() != Preempted || v.Seq() != nil || v.NumComputed() != 0 {
			t.Fatalf("preempted request %s: scheduled %v, status %v", v.ID, seen[v], v.Status())
		}
		// Lowest priority first: every running request that arrived
		// later than a victim was scheduled in this step.
		for _, r := range m.s.running {
			if r.arrival > v.arrival && !seen[r] {
				t.Fatalf("preempted %s while the later arrival %s kept its cache unscheduled", v.ID, r.ID)
			}
		}
	}
	if len(m.s.running) > m.cfg.MaxNumSeqs || m.kv.NumSeqs() != len(m.s.running) {
		t.Fatalf("%d running, %d cache sequences, max %d", len(m.s.running), m.kv.NumSeqs(), m.cfg.MaxNumSeqs)
	}
	blocks := 0
	for i, r := range m.s.running {
		if r.Status() != Running || r.Seq().Len() != r.NumComputed() {
			t.Fatalf("running request %s: %v, cache length %d, computed %d", r.ID, r.Status(), r.Seq().Len(), r.NumComputed())
		}
		if i > 0 && m.s.running[i-1].arrival >= r.arrival {
			t.Fatal("running queue out of arrival order")
		}
		blocks += len(r.Seq().Blocks())
	}
	if blocks != m.kv.UsedBlocks() {
		t.Fatalf("running requests hold %d blocks, cache says %d used", blocks, m.kv.UsedBlocks())
	}
	for i, r := range m.s.waiting {
		if (r.Status() != Waiting && r.Status() != Preempted) || r.Seq() != nil || r.NumComputed() != 0 {
			t.Fatalf("waiting request %s: %v, computed %d", r.ID, r.Status(), r.NumComputed())
		}
		if i > 0 && m.s.waiting[i-1].arrival >= r.arrival {
			t.Fatal("waiting queue out of arrival order")
		}
	}
}

func TestNewValidates(t *testing.T) {
	kv, err := kvcache.New(kvcache.Config{BlockSize: 4, NumBlocks: 8, NumStateSlots: 2})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		cfg  Config
		kv   *kvcache.Manager
		ok   bool
	}{
		{"ok", Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 8, MaxModelLen: 32}, kv, true},
		{"more seqs than state slots", Config{MaxNumSeqs: 3, MaxNumBatchedTokens: 8, MaxModelLen: 32}, kv, false},
		{"zero budget", Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 0, MaxModelLen: 32}, kv, false},
		{"zero max_model_len", Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 8}, kv, false},
		{"negative threshold", Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 8, MaxModelLen: 32, LongPrefillTokenThreshold: -1}, kv, false},
		{"nil cache", Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 8, MaxModelLen: 32}, nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(c.cfg, c.kv)
			if (err == nil) != c.ok {
				t.Fatalf("New: error %v, want ok=%v", err, c.ok)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	// 8 blocks of 4 tokens: 32 positions; max_model_len 40 > 32.
	m := newSim(t, Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 8, MaxModelLen: 40}, 4, 8)
	cases := []struct {
		name      string
		prompt    int
		maxTokens int
		errHas    string
	}{
		{"fits", 10, 5, ""},
		{"exactly the cache", 30, 3, ""}, // 32 positions
		{"one token over the cache", 30, 4, "needs up to 33 tokens of cache (9 blocks of 4)"},
		{"empty prompt", 0, 4, "The decoder prompt cannot be empty"},
		{"prompt over max_model_len", 41, 1, "The decoder prompt (length 41) is longer than the maximum model length of 40."},
		{"prompt at max_model_len but over the cache", 40, 1, "needs up to 40 tokens"},
		{"unbounded max_tokens runs to max_model_len", 4, 0, "needs up to 40 tokens"},
		{"negative max_tokens", 4, -1, "negative"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := m.add(c.name, c.prompt, c.maxTokens)
			if c.errHas == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.errHas) {
				t.Fatalf("error %v, want one containing %q", err, c.errHas)
			}
			if _, ok := m.s.Get(c.name); ok || m.s.NumWaiting() > 2 {
				t.Fatal("a rejected request was queued")
			}
		})
	}
	if err := m.add("fits", 3, 1); err == nil || !strings.Contains(err.Error(), "duplicate") {
		t.Fatalf("duplicate id: error %v", err)
	}
}

// TestSchedule replays scenarios step by step.
func TestSchedule(t *testing.T) {
	type arrival struct {
		step          int // added before this step (1-based)
		id            string
		prompt, maxTk int
	}
	cases := []struct {
		name              string
		cfg               Config
		blockSize, blocks int
		reqs              []arrival
		steps             []string
		preemptions       int64
	}{
		{
			name: "chunked prefill", cfg: Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 16, MaxModelLen: 100},
			blockSize: 4, blocks: 64,
			reqs:  []arrival{{1, "a", 40, 2}},
			steps: []string{"a0+16", "a16+16", "a32+8*", "a40+1*"},
		},
		{
			name: "decode first, a new prompt takes what is left", cfg: Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 8, MaxModelLen: 100},
			blockSize: 4, blocks: 64,
			reqs:  []arrival{{1, "a", 3, 6}, {2, "b", 20, 1}},
			steps: []string{"a0+3*", "a3+1* b0+7", "a4+1* b7+7", "a5+1* b14+6*", "a6+1*", "a7+1*"},
		},
		{
			name: "decodes before earlier prefill chunks", cfg: Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 10, MaxModelLen: 100, LongPrefillTokenThreshold: 6},
			blockSize: 4, blocks: 64,
			reqs:  []arrival{{1, "c", 20, 1}, {1, "a", 1, 4}},
			steps: []string{"c0+6 a0+1*", "a1+1* c6+6", "a2+1* c12+6", "a3+1* c18+2*"},
		},
		{
			name: "long prefill threshold", cfg: Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 16, MaxModelLen: 100, LongPrefillTokenThreshold: 4},
			blockSize: 4, blocks: 64,
			reqs:  []arrival{{1, "a", 10, 1}, {1, "b", 6, 1}},
			steps: []string{"a0+4 b0+4", "a4+4 b4+2*", "a8+2*"},
		},
		{
			name: "max_num_seqs", cfg: Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 100, MaxModelLen: 100},
			blockSize: 4, blocks: 64,
			reqs:  []arrival{{1, "a", 2, 2}, {1, "b", 2, 2}, {1, "c", 2, 2}},
			steps: []string{"a0+2* b0+2*", "a2+1* b2+1*", "c0+2*", "c2+1*"},
		},
		{
			name: "max_model_len ends generation", cfg: Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 100, MaxModelLen: 6},
			blockSize: 4, blocks: 4,
			reqs:  []arrival{{1, "a", 4, 0}, {1, "b", 6, 0}},
			steps: []string{"a0+4* b0+6*", "a4+1*"},
		},
		{
			name: "FCFS: the head of the queue blocks smaller requests behind it", cfg: Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 32, MaxModelLen: 100},
			blockSize: 4, blocks: 4,
			reqs:  []arrival{{1, "a", 8, 2}, {1, "b", 12, 1}, {1, "c", 2, 1}},
			steps: []string{"a0+8*", "a8+1*", "b0+12* c0+2*"},
		},
		{
			name: "a decode preempts itself when it is the latest arrival, then recomputes", cfg: Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 64, MaxModelLen: 100},
			blockSize: 4, blocks: 4,
			reqs:        []arrival{{1, "a", 8, 6}, {1, "b", 4, 4}},
			steps:       []string{"a0+8* b0+4*", "a8+1* !b", "a9+1*", "a10+1*", "a11+1*", "a12+1*", "b0+5*", "b5+1*", "b6+1*"},
			preemptions: 1,
		},
		{
			name: "the latest arrival is preempted, not the requester", cfg: Config{MaxNumSeqs: 3, MaxNumBatchedTokens: 64, MaxModelLen: 100},
			blockSize: 4, blocks: 4,
			reqs:        []arrival{{1, "a", 4, 3}, {1, "b", 4, 3}, {1, "c", 4, 3}},
			steps:       []string{"a0+4* b0+4* c0+4*", "a4+1* b4+1* !c", "a5+1* b5+1*", "c0+5*", "c5+1*"},
			preemptions: 1,
		},
		{
			name: "a prefill chunk preempts a later prefill", cfg: Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 8, MaxModelLen: 100, LongPrefillTokenThreshold: 4},
			blockSize: 4, blocks: 6,
			reqs:        []arrival{{1, "a", 16, 1}, {1, "b", 16, 1}},
			steps:       []string{"a0+4 b0+4", "a4+4 b4+4", "a8+4 b8+4", "a12+4* !b", "b0+4", "b4+4", "b8+4", "b12+4*"},
			preemptions: 1,
		},
		{
			name: "a prefill chunk waits for blocks held by a later decode", cfg: Config{MaxNumSeqs: 2, MaxNumBatchedTokens: 8, MaxModelLen: 100, LongPrefillTokenThreshold: 6},
			blockSize: 4, blocks: 4,
			reqs:        []arrival{{1, "a", 16, 1}, {1, "b", 2, 6}},
			steps:       []string{"a0+6 b0+2*", "b2+1* a6+6", "b3+1*", "a12+4* !b", "b0+5*", "b5+1*", "b6+1*"},
			preemptions: 1,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := newSim(t, c.cfg, c.blockSize, c.blocks)
			var got []string
			for step := 1; step <= len(c.steps)+1; step++ {
				for _, a := range c.reqs {
					if a.step == step {
						if err := m.add(a.id, a.prompt, a.maxTk); err != nil {
							t.Fatal(err)
						}
					}
				}
				if !m.s.HasWork() {
					break
				}
				got = append(got, m.step())
			}
			if !slices.Equal(got, c.steps) {
				t.Fatalf("steps\n got  %q\n want %q", got, c.steps)
			}
			if m.s.HasWork() || m.kv.UsedBlocks() != 0 || m.kv.UsedStateSlots() != 0 {
				t.Fatalf("after the last step: work %v, %d blocks and %d slots used", m.s.HasWork(), m.kv.UsedBlocks(), m.kv.UsedStateSlots())
			}
			if m.s.Preemptions() != c.preemptions {
				t.Fatalf("%d preemptions, want %d", m.s.Preemptions(), c.preemptions)
			}
			for id, sr := range m.reqs {
				if !sr.done {
					t.Fatalf("request %s did not finish", id)
				}
			}
		})
	}
}

func TestPreemptedRequestsRequeueInArrivalOrder(t *testing.T) {
	// Four requests of one block each fill the cache; a and b then need a
	// block each for their first decode, preempting d, then c. The waiting
	// queue must read c, d, e (e arrived last and never ran).
	m := newSim(t, Config{MaxNumSeqs: 4, MaxNumBatchedTokens: 64, MaxModelLen: 100}, 4, 4)
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		if err := m.add(id, 4, 3); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := m.step(), "a0+4* b0+4* c0+4* d0+4*"; got != want {
		t.Fatalf("step 1 %q, want %q", got, want)
	}
	if got, want := m.step(), "a4+1* b4+1* !d !c"; got != want {
		t.Fatalf("step 2 %q, want %q", got, want)
	}
	var ids []string
	for _, r := range m.s.Waiting() {
		ids = append(ids, r.ID)
	}
	if !slices.Equal(ids, []string{"c", "d", "e"}) {
		t.Fatalf("waiting %v, want [c d e]", ids)
	}
	c, _ := m.s.Get("c")
	if c.NumPreemptions() != 1 || len(c.Tokens()) != 5 || c.NumOutputTokens() != 1 {
		t.Fatalf("c: %d preemptions, %d tokens, %d generated", c.NumPreemptions(), len(c.Tokens()), c.NumOutputTokens())
	}
}

func TestAbortReturnsEverything(t *testing.T) {
	m := newSim(t, Config{MaxNumSeqs: 3, MaxNumBatchedTokens: 8, MaxModelLen: 200}, 4, 16)
	for i := range 6 {
		if err := m.add(fmt.Sprint("r", i), 5+3*i, 20); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 {
		m.step()
	}
	if m.s.NumRunning() == 0 || m.s.NumWaiting() == 0 || m.kv.UsedBlocks() == 0 {
		t.Fatalf("setup: %d running, %d waiting, %d blocks", m.s.NumRunning(), m.s.NumWaiting(), m.kv.UsedBlocks())
	}
	if _, ok := abortReq(m.s, "nope"); ok {
		t.Fatal("Abort of an unknown id succeeded")
	}
	for i := range 6 {
		id := fmt.Sprint("r", i)
		r, ok := abortReq(m.s, id)
		if !ok || r.Status() != Finished || r.Seq() != nil {
			t.Fatalf("Abort(%s): ok %v", id, ok)
		}
		if _, ok := abortReq(m.s, id); ok {
			t.Fatalf("second Abort(%s) succeeded", id)
		}
	}
	if m.s.HasWork() || m.kv.UsedBlocks() != 0 || m.kv.UsedStateSlots() != 0 || m.kv.NumSeqs() != 0 || m.s.KVUsage() != 0 {
		t.Fatalf("after aborts: work %v, %d blocks, %d slots, %d seqs, usage %g", m.s.HasWork(), m.kv.UsedBlocks(), m.kv.UsedStateSlots(), m.kv.NumSeqs(), m.s.KVUsage())
	}
	if st := m.s.Schedule(); len(st.Seqs) != 0 {
		t.Fatal("empty scheduler scheduled something")
	}
	// The id can be reused once aborted.
	if err := m.add("r0", 3, 1); err != nil {
		t.Fatal(err)
	}
}

// TestRandomWorkloads runs random configurations and request mixes (with
// random arrivals and aborts) to completion, checking the invariants every
// step, that no step stalls, that every request gets exactly its tokens
// however often it is preempted, and that the cache ends empty.
func TestRandomWorkloads(t *testing.T) {
	preempted := 0
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 99))
		bs := []int{1, 2, 4, 8}[rng.IntN(4)]
		cfg := Config{
			MaxNumSeqs:          1 + rng.IntN(6),
			MaxNumBatchedTokens: 1 + rng.IntN(40),
			MaxModelLen:         1 + rng.IntN(60),
		}
		if rng.IntN(3) == 0 {
			cfg.LongPrefillTokenThreshold = 1 + rng.IntN(10)
		}
		m := newSim(t, cfg, bs, 1+rng.IntN(30))
		var ids []string
		n := 1 + rng.IntN(12)
		arrive := make([]int, n)
		for i := range arrive {
			arrive[i] = rng.IntN(30)
		}
		for step := 0; ; step++ {
			if step > 20000 {
				t.Fatalf("seed %d: no completion after %d steps", seed, step)
			}
			for i, at := range arrive {
				if at == step {
					id := fmt.Sprint("q", i)
					prompt := 1 + rng.IntN(cfg.MaxModelLen)
					if err := m.add(id, prompt, rng.IntN(20)); err == nil {
						ids = append(ids, id)
					} else if !strings.Contains(err.Error(), "cache") {
						t.Fatalf("seed %d: %v", seed, err)
					}
				}
			}
			if len(ids) > 0 && rng.IntN(25) == 0 {
				id := ids[rng.IntN(len(ids))]
				if _, ok := abortReq(m.s, id); ok {
					m.reqs[id].aborted = true
				}
			}
			if !m.s.HasWork() && step > 30 {
				break
			}
			m.step()
		}
		if m.stalls > 0 {
			t.Fatalf("seed %d: %d steps with work scheduled nothing", seed, m.stalls)
		}
		if m.kv.UsedBlocks() != 0 || m.kv.UsedStateSlots() != 0 {
			t.Fatalf("seed %d: cache not empty at the end", seed)
		}
		for _, id := range ids {
			sr := m.reqs[id]
			if sr.aborted {
				continue
			}
			want := cfg.MaxModelLen - len(sr.prompt)
			if sr.maxTokens > 0 {
				want = min(want, sr.maxTokens)
			}
			want = max(want, 1)
			out := sr.r.OutputTokens()
			if !sr.done || len(out) != want {
				t.Fatalf("seed %d: request %s done %v with %d tokens, want %d", seed, id, sr.done, len(out), want)
			}
			for k, tok := range out {
				if tok != tokenFor(id, k) {
					t.Fatalf("seed %d: request %s token %d is %d", seed, id, k, tok)
				}
			}
			preempted += sr.r.NumPreemptions()
		}
	}
	t.Logf("%d preemptions over the workloads", preempted)
	if preempted == 0 {
		t.Fatal("the random workloads never preempted: the test lost its teeth")
	}
}

// abortReq finishes the live request id the way the engine aborts one
// (Get, then Finish).
func abortReq(s *Scheduler, id string) (*Request, bool) {
	r, ok := s.Get(id)
	if !ok {
		return nil, false
	}
	s.Finish(r)
	return r, true
}
