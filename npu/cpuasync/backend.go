// Package cpuasync is the checking asynchronous CPU backend, opened as
// --device cpu-async. It runs the CPU backend's kernels (bit-identical
// results) the way an accelerator runs its ops, to prove without one that
// no code reads device data outside a synchronisation point or reuses a
// buffer too early; on the eager CPU backend such code works by accident.
//
// Stream. Every op of npu.Ops, and Upload's copy, is queued in call order
// and run later by the backend's stream goroutine, locked to one OS thread
// (one thread per device, as accelerator contexts need). Arguments are
// captured at enqueue time: tensors as handles, parameter structs and
// SeqLayouts by value (a SeqLayout holds sizes and tensor handles; its
// tensors are read when the op runs, after the Upload queued before it).
// Download, Sync and RunOnStream are the sync points: each queues a marker
// and waits for the stream to reach it, so they see every earlier op.
//
// Checks. Upload copies its source, queues the copy and overwrites the
// caller's slice with garbage: a caller that reads its source after Upload
// sees the garbage. FromHost aliases (weights from a mapped checkpoint) and
// is not touched. Free is queued: when the stream reaches it, after every
// op enqueued before it, the tensor is filled with its dtype's poison (NaN,
// or an integer no index can be; see memory.go) and its buffer put on a
// free list keyed by byte size. An op enqueued after the Free (a use after
// Free) therefore reads poison, whatever the timing. Alloc reuses a listed
// buffer of the same size, most recent first; only buffers the stream has
// already released are listed, so no earlier op can still be using one,
// and the zero fill Alloc promises is queued too, so it lands after the
// ops enqueued before the Alloc: a stale op queued between the Free and
// the Alloc still reads poison, and a stale handle used after the Alloc
// reads the new owner's data, which shows up as wrong numbers. Whether a
// given Alloc recycles depends on how far the stream has got, as with an
// accelerator's caching allocator; correct code cannot tell.
//
// Failures. A panic in a queued op is recovered on the stream and becomes
// the stream's sticky failure, an *OpError naming the op and where it was
// enqueued; later ops are skipped (Free's poisoning and Alloc's zero fill
// still run) until the next Sync, Download or RunOnStream returns the
// failure and clears it: the engine fails that step and goes on. Argument
// errors therefore surface there instead of panicking at the call.
//
// Lifetime. The stream goroutine exits when the Backend becomes
// unreachable (a runtime cleanup closes the queue; what is still queued
// runs first) or at Close, which also reports a failure nobody collected.
//
// Unlike the CPU backend, a Backend is safe for concurrent use: calls are
// ordered by the time they enqueue.
package cpuasync

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/cpu"
)

// Name is the backend's name, for --device and npu.Open.
const Name = "cpu-async"

// Backend is the checking asynchronous CPU backend. The handle owns no
// goroutine state: the stream it points to must not refer back to it, so
// that the handle can become unreachable and its cleanup stop the stream.
type Backend struct {
	s *stream
}

var (
	_ npu.Backend      = (*Backend)(nil)
	_ npu.StreamRunner = (*Backend)(nil)
)

var nextID atomic.Uint32

// New returns a cpu-async backend whose ops use up to threads worker
// goroutines (0 = GOMAXPROCS), as cpu.New, and starts its stream.
func New(threads int) *Backend {
	s := &stream{
		cpu:    cpu.New(threads),
		id:     nextID.Add(1),
		exited: make(chan struct{}),
		free:   map[int][]npu.Buffer{},
	}
	s.cond.L = &s.mu
	go s.loop()
	b := &Backend{s: s}
	runtime.AddCleanup(b, (*stream).release, s)
	return b
}

func init() {
	npu.Register(npu.Registration{Name: Name, Open: func(o npu.OpenOptions) (npu.Backend, error) {
		return New(o.Threads), nil
	}})
}

// Close waits for the queued work, returns its failure if nobody collected
// it, and stops the stream goroutine. Later calls fail with ErrClosed (ops
// panic with it). Closing is optional: an unreachable Backend stops its
// stream by itself; Close makes it deterministic (nputest closes the
// backends it opens at the end of the test).
func (b *Backend) Close() error { return b.s.shutdown() }

// Name is "cpu-async".
func (b *Backend) Name() string { return Name }

// Threads is the number of worker goroutines ops may use.
func (b *Backend) Threads() int { return b.s.cpu.Threads() }

// Describe is the CPU backend's description (npu.Describer), plus the
// stream's checking mode.
func (b *Backend) Describe() map[string]string {
	d := b.s.cpu.Describe()
	d["stream"] = "asynchronous, checking (ops run on their own goroutine)"
	return d
}

// Info is the CPU backend's (host RAM; not an accelerator).
func (b *Backend) Info() npu.DeviceInfo {
	info := b.s.cpu.Info()
	info.Name = Name
	return info
}

// push enqueues it, keeping b reachable until it is queued: otherwise the
// cleanup of a Backend whose last use is this call could close the stream
// in between.
func (b *Backend) push(it item) bool {
	ok := b.s.push(it)
	runtime.KeepAlive(b)
	return ok
}

// op enqueues a compute op; the caller of the Backend method is its site.
func (b *Backend) op(name string, fn func(c *cpu.Backend)) {
	it := item{name: name, op: fn}
	runtime.Callers(3, it.pcs[:])
	if !b.push(it) {
		panic(fmt.Errorf("cpu-async: %s: %w", name, ErrClosed))
	}
}

