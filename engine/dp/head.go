package dp

import (
	"bytes"
	"context"
	"encoding/gob"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/npuserve/npuserve/engine/core"
	"github.com/npuserve/npuserve/engine/server"
	"github.com/npuserve/npuserve/hccl"
)

// HeadConfig configures the head node.
type HeadConfig struct {
	// Spec starts the head's local ranks (DP ranks [0, Local)), one
	// process per device rank (see RunRank).
	Spec RankSpec
	// Settings are the head's; every rank must match them.
	Settings Settings
	// Local is --data-parallel-size-local of the head (≥ 1).
	Local int
	// Address is --data-parallel-address: the head's address that the
	// other nodes reach (default 127.0.0.1, enough when every rank is
	// local).
	Address string
	// RPCPort is --data-parallel-rpc-port; the control plane listens on
	// it on every interface.
	RPCPort int
	// HeartbeatInterval, DeadAfter and StartTimeout: 0 means the defaults.
	HeartbeatInterval, DeadAfter, StartTimeout time.Duration
	// Logf logs progress and failures (nil: silent).
	Logf func(format string, args ...any)
}

// Head is the head node's DP coordinator. It implements the engine
// interface of engine/server (Add, Abort, Stats, Err) over every DP rank.
type Head struct {
	cfg    HeadConfig
	ln     net.Listener
	http   *http.Server
	client *http.Client
	procs  *rankProcs

	mu      sync.Mutex
	ranks   []*rankState
	next    int
	flights map[string]*flight
	dead    error
	closing bool

	deadCh    chan struct{}
	readyCh   chan struct{}
	closeOnce sync.Once
}

// rankState is the head's view of one DP rank.
type rankState struct {
	dp         int
	node, host string
	joined     bool
	ready      bool
	lastBeat   time.Time
	stats      core.Stats
	pending    int // requests sent since the last heartbeat
	endpoint   string
	own        bool // one of the head's DP ranks
	full       *core.Stats
	numBlocks  int
	routed     int64 // requests sent to this rank
}

// flight is a request in flight.
type flight struct {
	rank   int
	cancel context.CancelFunc // remote ranks
}

