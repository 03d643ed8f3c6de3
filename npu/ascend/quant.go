//go:build cgo

package ascend

/*
#include <stdlib.h>
#include "shim.h"
#include "quantshim.h"
*/
import "C"

import (
	"fmt"
	"math"
	"math/bits"
	"sync"
	"unsafe"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/ascend/acl"
)

// Quantized matmuls (npu.Ops.PrepareQuant, MatMulQ, MoEQ), the paths
// vllm-ascend's W8A8_DYNAMIC, W8A8 and W8A8_MXFP8 methods take
// (ascend-api.md §3 "NZ weights", §4.2, §4.3):
//
//	W8A8_DYNAMIC: per-token int8 quantization of x in float32 from
//	  stock operators (rowQuant: aclnnAbs, aclnnAmax, aclnnClamp,
//	  aclnnDivs, aclnnDiv, aclnnRound, aclnnCast; scale max|x|/127, F32)
//	  → aclnnQuantMatmulWeightNz(int8 x, int8 NZ weight, x1Scale =
//	  per-token F32 [m], x2Scale = per-channel F32 [n]) into F16 →
//	  aclnnCast to F32.
//	W8A8 (static): aclnnAscendQuantV3(x F32, scale = 1/input_scale,
//	  offset = input_offset, "round", INT8) → aclnnQuantMatmulWeightNz with
//	  the int32 quant_bias as bias, x2Scale = deq_scale (F32 [n]) and a
//	  per-token scale of ones (the documented K-C && K-T combination; the
//	  T-C form op-plugin uses packs deq_scale with aclnnTransQuantParamV2
//	  into a UINT64 "quant param" whose encoding ascend-api.md does not
//	  give) into F16 → aclnnCast to F32.
//	W8A8_MXFP8 (950 only): aclnnDynamicMxQuant(x F32, axis -1, "rint",
//	  E4M3FN, block 32, ScaleAlg) → aclnnQuantMatmulV5(E4M3 x, E4M3
//	  weight ND [k, n], E8M0 scales (m, ceil(k/64), 2) and
//	  (ceil(k/64), n, 2), groupSize 4295032864 = [1,1,32]) into F32.
//
// Why F16 out: on A2/A3 the int8 quant matmul writes FP16 or BF16, not
// FP32 (ascend-api.md §4.2). F16 (11-bit significand) stays within the
// conformance tolerance of the fp32 CPU reference where BF16 (8 bits)
// does not (measured on the stand-in, max rel err over 6 seeds: MatMulQ
// W8A8_DYNAMIC 9x40x77 4.8e-4 with F16, 3.7e-3 with BF16); the price is
// F16's range: an output beyond ±65504 overflows. Through MoEQ the F16
// gate/up output is quantized again (the down projection's activations),
// and a value that F16 moves across an int8 rounding boundary changes the
// result by one quantization step: 1.6e-2 on the conformance case (seed
// 7; 1.3e-3 to 4.0e-3 on seeds 1-5; 3.2e-4 with an F32 intermediate,
// which A2/A3 do not offer). The int32-out grouped matmul + fused
// aclnnDequantSwigluQuant path vllm-ascend takes (§4.4) would avoid it.
// The activations are quantized in F32, not by aclnnDynamicQuant: that
// takes only FP16/BF16 x, and the F16 copy moved the row maxima and the
// int8 rounding (1.0e-2 on MatMulQ 9x40x77).
//
// PrepareQuant does what vllm-ascend's process_weights_after_loading
// does: int8 linear weights are transposed to [k, n] and cast to
// FRACTAL_NZ with aclnnNpuFormatCastCalculateSizeAndFormat +
// aclnnNpuFormatCast; NZ is not allowed for n == 1 or k == 1
// (ascend-api.md §3), so those stay ND for aclnnQuantMatmulV5. Stacked
// int8 expert weights are transposed to one ND [E, k, n] stack, the
// weight aclnnGroupedMatmulV4 takes (moe.go; vllm-ascend casts them to NZ
// for aclnnGroupedMatmulWeightNz, which is not built here). MXFP8
// weights are transposed to [k, n] ND, and their E8M0 scales [n, k/32]
// padded to an even count and laid out (k/64, n, 2). Static W8A8's
// activation scale and offset become one-element F32 device tensors.
// The prepared buffers are device memory held for the life of the
// process (QuantWeight has no release; model weights live that long).
//
// The signatures and NZ shapes are from ascend-api.md; the FRACTAL_NZ
// element order (and every arithmetic rule) is what the stand-in
// implements from the same documents. Only a real NPU can confirm them.

