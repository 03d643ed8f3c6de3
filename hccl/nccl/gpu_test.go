package nccl_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/hccl/hccltest"
	"github.com/npuserve/npuserve/hccl/nccl"
	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/cuda"
)

// The GPU tests: the hccl conformance suite on NCCL communicators of the
// CUDA backend, ordering against the backend's ops, timeouts and Abort.
// They skip where no GPU or NCCL is usable, unless NPUSERVE_CUDA_TEST=1
// makes that a failure; those with two ranks (one GPU each, in this
// process, one goroutine per rank) skip with fewer than two GPUs.

var _ nccl.Device = (*cuda.Backend)(nil)

var (
	gpuMu  sync.Mutex
	gpuBEs = map[int]*cuda.Backend{}
	gpuErr = map[int]error{}
)

// gpus returns backends on GPUs 0..n-1 (opened once, shared), or skips.
func gpus(t *testing.T, n int) []*cuda.Backend {
	t.Helper()
	strict := os.Getenv("NPUSERVE_CUDA_TEST") == "1"
	gpuMu.Lock()
	defer gpuMu.Unlock()
	var bes []*cuda.Backend
	for i := range n {
		if gpuBEs[i] == nil && gpuErr[i] == nil {
			gpuBEs[i], gpuErr[i] = cuda.New(i)
		}
		if err := gpuErr[i]; err != nil {
			if strict && i == 0 {
				t.Fatalf("NPUSERVE_CUDA_TEST=1 but no usable GPU: %v", err)
			}
			t.Skipf("%d ranks need %d GPUs; GPU %d: %v", n, n, i, err)
		}
		bes = append(bes, gpuBEs[i])
	}
	if err := nccl.Available(); err != nil {
		if strict {
			t.Fatalf("NPUSERVE_CUDA_TEST=1 but NCCL does not load: %v", err)
		}
		t.Skipf("NCCL does not load: %v", err)
	}
	return bes
}

// world makes size communicators, rank r on GPU r.
func world(t *testing.T, size int, opts hccl.Options) []hccltest.Rank {
	t.Helper()
	bes := gpus(t, size)
	ri, err := hccl.NewRootInfoFor(hccl.TransportNCCL, hccl.RootOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return hccltest.World(t, ri, size, func(r int) (hccltest.Rank, error) {
		o := opts
		o.Backend = bes[r]
		c, err := hccl.Init(ri, r, size, o)
		return hccltest.Rank{Comm: c, Mem: bes[r]}, err
	})
}

// ncclCaps: reductions in NCCL's order (compared with a tolerance; AllReduce
// still gives every rank the same bits), no peer named on timeout,
// failures found at the timeout.
var ncclCaps = hccltest.Caps{}

func TestGPUVersion(t *testing.T) {
	gpus(t, 1)
	v := nccl.Version()
	t.Logf("NCCL %s (%d) from %s", nccl.VersionString(v), v, nccl.Library())
	if v < 20700 {
		t.Fatalf("NCCL %s: want 2.7 or later", nccl.VersionString(v))
	}
}

func TestGPUConformance(t *testing.T) {
	for _, size := range []int{1, 2} {
		t.Run(fmt.Sprintf("size=%d", size), func(t *testing.T) {
			ranks := world(t, size, hccl.Options{Timeout: 30 * time.Second, InitTimeout: 30 * time.Second, Name: "conformance"})
			hccltest.RunCases(t, ranks, hccltest.Cases(size, ncclCaps))
		})
	}
}

// TestGPUFailures: the suite's failure cases need two or three ranks,
// one GPU each.
func TestGPUFailures(t *testing.T) {
	gpus(t, 2)
	hccltest.RunFailures(t, world, ncclCaps)
}

func f32s(v ...float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func fill(n int, v float32) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = v
	}
	return s
}

func download(t *testing.T, be *cuda.Backend, x *npu.Tensor) []float32 {
	t.Helper()
	b := make([]byte, x.Bytes())
	if err := be.Download(b, x); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, x.Numel())
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// busy enqueues about a gigabyte of copies n times on be's stream, so that
// work queued after them waits (≈0.5 ms each on an H200).
func busy(t *testing.T, be *cuda.Backend, n int) {
	t.Helper()
	a := npu.Must(be.Alloc(npu.F32, 1<<28))
	b := npu.Must(be.Alloc(npu.F32, 1<<28))
	for range n {
		be.Copy(b, a)
	}
	be.Free(a)
	be.Free(b)
}

