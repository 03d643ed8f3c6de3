package cpu

import (
	"fmt"
	"math"
	"sort"
	"sync/atomic"

	"github.com/npuserve/npuserve/npu"
)

// KDAGate computes the KDA forget gate (log-decay) g [T, H*K] from the gate
// projection f [T, H*K], dtBias [H*K] and aLog [H] (HF
// Glm5NextTextForgetGate): x = f + dtBias, then per head h
//
//	g = LowerBound * sigmoid(exp(aLog[h]) * x)     with p.HasLowerBound
//	g = -exp(aLog[h]) * softplus(x)                otherwise,
//
// softplus(x) = x for x > 20, else log(1 + exp(x)) (evaluated as log1p in
// float64, which matches the fp32 reference to rounding). dtBias and aLog may
// be F32, BF16 or F16; f and g are F32. g may alias f.
func (be *Backend) KDAGate(g, f, dtBias, aLog *npu.Tensor, p npu.KDAGateParams) {
	K := p.HeadDim
	H := aLog.Numel()
	if K <= 0 || H <= 0 {
		panic(fmt.Sprintf("cpu: KDAGate head dim %d, %d heads", K, H))
	}
	HK := H * K
	if f.Numel()%HK != 0 || g.Numel() != f.Numel() || f.RowSize() != HK {
		panic(fmt.Sprintf("cpu: KDAGate f %v, g %v for %d heads of %d", f, g, H, K))
	}
	fs, gs := F32(f), F32(g)
	dt := attnVector("KDAGate dtBias", dtBias, HK)
	al := attnVector("KDAGate aLog", aLog, H)
	decay := make([]float32, H)
	for h, a := range al {
		decay[h] = attnExp(float64(a))
	}
	lb := p.LowerBound
	rows := f.Numel() / HK
	be.parallelFor(rows, max(1, 16384/HK), func(lo, hi int) {
		for t := lo; t < hi; t++ {
			src, dst := fs[t*HK:(t+1)*HK], gs[t*HK:(t+1)*HK]
			for c, v := range src {
				x := v + dt[c]
				a := decay[c/K]
				if p.HasLowerBound {
					// sigmoid32 is within 4 ulp of the correctly rounded
					// sigmoid of the fp32 argument (float64 before).
					dst[c] = lb * sigmoid32(a*x)
				} else {
					sp := x
					if !(x > 20) {
						sp = float32(math.Log1p(math.Exp(float64(x))))
					}
					dst[c] = -a * sp
				}
			}
		}
	})
}

const (
	kdaL2Eps = 1e-6
	// kdaSub is the sub-block size of the chunked algorithm: decay factors
	// are anchored at sub-block boundaries.
	kdaSub = 8
	// kdaMaxRange bounds the log-decay accumulated inside one sub-block, so
	// that in-block factors stay within [2^-60.6, 2^60.6]; chunks beyond it
	// (impossible with the lower-bound gate, ≥ -5 per token), or with a
	// positive gate, fall back to the token recurrence.
	kdaMaxRange = 42
)

// kdaFallbacks counts chunks that the chunked algorithm handed to the token
// recurrence because their gates were out of its safe range.
var kdaFallbacks atomic.Int64

