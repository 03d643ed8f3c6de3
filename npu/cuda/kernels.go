package cuda

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/npuserve/npuserve/npu"
)

// The kernels are CUDA C sources embedded in the binary, compiled at
// start-up by NVRTC for the device's architecture (no toolkit needed at
// build time) and cached on disk, keyed by everything that determines the
// CUBIN: the source, the architecture, the options and the NVRTC version.
// Each file is one NVRTC program with kernels/common.cuh prepended; a file
// that does not compile disables only its own kernels (Open refuses such
// a backend; tests report which kernels are missing and why).

//go:embed kernels/*.cu kernels/*.cuh
var kernelFS embed.FS

// cacheVersion is part of every cache key: bump it when the way CUBINs are
// produced changes outside the hashed inputs.
const cacheVersion = "npuserve-cuda-1"

// kernelSource is one kernel file as NVRTC sees it.
type kernelSource struct {
	File  string   // e.g. "norm.cu"
	Text  string   // common.cuh followed by the file
	Names []string // its extern "C" __global__ functions
}

var kernelDecl = regexp.MustCompile(`extern\s+"C"\s+__global__\s+(?:__launch_bounds__\([^)]*\)\s+)?void\s+(\w+)\s*\(`)

// kernelSources returns the embedded kernel files, sorted by name.
func kernelSources() ([]kernelSource, error) {
	common, err := kernelFS.ReadFile("kernels/common.cuh")
	if err != nil {
		return nil, err
	}
	ents, err := kernelFS.ReadDir("kernels")
	if err != nil {
		return nil, err
	}
	var out []kernelSource
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".cu") {
			continue
		}
		body, err := kernelFS.ReadFile("kernels/" + e.Name())
		if err != nil {
			return nil, err
		}
		ks := kernelSource{File: e.Name(), Text: string(common) + "\n#line 1 \"" + e.Name() + "\"\n" + string(body)}
		for _, m := range kernelDecl.FindAllStringSubmatch(string(body), -1) {
			ks.Names = append(ks.Names, m[1])
		}
		out = append(out, ks)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].File < out[j].File })
	return out, nil
}

// nvrtcOptions are the compile options for arch (e.g. "sm_90a"): no fast
// math (the ops match the CPU backend's fp32 results), C++17.
func nvrtcOptions(arch string) []string {
	return []string{"--gpu-architecture=" + arch, "--std=c++17", "-DNPUSERVE_CUDA=1"}
}

