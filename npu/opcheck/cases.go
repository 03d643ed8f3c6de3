package opcheck

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/quant"
)

// Tolerances, by the kind of arithmetic a case does (max relative error,
// see Result.MaxRelErr).
const (
	// tolExact: copies, conversions (round to nearest even) and
	// selections: the device must give the reference's bits.
	tolExact = 0
	// tolElem: one or a few roundings per element (elementwise ops, a
	// short reduction, exp/log implementations within a few ulp).
	tolElem = 1e-5
	// tolReduce: long fp32 reductions whose order differs between
	// implementations (matmuls, norms over a row, attention, MoE,
	// recurrences over a sequence), still far below bf16's 4e-3.
	tolReduce = 1e-4
	// tolQuant: quantized matmuls, exact in int32 (or in fp32 for MX),
	// where an activation on a rounding boundary may quantize one
	// step apart.
	tolQuant = 5e-3
)

// Cases returns the conformance table: at least one case per op of
// npu.Ops, and SampleReduce for backends that implement
// npu.SampleReducer.
func Cases() []*Case {
	var cs []*Case
	add := func(c ...*Case) { cs = append(cs, c...) }

	// Copy and Fill.
	copyCase := func(name string, sdt, ddt npu.DType, lo, hi float64, shape ...int) *Case {
		return &Case{Op: "Copy", Name: name, Tol: tolExact, Why: "a conversion is exact (round to nearest even, truncation to I32)",
			setup: func(s *Side) (func(), []*npu.Tensor) {
				v := s.uniform(numel(shape), lo, hi)
				var src *npu.Tensor
				if sdt == npu.I32 {
					iv := make([]int32, len(v))
					for i, x := range v {
						iv[i] = int32(x)
					}
					src = s.i32(iv, shape...)
				} else {
					src = s.floats(sdt, v, shape...)
				}
				dst := s.alloc(ddt, shape...)
				return func() { s.be.Copy(dst, src) }, []*npu.Tensor{dst}
			}}
	}
	add(copyCase("F32->BF16 37x19", npu.F32, npu.BF16, -100, 100, 37, 19),
		copyCase("BF16->F32 5x131", npu.BF16, npu.F32, -3, 3, 5, 131),
		copyCase("F32->F16 23x29", npu.F32, npu.F16, -1000, 1000, 23, 29),
		copyCase("F32->I32 41", npu.F32, npu.I32, -1000, 1000, 41),
		copyCase("I32->F32 3x17", npu.I32, npu.F32, -100000, 100000, 3, 17))
	add(&Case{Op: "Fill", Name: "F32 33x7", Tol: tolExact, Why: "a constant is exact",
		setup: func(s *Side) (func(), []*npu.Tensor) {
			d := s.randn(npu.F32, 1, 33, 7)
			return func() { s.be.Fill(d, 1.375) }, []*npu.Tensor{d}
		}})

	// MatMul.
	for _, c := range []struct {
		M, N, K int
		dt      npu.DType
	}{{7, 45, 67, npu.F32}, {13, 33, 129, npu.BF16}, {1, 65, 96, npu.F16}, {37, 19, 5, npu.F32}} {
		add(&Case{Op: "MatMul", Name: fmt.Sprintf("%dx%dx%d %v weight", c.M, c.N, c.K, c.dt), Tol: tolReduce,
			Why: "fp32 accumulation over K in an implementation's order",
			setup: func(s *Side) (func(), []*npu.Tensor) {
				x := s.randn(npu.F32, 1, c.M, c.K)
				w := s.randn(c.dt, 1/math.Sqrt(float64(c.K)), c.N, c.K)
				out := s.alloc(npu.F32, c.M, c.N)
				return func() { s.be.MatMul(out, x, w) }, []*npu.Tensor{out}
			}})
	}

	// Add, Mul (same shape and a broadcast row), Scale.
	binary := func(op string, f func(be npu.Backend, out, a, b *npu.Tensor)) {
		add(&Case{Op: op, Name: "17x31", Tol: tolElem, Why: "one rounding per element",
			setup: func(s *Side) (func(), []*npu.Tensor) {
				a, b := s.randn(npu.F32, 2, 17, 31), s.randn(npu.F32, 2, 17, 31)
				out := s.alloc(npu.F32, 17, 31)
				return func() { f(s.be, out, a, b) }, []*npu.Tensor{out}
			}},
			&Case{Op: op, Name: "9x45 + BF16 row", Tol: tolElem, Why: "one rounding per element",
				setup: func(s *Side) (func(), []*npu.Tensor) {
					a, b := s.randn(npu.F32, 2, 9, 45), s.randn(npu.BF16, 2, 45)
					out := s.alloc(npu.F32, 9, 45)
					return func() { f(s.be, out, a, b) }, []*npu.Tensor{out}
				}})
	}
	binary("Add", npu.Backend.Add)
	binary("Mul", npu.Backend.Mul)

	unary := func(op, name string, lo, hi float64, f func(be npu.Backend, out, x *npu.Tensor), shape ...int) *Case {
		return &Case{Op: op, Name: name, Tol: tolElem, Why: "one exp or product per element",
			setup: func(s *Side) (func(), []*npu.Tensor) {
				x := s.floats(npu.F32, s.uniform(numel(shape), lo, hi), shape...)
				out := s.alloc(npu.F32, shape...)
				return func() { f(s.be, out, x) }, []*npu.Tensor{out}
			}}
	}
	add(unary("Scale", "23x9 by -1.75", -10, 10, func(be npu.Backend, o, x *npu.Tensor) { be.Scale(o, x, -1.75) }, 23, 9),
		unary("Sigmoid", "19x23", -12, 12, npu.Backend.Sigmoid, 19, 23),
		unary("SiLU", "19x23", -12, 12, npu.Backend.SiLU, 19, 23),
		unary("SiLU", "1x3001", -30, 30, npu.Backend.SiLU, 1, 3001))

	// Norms.
	for _, c := range []struct {
		name       string
		rows, cols int
		n          int // group (w.Numel()); 0: unweighted over the row
		wdt        npu.DType
	}{{"11x37", 11, 37, 37, npu.F32}, {"5x96 groups of 24 BF16 weight", 5, 96, 24, npu.BF16}, {"6x29 unweighted", 6, 29, 0, npu.F32}} {
		add(&Case{Op: "RMSNorm", Name: c.name, Tol: tolElem, Why: "a sum of squares over a short group, one rsqrt",
			setup: func(s *Side) (func(), []*npu.Tensor) {
				x := s.randn(npu.F32, 2, c.rows, c.cols)
				var w *npu.Tensor
				if c.n > 0 {
					w = s.floats(c.wdt, s.uniform(c.n, 0.5, 1.5), c.n)
				}
				out := s.alloc(npu.F32, c.rows, c.cols)
				return func() { s.be.RMSNorm(out, x, w, 1e-5) }, []*npu.Tensor{out}
			}})
	}
	add(&Case{Op: "RMSNormGated", Name: "9x48 groups of 16", Tol: tolElem, Why: "RMSNorm times a sigmoid",
		setup: func(s *Side) (func(), []*npu.Tensor) {
			x, g := s.randn(npu.F32, 2, 9, 48), s.randn(npu.F32, 3, 9, 48)
			w := s.f32(s.uniform(16, 0.5, 1.5), 16)
			out := s.alloc(npu.F32, 9, 48)
			return func() { s.be.RMSNormGated(out, x, g, w, 1e-6) }, []*npu.Tensor{out}
		}})
	for _, bias := range []bool{true, false} {
		name := "7x45 with bias"
		rows, cols, n := 7, 45, 45
		if !bias {
			name, rows, cols, n = "4x39 groups of 13 no bias", 4, 39, 13
		}
		add(&Case{Op: "LayerNorm", Name: name, Tol: tolElem, Why: "a mean and variance over a short group",
			setup: func(s *Side) (func(), []*npu.Tensor) {
				x := s.floats(npu.F32, s.uniform(rows*cols, -3, 5), rows, cols)
				w := s.f32(s.uniform(n, 0.5, 1.5), n)
				var b *npu.Tensor
				if bias {
					b = s.randn(npu.F32, 0.5, n)
				}
				out := s.alloc(npu.F32, rows, cols)
				return func() { s.be.LayerNorm(out, x, w, b, 1e-5) }, []*npu.Tensor{out}
			}})
	}
	add(&Case{Op: "Softmax", Name: "9x77 masked and large", Tol: tolElem, Why: "exp and a sum over a row",
		setup: func(s *Side) (func(), []*npu.Tensor) {
			v := s.uniform(9*77, -8, 8)
			v[3] = float32(math.Inf(-1))
			for i := range 77 {
				v[5*77+i] += 60
			}
			x := s.f32(v, 9, 77)
			out := s.alloc(npu.F32, 9, 77)
			return func() { s.be.Softmax(out, x) }, []*npu.Tensor{out}
		}})
	for _, limit := range []float32{7, 0} {
		add(&Case{Op: "SwiGLU", Name: fmt.Sprintf("7x2*45 limit %v", limit), Tol: tolElem, Why: "silu(gate)*up per element",
			setup: func(s *Side) (func(), []*npu.Tensor) {
				gu := s.floats(npu.F32, s.uniform(7*90, -10, 10), 7, 90)
				out := s.alloc(npu.F32, 7, 45)
				return func() { s.be.SwiGLU(out, gu, limit) }, []*npu.Tensor{out}
			}})
	}
	add(&Case{Op: "L2Norm", Name: "6x60 groups of 20", Tol: tolElem, Why: "a sum of squares over a short group",
		setup: func(s *Side) (func(), []*npu.Tensor) {
			x := s.randn(npu.F32, 2, 6, 60)
			out := s.alloc(npu.F32, 6, 60)
			return func() { s.be.L2Norm(out, x, 20, 1e-6) }, []*npu.Tensor{out}
		}})

	// Short convolution.
	add(&Case{Op: "Conv1d", Name: "3 seqs 13x19 W4 silu", Tol: tolElem, Why: "W products per element; the state is copied",
		setup: func(s *Side) (func(), []*npu.Tensor) {
			return conv1dSetup(s, []int{0, 3, 9}, []int{5, 1, 7}, 19, 4, npu.F32, true, false)
		}},
		&Case{Op: "Conv1d", Name: "2 seqs 11x8 W3 BF16 weight", Tol: tolElem, Why: "W products per element; the state is copied",
			setup: func(s *Side) (func(), []*npu.Tensor) {
				return conv1dSetup(s, []int{4, 0}, []int{8, 3}, 8, 3, npu.BF16, false, false)
			}},
		&Case{Op: "Conv1dUpdate", Name: "4 seqs C23 W4 BF16 weight silu", Tol: tolElem, Why: "W products per element; the state is shifted",
			setup: func(s *Side) (func(), []*npu.Tensor) {
				return conv1dSetup(s, []int{2, 7, 0, 30}, []int{1, 1, 1, 1}, 23, 4, npu.BF16, true, true)
			}},
		&Case{Op: "Conv1d", Name: "decode batch 5 seqs C19 W4 silu", Tol: tolElem, Why: "W products per element; the state is shifted (one row per sequence: the decode form)",
			setup: func(s *Side) (func(), []*npu.Tensor) {
				return conv1dSetup(s, []int{0, 5, 16, 31, 7}, []int{1, 1, 1, 1, 1}, 19, 4, npu.F32, true, false)
			}})

	// Selection and row movement.
	add(&Case{Op: "TopK", Name: "9x67 k5 with a NaN", Tol: tolExact, Why: "distinct values are compared and copied",
		setup: func(s *Side) (func(), []*npu.Tensor) {
			const M, N, k = 9, 67, 5
			v := make([]float32, M*N)
			for m := range M {
				for i, p := range s.rng.Perm(N) {
					v[m*N+i] = (float32(p) - 33) * 0.375
				}
			}
			v[2*N+5] = float32(math.NaN())
			x := s.f32(v, M, N)
			vals, idx := s.alloc(npu.F32, M, k), s.alloc(npu.I32, M, k)
			return func() { s.be.TopK(vals, idx, x, k) }, []*npu.Tensor{vals, idx}
		}})
	add(&Case{Op: "Gather", Name: "9 of 41x13 BF16 to F32", Tol: tolExact, Why: "rows are copied and widened",
		setup: func(s *Side) (func(), []*npu.Tensor) {
			src := s.randn(npu.BF16, 1, 41, 13)
			idx := make([]int32, 9)
			for i := range idx {
				idx[i] = int32(s.rng.IntN(41))
			}
			idx[8] = idx[0] // a repeated row
			ti := s.i32(idx, 9)
			out := s.alloc(npu.F32, 9, 13)
			return func() { s.be.Gather(out, src, ti) }, []*npu.Tensor{out}
		}},
		&Case{Op: "Scatter", Name: "7 F32 rows into 37x11 BF16", Tol: tolExact, Why: "rows are rounded to nearest even and copied",
			setup: func(s *Side) (func(), []*npu.Tensor) {
				dst := s.randn(npu.BF16, 1, 37, 11)
				src := s.randn(npu.F32, 1, 7, 11)
				idx := make([]int32, 7)
				for i, p := range s.rng.Perm(37)[:7] {
					idx[i] = int32(p)
				}
				ti := s.i32(idx, 7)
				return func() { s.be.Scatter(dst, src, ti) }, []*npu.Tensor{dst}
			}},
		&Case{Op: "Embedding", Name: "10 ids in 53x17 BF16", Tol: tolExact, Why: "rows are copied and widened",
			setup: func(s *Side) (func(), []*npu.Tensor) {
				table := s.randn(npu.BF16, 1, 53, 17)
				ids := make([]int32, 10)
				for i := range ids {
					ids[i] = int32(s.rng.IntN(53))
				}
				ti := s.i32(ids, 10)
				out := s.alloc(npu.F32, 10, 17)
				return func() { s.be.Embedding(out, table, ti) }, []*npu.Tensor{out}
			}})

	// mHC.
	for _, c := range []struct {
		T, n, D, iters int
		dt             npu.DType
	}{{5, 4, 24, 20, npu.F32}, {3, 3, 33, 5, npu.BF16}} {
		add(&Case{Op: "HCPre", Name: fmt.Sprintf("T%d n%d D%d sinkhorn%d %v fn", c.T, c.n, c.D, c.iters, c.dt), Tol: tolReduce,
			Why: "a projection over n*D, then Sinkhorn iterations that carry its rounding",
			setup: func(s *Side) (func(), []*npu.Tensor) {
				mix := (2 + c.n) * c.n
				x := s.randn(npu.F32, 1, c.T, c.n, c.D)
				fn := s.randn(c.dt, 0.3, mix, c.n*c.D)
				base := s.randn(npu.F32, 0.5, mix)
				scale := s.f32([]float32{1.1, 0.7, 1.3}, 3)
				col, post, comb := s.alloc(npu.F32, c.T, c.D), s.alloc(npu.F32, c.T, c.n), s.alloc(npu.F32, c.T, c.n, c.n)
				p := npu.HCParams{Streams: c.n, SinkhornIters: c.iters, Eps: 1e-6, RMSEps: 1e-5}
				return func() { s.be.HCPre(col, post, comb, x, fn, base, scale, p) }, []*npu.Tensor{col, post, comb}
			}})
	}
	add(&Case{Op: "HCPost", Name: "T6 n4 D21", Tol: tolElem, Why: "n+1 products per element",
		setup: func(s *Side) (func(), []*npu.Tensor) {
			const T, n, D = 6, 4, 21
			y, post := s.randn(npu.F32, 1, T, D), s.randn(npu.F32, 1, T, n)
			comb, x := s.randn(npu.F32, 1, T, n, n), s.randn(npu.F32, 1, T, n, D)
			out := s.alloc(npu.F32, T, n, D)
			return func() { s.be.HCPost(out, y, post, comb, x) }, []*npu.Tensor{out}
		}},
		&Case{Op: "HCMean", Name: "T5 n3 D17", Tol: tolElem, Why: "a mean of n values",
			setup: func(s *Side) (func(), []*npu.Tensor) {
				x := s.randn(npu.F32, 1, 5, 3, 17)
				out := s.alloc(npu.F32, 5, 17)
				return func() { s.be.HCMean(out, x) }, []*npu.Tensor{out}
			}})

	// KDA.
	for _, lb := range []bool{true, false} {
		name, p := "lower bound -5 T9 H3 K8", npu.KDAGateParams{HasLowerBound: true, LowerBound: -5, HeadDim: 8}
		if !lb {
			name, p = "softplus T9 H3 K8", npu.KDAGateParams{HeadDim: 8}
		}
		add(&Case{Op: "KDAGate", Name: name, Tol: tolElem, Why: "exp, sigmoid or softplus per element",
			setup: func(s *Side) (func(), []*npu.Tensor) {
				const T, H, K = 9, 3, 8
				fv := s.normal(T*H*K, 2)
				fv[4], fv[11] = 25, 40 // softplus's linear range
				f := s.f32(fv, T, H*K)
				dt := s.randn(npu.F32, 0.5, H*K)
				aLog := s.f32(s.uniform(H, -1, 1), H)
				g := s.alloc(npu.F32, T, H*K)
				return func() { s.be.KDAGate(g, f, dt, aLog, p) }, []*npu.Tensor{g}
			}})
	}
	add(&Case{Op: "KDA", Name: "recurrence (chunk 0) H2 K16 lens 7,1,12", Tol: tolReduce,
		Why: "a state carried over the sequence's tokens",
		setup: func(s *Side) (func(), []*npu.Tensor) {
			return kdaSetup(s, 2, 16, []int{5, 0, 40}, []int{7, 1, 12}, 0)
		}},
		&Case{Op: "KDA", Name: "chunked (chunk 8) H2 K16 lens 19,1,9", Tol: tolReduce,
			Why: "the chunked form's matrix products over a carried state",
			setup: func(s *Side) (func(), []*npu.Tensor) {
				return kdaSetup(s, 2, 16, []int{0, 33, 8}, []int{19, 1, 9}, 8)
			}},
		&Case{Op: "KDA", Name: "decode batch H2 K16 4 seqs", Tol: tolReduce,
			Why: "one recurrence step over a carried state (one row per sequence: the decode form)",
			setup: func(s *Side) (func(), []*npu.Tensor) {
				return kdaSetup(s, 2, 16, []int{0, 17, 40, 3}, []int{1, 1, 1, 1}, 0)
			}},
		&Case{Op: "KDA", Name: "decode batch H3 K8 1 seq", Tol: tolReduce,
			Why: "one recurrence step over a carried state (one row per sequence: the decode form)",
			setup: func(s *Side) (func(), []*npu.Tensor) {
				return kdaSetup(s, 3, 8, []int{9}, []int{1}, 0)
			}})

	// DSA: k-pool compression, indexer and sparse MLA.
	add(&Case{Op: "KPool", Name: "13 pools of 4 d11 BF16 ape", Tol: tolElem, Why: "a softmax over kp values per channel",
		setup: func(s *Side) (func(), []*npu.Tensor) {
			const P, kp, d = 13, 4, 11
			keys, gates := s.randn(npu.F32, 1, P*kp, d), s.randn(npu.F32, 3, P*kp, d)
			ape := s.randn(npu.BF16, 1, kp, d)
			out := s.alloc(npu.F32, P, d)
			return func() { s.be.KPool(out, keys, gates, ape) }, []*npu.Tensor{out}
		}})
	add(&Case{Op: "DSAIndex", Name: "3 seqs top3 of kp4 tail", Tol: tolExact, Why: "pool scores are separated by construction, so the selection is exact",
		setup: func(s *Side) (func(), []*npu.Tensor) {
			return dsaSetup(s, []int{0, 21, 37}, []int{6, 1, 4}, 8, npu.F32,
				npu.IndexParams{TopKPools: 3, KPool: 4, Tail: true, Scale: 0.25})
		}},
		&Case{Op: "DSAIndex", Name: "2 seqs top2 of kp2 no tail BF16 pooled", Tol: tolExact, Why: "pool scores are separated by construction, so the selection is exact",
			setup: func(s *Side) (func(), []*npu.Tensor) {
				return dsaSetup(s, []int{3, 12}, []int{9, 2}, 4, npu.BF16,
					npu.IndexParams{TopKPools: 2, KPool: 2, Scale: 0.125})
			}},
		&Case{Op: "DSAIndex", Name: "decode batch 6 seqs top3 of kp4 tail", Tol: tolExact,
			Why: "pool scores are separated by construction, so the selection is exact (one row per sequence: the decode form)",
			setup: func(s *Side) (func(), []*npu.Tensor) {
				return dsaSetup(s, []int{0, 3, 7, 15, 21, 38}, []int{1, 1, 1, 1, 1, 1}, 8, npu.F32,
					npu.IndexParams{TopKPools: 3, KPool: 4, Tail: true, Scale: 0.25})
			}},
		&Case{Op: "DSAIndex", Name: "decode batch 3 seqs top2 of kp2 no tail BF16 pooled", Tol: tolExact,
			Why: "pool scores are separated by construction, so the selection is exact (one row per sequence: the decode form)",
			setup: func(s *Side) (func(), []*npu.Tensor) {
				return dsaSetup(s, []int{0, 9, 12}, []int{1, 1, 1}, 4, npu.BF16,
					npu.IndexParams{TopKPools: 2, KPool: 2, Scale: 0.125})
			}})
	for _, ldt := range []npu.DType{npu.F32, npu.BF16} {
		add(&Case{Op: "SparseMLA", Name: fmt.Sprintf("H3 dk16 dv16 R24 %v latents", ldt), Tol: tolReduce,
			Why: "two products over R and a softmax over the selected positions",
			setup: func(s *Side) (func(), []*npu.Tensor) {
				return mlaSetup(s, []int{0, 20, 7}, []int{5, 1, 3}, 24, 4, ldt, 3, 16, 16, 24)
			}})
		add(&Case{Op: "SparseMLA", Name: fmt.Sprintf("decode batch 4 seqs H3 dk16 dv16 R24 %v latents", ldt), Tol: tolReduce,
			Why: "two products over R and a softmax over the selected positions (one row per sequence: the decode form)",
			setup: func(s *Side) (func(), []*npu.Tensor) {
				return mlaSetup(s, []int{0, 20, 7, 33}, []int{1, 1, 1, 1}, 24, 4, ldt, 3, 16, 16, 24)
			}})
	}

	// MoE.
	add(&Case{Op: "Router", Name: "T7 E16 top4 of 4 groups top2", Tol: tolElem,
		Why: "scores are separated by construction, so ids are exact; weights are a sigmoid and a normalisation",
		setup: func(s *Side) (func(), []*npu.Tensor) {
			return routerSetup(s, 7, 40, 16, npu.F32, npu.RouterParams{TopK: 4, NGroup: 4, TopKGroup: 2, Normalize: true, Scale: 2.5})
		}},
		&Case{Op: "Router", Name: "T5 E8 top2 ungrouped BF16 gate", Tol: tolElem,
			Why: "scores are separated by construction, so ids are exact; weights are a sigmoid",
			setup: func(s *Side) (func(), []*npu.Tensor) {
				return routerSetup(s, 5, 24, 8, npu.BF16, npu.RouterParams{TopK: 2, NGroup: 1, TopKGroup: 1, Scale: 1.5})
			}})
	for _, c := range []struct {
		T, D, E, I, k int
		limit         float32
		dt            npu.DType
	}{{9, 24, 6, 10, 2, 7, npu.F32}, {5, 16, 4, 8, 3, 0, npu.BF16}} {
		add(&Case{Op: "MoE", Name: fmt.Sprintf("T%d D%d E%d I%d top%d limit %v %v", c.T, c.D, c.E, c.I, c.k, c.limit, c.dt), Tol: tolReduce,
			Why: "two products per expert summed over the selected experts",
			setup: func(s *Side) (func(), []*npu.Tensor) {
				x := s.randn(npu.F32, 1, c.T, c.D)
				gu := s.randn(c.dt, 0.5, c.E, 2*c.I, c.D)
				dn := s.randn(c.dt, 0.5, c.E, c.D, c.I)
				out := s.randn(npu.F32, 1, c.T, c.D)
				ids, w := moeRouting(s, c.T, c.E, c.k)
				return func() { s.be.MoE(out, x, gu, dn, w, ids, c.limit) }, []*npu.Tensor{out}
			}})
	}

	// Quantized matmuls.
	for _, c := range []struct {
		scheme  quant.Scheme
		M, N, K int
	}{{quant.W8A8Dynamic, 9, 40, 77}, {quant.W8A8, 9, 40, 77}, {quant.W8A8MXFP8, 9, 40, 96}, {quant.W8A8Dynamic, 1, 33, 64}} {
		add(&Case{Op: "MatMulQ", Name: fmt.Sprintf("%s %dx%dx%d (PrepareQuant)", c.scheme, c.M, c.N, c.K), Tol: tolQuant, needs: supports(c.scheme),
			Why: "int32 (fp32 for MX) products; an activation on a rounding boundary may quantize one step apart",
			setup: func(s *Side) (func(), []*npu.Tensor) {
				xv := s.normal(c.M*c.K, 1)
				x := s.f32(xv, c.M, c.K)
				lo, hi := quant.MinMax(xv)
				w := quantWeight(s, s.normal(c.N*c.K, 0.05), 0, c.N, c.K, c.scheme, lo, hi)
				s.be.PrepareQuant(w)
				out := s.alloc(npu.F32, c.M, c.N)
				return func() { s.be.MatMulQ(out, x, w) }, []*npu.Tensor{out}
			}})
	}
	for _, sch := range []quant.Scheme{quant.W8A8Dynamic, quant.W8A8MXFP8} {
		add(&Case{Op: "MoEQ", Name: fmt.Sprintf("%s T11 D64 E5 I32 top2", sch), Tol: tolQuant, needs: supports(sch),
			Why: "quantized expert products; an activation on a rounding boundary may quantize one step apart",
			setup: func(s *Side) (func(), []*npu.Tensor) {
				const T, D, E, I, k = 11, 64, 5, 32, 2
				gu := quantWeight(s, s.normal(E*2*I*D, 0.1), E, 2*I, D, sch, 0, 0)
				dn := quantWeight(s, s.normal(E*D*I, 0.1), E, D, I, sch, 0, 0)
				s.be.PrepareQuant(gu)
				s.be.PrepareQuant(dn)
				x := s.randn(npu.F32, 1, T, D)
				out := s.randn(npu.F32, 1, T, D)
				ids, w := moeRouting(s, T, E, k)
				return func() { s.be.MoEQ(out, x, gu, dn, w, ids, 7) }, []*npu.Tensor{out}
			}})
	}

	// Block FP8 (FP8_BLOCK128): sizes across and off the 128 blocks.
	fp8Block := func(be npu.Backend) bool { return npu.SupportsQuant(be, npu.QFP8Block) == nil }
	add(&Case{Op: "MatMulQ", Name: "FP8_BLOCK128 9x200x300 (PrepareQuant)", Tol: tolQuant, needs: fp8Block,
		Why: "fp32 sums of E4M3 products; an activation on a rounding boundary may quantize one step apart",
		setup: func(s *Side) (func(), []*npu.Tensor) {
			const M, N, K = 9, 200, 300
			x := s.f32(s.normal(M*K, 1), M, K)
			w := fp8BlockWeight(s, s.normal(N*K, 0.05), 0, N, K)
			s.be.PrepareQuant(w)
			out := s.alloc(npu.F32, M, N)
			return func() { s.be.MatMulQ(out, x, w) }, []*npu.Tensor{out}
		}})
	add(&Case{Op: "MoEQ", Name: "FP8_BLOCK128 T11 D160 E5 I136 top2", Tol: tolQuant, needs: fp8Block,
		Why: "quantized expert products; an activation on a rounding boundary may quantize one step apart",
		setup: func(s *Side) (func(), []*npu.Tensor) {
			const T, D, E, I, k = 11, 160, 5, 136, 2
			gu := fp8BlockWeight(s, s.normal(E*2*I*D, 0.1), E, 2*I, D)
			dn := fp8BlockWeight(s, s.normal(E*D*I, 0.1), E, D, I)
			s.be.PrepareQuant(gu)
			s.be.PrepareQuant(dn)
			x := s.randn(npu.F32, 1, T, D)
			out := s.randn(npu.F32, 1, T, D)
			ids, w := moeRouting(s, T, E, k)
			return func() { s.be.MoEQ(out, x, gu, dn, w, ids, 7) }, []*npu.Tensor{out}
		}})

	// Sampling.
	add(&Case{Op: "SampleReduce", Name: "5x301 k7 with NaN and infinities", Tol: tolExact, Why: "values are compared and copied, counts are counts",
		needs: func(be npu.Backend) bool { _, ok := be.(npu.SampleReducer); return ok },
		setup: func(s *Side) (func(), []*npu.Tensor) {
			const R, V, k = 5, 301, 7
			v := make([]float32, R*V)
			for r := range R {
				for i, p := range s.rng.Perm(V) {
					v[r*V+i] = (float32(p) - 150) * 0.0625
				}
			}
			nan, inf := float32(math.NaN()), float32(math.Inf(1))
			v[1*V+3], v[1*V+200], v[1*V+17] = nan, nan, inf
			v[2*V+9], v[2*V+10] = inf, inf // tied infinities: lower id first
			for i := range V {
				v[3*V+i] = float32(math.Inf(-1))
			}
			logits := s.f32(v, R, V)
			vals, ids, stats := s.alloc(npu.F32, R, k), s.alloc(npu.I32, R, k), s.alloc(npu.I32, R, 2)
			sr := s.be.(npu.SampleReducer)
			return func() { sr.SampleReduce(vals, ids, stats, logits, k) }, []*npu.Tensor{vals, ids, stats}
		}})
	add(&Case{Op: "SampleHist", Name: "4x5000 queries 6 (raw and processed maxima, temperatures)", Tol: tolExact,
		Why:   "IEEE float64 steps without contraction, integer sums",
		needs: func(be npu.Backend) bool { _, ok := be.(npu.SampleHistogrammer); return ok },
		setup: func(s *Side) (func(), []*npu.Tensor) {
			logits, rows, params, _ := histCase(s)
			hist := s.alloc(npu.I64, rows.Numel(), npu.SampleHistBins)
			sh := s.be.(npu.SampleHistogrammer)
			return func() { sh.SampleHist(hist, logits, rows, params) }, []*npu.Tensor{hist}
		}})
	add(&Case{Op: "SampleBinMembers", Name: "4x5000 queries 6 cap 64 (one bin past the cap, one outside)", Tol: tolExact,
		Why:   "IEEE float64 steps without contraction; values are compared and copied",
		needs: func(be npu.Backend) bool { _, ok := be.(npu.SampleHistogrammer); return ok },
		setup: func(s *Side) (func(), []*npu.Tensor) {
			logits, rows, params, bins := histCase(s)
			const C = 64
			Q := rows.Numel()
			vals, ids, counts := s.alloc(npu.F32, Q, C), s.alloc(npu.I32, Q, C), s.alloc(npu.I32, Q, 2)
			sh := s.be.(npu.SampleHistogrammer)
			return func() { sh.SampleBinMembers(vals, ids, counts, logits, rows, params, bins) }, []*npu.Tensor{vals, ids, counts}
		}})
	return cs
}

