package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

func coreSig64(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

func TestCopy(t *testing.T) {
	dts := []npu.DType{npu.F32, npu.BF16, npu.F16, npu.I32}
	for _, threads := range coreThreads {
		be := New(threads)
		for _, n := range []int{1, 7, 129, 70000} {
			for _, sdt := range dts {
				for _, ddt := range dts {
					t.Run(fmt.Sprintf("t%d/n%d/%v-%v", threads, n, sdt, ddt), func(t *testing.T) {
						rng := rand.New(rand.NewPCG(uint64(n), uint64(sdt)*16+uint64(ddt)))
						vals := coreRand(rng, n, 1000, sdt)
						if sdt != npu.I32 && ddt == npu.I32 && n > 3 {
							vals[0], vals[1], vals[2] = -2.75, 2.75, -0.5
						}
						src := coreTensor(be, sdt, vals, n)
						dst := npu.Must(be.Alloc(ddt, n))
						be.Copy(dst, src)
						want := make([]float64, n)
						for i, v := range vals {
							want[i] = coreQuantize(v, ddt)
							if ddt == npu.I32 {
								want[i] = math.Trunc(v)
							}
						}
						coreClose(t, "Copy", coreValues(be, dst), want, nil, 0)
					})
				}
			}
		}
	}
	t.Run("raw-bytes", func(t *testing.T) {
		be := New(2)
		src := npu.Must(be.FromHost(npu.U8, []byte{1, 2, 3, 250}, 4))
		dst := npu.Must(be.Alloc(npu.U8, 2, 2))
		be.Copy(dst, src)
		got := make([]byte, 4)
		if err := be.Download(got, dst); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, []byte{1, 2, 3, 250}) {
			t.Fatalf("U8 copy = %v", got)
		}
	})
	t.Run("special", func(t *testing.T) {
		be := New(1)
		inf := math.Inf(1)
		src := coreTensor(be, npu.F32, []float64{math.NaN(), inf, -inf, 3e9, -3e9, 1e-40}, 6)
		i := npu.Must(be.Alloc(npu.I32, 6))
		be.Copy(i, src)
		coreClose(t, "F32->I32", coreValues(be, i), []float64{0, math.MaxInt32, math.MinInt32, math.MaxInt32, math.MinInt32, 0}, nil, 0)
		h := npu.Must(be.Alloc(npu.BF16, 6))
		be.Copy(h, src)
		got := coreValues(be, h)
		if !math.IsNaN(got[0]) || got[1] != inf || got[2] != -inf {
			t.Fatalf("F32->BF16 specials = %v", got)
		}
	})
}

func TestFill(t *testing.T) {
	be := New(2)
	for _, dt := range []npu.DType{npu.F32, npu.BF16, npu.F16} {
		for _, n := range []int{1, 33, 100000} {
			d := npu.Must(be.Alloc(dt, n))
			be.Fill(d, 1.3)
			for i, v := range coreValues(be, d) {
				if v != coreQuantize(1.3, dt) {
					t.Fatalf("Fill %v n=%d: [%d] = %v", dt, n, i, v)
				}
			}
		}
	}
}

// coreBinaryRef computes a op b with Add's broadcasting.
func coreBinaryRef(a, b []float64, op func(x, y float64) float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = op(a[i], b[i%len(b)])
	}
	return out
}

