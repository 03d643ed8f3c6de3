package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

func TestKPool(t *testing.T) {
	be := New(2)
	for _, kp := range []int{1, 2, 4} {
		for _, dt := range []npu.DType{npu.F32, npu.BF16} {
			t.Run(fmt.Sprintf("kp%d_%v", kp, dt), func(t *testing.T) {
				const P, d = 37, 7
				r := rand.New(rand.NewPCG(uint64(kp), 9))
				keys := atNormal(r, P*kp*d, 0, 1)
				gates := atNormal(r, P*kp*d, 0, 3)
				tk, tg := atF32(be, keys, P*kp, d), atF32(be, gates, P*kp, d)
				ta, ape := atTensor(be, dt, atNormal(r, kp*d, 0, 1), kp, d)
				out := npu.Must(be.Alloc(npu.F32, P, d))
				be.KPool(out, tk, tg, ta)
				want := make([]float64, P*d)
				for p := 0; p < P; p++ {
					for c := 0; c < d; c++ {
						var z, acc float64
						for j := 0; j < kp; j++ {
							e := math.Exp(gates[(p*kp+j)*d+c] + ape[j*d+c])
							z += e
							acc += e * keys[(p*kp+j)*d+c]
						}
						want[p*d+c] = acc / z
					}
				}
				atCheck(t, "pooled", F32(out), want, 1e-6)
			})
		}
	}
	// Large logits must not overflow the softmax.
	tk := atF32(be, []float64{1, 2}, 2, 1)
	tg := atF32(be, []float64{1000, 1000}, 2, 1)
	ta := atF32(be, []float64{0, math.Log(3)}, 2, 1)
	out := npu.Must(be.Alloc(npu.F32, 1, 1))
	be.KPool(out, tk, tg, ta)
	if got := F32(out)[0]; !(math.Abs(float64(got)-1.75) < 1e-4) { // fp32 logits: 1000+log 3 is rounded
		t.Errorf("large logits: got %v, want 1.75", got)
	}
}

// dsaLayout is a batch of sequences with pooled keys in shuffled blocks.
type dsaLayout struct {
	host   *npu.BatchLayout
	seqs   *npu.SeqLayout
	nslots int // pooled-key rows
}

// newDSALayout gives each sequence (after its rows) the blocks of bs tokens
// (a multiple of kp) it needs at a random permutation of the cache's
// blocks, leaving gaps: with bs == kp, block i holds pool i, so the complete
// pools land at arbitrary pooled rows.
func newDSALayout(tb testing.TB, be *Backend, r *rand.Rand, pos, lens []int, kp, bs int) dsaLayout {
	l := &npu.BatchLayout{QueryStart: []int{0}, Pos: pos, StateSlot: make([]int, len(lens)), BlockSize: bs}
	total := 0
	for b, n := range lens {
		l.QueryStart = append(l.QueryStart, l.QueryStart[b]+n)
		total += (pos[b] + n + bs - 1) / bs
	}
	nblocks := total + 5
	perm := atPerm(r, nblocks)
	for b, n := range lens {
		nb := (pos[b] + n + bs - 1) / bs
		l.BlockTables = append(l.BlockTables, perm[:nb])
		perm = perm[nb:]
	}
	return dsaLayout{l, upLayout(tb, be, l), nblocks * (bs / kp)}
}

