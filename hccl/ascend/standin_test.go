//go:build cgo && linux

package ascend_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/hccl/ascend"
	"github.com/npuserve/npuserve/hccl/hccltest"
	"github.com/npuserve/npuserve/npu"
)

// The binding over the stand-in CANN's libhccl (npu/ascend/testdata/
// standin/hccl.c, a test double built by tools/ascend/build-standin.sh)
// with every rank a separate process, as npuserve's ranks are: rank 0's
// process makes the root info (and so hosts the stand-in's rendezvous),
// the others get it from the test, as npuserve ships it over its own
// network. The in-process suite (TestConformance, TestFailures) also runs
// on the stand-in with NPUSERVE_TEST_HCCL=1 ASCEND_HOME_PATH=<stand-in>
// STANDIN_DEVICES=8 (make test-ascend).

const (
	envStandinRole = "NPUSERVE_ASCEND_STANDIN_ROLE"
	envStandinRank = "NPUSERVE_ASCEND_STANDIN_RANK"
	envStandinSize = "NPUSERVE_ASCEND_STANDIN_SIZE"
	envStandinRoot = "NPUSERVE_ASCEND_STANDIN_ROOT" // unset on rank 0, which makes it
)

// standinOpts: an operation timeout far above what the failure cases
// allow, so that they show HCCL's own detection, not the binding's.
var standinOpts = hccl.Options{Timeout: 30 * time.Second, InitTimeout: 30 * time.Second, Name: "standin"}

// buildStandin builds the stand-in CANN into a temporary directory, or
// skips the test saying why it cannot.
func buildStandin(t *testing.T) string {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler (%s) to build the stand-in CANN", cc)
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash to run tools/ascend/build-standin.sh")
	}
	dir := t.TempDir()
	if out, err := exec.Command("bash", filepath.Join("..", "..", "tools", "ascend", "build-standin.sh"), dir).CombinedOutput(); err != nil {
		t.Fatalf("building the stand-in CANN: %v\n%s", err, out)
	}
	return dir
}

// startStandinRank starts this test binary as rank of a stand-in world in
// role (root: rank 0's root info; "" on rank 0).
func startStandinRank(t *testing.T, home, role string, rank, size int, root string, env ...string) *hccltest.Child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=standin", envStandinRole+"="+role, envStandinRank+"="+strconv.Itoa(rank),
		envStandinSize+"="+strconv.Itoa(size), envStandinRoot+"="+root, "ASCEND_HOME_PATH="+home, "STANDIN_DEVICES="+strconv.Itoa(size))
	cmd.Env = append(cmd.Env, env...)
	return hccltest.StartChild(t, cmd)
}

// waitOut is c.Wait with the rest of its output as one string.
func waitOut(t *testing.T, c *hccltest.Child, limit time.Duration) (error, string) {
	t.Helper()
	err, rest := c.Wait(t, limit)
	return err, strings.Join(rest, "\n")
}

func startStandinWorld(t *testing.T, home string, roles []string, env ...string) []*hccltest.Child {
	t.Helper()
	size := len(roles)
	ranks := []*hccltest.Child{startStandinRank(t, home, roles[0], 0, size, "", env...)}
	root, ok := strings.CutPrefix(ranks[0].Line(30*time.Second), "root ")
	if !ok {
		t.Fatalf("rank 0 printed no root info:\n%s", ranks[0].Stderr.String())
	}
	for r := 1; r < size; r++ {
		ranks = append(ranks, startStandinRank(t, home, roles[r], r, size, root, env...))
	}
	return ranks
}

