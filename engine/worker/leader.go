package worker

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/core"
	"github.com/npuserve/npuserve/engine/model/glm5next"
	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/npu"
)

// The TP group's leader drives its followers with broadcasts over the TP
// communicator: every command is a fixed-size header, and a forward's
// batch description follows as one I32 payload. Followers run exactly the
// leader's sequence of NewCache, Forward and DummyStep calls, so every
// collective inside the model is reached by every TP rank.

// Commands (header word 0).
const (
	cmdCache   = 1 // NewCache(hdr[1] blocks, hdr[2] block size, hdr[3] slots)
	cmdForward = 2 // Forward of the payload's batch (hdr[1] payload words)
	cmdDummy   = 3 // DummyStep
	cmdStop    = 4 // leave the loop
	cmdNoop    = 5 // keepalive of an idle leader
)

// KeepaliveInterval is how often an idle leader tells its followers it is
// alive. A follower waits for the next command in a broadcast bounded by
// the communicator's timeout (HCCL_EXEC_TIMEOUT, 60 s by default); an
// engine with no requests sends nothing, so without these a TP group
// died after a minute of idleness.
var KeepaliveInterval = 500 * time.Millisecond

// headerWords is the header length (I32 words): command, 3 arguments and
// the command's sequence number, checked by followers.
const headerWords = 5

// Leader is the model of a TP group's leader (TP rank 0 of a DP rank): it
// implements core.CollectiveModel, so engine/core drives it like a model,
// and before running each NewCache, Forward and DummyStep itself it
// broadcasts the call (with the batch's tokens and layout) to the TP
// followers, which run it too (Follow). Only the leader's logits are used
// for sampling. With TP 1 it just forwards to the model.
type Leader struct {
	m  *glm5next.Model
	tp hccl.Comm // nil when TP == 1

	hdr      *npu.Tensor // I32 [headerWords]
	payload  *npu.Tensor // I32 scratch, grown as needed
	seq      int32
	enc      []int32
	hdrBytes []byte

	// mu serialises the engine's calls with the keepalive: every
	// collective on tp (the model's inside Forward too) runs under it.
	mu       sync.Mutex
	stopped  bool
	lastSend time.Time
	quit     chan struct{} // closed by Shutdown: ends the keepalive
}

var _ core.CollectiveModel = (*Leader)(nil)

// NewLeader wraps m, the leader's model, with the TP communicator (nil
// for TP 1).
func NewLeader(m *glm5next.Model, tp hccl.Comm) *Leader {
	l := &Leader{m: m}
	if tp != nil && tp.Size() > 1 {
		l.tp = tp
		l.hdr = m.Backend().Alloc(npu.I32, headerWords)
		l.quit = make(chan struct{})
		go l.keepalive(KeepaliveInterval)
	}
	return l
}

// keepalive sends cmdNoop whenever the leader sent nothing for interval,
// until Shutdown; a failed send aborts tp (the engine's next step then
// fails with the cause).
func (l *Leader) keepalive(interval time.Duration) {
	t := time.NewTicker(interval / 2)
	defer t.Stop()
	for {
		select {
		case <-l.quit:
			return
		case <-t.C:
		}
		if !l.mu.TryLock() { // a step is running: the followers are busy too
			continue
		}
		if !l.stopped && time.Since(l.lastSend) >= interval {
			if err := l.broadcastHeader(cmdNoop, 0, 0, 0); err != nil {
				l.tp.Abort(fmt.Errorf("worker: TP leader keepalive: %w", err))
				l.mu.Unlock()
				return
			}
		}
		l.mu.Unlock()
	}
}

// Model is the wrapped model.
func (l *Leader) Model() *glm5next.Model { return l.m }

// Comm is the TP communicator (nil for TP 1).
func (l *Leader) Comm() hccl.Comm { return l.tp }

// Config implements core.Model.
func (l *Leader) Config() *config.ModelConfig { return l.m.Config() }

// Backend implements core.Model.
func (l *Leader) Backend() npu.Backend { return l.m.Backend() }

