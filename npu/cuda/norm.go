package cuda

import (
	"fmt"

	"github.com/npuserve/npuserve/npu"
)

// The normalisations (kernels/norm.cu): one block per group.

func normGroups(op string, out, x *npu.Tensor, n int) int {
	if n <= 0 || x.Numel()%n != 0 {
		panic(fmt.Sprintf("cuda: %s group size %d does not divide x %v", op, n, x))
	}
	if out.Numel() != x.Numel() {
		panic(fmt.Sprintf("cuda: %s out %v does not match x %v", op, out, x))
	}
	wantF32(op, out, x)
	return x.Numel() / n
}

// wdt is the kernel dtype code of an optional weight (F32 for nil).
func wdt(op string, w *npu.Tensor) int {
	if w == nil {
		return 0
	}
	wantFloat(op, w)
	return dtypeCode(w.DType())
}

// RMSNorm normalises each group of n = w.Numel() elements (the last
// dimension when w is nil, unweighted): y = x * rsqrt(mean(x^2) + eps) * w.
// out may alias x.
func (b *Backend) RMSNorm(out, x, w *npu.Tensor, eps float32) {
	var n int
	if w != nil {
		n = w.Numel()
	} else if x.Rank() > 0 {
		n = x.Dim(-1)
	}
	groups := normGroups("RMSNorm", out, x, n)
	po, px := b.ptr(out), b.ptr(x)
	vec := vec4(n, po, px)
	b.launch("k_rmsnorm", d1(groups), d1(vecThreads(n, vec)), 0,
		po, px, b.ptr(w), pI32(wdt("RMSNorm", w)), pI32(n), pF32(eps), pBool(vec))
}

// vec4 reports whether rows of n floats at these device addresses can be
// read and written as float4s (kernels' vec argument): n % 4 == 0 and
// every address 16-byte aligned.
func vec4(n int, ptrs ...uint64) bool {
	if n%4 != 0 {
		return false
	}
	for _, p := range ptrs {
		if p%16 != 0 {
			return false
		}
	}
	return true
}

// vecThreads is the block size of a one-block-per-row kernel over rows
// of n floats: with float4 access one float4 per thread up to 1024
// threads (a decode step's few rows then cost one memory latency, not
// one per element per thread), else rowThreads. It depends on n only,
// so a row's result does not depend on how many rows run with it.
func vecThreads(n int, vec bool) int {
	if !vec {
		return rowThreads(n)
	}
	return min(max((n/4+31)/32*32, 32), 1024)
}

// RMSNormGated is RMSNorm over groups of n = w.Numel() elements, times
// sigmoid(gate) (gate has x's shape). out may alias x.
func (b *Backend) RMSNormGated(out, x, gate, w *npu.Tensor, eps float32) {
	if w == nil {
		panic("cuda: RMSNormGated needs a weight")
	}
	n := w.Numel()
	groups := normGroups("RMSNormGated", out, x, n)
	if gate.Numel() != x.Numel() {
		panic(fmt.Sprintf("cuda: RMSNormGated gate %v does not match x %v", gate, x))
	}
	wantF32("RMSNormGated", gate)
	b.launch("k_rmsnorm_gated", d1(groups), d1(rowThreads(n)), 0,
		b.ptr(out), b.ptr(x), b.ptr(gate), b.ptr(w), pI32(wdt("RMSNormGated", w)), pI32(n), pF32(eps))
}

// LayerNorm normalises groups of n = w.Numel() elements:
// y = (x - mean) * rsqrt(var + eps) * w + b (b may be nil). out may alias x.
func (b *Backend) LayerNorm(out, x, w, bias *npu.Tensor, eps float32) {
	if w == nil {
		panic("cuda: LayerNorm needs a weight")
	}
	n := w.Numel()
	groups := normGroups("LayerNorm", out, x, n)
	if bias != nil && bias.Numel() != n {
		panic(fmt.Sprintf("cuda: LayerNorm bias %v does not match weight %v", bias, w))
	}
	b.launch("k_layernorm", d1(groups), d1(rowThreads(n)), 0,
		b.ptr(out), b.ptr(x), b.ptr(w), pI32(wdt("LayerNorm", w)), b.ptr(bias), pI32(wdt("LayerNorm", bias)), pI32(n), pF32(eps))
}

// L2Norm divides each group of n elements by sqrt(sum(x^2) + eps). out may
// alias x.
func (b *Backend) L2Norm(out, x *npu.Tensor, n int, eps float32) {
	groups := normGroups("L2Norm", out, x, n)
	b.launch("k_l2norm", d1(groups), d1(rowThreads(n)), 0, b.ptr(out), b.ptr(x), pI32(n), pF32(eps))
}
