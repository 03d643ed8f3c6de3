package graphtest

// The op methods: each records its call (arguments frozen, a SeqLayout
// copied) while capturing, else runs it on the inner backend.

import "github.com/npuserve/npuserve/npu"

// Copy records or runs the inner backend's Copy.
func (fb *Backend) Copy(dst *npu.Tensor, src *npu.Tensor) {
	fb.op(func() { fb.Backend.Copy(dst, src) })
}

// Fill records or runs the inner backend's Fill.
func (fb *Backend) Fill(dst *npu.Tensor, v float32) {
	fb.op(func() { fb.Backend.Fill(dst, v) })
}

// MatMul records or runs the inner backend's MatMul.
func (fb *Backend) MatMul(out *npu.Tensor, x *npu.Tensor, w *npu.Tensor) {
	fb.op(func() { fb.Backend.MatMul(out, x, w) })
}

// Add records or runs the inner backend's Add.
func (fb *Backend) Add(out *npu.Tensor, a *npu.Tensor, b *npu.Tensor) {
	fb.op(func() { fb.Backend.Add(out, a, b) })
}

// Mul records or runs the inner backend's Mul.
func (fb *Backend) Mul(out *npu.Tensor, a *npu.Tensor, b *npu.Tensor) {
	fb.op(func() { fb.Backend.Mul(out, a, b) })
}

// Scale records or runs the inner backend's Scale.
func (fb *Backend) Scale(out *npu.Tensor, x *npu.Tensor, s float32) {
	fb.op(func() { fb.Backend.Scale(out, x, s) })
}

// RMSNorm records or runs the inner backend's RMSNorm.
func (fb *Backend) RMSNorm(out *npu.Tensor, x *npu.Tensor, w *npu.Tensor, eps float32) {
	fb.op(func() { fb.Backend.RMSNorm(out, x, w, eps) })
}

// RMSNormGated records or runs the inner backend's RMSNormGated.
func (fb *Backend) RMSNormGated(out *npu.Tensor, x *npu.Tensor, gate *npu.Tensor, w *npu.Tensor, eps float32) {
	fb.op(func() { fb.Backend.RMSNormGated(out, x, gate, w, eps) })
}

// LayerNorm records or runs the inner backend's LayerNorm.
func (fb *Backend) LayerNorm(out *npu.Tensor, x *npu.Tensor, w *npu.Tensor, b *npu.Tensor, eps float32) {
	fb.op(func() { fb.Backend.LayerNorm(out, x, w, b, eps) })
}

// Softmax records or runs the inner backend's Softmax.
func (fb *Backend) Softmax(out *npu.Tensor, x *npu.Tensor) {
	fb.op(func() { fb.Backend.Softmax(out, x) })
}

// Sigmoid records or runs the inner backend's Sigmoid.
func (fb *Backend) Sigmoid(out *npu.Tensor, x *npu.Tensor) {
	fb.op(func() { fb.Backend.Sigmoid(out, x) })
}

// SiLU records or runs the inner backend's SiLU.
func (fb *Backend) SiLU(out *npu.Tensor, x *npu.Tensor) {
	fb.op(func() { fb.Backend.SiLU(out, x) })
}

// SwiGLU records or runs the inner backend's SwiGLU.
func (fb *Backend) SwiGLU(out *npu.Tensor, gateUp *npu.Tensor, limit float32) {
	fb.op(func() { fb.Backend.SwiGLU(out, gateUp, limit) })
}

// L2Norm records or runs the inner backend's L2Norm.
func (fb *Backend) L2Norm(out *npu.Tensor, x *npu.Tensor, n int, eps float32) {
	fb.op(func() { fb.Backend.L2Norm(out, x, n, eps) })
}

// Conv1d records or runs the inner backend's Conv1d.
func (fb *Backend) Conv1d(out *npu.Tensor, x *npu.Tensor, state *npu.Tensor, w *npu.Tensor, seqs *npu.SeqLayout, silu bool) {
	seqs = fixLayout(seqs)
	fb.op(func() { fb.Backend.Conv1d(out, x, state, w, seqs, silu) })
}

// Conv1dUpdate records or runs the inner backend's Conv1dUpdate.
func (fb *Backend) Conv1dUpdate(out *npu.Tensor, x *npu.Tensor, state *npu.Tensor, w *npu.Tensor, seqs *npu.SeqLayout, silu bool) {
	seqs = fixLayout(seqs)
	fb.op(func() { fb.Backend.Conv1dUpdate(out, x, state, w, seqs, silu) })
}

// TopK records or runs the inner backend's TopK.
func (fb *Backend) TopK(vals *npu.Tensor, idx *npu.Tensor, x *npu.Tensor, k int) {
	fb.op(func() { fb.Backend.TopK(vals, idx, x, k) })
}

// Gather records or runs the inner backend's Gather.
func (fb *Backend) Gather(out *npu.Tensor, src *npu.Tensor, idx *npu.Tensor) {
	fb.op(func() { fb.Backend.Gather(out, src, idx) })
}