// cacheKey is the hex SHA-256 of what determines a CUBIN.
func cacheKey(src, arch string, opts []string, nvrtcVer string) string {
	h := sha256.New()
	for _, s := range []string{cacheVersion, arch, nvrtcVer, strings.Join(opts, "\x00"), src} {
		fmt.Fprintf(h, "%d:%s;", len(s), s)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// cacheDir is where compiled kernels are kept: $NPUSERVE_CACHE_DIR/cuda,
// else ~/.cache/npuserve/cuda (the user cache directory); "" when neither
// can be determined.
func cacheDir() string {
	if d := os.Getenv("NPUSERVE_CACHE_DIR"); d != "" {
		return filepath.Join(d, "cuda")
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "npuserve", "cuda")
	}
	return ""
}

// archFor names the NVRTC target of compute capability major.minor: the
// architecture-specific sm_90a on Hopper (wgmma), sm_XY elsewhere.
func archFor(major, minor int) string {
	if major == 9 && minor == 0 {
		return "sm_90a"
	}
	return fmt.Sprintf("sm_%d%d", major, minor)
}

// KernelReport describes how one kernel file was obtained at start-up.
type KernelReport struct {
	File     string
	Kernels  []string
	Cached   bool          // loaded from the disk cache
	Duration time.Duration // compile (or cache read) and module load
	Log      string        // NVRTC's log (warnings, or the errors)
	Err      error         // why its kernels are unavailable
}

// kernelSet holds the loaded kernels by name.
type kernelSet struct {
	fns     map[string]uintptr
	missing map[string]error // kernel name -> why it is unavailable
	reports []KernelReport
}

// fn returns the kernel called name; a kernel that failed to build is a
// programming error here (Open refuses a backend with one).
func (k *kernelSet) fn(name string) uintptr {
	if f, ok := k.fns[name]; ok {
		return f
	}
	if err, ok := k.missing[name]; ok {
		panic(fmt.Sprintf("cuda: kernel %s is unavailable: %v", name, err))
	}
	panic(fmt.Sprintf("cuda: no kernel %s", name))
}

// loadKernels compiles (or reads from the cache) every kernel file and
// loads it into ctx. Files are compiled in parallel; the returned error
// is only for a missing NVRTC, per-file failures are in the set.
func loadKernels(ctx uintptr, arch string) (*kernelSet, error) {
	if _, err := nvrtcLoad(); err != nil {
		return nil, err
	}
	major, minor, err := nvrtcVersion()
	if err != nil {
		return nil, err
	}
	ver := fmt.Sprintf("%d.%d", major, minor)
	srcs, err := kernelSources()
	if err != nil {
		return nil, err
	}
	dir := cacheDir()
	images := make([][]byte, len(srcs))
	reports := make([]KernelReport, len(srcs))
	var wg sync.WaitGroup
	for i, s := range srcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			r := KernelReport{File: s.File, Kernels: s.Names}
			images[i], r.Cached, r.Log, r.Err = buildKernel(s, arch, ver, dir)
			r.Duration = time.Since(start)
			reports[i] = r
		}()
	}
	wg.Wait()
	set := &kernelSet{fns: map[string]uintptr{}, missing: map[string]error{}}
	for i, s := range srcs {
		r := &reports[i]
		if r.Err == nil {
			start := time.Now()
			var mod uintptr
			if mod, r.Err = drvModuleLoad(ctx, images[i]); r.Err == nil {
				for _, name := range s.Names {
					f, err := drvModuleFunction(ctx, mod, name)
					if err != nil {
						set.missing[name] = err
						continue
					}
					set.fns[name] = f
				}
			}
			r.Duration += time.Since(start)
		}
		if r.Err != nil {
			for _, name := range s.Names {
				set.missing[name] = fmt.Errorf("%s: %w", s.File, r.Err)
			}
		}
	}
	set.reports = reports
	return set, nil
}

// buildKernel returns the CUBIN of s for arch, from the cache in dir when
// it is there, else compiled by NVRTC (and written to the cache, best
// effort). On Hopper it falls back from sm_90a to sm_90 when this NVRTC
// does not know the former.
func buildKernel(s kernelSource, arch, nvrtcVer, dir string) (img []byte, cached bool, log string, err error) {
	opts := nvrtcOptions(arch)
	key := cacheKey(s.Text, arch, opts, nvrtcVer)
	path := ""
	if dir != "" {
		path = filepath.Join(dir, strings.TrimSuffix(s.File, ".cu")+"-"+key[:32]+".cubin")
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return b, true, "", nil
		}
	}
	img, log, err = nvrtcBuild(s.Text, s.File, opts)
	if err != nil && strings.HasSuffix(arch, "a") && strings.Contains(log+err.Error(), "arch") {
		img, log, err = nvrtcBuild(s.Text, s.File, nvrtcOptions(strings.TrimSuffix(arch, "a")))
	}
	if err != nil {
		if log != "" {
			err = fmt.Errorf("%w:\n%s", err, log)
		}
		return nil, false, log, err
	}
	if path != "" {
		if os.MkdirAll(dir, 0o755) == nil {
			tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
			if os.WriteFile(tmp, img, 0o644) == nil {
				_ = os.Rename(tmp, path)
			}
		}
	}
	return img, false, log, nil
}

// dtypeCode is the DT_* code of dt in the kernels.
func dtypeCode(dt npu.DType) int {
	switch dt {
	case npu.F32:
		return 0
	case npu.BF16:
		return 1
	case npu.F16:
		return 2
	case npu.I32:
		return 3
	case npu.F8E4M3:
		return 4
	}
	panic(fmt.Sprintf("cuda: no kernel dtype for %v", dt))
}

// dim3 is a grid or block shape.
type dim3 = [3]uint32

func d1(x int) dim3    { return dim3{uint32(x), 1, 1} }
func d2(x, y int) dim3 { return dim3{uint32(x), uint32(y), 1} }

// Kernel parameter encoders: one 8-byte slot each, 4-byte parameters in
// the low bytes (little-endian).
func pI32(v int) uint64 { return uint64(uint32(int32(v))) }
func pI64(v int) uint64 { return uint64(int64(v)) }
func pF32(v float32) uint64 {
	return uint64(f32bits(v))
}
func pBool(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}
