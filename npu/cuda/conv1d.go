package cuda

import (
	"fmt"

	"github.com/npuserve/npuserve/npu"
)

// convMaxW is CONV_MAX_W of kernels/conv1d.cu.
const convMaxW = 16

// checkLayout panics unless seqs has the tensors and sizes a layout op
// needs (their contents are device data, checked by the kernels).
func checkLayout(op string, s *npu.SeqLayout) {
	if s == nil || s.QueryStart == nil || s.Pos == nil || s.StateSlot == nil {
		panic(fmt.Sprintf("cuda: %s needs a SeqLayout with its tensors", op))
	}
	B := s.NumSeqs
	if B < 0 || s.QueryStart.Numel() != B+1 || s.Pos.Numel() != B || s.StateSlot.Numel() != B {
		panic(fmt.Sprintf("cuda: %s layout of %d sequences has QueryStart %v, Pos %v, StateSlot %v", op, B, s.QueryStart, s.Pos, s.StateSlot))
	}
	for _, t := range []*npu.Tensor{s.QueryStart, s.Pos, s.StateSlot} {
		if t.DType() != npu.I32 {
			panic(fmt.Sprintf("cuda: %s layout tensor %v: want I32", op, t))
		}
	}
}

func conv1dCheck(op string, out, x, state, w *npu.Tensor) {
	if x.Rank() != 2 || w.Rank() != 2 || state.Rank() != 3 {
		panic(fmt.Sprintf("cuda: %s wants x [T, C], w [C, W], state [slots, W-1, C]; got %v %v %v", op, x, w, state))
	}
	C, W := x.Dim(1), w.Dim(1)
	if w.Dim(0) != C || W < 1 || state.Dim(1) != W-1 || state.Dim(2) != C {
		panic(fmt.Sprintf("cuda: %s shapes x %v, w %v, state %v disagree", op, x, w, state))
	}
	if W > convMaxW {
		panic(fmt.Sprintf("cuda: %s supports kernels of up to %d taps, got %d", op, convMaxW, W))
	}
	if !npu.SameShape(out.Shape(), x.Shape()) {
		panic(fmt.Sprintf("cuda: %s out %v does not match x %v", op, out, x))
	}
	wantF32(op, out, x, state)
	wantFloat(op, w)
}

// Conv1d is the depthwise causal convolution over the rows of each
// sequence (see npu.Ops.Conv1d); state is updated in place. A state slot
// outside state is a DeviceError at the next Sync.
func (b *Backend) Conv1d(out, x, state, w *npu.Tensor, seqs *npu.SeqLayout, silu bool) {
	checkLayout("Conv1d", seqs)
	conv1dCheck("Conv1d", out, x, state, w)
	if seqs.NumRows != x.Dim(0) {
		panic(fmt.Sprintf("cuda: Conv1d layout of %d rows does not cover x %v", seqs.NumRows, x))
	}
	B, T, C, W := seqs.NumSeqs, x.Dim(0), x.Dim(1), w.Dim(1)
	if B == 0 || C == 0 {
		return
	}
	if T > 0 {
		b.launchChecked("k_conv1d", b.gridFor(int64(T)*int64(C), elemThreads), d1(elemThreads), 0,
			b.ptr(out), b.ptr(x), b.ptr(state), b.ptr(w), pI32(dtypeCode(w.DType())),
			b.ptr(seqs.QueryStart), b.ptr(seqs.StateSlot), pI32(B), pI32(T), pI32(C), pI32(W), pI32(state.Dim(0)),
			pBool(silu), b.errWord, pI32(opConv1d))
	}
	if W > 1 {
		b.launch("k_conv1d_state", b.gridFor(int64(B)*int64(C), elemThreads), d1(elemThreads), 0,
			b.ptr(state), b.ptr(x), b.ptr(seqs.QueryStart), b.ptr(seqs.StateSlot), pI32(B), pI32(C), pI32(W), pI32(state.Dim(0)))
	}
}

// Conv1dUpdate is Conv1d for exactly one new row per sequence (decode):
// row b of x [B, C] belongs to sequence b. A layout with other than one
// row per sequence is a DeviceError at the next Sync.
func (b *Backend) Conv1dUpdate(out, x, state, w *npu.Tensor, seqs *npu.SeqLayout, silu bool) {
	checkLayout("Conv1dUpdate", seqs)
	conv1dCheck("Conv1dUpdate", out, x, state, w)
	if seqs.NumSeqs != x.Dim(0) {
		panic(fmt.Sprintf("cuda: Conv1dUpdate layout of %d sequences does not match x %v", seqs.NumSeqs, x))
	}
	B, C, W := x.Dim(0), x.Dim(1), w.Dim(1)
	if B == 0 || C == 0 {
		return
	}
	b.launchChecked("k_conv1d_update", b.gridFor(int64(B)*int64(C), elemThreads), d1(elemThreads), 0,
		b.ptr(out), b.ptr(x), b.ptr(state), b.ptr(w), pI32(dtypeCode(w.DType())),
		b.ptr(seqs.QueryStart), b.ptr(seqs.StateSlot), pI32(B), pI32(C), pI32(W), pI32(state.Dim(0)),
		pBool(silu), b.errWord, pI32(opConv1dUpdate))
}
