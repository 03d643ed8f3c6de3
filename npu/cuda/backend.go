package cuda

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strings"

	"github.com/npuserve/npuserve/npu"
)

// Backend is one NVIDIA GPU: its primary context, one non-blocking stream
// on which every op, copy and (stream-ordered) allocation is enqueued in
// call order, the compiled kernels and a cuBLASLt handle.
//
// Threads: CUDA makes a context current per OS thread. Rather than pin a
// goroutine, every shim call makes the backend's context current on the
// thread it runs on (a thread-local read when it already is); a goroutine
// never changes threads inside one C call. Like every npu.Backend it is
// driven by one goroutine at a time.
//
// Errors: a launch or copy that fails when enqueued, a fault reported by
// the stream, and an index, slot or layout error found by a kernel in
// device data (DeviceError) are held and returned once by the next Sync,
// Download or RunOnStream. A fault inside a kernel (an illegal address)
// is fatal to a CUDA context: every later call reports it.
type Backend struct {
	prof    *profiler // kernel profile (NPUSERVE_CUDA_PROFILE=1), else nil
	ordinal int       // device index on the host (OpenOptions.Device)
	dev     int       // CUdevice
	ctx     uintptr
	stream  uintptr
	name    string
	total   int64
	cc      [2]int
	arch    string
	sms     int
	pdl     bool // launches allow programmatic dependent launch (usePDL)
	fp8TC   bool // FP8_BLOCK128 GEMMs may use e4m3 tensor cores (useFP8TC)

	asyncAlloc bool     // stream-ordered allocator (cuMemAllocAsync)
	pending    []uint64 // without it: freed at the next Sync

	kern        *kernelSet
	sharedOptIn map[uintptr]int // kernel -> dynamic shared memory it was allowed (launchShared)

	lt        uintptr // cuBLASLt handle
	ltWS      uint64  // its workspace
	ltWSBytes int
	plans     map[planKey]uintptr
	noPlan    map[planKey]error // shapes cuBLASLt has no algorithm for (cachedPlan)
	fp8TCRuns int               // FP8_BLOCK128 GEMMs run on tensor cores (tests read it)

	errWord  uint64 // device int32[4]: code, op, value (report in common.cuh)
	gemvCnt  uint64 // device int32[cntWords], zero between launches: split-K k_gemv_tc's tile counts, then k_hc_fused's token counts
	errDirty bool   // a kernel that may report ran since the last check
	err      error  // first failure of enqueued work, not yet reported

	capturing bool  // between BeginCapture and EndCapture (graph.go)
	capBase   int64 // the device's graph memory when the capture began

	args   [32]uint64 // kernel parameter slots of the launch being made
	closed bool
}

var (
	_ npu.Backend      = (*Backend)(nil)
	_ npu.StreamRunner = (*Backend)(nil)
)

// EnvPDL, set to 0, launches every kernel plainly (cuLaunchKernel)
// instead of with programmatic dependent launch.
const EnvPDL = "NPUSERVE_CUDA_PDL"

// usePDL reports whether kernels launch with programmatic dependent
// launch (Hopper and later, unless EnvPDL is "0"): a kernel's blocks are
// scheduled while its predecessor's last blocks finish and wait in
// pdl_prologue (kernels/common.cuh) for its completion, hiding the
// drain-and-fill gap between the hundreds of small kernels of a decode
// step. Every kernel starts with pdl_prologue (TestKernelsStartWithPDL).
func usePDL(major int, env string) bool { return major >= 9 && env != "0" }

// ltWorkspaceBytes is cuBLASLt's workspace (NVIDIA recommends 32 MiB on
// Hopper).
const ltWorkspaceBytes = 32 << 20

