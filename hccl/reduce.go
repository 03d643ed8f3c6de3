package hccl

import (
	"fmt"

	"github.com/npuserve/npuserve/npu"
)

// Reduction semantics shared by every TCP algorithm and by the conformance
// suite's reference (which re-implements them independently):
//
//	acc = x[0]; acc = acc ∘ x[1]; …; acc = acc ∘ x[Size()-1]
//
// in rank order, element by element, where x[k] is rank k's contribution.
// F32 accumulates in fp32; BF16 and F16 are widened to fp32, accumulated in
// fp32 and rounded to nearest-even once at the end; I8, I32 and I64
// accumulate in their own type and wrap (two's complement). Max and Min
// return NaN if any contribution is NaN (Go's max/min). Because the order
// is fixed and every element is reduced by exactly one rank (or by all with
// identical inputs), every rank ends with bit-identical results whatever
// the algorithm, which lockstep decoding needs.

// reduceBlock is the number of elements reduced per pass over the inputs:
// small enough for the accumulator to stay in L1.
const reduceBlock = 1024

// reduceInto writes dst[i] = srcs[0][i] ∘ srcs[1][i] ∘ … for elements of
// dtype dt. dst may be (exactly) one of srcs. All slices have equal length.
func reduceInto(dt npu.DType, op ReduceOp, dst []byte, srcs [][]byte) {
	if len(srcs) == 0 {
		panic("hccl: reduceInto with no inputs")
	}
	switch dt {
	case npu.F32:
		reduceNative(op, asF32(dst), typed(srcs, asF32))
	case npu.I32:
		reduceNative(op, asI32(dst), typed(srcs, asI32))
	case npu.I64:
		reduceNative(op, asI64(dst), typed(srcs, asI64))
	case npu.I8:
		reduceNative(op, asI8(dst), typed(srcs, asI8))
	case npu.BF16, npu.F16:
		reduce16(dt, op, asU16(dst), typed(srcs, asU16))
	default:
		panic(fmt.Sprintf("hccl: no reduction for %v", dt))
	}
}

func typed[T any](srcs [][]byte, view func([]byte) []T) [][]T {
	out := make([][]T, len(srcs))
	for i, s := range srcs {
		out[i] = view(s)
	}
	return out
}

type native interface {
	~int8 | ~int32 | ~int64 | ~float32
}

func reduceNative[T native](op ReduceOp, dst []T, srcs [][]T) {
	switch {
	case len(srcs) == 1:
		copy(dst, srcs[0])
		return
	case len(srcs) == 2: // elementwise: safe whichever input dst is
		combine2(op, dst, srcs[0], srcs[1])
		return
	}
	if !aliasesAny(dst, srcs[2:]) { // rank-major straight into dst
		combine2(op, dst, srcs[0], srcs[1])
		for _, s := range srcs[2:] {
			combine(op, dst, s)
		}
		return
	}
	// dst is a later rank's input: accumulate block by block.
	var acc [reduceBlock]T
	for lo := 0; lo < len(dst); lo += reduceBlock {
		hi := min(lo+reduceBlock, len(dst))
		a := acc[:hi-lo]
		combine2(op, a, srcs[0][lo:hi], srcs[1][lo:hi])
		for _, s := range srcs[2:] {
			combine(op, a, s[lo:hi])
		}
		copy(dst[lo:hi], a)
	}
}

// combine2 sets out[i] = a[i] ∘ b[i]; out may be a or b.
func combine2[T native](op ReduceOp, out, a, b []T) {
	a, b = a[:len(out)], b[:len(out)]
	switch op {
	case Sum:
		for i := range out {
			out[i] = a[i] + b[i]
		}
	case Prod:
		for i := range out {
			out[i] = a[i] * b[i]
		}
	case Max:
		for i := range out {
			out[i] = max(a[i], b[i])
		}
	case Min:
		for i := range out {
			out[i] = min(a[i], b[i])
		}
	default:
		panic(fmt.Sprintf("hccl: unknown reduce op %v", op))
	}
}

// combine sets acc[i] = acc[i] ∘ x[i].
func combine[T native](op ReduceOp, acc, x []T) {
	x = x[:len(acc)]
	switch op {
	case Sum:
		for i := range acc {
			acc[i] += x[i]
		}
	case Prod:
		for i := range acc {
			acc[i] *= x[i]
		}
	case Max:
		for i := range acc {
			acc[i] = max(acc[i], x[i])
		}
	case Min:
		for i := range acc {
			acc[i] = min(acc[i], x[i])
		}
	default:
		panic(fmt.Sprintf("hccl: unknown reduce op %v", op))
	}
}

func reduce16(dt npu.DType, op ReduceOp, dst []uint16, srcs [][]uint16) {
	var acc, tmp [reduceBlock]float32
	for lo := 0; lo < len(dst); lo += reduceBlock {
		hi := min(lo+reduceBlock, len(dst))
		a, t := acc[:hi-lo], tmp[:hi-lo]
		npu.WidenHalf(a, dt, srcs[0][lo:hi])
		for _, s := range srcs[1:] {
			npu.WidenHalf(t, dt, s[lo:hi])
			combine(op, a, t)
		}
		npu.NarrowHalf(dst[lo:hi], dt, a)
	}
}
