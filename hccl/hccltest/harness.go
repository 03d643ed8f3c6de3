package hccltest

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/npu"
)

// Rank is one rank of a world under test: its communicator and the memory
// its tensors live in (the CPU backend for TCP, device memory for HCCL).
type Rank struct {
	Comm hccl.Comm
	Mem  npu.Memory
}

// Factory builds a fresh world of size ranks in this process, one
// communicator per rank, registering cleanup with t. It calls t.Skip when
// the transport cannot run here.
type Factory func(t *testing.T, size int, opts hccl.Options) []Rank

// caseDeadline bounds one case in the harness, well above any sane run, so
// a hanging transport fails the test instead of stalling it.
const caseDeadline = 60 * time.Second

// RunCases runs cases as subtests on ranks, all in this process (one
// goroutine per rank), checking each rank's result and, for Same cases,
// that every rank got the same bytes. A communicator failure ends the run:
// the world is poisoned.
func RunCases(t *testing.T, ranks []Rank, cases []Case) {
	t.Helper()
	for _, cs := range cases {
		broken := false
		t.Run(cs.Name, func(t *testing.T) {
			outs := make([][]byte, len(ranks))
			errs := make([]error, len(ranks))
			var wg sync.WaitGroup
			for r, rk := range ranks {
				wg.Add(1)
				go func() {
					defer wg.Done()
					outs[r], errs[r] = cs.Run(rk.Comm, rk.Mem)
				}()
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
				if cs.Done != nil {
					cs.Done()
				}
			case <-time.After(caseDeadline):
				t.Fatalf("case did not finish within %v: the transport hangs", caseDeadline)
			}
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
					broken = broken || IsCommError(err)
				}
			}
			if cs.Same && !t.Failed() {
				for r := 1; r < len(outs); r++ {
					if !bytes.Equal(outs[r], outs[0]) {
						t.Errorf("rank %d's result differs from rank 0's: ranks must get identical bits", r)
					}
				}
			}
		})
		if broken {
			t.Fatalf("communicator failed in %s; remaining cases skipped", cs.Name)
		}
	}
}

// RunRank runs cases on one rank of a world spread over processes (every
// process runs the same list in the same order) and returns one line per
// failed case. It stops at the first communicator failure.
func RunRank(c hccl.Comm, m npu.Memory, cases []Case) []string {
	var fails []string
	for _, cs := range cases {
		_, err := cs.Run(c, m)
		if cs.Done != nil {
			cs.Done()
		}
		if err != nil {
			fails = append(fails, fmt.Sprintf("%s: rank %d: %v", cs.Name, c.Rank(), err))
			if IsCommError(err) {
				break
			}
		}
	}
	return fails
}

var errHung = errors.New("hung")

