package cpu

// TEMPORARY during development: each method below moves to its real file
// when implemented; this file must be deleted before commit.

import "github.com/npuserve/npuserve/npu"

func (be *Backend) KDAGate(g, f, dtBias, aLog *npu.Tensor, p npu.KDAGateParams) {
	panic("cpu: KDAGate not implemented")
}

func (be *Backend) KDA(out, qkv, g, beta, state *npu.Tensor, seqs *npu.SeqLayout, heads, headDim, chunk int) {
	panic("cpu: KDA not implemented")
}

func (be *Backend) KPool(out, keys, gates, ape *npu.Tensor) { panic("cpu: KPool not implemented") }

func (be *Backend) DSAIndex(out, q, w, pooled *npu.Tensor, seqs *npu.SeqLayout, p npu.IndexParams) {
	panic("cpu: DSAIndex not implemented")
}

func (be *Backend) SparseMLA(out, q, latents, kvB, sel *npu.Tensor, seqs *npu.SeqLayout, heads, dk, dv int, scale float32) {
	panic("cpu: SparseMLA not implemented")
}
