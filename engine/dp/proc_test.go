package dp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var tinyDir = filepath.Join("..", "..", "testdata", "glm5next", "tiny")

// proc is a running npuserve process.
type proc struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	log  bytes.Buffer
	done chan struct{}
	err  error
}

// startCmd starts cmd in its own process group, collecting its stderr;
// cleanup kills the group.
func startCmd(t *testing.T, name string, cmd *exec.Cmd) *proc {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &proc{t: t, name: name, cmd: cmd, done: make(chan struct{})}
	stderr, _ := cmd.StderrPipe()
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.log.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
		}
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		if t.Failed() {
			t.Logf("%s log:\n%s", name, p.logText())
		}
	})
	return p
}

func (p *proc) logText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// waitLog waits for s in the log, failing after limit.
func (p *proc) waitLog(s string, limit time.Duration) {
	p.t.Helper()
	end := time.Now().Add(limit)
	for time.Now().Before(end) {
		if strings.Contains(p.logText(), s) {
			return
		}
		select {
		case <-p.done:
			if strings.Contains(p.logText(), s) {
				return
			}
			p.t.Fatalf("%s exited (%v) before logging %q:\n%s", p.name, p.err, s, p.logText())
		case <-time.After(50 * time.Millisecond):
		}
	}
	p.t.Fatalf("%s did not log %q within %s:\n%s", p.name, s, limit, p.logText())
}

// waitExit waits for the process to exit within limit and returns its
// exit code.
func (p *proc) waitExit(limit time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(limit):
		p.t.Fatalf("%s still running after %s:\n%s", p.name, limit, p.logText())
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		p.t.Fatalf("%s: %v", p.name, p.err)
	}
	return 0
}

// freePorts returns n free TCP ports on host.
func freePorts(t *testing.T, host string, n int) []int {
	t.Helper()
	var out []int
	var lns []net.Listener
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}

// completion is the part of a /v1/completions answer the tests check.
type completion struct {
	status int
	text   string
	ids    []int32
	body   string
}

// complete sends a greedy completion of prompt (a string, or token ids) to
// base.
func complete(ctx context.Context, base string, prompt any, maxTokens int) (completion, error) {
	p, _ := json.Marshal(prompt)
	body := fmt.Sprintf(`{"model":"tiny","prompt":%s,"max_tokens":%d,"temperature":0,"ignore_eos":true,"return_token_ids":true}`, p, maxTokens)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return completion{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	c := completion{status: resp.StatusCode, body: string(b)}
	var v struct {
		Choices []struct {
			Text     string  `json:"text"`
			TokenIDs []int32 `json:"token_ids"`
		} `json:"choices"`
	}
	if json.Unmarshal(b, &v) == nil && len(v.Choices) == 1 {
		c.text, c.ids = v.Choices[0].Text, v.Choices[0].TokenIDs
	}
	return c, nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}