// qprep is a QuantWeight's Ascend compute form.
type qprep struct {
	scheme  npu.QScheme
	E, N, K int
	nz      bool        // weights in FRACTAL_NZ (else ND [E, K, N])
	w       *npu.Tensor // prepared weights: NZ bytes per expert, or ND [E, K, N]
	nzShape []int       // storage shape of one expert's NZ weight
	nzFmt   C.int       // its actual format
	nzBytes int         // bytes of one expert's NZ weight (32-byte multiple)
	scale   *npu.Tensor // dynamic: the checkpoint's F32 [E, N] scales
	mxScale *npu.Tensor // MX: U8 [E, nbe/2, N, 2] E8M0 scales
	nbe     int         // MX blocks per row, padded to even
	alg     int         // MX activation ScaleAlg
	qbias   *npu.Tensor // static: I32 [N]
	deq     *npu.Tensor // static: F32 [N]
	recip   *npu.Tensor // static: F32 [1], 1/InputScale
	offset  *npu.Tensor // static: F32 [1], InputOffset
}

// aclDataType values beyond aclDType's (acl_base.h).
const (
	aclInt8    = 2
	aclUint8   = 4
	aclF8E4M3  = 36
	aclF8E8M0  = 37
	aclFmtND   = 2
	aclFmtNZ   = 29
	mxGroupMNK = 4295032864 // groupSize [1,1,32]: K 32 | N 1<<16 | M 1<<32
)

var qOnce sync.Once

// qLoad resolves the quantized operators in the loaded libraries.
func qLoad() {
	qOnce.Do(func() {
		l, _ := load()
		cs := make([]*C.char, max(len(l.OpAPI), 1))
		for i, p := range l.OpAPI {
			cs[i] = C.CString(p)
			defer C.free(unsafe.Pointer(cs[i]))
		}
		C.npu_q_load(&cs[0], C.int(len(l.OpAPI)))
	})
}

// qtensor describes t's bytes as acl dtype dt, ND, viewed with shape and
// element strides (nil: contiguous) from element off of t.
func (c *call) qtensor(t *npu.Tensor, dt C.int, off int, shape, strides []int) C.uintptr_t {
	buf := c.b.dbuf(t)
	es := t.DType().Size()
	if t.DType() == npu.F8E4M3 || t.DType() == npu.U8 || t.DType() == npu.I8 {
		es = 1
	}
	return c.raw(buf.ptr, dt, aclFmtND, C.int64_t(t.Offset()/es+off), shape, strides, []int{buf.n / es})
}

// nzTensor describes one expert's NZ weight: view [K, N], storage p.nzShape.
func (c *call) nzTensor(p *qprep, e int) C.uintptr_t {
	buf := c.b.dbuf(p.w)
	return c.raw(buf.ptr+uintptr(e*p.nzBytes), aclInt8, p.nzFmt, 0, []int{p.K, p.N}, nil, p.nzShape)
}

// raw is aclCreateTensor over device address data.
func (c *call) raw(data uintptr, dt, format C.int, off C.int64_t, shape, strides, storage []int) C.uintptr_t {
	i64 := func(v []int) []C.int64_t {
		out := make([]C.int64_t, max(len(v), 1))
		for i, x := range v {
			out[i] = C.int64_t(x)
		}
		return out
	}
	dims, st := i64(shape), i64(storage)
	var sp *C.int64_t
	if strides != nil {
		sp = &i64(strides)[0]
	}
	h := C.npu_tensor_fmt(&dims[0], C.uint64_t(len(shape)), dt, sp, off, format, &st[0], C.uint64_t(len(storage)), C.uintptr_t(data))
	if h == 0 {
		panic(fmt.Sprintf("ascend: aclCreateTensor %v dtype %d format %d: %s", shape, int(dt), int(format), acl.RecentErrMsg()))
	}
	c.tensors = append(c.tensors, h)
	return h
}

