//go:build cgo

package ascend

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/ascend/acl"
)

// device owns one NPU for this process: a goroutine locked to the OS thread
// that called aclrtSetDevice, running the closures submitted to it. ACL
// contexts are bound to threads (ascend-api.md §8.1), so every ACL and HCCL
// call for the device goes through it; communicators and DeviceMemory of
// the same device share it.
type device struct {
	id   int
	work chan func()

	mu    sync.Mutex
	stuck string // a call that never returned: the thread is lost
}

var (
	devMu    sync.Mutex
	devices  = map[int]*device{}
	aclOnce  sync.Once
	aclErr   error
	memLimit = 5 * time.Minute // bound on allocations and copies
)

// getDevice returns the device's thread, starting it on first use.
func getDevice(id int) (*device, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	devMu.Lock()
	defer devMu.Unlock()
	if d := devices[id]; d != nil {
		return d, nil
	}
	d := &device{id: id, work: make(chan func())}
	ready := make(chan error)
	go d.loop(ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	devices[id] = d
	return d, nil
}

func (d *device) loop(ready chan<- error) {
	runtime.LockOSThread() // for good: the thread belongs to the device
	if err := initACL(); err != nil {
		ready <- err
		return
	}
	if err := acl.SetDevice(d.id); err != nil {
		ready <- fmt.Errorf("device %d: %w", d.id, err)
		return
	}
	ready <- nil
	for fn := range d.work {
		fn()
	}
}

// do runs fn on the device's thread and waits at most limit for it. A call
// that overruns leaves the thread stuck inside CANN; the device is then
// unusable in this process and later calls fail at once.
func (d *device) do(what string, limit time.Duration, fn func()) error {
	d.mu.Lock()
	stuck := d.stuck
	d.mu.Unlock()
	if stuck != "" {
		return hccl.Errorf(hccl.ErrPoisoned, "device %d is unusable: %s did not return; restart the process", d.id, stuck)
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	done := make(chan struct{})
	select {
	case d.work <- func() { fn(); close(done) }:
	case <-timer.C:
		return hccl.Errorf(hccl.ErrTimeout, "device %d's thread stayed busy for %v", d.id, limit)
	}
	select {
	case <-done:
		return nil
	case <-timer.C:
		d.mu.Lock()
		d.stuck = fmt.Sprintf("%s (started %s)", what, time.Now().Add(-limit).Format(time.RFC3339))
		d.mu.Unlock()
		return hccl.Errorf(hccl.ErrTimeout, "%s on device %d did not return within %v", what, d.id, limit)
	}
}

// initACL calls aclInit once per process (before any other ACL call, as
// CANN requires).
func initACL() error {
	aclOnce.Do(func() { aclErr = acl.Init() })
	return aclErr
}

// DeviceCount is the number of NPUs this process sees.
func DeviceCount() (int, error) {
	if err := Available(); err != nil {
		return 0, err
	}
	if err := initACL(); err != nil {
		return 0, err
	}
	return acl.DeviceCount()
}

// deviceOf is implemented by buffers that know their device, so a tensor
// on the wrong device is refused instead of corrupting memory.
type deviceOf interface{ DeviceID() int }

// devBuffer is DeviceMemory's buffer.
type devBuffer struct {
	ptr uintptr
	n   int
	dev int
}

func (b *devBuffer) Bytes() int             { return b.n }
func (b *devBuffer) DevicePointer() uintptr { return b.ptr }
func (b *devBuffer) DeviceID() int          { return b.dev }

// DeviceMemory is npu.Memory on one NPU: aclrtMalloc'd tensors and
// synchronous host/device copies. It exists so that HCCL runs on device
// tensors (the conformance suite, tools) before the Ascend backend does;
// that backend will have its own allocator. Failures (out of device
// memory, a failed copy) are returned as errors.
type DeviceMemory struct{ dev *device }

var _ npu.Memory = (*DeviceMemory)(nil)

// NewDeviceMemory returns the memory of logical device id.
func NewDeviceMemory(id int) (*DeviceMemory, error) {
	d, err := getDevice(id)
	if err != nil {
		return nil, err
	}
	return &DeviceMemory{dev: d}, nil
}

func (m *DeviceMemory) run(what string, fn func() error) error {
	var ferr error
	if err := m.dev.do(what, memLimit, func() { ferr = fn() }); err != nil {
		return fmt.Errorf("hccl/ascend: %w", err)
	}
	if ferr != nil {
		return fmt.Errorf("hccl/ascend: device %d: %w", m.dev.id, ferr)
	}
	return nil
}

// Alloc returns a zero-filled device tensor.
func (m *DeviceMemory) Alloc(dt npu.DType, shape ...int) (*npu.Tensor, error) {
	n64, err := npu.ShapeBytes(dt, shape...)
	if err != nil {
		return nil, err
	}
	n := int(n64)
	b := &devBuffer{n: n, dev: m.dev.id}
	err = m.run("aclrtMalloc", func() error {
		p, err := acl.Malloc(max(n, 32))
		if err != nil {
			return err
		}
		b.ptr = p
		if err := acl.Memset(p, max(n, 32), 0, max(n, 32)); acl.Code(err) == acl.SymbolMissing {
			if err := acl.MemcpyToDevice(p, max(n, 32), make([]byte, max(n, 32))); err != nil {
				return fmt.Errorf("zero fill: %w", err)
			}
		} else if err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		return nil, &npu.AllocError{Device: fmt.Sprintf("ascend:%d", m.dev.id), DType: dt, Shape: shape, Bytes: n64, Free: -1, Err: err}
	}
	return npu.NewTensor(b, 0, dt, shape...), nil
}

// FromHost copies data into a new device tensor.
func (m *DeviceMemory) FromHost(dt npu.DType, data []byte, shape ...int) (*npu.Tensor, error) {
	t, err := m.Alloc(dt, shape...)
	if err != nil {
		return nil, err
	}
	if err := m.Upload(t, data); err != nil {
		m.Free(t)
		return nil, err
	}
	return t, nil
}

// Upload copies src into dst (same byte size).
func (m *DeviceMemory) Upload(dst *npu.Tensor, src []byte) error {
	ptr := m.addr(dst)
	if len(src) != dst.Bytes() {
		return fmt.Errorf("hccl/ascend: Upload %d bytes into %v", len(src), dst)
	}
	if len(src) == 0 {
		return nil
	}
	return m.run("aclrtMemcpy", func() error {
		return acl.MemcpyToDevice(ptr, len(src), src)
	})
}

// Download copies src to dst (same byte size).
func (m *DeviceMemory) Download(dst []byte, src *npu.Tensor) error {
	ptr := m.addr(src)
	if len(dst) != src.Bytes() {
		return fmt.Errorf("hccl/ascend: Download %v into %d bytes", src, len(dst))
	}
	if len(dst) == 0 {
		return nil
	}
	return m.run("aclrtMemcpy", func() error {
		return acl.MemcpyToHost(dst, ptr)
	})
}

// Free releases a tensor from Alloc or FromHost.
func (m *DeviceMemory) Free(t *npu.Tensor) {
	b, ok := t.Buffer().(*devBuffer)
	if !ok || b.ptr == 0 {
		return
	}
	ptr := b.ptr
	b.ptr = 0
	_ = m.run("aclrtFree", func() error {
		return acl.Free(ptr)
	})
}

func (m *DeviceMemory) addr(t *npu.Tensor) uintptr {
	p, err := tensorAddr(t, m.dev.id)
	if err != nil {
		panic(fmt.Sprintf("hccl/ascend: %v", err))
	}
	return p
}

// tensorAddr is the device address of t's first element; t must live in
// device memory (on device dev, when its buffer says).
func tensorAddr(t *npu.Tensor, dev int) (uintptr, error) {
	if t == nil {
		return 0, hccl.Errorf(hccl.ErrInvalid, "nil tensor")
	}
	b, ok := t.Buffer().(DeviceBuffer)
	if !ok {
		return 0, hccl.Errorf(hccl.ErrInvalid, "tensor %v is not in device memory (buffer %T): HCCL moves device tensors; use the TCP transport for the CPU backend", t, t.Buffer())
	}
	if d, ok := b.(deviceOf); ok && d.DeviceID() != dev {
		return 0, hccl.Errorf(hccl.ErrInvalid, "tensor %v is on device %d, the communicator on device %d", t, d.DeviceID(), dev)
	}
	if b.DevicePointer() == 0 {
		return 0, hccl.Errorf(hccl.ErrInvalid, "tensor %v has no device memory (freed?)", t)
	}
	return b.DevicePointer() + uintptr(t.Offset()), nil
}
