package hccl

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/npuserve/npuserve/npu"
)

// tcpComm is the TCP transport's Comm: a full mesh of TCP connections, one
// per pair of ranks, carrying the framed protocol of tcp_wire.go.
//
// Each operation is one or two rounds; in a round every rank sends to and
// receives from its peers concurrently (one goroutine per direction and
// peer), so kernel socket buffers can never deadlock a round, and a dead or
// aborting peer is noticed as soon as its connection says so rather than
// when the rank would next have read from it.
type tcpComm struct {
	rank, size int
	opts       Options
	links      []*link // by rank; nil for this rank

	mu      sync.Mutex // serialises operations (and winding down)
	seq     uint64     // collectives started
	scratch []byte     // receive buffers of the reductions

	st     sync.Mutex // guards the fields below; never held across I/O
	err    error      // first failure: the communicator is poisoned
	closed bool
	wound  bool // peers told and connections half-closed
}

var _ Comm = (*tcpComm)(nil)

// Memory implements HostBuffers: the TCP transport moves host memory, the
// CPU backend's tensors.
func (c *tcpComm) Memory() npu.Memory { return hostMemory }

func newTCPComm(rank, size int, opts Options, links []*link) *tcpComm {
	if links == nil {
		links = make([]*link, size)
	}
	return &tcpComm{rank: rank, size: size, opts: opts, links: links}
}

func (c *tcpComm) Rank() int { return c.rank }
func (c *tcpComm) Size() int { return c.size }

// opCtx is one operation in progress.
type opCtx struct {
	name     string
	f        frame // the header every frame of the operation carries
	describe func() string
	start    time.Time
	deadline time.Time
	p2p      bool
}

// begin starts an operation (c.mu held): it fails fast on a poisoned or
// closed communicator and assigns the collective sequence number.
func (c *tcpComm) begin(name string, kind uint8, dt npu.DType, describe func() string) (*opCtx, error) {
	now := time.Now()
	o := &opCtx{name: name, f: frame{kind: kind, dtype: uint8(dt)}, describe: describe, start: now, deadline: now.Add(c.opts.Timeout)}
	if kind != kSend {
		c.seq++
		o.f.seq = c.seq
	} else {
		o.p2p = true
	}
	if err := c.state(o); err != nil {
		return nil, err
	}
	return o, nil
}

// state returns the error for an operation on a closed or poisoned
// communicator, or nil.
func (c *tcpComm) state(o *opCtx) error {
	c.st.Lock()
	defer c.st.Unlock()
	switch {
	case c.closed:
		return c.opErr(o, ErrClosed)
	case c.err != nil:
		return c.opErr(o, &kindError{kind: ErrPoisoned, err: fmt.Errorf("communicator unusable after an earlier failure: %w", c.err)})
	}
	return nil
}

func (c *tcpComm) opErr(o *opCtx, err error, peers ...int) *OpError {
	sort.Ints(peers)
	e := &OpError{Comm: c.opts.Name, Rank: c.rank, Size: c.size, Op: o.name, Peers: peers,
		Elapsed: time.Since(o.start), Limit: c.opts.Timeout, Err: err}
	if !o.p2p {
		e.Seq = o.f.seq
	}
	if o.describe != nil {
		e.Detail = o.describe()
	}
	return e
}

// fail poisons the communicator with err (the first failure wins), tells the
// peers and returns err. c.mu is held.
func (c *tcpComm) fail(err *OpError) error {
	c.st.Lock()
	if c.err == nil && !c.closed {
		c.err = err
	}
	c.st.Unlock()
	c.wind()
	return err
}

// invalid fails the operation for a bad argument. The communicator is
// poisoned too: this rank will not take part in the collective, so its
// peers must not wait for it.
func (c *tcpComm) invalid(o *opCtx, format string, a ...any) error {
	return c.fail(c.opErr(o, errorf(ErrInvalid, format, a...)))
}

// interrupt makes every blocked read and write return at once.
func (c *tcpComm) interrupt() {
	past := time.Unix(1, 0)
	for _, l := range c.links {
		if l != nil {
			l.conn.SetDeadline(past)
		}
	}
}