// Scatter records or runs the inner backend's Scatter.
func (fb *Backend) Scatter(dst *npu.Tensor, src *npu.Tensor, idx *npu.Tensor) {
	fb.op(func() { fb.Backend.Scatter(dst, src, idx) })
}

// Embedding records or runs the inner backend's Embedding.
func (fb *Backend) Embedding(out *npu.Tensor, table *npu.Tensor, ids *npu.Tensor) {
	fb.op(func() { fb.Backend.Embedding(out, table, ids) })
}

// HCPre records or runs the inner backend's HCPre.
func (fb *Backend) HCPre(collapsed *npu.Tensor, post *npu.Tensor, comb *npu.Tensor, x *npu.Tensor, fn *npu.Tensor, base *npu.Tensor, scale *npu.Tensor, p npu.HCParams) {
	fb.op(func() { fb.Backend.HCPre(collapsed, post, comb, x, fn, base, scale, p) })
}

// HCPost records or runs the inner backend's HCPost.
func (fb *Backend) HCPost(out *npu.Tensor, y *npu.Tensor, post *npu.Tensor, comb *npu.Tensor, x *npu.Tensor) {
	fb.op(func() { fb.Backend.HCPost(out, y, post, comb, x) })
}

// HCMean records or runs the inner backend's HCMean.
func (fb *Backend) HCMean(out *npu.Tensor, x *npu.Tensor) {
	fb.op(func() { fb.Backend.HCMean(out, x) })
}

// KDAGate records or runs the inner backend's KDAGate.
func (fb *Backend) KDAGate(g *npu.Tensor, f *npu.Tensor, dtBias *npu.Tensor, aLog *npu.Tensor, p npu.KDAGateParams) {
	fb.op(func() { fb.Backend.KDAGate(g, f, dtBias, aLog, p) })
}

// KDA records or runs the inner backend's KDA.
func (fb *Backend) KDA(out *npu.Tensor, qkv *npu.Tensor, g *npu.Tensor, beta *npu.Tensor, state *npu.Tensor, seqs *npu.SeqLayout, heads int, headDim int, chunk int) {
	seqs = fixLayout(seqs)
	fb.op(func() { fb.Backend.KDA(out, qkv, g, beta, state, seqs, heads, headDim, chunk) })
}

// KPool records or runs the inner backend's KPool.
func (fb *Backend) KPool(out *npu.Tensor, keys *npu.Tensor, gates *npu.Tensor, ape *npu.Tensor) {
	fb.op(func() { fb.Backend.KPool(out, keys, gates, ape) })
}

// DSAIndex records or runs the inner backend's DSAIndex.
func (fb *Backend) DSAIndex(out *npu.Tensor, q *npu.Tensor, w *npu.Tensor, pooled *npu.Tensor, seqs *npu.SeqLayout, p npu.IndexParams) {
	seqs = fixLayout(seqs)
	fb.op(func() { fb.Backend.DSAIndex(out, q, w, pooled, seqs, p) })
}

// SparseMLA records or runs the inner backend's SparseMLA.
func (fb *Backend) SparseMLA(out *npu.Tensor, q *npu.Tensor, latents *npu.Tensor, kvB *npu.Tensor, sel *npu.Tensor, seqs *npu.SeqLayout, heads int, dk int, dv int, scale float32) {
	seqs = fixLayout(seqs)
	fb.op(func() { fb.Backend.SparseMLA(out, q, latents, kvB, sel, seqs, heads, dk, dv, scale) })
}

// Router records or runs the inner backend's Router.
func (fb *Backend) Router(weights *npu.Tensor, ids *npu.Tensor, x *npu.Tensor, gate *npu.Tensor, bias *npu.Tensor, p npu.RouterParams) {
	fb.op(func() { fb.Backend.Router(weights, ids, x, gate, bias, p) })
}

// MoE records or runs the inner backend's MoE.
func (fb *Backend) MoE(out *npu.Tensor, x *npu.Tensor, gateUp *npu.Tensor, down *npu.Tensor, weights *npu.Tensor, ids *npu.Tensor, limit float32) {
	fb.op(func() { fb.Backend.MoE(out, x, gateUp, down, weights, ids, limit) })
}

// MatMulQ records or runs the inner backend's MatMulQ.
func (fb *Backend) MatMulQ(out *npu.Tensor, x *npu.Tensor, w *npu.QuantWeight) {
	fb.op(func() { fb.Backend.MatMulQ(out, x, w) })
}

// MoEQ records or runs the inner backend's MoEQ.
func (fb *Backend) MoEQ(out *npu.Tensor, x *npu.Tensor, gateUp *npu.QuantWeight, down *npu.QuantWeight, weights *npu.Tensor, ids *npu.Tensor, limit float32) {
	fb.op(func() { fb.Backend.MoEQ(out, x, gateUp, down, weights, ids, limit) })
}