// qlaunch builds and enqueues one quantized operator (device thread); a
// failure, an operator missing from this CANN included, is held for Sync.
func (b *Backend) qlaunch(op C.int, build func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int) {
	qLoad()
	c := &call{b: b}
	defer func() {
		for _, t := range c.tensors {
			C.npu_destroy_tensor(t)
		}
	}()
	name := C.GoString(C.npu_q_name(op))
	var ws C.uint64_t
	var ex C.uintptr_t
	rc := build(c, &ws, &ex)
	b.enqueue(name, rc, ws, ex, func(wsp C.uintptr_t) C.int { return C.npu_q_run(op, wsp, ws, ex, C.uintptr_t(b.stream)) })
}

// persist allocates device memory kept for the life of the process
// (prepared weights), zero-filled on the stream (device thread).
func (b *Backend) persist(dt npu.DType, shape ...int) *npu.Tensor {
	n, _ := npu.ShapeBytes(dt, shape...)
	p, err := b.malloc(max(int(n), 1))
	if err == nil {
		err = acl.MemsetAsync(p, max(int(n), 1), 0, max(int(n), 1), b.stream)
	}
	if err != nil {
		panic(fmt.Sprintf("ascend: PrepareQuant: %v %v: %v", dt, shape, err))
	}
	return npu.NewTensor(&buffer{ptr: p, n: int(n), be: b}, 0, dt, shape...)
}

// PrepareQuant converts w to the compute form described above, once; the
// ops prepare on first use otherwise. See npu.Ops.PrepareQuant.
func (b *Backend) PrepareQuant(w *npu.QuantWeight) { b.qprepared(w) }

func (b *Backend) qprepared(w *npu.QuantWeight) *qprep {
	return w.PrepareOnce(func() any {
		if err := w.Check(); err != nil {
			panic("ascend: " + err.Error())
		}
		b.dbuf(w.Weight)
		var p *qprep
		b.do(func() { p = b.prepare(w) })
		return p
	}).(*qprep)
}

// prepare builds w's compute form (device thread).
func (b *Backend) prepare(w *npu.QuantWeight) *qprep {
	E, N, K := max(w.Experts(), 1), w.N(), w.K()
	p := &qprep{scheme: w.Scheme, E: E, N: N, K: K}
	switch w.Scheme {
	case npu.QW8A8Dynamic:
		p.scale = w.Scale
	case npu.QW8A8:
		p.qbias, p.deq = w.QuantBias, w.DeqScale
		p.recip, p.offset = b.persist(npu.F32, 1), b.persist(npu.F32, 1)
		b.fillOne(p.recip, 1/w.InputScale)
		b.fillOne(p.offset, float32(w.InputOffset))
	case npu.QMXFP8:
		if w.GroupSize != 32 {
			panic(fmt.Sprintf("ascend: W8A8_MXFP8 weight %v: group size %d; aclnnQuantMatmulV5's MX mode is [1,1,32]", w, w.GroupSize))
		}
		nb := (K + 31) / 32
		p.alg = w.ScaleAlg
		p.nbe = (nb + 1) / 2 * 2
		p.mxScale = b.persist(npu.U8, E, p.nbe/2, N, 2)
		for e := range E {
			b.mxScaleLayout(p, w.Scale, e, nb)
		}
	default:
		panic(fmt.Sprintf("ascend: quantized weight %v: %v", w, quantSupport(w.Scheme, b.SocName())))
	}
	// Expert stacks stay ND [E, K, N]: the grouped matmul MoEQ uses
	// (aclnnGroupedMatmulV4) takes one 3-D ND weight; its FRACTAL_NZ form
	// (aclnnGroupedMatmulWeightNz) is not built.
	p.nz = w.Scheme != npu.QMXFP8 && N > 1 && K > 1 && w.Experts() == 0
	src := aclInt8
	if w.Scheme == npu.QMXFP8 {
		src = aclUint8 // E4M3 bytes, moved as bytes
	}
	if !p.nz {
		p.w = b.persist(w.Weight.DType(), E, K, N)
		for e := range E {
			b.qlaunchCopy(p.w, e*K*N, []int{K, N}, nil, w.Weight, e*N*K, []int{1, K}, C.int(src))
		}
		return p
	}
	tmp := b.scratch(npu.I8, K, N)
	for e := range E {
		b.qlaunchCopy(tmp, 0, []int{K, N}, nil, w.Weight, e*N*K, []int{1, K}, aclInt8)
		if e == 0 {
			b.nzLayout(p, tmp)
		}
		b.qlaunch(C.NPU_Q_FORMAT_CAST, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_q_format_cast(c.qtensor(tmp, aclInt8, 0, []int{K, N}, nil), c.nzTensor(p, e), ws, ex)
		})
	}
	return p
}

