package glm5next

import "github.com/npuserve/npuserve/npu"

// linear is one matmul weight of the model, PyTorch Linear layout [N, K]:
// either a float tensor (F32/BF16/F16) or a quantized weight (W8A8,
// W8A8_DYNAMIC, W8A8_MXFP8). Model code multiplies through Model.linear
// and never looks at which one it is.
type linear struct {
	w *npu.Tensor
	q *npu.QuantWeight
	// modules are the checkpoint modules (canonical prefixes without
	// ".weight") whose rows the weight holds, in order: one for a plain
	// linear, several for a fused one (q|k|v, gate|up).
	modules []string
}

// floatLinear wraps a float weight.
func floatLinear(w *npu.Tensor, modules ...string) *linear {
	return &linear{w: w, modules: modules}
}

// N is the output width.
func (l *linear) N() int {
	if l.q != nil {
		return l.q.N()
	}
	return l.w.Dim(0)
}

// K is the input width.
func (l *linear) K() int {
	if l.q != nil {
		return l.q.K()
	}
	return l.w.Dim(-1)
}

// String describes the weight.
func (l *linear) String() string {
	if l.q != nil {
		return l.q.String()
	}
	return l.w.String()
}

// linear computes out = x · l^T through MatMul or MatMulQ, first showing
// the input to the forward's ObserveLinear hook (calibration).
func (m *Model) linear(out, x *npu.Tensor, l *linear) {
	if m.observeLinear != nil {
		m.observeLinear(l.modules, x)
	}
	if l.q != nil {
		m.be.MatMulQ(out, x, l.q)
		return
	}
	m.be.MatMul(out, x, l.w)
}

// experts are the routed experts of a MoE layer, stacked: float gateUp
// [E, 2I, D] and down [E, D, I], or their quantized counterparts.
type experts struct {
	gateUp, down   *npu.Tensor
	qGateUp, qDown *npu.QuantWeight
}

// intermediate is the experts' intermediate size I.
func (e *experts) intermediate() int {
	if e.qDown != nil {
		return e.qDown.K()
	}
	return e.down.Dim(2)
}

// moe adds the routed experts' outputs to out (MoE or MoEQ).
func (m *Model) moe(out, h *npu.Tensor, e *experts, wts, ids *npu.Tensor) {
	if e.qGateUp != nil {
		m.be.MoEQ(out, h, e.qGateUp, e.qDown, wts, ids, m.d.Limit)
		return
	}
	m.be.MoE(out, h, e.gateUp, e.down, wts, ids, m.d.Limit)
}

// quantWeights lists every quantized weight of the model.
func (m *Model) quantWeights() []*npu.QuantWeight {
	var out []*npu.QuantWeight
	add := func(ls ...*linear) {
		for _, l := range ls {
			if l != nil && l.q != nil {
				out = append(out, l.q)
			}
		}
	}
	add(m.lmHead)
	for _, ly := range m.layers {
		if w := ly.kda; w != nil {
			add(w.qkv, w.fA, w.fB, w.b, w.gA, w.gB, w.o)
		}
		if w := ly.mla; w != nil {
			add(w.qA, w.qB, w.kvA, w.o)
			if x := w.idx; x != nil {
				add(x.wqB, x.wk, x.weightsProj, x.gate)
			}
		}
		if w := ly.mlp; w != nil {
			add(w.gateUp, w.down)
		}
		if w := ly.moe; w != nil {
			if w.shared != nil {
				add(w.shared.gateUp, w.shared.down)
			}
			if w.experts.qGateUp != nil {
				out = append(out, w.experts.qGateUp, w.experts.qDown)
			}
		}
	}
	return out
}

// Quantized reports whether any weight of the model is quantized.
func (m *Model) Quantized() bool { return len(m.quantWeights()) > 0 }