// StartHead starts the control plane on the RPC port (on an ephemeral
// port of Address when every DP rank is local) and one process per local
// device rank, waits until every DP rank has joined and is ready, and
// returns the head. It fails when a local rank process ends early, or when
// the ranks are not all ready after StartTimeout (logging who is missing
// every 10 s meanwhile). While the group serves, a local rank process that
// ends fails the group like a lost remote rank.
func StartHead(ctx context.Context, cfg HeadConfig) (*Head, error) {
	topo := cfg.Spec.Topology
	if cfg.Local < 1 || cfg.Local > topo.DP {
		return nil, fmt.Errorf("dp: the head needs 1..%d local DP ranks (--data-parallel-size-local), got %d", topo.DP, cfg.Local)
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if cfg.DeadAfter <= 0 {
		cfg.DeadAfter = DefaultDeadAfter
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if cfg.Address == "" {
		cfg.Address = "127.0.0.1"
	}
	if cfg.Spec.ListenHost == "" {
		cfg.Spec.ListenHost = cfg.Address
	}
	if cfg.Spec.Comm.InitTimeout <= 0 {
		cfg.Spec.Comm.InitTimeout = cfg.StartTimeout
	}
	remote := cfg.Local < topo.DP
	var ln net.Listener
	if remote {
		l, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(cfg.RPCPort)))
		if err != nil {
			return nil, fmt.Errorf("dp: --data-parallel-rpc-port %d: %w", cfg.RPCPort, err)
		}
		ln = l
	} else {
		// Only the head's own rank processes talk to the coordinator.
		l, err := net.Listen("tcp", net.JoinHostPort(cfg.Address, "0"))
		if err != nil {
			return nil, fmt.Errorf("dp: the coordinator's port on %s: %w", cfg.Address, err)
		}
		ln = l
	}
	// Rank 0 runs in a child process: it listens on the root address,
	// a port free now.
	ri, err := rootInfoFor(cfg.Address)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("dp: world root info on --data-parallel-address %s: %w", cfg.Address, err)
	}
	h := &Head{cfg: cfg, ln: ln, flights: map[string]*flight{}, deadCh: make(chan struct{}), readyCh: make(chan struct{}, 1),
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, DialContext: (&net.Dialer{Timeout: 3 * time.Second}).DialContext}}}
	for d := 0; d < topo.DP; d++ {
		h.ranks = append(h.ranks, &rankState{dp: d})
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathJoin, func(w http.ResponseWriter, r *http.Request) { h.handleJoin(w, r, ri) })
	mux.HandleFunc("POST "+PathReady, h.handleReady)
	mux.HandleFunc("POST "+PathHeartbeat, h.handleHeartbeat)
	mux.HandleFunc("GET "+PathStatus, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, h.Status()) })
	h.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go h.http.Serve(ln)
	if remote {
		h.logf("DP coordinator listening on port %d (--data-parallel-rpc-port); world root on %s; waiting for DP ranks %d..%d",
			cfg.RPCPort, cfg.Address, cfg.Local, topo.DP-1)
	}

	node := cfg.Address + ", the head"
	h.mu.Lock()
	for d := 0; d < cfg.Local; d++ {
		st := h.ranks[d]
		st.node, st.host, st.joined, st.own, st.lastBeat = node, cfg.Address, true, true, time.Now()
	}
	h.mu.Unlock()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	procs, err := spawnRanks(topo, 0, cfg.Local, RankRole{WorldRootInfo: ri.String(), Coordinator: "http://" + net.JoinHostPort(cfg.Address, port),
		Node: node, Host: cfg.Spec.ListenHost, HeartbeatMS: int(cfg.HeartbeatInterval / time.Millisecond)})
	if err != nil {
		h.http.Close()
		return nil, err
	}
	h.procs = procs
	h.logf("Started %d rank processes for DP ranks 0..%d (TP %d each)", cfg.Local*topo.TP, cfg.Local-1, topo.TP)
	fail := func(err error) (*Head, error) {
		h.markDead(-1, err)
		procs.stop(2 * time.Second)
		h.http.Close()
		return nil, err
	}
	deadline := time.NewTimer(cfg.StartTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for !h.allReady() {
		select {
		case e := <-procs.exited:
			return fail(fmt.Errorf("dp: starting the head's ranks: DP rank %d: %w", e.dp, e.describe()))
		case <-h.readyCh:
		case <-tick.C:
			h.logf("Waiting for DP ranks to join/report ready: %s", h.missing())
		case <-deadline.C:
			return fail(fmt.Errorf("dp: not every DP rank was ready after %s: %s", cfg.StartTimeout, h.missing()))
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
	h.logf("All %d DP ranks ready (%d cache blocks in all)", topo.DP, h.Stats().NumBlocks)
	go h.supervise()
	go h.monitor()
	return h, nil
}

// rootInfoFor is a TCP root info for rank 0's process on host: a port
// of host that is free now, and a fresh session.
func rootInfoFor(host string) (hccl.RootInfo, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return hccl.RootInfo{}, err
	}
	addr := l.Addr().String()
	l.Close()
	return hccl.TCPRootInfo(addr)
}

func (h *Head) logf(format string, args ...any) {
	if h.cfg.Logf != nil {
		h.cfg.Logf(format, args...)
	}
}

// allReady reports whether every DP rank is ready; it signals readyCh's
// waiters through the start loop.
func (h *Head) allReady() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.ranks {
		if !r.ready {
			return false
		}
	}
	return true
}

// missing describes the ranks not ready yet.
func (h *Head) missing() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var b bytes.Buffer
	for _, r := range h.ranks {
		switch {
		case r.ready:
			continue
		case r.own:
			fmt.Fprintf(&b, "local DP rank %d starting; ", r.dp)
		case r.joined:
			fmt.Fprintf(&b, "DP rank %d (node %s) loading; ", r.dp, r.node)
		default:
			fmt.Fprintf(&b, "DP rank %d not joined; ", r.dp)
		}
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()[:b.Len()-2]
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// decodeBody decodes the one JSON value of r's body (at most limit bytes
// read) into v, refusing anything but whitespace after it: a Decoder
// alone would take `{...}0` for `{...}`.
func decodeBody(r *http.Request, limit int64, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, limit))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

func (h *Head) refuse(w http.ResponseWriter, status int, msg string) {
	h.logf("Refused: %s", msg)
	writeJSON(w, status, ErrorResponse{Error: msg})
}