// histCase is the input of the sampling-histogram cases: 4 rows of 5000
// logits (normal, a flat row with ties, one with -Inf and values above the
// processed maximum, a narrow one) and 6 queries on them.
func histCase(s *Side) (logits, rows, params, bins *npu.Tensor) {
	const R, V = 4, 5000
	v := s.normal(R*V, 3)
	for i := range V {
		v[1*V+i] = float32(i%7) * 0.25
		if i%11 == 0 {
			v[2*V+i] = float32(math.Inf(-1))
		}
		v[3*V+i] *= 0.01
	}
	mx := func(r int) float32 {
		m := float32(math.Inf(-1))
		for _, x := range v[r*V : (r+1)*V] {
			m = max(m, x)
		}
		return m
	}
	type q struct {
		row  int32
		m    float32
		invT float64
		bin  int32
	}
	qs := []q{
		{0, mx(0), 1, 40},
		{0, mx(0) - 2, 1 / 0.7, 3}, // a processed maximum below raw values
		{1, mx(1), 1, 0},           // every entry at the maximum: past the cap
		{2, mx(2), 1 / 1.3, 100},
		{3, mx(3), 1 / 0.05, 50},
		{3, mx(3), 1, npu.SampleHistBins}, // outside every bin
	}
	ri, ps, bs := make([]int32, len(qs)), make([]byte, 0, 16*len(qs)), make([]int32, len(qs))
	for j, x := range qs {
		ri[j], bs[j] = x.row, x.bin
		for _, w := range npu.SampleHistParams(x.m, x.invT) {
			ps = binary.LittleEndian.AppendUint64(ps, uint64(w))
		}
	}
	return s.f32(v, R, V), s.i32(ri, len(qs)), s.bytes(npu.I64, ps, len(qs), 2), s.i32(bs, len(qs))
}

