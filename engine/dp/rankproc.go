package dp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/npuserve/npuserve/engine/worker"
	"github.com/npuserve/npuserve/hccl"
)

// RankEnv is the environment variable that makes an npuserve process one
// device rank of a node: the node's main process (head or headless)
// re-executes itself with its own arguments and RankEnv set to the
// JSON of a RankRole, one child per local device rank.
const RankEnv = "NPUSERVE_RANK"

// RankRole is what a rank process needs beyond the node's flags.
type RankRole struct {
	// DPRank and TPRank place the rank; its world rank is
	// DPRank×TP+TPRank.
	DPRank int `json:"dp_rank"`
	TPRank int `json:"tp_rank"`
	// WorldRootInfo is the hccl root info of the world communicator.
	WorldRootInfo string `json:"world_root_info"`
	// Coordinator is the base URL of the head's control plane: a TP
	// leader reports ready and heartbeats there.
	Coordinator string `json:"coordinator"`
	// Node names the node in messages; Host is the address the leader's
	// request server binds.
	Node string `json:"node"`
	Host string `json:"host"`
	// HeartbeatMS is the heartbeat interval the head expects.
	HeartbeatMS int `json:"heartbeat_ms"`
	// LocalRank is the rank's index among this node's ranks: the
	// accelerator it drives.
	LocalRank int `json:"local_rank"`
	// ReportFD, when > 0, is a pipe to the node's main process: a rank
	// that fails writes a RankReport there before it exits.
	ReportFD int `json:"report_fd,omitempty"`
}

// RankReport is a failed rank process's last word to its node's main
// process: the DP rank its failure points at (see blame) and why.
type RankReport struct {
	Blame int    `json:"blame"`
	Error string `json:"error"`
}

// RoleFromEnv reads RankEnv; ok is false when it is unset (the process is
// a node's main process).
func RoleFromEnv() (role RankRole, ok bool, err error) {
	v := os.Getenv(RankEnv)
	if v == "" {
		return role, false, nil
	}
	if err := json.Unmarshal([]byte(v), &role); err != nil {
		return role, true, fmt.Errorf("dp: %s: %w", RankEnv, err)
	}
	return role, true, nil
}