// New opens GPU ordinal: the driver, a context and stream, the kernels
// (compiled or from the cache) and cuBLASLt. A missing library is an
// error wrapping npu.ErrUnavailable that names it. A kernel file that
// does not compile does not fail New (see Kernels); Open refuses such a
// backend.
func New(ordinal int) (*Backend, error) {
	n, _, err := probe()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", err, npu.ErrUnavailable)
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("GPU %d of %d: %w", ordinal, n, npu.ErrUnavailable)
	}
	b := &Backend{ordinal: ordinal, plans: map[planKey]uintptr{}, noPlan: map[planKey]error{}, prof: newProfiler()}
	if b.dev, err = drvDeviceGet(ordinal); err != nil {
		return nil, err
	}
	b.name = drvDeviceName(b.dev)
	if b.cc[0], err = drvDeviceAttr(b.dev, attrCCMajor); err != nil {
		return nil, err
	}
	if b.cc[1], err = drvDeviceAttr(b.dev, attrCCMinor); err != nil {
		return nil, err
	}
	b.sms, _ = drvDeviceAttr(b.dev, attrSMCount)
	b.sms = max(b.sms, 1)
	b.arch = archFor(b.cc[0], b.cc[1])
	b.pdl = usePDL(b.cc[0], os.Getenv(EnvPDL)) && drvHasLaunchEx()
	if b.total, err = drvTotalMem(b.dev); err != nil {
		return nil, err
	}
	if b.ctx, err = drvPrimaryCtxRetain(b.dev); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			b.Close()
		}
	}()
	if b.stream, err = drvStreamCreate(b.ctx); err != nil {
		return nil, err
	}
	if pools, _ := drvDeviceAttr(b.dev, attrMemPoolSupported); pools != 0 && drvHasAsyncAlloc() {
		b.asyncAlloc = drvMemPoolKeep(b.ctx, b.dev) == nil
	}
	if b.errWord, err = drvMemAlloc(b.ctx, 16, b.stream, false); err != nil {
		return nil, err
	}
	if err = drvMemsetD8(b.ctx, b.errWord, 0, 16, b.stream); err != nil {
		return nil, err
	}
	if b.gemvCnt, err = drvMemAlloc(b.ctx, 4*cntWords, b.stream, false); err != nil {
		return nil, err
	}
	if err = drvMemsetD8(b.ctx, b.gemvCnt, 0, 4*cntWords, b.stream); err != nil {
		return nil, err
	}
	if b.kern, err = loadKernels(b.ctx, b.arch); err != nil {
		return nil, fmt.Errorf("%w: %w", err, npu.ErrUnavailable)
	}
	if _, err = ltLoad(); err != nil {
		return nil, fmt.Errorf("%w: %w", err, npu.ErrUnavailable)
	}
	b.fp8TC = useFP8TC(b.cc[0], b.cc[1], ltVersion(), os.Getenv(EnvFP8TC))
	if b.lt, err = ltCreate(b.ctx); err != nil {
		return nil, err
	}
	b.ltWSBytes = ltWorkspaceBytes
	if b.ltWS, err = drvMemAlloc(b.ctx, b.ltWSBytes, b.stream, false); err != nil {
		return nil, err
	}
	if err = drvStreamSync(b.ctx, b.stream); err != nil {
		return nil, err
	}
	ok = true
	return b, nil
}

// Close waits for the stream and releases the backend's resources (not
// the tensors still allocated: the context's memory goes with the
// process). The Backend must not be used afterwards.
func (b *Backend) Close() error {
	if b.closed || b.ctx == 0 {
		return nil
	}
	b.closed = true
	var err error
	if b.stream != 0 {
		err = drvStreamSync(b.ctx, b.stream)
	}
	b.releasePending()
	for k, p := range b.plans {
		ltPlanDestroy(p)
		delete(b.plans, k)
	}
	if b.lt != 0 {
		ltDestroy(b.lt)
	}
	if b.ltWS != 0 {
		_ = drvMemFree(b.ctx, b.ltWS, 0, false)
	}
	if b.errWord != 0 {
		_ = drvMemFree(b.ctx, b.errWord, 0, false)
	}
	if b.gemvCnt != 0 {
		_ = drvMemFree(b.ctx, b.gemvCnt, 0, false)
	}
	if b.stream != 0 {
		_ = drvStreamDestroy(b.ctx, b.stream)
	}
	_ = drvPrimaryCtxRelease(b.dev)
	return err
}

// Name is "cuda".
func (b *Backend) Name() string { return "cuda" }

// Arch is the NVRTC target the kernels were built for (e.g. "sm_90a").
func (b *Backend) Arch() string { return b.arch }

// Kernels reports how each kernel file was obtained (compiled or cached,
// how long it took, the NVRTC log) and which failed.
func (b *Backend) Kernels() []KernelReport { return b.kern.reports }

