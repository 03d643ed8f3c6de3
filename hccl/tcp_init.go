package hccl

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"time"
)

// TCP bootstrap.
//
//  1. Every rank r > 0 dials the root (rank 0) at the root info's address,
//     retrying while the root is not up yet, and sends join{session, rank,
//     size, name, the address of its own mesh listener}. The listener is
//     bound on the local IP of that connection: the interface that reaches
//     the root, so this works across hosts and network namespaces.
//  2. The root rejects strays and other sessions one by one, and aborts the
//     whole Init (telling every rank that joined or joins later why) on a
//     rank out of range, a rank number used twice, or a size or name that
//     differs from its own. When all size-1 ranks have joined it sends
//     everyone the table of mesh addresses.
//  3. Rank r dials ranks 1..r-1 and accepts ranks r+1..size-1 (the join
//     connection is the link to rank 0), then reports ready, or the
//     failure, to the root.
//  4. The root sends go once every rank is ready, or abort with the first
//     failure, so Init succeeds or fails on all ranks together.
//
// Every step is bounded by Options.InitTimeout from the call.

type tcpTransport struct{}

func init() { Register(TransportTCP, tcpTransport{}) }

func (tcpTransport) Available() error { return nil }

// NewRootInfo listens on a free port of o.ListenHost (NewRootInfo).
func (tcpTransport) NewRootInfo(o RootOptions) (RootInfo, error) {
	host := o.ListenHost
	if host == "" {
		host = "127.0.0.1"
	}
	return NewRootInfo(net.JoinHostPort(host, "0"))
}

func (tcpTransport) Init(ri RootInfo, rank, size int, opts Options) (Comm, error) {
	addr, session, err := ri.tcpAddr()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	b := &boot{addr: addr, session: session, rank: rank, size: size, opts: opts, start: start, deadline: start.Add(opts.InitTimeout)}
	var links []*link
	if rank == 0 {
		links, err = b.root()
	} else {
		links, err = b.join()
	}
	if err != nil {
		var oe *OpError
		if errors.As(err, &oe) {
			return nil, oe
		}
		return nil, b.fail(err)
	}
	return newTCPComm(rank, size, opts, links), nil
}

// boot is one rank's Init in progress.
type boot struct {
	addr, session   string
	rank, size      int
	opts            Options
	start, deadline time.Time
}

// fail wraps err as an Init OpError naming peers.
func (b *boot) fail(err error, peers ...int) *OpError {
	sort.Ints(peers)
	return &OpError{Comm: b.opts.Name, Rank: b.rank, Size: b.size, Op: "Init", Peers: peers,
		Elapsed: time.Since(b.start), Limit: b.opts.InitTimeout, Err: err}
}

// rootState is what the root's connection handlers need to know after the
// main loop has moved on.
type rootState struct {
	mu     sync.Mutex
	reason string // set when Init aborted: late joiners are told this
	kind   uint8
}

func (s *rootState) aborted() (string, uint8) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reason, s.kind
}

