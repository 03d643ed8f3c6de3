package npu

import (
	"fmt"
	"sync"
)

// QScheme is the arithmetic of a quantized matmul weight, one per
// msmodelslim scheme vllm-ascend computes with.
type QScheme uint8

const (
	// QNone is the zero value: not a valid quantized weight.
	QNone QScheme = iota
	// QW8A8Dynamic (W8A8_DYNAMIC): int8 weights with a float scale per
	// output channel; activations are quantized to int8 per row (token)
	// at run time, symmetric with scale max|x|/127 (npu_dynamic_quant);
	// out = (xq·wq) * xscale[m] * Scale[n].
	QW8A8Dynamic
	// QW8A8 (W8A8, static): int8 weights; activations are quantized
	// per tensor with a calibrated scale and zero point,
	// xq = clamp(rint(x / InputScale + InputOffset), -128, 127)
	// (npu_quantize); out = (xq·wq + QuantBias[n]) * DeqScale[n]
	// (npu_quant_matmul with an int32 bias).
	QW8A8
	// QMXFP8 (W8A8_MXFP8): E4M3 weights with one E8M0 scale per block of
	// GroupSize along K; activations are MX-quantized to E4M3 per block
	// at run time with ScaleAlg (npu_dynamic_mx_quant); out = sum over
	// blocks of the blocks' scales times the E4M3 dot products.
	QMXFP8
	// QFP8Block (FP8_BLOCK128, the HF/DeepSeek "fp8" checkpoints with
	// weight_block_size [128, 128]): E4M3 weights [N, K] or [E, N, K]
	// with one F32 scale per 128x128 weight block (weight_scale_inv,
	// [ceil(N/128), ceil(K/128)] or [E, ...]); activations are quantized
	// at run time per token per 128 columns to E4M3 with scale
	// s = max(amax/448, 1e-12) (DeepSeek's act_quant); out[m, n] = sum
	// over k blocks kb of xs[m, kb] * Scale[n/128, kb] times the E4M3 dot
	// product of x's and w's block.
	QFP8Block
)

// FP8Block is the FP8_BLOCK128 block edge: weight blocks are
// FP8Block x FP8Block, activation groups FP8Block columns.
const FP8Block = 128

// String is the msmodelslim scheme name (FP8_BLOCK128 for the HF block
// FP8 checkpoints, which msmodelslim does not name).
func (s QScheme) String() string {
	switch s {
	case QW8A8Dynamic:
		return "W8A8_DYNAMIC"
	case QW8A8:
		return "W8A8"
	case QMXFP8:
		return "W8A8_MXFP8"
	case QFP8Block:
		return "FP8_BLOCK128"
	}
	return fmt.Sprintf("QScheme(%d)", int(s))
}

// QuantSupporter is implemented by backends that support only some
// quantization schemes on some devices (W8A8_MXFP8 needs an Ascend 950):
// SupportsQuant says why s cannot run here, or returns nil.
type QuantSupporter interface {
	SupportsQuant(s QScheme) error
}

// SupportsQuant reports whether be can run scheme s (a backend without
// QuantSupporter runs them all).
func SupportsQuant(be Backend, s QScheme) error {
	if q, ok := be.(QuantSupporter); ok {
		return q.SupportsQuant(s)
	}
	return nil
}

// QuantWeight is a quantized matmul weight in PyTorch Linear layout: one
// linear [N, K], or a stack of E experts [E, N, K] for the grouped MoE op.
// Its tensors are in checkpoint form; Backend.PrepareQuant converts them to
// the backend's compute layout (vllm-ascend's process_weights_after_loading:
// transposes, NZ format, packed panels on the CPU), which MatMulQ and MoEQ
// use. The tensors must stay alive and unchanged while the weight is used.
type QuantWeight struct {
	Scheme QScheme
	// Weight holds I8 (W8A8, W8A8_DYNAMIC) or F8E4M3 (MXFP8,
	// FP8_BLOCK128) elements, [N, K] or [E, N, K].
	Weight *Tensor
	// Scale is the per-output-channel scale of W8A8_DYNAMIC (F32 [N] or
	// [E, N]) or the E8M0 block scales of MXFP8 (U8 [N, ceil(K/GroupSize)]
	// or [E, N, ceil(K/GroupSize)]), or the F32 block scales of
	// FP8_BLOCK128, one per GroupSize x GroupSize weight block
	// ([ceil(N/128), ceil(K/128)] or [E, ceil(N/128), ceil(K/128)]), by
	// which the E4M3 values are multiplied; nil for static W8A8.
	Scale *Tensor
	// InputScale and InputOffset are static W8A8's per-tensor activation
	// scale and zero point.
	InputScale  float32
	InputOffset int32
	// QuantBias (I32 [N]) and DeqScale (F32 [N]) are static W8A8's folded
	// bias and dequantisation scale.
	QuantBias, DeqScale *Tensor
	// GroupSize is the MX block along K (32), or the FP8_BLOCK128 block
	// edge (128, for both the weight blocks and the activation groups).
	GroupSize int
	// ScaleAlg is the MX activation scale algorithm: 0 = OCP (shared
	// exponent floor(log2(amax)) - 8), 1 = amax/448 rounded up to a power
	// of two (CANN DynamicMxQuant's scale_alg).
	ScaleAlg int

	mu       sync.Mutex
	prepared any
}