// dsaRef is the selection from the equations, with float64 scores: rank by
// score descending, ties to the lower pool; pools expanded, then the tail.
func dsaRef(q, w, pooled []float64, l *npu.BatchLayout, Hi, d int, p npu.IndexParams, width int) (out []int32, scores [][]float64) {
	T := l.Rows()
	out = make([]int32, T*width)
	scores = make([][]float64, T)
	for b := 0; b < l.NumSeqs(); b++ {
		for t := l.QueryStart[b]; t < l.QueryStart[b+1]; t++ {
			pos := l.Pos[b] + t - l.QueryStart[b]
			nv := (pos + 1) / p.KPool
			sc := make([]float64, nv)
			for i := range sc {
				s := int(l.PoolRow(b, i, p.KPool))
				for h := 0; h < Hi; h++ {
					var dot float64
					for c := 0; c < d; c++ {
						dot += q[(t*Hi+h)*d+c] * pooled[s*d+c]
					}
					sc[i] += w[t*Hi+h] * max(0, float64(p.Scale)*dot)
				}
			}
			scores[t] = sc
			idx := make([]int, nv)
			for i := range idx {
				idx[i] = i
			}
			slices.SortStableFunc(idx, func(a, c int) int {
				switch {
				case sc[a] > sc[c]:
					return -1
				case sc[a] < sc[c]:
					return 1
				}
				return a - c
			})
			row := out[t*width : (t+1)*width]
			n := 0
			for _, i := range idx[:min(p.TopKPools, nv)] {
				for j := 0; j < p.KPool; j++ {
					row[n] = int32(i*p.KPool + j)
					n++
				}
			}
			if p.Tail {
				for s := nv * p.KPool; s <= pos; s++ {
					row[n] = int32(s)
					n++
				}
			}
			for ; n < width; n++ {
				row[n] = -1
			}
		}
	}
	return out, scores
}

func dsaWidth(p npu.IndexParams) int {
	w := p.TopKPools * p.KPool
	if p.Tail {
		w += p.KPool - 1
	}
	return w
}

// TestDSAIndexExact uses small integers and a power-of-two scale, so that
// fp32 scores are exact: the whole output, ties included, must equal the
// reference.
func TestDSAIndexExact(t *testing.T) {
	be := New(2)
	const Hi, d = 3, 5
	pos := []int{0, 13, 5, 30, 2}
	lens := []int{9, 1, 20, 3, 0}
	defer func(w int) { dsaWaveScores = w }(dsaWaveScores)
	for _, kp := range []int{1, 2, 4} {
		for _, topk := range []int{0, 1, 3, 8} {
			for _, tail := range []bool{false, true} {
				dsaWaveScores = 1 << 24
				if tail {
					dsaWaveScores = 7 // many waves
				}
				for _, bs := range []int{kp, 3 * kp} { // one or three pools per block
					t.Run(fmt.Sprintf("kp%d_bs%d_top%d_tail%v", kp, bs, topk, tail), func(t *testing.T) {
						r := rand.New(rand.NewPCG(uint64(kp*100+topk), uint64(bs)))
						lay := newDSALayout(t, be, r, pos, lens, kp, bs)
						T := lay.host.Rows()
						ints := func(n, lo, hi int) []float64 {
							v := make([]float64, n)
							for i := range v {
								v[i] = float64(lo + r.IntN(hi-lo+1))
							}
							return v
						}
						q, w, pooled := ints(T*Hi*d, -2, 2), ints(T*Hi, -1, 2), ints(lay.nslots*d, -1, 1)
						p := npu.IndexParams{TopKPools: topk, KPool: kp, Tail: tail, Scale: 0.5}
						width := dsaWidth(p)
						out := npu.Must(be.Alloc(npu.I32, T, width))
						be.DSAIndex(out, atF32(be, q, T, Hi*d), atF32(be, w, T, Hi), atF32(be, pooled, lay.nslots, d), lay.seqs, p)
						want, _ := dsaRef(q, w, pooled, lay.host, Hi, d, p, width)
						got := I32(out)
						for tr := 0; tr < T; tr++ {
							if !slices.Equal(got[tr*width:(tr+1)*width], want[tr*width:(tr+1)*width]) {
								t.Fatalf("row %d: got %v, want %v", tr, got[tr*width:(tr+1)*width], want[tr*width:(tr+1)*width])
							}
						}
					})
				}
			}
		}
	}
}

