package cuda

import (
	"fmt"

	"github.com/npuserve/npuserve/npu"
)

// buffer is device memory of one Backend.
type buffer struct {
	ptr    uint64 // 0 once freed (or for an empty buffer)
	n      int
	be     *Backend
	weight bool // MarkWeights: no op writes it, so kernels may read it before their PDL wait
}

// Bytes is the buffer's size.
func (b *buffer) Bytes() int { return b.n }

// DevicePointer is the buffer's device address (the interface device
// transports such as NCCL look for).
func (b *buffer) DevicePointer() uintptr { return uintptr(b.ptr) }

// DeviceID is the GPU the buffer lives on.
func (b *buffer) DeviceID() int { return b.be.ordinal }

// dbuf returns t's buffer, which must be live memory of this backend.
func (b *Backend) dbuf(t *npu.Tensor) *buffer {
	buf, ok := t.Buffer().(*buffer)
	if !ok || buf.be != b {
		panic(fmt.Sprintf("cuda: tensor %v does not live on this CUDA backend (buffer %T)", t, t.Buffer()))
	}
	if buf.ptr == 0 && buf.n > 0 {
		panic(fmt.Sprintf("cuda: tensor %v was freed", t))
	}
	return buf
}

// ptr is the device address of t's first element (0 for a nil tensor, an
// optional operand).
func (b *Backend) ptr(t *npu.Tensor) uint64 {
	if t == nil {
		return 0
	}
	return b.dbuf(t).ptr + uint64(t.Offset())
}

// alloc returns n bytes of device memory, not initialised. Out of memory,
// it waits for the stream (so that stream-ordered frees complete), hands
// the pool's unused memory back and tries once more.
func (b *Backend) alloc(n int) (*buffer, error) {
	if n == 0 {
		return &buffer{be: b}, nil
	}
	p, err := drvMemAlloc(b.ctx, n, b.stream, b.asyncAlloc)
	if err != nil && outOfMemory(err) && !b.capturing {
		if serr := drvStreamSync(b.ctx, b.stream); serr != nil {
			b.fail(fmt.Errorf("cuda: the stream failed: %w", serr))
		}
		b.releasePending()
		if b.asyncAlloc {
			_ = drvMemPoolTrim(b.ctx, b.dev)
		}
		p, err = drvMemAlloc(b.ctx, n, b.stream, b.asyncAlloc)
	}
	if err != nil {
		return nil, err
	}
	return &buffer{ptr: p, n: n, be: b}, nil
}

// allocError is the *npu.AllocError of a failed allocation.
func (b *Backend) allocError(dt npu.DType, shape []int, n int64, err error) error {
	free := int64(-1)
	if f, _, ferr := drvMemGetInfo(b.ctx); ferr == nil {
		free = f
	}
	if outOfMemory(err) {
		err = fmt.Errorf("%w (%v)", npu.ErrOutOfMemory, err)
	}
	return &npu.AllocError{Device: fmt.Sprintf("cuda:%d", b.ordinal), DType: dt, Shape: append([]int(nil), shape...), Bytes: n, Free: free, Err: err}
}

// Alloc returns a zero-filled tensor (the fill is enqueued on the stream),
// or an *npu.AllocError wrapping npu.ErrOutOfMemory when the GPU is full.
func (b *Backend) Alloc(dt npu.DType, shape ...int) (*npu.Tensor, error) {
	if b.capturing {
		err := errCapture(fmt.Sprintf("Alloc %v %v", dt, shape))
		b.fail(err)
		return nil, err
	}
	n, err := npu.ShapeBytes(dt, shape...)
	if err == nil && dt.Size() == 0 {
		err = fmt.Errorf("cuda: cannot allocate dtype %v", dt)
	}
	if err != nil {
		return nil, &npu.AllocError{Device: fmt.Sprintf("cuda:%d", b.ordinal), DType: dt, Shape: shape, Bytes: n, Free: -1, Err: err}
	}
	buf, err := b.alloc(int(n))
	if err != nil {
		return nil, b.allocError(dt, shape, n, err)
	}
	if err := drvMemsetD8(b.ctx, buf.ptr, 0, buf.n, b.stream); err != nil {
		b.freeBuf(buf)
		return nil, b.allocError(dt, shape, n, err)
	}
	return npu.NewTensor(buf, 0, dt, shape...), nil
}

