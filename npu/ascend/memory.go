//go:build cgo

package ascend

import (
	"errors"
	"fmt"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/ascend/acl"
)

// buffer is device memory of one Backend.
type buffer struct {
	ptr uintptr // 0 once freed (or for an empty buffer)
	n   int
	be  *Backend
}

// Bytes is the buffer's size.
func (b *buffer) Bytes() int { return b.n }

// DevicePointer is the device address (hccl/ascend's DeviceBuffer).
func (b *buffer) DevicePointer() uintptr { return b.ptr }

// DeviceID is the NPU the buffer lives on.
func (b *buffer) DeviceID() int { return b.be.dev }

func (b *Backend) dbuf(t *npu.Tensor) *buffer {
	buf, ok := t.Buffer().(*buffer)
	if !ok || buf.be != b {
		panic(fmt.Sprintf("ascend: tensor %v does not live on this Ascend backend (buffer %T)", t, t.Buffer()))
	}
	if buf.ptr == 0 && buf.n > 0 {
		panic(fmt.Sprintf("ascend: tensor %v was freed", t))
	}
	return buf
}

func (b *Backend) allocError(dt npu.DType, shape []int, n int64, err error) error {
	free := int64(-1)
	if f, _, ferr := acl.MemInfo(acl.HBM); ferr == nil {
		free = f
	}
	if c := acl.Code(err); c == acl.ErrMemAllocation || c == acl.ErrBadAlloc || errors.Is(err, npu.ErrOutOfMemory) {
		if !errors.Is(err, npu.ErrOutOfMemory) {
			err = fmt.Errorf("%w (%v)", npu.ErrOutOfMemory, err)
		}
	}
	return &npu.AllocError{Device: fmt.Sprintf("ascend:%d", b.dev), DType: dt, Shape: append([]int(nil), shape...), Bytes: n, Free: free, Err: err}
}

// malloc returns n bytes of device memory (device thread). Out of memory
// it synchronises (so pending frees happen) and tries once more.
func (b *Backend) malloc(n int) (uintptr, error) {
	p, err := acl.Malloc(n)
	if acl.Code(err) == acl.ErrMemAllocation {
		if serr := b.syncKeep(); serr != nil {
			b.fail(serr)
		}
		p, err = acl.Malloc(n)
	}
	return p, err
}

// syncKeep is sync that keeps the failure for the next report.
func (b *Backend) syncKeep() error {
	held := b.err
	b.err = nil
	err := b.sync()
	if held != nil {
		b.err = held
	}
	return err
}

// Alloc returns a zero-filled tensor (the fill is enqueued), or an
// *npu.AllocError wrapping npu.ErrOutOfMemory when the NPU is full.
func (b *Backend) Alloc(dt npu.DType, shape ...int) (*npu.Tensor, error) {
	if b.cap != nil {
		return nil, b.refuse(fmt.Sprintf("Alloc %v %v", dt, shape))
	}
	n, err := npu.ShapeBytes(dt, shape...)
	if err == nil && dt.Size() == 0 {
		err = fmt.Errorf("ascend: cannot allocate dtype %v", dt)
	}
	if err != nil {
		return nil, &npu.AllocError{Device: fmt.Sprintf("ascend:%d", b.dev), DType: dt, Shape: shape, Bytes: n, Free: -1, Err: err}
	}
	buf := &buffer{n: int(n), be: b}
	if n == 0 {
		return npu.NewTensor(buf, 0, dt, shape...), nil
	}
	b.do(func() {
		if buf.ptr, err = b.malloc(int(n)); err != nil {
			err = b.allocError(dt, shape, n, err)
			return
		}
		if err = acl.MemsetAsync(buf.ptr, int(n), 0, int(n), b.stream); err != nil {
			_ = acl.Free(buf.ptr)
			err = b.allocError(dt, shape, n, err)
		}
	})
	if err != nil {
		return nil, err
	}
	return npu.NewTensor(buf, 0, dt, shape...), nil
}

// FromHost allocates a tensor and enqueues the copy of data into it (data
// is staged, never aliased).
func (b *Backend) FromHost(dt npu.DType, data []byte, shape ...int) (*npu.Tensor, error) {
	if b.cap != nil {
		return nil, b.refuse("FromHost")
	}
	n, err := npu.ShapeBytes(dt, shape...)
	if err != nil || n != int64(len(data)) {
		return nil, fmt.Errorf("ascend: FromHost %v %v needs %d bytes, got %d", dt, shape, n, len(data))
	}
	t, err := b.Alloc(dt, shape...)
	if err != nil {
		return nil, err
	}
	if err := b.Upload(t, data); err != nil {
		b.Free(t)
		return nil, err
	}
	return t, nil
}

// Upload stages src in page-locked host memory (so the caller may reuse
// src at once) and enqueues its copy into dst.
func (b *Backend) Upload(dst *npu.Tensor, src []byte) error {
	if b.cap != nil {
		return b.refuse("Upload")
	}
	if len(src) != dst.Bytes() {
		return fmt.Errorf("ascend: Upload %d bytes into %v", len(src), dst)
	}
	if len(src) == 0 {
		return nil
	}
	buf := b.dbuf(dst)
	b.shadowUpload(dst, src)
	var err error
	b.do(func() {
		var h uintptr
		if h, err = acl.MallocHost(len(src)); err != nil {
			return
		}
		acl.HostWrite(h, src)
		b.hostPending = append(b.hostPending, h)
		err = acl.MemcpyAsync(buf.ptr+uintptr(dst.Offset()), buf.n-dst.Offset(), h, len(src), acl.HostToDevice, b.stream)
	})
	if err != nil {
		return fmt.Errorf("ascend: Upload into %v: %w", dst, err)
	}
	return nil
}

// Download waits for the stream, then copies src to dst. It returns the
// first failure of the work it waited for (and copies nothing then).
func (b *Backend) Download(dst []byte, src *npu.Tensor) error {
	if b.cap != nil {
		return b.refuse("Download")
	}
	if len(dst) != src.Bytes() {
		return fmt.Errorf("ascend: Download %v into %d bytes", src, len(dst))
	}
	buf := b.dbuf(src)
	var err error
	b.do(func() {
		if err = b.sync(); err != nil || len(dst) == 0 {
			return
		}
		if err = acl.MemcpyToHost(dst, buf.ptr+uintptr(src.Offset())); err != nil {
			err = fmt.Errorf("ascend: Download %v: %w", src, err)
		}
	})
	return err
}

// Free releases t's memory at the next Sync, once the stream has passed
// the work enqueued before it. Freeing twice is a no-op; views must not be
// freed.
func (b *Backend) Free(t *npu.Tensor) {
	if t == nil {
		return
	}
	buf, ok := t.Buffer().(*buffer)
	if !ok || buf.be != b {
		panic(fmt.Sprintf("ascend: Free of %v, which does not live on this Ascend backend", t))
	}
	if t.Offset() != 0 {
		panic(fmt.Sprintf("ascend: Free of a view %v at byte offset %d", t, t.Offset()))
	}
	if buf.ptr == 0 {
		return
	}
	if b.cap != nil {
		panic(fmt.Sprintf("ascend: Free of %v during graph capture: the graph may use it (free it after closing the graph)", t))
	}
	p := buf.ptr
	buf.ptr = 0
	b.dropShadows(buf, 0, buf.n)
	b.do(func() { b.pending = append(b.pending, p) })
}
