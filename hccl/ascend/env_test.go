//go:build cgo

package ascend_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/hccl/ascend"
)

// timeoutEnvChild inits a 2-rank communicator (devices 0 and 1) with the
// timeouts in NPUSERVE_TEST_TIMEOUT / NPUSERVE_TEST_INIT_TIMEOUT, in a
// process of its own: the HCCL environment is set once per process, at
// its first init. The fake CANN logs what each rank's init saw.
func timeoutEnvChild() int {
	to, err1 := time.ParseDuration(os.Getenv("NPUSERVE_TEST_TIMEOUT"))
	it, err2 := time.ParseDuration(os.Getenv("NPUSERVE_TEST_INIT_TIMEOUT"))
	if err1 != nil || err2 != nil {
		fmt.Println("bad timeouts:", err1, err2)
		return 1
	}
	ri, err := ascend.NewRootInfo(0)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := hccl.Init(ri, r, 2, hccl.Options{Device: r, Timeout: to, InitTimeout: it})
			if err == nil {
				err = c.Close()
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			fmt.Printf("rank %d: %v\n", r, err)
			return 1
		}
	}
	return 0
}

// TestTimeoutEnv: the transport sets HCCL_CONNECT_TIMEOUT and
// HCCL_EXEC_TIMEOUT from the init and operation timeouts (seconds rounded
// up, within HCCL's ranges) before HCCL's init reads them, keeps the
// user's values, warns when those exceed ours, and logs what it did once.
func TestTimeoutEnv(t *testing.T) {
	if mode != "fake" {
		t.Skipf("needs the fake CANN, which logs the environment its init sees (mode: %s)", mode)
	}
	requireHCCL(t)
	for _, tc := range []struct {
		name                 string
		timeout, initTimeout time.Duration
		env                  []string
		connect, exec        string // what HCCL's init saw
		log, notLog          []string
	}{
		{"from ours, rounded up", 7200 * time.Millisecond, 200500 * time.Millisecond, nil, "201", "8",
			[]string{"set HCCL_CONNECT_TIMEOUT=201 (init timeout 3m20.5s)", "HCCL_EXEC_TIMEOUT=8 (operation timeout 7.2s)"}, []string{"level=warning", "kept"}},
		{"within HCCL's ranges", 2 * time.Hour, 30 * time.Second, nil, "120", "1091",
			[]string{"HCCL_CONNECT_TIMEOUT=120 (init timeout 30s, HCCL's minimum 120 s)", "HCCL_EXEC_TIMEOUT=1091 (operation timeout 2h0m0s, HCCL's maximum 1091 s)"}, nil},
		{"the user's kept", time.Minute, 200 * time.Second, []string{"HCCL_EXEC_TIMEOUT=1836", "HCCL_CONNECT_TIMEOUT=150"}, "150", "1836",
			[]string{"kept from the environment HCCL_CONNECT_TIMEOUT=150, HCCL_EXEC_TIMEOUT=1836",
				"HCCL_EXEC_TIMEOUT=1836 s from the environment exceeds npuserve's operation timeout 1m0s (60 s)"},
			[]string{"HCCL_CONNECT_TIMEOUT=150 s from the environment exceeds", "set "}},
		{"one of each", time.Minute, 100 * time.Second, []string{"HCCL_CONNECT_TIMEOUT=300"}, "300", "60",
			[]string{"set HCCL_EXEC_TIMEOUT=60", "kept from the environment HCCL_CONNECT_TIMEOUT=300",
				"HCCL_CONNECT_TIMEOUT=300 s from the environment exceeds npuserve's init timeout 1m40s (120 s)"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logf := filepath.Join(t.TempDir(), "env.log")
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			for _, kv := range os.Environ() { // this process's first Init set them
				if !strings.HasPrefix(kv, "HCCL_CONNECT_TIMEOUT=") && !strings.HasPrefix(kv, "HCCL_EXEC_TIMEOUT=") {
					cmd.Env = append(cmd.Env, kv)
				}
			}
			cmd.Env = append(cmd.Env, childEnv+"=timeoutenv", "FAKECANN_ENV_LOG="+logf,
				"NPUSERVE_TEST_TIMEOUT="+tc.timeout.String(), "NPUSERVE_TEST_INIT_TIMEOUT="+tc.initTimeout.String())
			cmd.Env = append(cmd.Env, tc.env...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child: %v: %s", err, out)
			}
			seen, err := os.ReadFile(logf)
			if err != nil {
				t.Fatalf("the fake logged nothing: %v (child output %s)", err, out)
			}
			for r := range 2 {
				want := fmt.Sprintf("rank %d HCCL_CONNECT_TIMEOUT=%s HCCL_EXEC_TIMEOUT=%s\n", r, tc.connect, tc.exec)
				if !strings.Contains(string(seen), want) {
					t.Errorf("HCCL's init saw\n%s\nwant %q", seen, want)
				}
			}
			if n := strings.Count(string(out), "HCCL timeouts follow npuserve's"); n != 1 {
				t.Errorf("logged %d times, want once:\n%s", n, out)
			}
			for _, s := range tc.log {
				if !strings.Contains(string(out), s) {
					t.Errorf("log lacks %q:\n%s", s, out)
				}
			}
			for _, s := range tc.notLog {
				if strings.Contains(string(out), s) {
					t.Errorf("log has %q:\n%s", s, out)
				}
			}
		})
	}
}
