package cpu

import (
	"fmt"
	"math"
	"os"
	"sync"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/quant"
)

// Quantized matmuls (npu.Ops.MatMulQ, MoEQ).
//
// Int8 schemes: activations are quantized per row (W8A8_DYNAMIC) or with
// the static scale and zero point (W8A8) into int8, packed into panels of
// mr rows, multiplied with the int8 weights into exact int32 sums and
// dequantized by the epilogue:
//
//	dynamic: out = float32(acc) * xscale[m] * wscale[n]
//	static:  out = float32(acc + quant_bias[n]) * deq_scale[n]
//
// The weights are packed once by PrepareQuant into panels of nr output
// channels with kg consecutive k values per column (the layout the SIMD
// kernels stream). AVX-512 VNNI (VPDPBUSD, unsigned × signed bytes)
// stores the weights offset by +128 and subtracts 128·sum_k xq[m,k]
// afterwards; the AVX-512BW and AVX2 kernels widen to int16 and use
// VPMADDWD. The portable kernel reads the checkpoint layout directly.
//
// MXFP8: activations are MX-quantized per block (E4M3 values times E8M0
// scales, exact in float32), the E4M3 weights are expanded block by block
// into float32 (exact) a slice of rows at a time, and the products go
// through the float32 MatMul kernels: the weights stay one byte per
// element in memory.

// i8Kernels is one implementation of the int8 GEMM micro-kernel.
type i8Kernels struct {
	name string
	// mr x nr is the tile: mr rows of x against nr output channels.
	mr, nr int
	// kg is the number of consecutive k values per packed column entry:
	// 4 (VNNI bytes) or 2 (int16 pairs for VPMADDWD).
	kg int
	// unsignedW: weights are stored +128 (unsigned bytes) and the
	// epilogue subtracts 128*sum_k xq.
	unsignedW bool
	// wideX: activations are packed as int16 (else int8).
	wideX bool
	// kernel runs `steps` packed steps of kg k values: x panel (mr entries
	// of kg elements per step), w panel (nr entries of kg bytes per step),
	// adding (acc) or storing the int32 tile c [mr][ldc].
	kernel func(steps int, x, w []byte, c []int32, ldc int, acc bool)
}

// i8Portable is the portable Go implementation (no packing).
var i8Portable = &i8Kernels{name: "go"}

// activeI8 is the int8 GEMM implementation in use.
var activeI8 = selectI8Kernels(os.Getenv("NPUSERVE_CPU_SIMD"))

// selectI8Kernels picks the int8 kernels for the NPUSERVE_CPU_SIMD
// setting env: "0" (or "off", "false", "go") forces the portable Go
// kernel, "avx2", "avx512" (AVX-512BW without VNNI) or "vnni" select that
// set when the CPU has it, anything else the best the CPU has.
func selectI8Kernels(env string) *i8Kernels {
	switch env {
	case "0", "off", "false", "go":
		return i8Portable
	}
	ks := supportedI8Kernels()
	for _, k := range ks {
		if k.name == env {
			return k
		}
	}
	if len(ks) > 0 {
		return ks[len(ks)-1]
	}
	return i8Portable
}

// Int8Kernel names the int8 GEMM implementation in use ("go", "avx2",
// "avx512", "vnni"), for logs.
func Int8Kernel() string { return activeI8.name }

// qprep is the CPU compute form of a quantized weight.
type qprep struct {
	kern    *i8Kernels // int8 kernels the weights are packed for
	E, N, K int
	kpad    int      // K rounded up to the packing granularity
	packed  [][]byte // per expert: packed int8 panels (nil for portable/MX)
	raw     []byte   // the checkpoint's weight bytes [E][N][K]
	wscale  []float32
	qbias   []int32
	deq     []float32
	recip   float32 // 1/InputScale
	offset  int32   // InputOffset
	mxScale []byte  // [E][N][nb] E8M0 bytes
	nb      int     // MX blocks per row (FP8_BLOCK128: 128-column blocks)
	// blkScale are FP8_BLOCK128's F32 weight block scales
	// [E][ceil(N/128)][nb].
	blkScale []float32
}

// PrepareQuant converts w into the CPU compute form (packed int8 panels
// for the active kernels; decoded per-channel parameters). It is
// idempotent and also runs on first use. See npu.Ops.PrepareQuant.
func (be *Backend) PrepareQuant(w *npu.QuantWeight) {
	be.prepared(w)
}

