package cpu

import "sync"

// parallelFor splits [0, n) into at most b.threads contiguous ranges of at
// least grain items and runs fn on each, in parallel, returning when all are
// done. Small n runs inline on the caller's goroutine.
func (b *Backend) parallelFor(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if grain < 1 {
		grain = 1
	}
	parts := min(b.threads, (n+grain-1)/grain)
	if parts <= 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	step := (n + parts - 1) / parts
	for lo := 0; lo < n; lo += step {
		hi := min(lo+step, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	wg.Wait()
}
