package core

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/model"
	"github.com/npuserve/npuserve/engine/model/glm5next"
	"github.com/npuserve/npuserve/engine/sampling"
	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/nputest"
)

// fakeDP is an in-process lockstep group: Sync is a barrier over n
// engines that ORs their flags, and can be made to fail.
type fakeDP struct {
	mu       sync.Mutex
	cond     *sync.Cond
	n        int
	arrived  int
	gen      int
	work     bool
	closing  bool
	res      [2]bool
	anyWork  int   // syncs that answered "some rank has work"
	failWith error // Sync returns it (once set)
}

func newFakeDP(n int) *fakeDP {
	g := &fakeDP{n: n}
	g.cond = sync.NewCond(&g.mu)
	return g
}

func (g *fakeDP) Sync(hasWork, closing bool) (bool, bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failWith != nil {
		return false, false, g.failWith
	}
	gen := g.gen
	g.work, g.closing = g.work || hasWork, g.closing || closing
	if g.arrived++; g.arrived == g.n {
		g.res = [2]bool{g.work, g.closing}
		if g.work {
			g.anyWork++
		}
		g.work, g.closing, g.arrived = false, false, 0
		g.gen++
		g.cond.Broadcast()
	} else {
		for gen == g.gen {
			g.cond.Wait()
		}
	}
	return g.res[0], g.res[1], nil
}

func (g *fakeDP) IdleWait() time.Duration { return time.Millisecond }

// collectiveModel names the embedded model of stepModel (whose own
// Collective method would clash with the field name model.Collective).
type collectiveModel = model.Collective

// stepModel is a collective model that counts its forwards and dummy
// steps (each engine needs its own: Forward reuses scratch buffers).
type stepModel struct {
	collectiveModel
	forwards, dummies atomic.Int64
	panicAt           int64 // forward number that panics (1-based); 0: none
}

func (s *stepModel) Forward(c model.Cache, b *model.Batch) (*npu.Tensor, error) {
	if s.forwards.Add(1) == s.panicAt {
		return nil, fmt.Errorf("injected collective fault: %w", glm5next.ErrCollective)
	}
	return s.collectiveModel.Forward(c, b)
}

func (s *stepModel) DummyStep(c model.Cache) error {
	s.dummies.Add(1)
	return s.collectiveModel.DummyStep(c)
}

func (s *stepModel) Collective() bool { return true }

func newStepModel(t *testing.T) *stepModel {
	t.Helper()
	m, err := glm5next.Load(nputest.Open(1), tinyDir, glm5next.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return &stepModel{collectiveModel: m.Engine().(model.Collective)}
}

var lockstepOpts = Options{MaxNumSeqs: 4, MaxNumBatchedTokens: 16, BlockSize: 4, NumBlocks: 64}

// TestLockstepDummySteps: two DP ranks in lockstep; while one has work the
// other runs a dummy step for every real step, then both idle without
// forwards; with work on both, each serves its own requests. Outputs are
// the runner's throughout, and every sync that found work was followed by
// exactly one forward on every rank.
func TestLockstepDummySteps(t *testing.T) {
	m := tiny(t)
	ps := prompts(4, 3)
	ref := reference(t, m, ps, func(int) int { return 5 })
	g := newFakeDP(2)
	ms := []*stepModel{newStepModel(t), newStepModel(t)}
	var es []*Engine
	for _, sm := range ms {
		o := lockstepOpts
		o.Lockstep = g
		es = append(es, newEngine(t, sm, o))
	}

	// Only rank 0 has requests.
	got, _ := runAll(t, es[0], ps[:2], func(int) sampling.Params { return greedy(5) })
	for i := range 2 {
		if !slices.Equal(got[i], ref[i]) {
			t.Fatalf("request %d: %v, runner %v", i, got[i], ref[i])
		}
	}
	waitFor(t, func() bool { return es[1].Stats().DummySteps == es[0].Stats().Steps })
	if s0, s1 := es[0].Stats(), es[1].Stats(); s0.Steps == 0 || s1.Steps != 0 || s0.DummySteps != 0 {
		t.Fatalf("rank 0 %d steps %d dummy, rank 1 %d steps %d dummy; want rank 1 to mirror rank 0 with dummy steps",
			s0.Steps, s0.DummySteps, s1.Steps, s1.DummySteps)
	}

	// Both ranks have requests.
	var wg sync.WaitGroup
	outs := make([][][]int32, 2)
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[r], _ = runAll(t, es[r], ps[2*r:2*r+2], func(int) sampling.Params { return greedy(5) })
		}()
	}
	wg.Wait()
	for r := range 2 {
		for i := range 2 {
			if !slices.Equal(outs[r][i], ref[2*r+i]) {
				t.Fatalf("rank %d request %d: %v, runner %v", r, i, outs[r][i], ref[2*r+i])
			}
		}
	}
	waitFor(t, func() bool {
		g.mu.Lock()
		n := int64(g.anyWork)
		g.mu.Unlock()
		for _, sm := range ms {
			if sm.forwards.Load()+sm.dummies.Load() != n {
				return false
			}
		}
		return true
	})
	// Idle ranks keep syncing but run no forward.
	before := ms[0].forwards.Load() + ms[0].dummies.Load()
	time.Sleep(20 * time.Millisecond)
	if after := ms[0].forwards.Load() + ms[0].dummies.Load(); after != before {
		t.Fatalf("idle ranks ran %d forwards", after-before)
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestLockstepClose: closing one DP rank stops the whole lockstep group;
// the other rank's requests end with "abort" and ErrLockstepStopped.
func TestLockstepClose(t *testing.T) {
	g := newFakeDP(2)
	var es []*Engine
	for range 2 {
		o := lockstepOpts
		o.Lockstep = g
		es = append(es, newEngine(t, newStepModel(t), o))
	}
	ch, err := es[0].Add(&Request{ID: "long", PromptTokens: prompts(1, 5)[0], Params: greedy(10000)})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return es[0].Stats().Steps > 2 })
	es[1].Close()
	_, f := collect(t, ch)
	if f.FinishReason != "abort" || !errors.Is(f.Err, ErrLockstepStopped) {
		t.Fatalf("final output %+v, want abort with ErrLockstepStopped", f)
	}
	select {
	case <-es[0].Done():
	case <-time.After(10 * time.Second):
		t.Fatal("rank 0 did not stop")
	}
	if !errors.Is(es[0].Err(), ErrLockstepStopped) {
		t.Fatalf("rank 0 Err %v", es[0].Err())
	}
	if _, err := es[0].Add(&Request{ID: "late", PromptTokens: []int32{1}, Params: greedy(1)}); !errors.Is(err, ErrLockstepStopped) {
		t.Fatalf("Add after the group stopped: %v", err)
	}
}

