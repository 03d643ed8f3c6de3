package dp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/npuserve/npuserve/npu/nputest"
)

// rankChildren lists the live rank processes whose parent is pid, by
// (DP rank, TP rank), from /proc (their RankEnv says which rank).
func rankChildren(t *testing.T, pid int) map[[2]int]int {
	t.Helper()
	out := map[[2]int]int{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		stat, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 2 || f[0] == "Z" || f[1] != strconv.Itoa(pid) {
			continue
		}
		env, err := os.ReadFile(filepath.Join(d, "environ"))
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if v, ok := bytes.CutPrefix(kv, []byte(RankEnv+"=")); ok {
				var role RankRole
				if err := json.Unmarshal(v, &role); err != nil {
					t.Fatalf("%s: %s: %v", d, RankEnv, err)
				}
				child, _ := strconv.Atoi(filepath.Base(d))
				out[[2]int{role.DPRank, role.TPRank}] = child
			}
		}
	}
	return out
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

// waitGone waits until none of pids is alive.
func waitGone(t *testing.T, pids map[[2]int]int, limit time.Duration) {
	t.Helper()
	end := time.Now().Add(limit)
	for {
		var left []string
		for r, p := range pids {
			if alive(p) {
				left = append(left, fmt.Sprintf("DP %d TP %d (pid %d)", r[0], r[1], p))
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(end) {
			for _, p := range pids {
				syscall.Kill(p, syscall.SIGKILL)
			}
			t.Fatalf("rank processes still running %s later: %s", limit, strings.Join(left, ", "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startLocalDP2TP2 starts a one-node DP2×TP2 deployment and waits until
// it serves.
func startLocalDP2TP2(t *testing.T) (*proc, string) {
	t.Helper()
	port := freePorts(t, "127.0.0.1", 1)[0]
	p := startServe(t, "head", []string{"serve", tinyDir, "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", fmt.Sprint(port),
		"--data-parallel-size", "2", "--tensor-parallel-size", "2", "--max-model-len", "256", "--max-num-seqs", "8", "--device", nputest.Device(), "--threads", "1"})
	p.waitLog("Starting npuserve API server", 60*time.Second)
	return p, fmt.Sprintf("http://127.0.0.1:%d", port)
}

// TestRankProcesses: a DP2×TP2 node runs one process per device rank;
// killing one fails the group with 503 naming its DP rank within 10 s, and
// no rank process outlives the node's main process.
func TestRankProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process")
	}
	t.Run("kill a rank process", func(t *testing.T) {
		head, base := startLocalDP2TP2(t)
		kids := rankChildren(t, head.cmd.Process.Pid)
		if len(kids) != 4 {
			t.Fatalf("rank processes of the node: %v, want 4 (DP 0..1 × TP 0..1)", kids)
		}
		for d := 0; d < 2; d++ {
			for tp := 0; tp < 2; tp++ {
				if kids[[2]int{d, tp}] == 0 {
					t.Fatalf("no process for DP rank %d TP rank %d: %v", d, tp, kids)
				}
			}
		}
		if c, err := complete(context.Background(), base, "hello", 4); err != nil || c.status != 200 {
			t.Fatalf("before the kill: %+v %v", c, err)
		}
		syscall.Kill(kids[[2]int{1, 1}], syscall.SIGKILL)
		killed := time.Now()
		var last completion
		for time.Since(killed) < 10*time.Second {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			last, _ = complete(ctx, base, "after", 4)
			cancel()
			if last.status == 503 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if want := "DP rank 1 (node 127.0.0.1, the head) is gone"; last.status != 503 || !strings.Contains(last.body, want) {
			t.Fatalf("after killing DP rank 1 TP rank 1: status %d %s, want 503 naming %q", last.status, last.body, want)
		}
		t.Logf("503 after %s: %s", time.Since(killed).Round(time.Millisecond), last.body)
		// SIGTERM: the node stops every rank process and exits.
		head.cmd.Process.Signal(syscall.SIGTERM)
		head.waitExit(20 * time.Second)
		waitGone(t, kids, 5*time.Second)
	})
	t.Run("kill -9 the node", func(t *testing.T) {
		head, _ := startLocalDP2TP2(t)
		kids := rankChildren(t, head.cmd.Process.Pid)
		if len(kids) != 4 {
			t.Fatalf("rank processes of the node: %v, want 4", kids)
		}
		syscall.Kill(head.cmd.Process.Pid, syscall.SIGKILL)
		waitGone(t, kids, 5*time.Second)
	})
}
