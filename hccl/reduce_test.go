package hccl

import (
	"math"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

// Unit tests of the reduction kernel's documented semantics; the
// conformance suite checks it against an independent reference on random
// data through every transport path.

func f32Bytes(v ...float32) []byte {
	b := alignedBytes(4 * len(v))
	copy(asF32(b), v)
	return b
}

func TestReduceOrderAndAliasing(t *testing.T) {
	// (1e8 + 1) - 1e8 = 0 in fp32, 1e8 + (1 - 1e8) = 1: the order is rank
	// order, whichever input dst aliases.
	for r := range 3 {
		srcs := [][]byte{f32Bytes(1e8), f32Bytes(1), f32Bytes(-1e8)}
		reduceInto(npu.F32, Sum, srcs[r], srcs)
		if got := asF32(srcs[r])[0]; got != 0 {
			t.Errorf("dst = srcs[%d]: got %v, want 0 ((1e8+1)-1e8 in fp32)", r, got)
		}
	}
}

func TestReduce16RoundsOnce(t *testing.T) {
	// Three BF16 values whose fp32 sum rounds differently from rounding
	// after every addition: 1 + 2^-8 + 2^-8. Per step: 1 + 2^-8 is a tie
	// that rounds to 1, twice: 1. Once: 1 + 2^-7, exact in BF16.
	one, tiny := npu.F32ToBF16(1), npu.F32ToBF16(0x1p-8)
	in := func(v uint16) []byte {
		b := alignedBytes(2)
		asU16(b)[0] = v
		return b
	}
	dst := alignedBytes(2)
	reduceInto(npu.BF16, Sum, dst, [][]byte{in(one), in(tiny), in(tiny)})
	if got := npu.BF16ToF32(asU16(dst)[0]); got != 1+0x1p-7 {
		t.Fatalf("BF16 sum = %v, want %v (fp32 accumulation, one rounding)", got, 1+0x1p-7)
	}
}

func TestReduceSemantics(t *testing.T) {
	nan := float32(math.NaN())
	cases := map[string]struct {
		dt   npu.DType
		op   ReduceOp
		in   [][]byte
		want func(out []byte) bool
	}{
		"max propagates NaN": {npu.F32, Max, [][]byte{f32Bytes(1), f32Bytes(nan), f32Bytes(2)},
			func(b []byte) bool { return math.IsNaN(float64(asF32(b)[0])) }},
		"min propagates NaN": {npu.F32, Min, [][]byte{f32Bytes(nan), f32Bytes(1)},
			func(b []byte) bool { return math.IsNaN(float64(asF32(b)[0])) }},
		"I8 sum wraps": {npu.I8, Sum, [][]byte{{100}, {100}}, func(b []byte) bool { return int8(b[0]) == -56 }},
		"I64 prod": {npu.I64, Prod, [][]byte{i64Bytes(-3), i64Bytes(1 << 40)},
			func(b []byte) bool { return asI64(b)[0] == -3<<40 }},
		"I32 min": {npu.I32, Min, [][]byte{i32Bytes(5), i32Bytes(-7), i32Bytes(2)},
			func(b []byte) bool { return asI32(b)[0] == -7 }},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dst := alignedBytes(len(tc.in[0]))
			reduceInto(tc.dt, tc.op, dst, tc.in)
			if !tc.want(dst) {
				t.Fatalf("got %x", dst)
			}
		})
	}
}

func i64Bytes(v int64) []byte { b := alignedBytes(8); asI64(b)[0] = v; return b }
func i32Bytes(v int32) []byte { b := alignedBytes(4); asI32(b)[0] = v; return b }

func TestBlockBoundsCoverEverything(t *testing.T) {
	for _, n := range []int{0, 1, 3, 17, 1023, 65537} {
		for size := 1; size <= 8; size++ {
			next := 0
			for k := range size {
				lo, hi := blockBounds(n, size, k)
				if lo != next || hi < lo {
					t.Fatalf("n=%d size=%d block %d = [%d,%d), want start %d", n, size, k, lo, hi, next)
				}
				if hi-lo > n/size+1 {
					t.Fatalf("n=%d size=%d block %d has %d elements: unbalanced", n, size, k, hi-lo)
				}
				next = hi
			}
			if next != n {
				t.Fatalf("n=%d size=%d: blocks end at %d", n, size, next)
			}
		}
	}
}

func BenchmarkReduceF32Sum(b *testing.B) {
	const n = 1 << 20
	a, c := alignedBytes(4*n), alignedBytes(4*n)
	b.SetBytes(8 * n)
	for range b.N {
		reduceInto(npu.F32, Sum, a, [][]byte{a, c})
	}
}
