package cpu

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/npuserve/npuserve/npu"
)

// spawnFor is parallelFor as it was before the pool, one new goroutine per
// range: the baseline of BenchmarkParallelForkJoin, and the reference
// split of TestParallelForRanges.
func spawnFor(threads, n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	grain = max(grain, 1)
	parts := min(threads, (n+grain-1)/grain)
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

// rangeSet collects the ranges fn was called with.
type rangeSet struct {
	mu sync.Mutex
	r  map[[2]int]int
}

func (s *rangeSet) add(lo, hi int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.r == nil {
		s.r = map[[2]int]int{}
	}
	s.r[[2]int{lo, hi}]++
}

// TestParallelForRanges checks that the pool calls fn on exactly the
// ranges of the goroutine-per-range implementation, each once, so that
// results depending on the split are unchanged; likewise parallelChunks
// on its chunks.
func TestParallelForRanges(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 4, 7, 16} {
		be := New(threads)
		for _, n := range []int{0, 1, 2, 5, 9, 10, 16, 17, 100, 1000, 4097} {
			for _, grain := range []int{0, 1, 3, 64, 5000} {
				var got, want rangeSet
				be.parallelFor(n, grain, got.add)
				spawnFor(threads, n, grain, want.add)
				if fmt.Sprint(got.r) != fmt.Sprint(want.r) {
					t.Fatalf("threads %d n %d grain %d: ranges %v, want %v", threads, n, grain, got.r, want.r)
				}
			}
			for _, chunk := range []int{1, 3, 64} {
				var got rangeSet
				be.parallelChunks(n, chunk, got.add)
				covered := 0
				for r, c := range got.r {
					if c != 1 || r[0]%chunk != 0 || (r[1] != min(r[0]+chunk, n) && !(r == [2]int{0, n})) {
						t.Fatalf("threads %d n %d chunk %d: bad chunk %v ×%d", threads, n, chunk, r, c)
					}
					covered += r[1] - r[0]
				}
				if covered != n {
					t.Fatalf("threads %d n %d chunk %d: covered %d", threads, n, chunk, covered)
				}
			}
		}
	}
}

type testPanicErr struct{ code int }

func (e *testPanicErr) Error() string { return fmt.Sprintf("test panic %d", e.code) }

// catch runs f and returns what it panicked with.
func catch(f func()) (p any) {
	defer func() { p = recover() }()
	f()
	return nil
}

// TestParallelForPanic checks that a panic in any range, on the caller or
// on a worker, reaches the caller's recover after every other range has
// finished, keeping an error value reachable through errors.As and the
// panicking goroutine's stack in the message, and that the pool goes on
// working afterwards.
func TestParallelForPanic(t *testing.T) {
	be := New(4)
	for bad := range 4 {
		var finished atomic.Int32
		p := catch(func() {
			be.parallelFor(4, 1, func(lo, hi int) {
				if lo == bad {
					panic(&testPanicErr{code: bad})
				}
				time.Sleep(time.Millisecond)
				finished.Add(1)
			})
		})
		err, ok := p.(error)
		if !ok {
			t.Fatalf("range %d: recovered %T %v, want an error", bad, p, p)
		}
		if n := finished.Load(); n != 3 {
			t.Errorf("range %d: %d other ranges finished before the panic reached the caller, want 3", bad, n)
		}
		var te *testPanicErr
		if !errors.As(err, &te) || te.code != bad {
			t.Errorf("range %d: errors.As lost the value: %v", bad, err)
		}
		st, ok := p.(interface{ Stack() []byte })
		if !ok || !strings.Contains(string(st.Stack()), "parallel_test.go") {
			t.Errorf("range %d: the panic does not carry the panicking goroutine's stack", bad)
		}
		if strings.Contains(err.Error(), "goroutine") {
			t.Errorf("range %d: the error message carries a stack: %v", bad, err)
		}
		var sum atomic.Int64
		be.parallelFor(1000, 1, func(lo, hi int) { sum.Add(int64(hi - lo)) })
		if sum.Load() != 1000 {
			t.Fatalf("after a panic: covered %d of 1000", sum.Load())
		}
	}

	// A runtime error in a worker stays a runtime.Error to errors.As, and
	// a nested parallelFor's panic is not wrapped twice.
	p := catch(func() {
		be.parallelFor(4, 1, func(lo, hi int) {
			be.parallelFor(4, 1, func(lo, hi int) {
				if lo == 3 {
					var s []int
					_ = s[lo]
				}
			})
		})
	})
	var re runtime.Error
	if err, _ := p.(error); !errors.As(err, &re) {
		t.Fatalf("recovered %T %v, want a runtime.Error inside", p, p)
	}
	if pp, ok := p.(*partPanic); !ok {
		t.Errorf("recovered %T, want *partPanic", p)
	} else if _, twice := pp.value.(*partPanic); twice {
		t.Errorf("nested panic wrapped more than once: %v", pp)
	}
	// A non-error value keeps its text.
	p = catch(func() { be.parallelFor(2, 1, func(lo, hi int) { panic("boom") }) })
	if err, _ := p.(error); err == nil || err.Error() != "boom" {
		t.Fatalf("recovered %v, want boom first", p)
	}
}

