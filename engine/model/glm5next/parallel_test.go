package glm5next_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/kvcache"
	"github.com/npuserve/npuserve/engine/model/glm5next"
	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/nputest"
)

// In-process parallel ranks: one goroutine and one CPU backend per rank,
// joined by TCP communicators on loopback. (engine/worker runs the same
// layouts as separate processes.)

// groupComms joins size ranks of one communicator, concurrently.
func groupComms(t *testing.T, name string, size int) []hccl.Comm {
	t.Helper()
	ri, err := hccl.NewRootInfo("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cs := make([]hccl.Comm, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cs[r], errs[r] = hccl.Init(ri, r, size, hccl.Options{Name: name, Timeout: 30 * time.Second, InitTimeout: 30 * time.Second})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
	})
	return cs
}

// layout is a DP×TP deployment, with or without expert parallelism.
type layout struct {
	dp, tp int
	ep     bool
}

func (l layout) String() string {
	s := fmt.Sprintf("DP%d×TP%d", l.dp, l.tp)
	if l.ep {
		s += fmt.Sprintf("+EP%d", l.dp*l.tp)
	}
	return s
}

// placements returns every rank's Parallel (global rank d·tp+t).
func (l layout) placements(t *testing.T) []*glm5next.Parallel {
	n := l.dp * l.tp
	ps := make([]*glm5next.Parallel, n)
	var ep []hccl.Comm
	if l.ep {
		ep = groupComms(t, "ep", n)
	}
	for d := range l.dp {
		var tp []hccl.Comm
		if l.tp > 1 {
			tp = groupComms(t, fmt.Sprintf("tp%d", d), l.tp)
		}
		for r := range l.tp {
			p := &glm5next.Parallel{TPSize: l.tp, TPRank: r, EPSize: 1}
			if tp != nil {
				p.TP = tp[r]
			}
			if l.ep {
				p.EPSize, p.EPRank, p.EP = n, d*l.tp+r, ep[d*l.tp+r]
			}
			ps[d*l.tp+r] = p
		}
	}
	return ps
}

