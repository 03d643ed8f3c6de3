package dp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/npu/nputest"
)

func TestSettingsDiff(t *testing.T) {
	head := Settings{ModelConfigHash: "abcdef0123456789", TensorParallelSize: 8, DataParallelSize: 2, EnableExpertParallel: true,
		MaxModelLen: 16384, BlockSize: 128, MaxNumSeqs: 16, Dtype: "bfloat16", KVCacheDtype: "auto", LoadFormat: "auto", Device: "npu"}
	tests := []struct {
		name string
		edit func(*Settings)
		want string
	}{
		{"equal", func(*Settings) {}, ""},
		{"max-model-len", func(s *Settings) { s.MaxModelLen = 8192 }, "headless rank 1 (node 10.0.0.2): --max-model-len 8192 differs from the head's 16384"},
		{"tp", func(s *Settings) { s.TensorParallelSize = 4 }, "--tensor-parallel-size 4 differs from the head's 8"},
		{"ep", func(s *Settings) { s.EnableExpertParallel = false }, "--enable-expert-parallel false differs from the head's true"},
		{"quantization", func(s *Settings) { s.Quantization = "ascend" }, "--quantization ascend differs from the head's (none)"},
		{"model", func(s *Settings) { s.ModelConfigHash = "ffff" }, "--model (config.json sha256) ffff differs from the head's abcdef012345"},
		{"dtype", func(s *Settings) { s.Dtype = "float16" }, "--dtype float16 differs from the head's bfloat16"},
		{"speculative", func(s *Settings) { s.NumSpeculativeTokens = 3 }, "--speculative-config (num_speculative_tokens) 3 differs from the head's 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := head
			tc.edit(&s)
			got := s.Diff(head, 1, "10.0.0.2")
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("Diff = %q, want %q", got, tc.want)
			}
			if (got == "") != (s.Hash() == head.Hash()) {
				t.Fatalf("hash equality disagrees with Diff %q", got)
			}
		})
	}
}

// cluster is a head and a headless node on loopback, real `npuserve
// serve` processes: DP 2 with expert parallelism (lockstep), one DP rank
// each.
type cluster struct {
	head, headless *proc
	base           string
	rpc            int
}

// nodeFlags are the flags of one node of the test cluster.
func nodeFlags(port, rpc, maxLen int, headless bool) []string {
	return nodeFlagsEP(port, rpc, maxLen, headless, true)
}

// nodeFlagsEP is nodeFlags with expert parallelism on or off, on the test
// device ($NPUSERVE_TEST_DEVICE: with ascend over the stand-in CANN, the
// ranks' groups are HCCL communicators of its libhccl).
func nodeFlagsEP(port, rpc, maxLen int, headless, ep bool) []string {
	f := []string{"serve", tinyDir, "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", fmt.Sprint(port),
		"--data-parallel-size", "2", "--data-parallel-size-local", "1", "--data-parallel-address", "127.0.0.1",
		"--data-parallel-rpc-port", fmt.Sprint(rpc), "--max-model-len", fmt.Sprint(maxLen),
		"--max-num-seqs", "8", "--device", nputest.Device(), "--threads", "1"}
	if ep {
		f = append(f, "--enable-expert-parallel")
	}
	if headless {
		f = append(f, "--headless", "--data-parallel-start-rank", "1")
	}
	return f
}

// startServe starts `npuserve ARGS` with env added.
func startServe(t *testing.T, name string, args []string, env ...string) *proc {
	t.Helper()
	if len(args) > 0 && args[0] == "serve" && nputest.Device() != "cpu" && !slices.Contains(args, "--device") {
		args = append(args[:len(args):len(args)], "--device", nputest.Device()) // the test device ($NPUSERVE_TEST_DEVICE)
	}
	cmd := exec.Command(npuserveBinary(t), args...)
	cmd.Env = append(append(os.Environ(), "HCCL_IF_IP=127.0.0.1"), env...)
	return startCmd(t, name, cmd)
}

func startCluster(t *testing.T, headMaxLen, headlessMaxLen int) *cluster {
	t.Helper()
	return startClusterEP(t, headMaxLen, headlessMaxLen, true)
}

// startClusterEP is startCluster with expert parallelism on or off.
func startClusterEP(t *testing.T, headMaxLen, headlessMaxLen int, ep bool) *cluster {
	t.Helper()
	return startClusterEnv(t, headMaxLen, headlessMaxLen, ep)
}