// An op enqueued before a collective is seen by it, and one enqueued
// after sees its result, with no Sync in between: the collective runs on
// the backend's stream.
func TestGPUOrdering(t *testing.T) {
	ranks := world(t, 1, hccl.Options{Timeout: 30 * time.Second})
	be, c := gpus(t, 1)[0], ranks[0].Comm
	const n = 4099
	in := npu.Must(be.Alloc(npu.F32, n))
	out := npu.Must(be.Alloc(npu.F32, n))
	res := npu.Must(be.Alloc(npu.F32, n))
	defer be.Free(in)
	defer be.Free(out)
	defer be.Free(res)
	if err := be.Sync(); err != nil {
		t.Fatal(err)
	}
	busy(t, be, 40) // delays the Fill: a collective on another stream would copy zeros
	be.Fill(in, 3)
	if err := c.AllGather(out, in); err != nil {
		t.Fatal(err)
	}
	be.Scale(res, out, 2)
	got := download(t, be, res)
	for i, v := range got {
		if v != 6 {
			t.Fatalf("element %d = %v, want 6 (Fill 3, AllGather, Scale 2)", i, v)
		}
	}
	// And an all-reduce (in place, rank 1's identity) of the same data.
	be.Fill(in, 5)
	if err := c.AllReduce(in, hccl.Sum); err != nil {
		t.Fatal(err)
	}
	if got := download(t, be, in); got[0] != 5 || got[n-1] != 5 {
		t.Fatalf("AllReduce of 5 on one rank: %v ... %v", got[0], got[n-1])
	}
}

func TestGPUHostTensorRejected(t *testing.T) {
	ranks := world(t, 1, hccl.Options{})
	host := npu.NewTensor(hostBuffer(make([]byte, 64)), 0, npu.F32, 16)
	err := ranks[0].Comm.AllReduce(host, hccl.Sum)
	if !errors.Is(err, hccl.ErrInvalid) || !strings.Contains(err.Error(), "not in device memory") {
		t.Fatalf("AllReduce on a host tensor: %v", err)
	}
}

type hostBuffer []byte

func (b hostBuffer) Bytes() int { return len(b) }

func TestGPUWrongDevice(t *testing.T) {
	bes := gpus(t, 2)
	ranks := world(t, 1, hccl.Options{})
	x := npu.Must(bes[1].Alloc(npu.F32, 4))
	defer bes[1].Free(x)
	err := ranks[0].Comm.AllReduce(x, hccl.Sum)
	if !errors.Is(err, hccl.ErrInvalid) || !strings.Contains(err.Error(), "on GPU 1") {
		t.Fatalf("AllReduce on another GPU's tensor: %v", err)
	}
}

