package cuda

import (
	"fmt"
	"math"

	"github.com/npuserve/npuserve/npu"
)

// The copy and elementwise ops (kernels/elementwise.cu). Argument checks
// are the CPU backend's and panic before anything is enqueued.

const elemThreads = 256

// checkConvertible panics unless the converting op converts src to dst
// (npu.Convertible).
func checkConvertible(op string, dst, src npu.DType) {
	if !npu.Convertible(dst, src) {
		panic(fmt.Sprintf("cuda: %s cannot convert %v to %v", op, src, dst))
	}
}

// Copy copies src to dst (same element count), converting between F32,
// BF16, F16 and I32 as the CPU backend does (halves round to nearest
// even; float to I32 truncates toward zero, saturating, NaN giving 0).
// Equal dtypes copy bytes, for any dtype.
func (b *Backend) Copy(dst, src *npu.Tensor) {
	if dst.Numel() != src.Numel() {
		panic(fmt.Sprintf("cuda: Copy %v into %v: element counts differ", src, dst))
	}
	if dst.DType() == src.DType() {
		if err := drvDtoD(b.ctx, b.ptr(dst), b.ptr(src), dst.Bytes(), b.stream); err != nil {
			b.fail(fmt.Errorf("cuda: Copy: %w", err))
		}
		return
	}
	checkConvertible("Copy", dst.DType(), src.DType())
	b.convert(b.ptr(dst), dst.DType(), b.ptr(src), src.DType(), dst.Numel())
}

// convert enqueues k_convert: n elements of src (dtype sdt) into dst
// (dtype ddt), as Copy converts them.
func (b *Backend) convert(dst uint64, ddt npu.DType, src uint64, sdt npu.DType, n int) {
	b.launch("k_convert", b.gridFor(int64(n), elemThreads), d1(elemThreads), 0,
		dst, pI32(dtypeCode(ddt)), src, pI32(dtypeCode(sdt)), pI64(n))
}

// splitBF16 enqueues k_split_bf16: the n fp32 values at x as bf16 hi and
// lo = bf16(x - hi) rows, the two-part activations of the tensor-core
// GEMMs.
func (b *Backend) splitBF16(hi, lo, x uint64, n int) {
	b.launch("k_split_bf16", b.gridFor(int64(n), elemThreads), d1(elemThreads), 0, hi, lo, x, pI64(n))
}

// Fill sets every element of dst (F32; BF16 and F16 receive v rounded to
// nearest even).
func (b *Backend) Fill(dst *npu.Tensor, v float32) {
	var err error
	switch dst.DType() {
	case npu.F32:
		err = drvMemsetD32(b.ctx, b.ptr(dst), math.Float32bits(v), dst.Numel(), b.stream)
	case npu.BF16:
		err = drvMemsetD16(b.ctx, b.ptr(dst), npu.F32ToBF16(v), dst.Numel(), b.stream)
	case npu.F16:
		err = drvMemsetD16(b.ctx, b.ptr(dst), npu.F32ToF16(v), dst.Numel(), b.stream)
	default:
		panic(fmt.Sprintf("cuda: Fill of %v: want F32, BF16 or F16", dst))
	}
	if err != nil {
		b.fail(fmt.Errorf("cuda: Fill: %w", err))
	}
}

func wantF32(op string, ts ...*npu.Tensor) {
	for _, t := range ts {
		if t.DType() != npu.F32 {
			panic(fmt.Sprintf("cuda: %s: want F32 tensor, got %v", op, t))
		}
	}
}

func wantFloat(op string, t *npu.Tensor) {
	switch t.DType() {
	case npu.F32, npu.BF16, npu.F16:
	default:
		panic(fmt.Sprintf("cuda: %s: want an F32, BF16 or F16 weight, got %v", op, t))
	}
}

func (b *Backend) binary(op string, code int, out, a, bt *npu.Tensor) {
	if out.Numel() != a.Numel() {
		panic(fmt.Sprintf("cuda: %s out %v does not match a %v", op, out, a))
	}
	n := a.Numel()
	if bt.Numel() != n && (a.Rank() == 0 || bt.Numel() != a.Dim(-1)) {
		panic(fmt.Sprintf("cuda: %s b %v neither matches a %v nor its last dimension", op, bt, a))
	}
	wantF32(op, out, a)
	wantFloat(op, bt)
	if n == 0 {
		return
	}
	b.launch("k_binary", b.gridFor(int64(n), elemThreads), d1(elemThreads), 0,
		b.ptr(out), b.ptr(a), b.ptr(bt), pI32(dtypeCode(bt.DType())), pI64(n), pI64(bt.Numel()), pI32(code))
}

