package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

// kdaRef is the float64 token recurrence straight from the equations:
// per sequence and head, q,k l2-normalised (eps 1e-6), q scaled by K^-0.5,
// S = diag(exp(g)) S, δ = β (v − Sᵀk), S += k δᵀ, o = Sᵀq. state
// [slots, H, K, K] is updated in place.
func kdaRef(qkv, g, beta, state []float64, qs, slot []int, H, K int) []float64 {
	V := K
	HK := H * K
	T := qs[len(qs)-1]
	out := make([]float64, T*H*V)
	norm := func(x []float64, scale float64) []float64 {
		var s float64
		for _, v := range x {
			s += v * v
		}
		n := math.Sqrt(s + 1e-6)
		y := make([]float64, len(x))
		for i, v := range x {
			y[i] = v / n * scale
		}
		return y
	}
	for b := 0; b+1 < len(qs); b++ {
		for h := 0; h < H; h++ {
			S := state[(slot[b]*H+h)*K*V : (slot[b]*H+h+1)*K*V]
			for t := qs[b]; t < qs[b+1]; t++ {
				row := qkv[t*3*HK:]
				q := norm(row[h*K:(h+1)*K], 1/math.Sqrt(float64(K)))
				k := norm(row[HK+h*K:HK+(h+1)*K], 1)
				v := row[2*HK+h*V : 2*HK+(h+1)*V]
				bt := beta[t*H+h]
				for d := 0; d < K; d++ {
					e := math.Exp(g[t*HK+h*K+d])
					for c := 0; c < V; c++ {
						S[d*V+c] *= e
					}
				}
				for c := 0; c < V; c++ {
					var mem float64
					for d := 0; d < K; d++ {
						mem += S[d*V+c] * k[d]
					}
					delta := bt * (v[c] - mem)
					for d := 0; d < K; d++ {
						S[d*V+c] += k[d] * delta
					}
				}
				for c := 0; c < V; c++ {
					var o float64
					for d := 0; d < K; d++ {
						o += S[d*V+c] * q[d]
					}
					out[(t*H+h)*V+c] = o
				}
			}
		}
	}
	return out
}

// kdaGates draws log-decays of one of the gate regimes used by the tests.
func kdaGates(r *rand.Rand, n int, kind string) []float64 {
	g := make([]float64, n)
	for i := range g {
		x := r.NormFloat64()
		switch kind {
		case "lb": // lower-bound gate, lb = -5: g in (-5, 0)
			g[i] = -5 / (1 + math.Exp(-2*x))
		case "slow": // long memory: g close to 0
			g[i] = -5 / (1 + math.Exp(-(x - 7)))
		case "softplus": // -exp(A) softplus(x)
			a := math.Exp(r.Float64()*2 - 1)
			g[i] = -a * math.Log1p(math.Exp(x))
		case "extreme": // decays far beyond a sub-block's safe range
			g[i] = -20 - 10*r.Float64()
		default:
			panic(kind)
		}
	}
	return g
}

// kdaCase is one KDA batch: qkv/g/beta inputs, a state with shuffled slots
// and a layout of several sequences.
type kdaCase struct {
	H, K                 int
	qs, slot             []int
	nslots               int
	qkv, g, beta, state  []float64
	tq, tg, tb, ts, tout *npu.Tensor
	seqs                 *npu.SeqLayout
}

func newKDACase(tb testing.TB, be *Backend, r *rand.Rand, H, K int, lens []int, gate string) *kdaCase {
	c := &kdaCase{H: H, K: K, qs: []int{0}, nslots: len(lens) + 2}
	for _, n := range lens {
		c.qs = append(c.qs, c.qs[len(c.qs)-1]+n)
	}
	perm := r.Perm(c.nslots)
	c.slot = perm[:len(lens)]
	T := c.qs[len(lens)]
	HK := H * K
	c.qkv = atNormal(r, T*3*HK, 0, 1)
	c.g = kdaGates(r, T*HK, gate)
	c.beta = make([]float64, T*H)
	for i := range c.beta {
		c.beta[i] = 1 / (1 + math.Exp(-r.NormFloat64()))
	}
	c.state = atNormal(r, c.nslots*H*K*K, 0, 0.3)
	c.tq = atF32(be, c.qkv, T, 3*HK)
	c.tg = atF32(be, c.g, T, HK)
	c.tb = atF32(be, c.beta, T, H)
	c.ts = atF32(be, c.state, c.nslots, H, K, K)
	c.tout = npu.Must(be.Alloc(npu.F32, T, H*K))
	c.seqs = upLayout(tb, be, stateLayout(c.qs, nil, c.slot))
	return c
}

