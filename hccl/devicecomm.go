package hccl

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// DeviceComm is the bookkeeping every device transport's communicator
// (hccl/ascend, hccl/nccl) shares: its place in the group, its options,
// its health, one operation at a time numbered in order, and the stop flag
// Abort and Close raise to end a wait in flight. A transport embeds it,
// calls Init, and runs each operation through Run.
type DeviceComm struct {
	rank, size int
	// Opts are the communicator's options (with defaults).
	Opts Options
	// Mu serialises the operations (Run holds it) and whatever a
	// transport's Close must not run beside.
	Mu  sync.Mutex
	seq uint64
	// Stop is raised by Abort and Close: a wait in flight ends.
	Stop atomic.Bool
	// Health is closed, or poisoned by the first failure.
	Health Health
}

// Init sets the communicator's rank, size and options.
func (d *DeviceComm) Init(rank, size int, opts Options) {
	d.rank, d.size, d.Opts = rank, size, opts
}

// Rank implements Comm.
func (d *DeviceComm) Rank() int { return d.rank }

// Size implements Comm.
func (d *DeviceComm) Size() int { return d.size }

// OpErr is o's OpError on this communicator, failing with err and naming
// peers.
func (d *DeviceComm) OpErr(o *Op, err error, peers ...int) *OpError {
	return o.Error(d.Opts.Name, d.rank, d.size, d.Opts.Timeout, err, peers...)
}

// Poison records err as the communicator's failure (the first one wins)
// and returns it.
func (d *DeviceComm) Poison(err *OpError) error {
	d.Health.Poison(err)
	return err
}

// AbortWith is the bookkeeping of Comm.Abort: reason (nil: "aborted")
// becomes the failure unless there is one, and Stop is raised.
func (d *DeviceComm) AbortWith(reason error) {
	if reason == nil {
		reason = errors.New("aborted")
	}
	d.Health.Abort(&OpError{Comm: d.Opts.Name, Rank: d.rank, Size: d.size, Op: "Abort", Err: reason})
	d.Stop.Store(true)
}

// DeviceCall is one operation for DeviceComm.Run.
type DeviceCall struct {
	Name string
	// P2P operations (Send, Recv) are not numbered: their order is per
	// peer.
	P2P      bool
	Describe func() string // the operation's detail (shapes), or nil
	// Check validates the arguments before anything is enqueued.
	Check func() error
}

// Run runs one operation under Mu: it numbers a collective, fails fast
// when the communicator is closed or poisoned, and validates k (a failure
// poisons it, after onInvalid, which may tell the peers). Then do runs
// with the operation's deadline: stuck (the device thread did not return)
// poisons at once; failed poisons unless the communicator was aborted or
// closed meanwhile, whose error is returned instead.
func (d *DeviceComm) Run(k DeviceCall, onInvalid func(), do func(deadline time.Time) (stuck, failed error)) error {
	d.Mu.Lock()
	defer d.Mu.Unlock()
	o := &Op{Name: k.Name, Describe: k.Describe, Start: time.Now()}
	if !k.P2P {
		d.seq++
		o.Seq = d.seq
	}
	if err := d.failure(o); err != nil {
		return err
	}
	if k.Check != nil {
		if err := k.Check(); err != nil {
			if onInvalid != nil {
				onInvalid()
			}
			return d.Poison(d.OpErr(o, err))
		}
	}
	stuck, failed := do(o.Start.Add(d.Opts.Timeout))
	if stuck != nil {
		return d.Poison(d.OpErr(o, stuck))
	}
	if failed != nil {
		if e := d.failure(o); e != nil { // aborted or closed meanwhile
			return e
		}
		return d.Poison(d.OpErr(o, failed))
	}
	return nil
}

// failure is the OpError of o when the communicator is closed or
// poisoned.
func (d *DeviceComm) failure(o *Op) error {
	if err := d.Health.Failure(); err != nil {
		return d.OpErr(o, err)
	}
	return nil
}

// CheckPeer validates a point-to-point peer: another rank of the
// communicator.
func (d *DeviceComm) CheckPeer(peer int) error {
	if peer < 0 || peer >= d.size || peer == d.rank {
		return Errorf(ErrInvalid, "peer %d is not another rank of this communicator (size %d, this rank %d)", peer, d.size, d.rank)
	}
	return nil
}

// CheckRoot validates a broadcast's root: a rank of the communicator.
func (d *DeviceComm) CheckRoot(root int) error {
	if root < 0 || root >= d.size {
		return Errorf(ErrInvalid, "root %d is not a rank of this communicator (size %d)", root, d.size)
	}
	return nil
}