// KDA runs Kimi Delta Attention (HF recurrent_kimi_delta_attention /
// chunk_kimi_delta_attention with use_qk_l2norm_in_kernel) over each
// sequence's rows, continuing from and updating the fp32 state
// [slots, H, K, V] (V = K) at the sequence's StateSlot. See npu.Ops.KDA.
//
// Per head, with q and k l2-normalised (x / sqrt(Σx² + 1e-6)) and q scaled
// by K^-0.5, the recurrence per token is
//
//	S = diag(exp(g_t)) S;  δ = β_t (v_t − Sᵀk_t);  S += k_t δᵀ;  o_t = Sᵀq_t.
//
// chunk == 0 runs it token by token. chunk > 0 runs the equivalent chunked
// form on chunks of that many rows (counted from each sequence's first row in
// the batch): with Γ the in-chunk cumulative log-decay, M_ij = β_i Σ_d
// k_i[d]k_j[d]exp(Γ_i[d]−Γ_j[d]) (i > j), A_ij = Σ_d q_i[d]k_j[d]exp(Γ_i[d]−Γ_j[d])
// (i ≥ j),
//
//	Vnew = (I+M)⁻¹ (β ⊙ (V − (K⊙e^Γ) S))
//	O    = (Q⊙e^Γ) S + A Vnew
//	S'   = diag(e^Γlast) S + (K⊙e^(Γlast−Γ))ᵀ Vnew,
//
// with the intra-chunk products done as small matrix products. Decay
// factors are only ever exponentials of non-positive differences, anchored
// at 8-row sub-block boundaries (inside a diagonal sub-block, k_j is divided
// by exp(Γ_j−Γ_anchor) ≥ e^-42), so nothing overflows; a chunk whose gates
// leave that range (a positive gate, or a sub-block decaying by more than
// e^-42 in some channel, impossible with the lower-bound gate ≥ -5) is run by
// the token recurrence instead. Decay products below 2^-40 are flushed to
// zero (see kdaFlush). Work is spread over sequences × heads.
func (be *Backend) KDA(out, qkv, g, beta, state *npu.Tensor, seqs *npu.SeqLayout, heads, headDim, chunk int) {
	H, K := heads, headDim
	V := K
	L := readLayout("KDA", seqs)
	T := L.Rows()
	if err := npu.KDADims(out, qkv, g, beta, state, T, heads, headDim, chunk); err != nil {
		panic("cpu: " + err.Error())
	}
	a := &kdaArgs{
		qkv: F32(qkv), g: F32(g), beta: F32(beta), out: F32(out), state: F32(state),
		H: H, K: K, V: V, chunk: chunk,
	}
	B := L.NumSeqs()
	used := make(map[int]int, B)
	var order []int
	maxRows := 0
	for b := 0; b < B; b++ {
		n := L.QueryStart[b+1] - L.QueryStart[b]
		if n < 0 {
			panic(fmt.Sprintf("cpu: KDA QueryStart %v not ascending", L.QueryStart))
		}
		if n == 0 {
			continue
		}
		s := L.StateSlot[b]
		if s < 0 || s >= state.Dim(0) {
			panic(fmt.Sprintf("cpu: KDA state slot %d of sequence %d outside %v", s, b, state))
		}
		if prev, dup := used[s]; dup {
			panic(fmt.Sprintf("cpu: KDA sequences %d and %d share state slot %d", prev, b, s))
		}
		used[s] = b
		order = append(order, b)
		maxRows = max(maxRows, n)
	}
	// Longest sequences first, so that dynamic scheduling balances.
	sort.SliceStable(order, func(i, j int) bool {
		ni := L.QueryStart[order[i]+1] - L.QueryStart[order[i]]
		nj := L.QueryStart[order[j]+1] - L.QueryStart[order[j]]
		return ni > nj
	})
	c := 0
	if chunk > 0 {
		c = min(chunk, maxRows)
	}
	attnWorkers(be, len(order)*H, func() *kdaWork { return newKDAWork(K, V, c) }, func(w *kdaWork, u int) {
		b, h := order[u/H], u%H
		r0, r1 := L.QueryStart[b], L.QueryStart[b+1]
		S := a.state[(L.StateSlot[b]*H+h)*K*V:][:K*V]
		if chunk == 0 {
			w.recurrent(a, S, h, r0, r1)
			return
		}
		for c0 := r0; c0 < r1; c0 += c {
			w.chunk(a, S, h, c0, min(c, r1-c0))
		}
	})
}

// kdaArgs are the flattened KDA operands.
type kdaArgs struct {
	qkv, g, beta, out, state []float32
	H, K, V, chunk           int
}