// wait enqueues fn as a control item and returns its result once the
// stream has run it, after everything enqueued before.
func (b *Backend) wait(name string, fn func() error) error {
	done := make(chan error, 1)
	if !b.push(item{name: name, ctl: func() { done <- fn() }}) {
		return fmt.Errorf("cpu-async: %s: %w", name, ErrClosed)
	}
	return <-done
}

// Sync waits for the queued work and returns (and clears) its failure.
func (b *Backend) Sync() error {
	s := b.s
	return b.wait("Sync", s.take)
}

// RunOnStream runs fn on the stream after the work enqueued before it and
// returns fn's error; a panic in fn is returned as an *OpError. An earlier
// failure of the stream is returned (and cleared) instead, fn not run. fn
// runs on the stream goroutine, so it must not wait on this backend (Sync,
// Download, RunOnStream); ops it enqueues run after it.
func (b *Backend) RunOnStream(fn func() error) error {
	s := b.s
	return b.wait("RunOnStream", func() error {
		if err := s.take(); err != nil {
			return err
		}
		return protect("RunOnStream", fn)
	})
}

// closedErr is the error of a memory call on a closed backend.
func (b *Backend) closedErr(op string) error {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	if b.s.closed {
		return fmt.Errorf("cpu-async: %s: %w", op, ErrClosed)
	}
	return nil
}

// Alloc returns a zero-filled tensor: a recycled buffer of the same byte
// size when the stream has released one (zeroed by a queued fill), else a
// fresh one from the CPU backend, whose budget check makes the
// *npu.AllocError.
func (b *Backend) Alloc(dt npu.DType, shape ...int) (*npu.Tensor, error) {
	n, err := npu.ShapeBytes(dt, shape...)
	if err != nil {
		return nil, &npu.AllocError{Device: Name, DType: dt, Shape: slices.Clone(shape), Bytes: n, Free: -1, Err: err}
	}
	if err := b.closedErr("Alloc"); err != nil {
		return nil, err
	}
	if buf := b.s.reuse(int(n)); buf != nil {
		t := npu.NewTensor(buf, 0, dt, shape...)
		if !b.push(item{name: "Alloc", ctl: func() { fill(buf, int(n), zeroChunk) }}) {
			return nil, fmt.Errorf("cpu-async: Alloc: %w", ErrClosed)
		}
		return t, nil
	}
	buf, err := b.s.newBuffer(int(n))
	if err != nil {
		var ae *npu.AllocError
		if errors.As(err, &ae) {
			// Asked for with the tag; report what the caller asked for.
			return nil, &npu.AllocError{Device: Name, DType: dt, Shape: slices.Clone(shape), Bytes: n, Free: ae.Free, Err: ae.Err}
		}
		return nil, fmt.Errorf("cpu-async: Alloc %v %v: %w", dt, shape, err)
	}
	return npu.NewTensor(buf, 0, dt, shape...), nil
}

// FromHost is the CPU backend's: it aliases data when aligned (the caller
// keeps data unchanged for the tensor's lifetime, so nothing is scribbled).
// No op can see the tensor before this returns, so nothing is queued.
func (b *Backend) FromHost(dt npu.DType, data []byte, shape ...int) (*npu.Tensor, error) {
	if err := b.closedErr("FromHost"); err != nil {
		return nil, err
	}
	return b.s.cpu.FromHost(dt, data, shape...)
}

// Upload copies src, queues the copy into dst and scribbles src (see the
// package comment): the caller must not read src after the call.
func (b *Backend) Upload(dst *npu.Tensor, src []byte) error {
	if len(src) != dst.Bytes() {
		return fmt.Errorf("cpu-async: Upload %d bytes into %v", len(src), dst)
	}
	cp := bytes.Clone(src)
	it := item{name: "Upload", op: func(c *cpu.Backend) {
		if err := c.Upload(dst, cp); err != nil {
			panic(err)
		}
	}}
	runtime.Callers(2, it.pcs[:])
	if !b.push(it) {
		return fmt.Errorf("cpu-async: Upload: %w", ErrClosed)
	}
	scribble(src)
	return nil
}

// Download waits for the queued work, then copies src to dst on the
// stream; it returns (and clears) the stream's failure instead, dst
// untouched.
func (b *Backend) Download(dst []byte, src *npu.Tensor) error {
	if len(dst) != src.Bytes() {
		return fmt.Errorf("cpu-async: Download %v into %d bytes", src, len(dst))
	}
	s := b.s
	return b.wait("Download", func() error {
		if err := s.take(); err != nil {
			return err
		}
		return protect("Download", func() error { return s.cpu.Download(dst, src) })
	})
}

// Free queues the release of a tensor Alloc returned: when the stream gets
// there, the tensor is poisoned and its buffer listed for reuse. Memory the
// backend did not allocate (FromHost tensors) is left alone; freeing a
// view, another backend's tensor or a tensor twice panics.
func (b *Backend) Free(t *npu.Tensor) {
	if t == nil || !b.s.markFreeing(t) {
		return
	}
	s, buf, n, pat := b.s, t.Buffer(), t.Bytes(), poison(t.DType())
	// A closed stream drops it: the garbage collector reclaims the buffer.
	b.push(item{name: "Free", ctl: func() {
		fill(buf, n, pat)
		s.recycle(buf, n)
	}})
}
