//go:build cgo

package ascend

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"runtime"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/ascend/acl"
)

// Backend is one Ascend NPU: a goroutine locked to the OS thread that
// called aclrtSetDevice (ACL contexts are per thread, ascend-api.md §8.1),
// which makes every ACL and aclnn call of the device, and one stream on
// which every copy and operator is enqueued in call order.
//
// Errors: an operator or copy that fails when enqueued, and a failure the
// stream reports, are held and returned once by the next Sync or
// Download. Memory that Free releases and per-op scratch (workspaces,
// casts) are freed at the next Sync, when the stream has passed them.
type Backend struct {
	dev    int
	work   chan func()
	ctx    uintptr
	stream uintptr
	soc    string
	total  int64

	ws      uintptr // operator workspace, reused (stream order)
	wsBytes int
	pending []uintptr // device memory freed at the next Sync
	// reuse: scratch of pending whose last use is enqueued, by size, for
	// later scratch on the stream (recycle); emptied at Sync.
	reuse       map[int][]uintptr
	hostPending []uintptr
	ones        map[int]*npu.Tensor  // RMSNorm's unit gamma by width
	shadows     map[*buffer][]shadow // host copies of small I32 uploads (shadow.go)
	syncs       int                  // stream syncs so far (tests: no op syncs)
	enqueued    map[string]int       // operators enqueued, by name (tests: which path an op took)
	cap         *capture             // the graph capture in progress (graph.go)
	err         error
	closed      bool
}

var _ npu.Backend = (*Backend)(nil)

// New opens device dev: loads CANN, starts the device thread (aclInit,
// aclrtSetDevice) and creates the stream. Unlike Open it does not refuse
// while ops are unimplemented (tests construct it directly).
func New(dev int) (*Backend, error) {
	if _, err := load(); err != nil {
		return nil, err
	}
	b := &Backend{dev: dev, work: make(chan func()), ones: map[int]*npu.Tensor{}, enqueued: map[string]int{}}
	ready := make(chan error)
	go b.loop(ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return b, nil
}

func (b *Backend) loop(ready chan<- error) {
	runtime.LockOSThread() // for good: the thread holds the device's context
	err := func() error {
		if err := acl.Init(); err != nil {
			return fmt.Errorf("device ascend: %w", err)
		}
		if err := acl.SetDevice(b.dev); err != nil {
			return fmt.Errorf("device ascend:%d: %w", b.dev, err)
		}
		var err error
		if b.ctx, err = acl.CurrentContext(); err != nil {
			return fmt.Errorf("device ascend:%d: %w", b.dev, err)
		}
		if b.stream, err = acl.CreateStream(); err != nil {
			return fmt.Errorf("device ascend:%d: %w", b.dev, err)
		}
		b.soc = acl.SocName()
		if _, total, err := acl.MemInfo(acl.HBM); err == nil {
			b.total = total
		}
		return nil
	}()
	ready <- err
	if err != nil {
		return
	}
	for fn := range b.work {
		fn()
	}
}

// do runs fn on the device thread and waits for it; a panic in fn (an
// argument error) is re-raised on the caller.
func (b *Backend) do(fn func()) {
	if b.closed {
		panic("ascend: the backend is closed")
	}
	var perr any
	done := make(chan struct{})
	b.work <- func() {
		defer close(done)
		defer func() { perr = recover() }()
		fn()
	}
	<-done
	if perr != nil {
		panic(perr)
	}
}

// Name is "ascend".
func (b *Backend) Name() string { return "ascend" }

// SocName is what aclrtGetSocName reported (e.g. "Ascend910B3").
func (b *Backend) SocName() string { return b.soc }

// Info describes the NPU; FreeBytes is aclrtGetMemInfo's free HBM now.
func (b *Backend) Info() npu.DeviceInfo {
	info := npu.DeviceInfo{Name: fmt.Sprintf("%s (NPU %d)", b.soc, b.dev), MemoryBytes: b.total, Accelerator: true}
	b.do(func() {
		if free, _, err := acl.MemInfo(acl.HBM); err == nil {
			info.FreeBytes = free
		}
	})
	return info
}

func (b *Backend) fail(err error) {
	if b.err == nil {
		b.err = err
	}
}

// sync waits for the stream and frees pending memory (device thread).
// During a graph capture it is refused (no sync while capturing).
func (b *Backend) sync() error {
	if b.cap != nil {
		return errCapture("a stream sync")
	}
	b.syncs++
	err := acl.SynchronizeStream(b.stream)
	for _, p := range b.pending {
		_ = acl.Free(p)
	}
	b.pending = b.pending[:0]
	clear(b.reuse)
	for _, p := range b.hostPending {
		_ = acl.FreeHost(p)
	}
	b.hostPending = b.hostPending[:0]
	if err != nil {
		err = fmt.Errorf("ascend: the stream failed: %w", err)
	}
	if b.err != nil {
		err, b.err = b.err, nil
	}
	return err
}

// Sync waits until the stream has finished and returns, once, the first
// failure of the work enqueued since the last report.
func (b *Backend) Sync() error {
	if b.cap != nil {
		return b.refuse("Sync")
	}
	var err error
	b.do(func() { err = b.sync() })
	return err
}

// RunOnStream waits for the work enqueued before it and then runs fn on
// the calling goroutine, returning the stream's earlier failure instead
// when there is one. It is how collectives are ordered against the
// backend's ops: an HCCL communicator (hccl/ascend) enqueues on its own
// stream and waits for it, so fn sees every earlier op's results and its
// own are complete before the next op is enqueued. Refused while
// capturing a graph.
func (b *Backend) RunOnStream(fn func() error) error {
	if err := b.Sync(); err != nil {
		return err
	}
	return fn()
}

// Close synchronises, frees the backend's scratch and destroys the stream.
func (b *Backend) Close() error {
	if b.closed {
		return nil
	}
	var err error
	b.do(func() {
		b.endCaptureForClose()
		for _, t := range b.ones {
			b.pending = append(b.pending, t.Buffer().(*buffer).ptr)
		}
		if b.ws != 0 {
			b.pending = append(b.pending, b.ws)
		}
		err = b.sync()
		if derr := acl.DestroyStream(b.stream); derr != nil && err == nil {
			err = derr
		}
	})
	b.closed = true
	close(b.work)
	return err
}

// aclnnError describes a failed aclnn call with the runtime's message.
func aclnnError(what string, rc C.int) error {
	if rc == C.NPU_ACLNN_SYMBOL_MISSING {
		return fmt.Errorf("ascend: %s is not in this CANN's operator libraries", what)
	}
	if msg := acl.RecentErrMsg(); msg != "" {
		return fmt.Errorf("ascend: %s: aclnn error %d: %s", what, int(rc), msg)
	}
	return fmt.Errorf("ascend: %s: aclnn error %d", what, int(rc))
}