// wind tells every peer why this rank failed (an abort frame, where the
// stream is still in step), half-closes the connections and drains them so
// peers blocked writing to us finish and then read the abort. c.mu is
// held; it runs once.
func (c *tcpComm) wind() {
	c.st.Lock()
	if c.wound || c.err == nil && !c.closed {
		c.st.Unlock()
		return
	}
	c.wound = true
	reason := c.err
	c.st.Unlock()
	var msg []byte
	code := uint8(0)
	if reason != nil {
		msg = []byte(reason.Error())
		code = kindCode(reason)
	} else {
		msg = []byte(fmt.Sprintf("rank %d closed its communicator during an operation", c.rank))
		code = kindCode(ErrPeerLost)
	}
	if len(msg) > maxMsgBytes {
		msg = msg[:maxMsgBytes]
	}
	c.eachLink(func(l *link) {
		if !l.wdirty {
			l.conn.SetWriteDeadline(time.Now().Add(250 * time.Millisecond))
			l.write(frame{kind: kAbort, redop: code}, msg)
		}
		l.conn.CloseWrite()
		l.conn.SetReadDeadline(time.Time{})
		go io.Copy(io.Discard, l.conn) // until Close
	})
}

// eachLink runs f on every peer's link concurrently and waits for them.
func (c *tcpComm) eachLink(f func(l *link)) {
	var wg sync.WaitGroup
	for _, l := range c.links {
		if l == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(l)
		}()
	}
	wg.Wait()
}

// Abort poisons the communicator; see Comm.
func (c *tcpComm) Abort(reason error) {
	if reason == nil {
		reason = errors.New("aborted")
	}
	c.st.Lock()
	if c.err == nil && !c.closed {
		c.err = &OpError{Comm: c.opts.Name, Rank: c.rank, Size: c.size, Op: "Abort", Err: reason}
	}
	c.st.Unlock()
	c.interrupt()
	c.mu.Lock()
	c.wind()
	c.mu.Unlock()
}

// Close implements Comm: a healthy communicator says goodbye to its peers
// (so they report "rank r closed its communicator" rather than a lost
// connection), then closes the connections.
func (c *tcpComm) Close() error {
	c.st.Lock()
	if c.closed {
		c.st.Unlock()
		return nil
	}
	c.closed = true
	c.st.Unlock()
	c.interrupt()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.st.Lock()
	bye := !c.wound
	c.wound = true
	c.st.Unlock()
	c.eachLink(func(l *link) {
		if bye && !l.wdirty {
			l.conn.SetWriteDeadline(time.Now().Add(250 * time.Millisecond))
			l.write(frame{kind: kBye}, nil)
		}
		l.conn.Close()
	})
	return nil
}

// xfer is one peer's part of a round: what to send it and where to put
// what it sends.
type xfer struct {
	peer           int
	send, recv     []byte
	doSend, doRecv bool
}

// taskErr is the failure of one direction of one xfer.
type taskErr struct {
	peer int
	send bool
	err  error
}

// round runs one exchange with the peers in xs and classifies a failure.
func (c *tcpComm) round(o *opCtx, phase uint8, xs []xfer) error {
	f := o.f
	f.phase = phase
	for _, x := range xs {
		c.links[x.peer].conn.SetDeadline(o.deadline)
	}
	// After the deadlines: an Abort that set c.err before this check has
	// its interrupt overridden, so fail here; one after it interrupts us.
	if err := c.state(o); err != nil {
		return err
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []taskErr
	)
	report := func(peer int, send bool, err error) {
		mu.Lock()
		errs = append(errs, taskErr{peer, send, err})
		first := len(errs) == 1
		mu.Unlock()
		if first {
			// Stop the rest of the round: reads at once; writes get a short
			// grace to finish the frame they are in, so the streams stay in
			// step and can carry this rank's abort frame.
			grace := time.Now().Add(100 * time.Millisecond)
			for _, x := range xs {
				c.links[x.peer].conn.SetReadDeadline(time.Unix(1, 0))
				c.links[x.peer].conn.SetWriteDeadline(grace)
			}
		}
	}
	for _, x := range xs {
		l := c.links[x.peer]
		if x.doSend {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := l.write(f, x.send); err != nil {
					report(x.peer, true, err)
				}
			}()
		}
		if x.doRecv {
			want := f
			want.n = uint64(len(x.recv))
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := l.read(want, x.recv); err != nil {
					report(x.peer, false, err)
				}
			}()
		}
	}
	wg.Wait()
	if len(errs) == 0 {
		return nil
	}
	return c.classify(o, errs)
}