// nzLayout asks CANN for the FRACTAL_NZ storage shape of the int8 [K, N]
// tmp and allocates E experts of it (device thread).
func (b *Backend) nzLayout(p *qprep, tmp *npu.Tensor) {
	qLoad()
	c := &call{b: b}
	src := c.qtensor(tmp, aclInt8, 0, []int{p.K, p.N}, nil)
	defer C.npu_destroy_tensor(src)
	var shape [8]C.int64_t
	var n C.uint64_t
	var actual C.int
	if rc := C.npu_q_nz_size(src, aclFmtNZ, aclInt8, &shape[0], 8, &n, &actual); rc != 0 {
		panic(fmt.Sprintf("ascend: PrepareQuant: %v", aclnnError("aclnnNpuFormatCastCalculateSizeAndFormat", rc)))
	}
	bytes := 1
	for _, d := range shape[:n] {
		p.nzShape = append(p.nzShape, int(d))
		bytes *= int(d)
	}
	p.nzFmt = actual
	p.nzBytes = (bytes + 31) / 32 * 32
	p.w = b.persist(npu.U8, p.E*p.nzBytes)
}

// qlaunchCopy enqueues dst view = src view (aclnnInplaceCopy), both
// described as acl dtype dt (device thread).
func (b *Backend) qlaunchCopy(dst *npu.Tensor, doff int, shape, dstrides []int, src *npu.Tensor, soff int, sstrides []int, dt C.int) {
	b.launch(C.NPU_OP_INPLACE_COPY, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_inplace_copy(c.qtensor(dst, dt, doff, shape, dstrides), c.qtensor(src, dt, soff, shape, sstrides), ws, ex)
	})
}

// mxScaleLayout copies expert e's E8M0 scales [N, nb] into p.mxScale's
// (nbe/2, N, 2) layout: block kb of channel n goes to [kb/2][n][kb%2]
// (the padding stays 0).
func (b *Backend) mxScaleLayout(p *qprep, scale *npu.Tensor, e, nb int) {
	N := p.N
	doff, soff := e*p.nbe*N, e*N*nb
	if pairs := nb / 2; pairs > 0 {
		b.qlaunchCopy(p.mxScale, doff, []int{pairs, N, 2}, nil, scale, soff, []int{2, nb, 1}, aclUint8)
	}
	if nb%2 == 1 {
		b.qlaunchCopy(p.mxScale, doff+(nb/2)*2*N, []int{N}, []int{2}, scale, soff+nb-1, []int{nb}, aclUint8)
	}
}

// fillOne enqueues t (F32 [1]) = v (device thread).
func (b *Backend) fillOne(t *npu.Tensor, v float32) {
	b.launch(C.NPU_OP_FILL_SCALAR, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_fill_scalar(c.tensor(t, nil, nil), c.scalar(v), ws, ex)
	})
}

// MatMulQ computes out[M,N] = x[M,K] · w^T with w quantized, on the path
// of w's scheme described above. See npu.Ops.MatMulQ.
func (b *Backend) MatMulQ(out, x *npu.Tensor, w *npu.QuantWeight) {
	if w.Experts() != 0 {
		panic(fmt.Sprintf("ascend: MatMulQ with a grouped weight %v (use MoEQ)", w))
	}
	K, N := w.K(), w.N()
	if x.DType() != npu.F32 || x.Rank() == 0 || x.Dim(-1) != K || out.DType() != npu.F32 {
		panic(fmt.Sprintf("ascend: MatMulQ x %v, w %v, out %v", x, w, out))
	}
	M := x.Numel() / max(K, 1)
	if out.Numel() != M*N || (out.Rank() > 0 && out.Dim(-1) != N) {
		panic(fmt.Sprintf("ascend: MatMulQ out %v, want [%d,%d] for x %v, w %v", out, M, N, x, w))
	}
	p := b.qprepared(w)
	if M*N == 0 {
		return
	}
	b.do(func() { b.matMulQ(p, 0, out, x, M) })
}