// batch builds a layout of sequences with lens rows at positions pos:
// state slots a permutation of nslots, block tables at shuffled blocks of
// bs tokens with spare blocks left over. It returns the layout and the
// number of blocks of the cache it addresses.
func (s *Side) batch(pos, lens []int, bs, nslots int) (*npu.BatchLayout, int) {
	l := &npu.BatchLayout{QueryStart: []int{0}, Pos: pos, BlockSize: bs}
	total := 0
	for b, n := range lens {
		l.QueryStart = append(l.QueryStart, l.QueryStart[b]+n)
		total += (pos[b] + n + bs - 1) / bs
	}
	for _, p := range s.rng.Perm(nslots)[:len(lens)] {
		l.StateSlot = append(l.StateSlot, p)
	}
	nblocks := total + 3
	perm := s.rng.Perm(nblocks)
	for b, n := range lens {
		nb := (pos[b] + n + bs - 1) / bs
		bt := make([]int32, nb)
		for i := range bt {
			bt[i] = int32(perm[i])
		}
		l.BlockTables = append(l.BlockTables, bt)
		perm = perm[nb:]
	}
	return l, nblocks
}

func conv1dSetup(s *Side, pos, lens []int, C, W int, wdt npu.DType, silu, update bool) (func(), []*npu.Tensor) {
	nslots := len(lens) + 2
	l, _ := s.batch(pos, lens, 16, nslots)
	seqs := s.layout(l)
	T := l.Rows()
	x := s.randn(npu.F32, 1, T, C)
	state := s.randn(npu.F32, 0.5, nslots, W-1, C)
	w := s.randn(wdt, 0.5, C, W)
	out := s.alloc(npu.F32, T, C)
	if update {
		return func() { s.be.Conv1dUpdate(out, x, state, w, seqs, silu) }, []*npu.Tensor{out, state}
	}
	return func() { s.be.Conv1d(out, x, state, w, seqs, silu) }, []*npu.Tensor{out, state}
}