func TestAddMul(t *testing.T) {
	ops := []struct {
		name string
		fn   func(be *Backend, out, a, b *npu.Tensor)
		ref  func(x, y float64) float64
	}{
		{"Add", (*Backend).Add, func(x, y float64) float64 { return float64(float32(x + y)) }},
		{"Mul", (*Backend).Mul, func(x, y float64) float64 { return float64(float32(x * y)) }},
	}
	shapes := [][2]int{{1, 1}, {3, 7}, {17, 33}, {65, 129}, {2, 40000}}
	for _, threads := range coreThreads {
		be := New(threads)
		for _, op := range ops {
			for _, sh := range shapes {
				for _, bcast := range []bool{false, true} {
					for _, bdt := range []npu.DType{npu.F32, npu.BF16} {
						for _, alias := range []bool{false, true} {
							name := fmt.Sprintf("%s/t%d/%dx%d/bcast=%v/%v/alias=%v", op.name, threads, sh[0], sh[1], bcast, bdt, alias)
							t.Run(name, func(t *testing.T) {
								rng := rand.New(rand.NewPCG(uint64(sh[0]), uint64(sh[1])))
								av := coreRand(rng, sh[0]*sh[1], 3, npu.F32)
								a := coreTensor(be, npu.F32, av, sh[0], sh[1])
								var b *npu.Tensor
								var bv []float64
								if bcast {
									bv = coreRand(rng, sh[1], 3, bdt)
									b = coreTensor(be, bdt, bv, sh[1])
								} else {
									bv = coreRand(rng, sh[0]*sh[1], 3, bdt)
									b = coreTensor(be, bdt, bv, sh[0], sh[1])
								}
								out := a
								if !alias {
									out = npu.Must(be.Alloc(npu.F32, sh[0], sh[1]))
								}
								op.fn(be, out, a, b)
								coreClose(t, op.name, coreValues(be, out), coreBinaryRef(av, bv, op.ref), nil, 0)
							})
						}
					}
				}
			}
		}
	}
}

// coreUnaryCase is one elementwise op with its float64 reference.
type coreUnaryCase struct {
	name string
	fn   func(be *Backend, out, x *npu.Tensor)
	ref  func(x float64) float64
	rtol float64
}

func TestUnary(t *testing.T) {
	cases := []coreUnaryCase{
		{"Scale", func(be *Backend, o, x *npu.Tensor) { be.Scale(o, x, -1.75) }, func(x float64) float64 { return -1.75 * x }, 1e-7},
		{"Sigmoid", (*Backend).Sigmoid, coreSig64, 1e-6},
		{"SiLU", (*Backend).SiLU, func(x float64) float64 { return x * coreSig64(x) }, 1e-6},
	}
	for _, threads := range coreThreads {
		be := New(threads)
		for _, c := range cases {
			for _, n := range []int{1, 3, 17, 127, 50000} {
				for _, alias := range []bool{false, true} {
					t.Run(fmt.Sprintf("%s/t%d/n%d/alias=%v", c.name, threads, n, alias), func(t *testing.T) {
						rng := rand.New(rand.NewPCG(uint64(n), 5))
						xv := coreRand(rng, n, 12, npu.F32)
						if n >= 3 {
							xv[0], xv[1], xv[2] = 100, -100, 0
						}
						x := coreTensor(be, npu.F32, xv, n)
						out := x
						if !alias {
							out = npu.Must(be.Alloc(npu.F32, n))
						}
						c.fn(be, out, x)
						want := make([]float64, n)
						for i, v := range xv {
							want[i] = c.ref(v)
						}
						coreClose(t, c.name, coreValues(be, out), want, nil, c.rtol)
					})
				}
			}
		}
	}
}

func TestSwiGLU(t *testing.T) {
	for _, threads := range coreThreads {
		be := New(threads)
		for _, sh := range [][2]int{{1, 1}, {3, 7}, {17, 129}, {5, 4000}} {
			for _, limit := range []float32{0, 7, float32(math.Inf(1))} {
				t.Run(fmt.Sprintf("t%d/%dx%d/limit=%v", threads, sh[0], sh[1], limit), func(t *testing.T) {
					M, I := sh[0], sh[1]
					rng := rand.New(rand.NewPCG(uint64(M), uint64(I)))
					gu := coreRand(rng, M*2*I, 12, npu.F32)
					out := npu.Must(be.Alloc(npu.F32, M, I))
					be.SwiGLU(out, coreTensor(be, npu.F32, gu, M, 2*I), limit)
					want := make([]float64, M*I)
					L := float64(limit)
					for m := 0; m < M; m++ {
						for i := 0; i < I; i++ {
							g, u := gu[m*2*I+i], gu[m*2*I+I+i]
							if L > 0 {
								g = math.Min(g, L)
								u = math.Max(math.Min(u, L), -L)
							}
							want[m*I+i] = g * coreSig64(g) * u
						}
					}
					coreClose(t, "SwiGLU", coreValues(be, out), want, nil, 1e-6)
				})
			}
		}
	}
}