func (h *Head) handleJoin(w http.ResponseWriter, r *http.Request, ri hccl.RootInfo) {
	var req JoinRequest
	if err := decodeBody(r, 1<<20, &req); err != nil {
		h.refuse(w, http.StatusBadRequest, "bad join request: "+err.Error())
		return
	}
	topo := h.cfg.Spec.Topology
	if req.DPRank < h.cfg.Local || req.DPRank >= topo.DP {
		h.refuse(w, http.StatusConflict, fmt.Sprintf("headless rank %d (node %s): DP rank outside the headless ranks %d..%d of --data-parallel-size %d (check --data-parallel-start-rank and --data-parallel-size-local)",
			req.DPRank, req.Node, h.cfg.Local, topo.DP-1, topo.DP))
		return
	}
	if d := req.Settings.Diff(h.cfg.Settings, req.DPRank, req.Node); d != "" {
		h.refuse(w, http.StatusConflict, d)
		return
	}
	h.mu.Lock()
	st := h.ranks[req.DPRank]
	if h.dead != nil {
		h.mu.Unlock()
		h.refuse(w, http.StatusServiceUnavailable, "the data-parallel group failed: "+h.dead.Error())
		return
	}
	if st.joined {
		h.mu.Unlock()
		h.refuse(w, http.StatusConflict, fmt.Sprintf("headless rank %d (node %s): DP rank %d already joined from node %s", req.DPRank, req.Node, req.DPRank, st.node))
		return
	}
	st.joined, st.node, st.host, st.lastBeat = true, req.Node, req.Host, time.Now()
	h.mu.Unlock()
	h.logf("DP rank %d joined from node %s (%s)", req.DPRank, req.Node, req.Host)
	writeJSON(w, http.StatusOK, JoinResponse{WorldRootInfo: ri.String(), DP: topo.DP, TP: topo.TP, EP: topo.EP,
		HeartbeatMS: int(h.cfg.HeartbeatInterval / time.Millisecond)})
}

func (h *Head) handleReady(w http.ResponseWriter, r *http.Request) {
	var req ReadyRequest
	if err := decodeBody(r, 1<<20, &req); err != nil {
		h.refuse(w, http.StatusBadRequest, "bad ready request: "+err.Error())
		return
	}
	if req.DPRank < 0 || req.DPRank >= len(h.ranks) {
		h.refuse(w, http.StatusBadRequest, fmt.Sprintf("ready from unknown DP rank %d", req.DPRank))
		return
	}
	h.mu.Lock()
	st := h.ranks[req.DPRank]
	switch {
	case !st.joined:
		h.mu.Unlock()
		h.refuse(w, http.StatusConflict, fmt.Sprintf("DP rank %d reported ready without joining", req.DPRank))
		return
	case req.SettingsHash != h.cfg.Settings.Hash():
		h.mu.Unlock()
		h.refuse(w, http.StatusConflict, fmt.Sprintf("headless rank %d (node %s): settings hash %s differs from the head's %s",
			req.DPRank, st.node, req.SettingsHash, h.cfg.Settings.Hash()))
		return
	}
	st.ready, st.endpoint, st.numBlocks, st.lastBeat = true, req.Endpoint, req.NumBlocks, time.Now()
	st.stats.NumBlocks = req.NumBlocks
	if req.Stats != nil {
		st.full = req.Stats
	}
	h.mu.Unlock()
	h.logf("DP rank %d (node %s) ready: %d cache blocks", req.DPRank, st.node, req.NumBlocks)
	writeJSON(w, http.StatusOK, HeartbeatResponse{State: "ok"})
	select {
	case h.readyCh <- struct{}{}:
	default:
	}
}

func (h *Head) handleHeartbeat(w http.ResponseWriter, r *http.Request) {
	var req HeartbeatRequest
	if err := decodeBody(r, 1<<20, &req); err != nil {
		h.refuse(w, http.StatusBadRequest, "bad heartbeat: "+err.Error())
		return
	}
	if req.Leaving != "" {
		h.mu.Lock()
		leaving := -1
		for _, l := range req.Ranks {
			if l.DPRank >= 0 && l.DPRank < len(h.ranks) && h.ranks[l.DPRank].joined && !h.ranks[l.DPRank].own {
				leaving = l.DPRank
				break
			}
		}
		closing := h.closing
		h.mu.Unlock()
		if leaving >= 0 && !closing {
			h.markDead(leaving, errors.New(req.Leaving))
		}
		writeJSON(w, http.StatusOK, HeartbeatResponse{State: "ok"})
		return
	}
	now := time.Now()
	h.mu.Lock()
	for _, l := range req.Ranks {
		if l.DPRank >= 0 && l.DPRank < len(h.ranks) && h.ranks[l.DPRank].joined {
			st := h.ranks[l.DPRank]
			st.lastBeat = now
			st.stats.Waiting, st.stats.Running, st.pending = l.Waiting, l.Running, 0
			if l.Stats != nil {
				st.full = l.Stats
			}
		}
	}
	resp := HeartbeatResponse{State: "ok"}
	switch {
	case h.dead != nil:
		resp = HeartbeatResponse{State: "failed", Reason: h.dead.Error()}
	case h.closing:
		resp = HeartbeatResponse{State: "shutdown", Reason: "the head node is shutting down"}
	}
	h.mu.Unlock()
	writeJSON(w, http.StatusOK, resp)
}