// root runs Init on rank 0.
func (b *boot) root() ([]*link, error) {
	ln := takeRootListener(b.session)
	if ln == nil {
		l, err := net.Listen("tcp", b.addr)
		if err != nil {
			return nil, errorf(ErrBootstrap, "cannot listen on the root address %s (rank 0 must run on the host named in the root info): %v", b.addr, err)
		}
		ln = l.(*net.TCPListener)
	}
	if b.size == 1 {
		ln.Close()
		return nil, nil
	}
	type arrival struct {
		conn *net.TCPConn
		br   *bufio.Reader
		m    ctl
	}
	arrivals := make(chan arrival)
	stop := make(chan struct{})
	defer close(stop)
	st := &rootState{}
	ln.SetDeadline(b.deadline)
	go func() { // acceptor: lives until the deadline or until Init succeeds
		defer ln.Close()
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				return
			}
			go func() {
				br := bufio.NewReaderSize(c, 256<<10)
				c.SetDeadline(minTime(b.deadline, time.Now().Add(10*time.Second)))
				m, err := readCtl(br, true)
				if err != nil || m.Type != "join" {
					c.Close() // a stray (port scanner, health check, old peer): ignore it
					return
				}
				if m.Session != b.session {
					writeCtl(c, ctl{Type: "abort", Kind: kindCode(ErrBootstrap), Error: fmt.Sprintf(
						"session mismatch: the root at %s serves session %s, rank %d presented %s (a root info from another launch?)",
						b.addr, b.session[:8]+"…", m.Rank, short(m.Session))}, false)
					c.Close()
					return
				}
				if reason, kind := st.aborted(); reason != "" {
					writeCtl(c, ctl{Type: "abort", Kind: kind, Error: reason}, false)
					c.Close()
					return
				}
				select {
				case arrivals <- arrival{c, br, m}:
				case <-stop:
					if reason, kind := st.aborted(); reason != "" {
						writeCtl(c, ctl{Type: "abort", Kind: kind, Error: reason}, false)
					}
					c.Close()
				}
			}()
		}
	}()

	links := make([]*link, b.size)
	addrs := make([]string, b.size)
	addrs[0] = b.addr
	// abort tells every joined rank why Init failed; the acceptor keeps
	// telling late joiners until the deadline.
	abort := func(err error, peers ...int) error {
		st.mu.Lock()
		st.reason, st.kind = "rank 0: "+err.Error(), kindCode(err)
		st.mu.Unlock()
		for _, l := range links {
			if l != nil {
				l.conn.SetWriteDeadline(time.Now().Add(time.Second))
				writeCtl(l.conn, ctl{Type: "abort", Kind: kindCode(err), Ranks: peers, Error: fmt.Sprintf("rank 0: %v", err)}, false)
				l.conn.Close()
			}
		}
		return b.fail(err, peers...)
	}

	timer := time.NewTimer(time.Until(b.deadline))
	defer timer.Stop()
	for joined := 1; joined < b.size; {
		select {
		case a := <-arrivals:
			m, from := a.m, a.conn.RemoteAddr().String()
			var err error
			switch {
			case m.Version != wireVersion:
				err = errorf(ErrBootstrap, "rank %d (from %s) speaks protocol version %d, rank 0 version %d (mixed npuserve builds?)", m.Rank, from, m.Version, wireVersion)
			case m.Size != b.size:
				err = errorf(ErrBootstrap, "size mismatch: rank %d (from %s) was started with size %d, rank 0 with size %d", m.Rank, from, m.Size, b.size)
			case m.Rank < 1 || m.Rank >= b.size:
				err = errorf(ErrBootstrap, "a rank from %s claims rank %d, out of range for size %d (rank 0 is the root)", from, m.Rank, b.size)
			case links[m.Rank] != nil:
				err = errorf(ErrBootstrap, "duplicate rank: rank %d joined from %s and again from %s", m.Rank, links[m.Rank].addr, from)
			case m.Name != b.opts.Name:
				err = errorf(ErrBootstrap, "communicator name mismatch: rank %d (from %s) joined as %q, rank 0 is %q", m.Rank, from, m.Name, b.opts.Name)
			}
			if err != nil {
				writeCtl(a.conn, ctl{Type: "abort", Kind: kindCode(err), Error: fmt.Sprintf("rank 0: %v", err)}, false)
				a.conn.Close()
				return nil, abort(err, m.Rank)
			}
			links[m.Rank] = newLink(m.Rank, a.conn, a.br)
			addrs[m.Rank] = m.Addr
			joined++
		case <-timer.C:
			var missing, present []int
			for r := 1; r < b.size; r++ {
				if links[r] == nil {
					missing = append(missing, r)
				} else {
					present = append(present, r)
				}
			}
			return nil, abort(errorf(ErrTimeout, "%s never joined the root at %s (joined: rank 0%s)", rankList(missing), b.addr, listSuffix(present)), missing...)
		}
	}

	// Everyone joined: hand out the mesh table, wait for ready.
	for _, l := range links[1:] {
		l.conn.SetDeadline(b.deadline)
		if err := writeCtl(l.conn, ctl{Type: "addrs", Addrs: addrs}, false); err != nil {
			return nil, abort(errorf(ErrBootstrap, "rank %d dropped out during Init: %s", l.rank, describeNetErr(err)), l.rank)
		}
	}
	type readyMsg struct {
		rank int
		m    ctl
		err  error
	}
	readies := make(chan readyMsg, b.size)
	for _, l := range links[1:] {
		go func() {
			m, err := readCtl(l.br, false)
			readies <- readyMsg{l.rank, m, err}
		}()
	}
	var slow []int
	var firstErr error
	var errPeer int
	for range b.size - 1 {
		r := <-readies
		var err error
		switch {
		case r.err != nil && isTimeout(r.err):
			slow = append(slow, r.rank)
			continue
		case r.err != nil:
			err = errorf(ErrPeerLost, "rank %d dropped out during Init: %s", r.rank, describeNetErr(r.err))
		case r.m.Type != "ready":
			err = errorf(ErrBootstrap, "rank %d sent %q instead of ready", r.rank, r.m.Type)
		case r.m.Error != "":
			err = &kindError{kind: orBootstrap(kindOf(r.m.Kind)), err: fmt.Errorf("rank %d: %s", r.rank, r.m.Error)}
		}
		if err != nil && firstErr == nil {
			firstErr, errPeer = err, r.rank
			// unblock the other readers: no need to wait for the deadline
			for _, l := range links[1:] {
				l.conn.SetReadDeadline(time.Now())
			}
		}
	}
	if firstErr != nil {
		return nil, abort(firstErr, errPeer)
	}
	if len(slow) > 0 {
		return nil, abort(errorf(ErrTimeout, "%s did not finish connecting to their peers", rankList(slow)), slow...)
	}
	for _, l := range links[1:] {
		if err := writeCtl(l.conn, ctl{Type: "go"}, false); err != nil {
			return nil, abort(errorf(ErrPeerLost, "rank %d dropped out during Init: %s", l.rank, describeNetErr(err)), l.rank)
		}
		l.conn.SetDeadline(time.Time{})
	}
	ln.Close() // free the port now (after a failure it stays to tell latecomers why)
	return links, nil
}