func TestKDA(t *testing.T) {
	be := New(2)
	cases := []struct {
		H, K   int
		lens   []int
		gate   string
		chunks []int
	}{
		{3, 16, []int{37, 1, 70, 0, 16}, "lb", []int{0, 1, 7, 16, 64}},
		{3, 16, []int{37, 1, 70}, "slow", []int{0, 7, 64}},
		{2, 33, []int{20, 50, 2}, "softplus", []int{0, 5, 64}},
		{2, 128, []int{100, 3}, "lb", []int{0, 64}},
		{1, 8, []int{130}, "lb", []int{0, 128}},
	}
	for ci, tc := range cases {
		for _, chunk := range tc.chunks {
			t.Run(fmt.Sprintf("H%d_K%d_%s_%v/chunk%d", tc.H, tc.K, tc.gate, tc.lens, chunk), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(ci), 7))
				c := newKDACase(t, be, r, tc.H, tc.K, tc.lens, tc.gate)
				want := kdaRef(c.qkv, c.g, c.beta, c.state, c.qs, c.slot, c.H, c.K)
				before := kdaFallbacks.Load()
				be.KDA(c.tout, c.tq, c.tg, c.tb, c.ts, c.seqs, c.H, c.K, chunk)
				if n := kdaFallbacks.Load() - before; n != 0 {
					t.Errorf("%d chunks fell back to the recurrence with in-range gates", n)
				}
				atCheck(t, "out", F32(c.tout), want, 5e-6)
				atCheck(t, "state", F32(c.ts), c.state, 5e-6)
			})
		}
	}
}

// TestKDAExtremeGates checks that chunks whose decays leave the factored
// form's range are still exact (through the recurrence fallback).
func TestKDAExtremeGates(t *testing.T) {
	be := New(2)
	r := rand.New(rand.NewPCG(3, 3))
	c := newKDACase(t, be, r, 2, 16, []int{40, 9}, "extreme")
	// Mix in a positive gate in the second sequence.
	c.g[(c.qs[1]+3)*2*16+5] = 0.5
	F32(c.tg)[(c.qs[1]+3)*2*16+5] = 0.5
	want := kdaRef(c.qkv, c.g, c.beta, c.state, c.qs, c.slot, c.H, c.K)
	before := kdaFallbacks.Load()
	be.KDA(c.tout, c.tq, c.tg, c.tb, c.ts, c.seqs, c.H, c.K, 64)
	if kdaFallbacks.Load() == before {
		t.Errorf("extreme gates did not use the recurrence fallback")
	}
	atCheck(t, "out", F32(c.tout), want, 5e-6)
	atCheck(t, "state", F32(c.ts), c.state, 5e-6)
}

// TestKDAContinuation splits two sequences into pieces processed by
// successive calls (alternating algorithms) and compares with one
// reference pass: the state carries everything across calls.
func TestKDAContinuation(t *testing.T) {
	be := New(2)
	const H, K = 2, 32
	piecesA := []int{1, 7, 64, 78}
	piecesB := []int{5, 0, 30, 1}
	for _, chunks := range [][]int{{64, 64, 64, 64}, {0, 0, 0, 0}, {7, 0, 64, 1}} {
		t.Run(fmt.Sprint(chunks), func(t *testing.T) {
			r := rand.New(rand.NewPCG(11, 12))
			lenA, lenB := 150, 36
			whole := newKDACase(t, be, r, H, K, []int{lenA, lenB}, "lb")
			ref := append([]float64(nil), whole.state...)
			want := kdaRef(whole.qkv, whole.g, whole.beta, ref, whole.qs, whole.slot, H, K)
			state := atF32(be, append([]float64(nil), whole.state...), whole.nslots, H, K, K)
			HK := H * K
			got := make([]float32, (lenA+lenB)*H*K)
			offA, offB := 0, 0
			for p := range piecesA {
				na, nb := piecesA[p], piecesB[p]
				rows := func(src []float64, w int) []float64 {
					v := append([]float64(nil), src[offA*w:(offA+na)*w]...)
					return append(v, src[(lenA+offB)*w:(lenA+offB+nb)*w]...)
				}
				T := na + nb
				seqs := upLayout(t, be, stateLayout([]int{0, na, T}, []int{offA, offB}, whole.slot))
				out := npu.Must(be.Alloc(npu.F32, T, HK))
				be.KDA(out, atF32(be, rows(whole.qkv, 3*HK), T, 3*HK), atF32(be, rows(whole.g, HK), T, HK),
					atF32(be, rows(whole.beta, H), T, H), state, seqs, H, K, chunks[p])
				o := F32(out)
				copy(got[offA*HK:], o[:na*HK])
				copy(got[(lenA+offB)*HK:], o[na*HK:])
				offA += na
				offB += nb
			}
			atCheck(t, "out", got, want, 5e-6)
			atCheck(t, "state", F32(state), ref, 5e-6)
		})
	}
}

