package glm5next

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/npuserve/npuserve/engine/kvcache"
	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/cpu"
	"github.com/npuserve/npuserve/npu/graphtest"
	"github.com/npuserve/npuserve/npu/nputest"
)

// graphBackend is the test device (NPUSERVE_TEST_DEVICE) when it captures
// graphs (cuda), else the capturing test wrapper around it.
func graphBackend() npu.Backend {
	be := nputest.Open(0)
	if _, ok := be.(npu.GraphCapturer); !ok {
		return graphtest.New(be)
	}
	return be
}

// graphSeq is one request of a decode schedule.
type graphSeq struct {
	start  int     // the step it arrives at
	prompt []int32 // prefilled in one chunk
	gen    int     // tokens to generate
	mixed  bool    // its prefill shares the step with the decodes (an eager step)
}

// graphSchedule runs the requests greedily on s, engine-style: arrivals
// prefill (alone, or inside the decode batch when mixed), every running
// sequence decodes one token a step, and finished ones free their blocks
// and slot. It returns each request's tokens.
func graphSchedule(t *testing.T, s *session, reqs []graphSeq) [][]int32 {
	t.Helper()
	type run struct {
		seq *kvcache.Seq
		out []int32
	}
	runs := make([]*run, len(reqs))
	argmax := func(row []float32) int32 {
		best := 0
		for i, v := range row {
			if v > row[best] {
				best = i
			}
		}
		return int32(best)
	}
	left := len(reqs)
	for step := 0; left > 0; step++ {
		var feeds []feed
		var owners []int
		for i := range reqs {
			if runs[i] != nil && runs[i].seq != nil {
				feeds = append(feeds, feed{runs[i].seq, runs[i].out[len(runs[i].out)-1:]})
				owners = append(owners, i)
			}
		}
		for i, r := range reqs {
			if r.start != step {
				continue
			}
			seq, err := s.mgr.Allocate()
			if err != nil {
				t.Fatal(err)
			}
			runs[i] = &run{seq: seq}
			if r.mixed {
				feeds = append(feeds, feed{seq, r.prompt})
				owners = append(owners, i)
				continue
			}
			rows := s.step([]feed{{seq, r.prompt}})
			runs[i].out = append(runs[i].out, argmax(rows[len(rows)-1]))
		}
		if len(feeds) > 0 {
			rows := s.step(feeds)
			o := 0
			for j, f := range feeds {
				o += len(f.tokens)
				runs[owners[j]].out = append(runs[owners[j]].out, argmax(rows[o-1]))
			}
		}
		for i, r := range reqs {
			if rn := runs[i]; rn != nil && rn.seq != nil && len(rn.out) >= r.gen {
				s.mgr.Free(rn.seq)
				rn.seq = nil
				left--
			}
		}
		if step > 500 {
			t.Fatal("schedule does not finish")
		}
	}
	out := make([][]int32, len(reqs))
	for i, r := range runs {
		out[i] = r.out
	}
	return out
}