// monitor declares ranks dead when their heartbeats stop.
func (h *Head) monitor() {
	t := time.NewTicker(h.cfg.HeartbeatInterval / 4)
	defer t.Stop()
	for {
		select {
		case <-h.deadCh:
			return
		case <-t.C:
		}
		now := time.Now()
		h.mu.Lock()
		var late *rankState
		for _, st := range h.ranks {
			if now.Sub(st.lastBeat) > h.cfg.DeadAfter {
				late = st
				break
			}
		}
		h.mu.Unlock()
		if late != nil {
			h.markDead(late.dp, fmt.Errorf("no heartbeat for %s", now.Sub(late.lastBeat).Round(100*time.Millisecond)))
		}
	}
}

// supervise declares the group dead when one of the head's rank
// processes ends while the group serves, blaming the DP rank the
// process's failure points at (its own unless a collective lost a peer).
func (h *Head) supervise() {
	for {
		select {
		case e := <-h.procs.exited:
			h.mu.Lock()
			closing := h.closing
			h.mu.Unlock()
			if closing {
				continue
			}
			h.markDeadBlamed(e.blamed(), e.dp, e.describe())
		case <-h.deadCh:
			return
		}
	}
}

// blame is the DP rank a local rank's failure points at: the peer a
// collective lost (a dead or frozen remote rank makes the local ranks'
// collectives fail first), else the local rank itself.
func blame(local, tp int, err error) int {
	var oe *hccl.OpError
	if errors.As(err, &oe) && oe.Peer() < 0 && errors.Is(oe, hccl.ErrTimeout) {
		// HCCL (and NCCL) do not say which rank a timed-out collective
		// waited for: the heartbeats will tell (markDeadBlamed).
		return blameUnknown
	}
	if !errors.As(err, &oe) || oe.Peer() < 0 ||
		!(errors.Is(oe, hccl.ErrPeerLost) || errors.Is(oe, hccl.ErrTimeout) || errors.Is(oe, hccl.ErrPeerAborted)) {
		return local
	}
	switch oe.Comm {
	case "ep", "world":
		return oe.Peer() / tp
	case "dp":
		return oe.Peer()
	}
	return local
}

// blameUnknown is blame's answer for a collective that timed out without
// naming the rank it waited for.
const blameUnknown = -2

// markDeadBlamed is markDead for a failure of DP rank local that blames
// DP rank blamed. A timeout naming no rank (blameUnknown) waits until the
// heartbeats could have declared the rank that froze dead (DeadAfter and
// two heartbeats) and blames local only if none was: a frozen peer, not
// the rank that waited for it, is what a 503 should name.
func (h *Head) markDeadBlamed(blamed, local int, cause error) {
	if blamed == blameUnknown {
		select {
		case <-h.deadCh:
			return
		case <-time.After(h.cfg.DeadAfter + 2*h.cfg.HeartbeatInterval):
		}
		blamed = local
	}
	h.markDead(blamed, cause)
}

// markDead fails the group once: rank dp (-1: none in particular) is
// gone because of cause. It ends every request in flight with 503; the
// rank processes hear it at their next heartbeat and exit.
func (h *Head) markDead(dp int, cause error) {
	h.mu.Lock()
	if h.dead != nil {
		h.mu.Unlock()
		return
	}
	if dp >= len(h.ranks) {
		dp = -1 // a peer outside the group: blame no rank in particular
	}
	if dp >= 0 {
		st := h.ranks[dp]
		node := st.node
		if node == "" {
			node = "?"
		}
		h.dead = fmt.Errorf("DP rank %d (node %s) is gone: %v; the data-parallel group cannot serve until every node is restarted", dp, node, cause)
	} else {
		h.dead = cause
	}
	dead := h.dead
	for _, f := range h.flights {
		if f.cancel != nil {
			f.cancel()
		}
	}
	h.mu.Unlock()
	close(h.deadCh)
	h.logf("%v", dead)
}

