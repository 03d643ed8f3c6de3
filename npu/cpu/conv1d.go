package cpu

import (
	"fmt"
	"math"

	"github.com/npuserve/npuserve/npu"
)

// Conv1d is the depthwise causal convolution over the rows of each
// sequence: x [T, C], w [C, W] (w[c][W-1] multiplies the current row),
// state [slots, W-1, C] holding each sequence's previous W-1 inputs (oldest
// first, zeros at sequence start), updated in place to the last W-1 inputs.
// out[t,c] = act(sum_i w[c][i] * u[t-(W-1)+i][c]), act = SiLU when silu.
func (be *Backend) Conv1d(out, x, state, w *npu.Tensor, seqs *npu.SeqLayout, silu bool) {
	L := readLayout("Conv1d", seqs)
	if L.Rows() != x.Dim(0) {
		panic(fmt.Sprintf("cpu: Conv1d QueryStart %v does not cover x %v", L.QueryStart, x))
	}
	be.conv1d("Conv1d", out, x, state, w, L.QueryStart, L.StateSlot, L.NumSeqs(), silu)
}

// Conv1dUpdate is Conv1d for exactly one new row per sequence (decode):
// row b of x [B, C] belongs to sequence b with state slot StateSlot[b].
func (be *Backend) Conv1dUpdate(out, x, state, w *npu.Tensor, seqs *npu.SeqLayout, silu bool) {
	L := readLayout("Conv1dUpdate", seqs)
	if x.Rank() != 2 {
		panic(fmt.Sprintf("cpu: Conv1dUpdate x %v: want [B, C]", x))
	}
	if L.NumSeqs() != x.Dim(0) {
		panic(fmt.Sprintf("cpu: Conv1dUpdate QueryStart %v does not match x %v", L.QueryStart, x))
	}
	for b, q := range L.QueryStart {
		if q != b {
			panic(fmt.Sprintf("cpu: Conv1dUpdate needs one row per sequence, QueryStart %v", L.QueryStart))
		}
	}
	be.conv1dStep(out, x, state, w, L.StateSlot, silu)
}

// conv1dStep is Conv1dUpdate's work: one new row per sequence, the state
// shifted in place, 16-bit weights widened on the fly (no allocation).
func (be *Backend) conv1dStep(out, x, state, w *npu.Tensor, slots []int, silu bool) {
	const op = "Conv1dUpdate"
	conv1dCheck(op, out, x, state, w, slots, -1)
	nseq, C, W := x.Dim(0), x.Dim(1), w.Dim(1)
	var wf []float32
	var wh []uint16
	switch w.DType() {
	case npu.F32:
		wf = F32(w)
	case npu.BF16:
		wh = U16(w)
	default:
		wf = weightF32(w)
	}
	o, xv, st := F32(out), F32(x), F32(state)
	H := W - 1
	be.parallelFor(nseq*C, 1<<13, func(lo, hi int) {
		var wc [16]float32
		for i := lo; i < hi; i++ {
			b, c := i/C, i%C
			xc := xv[b*C+c]
			var ww []float32
			if W <= len(wc) && wh != nil {
				for j, h := range wh[c*W : (c+1)*W] {
					wc[j] = math.Float32frombits(uint32(h) << 16)
				}
				ww = wc[:W]
			} else if wh != nil {
				ww = make([]float32, W)
				for j, h := range wh[c*W : (c+1)*W] {
					ww[j] = math.Float32frombits(uint32(h) << 16)
				}
			} else {
				ww = wf[c*W : (c+1)*W]
			}
			var sb []float32
			if H > 0 { // a 1-tap kernel keeps no history (empty state)
				sb = st[slots[b]*H*C+c:]
			}
			acc := ww[H] * xc
			for j := 0; j < H; j++ {
				acc += ww[j] * sb[j*C]
			}
			// Shift this channel's history by one row and append the input.
			for j := 0; j+1 < H; j++ {
				sb[j*C] = sb[(j+1)*C]
			}
			if H > 0 {
				sb[(H-1)*C] = xc
			}
			if silu {
				acc = silu32(acc)
			}
			o[b*C+c] = acc
		}
	})
}

func (be *Backend) conv1d(op string, out, x, state, w *npu.Tensor, qs, slots []int, nseq int, silu bool) {
	conv1dCheck(op, out, x, state, w, slots, nseq)
	C, W := x.Dim(1), w.Dim(1)
	o, xv, st, wv := F32(out), F32(x), F32(state), weightF32(w)
	H := W - 1
	// Channels are independent: split them across threads.
	be.parallelFor(C, 64, func(lo, hi int) {
		n := hi - lo
		hist := make([]float32, H*n) // per channel history, oldest first: hist[j*n+c]
		for b := 0; b < nseq; b++ {
			t0, t1 := qs[b], qs[b+1]
			sb := st[slots[b]*H*C:]
			for j := 0; j < H; j++ {
				copy(hist[j*n:(j+1)*n], sb[j*C+lo:j*C+hi])
			}
			for t := t0; t < t1; t++ {
				xr := xv[t*C : (t+1)*C]
				or := o[t*C : (t+1)*C]
				for c := lo; c < hi; c++ {
					wc := wv[c*W : (c+1)*W]
					acc := wc[H] * xr[c]
					for j := 0; j < H; j++ {
						acc += wc[j] * hist[j*n+c-lo]
					}
					or[c] = acc
				}
				if silu {
					siluRow(or[lo:hi], or[lo:hi])
				}
				// Shift the history by one row and append this input.
				if H > 0 {
					copy(hist, hist[n:])
					copy(hist[(H-1)*n:], xr[lo:hi])
				}
			}
			for j := 0; j < H; j++ {
				copy(sb[j*C+lo:j*C+hi], hist[j*n:(j+1)*n])
			}
		}
	})
}

// conv1dCheck panics unless out, x, state and w have the shapes a
// depthwise conv over nseq sequences (-1: one token each, x's rows) with
// these state slots needs.
func conv1dCheck(op string, out, x, state, w *npu.Tensor, slots []int, nseq int) {
	if x.Rank() != 2 || w.Rank() != 2 || state.Rank() != 3 {
		panic(fmt.Sprintf("cpu: %s wants x [T, C], w [C, W], state [slots, W-1, C]; got %v %v %v", op, x, w, state))
	}
	if nseq < 0 {
		nseq = x.Dim(0)
	}
	C, W := x.Dim(1), w.Dim(1)
	if w.Dim(0) != C || W < 1 || state.Dim(1) != W-1 || state.Dim(2) != C {
		panic(fmt.Sprintf("cpu: %s shapes x %v, w %v, state %v disagree", op, x, w, state))
	}
	if !npu.SameShape(out.Shape(), x.Shape()) {
		panic(fmt.Sprintf("cpu: %s out %v does not match x %v", op, out, x))
	}
	if len(slots) != nseq {
		panic(fmt.Sprintf("cpu: %s has %d sequences but %d state slots", op, nseq, len(slots)))
	}
	for _, s := range slots {
		if s < 0 || s >= state.Dim(0) {
			panic(fmt.Sprintf("cpu: %s state slot %d out of range for %v", op, s, state))
		}
	}
}
