package cpuasync

import (
	"runtime"
	"sync"
	"syscall"
	"testing"
)

// TestStreamKeepsItsThread: the stream runs on one OS thread for its whole
// life (an accelerator context is bound to one), also across the idle
// waits between batches while other goroutines keep the scheduler busy.
func TestStreamKeepsItsThread(t *testing.T) {
	b := newBackend(t)
	tid := func() int {
		var id int
		if err := b.RunOnStream(func() error { id = syscall.Gettid(); return nil }); err != nil {
			t.Fatal(err)
		}
		return id
	}
	first := tid()
	for i := range 200 {
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 100 {
					runtime.Gosched()
				}
			})
		}
		wg.Wait()
		if got := tid(); got != first {
			t.Fatalf("round %d: stream ran on thread %d, first on %d", i, got, first)
		}
	}
}
