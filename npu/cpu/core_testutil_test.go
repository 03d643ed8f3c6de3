package cpu

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

// Helpers shared by this package's op tests: host <-> tensor conversion
// with float64 values and tolerance checks against float64 references.

// quantize rounds v to what dtype dt can hold, as float64.
func coreQuantize(v float64, dt npu.DType) float64 {
	switch dt {
	case npu.F32:
		return float64(float32(v))
	case npu.BF16:
		return float64(npu.BF16ToF32(npu.F32ToBF16(float32(v))))
	case npu.F16:
		return float64(npu.F16ToF32(npu.F32ToF16(float32(v))))
	case npu.I32:
		return float64(f32ToI32(float32(v)))
	}
	panic("quantize: unsupported dtype")
}

// encode stores values as little-endian elements of dt.
func coreEncode(vals []float64, dt npu.DType) []byte {
	b := make([]byte, len(vals)*dt.Size())
	for i, v := range vals {
		switch dt {
		case npu.F32:
			binary.LittleEndian.PutUint32(b[i*4:], math.Float32bits(float32(v)))
		case npu.BF16:
			binary.LittleEndian.PutUint16(b[i*2:], npu.F32ToBF16(float32(v)))
		case npu.F16:
			binary.LittleEndian.PutUint16(b[i*2:], npu.F32ToF16(float32(v)))
		case npu.I32:
			binary.LittleEndian.PutUint32(b[i*4:], uint32(int32(v)))
		default:
			panic("encode: unsupported dtype")
		}
	}
	return b
}

// decode reads little-endian elements of dt as float64.
func coreDecode(b []byte, dt npu.DType) []float64 {
	n := len(b) / dt.Size()
	out := make([]float64, n)
	for i := range out {
		switch dt {
		case npu.F32:
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[i*4:])))
		case npu.BF16:
			out[i] = float64(npu.BF16ToF32(binary.LittleEndian.Uint16(b[i*2:])))
		case npu.F16:
			out[i] = float64(npu.F16ToF32(binary.LittleEndian.Uint16(b[i*2:])))
		case npu.I32:
			out[i] = float64(int32(binary.LittleEndian.Uint32(b[i*4:])))
		default:
			panic("decode: unsupported dtype")
		}
	}
	return out
}

// coreTensor uploads vals as a new tensor of dtype dt.
func coreTensor(be *Backend, dt npu.DType, vals []float64, shape ...int) *npu.Tensor {
	t := npu.Must(be.Alloc(dt, shape...))
	if t.Numel() != len(vals) {
		panic("coreTensor: shape does not match values")
	}
	if err := be.Upload(t, coreEncode(vals, dt)); err != nil {
		panic(err)
	}
	return t
}

// coreValues downloads t as float64.
func coreValues(be *Backend, t *npu.Tensor) []float64 {
	b := make([]byte, t.Bytes())
	if err := be.Download(b, t); err != nil {
		panic(err)
	}
	return coreDecode(b, t.DType())
}

// coreRand returns n values uniform in [-s, s), rounded to dtype dt.
func coreRand(rng *rand.Rand, n int, s float64, dt npu.DType) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = coreQuantize((rng.Float64()*2-1)*s, dt)
	}
	return v
}

// coreClose fails when got[i] and want[i] differ by more than
// rtol*(|want[i]|+scale[i]) (scale may be nil), NaNs matching NaNs.
func coreClose(t *testing.T, what string, got, want, scale []float64, rtol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d values, want %d", what, len(got), len(want))
	}
	bad := 0
	for i := range got {
		g, w := got[i], want[i]
		if math.IsNaN(w) || math.IsNaN(g) {
			if math.IsNaN(w) != math.IsNaN(g) {
				t.Errorf("%s[%d] = %v, want %v", what, i, g, w)
				bad++
			}
		} else if math.IsInf(w, 0) || math.IsInf(g, 0) {
			if g != w {
				t.Errorf("%s[%d] = %v, want %v", what, i, g, w)
				bad++
			}
		} else {
			tol := math.Abs(w)
			if scale != nil {
				tol += scale[i]
			}
			if math.Abs(g-w) > rtol*tol+1e-30 {
				t.Errorf("%s[%d] = %.9g, want %.9g (diff %.3g, tol %.3g)", what, i, g, w, math.Abs(g-w), rtol*tol)
				bad++
			}
		}
		if bad >= 5 {
			t.Fatalf("%s: too many mismatches", what)
		}
	}
}

// coreThreads are the thread counts the op tests run with.
var coreThreads = []int{1, 3}