// prepared returns w's compute form, making it on first use.
func (be *Backend) prepared(w *npu.QuantWeight) *qprep {
	return w.PrepareOnce(func() any {
		if err := w.Check(); err != nil {
			panic("cpu: " + err.Error())
		}
		return be.prepare(w, activeI8)
	}).(*qprep)
}

// prepare builds the compute form of w for the int8 kernels k.
func (be *Backend) prepare(w *npu.QuantWeight, k *i8Kernels) *qprep {
	E := max(w.Experts(), 1)
	p := &qprep{kern: k, E: E, N: w.N(), K: w.K(), raw: bytesOf(w.Weight)}
	switch w.Scheme {
	case npu.QW8A8Dynamic:
		p.wscale = F32(w.Scale)
	case npu.QW8A8:
		p.qbias = I32(w.QuantBias)
		p.deq = F32(w.DeqScale)
		p.recip = 1 / w.InputScale
		p.offset = w.InputOffset
	case npu.QMXFP8:
		p.mxScale = bytesOf(w.Scale)
		p.nb = (p.K + w.GroupSize - 1) / w.GroupSize
		return p
	case npu.QFP8Block:
		p.blkScale = F32(w.Scale)
		p.nb = (p.K + npu.FP8Block - 1) / npu.FP8Block
		return p
	}
	if k == i8Portable {
		return p
	}
	p.kpad = (p.K + k.kg - 1) / k.kg * k.kg
	p.packed = make([][]byte, E)
	be.parallelFor(E, 1, func(lo, hi int) {
		for e := lo; e < hi; e++ {
			p.packed[e] = packI8Weights(k, p.raw[e*p.N*p.K:(e+1)*p.N*p.K], p.N, p.K, p.kpad)
		}
	})
	return p
}

// packI8Weights lays w [n, k] (int8) out as panels of kern.nr channels:
// panel j holds, for each group of kg k values, the kg values of each of
// its nr channels in turn ([kpad/kg][nr][kg]), zero-padded in n and k,
// offset by +128 for unsigned-weight kernels.
func packI8Weights(kern *i8Kernels, w []byte, n, k, kpad int) []byte {
	nr, kg := kern.nr, kern.kg
	panels := (n + nr - 1) / nr
	steps := kpad / kg
	out := make([]byte, panels*steps*nr*kg)
	var bias byte
	if kern.unsignedW {
		bias = 128
	}
	for i := range out {
		out[i] = bias
	}
	for r := range n {
		pj, c := r/nr, r%nr
		base := pj * steps * nr * kg
		row := w[r*k : (r+1)*k]
		for kk, v := range row {
			out[base+(kk/kg)*nr*kg+c*kg+kk%kg] = v + bias
		}
	}
	return out
}

// MatMulQ computes out[M,N] = x[M,K] · w^T with w quantized. See
// npu.Ops.MatMulQ.
func (be *Backend) MatMulQ(out, x *npu.Tensor, w *npu.QuantWeight) {
	if w.Experts() != 0 {
		panic(fmt.Sprintf("cpu: MatMulQ with a grouped weight %v (use MoEQ)", w))
	}
	p := be.prepared(w)
	K, N := p.K, p.N
	if x.DType() != npu.F32 || x.Dim(-1) != K || out.DType() != npu.F32 {
		panic(fmt.Sprintf("cpu: MatMulQ x %v, w %v, out %v", x, w, out))
	}
	M := x.Numel() / max(K, 1)
	if out.Numel() != M*N || (out.Rank() > 0 && out.Dim(-1) != N) {
		panic(fmt.Sprintf("cpu: MatMulQ out %v, want [%d,%d] for x %v, w %v", out, M, N, x, w))
	}
	be.matMulQ(p, 0, w, F32(out), F32(x), M)
}

