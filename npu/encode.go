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

// EncodeInt32s writes v as little-endian I32 elements.
func EncodeInt32s(v []int32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], uint32(x))
	}
	return out
}

// DownloadF32 copies an F32 tensor to the host: a synchronisation point.
func DownloadF32(m Memory, t *Tensor) ([]float32, error) {
	if t.DType() != F32 {
		panic(fmt.Sprintf("npu: DownloadF32 of %v", t))
	}
	b := make([]byte, t.Bytes())
	if len(b) > 0 {
		if err := m.Download(b, t); err != nil {
			return nil, err
		}
	}
	return DecodeFloats(b, F32)
}

// DownloadI32 copies an I32 tensor to the host: a synchronisation point.
func DownloadI32(m Memory, t *Tensor) ([]int32, error) {
	if t.DType() != I32 {
		panic(fmt.Sprintf("npu: DownloadI32 of %v", t))
	}
	b := make([]byte, t.Bytes())
	if len(b) > 0 {
		if err := m.Download(b, t); err != nil {
			return nil, err
		}
	}
	out := make([]int32, t.Numel())
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out, nil
}

// MustF32 is DownloadF32 that panics on failure, for tests.
func MustF32(m Memory, t *Tensor) []float32 {
	f, err := DownloadF32(m, t)
	if err != nil {
		panic(err)
	}
	return f
}

// MustI32 is DownloadI32 that panics on failure, for tests.
func MustI32(m Memory, t *Tensor) []int32 {
	v, err := DownloadI32(m, t)
	if err != nil {
		panic(err)
	}
	return v
}