// kdaWork is one worker's scratch memory.
type kdaWork struct {
	K, V int
	// token recurrence
	qn, kn, mem, delta, ke []float32
	// chunked form (C rows at most)
	qc, kc              []float32 // normalised q (scaled) and k [C, K]
	gam                 []float64 // in-chunk cumulative log-decay Γ [C, K]
	lf, rf              []float32 // exp(Γ_i − Γ_anchor(i)), exp(Γ_end(i) − Γ_i) [C, K]
	e                   []float32 // per sub-block decay [nsub, K]; exp(g_t) [K] in the recurrence
	ql, kl, kr, kinv, x []float32 // factored operands [C, K] (x: [2C, K])
	pl, pq              []float32 // decayed sub-block rows [kdaSub, K]
	akk, aqk            []float32 // [C, C]
	xs                  []float32 // [2C, V]
	y                   []float32 // Y, then Vnew [C, V]
	kdt                 []float32 // (K⊙e^(Γlast−Γ))ᵀ [K, C]
	cum, suf            []float32 // [K]
}

func newKDAWork(K, V, C int) *kdaWork {
	f := func(n int) []float32 { return make([]float32, n) }
	w := &kdaWork{K: K, V: V, qn: f(K), kn: f(K), ke: f(K), mem: f(V), delta: f(V)}
	if C == 0 {
		w.e = f(K)
		return w
	}
	nsub := (C + kdaSub - 1) / kdaSub
	w.qc, w.kc = f(C*K), f(C*K)
	w.gam = make([]float64, C*K)
	w.lf, w.rf = f(C*K), f(C*K)
	w.e = f(max(nsub, 1) * K)
	w.ql, w.kl, w.kr, w.kinv, w.x = f(C*K), f(C*K), f(C*K), f(C*K), f(2*C*K)
	w.pl, w.pq = f(kdaSub*K), f(kdaSub*K)
	w.akk, w.aqk = f(C*C), f(C*C)
	w.xs = f(2 * C * V)
	w.y = f(C * V)
	w.kdt = f(K * C)
	w.cum, w.suf = f(K), f(K)
	return w
}

// kdaL2 writes dst = scale * x / sqrt(Σx² + 1e-6).
func kdaL2(dst, x []float32, scale float32) {
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	inv := 1 / math.Sqrt(s+kdaL2Eps)
	for i, v := range x {
		dst[i] = float32(float64(v)*inv) * scale
	}
}

// recurrent runs the token recurrence of head h over rows [r0, r1) on the
// state S [K, V]. Per token it makes two passes over S, four rows at a time:
// Sᵀk after the decay, read only (Σ_d k[d]e[d] S[d,:]), then the decay and
// rank-1 update fused with o = Sᵀq.
func (w *kdaWork) recurrent(a *kdaArgs, S []float32, h, r0, r1 int) {
	H, K, V := a.H, a.K, a.V
	HK := H * K
	scale := float32(1 / math.Sqrt(float64(K)))
	mem, delta := w.mem[:V], w.delta[:V]
	e, ke := w.e[:K], w.ke[:K]
	qn, kn := w.qn[:K], w.kn[:K]
	simd := vecAVX512() && V%16 == 0 && K > 0
	for t := r0; t < r1; t++ {
		row := a.qkv[t*3*HK:]
		kdaL2(qn, row[h*K:(h+1)*K], scale)
		kdaL2(kn, row[HK+h*K:HK+(h+1)*K], 1)
		v := row[2*HK+h*V : 2*HK+(h+1)*V]
		gt := a.g[t*HK+h*K : t*HK+(h+1)*K]
		bt := a.beta[t*H+h]
		for d, x := range gt {
			e[d] = exp32(x) // within 2 ulp of the rounded float64 exp
			ke[d] = kn[d] * e[d]
		}
		o := a.out[(t*H+h)*V : (t*H+h+1)*V]
		if simd {
			kdaMemSIMD(S, ke, mem, K, V)
			for i := range delta {
				delta[i] = bt * (v[i] - mem[i])
			}
			kdaUpdateSIMD(S, e, kn, qn, delta, o, K, V)
			continue
		}
		clear(mem)
		d := 0
		for ; d+4 <= K; d += 4 {
			s0, s1, s2, s3 := S[d*V:(d+1)*V], S[(d+1)*V:(d+2)*V], S[(d+2)*V:(d+3)*V], S[(d+3)*V:(d+4)*V]
			s0, s1, s2, s3 = s0[:len(mem)], s1[:len(mem)], s2[:len(mem)], s3[:len(mem)]
			c0, c1, c2, c3 := ke[d], ke[d+1], ke[d+2], ke[d+3]
			for i := range mem {
				mem[i] += c0*s0[i] + c1*s1[i] + c2*s2[i] + c3*s3[i]
			}
		}
		for ; d < K; d++ {
			s0 := S[d*V : (d+1)*V]
			s0 = s0[:len(mem)]
			c0 := ke[d]
			for i := range mem {
				mem[i] += c0 * s0[i]
			}
		}
		v = v[:len(delta)]
		for i := range delta {
			delta[i] = bt * (v[i] - mem[i])
		}
		o = o[:len(delta)]
		clear(o)
		d = 0
		for ; d+4 <= K; d += 4 {
			s0, s1, s2, s3 := S[d*V:(d+1)*V], S[(d+1)*V:(d+2)*V], S[(d+2)*V:(d+3)*V], S[(d+3)*V:(d+4)*V]
			s0, s1, s2, s3 = s0[:len(delta)], s1[:len(delta)], s2[:len(delta)], s3[:len(delta)]
			e0, e1, e2, e3 := e[d], e[d+1], e[d+2], e[d+3]
			k0, k1, k2, k3 := kn[d], kn[d+1], kn[d+2], kn[d+3]
			q0, q1, q2, q3 := qn[d], qn[d+1], qn[d+2], qn[d+3]
			for i, y := range delta {
				x0 := s0[i]*e0 + k0*y
				x1 := s1[i]*e1 + k1*y
				x2 := s2[i]*e2 + k2*y
				x3 := s3[i]*e3 + k3*y
				s0[i], s1[i], s2[i], s3[i] = x0, x1, x2, x3
				o[i] += q0*x0 + q1*x1 + q2*x2 + q3*x3
			}
		}
		for ; d < K; d++ {
			s0 := S[d*V : (d+1)*V]
			s0 = s0[:len(delta)]
			e0, k0, q0 := e[d], kn[d], qn[d]
			for i, y := range delta {
				x0 := s0[i]*e0 + k0*y
				s0[i] = x0
				o[i] += q0 * x0
			}
		}
	}
}

