//go:build linux

package hccl_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/hccl/hccltest"
	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/cpu"
)

// Multi-process tests re-execute this test binary with childEnv naming the
// child's role; TestMain hands such processes to runChild instead of the
// test runner. The child's parameters travel in the environment too.
const (
	childEnv = "NPUSERVE_HCCL_TEST_CHILD"
	envRoot  = "NPUSERVE_HCCL_TEST_ROOT"
	envRank  = "NPUSERVE_HCCL_TEST_RANK"
	envSize  = "NPUSERVE_HCCL_TEST_SIZE"
	envQuick = "NPUSERVE_HCCL_TEST_QUICK"
	envBench = "NPUSERVE_HCCL_TEST_STREAM" // benchmark: the parent's raw TCP stream address
)

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(runChild(role))
	}
	os.Exit(m.Run())
}

// childOpts are the options every child and its parent use.
var childOpts = hccl.Options{Timeout: 10 * time.Second, InitTimeout: 20 * time.Second, Name: "proc"}

func runChild(role string) int {
	ri, err := hccl.ParseRootInfo(os.Getenv(envRoot))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	rank, _ := strconv.Atoi(os.Getenv(envRank))
	size, _ := strconv.Atoi(os.Getenv(envSize))
	opts := childOpts
	if role == "survivor" || role == "victim" {
		opts.Timeout = 5 * time.Second
	}
	c, err := hccl.Init(ri, rank, size, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer c.Close()
	switch role {
	case "conformance":
		fails := hccltest.RunRank(c, hostMem, procCases(size, os.Getenv(envQuick) != ""))
		for _, f := range fails {
			fmt.Fprintln(os.Stderr, f)
		}
		if len(fails) > 0 {
			return 1
		}
		return 0
	case "victim": // one collective, then wait to be killed
		if err := oneAllReduce(c); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println("ready")
		time.Sleep(time.Minute)
		return 4
	case "survivor": // one collective, then one that the victim's death must end
		if err := oneAllReduce(c); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println("ready")
		err := oneAllReduce(c)
		fmt.Println(err)
		if err == nil || !(errors.Is(err, hccl.ErrPeerLost) || errors.Is(err, hccl.ErrPeerAborted)) {
			return 1
		}
		return 0
	case "bench":
		return benchChild(c)
	}
	fmt.Fprintln(os.Stderr, "unknown role", role)
	return 2
}

func oneAllReduce(c hccl.Comm) error {
	x := npu.Must(hostMem.Alloc(npu.F32, 1024))
	return c.AllReduce(x, hccl.Sum)
}

// procCases is the conformance list for multi-process runs; quick keeps
// F32 and BF16 (the network-namespace test runs it).
func procCases(size int, quick bool) []hccltest.Case {
	all := hccltest.Cases(size, tcpCaps)
	if !quick {
		return all
	}
	var keep []hccltest.Case
	for _, c := range all {
		if strings.Contains(c.Name, "/F32/") || strings.Contains(c.Name, "/BF16/") || !strings.Contains(c.Name, "/") {
			keep = append(keep, c)
		}
	}
	return keep
}

// spawn starts this test binary as rank of the communicator ri in role,
// optionally under a wrapper command (ip netns exec …). The child is killed
// when the test ends or this process dies.
func spawn(t testing.TB, role string, ri hccl.RootInfo, rank, size int, env []string, wrapper ...string) *hccltest.Child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := append(append([]string{}, wrapper...), exe, "-test.run=^$")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), childEnv+"="+role, envRoot+"="+ri.String(),
		envRank+"="+strconv.Itoa(rank), envSize+"="+strconv.Itoa(size))
	cmd.Env = append(cmd.Env, env...)
	return hccltest.StartChild(t, cmd)
}

// TestMultiProcess runs the whole conformance list across three processes:
// this one as rank 0 and two re-executed children.
func TestMultiProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	runProcs(t, "127.0.0.1:0", 3, false)
}

