package cpuasync

import (
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/cpu"
)

// ErrClosed is wrapped by the errors of a backend used after Close (ops,
// which return nothing, panic with it).
var ErrClosed = errors.New("cpu-async: backend closed")

// OpError is the failure of a queued op: the value it panicked with on the
// stream, the op's name and where it was enqueued (the panic's own stack is
// the stream goroutine's, which does not show the caller). It unwraps to
// the panic value when that is an error, so errors.Is and errors.As see
// through it (runtime errors, a transport's sentinel errors).
type OpError struct {
	Op    string // the Backend method that enqueued the op ("MatMul", "Upload", "RunOnStream")
	Site  string // file:line of the call that enqueued it, outside package npu
	Value any    // what the op panicked with
	Stack []byte // the stream goroutine's stack at the panic
	// Skipped is the number of ops enqueued after the failing one that
	// were skipped before the failure was reported.
	Skipped int
}

func (e *OpError) Error() string {
	msg := fmt.Sprintf("cpu-async: %s", e.Op)
	if e.Site != "" {
		msg += " (enqueued at " + e.Site + ")"
	}
	msg += fmt.Sprintf(" failed: %v", e.Value)
	if e.Skipped > 0 {
		msg += fmt.Sprintf("; %d later ops skipped", e.Skipped)
	}
	return msg
}

// Unwrap returns the panic value when it is an error.
func (e *OpError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// item is one entry of the stream's queue. An op (op != nil) computes on
// tensors and is skipped while the stream has failed; a control item
// (ctl != nil: memory management and the sync points) always runs, so that
// poisoning, recycling and the waiters' wake-ups do not depend on whether
// an earlier op failed.
type item struct {
	name string
	op   func(c *cpu.Backend)
	ctl  func()
	pcs  [6]uintptr // enqueue site (op items only)
}

// stream is the backend's queue and the goroutine that runs it. It holds
// everything the goroutine needs and nothing that refers back to the
// Backend handle, so that the handle can become unreachable while the
// goroutine waits (see New).
type stream struct {
	cpu *cpu.Backend
	id  uint32 // tags this backend's buffers (see tag.go)

	mu     sync.Mutex
	cond   sync.Cond // signalled on enqueue and on close
	queue  []item
	closed bool
	exited chan struct{} // closed when the goroutine returns

	// Touched by the stream goroutine only.
	err     error // sticky failure of a queued op, until a sync point takes it
	skipped int   // ops skipped since err was set

	// Guarded by memMu (tag.go): the recycled buffers of this backend by
	// byte size, and their total size.
	free   map[int][]npu.Buffer
	cached int64
}

// loop runs the queue in order until the stream is closed and drained.
// The goroutine is locked to its OS thread and never unlocks it: one
// thread per device for its whole life, as an accelerator context bound to
// a thread needs; the runtime ends the thread with the goroutine.
func (s *stream) loop() {
	runtime.LockOSThread()
	defer close(s.exited)
	var batch []item
	for {
		s.mu.Lock()
		for len(s.queue) == 0 && !s.closed {
			s.cond.Wait()
		}
		if len(s.queue) == 0 {
			s.mu.Unlock()
			return
		}
		// Take everything queued so far; enqueuers append to the other
		// slice meanwhile.
		batch, s.queue = s.queue, batch[:0]
		s.mu.Unlock()
		for i := range batch {
			s.exec(&batch[i])
			batch[i] = item{} // drop the closure's tensors now, not at the next swap
		}
	}
}

// exec runs one item on the stream goroutine.
func (s *stream) exec(it *item) {
	if it.ctl != nil {
		it.ctl()
		return
	}
	if s.err != nil {
		s.skipped++
		return
	}
	defer func() {
		if r := recover(); r != nil {
			s.err = &OpError{Op: it.name, Site: site(it.pcs[:]), Value: r, Stack: debug.Stack()}
		}
	}()
	it.op(s.cpu)
}

// take returns and clears the sticky failure (stream goroutine only).
func (s *stream) take() error {
	err := s.err
	if e, ok := err.(*OpError); ok {
		e.Skipped = s.skipped
	}
	s.err, s.skipped = nil, 0
	return err
}

// push appends it to the queue; false when the stream is closed.
func (s *stream) push(it item) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.queue = append(s.queue, it)
	s.cond.Signal()
	return true
}

// shutdown closes the queue behind a final sync point and waits for the
// goroutine to exit, returning the failure that point took (nil when the
// stream was already closed).
func (s *stream) shutdown() error {
	done := make(chan error, 1)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.exited
		return nil
	}
	s.queue = append(s.queue, item{name: "Close", ctl: func() { done <- s.take() }})
	s.closed = true
	s.cond.Signal()
	s.mu.Unlock()
	err := <-done
	<-s.exited
	return err
}

// release closes the queue without waiting: the cleanup of an unreachable
// Backend. The goroutine runs what is still queued (nobody can wait for it
// any more) and exits.
func (s *stream) release() {
	s.mu.Lock()
	s.closed = true
	s.cond.Signal()
	s.mu.Unlock()
}

// protect runs fn, turning a panic into an *OpError.
func protect(name string, fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &OpError{Op: name, Value: r, Stack: debug.Stack()}
		}
	}()
	return fn()
}

// npuPkg is the import path of package npu; frames inside it and inside
// this package are skipped when naming an op's site (npu.RunOnStream,
// npu.BatchLayout.Upload call in on behalf of their callers).
var npuPkg = strings.TrimSuffix(reflect.TypeFor[Backend]().PkgPath(), "/cpuasync")

// site names the first frame of pcs outside packages npu and cpuasync
// (their tests count as outside).
func site(pcs []uintptr) string {
	n := 0
	for n < len(pcs) && pcs[n] != 0 {
		n++
	}
	if n == 0 {
		return ""
	}
	frames := runtime.CallersFrames(pcs[:n])
	var last runtime.Frame
	for {
		f, more := frames.Next()
		last = f
		pkg := f.Function
		if i := strings.LastIndexByte(pkg, '/'); i >= 0 {
			if j := strings.IndexByte(pkg[i:], '.'); j >= 0 {
				pkg = pkg[:i+j]
			}
		}
		if pkg != npuPkg && pkg != npuPkg+"/cpuasync" || strings.HasSuffix(f.File, "_test.go") {
			break
		}
		if !more {
			break
		}
	}
	return fmt.Sprintf("%s:%d", last.File, last.Line)
}