func TestSoftmax(t *testing.T) {
	for _, threads := range coreThreads {
		be := New(threads)
		for _, sh := range [][2]int{{1, 1}, {3, 7}, {17, 33}, {65, 129}, {2, 5000}} {
			for _, alias := range []bool{false, true} {
				t.Run(fmt.Sprintf("t%d/%dx%d/alias=%v", threads, sh[0], sh[1], alias), func(t *testing.T) {
					M, N := sh[0], sh[1]
					rng := rand.New(rand.NewPCG(uint64(M), uint64(N)))
					xv := coreRand(rng, M*N, 30, npu.F32)
					if N > 3 {
						xv[1] = math.Inf(-1)     // masked entry
						xv[N] = 80 + xv[N]       // large values must not overflow
						for i := 0; i < N; i++ { // a fully masked row
							xv[(M-1)*N+i] = math.Inf(-1)
						}
					}
					x := coreTensor(be, npu.F32, xv, M, N)
					out := x
					if !alias {
						out = npu.Must(be.Alloc(npu.F32, M, N))
					}
					be.Softmax(out, x)
					want := make([]float64, M*N)
					for m := 0; m < M; m++ {
						row := xv[m*N : (m+1)*N]
						mx := math.Inf(-1)
						for _, v := range row {
							mx = math.Max(mx, v)
						}
						if math.IsInf(mx, -1) {
							continue // fully masked: zeros
						}
						var s float64
						for _, v := range row {
							s += math.Exp(v - mx)
						}
						for i, v := range row {
							want[m*N+i] = math.Exp(v-mx) / s
						}
					}
					coreClose(t, "Softmax", coreValues(be, out), want, nil, 1e-5)
				})
			}
		}
	}
}

// coreNormCase is a grouped normalisation shape: rows x cols input with groups
// of n elements.
type coreNormCase struct{ rows, cols, n int }

var coreNormCases = []coreNormCase{{1, 1, 1}, {3, 7, 7}, {17, 33, 33}, {5, 128, 32}, {65, 129, 129}, {4, 4096, 4096}, {2, 6, 3}}

func coreRMSRef(x []float64, eps float64) float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	return 1 / math.Sqrt(ss/float64(len(x))+eps)
}

func TestRMSNorm(t *testing.T) {
	for _, threads := range coreThreads {
		be := New(threads)
		for _, c := range coreNormCases {
			for _, mode := range []string{"F32", "BF16", "nil"} {
				if mode == "nil" && c.n != c.cols {
					continue
				}
				for _, alias := range []bool{false, true} {
					t.Run(fmt.Sprintf("t%d/%dx%d/n%d/w=%s/alias=%v", threads, c.rows, c.cols, c.n, mode, alias), func(t *testing.T) {
						rng := rand.New(rand.NewPCG(uint64(c.rows), uint64(c.cols)))
						xv := coreRand(rng, c.rows*c.cols, 4, npu.F32)
						var w *npu.Tensor
						wv := make([]float64, c.n)
						for i := range wv {
							wv[i] = 1
						}
						if mode != "nil" {
							dt := npu.F32
							if mode == "BF16" {
								dt = npu.BF16
							}
							wv = coreRand(rng, c.n, 2, dt)
							w = coreTensor(be, dt, wv, c.n)
						}
						x := coreTensor(be, npu.F32, xv, c.rows, c.cols)
						out := x
						if !alias {
							out = npu.Must(be.Alloc(npu.F32, c.rows, c.cols))
						}
						const eps = 1e-6
						be.RMSNorm(out, x, w, eps)
						want := make([]float64, len(xv))
						for g := 0; g < len(xv)/c.n; g++ {
							r := coreRMSRef(xv[g*c.n:(g+1)*c.n], eps)
							for i := 0; i < c.n; i++ {
								want[g*c.n+i] = xv[g*c.n+i] * r * wv[i]
							}
						}
						coreClose(t, "RMSNorm", coreValues(be, out), want, nil, 1e-5)
					})
				}
			}
		}
	}
}