// RunFailures checks the failure behaviour every transport must have: a
// rank that never calls the collective, ranks that call different ones, a
// peer that closed its communicator, Abort from another goroutine, and bad
// arguments. Each must end in an error on every rank within the timeout
// (plus scheduling slack), never a hang, and leave the communicator
// poisoned.
func RunFailures(t *testing.T, f Factory, caps Caps) {
	const timeout = 1200 * time.Millisecond // aborts must beat it by a margin that holds on a loaded 2-core machine
	slack := 3 * time.Second                // busy CI machines
	opts := hccl.Options{Timeout: timeout, InitTimeout: 20 * time.Second, Name: "conformance"}

	// within runs fn and reports a hang (still blocked well past limit)
	// as a test error; it may be called from any goroutine.
	within := func(t *testing.T, limit time.Duration, fn func() error) (error, time.Duration) {
		start := time.Now()
		ch := make(chan error, 1)
		go func() { ch <- fn() }()
		select {
		case err := <-ch:
			return err, time.Since(start)
		case <-time.After(limit + 10*time.Second):
			t.Errorf("call still blocked after %v (limit %v): hang", limit+10*time.Second, limit)
			return errHung, time.Since(start)
		}
	}
	checkPoisoned := func(t *testing.T, c hccl.Comm) {
		t.Helper()
		err, el := within(t, 100*time.Millisecond, c.Barrier)
		if !errors.Is(err, hccl.ErrPoisoned) {
			t.Errorf("rank %d: after a failure, Barrier returned %v, want ErrPoisoned", c.Rank(), err)
		} else if el > 100*time.Millisecond {
			t.Errorf("rank %d: poisoned Barrier took %v, want immediate", c.Rank(), el)
		}
	}
	alloc := func(rk Rank, n int) *npu.Tensor {
		return tensor(rk.Mem, npu.F32, gen(7, rk.Comm.Rank(), n, npu.F32, hccl.Sum))
	}

	t.Run("rank-never-calls", func(t *testing.T) {
		ranks := f(t, 3, opts)
		var wg sync.WaitGroup
		for r := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err, el := within(t, timeout+slack, func() error { return ranks[r].Comm.AllReduce(alloc(ranks[r], 1023), hccl.Sum) })
				switch {
				case err == nil:
					t.Errorf("rank %d: AllReduce without rank 2 succeeded", r)
				case el < timeout*9/10 && !errors.Is(err, hccl.ErrPeerAborted):
					t.Errorf("rank %d: failed after %v, before the %v timeout: %v", r, el, timeout, err)
				case el > timeout+slack:
					t.Errorf("rank %d: failed only after %v (timeout %v): %v", r, el, timeout, err)
				case !errors.Is(err, hccl.ErrTimeout):
					t.Errorf("rank %d: error does not wrap ErrTimeout: %v", r, err)
				case !strings.Contains(err.Error(), "AllReduce"):
					t.Errorf("rank %d: error does not name the operation: %v", r, err)
				case caps.NamesPeer && !strings.Contains(err.Error(), "rank 2"):
					t.Errorf("rank %d: error does not name the missing rank 2: %v", r, err)
				default:
					t.Logf("rank %d after %v: %v", r, el.Round(time.Millisecond), err)
				}
				checkPoisoned(t, ranks[r].Comm)
			}()
		}
		wg.Wait()
	})

	t.Run("mismatched-collectives", func(t *testing.T) {
		ranks := f(t, 2, opts)
		calls := []func() error{
			func() error { return ranks[0].Comm.AllReduce(alloc(ranks[0], 64), hccl.Sum) },
			func() error {
				out := npu.Must(ranks[1].Mem.Alloc(npu.F32, 64))
				return ranks[1].Comm.AllGather(out, alloc(ranks[1], 32))
			},
		}
		var wg sync.WaitGroup
		for r, call := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err, el := within(t, timeout+slack, call)
				switch {
				case err == nil:
					t.Errorf("rank %d: mismatched collective succeeded", r)
				case caps.FastFailure && !errors.Is(err, hccl.ErrMismatch):
					t.Errorf("rank %d: want ErrMismatch, got %v", r, err)
				case caps.FastFailure && el > timeout/2:
					t.Errorf("rank %d: mismatch noticed only after %v", r, el)
				default:
					t.Logf("rank %d after %v: %v", r, el.Round(time.Millisecond), err)
				}
				checkPoisoned(t, ranks[r].Comm)
			}()
		}
		wg.Wait()
	})

	t.Run("peer-closed", func(t *testing.T) {
		ranks := f(t, 3, opts)
		if err := ranks[2].Comm.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		var wg sync.WaitGroup
		for r := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err, el := within(t, timeout+slack, func() error { return ranks[r].Comm.AllReduce(alloc(ranks[r], 17), hccl.Sum) })
				switch {
				case err == nil:
					t.Errorf("rank %d: AllReduce with a closed peer succeeded", r)
				case caps.FastFailure && el > timeout/2:
					t.Errorf("rank %d: closed peer noticed only after %v: %v", r, el, err)
				case caps.FastFailure && !errors.Is(err, hccl.ErrPeerLost) && !errors.Is(err, hccl.ErrPeerAborted):
					t.Errorf("rank %d: want ErrPeerLost, got %v", r, err)
				case caps.NamesPeer && !strings.Contains(err.Error(), "rank 2"):
					t.Errorf("rank %d: error does not name rank 2: %v", r, err)
				default:
					t.Logf("rank %d after %v: %v", r, el.Round(time.Millisecond), err)
				}
			}()
		}
		wg.Wait()
		err := ranks[2].Comm.Barrier()
		if !errors.Is(err, hccl.ErrClosed) {
			t.Errorf("Barrier after Close: %v, want ErrClosed", err)
		}
	})

	t.Run("abort-in-flight", func(t *testing.T) {
		ranks := f(t, 2, opts)
		reason := errors.New("liveness monitor: node B missed 3 heartbeats")
		go func() {
			time.Sleep(timeout / 4)
			ranks[0].Comm.Abort(reason)
		}()
		err, el := within(t, timeout+slack, func() error { return ranks[0].Comm.AllReduce(alloc(ranks[0], 17), hccl.Sum) })
		switch {
		case err == nil:
			t.Errorf("aborted AllReduce succeeded")
		case el > timeout*3/4:
			t.Errorf("Abort took effect only after %v: %v", el, err)
		case !errors.Is(err, hccl.ErrPoisoned) || !errors.Is(err, reason):
			t.Errorf("aborted AllReduce: want ErrPoisoned wrapping the reason, got %v", err)
		default:
			t.Logf("rank 0 after %v: %v", el.Round(time.Millisecond), err)
		}
		// The peer, arriving late, learns why at once: its collective may
		// still complete if rank 0 had already sent its part (eager
		// transports), but the next one fails with rank 0's reason.
		start := time.Now()
		err, _ = within(t, timeout+slack, func() error { return ranks[1].Comm.AllReduce(alloc(ranks[1], 17), hccl.Sum) })
		if err == nil {
			err, _ = within(t, timeout+slack, ranks[1].Comm.Barrier)
		}
		el = time.Since(start)
		switch {
		case err == nil:
			t.Errorf("rank 1: two collectives with an aborted peer succeeded")
		case caps.FastFailure && (!errors.Is(err, hccl.ErrPeerAborted) || !strings.Contains(err.Error(), "missed 3 heartbeats")):
			t.Errorf("rank 1: want ErrPeerAborted carrying rank 0's reason, got %v", err)
		case caps.FastFailure && el > timeout/2:
			t.Errorf("rank 1: learnt of the abort only after %v", el)
		default:
			t.Logf("rank 1 after %v: %v", el.Round(time.Millisecond), err)
		}
	})

	t.Run("bad-arguments", func(t *testing.T) {
		ranks := f(t, 2, opts)
		var wg sync.WaitGroup
		for r := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				in := alloc(ranks[r], 8)
				n := 16
				if r == 0 {
					n = 15 // wrong: must be Size()*8
				}
				out := npu.Must(ranks[r].Mem.Alloc(npu.F32, n))
				err, el := within(t, timeout+slack, func() error { return ranks[r].Comm.AllGather(out, in) })
				switch {
				case err == nil:
					t.Errorf("rank %d: AllGather succeeded", r)
				case r == 0 && !errors.Is(err, hccl.ErrInvalid):
					t.Errorf("rank 0: want ErrInvalid for a wrong output size, got %v", err)
				case r == 1 && caps.FastFailure && el > timeout/2:
					t.Errorf("rank 1: peer's failure noticed only after %v: %v", el, err)
				default:
					t.Logf("rank %d after %v: %v", r, el.Round(time.Millisecond), err)
				}
				checkPoisoned(t, ranks[r].Comm)
			}()
		}
		wg.Wait()
	})
}

// World builds a world of size ranks from one root info in this process:
// it checks that ri survives its string form, starts every rank at once
// (start(r) returns rank r, a failure failing the test after all have
// returned) and closes the communicators when the test ends.
func World(t *testing.T, ri hccl.RootInfo, size int, start func(r int) (Rank, error)) []Rank {
	t.Helper()
	if back, err := hccl.ParseRootInfo(ri.String()); err != nil || back != ri {
		t.Fatalf("root info does not survive its string form: %v", err)
	}
	ranks := make([]Rank, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Go(func() { ranks[r], errs[r] = start(r) })
	}
	wg.Wait()
	for r, rk := range ranks {
		if rk.Comm != nil {
			t.Cleanup(func() {
				if err := rk.Comm.Close(); err != nil {
					t.Errorf("rank %d: Close: %v", r, err)
				}
			})
		}
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
	}
	return ranks
}
