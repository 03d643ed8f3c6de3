package npu

import (
	"fmt"
	"math"

	"github.com/x448/float16"
)

// BF16ToF32 widens a bfloat16 bit pattern.
func BF16ToF32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// F32ToBF16 narrows with round-to-nearest-even; NaN stays NaN.
func F32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 { // NaN: keep it quiet and non-zero
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// F16ToF32 widens an IEEE half bit pattern.
func F16ToF32(h uint16) float32 { return float16.Frombits(h).Float32() }

// F32ToF16 narrows with round-to-nearest-even.
func F32ToF16(f float32) uint16 { return uint16(float16.Fromfloat32(f)) }

var e4m3Table = func() (t [256]float32) {
	for i := range t {
		t[i] = e4m3Decode(uint8(i))
	}
	return
}()

func e4m3Decode(b uint8) float32 {
	sign := float32(1)
	if b&0x80 != 0 {
		sign = -1
	}
	exp := int(b>>3) & 0xf
	man := int(b & 7)
	if exp == 0xf && man == 7 {
		return float32(math.NaN())
	}
	if exp == 0 {
		return sign * float32(man) / 8 * float32(math.Ldexp(1, -6))
	}
	return sign * (1 + float32(man)/8) * float32(math.Ldexp(1, exp-7))
}

// E4M3ToF32 decodes an OCP FP8 e4m3 (fn) byte.
func E4M3ToF32(b uint8) float32 { return e4m3Table[b] }

// WidenHalf converts the 16-bit floats of src (dt BF16 or F16) into dst
// (len(dst) of them).
func WidenHalf(dst []float32, dt DType, src []uint16) {
	src = src[:len(dst)]
	if dt == BF16 {
		for i, v := range src {
			dst[i] = BF16ToF32(v)
		}
		return
	}
	for i, v := range src {
		dst[i] = F16ToF32(v)
	}
}

// NarrowHalf rounds src to nearest even into dst (len(dst) values), as BF16
// or F16 by dt.
func NarrowHalf(dst []uint16, dt DType, src []float32) {
	src = src[:len(dst)]
	if dt == BF16 {
		for i, v := range src {
			dst[i] = F32ToBF16(v)
		}
		return
	}
	for i, v := range src {
		dst[i] = F32ToF16(v)
	}
}

// Convertible reports whether the converting ops (Copy, Gather, Scatter,
// Embedding) convert src elements to dst: between F32, BF16, F16 and I32,
// and F8E4M3 to F32. Every backend checks its arguments against it.
func Convertible(dst, src DType) bool {
	if src == F8E4M3 && dst == F32 {
		return true
	}
	conv := func(dt DType) bool { return dt == F32 || dt == BF16 || dt == F16 || dt == I32 }
	return conv(dst) && conv(src)
}

// MatMulDims checks MatMul's operands (x [..., K], w [..., K] with an
// F32, BF16 or F16 dtype, out [..., N] of M·N elements; leading dimensions
// flattened) and returns M, N and K, or the error every backend panics
// with (prefixed with its name).
func MatMulDims(out, x, w *Tensor) (M, N, K int, err error) {
	if w.Rank() < 2 || x.Rank() < 1 {
		return 0, 0, 0, fmt.Errorf("MatMul x %v, w %v: want x [M,K], w [N,K]", x, w)
	}
	switch w.DType() {
	case F32, BF16, F16:
	default:
		return 0, 0, 0, fmt.Errorf("MatMul weight %v: want F32, BF16 or F16", w)
	}
	K = w.Dim(-1)
	if x.Dim(-1) != K {
		return 0, 0, 0, fmt.Errorf("MatMul x %v and w %v disagree on K", x, w)
	}
	N, M = 1, 1
	for _, d := range w.Shape()[:w.Rank()-1] {
		N *= d
	}
	for _, d := range x.Shape()[:x.Rank()-1] {
		M *= d
	}
	if out.Numel() != M*N || (out.Rank() > 0 && out.Dim(-1) != N) {
		return 0, 0, 0, fmt.Errorf("MatMul out %v, want [%d,%d] for x %v, w %v", out, M, N, x, w)
	}
	return M, N, K, nil
}

// DSAIndexDims states DSAIndex's operand shapes once for every backend
// (dtypes are each backend's to check): for T query rows it returns the
// indexer heads Hi, the pooled key width d, the pooled slots and the
// output width (TopKPools*KPool, plus KPool-1 with Tail), or an error
// naming the operand.
func DSAIndexDims(out, q, w, pooled *Tensor, T int, p IndexParams) (Hi, d, nslots, width int, err error) {
	kp, topk := p.KPool, p.TopKPools
	if kp <= 0 || topk < 0 {
		return 0, 0, 0, 0, fmt.Errorf("DSAIndex KPool %d, TopKPools %d", kp, topk)
	}
	if pooled.Rank() != 2 {
		return 0, 0, 0, 0, fmt.Errorf("DSAIndex pooled %v, want [slots, d]", pooled)
	}
	d, nslots = pooled.Dim(1), pooled.Dim(0)
	width = topk * kp
	if p.Tail {
		width += kp - 1
	}
	Hi = w.Dim(-1)
	switch {
	case w.Numel() != T*Hi || Hi <= 0:
		return 0, 0, 0, 0, fmt.Errorf("DSAIndex w %v, want [%d, heads]", w, T)
	case q.Numel() != T*Hi*d:
		return 0, 0, 0, 0, fmt.Errorf("DSAIndex q %v, want [%d, %d*%d]", q, T, Hi, d)
	case out.Numel() != T*width || (T > 0 && out.Dim(-1) != width):
		return 0, 0, 0, 0, fmt.Errorf("DSAIndex out %v, want [%d, %d]", out, T, width)
	}
	return Hi, d, nslots, width, nil
}

// KDADims states KDA's operand shapes once for every backend (dtypes and
// the layout are each backend's to check): for T rows, qkv [T, 3·H·K], g
// [T, H·K], beta [T, H], out [T, H·V] and state [slots, H, K, V] with
// V = K; an error names the operand.
func KDADims(out, qkv, g, beta, state *Tensor, T, heads, headDim, chunk int) error {
	H, K := heads, headDim
	V, HK := K, heads*headDim
	switch {
	case H <= 0 || K <= 0 || chunk < 0:
		return fmt.Errorf("KDA heads %d, head dim %d, chunk %d", H, K, chunk)
	case qkv.Numel() != T*3*HK || qkv.RowSize() != 3*HK:
		return fmt.Errorf("KDA qkv %v, want [%d, %d]", qkv, T, 3*HK)
	case g.Numel() != T*HK:
		return fmt.Errorf("KDA g %v, want [%d, %d]", g, T, HK)
	case beta.Numel() != T*H:
		return fmt.Errorf("KDA beta %v, want [%d, %d]", beta, T, H)
	case out.Numel() != T*H*V:
		return fmt.Errorf("KDA out %v, want [%d, %d]", out, T, H*V)
	case state.Rank() < 1 || state.RowSize() != H*K*V:
		return fmt.Errorf("KDA state %v, want [slots, %d, %d, %d]", state, H, K, V)
	}
	return nil
}

// SparseMLADims states SparseMLA's operand shapes once for every backend
// (dtypes are each backend's to check): for T rows, q [T, H·dk], latents
// [slots, R], kvB [H·(dk+dv), R], sel [T, width] and out [T, H·dv]. It
// returns R, the latent slots and the selection width, or an error naming
// the operand.
func SparseMLADims(out, q, latents, kvB, sel *Tensor, T, heads, dk, dv int) (R, nslots, width int, err error) {
	H := heads
	if H <= 0 || dk <= 0 || dv <= 0 || latents.Rank() != 2 {
		return 0, 0, 0, fmt.Errorf("SparseMLA %d heads, dk %d, dv %d, latents %v", H, dk, dv, latents)
	}
	R, nslots, width = latents.Dim(1), latents.Dim(0), sel.Dim(-1)
	switch {
	case kvB.Numel() != H*(dk+dv)*R || kvB.Dim(-1) != R:
		return 0, 0, 0, fmt.Errorf("SparseMLA kvB %v, want [%d, %d]", kvB, H*(dk+dv), R)
	case q.Numel() != T*H*dk:
		return 0, 0, 0, fmt.Errorf("SparseMLA q %v, want [%d, %d]", q, T, H*dk)
	case out.Numel() != T*H*dv:
		return 0, 0, 0, fmt.Errorf("SparseMLA out %v, want [%d, %d]", out, T, H*dv)
	case sel.Numel() != T*width:
		return 0, 0, 0, fmt.Errorf("SparseMLA sel %v for %d rows", sel, T)
	}
	return R, nslots, width, nil
}
