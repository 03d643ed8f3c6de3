package npu

import (
	"fmt"
	"strings"
)

// Buffer is backend-owned memory (host memory on the CPU backend, device
// memory on an accelerator). Model code only passes it around.
type Buffer interface {
	// Bytes is the buffer's size in bytes.
	Bytes() int
}

// Tensor is a dense, row-major view of a Buffer. Tensors are cheap handles:
// views (Rows, Reshape) share the buffer. Their contents are only read on the
// host through Backend.Download, which is a synchronisation point.
type Tensor struct {
	dtype  DType
	shape  []int
	buf    Buffer
	offset int // byte offset into buf
}

// NewTensor wraps buf as a tensor; backends use it, model code uses Backend.Alloc.
func NewTensor(buf Buffer, offset int, dt DType, shape ...int) *Tensor {
	t := &Tensor{dtype: dt, shape: append([]int(nil), shape...), buf: buf, offset: offset}
	if offset < 0 || offset+t.Bytes() > buf.Bytes() {
		panic(fmt.Sprintf("npu: tensor %v %v at offset %d exceeds buffer of %d bytes", dt, shape, offset, buf.Bytes()))
	}
	return t
}

// DType is the element type.
func (t *Tensor) DType() DType { return t.dtype }

// Shape returns the dimensions (do not modify).
func (t *Tensor) Shape() []int { return t.shape }

// Rank is the number of dimensions.
func (t *Tensor) Rank() int { return len(t.shape) }

// Dim returns dimension i; negative i counts from the end.
func (t *Tensor) Dim(i int) int {
	if i < 0 {
		i += len(t.shape)
	}
	return t.shape[i]
}

// Numel is the number of elements.
func (t *Tensor) Numel() int {
	n := 1
	for _, d := range t.shape {
		n *= d
	}
	return n
}

// Bytes is the size of the tensor's data in bytes.
func (t *Tensor) Bytes() int { return t.Numel() * t.dtype.Size() }

// Buffer is the underlying backend buffer.
func (t *Tensor) Buffer() Buffer { return t.buf }

// Offset is the byte offset of element 0 in the buffer.
func (t *Tensor) Offset() int { return t.offset }

// RowSize is the number of elements per index of dimension 0 (the product
// of the other dimensions, also when dimension 0 is empty).
func (t *Tensor) RowSize() int {
	n := 1
	for _, d := range t.shape[min(1, len(t.shape)):] {
		n *= d
	}
	return n
}

// Rows returns the view of rows [lo, hi) along dimension 0.
func (t *Tensor) Rows(lo, hi int) *Tensor {
	if lo < 0 || hi < lo || hi > t.shape[0] {
		panic(fmt.Sprintf("npu: Rows(%d, %d) of shape %v", lo, hi, t.shape))
	}
	shape := append([]int{hi - lo}, t.shape[1:]...)
	return &Tensor{dtype: t.dtype, shape: shape, buf: t.buf, offset: t.offset + lo*t.RowSize()*t.dtype.Size()}
}

// Reshape returns a view with a new shape of the same element count; one
// dimension may be -1.
func (t *Tensor) Reshape(shape ...int) *Tensor {
	shape = append([]int(nil), shape...)
	n, infer := 1, -1
	for i, d := range shape {
		if d == -1 {
			if infer >= 0 {
				panic("npu: Reshape with two -1 dimensions")
			}
			infer = i
			continue
		}
		n *= d
	}
	if infer >= 0 && n > 0 {
		shape[infer] = t.Numel() / n
		n *= shape[infer]
	}
	if n != t.Numel() {
		panic(fmt.Sprintf("npu: Reshape %v to %v", t.shape, shape))
	}
	return &Tensor{dtype: t.dtype, shape: shape, buf: t.buf, offset: t.offset}
}

// String describes the tensor for errors and logs.
func (t *Tensor) String() string {
	dims := make([]string, len(t.shape))
	for i, d := range t.shape {
		dims[i] = fmt.Sprint(d)
	}
	return fmt.Sprintf("%s[%s]", t.dtype, strings.Join(dims, ","))
}

// SameShape reports whether two shapes are equal.
func SameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