// TestDecodeGraphsMatchEager runs the same greedy schedule on a model
// without graphs and on one whose decode steps replay captured graphs
// (the capturing test backend over the CPU backend): batch sizes that
// hit a capture size, that pad up (1-2 padding rows), that exceed the
// largest size, sequences finishing mid-run and slots reused, one-token
// prompts (a decode-shaped first step) and mixed steps. The tokens must
// be identical and graphs must have run.
func TestDecodeGraphsMatchEager(t *testing.T) {
	const blocks, bs, slots, maxBlocks = 40, 8, 8, 8
	sizes := []int{1, 4, 6}
	prompt := func(n int, seed int32) []int32 {
		p := make([]int32, n)
		for i := range p {
			p[i] = (seed*7 + int32(i)*13) % 96
		}
		return p
	}
	reqs := []graphSeq{
		{start: 0, prompt: prompt(5, 1), gen: 18},
		{start: 0, prompt: prompt(1, 2), gen: 9},
		{start: 2, prompt: prompt(11, 3), gen: 22},
		{start: 3, prompt: prompt(3, 4), gen: 6, mixed: true},
		{start: 4, prompt: prompt(8, 5), gen: 14},
		{start: 5, prompt: prompt(1, 6), gen: 12},
		{start: 6, prompt: prompt(2, 7), gen: 10},
		{start: 7, prompt: prompt(6, 8), gen: 8},
		{start: 12, prompt: prompt(4, 9), gen: 15},
		{start: 14, prompt: prompt(9, 10), gen: 5, mixed: true},
	}
	for _, v := range testVariants {
		t.Run(v.name, func(t *testing.T) {
			cfg := testConfig(t, v.over)
			eager := newSession(t, testModel(t, nputest.Open(0), cfg, 3), blocks, bs, slots)
			want := graphSchedule(t, eager, reqs)

			gb := graphBackend()
			m := testModel(t, gb, cfg, 3)
			pad := GraphPadSlots(sizes)
			mgr, err := kvcache.New(kvcache.Config{BlockSize: bs, NumBlocks: blocks, NumStateSlots: slots, KPool: cfg.IndexKPool})
			if err != nil {
				t.Fatal(err)
			}
			c := must(m.NewCache(blocks+1, bs, slots+pad))
			rep, err := m.CaptureDecodeGraphs(c, GraphOptions{Sizes: sizes, MaxBlocks: maxBlocks, PadBlock: blocks, PadSlot: slots, PadSlots: pad})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(rep.Sizes, sizes) {
				t.Fatalf("report %+v; want sizes %v", rep, sizes)
			}
			got := graphSchedule(t, &session{t: t, m: m, mgr: mgr, cache: c}, reqs)
			if m.graphs.replays == 0 {
				t.Fatal("no decode step replayed a graph")
			}
			for i := range want {
				if len(got[i]) != len(want[i]) {
					t.Fatalf("request %d: %d tokens with graphs, %d eager", i, len(got[i]), len(want[i]))
				}
				for j := range want[i] {
					if got[i][j] != want[i][j] {
						t.Fatalf("request %d token %d: %d with graphs, %d eager (graphs %v, eager %v)", i, j, got[i][j], want[i][j], got[i], want[i])
					}
				}
			}
			t.Logf("%d graph replays on %s", m.graphs.replays, gb.Name())
			m.ReleaseGraphs()
		})
	}
}

// TestDecodeGraphLogits compares one padded decode step's logits, graph
// against eager, on the same cache contents.
func TestDecodeGraphLogits(t *testing.T) {
	cfg := testConfig(t, nil)
	gb := graphBackend()
	m := testModel(t, gb, cfg, 5)
	const blocks, bs, slots = 16, 8, 4
	mgr := must(kvcache.New(kvcache.Config{BlockSize: bs, NumBlocks: blocks, NumStateSlots: slots, KPool: cfg.IndexKPool}))
	c := must(m.NewCache(blocks+1, bs, slots+3))
	if _, err := m.CaptureDecodeGraphs(c, GraphOptions{Sizes: []int{4}, MaxBlocks: 4, PadBlock: blocks, PadSlot: slots, PadSlots: 3}); err != nil {
		t.Fatal(err)
	}
	defer m.ReleaseGraphs()
	s := &session{t: t, m: m, mgr: mgr, cache: c}
	var seqs []*kvcache.Seq
	for i := range 2 {
		seq := must(mgr.Allocate())
		s.step([]feed{{seq, []int32{int32(3 + i), 17, 40, int32(9 * i), 5, 61, 2}}})
		seqs = append(seqs, seq)
		if err := mgr.Append(seq, 1); err != nil {
			t.Fatal(err)
		}
	}
	// The decode step's logits; run twice from the same KDA state, it
	// writes the same cache rows with the same values.
	decode := func() [][]float32 {
		b := &Batch{Tokens: []int32{20, 21}, Layout: mgr.Layout(seqs, []int{1, 1}), LogitRows: []int{0, 1}}
		lg := must(m.Forward(c, b))
		defer m.be.Free(lg)
		return must(DownloadRows(m.be, lg))
	}
	saved := saveStates(t, m, c, c.StateSlots)
	graphs := m.graphs
	m.graphs = nil
	want := decode()
	wantState := saveStates(t, m, c, slots)
	m.graphs = graphs
	restoreStates(t, m, c, saved)
	before := m.graphs.replays
	got := decode()
	if m.graphs.replays != before+1 {
		t.Fatalf("the decode step did not replay the graph")
	}
	if d := relDiff(got, want); d > 1e-6 {
		t.Fatalf("graph logits differ from eager by %g relative", d)
	}
	if gotState := saveStates(t, m, c, slots); !slices.EqualFunc(gotState, wantState, bytes.Equal) {
		t.Fatal("the graph step left another KDA state than the eager step")
	}
}

