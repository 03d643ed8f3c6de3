package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

// mlaRef is expanded NoPE MLA from the equations in float64: per row and
// head, keys and values of the selected set (positions counted once),
// softmax of scale·q·k, weighted sum of values; zeros for an empty set.
func mlaRef(q, lat, kvB []float64, sel []int32, width int, l *npu.BatchLayout, H, dk, dv, R int, scale float64) []float64 {
	out := make([]float64, l.Rows()*H*dv)
	for b := 0; b < l.NumSeqs(); b++ {
		for t := l.QueryStart[b]; t < l.QueryStart[b+1]; t++ {
			seen := map[int32]bool{}
			var slots []int
			for _, p := range sel[t*width : (t+1)*width] {
				if p >= 0 && !seen[p] {
					seen[p] = true
					slots = append(slots, int(l.TokenRow(b, int(p))))
				}
			}
			if len(slots) == 0 {
				continue
			}
			for h := 0; h < H; h++ {
				proj := func(row, s int) float64 { // (kvB row of head h) · c_s
					var x float64
					for c := 0; c < R; c++ {
						x += kvB[(h*(dk+dv)+row)*R+c] * lat[s*R+c]
					}
					return x
				}
				sc := make([]float64, len(slots))
				m := math.Inf(-1)
				for i, s := range slots {
					for a := 0; a < dk; a++ {
						sc[i] += q[(t*H+h)*dk+a] * proj(a, s)
					}
					sc[i] *= scale
					m = max(m, sc[i])
				}
				var z float64
				for i := range sc {
					sc[i] = math.Exp(sc[i] - m)
					z += sc[i]
				}
				for a := 0; a < dv; a++ {
					var o float64
					for i, s := range slots {
						o += sc[i] / z * proj(dk+a, s)
					}
					out[(t*H+h)*dv+a] = o
				}
			}
		}
	}
	return out
}

// mlaCase is a batch of sequences with latents in shuffled (paged) blocks
// and random selections: subsets in random order with −1 gaps, duplicated
// entries and one empty row.
type mlaCase struct {
	host   *npu.BatchLayout
	seqs   *npu.SeqLayout
	nslots int // latent rows
	sel    []int32
	width  int
}

// newMLACase gives each sequence the blocks of bs tokens it needs at a
// random permutation of the cache's blocks, with spare blocks: bs == 1 puts
// every position at an arbitrary latent row.
func newMLACase(tb testing.TB, be *Backend, r *rand.Rand, pos, lens []int, width, bs int, dense bool) mlaCase {
	l := &npu.BatchLayout{QueryStart: []int{0}, Pos: pos, StateSlot: make([]int, len(lens)), BlockSize: bs}
	total := 0
	for b, n := range lens {
		l.QueryStart = append(l.QueryStart, l.QueryStart[b]+n)
		total += (pos[b] + n + bs - 1) / bs
	}
	nblocks := total + (7+bs-1)/bs
	perm := atPerm(r, nblocks)
	for b, n := range lens {
		nb := (pos[b] + n + bs - 1) / bs
		l.BlockTables = append(l.BlockTables, perm[:nb])
		perm = perm[nb:]
	}
	T := l.Rows()
	sel := make([]int32, T*width)
	for i := range sel {
		sel[i] = -1
	}
	for b := range lens {
		for t := l.QueryStart[b]; t < l.QueryStart[b+1]; t++ {
			p := pos[b] + t - l.QueryStart[b]
			row := sel[t*width : (t+1)*width]
			if dense {
				for s := 0; s <= p; s++ {
					row[s] = int32(s)
				}
				continue
			}
			if t == 1 {
				continue // empty row
			}
			var cand []int32
			for s := 0; s <= p; s++ {
				if r.Float64() < 0.7 {
					cand = append(cand, int32(s))
				}
			}
			if len(cand) == 0 {
				cand = append(cand, int32(p))
			}
			r.Shuffle(len(cand), func(i, j int) { cand[i], cand[j] = cand[j], cand[i] })
			cand = cand[:min(len(cand), width-2)]
			cand = append(cand, cand[0]) // a duplicate
			for _, i := range r.Perm(width)[:len(cand)] {
				row[i] = cand[0]
				cand = cand[1:]
			}
		}
	}
	return mlaCase{l, upLayout(tb, be, l), nblocks * bs, sel, width}
}

