package core

import (
	"errors"
	"slices"
	"testing"

	"github.com/npuserve/npuserve/engine/model"
	"github.com/npuserve/npuserve/engine/model/glm5next"
	"github.com/npuserve/npuserve/engine/sampling"
	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/cpu"
	"github.com/npuserve/npuserve/npu/graphtest"
	"github.com/npuserve/npuserve/npu/nputest"
)

// graphBackend is the test device when it captures graphs (cuda under
// NPUSERVE_TEST_DEVICE=cuda), else the capturing test wrapper around it.
func graphBackend() npu.Backend {
	be := nputest.Open(0)
	if _, ok := be.(npu.GraphCapturer); ok {
		return be
	}
	return graphtest.New(be)
}

// TestDecodeGraphsGreedyMatchesRunner: the engine with decode graphs
// (capture sizes that pad, batches above the largest size, sequences
// finishing at different steps, chunked prefill mixed with decodes)
// gives the eager runner's greedy tokens. On the GPU host
// (NPUSERVE_TEST_DEVICE=cuda) it runs on CUDA graphs.
func TestDecodeGraphsGreedyMatchesRunner(t *testing.T) {
	ps := prompts(6, 11)
	maxTk := func(i int) int { return 5 + 3*i }
	ref := reference(t, tiny(t), ps, maxTk)
	be := graphBackend()
	m, err := glm5next.Load(be, tinyDir, glm5next.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, v := range []struct {
		name  string
		opt   Options
		sizes []int
	}{
		{"pads to 4 and 6", Options{MaxNumSeqs: 6, MaxNumBatchedTokens: 16, BlockSize: 8, NumBlocks: 96}, []int{1, 4, 6}},
		{"largest below the batch", Options{MaxNumSeqs: 6, MaxNumBatchedTokens: 64, BlockSize: 4, NumBlocks: 160}, []int{2, 3}},
	} {
		t.Run(v.name, func(t *testing.T) {
			var rep model.GraphReport
			var repErr error
			calls := 0
			v.opt.DecodeGraphs = v.sizes
			v.opt.OnGraphs = func(r model.GraphReport, err error) { rep, repErr, calls = r, err, calls+1 }
			e := newEngine(t, m, v.opt)
			if calls != 1 || repErr != nil || !slices.Equal(rep.Sizes, v.sizes) {
				t.Fatalf("OnGraphs called %d times with %+v, %v", calls, rep, repErr)
			}
			got, _ := runAll(t, e, ps, func(i int) sampling.Params { return greedy(maxTk(i)) })
			for i := range ps {
				if !slices.Equal(got[i], ref[i]) {
					t.Fatalf("request %d with graphs: %v, runner %v", i, got[i], ref[i])
				}
			}
			waitIdle(t, e)
			if fb, ok := be.(*graphtest.Backend); ok && fb.Launches == 0 {
				t.Fatal("no step replayed a graph")
			}
		})
	}
}

// TestDecodeGraphsWithoutEffect: on a backend that cannot capture, the
// engine says so once through OnGraphs and runs eagerly.
func TestDecodeGraphsWithoutEffect(t *testing.T) {
	m, err := glm5next.Load(cpu.New(0), tinyDir, glm5next.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var errs []error
	e := newEngine(t, m, Options{MaxNumSeqs: 2, NumBlocks: 32, BlockSize: 8, DecodeGraphs: []int{1, 2},
		OnGraphs: func(_ model.GraphReport, err error) { errs = append(errs, err) }})
	if len(errs) != 1 || !errors.Is(errs[0], model.ErrNoGraphs) {
		t.Fatalf("OnGraphs errors %v, want one ErrNoGraphs", errs)
	}
	got, _ := runAll(t, e, prompts(2, 3), func(int) sampling.Params { return greedy(4) })
	if len(got) != 2 || len(got[0]) != 4 {
		t.Fatalf("eager run gave %v", got)
	}
}
