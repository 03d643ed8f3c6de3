package nccl

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/npuserve/npuserve/hccl"
)

// Device is what a communicator needs of the CUDA backend whose tensors it
// moves; *cuda.Backend implements it (npu/cuda/export.go), and
// hccl.Options.Backend must be one.
type Device interface {
	// Ordinal is the GPU's index among the GPUs this process sees.
	Ordinal() int
	// StreamHandle is the CUstream the backend enqueues its work on: the
	// communicator enqueues its collectives there too, so they run after
	// the ops that produce their inputs and before those that consume
	// their outputs, with no synchronisation in between.
	StreamHandle() uintptr
	// BindContext makes the backend's CUDA context current on the calling
	// OS thread (NCCL, through the CUDA runtime, works on the current
	// context's device).
	BindContext() error
	// SyncStream waits for the work enqueued on the stream so far. It must
	// be safe to call from another goroutine while the backend's own
	// goroutine is blocked in a collective, and must not consume errors
	// the backend holds for its next Sync.
	SyncStream() error
}

// thread is the OS thread that makes NCCL calls for one GPU: a goroutine
// locked to it with the GPU's context current, running the closures
// submitted to it. Communicators of the same GPU share it. NCCL's
// enqueue calls return at once (the communicators are non-blocking), so
// the thread is never held for long; a call that does not return within
// its limit leaves the thread stuck and later calls fail at once.
type thread struct {
	ordinal int
	work    chan func()

	mu    sync.Mutex
	stuck string // a call that never returned
}

var (
	threadMu sync.Mutex
	threads  = map[int]*thread{}
)

// threadFor returns the NCCL thread of d's GPU, starting it on first use.
func threadFor(d Device) (*thread, error) {
	threadMu.Lock()
	defer threadMu.Unlock()
	if t := threads[d.Ordinal()]; t != nil {
		return t, nil
	}
	t := &thread{ordinal: d.Ordinal(), work: make(chan func())}
	ready := make(chan error)
	go t.loop(d, ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	threads[t.ordinal] = t
	return t, nil
}

func (t *thread) loop(d Device, ready chan<- error) {
	runtime.LockOSThread() // for good: the thread belongs to the GPU
	if err := d.BindContext(); err != nil {
		ready <- fmt.Errorf("GPU %d: binding the CUDA context: %w", t.ordinal, err)
		return
	}
	ready <- nil
	for fn := range t.work {
		fn()
	}
}

// do runs fn on the thread and waits at most limit for it.
func (t *thread) do(what string, limit time.Duration, fn func()) error {
	t.mu.Lock()
	stuck := t.stuck
	t.mu.Unlock()
	if stuck != "" {
		return hccl.Errorf(hccl.ErrPoisoned, "GPU %d's NCCL thread is unusable: %s did not return; restart the process", t.ordinal, stuck)
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	done := make(chan struct{})
	select {
	case t.work <- func() { fn(); close(done) }:
	case <-timer.C:
		return hccl.Errorf(hccl.ErrTimeout, "GPU %d's NCCL thread stayed busy for %v", t.ordinal, limit)
	}
	select {
	case <-done:
		return nil
	case <-timer.C:
		t.mu.Lock()
		t.stuck = fmt.Sprintf("%s (started %s)", what, time.Now().Add(-limit).Format(time.RFC3339))
		t.mu.Unlock()
		return hccl.Errorf(hccl.ErrTimeout, "%s on GPU %d did not return within %v", what, t.ordinal, limit)
	}
}
