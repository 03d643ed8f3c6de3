package quant

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/npuserve/npuserve/npu"
)

// Tensor is one checkpoint tensor of a quantized linear: the suffix after
// the module prefix ("weight", "weight_scale", ...), dtype, shape and
// little-endian data.
type Tensor struct {
	Suffix string
	DType  npu.DType
	Shape  []int
	Data   []byte
}

// LinearOptions configure QuantizeLinear.
type LinearOptions struct {
	// ParamsDType is the model's dtype (BF16, F16 or F32): vllm-ascend's
	// params_dtype, the dtype of weight_scale, weight_offset and
	// input_scale. deq_scale is F32, or I64 (float32 bits) for F16 models.
	ParamsDType npu.DType
	// ActMin and ActMax are the calibrated input range of a static W8A8
	// linear.
	ActMin, ActMax float32
	// GroupSize is the MX block (0: 32).
	GroupSize int
	// ScaleAlg is the MX scale algorithm for the weights.
	ScaleAlg ScaleAlg
}

// QuantizeLinear quantizes a linear weight w [n, k] (row-major, PyTorch
// Linear layout) with scheme s and returns its checkpoint tensors in
// msmodelslim's names, dtypes and shapes (serving-compat.md §4):
//
//	W8A8_DYNAMIC: weight I8 [n,k]; weight_scale, weight_offset params [n,1]
//	W8A8:         the same plus input_scale params [1], input_offset I8 [1],
//	              quant_bias I32 [n], deq_scale F32 [n] (I64 for F16 models)
//	W8A8_MXFP8:   weight F8_E4M3 [n,k]; weight_scale U8 [n, ceil(k/group)]
//
// Weights are quantized symmetrically per output channel (zero
// weight_offset). For W8A8 the activation range maps asymmetrically onto
// int8; deq_scale = input_scale * weight_scale and quant_bias =
// -input_offset * sum_k q[n,k] use the stored (rounded) scales, so the
// device computes (sum_k xq*q + quant_bias) * deq_scale exactly as
// vllm-ascend's npu_quant_matmul does.
func QuantizeLinear(w []float32, n, k int, s Scheme, opt LinearOptions) ([]Tensor, error) {
	if len(w) != n*k {
		return nil, fmt.Errorf("quant: weight of %d values is not [%d, %d]", len(w), n, k)
	}
	pdt := opt.ParamsDType
	switch pdt {
	case npu.BF16, npu.F16, npu.F32:
	default:
		return nil, fmt.Errorf("quant: params dtype %v (want BF16, F16 or F32)", pdt)
	}
	switch s {
	case W8A8Dynamic, W8A8:
		q := make([]int8, n*k)
		ps := Matrix(q, w, n, k, PerChannel, true)
		wscale := make([]float32, n)
		for i, p := range ps {
			wscale[i] = RoundTo(p.Scale, pdt)
		}
		out := []Tensor{
			{"weight", npu.I8, []int{n, k}, int8Bytes(q)},
			{"weight_scale", pdt, []int{n, 1}, npu.EncodeFloats(wscale, pdt)},
			{"weight_offset", pdt, []int{n, 1}, npu.EncodeFloats(make([]float32, n), pdt)},
		}
		if s == W8A8Dynamic {
			return out, nil
		}
		ap := AsymParams(opt.ActMin, opt.ActMax)
		if ap.Scale == 0 {
			ap.Scale = 1 // an all-zero input: any scale is exact
		}
		inScale := RoundTo(ap.Scale, pdt)
		qbias := make([]int32, n)
		deq := make([]float32, n)
		for r := range n {
			var sum int32
			for _, v := range q[r*k : (r+1)*k] {
				sum += int32(v)
			}
			qbias[r] = -ap.Offset * sum
			deq[r] = inScale * wscale[r]
		}
		deqT := Tensor{"deq_scale", npu.F32, []int{n}, npu.EncodeFloats(deq, npu.F32)}
		if pdt == npu.F16 {
			deqT = Tensor{"deq_scale", npu.I64, []int{n}, deqScaleI64(deq)}
		}
		return append(out,
			Tensor{"input_scale", pdt, []int{1}, npu.EncodeFloats([]float32{inScale}, pdt)},
			Tensor{"input_offset", npu.I8, []int{1}, []byte{byte(int8(ap.Offset))}},
			Tensor{"quant_bias", npu.I32, []int{n}, npu.EncodeInt32s(qbias)},
			deqT,
		), nil
	case W8A8MXFP8:
		g := opt.GroupSize
		if g == 0 {
			g = MXBlock
		}
		nb := (k + g - 1) / g
		q := make([]uint8, n*k)
		sc := make([]uint8, n*nb)
		for r := range n {
			MXQuantize(q[r*k:(r+1)*k], sc[r*nb:(r+1)*nb], w[r*k:(r+1)*k], g, opt.ScaleAlg)
		}
		return []Tensor{
			{"weight", npu.F8E4M3, []int{n, k}, q},
			{"weight_scale", npu.U8, []int{n, nb}, sc},
		}, nil
	}
	return nil, fmt.Errorf("quant: cannot quantize a linear with scheme %q", s)
}