func TestRMSNormGated(t *testing.T) {
	for _, threads := range coreThreads {
		be := New(threads)
		for _, c := range coreNormCases {
			t.Run(fmt.Sprintf("t%d/%dx%d/n%d", threads, c.rows, c.cols, c.n), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(c.rows), uint64(c.cols)))
				xv := coreRand(rng, c.rows*c.cols, 4, npu.F32)
				gv := coreRand(rng, c.rows*c.cols, 6, npu.F32)
				wv := coreRand(rng, c.n, 2, npu.F32)
				out := npu.Must(be.Alloc(npu.F32, c.rows, c.cols))
				const eps = 1e-5
				be.RMSNormGated(out, coreTensor(be, npu.F32, xv, c.rows, c.cols), coreTensor(be, npu.F32, gv, c.rows, c.cols), coreTensor(be, npu.F32, wv, c.n), eps)
				want := make([]float64, len(xv))
				for g := 0; g < len(xv)/c.n; g++ {
					r := coreRMSRef(xv[g*c.n:(g+1)*c.n], eps)
					for i := 0; i < c.n; i++ {
						j := g*c.n + i
						want[j] = xv[j] * r * wv[i] * coreSig64(gv[j])
					}
				}
				coreClose(t, "RMSNormGated", coreValues(be, out), want, nil, 1e-5)
			})
		}
	}
}

func TestLayerNorm(t *testing.T) {
	for _, threads := range coreThreads {
		be := New(threads)
		for _, c := range coreNormCases {
			for _, bias := range []bool{false, true} {
				t.Run(fmt.Sprintf("t%d/%dx%d/n%d/bias=%v", threads, c.rows, c.cols, c.n, bias), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(c.rows), uint64(c.cols)))
					xv := coreRand(rng, c.rows*c.cols, 4, npu.F32)
					for i := range xv {
						xv[i] += 3 // a mean far from zero
					}
					wv := coreRand(rng, c.n, 2, npu.BF16)
					bv := make([]float64, c.n)
					var b *npu.Tensor
					if bias {
						bv = coreRand(rng, c.n, 1, npu.F32)
						b = coreTensor(be, npu.F32, bv, c.n)
					}
					out := npu.Must(be.Alloc(npu.F32, c.rows, c.cols))
					const eps = 1e-5
					be.LayerNorm(out, coreTensor(be, npu.F32, xv, c.rows, c.cols), coreTensor(be, npu.BF16, wv, c.n), b, eps)
					want := make([]float64, len(xv))
					scale := make([]float64, len(xv))
					for g := 0; g < len(xv)/c.n; g++ {
						xs := xv[g*c.n : (g+1)*c.n]
						var mean, vr float64
						for _, v := range xs {
							mean += v
						}
						mean /= float64(c.n)
						for _, v := range xs {
							vr += (v - mean) * (v - mean)
						}
						r := 1 / math.Sqrt(vr/float64(c.n)+eps)
						for i := 0; i < c.n; i++ {
							want[g*c.n+i] = (xs[i]-mean)*r*wv[i] + bv[i]
							scale[g*c.n+i] = math.Abs(wv[i]) // cancellation in x-mean
						}
					}
					coreClose(t, "LayerNorm", coreValues(be, out), want, scale, 1e-5)
				})
			}
		}
	}
}

