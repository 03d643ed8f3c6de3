package nccl

import (
	"bytes"
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/npu"
)

// Everything here runs without a GPU or NCCL: the root info, the error
// mapping, the library's absence, and the argument checks that every
// collective makes before anything reaches NCCL.

func TestRootInfoRoundTrip(t *testing.T) {
	var id [uniqueIDBytes]byte
	rand.Read(id[:])
	ri := encodeRootInfo(id)
	if !strings.HasPrefix(ri.String(), "nccl:") {
		t.Fatalf("root info %q does not start with nccl:", ri)
	}
	back, err := hccl.ParseRootInfo(ri.String())
	if err != nil {
		t.Fatalf("ParseRootInfo(%q): %v", ri, err)
	}
	got, err := decodeRootInfo(back)
	if err != nil || !bytes.Equal(got[:], id[:]) {
		t.Fatalf("decoded %x, %v; want %x", got, err, id)
	}
}

func TestBadRootInfo(t *testing.T) {
	for _, tc := range []struct {
		name string
		ri   hccl.RootInfo
		want string
	}{
		{"other transport", hccl.MakeRootInfo(hccl.TransportHCCL, "AAAA"), `transport "hccl"`},
		{"not base64", hccl.MakeRootInfo(hccl.TransportNCCL, "!!!"), "not an NCCL root info"},
		{"truncated", hccl.MakeRootInfo(hccl.TransportNCCL, "bm90IGEgcm9vdCBpbmZv"), "15 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeRootInfo(tc.ri)
			if !errors.Is(err, hccl.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("decodeRootInfo: %v; want ErrInvalid mentioning %q", err, tc.want)
			}
			// Init refuses it before touching NCCL or a device.
			_, err = initComm(tc.ri, 0, 1, hccl.Options{}.WithDefaults())
			var oe *hccl.OpError
			if !errors.Is(err, hccl.ErrInvalid) || !errors.As(err, &oe) || oe.Op != "Init" {
				t.Fatalf("initComm: %v; want an Init OpError wrapping ErrInvalid", err)
			}
		})
	}
}

func TestInitNeedsCUDABackend(t *testing.T) {
	var id [uniqueIDBytes]byte
	for _, be := range []npu.Backend{nil, notCUDA{}} {
		_, err := initComm(encodeRootInfo(id), 0, 1, hccl.Options{Backend: be}.WithDefaults())
		if !errors.Is(err, hccl.ErrInvalid) || !strings.Contains(err.Error(), "Options.Backend") {
			t.Errorf("Init with backend %T: %v; want ErrInvalid naming Options.Backend", be, err)
		}
	}
}

// notCUDA is a backend that is not a Device.
type notCUDA struct{ npu.Backend }

func TestVersionString(t *testing.T) {
	for _, tc := range []struct {
		code int
		want string
	}{{22803, "2.28.3"}, {21700, "2.17.0"}, {2708, "2.7.8"}, {30001, "3.0.1"}} {
		if got := VersionString(tc.code); got != tc.want {
			t.Errorf("VersionString(%d) = %q, want %q", tc.code, got, tc.want)
		}
	}
}

func TestResultError(t *testing.T) {
	for _, tc := range []struct {
		rc   int
		kind error // nil: none of the sentinels
		name string
	}{
		{ncclUnhandledCudaError, nil, "ncclUnhandledCudaError"},
		{ncclSystemError, hccl.ErrPeerLost, "ncclSystemError"},
		{ncclInternalError, nil, "ncclInternalError"},
		{ncclInvalidArgument, hccl.ErrInvalid, "ncclInvalidArgument"},
		{ncclInvalidUsage, hccl.ErrInvalid, "ncclInvalidUsage"},
		{ncclRemoteError, hccl.ErrPeerLost, "ncclRemoteError"},
		{ncclTimeout, hccl.ErrTimeout, "ncclTimeout"},
		{42, nil, "ncclResult_t 42"},
		{shimNotLoaded, hccl.ErrUnavailable, "not loaded"},
		{shimSymbolMissing, nil, "not in this NCCL"},
	} {
		err := resultError("ncclAllReduce", tc.rc, 0)
		if err == nil || !strings.Contains(err.Error(), "ncclAllReduce: ") || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("rc %d: %v; want it to name the call and %q", tc.rc, err, tc.name)
			continue
		}
		for _, k := range []error{hccl.ErrPeerLost, hccl.ErrInvalid, hccl.ErrTimeout, hccl.ErrUnavailable} {
			if errors.Is(err, k) != (k == tc.kind) {
				t.Errorf("rc %d: errors.Is(%v, %v) = %v", tc.rc, err, k, errors.Is(err, k))
			}
		}
	}
	if err := resultError("x", ncclSuccess, 0); err != nil {
		t.Errorf("ncclSuccess gave %v", err)
	}
}