func TestSparseMLA(t *testing.T) {
	const H, dk, dv, R = 3, 5, 7, 11
	pos := []int{0, 20, 7, 150, 3}
	lens := []int{12, 1, 9, 1, 0}
	for _, threads := range []int{1, 3} {
		be := New(threads)
		bs := 1 // one position per block: arbitrary latent rows
		if threads == 3 {
			bs = 5 // positions scattered by blocks
		}
		for _, wdt := range []npu.DType{npu.F32, npu.BF16, npu.F16} {
			for _, ldt := range []npu.DType{npu.F32, npu.BF16} {
				for _, force := range []int{0, 1, 2} {
					t.Run(fmt.Sprintf("threads%d_bs%d_w%v_lat%v_force%d", threads, bs, wdt, ldt, force), func(t *testing.T) {
						r := rand.New(rand.NewPCG(uint64(threads), uint64(force)))
						c := newMLACase(t, be, r, pos, lens, 160, bs, false)
						T := c.host.Rows()
						tq := atF32(be, atNormal(r, T*H*dk, 0, 2), T, H*dk)
						q := append([]float64(nil), atWiden(F32(tq))...)
						tl, lat := atTensor(be, ldt, atNormal(r, c.nslots*R, 0, 1), c.nslots, R)
						tw, kvB := atTensor(be, wdt, atNormal(r, H*(dk+dv)*R, 0, 1/math.Sqrt(R)), H*(dk+dv), R)
						out := npu.Must(be.Alloc(npu.F32, T, H*dv))
						F32(out)[0] = 123 // outputs are overwritten
						const scale = 0.45
						defer func(f int) { mlaForce = f }(mlaForce)
						mlaForce = force
						be.SparseMLA(out, tq, tl, tw, atI32(be, c.sel, T, c.width), c.seqs, H, dk, dv, scale)
						want := mlaRef(q, lat, kvB, c.sel, c.width, c.host, H, dk, dv, R, scale)
						atCheck(t, "out", F32(out), want, 5e-6)
						for i := 1 * H * dv; i < 2*H*dv; i++ {
							if F32(out)[i] != 0 {
								t.Fatalf("empty row: out[%d] = %v, want 0", i, F32(out)[i])
							}
						}
					})
				}
			}
		}
	}
}

// TestSparseMLALarger runs dense causal prefill plus decode rows at a
// larger head size through both forms.
func TestSparseMLALarger(t *testing.T) {
	const H, dk, dv, R = 4, 32, 32, 64
	be := New(2)
	for _, force := range []int{1, 2} {
		for _, bs := range []int{1, 16} {
			t.Run(fmt.Sprintf("force%d_bs%d", force, bs), func(t *testing.T) {
				r := rand.New(rand.NewPCG(4, 4))
				c := newMLACase(t, be, r, []int{0, 70}, []int{40, 1}, 80, bs, true)
				T := c.host.Rows()
				qv := atNormal(r, T*H*dk, 0, 1)
				tq := atF32(be, qv, T, H*dk)
				tl, lat := atTensor(be, npu.BF16, atNormal(r, c.nslots*R, 0, 1), c.nslots, R)
				tw, kvB := atTensor(be, npu.BF16, atNormal(r, H*(dk+dv)*R, 0, 1/math.Sqrt(R)), H*(dk+dv), R)
				out := npu.Must(be.Alloc(npu.F32, T, H*dv))
				defer func(f int) { mlaForce = f }(mlaForce)
				mlaForce = force
				scale := 1 / math.Sqrt(dk)
				be.SparseMLA(out, tq, tl, tw, atI32(be, c.sel, T, c.width), c.seqs, H, dk, dv, float32(scale))
				want := mlaRef(qv, lat, kvB, c.sel, c.width, c.host, H, dk, dv, R, float64(float32(scale)))
				atCheck(t, "out", F32(out), want, 5e-6)
			})
		}
	}
}

