//go:build cgo

package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// simcudaTests are the GPU tests TestSimCUDA runs on simcuda in make
// test, about 70 s of emulation: all but TestGPUGEMV, TestGPUMoEDecode
// and TestGPUSparseMLA, whose slice-sized shapes take 80 to 190 s each
// (make test-simcuda runs every one).
var simcudaTests = "TestGPU(KDA|KPool|DSAIndex|SparseMLAFromIndex|AttnDeviceErrors|FP8ActQuant|MatMulQFP8Block|MoEQFP8Block|MatMulQFP8BlockTensorCore|GEMVNonFinite|GEMVDeterministic|GraphReplay|GraphRefusals|MoE|MoEPipeBits|MatMulQ|MoEQ|SampleReduce|SampleHistTable|SampleHist|SampleHistBadRow|Copy|Fill|Elementwise|SwiGLU|Softmax|Norms|GatherScatter|TopK|MatMul|MatMulBF16Activations|HC|Conv1d|KDAGate|Router|MemoryContract)$"

// TestSimCUDA runs this package's GPU tests on simcuda
// (tools/cuda/simt/simcuda.cpp: libcuda, NVRTC and cuBLASLt stand-ins
// that compile the kernels with g++ against the CUDA emulator simt.h and
// run them on the CPU), in a child test process whose dynamic loader
// finds the stand-ins first. The backend runs unchanged, so this checks
// on a machine without a GPU what the kernel checks (TestSIMTKernels)
// cannot: the Go side's launch geometry, argument order, temporaries,
// graph capture and error words, against the CPU backend as on the H200.
// NPUSERVE_SIMCUDA_RUN replaces the test pattern. Skipped in -short and
// without g++ or python3.
func TestSimCUDA(t *testing.T) {
	if os.Getenv("NPUSERVE_SIMCUDA_CHILD") != "" {
		t.Skip("inside a simcuda run")
	}
	dir := simtDir(t, "the GPU tests on the CPU emulator take minutes", "g++", "python3")
	lib := t.TempDir()
	if out, err := exec.Command("bash", filepath.Join(dir, "build.sh"), lib).CombinedOutput(); err != nil {
		t.Fatalf("building simcuda: %v\n%s", err, out)
	}
	// The compiled kernels are kept between runs (their key includes the
	// emulator's version, see simcuda's nvrtcVersion).
	cache := filepath.Join(os.TempDir(), "npuserve-simcuda-cache")
	run := simcudaTests
	if r := os.Getenv("NPUSERVE_SIMCUDA_RUN"); r != "" {
		run = r
	}
	start := time.Now()
	cmd := exec.Command(os.Args[0], "-test.run", run, "-test.count=1", "-test.timeout=30m")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib, "NPUSERVE_CUDA_TEST=1", "NPUSERVE_CACHE_DIR="+cache,
		"NPUSERVE_SIMCUDA_CHILD=1")
	out, err := cmd.CombinedOutput()
	text := string(out)
	var keep []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "--- FAIL") || strings.HasPrefix(l, "FAIL") || strings.HasPrefix(l, "ok") ||
			strings.HasPrefix(l, "PASS") || strings.HasPrefix(l, "panic") || strings.Contains(l, "simcuda:") {
			keep = append(keep, l)
		}
	}
	t.Logf("GPU tests on simcuda (%s, %.0f s):\n%s", run, time.Since(start).Seconds(), strings.Join(keep, "\n"))
	if err != nil {
		if len(text) > 20000 {
			text = "..." + text[len(text)-20000:]
		}
		t.Fatalf("the GPU tests failed on simcuda: %v\n%s", err, text)
	}
}
