package cuda

import (
	"fmt"
	"math"

	"github.com/npuserve/npuserve/npu"
)

// Quantized matmuls (kernels/quant.cu; npu/cpu/qmatmul.go is the
// reference), with the CPU backend's arithmetic:
//
//   - W8A8_DYNAMIC: activations quantized per row (scale max|x|/127,
//     rint half to even), int8 x int8 products summed exactly in int32 by
//     __dp4a, out = float(acc) * xscale[m] * wscale[n], rounded in that
//     order. Equal to the CPU's results bit for bit.
//   - W8A8 (static): q = rint(clamp(x*recip + offset)) with the product
//     rounded first, out = float(acc + quant_bias[n]) * deq_scale[n].
//     Bit for bit too.
//   - W8A8_MXFP8: Hopper has no block-32 scaled MMA, so MXFP8 is
//     emulated: activations are MX-quantized per block and dequantized to
//     fp32 (exact), the E4M3 weights decoded with their E8M0 block scales
//     to fp32 (exact) as the GEMM loads them, and multiplied with fp32
//     FMAs. Equal to the CPU's results up to fp32 summation order.
//   - FP8_BLOCK128: emulated the same way (fp8.go, kernels/fp8.cu):
//     activations quantized per row per 128 columns to E4M3 with scale
//     max(amax/448, 1e-12) and dequantized to fp32 (bit for bit the
//     CPU's), the E4M3 weights decoded with their F32 128x128 block
//     scales, fp32 FMAs. Equal to the CPU's results up to fp32
//     summation order.
//
// The tiled int8 GEMM runs on the tensor cores (IMMA: mma.sync m16n8k32
// s8, k_gemm_i8_tc); for few rows a warp-per-column __dp4a kernel reads
// the weights once. Both sum exactly in int32.

// Epilogue modes of k_gemm_i8_tc and k_gemv_i8 (Q_DYN, Q_STATIC).
const (
	qDyn    = 0
	qStatic = 1
)

// maxI8K bounds K so that int32 sums of K int8 products cannot overflow
// (the CPU backend's bound).
const maxI8K = math.MaxInt32 / (255 * 128)

// qdev is the CUDA compute form of a quantized weight (QuantWeight's
// prepared value).
type qdev struct {
	scheme  npu.QScheme
	E, N, K int
	kp      int    // int8 row length: K rounded up to 16, zero padded
	w       uint64 // int8 [E, N, kp] or E4M3 [E, N, K]
	own     *buffer
	scale   uint64 // W8A8_DYNAMIC: F32 [E, N]; MXFP8: U8 [E, N, nb]; FP8_BLOCK128: F32 [E, ceil(N/128), ceil(K/128)]
	qbias   uint64 // static: I32 [N]
	deq     uint64 // static: F32 [N]
	recip   float32
	offset  float32
	group   int
	alg     int
}

// PrepareQuant converts w into the CUDA compute form: int8 weights whose
// rows are not a multiple of 16 bytes (or not 16-byte aligned) are copied
// once into zero-padded rows (device memory kept for the weight's life:
// weights are loaded once); otherwise, and for MXFP8 and FP8_BLOCK128, the checkpoint
// tensors are used in place. It only enqueues work. See
// npu.Ops.PrepareQuant.
func (b *Backend) PrepareQuant(w *npu.QuantWeight) { b.qprepared(w) }

// qprepared returns w's compute form, making it on first use.
func (b *Backend) qprepared(w *npu.QuantWeight) *qdev {
	p, ok := w.PrepareOnce(func() any {
		if err := w.Check(); err != nil {
			panic("cuda: " + err.Error())
		}
		return b.prepareQuant(w)
	}).(*qdev)
	if !ok {
		panic(fmt.Sprintf("cuda: quantized weight %v was prepared by another backend", w))
	}
	return p
}

var _ npu.QuantSupporter = (*Backend)(nil)

// SupportsQuant implements npu.QuantSupporter: the int8 schemes,
// W8A8_MXFP8 and FP8_BLOCK128 run (the FP8 ones emulated on fp32 FMAs).
func (b *Backend) SupportsQuant(s npu.QScheme) error {
	switch s {
	case npu.QW8A8Dynamic, npu.QW8A8, npu.QMXFP8, npu.QFP8Block:
		return nil
	}
	return fmt.Errorf("cuda: unknown quantization scheme %v", s)
}