// RoundTo rounds f to the precision of dt (BF16, F16 or F32), as storing
// it in a tensor of that dtype does.
func RoundTo(f float32, dt npu.DType) float32 {
	switch dt {
	case npu.BF16:
		return npu.BF16ToF32(npu.F32ToBF16(f))
	case npu.F16:
		return npu.F16ToF32(npu.F32ToF16(f))
	}
	return f
}

// DecodeFloats reads little-endian F32, BF16 or F16 elements, and I64
// deq_scale values (float32 bits in the low 32 bits, as msmodelslim
// writes deq_scale for F16 models).
func DecodeFloats(b []byte, dt npu.DType) ([]float32, error) {
	if dt != npu.I64 {
		return npu.DecodeFloats(b, dt)
	}
	if len(b)%8 != 0 {
		return nil, fmt.Errorf("quant: %d bytes are not %v elements", len(b), dt)
	}
	out := make([]float32, len(b)/8)
	for i := range out {
		out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint64(b[8*i:])))
	}
	return out, nil
}

// deqScaleI64 packs float32 deq_scale values as int64 with the float
// bits in the low 32 bits (msmodelslim's format for F16 models).
func deqScaleI64(f []float32) []byte {
	out := make([]byte, 8*len(f))
	for i, v := range f {
		binary.LittleEndian.PutUint64(out[8*i:], uint64(math.Float32bits(v)))
	}
	return out
}

func int8Bytes(q []int8) []byte {
	out := make([]byte, len(q))
	for i, v := range q {
		out[i] = byte(v)
	}
	return out
}

// DequantizeLinear rebuilds the float weight [n, k] from a quantized
// linear's tensors (by suffix): int8 weights times weight_scale (minus
// weight_offset), MXFP8 weights times their scales per block of group
// (0: 32) along k. It serves
// weights that an op other than a matmul consumes (and tests).
func DequantizeLinear(s Scheme, t map[string]Tensor, n, k, group int) ([]float32, error) {
	w, ok := t["weight"]
	if !ok || len(w.Data) != n*k {
		return nil, fmt.Errorf("quant: missing or mis-sized weight for [%d, %d]", n, k)
	}
	out := make([]float32, n*k)
	switch s {
	case W8A8, W8A8Dynamic:
		sc, err := DecodeFloats(t["weight_scale"].Data, t["weight_scale"].DType)
		if err != nil || len(sc) != n {
			return nil, fmt.Errorf("quant: weight_scale: want %d values (%v)", n, err)
		}
		off := make([]float32, n)
		if o, ok := t["weight_offset"]; ok {
			if off, err = DecodeFloats(o.Data, o.DType); err != nil || len(off) != n {
				return nil, fmt.Errorf("quant: weight_offset: want %d values (%v)", n, err)
			}
		}
		for r := range n {
			for c := range k {
				out[r*k+c] = (float32(int8(w.Data[r*k+c])) - off[r]) * sc[r]
			}
		}
	case W8A8MXFP8:
		sc := t["weight_scale"]
		if group <= 0 {
			group = MXBlock
		}
		nb := (k + group - 1) / group
		if len(sc.Data) != n*nb {
			return nil, fmt.Errorf("quant: weight_scale of %d bytes, want [%d, %d]", len(sc.Data), n, nb)
		}
		for r := range n {
			MXDequantize(out[r*k:(r+1)*k], w.Data[r*k:(r+1)*k], sc.Data[r*nb:(r+1)*nb], group)
		}
	default:
		return nil, fmt.Errorf("quant: cannot dequantize scheme %q", s)
	}
	return out, nil
}
