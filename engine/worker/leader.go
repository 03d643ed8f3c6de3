package worker

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/core"
	"github.com/npuserve/npuserve/engine/model"
	"github.com/npuserve/npuserve/engine/model/glm5next"
	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/npu"
)

// The TP group's leader drives its followers with broadcasts over the TP
// communicator: every command is a fixed-size header, and a forward's
// batch description follows as one I32 payload. Followers run exactly the
// leader's sequence of NewCache, Forward and DummyStep calls (and of the
// speculative SpecForward, SpecCommit and SpecDummyStep: spec.go), so
// every collective inside the model is reached by every TP rank.

// Commands (header word 0).
const (
	cmdCache   = 1 // NewCache(hdr[1] blocks, hdr[2] block size, hdr[3] slots)
	cmdForward = 2 // Forward of the payload's batch (hdr[1] payload words)
	cmdDummy   = 3 // DummyStep
	cmdStop    = 4 // leave the loop
	cmdNoop    = 5 // keepalive of an idle leader
	cmdReduce  = 6 // ReduceLogits(hdr[1] = k, hdr[2] payload words, hdr[3] rows)
	cmdGather  = 7 // GatherLogits of the last Forward
	cmdQuery   = 8 // QueryLogits(hdr[1] = queries, hdr[2] payload words)

	cmdSpecForward = 9  // SpecForward(hdr[1] backups, hdr[2] payload words: the batch, then the backups)
	cmdSpecCommit  = 10 // SpecCommit(hdr[2] payload words)
	cmdSpecDummy   = 11 // SpecDummyStep(hdr[1] = k)
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

	hdr     *npu.Tensor // I32 [headerWords]
	payload *npu.Tensor // I32 scratch, grown as needed
	seq     int32
	enc     []int32

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
		shardLogits(m)
		l.hdr = npu.Must(m.Backend().Alloc(npu.I32, headerWords)) // a few bytes at start-up
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
func (l *Leader) NewCache(numBlocks, blockSize, stateSlots int) (model.Cache, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tp != nil {
		if err := l.broadcastHeader(cmdCache, numBlocks, blockSize, stateSlots); err != nil {
			return nil, fmt.Errorf("worker: telling the TP followers to allocate the cache: %w", err)
		}
	}
	return l.m.Engine().NewCache(numBlocks, blockSize, stateSlots)
}

// Forward implements core.Model: the followers run the same batch.
func (l *Leader) Forward(c model.Cache, b *model.Batch) (*npu.Tensor, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tp != nil {
		be := l.m.Backend()
		l.enc = encodeBatch(l.enc[:0], b)
		if err := l.send(cmdForward, len(l.enc), 0, 0); err != nil {
			return nil, err
		}
		var err error
		if l.payload, err = growI32(be, l.payload, len(l.enc)); err != nil {
			return nil, err
		}
		p := l.payload.Rows(0, len(l.enc))
		if err := be.Upload(p, npu.EncodeInt32s(l.enc)); err != nil {
			return nil, err
		}
		if err := npu.RunOnStream(be, func() error { return l.tp.Broadcast(p, 0) }); err != nil {
			return nil, collectiveFailed("broadcasting the batch", err)
		}
	}
	return l.m.Engine().Forward(c, b)
}

// DummyStep implements core.CollectiveModel.
func (l *Leader) DummyStep(c model.Cache) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.send(cmdDummy, 0, 0, 0); err != nil {
		return err
	}
	return l.m.Engine().(model.Collective).DummyStep(c)
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

// send broadcasts a command header; a failure is an error wrapping
// glm5next.ErrCollective (the engine then stops).
func (l *Leader) send(cmd, a, b, c int) error {
	if l.tp == nil {
		return nil
	}
	if err := l.broadcastHeader(cmd, a, b, c); err != nil {
		return collectiveFailed("broadcasting a step to the TP followers", err)
	}
	return nil
}

// broadcastHeader sends one command header. It runs on the engine's
// goroutine or, idle, on the keepalive's (l.mu held either way); the
// broadcast itself runs on the backend's stream.
func (l *Leader) broadcastHeader(cmd, a, b, c int) error {
	l.lastSend = time.Now()
	l.seq++
	be := l.m.Backend()
	if err := be.Upload(l.hdr, npu.EncodeInt32s([]int32{int32(cmd), int32(a), int32(b), int32(c), l.seq})); err != nil {
		return err
	}
	return npu.RunOnStream(be, func() error { return l.tp.Broadcast(l.hdr, 0) })
}

// Follow runs a TP follower: it receives the leader's commands over tp
// and runs them on m until the leader's Shutdown (nil) or a failure (the
// error; tp is then aborted so that the leader fails fast too).
func Follow(m *glm5next.Model, tp hccl.Comm) (err error) {
	be := m.Backend()
	hdr, err := be.Alloc(npu.I32, headerWords)
	if err != nil {
		return err
	}
	defer be.Free(hdr)
	shardLogits(m)
	f := &follower{m: m}
	defer func() {
		if f.payload != nil {
			be.Free(f.payload)
		}
		if f.last != nil {
			be.Free(f.last)
		}
		if f.cache != nil {
			f.cache.Free(be)
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
		if err := npu.RunOnStream(be, func() error { return tp.Broadcast(hdr, 0) }); err != nil {
			return fmt.Errorf("worker: TP follower %d waiting for the leader: %w", tp.Rank(), err)
		}
		h, err := npu.DownloadI32(be, hdr)
		if err != nil {
			return fmt.Errorf("worker: TP follower %d: %w", tp.Rank(), err)
		}
		seq++
		if h[4] != seq {
			return fmt.Errorf("worker: TP follower %d: command #%d arrived as #%d", tp.Rank(), seq, h[4])
		}
		switch h[0] {
		case cmdCache:
			if f.cache != nil {
				f.cache.Free(be)
				f.cache = nil
			}
			c, err := m.NewCache(int(h[1]), int(h[2]), int(h[3]))
			if err != nil {
				return fmt.Errorf("worker: TP follower %d: %w", tp.Rank(), err)
			}
			f.cache = c
		case cmdForward:
			n := int(h[1])
			if f.payload, err = growI32(be, f.payload, n); err != nil {
				return fmt.Errorf("worker: TP follower %d: %w", tp.Rank(), err)
			}
			p := f.payload.Rows(0, n)
			if err := npu.RunOnStream(be, func() error { return tp.Broadcast(p, 0) }); err != nil {
				return fmt.Errorf("worker: TP follower %d receiving a batch: %w", tp.Rank(), err)
			}
			if f.cache == nil {
				return fmt.Errorf("worker: TP follower %d: a batch before any cache", tp.Rank())
			}
			words, err := npu.DownloadI32(be, p)
			if err != nil {
				return fmt.Errorf("worker: TP follower %d: %w", tp.Rank(), err)
			}
			b, err := decodeBatch(words)
			if err != nil {
				return fmt.Errorf("worker: TP follower %d: %w", tp.Rank(), err)
			}
			if f.last != nil {
				be.Free(f.last)
				f.last = nil
			}
			logits, err := m.Forward(f.cache, b)
			if err != nil {
				return fmt.Errorf("worker: TP follower %d: %w", tp.Rank(), err)
			}
			if _, _, sharded := m.VocabShard(); sharded {
				f.last = logits // the leader reduces or gathers it next
			} else {
				be.Free(logits)
			}
		case cmdReduce, cmdGather:
			if f.last == nil {
				return fmt.Errorf("worker: TP follower %d: a logits reduction without sharded logits", tp.Rank())
			}
			if h[0] == cmdGather {
				full, err := m.GatherShards(f.last)
				if err != nil {
					return fmt.Errorf("worker: TP follower %d: %w", tp.Rank(), collectiveFailed("gathering the logits", err))
				}
				be.Free(full)
				break
			}
			k, n, rows := int(h[1]), int(h[2]), int(h[3])
			if rows != f.last.Dim(0) {
				return fmt.Errorf("worker: TP follower %d: a reduction of %d rows for logits of %d", tp.Rank(), rows, f.last.Dim(0))
			}
			words, err := recvPayload(be, tp, &f.payload, n, "a reduction")
			if err != nil {
				return fmt.Errorf("worker: TP follower %d: %w", tp.Rank(), err)
			}
			touched, err := decodeTouched(words, rows)
			if err != nil {
				return fmt.Errorf("worker: TP follower %d: %w", tp.Rank(), err)
			}
			lo, hi, _ := m.VocabShard()
			parts, err := reduceShard(be, f.last, lo, hi, k, touched)
			if err != nil {
				return fmt.Errorf("worker: TP follower %d: %w", tp.Rank(), err)
			}
			err = sendParts(be, tp, parts.tensors(), "the reduced logits")
			parts.free(be)
			if err != nil {
				return fmt.Errorf("worker: TP follower %d: %w", tp.Rank(), err)
			}
		case cmdQuery:
			if f.last == nil {
				return fmt.Errorf("worker: TP follower %d: sampling queries without sharded logits", tp.Rank())
			}
			words, err := recvPayload(be, tp, &f.payload, int(h[2]), "sampling queries")
			if err != nil {
				return fmt.Errorf("worker: TP follower %d: %w", tp.Rank(), err)
			}
			rows, qs, err := decodeQueries(words, int(h[1]))
			if err != nil {
				return fmt.Errorf("worker: TP follower %d: %w", tp.Rank(), err)
			}
			parts, err := model.EnqueueQueries(be, f.last, rows, qs)
			if err != nil {
				return fmt.Errorf("worker: TP follower %d: %w", tp.Rank(), err)
			}
			err = sendParts(be, tp, parts.Tensors(), "sampling answers")
			parts.Free(be)
			if err != nil {
				return fmt.Errorf("worker: TP follower %d: %w", tp.Rank(), err)
			}
		case cmdSpecForward, cmdSpecCommit:
			words, err := recvPayload(be, tp, &f.payload, int(h[2]), "a speculative step")
			if err == nil && h[0] == cmdSpecForward {
				err = f.specForward(words, int(h[1]))
			} else if err == nil {
				err = f.specCommit(words)
			}
			if err != nil {
				return fmt.Errorf("worker: TP follower %d: %w", tp.Rank(), err)
			}
		case cmdSpecDummy:
			if err := f.specDummy(int(h[1])); err != nil {
				return fmt.Errorf("worker: TP follower %d: %w", tp.Rank(), err)
			}
		case cmdDummy:
			if f.cache == nil {
				return fmt.Errorf("worker: TP follower %d: a dummy step before any cache", tp.Rank())
			}
			if err := m.DummyStep(f.cache); err != nil {
				return fmt.Errorf("worker: TP follower %d: %w", tp.Rank(), err)
			}
		case cmdNoop:
		case cmdStop:
			return nil
		default:
			return fmt.Errorf("worker: TP follower %d: unknown command %d", tp.Rank(), h[0])
		}
	}
}

// collectiveFailed wraps err in glm5next.ErrCollective.
func collectiveFailed(op string, err error) error {
	return fmt.Errorf("%w: %s: %w", glm5next.ErrCollective, op, err)
}

// Batch encoding: [tokens, seqs, logitMode, nLogits, blockSize] then the
// tokens, QueryStart (seqs+1), Pos, StateSlot, per sequence the length of
// its block table and the table, then the logit rows: the
// npu.BatchLayout as the cache manager built it, one word per block of
// each sequence, never one per cached token.

// encodeBatch appends b's encoding to dst.
func encodeBatch(dst []int32, b *glm5next.Batch) []int32 {
	L := &b.Layout
	B := L.NumSeqs()
	mode := int32(1)
	if b.LogitRows == nil {
		mode = 0
	}
	dst = append(dst, int32(len(b.Tokens)), int32(B), mode, int32(len(b.LogitRows)), int32(L.BlockSize))
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
		dst = append(dst, int32(len(L.BlockTables[s])))
		dst = append(dst, L.BlockTables[s]...)
	}
	for _, r := range b.LogitRows {
		dst = append(dst, int32(r))
	}
	return dst
}

// decodeBatch rebuilds a batch from its encoding.
func decodeBatch(w []int32) (*glm5next.Batch, error) {
	r := reader{w: w}
	nt, B, mode, nl, bs := int(r.next()), int(r.next()), r.next(), int(r.next()), int(r.next())
	if r.err != nil || nt < 0 || B < 0 || nl < 0 || bs < 1 {
		return nil, errors.New("malformed batch header")
	}
	b := &glm5next.Batch{Tokens: r.take(nt)}
	L := &b.Layout
	L.BlockSize = bs
	L.QueryStart = r.ints(B + 1)
	L.Pos = r.ints(B)
	L.StateSlot = r.ints(B)
	L.BlockTables = make([][]int32, B)
	for s := range B {
		n := int(r.next())
		if r.err != nil || n < 0 {
			return nil, errors.New("malformed batch block table")
		}
		L.BlockTables[s] = r.take(n)
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
	if err := L.Check(); err != nil {
		return nil, err
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
func growI32(be npu.Backend, t *npu.Tensor, n int) (*npu.Tensor, error) {
	if t != nil && t.Numel() >= max(n, 1) {
		return t, nil
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