// matMulQ enqueues out [M, N] = x [M, K] · w_e^T for expert e (device
// thread). Cost: W8A8_DYNAMIC 9 operators (rowQuant's 7, the matmul and
// the F16 → F32 cast); W8A8 3 (quantize, matmul, cast); MXFP8 2.
func (b *Backend) matMulQ(p *qprep, e int, out, x *npu.Tensor, M int) {
	N, K := p.N, p.K
	if K == 0 {
		b.launch(C.NPU_OP_FILL_SCALAR, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_fill_scalar(c.tensor(out, []int{M * N}, nil), c.scalar(0), ws, ex)
		})
		return
	}
	mk, mn := []int{M, K}, []int{M, N}
	if p.scheme == npu.QMXFP8 {
		xq, xs := b.scratch(npu.F8E4M3, M, K), b.scratch(npu.U8, M, p.nbe)
		alg := C.int64_t(p.alg)
		b.qlaunch(C.NPU_Q_DYNAMIC_MX_QUANT, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_q_dynamic_mx_quant(c.tensor(x, mk, nil), -1, aclF8E4M3, 32, alg, c.qtensor(xq, aclF8E4M3, 0, mk, nil),
				c.qtensor(xs, aclF8E8M0, 0, []int{M, p.nbe}, nil), ws, ex)
		})
		b.qlaunch(C.NPU_Q_QMM_V5, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_q_qmm(C.NPU_Q_QMM_V5, c.qtensor(xq, aclF8E4M3, 0, mk, nil), c.qtensor(p.w, aclF8E4M3, e*K*N, []int{K, N}, nil),
				c.qtensor(xs, aclF8E8M0, 0, []int{M, p.nbe / 2, 2}, nil), c.qtensor(p.mxScale, aclF8E8M0, e*p.nbe*N, []int{p.nbe / 2, N, 2}, nil),
				0, mxGroupMNK, c.tensor(out, mn, nil), ws, ex)
		})
		return
	}
	xq := b.scratch(npu.I8, M, K)
	var x1s, x2s, bias *npu.Tensor
	x2off := 0
	if p.scheme == npu.QW8A8Dynamic {
		x1s, x2s, x2off = b.scratch(npu.F32, M), p.scale, e*N
		b.rowQuant(xq, x1s, x, M, K)
	} else {
		b.qlaunch(C.NPU_Q_ASCEND_QUANT_V3, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_q_ascend_quant_v3(c.tensor(x, mk, nil), c.tensor(p.recip, nil, nil), c.tensor(p.offset, nil, nil), aclInt8, -1,
				c.tensor(xq, mk, nil), ws, ex)
		})
		// ones of a power-of-two length >= M (few distinct sizes are kept)
		x1s, x2s, bias = b.unitGamma(1<<bits.Len(uint(M-1))), p.deq, p.qbias
	}
	oh := b.scratch(npu.F16, M, N)
	b.qmmInt8(p.nz, !p.nz, p, e, xq, x1s, x2s, x2off, bias, oh)
	b.castView(out, oh, mn, nil)
}