// TestDSAIndexTies gives every pool the same key: all scores are equal and
// the lowest pools must win, in ascending order.
func TestDSAIndexTies(t *testing.T) {
	be := New(2)
	const Hi, d, kp, topk = 2, 4, 4, 3
	r := rand.New(rand.NewPCG(2, 2))
	lay := newDSALayout(t, be, r, []int{40, 3}, []int{4, 2}, kp, kp)
	T := lay.host.Rows()
	key := atNormal(r, d, 0, 1)
	pooled := make([]float64, lay.nslots*d)
	for i := range pooled {
		pooled[i] = key[i%d]
	}
	p := npu.IndexParams{TopKPools: topk, KPool: kp, Tail: true, Scale: 0.17}
	width := dsaWidth(p)
	out := npu.Must(be.Alloc(npu.I32, T, width))
	be.DSAIndex(out, atF32(be, atNormal(r, T*Hi*d, 0, 1), T, Hi*d), atF32(be, atNormal(r, T*Hi, 0, 1), T, Hi),
		atF32(be, pooled, lay.nslots, d), lay.seqs, p)
	want := [][]int32{
		{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 40, -1, -1},       // pos 40: tail {40}
		{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 40, 41, -1},       // pos 41
		{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 40, 41, 42},       // pos 42
		{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, -1, -1, -1},       // pos 43: pool 10 complete, no tail
		{0, 1, 2, 3, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1}, // pos 3: one pool, no tail
		{0, 1, 2, 3, 4, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1},  // pos 4: tail {4}
	}
	got := I32(out)
	for tr, w := range want {
		if !slices.Equal(got[tr*width:(tr+1)*width], w) {
			t.Errorf("row %d: got %v, want %v", tr, got[tr*width:(tr+1)*width], w)
		}
	}
}

// TestDSAIndexRandom checks random fp32 inputs (F32 and BF16 pooled keys,
// more pools than one scoring block) against float64 scores: the selected
// pools must be a top-k within rounding, in descending order.
func TestDSAIndexRandom(t *testing.T) {
	be := New(2)
	const Hi, d, kp = 4, 16, 4
	for _, dt := range []npu.DType{npu.F32, npu.BF16} {
		t.Run(dt.String(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, uint64(dt)))
			lay := newDSALayout(t, be, r, []int{1100, 0, 37}, []int{3, 21, 1}, kp, kp)
			T := lay.host.Rows()
			q, w := atNormal(r, T*Hi*d, 0, 1), atNormal(r, T*Hi, 0.2, 1)
			tp, pooled := atTensor(be, dt, atNormal(r, lay.nslots*d, 0, 1), lay.nslots, d)
			p := npu.IndexParams{TopKPools: 64, KPool: kp, Tail: true, Scale: 0.25}
			width := dsaWidth(p)
			out := npu.Must(be.Alloc(npu.I32, T, width))
			be.DSAIndex(out, atF32(be, q, T, Hi*d), atF32(be, w, T, Hi), tp, lay.seqs, p)
			_, scores := dsaRef(q, w, pooled, lay.host, Hi, d, p, width)
			got := I32(out)
			for b := 0; b < lay.host.NumSeqs(); b++ {
				for tr := lay.host.QueryStart[b]; tr < lay.host.QueryStart[b+1]; tr++ {
					pos := lay.host.Pos[b] + tr - lay.host.QueryStart[b]
					if err := dsaValid(got[tr*width:(tr+1)*width], scores[tr], pos, p, 1e-4); err != "" {
						t.Fatalf("row %d (pos %d): %s", tr, pos, err)
					}
				}
			}
		})
	}
}

// dsaValid checks one output row against float64 pool scores with a
// relative tolerance for rounding.
func dsaValid(row []int32, sc []float64, pos int, p npu.IndexParams, tol float64) string {
	kp := p.KPool
	nv := (pos + 1) / kp
	k := min(p.TopKPools, nv)
	var scale float64
	for _, s := range sc {
		scale = max(scale, math.Abs(s))
	}
	chosen := map[int]bool{}
	var order []int
	for i := 0; i < k; i++ {
		first := int(row[i*kp])
		if first < 0 || first%kp != 0 || first/kp >= nv || chosen[first/kp] {
			return fmt.Sprintf("bad pool start %d in %v", first, row)
		}
		for j := 1; j < kp; j++ {
			if int(row[i*kp+j]) != first+j {
				return fmt.Sprintf("pool %d not expanded in %v", first/kp, row)
			}
		}
		chosen[first/kp] = true
		order = append(order, first/kp)
	}
	for i := 1; i < len(order); i++ {
		if sc[order[i]] > sc[order[i-1]]+tol*scale {
			return fmt.Sprintf("pools %v not in descending score order", order)
		}
	}
	minSel := math.Inf(1)
	for _, i := range order {
		minSel = min(minSel, sc[i])
	}
	for i := 0; i < nv; i++ {
		if !chosen[i] && sc[i] > minSel+tol*scale {
			return fmt.Sprintf("pool %d (score %g) beats a selected one (%g)", i, sc[i], minSel)
		}
	}
	n := k * kp
	for s := nv * kp; s <= pos; s++ {
		if int(row[n]) != s {
			return fmt.Sprintf("tail position %d missing in %v", s, row)
		}
		n++
	}
	for ; n < len(row); n++ {
		if row[n] != -1 {
			return fmt.Sprintf("entry %d is %d, want -1", n, row[n])
		}
	}
	return ""
}

