package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

// mdlTensor makes a tensor of dtype dt (F32, BF16 or F16) holding vals
// (rounded to dt) and returns it with the values it actually holds.
func mdlTensor(be *Backend, dt npu.DType, vals []float32, shape ...int) (*npu.Tensor, []float64) {
	wide := make([]float64, len(vals))
	for i, v := range vals {
		wide[i] = float64(v)
	}
	return atTensor(be, dt, wide, shape...)
}

// mdlRand returns n normal values with standard deviation std.
func mdlRand(r *rand.Rand, n int, std float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * std)
	}
	return v
}

// mdlClose fails the test when got and want differ by more than
// atol + rtol*|want| anywhere.
func mdlClose(t *testing.T, what string, got []float32, want []float64, atol, rtol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(float64(got[i]) - want[i]); d > atol+rtol*math.Abs(want[i]) || math.IsNaN(float64(got[i])) {
			t.Fatalf("%s[%d] = %g, want %g (diff %g)", what, i, got[i], want[i], d)
		}
	}
}

// hcPreRef is the float64 reference of mHC's input side.
func hcPreRef(x, fn, base, scale []float64, T, n, D, iters int, eps, rmsEps float64) (collapsed, post, comb []float64) {
	mix := (2 + n) * n
	collapsed = make([]float64, T*D)
	post = make([]float64, T*n)
	comb = make([]float64, T*n*n)
	for t := range T {
		xt := x[t*n*D : (t+1)*n*D]
		var ss float64
		for _, v := range xt {
			ss += v * v
		}
		r := 1 / math.Sqrt(ss/float64(n*D)+rmsEps)
		m := make([]float64, mix)
		for k := range mix {
			for i, v := range xt {
				m[k] += fn[k*n*D+i] * v * r
			}
		}
		pre := make([]float64, n)
		for i := range n {
			pre[i] = coreSig64(m[i]*scale[0]+base[i]) + eps
			post[t*n+i] = 2 * coreSig64(m[n+i]*scale[1]+base[n+i])
		}
		c := comb[t*n*n : (t+1)*n*n]
		for i := range n {
			mx := math.Inf(-1)
			for j := range n {
				c[i*n+j] = m[2*n+i*n+j]*scale[2] + base[2*n+i*n+j]
				mx = math.Max(mx, c[i*n+j])
			}
			var s float64
			for j := range n {
				c[i*n+j] = math.Exp(c[i*n+j] - mx)
				s += c[i*n+j]
			}
			for j := range n {
				c[i*n+j] = c[i*n+j]/s + eps
			}
		}
		colNorm := func() {
			for j := range n {
				var s float64
				for i := range n {
					s += c[i*n+j]
				}
				for i := range n {
					c[i*n+j] /= s + eps
				}
			}
		}
		colNorm()
		for range iters - 1 {
			for i := range n {
				var s float64
				for j := range n {
					s += c[i*n+j]
				}
				for j := range n {
					c[i*n+j] /= s + eps
				}
			}
			colNorm()
		}
		for d := range D {
			for i := range n {
				collapsed[t*D+d] += pre[i] * xt[i*D+d]
			}
		}
	}
	return
}