// classify turns the failures of a round (errs[0] first) into the
// operation's error and poisons the communicator.
func (c *tcpComm) classify(o *opCtx, errs []taskErr) error {
	if err := c.state(o); err != nil { // closed or aborted while we were blocked
		c.wind()
		return err
	}
	first := errs[0]
	var oe *OpError
	switch {
	case isTimeout(first.err):
		var peers []int
		seen := map[int]bool{}
		for _, e := range errs {
			if isTimeout(e.err) && !seen[e.peer] {
				seen[e.peer] = true
				peers = append(peers, e.peer)
			}
		}
		oe = c.opErr(o, errorf(ErrTimeout, ""), peers...)
	case errors.Is(first.err, ErrPeerAborted), errors.Is(first.err, ErrMismatch), errors.Is(first.err, ErrPeerLost):
		oe = c.opErr(o, first.err, first.peer)
	default:
		dir := "receiving from"
		if first.send {
			dir = "sending to"
		}
		oe = c.opErr(o, errorf(ErrPeerLost, "lost rank %d (%s) while %s it: %s", first.peer, c.links[first.peer].addr, dir, describeNetErr(first.err)), first.peer)
	}
	return c.fail(oe)
}

// scratchFor returns n bytes of reusable, 8-byte-aligned scratch (c.mu
// held).
func (c *tcpComm) scratchFor(n int) []byte {
	if cap(c.scratch) < n {
		c.scratch = alignedBytes(n)
	}
	return c.scratch[:n]
}

// blockBounds splits n elements into size nearly equal blocks: block k is
// [n*k/size, n*(k+1)/size).
func blockBounds(n, size, k int) (lo, hi int) {
	return n * k / size, n * (k + 1) / size
}

// hostInOut is hostBytes of in and out for operation o; a failure fails
// the operation.
func (c *tcpComm) hostInOut(o *opCtx, in, out *npu.Tensor) (hi, ho hostBuf, err error) {
	if hi, err = hostBytes(in); err != nil {
		return hi, ho, c.fail(c.opErr(o, err))
	}
	if ho, err = hostBytes(out); err != nil {
		return hi, ho, c.fail(c.opErr(o, err))
	}
	return hi, ho, nil
}

// exchange runs a round in which this rank sends send(k) to every other
// rank k and receives what k sends into recv(k).
func (c *tcpComm) exchange(o *opCtx, phase uint8, send, recv func(k int) []byte) error {
	xs := make([]xfer, 0, c.size-1)
	for k := 0; k < c.size; k++ {
		if k != c.rank {
			xs = append(xs, xfer{peer: k, send: send(k), recv: recv(k), doSend: true, doRecv: true})
		}
	}
	return c.round(o, phase, xs)
}

// gatherPeers runs an exchange in which this rank sends send(k) to every
// other rank k and receives k's contribution, len(mine) bytes, into
// scratch. It returns the contributions by rank, mine at this rank's.
func (c *tcpComm) gatherPeers(o *opCtx, phase uint8, mine []byte, send func(k int) []byte) ([][]byte, error) {
	srcs := make([][]byte, c.size)
	scratch := c.scratchFor((c.size - 1) * len(mine))
	for k, slot := 0, 0; k < c.size; k++ {
		if k == c.rank {
			srcs[k] = mine
			continue
		}
		srcs[k] = scratch[slot*len(mine) : (slot+1)*len(mine)]
		slot++
	}
	return srcs, c.exchange(o, phase, send, func(k int) []byte { return srcs[k] })
}

func (c *tcpComm) AllReduce(t *npu.Tensor, op ReduceOp) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, err := c.begin("AllReduce", kAllReduce, dtypeOf(t), func() string { return fmt.Sprintf("%v %v", t, op) })
	if err != nil {
		return err
	}
	o.f.redop = uint8(op)
	if t == nil {
		return c.invalid(o, "nil tensor")
	}
	if !Supported(t.DType(), op) {
		return c.invalid(o, "%v is not defined on %v (reductions take F32, BF16, F16, I8, I32, I64)", op, t.DType())
	}
	h, err := hostBytes(t)
	if err != nil {
		return c.fail(c.opErr(o, err))
	}
	if c.size == 1 {
		return nil
	}
	b, dt := h.b, t.DType()
	algo := c.opts.Algorithm
	if algo == AlgoAuto {
		algo = AlgoReduceScatterAllGather
		if len(b) <= DirectThresholdBytes {
			algo = AlgoDirect
		}
	}
	if algo == AlgoDirect {
		srcs, err := c.gatherPeers(o, 0, b, func(int) []byte { return b })
		if err != nil {
			return err
		}
		reduceInto(dt, op, b, srcs)
		h.commit()
		return nil
	}
	// Reduce-scatter: rank k reduces block k; then all-gather the blocks.
	es, n := dt.Size(), t.Numel()
	block := func(k int) []byte {
		lo, hi := blockBounds(n, c.size, k)
		return b[lo*es : hi*es]
	}
	mine := block(c.rank)
	srcs, err := c.gatherPeers(o, 1, mine, block)
	if err != nil {
		return err
	}
	reduceInto(dt, op, mine, srcs)
	if err := c.exchange(o, 2, func(int) []byte { return mine }, block); err != nil {
		return err
	}
	h.commit()
	return nil
}