func kdaSetup(s *Side, H, K int, pos, lens []int, chunk int) (func(), []*npu.Tensor) {
	nslots := len(lens) + 2
	l, _ := s.batch(pos, lens, 16, nslots)
	seqs := s.layout(l)
	T, HK := l.Rows(), H*K
	qkv := s.randn(npu.F32, 1, T, 3*HK)
	gv := make([]float32, T*HK)
	for i := range gv {
		gv[i] = float32(-5 / (1 + math.Exp(-2*s.rng.NormFloat64()))) // the lower-bound gate's range (-5, 0)
	}
	g := s.f32(gv, T, HK)
	bv := make([]float32, T*H)
	for i := range bv {
		bv[i] = float32(1 / (1 + math.Exp(-s.rng.NormFloat64())))
	}
	beta := s.f32(bv, T, H)
	state := s.randn(npu.F32, 0.3, nslots, H, K, K)
	out := s.alloc(npu.F32, T, H*K)
	return func() { s.be.KDA(out, qkv, g, beta, state, seqs, H, K, chunk) }, []*npu.Tensor{out, state}
}

// minGap is the separation selection ops' candidate scores get, far above
// fp32 rounding of scores of order one.
const minGap = 1e-3

// separated reports whether every two of v differ by at least minGap.
func separated(v []float64) bool {
	w := slices.Clone(v)
	slices.Sort(w)
	for i := 1; i < len(w); i++ {
		if w[i]-w[i-1] < minGap {
			return false
		}
	}
	return true
}

