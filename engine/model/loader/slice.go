package loader

import (
	"fmt"

	"github.com/npuserve/npuserve/npu"
)

// Slice selects part of a checkpoint tensor along one dimension: the
// concatenation, in order, of Ranges of indices along Dim. A rank of a
// tensor- or expert-parallel deployment loads only its slices: a
// column-parallel weight is a row range, a row-parallel one a column range,
// per-head pieces are ranges of head blocks, a fused q|k|v tensor takes one
// range in each third, an expert-parallel rank a range of experts.
type Slice struct {
	Dim    int
	Ranges []Range
}

// Range is the half-open index range [Lo, Hi).
type Range struct{ Lo, Hi int }

// Rows selects indices [lo, hi) of dimension 0.
func Rows(lo, hi int) *Slice { return &Slice{Dim: 0, Ranges: []Range{{lo, hi}}} }

// Along selects the concatenation of ranges of dimension dim.
func Along(dim int, ranges ...Range) *Slice { return &Slice{Dim: dim, Ranges: ranges} }

// String describes the slice for messages, e.g. "dim 1 [0:32 64:96]".
func (s *Slice) String() string {
	out := fmt.Sprintf("dim %d [", s.Dim)
	for i, r := range s.Ranges {
		if i > 0 {
			out += " "
		}
		out += fmt.Sprintf("%d:%d", r.Lo, r.Hi)
	}
	return out + "]"
}

// Shape is the shape of the slice of a tensor of shape full, or an error
// when the slice does not fit it.
func (s *Slice) Shape(full []int) ([]int, error) {
	if s.Dim < 0 || s.Dim >= len(full) {
		return nil, fmt.Errorf("slice %v of a %d-D tensor", s, len(full))
	}
	if len(s.Ranges) == 0 {
		return nil, fmt.Errorf("slice %v selects nothing", s)
	}
	n := 0
	for _, r := range s.Ranges {
		if r.Lo < 0 || r.Hi > full[s.Dim] || r.Lo >= r.Hi {
			return nil, fmt.Errorf("slice %v outside dimension %d of shape %v (or empty)", s, s.Dim, fmtShape(full))
		}
		n += r.Hi - r.Lo
	}
	out := append([]int(nil), full...)
	out[s.Dim] = n
	return out, nil
}

// Cut returns the slice's elements of data, a row-major tensor of shape
// full with elements of elemSize bytes. When the selection is one
// contiguous run of data (a range of the outermost dimension that is
// larger than one, or any selection whose outer dimensions are all 1) the
// result is a subslice of data, else a new buffer.
func (s *Slice) Cut(data []byte, full []int, elemSize int) []byte {
	if _, err := s.Shape(full); err != nil {
		panic("loader: " + err.Error())
	}
	outer, inner := 1, elemSize
	for i, d := range full {
		switch {
		case i < s.Dim:
			outer *= d
		case i > s.Dim:
			inner *= d
		}
	}
	rs := mergeRanges(s.Ranges)
	stride := full[s.Dim] * inner
	if outer == 1 && len(rs) == 1 {
		return data[rs[0].Lo*inner : rs[0].Hi*inner]
	}
	n := 0
	for _, r := range rs {
		n += r.Hi - r.Lo
	}
	out := make([]byte, 0, outer*n*inner)
	for o := range outer {
		base := o * stride
		for _, r := range rs {
			out = append(out, data[base+r.Lo*inner:base+r.Hi*inner]...)
		}
	}
	return out
}

// Blocks is the slice of the block index that s selects when dimension
// Dim (of length full) is cut into blocks of block elements (the scale
// tensor of a block-scaled weight): every range must start on a block
// boundary and end on one, or at full (the last range only, so that only
// the final block may be partial). An error names the misaligned range.
func (s *Slice) Blocks(block, full int) (*Slice, error) {
	out := &Slice{Dim: s.Dim}
	for i, r := range s.Ranges {
		last := i == len(s.Ranges)-1
		if r.Lo%block != 0 || (r.Hi%block != 0 && !(last && r.Hi == full)) {
			return nil, fmt.Errorf("slice %v: range [%d:%d] of dimension %d (length %d) does not start and end on multiples of the %d-element block", s, r.Lo, r.Hi, s.Dim, full, block)
		}
		out.Ranges = append(out.Ranges, Range{Lo: r.Lo / block, Hi: (r.Hi + block - 1) / block})
	}
	return out, nil
}

// indices lists the selected indices of dimension Dim in order.
func (s *Slice) indices() []int {
	var idx []int
	for _, r := range s.Ranges {
		for i := r.Lo; i < r.Hi; i++ {
			idx = append(idx, i)
		}
	}
	return idx
}

// mergeRanges joins ranges that follow each other (order kept).
func mergeRanges(rs []Range) []Range {
	out := []Range{rs[0]}
	for _, r := range rs[1:] {
		if last := &out[len(out)-1]; last.Hi == r.Lo {
			last.Hi = r.Hi
			continue
		}
		out = append(out, r)
	}
	return out
}

// dequantFP8Slice is dequantFP8 of the part of a [rows, cols] block-scaled
// weight that s selects (dimension 0 or 1): only the selected elements are
// read.
func dequantFP8Slice(q []byte, rows, cols int, scale []float32, s *Slice) []float32 {
	ri, ci := seq(rows), seq(cols)
	if s.Dim == 0 {
		ri = s.indices()
	} else {
		ci = s.indices()
	}
	sc := (cols + FP8Block - 1) / FP8Block
	out := make([]float32, 0, len(ri)*len(ci))
	for _, i := range ri {
		srow, qrow := scale[(i/FP8Block)*sc:], q[i*cols:(i+1)*cols]
		for _, j := range ci {
			out = append(out, npu.E4M3ToF32(qrow[j])*srow[j/FP8Block])
		}
	}
	return out
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}
