//go:build cgo

package ascend_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/hccl/ascend"
	"github.com/npuserve/npuserve/hccl/hccltest"
	"github.com/npuserve/npuserve/npu"
)

// The same conformance suite as the TCP transport's, run against:
//
//   - the real libhccl.so when NPUSERVE_TEST_HCCL=1 and it loads (a
//     machine with NPUs and CANN; size-N cases need N devices);
//   - otherwise a fake CANN compiled from testdata/fakecann with the
//     system C compiler, which exercises the binding's loader, calls,
//     threads, timeouts and errors on host memory;
//   - otherwise nothing: the tests skip and say why.

const childEnv = "NPUSERVE_ASCEND_TEST_CHILD"

var mode string // "real", "fake", or why neither

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "unavailable":
		os.Exit(unavailableChild())
	case "timeoutenv":
		os.Exit(timeoutEnvChild())
	case "standin":
		os.Exit(standinChild())
	}
	var cleanup func()
	if os.Getenv("NPUSERVE_TEST_HCCL") == "1" {
		mode = "real"
	} else {
		mode, cleanup = buildFake()
	}
	code := m.Run()
	if cleanup != nil {
		cleanup()
	}
	os.Exit(code)
}

// buildFake compiles the fake CANN into a temporary ASCEND_HOME_PATH.
func buildFake() (string, func()) {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		return "no C compiler to build the fake CANN", nil
	}
	dir, err := os.MkdirTemp("", "fakecann")
	if err != nil {
		return err.Error(), nil
	}
	lib := filepath.Join(dir, "lib64")
	os.MkdirAll(lib, 0o755)
	for _, l := range []struct{ def, name string }{{"FAKE_ACL", "libascendcl.so"}, {"FAKE_HCCL", "libhccl.so"}} {
		// -I: the reductions it shares with the stand-in CANN's libhccl.
		out, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-D"+l.def, "-I", filepath.Join("..", "..", "npu", "ascend", "testdata", "standin"),
			"-o", filepath.Join(lib, l.name), filepath.Join("testdata", "fakecann", "fakecann.c"), "-lpthread", "-lm").CombinedOutput()
		if err != nil {
			os.RemoveAll(dir)
			return fmt.Sprintf("building the fake CANN failed: %v: %s", err, out), nil
		}
	}
	os.Setenv("ASCEND_HOME_PATH", dir)
	return "fake", func() { os.RemoveAll(dir) }
}

func requireHCCL(t *testing.T) {
	t.Helper()
	switch mode {
	case "real", "fake":
		if err := ascend.Available(); err != nil {
			t.Skipf("HCCL (%s) does not load: %v", mode, err)
		}
	default:
		t.Skipf("no HCCL to test: %s (set NPUSERVE_TEST_HCCL=1 on a machine with CANN)", mode)
	}
}

// hcclCaps: reductions in HCCL's order (compared with a tolerance, equal
// across ranks), no peer named on timeout, failures found at the timeout.
// Prod is not defined on BF16 (A2/A3).
var hcclCaps = hccltest.Caps{
	Reduce: func(dt npu.DType, op hccl.ReduceOp) bool {
		return hccl.Supported(dt, op) && !(op == hccl.Prod && dt == npu.BF16)
	},
}

// hcclWorld makes size communicators in this process, rank r on device r.
func hcclWorld(t *testing.T, size int, opts hccl.Options) []hccltest.Rank {
	t.Helper()
	requireHCCL(t)
	if n, err := ascend.DeviceCount(); err != nil || n < size {
		t.Skipf("%d ranks need %d devices; have %d (%v)", size, size, n, err)
	}
	ri, err := ascend.NewRootInfo(0)
	if err != nil {
		t.Fatal(err)
	}
	return hccltest.World(t, ri, size, func(r int) (hccltest.Rank, error) {
		o := opts
		o.Device = r
		c, err := hccl.Init(ri, r, size, o)
		if err != nil {
			return hccltest.Rank{}, err
		}
		m, err := ascend.NewDeviceMemory(r)
		return hccltest.Rank{Comm: c, Mem: m}, err
	})
}

func TestConformance(t *testing.T) {
	for size := 1; size <= 4; size++ {
		t.Run(fmt.Sprintf("size=%d", size), func(t *testing.T) {
			ranks := hcclWorld(t, size, hccl.Options{Timeout: 30 * time.Second, InitTimeout: 30 * time.Second})
			hccltest.RunCases(t, ranks, hccltest.Cases(size, hcclCaps))
		})
	}
}

func TestFailures(t *testing.T) {
	requireHCCL(t)
	hccltest.RunFailures(t, hcclWorld, hcclCaps)
}

func TestHostTensorRejected(t *testing.T) {
	ranks := hcclWorld(t, 1, hccl.Options{})
	host := npu.NewTensor(hostBuffer(make([]byte, 64)), 0, npu.F32, 16)
	err := ranks[0].Comm.AllReduce(host, hccl.Sum)
	if !errors.Is(err, hccl.ErrInvalid) || !strings.Contains(err.Error(), "not in device memory") {
		t.Fatalf("AllReduce on a host tensor: %v", err)
	}
}