func (b *Backend) prepareQuant(w *npu.QuantWeight) *qdev {
	if err := b.SupportsQuant(w.Scheme); err != nil {
		panic(fmt.Sprintf("cuda: quantized weight %v: %v", w, err))
	}
	E := max(w.Experts(), 1)
	p := &qdev{scheme: w.Scheme, E: E, N: w.N(), K: w.K(), kp: (w.K() + 15) / 16 * 16, w: b.ptr(w.Weight)}
	switch w.Scheme {
	case npu.QMXFP8:
		p.scale = b.ptr(w.Scale)
		p.group, p.alg = w.GroupSize, w.ScaleAlg
		return p
	case npu.QFP8Block:
		p.scale = b.ptr(w.Scale)
		return p
	case npu.QW8A8Dynamic:
		p.scale = b.ptr(w.Scale)
	case npu.QW8A8:
		p.qbias, p.deq = b.ptr(w.QuantBias), b.ptr(w.DeqScale)
		p.recip = 1 / w.InputScale
		p.offset = float32(w.InputOffset)
	}
	if p.K > maxI8K {
		panic(fmt.Sprintf("cuda: quantized weight %v: K = %d exceeds %d (int32 accumulation)", w, p.K, maxI8K))
	}
	if p.kp != p.K || p.w%16 != 0 {
		if b.capturing {
			// The padded copy would be graph memory, freed with no graph.
			b.fail(errCapture(fmt.Sprintf("preparing quantized weight %v (prepare it before capturing)", w)))
		}
		rows := E * p.N
		p.own = b.temp(rows * p.kp)
		b.launch("k_pad_i8", b.gridFor(int64(rows*p.kp), elemThreads), d1(elemThreads), 0,
			p.own.ptr, p.w, pI64(rows), pI32(p.K), pI32(p.kp))
		p.w = p.own.ptr
	}
	return p
}

// qacts is scratch for quantized activations of M rows.
type qacts struct {
	buf   *buffer
	q     uint64 // int8 [M, kp], or F32 [M, K] MX- or FP8-block-dequantized
	scale uint64 // F32 [M] (dynamic)
}

// quantizeActs enqueues the quantization of x [M, K] (fp32 rows at px)
// for p's scheme: int8 rows of kp with per-row scales (dynamic), int8
// rows (static), or fp32 round trips (MXFP8, FP8_BLOCK128).
func (b *Backend) quantizeActs(p *qdev, px uint64, M int) qacts {
	K := p.K
	switch p.scheme {
	case npu.QFP8Block:
		buf := b.temp(4 * M * K)
		b.fp8Fake(buf.ptr, px, M, K)
		return qacts{buf: buf, q: buf.ptr}
	case npu.QMXFP8:
		buf := b.temp(4 * M * K)
		b.mxFake(buf.ptr, px, M, K, p.group, p.alg)
		return qacts{buf: buf, q: buf.ptr}
	case npu.QW8A8Dynamic:
		qb := (M*p.kp + 15) &^ 15
		buf := b.temp(qb + 4*M)
		b.launch("k_quant_dyn", d1(M), d1(rowThreads(K)), 0, buf.ptr, buf.ptr+uint64(qb), px, pI32(K), pI32(p.kp))
		return qacts{buf: buf, q: buf.ptr, scale: buf.ptr + uint64(qb)}
	default:
		buf := b.temp(M * p.kp)
		b.launch("k_quant_static", b.gridFor(int64(M*p.kp), elemThreads), d1(elemThreads), 0,
			buf.ptr, px, pI64(M), pI32(K), pI32(p.kp), pF32(p.recip), pF32(p.offset))
		return qacts{buf: buf, q: buf.ptr}
	}
}

// mxFake enqueues k_mx_fake over x [M, K] into o (o may be x).
func (b *Backend) mxFake(o, x uint64, M, K, group, alg int) {
	blocks := M * ((K + group - 1) / group)
	b.launch("k_mx_fake", b.gridFor(int64(blocks)*32, 256), d1(256), 0, o, x, pI64(M), pI32(K), pI32(group), pI32(alg))
}

// gemmQ enqueues out = x · w_e^T for p's scheme from quantized
// activations a (rows read through tok when tok != 0), grouped over rt
// or dense over M rows when rt is nil.
func (b *Backend) gemmQ(p *qdev, c uint64, a qacts, tok uint64, rt *moeRoute, M int) {
	if p.scheme == npu.QMXFP8 {
		b.gemmF(c, a.q, tok, p.w, dtypeCode(npu.F8E4M3), p.scale, p.group, rt, M, p.N, p.K)
		return
	}
	if p.scheme == npu.QFP8Block {
		b.gemmFP8(c, a.q, tok, p, rt, M)
		return
	}
	mode := qStatic
	if p.scheme == npu.QW8A8Dynamic {
		mode = qDyn
	}
	ws := uint64(0)
	if mode == qDyn {
		ws = p.scale
	}
	var off, tiles, ntiles uint64
	small, ys, ysSmall := M <= moeSmallRows, (M+moeBM-1)/moeBM, (M+moeBM-1)/moeBM
	if rt != nil {
		off, tiles, ntiles = rt.off, rt.tiles, rt.ntiles
		small, ys, ysSmall = rt.small, rt.maxTiles, min(rt.maxTiles, rt.n) // every tile holds a row
	}
	if small {
		b.launch("k_gemv_i8", d2((p.N+7)/8, ysSmall), d1(256), 0,
			c, a.q, tok, p.w, pI32(mode), a.scale, ws, p.qbias, p.deq, tiles, ntiles, off, pI32(M), pI32(p.N), pI32(p.kp))
		return
	}
	b.launch("k_gemm_i8_tc", d2((p.N+moeBN-1)/moeBN, ys), d1(256), 0,
		c, a.q, tok, p.w, pI32(mode), a.scale, ws, p.qbias, p.deq, tiles, ntiles, off, pI32(M), pI32(p.N), pI32(p.kp))
}

