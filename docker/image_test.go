// Package docker holds the tests of the images this directory builds:
// docker/Dockerfile.cpu (make image) in a real Docker engine, and the
// Ascend image's entrypoint. There is no non-test Go code here.
//
// The container tests skip, saying why, where no Docker engine answers
// `docker info` or the image has not been built: run `make image` first
// (or `make image-test`, which builds it and runs them). They test the
// image as it is; a stale npuserve:cpu tests old code, so make image-test
// rebuilds it. NPUSERVE_IMAGE names another image.
package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var root = ".."

// recipeCmd is the CPU image's default command: `make run` inside a
// container (the tiny model, the GLM recipe's flags, every interface).
var recipeFlags = []string{"--reasoning-parser", "glm45", "--tool-call-parser", "glm47", "--enable-auto-tool-choice"}

func imageName() string {
	if s := os.Getenv("NPUSERVE_IMAGE"); s != "" {
		return s
	}
	return "npuserve:cpu"
}

// docker runs the docker CLI with a bound on its run time.
func docker(limit time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("docker %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return strings.TrimSpace(string(out)), nil
}

// needImage skips unless a Docker engine runs and has the image.
func needImage(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("container test (-short)")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("no docker CLI: the container tests need a Docker engine (make image installs and starts one)")
	}
	if _, err := docker(20*time.Second, "info", "--format", "{{.ServerVersion}}"); err != nil {
		t.Skipf("no Docker engine answers `docker info` (make docker-engine starts one): %v", err)
	}
	img := imageName()
	if _, err := docker(20*time.Second, "image", "inspect", img); err != nil {
		t.Skipf("image %s is not built: run `make image` first (or `make image-test`)", img)
	}
	return img
}

// dockerfileCmd is the exec-form CMD of docker/Dockerfile.cpu.
func dockerfileCmd(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docker", "Dockerfile.cpu"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^CMD (\[.*\])$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("docker/Dockerfile.cpu has no exec-form CMD")
	}
	var cmd []string
	if err := json.Unmarshal(m[1], &cmd); err != nil {
		t.Fatalf("docker/Dockerfile.cpu CMD: %v", err)
	}
	return cmd
}

// TestRecipeFlags: the CPU image's default command and `make run` serve
// the tiny model with the GLM recipe's flags (no Docker needed).
func TestRecipeFlags(t *testing.T) {
	cmd := dockerfileCmd(t)
	want := append([]string{"serve", "testdata/glm5next/tiny", "--host", "0.0.0.0", "--port", "8000"}, recipeFlags...)
	if !slices.Equal(cmd, want) {
		t.Errorf("Dockerfile.cpu CMD %q, want %q", cmd, want)
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make: cannot check `make run`")
	}
	c := exec.Command("make", "-s", "-n", "run")
	c.Dir = root
	out, err := c.Output()
	if err != nil {
		t.Fatalf("make -n run: %v", err)
	}
	var serve []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[1] == "serve" {
			serve = f[1:]
		}
	}
	wantRun := append([]string{"serve", "testdata/glm5next/tiny", "--host", "127.0.0.1", "--port", "8000"}, recipeFlags...)
	if !slices.Equal(serve, wantRun) {
		t.Errorf("make run serves %q, want %q", serve, wantRun)
	}
}

// TestAscendEntrypoint: the Ascend image's entrypoint sources CANN's
// set_env.sh when there is one and runs npuserve with its arguments.
func TestAscendEntrypoint(t *testing.T) {
	dir := t.TempDir()
	stub := filepath.Join(dir, "npuserve")
	os.WriteFile(stub, []byte("#!/bin/sh\necho \"LD=$LD_LIBRARY_PATH\"\nprintf '%s\\n' \"$@\"\n"), 0o755)
	setEnv := filepath.Join(dir, "set_env.sh")
	os.WriteFile(setEnv, []byte("export LD_LIBRARY_PATH=/usr/local/Ascend/ascend-toolkit/latest/lib64\n"), 0o644)
	run := func(setEnvPath string) string {
		c := exec.Command(filepath.Join(root, "docker", "npuserve-entrypoint.sh"), "serve", "/m", "--port", "8000")
		c.Env = append(os.Environ(), "NPUSERVE="+stub, "ASCEND_SET_ENV="+setEnvPath, "LD_LIBRARY_PATH=")
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("entrypoint: %v: %s", err, out)
		}
		return string(out)
	}
	if got, want := run(setEnv), "LD=/usr/local/Ascend/ascend-toolkit/latest/lib64\nserve\n/m\n--port\n8000\n"; got != want {
		t.Errorf("with set_env.sh: %q, want %q", got, want)
	}
	if got, want := run(filepath.Join(dir, "absent.sh")), "LD=\nserve\n/m\n--port\n8000\n"; got != want {
		t.Errorf("without set_env.sh: %q, want %q", got, want)
	}
}

