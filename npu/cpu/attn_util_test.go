package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

// Helpers of the attention-op tests (KDA, KPool, DSAIndex, SparseMLA).

// atTensor makes a tensor of dtype dt (F32, BF16 or F16) holding vals and
// returns it with the values it actually holds.
func atTensor(be *Backend, dt npu.DType, vals []float64, shape ...int) (*npu.Tensor, []float64) {
	t := coreTensor(be, dt, vals, shape...)
	b := make([]byte, t.Bytes())
	if err := be.Download(b, t); err != nil {
		panic(err)
	}
	return t, coreDecode(b, dt)
}

// atF32 makes an F32 tensor; vals are rounded to fp32 in place so that
// references see exactly what the op sees.
func atF32(be *Backend, vals []float64, shape ...int) *npu.Tensor {
	t, held := atTensor(be, npu.F32, vals, shape...)
	copy(vals, held)
	return t
}

// atI32 makes an I32 tensor.
func atI32(be *Backend, vals []int32, shape ...int) *npu.Tensor {
	t := npu.Must(be.Alloc(npu.I32, shape...))
	copy(I32(t), vals)
	return t
}

// atNormal returns n values drawn from N(mean, std²).
func atNormal(r *rand.Rand, n int, mean, std float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = mean + std*r.NormFloat64()
	}
	return v
}

// atRelErr is max|got−want| / max|want| (absolute when want is all zero).
func atRelErr(got []float32, want []float64) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	var e, m float64
	for i, w := range want {
		g := float64(got[i])
		if math.IsNaN(g) != math.IsNaN(w) {
			return math.Inf(1)
		}
		e = max(e, math.Abs(g-w))
		m = max(m, math.Abs(w))
	}
	if m == 0 {
		return e
	}
	return e / m
}

// atCheck fails t when got differs from want by more than tol relative to
// want's largest magnitude.
func atCheck(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	if e := atRelErr(got, want); !(e <= tol) {
		t.Errorf("%s: relative error %.3g > %.3g", what, e, tol)
	}
}

// atPerm returns a random permutation of [0, n) as int32.
func atPerm(r *rand.Rand, n int) []int32 {
	p := r.Perm(n)
	out := make([]int32, n)
	for i, v := range p {
		out[i] = int32(v)
	}
	return out
}

// atPanics reports whether fn panics.
func atPanics(fn func()) (panicked bool) {
	defer func() { panicked = recover() != nil }()
	fn()
	return false
}

// atPanicMsg runs fn and returns what it panicked with, formatted ("" when
// it did not panic).
func atPanicMsg(fn func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
			if msg == "" {
				msg = "(empty panic)"
			}
		}
	}()
	fn()
	return ""
}

// upLayout checks and uploads the host layout l and returns its device
// form (the buffer is released when the test ends).
func upLayout(tb testing.TB, be npu.Memory, l *npu.BatchLayout) *npu.SeqLayout {
	tb.Helper()
	s, buf, err := l.Upload(be)
	if err != nil {
		tb.Fatalf("layout: %v", err)
	}
	tb.Cleanup(func() { be.Free(buf) })
	return s
}

// rawLayout is the device form of l without BatchLayout.Check or Encode's
// trimming: block tables as given (padded with -1 to the widest), so that a
// test can hand an op a layout the host side would refuse.
func rawLayout(be *Backend, l *npu.BatchLayout) *npu.SeqLayout {
	B, w := len(l.QueryStart)-1, 0
	for _, bt := range l.BlockTables {
		w = max(w, len(bt))
	}
	i32 := func(v []int) []int32 {
		out := make([]int32, len(v))
		for i, x := range v {
			out[i] = int32(x)
		}
		return out
	}
	flat := make([]int32, 0, B*w)
	for _, bt := range l.BlockTables {
		flat = append(flat, bt...)
		for range w - len(bt) {
			flat = append(flat, -1)
		}
	}
	return &npu.SeqLayout{
		NumSeqs: B, NumRows: l.QueryStart[B], MaxBlocks: w, BlockSize: l.BlockSize,
		QueryStart: atI32(be, i32(l.QueryStart), len(l.QueryStart)),
		Pos:        atI32(be, i32(l.Pos), len(l.Pos)),
		StateSlot:  atI32(be, i32(l.StateSlot), len(l.StateSlot)),
		BlockTable: atI32(be, flat, len(l.BlockTables), w),
	}
}

// stateLayoutBlock is the block size of stateLayout.
const stateLayoutBlock = 16

// stateLayout is the host layout of sequences that only keep fixed-size
// state (conv, KDA): sequence b has rows [qs[b], qs[b+1]) at positions from
// pos[b] (nil: all 0) and state slot slots[b]; its block tables (contiguous
// blocks, sequence after sequence) only satisfy Check.
func stateLayout(qs, pos, slots []int) *npu.BatchLayout {
	B := len(qs) - 1
	if pos == nil {
		pos = make([]int, B)
	}
	l := &npu.BatchLayout{QueryStart: qs, Pos: pos, StateSlot: slots, BlockSize: stateLayoutBlock}
	next := int32(0)
	for b := range B {
		n := (pos[b] + qs[b+1] - qs[b] + stateLayoutBlock - 1) / stateLayoutBlock
		bt := make([]int32, n)
		for i := range bt {
			bt[i] = next
			next++
		}
		l.BlockTables = append(l.BlockTables, bt)
	}
	return l
}

// TestAttnEmptyBatch runs every attention op on zero rows.
func TestAttnEmptyBatch(t *testing.T) {
	be := New(2)
	// Five cached positions in blocks of 4: token rows 0..4, pool row 0.
	seqs := upLayout(t, be, &npu.BatchLayout{QueryStart: []int{0, 0}, Pos: []int{5}, StateSlot: []int{0},
		BlockSize: 4, BlockTables: [][]int32{{0, 1}}})
	f32 := func(shape ...int) *npu.Tensor { return npu.Must(be.Alloc(npu.F32, shape...)) }
	be.KDAGate(f32(0, 8), f32(0, 8), f32(8), f32(2), npu.KDAGateParams{HeadDim: 4})
	be.KDA(f32(0, 8), f32(0, 24), f32(0, 8), f32(0, 2), f32(1, 2, 4, 4), seqs, 2, 4, 64)
	be.KPool(f32(0, 3), f32(0, 3), f32(0, 3), f32(4, 3))
	be.DSAIndex(npu.Must(be.Alloc(npu.I32, 0, 7)), f32(0, 6), f32(0, 2), f32(1, 3), seqs, npu.IndexParams{TopKPools: 1, KPool: 4, Tail: true})
	be.SparseMLA(f32(0, 4), f32(0, 4), f32(5, 3), f32(8, 3), npu.Must(be.Alloc(npu.I32, 0, 7)), seqs, 2, 2, 2, 1)
}
