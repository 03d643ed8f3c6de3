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
	"time"

	"github.com/npuserve/npuserve/engine/core"
	"github.com/npuserve/npuserve/hccl"
)

// HeadlessConfig configures a --headless node.
type HeadlessConfig struct {
	// Spec starts the node's ranks.
	Spec RankSpec
	// Settings are this node's; the head rejects any difference.
	Settings Settings
	// Start and Local are --data-parallel-start-rank and
	// --data-parallel-size-local.
	Start, Local int
	// HeadAddress and RPCPort are --data-parallel-address and
	// --data-parallel-rpc-port.
	HeadAddress string
	RPCPort     int
	// Host is this node's address the head and the other ranks reach
	// (default: the address of the interface that routes to the head).
	Host string
	// Node names the node in messages (default Host).
	Node string
	// ConnectTimeout bounds the attempts to reach the head at start-up;
	// HeadTimeout is how long the head may be unreachable once joined
	// before the node exits. 0 means the defaults.
	ConnectTimeout, HeadTimeout time.Duration
	// Logf logs progress (nil: silent).
	Logf func(format string, args ...any)
}

// RejectedError is the head's refusal of this node (a setting differs, or
// its ranks do not fit the head's layout).
type RejectedError struct{ Msg string }

func (e *RejectedError) Error() string { return "the head rejected this node: " + e.Msg }

// RunHeadless runs a headless node: it joins its DP ranks at the head and
// starts one process per device rank (RunRank), whose TP leaders report
// ready, heartbeat and serve the head's requests themselves. It runs until
// the head shuts the group down (nil), the group fails, a rank process
// fails or the head is unreachable for HeadTimeout (an error naming why),
// or ctx ends (nil); its rank processes are stopped before it returns. The
// caller exits non-zero on an error.
func RunHeadless(ctx context.Context, cfg HeadlessConfig) error {
	if cfg.Local < 1 {
		return errors.New("dp: --data-parallel-size-local must be > 0 in headless mode")
	}
	if cfg.HeadAddress == "" {
		return errors.New("dp: --headless needs --data-parallel-address (the head node's IP)")
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.HeadTimeout <= 0 {
		cfg.HeadTimeout = DefaultHeadTimeout
	}
	logf := func(format string, args ...any) {
		if cfg.Logf != nil {
			cfg.Logf(format, args...)
		}
	}
	base := "http://" + net.JoinHostPort(cfg.HeadAddress, strconv.Itoa(cfg.RPCPort))
	if cfg.Host == "" {
		cfg.Host = routeTo(cfg.HeadAddress, cfg.RPCPort)
	}
	if cfg.Node == "" {
		cfg.Node = cfg.Host
	}
	if cfg.Spec.ListenHost == "" {
		cfg.Spec.ListenHost = cfg.Host
	}
	client := &http.Client{Timeout: 5 * time.Second}

	// Join every local DP rank; retry with backoff while the head is not
	// reachable, give up at once when it refuses.
	var join JoinResponse
	deadline := time.Now().Add(cfg.ConnectTimeout)
	for i := 0; i < cfg.Local; i++ {
		req := JoinRequest{DPRank: cfg.Start + i, Node: cfg.Node, Host: cfg.Host, Settings: cfg.Settings}
		backoff := 200 * time.Millisecond
		for {
			err := post(ctx, client, base+PathJoin, req, &join)
			if err == nil {
				break
			}
			var rej *RejectedError
			if errors.As(err, &rej) {
				return err
			}
			if ctx.Err() != nil {
				return nil
			}
			left := time.Until(deadline)
			if left <= 0 {
				return fmt.Errorf("could not reach the head's DP coordinator at %s for %s (last error: %v): check --data-parallel-address %s and --data-parallel-rpc-port %d against the head node's, and that the head is running",
					base, cfg.ConnectTimeout, err, cfg.HeadAddress, cfg.RPCPort)
			}
			wait := min(backoff, left)
			logf("Head node not reachable at %s yet (%v); retrying in %s", base, err, wait.Round(time.Millisecond))
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return nil
			}
			backoff = min(2*backoff, 2*time.Second)
		}
	}
	logf("Joined the head at %s: DP %d × TP %d (expert parallel %v); starting DP ranks %d..%d", base, join.DP, join.TP, join.EP, cfg.Start, cfg.Start+cfg.Local-1)
	ri, err := hccl.ParseRootInfo(join.WorldRootInfo)
	if err != nil {
		return fmt.Errorf("dp: the head's world root info: %w", err)
	}
	if cfg.Spec.Comm.InitTimeout <= 0 {
		cfg.Spec.Comm.InitTimeout = DefaultStartTimeout
	}

	// The node's own heartbeats carry no ranks (each DP rank's leader
	// process reports its load): they tell the node when the head shuts
	// the group down, fails it or is gone.
	hb := &heartbeater{cfg: cfg, client: client, url: base + PathHeartbeat, beat: time.Duration(join.HeartbeatMS) * time.Millisecond,
		ranks: make(chan []*dpRank, 1), nodeOnly: true}
	if hb.beat <= 0 {
		hb.beat = DefaultHeartbeatInterval
	}
	hbCtx, stopHB := context.WithCancel(ctx)
	defer stopHB()
	hbDone := make(chan error, 1)
	go func() { hbDone <- hb.run(hbCtx) }()

	procs, err := spawnRanks(cfg.Spec.Topology, cfg.Start, cfg.Local, RankRole{WorldRootInfo: ri.String(), Coordinator: base,
		Node: cfg.Node, Host: cfg.Host, HeartbeatMS: int(hb.beat / time.Millisecond)})
	if err != nil {
		return err
	}
	logf("Started %d rank processes for DP ranks %d..%d (TP %d each)", cfg.Local*cfg.Spec.Topology.TP, cfg.Start, cfg.Start+cfg.Local-1, cfg.Spec.Topology.TP)
	select {
	case err := <-hbDone:
		procs.stop(3 * time.Second)
		return err
	case e := <-procs.exited:
		if e.err == nil && e.report == nil {
			// A rank that ends cleanly heard the group shut down.
			procs.stop(3 * time.Second)
			logf("DP rank %d TP rank %d stopped: the group shut down", e.dp, e.tp)
			return nil
		}
		procs.stop(0)
		return fmt.Errorf("DP rank %d stopped: %w", e.dp, e.describe())
	case <-ctx.Done():
		hb.leave("its headless node is shutting down (the node's process was signalled to stop)")
		procs.stop(3 * time.Second)
		return nil
	}
}

