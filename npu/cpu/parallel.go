package cpu

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Ops fork and join hundreds of times per decode step, so a fork/join must
// not create goroutines: each Backend has a pool of worker goroutines that
// help the calling goroutine with its ranges. The design rests on one rule:
// the caller always participates and claims ranges itself, from the same
// atomic counter as the helpers, so a job never waits for a worker to
// start, only for ranges a worker has already claimed and is running.
// Hence:
//   - help is opportunistic: a missed wake-up or a busy pool costs
//     parallelism, never correctness or progress;
//   - nested calls (a range calling parallelFor) and concurrent calls from
//     several goroutines cannot deadlock: a goroutine waits only on ranges
//     claimed after its job was posted, by goroutines that run them to the
//     end, so the waits form no cycle;
//   - oversubscription (threads > cores) degrades gracefully: at most
//     GOMAXPROCS-1 helpers are called per job (more cannot run at once),
//     and whoever runs first takes the ranges the others have not.
//
// The split of [0, n) into ranges is the same as ever (results that
// depend on it, such as per-range partial sums, are unchanged); only who
// runs which range, and when, varies.

// parallelFor splits [0, n) into at most b.threads contiguous ranges of at
// least grain items and runs fn on each, in parallel, returning when all are
// done. Small n runs inline on the caller's goroutine. A panic in any range
// is re-raised on the caller's goroutine once all ranges have finished (see
// partPanic).
func (b *Backend) parallelFor(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	grain = max(grain, 1)
	parts := min(b.threads, (n+grain-1)/grain)
	if parts <= 1 {
		fn(0, n)
		return
	}
	b.pool.run(n, (n+parts-1)/parts, b.threads, fn)
}

// parallelChunks runs fn over [0, n) in chunks of `chunk` items handed
// out on demand to up to be.threads goroutines (the caller's among them),
// so that a thread delayed by the OS does not hold up the others.
func (b *Backend) parallelChunks(n, chunk int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	chunk = max(1, chunk)
	if min(b.threads, (n+chunk-1)/chunk) <= 1 {
		fn(0, n)
		return
	}
	b.pool.run(n, chunk, b.threads, fn)
}

// Spinning: an idle worker polls for jobs for a while (spinTime) before
// parking, so that back-to-back ops (the norm within a forward pass) find
// it awake; a caller waiting for its helpers' last ranges polls likewise
// before blocking. A poll is one atomic load of the pool's current job
// (no channel, no lock: with 15 spinners, channel receives and
// runtime.Gosched calls serialised on runtime locks and made 16 threads
// slower than 8). Spinners yield (runtime.Gosched) only when the pool has
// more threads than GOMAXPROCS, so that on an oversubscribed machine a
// spinner does not keep a runnable goroutine off its P; after spinTime
// they park, so an idle engine burns no CPU.
const (
	spinPolls = 256 // polls between clock reads (and yields)
	spinTime  = 60 * time.Microsecond
)

// pool is a Backend's set of worker goroutines. Workers start on demand
// (up to max) and exit when quit is closed, which a cleanup does once the
// Backend is unreachable; they refer to the pool, never to the Backend.
type pool struct {
	max     int32               // workers at most (threads-1)
	started atomic.Int32        // workers running
	awake   atomic.Int32        // workers not parked (spinning or helping)
	procs   atomic.Int32        // GOMAXPROCS as last seen by a caller
	cur     atomic.Pointer[job] // the latest posted job, for helpers to claim ranges of
	wake    chan struct{}       // unbuffered: a send succeeds only if a worker is parked
	quit    chan struct{}
}

// newPool returns the pool of a Backend of threads threads, or nil for
// one thread (everything runs inline), and arranges for its workers to
// exit once b is unreachable.
func newPool(b *Backend, threads int) *pool {
	if threads <= 1 {
		return nil
	}
	p := &pool{
		max:  int32(threads - 1),
		wake: make(chan struct{}),
		quit: make(chan struct{}),
	}
	runtime.AddCleanup(b, func(quit chan struct{}) { close(quit) }, p.quit)
	return p
}

// job is one fork/join: ranges [i*step, min((i+1)*step, n)) for i in
// [0, parts). A finished job may linger in pool.cur until the next is
// posted; a helper finds no range left to claim and ignores it. A newer
// job replaces an older one there (nested or concurrent calls): the older
// one's caller still claims its own remaining ranges.
type job struct {
	fn        func(lo, hi int) // cleared when done, so lingering entries pin nothing
	n, step   int
	parts     int64
	next      atomic.Int64   // next range to claim
	remaining atomic.Int64   // ranges not yet finished
	done      sync.WaitGroup // released by whoever finishes the last range
	panicked  atomic.Pointer[partPanic]
}

