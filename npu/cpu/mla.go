package cpu

import (
	"fmt"
	"math"
	"slices"

	"github.com/npuserve/npuserve/npu"
)

// mlaForce selects the SparseMLA form for tests: 0 picks by cost, 1 forces
// the absorbed form, 2 the expanded form.
var mlaForce = 0

const (
	mlaRowBlock = 8  // query rows per work item of the absorbed form
	mlaPosBlock = 64 // selected latents scored per step of the absorbed form
	// mlaExpandedBytes caps the latents and expanded keys/values the
	// expanded form holds for one sequence.
	mlaExpandedBytes = 512 << 20
)

// SparseMLA is NoPE multi-head latent attention over the positions selected
// by DSAIndex (HF Glm5NextTextAttention with build_attention_mask_from_topk
// and eager_attention_forward). For query row t of sequence b and head h,
// with c_s = latents[row of position s] (the block table gives the row; latents [tokenSlots, R], F32, BF16
// or F16), W_UK[h] and W_UV[h] the Dk key rows and Dv value rows of head h
// in kvB [H*(Dk+Dv), R] (F32, BF16 or F16):
//
//	k_s = W_UK[h] c_s,  v_s = W_UV[h] c_s,
//	p = softmax_s(scale · q[t,h]·k_s)  over the selected set S_t,
//	out[t,h] = Σ_s p_s v_s.
//
// S_t is the set of non-negative entries of sel row t (I32 [T, width]);
// like the reference mask, a position listed twice counts once, and sel is
// trusted for causality. Every listed position must be one of
// the sequence's positions. A row with no selected position (DSAIndex without tail selection,
// before the first complete pool) gets zeros, as the contract says. q [T, H*Dk], out [T, H*Dv], fp32 throughout.
//
// Two exact forms are used, chosen per sequence by arithmetic cost. The
// absorbed form (decode, chunked prefill) scores latents directly with
// q̃ = W_UK[h]ᵀ q and computes o = W_UV[h] Σ_s p_s c_s, with an online
// softmax over blocks of latents. The expanded form (prefill, where the rows
// share most of their positions) expands keys and values once per
// distinct selected position and head, then attends per row.
func (be *Backend) SparseMLA(out, q, latents, kvB, sel *npu.Tensor, seqs *npu.SeqLayout, heads, dk, dv int, scale float32) {
	H := heads
	attnFloat("SparseMLA latents", latents)
	attnFloat("SparseMLA kvB", kvB)
	L := readLayout("SparseMLA", seqs)
	T := L.Rows()
	R, nslots, width, err := npu.SparseMLADims(out, q, latents, kvB, sel, T, heads, dk, dv)
	if err != nil {
		panic("cpu: " + err.Error())
	}
	B := L.NumSeqs()
	a := &mlaArgs{q: F32(q), out: F32(out), latents: latents, kvB: kvB, H: H, dk: dk, dv: dv, R: R, scale: scale}

	// Per-row latent slots (each position once), validated on this goroutine.
	sels := I32(sel)
	a.rowOff = make([]int, T+1)
	a.slots = make([]int32, 0, T*width)
	var stamp []int32
	type seqPlan struct {
		b        int
		expanded bool
		cost     int
	}
	var plans []seqPlan
	for b := 0; b < B; b++ {
		r0, r1 := L.QueryStart[b], L.QueryStart[b+1]
		if r1 < r0 {
			panic(fmt.Sprintf("cpu: SparseMLA QueryStart %v not ascending", L.QueryStart))
		}
		if r1 == r0 {
			continue
		}
		n := L.seqLen(b)
		if len(stamp) < n {
			stamp = make([]int32, n)
		}
		clear(stamp[:n])
		union, total := 0, 0
		for t := r0; t < r1; t++ {
			for _, pos := range sels[t*width : (t+1)*width] {
				if pos < 0 {
					continue
				}
				if int(pos) >= n {
					panic(fmt.Sprintf("cpu: SparseMLA row %d selects position %d; sequence %d has %d", t, pos, b, n))
				}
				if stamp[pos] == int32(t+1) {
					continue // listed twice in this row
				}
				if stamp[pos] == 0 {
					union++
				}
				stamp[pos] = int32(t + 1)
				a.slots = append(a.slots, L.tokenRow("SparseMLA", b, int(pos), nslots))
			}
			a.rowOff[t+1] = len(a.slots)
			total += a.rowOff[t+1] - a.rowOff[t]
		}
		rows := r1 - r0
		absorbed := rows*R*(dk+dv) + total*2*R
		expanded := union*R*(dk+dv) + total*(dk+dv)
		fits := union*(R+dk+dv)*4 <= mlaExpandedBytes
		useExp := mlaForce == 2 || (mlaForce == 0 && fits && expanded < absorbed)
		plans = append(plans, seqPlan{b, useExp, min(absorbed, expanded)})
	}
	for t := 1; t <= T; t++ { // rows of empty sequences
		a.rowOff[t] = max(a.rowOff[t], a.rowOff[t-1])
	}

	// Absorbed form: work items are (row block, head group).
	type item struct{ r0, r1, h0, h1, cost int }
	var items []item
	nblocks := 0
	for _, pl := range plans {
		if !pl.expanded {
			r0, r1 := L.QueryStart[pl.b], L.QueryStart[pl.b+1]
			nblocks += (r1 - r0 + mlaRowBlock - 1) / mlaRowBlock
		}
	}
	if nblocks > 0 {
		groups := min(H, max(1, (4*be.threads+nblocks-1)/nblocks))
		hg := (H + groups - 1) / groups
		for _, pl := range plans {
			if pl.expanded {
				continue
			}
			r0, r1 := L.QueryStart[pl.b], L.QueryStart[pl.b+1]
			for t := r0; t < r1; t += mlaRowBlock {
				e := min(t+mlaRowBlock, r1)
				for h := 0; h < H; h += hg {
					items = append(items, item{t, e, h, min(h+hg, H), (a.rowOff[e] - a.rowOff[t] + e - t) * (min(h+hg, H) - h)})
				}
			}
		}
		slices.SortStableFunc(items, func(x, y item) int { return y.cost - x.cost })
		attnWorkers(be, len(items), func() *mlaWork { return newMLAWork(a, hg) }, func(w *mlaWork, i int) {
			it := items[i]
			w.absorbed(a, it.r0, it.r1, it.h0, it.h1)
		})
	}
	for _, pl := range plans {
		if pl.expanded {
			be.mlaExpanded(a, L.QueryStart[pl.b], L.QueryStart[pl.b+1])
		}
	}
}

