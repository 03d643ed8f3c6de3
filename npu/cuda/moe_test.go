package cuda

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

// The MoE, quantized and sampling ops check their arguments on the host
// before anything reaches the device: these run without a GPU (the
// tensors live on no backend, so a check that passed would panic later,
// with a different message).
func TestMoEQuantSampleArgumentChecks(t *testing.T) {
	b := &Backend{}
	f32, bf, i32, i8, f8 := npu.F32, npu.BF16, npu.I32, npu.I8, npu.F8E4M3
	dyn := func(shape ...int) *npu.QuantWeight {
		lead := shape[:len(shape)-1]
		return &npu.QuantWeight{Scheme: npu.QW8A8Dynamic, Weight: ft(i8, shape...), Scale: ft(f32, lead...)}
	}
	cases := []struct {
		name, want string
		call       func()
	}{
		{"MoE rank", "cuda: MoE x", func() {
			b.MoE(ft(f32, 2, 8), ft(f32, 2, 8), ft(bf, 16, 8), ft(bf, 4, 8, 8), ft(f32, 2, 2), ft(i32, 2, 2), 0)
		}},
		{"MoE down shape", "cuda: MoE gateUp", func() {
			b.MoE(ft(f32, 2, 8), ft(f32, 2, 8), ft(bf, 4, 6, 8), ft(bf, 4, 8, 4), ft(f32, 2, 2), ft(i32, 2, 2), 0)
		}},
		{"MoE weight dtype", "want an F32, BF16 or F16 weight", func() {
			b.MoE(ft(f32, 2, 8), ft(f32, 2, 8), ft(i32, 4, 6, 8), ft(bf, 4, 8, 3), ft(f32, 2, 2), ft(i32, 2, 2), 0)
		}},
		{"MoE ids dtype", "cuda: MoE out", func() {
			b.MoE(ft(f32, 2, 8), ft(f32, 2, 8), ft(bf, 4, 6, 8), ft(bf, 4, 8, 3), ft(f32, 2, 2), ft(f32, 2, 2), 0)
		}},
		{"MoE out size", "cuda: MoE out", func() {
			b.MoE(ft(f32, 3, 8), ft(f32, 2, 8), ft(bf, 4, 6, 8), ft(bf, 4, 8, 3), ft(f32, 2, 2), ft(i32, 2, 2), 0)
		}},
		{"MoE ragged ids", "cuda: MoE out", func() {
			b.MoE(ft(f32, 2, 8), ft(f32, 2, 8), ft(bf, 4, 6, 8), ft(bf, 4, 8, 3), ft(f32, 3), ft(i32, 3), 0)
		}},
		{"MoE top-k", "supports top-64", func() {
			b.MoE(ft(f32, 1, 8), ft(f32, 1, 8), ft(bf, 4, 6, 8), ft(bf, 4, 8, 3), ft(f32, 1, 65), ft(i32, 1, 65), 0)
		}},
		{"MatMulQ grouped", "use MoEQ", func() { b.MatMulQ(ft(f32, 2, 3), ft(f32, 2, 5), dyn(2, 3, 5)) }},
		{"MatMulQ K", "cuda: MatMulQ x", func() { b.MatMulQ(ft(f32, 2, 3), ft(f32, 2, 4), dyn(3, 5)) }},
		{"MatMulQ out", "want [2,3]", func() { b.MatMulQ(ft(f32, 2, 4), ft(f32, 2, 5), dyn(3, 5)) }},
		{"MatMulQ scale", "Scale is", func() {
			b.MatMulQ(ft(f32, 2, 3), ft(f32, 2, 5), &npu.QuantWeight{Scheme: npu.QW8A8Dynamic, Weight: ft(i8, 3, 5), Scale: ft(f32, 4)})
		}},
		{"MatMulQ static offset", "out of range", func() {
			b.MatMulQ(ft(f32, 2, 3), ft(f32, 2, 5), &npu.QuantWeight{Scheme: npu.QW8A8, Weight: ft(i8, 3, 5), InputScale: 1, InputOffset: 200,
				QuantBias: ft(i32, 3), DeqScale: ft(f32, 3)})
		}},
		{"MatMulQ MX group", "group size", func() {
			b.MatMulQ(ft(f32, 2, 3), ft(f32, 2, 64), &npu.QuantWeight{Scheme: npu.QMXFP8, Weight: ft(f8, 3, 64), Scale: ft(npu.U8, 3, 2), GroupSize: 16})
		}},
		{"MatMulQ FP8 block scale", "Scale is", func() {
			b.MatMulQ(ft(f32, 2, 3), ft(f32, 2, 200), &npu.QuantWeight{Scheme: npu.QFP8Block, Weight: ft(f8, 3, 200), Scale: ft(f32, 1, 1), GroupSize: 128})
		}},
		{"MatMulQ FP8 block group", "group size", func() {
			b.MatMulQ(ft(f32, 2, 3), ft(f32, 2, 200), &npu.QuantWeight{Scheme: npu.QFP8Block, Weight: ft(f8, 3, 200), Scale: ft(f32, 1, 2), GroupSize: 32})
		}},
		{"MatMulQ FP8 block dtype", "F8_E4M3", func() {
			b.MatMulQ(ft(f32, 2, 3), ft(f32, 2, 200), &npu.QuantWeight{Scheme: npu.QFP8Block, Weight: ft(i8, 3, 200), Scale: ft(f32, 1, 2), GroupSize: 128})
		}},
		{"MoEQ FP8 block expert scales", "Scale is", func() {
			b.MoEQ(ft(f32, 2, 8), ft(f32, 2, 8), &npu.QuantWeight{Scheme: npu.QFP8Block, Weight: ft(f8, 4, 6, 8), Scale: ft(f32, 1, 1), GroupSize: 128},
				&npu.QuantWeight{Scheme: npu.QFP8Block, Weight: ft(f8, 4, 8, 3), Scale: ft(f32, 4, 1, 1), GroupSize: 128}, ft(f32, 2, 2), ft(i32, 2, 2), 0)
		}},
		{"MoEQ linear", "cuda: MoEQ x", func() {
			b.MoEQ(ft(f32, 2, 8), ft(f32, 2, 8), dyn(6, 8), dyn(4, 8, 3), ft(f32, 2, 2), ft(i32, 2, 2), 0)
		}},
		{"MoEQ shapes", "cuda: MoEQ gateUp", func() {
			b.MoEQ(ft(f32, 2, 8), ft(f32, 2, 8), dyn(4, 6, 8), dyn(4, 8, 4), ft(f32, 2, 2), ft(i32, 2, 2), 0)
		}},
		{"MoEQ static", "want W8A8_DYNAMIC, W8A8_MXFP8 or FP8_BLOCK128", func() {
			b.MoEQ(ft(f32, 2, 8), ft(f32, 2, 8), &npu.QuantWeight{Scheme: npu.QW8A8, Weight: ft(i8, 4, 6, 8)}, dyn(4, 8, 3), ft(f32, 2, 2), ft(i32, 2, 2), 0)
		}},
		{"MoEQ weights", "cuda: MoEQ out", func() {
			b.MoEQ(ft(f32, 2, 8), ft(f32, 2, 8), dyn(4, 6, 8), dyn(4, 8, 3), ft(f32, 2, 3), ft(i32, 2, 2), 0)
		}},
		{"SampleReduce k", "k=10 of rows of 9", func() { b.SampleReduce(ft(f32, 2, 10), ft(i32, 2, 10), ft(i32, 2, 2), ft(f32, 2, 9), 10) }},
		{"SampleReduce negative k", "k=-1", func() { b.SampleReduce(nil, nil, ft(i32, 2, 2), ft(f32, 2, 9), -1) }},
		{"SampleReduce stats", "stats", func() { b.SampleReduce(ft(f32, 2, 3), ft(i32, 2, 3), ft(i32, 3), ft(f32, 2, 9), 3) }},
		{"SampleReduce stats dtype", "stats", func() { b.SampleReduce(ft(f32, 2, 3), ft(i32, 2, 3), ft(f32, 2, 2), ft(f32, 2, 9), 3) }},
		{"SampleReduce outputs", "do not hold 2x3", func() { b.SampleReduce(ft(f32, 2, 2), ft(i32, 2, 3), ft(i32, 2, 2), ft(f32, 2, 9), 3) }},
		{"SampleReduce nil outputs", "do not hold 2x1", func() { b.SampleReduce(nil, nil, ft(i32, 2, 2), ft(f32, 2, 9), 1) }},
		{"SampleReduce logits dtype", "want F32", func() { b.SampleReduce(ft(f32, 2, 3), ft(i32, 2, 3), ft(i32, 2, 2), ft(bf, 2, 9), 3) }},
		{"SampleReduce ids dtype", "want I32", func() { b.SampleReduce(ft(f32, 2, 3), ft(f32, 2, 3), ft(i32, 2, 2), ft(f32, 2, 9), 3) }},
		{"SampleReduce scalar", "SampleReduce of logits", func() { b.SampleReduce(nil, nil, ft(i32, 2), ft(f32), 0) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { wantPanic(t, c.want, c.call) })
	}
}

// TestMoEOpNames checks that the MoE ops' device reports name them.
func TestMoEOpNames(t *testing.T) {
	for _, c := range []struct {
		op   int32
		name string
	}{{opMoE, "MoE"}, {opMoEQ, "MoEQ"}} {
		if e := deviceError(devErrIndex, c.op, 77); e.Op != c.name || !strings.Contains(e.Error(), "index 77") {
			t.Errorf("op %d: %v", c.op, e)
		}
	}
}

// TestGEMVKernelConstants: k_gemv_tc's sizes in kernels/moe.cu (and the
// tile rows k_gemv_i8 walks in quant.cu) are the Go side's, and the block shapes gemvWarps picks fit its launch bounds and
// shared memory.
func TestGEMVKernelConstants(t *testing.T) {
	text, defs := kernelDefines(t, "kernels/moe.cu")
	for name, want := range map[string]int{"GEMV_MT": gemvPass, "GEMV_U": gemvU, "GEMV_MAXW": gemvMaxW, "MOE_BM": moeBM, "MOE_BN": moeBN, "MOE_TBN": moeTCBN, "MOE_PBN": moePipeBN} {
		if got, ok := defs[name]; !ok || got != want {
			t.Errorf("moe.cu: %s = %d (defined %v), Go has %d", name, got, ok, want)
		}
	}
	// k_moe_gemm_pipe's dynamic shared memory (MOE_PSMEM: stages of hi,
	// lo and W rows, MOE_PBK + 8 bf16 each) is what the launch passes,
	// and two blocks fit an H200 SM (227 KiB).
	if !strings.Contains(text, "#define MOE_PLD (MOE_PBK + 8)") || !strings.Contains(text, "#define MOE_PSMEM (MOE_PST * (2 * MOE_BM + MOE_PBN) * MOE_PLD * 2)") {
		t.Error("moe.cu: MOE_PLD or MOE_PSMEM is not the formula moePipeShared follows")
	}
	if got := defs["MOE_PST"] * (2*defs["MOE_BM"] + defs["MOE_PBN"]) * (defs["MOE_PBK"] + 8) * 2; got != moePipeShared || 2*got > 227<<10 {
		t.Errorf("moe.cu: MOE_PSMEM = %d, moePipeShared = %d (two blocks must fit 227 KiB)", got, moePipeShared)
	}
	q, err := kernelFS.ReadFile("kernels/quant.cu")
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?m)^#define QI8_BM (\d+)\b`).FindStringSubmatch(string(q)); m == nil || m[1] != strconv.Itoa(moeBM) {
		t.Errorf("quant.cu: QI8_BM %v, want moeBM = %d (the routing's tile rows)", m, moeBM)
	}
	_, fd := kernelDefines(t, "kernels/fp8.cu")
	for name, want := range map[string]int{"FP8B": npu.FP8Block, "FP8_BM": moeBM, "FP8_BN": moeBN} {
		if got, ok := fd[name]; !ok || got != want {
			t.Errorf("fp8.cu: %s = %d (defined %v), Go has %d", name, got, ok, want)
		}
	}
	for _, k := range []string{"k_gemv_tc", "k_gemv_tc16"} {
		bounds := regexp.MustCompile(`__launch_bounds__\((\d+)\) void ` + k + `\(`).FindStringSubmatch(text)
		if bounds == nil {
			t.Fatalf("moe.cu: no __launch_bounds__ on %s", k)
		}
		if lb, _ := strconv.Atoi(bounds[1]); lb != 32*gemvMaxW {
			t.Errorf("%s's launch bounds %d, want %d threads (gemvMaxW warps)", k, lb, 32*gemvMaxW)
		}
	}
	for _, c := range []struct{ N, K, want int }{
		{154880, 4096, 8}, // lm_head: many column tiles
		{4096, 4096, 8},   // 256 tiles: two blocks per SM
		{1536, 4096, 16},  // 96 tiles: fewer than the SMs
		{16384, 1536, 8},
		{4096, 2048, 8}, // MoE down
		{1536, 1000, 8}, // too short a K for 16 warps of GEMV_U blocks
		{77, 136, 4},    // 5 k blocks
		{1, 8, 4},
	} {
		if got := gemvWarps(c.N, c.K); got != c.want {
			t.Errorf("gemvWarps(%d, %d) = %d, want %d", c.N, c.K, got, c.want)
		}
	}
}