// run runs fn over the ranges of [0, n) of step items, with the caller
// and up to maxPar-1 workers, and returns when all are done.
func (p *pool) run(n, step, maxPar int, fn func(lo, hi int)) {
	j := &job{fn: fn, n: n, step: step, parts: int64((n + step - 1) / step)}
	j.remaining.Store(j.parts)
	j.done.Add(1)
	procs := runtime.GOMAXPROCS(0)
	if int(p.procs.Load()) != procs {
		p.procs.Store(int32(procs))
	}
	helpers := min(int(j.parts), maxPar, procs) - 1
	p.cur.Store(j)
	// Awake workers will see the job (a worker still returning from the
	// previous job counts: it is about to spin); wake parked ones, or
	// start new ones, for the rest.
	for range helpers - int(p.awake.Load()) {
		select {
		case p.wake <- struct{}{}:
			p.awake.Add(1)
		default:
			if p.started.Add(1) <= p.max {
				p.awake.Add(1)
				go p.worker()
			} else {
				p.started.Add(-1)
			}
		}
	}
	j.work()
	p.spin(func() bool { return j.remaining.Load() == 0 })
	j.done.Wait()
	j.fn = nil
	if pp := j.panicked.Load(); pp != nil {
		panic(pp)
	}
}

// work claims and runs ranges of j until none is left.
func (j *job) work() {
	for {
		i := j.next.Add(1) - 1
		if i >= j.parts {
			return
		}
		j.runRange(int(i))
	}
}

// runRange runs range i, recording a panic rather than letting it kill
// the process (on a worker) or skip the join (on the caller).
func (j *job) runRange(i int) {
	defer func() {
		if r := recover(); r != nil {
			pp, ok := r.(*partPanic) // from a nested parallelFor: already has its stack
			if !ok {
				pp = &partPanic{value: r, stack: debug.Stack()}
			}
			j.panicked.CompareAndSwap(nil, pp)
		}
		if j.remaining.Add(-1) == 0 {
			j.done.Done()
		}
	}()
	lo := i * j.step
	j.fn(lo, min(lo+j.step, j.n))
}

// spin polls ready for up to spinTime and reports whether it became true.
func (p *pool) spin(ready func() bool) bool {
	yield := p.max+1 > p.procs.Load() // oversubscribed: let others run
	var start time.Time
	for {
		for range spinPolls {
			if ready() {
				return true
			}
		}
		if start.IsZero() {
			start = time.Now()
		} else if time.Since(start) > spinTime {
			return false
		}
		if yield {
			runtime.Gosched()
		}
	}
}

// worker helps with posted jobs, spinning between them, and parks when
// none comes for a while. It starts awake, counted by its starter.
func (p *pool) worker() {
	awake := true
	defer func() { // also on runtime.Goexit in a range
		if awake {
			p.awake.Add(-1)
		}
		p.started.Add(-1)
	}()
	for {
		if j := p.poll(); j != nil {
			j.work()
			continue
		}
		// Re-check after leaving the awake count: a caller that counted
		// this worker woke no one for its job.
		awake = false
		p.awake.Add(-1)
		if j := p.open(); j != nil {
			awake = true
			p.awake.Add(1)
			j.work()
			continue
		}
		select {
		case <-p.wake: // the waker counted this worker awake
			awake = true
		case <-p.quit:
			return
		}
	}
}

// open returns the current job if it has ranges left to claim.
func (p *pool) open() *job {
	if j := p.cur.Load(); j != nil && j.next.Load() < j.parts {
		return j
	}
	return nil
}

// poll spins for a job with ranges to claim and returns it, or nil after
// the spin. It returns nil at once when more workers are awake than can
// run beside a caller (GOMAXPROCS-1): extra spinners would only take
// turns on the Ps, and the caller's too.
func (p *pool) poll() *job {
	if p.awake.Load() >= p.procs.Load() {
		return nil
	}
	var j *job
	p.spin(func() bool { j = p.open(); return j != nil })
	return j
}

// partPanic is the value parallelFor panics with on the caller's
// goroutine when a range panicked: the original value and the stack of
// the goroutine that raised it (the caller's own stack does not say where
// a worker failed). It is an error with the original message (stacks do
// not belong in the errors requests fail with), whose Stack is the
// worker's stack for the engine's log, and whose Unwrap is the original
// value when that is an error, so errors.As and errors.Is still find it.
type partPanic struct {
	value any
	stack []byte
}

func (p *partPanic) Error() string { return fmt.Sprint(p.value) }

// Stack is the stack of the goroutine whose range panicked.
func (p *partPanic) Stack() []byte { return p.stack }

func (p *partPanic) Unwrap() error {
	err, _ := p.value.(error)
	return err
}