// mlaArgs are the flattened SparseMLA operands; rows t's latent slots are
// slots[rowOff[t]:rowOff[t+1]].
type mlaArgs struct {
	q, out       []float32
	latents, kvB *npu.Tensor
	H, dk, dv, R int
	scale        float32
	rowOff       []int
	slots        []int32
}

// mlaWork is the scratch memory of one absorbed-form worker.
type mlaWork struct {
	wk, wkT, wv []float32 // W_UK[h] [dk, R] (16-bit weights), its transpose [R, dk], W_UV[h] [dv, R]
	qt, z       []float32 // q̃ and Σ p c [mlaRowBlock, hg, R]
	sc          []float32 // scores, then probabilities [hg, mlaPosBlock]
	blk         []float32 // converted latents [mlaPosBlock, R] (16-bit latents)
	m, l        []float64 // running max and sum [hg]
}

func newMLAWork(a *mlaArgs, hg int) *mlaWork {
	w := &mlaWork{
		wkT: make([]float32, a.R*a.dk),
		qt:  make([]float32, mlaRowBlock*hg*a.R), z: make([]float32, mlaRowBlock*hg*a.R),
		sc: make([]float32, hg*mlaPosBlock), m: make([]float64, hg), l: make([]float64, hg),
	}
	if a.kvB.DType() != npu.F32 {
		w.wk, w.wv = make([]float32, a.dk*a.R), make([]float32, a.dv*a.R)
	}
	if a.latents.DType() != npu.F32 {
		w.blk = make([]float32, mlaPosBlock*a.R)
	}
	return w
}

// absorbed computes rows [r0, r1) (one sequence) and heads [h0, h1) in the
// absorbed form.
func (w *mlaWork) absorbed(a *mlaArgs, r0, r1, h0, h1 int) {
	R, dk, dv, H := a.R, a.dk, a.dv, a.H
	hg, rows := h1-h0, r1-r0
	qt, z := w.qt[:rows*hg*R], w.z[:rows*hg*R]
	// q̃[t,h] = W_UK[h]ᵀ q[t,h].
	for hh := 0; hh < hg; hh++ {
		h := h0 + hh
		wk := rowF32(a.kvB, h*(dk+dv)*R, dk*R, w.wk)
		if rows == 1 {
			dst := qt[hh*R : (hh+1)*R]
			clear(dst)
			attnAccRows(dst, a.q[r0*H*dk+h*dk:], dk, R, wk, R, nil)
			continue
		}
		attnTranspose(dk, R, wk, R, w.wkT, dk)
		attnNT(rows, R, dk, a.q[r0*H*dk+h*dk:], H*dk, w.wkT, dk, nil, qt[hh*R:], hg*R, false)
	}
	// z[t,h] = Σ_s p_s c_s with an online softmax over blocks of latents.
	clear(z)
	src := []float32(nil)
	if w.blk == nil {
		src = F32(a.latents)
	}
	for t := r0; t < r1; t++ {
		qr, zr := qt[(t-r0)*hg*R:(t-r0+1)*hg*R], z[(t-r0)*hg*R:(t-r0+1)*hg*R]
		m, l := w.m[:hg], w.l[:hg]
		for hh := range m {
			m[hh], l[hh] = math.Inf(-1), 0
		}
		slots := a.slots[a.rowOff[t]:a.rowOff[t+1]]
		for s0 := 0; s0 < len(slots); s0 += mlaPosBlock {
			idx := slots[s0:min(s0+mlaPosBlock, len(slots))]
			n := len(idx)
			b, bidx := src, idx
			if w.blk != nil {
				attnGatherRows(a.latents, R, idx, w.blk)
				b, bidx = w.blk, nil
			}
			attnNT(hg, n, R, qr, R, b, R, bidx, w.sc, mlaPosBlock, false)
			for hh := 0; hh < hg; hh++ {
				sc := w.sc[hh*mlaPosBlock : hh*mlaPosBlock+n]
				bm := m[hh]
				for j, x := range sc {
					x *= a.scale
					sc[j] = x
					bm = max(bm, float64(x))
				}
				if bm > m[hh] {
					if l[hh] > 0 {
						corr := float32(math.Exp(m[hh] - bm))
						zh := zr[hh*R : (hh+1)*R]
						for i := range zh {
							zh[i] *= corr
						}
						l[hh] *= float64(corr)
					}
					m[hh] = bm
				}
				var sum float64
				for j, x := range sc {
					e := float32(math.Exp(float64(x) - m[hh]))
					sc[j] = e
					sum += float64(e)
				}
				l[hh] += sum
				attnAccRows(zr[hh*R:(hh+1)*R], sc, n, R, b, R, bidx)
			}
		}
		for hh := range l {
			if l[hh] > 0 {
				inv := float32(1 / l[hh])
				zh := zr[hh*R : (hh+1)*R]
				for i := range zh {
					zh[i] *= inv
				}
			}
		}
	}
	// out[t,h] = W_UV[h] z[t,h].
	for hh := 0; hh < hg; hh++ {
		h := h0 + hh
		wv := rowF32(a.kvB, (h*(dk+dv)+dk)*R, dv*R, w.wv)
		attnNT(rows, dv, R, z[hh*R:], hg*R, wv, R, nil, a.out[r0*H*dv+h*dv:], H*dv, false)
	}
}

