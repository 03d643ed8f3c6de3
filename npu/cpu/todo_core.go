package cpu

// TEMPORARY during development: each method below moves to its real file
// when implemented; this file must be deleted before commit.

import "github.com/npuserve/npuserve/npu"

func (be *Backend) Copy(dst, src *npu.Tensor) { panic("cpu: Copy not implemented") }

func (be *Backend) Fill(dst *npu.Tensor, v float32) { panic("cpu: Fill not implemented") }

func (be *Backend) MatMul(out, x, w *npu.Tensor) { panic("cpu: MatMul not implemented") }

func (be *Backend) Add(out, a, b *npu.Tensor) { panic("cpu: Add not implemented") }

func (be *Backend) Mul(out, a, b *npu.Tensor) { panic("cpu: Mul not implemented") }

func (be *Backend) Scale(out, x *npu.Tensor, s float32) { panic("cpu: Scale not implemented") }

func (be *Backend) RMSNorm(out, x, w *npu.Tensor, eps float32) { panic("cpu: RMSNorm not implemented") }

func (be *Backend) RMSNormGated(out, x, gate, w *npu.Tensor, eps float32) {
	panic("cpu: RMSNormGated not implemented")
}

func (be *Backend) LayerNorm(out, x, w, b *npu.Tensor, eps float32) {
	panic("cpu: LayerNorm not implemented")
}

func (be *Backend) Softmax(out, x *npu.Tensor) { panic("cpu: Softmax not implemented") }

func (be *Backend) Sigmoid(out, x *npu.Tensor) { panic("cpu: Sigmoid not implemented") }

func (be *Backend) SiLU(out, x *npu.Tensor) { panic("cpu: SiLU not implemented") }

func (be *Backend) SwiGLU(out, gateUp *npu.Tensor, limit float32) {
	panic("cpu: SwiGLU not implemented")
}

func (be *Backend) L2Norm(out, x *npu.Tensor, n int, eps float32) {
	panic("cpu: L2Norm not implemented")
}

func (be *Backend) Conv1d(out, x, state, w *npu.Tensor, seqs *npu.SeqLayout, silu bool) {
	panic("cpu: Conv1d not implemented")
}

func (be *Backend) Conv1dUpdate(out, x, state, w *npu.Tensor, seqs *npu.SeqLayout, silu bool) {
	panic("cpu: Conv1dUpdate not implemented")
}

func (be *Backend) TopK(vals, idx, x *npu.Tensor, k int) { panic("cpu: TopK not implemented") }

func (be *Backend) Gather(out, src, idx *npu.Tensor) { panic("cpu: Gather not implemented") }

func (be *Backend) Scatter(dst, src, idx *npu.Tensor) { panic("cpu: Scatter not implemented") }

func (be *Backend) Embedding(out, table, ids *npu.Tensor) { panic("cpu: Embedding not implemented") }