func TestL2Norm(t *testing.T) {
	for _, threads := range coreThreads {
		be := New(threads)
		for _, c := range coreNormCases {
			for _, alias := range []bool{false, true} {
				t.Run(fmt.Sprintf("t%d/%dx%d/n%d/alias=%v", threads, c.rows, c.cols, c.n, alias), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(c.rows), uint64(c.cols)))
					xv := coreRand(rng, c.rows*c.cols, 4, npu.F32)
					x := coreTensor(be, npu.F32, xv, c.rows, c.cols)
					out := x
					if !alias {
						out = npu.Must(be.Alloc(npu.F32, c.rows, c.cols))
					}
					const eps = 1e-6
					be.L2Norm(out, x, c.n, eps)
					want := make([]float64, len(xv))
					for g := 0; g < len(xv)/c.n; g++ {
						var ss float64
						for _, v := range xv[g*c.n : (g+1)*c.n] {
							ss += v * v
						}
						for i := 0; i < c.n; i++ {
							want[g*c.n+i] = xv[g*c.n+i] / math.Sqrt(ss+eps)
						}
					}
					coreClose(t, "L2Norm", coreValues(be, out), want, nil, 1e-5)
				})
			}
		}
	}
}

// coreConvRef runs the causal depthwise conv over one sequence: hist holds the
// previous W-1 inputs per channel ([W-1][C], oldest first) and is updated.
// It also returns the sum of the absolute terms of each output, the scale
// of its rounding error.
func coreConvRef(x []float64, T, C int, w []float64, W int, hist []float64, silu bool) (out, scale []float64) {
	out, scale = make([]float64, T*C), make([]float64, T*C)
	H := W - 1
	for c := 0; c < C; c++ {
		u := make([]float64, 0, H+T)
		for j := 0; j < H; j++ {
			u = append(u, hist[j*C+c])
		}
		for t := 0; t < T; t++ {
			u = append(u, x[t*C+c])
		}
		for t := 0; t < T; t++ {
			var s, a float64
			for i := 0; i < W; i++ {
				s += w[c*W+i] * u[t+i]
				a += math.Abs(w[c*W+i] * u[t+i])
			}
			scale[t*C+c] = a
			if silu {
				s *= coreSig64(s)
			}
			out[t*C+c] = s
		}
		for j := 0; j < H; j++ {
			hist[j*C+c] = u[T+j]
		}
	}
	return out, scale
}

func TestConv1d(t *testing.T) {
	type tc struct {
		lens []int // rows per sequence
		C, W int
	}
	cases := []tc{
		{[]int{1}, 1, 1},
		{[]int{5}, 3, 2},
		{[]int{7, 1, 0, 17}, 33, 4},
		{[]int{2, 65}, 129, 4},
		{[]int{3, 1, 2}, 200, 3},
	}
	for _, threads := range coreThreads {
		be := New(threads)
		for _, c := range cases {
			for _, silu := range []bool{false, true} {
				t.Run(fmt.Sprintf("t%d/%v/C%d/W%d/silu=%v", threads, c.lens, c.C, c.W, silu), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(c.C), uint64(c.W)))
					B, C, W, H := len(c.lens), c.C, c.W, c.W-1
					slots := B + 2
					qs := []int{0}
					for _, l := range c.lens {
						qs = append(qs, qs[len(qs)-1]+l)
					}
					T := qs[B]
					slot := make([]int, B)
					for b := range slot {
						slot[b] = (b*2 + 1) % slots // not the identity
					}
					xv := coreRand(rng, T*C, 2, npu.F32)
					wv := coreRand(rng, C*W, 1, npu.BF16)
					sv := coreRand(rng, slots*H*C, 2, npu.F32)
					state := coreTensor(be, npu.F32, sv, slots, H, C)
					out := npu.Must(be.Alloc(npu.F32, T, C))
					be.Conv1d(out, coreTensor(be, npu.F32, xv, T, C), state, coreTensor(be, npu.BF16, wv, C, W),
						upLayout(t, be, stateLayout(qs, nil, slot)), silu)
					want, scale := make([]float64, T*C), make([]float64, T*C)
					wantState := slices.Clone(sv)
					for b := 0; b < B; b++ {
						hist := wantState[slot[b]*H*C : (slot[b]+1)*H*C]
						o, s := coreConvRef(xv[qs[b]*C:qs[b+1]*C], c.lens[b], C, wv, W, hist, silu)
						copy(want[qs[b]*C:], o)
						copy(scale[qs[b]*C:], s)
					}
					coreClose(t, "out", coreValues(be, out), want, scale, 1e-6)
					coreClose(t, "state", coreValues(be, state), wantState, nil, 0)
				})
			}
		}
	}
}

