package nccl

import (
	"fmt"
	"time"

	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/npu"
)

// Bounds on the calls around an operation.
const (
	// callLimit bounds one NCCL call on the GPU's thread: enqueueing on a
	// non-blocking communicator, creating one, finalizing or aborting it.
	callLimit = 60 * time.Second
	// drainLimit bounds ncclCommFinalize in Close.
	drainLimit = 10 * time.Second
	// pollSlice is how often a wait looks at the stop flag and NCCL's
	// asynchronous error: Abort and Close take effect within about it.
	pollSlice = 5 * time.Millisecond
	// enqueueSlice is the poll interval while NCCL is still enqueueing
	// (ncclInProgress: connections made at the first use of a peer).
	enqueueSlice = 200 * time.Microsecond
	// skipped is what an enqueue returns when it had nothing to do.
	skipped = -1
)

// deviceBuffer is implemented by the CUDA backend's buffers.
type deviceBuffer interface {
	npu.Buffer
	// DevicePointer is the device address of the buffer's first byte.
	DevicePointer() uintptr
	// DeviceID is the ordinal of the GPU the buffer lives on.
	DeviceID() int
}

// comm is one rank's NCCL communicator.
type comm struct {
	hccl.DeviceComm // Mu also guards released and barrier
	dev             Device
	be              npu.Backend // for the barrier's scratch tensor
	thr             *thread
	h               uintptr // ncclComm_t

	released bool        // the ncclComm_t was aborted or destroyed
	barrier  *npu.Tensor // I32[1], allocated by the first Barrier
}

var _ hccl.Comm = (*comm)(nil)

func initComm(ri hccl.RootInfo, rank, size int, opts hccl.Options) (hccl.Comm, error) {
	start := time.Now()
	fail := func(err error) error {
		return &hccl.OpError{Comm: opts.Name, Rank: rank, Size: size, Op: "Init", Elapsed: time.Since(start), Limit: opts.InitTimeout, Err: err}
	}
	id, err := decodeRootInfo(ri)
	if err != nil {
		return nil, fail(err)
	}
	dev, ok := opts.Backend.(Device)
	if !ok {
		return nil, fail(hccl.Errorf(hccl.ErrInvalid, "NCCL moves the device tensors of a CUDA backend: set Options.Backend to the rank's *cuda.Backend (got %T)", opts.Backend))
	}
	thr, err := threadFor(dev)
	if err != nil {
		return nil, fail(err)
	}
	c := &comm{dev: dev, be: opts.Backend, thr: thr}
	c.Init(rank, size, opts)
	nonblocking := libHasConfig()
	limit := callLimit
	if !nonblocking { // ncclCommInitRank waits for every rank
		limit = opts.InitTimeout + 5*time.Second
	}
	var rc int
	err = thr.do("ncclCommInitRank", limit, func() {
		if rc = bindError(dev.BindContext()); rc == ncclSuccess {
			c.h, rc = libInit(size, id, rank, nonblocking)
		}
	})
	if err != nil {
		return nil, fail(fmt.Errorf("%w (are all %d ranks started with the same root info and size?)", err, size))
	}
	what := fmt.Sprintf("ncclCommInitRank(rank %d of %d, GPU %d)", rank, size, dev.Ordinal())
	deadline := start.Add(opts.InitTimeout)
	for rc == ncclInProgress {
		if time.Now().After(deadline) {
			c.abortNCCL()
			return nil, fail(hccl.Errorf(hccl.ErrTimeout, "%s: the other ranks did not join within %v: are all %d started with the same root info and size?", what, opts.InitTimeout, size))
		}
		time.Sleep(time.Millisecond)
		rc = libAsyncError(c.h)
	}
	if rc == bindFailed {
		return nil, fail(hccl.Errorf(hccl.ErrInvalid, "%s: binding the CUDA context failed", what))
	}
	if rc != ncclSuccess {
		err := resultError(what, rc, c.h)
		if c.h != 0 {
			c.abortNCCL()
		}
		return nil, fail(err)
	}
	return c, nil
}

// bindFailed stands for a failed Device.BindContext among NCCL's codes.
const bindFailed = -99990

func bindError(err error) int {
	if err != nil {
		return bindFailed
	}
	return ncclSuccess
}

// call is one NCCL operation: validate, enqueue on the backend's stream
// (on the GPU's thread), wait for the stream with the timeout.
type call struct {
	name     string
	p2p      bool
	describe func() string
	check    func() error         // argument validation, before anything is enqueued
	enqueue  func() (int, string) // the ncclResult_t (or skipped) and the call's name
}

func (c *comm) run(k call) error {
	dc := hccl.DeviceCall{Name: k.name, P2P: k.p2p, Describe: k.describe, Check: k.check}
	// An invalid call aborts the NCCL communicator: tell the peers
	// rather than leave them waiting.
	return c.Run(dc, c.abortNCCL, func(deadline time.Time) (stuck, failed error) {
		rc, what := 0, ""
		if err := c.thr.do(k.name, callLimit, func() { rc, what = k.enqueue() }); err != nil {
			return err, nil // the thread is stuck in NCCL
		}
		switch rc {
		case skipped:
		case ncclSuccess, ncclInProgress:
			failed = c.wait(what, deadline, rc == ncclInProgress)
		default:
			failed = resultError(what, rc, c.h)
			c.abortNCCL()
		}
		if c.Stop.Load() {
			c.abortNCCL() // Abort or Close came while this operation ran
		}
		return nil, failed
	})
}