// chunk runs the chunked form of head h over the n rows starting at r0, on
// the state S [K, V].
func (w *kdaWork) chunk(a *kdaArgs, S []float32, h, r0, n int) {
	H, K, V := a.H, a.K, a.V
	HK := H * K
	scale := float32(1 / math.Sqrt(float64(K)))
	gam := w.gam
	ok := true
	for i := 0; i < n; i++ {
		t := r0 + i
		row := a.qkv[t*3*HK:]
		kdaL2(w.qc[i*K:(i+1)*K], row[h*K:(h+1)*K], scale)
		kdaL2(w.kc[i*K:(i+1)*K], row[HK+h*K:HK+(h+1)*K], 1)
		gt := a.g[t*HK+h*K : t*HK+(h+1)*K]
		cur := gam[i*K : (i+1)*K]
		for d, x := range gt {
			if !(x <= 0) {
				ok = false
			}
			if i == 0 {
				cur[d] = float64(x)
			} else {
				cur[d] = gam[(i-1)*K+d] + float64(x)
			}
		}
	}
	nsub := (n + kdaSub - 1) / kdaSub
	for B := 0; B < nsub && ok; B++ {
		b0, b1 := B*kdaSub, min((B+1)*kdaSub, n)
		for d := 0; d < K; d++ {
			lam := 0.0
			if b0 > 0 {
				lam = gam[(b0-1)*K+d]
			}
			if !(gam[(b1-1)*K+d]-lam >= -kdaMaxRange) {
				ok = false
				break
			}
		}
	}
	if !ok {
		kdaFallbacks.Add(1)
		w.recurrent(a, S, h, r0, r0+n)
		return
	}

	// Decay factors, all ≤ 1: lf_i = exp(Γ_i − Λ_B), rf_i = exp(Γ_end(B) − Γ_i)
	// for row i of sub-block B with anchor Λ_B = Γ before B; e_B = exp(Γ_end(B) − Λ_B).
	lf, rf := w.lf, w.rf
	for B := 0; B < nsub; B++ {
		b0, b1 := B*kdaSub, min((B+1)*kdaSub, n)
		for d := 0; d < K; d++ {
			lam := 0.0
			if b0 > 0 {
				lam = gam[(b0-1)*K+d]
			}
			end := gam[(b1-1)*K+d]
			for i := b0; i < b1; i++ {
				gi := gam[i*K+d]
				lf[i*K+d] = kdaExp(gi - lam)
				rf[i*K+d] = kdaExp(end - gi)
			}
			w.e[B*K+d] = lf[(b1-1)*K+d]
		}
	}
	// Factored operands; x holds Q⊙e^Γ (rows 0..n-1) and K⊙e^Γ (rows n..2n-1),
	// e^Γ_i = lf_i · Π_{B' < B} e_B'.
	cum := w.cum
	for d := range cum {
		cum[d] = 1
	}
	for B := 0; B < nsub; B++ {
		b0, b1 := B*kdaSub, min((B+1)*kdaSub, n)
		for i := b0; i < b1; i++ {
			o := i * K
			q, k, l, r := w.qc[o:o+K], w.kc[o:o+K], lf[o:o+K], rf[o:o+K]
			ql, kl, kr, ki := w.ql[o:o+K], w.kl[o:o+K], w.kr[o:o+K], w.kinv[o:o+K]
			x1, x2 := w.x[o:o+K], w.x[(n+i)*K:(n+i+1)*K]
			for d := range q {
				ql[d] = q[d] * l[d]
				kl[d] = k[d] * l[d]
				kr[d] = k[d] * r[d]
				ki[d] = k[d] / l[d]
				x1[d] = kdaFlush(ql[d] * cum[d])
				x2[d] = kdaFlush(kl[d] * cum[d])
			}
		}
		e := w.e[B*K : (B+1)*K]
		for d := range cum {
			cum[d] = kdaFlush(cum[d] * e[d])
		}
	}
	// cum is now e^Γlast (flushed).

	// Intra-chunk matrices Akk (strict lower) and Aqk (lower with diagonal).
	akk, aqk := w.akk[:n*n], w.aqk[:n*n]
	clear(akk)
	clear(aqk)
	for I := 0; I < nsub; I++ {
		i0, i1 := I*kdaSub, min((I+1)*kdaSub, n)
		rows := i1 - i0
		// Diagonal sub-block: the whole rows×rows products (the part above
		// the diagonal, factors up to e^42, is finite and dropped), with
		// Aqk's diagonal taken from the unfactored q and k.
		kdaNT(rows, rows, K, w.kl[i0*K:], K, w.kinv[i0*K:], K, akk[i0*n+i0:], n)
		kdaNT(rows, rows, K, w.ql[i0*K:], K, w.kinv[i0*K:], K, aqk[i0*n+i0:], n)
		for i := i0; i < i1; i++ {
			clear(akk[i*n+i : i*n+i1])
			clear(aqk[i*n+i+1 : i*n+i1])
			attnNT(1, 1, K, w.qc[i*K:], K, w.kc[i*K:], K, nil, aqk[i*n+i:], n, false)
		}
		pl, pq := w.pl[:rows*K], w.pq[:rows*K]
		copy(pl, w.kl[i0*K:i1*K])
		copy(pq, w.ql[i0*K:i1*K])
		for J := I - 1; J >= 0; J-- {
			if J < I-1 {
				e := w.e[(J+1)*K : (J+2)*K]
				for r := 0; r < rows; r++ {
					p, q := pl[r*K:(r+1)*K], pq[r*K:(r+1)*K]
					for d, x := range e {
						p[d] = kdaFlush(p[d] * x)
						q[d] = kdaFlush(q[d] * x)
					}
				}
			}
			j0 := J * kdaSub
			kdaNT(rows, kdaSub, K, pl, K, w.kr[j0*K:], K, akk[i0*n+j0:], n)
			kdaNT(rows, kdaSub, K, pq, K, w.kr[j0*K:], K, aqk[i0*n+j0:], n)
		}
	}
	// −β ⊙ Akk, the negated M of the solve.
	for i := 1; i < n; i++ {
		bt := -a.beta[(r0+i)*H+h]
		m := akk[i*n : i*n+i]
		for j := range m {
			m[j] *= bt
		}
	}

	// [Q⊙e^Γ; K⊙e^Γ] · S.
	xs := w.xs[:2*n*V]
	kdaGemm(2*n, V, K, w.x, K, S, V, xs, V, false)
	// Y = β ⊙ (V − (K⊙e^Γ) S).
	y := w.y[:n*V]
	for i := 0; i < n; i++ {
		t := r0 + i
		bt := a.beta[t*H+h]
		v := a.qkv[t*3*HK+2*HK+h*V : t*3*HK+2*HK+(h+1)*V]
		ks := xs[(n+i)*V : (n+i+1)*V]
		yi := y[i*V : (i+1)*V]
		ks, yi = ks[:len(v)], yi[:len(v)]
		for c, x := range v {
			yi[c] = bt * (x - ks[c])
		}
	}
	// Vnew = (I+M)⁻¹ Y: forward substitution over the rows of Y.
	kdaSolveRows(akk, y, n, V)
	// O = (Q⊙e^Γ) S + Aqk Vnew, four rows at a time (Aqk is zero above the
	// diagonal, so rows up to i0+3 need only the first i0+4 rows of Vnew).
	ld := H * V
	for i0 := 0; i0 < n; i0 += 4 {
		rows := min(4, n-i0)
		o := a.out[((r0+i0)*H+h)*V:]
		for r := 0; r < rows; r++ {
			copy(o[r*ld:r*ld+V], xs[(i0+r)*V:(i0+r+1)*V])
		}
		kdaGemm(rows, V, i0+rows, aqk[i0*n:], n, y, V, o, ld, true)
	}
	// S' = diag(e^Γlast) S + (K⊙e^(Γlast−Γ))ᵀ Vnew, with
	// e^(Γlast−Γ_j) = rf_j · Π_{B' > B} e_B'.
	suf := w.suf
	for d := range suf {
		suf[d] = 1
	}
	kdt := w.kdt[:K*n]
	for B := nsub - 1; B >= 0; B-- {
		b0, b1 := B*kdaSub, min((B+1)*kdaSub, n)
		for j := b0; j < b1; j++ {
			k, r := w.kc[j*K:(j+1)*K], rf[j*K:(j+1)*K]
			for d := range k {
				kdt[d*n+j] = kdaFlush(k[d] * r[d] * suf[d])
			}
		}
		e := w.e[B*K : (B+1)*K]
		for d := range suf {
			suf[d] = kdaFlush(suf[d] * e[d])
		}
	}
	for d := 0; d < K; d++ {
		s, c := S[d*V:(d+1)*V], cum[d]
		for i := range s {
			s[i] *= c
		}
	}
	kdaGemm(K, V, n, kdt, n, y, V, S, V, true)
}