// kernelErrors summarises the kernel files that did not build, "" if none.
func (b *Backend) kernelErrors() string {
	var bad []string
	for _, r := range b.kern.reports {
		if r.Err != nil {
			bad = append(bad, fmt.Sprintf("%s: %v", r.File, r.Err))
		}
	}
	return strings.Join(bad, "; ")
}

// Info describes the GPU; FreeBytes is what the driver reports free now
// (memory the backend's pool holds for reuse counts as used).
func (b *Backend) Info() npu.DeviceInfo {
	name := fmt.Sprintf("%s (GPU %d, %s)", b.name, b.ordinal, b.arch)
	if bf16Act {
		name = fmt.Sprintf("%s (GPU %d, %s; prefill GEMMs on bf16 activations: %s=1)", b.name, b.ordinal, b.arch, EnvBF16Activations)
	}
	info := npu.DeviceInfo{Name: name, MemoryBytes: b.total, Accelerator: true}
	if free, _, err := drvMemGetInfo(b.ctx); err == nil {
		info.FreeBytes = free
	}
	return info
}

// fail records the first failure of enqueued work.
func (b *Backend) fail(err error) {
	if b.err == nil {
		b.err = err
	}
}

// Sync waits for the stream and returns, once, the first failure of the
// work enqueued since the last report.
func (b *Backend) Sync() error {
	if b.capturing {
		err := errCapture("Sync")
		b.fail(err)
		return err
	}
	err := drvStreamSync(b.ctx, b.stream)
	if b.prof != nil && err == nil {
		b.prof.collect(b)
	}
	b.releasePending()
	if err != nil {
		err = fmt.Errorf("cuda: the stream failed: %w", err)
	} else {
		err = b.checkDevice()
	}
	if b.err != nil {
		err, b.err = b.err, nil
	}
	return err
}

// checkDevice reads and clears the device error word (the stream is idle).
func (b *Backend) checkDevice() error {
	if !b.errDirty {
		return nil
	}
	b.errDirty = false
	var w [12]byte
	if err := drvDtoH(b.ctx, w[:], b.errWord, b.stream); err != nil {
		return fmt.Errorf("cuda: reading the device error word: %w", err)
	}
	code := le32(w[0:])
	if code == 0 {
		return nil
	}
	if err := drvMemsetD8(b.ctx, b.errWord, 0, 16, b.stream); err != nil {
		b.fail(err)
	}
	return deviceError(code, le32(w[4:]), le32(w[8:]))
}

func le32(b []byte) int32 {
	return int32(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24)
}

// RunOnStream waits for the work enqueued before it and runs fn on the
// calling goroutine (device memory is not host memory: fn moves it with
// the device's own transports), returning the stream's earlier failure
// instead when there is one.
func (b *Backend) RunOnStream(fn func() error) error {
	if err := b.Sync(); err != nil {
		return err
	}
	return fn()
}

// launch enqueues kernel name on the stream; args are its parameters,
// one slot each (pI32, pI64, pF32, b.ptr).
func (b *Backend) launch(name string, grid, block dim3, shmem int, args ...uint64) {
	fn := b.kern.fn(name)
	if grid[0] == 0 || grid[1] == 0 || grid[2] == 0 {
		return
	}
	n := copy(b.args[:], args)
	if n != len(args) {
		panic(fmt.Sprintf("cuda: kernel %s has %d parameters, the shim takes %d", name, len(args), len(b.args)))
	}
	if b.prof != nil {
		defer b.span(name)()
	}
	if err := drvLaunch(b.ctx, fn, grid, block, uint32(shmem), b.stream, b.args[:n], b.pdl); err != nil {
		b.fail(fmt.Errorf("cuda: launching %s: %w", name, err))
	}
}

// launchChecked is launch for kernels that may report a device error.
func (b *Backend) launchChecked(name string, grid, block dim3, shmem int, args ...uint64) {
	b.errDirty = true
	b.launch(name, grid, block, shmem, args...)
}

// gridFor is the grid of a grid-stride kernel over n elements with
// threads per block: enough blocks to fill the GPU, no more.
func (b *Backend) gridFor(n int64, threads int) dim3 {
	blocks := (n + int64(threads) - 1) / int64(threads)
	return d1(int(min(blocks, int64(b.sms)*16)))
}

func f32bits(v float32) uint32 { return math.Float32bits(v) }

// errClosed is returned by calls on a closed backend.
var errClosed = errors.New("cuda: the backend is closed")
