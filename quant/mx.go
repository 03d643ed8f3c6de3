package quant

import (
	"fmt"
	"math"
)

// MXBlock is the OCP MX block size: 32 consecutive elements share one
// E8M0 scale (vllm-ascend's default group_size).
const MXBlock = 32

// ScaleAlg selects how an MX block's shared E8M0 scale is derived from
// the block's largest magnitude amax, the two algorithms of CANN's
// DynamicMxQuant (scale_alg) that vllm-ascend exposes.
type ScaleAlg int

const (
	// ScaleAlgOCP (scale_alg 0, the OCP MX specification and
	// vllm-ascend's default): scale = 2^(floor(log2(amax)) - emax) with
	// emax = 8 for E4M3. The block's largest element lands in [256, 512)
	// and elements beyond 448 saturate.
	ScaleAlgOCP ScaleAlg = 0
	// ScaleAlgRoundUp (scale_alg 1): s = amax / 448, then the E8M0 scale
	// is s's power of two rounded up (when s is normal with a non-zero
	// mantissa and its biased exponent is below 254, or subnormal with a
	// mantissa above one half), so that no element overflows.
	ScaleAlgRoundUp ScaleAlg = 1
	// ScaleAlgMSE (offline weight quantization only: a device cannot
	// compute it on the fly) takes, per block, whichever of the OCP and
	// round-up scales reconstructs the block with the smaller squared
	// error. The E8M0 scales it writes are ordinary ones.
	ScaleAlgMSE ScaleAlg = 2
)

// String names the algorithm.
func (a ScaleAlg) String() string {
	switch a {
	case ScaleAlgOCP:
		return "ocp"
	case ScaleAlgRoundUp:
		return "roundup"
	case ScaleAlgMSE:
		return "mse"
	}
	return fmt.Sprintf("ScaleAlg(%d)", int(a))
}

// MXScale returns the E8M0 scale byte of a block whose largest magnitude
// is amax (ScaleAlgMSE, which needs the block, answers as ScaleAlgOCP). A NaN or infinite amax gives the NaN scale (0xff); an all-zero
// block gives the smallest scale 2^-127 (its elements encode as zeros
// whatever the scale).
func MXScale(amax float32, alg ScaleAlg) uint8 {
	if amax != amax || math.IsInf(float64(amax), 0) {
		return E8M0NaN
	}
	if amax <= 0 {
		return 0
	}
	if alg == ScaleAlgRoundUp {
		s := amax / E4M3Max
		u := math.Float32bits(s)
		exp := u >> 23 // biased
		mant := u & f32MantMask
		switch {
		case exp > 0 && exp < 254 && mant > 0:
			exp++
		case exp == 0 && mant > 1<<22: // subnormal with mantissa > 0.5
			exp++
		}
		return uint8(exp)
	}
	return E8M0FromExp(F32Exponent(amax) - E4M3Emax)
}

// MXQuantize quantizes x to E4M3 in blocks of `block` elements (the last
// block may be shorter, its missing elements counting as zeros), writing
// the elements to q (len(x)) and one E8M0 scale per block to scales
// (ceil(len(x)/block)): q[i] = E4M3(x[i] / 2^(scale-127)) with
// round-to-nearest-even and saturation.
func MXQuantize(q, scales []uint8, x []float32, block int, alg ScaleAlg) {
	nb := (len(x) + block - 1) / block
	if len(q) < len(x) || len(scales) < nb || block <= 0 {
		panic(fmt.Sprintf("quant: MXQuantize of %d elements into %d elements and %d scales (block %d)", len(x), len(q), len(scales), block))
	}
	for b := range nb {
		blk := x[b*block : min((b+1)*block, len(x))]
		var amax float32
		nan := false
		for _, v := range blk {
			a := float32(math.Abs(float64(v)))
			if a != a {
				nan = true
			}
			amax = max(amax, a)
		}
		if nan {
			amax = float32(math.NaN())
		}
		s := MXScale(amax, alg)
		if alg == ScaleAlgMSE {
			if up := MXScale(amax, ScaleAlgRoundUp); up != s && blockError(blk, up) < blockError(blk, s) {
				s = up
			}
		}
		scales[b] = s
		inv := mxInverse(s)
		for i, v := range blk {
			q[b*block+i] = E4M3FromF32(v * inv)
		}
	}
}

// blockError is the squared error of quantizing blk with scale s.
func blockError(blk []float32, s uint8) float64 {
	inv, sc := mxInverse(s), E8M0ToF32(s)
	var e float64
	for _, v := range blk {
		d := float64(E4M3ToF32(E4M3FromF32(v*inv))*sc) - float64(v)
		e += d * d
	}
	return e
}

// mxInverse is 1/2^(s-127) as a float32 (exact: 2^(127-s) lies in
// [2^-127, 2^127]); NaN for the NaN scale.
func mxInverse(s uint8) float32 {
	if s == E8M0NaN {
		return float32(math.NaN())
	}
	return float32(math.Ldexp(1, E8M0Bias-int(s)))
}

// MXDequantize expands E4M3 elements q with one E8M0 scale per block of
// `block` elements into dst: dst[i] = E4M3(q[i]) * 2^(scales[i/block]-127).
// Every product is exact in float32 except where it underflows below
// 2^-149 (an E4M3 subnormal times a scale under 2^-140).
func MXDequantize(dst []float32, q, scales []uint8, block int) {
	if len(q) < len(dst) || len(scales) < (len(dst)+block-1)/block {
		panic(fmt.Sprintf("quant: MXDequantize %d elements from %d and %d scales", len(dst), len(q), len(scales)))
	}
	for i := range dst {
		dst[i] = E4M3ToF32(q[i]) * E8M0ToF32(scales[i/block])
	}
}

// MXFakeQuant replaces x by its MX quantize-dequantize round trip in
// place, block by block (what a device computes with after
// npu_dynamic_mx_quant, in float32).
func MXFakeQuant(x []float32, block int, alg ScaleAlg) {
	var q [1024]uint8
	var s [1024 / MXBlock]uint8
	step := len(q) / block * block
	if step == 0 || block > len(s)*MXBlock {
		panic(fmt.Sprintf("quant: MXFakeQuant block %d", block))
	}
	for lo := 0; lo < len(x); lo += step {
		chunk := x[lo:min(lo+step, len(x))]
		MXQuantize(q[:], s[:], chunk, block, alg)
		MXDequantize(chunk, q[:], s[:], block)
	}
}