// FromHost allocates a tensor and enqueues the copy of data into it (data
// is staged by the driver before FromHost returns, so it is never
// aliased).
func (b *Backend) FromHost(dt npu.DType, data []byte, shape ...int) (*npu.Tensor, error) {
	if b.capturing {
		err := errCapture("FromHost")
		b.fail(err)
		return nil, err
	}
	n, err := npu.ShapeBytes(dt, shape...)
	if err != nil || n != int64(len(data)) {
		return nil, fmt.Errorf("cuda: FromHost %v %v needs %d bytes, got %d", dt, shape, n, len(data))
	}
	buf, err := b.alloc(int(n))
	if err != nil {
		return nil, b.allocError(dt, shape, n, err)
	}
	if err := drvHtoD(b.ctx, buf.ptr, data, b.stream); err != nil {
		b.freeBuf(buf)
		return nil, fmt.Errorf("cuda: FromHost %v %v: %w", dt, shape, err)
	}
	return npu.NewTensor(buf, 0, dt, shape...), nil
}

// Upload enqueues the copy of src into dst. From pageable host memory the
// driver copies src into its own staging memory before returning, so
// the caller may reuse src at once.
func (b *Backend) Upload(dst *npu.Tensor, src []byte) error {
	if b.capturing {
		err := errCapture("Upload")
		b.fail(err)
		return err
	}
	if len(src) != dst.Bytes() {
		return fmt.Errorf("cuda: Upload %d bytes into %v", len(src), dst)
	}
	if err := drvHtoD(b.ctx, b.ptr(dst), src, b.stream); err != nil {
		return fmt.Errorf("cuda: Upload into %v: %w", dst, err)
	}
	return nil
}

// Download waits for the stream, then copies src to dst. It returns the
// first failure of the work it waited for (and copies nothing then).
func (b *Backend) Download(dst []byte, src *npu.Tensor) error {
	if len(dst) != src.Bytes() {
		return fmt.Errorf("cuda: Download %v into %d bytes", src, len(dst))
	}
	if err := b.Sync(); err != nil {
		return err
	}
	if err := drvDtoH(b.ctx, dst, b.ptr(src), b.stream); err != nil {
		return fmt.Errorf("cuda: Download %v: %w", src, err)
	}
	return nil
}

// Free releases t's memory once the work enqueued before it is done:
// stream-ordered (cuMemFreeAsync), or at the next Sync without the
// stream-ordered allocator. Freeing twice is a no-op; views must not be
// freed.
func (b *Backend) Free(t *npu.Tensor) {
	if t == nil {
		return
	}
	buf, ok := t.Buffer().(*buffer)
	if !ok || buf.be != b {
		panic(fmt.Sprintf("cuda: Free of %v, which does not live on this CUDA backend", t))
	}
	if b.capturing {
		panic(fmt.Sprintf("cuda: Free of %v during graph capture (a graph's tensors must outlive it)", t))
	}
	if t.Offset() != 0 {
		panic(fmt.Sprintf("cuda: Free of a view %v at byte offset %d", t, t.Offset()))
	}
	b.freeBuf(buf)
}

func (b *Backend) freeBuf(buf *buffer) {
	if buf.ptr == 0 {
		return
	}
	p := buf.ptr
	buf.ptr = 0
	if !b.asyncAlloc {
		b.pending = append(b.pending, p)
		return
	}
	if err := drvMemFree(b.ctx, p, b.stream, true); err != nil {
		b.fail(fmt.Errorf("cuda: Free: %w", err))
	}
}

// releasePending frees the memory whose Free waited for the stream (call
// with the stream idle).
func (b *Backend) releasePending() {
	for _, p := range b.pending {
		_ = drvMemFree(b.ctx, p, 0, false)
	}
	b.pending = b.pending[:0]
}

// temp is scratch memory for one op: allocated on the stream and freed
// with freeTemp after the op's launches (stream-ordered, so the kernels
// still see it). An allocation failure panics: the op cannot run.
func (b *Backend) temp(n int) *buffer {
	buf, err := b.alloc(n)
	if err != nil {
		panic(fmt.Sprintf("cuda: scratch of %d bytes: %v", n, err))
	}
	return buf
}

var _ npu.WeightMarker = (*Backend)(nil)

// MarkWeights records that no op writes ts' buffers until they are freed
// (npu.WeightMarker): MatMul's decode GEMVs (k_gemv_tc) then load their first
// weights before waiting on the previous kernel (gemvEarly).
func (b *Backend) MarkWeights(ts ...*npu.Tensor) {
	for _, t := range ts {
		if t != nil {
			b.dbuf(t).weight = true
		}
	}
}
