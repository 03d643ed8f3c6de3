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
					y := float64(a * x)
					dst[c] = lb * float32(1/(1+math.Exp(-y)))
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
	if H <= 0 || K <= 0 || chunk < 0 {
		panic(fmt.Sprintf("cpu: KDA heads %d, head dim %d, chunk %d", H, K, chunk))
	}
	T := seqs.Rows()
	HK := H * K
	switch {
	case qkv.Numel() != T*3*HK || qkv.RowSize() != 3*HK:
		panic(fmt.Sprintf("cpu: KDA qkv %v, want [%d, %d]", qkv, T, 3*HK))
	case g.Numel() != T*HK:
		panic(fmt.Sprintf("cpu: KDA g %v, want [%d, %d]", g, T, HK))
	case beta.Numel() != T*H:
		panic(fmt.Sprintf("cpu: KDA beta %v, want [%d, %d]", beta, T, H))
	case out.Numel() != T*H*V:
		panic(fmt.Sprintf("cpu: KDA out %v, want [%d, %d]", out, T, H*V))
	case state.Rank() < 1 || state.RowSize() != H*K*V:
		panic(fmt.Sprintf("cpu: KDA state %v, want [slots, %d, %d, %d]", state, H, K, V))
	}
	a := &kdaArgs{
		qkv: F32(qkv), g: F32(g), beta: F32(beta), out: F32(out), state: F32(state),
		H: H, K: K, V: V, chunk: chunk,
	}
	B := seqs.NumSeqs()
	if len(seqs.StateSlot) < B {
		panic(fmt.Sprintf("cpu: KDA has %d state slots for %d sequences", len(seqs.StateSlot), B))
	}
	used := make(map[int]int, B)
	var order []int
	maxRows := 0
	for b := 0; b < B; b++ {
		n := seqs.QueryStart[b+1] - seqs.QueryStart[b]
		if n < 0 {
			panic(fmt.Sprintf("cpu: KDA QueryStart %v not ascending", seqs.QueryStart))
		}
		if n == 0 {
			continue
		}
		s := seqs.StateSlot[b]
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
		ni := seqs.QueryStart[order[i]+1] - seqs.QueryStart[order[i]]
		nj := seqs.QueryStart[order[j]+1] - seqs.QueryStart[order[j]]
		return ni > nj
	})
	c := 0
	if chunk > 0 {
		c = min(chunk, maxRows)
	}
	attnWorkers(be, len(order)*H, func() *kdaWork { return newKDAWork(K, V, c) }, func(w *kdaWork, u int) {
		b, h := order[u/H], u%H
		r0, r1 := seqs.QueryStart[b], seqs.QueryStart[b+1]
		S := a.state[(seqs.StateSlot[b]*H+h)*K*V:][:K*V]
		if chunk == 0 {
			w.recurrent(a, S, h, r0, r1)
			return
		}
		attnTranspose(K, V, S, V, w.st, K)
		for c0 := r0; c0 < r1; c0 += c {
			w.chunk(a, S, h, c0, min(c, r1-c0))
		}
		attnTranspose(V, K, w.st, K, S, V)
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
	st                  []float32 // Sᵀ [V, K]
	qc, kc              []float32 // normalised q (scaled) and k [C, K]
	gam                 []float64 // in-chunk cumulative log-decay Γ [C, K]
	lf, rf              []float32 // exp(Γ_i − Γ_anchor(i)), exp(Γ_end(i) − Γ_i) [C, K]
	e                   []float32 // per sub-block decay [nsub, K]; exp(g_t) [K] in the recurrence
	ql, kl, kr, kinv, x []float32 // factored operands [C, K] (x: [2C, K])
	pl, pq              []float32 // decayed sub-block rows [kdaSub, K]
	akk, aqk            []float32 // [C, C]
	xs                  []float32 // [2C, V]
	yt                  []float32 // Yᵀ, then Vnewᵀ [V, C]
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
	w.st = f(V * K)
	w.qc, w.kc = f(C*K), f(C*K)
	w.gam = make([]float64, C*K)
	w.lf, w.rf = f(C*K), f(C*K)
	w.e = f(max(nsub, 1) * K)
	w.ql, w.kl, w.kr, w.kinv, w.x = f(C*K), f(C*K), f(C*K), f(C*K), f(2*C*K)
	w.pl, w.pq = f(kdaSub*K), f(kdaSub*K)
	w.akk, w.aqk = f(C*C), f(C*C)
	w.xs = f(2 * C * V)
	w.yt = f(V * C)
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
			e[d] = attnExp(float64(x))
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
// the transposed state w.st. S is the state's memory, used by the fallback.
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
		attnTranspose(V, K, w.st, K, S, V)
		w.recurrent(a, S, h, r0, r0+n)
		attnTranspose(K, V, S, V, w.st, K)
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
				lf[i*K+d] = attnExp(gi - lam)
				rf[i*K+d] = attnExp(end - gi)
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
		for i := i0; i < i1; i++ {
			if i > i0 {
				attnNT(1, i-i0, K, w.kl[i*K:], K, w.kinv[i0*K:], K, nil, akk[i*n+i0:], n, false)
				attnNT(1, i-i0, K, w.ql[i*K:], K, w.kinv[i0*K:], K, nil, aqk[i*n+i0:], n, false)
			}
			attnNT(1, 1, K, w.qc[i*K:], K, w.kc[i*K:], K, nil, aqk[i*n+i:], n, false)
		}
		rows := i1 - i0
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
			attnNT(rows, kdaSub, K, pl, K, w.kr[j0*K:], K, nil, akk[i0*n+j0:], n, false)
			attnNT(rows, kdaSub, K, pq, K, w.kr[j0*K:], K, nil, aqk[i0*n+j0:], n, false)
		}
	}
	for i := 1; i < n; i++ {
		bt := a.beta[(r0+i)*H+h]
		m := akk[i*n : i*n+i]
		for j := range m {
			m[j] *= bt
		}
	}

	// [Q⊙e^Γ; K⊙e^Γ] · S.
	xs := w.xs[:2*n*V]
	attnNT(2*n, V, K, w.x, K, w.st, K, nil, xs, V, false)
	// Yᵀ = (β ⊙ (V − (K⊙e^Γ) S))ᵀ.
	yt := w.yt[:V*n]
	for i := 0; i < n; i++ {
		t := r0 + i
		bt := a.beta[t*H+h]
		v := a.qkv[t*3*HK+2*HK+h*V : t*3*HK+2*HK+(h+1)*V]
		ks := xs[(n+i)*V : (n+i+1)*V]
		for c, x := range v {
			yt[c*n+i] = bt * (x - ks[c])
		}
	}
	// Vnew = (I+M)⁻¹ Y: forward substitution on each row of Yᵀ.
	kdaSolve(akk, yt, n, V)
	// O = (Q⊙e^Γ) S + Aqk Vnew.
	for i := 0; i < n; i++ {
		t := r0 + i
		o := a.out[(t*H+h)*V : (t*H+h+1)*V]
		copy(o, xs[i*V:(i+1)*V])
		attnNT(1, V, i+1, aqk[i*n:], n, yt, n, nil, o, V, true)
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
	for v := 0; v < V; v++ {
		s := w.st[v*K : (v+1)*K]
		for d := range s {
			s[d] *= cum[d]
		}
	}
	attnNT(V, K, n, yt, n, kdt, n, nil, w.st, K, true)
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

// kdaSolve overwrites each of the m rows y of yt [m, n] with the solution x
// of (I + M) x = y, M strictly lower triangular in m [n, n]:
// x_i = y_i − Σ_{j<i} M_ij x_j.
func kdaSolve(mat, yt []float32, n, m int) {
	r := 0
	for ; r+4 <= m; r += 4 {
		y0, y1, y2, y3 := yt[r*n:(r+1)*n], yt[(r+1)*n:(r+2)*n], yt[(r+2)*n:(r+3)*n], yt[(r+3)*n:(r+4)*n]
		for i := 1; i < n; i++ {
			mi := mat[i*n : i*n+i]
			a0, a1, a2, a3 := y0[:len(mi)], y1[:len(mi)], y2[:len(mi)], y3[:len(mi)]
			var s0, s1, s2, s3 float32
			for j, x := range mi {
				s0 += x * a0[j]
				s1 += x * a1[j]
				s2 += x * a2[j]
				s3 += x * a3[j]
			}
			y0[i] -= s0
			y1[i] -= s1
			y2[i] -= s2
			y3[i] -= s3
		}
	}
	for ; r < m; r++ {
		y := yt[r*n : (r+1)*n]
		for i := 1; i < n; i++ {
			mi := mat[i*n : i*n+i]
			a := y[:len(mi)]
			var s float32
			for j, x := range mi {
				s += x * a[j]
			}
			y[i] -= s
		}
	}
}