func TestDSAIndexPanics(t *testing.T) {
	be := New(1)
	p := npu.IndexParams{TopKPools: 2, KPool: 2, Tail: true, Scale: 1}
	// Positions 0..4 in blocks of 2: pools 0 and 1 in blocks 0 and 1, the
	// tail in block 2.
	lay := func(bs int, bt ...int32) *npu.BatchLayout {
		return &npu.BatchLayout{QueryStart: []int{0, 2}, Pos: []int{3}, StateSlot: []int{0}, BlockSize: bs, BlockTables: [][]int32{bt}}
	}
	q, w, pooled := npu.Must(be.Alloc(npu.F32, 2, 2*3)), npu.Must(be.Alloc(npu.F32, 2, 2)), npu.Must(be.Alloc(npu.F32, 4, 3))
	for _, c := range []struct {
		what  string
		seqs  *npu.SeqLayout
		width int
		msg   string
	}{
		{"wrong width", upLayout(t, be, lay(2, 0, 1, 2)), 4, "DSAIndex out"},
		{"pool row out of range", upLayout(t, be, lay(2, 0, 4, 2)), 5, "pool 1 of sequence 0 at row 4 outside a cache of 4 rows"},
		{"unassigned pool block", upLayout(t, be, lay(2, 0, -1, 2)), 5, "pool 1 of sequence 0 at row -1"},
		// A block table too narrow for the pools (BatchLayout.Check refuses
		// it on the host; the op must too).
		{"missing pool block", rawLayout(be, lay(2, 0)), 5, "not 2 pools of 2"},
		{"block size not a multiple of the pool", upLayout(t, be, lay(3, 0, 1)), 5, "not a multiple of the pool"},
	} {
		if msg := atPanicMsg(func() { be.DSAIndex(npu.Must(be.Alloc(npu.I32, 2, c.width)), q, w, pooled, c.seqs, p) }); !strings.Contains(msg, c.msg) {
			t.Errorf("%s: panic %q, want one containing %q", c.what, msg, c.msg)
		}
	}
	be.DSAIndex(npu.Must(be.Alloc(npu.I32, 2, 5)), q, w, pooled, upLayout(t, be, lay(2, 0, 3, 1)), p)
}

// BenchmarkDSAIndex scores 32 heads of 128 against the pools of a 64K-token
// context (kp 4, top 512) for 64 query rows (chunked prefill) and for one
// (decode).
func BenchmarkDSAIndex(b *testing.B) {
	for _, T := range []int{64, 1} {
		b.Run(fmt.Sprint("rows", T), func(b *testing.B) {
			be := New(0)
			const Hi, d, kp, ctx = 32, 128, 4, 65536
			r := rand.New(rand.NewPCG(1, 1))
			lay := newDSALayout(b, be, r, []int{ctx - T}, []int{T}, kp, kp)
			p := npu.IndexParams{TopKPools: 512, KPool: kp, Tail: true, Scale: float32(1 / math.Sqrt(d))}
			q := atF32(be, atNormal(r, T*Hi*d, 0, 1), T, Hi*d)
			w := atF32(be, atNormal(r, T*Hi, 0, 1), T, Hi)
			pooled := atF32(be, atNormal(r, lay.nslots*d, 0, 1), lay.nslots, d)
			out := npu.Must(be.Alloc(npu.I32, T, dsaWidth(p)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				be.DSAIndex(out, q, w, pooled, lay.seqs, p)
			}
			b.ReportMetric(float64(T*b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