// TestGemvSplitK: dense GEMVs of few column tiles split K (enough blocks
// for the GPU, at least one GEMV_U group per warp of a slice), the rest
// do not; the counters cover every split launch's column tiles.
func TestGemvSplitK(t *testing.T) {
	for _, c := range []struct{ N, K, want int }{
		{128, 4096, 8},  // 8 tiles: k blocks bound it
		{64, 4096, 8},   //
		{496, 4096, 8},  // 31 tiles
		{512, 4096, 1},  // 32 tiles: not split
		{4096, 4096, 1}, //
		{128, 512, 1},   // 16 k blocks: one group per warp of 4
		{40, 3000, 5},   // 94 k blocks
		{1, 72, 1},
	} {
		if got := gemvSplitK(c.N, c.K); got != c.want {
			t.Errorf("gemvSplitK(%d, %d) = %d, want %d", c.N, c.K, got, c.want)
		}
		if s := gemvSplitK(c.N, c.K); s > 1 && (c.N+gemvCols-1)/gemvCols > gemvSplitTiles {
			t.Errorf("gemvSplitK(%d, %d) = %d for more column tiles than gemvCnt counts", c.N, c.K, s)
		}
	}
}

// TestUseGemvTC: which decode MatMuls take k_gemv_tc (the threshold and
// the vector-load conditions; the rest go to k_gemm_small or cuBLASLt).
func TestUseGemvTC(t *testing.T) {
	for _, c := range []struct {
		dt      npu.DType
		M, N, K int
		x, w    uint64
		want    bool
	}{
		{npu.BF16, 1, 4096, 4096, 0x1000, 0x2000, true},
		{npu.BF16, 8, 4096, 4096, 0x1000, 0x2000, true},
		{npu.BF16, 9, 4096, 4096, 0x1000, 0x2000, true}, // k_gemv_tc16
		{npu.BF16, 16, 4096, 4096, 0x1000, 0x2000, true},
		{npu.BF16, 17, 4096, 4096, 0x1000, 0x2000, false}, // above gemvMaxM: cuBLASLt
		{npu.BF16, 3, 4096, 129, 0x1000, 0x2000, false},   // K % 8 != 0: k_gemm_small
		{npu.BF16, 3, 4096, 4096, 0x1008, 0x2000, false},  // x not 16-byte aligned
		{npu.BF16, 3, 4096, 4096, 0x1000, 0x2004, false},  // w not 16-byte aligned
		{npu.F16, 1, 4096, 4096, 0x1000, 0x2000, false},
		{npu.F32, 1, 4096, 4096, 0x1000, 0x2000, false},
		{npu.BF16, 1, 16383, 4096, 0x1000, 0x2000, true},
		{npu.BF16, 1, 24576, 4096, 0x1000, 0x2000, false}, // one row, wide: k_gemm_small
		{npu.BF16, 2, 24576, 4096, 0x1000, 0x2000, true},
	} {
		if got := useGemvTC(c.dt, c.M, c.N, c.K, c.x, c.w); got != c.want {
			t.Errorf("useGemvTC(%v, M=%d, N=%d, K=%d, x=%#x, w=%#x) = %v, want %v", c.dt, c.M, c.N, c.K, c.x, c.w, got, c.want)
		}
	}
}