// startClusterEnv is startClusterEP with env added to both nodes.
func startClusterEnv(t *testing.T, headMaxLen, headlessMaxLen int, ep bool, env ...string) *cluster {
	t.Helper()
	ports := freePorts(t, "127.0.0.1", 2)
	c := &cluster{base: fmt.Sprintf("http://127.0.0.1:%d", ports[0]), rpc: ports[1]}
	c.head = startServe(t, "head", nodeFlagsEP(ports[0], ports[1], headMaxLen, false, ep), env...)
	c.headless = startServe(t, "headless", nodeFlagsEP(ports[0], ports[1], headlessMaxLen, true, ep), append(env, "NPUSERVE_DP_CONNECT_TIMEOUT=10")...)
	return c
}

// status is the head's GET /v1/dp/status.
func (c *cluster) status(t *testing.T) GroupStatus {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", c.rpc, PathStatus))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var g GroupStatus
	if err := json.NewDecoder(resp.Body).Decode(&g); err != nil {
		t.Fatal(err)
	}
	return g
}

// golden are the tiny fixture's prompts and transformers' greedy tokens.
func golden(t *testing.T) (prompts, greedy [][]int32) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(tinyDir, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct{ Prompts, Greedy [][]int32 }
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	return g.Prompts, g.Greedy
}

// TestHeadAndHeadless serves requests through the head with DP ranks on
// two processes and checks both served and greedy results equal one rank.
func TestHeadAndHeadless(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process")
	}
	for _, ep := range []bool{true, false} {
		t.Run(fmt.Sprintf("expert parallel %v", ep), func(t *testing.T) { headAndHeadless(t, ep) })
	}
}

func headAndHeadless(t *testing.T, ep bool) {
	c := startClusterEP(t, 256, 256, ep)
	c.head.waitLog("Starting npuserve API server", 60*time.Second)
	prompts, greedy := golden(t)
	// One at a time, alternating over the two ranks: the greedy tokens
	// equal the fixture's (transformers') and so the single-rank ones.
	for i, p := range prompts {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		r, err := complete(ctx, c.base, p, len(greedy[i]))
		cancel()
		if err != nil || r.status != 200 || !slices.Equal(r.ids, greedy[i]) {
			t.Errorf("prompt %d: %v status %d tokens %v, want %v (%s)", i, err, r.status, r.ids, greedy[i], r.body)
		}
	}
	// Concurrently: every request succeeds.
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			r, err := complete(ctx, c.base, fmt.Sprintf("concurrent %d", i), 16)
			if err != nil || r.status != 200 {
				t.Errorf("concurrent request %d: %v %d %s", i, err, r.status, r.body)
			}
		}()
	}
	wg.Wait()
	g := c.status(t)
	if len(g.Ranks) != 2 || g.Ranks[0].Routed == 0 || g.Ranks[1].Routed == 0 || g.Ranks[1].Node != "127.0.0.1" || !g.Ranks[1].Ready {
		t.Errorf("DP status %+v: want both ranks ready and used", g)
	}
	// A clean head shutdown stops the headless node with status 0.
	c.head.cmd.Process.Signal(syscall.SIGTERM)
	if code := c.headless.waitExit(10 * time.Second); code != 0 {
		t.Errorf("headless exit code %d after the head's clean shutdown", code)
	}
}

// TestHeadAndHeadlessSpeculative: a head and a headless node (DP 2, expert
// parallelism in lockstep) serving with MTP speculative decoding (k = 3)
// give the trained fixture's greedy tokens, prompts alternating over the
// two DP ranks, each rank running dummy speculative steps while the other
// works.
func TestHeadAndHeadlessSpeculative(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process")
	}
	dir := filepath.Join(filepath.Dir(tinyDir), "trained-mtp")
	b, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		t.Skipf("fixture trained-mtp missing: %v", err)
	}
	var g struct{ Prompts, Greedy [][]int32 }
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, "127.0.0.1", 2)
	base := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	flags := func(headless bool) []string {
		f := nodeFlagsEP(ports[0], ports[1], 256, headless, true)
		f[1] = dir
		return append(f, "--speculative-config", `{"method": "deepseek_mtp", "num_speculative_tokens": 3}`)
	}
	head := startServe(t, "head", flags(false))
	startServe(t, "headless", flags(true), "NPUSERVE_DP_CONNECT_TIMEOUT=10")
	head.waitLog("Starting npuserve API server", 60*time.Second)
	for i, p := range g.Prompts {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		r, err := complete(ctx, base, p, len(g.Greedy[i]))
		cancel()
		if err != nil || r.status != 200 || !slices.Equal(r.ids, g.Greedy[i]) {
			t.Errorf("prompt %d: %v status %d tokens %v, want %v (%s)", i, err, r.status, r.ids, g.Greedy[i], r.body)
		}
	}
}