// matMulQ computes rows of out = x · w_e^T for expert e (0 for a linear).
func (be *Backend) matMulQ(p *qprep, e int, w *npu.QuantWeight, o, xv []float32, M int) {
	N, K := p.N, p.K
	if M == 0 || N == 0 {
		return
	}
	if K == 0 {
		clear(o[:M*N])
		return
	}
	switch w.Scheme {
	case npu.QMXFP8:
		be.mxfp8(p, e, w, o, xv, M)
		return
	case npu.QFP8Block:
		be.fp8block(p, e, o, xv, M)
		return
	}
	if K > maxI8K {
		panic(fmt.Sprintf("cpu: MatMulQ K = %d exceeds %d (int32 accumulation)", K, maxI8K))
	}
	xq := be.quantizeActivations(p, w.Scheme, xv, M, K)
	defer xq.release()
	var wscale []float32
	if p.wscale != nil {
		wscale = p.wscale[e*N : (e+1)*N]
	}
	ep := epilogue{o: o, N: N, xscale: xq.scale, xsum: xq.sum, wscale: wscale, qbias: p.qbias, deq: p.deq, unsignedW: p.kern.unsignedW}
	if p.kern == i8Portable {
		be.i8gemmGo(p.raw[e*N*K:(e+1)*N*K], xq.q, M, N, K, &ep)
		return
	}
	be.i8gemm(p.kern, xq.packed, p.packed[e], M, N, p.kpad, &ep)
}

// maxI8K bounds K so that int32 sums of K products of int8 (or uint8
// weights offset by 128) with int8 cannot overflow.
const maxI8K = math.MaxInt32 / (255 * 128)

// qacts are quantized activations: int8 rows, per-row scales (dynamic)
// and per-row sums (for the unsigned-weight correction), plus the packed
// panels for the SIMD kernels.
type qacts struct {
	q      []int8
	scale  []float32
	sum    []int32
	packed []byte
}

var qactPool sync.Pool

func (a *qacts) release() { qactPool.Put(a) }

// quantizeActivations quantizes the rows of x [M, K] for p's scheme and,
// for the packed kernels, lays them out in panels, in parallel over rows.
func (be *Backend) quantizeActivations(p *qprep, s npu.QScheme, x []float32, M, K int) *qacts {
	a, _ := qactPool.Get().(*qacts)
	if a == nil {
		a = &qacts{}
	}
	a.q = grow(a.q, M*K)
	a.sum = grow(a.sum, M)
	a.scale = grow(a.scale, M)
	kern := p.kern
	if kern != i8Portable {
		a.packed = grow(a.packed, packedXBytes(kern, M, p.kpad))
		clear(a.packed)
	}
	be.parallelFor(M, max(1, 4096/max(K, 1)), func(lo, hi int) {
		for m := lo; m < hi; m++ {
			row, q := x[m*K:(m+1)*K], a.q[m*K:(m+1)*K]
			if s == npu.QW8A8Dynamic {
				a.scale[m] = quant.DynamicToken(q, row)
			} else {
				quant.StaticQuantize(q, row, p.recip, p.offset)
			}
			var sum int32
			for _, v := range q {
				sum += int32(v)
			}
			a.sum[m] = sum
			if kern != i8Portable {
				packXRow(kern, a.packed, q, m, p.kpad)
			}
		}
	})
	return a
}

// grow returns s resized to n elements (contents unspecified).
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n, n+n/4)
	}
	return s[:n]
}

// packedXBytes is the size of M rows packed for kern.
func packedXBytes(kern *i8Kernels, M, kpad int) int {
	n := (M + kern.mr - 1) / kern.mr * kern.mr * kpad
	if kern.wideX {
		n *= 2
	}
	return n
}

// packXRow writes quantized row m into the x panels of kern: panel m/mr
// holds, per group of kg k values, the kg values of each of its mr rows
// in turn ([kpad/kg][mr][kg], int8, or int16 for wideX kernels); the
// padding stays zero.
func packXRow(kern *i8Kernels, dst []byte, q []int8, m, kpad int) {
	mr, kg := kern.mr, kern.kg
	base := m / mr * mr * kpad // elements before this panel
	r := m % mr
	if !kern.wideX {
		for k0 := 0; k0 < len(q); k0 += kg {
			o := base + k0*mr + r*kg
			for i, v := range q[k0:min(k0+kg, len(q))] {
				dst[o+i] = byte(v)
			}
		}
		return
	}
	for k0 := 0; k0 < len(q); k0 += kg {
		o := 2 * (base + k0*mr + r*kg)
		for i, v := range q[k0:min(k0+kg, len(q))] {
			u := uint16(int16(v))
			dst[o+2*i] = byte(u)
			dst[o+2*i+1] = byte(u >> 8)
		}
	}
}

// epilogue turns int32 sums into outputs.
type epilogue struct {
	o         []float32
	N         int
	xscale    []float32 // dynamic: per row
	xsum      []int32   // per row sum of xq (unsigned-weight correction)
	wscale    []float32 // dynamic: per channel
	qbias     []int32   // static
	deq       []float32 // static
	unsignedW bool
}