// roundTo is v as dtype dt holds it.
func roundTo(v float32, dt npu.DType) float64 {
	switch dt {
	case npu.BF16:
		return float64(npu.BF16ToF32(npu.F32ToBF16(v)))
	case npu.F16:
		return float64(npu.F16ToF32(npu.F32ToF16(v)))
	}
	return float64(v)
}

func dsaSetup(s *Side, pos, lens []int, bs int, pdt npu.DType, p npu.IndexParams) (func(), []*npu.Tensor) {
	const Hi, d = 4, 16
	l, nblocks := s.batch(pos, lens, bs, len(lens))
	seqs := s.layout(l)
	T := l.Rows()
	nslots := nblocks * (bs / p.KPool)
	pv := s.normal(nslots*d, 1)
	pooled := make([]float64, len(pv))
	for i, v := range pv {
		pooled[i] = roundTo(v, pdt)
	}
	qv, wv := make([]float32, T*Hi*d), make([]float32, T*Hi)
	for b := range l.NumSeqs() {
		for t := l.QueryStart[b]; t < l.QueryStart[b+1]; t++ {
			nv := (l.Pos[b] + t - l.QueryStart[b] + 1) / p.KPool
			for try := 0; ; try++ {
				if try == 1000 {
					panic("opcheck: no separated DSAIndex scores in 1000 draws")
				}
				q, w := s.normal(Hi*d, 1), s.uniform(Hi, 0.2, 1)
				for h := range w {
					w[h] *= 0.5 // Hi^-0.5
				}
				sc := make([]float64, nv)
				for i := range sc {
					r := int(l.PoolRow(b, i, p.KPool))
					for h := range Hi {
						var dot float64
						for c := range d {
							dot += float64(q[h*d+c]) * pooled[r*d+c]
						}
						sc[i] += float64(w[h]) * max(0, float64(p.Scale)*dot)
					}
				}
				if separated(sc) {
					copy(qv[t*Hi*d:], q)
					copy(wv[t*Hi:], w)
					break
				}
			}
		}
	}
	q, w := s.f32(qv, T, Hi*d), s.f32(wv, T, Hi)
	pt := s.floats(pdt, pv, nslots, d)
	width := p.TopKPools * p.KPool
	if p.Tail {
		width += p.KPool - 1
	}
	out := s.alloc(npu.I32, T, width)
	return func() { s.be.DSAIndex(out, q, w, pt, seqs, p) }, []*npu.Tensor{out}
}