// kdaExp is e^x rounded to fp32 for a float64 x in [-87, 0] (the chunked
// form's in-sub-block log-decay differences, within [-kdaMaxRange, 0]): the
// range reduction x = n·ln2 + r is done in float64, so the argument is not
// rounded to fp32 first (|x| up to 42 would lose up to 2.5e-6 relative), and
// only r, |r| ≤ ln2/2, is rounded to fp32 (relative error 3e-8 in the
// result) for exp32's polynomial: within 1e-7 relative of math.Exp
// (TestKDAExp). The result, ≥ e^-87 > 2^-126, is normal.
func kdaExp(x float64) float32 {
	const round = 6755399441055744 // 1.5·2^52: adding it rounds a float64 to an integer
	t := x*math.Log2E + round
	n := t - round
	r := float32(x - n*math.Ln2)
	y := expPoly(r)
	return y * math.Float32frombits(uint32(int32(n)+127)<<23)
}

// kdaFlush returns x, or 0 when |x| < 2^-40. The chunked form flushes the
// decay products that feed its matrix products (q and k times cross-sub-block
// decays, the running decays themselves and the state's decay), so that
// neither they nor their products with the state or with each other are
// subnormal: decays across a chunk reach e^-300 and below, and subnormal
// arithmetic is two orders of magnitude slower on x86. A flushed factor
// multiplies a unit-norm q or k (or the state) by less than 2^-40 ≈ 1e-12,
// far below fp32 resolution of the results.
func kdaFlush(x float32) float32 {
	b := math.Float32bits(x)
	m := uint32(int32(b&0x7f800000-(127-40)<<23) >> 31) // all ones when the exponent is below -40
	return math.Float32frombits(b &^ m)
}