// TestConv1dContinuation checks that running sequences in pieces (prefill
// chunks, then Conv1dUpdate decode steps) equals running them whole.
func TestConv1dContinuation(t *testing.T) {
	be := New(2)
	const C, L = 37, 23
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		silu bool
		wdt  npu.DType
		W    int
	}{{false, npu.F32, 4}, {true, npu.F32, 4}, {true, npu.BF16, 4}, {true, npu.F32, 1}, {false, npu.BF16, 1}} {
		silu, W := tc.silu, tc.W // W = 1: a 1-tap kernel keeps no state
		t.Run(fmt.Sprintf("silu=%v/w=%v/W=%d", silu, tc.wdt, W), func(t *testing.T) {
			// Two sequences of L rows each, in state slots 1 and 0.
			xs := [2][]float64{coreRand(rng, L*C, 2, npu.F32), coreRand(rng, L*C, 2, npu.F32)}
			w := coreTensor(be, tc.wdt, coreRand(rng, C*W, 1, tc.wdt), C, W)
			slot := []int{1, 0}
			whole := [2][]float64{}
			wholeState := npu.Must(be.Alloc(npu.F32, 2, W-1, C))
			for b := 0; b < 2; b++ {
				out := npu.Must(be.Alloc(npu.F32, L, C))
				be.Conv1d(out, coreTensor(be, npu.F32, xs[b], L, C), wholeState, w,
					upLayout(t, be, stateLayout([]int{0, L}, nil, []int{slot[b]})), silu)
				whole[b] = coreValues(be, out)
			}
			// Pieces: both sequences batched, cut at different points, then
			// the last 5 rows of each as decode steps.
			state := npu.Must(be.Alloc(npu.F32, 2, W-1, C))
			got := [2][]float64{}
			cuts := [][2]int{{0, 0}, {1, 6}, {2, 13}, {13, 14}, {18, 18}}
			for i := 0; i+1 < len(cuts); i++ {
				a0, a1 := cuts[i][0], cuts[i+1][0]
				b0, b1 := cuts[i][1], cuts[i+1][1]
				rows := append(slices.Clone(xs[0][a0*C:a1*C]), xs[1][b0*C:b1*C]...)
				T := (a1 - a0) + (b1 - b0)
				out := npu.Must(be.Alloc(npu.F32, T, C))
				be.Conv1d(out, coreTensor(be, npu.F32, rows, T, C), state, w,
					upLayout(t, be, stateLayout([]int{0, a1 - a0, T}, []int{a0, b0}, slot)), silu)
				ov := coreValues(be, out)
				got[0] = append(got[0], ov[:(a1-a0)*C]...)
				got[1] = append(got[1], ov[(a1-a0)*C:]...)
			}
			for r := 18; r < L; r++ {
				rows := append(slices.Clone(xs[0][r*C:(r+1)*C]), xs[1][r*C:(r+1)*C]...)
				out := npu.Must(be.Alloc(npu.F32, 2, C))
				be.Conv1dUpdate(out, coreTensor(be, npu.F32, rows, 2, C), state, w,
					upLayout(t, be, stateLayout([]int{0, 1, 2}, []int{r, r}, slot)), silu)
				ov := coreValues(be, out)
				got[0] = append(got[0], ov[:C]...)
				got[1] = append(got[1], ov[C:]...)
			}
			for b := 0; b < 2; b++ {
				coreClose(t, fmt.Sprintf("seq%d", b), got[b], whole[b], nil, 0)
			}
			coreClose(t, "state", coreValues(be, state), coreValues(be, wholeState), nil, 0)
		})
	}
}