func mlaSetup(s *Side, pos, lens []int, width, bs int, ldt npu.DType, H, dk, dv, R int) (func(), []*npu.Tensor) {
	l, nblocks := s.batch(pos, lens, bs, len(lens))
	seqs := s.layout(l)
	T := l.Rows()
	sel := make([]int32, T*width)
	for i := range sel {
		sel[i] = -1
	}
	for b := range l.NumSeqs() {
		for t := l.QueryStart[b]; t < l.QueryStart[b+1]; t++ {
			if t == 1 {
				continue // a row with no selected position: zeros
			}
			p := l.Pos[b] + t - l.QueryStart[b]
			var cand []int32
			for _, c := range s.rng.Perm(p + 1) {
				if s.rng.Float64() < 0.7 {
					cand = append(cand, int32(c))
				}
			}
			if len(cand) == 0 {
				cand = []int32{int32(p)}
			}
			cand = cand[:min(len(cand), width)]
			for i, slot := range s.rng.Perm(width)[:len(cand)] {
				sel[t*width+slot] = cand[i]
			}
		}
	}
	q := s.randn(npu.F32, 1, T, H*dk)
	lat := s.randn(ldt, 1, nblocks*bs, R)
	kvB := s.randn(npu.F32, 1/math.Sqrt(float64(R)), H*(dk+dv), R)
	ts := s.i32(sel, T, width)
	out := s.alloc(npu.F32, T, H*dv)
	return func() { s.be.SparseMLA(out, q, lat, kvB, ts, seqs, H, dk, dv, 0.25) }, []*npu.Tensor{out}
}

