package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

// refSampleReduce is the plain reference of SampleReduce for one row: a
// full stable sort by the TopK order and two counting loops.
func refSampleReduce(row []float32, k int) (vals []float32, ids []int32, nan, inf int32) {
	idx := npu.TopKOrder(row)
	for _, i := range idx[:k] {
		vals, ids = append(vals, row[i]), append(ids, i)
	}
	for _, v := range row {
		if math.IsNaN(float64(v)) {
			nan++
		} else if math.IsInf(float64(v), 1) {
			inf++
		}
	}
	return vals, ids, nan, inf
}

// sampleReduceRows fills m rows of n logits of the given kind.
func sampleReduceRows(rng *rand.Rand, kind string, m, n int) []float32 {
	x := make([]float32, m*n)
	nan, pinf, ninf := float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))
	for i := range x {
		switch kind {
		case "ties":
			x[i] = float32(rng.IntN(7) - 3)
			switch rng.IntN(16) {
			case 0:
				x[i] = nan
			case 1:
				x[i] = ninf
			case 2:
				x[i] = pinf
			case 3:
				x[i] = float32(math.Copysign(0, -1)) // ties with +0
			case 4:
				x[i] = math.MaxFloat32 // finite: no +Inf count
			}
		case "smooth":
			x[i] = float32(rng.NormFloat64() * 4)
		case "all -Inf":
			x[i] = ninf
		case "all NaN":
			x[i] = nan
		case "one max":
			x[i] = float32(rng.IntN(3))
		}
	}
	if kind == "one max" {
		for r := 0; r < m; r++ {
			x[r*n+rng.IntN(n)] = 10 // the only candidate that matters
		}
	}
	return x
}

// TestSampleReduce checks the op against refSampleReduce bit for bit on
// odd sizes, on one thread and on three (the long rows with fewer rows than
// threads take the split-and-merge path), for every k from 0 to small
// rows' full width.
func TestSampleReduce(t *testing.T) {
	shapes := [][2]int{{1, 1}, {3, 7}, {2, 129}, {5, 1000}, {1, 2*reduceChunk + 3}, {2, 3*reduceChunk + 1}, {4, 2*reduceChunk - 1}}
	kinds := []string{"ties", "smooth", "all -Inf", "all NaN", "one max"}
	for _, threads := range coreThreads {
		be := New(threads)
		for _, sh := range shapes {
			m, n := sh[0], sh[1]
			for _, kind := range kinds {
				for _, k := range []int{0, 1, 2, 5, 33, 257, n} {
					if k > n {
						continue
					}
					t.Run(fmt.Sprintf("t%d/%dx%d/%s/k%d", threads, m, n, kind, k), func(t *testing.T) {
						rng := rand.New(rand.NewPCG(uint64(m*n), uint64(k)))
						x := sampleReduceRows(rng, kind, m, n)
						logits := npu.Must(be.Alloc(npu.F32, m, n))
						if err := be.Upload(logits, npu.EncodeFloats(x, npu.F32)); err != nil {
							t.Fatal(err)
						}
						var vals, ids *npu.Tensor
						if k > 0 {
							vals, ids = npu.Must(be.Alloc(npu.F32, m, k)), npu.Must(be.Alloc(npu.I32, m, k))
						}
						stats := npu.Must(be.Alloc(npu.I32, m, 2))
						be.SampleReduce(vals, ids, stats, logits, k)
						gs := npu.MustI32(be, stats)
						var gv []float32
						var gi []int32
						if k > 0 {
							gv, gi = npu.MustF32(be, vals), npu.MustI32(be, ids)
						}
						for r := 0; r < m; r++ {
							wv, wi, wn, wp := refSampleReduce(x[r*n:(r+1)*n], k)
							if gs[2*r] != wn || gs[2*r+1] != wp {
								t.Fatalf("row %d: stats (NaN, +Inf) = (%d, %d), want (%d, %d)", r, gs[2*r], gs[2*r+1], wn, wp)
							}
							if k == 0 {
								continue
							}
							if !slices.Equal(gi[r*k:(r+1)*k], wi) {
								t.Fatalf("row %d: ids %v, want %v", r, gi[r*k:(r+1)*k], wi)
							}
							for j, v := range gv[r*k : (r+1)*k] {
								if math.Float32bits(v) != math.Float32bits(wv[j]) && !(v != v && wv[j] != wv[j]) {
									t.Fatalf("row %d: vals[%d] = %v, want %v", r, j, v, wv[j])
								}
							}
						}
					})
				}
			}
		}
	}
}

// TestSampleReduceRejects: bad arguments are programming errors (panics).
func TestSampleReduceRejects(t *testing.T) {
	be := New(1)
	logits := npu.Must(be.Alloc(npu.F32, 2, 5))
	stats := npu.Must(be.Alloc(npu.I32, 2, 2))
	vals, ids := npu.Must(be.Alloc(npu.F32, 2, 3)), npu.Must(be.Alloc(npu.I32, 2, 3))
	for name, f := range map[string]func(){
		"nil logits":      func() { be.SampleReduce(vals, ids, stats, nil, 3) },
		"nil stats":       func() { be.SampleReduce(vals, ids, nil, logits, 3) },
		"k > V":           func() { be.SampleReduce(vals, ids, stats, logits, 6) },
		"k < 0":           func() { be.SampleReduce(vals, ids, stats, logits, -1) },
		"k = 2 outputs 3": func() { be.SampleReduce(vals, ids, stats, logits, 2) },
		"nil vals":        func() { be.SampleReduce(nil, ids, stats, logits, 3) },
		"short stats":     func() { be.SampleReduce(vals, ids, npu.Must(be.Alloc(npu.I32, 2)), logits, 3) },
		"I32 stats as F32": func() {
			be.SampleReduce(vals, ids, npu.Must(be.Alloc(npu.F32, 2, 2)), logits, 3)
		},
		"BF16 logits": func() { be.SampleReduce(vals, ids, stats, npu.Must(be.Alloc(npu.BF16, 2, 5)), 3) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			f()
		})
	}
}

// BenchmarkSampleReduce times the reduction of decode-sized batches of a
// 151936-entry vocabulary (Qwen's) for k = 1 and k = 257.
func BenchmarkSampleReduce(b *testing.B) {
	const V = 151936
	be := New(0)
	for _, m := range []int{1, 8} {
		for _, k := range []int{1, 257} {
			b.Run(fmt.Sprintf("R%d/k%d", m, k), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(1, 2))
				logits := npu.Must(be.Alloc(npu.F32, m, V))
				x := F32(logits)
				for i := range x {
					x[i] = float32(rng.NormFloat64() * 4)
				}
				vals, ids := npu.Must(be.Alloc(npu.F32, m, k)), npu.Must(be.Alloc(npu.I32, m, k))
				stats := npu.Must(be.Alloc(npu.I32, m, 2))
				b.SetBytes(int64(4 * m * V))
				for b.Loop() {
					be.SampleReduce(vals, ids, stats, logits, k)
				}
			})
		}
	}
}
