package hccl_test

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/hccl/hccltest"
	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/cpu"
)

// tcpCaps: the TCP transport reduces in the documented order, names the
// missing peer and reports broken or mismatched peers at once.
var tcpCaps = hccltest.Caps{ExactReduce: true, NamesPeer: true, FastFailure: true}

var hostMem = cpu.New(1)

// tcpWorld makes size TCP communicators over loopback in this process.
func tcpWorld(t *testing.T, size int, opts hccl.Options) []hccltest.Rank {
	t.Helper()
	ri, err := hccl.NewRootInfo("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	comms, errs := initAll(ri, size, opts)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("Init rank %d: %v", r, err)
		}
	}
	ranks := make([]hccltest.Rank, size)
	for r, c := range comms {
		ranks[r] = hccltest.Rank{Comm: c, Mem: hostMem}
		t.Cleanup(func() { c.Close() })
	}
	return ranks
}

// initAll runs Init for every rank concurrently.
func initAll(ri hccl.RootInfo, size int, opts hccl.Options) ([]hccl.Comm, []error) {
	comms := make([]hccl.Comm, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = hccl.Init(ri, r, size, opts)
		}()
	}
	wg.Wait()
	return comms, errs
}

func TestConformance(t *testing.T) {
	algos := []hccl.Algorithm{hccl.AlgoDirect, hccl.AlgoReduceScatterAllGather}
	for size := 1; size <= 4; size++ {
		for _, algo := range algos {
			if size == 1 && algo != hccl.AlgoDirect {
				continue
			}
			t.Run(fmt.Sprintf("size=%d/%v", size, algo), func(t *testing.T) {
				t.Parallel()
				ranks := tcpWorld(t, size, hccl.Options{Timeout: 20 * time.Second, Algorithm: algo})
				cases := hccltest.Cases(size, tcpCaps)
				if algo != hccl.AlgoDirect { // only AllReduce depends on the algorithm
					cases = slices.DeleteFunc(cases, func(c hccltest.Case) bool {
						return !strings.HasPrefix(c.Name, "AllReduce/") && c.Name != "Sequence"
					})
				}
				hccltest.RunCases(t, ranks, cases)
			})
		}
	}
}

func TestFailures(t *testing.T) {
	hccltest.RunFailures(t, tcpWorld, tcpCaps)
}

func TestAutoAlgorithmMatchesBoth(t *testing.T) {
	// Auto switches algorithm at DirectThresholdBytes; results must not
	// depend on the choice, on either side of the threshold.
	n := hccl.DirectThresholdBytes/4 + 1
	var results [][]byte
	for _, algo := range []hccl.Algorithm{hccl.AlgoAuto, hccl.AlgoDirect, hccl.AlgoReduceScatterAllGather} {
		ranks := tcpWorld(t, 3, hccl.Options{Timeout: 10 * time.Second, Algorithm: algo})
		outs := make([][]byte, 3)
		var wg sync.WaitGroup
		for r, rk := range ranks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				x := npu.Must(hostMem.Alloc(npu.F32, n))
				f := cpu.F32(x)
				for i := range f {
					f[i] = float32(i%97)*0.1 + float32(r)*1e-3
				}
				if err := rk.Comm.AllReduce(x, hccl.Sum); err != nil {
					t.Error(err)
					return
				}
				outs[r] = make([]byte, x.Bytes())
				hostMem.Download(outs[r], x)
			}()
		}
		wg.Wait()
		results = append(results, outs[0], outs[1], outs[2])
	}
	for i := 1; i < len(results); i++ {
		if string(results[i]) != string(results[0]) {
			t.Fatalf("result %d differs from result 0: algorithms or ranks disagree", i)
		}
	}
}

func TestDeviceTensorRejected(t *testing.T) {
	ranks := tcpWorld(t, 1, hccl.Options{})
	dev := npu.NewTensor(fakeDeviceBuffer(64), 0, npu.F32, 16)
	err := ranks[0].Comm.AllReduce(dev, hccl.Sum)
	if !errors.Is(err, hccl.ErrInvalid) || !strings.Contains(err.Error(), "not on the CPU backend") {
		t.Fatalf("AllReduce on a device tensor: %v, want ErrInvalid naming the CPU backend", err)
	}
}

