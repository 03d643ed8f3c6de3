package quant

import (
	"fmt"
	"math"
)

// Int8 quantization: q = clamp(round(x / scale) + offset, qmin, qmax) and
// x ≈ (q - offset) * scale, rounding half to even (torch.round, CANN's
// "rint"). Symmetric quantization has offset 0 and uses [-127, 127] (so
// that -q is representable); asymmetric quantization maps [min, max] onto
// the full [-128, 127].

// Int8 limits.
const (
	SymMax  = 127  // symmetric range is [-SymMax, SymMax]
	AsymMin = -128 // asymmetric range is [AsymMin, AsymMax]
	AsymMax = 127
)

// Params are one quantization group's scale and zero point.
type Params struct {
	Scale  float32
	Offset int32 // zero point: the quantized value of 0
}

// SymParams are the symmetric parameters for a group whose largest
// magnitude is amax: scale = amax/127 (0 for an all-zero group, which then
// quantizes to zeros).
func SymParams(amax float32) Params {
	return Params{Scale: amax / SymMax}
}

// AsymParams are the asymmetric parameters for a group with values in
// [lo, hi]: the range is widened to contain 0 (so that 0 is exact), scale
// = (hi - lo)/255 and offset = -128 - round(lo/scale), clamped to int8.
func AsymParams(lo, hi float32) Params {
	lo, hi = min(lo, 0), max(hi, 0)
	if hi == lo {
		return Params{}
	}
	scale := (hi - lo) / (AsymMax - AsymMin)
	off := AsymMin - math.RoundToEven(float64(lo/scale))
	return Params{Scale: scale, Offset: int32(min(max(off, AsymMin), AsymMax))}
}

// Quantize quantizes one value: clamp(rint(x/scale) + offset) into
// [qmin, qmax]; a zero scale gives the offset.
func (p Params) Quantize(x float32, qmin, qmax int32) int8 {
	if p.Scale == 0 {
		return int8(min(max(p.Offset, qmin), qmax))
	}
	v := math.RoundToEven(float64(x/p.Scale)) + float64(p.Offset)
	return int8(min(max(v, float64(qmin)), float64(qmax)))
}

// Dequantize maps q back: (q - offset) * scale.
func (p Params) Dequantize(q int8) float32 {
	return float32(int32(q)-p.Offset) * p.Scale
}

// QuantizeSym quantizes x symmetrically with scale into dst (len(x)):
// clamp(rint(x/scale), -127, 127), as Params.Quantize (a zero scale gives
// zeros).
func QuantizeSym(dst []int8, x []float32, scale float32) {
	if scale == 0 {
		clear(dst[:len(x)])
		return
	}
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = int8(rint32(min(max(v/scale, -SymMax), SymMax)))
	}
}

// rint32 rounds y (|y| <= 2^22) to an integer, half to even, in float32
// arithmetic: adding and subtracting 1.5*2^23 leaves no fraction bits.
func rint32(y float32) float32 {
	const magic = 1 << 23 * 1.5
	return (y + magic) - magic
}

// QuantizeAsym quantizes x with p into dst over the full int8 range.
func QuantizeAsym(dst []int8, x []float32, p Params) {
	for i, v := range x {
		dst[i] = p.Quantize(v, AsymMin, AsymMax)
	}
}

// AbsMax is the largest magnitude of x (NaN if x holds a NaN).
func AbsMax(x []float32) float32 {
	var m uint32
	for _, v := range x {
		// Magnitude bit patterns order like the magnitudes; NaNs sort
		// above infinity.
		m = max(m, math.Float32bits(v)&f32AbsMask)
	}
	return math.Float32frombits(m)
}

// MinMax returns the smallest and largest values of x (0, 0 when empty).
func MinMax(x []float32) (lo, hi float32) {
	if len(x) == 0 {
		return 0, 0
	}
	lo, hi = x[0], x[0]
	for _, v := range x[1:] {
		lo, hi = min(lo, v), max(hi, v)
	}
	return lo, hi
}

// Granularity selects which elements share quantization parameters.
type Granularity int

const (
	// PerTensor: one scale (and offset) for the whole matrix.
	PerTensor Granularity = iota
	// PerChannel: one per row of a weight [out, in] (output channel).
	PerChannel
	// PerToken: one per row of an activation [tokens, hidden]; the same
	// grouping as PerChannel, named for activations.
	PerToken
)

// String names the granularity.
func (g Granularity) String() string {
	switch g {
	case PerTensor:
		return "per-tensor"
	case PerChannel:
		return "per-channel"
	case PerToken:
		return "per-token"
	}
	return fmt.Sprintf("Granularity(%d)", int(g))
}

// Matrix quantizes x [rows, cols] (row-major) at granularity g,
// symmetrically (sym) or asymmetrically, into q, returning the parameters:
// one entry for PerTensor, one per row otherwise.
func Matrix(q []int8, x []float32, rows, cols int, g Granularity, sym bool) []Params {
	if len(x) != rows*cols || len(q) < len(x) {
		panic(fmt.Sprintf("quant: Matrix %dx%d of %d values into %d", rows, cols, len(x), len(q)))
	}
	params := func(v []float32) Params {
		if sym {
			return SymParams(AbsMax(v))
		}
		lo, hi := MinMax(v)
		return AsymParams(lo, hi)
	}
	apply := func(dst []int8, v []float32, p Params) {
		if sym {
			QuantizeSym(dst, v, p.Scale)
		} else {
			QuantizeAsym(dst, v, p)
		}
	}
	if g == PerTensor {
		p := params(x)
		apply(q, x, p)
		return []Params{p}
	}
	ps := make([]Params, rows)
	for r := range rows {
		v := x[r*cols : (r+1)*cols]
		ps[r] = params(v)
		apply(q[r*cols:(r+1)*cols], v, ps[r])
	}
	return ps
}

// DequantizeMatrix is the inverse of Matrix: dst[r][c] = (q - offset) *
// scale with the row's (or the single) parameters.
func DequantizeMatrix(dst []float32, q []int8, rows, cols int, ps []Params) {
	for r := range rows {
		p := ps[0]
		if len(ps) > 1 {
			p = ps[r]
		}
		for c := range cols {
			dst[r*cols+c] = p.Dequantize(q[r*cols+c])
		}
	}
}

// DynamicToken quantizes one activation row the way npu_dynamic_quant
// does (symmetric, per token): scale = max|x|/127, q = rint(x/scale)
// clamped to [-127, 127]. It returns the scale.
func DynamicToken(q []int8, x []float32) float32 {
	p := SymParams(AbsMax(x))
	QuantizeSym(q, x, p.Scale)
	return p.Scale
}

// StaticQuantize quantizes activations the way vllm-ascend's W8A8 method
// does (torch_npu.npu_quantize with div_mode false): q = clamp(rint(x *
// recip + offset), -128, 127), where recip = 1/input_scale, in float32.
func StaticQuantize(q []int8, x []float32, recip float32, offset int32) {
	off := float32(offset)
	q = q[:len(x)]
	for i, v := range x {
		// The conversion keeps the product rounded (no fused multiply-add).
		y := float32(v*recip) + off
		q[i] = int8(rint32(min(max(y, AsymMin), AsymMax)))
	}
}