// coreTopKRef ranks every column of a row with the TopK order.
func coreTopKRef(row []float64, k int) ([]float64, []float64) {
	idx := make([]int, len(row))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool {
		va, vb := row[idx[a]], row[idx[b]]
		if math.IsNaN(va) || math.IsNaN(vb) {
			return !math.IsNaN(va) && math.IsNaN(vb)
		}
		return va > vb
	})
	vals, ids := make([]float64, k), make([]float64, k)
	for i := 0; i < k; i++ {
		vals[i], ids[i] = row[idx[i]], float64(idx[i])
	}
	return vals, ids
}

func TestTopK(t *testing.T) {
	for _, threads := range coreThreads {
		be := New(threads)
		for _, sh := range [][2]int{{1, 1}, {3, 7}, {17, 33}, {2, 129}, {5, 1000}} {
			M, N := sh[0], sh[1]
			for _, k := range []int{1, 3, 17, N} {
				if k > N {
					continue
				}
				t.Run(fmt.Sprintf("t%d/%dx%d/k%d", threads, M, N, k), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(M*N), uint64(k)))
					xv := make([]float64, M*N)
					for i := range xv {
						xv[i] = float64(rng.IntN(9) - 4) // many ties
						switch rng.IntN(12) {
						case 0:
							xv[i] = math.NaN()
						case 1:
							xv[i] = math.Inf(-1)
						case 2:
							xv[i] = coreQuantize(rng.Float64(), npu.F32)
						}
					}
					vals, idx := npu.Must(be.Alloc(npu.F32, M, k)), npu.Must(be.Alloc(npu.I32, M, k))
					be.TopK(vals, idx, coreTensor(be, npu.F32, xv, M, N), k)
					gv, gi := coreValues(be, vals), coreValues(be, idx)
					for m := 0; m < M; m++ {
						wv, wi := coreTopKRef(xv[m*N:(m+1)*N], k)
						coreClose(t, fmt.Sprintf("vals[%d]", m), gv[m*k:(m+1)*k], wv, nil, 0)
						coreClose(t, fmt.Sprintf("idx[%d]", m), gi[m*k:(m+1)*k], wi, nil, 0)
					}
				})
			}
		}
	}
}

func TestGatherScatterEmbedding(t *testing.T) {
	type conv struct{ table, out npu.DType }
	convs := []conv{{npu.F32, npu.F32}, {npu.BF16, npu.F32}, {npu.F16, npu.F32}, {npu.F32, npu.BF16}, {npu.I32, npu.I32}}
	for _, threads := range coreThreads {
		be := New(threads)
		for _, cv := range convs {
			for _, sh := range [][3]int{{1, 1, 1}, {7, 3, 17}, {33, 65, 129}, {5, 2000, 40}} {
				V, D, M := sh[0], sh[1], sh[2]
				t.Run(fmt.Sprintf("t%d/%v-%v/V%d/D%d/M%d", threads, cv.table, cv.out, V, D, M), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(V*D), uint64(M)))
					tv := coreRand(rng, V*D, 100, cv.table)
					table := coreTensor(be, cv.table, tv, V, D)
					ids := make([]float64, M)
					for i := range ids {
						ids[i] = float64(rng.IntN(V))
					}
					idT := coreTensor(be, npu.I32, ids, M)
					want := make([]float64, M*D)
					for i, r := range ids {
						for j := 0; j < D; j++ {
							want[i*D+j] = coreQuantize(tv[int(r)*D+j], cv.out)
						}
					}
					for _, op := range []string{"Gather", "Embedding"} {
						out := npu.Must(be.Alloc(cv.out, M, D))
						if op == "Gather" {
							be.Gather(out, table, idT)
						} else {
							be.Embedding(out, table, idT)
						}
						coreClose(t, op, coreValues(be, out), want, nil, 0)
					}

					// Scatter rows of an M x D batch (dtype cv.table) into a
					// V x D destination (dtype cv.out); repeated indices:
					// the last row wins.
					src := coreTensor(be, cv.table, tv[:min(M, V)*D], min(M, V), D)
					sids := ids[:min(M, V)]
					dstV := coreRand(rng, V*D, 1, cv.out)
					dst := coreTensor(be, cv.out, dstV, V, D)
					be.Scatter(dst, src, coreTensor(be, npu.I32, sids, len(sids)))
					wantD := slices.Clone(dstV)
					for i, r := range sids {
						for j := 0; j < D; j++ {
							wantD[int(r)*D+j] = coreQuantize(tv[i*D+j], cv.out)
						}
					}
					coreClose(t, "Scatter", coreValues(be, dst), wantD, nil, 0)
				})
			}
		}
	}
}

