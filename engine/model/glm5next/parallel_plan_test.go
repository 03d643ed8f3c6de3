package glm5next

import (
	"fmt"
	"testing"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/nputest"
)

// placeholderComm is a communicator of the right size and rank for
// building a rank's weights; it runs no collectives.
type placeholderComm struct{ rank, size int }

func (c placeholderComm) Rank() int                                { return c.rank }
func (c placeholderComm) Size() int                                { return c.size }
func (placeholderComm) AllReduce(*npu.Tensor, hccl.ReduceOp) error { panic("unused") }
func (placeholderComm) AllGather(_, _ *npu.Tensor) error           { panic("unused") }
func (placeholderComm) ReduceScatter(_, _ *npu.Tensor, _ hccl.ReduceOp) error {
	panic("unused")
}
func (placeholderComm) AllToAll(_, _ *npu.Tensor) error { panic("unused") }
func (placeholderComm) AllToAllV(*npu.Tensor, []int, *npu.Tensor, []int) error {
	panic("unused")
}
func (placeholderComm) Broadcast(*npu.Tensor, int) error { panic("unused") }
func (placeholderComm) Barrier() error                   { panic("unused") }
func (placeholderComm) Send(*npu.Tensor, int) error      { panic("unused") }
func (placeholderComm) Recv(*npu.Tensor, int) error      { panic("unused") }
func (placeholderComm) Abort(error)                      {}
func (placeholderComm) Close() error                     { return nil }

// params is the number of weight elements the model holds.
func (m *Model) params() int64 {
	var n int64
	for _, t := range m.owned {
		n += int64(t.Numel())
	}
	return n
}

// TestParallelMatchesPlan: every rank holds exactly the parameters
// config.BuildPlan's per-rank plan says (model and plan shard alike), the
// cache state per sequence is the plan's, and the ranks' shares add up to
// the whole model plus the replicated parts.
func TestParallelMatchesPlan(t *testing.T) {
	dir := "../../../testdata/glm5next/tiny"
	cfg, err := config.LoadModel(dir)
	if err != nil {
		t.Skip(err)
	}
	single := NewRandom(nputest.Open(1), cfg, "float32", 1)
	defer single.Close()
	cases := []struct {
		tp, dp int
		ep     bool
	}{
		{2, 1, false}, {4, 1, false}, {1, 2, true}, {2, 2, true}, {1, 3, true}, {2, 1, true},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("TP%d DP%d EP %v", tc.tp, tc.dp, tc.ep), func(t *testing.T) {
			as := []config.Assignment{{Flag: "--device", Value: "cpu"}, {Flag: "-tp", Value: fmt.Sprint(tc.tp)}, {Flag: "-dp", Value: fmt.Sprint(tc.dp)}}
			if tc.ep {
				as = append(as, config.Assignment{Flag: "--enable-expert-parallel", Bool: true})
			}
			a, err := config.Build(as, []string{dir})
			if err != nil {
				t.Fatal(err)
			}
			plan, err := config.BuildPlan(a, cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			n := tc.dp * tc.tp
			var sum int64
			for _, r := range plan.Ranks {
				p := &Parallel{TPSize: tc.tp, TPRank: r.TPRank, EPSize: 1}
				if tc.tp > 1 {
					p.TP = placeholderComm{r.TPRank, tc.tp}
				}
				if tc.ep {
					p.EPSize, p.EPRank, p.EP = n, r.EPRank, placeholderComm{r.EPRank, n}
				}
				m, err := NewRandomParallel(nputest.Open(1), cfg, "float32", 1, p)
				if err != nil {
					t.Fatal(err)
				}
				if err := m.SetCacheDType(npu.F32); err != nil { // the plan's cpu default
					t.Fatal(err)
				}
				if got := m.params(); got != r.Params {
					t.Errorf("rank %d (dp %d tp %d ep %d): model holds %d parameters, plan says %d", r.Rank, r.DPRank, r.TPRank, r.EPRank, got, r.Params)
				}
				if tc.ep && (m.par.first != r.FirstExpert || m.par.n != r.Experts) {
					t.Errorf("rank %d: experts [%d, +%d), plan [%d, +%d)", r.Rank, m.par.first, m.par.n, r.FirstExpert, r.Experts)
				}
				if got, want := m.BytesPerSequenceState(), plan.Cache.BytesPerSequenceState; got != want {
					t.Errorf("rank %d: state per sequence %d bytes, plan %d", r.Rank, got, want)
				}
				if got, want := m.BytesPerToken(), plan.Cache.BytesPerToken; got != want {
					t.Errorf("rank %d: cache per token %d bytes, plan %d", r.Rank, got, want)
				}
				if r.DPRank == 0 {
					sum += m.params()
				}
				m.Close()
			}
			if tc.dp == 1 && !tc.ep && sum <= single.params() {
				t.Errorf("TP ranks hold %d parameters together, the whole model %d: replicated parts missing", sum, single.params())
			}
		})
	}
}