func routerSetup(s *Side, T, D, E int, gdt npu.DType, p npu.RouterParams) (func(), []*npu.Tensor) {
	gv, bv := s.normal(E*D, 0.3), s.normal(E, 0.1)
	gate := make([]float64, len(gv))
	for i, v := range gv {
		gate[i] = roundTo(v, gdt)
	}
	xv := make([]float32, T*D)
	per := E / p.NGroup
	for t := range T {
		for try := 0; ; try++ {
			if try == 1000 {
				panic("opcheck: no separated router scores in 1000 draws")
			}
			x := s.normal(D, 1)
			sb := make([]float64, E)
			for e := range E {
				var dot float64
				for d := range D {
					dot += float64(x[d]) * gate[e*D+d]
				}
				sb[e] = 1/(1+math.Exp(-dot)) + float64(bv[e])
			}
			ok := separated(sb)
			if ok && p.NGroup > 1 {
				gs := make([]float64, p.NGroup)
				for g := range gs {
					grp := slices.Clone(sb[g*per : (g+1)*per])
					slices.Sort(grp)
					gs[g] = grp[len(grp)-1]
					if per > 1 {
						gs[g] += grp[len(grp)-2]
					}
				}
				ok = separated(gs)
			}
			if ok {
				copy(xv[t*D:], x)
				break
			}
		}
	}
	x := s.f32(xv, T, D)
	g := s.floats(gdt, gv, E, D)
	bias := s.f32(bv, E)
	w, ids := s.alloc(npu.F32, T, p.TopK), s.alloc(npu.I32, T, p.TopK)
	return func() { s.be.Router(w, ids, x, g, bias, p) }, []*npu.Tensor{w, ids}
}