// load keeps n requests running against base until stop, recording the
// answers.
func load(base string, n int, stop <-chan struct{}) (wait func() []completion) {
	var mu sync.Mutex
	var out []completion
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				r, err := complete(ctx, base, fmt.Sprintf("request %d", i), 64)
				cancel()
				if err != nil {
					r = completion{status: -1, body: err.Error()}
				}
				mu.Lock()
				out = append(out, r)
				mu.Unlock()
				if r.status != 200 {
					return
				}
			}
		}()
	}
	return func() []completion { wg.Wait(); return out }
}

// TestRankFailures kills or freezes the headless node under load: the head
// answers 503 naming the rank within 10 s and never hangs.
func TestRankFailures(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process")
	}
	tests := []struct {
		name string
		sig  syscall.Signal
		env  []string
		want string
		tcp  bool // the TCP transport names the missing rank on a timeout; HCCL's heartbeats do
	}{
		{"kill -9 headless", syscall.SIGKILL, nil, "DP rank 1 (node 127.0.0.1) is gone", false},
		// A clean stop (docker stop, a Kubernetes pod deletion): the
		// node says it is leaving before its ranks' lockstep close ends
		// the head's ranks cleanly, which the head would otherwise blame
		// on its own DP rank 0.
		{"SIGTERM headless (clean stop)", syscall.SIGTERM, nil, "DP rank 1 (node 127.0.0.1) is gone: its headless node is shutting down", false},
		// A frozen node: collectives with it block until their timeout
		// (60 s by default); the missing heartbeats end them first.
		{"frozen headless (SIGSTOP)", syscall.SIGSTOP, nil, "DP rank 1 (node 127.0.0.1) is gone: no heartbeat", false},
		// With a 1 s collective timeout the head's collective with the
		// frozen rank times out first and names it; HCCL's (and NCCL's)
		// timeouts name no rank, so the head waits for the heartbeats to
		// tell which rank froze.
		{"collective timeout (HCCL_EXEC_TIMEOUT=1)", syscall.SIGSTOP, []string{"HCCL_EXEC_TIMEOUT=1"}, "timed out after", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if d := nputest.Device(); tc.tcp && !strings.HasPrefix(d, "cpu") {
				tc.want = "no heartbeat"
			}
			c := startClusterEnv(t, 256, 256, true, tc.env...)
			c.head.waitLog("Starting npuserve API server", 60*time.Second)
			stop := make(chan struct{})
			wait := load(c.base, 4, stop)
			time.Sleep(500 * time.Millisecond)
			// kill -9 hits the node's main process (its rank processes
			// die with it); a frozen node is every process of it (its
			// process group), since its rank processes run on their own.
			pid := c.headless.cmd.Process.Pid
			if tc.sig == syscall.SIGSTOP {
				pid = -pid
			}
			syscall.Kill(pid, tc.sig)
			killed := time.Now()
			time.AfterFunc(12*time.Second, func() { close(stop) })
			// New requests: 503 naming the rank within 10 s.
			var last completion
			for time.Since(killed) < 10*time.Second {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				last, _ = complete(ctx, c.base, "after", 4)
				cancel()
				if last.status == 503 {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if last.status != 503 || !strings.Contains(last.body, tc.want) || !strings.Contains(last.body, "DP rank 1 (node 127.0.0.1) is gone") {
				t.Fatalf("after %s: status %d %s, want 503 naming %q", time.Since(killed).Round(time.Millisecond), last.status, last.body, tc.want)
			}
			t.Logf("503 after %s: %s", time.Since(killed).Round(time.Millisecond), last.body)
			// In-flight requests ended (no hang) with 200 or 503.
			for _, r := range wait() {
				if r.status != 200 && r.status != 503 {
					t.Errorf("in-flight request: status %d %s", r.status, r.body)
				}
			}
			if resp, err := http.Get(c.base + "/health"); err != nil || resp.StatusCode != 503 {
				t.Errorf("/health after the rank died: %v %v", resp, err)
			}
		})
	}
}