func TestHCPre(t *testing.T) {
	cases := []struct {
		name        string
		T, n, D     int
		iters       int
		fnType      npu.DType
		eps, rmsEps float32
	}{
		{"four streams", 5, 4, 16, 20, npu.F32, 1e-6, 1e-5},
		{"two streams odd width", 3, 2, 7, 20, npu.F32, 1e-6, 1e-5},
		{"three streams bf16 fn", 4, 3, 33, 5, npu.BF16, 1e-6, 1e-6},
		{"one iteration", 2, 4, 9, 1, npu.F16, 1e-3, 1e-5},
		{"single token", 1, 4, 64, 20, npu.F32, 1e-6, 1e-5},
		{"three streams 48 wide", 3, 3, 48, 20, npu.F32, 1e-6, 1e-5},
	}
	for ci, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			be := New(2)
			r := rand.New(rand.NewPCG(uint64(ci), 7))
			mix := (2 + c.n) * c.n
			x, xv := mdlTensor(be, npu.F32, mdlRand(r, c.T*c.n*c.D, 1), c.T, c.n, c.D)
			fn, fnv := mdlTensor(be, c.fnType, mdlRand(r, mix*c.n*c.D, 0.3), mix, c.n*c.D)
			base, bv := mdlTensor(be, npu.F32, mdlRand(r, mix, 0.5), mix)
			scale, sv := mdlTensor(be, npu.F32, []float32{1.1, 0.7, 1.3}, 3)
			col := npu.Must(be.Alloc(npu.F32, c.T, c.D))
			post := npu.Must(be.Alloc(npu.F32, c.T, c.n))
			comb := npu.Must(be.Alloc(npu.F32, c.T, c.n, c.n))
			be.HCPre(col, post, comb, x, fn, base, scale, npu.HCParams{Streams: c.n, SinkhornIters: c.iters, Eps: c.eps, RMSEps: c.rmsEps})
			wc, wp, wm := hcPreRef(xv, fnv, bv, sv, c.T, c.n, c.D, c.iters, float64(c.eps), float64(c.rmsEps))
			mdlClose(t, "post", F32(post), wp, 1e-5, 1e-5)
			mdlClose(t, "comb", F32(comb), wm, 1e-5, 1e-5)
			mdlClose(t, "collapsed", F32(col), wc, 1e-5, 1e-5)
			if c.iters >= 20 {
				// Sinkhorn output is (close to) doubly stochastic.
				cm := F32(comb)
				for tt := range c.T {
					for j := range c.n {
						var cs float64
						for i := range c.n {
							cs += float64(cm[(tt*c.n+i)*c.n+j])
						}
						if math.Abs(cs-1) > 1e-3 {
							t.Fatalf("token %d column %d sums to %g", tt, j, cs)
						}
					}
				}
			}
		})
	}
}

func TestHCPostMean(t *testing.T) {
	cases := []struct {
		name    string
		T, n, D int
	}{
		{"four streams", 6, 4, 16},
		{"two streams odd", 3, 2, 5},
		{"one stream", 2, 1, 3},
		{"three streams 48 wide", 5, 3, 48},
		{"five streams 32 wide", 3, 5, 32},
	}
	for ci, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			be := New(2)
			r := rand.New(rand.NewPCG(uint64(ci), 11))
			x, xv := mdlTensor(be, npu.F32, mdlRand(r, c.T*c.n*c.D, 1), c.T, c.n, c.D)
			y, yv := mdlTensor(be, npu.F32, mdlRand(r, c.T*c.D, 1), c.T, c.D)
			post, pv := mdlTensor(be, npu.F32, mdlRand(r, c.T*c.n, 1), c.T, c.n)
			comb, cv := mdlTensor(be, npu.F32, mdlRand(r, c.T*c.n*c.n, 1), c.T, c.n, c.n)
			out := npu.Must(be.Alloc(npu.F32, c.T, c.n, c.D))
			be.HCPost(out, y, post, comb, x)
			want := make([]float64, c.T*c.n*c.D)
			for tt := range c.T {
				for j := range c.n {
					for d := range c.D {
						v := pv[tt*c.n+j] * yv[tt*c.D+d]
						for i := range c.n {
							v += cv[(tt*c.n+i)*c.n+j] * xv[(tt*c.n+i)*c.D+d]
						}
						want[(tt*c.n+j)*c.D+d] = v
					}
				}
			}
			mdlClose(t, "HCPost", F32(out), want, 1e-5, 1e-5)

			mean := npu.Must(be.Alloc(npu.F32, c.T, c.D))
			be.HCMean(mean, x)
			wm := make([]float64, c.T*c.D)
			for tt := range c.T {
				for d := range c.D {
					for i := range c.n {
						wm[tt*c.D+d] += xv[(tt*c.n+i)*c.D+d] / float64(c.n)
					}
				}
			}
			mdlClose(t, "HCMean", F32(mean), wm, 1e-6, 1e-6)
		})
	}
}