type hostBuffer []byte

func (b hostBuffer) Bytes() int { return len(b) }

func TestWrongDevice(t *testing.T) {
	ranks := hcclWorld(t, 1, hccl.Options{})
	if n, _ := ascend.DeviceCount(); n < 2 {
		t.Skip("needs two devices")
	}
	other, err := ascend.NewDeviceMemory(1)
	if err != nil {
		t.Fatal(err)
	}
	x := npu.Must(other.Alloc(npu.F32, 4))
	defer other.Free(x)
	err = ranks[0].Comm.AllReduce(x, hccl.Sum)
	if !errors.Is(err, hccl.ErrInvalid) || !strings.Contains(err.Error(), "device 1") {
		t.Fatalf("AllReduce on another device's tensor: %v", err)
	}
}

func TestBadRootInfo(t *testing.T) {
	requireHCCL(t)
	ri := hccl.MakeRootInfo(hccl.TransportHCCL, "bm90IGEgcm9vdCBpbmZv")
	_, err := hccl.Init(ri, 0, 1, hccl.Options{})
	if !errors.Is(err, hccl.ErrInvalid) {
		t.Fatalf("Init with a truncated root info: %v", err)
	}
}

// TestUnavailable: where CANN is absent, asking for HCCL fails with a
// message that says what is missing and what to do.
func TestUnavailable(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=unavailable", "ASCEND_HOME_PATH="+empty, "ASCEND_TOOLKIT_HOME=", "LD_LIBRARY_PATH="+empty)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	msg := string(out)
	if strings.HasPrefix(msg, "SKIP") {
		t.Skip(msg)
	}
	for _, want := range []string{"libhccl.so not found", "install CANN", "CPU backend", empty} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
	t.Log(msg)
}

func unavailableChild() int {
	for _, d := range ascend.SearchDirs() {
		if _, err := os.Stat(filepath.Join(d, "libhccl.so")); err == nil {
			fmt.Println("SKIP: this machine has CANN at", d)
			return 0
		}
	}
	err := ascend.Available()
	if err == nil {
		fmt.Println("SKIP: libhccl.so loads from the loader's default path")
		return 0
	}
	if !errors.Is(err, hccl.ErrUnavailable) {
		fmt.Println("Available() does not wrap hccl.ErrUnavailable:", err)
		return 1
	}
	if err2 := hccl.Available(hccl.TransportHCCL); err2 == nil || err2.Error() != err.Error() {
		fmt.Println("hccl.Available(hccl) differs:", err2)
		return 1
	}
	ri := hccl.MakeRootInfo(hccl.TransportHCCL, "AAAA")
	if _, err3 := hccl.Init(ri, 0, 1, hccl.Options{}); err3 == nil || err3.Error() != err.Error() {
		fmt.Println("hccl.Init with HCCL absent:", err3)
		return 1
	}
	fmt.Println(err)
	return 0
}

func TestSearchDirs(t *testing.T) {
	t.Setenv("ASCEND_HOME_PATH", "/opt/cann")
	t.Setenv("ASCEND_TOOLKIT_HOME", "/opt/cann") // duplicates are dropped
	t.Setenv("LD_LIBRARY_PATH", "/x/lib::/y/lib")
	got := ascend.SearchDirs()
	want := []string{"/opt/cann/lib64"}
	if got[0] != want[0] || !contains(got, "/x/lib") || !contains(got, "/y/lib") || !contains(got, "/usr/local/Ascend/ascend-toolkit/latest/lib64") {
		t.Fatalf("SearchDirs = %v", got)
	}
	seen := map[string]bool{}
	for _, d := range got {
		if seen[d] || d == "" {
			t.Fatalf("SearchDirs has %q twice or empty: %v", d, got)
		}
		seen[d] = true
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestInitTimeout: a rank whose peers never join gets an error naming the
// cause at its init timeout, even though HCCL itself is still waiting
// (HCCL_CONNECT_TIMEOUT); the device's thread is then given up. Device 7 is
// used by no other test.
func TestInitTimeout(t *testing.T) {
	requireHCCL(t)
	const dev = 7
	if n, err := ascend.DeviceCount(); err != nil || n <= dev {
		t.Skipf("needs device %d", dev)
	}
	ri, err := ascend.NewRootInfo(dev)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = hccl.Init(ri, 0, 2, hccl.Options{Device: dev, InitTimeout: 300 * time.Millisecond})
	el := time.Since(start)
	if !errors.Is(err, hccl.ErrTimeout) || !strings.Contains(err.Error(), "HCCL_CONNECT_TIMEOUT") {
		t.Fatalf("Init without peers: %v", err)
	}
	if el > 3*time.Second {
		t.Fatalf("Init gave up after %v, limit 300ms", el)
	}
	// The thread is stuck inside HCCL: the device refuses further work at once.
	_, err = hccl.Init(ri, 0, 2, hccl.Options{Device: dev, InitTimeout: time.Minute})
	if !errors.Is(err, hccl.ErrPoisoned) || !strings.Contains(err.Error(), "restart the process") {
		t.Fatalf("second Init on a stuck device: %v", err)
	}
	t.Log(err)
}