// Experts is E for a grouped weight and 0 for a linear.
func (w *QuantWeight) Experts() int {
	if w.Weight.Rank() == 3 {
		return w.Weight.Dim(0)
	}
	return 0
}

// N is the number of output channels (per expert).
func (w *QuantWeight) N() int { return w.Weight.Dim(-2) }

// K is the input width.
func (w *QuantWeight) K() int { return w.Weight.Dim(-1) }

// Prepared returns the backend's compute form (nil before PrepareQuant).
func (w *QuantWeight) Prepared() any {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.prepared
}

// PrepareOnce stores the result of make as the backend's compute form
// unless one is already stored, and returns the stored form. Backends
// call it from PrepareQuant (and lazily from the ops).
func (w *QuantWeight) PrepareOnce(make func() any) any {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.prepared == nil {
		w.prepared = make()
	}
	return w.prepared
}

// String describes the weight for errors and logs.
func (w *QuantWeight) String() string {
	return fmt.Sprintf("%v %v", w.Scheme, w.Weight)
}

// Check validates the tensors against the scheme (dtypes and shapes); a
// mismatch is a programming error in the caller, reported as an error so
// that loaders can name the checkpoint tensor.
func (w *QuantWeight) Check() error {
	if w.Weight == nil || (w.Weight.Rank() != 2 && w.Weight.Rank() != 3) {
		return fmt.Errorf("quantized weight must be [N, K] or [E, N, K], got %v", w.Weight)
	}
	lead := w.Weight.Shape()[:w.Weight.Rank()-1] // [N] or [E, N]
	want := func(t *Tensor, name string, dt DType, shape ...int) error {
		if t == nil {
			return fmt.Errorf("%v weight %v needs %s", w.Scheme, w.Weight, name)
		}
		if t.DType() != dt || !SameShape(t.Shape(), shape) {
			return fmt.Errorf("%v weight %v: %s is %v, want %v%v", w.Scheme, w.Weight, name, t, dt, shape)
		}
		return nil
	}
	switch w.Scheme {
	case QW8A8Dynamic:
		if w.Weight.DType() != I8 {
			return fmt.Errorf("W8A8_DYNAMIC weight must be I8, got %v", w.Weight)
		}
		return want(w.Scale, "Scale", F32, lead...)
	case QW8A8:
		if w.Weight.DType() != I8 || w.Weight.Rank() != 2 {
			return fmt.Errorf("static W8A8 weight must be I8 [N, K], got %v", w.Weight)
		}
		if !(w.InputScale > 0) || w.InputOffset < -128 || w.InputOffset > 127 {
			return fmt.Errorf("static W8A8 weight %v: input scale %v and offset %d out of range", w.Weight, w.InputScale, w.InputOffset)
		}
		if err := want(w.QuantBias, "QuantBias", I32, w.N()); err != nil {
			return err
		}
		return want(w.DeqScale, "DeqScale", F32, w.N())
	case QMXFP8:
		if w.Weight.DType() != F8E4M3 {
			return fmt.Errorf("W8A8_MXFP8 weight must be F8_E4M3, got %v", w.Weight)
		}
		if w.GroupSize <= 0 || w.GroupSize%32 != 0 {
			return fmt.Errorf("W8A8_MXFP8 weight %v: group size %d is not a positive multiple of 32", w.Weight, w.GroupSize)
		}
		if w.ScaleAlg != 0 && w.ScaleAlg != 1 {
			return fmt.Errorf("W8A8_MXFP8 weight %v: scale algorithm %d (want 0 or 1)", w.Weight, w.ScaleAlg)
		}
		return want(w.Scale, "Scale", U8, append(append([]int(nil), lead...), (w.K()+w.GroupSize-1)/w.GroupSize)...)
	case QFP8Block:
		if w.Weight.DType() != F8E4M3 {
			return fmt.Errorf("FP8_BLOCK128 weight must be F8_E4M3, got %v", w.Weight)
		}
		if w.GroupSize != FP8Block {
			return fmt.Errorf("FP8_BLOCK128 weight %v: group size %d (want %d)", w.Weight, w.GroupSize, FP8Block)
		}
		shape := []int{(w.N() + FP8Block - 1) / FP8Block, (w.K() + FP8Block - 1) / FP8Block}
		if w.Experts() > 0 {
			shape = append([]int{w.Experts()}, shape...)
		}
		return want(w.Scale, "Scale", F32, shape...)
	}
	return fmt.Errorf("quantized weight %v has no scheme", w.Weight)
}
