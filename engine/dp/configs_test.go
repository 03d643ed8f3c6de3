package dp

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/npuserve/npuserve/engine/config"
)

var configsDir = filepath.Join("..", "..", "configs")

// TestSettingsExamples: the settings-file skeletons under
// configs/settings load as engine arguments. (The launch scripts' command
// lines are parsed by cmd/npuserve's TestLaunchScripts.)
func TestSettingsExamples(t *testing.T) {
	for _, f := range []string{"settings.json", "config.toml"} {
		t.Run(f, func(t *testing.T) {
			a, err := config.Build([]config.Assignment{{Flag: "--config", Value: filepath.Join(configsDir, "settings", f)}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if a.Model != "/models/GLM-5.3-Flash" || a.MaxModelLen != 1048576 || !a.EnableExpertParallel || a.Dtype != "bfloat16" {
				t.Errorf("%s: model %q max-model-len %d EP %v dtype %q", f, a.Model, a.MaxModelLen, a.EnableExpertParallel, a.Dtype)
			}
		})
	}
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// npuserveBinary builds cmd/npuserve once for the tests.
func npuserveBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "npuserve-dp-test")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "npuserve")
		out, err := exec.Command("go", "build", "-o", binPath, "../../cmd/npuserve").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// startScript starts a launch script (prefixed by wrap, e.g. ip netns
// exec) as its own process group, killed at cleanup.
func startScript(t *testing.T, name, script string, env []string, wrap ...string) *proc {
	t.Helper()
	argv := append(append([]string{}, wrap...), filepath.Join(configsDir, script))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), "NPUSERVE="+npuserveBinary(t)), env...)
	return startCmd(t, name, cmd)
}

// curlCompletion sends a greedy token-id completion with curl (run
// inside a network namespace through wrap).
func curlCompletion(t *testing.T, url string, prompt []int32, n int, wrap ...string) []int32 {
	t.Helper()
	p, _ := json.Marshal(prompt)
	body := fmt.Sprintf(`{"model":"glm","prompt":%s,"max_tokens":%d,"temperature":0,"ignore_eos":true,"return_token_ids":true}`, p, n)
	argv := append(append([]string{}, wrap...), "curl", "-sS", "--max-time", "30", "-H", "Content-Type: application/json", "-d", body, url+"/v1/completions")
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("curl: %v: %s", err, out)
	}
	var v struct {
		Choices []struct {
			TokenIDs []int32 `json:"token_ids"`
		} `json:"choices"`
	}
	if json.Unmarshal(out, &v) != nil || len(v.Choices) != 1 {
		t.Fatalf("completion: %s", out)
	}
	return v.Choices[0].TokenIDs
}

// serveThroughScripts starts the CPU A2 scripts (head and headless),
// checks greedy results through the head against the fixture, then stops
// the head and expects the headless node to follow.
func serveThroughScripts(t *testing.T, headEnv, nodeEnv []string, url string, headWrap, nodeWrap, clientWrap []string) {
	head := startScript(t, "node0", "cpu/a2-node0.sh", headEnv, headWrap...)
	node := startScript(t, "node1", "cpu/a2-node1.sh", nodeEnv, nodeWrap...)
	head.waitLog("Starting npuserve API server", 60*time.Second)
	prompts, greedy := golden(t)
	for i, p := range prompts {
		if got := curlCompletion(t, url, p, len(greedy[i]), clientWrap...); !slices.Equal(got, greedy[i]) {
			t.Errorf("prompt %d: tokens %v, want %v", i, got, greedy[i])
		}
	}
	head.cmd.Process.Signal(syscall.SIGTERM)
	if code := node.waitExit(10 * time.Second); code != 0 {
		t.Errorf("headless exit code %d after the head stopped", code)
	}
	if code := head.waitExit(10 * time.Second); code != 0 {
		t.Errorf("head exit code %d after SIGTERM", code)
	}
}

// TestCPUScriptsLoopback runs configs/cpu/a2-node{0,1}.sh on loopback.
func TestCPUScriptsLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process")
	}
	ports := freePorts(t, "127.0.0.1", 2)
	env := []string{fmt.Sprintf("PORT=%d", ports[0]), fmt.Sprintf("RPC_PORT=%d", ports[1])}
	serveThroughScripts(t, env, env, fmt.Sprintf("http://127.0.0.1:%d", ports[0]), nil, nil, nil)
}

