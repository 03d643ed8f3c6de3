package hccl

import (
	"fmt"
	"reflect"
	"unsafe"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/cpu"
)

// Host memory access for the TCP transport: the only unsafe code of the
// package (typed views of byte slices, byte views of CPU tensors). CPU
// backend buffers are 8-byte aligned; our scratch is []uint64-backed.

// cpuBufferType is the dynamic type of the CPU backend's buffers: a tensor
// whose buffer has another type lives on a device and cannot be moved by
// the TCP transport.
var cpuBufferType = reflect.TypeOf(npu.Must(cpu.New(1).Alloc(npu.F32, 1)).Buffer())

// onHost reports whether t lives on the CPU backend.
func onHost(t *npu.Tensor) bool {
	return t != nil && reflect.TypeOf(t.Buffer()) == cpuBufferType
}

// hostBuf is a byte view of a CPU tensor: its own memory where an accessor
// reaches it (every tensor whose byte offset and size are multiples of 2),
// else a copy that commit writes back (odd-sized I8/U8 tensors).
type hostBuf struct {
	b      []byte
	t      *npu.Tensor
	copied bool
}

var hostCopier cpu.Backend // Download/Upload need no backend state

// hostMemory allocates the tensors the TCP transport moves (HostBuffers).
var hostMemory npu.Memory = cpu.New(1)

// hostBytes returns a byte view of t, which must live on the CPU backend.
func hostBytes(t *npu.Tensor) (hostBuf, error) {
	if t == nil {
		return hostBuf{}, fmt.Errorf("nil tensor: %w", ErrInvalid)
	}
	if !onHost(t) {
		return hostBuf{}, fmt.Errorf("tensor %v is not on the CPU backend (buffer %T): the TCP transport moves host memory only; use the HCCL transport for device tensors: %w", t, t.Buffer(), ErrInvalid)
	}
	n, off := t.Bytes(), t.Offset()
	switch {
	case n == 0:
		return hostBuf{b: []byte{}, t: t}, nil
	case n%4 == 0 && off%4 == 0:
		f := cpu.F32(npu.NewTensor(t.Buffer(), off, npu.F32, n/4))
		return hostBuf{b: unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), n), t: t}, nil
	case n%2 == 0 && off%2 == 0:
		u := cpu.U16(npu.NewTensor(t.Buffer(), off, npu.BF16, n/2))
		return hostBuf{b: unsafe.Slice((*byte)(unsafe.Pointer(&u[0])), n), t: t}, nil
	}
	b := alignedBytes(n)
	if err := hostCopier.Download(b, t); err != nil {
		return hostBuf{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return hostBuf{b: b, t: t, copied: true}, nil
}

// commit writes a copied view back into its tensor.
func (h hostBuf) commit() {
	if h.copied {
		_ = hostCopier.Upload(h.t, h.b) // same size by construction: cannot fail
	}
}

// alignedBytes returns n zero bytes, 8-byte aligned.
func alignedBytes(n int) []byte {
	if n == 0 {
		return []byte{}
	}
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), n)
}

// overlap reports whether two byte slices share memory.
func overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return a0 < b0+uintptr(len(b)) && b0 < a0+uintptr(len(a))
}

// sameMemory reports whether a and b are the same bytes.
func sameMemory(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// aliasesAny reports whether dst shares memory with any of srcs.
func aliasesAny[T any](dst []T, srcs [][]T) bool {
	if len(dst) == 0 {
		return false
	}
	var z T
	sz := unsafe.Sizeof(z)
	d0 := uintptr(unsafe.Pointer(&dst[0]))
	d1 := d0 + uintptr(len(dst))*sz
	for _, s := range srcs {
		if len(s) == 0 {
			continue
		}
		s0 := uintptr(unsafe.Pointer(&s[0]))
		if s0 < d1 && d0 < s0+uintptr(len(s))*sz {
			return true
		}
	}
	return false
}

func view[T any](b []byte) []T {
	var z T
	sz := int(unsafe.Sizeof(z))
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/sz)
}

func asF32(b []byte) []float32 { return view[float32](b) }
func asU16(b []byte) []uint16  { return view[uint16](b) }
func asI8(b []byte) []int8     { return view[int8](b) }
func asI32(b []byte) []int32   { return view[int32](b) }
func asI64(b []byte) []int64   { return view[int64](b) }