type fakeDeviceBuffer int

func (b fakeDeviceBuffer) Bytes() int { return int(b) }

func TestRootInfoString(t *testing.T) {
	ri, err := hccl.NewRootInfo("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ri.Release()
	back, err := hccl.ParseRootInfo(ri.String())
	if err != nil || back != ri {
		t.Fatalf("ParseRootInfo(%q) = %v, %v", ri.String(), back, err)
	}
	if !strings.HasPrefix(ri.String(), "tcp://127.0.0.1:") || ri.Transport() != "tcp" {
		t.Fatalf("unexpected root info %q", ri)
	}
	bad := map[string]string{
		"empty":         "",
		"no transport":  "127.0.0.1:29500",
		"no session":    "tcp://127.0.0.1:29500",
		"short session": "tcp://127.0.0.1:29500/abcd",
		"not hex":       "tcp://127.0.0.1:29500/" + strings.Repeat("z", 32),
		"port 0":        "tcp://127.0.0.1:0/" + hccl.NewSession(),
		"no host":       "tcp://:29500/" + hccl.NewSession(),
	}
	for name, s := range bad {
		t.Run(name, func(t *testing.T) {
			if _, err := hccl.ParseRootInfo(s); !errors.Is(err, hccl.ErrInvalid) {
				t.Fatalf("ParseRootInfo(%q) = %v, want ErrInvalid", s, err)
			}
		})
	}
	// Unspecified listen host: advertise a concrete address.
	ri2, err := hccl.NewRootInfo("0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ri2.Release()
	if strings.Contains(ri2.String(), "0.0.0.0") {
		t.Fatalf("root info advertises the unspecified address: %q", ri2)
	}
}

func TestTransportAvailability(t *testing.T) {
	if err := hccl.Available("tcp"); err != nil {
		t.Fatalf("tcp unavailable: %v", err)
	}
	// This test binary does not link hccl/ascend.
	err := hccl.Available("hccl")
	if !errors.Is(err, hccl.ErrUnavailable) || !strings.Contains(err.Error(), "hccl/ascend") {
		t.Fatalf("Available(hccl) without the binding: %v", err)
	}
	ri := hccl.MakeRootInfo("hccl", "AAAA")
	if _, err := hccl.Init(ri, 0, 1, hccl.Options{}); !errors.Is(err, hccl.ErrUnavailable) {
		t.Fatalf("Init with an HCCL root info and no binding: %v", err)
	}
}

// TestInitFailures: every misconfiguration ends Init on every rank with a
// clear error, well before the init timeout unless a rank is missing.
func TestInitFailures(t *testing.T) {
	const initTimeout = 800 * time.Millisecond
	opts := hccl.Options{InitTimeout: initTimeout, Timeout: time.Second}
	type rankSpec struct {
		rank, size int
		name       string
		otherRoot  bool // uses a root info with another session
	}
	cases := map[string]struct {
		ranks   []rankSpec
		kind    error
		wantAll []string // every failing rank's error contains these
		slow    bool     // failure only at the init timeout
	}{
		"rank never joins": {
			ranks:   []rankSpec{{0, 3, "", false}, {1, 3, "", false}},
			kind:    hccl.ErrTimeout,
			wantAll: []string{"rank 2", "Init"},
			slow:    true,
		},
		"size mismatch": {
			ranks:   []rankSpec{{0, 2, "", false}, {1, 3, "", false}},
			kind:    hccl.ErrBootstrap,
			wantAll: []string{"size mismatch", "size 3", "size 2"},
		},
		"duplicate rank": {
			ranks:   []rankSpec{{0, 3, "", false}, {1, 3, "", false}, {1, 3, "", false}},
			kind:    hccl.ErrBootstrap,
			wantAll: []string{"duplicate rank", "rank 1"},
		},
		"name mismatch": {
			ranks:   []rankSpec{{0, 2, "tp", false}, {1, 2, "ep", false}},
			kind:    hccl.ErrBootstrap,
			wantAll: []string{"name mismatch", `"ep"`, `"tp"`},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ri, err := hccl.NewRootInfo("127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			errs := make([]error, len(tc.ranks))
			took := make([]time.Duration, len(tc.ranks))
			var wg sync.WaitGroup
			for i, rs := range tc.ranks {
				wg.Add(1)
				go func() {
					defer wg.Done()
					o := opts
					o.Name = rs.name
					start := time.Now()
					c, err := hccl.Init(ri, rs.rank, rs.size, o)
					took[i] = time.Since(start)
					if c != nil {
						c.Close()
					}
					errs[i] = err
				}()
			}
			wg.Wait()
			for i, err := range errs {
				switch {
				case err == nil:
					t.Errorf("rank spec %d: Init succeeded", i)
				case !errors.Is(err, tc.kind):
					t.Errorf("rank spec %d: %v does not wrap %v", i, err, tc.kind)
				case !tc.slow && took[i] > initTimeout/2:
					t.Errorf("rank spec %d: failed only after %v: %v", i, took[i], err)
				case took[i] > initTimeout+3*time.Second:
					t.Errorf("rank spec %d: failed after %v, timeout %v", i, took[i], initTimeout)
				default:
					for _, w := range tc.wantAll {
						if !strings.Contains(err.Error(), w) {
							t.Errorf("rank spec %d: error lacks %q: %v", i, w, err)
						}
					}
					t.Logf("rank spec %d after %v: %v", i, took[i].Round(time.Millisecond), err)
				}
			}
		})
	}
}

// TestWrongSessionRejected: a rank holding another launch's root info is
// rejected at once, and the right ranks still form their communicator.
func TestWrongSessionRejected(t *testing.T) {
	ri, err := hccl.NewRootInfo("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(ri.String(), "tcp://")
	addr = addr[:strings.LastIndex(addr, "/")]
	stale, err := hccl.ParseRootInfo("tcp://" + addr + "/" + hccl.NewSession())
	if err != nil {
		t.Fatal(err)
	}
	opts := hccl.Options{InitTimeout: 5 * time.Second, Timeout: 5 * time.Second}
	var wg sync.WaitGroup
	var good []hccl.Comm
	var mu sync.Mutex
	join := func(r int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := hccl.Init(ri, r, 2, opts)
			if err != nil {
				t.Errorf("rank %d: %v", r, err)
				return
			}
			mu.Lock()
			good = append(good, c)
			mu.Unlock()
		}()
	}
	// The stale rank must reach the root while the root still waits for
	// rank 1: once the right ranks have formed their communicator the root
	// stops listening and a late stale rank can only time out.
	join(0)
	start := time.Now()
	_, err = hccl.Init(stale, 1, 2, opts)
	if !errors.Is(err, hccl.ErrBootstrap) || !strings.Contains(err.Error(), "session mismatch") {
		t.Errorf("stale session: %v, want a session mismatch", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("stale session rejected only after %v", el)
	}
	join(1)
	wg.Wait()
	for _, c := range good {
		c.Close()
	}
	if len(good) != 2 {
		t.Fatalf("the right ranks did not form a communicator")
	}
}

// TestStrayConnectionIgnored: garbage on the root's port (a port scanner, a
// health check) does not disturb Init.
func TestStrayConnectionIgnored(t *testing.T) {
	ri, err := hccl.NewRootInfo("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(ri.String(), "tcp://")
	addr = addr[:strings.LastIndex(addr, "/")]
	// The strays connect before any rank starts, so they are first in the
	// root's accept queue.
	closeStrays, err := sendGarbage(addr)
	if err != nil {
		t.Fatal(err)
	}
	comms, errs := initAll(ri, 3, hccl.Options{InitTimeout: 5 * time.Second})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		} else {
			defer comms[r].Close()
		}
	}
	if err := closeStrays(); err != nil {
		t.Fatalf("stray connection: %v", err)
	}
}

func TestRootUnreachable(t *testing.T) {
	// A port nobody listens on: the rank retries until its init timeout and
	// then names the root.
	ri, err := hccl.NewRootInfo("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ri.Release() // nobody listens any more
	start := time.Now()
	_, err = hccl.Init(ri, 1, 2, hccl.Options{InitTimeout: 300 * time.Millisecond})
	el := time.Since(start)
	if !errors.Is(err, hccl.ErrTimeout) || !strings.Contains(err.Error(), "root (rank 0)") {
		t.Fatalf("unreachable root: %v", err)
	}
	if el < 250*time.Millisecond || el > 3*time.Second {
		t.Fatalf("gave up after %v, want about the 300ms init timeout", el)
	}
	t.Log(err)
}

// TestRootFromLauncher: a launcher that builds the root info itself
// (fixed port, its own session) hands it to a rank 0 that listens itself.
func TestRootFromLauncher(t *testing.T) {
	probe, err := hccl.NewRootInfo("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(probe.String(), "tcp://")
	addr = addr[:strings.LastIndex(addr, "/")]
	probe.Release()
	ri, err := hccl.ParseRootInfo("tcp://" + addr + "/" + hccl.NewSession())
	if err != nil {
		t.Fatal(err)
	}
	comms, errs := initAll(ri, 2, hccl.Options{InitTimeout: 5 * time.Second})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		defer comms[r].Close()
	}
}

// TestWrapAround: integer sums wrap (two's complement), as documented.
func TestWrapAround(t *testing.T) {
	ranks := tcpWorld(t, 2, hccl.Options{})
	var wg sync.WaitGroup
	for r, rk := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := npu.Must(hostMem.Alloc(npu.I32, 2))
			v := cpu.I32(x)
			v[0], v[1] = 2147483000, -2147483000
			if err := rk.Comm.AllReduce(x, hccl.Sum); err != nil {
				t.Error(err)
				return
			}
			if v[0] != -1296 || v[1] != 1296 {
				t.Errorf("rank %d: wrapped sums %v, want [-1296 1296]", r, v)
			}
		}()
	}
	wg.Wait()
}

// BenchmarkAlgorithms compares the AllReduce algorithms by size, all ranks
// in this process over loopback: where AlgoAuto should switch.
func BenchmarkAlgorithms(b *testing.B) {
	for _, size := range []int{2, 4} {
		for _, kib := range []int{16, 64, 256, 1024} {
			for _, algo := range []hccl.Algorithm{hccl.AlgoDirect, hccl.AlgoReduceScatterAllGather} {
				b.Run(fmt.Sprintf("size=%d/%dKiB/%v", size, kib, algo), func(b *testing.B) {
					ri, err := hccl.NewRootInfo("127.0.0.1:0")
					if err != nil {
						b.Fatal(err)
					}
					comms, errs := initAll(ri, size, hccl.Options{Algorithm: algo})
					for r, err := range errs {
						if err != nil {
							b.Fatal(err)
						}
						defer comms[r].Close()
					}
					xs := make([]*npu.Tensor, size)
					for r := range xs {
						xs[r] = npu.Must(hostMem.Alloc(npu.F32, kib<<8))
					}
					b.SetBytes(int64(kib) << 10)
					b.ResetTimer()
					var wg sync.WaitGroup
					for r := range size {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for range b.N {
								if err := comms[r].AllReduce(xs[r], hccl.Sum); err != nil {
									b.Error(err)
									return
								}
							}
						}()
					}
					wg.Wait()
				})
			}
		}
	}
}

// sendGarbage opens two stray connections to addr, one speaking HTTP and
// one silent. finish checks that the server closed the HTTP one and hangs
// up the other.
func sendGarbage(addr string) (finish func() error, err error) {
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		silent.Close()
		return nil, err
	}
	if _, err := c.Write([]byte("GET / HTTP/1.0\r\n\r\n")); err != nil {
		return nil, err
	}
	return func() error {
		defer silent.Close()
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := c.Read(make([]byte, 1))
		if n > 0 || isTimeoutErr(err) {
			return fmt.Errorf("the root answered or kept a stray connection open: %d bytes, %v", n, err)
		}
		return nil // closed (EOF or reset)
	}, nil
}

func isTimeoutErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