// rootGrace is how much longer than the root a rank waits for the root's
// verdict.
func rootGrace(initTimeout time.Duration) time.Duration {
	return time.Second + initTimeout/10
}

func orBootstrap(kind error) error {
	if kind == nil {
		return ErrBootstrap
	}
	return kind
}

// join runs Init on a rank other than 0.
func (b *boot) join() ([]*link, error) {
	conn, err := dialRetry(b.addr, b.deadline, nil)
	if err != nil {
		if isTimeout(err) {
			return nil, b.fail(errorf(ErrTimeout, "the root (rank 0) at %s did not accept a connection", b.addr), 0)
		}
		return nil, b.fail(errorf(ErrTimeout, "the root (rank 0) at %s is not reachable: %v", b.addr, err), 0)
	}
	br := bufio.NewReaderSize(conn, 256<<10)
	var ln *net.TCPListener
	myAddr := ""
	if b.rank < b.size-1 {
		ip := conn.LocalAddr().(*net.TCPAddr).IP
		ln, err = net.ListenTCP("tcp", &net.TCPAddr{IP: ip})
		if err != nil {
			conn.Close()
			return nil, b.fail(errorf(ErrBootstrap, "cannot listen for peers on %v: %v", ip, err))
		}
		defer ln.Close()
		myAddr = ln.Addr().String()
	}
	// The root decides the outcome; wait a little past our own deadline for
	// its verdict so that we report its reason (which ranks are missing)
	// rather than a bare timeout of our own.
	conn.SetDeadline(b.deadline.Add(rootGrace(b.opts.InitTimeout)))
	join := ctl{Type: "join", Version: wireVersion, Session: b.session, Rank: b.rank, Size: b.size, Name: b.opts.Name, Addr: myAddr}
	if err := writeCtl(conn, join, true); err != nil {
		conn.Close()
		return nil, b.fail(errorf(ErrPeerLost, "the root (rank 0) at %s: %s", b.addr, describeNetErr(err)), 0)
	}
	m, err := readCtl(br, false)
	if err != nil {
		conn.Close()
		if isTimeout(err) {
			return nil, b.fail(errorf(ErrTimeout, "no answer from the root (rank 0) at %s (are all ranks started?)", b.addr), 0)
		}
		return nil, b.fail(errorf(ErrPeerLost, "the root (rank 0) at %s: %s", b.addr, describeNetErr(err)), 0)
	}
	if m.Type == "abort" {
		conn.Close()
		return nil, b.fail(rootAbort(m), abortPeers(m)...)
	}
	if m.Type != "addrs" || len(m.Addrs) != b.size {
		conn.Close()
		return nil, b.fail(errorf(ErrBootstrap, "unexpected reply %q from the root (rank 0) at %s", m.Type, b.addr), 0)
	}

	links := make([]*link, b.size)
	links[0] = newLink(0, conn, br)
	type meshResult struct {
		err   error
		peers []int
	}
	meshDone := make(chan meshResult, 1)
	cancel := make(chan struct{})
	go func() {
		err, peers := b.mesh(ln, m.Addrs, links, cancel)
		meshDone <- meshResult{err, peers}
	}()
	type rootReply struct {
		m   ctl
		err error
	}
	fromRoot := make(chan rootReply, 1)
	go func() {
		m, err := readCtl(br, false)
		fromRoot <- rootReply{m, err}
	}()
	closeAll := func() {
		for _, l := range links {
			if l != nil {
				l.conn.Close()
			}
		}
	}
	var mr meshResult
	select {
	case mr = <-meshDone:
		ready := ctl{Type: "ready", Rank: b.rank}
		if mr.err != nil {
			ready.Error, ready.Kind = mr.err.Error(), kindCode(mr.err)
		}
		writeCtl(conn, ready, false)
	case r := <-fromRoot: // the root gave up before we were ready
		close(cancel)
		if ln != nil {
			ln.Close()
		}
		<-meshDone
		closeAll()
		if r.err == nil && r.m.Type == "abort" {
			return nil, b.fail(rootAbort(r.m), abortPeers(r.m)...)
		}
		return nil, b.fail(errorf(ErrPeerLost, "the root (rank 0) went away during Init: %v", errOr(r.err, r.m.Type)), 0)
	}
	if mr.err != nil {
		closeAll()
		return nil, b.fail(mr.err, mr.peers...)
	}
	r := <-fromRoot
	switch {
	case r.err != nil && isTimeout(r.err):
		closeAll()
		return nil, b.fail(errorf(ErrTimeout, "the root (rank 0) did not confirm that all ranks are connected"), 0)
	case r.err != nil:
		closeAll()
		return nil, b.fail(errorf(ErrPeerLost, "the root (rank 0) went away during Init: %s", describeNetErr(r.err)), 0)
	case r.m.Type == "abort":
		closeAll()
		return nil, b.fail(rootAbort(r.m), abortPeers(r.m)...)
	case r.m.Type != "go":
		closeAll()
		return nil, b.fail(errorf(ErrBootstrap, "unexpected message %q from the root", r.m.Type), 0)
	}
	for _, l := range links {
		if l != nil {
			l.conn.SetDeadline(time.Time{})
		}
	}
	return links, nil
}