// MatMulQ computes out[M,N] = x[M,K] · w^T for a quantized linear w [N,K]
// with w.Scheme's arithmetic (see the top of the file and
// npu.Ops.MatMulQ).
func (b *Backend) MatMulQ(out, x *npu.Tensor, w *npu.QuantWeight) {
	if w.Experts() != 0 {
		panic(fmt.Sprintf("cuda: MatMulQ with a grouped weight %v (use MoEQ)", w))
	}
	if w.Prepared() == nil {
		if err := w.Check(); err != nil {
			panic("cuda: " + err.Error())
		}
	}
	K, N := w.K(), w.N()
	if x.DType() != npu.F32 || x.Rank() == 0 || x.Dim(-1) != K || out.DType() != npu.F32 {
		panic(fmt.Sprintf("cuda: MatMulQ x %v, w %v, out %v", x, w, out))
	}
	M := x.Numel() / max(K, 1)
	if out.Numel() != M*N || (out.Rank() > 0 && out.Dim(-1) != N) {
		panic(fmt.Sprintf("cuda: MatMulQ out %v, want [%d,%d] for x %v, w %v", out, M, N, x, w))
	}
	p := b.qprepared(w)
	if M == 0 || N == 0 {
		return
	}
	if K == 0 {
		b.Fill(out, 0)
		return
	}
	px, po := b.ptr(x), b.ptr(out)
	if p.scheme == npu.QFP8Block {
		// The tensor-core path takes the rows it can (a multiple of 4);
		// the emulated kernels the rest.
		done := b.fp8TensorCore(po, px, p, M)
		px, po, M = px+uint64(4*done*K), po+uint64(4*done*N), M-done
		if M == 0 {
			return
		}
	}
	a := b.quantizeActs(p, px, M)
	b.gemmQ(p, po, a, 0, nil, M)
	b.freeBuf(a.buf)
}

// MoEQ is MoE with quantized experts gateUp [E, 2I, D] and down [E, D, I]
// (each W8A8_DYNAMIC, W8A8_MXFP8 or FP8_BLOCK128): each chunk's tokens are quantized
// once for the gate/up GEMM (read per row through the routing), the
// SwiGLU rows again for the down GEMM, as the CPU backend quantizes the
// gathered rows (the same per-row arithmetic). See npu.Ops.MoEQ.
func (b *Backend) MoEQ(out, x *npu.Tensor, gateUp, down *npu.QuantWeight, weights, ids *npu.Tensor, limit float32) {
	if x.Rank() != 2 || gateUp.Experts() == 0 || down.Experts() != gateUp.Experts() {
		panic(fmt.Sprintf("cuda: MoEQ x %v gateUp %v down %v", x, gateUp, down))
	}
	D := x.Dim(1)
	E, I := gateUp.Experts(), gateUp.N()/2
	if gateUp.N() != 2*I || gateUp.K() != D || down.N() != D || down.K() != I {
		panic(fmt.Sprintf("cuda: MoEQ gateUp %v down %v for x %v", gateUp, down, x))
	}
	for _, w := range []*npu.QuantWeight{gateUp, down} {
		if w.Scheme != npu.QW8A8Dynamic && w.Scheme != npu.QMXFP8 && w.Scheme != npu.QFP8Block {
			panic(fmt.Sprintf("cuda: MoEQ expert weights %v: want W8A8_DYNAMIC, W8A8_MXFP8 or FP8_BLOCK128", w))
		}
	}
	_, _, k := moeArgs("MoEQ", out, x, weights, ids, E)
	if k == 0 {
		return
	}
	pg, pd := b.qprepared(gateUp), b.qprepared(down)
	b.moeRun(opMoEQ, out, x, weights, ids, k, E, I, limit, moeProj{
		up: func(rt *moeRoute, xc uint64, tc int, gu uint64) {
			a := b.quantizeActs(pg, xc, tc)
			b.gemmQ(pg, gu, a, rt.tok, rt, rt.n)
			b.freeBuf(a.buf)
		},
		down: func(rt *moeRoute, h, y uint64, _ bool) {
			if pd.scheme == npu.QMXFP8 {
				b.mxFake(h, h, rt.n, I, pd.group, pd.alg) // in place
				b.gemmF(y, h, 0, pd.w, dtypeCode(npu.F8E4M3), pd.scale, pd.group, rt, rt.n, D, I)
				return
			}
			if pd.scheme == npu.QFP8Block {
				b.fp8Fake(h, h, rt.n, I) // in place
				b.gemmFP8(y, h, 0, pd, rt, rt.n)
				return
			}
			a := b.quantizeActs(pd, h, rt.n)
			b.gemmQ(pd, y, a, 0, rt, rt.n)
			b.freeBuf(a.buf)
		},
	})
}