// container is a started container, removed at cleanup (its log shown
// when the test failed).
type container struct {
	t    *testing.T
	name string
}

func run(t *testing.T, name string, args ...string) *container {
	t.Helper()
	c := &container{t: t, name: name}
	docker(20*time.Second, "rm", "-f", name)
	if _, err := docker(60*time.Second, append([]string{"run", "-d", "--name", name}, args...)...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s log:\n%s", name, c.logs())
		}
		docker(30*time.Second, "rm", "-f", name)
	})
	return c
}

func (c *container) logs() string {
	out, _ := docker(20*time.Second, "logs", c.name)
	return out
}

// state is the container's Status and ExitCode.
func (c *container) state() (string, int) {
	out, err := docker(20*time.Second, "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", c.name)
	if err != nil {
		c.t.Fatal(err)
	}
	var s string
	var code int
	fmt.Sscan(out, &s, &code)
	return s, code
}

// waitExit waits up to limit for the container to stop and returns its
// exit code.
func (c *container) waitExit(limit time.Duration) int {
	c.t.Helper()
	end := time.Now().Add(limit)
	for time.Now().Before(end) {
		if s, code := c.state(); s == "exited" || s == "dead" {
			return code
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.t.Fatalf("%s still running after %s:\n%s", c.name, limit, c.logs())
	return -1
}

var client = &http.Client{Timeout: 30 * time.Second}

// waitHealth polls base/health until 200, failing after limit or when
// the container exits.
func (c *container) waitHealth(base string, limit time.Duration) {
	c.t.Helper()
	end := time.Now().Add(limit)
	for time.Now().Before(end) {
		if resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(base + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if s, code := c.state(); s != "running" {
			c.t.Fatalf("%s %s (exit code %d) before /health answered:\n%s", c.name, s, code, c.logs())
		}
		time.Sleep(250 * time.Millisecond)
	}
	c.t.Fatalf("%s: %s/health not 200 within %s:\n%s", c.name, base, limit, c.logs())
}

// post sends a JSON body and returns the status and the body.
func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// golden are the tiny fixture's prompts and transformers' greedy tokens.
func golden(t *testing.T) (prompts, greedy [][]int32) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "testdata", "glm5next", "tiny", "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct{ Prompts, Greedy [][]int32 }
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	return g.Prompts, g.Greedy
}

// completeIDs sends a greedy token-id completion and returns its tokens.
func completeIDs(t *testing.T, base, model string, prompt []int32, n int) []int32 {
	t.Helper()
	p, _ := json.Marshal(prompt)
	code, body := post(t, base+"/v1/completions", fmt.Sprintf(
		`{"model":%q,"prompt":%s,"max_tokens":%d,"temperature":0,"ignore_eos":true,"return_token_ids":true}`, model, p, n))
	var v struct {
		Choices []struct {
			TokenIDs []int32 `json:"token_ids"`
		} `json:"choices"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &v) != nil || len(v.Choices) != 1 {
		t.Fatalf("completion: %d %s", code, body)
	}
	return v.Choices[0].TokenIDs
}

// TestImageServes starts the CPU image with its default command (port
// published on loopback), waits for /health and runs completions (greedy
// tokens equal transformers') and a tool-choice chat that only the
// recipe's flags allow; docker stop ends it with status 0.
func TestImageServes(t *testing.T) {
	img := needImage(t)
	if out, err := docker(20*time.Second, "image", "inspect", "--format", "{{json .Config.Cmd}} {{.Size}}", img); err == nil {
		var cmd []string
		var size int64
		i := strings.LastIndexByte(out, ' ')
		json.Unmarshal([]byte(out[:i]), &cmd)
		fmt.Sscan(out[i+1:], &size)
		if want := dockerfileCmd(t); !slices.Equal(cmd, want) {
			t.Errorf("%s's CMD %q is not docker/Dockerfile.cpu's %q: rebuild it (make image)", img, cmd, want)
		}
		t.Logf("%s: %.1f MB", img, float64(size)/1e6)
	}
	c := run(t, fmt.Sprintf("npuserve-test-%d-serve", os.Getpid()), "-p", "127.0.0.1::8000", img)
	hostPort, err := docker(20*time.Second, "port", c.name, "8000/tcp")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + strings.Fields(hostPort)[0]
	start := time.Now()
	c.waitHealth(base, 60*time.Second)
	t.Logf("/health 200 after %s at %s", time.Since(start).Round(time.Millisecond), base)

	resp, err := client.Get(base + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var models struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if len(models.Data) != 1 || models.Data[0].ID != "testdata/glm5next/tiny" {
		t.Errorf("/v1/models %+v, want testdata/glm5next/tiny", models)
	}
	prompts, greedy := golden(t)
	for i, p := range prompts {
		if got := completeIDs(t, base, "testdata/glm5next/tiny", p, len(greedy[i])); !slices.Equal(got, greedy[i]) {
			t.Errorf("prompt %d: tokens %v, want %v", i, got, greedy[i])
		}
	}
	// tool_choice "auto" needs --enable-auto-tool-choice and
	// --tool-call-parser (400 otherwise, as in vLLM).
	code, body := post(t, base+"/v1/chat/completions", `{"model":"testdata/glm5next/tiny","messages":[{"role":"user","content":"Weather in Paris?"}],
		"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],
		"tool_choice":"auto","max_tokens":8}`)
	if code != 200 || !strings.Contains(body, `"tool_calls":`) {
		t.Errorf("chat with tool_choice auto: %d %s", code, body)
	}

	if _, err := docker(30*time.Second, "stop", "-t", "10", c.name); err != nil {
		t.Fatal(err)
	}
	if code := c.waitExit(15 * time.Second); code != 0 {
		t.Errorf("exit code %d after docker stop, want 0", code)
	}
}

// scriptRun runs a configs/ launch script with a stand-in npuserve and
// returns the arguments after "serve" and the variables the script
// exported (set or changed relative to the environment it was given).
func scriptRun(t *testing.T, script string, env ...string) (args []string, exported []string) {
	t.Helper()
	stub := filepath.Join(t.TempDir(), "npuserve")
	os.WriteFile(stub, []byte("#!/bin/sh\nprintf '%s\\0' \"$@\"\nprintf -- '--env--\\0'\nenv -0\n"), 0o755)
	given := append(append(os.Environ(), "NPUSERVE="+stub), env...)
	c := exec.Command(filepath.Join(root, "configs", script))
	c.Env = given
	out, err := c.Output()
	if err != nil {
		t.Fatalf("%s: %v", script, err)
	}
	parts := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	sep := slices.Index(parts, "--env--")
	if sep < 1 || parts[0] != "serve" {
		t.Fatalf("%s runs %q, want npuserve serve", script, parts)
	}
	before := map[string]string{}
	for _, kv := range given {
		k, v, _ := strings.Cut(kv, "=")
		before[k] = v
	}
	for _, kv := range parts[sep+1:] {
		k, v, _ := strings.Cut(kv, "=")
		if old, ok := before[k]; (!ok || old != v) && !slices.Contains([]string{"PWD", "OLDPWD", "SHLVL", "_"}, k) {
			exported = append(exported, kv)
		}
	}
	return parts[1:sep], exported
}

// network creates a Docker-internal network (no route out of it) with a
// subnet of its own, removed at cleanup, and returns its name and the
// subnet's first three octets.
func network(t *testing.T) (string, string) {
	t.Helper()
	name := fmt.Sprintf("npuserve-test-%d", os.Getpid())
	docker(20*time.Second, "network", "rm", name)
	var lastErr error
	for i := 0; i < 8; i++ {
		prefix := fmt.Sprintf("172.31.%d", (os.Getpid()+37*i)%250+1)
		if _, lastErr = docker(30*time.Second, "network", "create", "--internal", "--subnet", prefix+".0/24", name); lastErr == nil {
			t.Cleanup(func() { docker(30*time.Second, "network", "rm", name) })
			return name, prefix
		}
	}
	t.Fatalf("no free subnet for the test network: %v", lastErr)
	return "", ""
}

// node starts one node of the configs/cpu A2 layout (DP2 × TP2, expert
// parallel) in a container at ip: npuserve gets exactly the script's
// arguments and the variables it exports (HCCL_IF_IP), given LOCAL_IP,
// NODE0_IP and the image's model path.
func node(t *testing.T, img, net, name, script, ip, node0 string) *container {
	t.Helper()
	args, exported := scriptRun(t, script, "LOCAL_IP="+ip, "NODE0_IP="+node0, "MODEL=testdata/glm5next/tiny")
	dargs := []string{"--network", net, "--ip", ip, "-e", "NPUSERVE_DP_CONNECT_TIMEOUT=30"}
	for _, kv := range exported {
		dargs = append(dargs, "-e", kv)
	}
	dargs = append(append(dargs, img, "serve"), args...)
	return run(t, name, dargs...)
}

// TestImageTwoNodes runs configs/cpu/a2-node0.sh and a2-node1.sh as two
// containers on a Docker-internal network: the head (API server, DP
// coordinator on --data-parallel-rpc-port) and a --headless node that
// finds the head by its container name, as a Kubernetes worker finds
// $(LWS_LEADER_ADDRESS). Requests are served by both DP ranks with the
// fixture's greedy tokens; stopping the headless container makes the
// head answer 503 naming it. A second pair: stopping the head stops the
// headless container with status 0.
func TestImageTwoNodes(t *testing.T) {
	img := needImage(t)
	net, prefix := network(t)
	headIP, nodeIP := prefix+".10", prefix+".11"
	id := os.Getpid()
	base := "http://" + headIP + ":8000"
	status := "http://" + headIP + ":12321/v1/dp/status"

	t.Run("headless stopped", func(t *testing.T) {
		headName := fmt.Sprintf("npuserve-test-%d-head", id)
		head := node(t, img, net, headName, "cpu/a2-node0.sh", headIP, "")
		hl := node(t, img, net, fmt.Sprintf("npuserve-test-%d-node1", id), "cpu/a2-node1.sh", nodeIP, headName)
		start := time.Now()
		head.waitHealth(base, 90*time.Second)
		t.Logf("both nodes ready after %s", time.Since(start).Round(time.Millisecond))

		prompts, greedy := golden(t)
		for i, p := range prompts {
			if got := completeIDs(t, base, "glm", p, len(greedy[i])); !slices.Equal(got, greedy[i]) {
				t.Errorf("prompt %d: tokens %v, want %v", i, got, greedy[i])
			}
		}
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := client.Post(base+"/v1/completions", "application/json",
					strings.NewReader(fmt.Sprintf(`{"model":"glm","prompt":"concurrent %d","max_tokens":16}`, i)))
				if err != nil {
					t.Errorf("concurrent request %d: %v", i, err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Errorf("concurrent request %d: %d %s", i, resp.StatusCode, b)
				}
			}()
		}
		wg.Wait()
		resp, err := client.Get(status)
		if err != nil {
			t.Fatal(err)
		}
		var g struct {
			Ranks []struct {
				Node   string `json:"node"`
				Ready  bool   `json:"ready"`
				Routed int64  `json:"routed"`
			} `json:"ranks"`
		}
		json.NewDecoder(resp.Body).Decode(&g)
		resp.Body.Close()
		if len(g.Ranks) != 2 || g.Ranks[0].Routed == 0 || g.Ranks[1].Routed == 0 || g.Ranks[1].Node != nodeIP || !g.Ranks[1].Ready {
			t.Errorf("DP status %+v: want both ranks ready and serving, rank 1 on %s", g, nodeIP)
		}
		t.Logf("requests routed: DP rank 0 %d, DP rank 1 %d", g.Ranks[0].Routed, g.Ranks[1].Routed)

		if _, err := docker(30*time.Second, "stop", "-t", "10", hl.name); err != nil {
			t.Fatal(err)
		}
		stopped := time.Now()
		want := fmt.Sprintf("DP rank 1 (node %s) is gone", nodeIP)
		var code int
		var body string
		for time.Since(stopped) < 15*time.Second {
			if code, body = post(t, base+"/v1/completions", `{"model":"glm","prompt":"after","max_tokens":4}`); code == 503 {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if code != 503 || !strings.Contains(body, want) {
			t.Fatalf("after docker stop of the headless node: %d %s, want 503 naming %q", code, body, want)
		}
		t.Logf("503 %s after the headless container stopped: %s", time.Since(stopped).Round(time.Millisecond), body)
		if resp, err := client.Get(base + "/health"); err != nil || resp.StatusCode != 503 {
			t.Errorf("/health after the node left: %v %v", resp, err)
		}
		if code := hl.waitExit(5 * time.Second); code != 0 {
			t.Errorf("headless exit code %d after docker stop, want 0", code)
		}
		docker(30*time.Second, "stop", "-t", "10", head.name)
		head.waitExit(15 * time.Second)
	})

	t.Run("head stopped", func(t *testing.T) {
		headName := fmt.Sprintf("npuserve-test-%d-head2", id)
		head := node(t, img, net, headName, "cpu/a2-node0.sh", headIP, "")
		hl := node(t, img, net, fmt.Sprintf("npuserve-test-%d-node1b", id), "cpu/a2-node1.sh", nodeIP, headName)
		head.waitHealth(base, 90*time.Second)
		if got := completeIDs(t, base, "glm", []int32{1, 2, 3}, 4); len(got) != 4 {
			t.Fatalf("completion: %v", got)
		}
		if _, err := docker(30*time.Second, "stop", "-t", "10", head.name); err != nil {
			t.Fatal(err)
		}
		stopped := time.Now()
		if code := hl.waitExit(15 * time.Second); code != 0 {
			t.Errorf("headless exit code %d after the head stopped, want 0:\n%s", code, hl.logs())
		}
		t.Logf("headless container exited %s after docker stop of the head", time.Since(stopped).Round(time.Millisecond))
		if code := head.waitExit(15 * time.Second); code != 0 {
			t.Errorf("head exit code %d after docker stop, want 0", code)
		}
	})
}
