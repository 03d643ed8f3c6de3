package cpu

import (
	"fmt"
	"math"
	"sync"

	"github.com/npuserve/npuserve/npu"
)

// Copy copies src to dst (same element count), converting between F32,
// BF16, F16 and I32. Tensors of any other dtype are copied byte for byte
// when both sides have the same dtype. Float to I32 truncates toward zero,
// saturating at the int32 range, with NaN giving 0.
func (be *Backend) Copy(dst, src *npu.Tensor) {
	if dst.Numel() != src.Numel() {
		panic(fmt.Sprintf("cpu: Copy %v into %v: element counts differ", src, dst))
	}
	if dst.DType() != src.DType() {
		checkConvertible("Copy", dst.DType(), src.DType())
	}
	d, s := bytesOf(dst), bytesOf(src)
	n := dst.Numel()
	dsz, ssz := dst.DType().Size(), src.DType().Size()
	be.parallelFor(n, 1<<16, func(lo, hi int) {
		convertBytes(d[lo*dsz:hi*dsz], dst.DType(), s[lo*ssz:hi*ssz], src.DType())
	})
}

// Fill sets every element of dst to v. dst is F32 (BF16 and F16 are also
// accepted and receive v rounded to nearest even).
func (be *Backend) Fill(dst *npu.Tensor, v float32) {
	switch dst.DType() {
	case npu.F32:
		d := F32(dst)
		be.parallelFor(len(d), 1<<16, func(lo, hi int) {
			s := d[lo:hi]
			for i := range s {
				s[i] = v
			}
		})
	case npu.BF16, npu.F16:
		h := npu.F32ToBF16(v)
		if dst.DType() == npu.F16 {
			h = npu.F32ToF16(v)
		}
		d := U16(dst)
		be.parallelFor(len(d), 1<<16, func(lo, hi int) {
			s := d[lo:hi]
			for i := range s {
				s[i] = h
			}
		})
	default:
		panic(fmt.Sprintf("cpu: Fill of %v: want F32, BF16 or F16", dst))
	}
}

// checkConvertible panics unless the converting op converts src to dst
// (npu.Convertible).
func checkConvertible(op string, dst, src npu.DType) {
	if !npu.Convertible(dst, src) {
		panic(fmt.Sprintf("cpu: %s cannot convert %v to %v", op, src, dst))
	}
}

// convertBytes converts the elements of s (dtype sdt) into d (dtype ddt);
// both hold the same number of elements. Equal dtypes copy bytes.
func convertBytes(d []byte, ddt npu.DType, s []byte, sdt npu.DType) {
	if ddt == sdt {
		copy(d, s)
		return
	}
	switch ddt {
	case npu.F32:
		toF32(f32s(d), s, sdt)
	case npu.BF16, npu.F16:
		dh := u16s(d)
		switch sdt {
		case npu.F32:
			npu.NarrowHalf(dh, ddt, f32s(s))
		case npu.BF16, npu.F16:
			sh := u16s(s)
			if ddt == npu.BF16 {
				for i, h := range sh {
					dh[i] = npu.F32ToBF16(npu.F16ToF32(h))
				}
			} else {
				for i, h := range sh {
					dh[i] = npu.F32ToF16(npu.BF16ToF32(h))
				}
			}
		case npu.I32:
			si := i32s(s)
			for i, v := range si {
				if ddt == npu.BF16 {
					dh[i] = npu.F32ToBF16(float32(v))
				} else {
					dh[i] = npu.F32ToF16(float32(v))
				}
			}
		default:
			panic(fmt.Sprintf("cpu: cannot convert %v to %v", sdt, ddt))
		}
	case npu.I32:
		di := i32s(d)
		switch sdt {
		case npu.F32:
			for i, v := range f32s(s) {
				di[i] = f32ToI32(v)
			}
		case npu.BF16:
			for i, h := range u16s(s) {
				di[i] = f32ToI32(npu.BF16ToF32(h))
			}
		case npu.F16:
			for i, h := range u16s(s) {
				di[i] = f32ToI32(npu.F16ToF32(h))
			}
		default:
			panic(fmt.Sprintf("cpu: cannot convert %v to %v", sdt, ddt))
		}
	default:
		panic(fmt.Sprintf("cpu: cannot convert %v to %v", sdt, ddt))
	}
}

// toF32 widens the elements of s (dtype sdt: F32, BF16, F16, I32 or
// F8E4M3) into d.
func toF32(d []float32, s []byte, sdt npu.DType) {
	switch sdt {
	case npu.F32:
		copy(d, f32s(s))
	case npu.BF16:
		i := 0
		if vecAVX512() {
			i = bf16ToF32SIMD(d, s)
		}
		sh := u16s(s)
		sh = sh[i:len(d)]
		for j, h := range sh {
			d[i+j] = math.Float32frombits(uint32(h) << 16)
		}
	case npu.F16:
		sh := u16s(s)
		sh = sh[:len(d)]
		tab := f16Table()
		for i, h := range sh {
			d[i] = tab[h]
		}
	case npu.I32:
		si := i32s(s)
		si = si[:len(d)]
		for i, v := range si {
			d[i] = float32(v)
		}
	case npu.F8E4M3:
		s = s[:len(d)]
		for i, b := range s {
			d[i] = npu.E4M3ToF32(b)
		}
	default:
		panic(fmt.Sprintf("cpu: cannot convert %v to F32", sdt))
	}
}

// f32ToI32 truncates toward zero, saturating; NaN gives 0.
func f32ToI32(v float32) int32 {
	switch {
	case v != v:
		return 0
	case v >= 2147483648:
		return math.MaxInt32
	case v <= -2147483648:
		return math.MinInt32
	}
	return int32(v)
}

// f16Table returns the widening of every IEEE half bit pattern (256 KiB,
// built on first use) so that converting F16 costs one load per element.
var f16Table = sync.OnceValue(func() *[1 << 16]float32 {
	t := new([1 << 16]float32)
	for i := range t {
		t[i] = npu.F16ToF32(uint16(i))
	}
	return t
})

// rowF32 returns the n elements of t starting at element off as float32:
// an alias of t's memory when t is F32, else a conversion into buf (which
// must hold n elements).
func rowF32(t *npu.Tensor, off, n int, buf []float32) []float32 {
	b := bytesOf(t)
	sz := t.DType().Size()
	s := b[off*sz : (off+n)*sz]
	if t.DType() == npu.F32 {
		return f32s(s)
	}
	toF32(buf[:n], s, t.DType())
	return buf[:n]
}

// weightF32 returns all of t as float32 (alias when F32, else a converted
// copy): for small per-channel weights.
func weightF32(t *npu.Tensor) []float32 {
	if t.DType() == npu.F32 {
		return F32(t)
	}
	if !t.DType().IsFloat() {
		panic(fmt.Sprintf("cpu: want a float weight, got %v", t))
	}
	n := t.Numel()
	return rowF32(t, 0, n, make([]float32, n))
}
