package cuda

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

// Tests that need no GPU: the shim's symbol table, the kernel sources and
// cache keys, and the argument checks that panic before any launch.

func TestShimSymbolTable(t *testing.T) {
	syms := shimSymbols()
	if syms == nil {
		t.Skip("built without cgo: no shim")
	}
	seen := map[string]bool{}
	for _, s := range syms {
		if seen[s.Name] {
			t.Errorf("symbol %s declared twice", s.Name)
		}
		seen[s.Name] = true
	}
	for _, name := range []string{"cuInit", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent", "cuStreamCreate", "cuMemAlloc_v2",
		"cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2", "cuMemAllocAsync", "cuModuleLoadData", "cuLaunchKernel", "cuStreamBeginCapture_v2", "cuStreamEndCapture", "cuGraphInstantiateWithFlags", "cuGraphLaunch", "cuGraphUpload", "nvrtcCompileProgram",
		"nvrtcGetCUBIN", "cublasLtMatmul", "cublasLtMatmulAlgoGetHeuristic"} {
		if !seen[name] {
			t.Errorf("symbol table lacks %s", name)
		}
	}
	for name, v := range shimConstants() {
		if v[0] != v[1] {
			t.Errorf("constant %s: Go %d, shim.h %d", name, v[0], v[1])
		}
	}
}

func TestKernelSources(t *testing.T) {
	srcs, err := kernelSources()
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]string{}
	for _, s := range srcs {
		if len(s.Names) == 0 {
			t.Errorf("%s declares no kernel", s.File)
		}
		for _, n := range s.Names {
			if f, dup := declared[n]; dup {
				t.Errorf("kernel %s in %s and %s", n, f, s.File)
			}
			declared[n] = s.File
		}
		if !strings.HasPrefix(s.Text, "// Prepended") {
			t.Errorf("%s does not start with common.cuh", s.File)
		}
	}
	// Every kernel the Go code launches is declared.
	used := regexp.MustCompile(`"(k_\w+)"`)
	files, _ := filepath.Glob("*.go")
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range used.FindAllStringSubmatch(string(b), -1) {
			if _, ok := declared[m[1]]; !ok {
				t.Errorf("%s launches %s, which no kernel file declares", f, m[1])
			}
		}
	}
	t.Logf("%d kernel files, %d kernels", len(srcs), len(declared))
}

func TestCacheKey(t *testing.T) {
	opts := nvrtcOptions("sm_90a")
	for _, o := range opts {
		if strings.Contains(o, "fast") {
			t.Errorf("option %q: the kernels must not use fast math", o)
		}
	}
	k := cacheKey("src", "sm_90a", opts, "13.0")
	if len(k) != 64 {
		t.Fatalf("key %q", k)
	}
	for _, other := range []string{
		cacheKey("src2", "sm_90a", opts, "13.0"),
		cacheKey("src", "sm_90", opts, "13.0"),
		cacheKey("src", "sm_90a", append(opts[:len(opts):len(opts)], "-G"), "13.0"),
		cacheKey("src", "sm_90a", opts, "12.8"),
	} {
		if other == k {
			t.Errorf("different inputs share key %s", k)
		}
	}
	if cacheKey("src", "sm_90a", opts, "13.0") != k {
		t.Error("key is not deterministic")
	}
	if archFor(9, 0) != "sm_90a" || archFor(8, 6) != "sm_86" || archFor(10, 0) != "sm_100" {
		t.Error("archFor")
	}
	t.Setenv("NPUSERVE_CACHE_DIR", "/tmp/x")
	if d := cacheDir(); d != "/tmp/x/cuda" {
		t.Errorf("cacheDir %q", d)
	}
}

// fakeBuf is a buffer of no backend: ops given one panic at their
// argument checks before they would reach the device.
type fakeBuf struct{ n int }

func (f fakeBuf) Bytes() int { return f.n }

func ft(dt npu.DType, shape ...int) *npu.Tensor {
	n := dt.Size()
	for _, d := range shape {
		n *= d
	}
	return npu.NewTensor(fakeBuf{n}, 0, dt, shape...)
}