// Err reports why the group failed (nil while it serves).
func (h *Head) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dead
}

// Done is closed when the group failed.
func (h *Head) Done() <-chan struct{} { return h.deadCh }

// unavailable is the 503 the server sends when the group failed.
func unavailable(err error) *server.APIError {
	return &server.APIError{Status: http.StatusServiceUnavailable, Type: "ServiceUnavailableError", Message: err.Error()}
}

// pick chooses the DP rank for a new request: the least loaded by
// waiting×4+running, scanning from a rotating start so that ties spread.
func (h *Head) pick() *rankState {
	var best *rankState
	bestScore := 0
	n := len(h.ranks)
	for i := 0; i < n; i++ {
		st := h.ranks[(h.next+i)%n]
		score := (st.stats.Waiting+st.pending)*4 + st.stats.Running
		if best == nil || score < bestScore {
			best, bestScore = st, score
		}
	}
	h.next = (h.next + 1) % n
	return best
}

// Add implements server.Engine: it sends r to the least loaded DP rank.
func (h *Head) Add(r *core.Request) (<-chan core.Output, error) {
	h.mu.Lock()
	if h.dead != nil {
		err := h.dead
		h.mu.Unlock()
		return nil, unavailable(err)
	}
	if h.closing {
		h.mu.Unlock()
		return nil, core.ErrClosed
	}
	if _, dup := h.flights[r.ID]; dup {
		h.mu.Unlock()
		return nil, fmt.Errorf("dp: request id %q is already in flight", r.ID)
	}
	st := h.pick()
	st.routed++
	st.pending++
	ctx, cancel := context.WithCancel(context.Background())
	f := &flight{rank: st.dp, cancel: cancel}
	in := h.remote(ctx, st.dp, st.endpoint, r)
	h.flights[r.ID] = f
	h.mu.Unlock()
	out := make(chan core.Output, 16)
	go h.forward(r.ID, in, out)
	return out, nil
}

// forward copies a rank's outputs to the server; once the group failed it
// ends the request with 503 naming the lost rank.
func (h *Head) forward(id string, in <-chan core.Output, out chan<- core.Output) {
	defer func() {
		h.mu.Lock()
		delete(h.flights, id)
		h.mu.Unlock()
		close(out)
	}()
	for {
		select {
		case o, ok := <-in:
			if !ok {
				return
			}
			if o.Finished {
				if err := h.Err(); err != nil && (o.FinishReason == "error" || o.FinishReason == "abort") {
					o.FinishReason, o.Err = "abort", unavailable(err)
				}
				out <- o
				return
			}
			out <- o
		case <-h.deadCh:
			go func() {
				for range in {
				}
			}()
			out <- core.Output{RequestID: id, Finished: true, FinishReason: "abort", Err: unavailable(h.Err()), Time: time.Now()}
			return
		}
	}
}

// ownExitWait bounds how long a failed connection to one of the head's own
// rank processes waits for that process's exit to say why.
const ownExitWait = 3 * time.Second

// remote streams r through a headless rank's request server.
func (h *Head) remote(ctx context.Context, dp int, endpoint string, r *core.Request) <-chan core.Output {
	ch := make(chan core.Output, 16)
	go func() {
		defer close(ch)
		final := func(err error) {
			if ctx.Err() != nil {
				ch <- core.Output{RequestID: r.ID, Finished: true, FinishReason: "abort", Time: time.Now()}
				return
			}
			if h.ranks[dp].own {
				// One of the head's own rank processes refusing or
				// breaking the connection has ended or is ending; its
				// exit, reaped by supervise, carries the failure and the
				// peer it blames (a killed remote node makes the head's
				// ranks fail first). Blame the rank only if no exit comes.
				select {
				case <-h.deadCh:
				case <-time.After(ownExitWait):
				}
			}
			h.markDead(dp, err)
			ch <- core.Output{RequestID: r.ID, Finished: true, FinishReason: "abort", Err: unavailable(h.Err()), Time: time.Now()}
		}
		var body bytes.Buffer
		if err := json.NewEncoder(&body).Encode(r); err != nil {
			ch <- core.Output{RequestID: r.ID, Finished: true, FinishReason: "error", Err: err, Time: time.Now()}
			return
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint+PathGenerate+"?dp_rank="+strconv.Itoa(dp), &body)
		if err != nil {
			final(err)
			return
		}
		resp, err := h.client.Do(req)
		if err != nil {
			final(fmt.Errorf("sending a request: %w", err))
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			ch <- core.Output{RequestID: r.ID, Finished: true, FinishReason: "error", Err: errors.New(string(bytes.TrimSpace(msg))), Time: time.Now()}
			return
		}
		dec := gob.NewDecoder(resp.Body)
		for {
			var w wireOutput
			if err := dec.Decode(&w); err != nil {
				final(fmt.Errorf("its request stream broke: %w", err))
				return
			}
			if w.RankFailed {
				h.markDeadBlamed(w.Blame, dp, errors.New(w.Err))
			}
			ch <- w.output()
			if w.Finished {
				return
			}
		}
	}()
	return ch
}

