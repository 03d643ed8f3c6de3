package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/npuserve/npuserve/engine/dp"
	"github.com/npuserve/npuserve/npu/nputest"
)

// The multi-rank serving tests on --device ascend: real rank processes
// whose TP, DP and EP communicators are hccl/ascend's binding over the
// stand-in CANN's libhccl (npu/ascend/testdata/standin/hccl.c, a test
// double: ranks are processes meeting at a hub on 127.0.0.1), with the
// root infos exchanged over npuserve's own world communicator. Run with
//
//	tools/ascend/build-standin.sh /tmp/standin
//	ASCEND_HOME_PATH=/tmp/standin NPUSERVE_TEST_DEVICE=ascend go test -run 'TestServeAscend' ./cmd/npuserve/

// requireStandinHCCL skips unless the tests run on --device ascend over a
// built stand-in CANN with its libhccl (these tests set STANDIN_DEVICES
// and kill rank processes: not for a real CANN).
func requireStandinHCCL(t *testing.T) {
	t.Helper()
	if nputest.Device() != "ascend" {
		t.Skipf("multi-rank ascend serving runs with %s=ascend (now %q)", nputest.EnvDevice, nputest.Device())
	}
	home := os.Getenv("ASCEND_HOME_PATH")
	if home == "" {
		t.Skip("ASCEND_HOME_PATH is unset: build the stand-in CANN (tools/ascend/build-standin.sh DIR; needs a C compiler) and point it there")
	}
	lib, err := os.ReadFile(filepath.Join(home, "lib64", "libhccl.so"))
	if err != nil {
		t.Skipf("no stand-in libhccl at ASCEND_HOME_PATH=%s (rebuild it with tools/ascend/build-standin.sh): %v", home, err)
	}
	if !bytes.Contains(lib, []byte("stand-in hccl")) {
		t.Skipf("ASCEND_HOME_PATH=%s is not the stand-in CANN: these tests kill rank processes and set STANDIN_DEVICES", home)
	}
}

// hcclLog makes the stand-in libhccl record the timeouts each init sees
// (STANDIN_HCCL_LOG) and returns a function reading the records.
func hcclLog(t *testing.T) func() string {
	path := filepath.Join(t.TempDir(), "hccl-init.log")
	t.Setenv("STANDIN_HCCL_LOG", path)
	return func() string {
		b, _ := os.ReadFile(path)
		return string(b)
	}
}

// checkHCCLTimeouts: HCCL's timeouts were set from npuserve's (60 s
// operation timeout by default, not HCCL's 1836 s; the connect timeout
// from the 600 s start-up timeout), logged, and seen by every
// HcclGetRootInfo (groups) and communicator init (comms) of the stand-in
// libhccl.
func checkHCCLTimeouts(t *testing.T, serveLog, calls string, groups, comms int) {
	t.Helper()
	for _, want := range []string{"hccl: HCCL timeouts follow npuserve's", "HCCL_CONNECT_TIMEOUT=600 (init timeout 10m0s)", "HCCL_EXEC_TIMEOUT=60 (operation timeout 1m0s)"} {
		if !strings.Contains(serveLog, want) {
			t.Errorf("the rank processes did not log %q:\n%s", want, tail(serveLog, 3000))
		}
	}
	var roots, inits int
	for _, l := range strings.Split(strings.TrimSpace(calls), "\n") {
		if strings.Contains(l, " failed (HcclResult ") {
			t.Errorf("a communicator failed: %s", l)
			continue
		}
		if !strings.Contains(l, "HCCL_CONNECT_TIMEOUT=600 HCCL_EXEC_TIMEOUT=60") {
			t.Errorf("HCCL saw %q, want HCCL_CONNECT_TIMEOUT=600 HCCL_EXEC_TIMEOUT=60 (npuserve's)", l)
		}
		switch {
		case strings.HasPrefix(l, "root "):
			roots++
		case strings.HasPrefix(l, "rank "):
			inits++
			if !strings.HasSuffix(l, " exec_timeout=60") {
				t.Errorf("an init used %q, want exec_timeout=60 (hcclExecTimeOut, npuserve's operation timeout)", l)
			}
		}
	}
	if roots != groups || inits != comms {
		t.Errorf("%d HcclGetRootInfo and %d communicator inits, want %d and %d:\n%s", roots, inits, groups, comms, calls)
	}
}

// singleRankGreedy is generate's greedy continuation of each prompt on one
// CPU rank: the reference the parallel layouts must reproduce.
func singleRankGreedy(t *testing.T, prompts [][]int32, n int) [][]int32 {
	t.Helper()
	var out [][]int32
	for _, p := range prompts {
		stdout, stderr, code := run(t, "generate", "--model", filepath.Join(fixtures, "tiny"), "--device", "cpu", "--prompt-ids", idsArg(p),
			"--max-tokens", strconv.Itoa(n), "--ignore-eos", "--json")
		var gen generateResult
		if code != 0 || json.Unmarshal([]byte(stdout), &gen) != nil || len(gen.TokenIDs) != n {
			t.Fatalf("generate: exit %d, %q, %s", code, stdout, stderr)
		}
		out = append(out, gen.TokenIDs)
	}
	return out
}