// TestUsePipe: k_moe_gemm_pipe takes the tiled BF16 grouped GEMMs whose
// rows its 16-byte copies and paired stores can serve, at two parts only.
func TestUsePipe(t *testing.T) {
	defer func(p int, on bool) { moeTCParts, moePipe = p, on }(moeTCParts, moePipe)
	tiled, small := &moeRoute{}, &moeRoute{small: true}
	bf, f16 := dtypeCode(npu.BF16), dtypeCode(npu.F16)
	for _, c := range []struct {
		rt     *moeRoute
		wdt    int
		N, K   int
		w      uint64
		parts  int
		pipe   bool
		want   bool
		reason string
	}{
		{tiled, bf, 4096, 4096, 0x1000, 2, true, true, "the prefill shape"},
		{tiled, bf, 96, 40, 0x1000, 2, true, true, "K a multiple of 8"},
		{small, bf, 4096, 4096, 0x1000, 2, true, false, "decode: k_gemv_tc"},
		{tiled, f16, 4096, 4096, 0x1000, 2, true, false, "F16 weights: k_moe_gemm_f"},
		{tiled, bf, 4096, 4100, 0x1000, 2, true, false, "K % 8 != 0"},
		{tiled, bf, 4095, 4096, 0x1000, 2, true, false, "odd N"},
		{tiled, bf, 4096, 4096, 0x1008, 2, true, false, "W not 16-byte aligned"},
		{tiled, bf, 4096, 4096, 0x1000, 3, true, false, "three parts: k_moe_gemm_tc"},
		{tiled, bf, 4096, 4096, 0x1000, 1, true, true, "one part (bf16 activations): k_moe_gemm_pipe1"},
		{tiled, bf, 4096, 4096, 0x1000, 2, false, false, "switched off"},
	} {
		moeTCParts, moePipe = c.parts, c.pipe
		if got := usePipe(c.rt, c.wdt, c.N, c.K, c.w); got != c.want {
			t.Errorf("%s: usePipe(small=%v, wdt=%d, N=%d, K=%d, w=%#x) at %d parts = %v, want %v", c.reason, c.rt.small, c.wdt, c.N, c.K, c.w, c.parts, got, c.want)
		}
	}
}

