package glm5next

import (
	"testing"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/cpu"
)

// markRecorder is the CPU backend with npu.WeightMarker, recording the
// tensors it is told are read-only.
type markRecorder struct {
	npu.Backend
	marked map[*npu.Tensor]bool
}

func (r *markRecorder) MarkWeights(ts ...*npu.Tensor) {
	for _, t := range ts {
		r.marked[t] = true
	}
}

// TestWeightsMarked: assembling a model marks every tensor it owns (and
// only those) on a backend that asks for it, so the CUDA backend's early
// weight loads see all the model's weights and no activation.
func TestWeightsMarked(t *testing.T) {
	rec := &markRecorder{Backend: cpu.New(1), marked: map[*npu.Tensor]bool{}}
	m := NewRandom(rec, testConfig(t, nil), "float32", 3)
	defer m.Close()
	if len(m.owned) == 0 {
		t.Fatal("the model owns no tensors")
	}
	owned := map[*npu.Tensor]bool{}
	for _, w := range m.owned {
		owned[w] = true
		if !rec.marked[w] {
			t.Errorf("weight %v not marked", w)
		}
	}
	for w := range rec.marked {
		if !owned[w] {
			t.Errorf("%v marked but not a weight the model owns", w)
		}
	}
}