// TestHeadGone: a headless node exits non-zero within 10 s of the head's
// death (its connections reset) or freeze (only the heartbeats tell).
func TestHeadGone(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process")
	}
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP} {
		t.Run(sig.String(), func(t *testing.T) {
			c := startCluster(t, 256, 256)
			c.head.waitLog("Starting npuserve API server", 60*time.Second)
			c.headless.waitLog("ready; serving requests", 10*time.Second)
			syscall.Kill(c.head.cmd.Process.Pid, sig)
			start := time.Now()
			if code := c.headless.waitExit(10 * time.Second); code == 0 {
				t.Fatalf("headless exited 0 after the head died:\n%s", c.headless.logText())
			}
			if log := c.headless.logText(); !strings.Contains(log, "headless node exiting: ") {
				t.Fatalf("no exit reason logged:\n%s", log)
			}
			t.Logf("headless exited after %s", time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestStartupRejections: a headless node that cannot join fails fast with a
// clear message.
func TestStartupRejections(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process")
	}
	tests := []struct {
		name   string
		maxLen int
		port   int // 0: the head's RPC port, 1: another HTTP server's, 2: a closed port
		want   string
		limit  time.Duration
	}{
		{"different max-model-len", 128, 0, "headless rank 1 (node 127.0.0.1): --max-model-len 128 differs from the head's 256", 10 * time.Second},
		{"wrong rpc port (closed)", 256, 2, "could not reach the head's DP coordinator at http://127.0.0.1:", 10 * time.Second},
		{"wrong rpc port (another server)", 256, 1, "it is not npuserve's DP coordinator", 10 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ports := freePorts(t, "127.0.0.1", 3)
			head := startServe(t, "head", nodeFlags(ports[0], ports[1], 256, false))
			rpc := ports[1]
			switch tc.port {
			case 1:
				other := httptest.NewServer(http.NotFoundHandler())
				defer other.Close()
				rpc = other.Listener.Addr().(*net.TCPAddr).Port
			case 2:
				rpc = ports[2]
			}
			n := startServe(t, "headless", nodeFlags(ports[0], rpc, tc.maxLen, true), "NPUSERVE_DP_CONNECT_TIMEOUT=3")
			if code := n.waitExit(tc.limit); code == 0 {
				t.Fatalf("headless exited 0")
			}
			if log := n.logText(); !strings.Contains(log, tc.want) {
				t.Fatalf("headless log lacks %q:\n%s", tc.want, log)
			}
			if tc.port == 0 {
				head.waitLog(tc.want, 5*time.Second)
			}
		})
	}
}

// TestBlame: a local rank's collective failure is blamed on the rank its
// communicator lost.
func TestBlame(t *testing.T) {
	lost := func(comm string, peer int, kind error) error {
		return fmt.Errorf("engine: step failed: %w", &hccl.OpError{Comm: comm, Rank: 0, Size: 8, Op: "AllToAllV", Peers: []int{peer}, Err: kind})
	}
	tests := []struct {
		name      string
		local, tp int
		err       error
		want      int
	}{
		{"ep peer lost", 0, 2, lost("ep", 5, hccl.ErrPeerLost), 2},
		{"world timeout", 0, 4, lost("world", 7, hccl.ErrTimeout), 1},
		{"dp peer aborted", 0, 2, lost("dp", 1, hccl.ErrPeerAborted), 1},
		{"tp peer is the same DP rank", 1, 2, lost("tp", 1, hccl.ErrPeerLost), 1},
		{"mismatch is the local rank's", 0, 1, lost("ep", 1, hccl.ErrMismatch), 0},
		{"not a collective", 3, 1, errors.New("out of memory"), 3},
		// HCCL's timeouts name no rank: the heartbeats decide.
		{"timeout naming no rank", 0, 2, fmt.Errorf("step: %w", &hccl.OpError{Comm: "ep", Size: 4, Op: "AllToAllV", Err: hccl.ErrTimeout}), blameUnknown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := blame(tc.local, tc.tp, tc.err); got != tc.want {
				t.Errorf("blame = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestPick: requests go to the DP rank with the lowest waiting×4+running
// (requests sent since the last heartbeat count as waiting); ties rotate.
func TestPick(t *testing.T) {
	type load struct{ waiting, running, pending int }
	tests := []struct {
		name  string
		loads []load
		next  int
		want  int
	}{
		{"idle ranks: rotating start", []load{{}, {}, {}}, 1, 1},
		{"fewer running", []load{{0, 3, 0}, {0, 1, 0}, {0, 2, 0}}, 0, 1},
		{"waiting weighs 4", []load{{1, 0, 0}, {0, 3, 0}}, 0, 1},
		{"waiting weighs 4, tie broken by start", []load{{1, 0, 0}, {0, 4, 0}}, 1, 1},
		{"pending counts as waiting", []load{{0, 0, 2}, {0, 5, 0}}, 0, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := &Head{next: tc.next}
			for i, l := range tc.loads {
				st := &rankState{dp: i, pending: l.pending}
				st.stats.Waiting, st.stats.Running = l.waiting, l.running
				h.ranks = append(h.ranks, st)
			}
			if got := h.pick(); got.dp != tc.want {
				t.Errorf("pick = DP rank %d, want %d", got.dp, tc.want)
			}
			if h.next != (tc.next+1)%len(tc.loads) {
				t.Errorf("next = %d, want it rotated", h.next)
			}
		})
	}
}