// RunRank runs one device rank in this process until the group shuts
// down (nil), the rank fails or the head is gone (an error), or ctx ends
// (nil). A TP leader serves its DP rank's requests from the head on an
// ephemeral port of role.Host (POST PathGenerate), reports ready to the
// coordinator and heartbeats its load; a follower follows its leader.
func RunRank(ctx context.Context, spec RankSpec, settings Settings, role RankRole, logf func(string, ...any)) error {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	topo := spec.Topology
	report := func(err error) error {
		if role.ReportFD > 0 {
			f := os.NewFile(uintptr(role.ReportFD), "rank-report")
			json.NewEncoder(f).Encode(RankReport{Blame: blame(role.DPRank, topo.TP, err), Error: err.Error()})
			f.Close()
		}
		return err
	}
	ri, err := hccl.ParseRootInfo(role.WorldRootInfo)
	if err != nil {
		return report(fmt.Errorf("dp: the world root info: %w", err))
	}
	if spec.Comm.InitTimeout <= 0 {
		spec.Comm.InitTimeout = DefaultStartTimeout
	}
	if spec.ListenHost == "" {
		spec.ListenHost = role.Host
	}
	type started struct {
		r   *worker.Rank
		g   *worker.Groups
		err error
	}
	startCh := make(chan started, 1)
	go func() {
		r, g, err := startRank(spec, ri, role.DPRank, role.TPRank, role.LocalRank)
		startCh <- started{r, g, err}
	}()
	var s started
	select {
	case s = <-startCh:
		if s.err != nil {
			return report(s.err)
		}
	case <-ctx.Done():
		return nil
	}
	d := &dpRank{dp: role.DPRank, ranks: []*worker.Rank{s.r}, groups: []*worker.Groups{s.g}}
	stop := func(reason error) {
		done := make(chan struct{})
		go func() { d.close(); close(done) }()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			d.abort(reason)
		}
	}
	finish := func() error {
		if err := s.r.Wait(); err != nil {
			stop(err)
			return report(fmt.Errorf("DP rank %d TP rank %d stopped: %w", role.DPRank, role.TPRank, err))
		}
		stop(errors.New("dp: the group shut down"))
		return nil
	}
	if role.TPRank != 0 {
		select {
		case <-s.r.Done():
			return finish()
		case <-ctx.Done():
			stop(errors.New("dp: rank process interrupted"))
			return nil
		}
	}

	// The TP leader: the request server, ready, heartbeats.
	ln, err := net.Listen("tcp", net.JoinHostPort(role.Host, "0"))
	if err != nil {
		stop(err)
		return report(fmt.Errorf("dp: request server on %s: %w", role.Host, err))
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathGenerate, func(w http.ResponseWriter, r *http.Request) {
		if q := r.URL.Query().Get("dp_rank"); q != strconv.Itoa(role.DPRank) {
			http.Error(w, fmt.Sprintf("node %s: this process serves DP rank %d, not %q", role.Node, role.DPRank, q), http.StatusNotFound)
			return
		}
		serveGenerate(w, r, d.engine(), func(err error) int { return blame(role.DPRank, topo.TP, err) })
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	client := &http.Client{Timeout: 5 * time.Second}
	st := d.engine().Stats()
	req := ReadyRequest{DPRank: role.DPRank, NumBlocks: st.NumBlocks, SettingsHash: settings.Hash(),
		Endpoint: "http://" + ln.Addr().String(), Stats: &st}
	if err := post(ctx, client, role.Coordinator+PathReady, req, nil); err != nil {
		stop(err)
		if ctx.Err() != nil {
			return nil
		}
		return report(fmt.Errorf("dp: reporting DP rank %d ready: %w", role.DPRank, err))
	}
	logf("DP rank %d ready; serving requests from the head on %s (pid %d)", role.DPRank, ln.Addr(), os.Getpid())
	hb := &heartbeater{cfg: HeadlessConfig{Node: role.Node, HeadAddress: role.Coordinator, Start: role.DPRank, Local: 1, HeadTimeout: DefaultHeadTimeout},
		client: client, url: role.Coordinator + PathHeartbeat, beat: time.Duration(role.HeartbeatMS) * time.Millisecond, ranks: make(chan []*dpRank, 1)}
	if hb.beat <= 0 {
		hb.beat = DefaultHeartbeatInterval
	}
	hb.setRanks([]*dpRank{d})
	hbCtx, stopHB := context.WithCancel(ctx)
	defer stopHB()
	hbDone := make(chan error, 1)
	go func() { hbDone <- hb.run(hbCtx) }()
	select {
	case err := <-hbDone:
		if ctx.Err() != nil {
			stop(errors.New("dp: rank process interrupted"))
			return nil
		}
		stop(errors.New("dp: leaving the group"))
		return err
	case <-s.r.Done():
		// The engine failed its requests: let their streams deliver that
		// (with the rank it blames) before the process exits, or the head
		// sees only broken streams.
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		srv.Shutdown(sctx)
		cancel()
		return finish()
	case <-ctx.Done():
		stop(errors.New("dp: rank process interrupted"))
		return nil
	}
}

// rankExit is a rank process that ended.
type rankExit struct {
	dp, tp, pid int
	err         error       // from Wait (nil: exit status 0)
	report      *RankReport // the rank's own account, if it wrote one
}

// rankProcs are the rank processes a node's main process started.
type rankProcs struct {
	mu     sync.Mutex
	cmds   map[[2]int]*exec.Cmd
	exited chan rankExit
	wg     sync.WaitGroup
}

// spawnRanks starts one rank process per device rank of DP ranks
// [start, start+local): this executable with this process's arguments and
// RankEnv set from base (DPRank, TPRank and ReportFD filled in). The
// children die with this process (Pdeathsig) and get its stderr as their
// stdout and stderr.
func spawnRanks(topo worker.Topology, start, local int, base RankRole) (*rankProcs, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("dp: finding this executable to start the rank processes: %w", err)
	}
	p := &rankProcs{cmds: map[[2]int]*exec.Cmd{}, exited: make(chan rankExit, local*topo.TP)}
	for d := start; d < start+local; d++ {
		for t := 0; t < topo.TP; t++ {
			role := base
			role.DPRank, role.TPRank, role.ReportFD = d, t, 3
			role.LocalRank = (d-start)*topo.TP + t
			b, _ := json.Marshal(role)
			rd, wr, err := os.Pipe()
			if err != nil {
				p.stop(0)
				return nil, err
			}
			cmd := exec.Command(exe, os.Args[1:]...)
			cmd.Env = append(os.Environ(), RankEnv+"="+string(b))
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			cmd.ExtraFiles = []*os.File{wr}
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			err = cmd.Start()
			wr.Close()
			if err != nil {
				rd.Close()
				p.stop(0)
				return nil, fmt.Errorf("dp: starting the process of DP rank %d TP rank %d: %w", d, t, err)
			}
			p.mu.Lock()
			p.cmds[[2]int{d, t}] = cmd
			p.mu.Unlock()
			p.wg.Add(1)
			go func(d, t int, cmd *exec.Cmd, rd *os.File) {
				defer p.wg.Done()
				var rep RankReport
				dec := json.NewDecoder(rd)
				got := dec.Decode(&rep) == nil
				rd.Close()
				e := rankExit{dp: d, tp: t, pid: cmd.Process.Pid, err: cmd.Wait()}
				if got {
					e.report = &rep
				}
				p.exited <- e
			}(d, t, cmd, rd)
		}
	}
	return p, nil
}

// pids lists the process ids of DP rank d's TP ranks (0 for none).
func (p *rankProcs) pids(d, tp int) []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]int, tp)
	for t := range out {
		if c := p.cmds[[2]int{d, t}]; c != nil {
			out[t] = c.Process.Pid
		}
	}
	return out
}

// stop ends every rank process: SIGTERM, then SIGKILL after grace; it
// returns when all have been reaped.
func (p *rankProcs) stop(grace time.Duration) {
	p.mu.Lock()
	cmds := make([]*exec.Cmd, 0, len(p.cmds))
	for _, c := range p.cmds {
		cmds = append(cmds, c)
	}
	p.mu.Unlock()
	done := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(done)
	}()
	if grace > 0 {
		for _, c := range cmds {
			c.Process.Signal(syscall.SIGTERM)
		}
		select {
		case <-done:
			return
		case <-time.After(grace):
		}
	}
	for _, c := range cmds {
		c.Process.Kill()
	}
	<-done
}

// describe says why a rank process ended, for the 503 and the logs.
func (e rankExit) describe() error {
	how := "exited"
	if e.err != nil {
		how = "exited: " + e.err.Error()
	}
	if e.report != nil {
		return fmt.Errorf("the process of TP rank %d (pid %d) %s: %s", e.tp, e.pid, how, e.report.Error)
	}
	return fmt.Errorf("the process of TP rank %d (pid %d) %s", e.tp, e.pid, how)
}

// blamed is the DP rank a rank process's end points at.
func (e rankExit) blamed() int {
	if e.report != nil && (e.report.Blame >= 0 || e.report.Blame == blameUnknown) {
		return e.report.Blame
	}
	return e.dp
}