// BytesPerToken implements core.Model (this rank's share).
func (l *Leader) BytesPerToken() int64 { return l.m.BytesPerToken() }

// BytesPerSequenceState implements core.Model (this rank's share: its KDA
// heads).
func (l *Leader) BytesPerSequenceState() int64 { return l.m.BytesPerSequenceState() }

// Collective implements core.CollectiveModel.
func (l *Leader) Collective() bool { return l.tp != nil || l.m.Collective() }

// NewCache implements core.Model: the followers allocate the same cache.
func (l *Leader) NewCache(numBlocks, blockSize, stateSlots int) (*glm5next.Cache, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tp != nil {
		if err := l.broadcastHeader(cmdCache, numBlocks, blockSize, stateSlots); err != nil {
			return nil, fmt.Errorf("worker: telling the TP followers to allocate the cache: %w", err)
		}
	}
	return l.m.NewCache(numBlocks, blockSize, stateSlots)
}

// Forward implements core.Model: the followers run the same batch.
func (l *Leader) Forward(c *glm5next.Cache, b *glm5next.Batch) *npu.Tensor {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tp != nil {
		l.enc = encodeBatch(l.enc[:0], b, c.BlockSize, l.m.Config().IndexKPool)
		l.send(cmdForward, len(l.enc), 0, 0)
		l.payload = growI32(l.m.Backend(), l.payload, len(l.enc))
		p := l.payload.Rows(0, len(l.enc))
		l.m.Backend().Upload(p, npu.EncodeInt32s(l.enc))
		if err := l.tp.Broadcast(p, 0); err != nil {
			collectiveFailed("broadcasting the batch", err)
		}
	}
	return l.m.Forward(c, b)
}

// DummyStep implements core.CollectiveModel.
func (l *Leader) DummyStep(c *glm5next.Cache) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.send(cmdDummy, 0, 0, 0)
	l.m.DummyStep(c)
}

// Shutdown tells the followers to leave their loop. It is idempotent and
// must not run concurrently with the engine's use of the leader (call it
// after the engine stopped).
func (l *Leader) Shutdown() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped || l.tp == nil {
		l.stopped = true
		return nil
	}
	l.stopped = true
	close(l.quit)
	return l.broadcastHeader(cmdStop, 0, 0, 0)
}

// send broadcasts a command header; a failure panics with
// glm5next.ErrCollective (the engine then stops).
func (l *Leader) send(cmd, a, b, c int) {
	if l.tp == nil {
		return
	}
	if err := l.broadcastHeader(cmd, a, b, c); err != nil {
		collectiveFailed("broadcasting a step to the TP followers", err)
	}
}

func (l *Leader) broadcastHeader(cmd, a, b, c int) error {
	l.lastSend = time.Now()
	l.seq++
	l.hdrBytes = npu.EncodeInt32s([]int32{int32(cmd), int32(a), int32(b), int32(c), l.seq})
	l.m.Backend().Upload(l.hdr, l.hdrBytes)
	return l.tp.Broadcast(l.hdr, 0)
}