// TestQlatSlices: k_mla_qlat_bf16 applies to BF16, 16-byte aligned kvB
// with R % 8 == 0, within 512 threads and 48 KiB of shared memory.
func TestQlatSlices(t *testing.T) {
	for _, c := range []struct {
		dt          npu.DType
		w           uint64
		dk, R, want int
	}{
		{npu.BF16, 0, 256, 512, 8},  // the slice: 64 column groups x 8 slices
		{npu.BF16, 0, 19, 40, 19},   // fewer dk rows than would fit: one per slice
		{npu.BF16, 8, 256, 512, 0},  // misaligned
		{npu.BF16, 0, 256, 36, 0},   // R % 8 != 0
		{npu.F32, 0, 256, 512, 0},   // not BF16
		{npu.BF16, 0, 64, 8192, 0},  // R/8 > 512 threads
		{npu.BF16, 0, 1280, 512, 4}, // shared memory: 8*1280 + 4*512 floats = 48 KiB
	} {
		if got := qlatSlices(c.dt, c.w, c.dk, c.R); got != c.want {
			t.Errorf("qlatSlices(%v, %d, dk %d, R %d) = %d, want %d", c.dt, c.w, c.dk, c.R, got, c.want)
		}
	}
}

// TestQuantSupport: the int8 schemes, MXFP8 and FP8_BLOCK128 run;
// unknown schemes are refused with a reason, so that loaders never hand
// the ops a weight they cannot compute.
func TestQuantSupport(t *testing.T) {
	b := &Backend{}
	cases := []struct {
		s    npu.QScheme
		want string // "" = supported
	}{
		{npu.QW8A8Dynamic, ""}, {npu.QW8A8, ""}, {npu.QMXFP8, ""},
		{npu.QFP8Block, ""}, {npu.QNone, "unknown"},
	}
	for _, c := range cases {
		err := npu.SupportsQuant(b, c.s)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v, want supported", c.s, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: %v, want a refusal containing %q", c.s, err, c.want)
		}
	}
}