func TestKDAGate(t *testing.T) {
	be := New(2)
	const T, H, K = 5, 3, 12
	r := rand.New(rand.NewPCG(5, 5))
	for _, dt := range []npu.DType{npu.F32, npu.BF16} {
		for _, lb := range []bool{true, false} {
			t.Run(fmt.Sprintf("%v_lb%v", dt, lb), func(t *testing.T) {
				f := atNormal(r, T*H*K, 0, 8) // reaches the x > 20 branch
				f[3] = 30
				f[4] = -40
				tf := atF32(be, f, T, H*K)
				tdt, dtb := atTensor(be, dt, atNormal(r, H*K, 0, 1), H*K)
				tal, al := atTensor(be, dt, atNormal(r, H, 0, 1), H)
				g := npu.Must(be.Alloc(npu.F32, T, H*K))
				p := npu.KDAGateParams{HasLowerBound: lb, LowerBound: -5, HeadDim: K}
				be.KDAGate(g, tf, tdt, tal, p)
				want := make([]float64, T*H*K)
				for i := range want {
					c := i % (H * K)
					x := float64(float32(f[i] + dtb[c]))
					a := math.Exp(al[c/K])
					if lb {
						want[i] = -5 / (1 + math.Exp(-a*x))
					} else {
						sp := x
						if x <= 20 {
							sp = math.Log(1 + math.Exp(x))
						}
						want[i] = -a * sp
					}
				}
				for i, w := range want {
					if got := float64(F32(g)[i]); math.Abs(got-w) > 1e-6*max(1, math.Abs(w)) {
						t.Fatalf("g[%d] = %v, want %v", i, got, w)
					}
				}
				// In place.
				be.KDAGate(tf, tf, tdt, tal, p)
				for i := range want {
					if F32(tf)[i] != F32(g)[i] {
						t.Fatalf("in-place g[%d] = %v, want %v", i, F32(tf)[i], F32(g)[i])
					}
				}
			})
		}
	}
}

func TestKDAPanics(t *testing.T) {
	be := New(1)
	H, K := 2, 4
	seqs := func(slots ...int) *npu.SeqLayout { return upLayout(t, be, stateLayout([]int{0, 2, 3}, nil, slots)) }
	qkv := npu.Must(be.Alloc(npu.F32, 3, 3*H*K))
	g := npu.Must(be.Alloc(npu.F32, 3, H*K))
	beta := npu.Must(be.Alloc(npu.F32, 3, H))
	out := npu.Must(be.Alloc(npu.F32, 3, H*K))
	state := npu.Must(be.Alloc(npu.F32, 2, H, K, K))
	for _, c := range []struct {
		what string
		seqs *npu.SeqLayout
		beta *npu.Tensor
		msg  string
	}{
		{"shared state slot", seqs(1, 1), beta, "sequences 0 and 1 share state slot 1"},
		{"state slot out of range", seqs(0, 2), beta, "state slot 2 of sequence 1 outside"},
		{"bad beta shape", seqs(0, 1), npu.Must(be.Alloc(npu.F32, 3, H+1)), "KDA beta"},
	} {
		if msg := atPanicMsg(func() { be.KDA(out, qkv, g, c.beta, state, c.seqs, H, K, 64) }); !strings.Contains(msg, c.msg) {
			t.Errorf("%s: panic %q, want one containing %q", c.what, msg, c.msg)
		}
	}
	be.KDA(out, qkv, g, beta, state, seqs(0, 1), H, K, 64)
}

// BenchmarkKDAPrefill measures chunked prefill (one 1024-token sequence,
// K = V = 128) in tokens per second.
func BenchmarkKDAPrefill(b *testing.B) {
	for _, H := range []int{4, 16, 64} {
		for _, chunk := range []int{64, 0} {
			b.Run(fmt.Sprintf("H%d_chunk%d", H, chunk), func(b *testing.B) {
				be := New(0)
				const T, K = 1024, 128
				r := rand.New(rand.NewPCG(1, 1))
				c := newKDACase(b, be, r, H, K, []int{T}, "lb")
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					be.KDA(c.tout, c.tq, c.tg, c.tb, c.ts, c.seqs, H, K, chunk)
				}
				b.ReportMetric(float64(T*b.N)/b.Elapsed().Seconds(), "tok/s")
			})
		}
	}
}

// BenchmarkKDADecode measures the token recurrence for a decode batch of 8
// sequences (one row each, H = 64, K = V = 128) in tokens per second.
func BenchmarkKDADecode(b *testing.B) {
	be := New(0)
	const H, K = 64, 128
	r := rand.New(rand.NewPCG(1, 1))
	c := newKDACase(b, be, r, H, K, []int{1, 1, 1, 1, 1, 1, 1, 1}, "lb")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		be.KDA(c.tout, c.tq, c.tg, c.tb, c.ts, c.seqs, H, K, 0)
	}
	b.ReportMetric(float64(8*b.N)/b.Elapsed().Seconds(), "tok/s")
}

// TestKDAExp checks kdaExp against the float64 exp over [-87, 0].
func TestKDAExp(t *testing.T) {
	worst := 0.0
	for i := 0; i <= 2000000; i++ {
		x := -87 * float64(i) / 2000000
		want := math.Exp(x)
		got := float64(kdaExp(x))
		if e := math.Abs(got-want) / want; e > worst {
			worst = e
		}
	}
	if worst > 1e-7 {
		t.Errorf("kdaExp max relative error %.3g", worst)
	}
	t.Logf("kdaExp max relative error %.3g", worst)
}