func (c *tcpComm) ReduceScatter(out, in *npu.Tensor, op ReduceOp) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, err := c.begin("ReduceScatter", kReduceScatter, dtypeOf(in), func() string { return fmt.Sprintf("out %v, in %v, %v", out, in, op) })
	if err != nil {
		return err
	}
	o.f.redop = uint8(op)
	if out == nil || in == nil {
		return c.invalid(o, "nil tensor")
	}
	if out.DType() != in.DType() || in.Numel() != c.size*out.Numel() {
		return c.invalid(o, "in must hold Size()=%d blocks of out's elements, in out's dtype", c.size)
	}
	if !Supported(in.DType(), op) {
		return c.invalid(o, "%v is not defined on %v", op, in.DType())
	}
	hi, ho, err := c.hostInOut(o, in, out)
	if err != nil {
		return err
	}
	nb := len(ho.b)
	block := func(k int) []byte { return hi.b[k*nb : (k+1)*nb] }
	if overlap(ho.b, hi.b) && !sameMemory(ho.b, block(c.rank)) {
		return c.invalid(o, "out overlaps in other than as in's block %d", c.rank)
	}
	srcs, err := c.gatherPeers(o, 0, block(c.rank), block)
	if err != nil {
		return err
	}
	reduceInto(in.DType(), op, ho.b, srcs)
	ho.commit()
	return nil
}

func (c *tcpComm) AllGather(out, in *npu.Tensor) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, err := c.begin("AllGather", kAllGather, dtypeOf(in), func() string { return fmt.Sprintf("out %v, in %v", out, in) })
	if err != nil {
		return err
	}
	if out == nil || in == nil {
		return c.invalid(o, "nil tensor")
	}
	if out.DType() != in.DType() || out.Numel() != c.size*in.Numel() {
		return c.invalid(o, "out must hold Size()=%d blocks of in's elements, in in's dtype", c.size)
	}
	hi, ho, err := c.hostInOut(o, in, out)
	if err != nil {
		return err
	}
	nb := len(hi.b)
	block := func(k int) []byte { return ho.b[k*nb : (k+1)*nb] }
	if overlap(ho.b, hi.b) && !sameMemory(hi.b, block(c.rank)) {
		return c.invalid(o, "in overlaps out other than as out's block %d", c.rank)
	}
	if !sameMemory(hi.b, block(c.rank)) {
		copy(block(c.rank), hi.b)
	}
	if err := c.exchange(o, 0, func(int) []byte { return hi.b }, block); err != nil {
		return err
	}
	ho.commit()
	return nil
}

func (c *tcpComm) AllToAll(out, in *npu.Tensor) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, err := c.begin("AllToAll", kAllToAll, dtypeOf(in), func() string { return fmt.Sprintf("out %v, in %v", out, in) })
	if err != nil {
		return err
	}
	if out == nil || in == nil {
		return c.invalid(o, "nil tensor")
	}
	if out.DType() != in.DType() || out.Numel() != in.Numel() || in.Numel()%c.size != 0 {
		return c.invalid(o, "in and out must have the same dtype and element count, a multiple of Size()=%d", c.size)
	}
	hi, ho, err := c.hostInOut(o, in, out)
	if err != nil {
		return err
	}
	if overlap(hi.b, ho.b) {
		return c.invalid(o, "in and out overlap")
	}
	nb := len(hi.b) / c.size
	send := func(k int) []byte { return hi.b[k*nb : (k+1)*nb] }
	recv := func(k int) []byte { return ho.b[k*nb : (k+1)*nb] }
	copy(recv(c.rank), send(c.rank))
	if err := c.exchange(o, 0, send, recv); err != nil {
		return err
	}
	ho.commit()
	return nil
}