// store writes out[m][n0:n0+len(acc)] from the sums acc of row m.
func (ep *epilogue) store(m, n0 int, acc []int32) {
	row := ep.o[m*ep.N+n0 : m*ep.N+n0+len(acc)]
	var corr int32
	if ep.unsignedW {
		corr = 128 * ep.xsum[m]
	}
	if ep.wscale != nil {
		xs := ep.xscale[m]
		ws := ep.wscale[n0 : n0+len(acc)]
		for j, a := range acc {
			row[j] = float32(a-corr) * xs * ws[j]
		}
		return
	}
	qb, dq := ep.qbias[n0:n0+len(acc)], ep.deq[n0:n0+len(acc)]
	for j, a := range acc {
		row[j] = float32(a-corr+qb[j]) * dq[j]
	}
}

// i8gemmGo is the portable int8 GEMM over the checkpoint layout w [N, K].
func (be *Backend) i8gemmGo(w []byte, xq []int8, M, N, K int, ep *epilogue) {
	grain := max(1, (1<<15)/max(1, K*M))
	be.parallelChunks(N, grain, func(lo, hi int) {
		acc := make([]int32, 1)
		for n := lo; n < hi; n++ {
			wr := w[n*K : (n+1)*K]
			for m := range M {
				acc[0] = dotI8(xq[m*K:(m+1)*K], wr)
				ep.store(m, n, acc)
			}
		}
	})
}

// dotI8 is the int32 dot product of int8 x with int8 bytes w.
func dotI8(x []int8, w []byte) int32 {
	w = w[:len(x)]
	var s0, s1, s2, s3 int32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += int32(x[i]) * int32(int8(w[i]))
		s1 += int32(x[i+1]) * int32(int8(w[i+1]))
		s2 += int32(x[i+2]) * int32(int8(w[i+2]))
		s3 += int32(x[i+3]) * int32(int8(w[i+3]))
	}
	for ; i < len(x); i++ {
		s0 += int32(x[i]) * int32(int8(w[i]))
	}
	return s0 + s1 + s2 + s3
}

// i8KC is the K block of the packed GEMM in k values: a weight panel
// block of nr*i8KC bytes (32 KiB for nr = 64) stays in L1 while every x
// panel of the block streams past it.
const i8KC = 512

// i8gemm is the packed int8 GEMM: panels of nr channels are split over
// threads (or, when there are few, the row panels are), each computing
// its int32 tile column block by K blocks before the epilogue.
func (be *Backend) i8gemm(k *i8Kernels, xp, wp []byte, M, N, kpad int, ep *epilogue) {
	mr, nr, kg := k.mr, k.nr, k.kg
	steps := kpad / kg
	kcs := max(1, i8KC/kg)
	mPanels := (M + mr - 1) / mr
	nPanels := (N + nr - 1) / nr
	xes := 1
	if k.wideX {
		xes = 2
	}
	xPanel := steps * mr * kg * xes // bytes per x panel
	wPanel := steps * nr * kg       // bytes per w panel
	mGroups := 1
	if nPanels < 2*be.threads {
		mGroups = min(mPanels, be.threads)
	}
	mPer := (mPanels + mGroups - 1) / mGroups
	items := nPanels * mGroups
	be.parallelChunks(items, 1, func(lo, hi int) {
		tile := getI32(mPer * mr * nr)
		defer putI32(tile)
		for it := lo; it < hi; it++ {
			np, g := it/mGroups, it%mGroups
			mp0, mp1 := g*mPer, min((g+1)*mPer, mPanels)
			wpan := wp[np*wPanel : (np+1)*wPanel]
			for s0 := 0; s0 < steps; s0 += kcs {
				sn := min(kcs, steps-s0)
				for mp := mp0; mp < mp1; mp++ {
					xo := mp*xPanel + s0*mr*kg*xes
					k.kernel(sn, xp[xo:xo+sn*mr*kg*xes], wpan[s0*nr*kg:(s0+sn)*nr*kg], tile[(mp-mp0)*mr*nr:], nr, s0 > 0)
				}
			}
			n0 := np * nr
			nv := min(nr, N-n0)
			for mp := mp0; mp < mp1; mp++ {
				for i := range min(mr, M-mp*mr) {
					t := tile[((mp-mp0)*mr+i)*nr:]
					ep.store(mp*mr+i, n0, t[:nv])
				}
			}
		}
	})
}