// TestKernelsStartWithPDL: every kernel's first statement is
// pdl_prologue. Kernels launch with programmatic dependent launch, so one
// that touched memory before it would race with the previous kernel. A
// kernel that reads constant data first says where its pdl_prologue is
// in a first-line comment "// pdl_prologue inside ...".
func TestKernelsStartWithPDL(t *testing.T) {
	srcs, err := kernelSources()
	if err != nil {
		t.Fatal(err)
	}
	head := regexp.MustCompile(`extern "C" __global__[^;{]*\{\s*`)
	n := 0
	for _, s := range srcs {
		b, err := kernelFS.ReadFile("kernels/" + s.File)
		if err != nil {
			t.Fatal(err)
		}
		body := string(b)
		for _, loc := range head.FindAllStringIndex(body, -1) {
			n++
			if rest := body[loc[1]:]; !strings.HasPrefix(rest, "pdl_prologue();") && !strings.HasPrefix(rest, "// pdl_prologue inside ") {
				t.Errorf("%s: kernel at %q does not start with pdl_prologue()", s.File, body[loc[0]:min(loc[1]+40, len(body))])
			}
		}
	}
	if n < 50 {
		t.Errorf("found %d kernels: the pattern no longer matches the sources", n)
	}
	for _, c := range []struct {
		major int
		env   string
		want  bool
	}{{9, "", true}, {10, "1", true}, {9, "0", false}, {8, "", false}} {
		if got := usePDL(c.major, c.env); got != c.want {
			t.Errorf("usePDL(%d, %q) = %v", c.major, c.env, got)
		}
	}
}

