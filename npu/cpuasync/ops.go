package cpuasync

import (
	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/cpu"
)

// The ops of npu.Ops: each queues the CPU backend's kernel with its
// arguments (see the package comment) and returns before it runs.

// The CPU kernels include the optional device-side sampling reduction.
var _ npu.SampleReducer = (*Backend)(nil)
var _ npu.SampleHistogrammer = (*Backend)(nil)

// layout copies a SeqLayout at enqueue time: the caller may reuse its
// struct for the next op at once (nil stays nil for the kernel to reject).
func layout(s *npu.SeqLayout) *npu.SeqLayout {
	if s == nil {
		return nil
	}
	c := *s
	return &c
}

// Copy queues cpu.Backend.Copy.
func (b *Backend) Copy(dst, src *npu.Tensor) {
	b.op("Copy", func(c *cpu.Backend) { c.Copy(dst, src) })
}

// Fill queues cpu.Backend.Fill.
func (b *Backend) Fill(dst *npu.Tensor, v float32) {
	b.op("Fill", func(c *cpu.Backend) { c.Fill(dst, v) })
}

// MatMul queues cpu.Backend.MatMul.
func (b *Backend) MatMul(out, x, w *npu.Tensor) {
	b.op("MatMul", func(c *cpu.Backend) { c.MatMul(out, x, w) })
}

// Add queues cpu.Backend.Add.
func (b *Backend) Add(out, x, y *npu.Tensor) {
	b.op("Add", func(c *cpu.Backend) { c.Add(out, x, y) })
}

// Mul queues cpu.Backend.Mul.
func (b *Backend) Mul(out, x, y *npu.Tensor) {
	b.op("Mul", func(c *cpu.Backend) { c.Mul(out, x, y) })
}

// Scale queues cpu.Backend.Scale.
func (b *Backend) Scale(out, x *npu.Tensor, s float32) {
	b.op("Scale", func(c *cpu.Backend) { c.Scale(out, x, s) })
}

// RMSNorm queues cpu.Backend.RMSNorm.
func (b *Backend) RMSNorm(out, x, w *npu.Tensor, eps float32) {
	b.op("RMSNorm", func(c *cpu.Backend) { c.RMSNorm(out, x, w, eps) })
}

// RMSNormGated queues cpu.Backend.RMSNormGated.
func (b *Backend) RMSNormGated(out, x, gate, w *npu.Tensor, eps float32) {
	b.op("RMSNormGated", func(c *cpu.Backend) { c.RMSNormGated(out, x, gate, w, eps) })
}

// LayerNorm queues cpu.Backend.LayerNorm.
func (b *Backend) LayerNorm(out, x, w, bias *npu.Tensor, eps float32) {
	b.op("LayerNorm", func(c *cpu.Backend) { c.LayerNorm(out, x, w, bias, eps) })
}

// Softmax queues cpu.Backend.Softmax.
func (b *Backend) Softmax(out, x *npu.Tensor) {
	b.op("Softmax", func(c *cpu.Backend) { c.Softmax(out, x) })
}

// Sigmoid queues cpu.Backend.Sigmoid.
func (b *Backend) Sigmoid(out, x *npu.Tensor) {
	b.op("Sigmoid", func(c *cpu.Backend) { c.Sigmoid(out, x) })
}

// SiLU queues cpu.Backend.SiLU.
func (b *Backend) SiLU(out, x *npu.Tensor) {
	b.op("SiLU", func(c *cpu.Backend) { c.SiLU(out, x) })
}

// SwiGLU queues cpu.Backend.SwiGLU.
func (b *Backend) SwiGLU(out, gateUp *npu.Tensor, limit float32) {
	b.op("SwiGLU", func(c *cpu.Backend) { c.SwiGLU(out, gateUp, limit) })
}

// L2Norm queues cpu.Backend.L2Norm.
func (b *Backend) L2Norm(out, x *npu.Tensor, n int, eps float32) {
	b.op("L2Norm", func(c *cpu.Backend) { c.L2Norm(out, x, n, eps) })
}

// Conv1d queues cpu.Backend.Conv1d.
func (b *Backend) Conv1d(out, x, state, w *npu.Tensor, seqs *npu.SeqLayout, silu bool) {
	l := layout(seqs)
	b.op("Conv1d", func(c *cpu.Backend) { c.Conv1d(out, x, state, w, l, silu) })
}

// Conv1dUpdate queues cpu.Backend.Conv1dUpdate.
func (b *Backend) Conv1dUpdate(out, x, state, w *npu.Tensor, seqs *npu.SeqLayout, silu bool) {
	l := layout(seqs)
	b.op("Conv1dUpdate", func(c *cpu.Backend) { c.Conv1dUpdate(out, x, state, w, l, silu) })
}

// TopK queues cpu.Backend.TopK.
func (b *Backend) TopK(vals, idx, x *npu.Tensor, k int) {
	b.op("TopK", func(c *cpu.Backend) { c.TopK(vals, idx, x, k) })
}

// SampleReduce queues cpu.Backend.SampleReduce (npu.SampleReducer).
func (b *Backend) SampleReduce(vals, ids, stats, logits *npu.Tensor, k int) {
	b.op("SampleReduce", func(c *cpu.Backend) { c.SampleReduce(vals, ids, stats, logits, k) })
}