func (c *tcpComm) AllToAllV(out *npu.Tensor, outCounts []int, in *npu.Tensor, inCounts []int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, err := c.begin("AllToAllV", kAllToAllV, dtypeOf(in), func() string {
		return fmt.Sprintf("out %v counts %v, in %v counts %v", out, outCounts, in, inCounts)
	})
	if err != nil {
		return err
	}
	if out == nil || in == nil {
		return c.invalid(o, "nil tensor")
	}
	if out.DType() != in.DType() {
		return c.invalid(o, "in and out dtypes differ")
	}
	if len(outCounts) != c.size || len(inCounts) != c.size {
		return c.invalid(o, "need Size()=%d counts each, got %d out and %d in", c.size, len(outCounts), len(inCounts))
	}
	sumIn, sumOut := 0, 0
	for k := range c.size {
		if inCounts[k] < 0 || outCounts[k] < 0 {
			return c.invalid(o, "negative count")
		}
		sumIn += inCounts[k]
		sumOut += outCounts[k]
	}
	if sumIn > in.Numel() || sumOut > out.Numel() {
		return c.invalid(o, "counts need %d input and %d output elements", sumIn, sumOut)
	}
	if inCounts[c.rank] != outCounts[c.rank] {
		return c.invalid(o, "inCounts[%d]=%d must equal outCounts[%d]=%d (what this rank sends itself)", c.rank, inCounts[c.rank], c.rank, outCounts[c.rank])
	}
	hi, ho, err := c.hostInOut(o, in, out)
	if err != nil {
		return err
	}
	if overlap(hi.b, ho.b) {
		return c.invalid(o, "in and out overlap")
	}
	es := in.DType().Size()
	xs := make([]xfer, 0, c.size-1)
	for k, inOff, outOff := 0, 0, 0; k < c.size; k++ {
		s := hi.b[inOff*es : (inOff+inCounts[k])*es]
		r := ho.b[outOff*es : (outOff+outCounts[k])*es]
		inOff += inCounts[k]
		outOff += outCounts[k]
		if k == c.rank {
			copy(r, s)
			continue
		}
		xs = append(xs, xfer{peer: k, send: s, recv: r, doSend: true, doRecv: true})
	}
	if err := c.round(o, 0, xs); err != nil {
		return err
	}
	ho.commit()
	return nil
}

func (c *tcpComm) Broadcast(t *npu.Tensor, root int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, err := c.begin("Broadcast", kBroadcast, dtypeOf(t), func() string { return fmt.Sprintf("%v from root %d", t, root) })
	if err != nil {
		return err
	}
	if t == nil {
		return c.invalid(o, "nil tensor")
	}
	if root < 0 || root >= c.size {
		return c.invalid(o, "root %d out of range", root)
	}
	o.f.aux = uint32(root)
	h, err := hostBytes(t)
	if err != nil {
		return c.fail(c.opErr(o, err))
	}
	xs := make([]xfer, 0, c.size-1)
	if c.rank == root {
		for k := 0; k < c.size; k++ {
			if k != c.rank {
				xs = append(xs, xfer{peer: k, send: h.b, doSend: true})
			}
		}
	} else {
		xs = append(xs, xfer{peer: root, recv: h.b, doRecv: true})
	}
	if err := c.round(o, 0, xs); err != nil {
		return err
	}
	h.commit()
	return nil
}

func (c *tcpComm) Barrier() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, err := c.begin("Barrier", kBarrier, npu.Invalid, nil)
	if err != nil {
		return err
	}
	empty := func(int) []byte { return []byte{} }
	return c.exchange(o, 0, empty, empty)
}

func (c *tcpComm) Send(t *npu.Tensor, peer int) error {
	return c.p2p("Send", t, peer, true)
}

func (c *tcpComm) Recv(t *npu.Tensor, peer int) error {
	return c.p2p("Recv", t, peer, false)
}

func (c *tcpComm) p2p(name string, t *npu.Tensor, peer int, send bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var l *link
	if peer >= 0 && peer < c.size {
		l = c.links[peer]
	}
	var n uint64
	if l != nil {
		n = l.recvd + 1
		if send {
			n = l.sent + 1
		}
	}
	dir := "from"
	if send {
		dir = "to"
	}
	o, err := c.begin(name, kSend, dtypeOf(t), func() string { return fmt.Sprintf("%v %s rank %d, point-to-point #%d", t, dir, peer, n) })
	if err != nil {
		return err
	}
	if t == nil {
		return c.invalid(o, "nil tensor")
	}
	if l == nil {
		return c.invalid(o, "peer %d is not another rank of this communicator (size %d, this rank %d)", peer, c.size, c.rank)
	}
	o.f.seq = n
	h, err := hostBytes(t)
	if err != nil {
		return c.fail(c.opErr(o, err))
	}
	x := xfer{peer: peer}
	if send {
		x.send, x.doSend = h.b, true
	} else {
		x.recv, x.doRecv = h.b, true
	}
	if err := c.round(o, 0, []xfer{x}); err != nil {
		return err
	}
	if send {
		l.sent++
	} else {
		l.recvd++
		h.commit()
	}
	return nil
}

func dtypeOf(t *npu.Tensor) npu.DType {
	if t == nil {
		return npu.Invalid
	}
	return t.DType()
}