// MoEQ adds the routed quantized experts to out without reading the
// routing back to the host. W8A8_DYNAMIC experts take the grouped path of
// moe.go (moeQGrouped), W8A8_MXFP8 experts (950) its MX form
// (moeQGroupedMX). A gate/up and down pair of different schemes, which
// no one grouped call covers, takes the dense masked form:
// a [T, E] matrix of routing weights is built on the device (zero fill,
// then aclnnScatter of weights at ids along dim 1; ids of a row must be
// distinct, as the router's are), and every expert runs over all T rows:
// its gate/up MatMulQ, the clamped SwiGLU, its down MatMulQ, then
// aclnnMul by its column of the matrix (zero where the row is not routed
// to it) and aclnnAdd into out. Cost of the dense form: E/k times the
// expert FLOPs of the routed form and 2E elementwise passes over [T, D];
// a row whose unrouted expert output overflows (Inf) would poison it
// (0 * Inf). See npu.Ops.MoEQ.
func (b *Backend) MoEQ(out, x *npu.Tensor, gateUp, down *npu.QuantWeight, weights, ids *npu.Tensor, limit float32) {
	if x.Rank() != 2 || gateUp.Experts() == 0 || down.Experts() != gateUp.Experts() || x.DType() != npu.F32 || out.DType() != npu.F32 {
		panic(fmt.Sprintf("ascend: MoEQ x %v gateUp %v down %v out %v", x, gateUp, down, out))
	}
	T, D := x.Dim(0), x.Dim(1)
	E, I := gateUp.Experts(), gateUp.N()/2
	if gateUp.N() != 2*I || gateUp.K() != D || down.N() != D || down.K() != I || out.Numel() != T*D {
		panic(fmt.Sprintf("ascend: MoEQ gateUp %v down %v for x %v", gateUp, down, x))
	}
	for _, w := range []*npu.QuantWeight{gateUp, down} {
		if w.Scheme != npu.QW8A8Dynamic && w.Scheme != npu.QMXFP8 {
			panic(fmt.Sprintf("ascend: MoEQ expert weights %v: want W8A8_DYNAMIC or W8A8_MXFP8", w))
		}
	}
	if ids.Rank() != 2 || ids.Dim(0) != T || ids.DType() != npu.I32 || weights.DType() != npu.F32 || !npu.SameShape(weights.Shape(), ids.Shape()) {
		panic(fmt.Sprintf("ascend: MoEQ weights %v ids %v for %d tokens", weights, ids, T))
	}
	k := ids.Dim(1)
	pg, pd := b.qprepared(gateUp), b.qprepared(down)
	if T == 0 || k == 0 || D == 0 || I == 0 {
		return
	}
	if pg.scheme == npu.QW8A8Dynamic && pd.scheme == npu.QW8A8Dynamic {
		b.moeQGrouped(out, x, pg, pd, weights, ids, k, limit)
		return
	}
	if pg.scheme == npu.QMXFP8 && pd.scheme == npu.QMXFP8 {
		b.moeQGroupedMX(out, x, pg, pd, weights, ids, k, limit)
		return
	}
	dense := b.alloc(npu.F32, T, E)
	h, a, y := b.alloc(npu.F32, T, 2*I), b.alloc(npu.F32, T, I), b.alloc(npu.F32, T, D)
	b.do(func() {
		b.launch(C.NPU_OP_FILL_SCALAR, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_fill_scalar(c.tensor(dense, []int{T * E}, nil), c.scalar(0), ws, ex)
		})
		b.launch(C.NPU_OP_SCATTER, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_scatter(c.tensor(dense, nil, nil), 1, c.tensor(ids, nil, nil), c.tensor(weights, nil, nil), 0, c.tensor(dense, nil, nil), ws, ex)
		})
	})
	td := []int{T, D}
	for e := range E {
		b.do(func() { b.matMulQ(pg, e, h, x, T) })
		b.SwiGLU(a, h, limit)
		b.do(func() {
			b.matMulQ(pd, e, y, a, T)
			b.launch(C.NPU_OP_MUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_mul(c.tensor(y, td, nil), c.view(dense, e, []int{T, 1}, []int{E, 1}), c.tensor(y, td, nil), ws, ex)
			})
			b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
				return C.npu_add(c.tensor(out, td, nil), c.tensor(y, td, nil), c.scalar(1), c.tensor(out, td, nil), ws, ex)
			})
		})
	}
}