// TestStandinProcesses: the conformance table with 2 and 3 rank processes;
// a killed rank process makes its peer's next collective fail at once
// (ErrPeerLost, far below the 30 s operation timeout); a collective one
// rank never joins in time fails at HCCL_EXEC_TIMEOUT (1 s from the
// environment, which the binding keeps, on an HCCL without
// hcclExecTimeOut in its config), and the late rank then fails at once,
// told that its peer gave up.
func TestStandinProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process")
	}
	home := buildStandin(t)
	for _, size := range []int{2, 3} {
		t.Run(fmt.Sprintf("conformance/size=%d", size), func(t *testing.T) {
			roles := make([]string, size)
			for i := range roles {
				roles[i] = "conformance"
			}
			for r, p := range startStandinWorld(t, home, roles) {
				if err, out := waitOut(t, p, 5*time.Minute); err != nil || !strings.Contains(out, "cases passed") {
					t.Errorf("rank %d: %v\n%s\n%s", r, err, out, p.Stderr.String())
				} else {
					t.Logf("rank %d: %s", r, out)
				}
			}
		})
	}
	t.Run("peer killed", func(t *testing.T) {
		ranks := startStandinWorld(t, home, []string{"survivor", "victim"})
		for r, p := range ranks {
			if l := p.Line(30 * time.Second); l != "ready" {
				t.Fatalf("rank %d: %q, want ready:\n%s", r, l, p.Stderr.String())
			}
		}
		ranks[1].Cmd.Process.Kill()
		err, out := waitOut(t, ranks[0], 20*time.Second)
		if err != nil {
			t.Fatalf("survivor: %v\n%s\n%s", err, out, ranks[0].Stderr.String())
		}
		t.Log(out)
	})
	t.Run("exec timeout", func(t *testing.T) {
		// An HCCL whose config has no hcclExecTimeOut (capability 8): the
		// binding's 30 s stays out of the config and HCCL_EXEC_TIMEOUT
		// alone bounds the collective.
		ranks := startStandinWorld(t, home, []string{"late", "punctual"}, "HCCL_EXEC_TIMEOUT=1", "STANDIN_HCCL_CAPABILITY=8")
		for r, p := range ranks {
			if err, out := waitOut(t, p, 30*time.Second); err != nil {
				t.Errorf("rank %d (%s): %v\n%s\n%s", r, []string{"late", "punctual"}[r], err, out, p.Stderr.String())
			} else {
				t.Logf("rank %d: %s", r, out)
			}
		}
	})
}

// standinChild runs one rank process of TestStandinProcesses; its exit
// status and stdout are the verdict.
func standinChild() int {
	rank, _ := strconv.Atoi(os.Getenv(envStandinRank))
	size, _ := strconv.Atoi(os.Getenv(envStandinSize))
	if err := ascend.Available(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var ri hccl.RootInfo
	var err error
	if rank == 0 {
		if ri, err = ascend.NewRootInfo(0); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		fmt.Println("root " + ri.String())
	} else if ri, err = hccl.ParseRootInfo(os.Getenv(envStandinRoot)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	o := standinOpts
	o.Device = rank
	c, err := hccl.Init(ri, rank, size, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "init:", err)
		return 3
	}
	defer c.Close()
	mem, err := ascend.NewDeviceMemory(rank)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	allReduce := func() (error, time.Duration) {
		x := npu.Must(mem.Alloc(npu.F32, 1024))
		defer mem.Free(x)
		start := time.Now()
		err := c.AllReduce(x, hccl.Sum)
		return err, time.Since(start)
	}
	switch role := os.Getenv(envStandinRole); role {
	case "conformance":
		cases := hccltest.Cases(size, hcclCaps)
		fails := hccltest.RunRank(c, mem, cases)
		for _, f := range fails {
			fmt.Println(f)
		}
		if len(fails) > 0 {
			return 1
		}
		fmt.Printf("%d cases passed\n", len(cases))
		return 0
	case "victim": // one collective, then wait to be killed
		if err, _ := allReduce(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println("ready")
		time.Sleep(time.Minute)
		return 4
	case "survivor": // one collective, then one that the victim's death must end
		if err, _ := allReduce(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println("ready")
		err, el := allReduce()
		fmt.Printf("after %v: %v\n", el.Round(time.Millisecond), err)
		if !errors.Is(err, hccl.ErrPeerLost) || el > 5*time.Second || !strings.Contains(err.Error(), "HCCL_E_REMOTE") {
			fmt.Println("want ErrPeerLost from HCCL (HCCL_E_REMOTE) within 5 s")
			return 1
		}
		return 0
	case "punctual": // the collective the late rank never joins in time
		err, el := allReduce()
		fmt.Printf("after %v: %v\n", el.Round(time.Millisecond), err)
		if !errors.Is(err, hccl.ErrTimeout) || el > 5*time.Second || !strings.Contains(err.Error(), "execution timeout") {
			fmt.Println("want ErrTimeout from HCCL's execution timeout (1 s) within 5 s")
			return 1
		}
		return 0
	case "late": // joins after the punctual rank gave up: fails at once, saying why
		time.Sleep(3 * time.Second)
		err, el := allReduce()
		fmt.Printf("after %v: %v\n", el.Round(time.Millisecond), err)
		if !errors.Is(err, hccl.ErrPeerLost) || el > 2*time.Second || !strings.Contains(err.Error(), "failed and left") {
			fmt.Println("want ErrPeerLost naming the rank that gave up, within 2 s")
			return 1
		}
		return 0
	default:
		fmt.Fprintln(os.Stderr, "unknown role", role)
		return 2
	}
}