// TestViews checks ops on tensors that are views at a non-zero offset.
func TestViews(t *testing.T) {
	be := New(2)
	rng := rand.New(rand.NewPCG(9, 9))
	bv := coreRand(rng, 10*6, 3, npu.F32)
	big := coreTensor(be, npu.F32, bv, 10, 6)
	a := big.Rows(3, 7)
	out := npu.Must(be.Alloc(npu.F32, 4, 6))
	be.Add(out, a, big.Rows(9, 10).Reshape(6))
	want := make([]float64, 24)
	for i := range want {
		want[i] = float64(float32(bv[18+i] + bv[54+i%6]))
	}
	coreClose(t, "Add(view)", coreValues(be, out), want, nil, 0)
}

func TestShapePanics(t *testing.T) {
	be := New(1)
	f := func(shape ...int) *npu.Tensor { return npu.Must(be.Alloc(npu.F32, shape...)) }
	slot1 := upLayout(t, be, stateLayout([]int{0, 1}, nil, []int{1})) // beyond a state of one slot
	cases := []struct {
		name string
		fn   func()
	}{
		{"Copy count", func() { be.Copy(f(3), f(4)) }},
		{"Add bcast", func() { be.Add(f(2, 3), f(2, 3), f(2)) }},
		{"MatMul K", func() { be.MatMul(f(2, 3), f(2, 4), f(3, 5)) }},
		{"MatMul out", func() { be.MatMul(f(2, 4), f(2, 5), f(3, 5)) }},
		{"MatMul I32 weight", func() { be.MatMul(f(2, 3), f(2, 5), npu.Must(be.Alloc(npu.I32, 3, 5))) }},
		{"RMSNorm group", func() { be.RMSNorm(f(2, 5), f(2, 5), f(3), 1e-6) }},
		{"TopK k", func() { be.TopK(f(1, 5), npu.Must(be.Alloc(npu.I32, 1, 5)), f(1, 4), 5) }},
		{"Gather range", func() { be.Gather(f(1, 2), f(3, 2), coreTensor(be, npu.I32, []float64{3}, 1)) }},
		{"Gather dtype", func() { be.Gather(f(1, 2), f(3, 2), f(1)) }},
		{"Conv1d slot", func() {
			be.Conv1d(f(1, 2), f(1, 2), f(1, 3, 2), f(2, 4), slot1, false)
		}},
		{"Fill I32", func() { be.Fill(npu.Must(be.Alloc(npu.I32, 2)), 1) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			c.fn()
		})
	}
}

// TestDescribe: the description names the CPU and the kernels in use.
func TestDescribe(t *testing.T) {
	d := New(3).Describe()
	for key, want := range map[string]string{"threads": "3", "matmul_kernel": MatMulKernel(), "int8_kernel": Int8Kernel()} {
		if d[key] != want {
			t.Errorf("Describe()[%q] = %q, want %q", key, d[key], want)
		}
	}
	for _, key := range []string{"cpu_model", "cores", "arch", "simd"} {
		if d[key] == "" {
			t.Errorf("Describe() has no %q: %v", key, d)
		}
	}
	if npu.Describe(New(1)) == nil {
		t.Error("npu.Describe of the cpu backend is nil")
	}
}