// serveGenerate runs one request on eng and streams its outputs; a
// client that goes away aborts it. An output that ends the request
// because the engine failed carries the failure and the DP rank blame
// names, so that the head fails the group before it answers.
func serveGenerate(w http.ResponseWriter, r *http.Request, eng *core.Engine, blame func(error) int) {
	var req core.Request
	if err := decodeBody(r, 256<<20, &req); err != nil {
		http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
		return
	}
	ch, err := eng.Add(&req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/x-gob")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	enc := gob.NewEncoder(w)
	for {
		select {
		case o, ok := <-ch:
			if !ok {
				return
			}
			wo := toWire(o)
			if o.Finished && o.FinishReason == "error" {
				if err := eng.Err(); err != nil {
					wo.RankFailed, wo.Blame = true, blame(err)
					wo.Err = err.Error()
				}
			}
			if err := enc.Encode(wo); err != nil {
				eng.Abort(req.ID)
				for range ch {
				}
				return
			}
			if fl != nil {
				fl.Flush()
			}
			if o.Finished {
				return
			}
		case <-r.Context().Done():
			eng.Abort(req.ID)
			for range ch {
			}
			return
		}
	}
}

// heartbeater reports the node's load to the head every beat and ends
// when the head is unreachable for HeadTimeout or says the group is over.
type heartbeater struct {
	cfg    HeadlessConfig
	client *http.Client
	url    string
	beat   time.Duration
	ranks  chan []*dpRank
	// nodeOnly: report no ranks (a node's main process, whose ranks'
	// leaders heartbeat themselves).
	nodeOnly bool
}

func (hb *heartbeater) setRanks(rs []*dpRank) {
	hb.ranks <- rs
}

func (hb *heartbeater) run(ctx context.Context) error {
	var ranks []*dpRank
	last := time.Now()
	t := time.NewTicker(hb.beat)
	defer t.Stop()
	var lastErr error
	for {
		select {
		case <-ctx.Done():
			return nil
		case rs := <-hb.ranks:
			ranks = rs
			continue
		case <-t.C:
		}
		req := HeartbeatRequest{Node: hb.cfg.Node}
		for _, d := range ranks {
			s := d.engine().Stats()
			req.Ranks = append(req.Ranks, RankLoad{DPRank: d.dp, Waiting: s.Waiting, Running: s.Running, Stats: &s})
		}
		if ranks == nil && !hb.nodeOnly {
			for i := 0; i < hb.cfg.Local; i++ {
				req.Ranks = append(req.Ranks, RankLoad{DPRank: hb.cfg.Start + i})
			}
		}
		c, cancel := context.WithTimeout(ctx, hb.beat)
		var resp HeartbeatResponse
		err := post(c, hb.client, hb.url, req, &resp)
		cancel()
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return nil
			}
			lastErr = err
			if time.Since(last) > hb.cfg.HeadTimeout {
				return fmt.Errorf("the head node %s has not answered heartbeats for %s (last error: %v): exiting", hb.cfg.HeadAddress, time.Since(last).Round(100*time.Millisecond), lastErr)
			}
		case resp.State == "failed":
			return fmt.Errorf("the head reports the data-parallel group failed: %s", resp.Reason)
		case resp.State == "shutdown":
			return nil
		default:
			last = time.Now()
		}
	}
}

// leave tells the head, before the node's ranks stop, that this node's DP
// ranks are leaving the group and why (best effort, bounded: a head that
// does not answer within one second learns it from the heartbeats).
func (hb *heartbeater) leave(reason string) {
	req := HeartbeatRequest{Node: hb.cfg.Node, Leaving: reason}
	for i := 0; i < hb.cfg.Local; i++ {
		req.Ranks = append(req.Ranks, RankLoad{DPRank: hb.cfg.Start + i})
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	post(ctx, hb.client, hb.url, req, nil)
}

// post sends v as JSON and decodes a 200 answer into out; a 4xx answer is
// a *RejectedError.
func post(ctx context.Context, c *http.Client, url string, v, out any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		var e ErrorResponse
		if json.Unmarshal(body, &e) != nil || e.Error == "" {
			e.Error = fmt.Sprintf("%s: %s", resp.Status, bytes.TrimSpace(body))
		}
		if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
			return &RejectedError{Msg: fmt.Sprintf("%s answered %s: it is not npuserve's DP coordinator (is --data-parallel-rpc-port another server's port, e.g. the head's API --port?)", url, resp.Status)}
		}
		if resp.StatusCode >= 400 && resp.StatusCode < 500 {
			return &RejectedError{Msg: e.Error}
		}
		return errors.New(e.Error)
	}
	if out != nil {
		return json.Unmarshal(body, out)
	}
	return nil
}

// routeTo is this host's address on the route to host:port (127.0.0.1
// when it cannot be found).
func routeTo(host string, port int) string {
	c, err := net.Dial("udp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return "127.0.0.1"
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String()
}