// mlaExpanded computes rows [r0, r1) of one sequence in the expanded form:
// per head, keys and values of every distinct selected position, then
// attention per row, each step parallel over positions or rows.
func (be *Backend) mlaExpanded(a *mlaArgs, r0, r1 int) {
	R, dk, dv, H := a.R, a.dk, a.dv, a.H
	// Distinct slots of the sequence and, per row, their indices into it.
	all := a.slots[a.rowOff[r0]:a.rowOff[r1]]
	uniq := slices.Clone(all)
	slices.Sort(uniq)
	uniq = slices.Compact(uniq)
	uidx := make([]int32, len(all))
	for i, s := range all {
		j, _ := slices.BinarySearch(uniq, s)
		uidx[i] = int32(j)
	}
	U := len(uniq)
	lat := make([]float32, U*R)
	be.parallelFor(U, 256, func(lo, hi int) {
		attnGatherRows(a.latents, R, uniq[lo:hi], lat[lo*R:hi*R])
	})
	kv := make([]float32, U*(dk+dv))
	// Attention work items: blocks of rows, costliest first.
	type block struct{ r0, r1, cost int }
	var blocks []block
	maxSel := 0
	for t := r0; t < r1; t += 4 {
		e := min(t+4, r1)
		blocks = append(blocks, block{t, e, a.rowOff[e] - a.rowOff[t] + e - t})
		for u := t; u < e; u++ {
			maxSel = max(maxSel, a.rowOff[u+1]-a.rowOff[u])
		}
	}
	slices.SortStableFunc(blocks, func(x, y block) int { return y.cost - x.cost })
	var wbuf []float32
	if a.kvB.DType() != npu.F32 {
		wbuf = make([]float32, (dk+dv)*R)
	}
	for h := 0; h < H; h++ {
		wh := rowF32(a.kvB, h*(dk+dv)*R, (dk+dv)*R, wbuf)
		be.parallelFor(U, 16, func(lo, hi int) {
			attnNT(hi-lo, dk+dv, R, lat[lo*R:], R, wh, R, nil, kv[lo*(dk+dv):], dk+dv, false)
		})
		attnWorkers(be, len(blocks), func() []float32 { return make([]float32, maxSel) }, func(p []float32, i int) {
			for t := blocks[i].r0; t < blocks[i].r1; t++ {
				idx := uidx[a.rowOff[t]-a.rowOff[r0] : a.rowOff[t+1]-a.rowOff[r0]]
				o := a.out[(t*H+h)*dv : (t*H+h+1)*dv]
				clear(o)
				n := len(idx)
				if n == 0 {
					continue
				}
				p := p[:n]
				attnNT(1, n, dk, a.q[(t*H+h)*dk:], dk, kv, dk+dv, idx, p, n, false)
				m := float32(math.Inf(-1))
				for j := range p {
					p[j] *= a.scale
					m = max(m, p[j])
				}
				var sum float64
				for j, x := range p {
					e := float32(math.Exp(float64(x - m)))
					p[j] = e
					sum += float64(e)
				}
				attnAccRows(o, p, n, dv, kv[dk:], dk+dv, idx)
				inv := float32(1 / sum)
				for i := range o {
					o[i] *= inv
				}
			}
		})
	}
}