// TestLockstepFailures: a failed sync or a failed step of a collective
// model is fatal: every request fails, the loop exits, Err says why.
func TestLockstepFailures(t *testing.T) {
	t.Run("sync", func(t *testing.T) {
		g := newFakeDP(1)
		o := lockstepOpts
		o.Lockstep = g
		e := newEngine(t, newStepModel(t), o)
		ch, err := e.Add(&Request{ID: "a", PromptTokens: prompts(1, 6)[0], Params: greedy(10000)})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return e.Stats().Steps > 1 })
		g.mu.Lock()
		g.failWith = errors.New("peer lost")
		g.mu.Unlock()
		if _, f := collect(t, ch); f.FinishReason != "error" || !strings.Contains(f.Err.Error(), "DP lockstep sync: peer lost") {
			t.Fatalf("final %+v", f)
		}
		<-e.Done()
	})
	for _, lock := range []bool{false, true} {
		t.Run(fmt.Sprintf("collective step, lockstep %v", lock), func(t *testing.T) {
			sm := newStepModel(t)
			sm.panicAt = 3
			o := lockstepOpts
			if lock {
				o.Lockstep = newFakeDP(1)
			}
			e := newEngine(t, sm, o)
			var chans []<-chan Output
			for i, p := range prompts(3, 7) {
				ch, err := e.Add(&Request{ID: fmt.Sprint(i), PromptTokens: p, Params: greedy(10000)})
				if err != nil {
					// The failing step may come before the last Add (the
					// lockstep loop steps as soon as it has work): the dead
					// engine refuses the request with the same cause.
					if !errors.Is(err, glm5next.ErrCollective) {
						t.Fatalf("Add %d: %v", i, err)
					}
					continue
				}
				chans = append(chans, ch)
			}
			for i, ch := range chans {
				if _, f := collect(t, ch); f.FinishReason != "error" || !errors.Is(f.Err, glm5next.ErrCollective) {
					t.Fatalf("request %d final %+v", i, f)
				}
			}
			<-e.Done()
			if !errors.Is(e.Err(), glm5next.ErrCollective) {
				t.Fatalf("Err %v", e.Err())
			}
		})
	}
	t.Run("model without DummyStep", func(t *testing.T) {
		o := lockstepOpts
		o.Lockstep = newFakeDP(1)
		if _, err := New(plainModel{tiny(t).Engine()}, o); err == nil || !strings.Contains(err.Error(), "DummyStep") {
			t.Fatalf("New: %v", err)
		}
	})
}

// plainModel hides the model's DummyStep.
type plainModel struct{ m model.Model }

func (p plainModel) Config() *config.ModelConfig { return p.m.Config() }
func (p plainModel) Backend() npu.Backend        { return p.m.Backend() }
func (p plainModel) NewCache(b, s, n int) (model.Cache, error) {
	return p.m.NewCache(b, s, n)
}
func (p plainModel) Forward(c model.Cache, b *model.Batch) (*npu.Tensor, error) {
	return p.m.Forward(c, b)
}
func (p plainModel) BytesPerToken() int64         { return p.m.BytesPerToken() }
func (p plainModel) BytesPerSequenceState() int64 { return p.m.BytesPerSequenceState() }