// kdaGemm computes the small product C = A·B (acc: C += A·B) of the chunked
// form: for i < m, j < n
//
//	c[i*ldc+j] (+)= Σ_{p<k} a[i*lda+p] * b[p*ldb+j].
//
// With the AVX-512 helpers and n a multiple of 16 it runs vector kernels
// that sum each element in a different order than the Go loop (fp32 either
// way; the results agree to fp32 rounding).
func kdaGemm(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, acc bool) {
	if m <= 0 || n <= 0 {
		return
	}
	if !acc {
		for i := 0; i < m; i++ {
			clear(c[i*ldc : i*ldc+n])
		}
	}
	if k <= 0 {
		return
	}
	_, _, _ = a[(m-1)*lda+k-1], b[(k-1)*ldb+n-1], c[(m-1)*ldc+n-1]
	if vecAVX512() && n%16 == 0 {
		kdaGemmSIMD(m, n, k, a, lda, b, ldb, c, ldc)
		return
	}
	for i := 0; i < m; i++ {
		ai := a[i*lda : i*lda+k]
		ci := c[i*ldc : i*ldc+n]
		p := 0
		for ; p+4 <= k; p += 4 {
			x0, x1, x2, x3 := ai[p], ai[p+1], ai[p+2], ai[p+3]
			b0, b1, b2, b3 := b[p*ldb:p*ldb+n], b[(p+1)*ldb:(p+1)*ldb+n], b[(p+2)*ldb:(p+2)*ldb+n], b[(p+3)*ldb:(p+3)*ldb+n]
			b0, b1, b2, b3 = b0[:len(ci)], b1[:len(ci)], b2[:len(ci)], b3[:len(ci)]
			for j := range ci {
				ci[j] += x0*b0[j] + x1*b1[j] + x2*b2[j] + x3*b3[j]
			}
		}
		for ; p < k; p++ {
			x0 := ai[p]
			b0 := b[p*ldb : p*ldb+n]
			b0 = b0[:len(ci)]
			for j := range ci {
				ci[j] += x0 * b0[j]
			}
		}
	}
}

