package hccl

import (
	"sort"
	"sync"
	"time"
)

// Health is a device transport's communicator state (hccl/ascend,
// hccl/nccl): closed, or poisoned by its first failure, after which every
// operation fails fast naming that failure. The zero value is healthy.
type Health struct {
	mu     sync.Mutex
	err    error
	closed bool
}

// Failure returns why an operation must fail now: ErrClosed, or
// ErrPoisoned wrapping the first failure; nil while healthy.
func (h *Health) Failure() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.closed:
		return ErrClosed
	case h.err != nil:
		return Errorf(ErrPoisoned, "communicator unusable after an earlier failure: %w", h.err)
	}
	return nil
}

// Poison records err as the communicator's failure unless it already has
// one.
func (h *Health) Poison(err error) {
	h.mu.Lock()
	if h.err == nil {
		h.err = err
	}
	h.mu.Unlock()
}

// Abort records err as the failure unless the communicator has failed or
// closed already (Comm.Abort).
func (h *Health) Abort(err error) {
	h.mu.Lock()
	if h.err == nil && !h.closed {
		h.err = err
	}
	h.mu.Unlock()
}

// MarkClosed marks the communicator closed; it reports whether it already
// was, and whether it had failed.
func (h *Health) MarkClosed() (already, failed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	already, failed = h.closed, h.err != nil
	h.closed = true
	return already, failed
}

// Op identifies one operation of a communicator for its OpError.
type Op struct {
	Name     string
	Seq      uint64
	Describe func() string // the operation's detail (shapes), or nil
	Start    time.Time
}

// Error is the OpError of o failing with err on communicator comm (rank
// of size, limit its timeout), naming peers.
func (o *Op) Error(comm string, rank, size int, limit time.Duration, err error, peers ...int) *OpError {
	sort.Ints(peers)
	e := &OpError{Comm: comm, Rank: rank, Size: size, Op: o.Name, Seq: o.Seq, Peers: peers,
		Elapsed: time.Since(o.Start), Limit: limit, Err: err}
	if o.Describe != nil {
		e.Detail = o.Describe()
	}
	return e
}