// Init of two ranks where only one comes fails at the init timeout.
func TestGPUInitTimeout(t *testing.T) {
	be := gpus(t, 1)[0]
	ri, err := hccl.NewRootInfoFor(hccl.TransportNCCL, hccl.RootOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const limit = 2 * time.Second
	start := time.Now()
	c, err := hccl.Init(ri, 0, 2, hccl.Options{InitTimeout: limit, Backend: be})
	el := time.Since(start)
	if err == nil {
		c.Close()
		t.Fatal("Init of 2 ranks with one present succeeded")
	}
	if !errors.Is(err, hccl.ErrTimeout) || el < limit*9/10 || el > limit+5*time.Second {
		t.Fatalf("after %v: %v; want ErrTimeout after about %v", el, err, limit)
	}
	t.Logf("after %v: %v", el.Round(time.Millisecond), err)
}

// Abort from another goroutine stops an operation in flight promptly;
// Abort when idle poisons at once. The stream stays usable.
func TestGPUAbort(t *testing.T) {
	be := gpus(t, 1)[0]
	t.Run("in-flight", func(t *testing.T) {
		c := world(t, 1, hccl.Options{Timeout: 30 * time.Second})[0].Comm
		x := npu.Must(be.FromHost(npu.F32, f32s(1, 2, 3), 3))
		defer be.Free(x)
		reason := errors.New("liveness monitor: node B missed 3 heartbeats")
		busy(t, be, 600) // ≈ 0.3 s of copies before the collective
		go func() {
			time.Sleep(20 * time.Millisecond)
			c.Abort(reason)
		}()
		start := time.Now()
		err := c.AllReduce(x, hccl.Sum)
		el := time.Since(start)
		if !errors.Is(err, hccl.ErrPoisoned) || !errors.Is(err, reason) {
			t.Fatalf("aborted AllReduce after %v: %v; want ErrPoisoned wrapping the reason", el, err)
		}
		// The wait ends within a poll slice of the Abort (plus
		// ncclCommAbort's own time); the copies drain in the background.
		if el > time.Second {
			t.Errorf("Abort took effect only after %v", el)
		}
		t.Logf("after %v: %v", el.Round(time.Millisecond), err)
		checkHealthy(t, be)
	})
	t.Run("idle", func(t *testing.T) {
		c := world(t, 1, hccl.Options{})[0].Comm
		reason := errors.New("peer gone")
		c.Abort(reason)
		start := time.Now()
		if err := c.Barrier(); !errors.Is(err, hccl.ErrPoisoned) || !errors.Is(err, reason) || time.Since(start) > 100*time.Millisecond {
			t.Fatalf("Barrier after Abort: %v after %v", err, time.Since(start))
		}
		checkHealthy(t, be)
	})
}

// checkHealthy: the backend's stream still works and a new communicator
// runs a collective.
func checkHealthy(t *testing.T, be *cuda.Backend) {
	t.Helper()
	if err := be.Sync(); err != nil {
		t.Fatalf("the backend after an aborted communicator: %v", err)
	}
	c := world(t, 1, hccl.Options{Timeout: 30 * time.Second})[0].Comm
	x := npu.Must(be.FromHost(npu.F32, f32s(fill(9, 4)...), 9))
	defer be.Free(x)
	if err := c.AllReduce(x, hccl.Max); err != nil {
		t.Fatalf("a fresh communicator: %v", err)
	}
	if got := download(t, be, x); got[8] != 4 {
		t.Fatalf("a fresh communicator's AllReduce: %v", got)
	}
}

// A collective queued behind more work than its timeout fails with
// ErrTimeout near the limit and poisons the communicator. (It is last:
// it aborts NCCL with a kernel still queued, the harshest case.)
func TestGPUTimeout(t *testing.T) {
	be := gpus(t, 1)[0]
	const limit = 20 * time.Millisecond
	c := world(t, 1, hccl.Options{Timeout: limit, Name: "tp"})[0].Comm
	x := npu.Must(be.FromHost(npu.F32, f32s(1, 2, 3), 3))
	defer be.Free(x)
	if err := be.Sync(); err != nil {
		t.Fatal(err)
	}
	busy(t, be, 600) // ≈ 0.3 s
	start := time.Now()
	err := c.AllReduce(x, hccl.Sum)
	el := time.Since(start)
	var oe *hccl.OpError
	switch {
	case err == nil:
		t.Fatalf("AllReduce behind 0.3 s of work with a %v limit succeeded after %v", limit, el)
	case !errors.Is(err, hccl.ErrTimeout) || !errors.As(err, &oe):
		t.Fatalf("after %v: %v; want an OpError wrapping ErrTimeout", el, err)
	case !strings.Contains(err.Error(), "hccl[tp] rank 0/1: AllReduce #1"):
		t.Errorf("error does not name the communicator, rank and operation: %v", err)
	case oe.Elapsed < limit:
		t.Errorf("failed after %v, before the %v limit", oe.Elapsed, limit)
	}
	t.Logf("after %v: %v", el.Round(time.Millisecond), err)
	start = time.Now()
	if err := c.Barrier(); !errors.Is(err, hccl.ErrPoisoned) || time.Since(start) > 100*time.Millisecond {
		t.Errorf("Barrier after the timeout: %v after %v; want ErrPoisoned at once", err, time.Since(start))
	}
	checkHealthy(t, be)
}