var i32Pool sync.Pool

func getI32(n int) []int32 {
	if p, ok := i32Pool.Get().(*[]int32); ok && cap(*p) >= n {
		return (*p)[:n]
	}
	return make([]int32, n)
}

func putI32(s []int32) { i32Pool.Put(&s) }

// mxChunkBytes is the float32 expansion of MXFP8 weight rows one step
// multiplies: enough rows that the activations' packing is amortised
// (larger for larger M), few enough to stay near the caches.
func mxChunkBytes(M int) int { return min(max(512<<10, M*(64<<10)), 32<<20) }

// mxfp8 computes out = MX(x) · MX(w_e)^T: activations MX-quantized per
// block (exactly representable in float32), weights expanded to float32 a
// chunk of rows at a time, products on the float32 MatMul kernels (see
// fp8GEMM).
func (be *Backend) mxfp8(p *qprep, e int, w *npu.QuantWeight, o, xv []float32, M int) {
	N, K, G := p.N, p.K, w.GroupSize
	alg := quant.ScaleAlg(w.ScaleAlg)
	raw := p.raw[e*N*K : (e+1)*N*K]
	scales := p.mxScale[e*N*p.nb : (e+1)*N*p.nb]
	simd := hasE4M3Decode && activeKernels != &goKernels
	be.fp8GEMM(p, o, xv, M,
		func(row []float32) { quant.MXFakeQuant(row, G, alg) },
		func(dst []float32, n int, mul []float32) []float32 {
			return decodeMXRow(dst, raw[n*K:(n+1)*K], scales[n*p.nb:(n+1)*p.nb], G, simd, mul)
		})
}

// fp8block computes out = Q(x) · W_e^T for FP8_BLOCK128: activations
// fake-quantized per token per 128 columns (E4M3 times an F32 scale,
// exactly representable in float32), weight rows expanded with their
// block's F32 scales, products on the float32 MatMul kernels (see
// fp8GEMM). Up to float32 summation order this is
// sum_kb xs[m,kb] * ws[n/128,kb] * dot_e4m3(x block, w block).
func (be *Backend) fp8block(p *qprep, e int, o, xv []float32, M int) {
	N, K, B := p.N, p.K, npu.FP8Block
	nbN := (N + B - 1) / B
	raw := p.raw[e*N*K : (e+1)*N*K]
	scales := p.blkScale[e*nbN*p.nb : (e+1)*nbN*p.nb]
	simd := hasE4M3Decode && activeKernels != &goKernels
	be.fp8GEMM(p, o, xv, M,
		func(row []float32) { quant.FP8ActFakeQuant(row, B) },
		func(dst []float32, n int, mul []float32) []float32 {
			return decodeBlockRow(dst, raw[n*K:(n+1)*K], scales[(n/B)*p.nb:(n/B+1)*p.nb], simd, mul)
		})
}

// fp8GEMM computes o = x' · W^T with x' the rows of x fake-quantized by
// actQ and W's rows expanded to float32 by decode (row n into dst; mul is
// scratch it returns for reuse), a chunk of rows at a time, on the
// float32 MatMul kernels. With enough chunks each thread expands and
// multiplies its own (while they are in its cache); otherwise the chunks
// go one by one through the multi-threaded MatMul.
func (be *Backend) fp8GEMM(p *qprep, o, xv []float32, M int, actQ func(row []float32), decode func(dst []float32, n int, mul []float32) []float32) {
	N, K := p.N, p.K
	xt, xbuf := scratchF32(M, K)
	defer mxPool.Put(xbuf)
	xs := F32(xt)
	copy(xs, xv[:M*K])
	be.parallelFor(M, 1, func(lo, hi int) {
		for m := lo; m < hi; m++ {
			actQ(xs[m*K : (m+1)*K])
		}
	})
	rows := min(N, max(1, mxChunkBytes(M)/(4*K)))
	chunks := (N + rows - 1) / rows
	step := func(mm *Backend, wt, ot *npu.Tensor, n0 int) {
		nc := min(rows, N-n0)
		wc := wt.Rows(0, nc)
		ws := F32(wc)
		mm.parallelFor(nc, 4, func(lo, hi int) {
			var mul []float32
			for r := lo; r < hi; r++ {
				mul = decode(ws[r*K:(r+1)*K], n0+r, mul)
			}
		})
		oc := ot.Rows(0, M*nc).Reshape(M, nc)
		mm.MatMul(oc, xt, wc)
		os := F32(oc)
		for m := range M {
			copy(o[m*N+n0:m*N+n0+nc], os[m*nc:(m+1)*nc])
		}
	}
	if chunks >= be.threads {
		be.parallelChunks(chunks, 1, func(lo, hi int) {
			wt, wb := scratchF32(rows, K)
			ot, ob := scratchF32(M * rows)
			defer mxPool.Put(wb)
			defer mxPool.Put(ob)
			one := New(1)
			for c := lo; c < hi; c++ {
				step(one, wt, ot, c*rows)
			}
		})
		return
	}
	wt, wb := scratchF32(rows, K)
	ot, ob := scratchF32(M * rows)
	defer mxPool.Put(wb)
	defer mxPool.Put(ob)
	for c := range chunks {
		step(be, wt, ot, c*rows)
	}
}