// rowQuant enqueues the per-token symmetric int8 quantization of x [M, K]
// (F32) in float32, the arithmetic of npu/cpu (quant.DynamicToken):
// scale[m] = max_k |x[m,k]| / 127, xq[m,k] = rint(x[m,k] / scale[m]),
// from stock operators (device thread):
//
//	aclnnAbs(x) → t [M, K]; aclnnAmax(t, dim 1, keepDim) → s [M, 1];
//	aclnnClamp(s, 127·FLT_MIN, +Inf) → s; aclnnDivs(s, 127) → scale;
//	aclnnDiv(x, scale) → t; aclnnRound(t) → t; aclnnCast(t) → xq INT8.
//
// The clamp is the guard for an all-zero row: its scale becomes FLT_MIN
// instead of 0 (whose 0/0 would be NaN), so xq = 0 and the output row is
// 0·scale·wscale = 0, as the CPU's zero scale gives; a row whose max|x|
// is below 127·FLT_MIN (1.5e-36) is quantized with that floor, a
// difference of at most 1.5e-36·|wscale|·K in its outputs. NaN stays NaN.
// No clamp to ±127 is needed: |x| <= amax makes |x/scale| <= 127·(1+2^-23)
// before rounding, so rint gives at most 127. aclnnDynamicQuant would be
// one operator but takes only FP16/BF16 x, and the F16 copy moved the
// row maxima and the int8 rounding enough (max rel err 0.0104 on MatMulQ
// 9x40x77, 0.015 through MoEQ) to miss the fp32 reference.
// Cost: 7 operators, three passes over [M, K] F32 plus the reduction.
func (b *Backend) rowQuant(xq, scale, x *npu.Tensor, M, K int) {
	mk, m1 := []int{M, K}, []int{M, 1}
	t, s := b.scratch(npu.F32, M, K), b.scratch(npu.F32, M, 1)
	b.qlaunch(C.NPU_Q_ABS, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_q_abs(c.tensor(x, mk, nil), c.tensor(t, nil, nil), ws, ex)
	})
	b.qlaunch(C.NPU_Q_AMAX, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_q_amax(c.tensor(t, nil, nil), c.ints(1), 1, c.tensor(s, nil, nil), ws, ex)
	})
	b.launch(C.NPU_OP_CLAMP, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_clamp(c.tensor(s, nil, nil), c.scalar(127*math.SmallestNonzeroFloat32*(1<<23)), c.scalar(float32(math.Inf(1))),
			c.tensor(s, nil, nil), ws, ex)
	})
	b.qlaunch(C.NPU_Q_DIVS, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_q_divs(c.tensor(s, nil, nil), c.scalar(127), c.tensor(scale, m1, nil), ws, ex)
	})
	b.launch(C.NPU_OP_DIV, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_div(c.tensor(x, mk, nil), c.tensor(scale, m1, nil), c.tensor(t, nil, nil), ws, ex)
	})
	b.qlaunch(C.NPU_Q_ROUND, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_q_round(c.tensor(t, nil, nil), c.tensor(t, nil, nil), ws, ex)
	})
	b.castView(xq, t, mk, nil)
}

// qmmInt8 enqueues out (F16 [M, N]) = dequant(xq [M, K] · w_e) with
// aclnnQuantMatmulWeightNz (nzOp) or aclnnQuantMatmulV5, describing p's
// weight bytes as ND [K, N] (asND) or as expert e's FRACTAL_NZ tensor;
// x1s [>= M] per-token scales, x2s per-channel scales from element x2off,
// bias nil or I32 [N] (device thread).
func (b *Backend) qmmInt8(nzOp, asND bool, p *qprep, e int, xq, x1s, x2s *npu.Tensor, x2off int, bias, out *npu.Tensor) {
	M, N, K := xq.Dim(0), p.N, p.K
	op := C.int(C.NPU_Q_QMM_V5)
	if nzOp {
		op = C.NPU_Q_QMM_WEIGHT_NZ
	}
	b.qlaunch(op, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		var w2 C.uintptr_t
		if asND {
			w2 = c.qtensor(p.w, aclInt8, e*K*N, []int{K, N}, nil)
		} else {
			w2 = c.nzTensor(p, e)
		}
		var bt C.uintptr_t
		if bias != nil {
			bt = c.tensor(bias, nil, nil)
		}
		return C.npu_q_qmm(op, c.tensor(xq, []int{M, K}, nil), w2, c.tensor(x1s, []int{M}, nil), c.view(x2s, x2off, []int{N}, nil), bt, 0,
			c.tensor(out, []int{M, N}, nil), ws, ex)
	})
}