// Follow runs a TP follower: it receives the leader's commands over tp
// and runs them on m until the leader's Shutdown (nil) or a failure (the
// error; tp is then aborted so that the leader fails fast too).
func Follow(m *glm5next.Model, tp hccl.Comm) (err error) {
	be := m.Backend()
	hdr := be.Alloc(npu.I32, headerWords)
	defer be.Free(hdr)
	var payload *npu.Tensor
	var cache *glm5next.Cache
	defer func() {
		if payload != nil {
			be.Free(payload)
		}
		if cache != nil {
			cache.Free(be)
		}
		if p := recover(); p != nil {
			err = fmt.Errorf("worker: TP follower %d: %v", tp.Rank(), p)
			if e, ok := p.(error); ok {
				err = fmt.Errorf("worker: TP follower %d: %w", tp.Rank(), e)
			}
		}
		if err != nil {
			tp.Abort(err)
		}
	}()
	var seq int32
	for {
		if err := tp.Broadcast(hdr, 0); err != nil {
			return fmt.Errorf("worker: TP follower %d waiting for the leader: %w", tp.Rank(), err)
		}
		h := npu.DownloadI32(be, hdr)
		seq++
		if h[4] != seq {
			return fmt.Errorf("worker: TP follower %d: command #%d arrived as #%d", tp.Rank(), seq, h[4])
		}
		switch h[0] {
		case cmdCache:
			if cache != nil {
				cache.Free(be)
				cache = nil
			}
			c, err := m.NewCache(int(h[1]), int(h[2]), int(h[3]))
			if err != nil {
				return fmt.Errorf("worker: TP follower %d: %w", tp.Rank(), err)
			}
			cache = c
		case cmdForward:
			n := int(h[1])
			payload = growI32(be, payload, n)
			p := payload.Rows(0, n)
			if err := tp.Broadcast(p, 0); err != nil {
				return fmt.Errorf("worker: TP follower %d receiving a batch: %w", tp.Rank(), err)
			}
			if cache == nil {
				return fmt.Errorf("worker: TP follower %d: a batch before any cache", tp.Rank())
			}
			b, err := decodeBatch(npu.DownloadI32(be, p), cache.BlockSize, m.Config().IndexKPool)
			if err != nil {
				return fmt.Errorf("worker: TP follower %d: %w", tp.Rank(), err)
			}
			be.Free(m.Forward(cache, b))
		case cmdDummy:
			if cache == nil {
				return fmt.Errorf("worker: TP follower %d: a dummy step before any cache", tp.Rank())
			}
			m.DummyStep(cache)
		case cmdNoop:
		case cmdStop:
			return nil
		default:
			return fmt.Errorf("worker: TP follower %d: unknown command %d", tp.Rank(), h[0])
		}
	}
}

// collectiveFailed panics with err wrapped in glm5next.ErrCollective.
func collectiveFailed(op string, err error) {
	panic(fmt.Errorf("%w: %s: %w", glm5next.ErrCollective, op, err))
}

// Batch encoding: [tokens, seqs, logitMode, nLogits] then tokens,
// QueryStart (seqs+1), Pos, StateSlot, per sequence its slots, then the
// logit rows. A sequence's slots are [mode, len(TokenSlots),
// len(PoolSlots)] followed by its block table (mode 0: the paged layout
// of kvcache, TokenSlots[p] = block[p/bs]·bs + p%bs and PoolSlots[i] =
// block[i·kp/bs]·(bs/kp) + (i·kp%bs)/kp, so a decode step sends one word
// per block, not per token) or the raw slots (mode 1: any other layout).

// encodeBatch appends b's encoding to dst.
func encodeBatch(dst []int32, b *glm5next.Batch, bs, kp int) []int32 {
	L := &b.Layout
	B := L.NumSeqs()
	mode := int32(1)
	if b.LogitRows == nil {
		mode = 0
	}
	dst = append(dst, int32(len(b.Tokens)), int32(B), mode, int32(len(b.LogitRows)))
	dst = append(dst, b.Tokens...)
	for _, v := range L.QueryStart {
		dst = append(dst, int32(v))
	}
	for _, v := range L.Pos {
		dst = append(dst, int32(v))
	}
	for _, v := range L.StateSlot {
		dst = append(dst, int32(v))
	}
	for s := range B {
		ts, ps := L.TokenSlots[s], L.PoolSlots[s]
		if blocks, ok := pagedBlocks(ts, ps, bs, kp); ok {
			dst = append(dst, 0, int32(len(ts)), int32(len(ps)))
			dst = append(dst, blocks...)
			continue
		}
		dst = append(dst, 1, int32(len(ts)), int32(len(ps)))
		dst = append(dst, ts...)
		dst = append(dst, ps...)
	}
	for _, r := range b.LogitRows {
		dst = append(dst, int32(r))
	}
	return dst
}