// TestCachedPlan: a plan is made once and then served from the cache;
// cuBLASLt's answer that it has none is cached too, until noPlan holds
// maxPlans answers.
func TestCachedPlan(t *testing.T) {
	b := &Backend{plans: map[planKey]uintptr{}, noPlan: map[planKey]error{}}
	calls := 0
	ok := func() (uintptr, error) { calls++; return 7, nil }
	none := errors.New("no algorithm")
	fail := func() (uintptr, error) { calls++; return 0, none }
	k1 := planKey{m: 1, n: 2, k: 3, abType: cudaR16BF, align: 256}
	for range 3 {
		if p, err := b.cachedPlan(k1, ok); p != 7 || err != nil {
			t.Fatalf("cachedPlan = %d, %v; want 7, nil", p, err)
		}
	}
	k2 := fp8Key(64, 8, 512, cudaR32F, 256, 0, 256)
	for range 3 {
		if _, err := b.cachedPlan(k2, fail); !errors.Is(err, none) {
			t.Fatalf("cachedPlan of a shape with no algorithm: %v", err)
		}
	}
	if calls != 2 {
		t.Errorf("create called %d times for two keys asked three times each, want 2", calls)
	}
	if b.fp8NoPlan(64, 8, 512, 256, 256) {
		t.Error("fp8NoPlan with only the fp32 D type refused: want false")
	}
	if _, err := b.cachedPlan(fp8Key(64, 8, 512, cudaR16BF, 256, 0, 256), fail); err == nil || !b.fp8NoPlan(64, 8, 512, 256, 256) {
		t.Error("fp8NoPlan with both D types refused: want true")
	}
	for i := len(b.noPlan); i < maxPlans; i++ {
		b.noPlan[planKey{m: 1000 + i}] = none
	}
	calls = 0
	k3 := planKey{m: 5}
	b.cachedPlan(k3, fail)
	b.cachedPlan(k3, fail)
	if calls != 2 || len(b.noPlan) != maxPlans {
		t.Errorf("with noPlan full: create called %d times (want 2), noPlan holds %d (want %d)", calls, len(b.noPlan), maxPlans)
	}
}

// TestMoEPartsFor: EnvBF16Activations=1 takes the MoE to one part whatever
// EnvMoEParts says; anything else leaves EnvMoEParts' choice.
func TestMoEPartsFor(t *testing.T) {
	for _, c := range []struct {
		bf16       string
		parts, got int
	}{{"1", 2, 1}, {"1", 3, 1}, {"", 2, 2}, {"0", 3, 3}, {"true", 2, 2}} {
		if got := moePartsFor(c.bf16, c.parts); got != c.got {
			t.Errorf("moePartsFor(%q, %d) = %d, want %d", c.bf16, c.parts, got, c.got)
		}
	}
}