// Status is the group's state as GET /v1/dp/status reports it.
func (h *Head) Status() GroupStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	var g GroupStatus
	if h.dead != nil {
		g.Failed = h.dead.Error()
	}
	for _, st := range h.ranks {
		rs := RankStatus{DPRank: st.dp, Node: st.node, Host: st.host, Local: st.own, Ready: st.ready,
			NumBlocks: st.numBlocks, Waiting: st.stats.Waiting, Running: st.stats.Running, Routed: st.routed}
		if st.own && h.procs != nil {
			rs.PIDs = h.procs.pids(st.dp, h.cfg.Spec.Topology.TP)
		}
		g.Ranks = append(g.Ranks, rs)
	}
	return g
}

// Routed counts the requests sent to each DP rank so far.
func (h *Head) Routed() []int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]int64, len(h.ranks))
	for i, st := range h.ranks {
		out[i] = st.routed
	}
	return out
}

// Abort implements server.Engine.
func (h *Head) Abort(id string) bool {
	h.mu.Lock()
	f, ok := h.flights[id]
	h.mu.Unlock()
	if !ok {
		return false
	}
	f.cancel()
	return true
}

// Stats implements server.Engine: the sum over the DP ranks as of their
// leaders' last heartbeats.
func (h *Head) Stats() core.Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	var s core.Stats
	s.FinishedByReason = map[string]int64{}
	s.BlockSize, s.MaxModelLen = h.cfg.Spec.Engine.BlockSize, h.cfg.Spec.Engine.MaxModelLen
	for _, st := range h.ranks {
		var x core.Stats
		if st.full != nil {
			x = *st.full
			x.Waiting, x.Running = st.stats.Waiting, st.stats.Running
			s.BlockSize, s.MaxModelLen = x.BlockSize, x.MaxModelLen
			s.PromptTokens += x.PromptTokens
			s.GenerationTokens += x.GenerationTokens
			s.Preemptions += x.Preemptions
			s.Steps += x.Steps
			s.DummySteps += x.DummySteps
			s.UsedBlocks += x.UsedBlocks
			s.UsedStateSlots += x.UsedStateSlots
			s.NumStateSlots += x.NumStateSlots
			for k, v := range x.FinishedByReason {
				s.FinishedByReason[k] += v
			}
			s.NumSpeculativeTokens = max(s.NumSpeculativeTokens, x.NumSpeculativeTokens)
			s.SpecDrafts += x.SpecDrafts
			s.SpecDraftTokens += x.SpecDraftTokens
			s.SpecAcceptedTokens += x.SpecAcceptedTokens
			for len(s.SpecAcceptedPerPos) < len(x.SpecAcceptedPerPos) {
				s.SpecAcceptedPerPos = append(s.SpecAcceptedPerPos, 0)
			}
			for i, v := range x.SpecAcceptedPerPos {
				s.SpecAcceptedPerPos[i] += v
			}
		} else {
			x = st.stats
		}
		x.NumBlocks = st.numBlocks
		s.Running += x.Running
		s.Waiting += x.Waiting
		s.NumBlocks += x.NumBlocks
	}
	if s.NumBlocks > 0 {
		s.KVUsage = float64(s.UsedBlocks) / float64(s.NumBlocks)
	}
	return s
}

// Close shuts the group down: every rank process and headless node is
// told "shutdown" at its next heartbeat, the head's rank processes are
// stopped (SIGTERM, SIGKILL after 5 s) and the control plane closes.
func (h *Head) Close() error {
	h.closeOnce.Do(func() {
		h.mu.Lock()
		h.closing = true
		h.mu.Unlock()
		// Let the ranks hear "shutdown" once.
		time.Sleep(min(h.cfg.HeartbeatInterval+200*time.Millisecond, 2*time.Second))
		h.procs.stop(5 * time.Second)
		h.http.Close()
	})
	return nil
}
