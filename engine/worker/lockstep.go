package worker

import (
	"fmt"
	"time"

	"github.com/npuserve/npuserve/engine/core"
	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/npu"
)

// Lockstep implements core.Lockstep over the DP communicator (the TP
// leaders of every DP rank): each Sync is one AllReduce (max) of the
// rank's [has work, closing] flags. It runs every loop iteration, not
// every 32 steps as vLLM's unfinished-requests all-reduce does: the cost
// is one small collective per step, and it is what makes the decision to
// run a forward (real or dummy) identical on every rank.
type Lockstep struct {
	dp   hccl.Comm
	be   npu.Backend
	buf  *npu.Tensor
	wait time.Duration
}

var _ core.Lockstep = (*Lockstep)(nil)

// NewLockstep syncs over dp with tensors of be; idle ranks wait idleWait
// between syncs (0: DefaultIdleWait).
func NewLockstep(dp hccl.Comm, be npu.Backend, idleWait time.Duration) *Lockstep {
	if idleWait <= 0 {
		idleWait = DefaultIdleWait
	}
	return &Lockstep{dp: dp, be: be, buf: npu.Must(be.Alloc(npu.I32, 2)), wait: idleWait} // 8 bytes at start-up
}

// Sync implements core.Lockstep.
func (l *Lockstep) Sync(hasWork, closing bool) (anyWork, anyClosing bool, err error) {
	b := func(v bool) int32 {
		if v {
			return 1
		}
		return 0
	}
	if err := l.be.Upload(l.buf, npu.EncodeInt32s([]int32{b(hasWork), b(closing)})); err != nil {
		return false, false, fmt.Errorf("DP rank %d: %w", l.dp.Rank(), err)
	}
	if err := npu.RunOnStream(l.be, func() error { return l.dp.AllReduce(l.buf, hccl.Max) }); err != nil {
		return false, false, fmt.Errorf("DP rank %d: %w", l.dp.Rank(), err)
	}
	v, err := npu.DownloadI32(l.be, l.buf)
	if err != nil {
		return false, false, fmt.Errorf("DP rank %d: %w", l.dp.Rank(), err)
	}
	return v[0] != 0, v[1] != 0, nil
}

// IdleWait implements core.Lockstep.
func (l *Lockstep) IdleWait() time.Duration { return l.wait }

// Free releases the sync buffer.
func (l *Lockstep) Free() { l.be.Free(l.buf) }