// lockstepRun feeds each DP rank's jobs (chunk tokens per step) through
// its TP ranks' models, every rank running the same number of steps: a DP
// rank without work runs DummyStep, as the engine does under expert
// parallelism. It returns every job's logits (from TP rank 0).
func lockstepRun(t *testing.T, models []*glm5next.Model, l layout, jobs [][]*job) {
	t.Helper()
	steps := 0
	for _, js := range jobs {
		for _, j := range js {
			steps = max(steps, (len(j.tokens)+j.chunk-1)/j.chunk)
		}
	}
	errs := make([]error, len(models))
	var wg sync.WaitGroup
	for g, m := range models {
		d, r := g/l.tp, g%l.tp
		mine := make([]*job, len(jobs[d]))
		for i, j := range jobs[d] {
			mine[i] = &job{tokens: j.tokens, chunk: j.chunk}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					errs[g] = fmt.Errorf("rank %d: %v", g, p)
				}
			}()
			errs[g] = stepRank(m, mine, steps)
			if r == 0 {
				for i, j := range mine {
					jobs[d][i].logits = j.logits
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// stepRank runs steps forwards of jobs on one rank.
func stepRank(m *glm5next.Model, jobs []*job, steps int) error {
	kp := m.Config().IndexKPool
	bs := 8 * kp
	mgr, err := kvcache.New(kvcache.Config{BlockSize: bs, NumBlocks: 64, NumStateSlots: max(len(jobs), 1), KPool: kp})
	if err != nil {
		return err
	}
	c, err := m.NewCache(64, bs, max(len(jobs), 1))
	if err != nil {
		return err
	}
	defer c.Free(m.Backend())
	for _, j := range jobs {
		if j.seq, err = mgr.Allocate(); err != nil {
			return err
		}
	}
	for range steps {
		b, active, err := nextBatch(mgr, jobs)
		if err != nil {
			return err
		}
		if b == nil {
			if err := m.DummyStep(c); err != nil {
				return err
			}
			continue
		}
		lg, err := m.Forward(c, b)
		takeLogits(m, lg, err, active)
	}
	return nil
}

// TestParallelMatchesSingle: TP2, EP over two DP ranks (one of them with
// no work at all: dummy steps only), and DP2×TP2 with EP4 compute the
// single-rank logits (within 1e-4 relative) and the same greedy tokens on
// the golden fixtures, each rank loading only its slices.
func TestParallelMatchesSingle(t *testing.T) {
	skipWithoutHostTransport(t)
	layouts := []struct {
		l    layout
		idle bool // DP rank 1 gets no jobs
	}{
		{layout{1, 2, false}, false},
		{layout{2, 1, true}, false},
		{layout{2, 1, true}, true},
		{layout{2, 2, true}, false},
	}
	for _, f := range fixtures(t) {
		if f.name != "tiny" && f.name != "shared" && f.name != "kpool2" {
			continue
		}
		t.Run(f.name, func(t *testing.T) {
			mt := f.meta
			// Every prompt continued by its golden greedy tokens: each
			// position's argmax must be the next greedy token.
			var seqs [][]int32
			for i, p := range mt.Prompts {
				seqs = append(seqs, append(slices.Clone(p), mt.Greedy[i]...))
			}
			single := load(t, nputest.Open(1), f.dir)
			e := newEngine(t, single, 1)
			ref := make([][][]float32, len(seqs))
			for i, s := range seqs {
				ref[i] = e.logits(s, 11)
			}
			for _, tc := range layouts {
				name := tc.l.String()
				if tc.idle {
					name += " idle DP rank"
				}
				t.Run(name, func(t *testing.T) {
					ps := tc.l.placements(t)
					models := make([]*glm5next.Model, len(ps))
					for g, p := range ps {
						m, err := glm5next.Load(nputest.Open(1), f.dir, glm5next.LoadOptions{DType: "float32", Parallel: p})
						if err != nil {
							t.Fatal(err)
						}
						t.Cleanup(func() { m.Close() })
						models[g] = m
					}
					jobs := make([][]*job, tc.l.dp)
					owner := make([]*job, len(seqs))
					for i, s := range seqs {
						d := i % tc.l.dp
						if tc.idle {
							d = 0
						}
						j := &job{tokens: s, chunk: 11}
						jobs[d] = append(jobs[d], j)
						owner[i] = j
					}
					lockstepRun(t, models, tc.l, jobs)
					for i, j := range owner {
						if len(j.logits) != len(seqs[i]) {
							t.Fatalf("sequence %d: %d logit rows for %d tokens", i, len(j.logits), len(seqs[i]))
						}
						d := rel(j.logits, ref[i])
						t.Logf("sequence %d: max rel logit diff vs single rank %.3g", i, d)
						if d > logitTol {
							t.Errorf("sequence %d: max relative logit difference %g > %g", i, d, logitTol)
						}
						p := len(mt.Prompts[i])
						for k, want := range mt.Greedy[i] {
							if got := argmax(j.logits[p-1+k]); got != want {
								t.Errorf("sequence %d greedy step %d: token %d, want %d", i, k, got, want)
							}
						}
					}
				})
			}
		})
	}
}

// TestParallelConfigErrors: placements the model cannot take are errors
// naming the reason.
func TestParallelConfigErrors(t *testing.T) {
	dir := fixtureRoot + "/tiny"
	cfg, err := config.LoadModel(dir)
	if err != nil {
		t.Skip(err)
	}
	tp3 := groupComms(t, "tp", 3)
	ep2 := groupComms(t, "ep", 2)
	cases := []struct {
		name string
		p    glm5next.Parallel
		want string
	}{
		{"TP3 heads", glm5next.Parallel{TPSize: 3, TPRank: 0, TP: tp3[0]}, "does not divide num_attention_heads"},
		{"no comm", glm5next.Parallel{TPSize: 2, TPRank: 1}, "without a communicator"},
		{"rank mismatch", glm5next.Parallel{TPSize: 1, EPSize: 2, EPRank: 1, EP: ep2[0]}, "its communicator is rank 0 of 2"},
		{"too many experts", glm5next.Parallel{TPSize: 1, EPSize: cfg.NRoutedExperts + 1, EPRank: 0, EP: ep2[0]}, "exceed the 8 routed experts"},
		{"rank outside", glm5next.Parallel{TPSize: 2, TPRank: 2, TP: tp3[0]}, "TP rank 2 outside [0, 2)"},
	}
	for _, tc := range cases {
		_, err := glm5next.NewRandomParallel(nputest.Open(1), cfg, "float32", 1, &tc.p)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestExpertRange is vLLM's split: contiguous, the remainder to the first
// ranks.
func TestExpertRange(t *testing.T) {
	cases := []struct {
		e, ep int
		want  [][2]int
	}{
		{8, 2, [][2]int{{0, 4}, {4, 4}}},
		{8, 3, [][2]int{{0, 3}, {3, 3}, {6, 2}}},
		{288, 16, nil},
		{10, 4, [][2]int{{0, 3}, {3, 3}, {6, 2}, {8, 2}}},
	}
	for _, tc := range cases {
		next := 0
		for r := range tc.ep {
			f, n := glm5next.ExpertRange(tc.e, tc.ep, r)
			if f != next {
				t.Errorf("E=%d EP=%d rank %d starts at %d, want %d", tc.e, tc.ep, r, f, next)
			}
			if tc.want != nil && [2]int{f, n} != tc.want[r] {
				t.Errorf("E=%d EP=%d rank %d: [%d, +%d), want %v", tc.e, tc.ep, r, f, n, tc.want[r])
			}
			next = f + n
		}
		if next != tc.e {
			t.Errorf("E=%d EP=%d covers %d experts", tc.e, tc.ep, next)
		}
	}
}

// skipWithoutHostTransport skips a multi-rank test on a test device whose
// tensors the TCP transport cannot move (cuda: NCCL, not in this build;
// ascend: HCCL needs NPUs).
func skipWithoutHostTransport(t *testing.T) {
	t.Helper()
	if tr := npu.TransportOf(nputest.Device()); tr != "tcp" {
		t.Skipf("device %s needs the %s transport for multi-rank runs; these run over TCP", nputest.Device(), tr)
	}
}