var ascendPrompts = [][]int32{{1, 2, 3, 4, 5}, {7, 8, 9}}

// TestServeAscendParallel: TP2, DP2 with expert parallelism and DP2×TP2
// with expert parallelism serve the single rank's greedy tokens on
// --device ascend, every group communicator an HCCL one.
func TestServeAscendParallel(t *testing.T) {
	requireStandinHCCL(t)
	want := singleRankGreedy(t, ascendPrompts, 8)
	for _, tc := range []struct {
		name    string
		args    []string
		devices int
		groups  int // HCCL groups (root infos): TP groups + DP + EP
		comms   int // their communicators (one per member)
	}{
		{"TP2", []string{"--tensor-parallel-size", "2"}, 2, 1, 2},
		{"DP2 EP", []string{"--data-parallel-size", "2", "--enable-expert-parallel"}, 2, 2, 4},
		{"DP2 TP2 EP", []string{"--data-parallel-size", "2", "--tensor-parallel-size", "2", "--enable-expert-parallel"}, 4, 2 + 1 + 1, 4 + 2 + 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inits := hcclLog(t)
			t.Setenv("STANDIN_DEVICES", strconv.Itoa(tc.devices))
			s := startServe(t, append(tc.args, "--max-num-seqs", "4", "--max-model-len", "256")...)
			defer s.stop()
			for i, p := range ascendPrompts {
				if got := completionIDs(t, s, p, 8); !equalIDs(got, want[i]) {
					t.Errorf("prompt %d: served %v, single rank %v", i, got, want[i])
				}
			}
			checkHCCLTimeouts(t, s.log.String(), inits(), tc.groups, tc.comms)
		})
	}
}

// startHeadless starts a `npuserve serve --headless` node and returns its
// log; it is killed when the test ends.
func startHeadless(t *testing.T, args ...string) *syncBuffer {
	t.Helper()
	cmd := exec.Command(binPath, append([]string{"serve", filepath.Join(fixtures, "tiny")}, withTestDevice(args)...)...)
	log := &syncBuffer{}
	cmd.Stderr = log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
		}
	})
	return log
}

// TestServeAscendHeadless: a head with DP rank 0 and a --headless node
// with DP rank 1 (expert parallel across them) join over the DP RPC port,
// which also carries the HCCL root infos, and serve the single rank's
// greedy tokens.
func TestServeAscendHeadless(t *testing.T) {
	requireStandinHCCL(t)
	want := singleRankGreedy(t, ascendPrompts, 8)
	inits := hcclLog(t)
	rpc := freePort(t)
	common := []string{"--data-parallel-size", "2", "--data-parallel-size-local", "1", "--data-parallel-rpc-port", rpc,
		"--data-parallel-address", "127.0.0.1", "--enable-expert-parallel", "--max-num-seqs", "4", "--max-model-len", "256"}
	hl := startHeadless(t, append([]string{"--headless", "--data-parallel-start-rank", "1"}, common...)...)
	s := startServe(t, common...)
	defer s.stop()
	for i, p := range ascendPrompts {
		if got := completionIDs(t, s, p, 8); !equalIDs(got, want[i]) {
			t.Errorf("prompt %d: served %v, single rank %v", i, got, want[i])
		}
	}
	if !strings.Contains(hl.String(), "DP rank 1 ready") {
		t.Errorf("the headless node's log does not show DP rank 1 ready:\n%s", tail(hl.String(), 3000))
	}
	checkHCCLTimeouts(t, s.log.String()+hl.String(), inits(), 2, 4) // DP and EP groups, two ranks each
}

// hcclFailure returns the first line of the stand-in libhccl's log that
// contains every one of want ("" if none).
func hcclFailure(calls string, want ...string) string {
	for _, l := range strings.Split(calls, "\n") {
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(l, w)
		}
		if ok {
			return l
		}
	}
	return ""
}

// rankPIDs finds the rank processes of serve process pid by their role
// (dp.RankEnv in their environment): DP and TP rank to pid.
func rankPIDs(t *testing.T, pid int) map[[2]int]int {
	t.Helper()
	out := map[[2]int]int{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		stat, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])) // state ppid ...
		if len(f) < 2 || f[0] == "Z" || f[1] != strconv.Itoa(pid) {
			continue
		}
		env, err := os.ReadFile(filepath.Join(d, "environ"))
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if v, ok := bytes.CutPrefix(kv, []byte(dp.RankEnv+"=")); ok {
				var role dp.RankRole
				if err := json.Unmarshal(v, &role); err != nil {
					t.Fatalf("%s: %s: %v", d, dp.RankEnv, err)
				}
				child, _ := strconv.Atoi(filepath.Base(d))
				out[[2]int{role.DPRank, role.TPRank}] = child
			}
		}
	}
	return out
}