// moeRouting draws k distinct experts per token and their weights.
func moeRouting(s *Side, T, E, k int) (ids, w *npu.Tensor) {
	iv := make([]int32, T*k)
	for t := range T {
		for j, e := range s.rng.Perm(E)[:k] {
			iv[t*k+j] = int32(e)
		}
	}
	return s.i32(iv, T, k), s.f32(s.uniform(T*k, 0, 1), T, k)
}

// quantWeight quantizes w [E][n][k] (E = 0: a linear) with the quant
// package, as a loader builds a QuantWeight from checkpoint tensors.
func quantWeight(s *Side, w []float32, E, n, k int, sch quant.Scheme, actLo, actHi float32) *npu.QuantWeight {
	qw := &npu.QuantWeight{GroupSize: 32}
	var wb, sb []byte
	for e := range max(E, 1) {
		ts, err := quant.QuantizeLinear(w[e*n*k:(e+1)*n*k], n, k, sch, quant.LinearOptions{ParamsDType: npu.F32, ActMin: actLo, ActMax: actHi})
		must(err)
		m := map[string]quant.Tensor{}
		for _, t := range ts {
			m[t.Suffix] = t
		}
		wb = append(wb, m["weight"].Data...)
		switch sch {
		case quant.W8A8Dynamic, quant.W8A8MXFP8:
			sb = append(sb, m["weight_scale"].Data...)
		case quant.W8A8:
			in, err := quant.DecodeFloats(m["input_scale"].Data, m["input_scale"].DType)
			must(err)
			qw.InputScale = in[0]
			qw.InputOffset = int32(int8(m["input_offset"].Data[0]))
			qw.QuantBias = s.bytes(npu.I32, m["quant_bias"].Data, n)
			qw.DeqScale = s.bytes(npu.F32, m["deq_scale"].Data, n)
		}
	}
	lead := []int{n}
	if E > 0 {
		lead = []int{E, n}
	}
	qw.Scheme = sch.QScheme()
	switch sch {
	case quant.W8A8Dynamic:
		qw.Weight = s.bytes(npu.I8, wb, append(slices.Clone(lead), k)...)
		qw.Scale = s.bytes(npu.F32, sb, lead...)
	case quant.W8A8:
		qw.Weight = s.bytes(npu.I8, wb, n, k)
	case quant.W8A8MXFP8:
		qw.Weight = s.bytes(npu.F8E4M3, wb, append(slices.Clone(lead), k)...)
		qw.Scale = s.bytes(npu.U8, sb, append(slices.Clone(lead), (k+31)/32)...)
	}
	must(qw.Check())
	return qw
}

// fp8BlockWeight quantizes w [E][n][k] (E = 0: a linear) to
// FP8_BLOCK128, E4M3 with an F32 scale per 128x128 block, as a block-FP8
// checkpoint stores it.
func fp8BlockWeight(s *Side, w []float32, E, n, k int) *npu.QuantWeight {
	B := npu.FP8Block
	nb, kb := (n+B-1)/B, (k+B-1)/B
	q := make([]byte, max(E, 1)*n*k)
	sc := make([]float32, max(E, 1)*nb*kb)
	for e := range max(E, 1) {
		must(quant.FP8BlockQuantize(q[e*n*k:(e+1)*n*k], sc[e*nb*kb:(e+1)*nb*kb], w[e*n*k:(e+1)*n*k], n, k, B))
	}
	wshape, sshape := []int{n, k}, []int{nb, kb}
	if E > 0 {
		wshape, sshape = append([]int{E}, wshape...), append([]int{E}, sshape...)
	}
	qw := &npu.QuantWeight{Scheme: npu.QFP8Block, GroupSize: B,
		Weight: s.bytes(npu.F8E4M3, q, wshape...), Scale: s.f32(sc, sshape...)}
	must(qw.Check())
	return qw
}

// supports is the needs of a quantized case: the device runs scheme sch
// (npu.SupportsQuant: MXFP8 only on an Ascend 950, for one).
func supports(sch quant.Scheme) func(npu.Backend) bool {
	return func(be npu.Backend) bool { return npu.SupportsQuant(be, sch.QScheme()) == nil }
}