func TestArgumentChecks(t *testing.T) {
	b := &Backend{}
	f32, bf, i32 := npu.F32, npu.BF16, npu.I32
	cases := []struct {
		name, want string
		call       func()
	}{
		{"Copy count", "element counts differ", func() { b.Copy(ft(f32, 3), ft(f32, 4)) }},
		{"Copy dtype", "cannot convert", func() { b.Copy(ft(npu.I8, 3), ft(f32, 3)) }},
		{"Fill dtype", "want F32, BF16 or F16", func() { b.Fill(ft(i32, 3), 1) }},
		{"Add shape", "neither matches", func() { b.Add(ft(f32, 2, 3), ft(f32, 2, 3), ft(f32, 4)) }},
		{"Mul out", "does not match a", func() { b.Mul(ft(f32, 5), ft(f32, 2, 3), ft(f32, 3)) }},
		{"Scale dtype", "want F32", func() { b.Scale(ft(bf, 3), ft(bf, 3), 2) }},
		{"SwiGLU odd", "even last dimension", func() { b.SwiGLU(ft(f32, 2, 1), ft(f32, 2, 3), 0) }},
		{"Softmax out", "does not match x", func() { b.Softmax(ft(f32, 2), ft(f32, 3)) }},
		{"RMSNorm group", "does not divide", func() { b.RMSNorm(ft(f32, 10), ft(f32, 10), ft(f32, 3), 1e-6) }},
		{"LayerNorm bias", "bias", func() { b.LayerNorm(ft(f32, 2, 4), ft(f32, 2, 4), ft(f32, 4), ft(f32, 3), 1e-6) }},
		{"L2Norm out", "does not match x", func() { b.L2Norm(ft(f32, 4), ft(f32, 8), 4, 1e-6) }},
		{"Gather idx dtype", "want I32", func() { b.Gather(ft(f32, 2, 3), ft(f32, 5, 3), ft(f32, 2)) }},
		{"Scatter rows", "do not match", func() { b.Scatter(ft(f32, 5, 3), ft(f32, 3, 3), ft(i32, 2)) }},
		{"TopK k", "TopK k=", func() { b.TopK(ft(f32, 2, 9), ft(i32, 2, 9), ft(f32, 2, 8), 9) }},
		{"MatMul K", "disagree on K", func() { b.MatMul(ft(f32, 2, 3), ft(f32, 2, 5), ft(bf, 3, 4)) }},
		{"MatMul out", "want [2,3]", func() { b.MatMul(ft(f32, 2, 4), ft(f32, 2, 5), ft(bf, 3, 5)) }},
		{"MatMul weight", "MatMul weight I32[3,5]: want F32, BF16 or F16", func() { b.MatMul(ft(f32, 2, 3), ft(f32, 2, 5), ft(i32, 3, 5)) }},
		{"HCPre streams", "streams", func() {
			b.HCPre(ft(f32, 1, 4), ft(f32, 1, 2), ft(f32, 1, 2, 2), ft(f32, 1, 3, 4), ft(f32, 8, 8), ft(f32, 8), ft(f32, 3), npu.HCParams{Streams: 2})
		}},
		{"HCPost shapes", "HCPost out", func() { b.HCPost(ft(f32, 1), ft(f32, 4), ft(f32, 2), ft(f32, 4), ft(f32, 1, 2, 4)) }},
		{"Conv1d layout", "needs a SeqLayout", func() { b.Conv1d(ft(f32, 2, 3), ft(f32, 2, 3), ft(f32, 1, 3, 3), ft(f32, 3, 4), nil, false) }},
		{"Conv1d taps", "up to 16 taps", func() {
			s := &npu.SeqLayout{NumSeqs: 1, NumRows: 2, QueryStart: ft(i32, 2), Pos: ft(i32, 1), StateSlot: ft(i32, 1)}
			b.Conv1d(ft(f32, 2, 3), ft(f32, 2, 3), ft(f32, 1, 16, 3), ft(f32, 3, 17), s, false)
		}},
		{"KDAGate shape", "KDAGate f", func() {
			b.KDAGate(ft(f32, 2, 10), ft(f32, 2, 10), ft(f32, 12), ft(f32, 3), npu.KDAGateParams{HeadDim: 4})
		}},
		{"Router groups", "Router", func() {
			b.Router(ft(f32, 1, 2), ft(i32, 1, 2), ft(f32, 1, 4), ft(f32, 6, 4), ft(f32, 6), npu.RouterParams{TopK: 2, NGroup: 4, TopKGroup: 1})
		}},
		{"foreign tensor", "does not live on this CUDA backend", func() { b.Add(ft(f32, 3), ft(f32, 3), ft(f32, 3)) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { wantPanic(t, c.want, c.call) })
	}
}

func TestDeviceErrorMessages(t *testing.T) {
	e := deviceError(devErrIndex, opGather, 97)
	if !strings.Contains(e.Error(), "Gather") || !strings.Contains(e.Error(), "97") {
		t.Errorf("%v", e)
	}
	if !strings.Contains(deviceError(devErrSlot, opConv1d, -1).Error(), "state slot -1") {
		t.Error("slot message")
	}
	if alignment(256, 512) != 256 || alignment(256, 4) != 4 || alignment(0x1010) != 16 {
		t.Error("alignment")
	}
}