// TestServeAscendRankKilled: kill -9 one rank process of a TP2 group in
// the middle of a request; the other rank's HCCL collective fails at once
// (the stand-in libhccl sees the connection close; HCCL_EXEC_TIMEOUT is
// 60 s), and the server answers 503 naming the DP rank within seconds
// instead of hanging.
func TestServeAscendRankKilled(t *testing.T) {
	requireStandinHCCL(t)
	calls := hcclLog(t)
	s := startServe(t, "--tensor-parallel-size", "2", "--max-num-seqs", "4", "--max-model-len", "256")
	defer s.stop()
	kids := rankPIDs(t, s.cmd.Process.Pid)
	if len(kids) != 2 || kids[[2]int{0, 1}] == 0 {
		t.Fatalf("rank processes %v, want DP 0 × TP 0..1", kids)
	}
	// A long streamed request keeps the TP group in its collectives: kill
	// TP rank 1 once the first token has arrived.
	resp, err := http.Post(s.url+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":[1,2,3],"max_tokens":240,"temperature":0,"ignore_eos":true,"stream":true}`))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("streamed request: %v %v", resp, err)
	}
	defer resp.Body.Close()
	chunks := make(chan string, 512)
	go func() {
		defer close(chunks)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if l, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				chunks <- l
			}
		}
	}()
	select {
	case <-chunks:
	case <-time.After(30 * time.Second):
		t.Fatalf("no token streamed within 30 s:\n%s", tail(s.log.String(), 3000))
	}
	syscall.Kill(kids[[2]int{0, 1}], syscall.SIGKILL)
	killed := time.Now()
	var tokens int
	var failed bool
	for ended := false; !ended; {
		select {
		case l, ok := <-chunks:
			switch {
			case !ok || l == "[DONE]":
				ended = true
			case strings.Contains(l, `"error"`):
				failed = true
			default:
				tokens++
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("the stream in flight did not end within 15 s of the kill:\n%s", tail(s.log.String(), 3000))
		}
	}
	if !failed && tokens >= 239 {
		t.Errorf("the stream in flight when TP rank 1 died completed (%d more tokens, no error)", tokens)
	}
	t.Logf("the stream in flight ended %s after the kill (%d more tokens, error event %v)", time.Since(killed).Round(time.Millisecond), tokens, failed)
	var code int
	var body []byte
	for time.Since(killed) < 10*time.Second {
		code, body = httpPost(t, s.url+"/v1/completions", `{"prompt":[1,2],"max_tokens":2}`)
		if code == 503 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if want := "DP rank 0"; code != 503 || !strings.Contains(string(body), want) {
		t.Fatalf("after killing TP rank 1: status %d %s, want 503 naming %q", code, body, want)
	}
	t.Logf("503 after %s: %s", time.Since(killed).Round(time.Millisecond), body)
	// The surviving rank's HCCL communicator failed too, at once (the
	// head may have blamed the dead process first, seeing it exit).
	for {
		if l := hcclFailure(calls(), "rank 0/2 failed (HcclResult 21", "rank 1 of 2 is gone"); l != "" {
			t.Logf("the survivor's HCCL: %s", l)
			break
		}
		if time.Since(killed) > 5*time.Second {
			t.Fatalf("the surviving rank's HCCL communicator did not fail within 5 s of the kill:\n%s\n%s", calls(), tail(s.log.String(), 3000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestServeAscendImplied: a vllm-ascend launch line (an msmodelslim
// checkpoint, --quantization ascend, no --device) starts the Ascend
// backend where CANN loads (here the stand-in), without the cpu fallback
// warning, and serves the tokens `generate` makes on the cpu backend.
func TestServeAscendImplied(t *testing.T) {
	requireStandinHCCL(t)
	tiny := filepath.Join(fixtures, "tiny")
	dir := filepath.Join(t.TempDir(), "w8a8_dynamic")
	if _, stderr, code := run(t, "quantize", "--model", tiny, "--out", dir, "--scheme", "w8a8_dynamic"); code != 0 {
		t.Fatalf("quantize: exit %d: %s", code, stderr)
	}
	prompt := []int32{1, 2, 3, 4, 5}
	stdout, stderr, code := run(t, "generate", "--model", dir, "--device", "cpu", "--quantization", "ascend", "--prompt-ids", idsArg(prompt), "--max-tokens", "6", "--ignore-eos", "--json")
	var gen generateResult
	if code != 0 || json.Unmarshal([]byte(stdout), &gen) != nil || len(gen.TokenIDs) != 6 {
		t.Fatalf("generate: exit %d, %q, %s", code, stdout, stderr)
	}
	s := startServeDir(t, dir, "--quantization", "ascend", "--max-num-seqs", "4", "--max-model-len", "256", "--kv-cache-dtype", "float32")
	defer s.stop()
	got := completionIDs(t, s, prompt, 6)
	log := s.log.String()
	if !strings.Contains(log, "Device: the ascend backend (--quantization ascend (an Ascend weight format))") || strings.Contains(log, "which does not load here") {
		t.Fatalf("--quantization ascend did not start the Ascend backend over the stand-in:\n%s", tail(log, 3000))
	}
	if !equalIDs(got, gen.TokenIDs) {
		t.Errorf("served tokens on ascend %v, the cpu's %v", got, gen.TokenIDs)
	}
}
