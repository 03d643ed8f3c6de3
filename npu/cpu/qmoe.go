package cpu

import (
	"fmt"

	"github.com/npuserve/npuserve/npu"
)

// MoEQ is MoE with quantized experts (W8A8_DYNAMIC, W8A8_MXFP8 or
// FP8_BLOCK128, as vllm-ascend's and vllm's fused MoE methods):
// assignments are grouped by expert, each expert's tokens go through its
// gate/up projection (activations quantized per token, per MX block or
// per 128 columns), the clamped SwiGLU, and its down projection (the
// SwiGLU output quantized again), and each token's expert outputs are
// summed in ascending expert order and added to out. See npu.Ops.MoEQ.
func (be *Backend) MoEQ(out, x *npu.Tensor, gateUp, down *npu.QuantWeight, weights, ids *npu.Tensor, limit float32) {
	if x.Rank() != 2 || gateUp.Experts() == 0 || down.Experts() != gateUp.Experts() {
		panic(fmt.Sprintf("cpu: MoEQ x %v gateUp %v down %v", x, gateUp, down))
	}
	D := x.Dim(1)
	E, I := gateUp.Experts(), gateUp.N()/2
	if gateUp.N() != 2*I || gateUp.K() != D || down.N() != D || down.K() != I {
		panic(fmt.Sprintf("cpu: MoEQ gateUp %v down %v for x %v", gateUp, down, x))
	}
	for _, w := range []*npu.QuantWeight{gateUp, down} {
		if w.Scheme != npu.QW8A8Dynamic && w.Scheme != npu.QMXFP8 && w.Scheme != npu.QFP8Block {
			panic(fmt.Sprintf("cpu: MoEQ expert weights %v: want W8A8_DYNAMIC, W8A8_MXFP8 or FP8_BLOCK128", w))
		}
	}
	k := moeRouting("MoEQ", out, x, weights, ids)
	if k == 0 {
		return
	}
	pg, pd := be.prepared(gateUp), be.prepared(down)
	be.moeDispatch("MoEQ", out, x, weights, ids, k, E, I, limit,
		func(e int, in, o *npu.Tensor) { be.matMulQ(pg, e, gateUp, F32(o), F32(in), in.Dim(0)) },
		func(e int, in, o *npu.Tensor) { be.matMulQ(pd, e, down, F32(o), F32(in), in.Dim(0)) })
}