// Add computes out = a + b; b has a's shape or is one row broadcast over
// a's rows (F32, BF16 or F16). out may alias a.
func (b *Backend) Add(out, a, bt *npu.Tensor) { b.binary("Add", 0, out, a, bt) }

// Mul computes out = a * b with Add's broadcasting. out may alias a.
func (b *Backend) Mul(out, a, bt *npu.Tensor) { b.binary("Mul", 1, out, a, bt) }

func (b *Backend) unary(op, kernel string, out, x *npu.Tensor, extra ...uint64) {
	if out.Numel() != x.Numel() {
		panic(fmt.Sprintf("cuda: %s out %v does not match x %v", op, out, x))
	}
	wantF32(op, out, x)
	n := x.Numel()
	if n == 0 {
		return
	}
	args := []uint64{b.ptr(out), b.ptr(x)}
	args = append(args, extra...)
	args = append(args, pI64(n))
	b.launch(kernel, b.gridFor(int64(n), elemThreads), d1(elemThreads), 0, args...)
}

// Scale computes out = s * x. out may alias x.
func (b *Backend) Scale(out, x *npu.Tensor, s float32) { b.unary("Scale", "k_scale", out, x, pF32(s)) }

// Sigmoid computes out = 1/(1+exp(-x)). out may alias x.
func (b *Backend) Sigmoid(out, x *npu.Tensor) { b.unary("Sigmoid", "k_sigmoid", out, x) }

// SiLU computes out = x*sigmoid(x). out may alias x.
func (b *Backend) SiLU(out, x *npu.Tensor) { b.unary("SiLU", "k_silu", out, x) }

// SwiGLU takes gateUp [M, 2I] (gate columns first) and writes
// out[M, I] = silu(min(gate, limit)) * clamp(up, -limit, limit); a limit
// that is not positive (or is +Inf) means no clamping.
func (b *Backend) SwiGLU(out, gateUp *npu.Tensor, limit float32) {
	if gateUp.Rank() == 0 || gateUp.Dim(-1)%2 != 0 {
		panic(fmt.Sprintf("cuda: SwiGLU gateUp %v needs an even last dimension", gateUp))
	}
	inter := gateUp.Dim(-1) / 2
	rows := gateUp.Numel() / max(1, gateUp.Dim(-1))
	if out.Numel() != rows*inter || (out.Rank() > 0 && out.Dim(-1) != inter) {
		panic(fmt.Sprintf("cuda: SwiGLU out %v does not match gateUp %v", out, gateUp))
	}
	wantF32("SwiGLU", out, gateUp)
	if rows*inter == 0 {
		return
	}
	clamp := limit > 0 && !math.IsInf(float64(limit), 1)
	b.launch("k_swiglu", b.gridFor(int64(rows*inter), elemThreads), d1(elemThreads), 0,
		b.ptr(out), b.ptr(gateUp), pI64(rows), pI32(inter), pF32(limit), pBool(clamp))
}

// rowThreads is the block size of a one-block-per-row kernel over rows of
// n elements.
func rowThreads(n int) int {
	switch {
	case n <= 128:
		return 32
	case n <= 1024:
		return 128
	case n <= 4096:
		return 256
	}
	return 512
}

// Softmax over the last dimension; a row whose maximum is -Inf comes out
// as zeros. out may alias x.
func (b *Backend) Softmax(out, x *npu.Tensor) {
	if out.Numel() != x.Numel() {
		panic(fmt.Sprintf("cuda: Softmax out %v does not match x %v", out, x))
	}
	wantF32("Softmax", out, x)
	if x.Rank() == 0 || x.Numel() == 0 {
		return
	}
	d := x.Dim(-1)
	b.launch("k_softmax", d1(x.Numel()/d), d1(rowThreads(d)), 0, b.ptr(out), b.ptr(x), pI32(d))
}