func TestSparseMLAPanics(t *testing.T) {
	be := New(1)
	const H, dk, dv, R = 1, 2, 2, 3
	// One row at position 2: positions 0..2, one per block.
	lay := func(bt ...int32) *npu.BatchLayout {
		return &npu.BatchLayout{QueryStart: []int{0, 1}, Pos: []int{2}, StateSlot: []int{0}, BlockSize: 1, BlockTables: [][]int32{bt}}
	}
	l := upLayout(t, be, lay(0, 1, 2))
	q, out := npu.Must(be.Alloc(npu.F32, 1, H*dk)), npu.Must(be.Alloc(npu.F32, 1, H*dv))
	lat, kvB := npu.Must(be.Alloc(npu.F32, 3, R)), npu.Must(be.Alloc(npu.F32, H*(dk+dv), R))
	for _, c := range []struct {
		what string
		seqs *npu.SeqLayout
		kvB  *npu.Tensor
		sel  []int32
		msg  string
	}{
		{"position beyond the sequence", l, kvB, []int32{0, 3}, "selects position 3; sequence 0 has 3"},
		{"row out of range", upLayout(t, be, lay(0, 1, 5)), kvB, []int32{0, 2}, "position 2 of sequence 0 in block 5 outside a cache of 3 rows"},
		{"unassigned block", upLayout(t, be, lay(0, -1, 2)), kvB, []int32{0, 1}, "position 1 of sequence 0 in block -1"},
		// A block table too narrow for the positions (BatchLayout.Check
		// refuses it on the host; the op must too).
		{"missing block", rawLayout(be, lay(0, 1)), kvB, []int32{0, 2}, "position 2 of sequence 0 outside its 3 positions"},
		{"bad kvB shape", l, npu.Must(be.Alloc(npu.F32, H*(dk+dv), R+1)), []int32{0, 1}, "SparseMLA kvB"},
	} {
		if msg := atPanicMsg(func() { be.SparseMLA(out, q, lat, c.kvB, atI32(be, c.sel, 1, 2), c.seqs, H, dk, dv, 1) }); !strings.Contains(msg, c.msg) {
			t.Errorf("%s: panic %q, want one containing %q", c.what, msg, c.msg)
		}
	}
	be.SparseMLA(out, q, lat, kvB, atI32(be, []int32{0, 1}, 1, 2), upLayout(t, be, lay(0, 1, 5)), H, dk, dv, 1)
	be.SparseMLA(out, q, lat, kvB, atI32(be, []int32{0, 1}, 1, 2), l, H, dk, dv, 1)
}

// atWiden widens fp32 values.
func atWiden(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// BenchmarkSparseMLA uses the real head shapes (64 heads, R 512, Dk = Dv =
// 256, BF16 latents and kvB): decode over 2051 selected positions, and
// dense causal prefill of 256 rows (absorbed and expanded forms).
func BenchmarkSparseMLA(b *testing.B) {
	const H, dk, dv, R = 64, 256, 256, 512
	for _, bc := range []struct {
		name      string
		pos, rows int
		dense     bool
		force     int
	}{
		{"decode_2051", 4200, 1, false, 0},
		{"prefill256_absorbed", 0, 256, true, 1},
		{"prefill256_expanded", 0, 256, true, 2},
	} {
		b.Run(bc.name, func(b *testing.B) {
			be := New(0)
			r := rand.New(rand.NewPCG(1, 1))
			width := 2051
			if bc.dense {
				width = bc.rows
			}
			c := newMLACase(b, be, r, []int{bc.pos}, []int{bc.rows}, width, 1, bc.dense)
			if !bc.dense {
				for i := range c.sel {
					c.sel[i] = int32(i * 2)
				}
			}
			T := c.host.Rows()
			tq := atF32(be, atNormal(r, T*H*dk, 0, 1), T, H*dk)
			tl, _ := atTensor(be, npu.BF16, atNormal(r, c.nslots*R, 0, 1), c.nslots, R)
			tw, _ := atTensor(be, npu.BF16, atNormal(r, H*(dk+dv)*R, 0, 0.05), H*(dk+dv), R)
			out := npu.Must(be.Alloc(npu.F32, T, H*dv))
			sel := atI32(be, c.sel, T, c.width)
			defer func(f int) { mlaForce = f }(mlaForce)
			mlaForce = bc.force
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				be.SparseMLA(out, tq, tl, tw, sel, c.seqs, H, dk, dv, 1/16.)
			}
			b.ReportMetric(float64(T*b.N)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}
