package npu

import (
	"encoding/binary"
	"fmt"
	"math"
)

// EncodeFloats writes f as little-endian elements of dt (F32, BF16 or F16,
// rounding to nearest even): host bytes for Upload/FromHost and
// checkpoint files.
func EncodeFloats(f []float32, dt DType) []byte {
	out := make([]byte, len(f)*dt.Size())
	switch dt {
	case F32:
		for i, v := range f {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
		}
	case BF16:
		for i, v := range f {
			binary.LittleEndian.PutUint16(out[2*i:], F32ToBF16(v))
		}
	case F16:
		for i, v := range f {
			binary.LittleEndian.PutUint16(out[2*i:], F32ToF16(v))
		}
	default:
		panic(fmt.Sprintf("npu: EncodeFloats to %v", dt))
	}
	return out
}

// DecodeFloats reads little-endian F32, BF16 or F16 elements.
func DecodeFloats(b []byte, dt DType) ([]float32, error) {
	switch dt {
	case F32, BF16, F16:
	default:
		return nil, fmt.Errorf("npu: cannot read %v as floats", dt)
	}
	if len(b)%dt.Size() != 0 {
		return nil, fmt.Errorf("npu: %d bytes are not %v elements", len(b), dt)
	}
	out := make([]float32, len(b)/dt.Size())
	switch dt {
	case F32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case BF16:
		for i := range out {
			out[i] = BF16ToF32(binary.LittleEndian.Uint16(b[2*i:]))
		}
	case F16:
		for i := range out {
			out[i] = F16ToF32(binary.LittleEndian.Uint16(b[2*i:]))
		}
	}
	return out, nil
}