// pagedBlocks returns the block table of a sequence's slots when they
// follow the paged layout exactly.
func pagedBlocks(ts, ps []int32, bs, kp int) ([]int32, bool) {
	if bs < 1 || kp < 1 || bs%kp != 0 {
		return nil, false
	}
	nb := (len(ts) + bs - 1) / bs
	if len(ps)*kp > nb*bs {
		return nil, false
	}
	blocks := make([]int32, nb)
	for i := range blocks {
		if ts[i*bs]%int32(bs) != 0 {
			return nil, false
		}
		blocks[i] = ts[i*bs] / int32(bs)
	}
	for p, v := range ts {
		if v != blocks[p/bs]*int32(bs)+int32(p%bs) {
			return nil, false
		}
	}
	per := int32(bs / kp)
	for i, v := range ps {
		if v != blocks[i*kp/bs]*per+int32((i*kp%bs)/kp) {
			return nil, false
		}
	}
	return blocks, true
}

// decodeBatch rebuilds a batch from its encoding.
func decodeBatch(w []int32, bs, kp int) (*glm5next.Batch, error) {
	r := reader{w: w}
	nt, B, mode, nl := int(r.next()), int(r.next()), r.next(), int(r.next())
	if r.err != nil || nt < 0 || B < 0 || nl < 0 {
		return nil, errors.New("malformed batch header")
	}
	b := &glm5next.Batch{Tokens: r.take(nt)}
	L := &b.Layout
	L.QueryStart = r.ints(B + 1)
	L.Pos = r.ints(B)
	L.StateSlot = r.ints(B)
	L.TokenSlots = make([][]int32, B)
	L.PoolSlots = make([][]int32, B)
	for s := range B {
		m, nts, nps := r.next(), int(r.next()), int(r.next())
		if r.err != nil || nts < 0 || nps < 0 {
			return nil, errors.New("malformed batch slots")
		}
		switch m {
		case 0:
			if bs < 1 || kp < 1 {
				return nil, errors.New("paged slots without a block size")
			}
			blocks := r.take((nts + bs - 1) / bs)
			if r.err != nil {
				break
			}
			ts, ps := make([]int32, nts), make([]int32, nps)
			for p := range ts {
				ts[p] = blocks[p/bs]*int32(bs) + int32(p%bs)
			}
			per := int32(bs / kp)
			for i := range ps {
				ps[i] = blocks[i*kp/bs]*per + int32((i*kp%bs)/kp)
			}
			L.TokenSlots[s], L.PoolSlots[s] = ts, ps
		case 1:
			L.TokenSlots[s], L.PoolSlots[s] = r.take(nts), r.take(nps)
		default:
			return nil, fmt.Errorf("unknown slot encoding %d", m)
		}
	}
	if mode == 1 {
		b.LogitRows = r.ints(nl)
		if b.LogitRows == nil {
			b.LogitRows = []int{}
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	if len(r.w) != 0 {
		return nil, fmt.Errorf("%d trailing words after the batch", len(r.w))
	}
	return b, nil
}

// reader consumes an encoding.
type reader struct {
	w   []int32
	err error
}

func (r *reader) take(n int) []int32 {
	if r.err != nil || n < 0 || n > len(r.w) {
		if r.err == nil {
			r.err = errors.New("truncated batch")
		}
		return nil
	}
	v := append([]int32(nil), r.w[:n]...)
	r.w = r.w[n:]
	return v
}

func (r *reader) next() int32 {
	v := r.take(1)
	if v == nil {
		return 0
	}
	return v[0]
}

func (r *reader) ints(n int) []int {
	v := r.take(n)
	if v == nil {
		return nil
	}
	out := make([]int, n)
	for i, x := range v {
		out[i] = int(x)
	}
	return out
}

// growI32 returns t, or a bigger I32 tensor (t freed) holding n words.
func growI32(be npu.Backend, t *npu.Tensor, n int) *npu.Tensor {
	if t != nil && t.Numel() >= max(n, 1) {
		return t
	}
	if t != nil {
		be.Free(t)
	}
	c := max(n, 256)
	if t != nil {
		c = max(c, t.Numel()*2)
	}
	return be.Alloc(npu.I32, c)
}