// kdaNT computes C = A·Bᵀ: c[i*ldc+j] = Σ_{p<k} a[i*lda+p] * b[j*ldb+p] for
// i < m, j < n. With the AVX-512 helpers and k a multiple of 16, groups of
// four columns run in a vector kernel (a different fp32 summation order than
// attnNT, which does the rest).
func kdaNT(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if m <= 0 || n <= 0 {
		return
	}
	j := 0
	if vecAVX512() && k > 0 && k%16 == 0 && n >= 4 {
		_, _, _ = a[(m-1)*lda+k-1], b[(n-1)*ldb+k-1], c[(m-1)*ldc+n-1]
		j = kdaNTSIMD(m, n, k, a, lda, b, ldb, c, ldc)
	}
	if j < n {
		attnNT(m, n-j, k, a, lda, b[j*ldb:], ldb, nil, c[j:], ldc, false)
	}
}

// kdaSolveRows overwrites each row y_i of y [n, v] with the solution x of
// (I + M) x = y, given nm = −M (M strictly lower triangular) in nm [n, n]:
// x_i = y_i + Σ_{j<i} nm_ij x_j, four rows at a time (the earlier rows' part
// as one product, then the rest of the block row by row).
func kdaSolveRows(nm, y []float32, n, v int) {
	for i0 := 0; i0 < n; i0 += 4 {
		rows := min(4, n-i0)
		if i0 > 0 {
			kdaGemm(rows, v, i0, nm[i0*n:], n, y, v, y[i0*v:], v, true)
		}
		for r := 1; r < rows; r++ {
			i := i0 + r
			kdaGemm(1, v, r, nm[i*n+i0:], n, y[i0*v:], v, y[i*v:], v, true)
		}
	}
}