// SampleHist queues cpu.Backend.SampleHist (npu.SampleHistogrammer).
func (b *Backend) SampleHist(hist, logits, rows, params *npu.Tensor) {
	b.op("SampleHist", func(c *cpu.Backend) { c.SampleHist(hist, logits, rows, params) })
}

// SampleBinMembers queues cpu.Backend.SampleBinMembers
// (npu.SampleHistogrammer).
func (b *Backend) SampleBinMembers(vals, ids, counts, logits, rows, params, bins *npu.Tensor) {
	b.op("SampleBinMembers", func(c *cpu.Backend) { c.SampleBinMembers(vals, ids, counts, logits, rows, params, bins) })
}

// Gather queues cpu.Backend.Gather.
func (b *Backend) Gather(out, src, idx *npu.Tensor) {
	b.op("Gather", func(c *cpu.Backend) { c.Gather(out, src, idx) })
}

// Scatter queues cpu.Backend.Scatter.
func (b *Backend) Scatter(dst, src, idx *npu.Tensor) {
	b.op("Scatter", func(c *cpu.Backend) { c.Scatter(dst, src, idx) })
}

// Embedding queues cpu.Backend.Embedding.
func (b *Backend) Embedding(out, table, ids *npu.Tensor) {
	b.op("Embedding", func(c *cpu.Backend) { c.Embedding(out, table, ids) })
}

// HCPre queues cpu.Backend.HCPre.
func (b *Backend) HCPre(collapsed, post, comb, x, fn, base, scale *npu.Tensor, p npu.HCParams) {
	b.op("HCPre", func(c *cpu.Backend) { c.HCPre(collapsed, post, comb, x, fn, base, scale, p) })
}

// HCPost queues cpu.Backend.HCPost.
func (b *Backend) HCPost(out, y, post, comb, x *npu.Tensor) {
	b.op("HCPost", func(c *cpu.Backend) { c.HCPost(out, y, post, comb, x) })
}

// HCMean queues cpu.Backend.HCMean.
func (b *Backend) HCMean(out, x *npu.Tensor) {
	b.op("HCMean", func(c *cpu.Backend) { c.HCMean(out, x) })
}

// KDAGate queues cpu.Backend.KDAGate.
func (b *Backend) KDAGate(g, f, dtBias, aLog *npu.Tensor, p npu.KDAGateParams) {
	b.op("KDAGate", func(c *cpu.Backend) { c.KDAGate(g, f, dtBias, aLog, p) })
}

// KDA queues cpu.Backend.KDA.
func (b *Backend) KDA(out, qkv, g, beta, state *npu.Tensor, seqs *npu.SeqLayout, heads, headDim, chunk int) {
	l := layout(seqs)
	b.op("KDA", func(c *cpu.Backend) { c.KDA(out, qkv, g, beta, state, l, heads, headDim, chunk) })
}

// KPool queues cpu.Backend.KPool.
func (b *Backend) KPool(out, keys, gates, ape *npu.Tensor) {
	b.op("KPool", func(c *cpu.Backend) { c.KPool(out, keys, gates, ape) })
}

// DSAIndex queues cpu.Backend.DSAIndex.
func (b *Backend) DSAIndex(out, q, w, pooled *npu.Tensor, seqs *npu.SeqLayout, p npu.IndexParams) {
	l := layout(seqs)
	b.op("DSAIndex", func(c *cpu.Backend) { c.DSAIndex(out, q, w, pooled, l, p) })
}

// SparseMLA queues cpu.Backend.SparseMLA.
func (b *Backend) SparseMLA(out, q, latents, kvB, sel *npu.Tensor, seqs *npu.SeqLayout, heads, dk, dv int, scale float32) {
	l := layout(seqs)
	b.op("SparseMLA", func(c *cpu.Backend) { c.SparseMLA(out, q, latents, kvB, sel, l, heads, dk, dv, scale) })
}

// Router queues cpu.Backend.Router.
func (b *Backend) Router(weights, ids, x, gate, bias *npu.Tensor, p npu.RouterParams) {
	b.op("Router", func(c *cpu.Backend) { c.Router(weights, ids, x, gate, bias, p) })
}

// MoE queues cpu.Backend.MoE.
func (b *Backend) MoE(out, x, gateUp, down, weights, ids *npu.Tensor, limit float32) {
	b.op("MoE", func(c *cpu.Backend) { c.MoE(out, x, gateUp, down, weights, ids, limit) })
}

// PrepareQuant queues cpu.Backend.PrepareQuant: preparing reads the
// weight's tensors, which may still be uploading.
func (b *Backend) PrepareQuant(w *npu.QuantWeight) {
	b.op("PrepareQuant", func(c *cpu.Backend) { c.PrepareQuant(w) })
}

// MatMulQ queues cpu.Backend.MatMulQ.
func (b *Backend) MatMulQ(out, x *npu.Tensor, w *npu.QuantWeight) {
	b.op("MatMulQ", func(c *cpu.Backend) { c.MatMulQ(out, x, w) })
}

// MoEQ queues cpu.Backend.MoEQ.
func (b *Backend) MoEQ(out, x *npu.Tensor, gateUp, down *npu.QuantWeight, weights, ids *npu.Tensor, limit float32) {
	b.op("MoEQ", func(c *cpu.Backend) { c.MoEQ(out, x, gateUp, down, weights, ids, limit) })
}
