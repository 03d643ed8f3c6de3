package quant

import (
	"fmt"

	"github.com/npuserve/npuserve/npu"
)

// FP8BlockMinScale is the smallest block scale of FP8_BLOCK128
// activation quantization (DeepSeek's act_quant guards all-zero groups
// with it, so that x/s stays finite).
const FP8BlockMinScale = 1e-12

// FP8BlockScale is the FP8_BLOCK128 scale of a block whose largest
// magnitude is amax: amax/448, at least FP8BlockMinScale.
func FP8BlockScale(amax float32) float32 {
	return max(amax/E4M3Max, FP8BlockMinScale)
}

// FP8BlockQuantize quantizes a weight w [n, k] (row-major) in
// block x block tiles, as the HF "fp8" checkpoints with weight_block_size
// [block, block] store it: q[i] = E4M3(w[i] / s) and
// scales[(r/block)*kb + c/block] = s = FP8BlockScale(tile amax), with
// kb = ceil(k/block). q must hold n*k bytes and scales
// ceil(n/block)*kb floats.
func FP8BlockQuantize(q []uint8, scales []float32, w []float32, n, k, block int) error {
	if block <= 0 || n < 0 || k < 0 {
		return fmt.Errorf("quant: FP8BlockQuantize [%d, %d] block %d", n, k, block)
	}
	nb, kb := (n+block-1)/block, (k+block-1)/block
	if len(w) != n*k || len(q) != n*k || len(scales) != nb*kb {
		return fmt.Errorf("quant: FP8BlockQuantize [%d, %d] block %d: w %d, q %d, scales %d values", n, k, block, len(w), len(q), len(scales))
	}
	for bn := range nb {
		for bk := range kb {
			var amax float32
			for r := bn * block; r < min((bn+1)*block, n); r++ {
				amax = max(amax, AbsMax(w[r*k+bk*block:r*k+min((bk+1)*block, k)]))
			}
			s := FP8BlockScale(amax)
			scales[bn*kb+bk] = s
			for r := bn * block; r < min((bn+1)*block, n); r++ {
				for c := bk * block; c < min((bk+1)*block, k); c++ {
					q[r*k+c] = E4M3FromF32(w[r*k+c] / s)
				}
			}
		}
	}
	return nil
}

// FP8BlockDequantize is FP8BlockQuantize's inverse:
// dst[r*k+c] = E4M3(q[r*k+c]) * scales[(r/block)*kb + c/block].
func FP8BlockDequantize(dst []float32, q []uint8, scales []float32, n, k, block int) error {
	if block <= 0 || n < 0 || k < 0 {
		return fmt.Errorf("quant: FP8BlockDequantize [%d, %d] block %d", n, k, block)
	}
	kb := (k + block - 1) / block
	if len(dst) != n*k || len(q) != n*k || len(scales) != (n+block-1)/block*kb {
		return fmt.Errorf("quant: FP8BlockDequantize [%d, %d] block %d: dst %d, q %d, scales %d values", n, k, block, len(dst), len(q), len(scales))
	}
	for r := range n {
		srow := scales[(r/block)*kb : (r/block+1)*kb]
		for c := range k {
			dst[r*k+c] = npu.E4M3ToF32(q[r*k+c]) * srow[c/block]
		}
	}
	return nil
}

// FP8ActQuantize quantizes one activation row x per group of block
// columns as FP8_BLOCK128 does at run time (DeepSeek's act_quant):
// q[i] = E4M3(x[i] / s_g), scales[g] = FP8BlockScale(amax of group g).
// q must hold len(x) bytes and scales ceil(len(x)/block) floats.
func FP8ActQuantize(q []uint8, scales []float32, x []float32, block int) {
	for g := range (len(x) + block - 1) / block {
		blk := x[g*block : min((g+1)*block, len(x))]
		s := FP8BlockScale(AbsMax(blk))
		scales[g] = s
		for i, v := range blk {
			q[g*block+i] = E4M3FromF32(v / s)
		}
	}
}

// FP8ActFakeQuant replaces the row x in place by its FP8_BLOCK128
// activation quantization, dequantised: x[i] = E4M3(x[i]/s_g) * s_g.
// A float GEMM of fake-quantized activations and dequantised weights is
// the reference for (and the portable form of) the E4M3 block GEMM.
func FP8ActFakeQuant(x []float32, block int) {
	for lo := 0; lo < len(x); lo += block {
		blk := x[lo:min(lo+block, len(x))]
		s := FP8BlockScale(AbsMax(blk))
		for i, v := range blk {
			blk[i] = npu.E4M3ToF32(E4M3FromF32(v/s)) * s
		}
	}
}