// TestParallelForNestedConcurrent runs nested parallelFor calls (on the
// same Backend and on others) from several goroutines at once, more than
// there are threads or cores: none may deadlock or lose a range.
func TestParallelForNestedConcurrent(t *testing.T) {
	shared := New(4)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inner := New(1 + g%3)
			for range 200 {
				var sum atomic.Int64
				shared.parallelFor(8, 1, func(lo, hi int) {
					for range hi - lo {
						shared.parallelFor(6, 1, func(lo, hi int) {
							for range hi - lo {
								inner.parallelChunks(5, 1, func(lo, hi int) { sum.Add(int64(hi - lo)) })
							}
						})
					}
				})
				if s := sum.Load(); s != 8*6*5 {
					t.Errorf("covered %d, want %d", s, 8*6*5)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestParallelPoolStops checks that the workers of Backends that became
// unreachable exit, so that tests making thousands of Backends do not
// accumulate goroutines.
func TestParallelPoolStops(t *testing.T) {
	runtime.GC()
	before := runtime.NumGoroutine()
	for range 500 {
		be := New(4)
		be.parallelFor(4, 1, func(lo, hi int) { time.Sleep(10 * time.Microsecond) })
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		n := runtime.NumGoroutine()
		if n <= before+4 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines left, %d before", n, before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BenchmarkParallelForkJoin is the cost of one empty fork/join over
// `threads` ranges: goroutine-per-range ("spawn", the old parallelFor)
// against the pool. With more threads than cores the pool should cost
// about what it does with as many threads as cores.
func BenchmarkParallelForkJoin(b *testing.B) {
	for _, threads := range []int{1, 2, 4, 8, 16} {
		b.Run(fmt.Sprintf("spawn/threads%d", threads), func(b *testing.B) {
			for b.Loop() {
				spawnFor(threads, threads, 1, func(lo, hi int) {})
			}
		})
		b.Run(fmt.Sprintf("pool/threads%d", threads), func(b *testing.B) {
			be := New(threads)
			for b.Loop() {
				be.parallelFor(threads, 1, func(lo, hi int) {})
			}
		})
	}
}

// BenchmarkParallelOps times decode-sized ops whose work is small enough
// that the fork/join shows: a matrix-vector product with cache-resident
// BF16 weights (M = 1, K = 1024) and an RMSNorm of 64 rows of 1024.
func BenchmarkParallelOps(b *testing.B) {
	for _, threads := range []int{1, 2, 4, 8, 16} {
		be := New(threads)
		for _, n := range []int{1024, 4096} {
			b.Run(fmt.Sprintf("GEMV/N%d/threads%d", n, threads), func(b *testing.B) {
				x, w, out := benchTensor(be, npu.F32, 1, 1024), benchTensor(be, npu.BF16, n, 1024), npu.Must(be.Alloc(npu.F32, 1, n))
				be.MatMul(out, x, w)
				b.ResetTimer()
				for b.Loop() {
					be.MatMul(out, x, w)
				}
			})
		}
		b.Run(fmt.Sprintf("RMSNorm/64x1024/threads%d", threads), func(b *testing.B) {
			x, w := benchTensor(be, npu.F32, 64, 1024), benchTensor(be, npu.F32, 1024)
			out := npu.Must(be.Alloc(npu.F32, 64, 1024))
			for b.Loop() {
				be.RMSNorm(out, x, w, 1e-5)
			}
		})
	}
}