// wait waits until the stream has run the operation (and the work
// enqueued before it), looking every pollSlice at the stop flag, NCCL's
// asynchronous error and the deadline. pending says NCCL has not finished
// enqueueing yet (ncclInProgress): the stream is waited for only once it
// has. On a failure the communicator is aborted (abandon).
func (c *comm) wait(what string, deadline time.Time, pending bool) error {
	var done chan error
	startSync := func() {
		done = make(chan error, 1)
		go func() { done <- c.dev.SyncStream() }()
	}
	if !pending {
		startSync()
	}
	timer := time.NewTimer(pollSlice) // Reset below discards a stale expiry (Go 1.23 timers)
	defer timer.Stop()
	for {
		if c.Stop.Load() {
			return c.abandon(hccl.Errorf(hccl.ErrPoisoned, "%s: aborted while waiting for the stream", what))
		}
		switch e := libAsyncError(c.h); {
		case e == ncclInProgress:
		case e != ncclSuccess:
			return c.abandon(resultError(what, e, c.h))
		case done == nil:
			startSync()
		}
		left := time.Until(deadline)
		if left <= 0 {
			return c.abandon(hccl.Errorf(hccl.ErrTimeout, "%s did not complete on the stream (NCCL does not say which rank is missing: look for the rank that did not reach this call; the limit also counts the backend's work enqueued before it)", what))
		}
		slice := pollSlice
		if done == nil {
			slice = enqueueSlice
		}
		timer.Reset(min(slice, left))
		select {
		case err := <-done:
			if err != nil {
				return c.abandon(fmt.Errorf("%s: the CUDA stream failed: %w", what, err))
			}
			if e := libAsyncError(c.h); e != ncclSuccess && e != ncclInProgress {
				return c.abandon(resultError(what, e, c.h))
			}
			return nil
		case <-timer.C:
		}
	}
}

// abandon aborts the NCCL communicator after a failure, which tells
// NCCL's kernels to stop. It does not wait for the stream to drain: the
// sync started by wait (if any) returns in the background once the work
// enqueued before the collective is done, and touches nothing else.
func (c *comm) abandon(err error) error {
	c.abortNCCL()
	return err
}

// abortNCCL aborts and frees the ncclComm_t once; call it holding c.Mu.
func (c *comm) abortNCCL() {
	if c.released || c.h == 0 {
		return
	}
	c.released = true
	_ = c.thr.do("ncclCommAbort", callLimit, func() { libAbort(c.h) })
}

// Abort poisons the communicator. An operation in flight stops within
// about pollSlice; otherwise the NCCL communicator is aborted at once,
// which closes its connections so that the peers' operations fail
// instead of waiting for their peer (NCCL cannot pass the reason on).
func (c *comm) Abort(reason error) {
	c.AbortWith(reason)
	if c.Mu.TryLock() {
		c.abortNCCL()
		c.Mu.Unlock()
	}
}

// Close releases the NCCL communicator: ncclCommFinalize and
// ncclCommDestroy when it is healthy, ncclCommAbort after a failure or
// when finalizing does not finish in time. The barrier's 4-byte scratch
// tensor stays allocated on the backend (Close may run on any goroutine,
// the backend is driven by one).
func (c *comm) Close() error {
	already, failed := c.Health.MarkClosed()
	if already {
		return nil
	}
	c.Stop.Store(true)
	c.Mu.Lock()
	defer c.Mu.Unlock()
	if c.released || c.h == 0 {
		return nil
	}
	if failed {
		c.abortNCCL()
		return nil
	}
	rc := 0
	if err := c.thr.do("ncclCommFinalize", callLimit, func() { rc = libFinalize(c.h) }); err != nil {
		return fmt.Errorf("hccl/nccl: Close: %w", err)
	}
	deadline := time.Now().Add(drainLimit)
	for rc == ncclInProgress && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
		rc = libAsyncError(c.h)
	}
	if rc != ncclSuccess && rc != shimSymbolMissing {
		err := resultError("ncclCommFinalize", rc, c.h)
		if rc == ncclInProgress {
			err = fmt.Errorf("ncclCommFinalize did not finish within %v", drainLimit)
		}
		c.abortNCCL()
		return fmt.Errorf("hccl/nccl: Close: %w (aborted instead)", err)
	}
	if err := c.thr.do("ncclCommDestroy", callLimit, func() { rc = libDestroy(c.h) }); err != nil {
		return fmt.Errorf("hccl/nccl: Close: %w", err)
	}
	c.released = true
	if rc != ncclSuccess {
		return fmt.Errorf("hccl/nccl: Close: %w", resultError("ncclCommDestroy", rc, 0))
	}
	return nil
}