func errOr(err error, typ string) any {
	if err != nil {
		return describeNetErr(err)
	}
	return fmt.Sprintf("unexpected message %q", typ)
}

// rootAbort is the error for an abort message from the root: it matches
// ErrBootstrap, ErrPeerAborted and the kind of the root's failure.
func rootAbort(m ctl) error {
	err := fmt.Errorf("Init aborted by the root: %s", m.Error)
	if k := kindOf(m.Kind); k != nil && k != ErrBootstrap {
		err = &kindError{kind: k, err: err}
	}
	return &kindError{kind: ErrBootstrap, err: &kindError{kind: ErrPeerAborted, err: err}}
}

// abortPeers are the ranks an abort from the root concerns: those it
// names, else the root itself.
func abortPeers(m ctl) []int {
	if len(m.Ranks) > 0 {
		return m.Ranks
	}
	return []int{0}
}

// mesh connects rank b.rank to every rank but 0: it dials the lower ranks
// and accepts the higher ones, filling links. On failure it returns the
// first error and the peers it concerns.
func (b *boot) mesh(ln *net.TCPListener, addrs []string, links []*link, cancel <-chan struct{}) (error, []int) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	var errPeers []int
	fail := func(peer int, err error) {
		mu.Lock()
		errs = append(errs, err)
		errPeers = append(errPeers, peer)
		mu.Unlock()
	}
	for j := 1; j < b.rank; j++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := dialRetry(addrs[j], b.deadline, cancel)
			if err != nil {
				fail(j, errorf(ErrBootstrap, "cannot connect to rank %d at %s: %v", j, addrs[j], err))
				return
			}
			br := bufio.NewReaderSize(c, 256<<10)
			c.SetDeadline(b.deadline)
			if err := writeCtl(c, ctl{Type: "mesh", Version: wireVersion, Session: b.session, Rank: b.rank, Size: b.size}, true); err != nil {
				c.Close()
				fail(j, errorf(ErrPeerLost, "rank %d at %s: %s", j, addrs[j], describeNetErr(err)))
				return
			}
			m, err := readCtl(br, false)
			switch {
			case err != nil && isTimeout(err):
				c.Close()
				fail(j, errorf(ErrTimeout, "rank %d at %s did not answer", j, addrs[j]))
			case err != nil:
				c.Close()
				fail(j, errorf(ErrPeerLost, "rank %d at %s: %s", j, addrs[j], describeNetErr(err)))
			case m.Type != "ok":
				c.Close()
				fail(j, errorf(ErrBootstrap, "rank %d at %s refused the connection: %s", j, addrs[j], m.Error))
			default:
				mu.Lock()
				links[j] = newLink(j, c, br)
				mu.Unlock()
			}
		}()
	}
	if want := b.size - 1 - b.rank; want > 0 {
		ln.SetDeadline(b.deadline)
		for got := 0; got < want; {
			c, err := ln.AcceptTCP()
			if err != nil {
				select {
				case <-cancel:
					wg.Wait()
					return errCancelled, nil
				default:
				}
				var missing []int
				mu.Lock()
				for r := b.rank + 1; r < b.size; r++ {
					if links[r] == nil {
						missing = append(missing, r)
					}
				}
				mu.Unlock()
				wg.Wait()
				return errorf(ErrTimeout, "%s did not connect to rank %d at %s", rankList(missing), b.rank, ln.Addr()), missing
			}
			br := bufio.NewReaderSize(c, 256<<10)
			c.SetDeadline(minTime(b.deadline, time.Now().Add(10*time.Second)))
			m, err := readCtl(br, true)
			if err != nil || m.Type != "mesh" {
				c.Close() // stray
				continue
			}
			var reject string
			mu.Lock()
			switch {
			case m.Session != b.session:
				reject = fmt.Sprintf("session mismatch: rank %d serves session %s, the peer presented %s", b.rank, short(b.session), short(m.Session))
			case m.Rank <= b.rank || m.Rank >= b.size || links[m.Rank] != nil:
				reject = fmt.Sprintf("rank %d did not expect a connection from rank %d", b.rank, m.Rank)
			}
			mu.Unlock()
			if reject != "" {
				writeCtl(c, ctl{Type: "abort", Error: reject}, false)
				c.Close()
				if m.Session == b.session { // same job, wrong rank: a real bug
					wg.Wait()
					return errorf(ErrBootstrap, "%s", reject), []int{m.Rank}
				}
				continue
			}
			if err := writeCtl(c, ctl{Type: "ok"}, false); err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			links[m.Rank] = newLink(m.Rank, c, br)
			mu.Unlock()
			got++
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		return errs[0], errPeers[:1]
	}
	return nil, nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func short(session string) string {
	if len(session) > 8 {
		return session[:8] + "…"
	}
	if session == "" {
		return `""`
	}
	return session
}

// listSuffix renders ", 1, 2" for the joined-ranks note.
func listSuffix(ranks []int) string {
	s := ""
	for _, r := range ranks {
		s += fmt.Sprintf(", %d", r)
	}
	return s
}