// The library's absence is an error wrapping hccl.ErrUnavailable that
// names it (a child process, so that its NPUSERVE_NCCL_LIBRARY is the one
// the process loads once).
func TestUnavailableLibrary(t *testing.T) {
	const missing = "/nonexistent/npuserve-test/libnccl.so.2"
	if os.Getenv(LibraryEnv) == missing {
		err := hccl.Available(hccl.TransportNCCL)
		if !errors.Is(err, hccl.ErrUnavailable) {
			t.Fatalf("Available with %s=%s: %v; want ErrUnavailable", LibraryEnv, missing, err)
		}
		if want := missing; !strings.Contains(err.Error(), want) && !strings.Contains(err.Error(), "CGO_ENABLED=0") {
			t.Fatalf("Available: %v; want it to name %s", err, want)
		}
		if _, err := hccl.NewRootInfoFor(hccl.TransportNCCL, hccl.RootOptions{}); !errors.Is(err, hccl.ErrUnavailable) {
			t.Fatalf("NewRootInfoFor(nccl): %v; want ErrUnavailable", err)
		}
		if v := Version(); v != 0 {
			t.Fatalf("Version() = %d without a library", v)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestUnavailableLibrary$", "-test.count=1")
	cmd.Env = append(os.Environ(), LibraryEnv+"="+missing)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

// This process's own load, whatever the machine has.
func TestAvailable(t *testing.T) {
	err := Available()
	if err == nil {
		t.Logf("NCCL %s from %s", VersionString(Version()), Library())
		return
	}
	if !errors.Is(err, hccl.ErrUnavailable) || !strings.Contains(err.Error(), "libnccl") && !strings.Contains(err.Error(), Library()) {
		t.Fatalf("Available: %v; want ErrUnavailable naming %s", err, Library())
	}
}

func TestAllToAllVCounts(t *testing.T) {
	got, err := allToAllVCounts(3, 2, []int{1, 0, 4}, []int{2, 3, 0}, 5, 6)
	want := []int{2, 0, 8, 0, 2, 2, 4, 6, 0, 0, 4, 10}
	if err != nil || !equal(got, want) {
		t.Fatalf("allToAllVCounts = %v, %v; want %v", got, err, want)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// fakeDevice and fakeBuffer stand in for the CUDA backend on the paths
// that end before anything is enqueued.
type fakeDevice struct{}

func (fakeDevice) Ordinal() int          { return 0 }
func (fakeDevice) StreamHandle() uintptr { return 0 }
func (fakeDevice) BindContext() error    { return nil }
func (fakeDevice) SyncStream() error     { return nil }

type fakeBuffer struct {
	ptr uintptr
	n   int
	dev int
}

func (b *fakeBuffer) Bytes() int             { return b.n }
func (b *fakeBuffer) DevicePointer() uintptr { return b.ptr }
func (b *fakeBuffer) DeviceID() int          { return b.dev }

type hostBuffer []byte

func (b hostBuffer) Bytes() int { return len(b) }

// dev is a device tensor of n elements of dt at a made-up address.
func dev(dt npu.DType, n int, at uintptr) *npu.Tensor {
	return npu.NewTensor(&fakeBuffer{ptr: at, n: n * dt.Size()}, 0, dt, n)
}

func fakeComm(rank, size int) *comm {
	c := &comm{dev: fakeDevice{}}
	c.Init(rank, size, hccl.Options{Name: "test"}.WithDefaults())
	return c
}

func TestArgumentValidation(t *testing.T) {
	const base = 1 << 20
	f32 := func(n int) *npu.Tensor { return dev(npu.F32, n, base) }
	other := func(n int) *npu.Tensor { return dev(npu.F32, n, base+1<<16) }
	for _, tc := range []struct {
		name string
		op   func(c *comm) error
		want string
	}{
		{"nil", func(c *comm) error { return c.AllReduce(nil, hccl.Sum) }, "nil tensor"},
		{"host", func(c *comm) error {
			return c.AllReduce(npu.NewTensor(hostBuffer(make([]byte, 16)), 0, npu.F32, 4), hccl.Sum)
		}, "not in device memory"},
		{"other-gpu", func(c *comm) error {
			return c.AllReduce(npu.NewTensor(&fakeBuffer{ptr: base, n: 16, dev: 1}, 0, npu.F32, 4), hccl.Sum)
		}, "on GPU 1, the communicator on GPU 0"},
		{"freed", func(c *comm) error { return c.AllReduce(dev(npu.F32, 4, 0), hccl.Sum) }, "freed"},
		{"reduce-u8", func(c *comm) error { return c.AllReduce(dev(npu.U8, 4, base), hccl.Sum) }, "sum is not defined on U8"},
		{"reduce-fp8", func(c *comm) error { return c.AllReduce(dev(npu.F8E4M3, 4, base), hccl.Max) }, "not defined on F8_E4M3"},
		{"reduce-op", func(c *comm) error { return c.AllReduce(f32(4), hccl.ReduceOp(9)) }, "ReduceOp(9)"},
		{"allgather-size", func(c *comm) error { return c.AllGather(other(15), f32(8)) }, "Size()=2 blocks"},
		{"allgather-dtype", func(c *comm) error { return c.AllGather(dev(npu.I32, 16, base+1<<16), f32(8)) }, "dtypes differ"},
		{"allgather-overlap", func(c *comm) error {
			out := f32(16)
			return c.AllGather(out, out.Rows(0, 8)) // rank 1's block is 8..16
		}, "overlaps out"},
		{"reducescatter-size", func(c *comm) error { return c.ReduceScatter(other(8), f32(17), hccl.Sum) }, "Size()=2 blocks"},
		{"reducescatter-op", func(c *comm) error {
			return c.ReduceScatter(dev(npu.U8, 4, base+1<<16), dev(npu.U8, 8, base), hccl.Min)
		}, "not defined on U8"},
		{"alltoall-multiple", func(c *comm) error { return c.AllToAll(other(7), f32(7)) }, "multiple of Size()=2"},
		{"alltoall-overlap", func(c *comm) error { return c.AllToAll(dev(npu.F32, 8, base+4), f32(8)) }, "overlap"},
		{"alltoallv-len", func(c *comm) error { return c.AllToAllV(other(8), []int{1}, f32(8), []int{1, 1}) }, "need Size()=2 counts"},
		{"alltoallv-negative", func(c *comm) error { return c.AllToAllV(other(8), []int{1, -1}, f32(8), []int{1, 1}) }, "negative count"},
		{"alltoallv-capacity", func(c *comm) error { return c.AllToAllV(other(8), []int{4, 5}, f32(8), []int{1, 1}) }, "9 output elements"},
		{"broadcast-root", func(c *comm) error { return c.Broadcast(f32(4), 2) }, "root 2"},
		{"send-self", func(c *comm) error { return c.Send(f32(4), 1) }, "peer 1 is not another rank"},
		{"recv-range", func(c *comm) error { return c.Recv(f32(4), -1) }, "peer -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fakeComm(1, 2)
			err := tc.op(c)
			var oe *hccl.OpError
			if !errors.Is(err, hccl.ErrInvalid) || !errors.As(err, &oe) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v; want an OpError wrapping ErrInvalid mentioning %q", err, tc.want)
			}
			if oe.Rank != 1 || oe.Size != 2 || oe.Comm != "test" {
				t.Errorf("OpError names rank %d/%d of %q, want 1/2 of test", oe.Rank, oe.Size, oe.Comm)
			}
			// A failure poisons the communicator: the next call fails at once.
			if err := c.Broadcast(f32(4), 0); !errors.Is(err, hccl.ErrPoisoned) || !errors.Is(err, hccl.ErrInvalid) {
				t.Errorf("after a failure: %v; want ErrPoisoned wrapping the first failure", err)
			}
		})
	}
}

func TestAbortAndCloseIdle(t *testing.T) {
	c := fakeComm(0, 2)
	reason := errors.New("liveness monitor: rank 1 missed 3 heartbeats")
	c.Abort(reason)
	c.Abort(errors.New("second reason")) // the first one stays
	err := c.AllReduce(dev(npu.F32, 4, 1<<20), hccl.Sum)
	if !errors.Is(err, hccl.ErrPoisoned) || !errors.Is(err, reason) || strings.Contains(err.Error(), "second") {
		t.Fatalf("after Abort: %v; want ErrPoisoned wrapping the first reason", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := c.Barrier(); !errors.Is(err, hccl.ErrClosed) {
		t.Fatalf("after Close: %v; want ErrClosed", err)
	}
}
