// Package quant is npuserve's quantization arithmetic, independent of any
// model or device: int8 quantization (symmetric and asymmetric, per
// channel, per tensor and per token), the OCP 8-bit float formats E4M3
// (fn) and E8M0, MX block quantization, the msmodelslim checkpoint
// description (quant_model_description.json) and the per-scheme tensor
// sets that vllm-ascend's W8A8, W8A8_DYNAMIC and W8A8_MXFP8 linear methods
// load. Model code (engine/...) and devices (npu/...) build on it; it
// imports neither.
package quant

import (
	"math"

	"github.com/npuserve/npuserve/npu"
)

// E4M3 (OCP 8-bit float, "fn" variant): 1 sign, 4 exponent (bias 7) and 3
// mantissa bits; no infinities; S.1111.111 is NaN; the largest finite
// magnitude is S.1111.110 = 448; subnormals are m * 2^-9 (m = 1..7).
const (
	E4M3Max     = 448           // largest finite E4M3 magnitude
	E4M3MaxBits = 0x7e          // bit pattern of +448
	E4M3NaN     = 0x7f          // canonical NaN bit pattern (0xff is -NaN)
	E4M3Emax    = 8             // exponent of the largest normal binade (448 = 1.75 * 2^8)
	e4m3MinNorm = 1.0 / 64      // 2^-6
	f32Bits448  = 0x43e00000    // math.Float32bits(448)
	f32Bits2m6  = 0x3c800000    // math.Float32bits(2^-6)
	f32Inf      = 0x7f800000    // math.Float32bits(+Inf)
	f32AbsMask  = 0x7fffffff    // clears the sign bit
	f32MantMask = 0x007fffff    // mantissa field
	e4m3Drop    = 23 - 3        // float32 mantissa bits dropped when narrowing
	e4m3Half    = 1 << (20 - 1) // half an E4M3 ulp in float32 mantissa units
)

// E4M3ToF32 decodes an E4M3 byte (exact; NaN for 0x7f and 0xff).
func E4M3ToF32(b uint8) float32 { return npu.E4M3ToF32(b) }

// E4M3FromF32 encodes f as E4M3 with round-to-nearest-even and saturation,
// the OCP MX conversion with saturation enabled: finite values beyond 448
// in magnitude and infinities become ±448, NaN becomes NaN (0x7f, with
// the sign of f), and the sign of zero is kept.
func E4M3FromF32(f float32) uint8 {
	u := math.Float32bits(f)
	sign := uint8(u>>24) & 0x80
	a := u & f32AbsMask
	switch {
	case a > f32Inf:
		return sign | E4M3NaN
	case a >= f32Bits448:
		return sign | E4M3MaxBits
	case a < f32Bits2m6:
		// Subnormal range: the result is m * 2^-9 with m = round(|f| * 2^9)
		// in 0..8 (8 is the smallest normal, 2^-6, whose encoding is 8).
		// Scaling by a power of two is exact, so this is a correctly
		// rounded float64 computation.
		m := math.RoundToEven(float64(math.Float32frombits(a)) * 512)
		return sign | uint8(m)
	}
	exp := int(a>>23) - 127 // -6..8
	mant := a & f32MantMask
	keep := mant >> e4m3Drop
	rem := mant & (1<<e4m3Drop - 1)
	if rem > e4m3Half || rem == e4m3Half && keep&1 == 1 {
		keep++
	}
	e := exp + 7
	if keep == 8 {
		keep = 0
		e++
	}
	// a < 448 rounds at most to 448 (e 15, keep 6): never into NaN.
	return sign | uint8(e)<<3 | uint8(keep)
}

// E8M0 (OCP scale format): 8 exponent bits, bias 127, no sign, no
// mantissa; 0xff is NaN. Byte b encodes 2^(b-127), from 2^-127 to 2^127.
const (
	E8M0Bias = 127
	E8M0NaN  = 0xff
)

// E8M0ToF32 decodes an E8M0 byte: 2^(b-127), NaN for 0xff. 2^-127 is a
// float32 subnormal and exact.
func E8M0ToF32(b uint8) float32 {
	if b == E8M0NaN {
		return float32(math.NaN())
	}
	return float32(math.Ldexp(1, int(b)-E8M0Bias))
}

// E8M0FromExp encodes 2^e, clamping e to the representable [-127, 127].
func E8M0FromExp(e int) uint8 {
	return uint8(min(max(e, -E8M0Bias), E8M0Bias) + E8M0Bias)
}

// E8M0FromF32 encodes a positive scale f as E8M0 rounding to the nearest
// power of two in the linear domain with ties to even (PyTorch's
// float8_e8m0fnu conversion): the float32 mantissa is rounded to an
// integer and the implicit bit (1 for normals, 0 for subnormals) is the
// least significant bit for ties. NaN, infinities and results beyond
// 2^127 give NaN (0xff); zero, negative numbers and values that round
// below 2^-127 give 2^-127 (0x00), the smallest scale.
func E8M0FromF32(f float32) uint8 {
	u := math.Float32bits(f)
	if u&f32AbsMask >= f32Inf {
		return E8M0NaN
	}
	if f <= 0 {
		return 0
	}
	exp := u >> 23 // biased exponent, 0 for subnormals
	mant := u & f32MantMask
	g := mant&(1<<22) != 0    // guard: the first dropped bit (half)
	rs := mant&(1<<22-1) != 0 // round and sticky bits below it
	lsb := exp > 0            // the implicit bit
	if g && (rs || lsb) {
		exp++
	}
	if exp >= E8M0NaN {
		return E8M0NaN
	}
	return uint8(exp)
}

// F32Exponent returns the unbiased exponent e of a finite positive float32
// f with 2^e <= f < 2^(e+1), floor(log2(f)), exactly (subnormals
// included). It returns math.MinInt for zero.
func F32Exponent(f float32) int {
	u := math.Float32bits(f) & f32AbsMask
	if u == 0 {
		return math.MinInt
	}
	if e := int(u >> 23); e > 0 {
		return e - 127
	}
	// Subnormal: value = mant * 2^-149.
	mant := u & f32MantMask
	e := -150
	for mant != 0 {
		mant >>= 1
		e++
	}
	return e
}
