// Package cpu is the reference backend: every op of npu.Ops on host memory,
// run eagerly on the calling goroutine (its "stream"), multi-threaded inside
// the heavy ops. It is the default backend and the numerical reference that
// accelerator backends are tested against.
package cpu

import (
	"fmt"
	"runtime"

	"github.com/npuserve/npuserve/npu"
	"github.com/shirou/gopsutil/v3/mem"
)

// buffer is host memory; data is 8-byte aligned.
type buffer struct{ data []byte }

func (b *buffer) Bytes() int { return len(b.data) }

// Backend is the CPU backend.
type Backend struct {
	threads int
	pool    *pool // helpers of parallelFor; nil for one thread
}

var _ npu.Backend = (*Backend)(nil)

// New returns a CPU backend using up to threads worker goroutines inside
// ops (0 = GOMAXPROCS): the calling one and threads-1 pooled workers,
// started on first use and stopped once the Backend is unreachable (see
// parallel.go).
func New(threads int) *Backend {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	b := &Backend{threads: threads}
	b.pool = newPool(b, threads)
	return b
}

// Name is "cpu".
func (b *Backend) Name() string { return "cpu" }

// Threads is the number of worker goroutines ops may use.
func (b *Backend) Threads() int { return b.threads }

// Info reports host RAM as device memory.
func (b *Backend) Info() npu.DeviceInfo {
	info := npu.DeviceInfo{Name: "cpu"}
	if vm, err := mem.VirtualMemory(); err == nil {
		info.MemoryBytes = int64(vm.Total)
		info.FreeBytes = int64(vm.Available)
	}
	return info
}

// Sync is a no-op: ops run eagerly.
func (b *Backend) Sync() error { return nil }

// largeAlloc is the size from which Alloc checks the host's available
// memory first: Go's runtime cannot recover from running out of memory,
// so a cache or weight too large for the machine must fail as an error.
const largeAlloc = 64 << 20

// Alloc returns a zeroed tensor; a large one that the host's available
// memory cannot hold is an *npu.AllocError wrapping npu.ErrOutOfMemory.
func (b *Backend) Alloc(dt npu.DType, shape ...int) (*npu.Tensor, error) {
	n, err := npu.ShapeBytes(dt, shape...)
	if err != nil {
		return nil, &npu.AllocError{Device: b.Name(), DType: dt, Shape: shape, Bytes: n, Free: -1, Err: err}
	}
	if n >= largeAlloc {
		if vm, err := mem.VirtualMemory(); err == nil && uint64(n) > vm.Available {
			return nil, &npu.AllocError{Device: b.Name(), DType: dt, Shape: shape, Bytes: n, Free: int64(vm.Available), Err: npu.ErrOutOfMemory}
		}
	}
	return npu.NewTensor(&buffer{data: allocBytes(int(n))}, 0, dt, shape...), nil
}

// FromHost aliases data when it is suitably aligned, else copies it.
func (b *Backend) FromHost(dt npu.DType, data []byte, shape ...int) (*npu.Tensor, error) {
	n, err := npu.ShapeBytes(dt, shape...)
	if err != nil || n != int64(len(data)) {
		return nil, fmt.Errorf("cpu: FromHost %v %v needs %d bytes, got %d", dt, shape, n, len(data))
	}
	if len(data) > 0 && !aligned(data, dt.Size()) {
		c := allocBytes(len(data))
		copy(c, data)
		data = c
	}
	return npu.NewTensor(&buffer{data: data}, 0, dt, shape...), nil
}

// Upload copies src into dst.
func (b *Backend) Upload(dst *npu.Tensor, src []byte) error {
	d := bytesOf(dst)
	if len(d) != len(src) {
		return fmt.Errorf("cpu: Upload %d bytes into %v", len(src), dst)
	}
	copy(d, src)
	return nil
}

// Download copies src to dst.
func (b *Backend) Download(dst []byte, src *npu.Tensor) error {
	s := bytesOf(src)
	if len(s) != len(dst) {
		return fmt.Errorf("cpu: Download %v into %d bytes", src, len(dst))
	}
	copy(dst, s)
	return nil
}

// Free drops the reference; the garbage collector reclaims the memory.
func (b *Backend) Free(t *npu.Tensor) {}

// bytesOf returns the bytes of t (a view into its buffer).
func bytesOf(t *npu.Tensor) []byte {
	buf, ok := t.Buffer().(*buffer)
	if !ok {
		panic(fmt.Sprintf("cpu: tensor %v does not live on the CPU backend", t))
	}
	return buf.data[t.Offset() : t.Offset()+t.Bytes()]
}

// F32 returns t's elements as a float32 slice aliasing its memory.
func F32(t *npu.Tensor) []float32 {
	if t.DType() != npu.F32 {
		panic(fmt.Sprintf("cpu: want F32 tensor, got %v", t))
	}
	return f32s(bytesOf(t))
}

// I32 returns t's elements as an int32 slice aliasing its memory.
func I32(t *npu.Tensor) []int32 {
	if t.DType() != npu.I32 {
		panic(fmt.Sprintf("cpu: want I32 tensor, got %v", t))
	}
	return i32s(bytesOf(t))
}

// I64 returns t's elements as an int64 slice aliasing its memory.
func I64(t *npu.Tensor) []int64 {
	if t.DType() != npu.I64 {
		panic(fmt.Sprintf("cpu: want I64 tensor, got %v", t))
	}
	return i64s(bytesOf(t))
}

// U16 returns the raw 16-bit elements of a BF16 or F16 tensor.
func U16(t *npu.Tensor) []uint16 {
	if t.DType() != npu.BF16 && t.DType() != npu.F16 {
		panic(fmt.Sprintf("cpu: want BF16/F16 tensor, got %v", t))
	}
	return u16s(bytesOf(t))
}

func init() {
	npu.Register(npu.Registration{Name: "cpu", Open: func(o npu.OpenOptions) (npu.Backend, error) {
		return New(o.Threads), nil
	}})
}

// temp allocates an op's host scratch tensor (not device memory the caller
// sees, so no budget check).
func temp(dt npu.DType, shape ...int) *npu.Tensor {
	n := dt.Size()
	for _, d := range shape {
		n *= d
	}
	return npu.NewTensor(&buffer{data: allocBytes(n)}, 0, dt, shape...)
}