func runProcs(t *testing.T, listen string, size int, quick bool, wrapper ...string) {
	ri, err := hccl.NewRootInfo(listen)
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	if quick {
		env = append(env, envQuick+"=1")
	}
	kids := make([]*hccltest.Child, size)
	for r := 1; r < size; r++ {
		kids[r] = spawn(t, "conformance", ri, r, size, env, wrapper...)
	}
	c, err := hccl.Init(ri, 0, size, childOpts)
	if err != nil {
		for r := 1; r < size; r++ {
			kids[r].Wait(t, 30*time.Second)
			t.Logf("rank %d stderr: %s", r, kids[r].Stderr.String())
		}
		t.Fatal(err)
	}
	fails := hccltest.RunRank(c, hostMem, procCases(size, quick))
	c.Close()
	for _, f := range fails {
		t.Error(f)
	}
	for r := 1; r < size; r++ {
		if err, _ := kids[r].Wait(t, 60*time.Second); err != nil {
			t.Errorf("rank %d (pid %d): %v\n%s", r, kids[r].Cmd.Process.Pid, err, kids[r].Stderr.String())
		}
	}
}

// TestKilledPeer: kill -9 one rank between collectives; the others' next
// collective fails fast (well inside the 5 s timeout) naming it, and no
// process hangs.
func TestKilledPeer(t *testing.T) {
	ri, err := hccl.NewRootInfo("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	victim := spawn(t, "victim", ri, 1, 3, nil)
	survivor := spawn(t, "survivor", ri, 2, 3, nil)
	opts := childOpts
	opts.Timeout = 5 * time.Second
	c, err := hccl.Init(ri, 0, 3, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := oneAllReduce(c); err != nil {
		t.Fatal(err)
	}
	for _, k := range []*hccltest.Child{victim, survivor} {
		if line := k.Line(10 * time.Second); line != "ready" {
			t.Fatalf("child not ready: %q\n%s", line, k.Stderr.String())
		}
	}
	if err := victim.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	err = oneAllReduce(c)
	el := time.Since(killed)
	if err == nil {
		t.Fatal("AllReduce with a killed peer succeeded")
	}
	if !errors.Is(err, hccl.ErrPeerLost) && !errors.Is(err, hccl.ErrPeerAborted) || !strings.Contains(err.Error(), "rank 1") {
		t.Errorf("rank 0: want a lost peer naming rank 1, got %v", err)
	}
	if el > 2*time.Second {
		t.Errorf("rank 0 noticed the dead peer only after %v", el)
	}
	t.Logf("rank 0 after %v: %v", el.Round(time.Millisecond), err)
	msg := survivor.Line(10 * time.Second)
	if err, _ := survivor.Wait(t, 10*time.Second); err != nil {
		t.Errorf("survivor: %v: %s\n%s", err, msg, survivor.Stderr.String())
	}
	t.Logf("rank 2: %s", msg)
	if !strings.Contains(msg, "rank 1") {
		t.Errorf("survivor's error does not name the dead rank 1: %s", msg)
	}
}

// TestNetNamespaces runs ranks 1 and 2 in their own network namespace,
// joined to this one by a veth pair: the ranks reach each other only over
// addresses of a different "host", as on two nodes.
func TestNetNamespaces(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	ipCmd, err := exec.LookPath("ip")
	if err != nil || os.Geteuid() != 0 {
		t.Skip("network namespaces need root and iproute2's ip")
	}
	pid := os.Getpid()
	ns := fmt.Sprintf("npuhccl%d", pid)
	vethA, vethB := fmt.Sprintf("nh%da", pid%1000000), fmt.Sprintf("nh%db", pid%1000000)
	subnet := fmt.Sprintf("198.%d.%d", 18+pid%2, (pid/2)%256) // RFC 2544 benchmarking range: unlikely to clash
	ip := func(args ...string) error {
		out, err := exec.Command(ipCmd, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := ip("netns", "add", ns); err != nil {
		t.Skipf("cannot create a network namespace here: %v", err)
	}
	t.Cleanup(func() { ip("netns", "del", ns) })
	steps := [][]string{
		{"link", "add", vethA, "type", "veth", "peer", "name", vethB, "netns", ns},
		{"addr", "add", subnet + ".1/24", "dev", vethA},
		{"link", "set", vethA, "up"},
		{"-n", ns, "addr", "add", subnet + ".2/24", "dev", vethB},
		{"-n", ns, "link", "set", vethB, "up"},
		{"-n", ns, "link", "set", "lo", "up"},
	}
	for i, s := range steps {
		if err := ip(s...); err != nil {
			t.Skipf("cannot set up the veth pair: %v", err)
		}
		if i == 0 {
			t.Cleanup(func() { ip("link", "del", vethA) })
		}
	}
	runProcs(t, subnet+".1:0", 3, true, ipCmd, "netns", "exec", ns)
}

// Benchmarks: two processes on loopback (this one as rank 0, one child),
// collectives against a plain TCP stream between the same processes.
// Report: go test -run '^$' -bench . ./hccl/

const (
	benchExit = iota
	benchAllReduce
	benchAllGather
	benchStream
)

type benchPair struct {
	c      hccl.Comm
	stream net.Conn
	kid    *hccltest.Child
}

var (
	benchOnce sync.Once
	benchP    *benchPair
	benchErr  error
)

func startBenchPair(b *testing.B) *benchPair {
	benchOnce.Do(func() {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			benchErr = err
			return
		}
		defer ln.Close()
		ri, err := hccl.NewRootInfo("127.0.0.1:0")
		if err != nil {
			benchErr = err
			return
		}
		kid := spawn(b, "bench", ri, 1, 2, []string{envBench + "=" + ln.Addr().String()})
		opts := childOpts
		opts.Timeout = time.Minute
		c, err := hccl.Init(ri, 0, 2, opts)
		if err != nil {
			benchErr = err
			return
		}
		ln.(*net.TCPListener).SetDeadline(time.Now().Add(20 * time.Second))
		s, err := ln.Accept()
		if err != nil {
			benchErr = err
			return
		}
		benchP = &benchPair{c: c, stream: s, kid: kid}
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return benchP
}

// command tells the child what to run next (through the communicator).
func (p *benchPair) command(b *testing.B, op, bytes, iters int) {
	cmd := npu.Must(hostMem.Alloc(npu.I32, 3))
	v := cpu.I32(cmd)
	v[0], v[1], v[2] = int32(op), int32(bytes), int32(iters)
	if err := p.c.Broadcast(cmd, 0); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkLoopback(b *testing.B) {
	p := startBenchPair(b)
	sizes := []struct {
		label string
		n     int
	}{{"4KiB", 4 << 10}, {"256KiB", 256 << 10}, {"1MiB", 1 << 20}, {"4MiB", 4 << 20}, {"16MiB", 16 << 20}, {"64MiB", 64 << 20}}
	for _, sz := range sizes {
		n := sz.n
		b.Run("AllReduce/"+sz.label, func(b *testing.B) {
			x := npu.Must(hostMem.Alloc(npu.F32, n/4))
			p.command(b, benchAllReduce, n, b.N)
			b.SetBytes(int64(n))
			b.ResetTimer()
			for range b.N {
				if err := p.c.AllReduce(x, hccl.Sum); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
		b.Run("AllGather/"+sz.label, func(b *testing.B) {
			out := npu.Must(hostMem.Alloc(npu.F32, n/4))
			in := npu.Must(hostMem.Alloc(npu.F32, n/8))
			p.command(b, benchAllGather, n, b.N)
			b.SetBytes(int64(n))
			b.ResetTimer()
			for range b.N {
				if err := p.c.AllGather(out, in); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
		b.Run("TCPStream/"+sz.label, func(b *testing.B) {
			buf := make([]byte, n)
			p.command(b, benchStream, n, b.N)
			b.SetBytes(int64(n))
			b.ResetTimer()
			for range b.N {
				if _, err := p.stream.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			var ack [1]byte
			if _, err := io.ReadFull(p.stream, ack[:]); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
	}
}

// benchChild mirrors BenchmarkLoopback on rank 1.
func benchChild(c hccl.Comm) int {
	s, err := net.Dial("tcp", os.Getenv(envBench))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	for {
		cmd := npu.Must(hostMem.Alloc(npu.I32, 3))
		if err := c.Broadcast(cmd, 0); err != nil {
			return 0 // the parent finished and closed
		}
		v := cpu.I32(cmd)
		op, n, iters := int(v[0]), int(v[1]), int(v[2])
		var err error
		switch op {
		case benchExit:
			return 0
		case benchAllReduce:
			x := npu.Must(hostMem.Alloc(npu.F32, n/4))
			for i := 0; i < iters && err == nil; i++ {
				err = c.AllReduce(x, hccl.Sum)
			}
		case benchAllGather:
			out := npu.Must(hostMem.Alloc(npu.F32, n/4))
			in := npu.Must(hostMem.Alloc(npu.F32, n/8))
			for i := 0; i < iters && err == nil; i++ {
				err = c.AllGather(out, in)
			}
		case benchStream:
			buf := make([]byte, n)
			for i := 0; i < iters && err == nil; i++ {
				_, err = io.ReadFull(s, buf)
			}
			if err == nil {
				_, err = s.Write([]byte{1})
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
}