// mxPool recycles the MXFP8 path's float32 scratch buffers.
var mxPool sync.Pool

// scratchF32 returns an F32 tensor of the given shape over a recycled
// buffer (contents unspecified) and the buffer, to put back in mxPool.
func scratchF32(shape ...int) (*npu.Tensor, *buffer) {
	n := 4
	for _, d := range shape {
		n *= d
	}
	b, _ := mxPool.Get().(*buffer)
	if b == nil || cap(b.data) < n {
		b = &buffer{data: allocBytes(n)}
	}
	b.data = b.data[:n]
	return npu.NewTensor(b, 0, npu.F32, shape...), b
}

// decodeMXRow expands one MXFP8 row: dst[i] = E4M3(q[i]) * 2^(s-127)
// with s the E8M0 scale of i's block of group. Whole 32-element blocks go
// through the SIMD expansion when simd is set (and the scale leaves room
// for its 2^8 factor); mul is scratch, returned for reuse.
func decodeMXRow(dst []float32, q, scales []byte, group int, simd bool, mul []float32) []float32 {
	K := len(dst)
	full := K / 32
	if simd && full > 0 {
		mul = grow(mul, full)
		ok := true
		for b := range full {
			s := scales[b*32/group]
			if s >= 247 { // 2^(s-127+8) would overflow float32
				ok = false
				break
			}
			mul[b] = math.Float32frombits(uint32(s+8) << 23)
		}
		if ok {
			e4m3DecodeSIMD(dst, q, mul[:full])
			for i := full * 32; i < K; i++ {
				dst[i] = npu.E4M3ToF32(q[i]) * e8m0(scales[i/group])
			}
			return mul
		}
	}
	for b, s := range scales {
		sc := e8m0(s)
		lo := b * group
		for i := lo; i < min(lo+group, K); i++ {
			dst[i] = npu.E4M3ToF32(q[i]) * sc
		}
	}
	return mul
}

// decodeBlockRow expands one FP8_BLOCK128 weight row:
// dst[i] = E4M3(q[i]) * scales[i/128]. Whole 32-element blocks go through
// the SIMD expansion when simd is set (and 2^8 times every scale is
// finite); mul is scratch, returned for reuse.
func decodeBlockRow(dst []float32, q []byte, scales []float32, simd bool, mul []float32) []float32 {
	K := len(dst)
	full := K / 32
	if simd && full > 0 {
		mul = grow(mul, full)
		ok := true
		for b := range full {
			m := scales[b*32/npu.FP8Block] * 256
			if math.IsInf(float64(m), 0) || m != m {
				ok = false
				break
			}
			mul[b] = m
		}
		if ok {
			e4m3DecodeSIMD(dst, q, mul[:full])
			for i := full * 32; i < K; i++ {
				dst[i] = npu.E4M3ToF32(q[i]) * scales[i/npu.FP8Block]
			}
			return mul
		}
	}
	for i := range K {
		dst[i] = npu.E4M3ToF32(q[i]) * scales[i/npu.FP8Block]
	}
	return mul
}

// e8m0 decodes an E8M0 scale byte (2^(s-127); NaN for 0xff).
func e8m0(s byte) float32 {
	switch s {
	case 0:
		return math.Float32frombits(0x00400000) // 2^-127, subnormal
	case 0xff:
		return float32(math.NaN())
	}
	return math.Float32frombits(uint32(s) << 23)
}