// saveStates copies every KDA layer's conv and recurrent state of the
// first slots slots to the host.
func saveStates(t *testing.T, m *Model, c *Cache, slots int) [][]byte {
	t.Helper()
	var out [][]byte
	for _, lc := range c.Layers {
		for _, x := range []*npu.Tensor{lc.Conv, lc.State} {
			if x != nil {
				x = x.Rows(0, slots)
				b := make([]byte, x.Bytes())
				if err := m.be.Download(b, x); err != nil {
					t.Fatal(err)
				}
				out = append(out, b)
			}
		}
	}
	return out
}

func restoreStates(t *testing.T, m *Model, c *Cache, saved [][]byte) {
	t.Helper()
	i := 0
	for _, lc := range c.Layers {
		for _, x := range []*npu.Tensor{lc.Conv, lc.State} {
			if x != nil {
				if err := m.be.Upload(x.Rows(0, x.Dim(0)), saved[i]); err != nil {
					t.Fatal(err)
				}
				i++
			}
		}
	}
}

// TestCaptureDecodeGraphsRefused: a backend without GraphCapturer, and
// padding outside the cache, are errors, the first one ErrNoGraphs.
func TestCaptureDecodeGraphsRefused(t *testing.T) {
	cfg := testConfig(t, nil)
	for _, c := range []struct {
		name    string
		be      npu.Backend
		opt     GraphOptions
		noGraph bool
	}{
		{"cpu backend", cpu.New(0), GraphOptions{Sizes: []int{1, 2}, MaxBlocks: 2, PadBlock: 4, PadSlot: 2}, true},
		{"pad block outside", graphtest.New(cpu.New(0)), GraphOptions{Sizes: []int{1}, MaxBlocks: 2, PadBlock: 5, PadSlot: 2}, false},
		{"too few pad slots", graphtest.New(cpu.New(0)), GraphOptions{Sizes: []int{4}, MaxBlocks: 2, PadBlock: 4, PadSlot: 2, PadSlots: 1}, false},
		{"no sizes", graphtest.New(cpu.New(0)), GraphOptions{MaxBlocks: 2, PadBlock: 4, PadSlot: 2}, false},
		{"ops not replayable", limited{graphtest.New(cpu.New(0))}, GraphOptions{Sizes: []int{1, 2}, MaxBlocks: 2, PadBlock: 4, PadSlot: 2}, true},
	} {
		m := testModel(t, c.be, cfg, 1)
		cache := must(m.NewCache(5, 8, 3))
		_, err := m.CaptureDecodeGraphs(cache, c.opt)
		if err == nil || errors.Is(err, ErrNoGraphs) != c.noGraph {
			t.Errorf("%s: %v (want ErrNoGraphs: %v)", c.name, err, c.noGraph)
		}
		if m.graphs != nil {
			t.Errorf("%s: graphs left after a failed capture", c.name)
		}
	}
}

// limited is a capturing backend whose ops cannot replay with new
// inputs (npu.GraphLimiter), as the Ascend backend's layout-planned ops.
type limited struct{ *graphtest.Backend }

func (limited) ReplayableOps() error { return errors.New("ops plan on the host") }

func TestGraphPadSlots(t *testing.T) {
	for _, c := range []struct {
		sizes []int
		want  int
	}{
		{[]int{1}, 0}, {[]int{1, 2, 4, 8}, 3}, {[]int{4}, 3}, {[]int{8, 1, 2}, 5}, {[]int{1, 2, 3}, 0},
	} {
		if got := GraphPadSlots(c.sizes); got != c.want {
			t.Errorf("GraphPadSlots(%v) = %d, want %d", c.sizes, got, c.want)
		}
	}
}

// TestScratchGrowthFailsCapture: a scratch buffer that would have to grow
// during a capture fails the step with ErrCapturing before anything is
// freed (the old buffer stays valid for the graphs that use it).
func TestScratchGrowthFailsCapture(t *testing.T) {
	gb := graphtest.New(cpu.New(0))
	s := scratch{be: gb}
	old := s.get("x", npu.F32, 4)
	if err := gb.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	err := func() (err error) {
		defer func() { err = stepFailure(recover()) }()
		s.get("x", npu.F32, 2) // fits: a view, no allocation
		s.get("x", npu.F32, 8)
		return nil
	}()
	if _, cerr := gb.EndCapture(); !errors.Is(err, npu.ErrCapturing) || !errors.Is(cerr, npu.ErrCapturing) {
		t.Fatalf("growing during capture: step error %v, capture error %v; want ErrCapturing", err, cerr)
	}
	if s.bufs["x"].Buffer() != old.Buffer() {
		t.Fatal("the old buffer was replaced")
	}
	npu.MustF32(gb, old) // still allocated
	s.release()
}