// TestTwoNamespaces runs the CPU A2 scripts as two "nodes": network
// namespaces joined by a veth pair, each with its own 10.x address.
func TestTwoNamespaces(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process")
	}
	id := os.Getpid() % 100000
	nsH, nsN := fmt.Sprintf("npdp%dh", id), fmt.Sprintf("npdp%dn", id)
	vH, vN := fmt.Sprintf("npd%dh", id), fmt.Sprintf("npd%dn", id)
	sub := 1 + id%250
	ipH, ipN := fmt.Sprintf("10.213.%d.1", sub), fmt.Sprintf("10.213.%d.2", sub)
	run := func(args ...string) error {
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := run("netns", "add", nsH); err != nil {
		t.Skipf("cannot create network namespaces here: %v", err)
	}
	t.Cleanup(func() { run("netns", "del", nsH) })
	if err := run("netns", "add", nsN); err != nil {
		t.Skipf("cannot create network namespaces here: %v", err)
	}
	t.Cleanup(func() { run("netns", "del", nsN) })
	for _, step := range [][]string{
		{"link", "add", vH, "type", "veth", "peer", "name", vN},
		{"link", "set", vH, "netns", nsH},
		{"link", "set", vN, "netns", nsN},
		{"-n", nsH, "addr", "add", ipH + "/24", "dev", vH},
		{"-n", nsN, "addr", "add", ipN + "/24", "dev", vN},
		{"-n", nsH, "link", "set", vH, "up"},
		{"-n", nsN, "link", "set", vN, "up"},
		{"-n", nsH, "link", "set", "lo", "up"},
		{"-n", nsN, "link", "set", "lo", "up"},
	} {
		if err := run(step...); err != nil {
			t.Skipf("cannot set up the veth pair here: %v", err)
		}
	}
	inH, inN := []string{"ip", "netns", "exec", nsH}, []string{"ip", "netns", "exec", nsN}
	common := []string{"PORT=8000", "RPC_PORT=12321", "NODE0_IP=" + ipH}
	serveThroughScripts(t, append(common, "LOCAL_IP="+ipH), append(common, "LOCAL_IP="+ipN),
		"http://"+ipH+":8000", inH, inN, inH)
}

// TestDockerRun: docker/run.sh passes each host's devices, the driver
// mounts, host networking and the launch script (docker replaced by a
// stand-in that prints its arguments).
func TestDockerRun(t *testing.T) {
	bin := t.TempDir()
	os.WriteFile(filepath.Join(bin, "docker"), []byte("#!/bin/sh\nprintf '%s\\n' \"$@\"\n"), 0o755)
	tests := []struct {
		host, script string
		davinci      int
		want         []string
	}{
		{"a2", "configs/ascend/a2-node0.sh", 8, []string{"--network\nhost", "/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc", "/usr/local/Ascend/driver:/usr/local/Ascend/driver:ro", "--shm-size=16g", "/opt/npuserve/configs/ascend/a2-node0.sh"}},
		{"a3", "configs/ascend/a3.sh", 16, []string{"/dev/davinci15", "/opt/npuserve/configs/ascend/a3.sh"}},
		{"950dt", "configs/ascend/950dt.sh", 8, []string{"/dev/ummu", "/etc/hccl_rootinfo.json"}},
	}
	for _, tc := range tests {
		t.Run(tc.host, func(t *testing.T) {
			cmd := exec.Command(filepath.Join("..", "..", "docker", "run.sh"), tc.host, tc.script)
			cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
			out, err := cmd.Output()
			if err != nil {
				t.Fatal(err)
			}
			s := string(out)
			if n := strings.Count(s, "/dev/davinci") - strings.Count(s, "/dev/davinci_manager"); n != tc.davinci {
				t.Errorf("%d davinci devices, want %d:\n%s", n, tc.davinci, s)
			}
			for _, w := range tc.want {
				if !strings.Contains(s, w) {
					t.Errorf("docker run lacks %q:\n%s", w, s)
				}
			}
		})
	}
	if err := exec.Command(filepath.Join("..", "..", "docker", "run.sh"), "a9", "x").Run(); err == nil {
		t.Error("run.sh accepted an unknown host kind")
	}
}
