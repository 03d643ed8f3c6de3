package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var updateGolden = flag.Bool("update", false, "rewrite the plan golden files")

const (
	fullDir = "testdata/glm5.3-flash"
	tinyDir = "../../testdata/glm5next/tiny"
)

func loadModel(t *testing.T, dir string) *ModelConfig {
	t.Helper()
	m, err := LoadModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// seedPlan builds the plan of a seed launch script plus extra flags.
func seedPlan(t *testing.T, file string, extra ...string) *Plan {
	t.Helper()
	args := append(scriptArgs(t, filepath.Join("testdata", "serve", file)), extra...)
	p, err := BuildPlan(mustServe(t, args...), loadModel(t, fullDir), nil)
	if err != nil {
		t.Fatalf("%s: BuildPlan: %v", file, err)
	}
	return p
}

// TestInventoryMatchesParamCount: the per-tensor inventory the plan sums
// adds up to ParamCount, main model and MTP.
func TestInventoryMatchesParamCount(t *testing.T) {
	for _, dir := range []string{fullDir, tinyDir, "testdata/tiny", "testdata/micro"} {
		c := loadModel(t, dir)
		var main, mtp int64
		for _, g := range inventory(c) {
			if g.MTP {
				mtp += g.params()
			} else {
				main += g.params()
			}
		}
		pc := c.ParamCount()
		if main != pc.Total || mtp != pc.MTP {
			t.Errorf("%s: inventory main %d, mtp %d; ParamCount %d, %d", dir, main, mtp, pc.Total, pc.MTP)
		}
	}
}

// TestPlanFullSizeParams: GLM-5.3-Flash is ≈320.8B text parameters
// including MTP (glm5next-architecture.md §6.1: 320,759,404,382).
func TestPlanFullSizeParams(t *testing.T) {
	p := seedPlan(t, "a3-tp16.sh", "--device-memory", "atlas-800-a3")
	want(t, "TotalWithMTP", p.Params.TotalWithMTP, int64(320_759_404_382))
	want(t, "Total", p.Params.Total, int64(313_326_811_966))
	want(t, "MTP", p.Params.MTP, int64(7_432_592_416))
	want(t, "ActiveWithMTP", p.Params.ActiveWithMTP, int64(17_128_494_942))
	if b := float64(p.Params.TotalWithMTP) / 1e9; b < 320.75 || b > 320.85 {
		t.Errorf("TotalWithMTP = %.2fB, want ≈ 320.8B", b)
	}
	var sum int64
	for _, part := range p.Weights.Parts {
		sum += part.Params
	}
	want(t, "sum of parts", sum, p.Params.Total)
}

// expertBytes is one routed expert's gate, up and down projections in a
// quantized format, computed by hand: int8/fp8 weights plus scales.
func expertBytes(format string) int64 {
	const d, im = 4096, 2048
	row := func(rows, cols int64) int64 {
		switch format {
		case "w8a8_dynamic": // int8 + bf16 weight_scale + weight_offset per row
			return rows*cols + rows*4
		case "mxfp8": // e4m3 + one e8m0 byte per 32 along K
			return rows*cols + rows*cols/32
		}
		panic(format)
	}
	return 2*row(im, d) + row(d, im)
}

// TestPlanSeedDeployments: the three vllm-ascend GLM-5.3-Flash layouts,
// flags taken from the guide's scripts plus --device-memory.
func TestPlanSeedDeployments(t *testing.T) {
	const (
		d, v            = 4096, 154880
		layersMoE       = 42
		kdaLayers       = 34
		hk              = 64 * 128
		cacheTok        = 11 * (512*2 + 2*128*2 + 128*2/4) // bf16 latent, raw key+gate, pooled share
		kdaLayer  int64 = 137_732_288                      // one KDA layer's parameters
		kdaRepl   int64 = 2*128*d + 128                    // f_a_proj, g_a_proj, o_norm: replicated over TP
	)
	// KDA heads are split over TP: per rank, the bf16 conv window and fp32
	// recurrent state of 64/TP heads, the split parameters over TP, and
	// q/k/v/o int8 with per-row scales in w8a8.
	statePerSeq := func(tp int64) int64 { return 34 * (3*3*hk/tp*4 + 64/tp*128*128*4) } // fp32 conv window and recurrent state
	kdaPerRank := func(tp int64) int64 { return kdaLayers * ((kdaLayer-kdaRepl)/tp + kdaRepl) }
	kdaQuant := func(tp int64) int64 {
		return kdaLayers * (3*hk/tp*d + 3*hk/tp*4 + d*hk/tp + d*4)
	}
	cases := []struct {
		name, file, mem  string
		format           string
		tp, dp, ep       int
		expertsPerRank   int
		nodes, thisNode  int
		perRankBytes     int64 // regression value, hand-checked in parts below
		seqsPerDP        int64
		concurrentPerDP  int64
		apiServerRanks   []int
		thisNodeRanks    int
		nodeRoles        []string
		embedRowsPerRank int64
	}{
		{name: "2x Atlas 800 A2 DP2 TP8 EP w8a8, head", file: "a2-dp2-tp8-node0.sh", mem: "atlas-800-a2", format: "w8a8_dynamic",
			tp: 8, dp: 2, ep: 16, expertsPerRank: 18, nodes: 2, thisNode: 0, perRankBytes: 20_723_649_948, seqsPerDP: 14, concurrentPerDP: 14,
			apiServerRanks: []int{0}, thisNodeRanks: 8, nodeRoles: []string{"head", "headless"}, embedRowsPerRank: v / 8},
		{name: "2x Atlas 800 A2 DP2 TP8 EP w8a8, headless", file: "a2-dp2-tp8-node1.sh", mem: "atlas-800-a2", format: "w8a8_dynamic",
			tp: 8, dp: 2, ep: 16, expertsPerRank: 18, nodes: 2, thisNode: 1, perRankBytes: 20_723_649_948, seqsPerDP: 14, concurrentPerDP: 14,
			apiServerRanks: []int{0}, thisNodeRanks: 8, nodeRoles: []string{"head", "headless"}, embedRowsPerRank: v / 8},
		{name: "Atlas 800 A3 TP16 EP w8a8", file: "a3-tp16.sh", mem: "atlas-800-a3", format: "w8a8_dynamic",
			tp: 16, dp: 1, ep: 16, expertsPerRank: 18, nodes: 1, thisNode: 0, perRankBytes: 20_099_609_740, seqsPerDP: 15, concurrentPerDP: 14,
			apiServerRanks: []int{0}, thisNodeRanks: 16, nodeRoles: []string{"head"}, embedRowsPerRank: v / 16},
		{name: "950DT TP8 EP mxfp8", file: "950dt-tp8-mxfp8.sh", mem: "950dt", format: "mxfp8",
			tp: 8, dp: 1, ep: 8, expertsPerRank: 36, nodes: 1, thisNode: 0, perRankBytes: 40_944_400_284, seqsPerDP: 20, concurrentPerDP: 20,
			apiServerRanks: []int{0}, thisNodeRanks: 8, nodeRoles: []string{"head"}, embedRowsPerRank: v / 8},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := seedPlan(t, tc.file, "--device-memory", tc.mem)
			want(t, "backend", p.Device.Backend, "ascend")
			want(t, "format", p.Weights.CheckpointFormat, tc.format)
			want(t, "TP", p.Parallel.TensorParallelSize, tc.tp)
			want(t, "DP", p.Parallel.DataParallelSize, tc.dp)
			want(t, "EP", p.Parallel.ExpertParallelSize, tc.ep)
			want(t, "experts per rank", p.Parallel.RoutedExpertsPerRank, tc.expertsPerRank)
			want(t, "nodes", p.Parallel.Nodes, tc.nodes)
			want(t, "this node", p.Parallel.ThisNode, tc.thisNode)
			want(t, "ranks", len(p.Ranks), tc.tp*tc.dp)
			want(t, "bytes per rank", p.Weights.BytesPerRank, tc.perRankBytes)
			want(t, "fits", p.Memory.Fits, true)
			want(t, "sequences at max len per DP rank", p.Memory.SequencesAtMaxLenPerDPRank, tc.seqsPerDP)
			want(t, "sequences at max len", p.Memory.SequencesAtMaxLen, tc.seqsPerDP*int64(tc.dp))
			want(t, "concurrent at max len", p.Memory.ConcurrentAtMaxLenPerDPRank, tc.concurrentPerDP)
			var roles []string
			for _, n := range p.Nodes {
				roles = append(roles, n.Role)
			}
			want(t, "node roles", roles, tc.nodeRoles)

			// Hand checks of the parts.
			parts := map[string]PlanPart{}
			for _, x := range p.Weights.Parts {
				parts[x.Name] = x
			}
			want(t, "routed experts bytes", parts[partRoutedExperts].BytesPerRank, layersMoE*int64(tc.expertsPerRank)*expertBytes(tc.format))
			want(t, "embed bytes", parts[partEmbed].BytesPerRank, tc.embedRowsPerRank*d*2)
			want(t, "lm_head bytes", parts[partLMHead].BytesPerRank, tc.embedRowsPerRank*d*2)
			// KDA heads over TP: 34 × 137,732,288 parameters in all.
			want(t, "KDA params", parts[partKDA].Params, int64(kdaLayers*kdaLayer))
			tp := int64(tc.tp)
			want(t, "KDA params per rank", parts[partKDA].ParamsPerRank, kdaPerRank(tp))
			if tc.format == "w8a8_dynamic" {
				kdaBF16 := (kdaPerRank(tp) - kdaLayers*4*hk*d/tp) * 2
				want(t, "KDA bytes", parts[partKDA].BytesPerRank, kdaQuant(tp)+kdaBF16)
			}
			var sum int64
			for _, x := range p.Weights.Parts {
				sum += x.BytesPerRank
			}
			want(t, "sum of parts", sum, p.Weights.BytesPerRank)
			want(t, "all ranks", p.Weights.BytesAllRanks, p.Weights.BytesPerRank*int64(tc.tp*tc.dp))

			// Cache per rank (BF16 on Ascend, fp32 conv window and recurrent state).
			want(t, "cache bytes per token", p.Cache.BytesPerToken, int64(cacheTok))
			want(t, "state per sequence", p.Cache.BytesPerSequenceState, statePerSeq(tp))
			m := p.Memory
			want(t, "usable", m.UsableBytes, int64(float64(p.Device.MemoryBytes)*m.GPUMemoryUtilization))
			want(t, "budget", m.CacheBudgetBytes, m.UsableBytes-m.WeightBytes-m.Reserve.TotalBytes)
			want(t, "blocks", m.NumBlocks, (m.CacheBudgetBytes-32*statePerSeq(tp))/(64*cacheTok))
			want(t, "sequences", m.SequencesAtMaxLenPerDPRank, m.CacheBudgetBytes/(133120*cacheTok+statePerSeq(tp)))

			// Ranks: roles, devices, expert ranges.
			var api []int
			here := 0
			for _, r := range p.Ranks {
				if r.APIServer {
					api = append(api, r.Rank)
				}
				if r.ThisNode {
					here++
				}
				want(t, "rank", r.Rank, r.DPRank*tc.tp+r.TPRank)
				want(t, "device", r.Device, r.Rank%(tc.tp*max(1, tc.dp/tc.nodes)))
				want(t, "ep rank", r.EPRank, r.Rank)
				want(t, "first expert", r.FirstExpert, r.Rank*tc.expertsPerRank)
				want(t, "dp coordinator", r.DPCoordinator, tc.dp > 1 && r.Rank == 0)
			}
			want(t, "API server ranks", api, tc.apiServerRanks)
			want(t, "ranks on this node", here, tc.thisNodeRanks)
			want(t, "MTP not loaded", p.Weights.MTPLoaded, false)
			if p.Weights.MTPBytesPerRank <= 0 {
				t.Error("MTP bytes per rank not reported")
			}
			if _, err := p.JSON(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// modelslimDir is a model directory with GLM-5.3-Flash's config.json and
// msmodelslim's description saying model_quant_type qt (no weights: the
// plan reads none).
func modelslimDir(t *testing.T, qt string) string {
	t.Helper()
	dir := t.TempDir()
	data, err := os.ReadFile(filepath.Join(fullDir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	// Without the FP8 quantization_config: msmodelslim checkpoints have none.
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	delete(doc, "quantization_config")
	out, _ := json.Marshal(doc)
	os.WriteFile(filepath.Join(dir, "config.json"), out, 0o644)
	os.WriteFile(filepath.Join(dir, "quant_model_description.json"), []byte(`{"version": "1.0.0", "model_quant_type": "`+qt+`", "model.embed_tokens.weight": "FLOAT"}`), 0o644)
	return dir
}

// TestPlanCPUQuantized: the cpu backend runs msmodelslim checkpoints
// quantized (--device cpu with an Ascend weight format, or no flag), the
// plan counting their bytes from the description's type; the named
// formats must match the description, and a dir without one fails naming
// --quantization.
func TestPlanCPUQuantized(t *testing.T) {
	full := loadModel(t, fullDir)
	dyn, static, mx := modelslimDir(t, "W8A8_DYNAMIC"), modelslimDir(t, "W8A8"), modelslimDir(t, "W8A8_MXFP8")
	const perLayer = 42 * 18 // TP16 EP: 18 experts per rank
	dynExperts := int64(perLayer * (2*(2048*4096+2048*4) + (4096*2048 + 4096*4)))
	mxExperts := int64(perLayer * (2*(2048*4096+2048*4096/32) + (4096*2048 + 4096*2048/32)))
	cases := []struct {
		name    string
		args    []string
		format  string // checkpoint and device format
		source  string
		quant   string // quantized_bytes_per_param
		experts int64  // routed experts' bytes on the largest rank
		err     []string
	}{
		{"ascend, W8A8_DYNAMIC", []string{dyn, "--device", "cpu", "--quantization", "ascend", "-tp", "16", "-ep"},
			"w8a8_dynamic", "--quantization ascend: quant_model_description.json model_quant_type W8A8_DYNAMIC", "1 (int8)", dynExperts, nil},
		{"ascend, W8A8: experts dynamic", []string{static, "--device", "cpu", "--quantization", "ascend", "-tp", "16", "-ep"},
			"w8a8", "--quantization ascend: quant_model_description.json model_quant_type W8A8", "1 (int8)", dynExperts, nil},
		{"ascend, W8A8_MXFP8", []string{mx, "--device", "cpu", "-q", "ascend", "-tp", "16", "-ep"},
			"mxfp8", "--quantization ascend: quant_model_description.json model_quant_type W8A8_MXFP8", "1 (float8_e4m3) + 1/32 (e8m0 scale per 32 along K)", mxExperts, nil},
		{"w8a8_dynamic matches", []string{dyn, "--device", "cpu", "--quantization", "w8a8_dynamic", "-tp", "16", "-ep"},
			"w8a8_dynamic", "--quantization w8a8_dynamic: quant_model_description.json model_quant_type W8A8_DYNAMIC", "1 (int8)", dynExperts, nil},
		{"modelopt_mxfp8 is w8a8_mxfp8", []string{mx, "--device", "cpu", "--quantization", "modelopt_mxfp8", "-tp", "16", "-ep"},
			"mxfp8", "--quantization modelopt_mxfp8: quant_model_description.json model_quant_type W8A8_MXFP8", "1 (float8_e4m3) + 1/32 (e8m0 scale per 32 along K)", mxExperts, nil},
		{"no flag: detected", []string{dyn, "-tp", "16", "-ep"},
			"w8a8_dynamic", "quant_model_description.json model_quant_type W8A8_DYNAMIC (no --quantization: the cpu loader detects msmodelslim checkpoints)", "1 (int8)", dynExperts, nil},
		{"w8a8 vs a W8A8_DYNAMIC description", []string{dyn, "--device", "cpu", "--quantization", "w8a8"}, "", "", "", 0,
			[]string{"--quantization w8a8: ", dyn, "model_quant_type W8A8_DYNAMIC", "wants W8A8 "}},
		{"mxfp8 vs a W8A8 description", []string{static, "--device", "cpu", "--quantization", "mxfp8"}, "", "", "", 0,
			[]string{"--quantization mxfp8: ", "model_quant_type W8A8,", "wants W8A8_MXFP8"}},
		{"ascend without a description", []string{fullDir, "--device", "cpu", "--quantization", "ascend"}, "", "", "", 0,
			[]string{"--quantization ascend: ", fullDir + " has no quant_model_description.json"}},
		{"w8a8_dynamic without a description", []string{fullDir, "--device", "cpu", "--quantization", "w8a8_dynamic"}, "", "", "", 0,
			[]string{"--quantization w8a8_dynamic: ", fullDir + " has no quant_model_description.json"}},
		{"not a local dir", []string{"org/GLM-5.3-Flash-w8a8", "--device", "cpu", "--quantization", "ascend"}, "", "", "", 0,
			[]string{"--quantization ascend: ", `"org/GLM-5.3-Flash-w8a8" is not one`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := BuildPlan(mustServe(t, tc.args...), full, nil)
			if tc.err != nil {
				if err == nil {
					t.Fatalf("no error, want %q", tc.err)
				}
				for _, w := range tc.err {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q, want it to contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want(t, "backend", p.Device.Backend, "cpu")
			want(t, "checkpoint format", p.Weights.CheckpointFormat, tc.format)
			want(t, "device format", p.Weights.DeviceFormat, tc.format)
			want(t, "format source", p.Weights.FormatSource, tc.source)
			want(t, "quantized bytes", p.Weights.QuantizedBytes, tc.quant)
			want(t, "matrix bytes (FLOAT matrices as stored, bf16)", p.Weights.MatrixBytes, 2)
			for _, x := range p.Weights.Parts {
				if x.Name == partRoutedExperts {
					want(t, "routed experts quantized", x.Quantized, true)
					want(t, "routed experts bytes", x.BytesPerRank, tc.experts)
				}
			}
		})
	}
	// Static W8A8 on the cpu: int8 + deq_scale (fp32) + quant_bias (int32)
	// per output row of the shared experts; the float plan is larger.
	shared := func(args ...string) int64 {
		p, err := BuildPlan(mustServe(t, args...), full, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range p.Weights.Parts {
			if x.Name == partSharedExperts {
				return x.BytesPerRank
			}
		}
		t.Fatal("no shared experts part")
		return 0
	}
	ish, d := int64(full.MoEIntermediateSize*full.NSharedExperts), int64(full.HiddenSize)
	want(t, "w8a8 shared experts on the cpu", shared(static, "--device", "cpu", "-q", "ascend"),
		int64(full.NumHiddenLayers-full.FirstKDenseReplace)*(2*(ish*d+ish*8)+(d*ish+d*8)))
	// --dtype float32 widens the FLOAT matrices, not the quantized ones.
	p, err := BuildPlan(mustServe(t, dyn, "--device", "cpu", "-q", "ascend", "--dtype", "float32", "-tp", "16", "-ep"), full, nil)
	if err != nil {
		t.Fatal(err)
	}
	want(t, "float32 matrix bytes", p.Weights.MatrixBytes, 4)
	want(t, "quantized format kept", p.Weights.DeviceFormat, "w8a8_dynamic")
}

// TestPlanImpliedAscendOnCPU: --quantization alone implies the Ascend
// backend in plans (as vllm-ascend); serve moves it to the cpu backend,
// which the plan then names as the reason, and counts the weights
// quantized. An explicit --device ascend or an Ascend preset stays.
func TestPlanImpliedAscendOnCPU(t *testing.T) {
	full := loadModel(t, fullDir)
	dyn := modelslimDir(t, "W8A8_DYNAMIC")
	noCANN := errors.New("no libascendcl.so")
	cases := []struct {
		name    string
		args    []string
		before  string // the backend Build resolves
		probe   error  // npu.Available("ascend")
		warning string // RunImpliedAscendOnCPU's, "" for none
		source  string // the plan's backend_source after it
	}{
		{"implied by --quantization", []string{dyn, "--quantization", "ascend"}, "ascend", noCANN,
			"--quantization ascend implies the Ascend backend, which does not load here (no libascendcl.so); running the msmodelslim checkpoint on the cpu backend",
			"--quantization ascend implies the Ascend backend, which does not load here: the cpu backend"},
		{"implied by w8a8_dynamic", []string{dyn, "-q", "w8a8_dynamic"}, "ascend", noCANN,
			"--quantization w8a8_dynamic implies the Ascend backend, which does not load here (no libascendcl.so); running the msmodelslim checkpoint on the cpu backend",
			"--quantization w8a8_dynamic implies the Ascend backend, which does not load here: the cpu backend"},
		{"implied, CANN loads", []string{dyn, "--quantization", "ascend"}, "ascend", nil, "", "--quantization ascend (an Ascend weight format)"},
		{"explicit --device ascend", []string{dyn, "--device", "ascend", "--quantization", "ascend"}, "ascend", noCANN, "", "flag"},
		{"Ascend preset", []string{dyn, "--device-memory", "atlas-800-a3", "--quantization", "ascend", "-tp", "16", "-ep"}, "ascend", noCANN, "", "--device-memory atlas-800-a3"},
		{"explicit --device cpu", []string{dyn, "--device", "cpu", "--quantization", "ascend"}, "cpu", noCANN, "", "flag"},
		{"fp8 is not an Ascend format", []string{dyn, "--quantization", "fp8"}, "cpu", noCANN, "", "default"},
		{"no flag", []string{dyn}, "cpu", noCANN, "", "default"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := mustServe(t, tc.args...)
			want(t, "device", a.Device, tc.before)
			want(t, "warning", a.RunImpliedAscendOnCPU(tc.probe), tc.warning)
			p, err := BuildPlan(a, full, nil)
			if err != nil {
				t.Fatal(err)
			}
			wantBackend := tc.before
			if tc.warning != "" {
				wantBackend = "cpu"
				want(t, "format", p.Weights.DeviceFormat, "w8a8_dynamic")
			}
			want(t, "backend", p.Device.Backend, wantBackend)
			want(t, "backend source", p.Device.BackendSource, tc.source)
		})
	}
}

// TestCPULoadQuantization: --quantization to the cpu loader's mode, the
// checkpoint checked against it.
func TestCPULoadQuantization(t *testing.T) {
	dyn, mx := modelslimDir(t, "W8A8_DYNAMIC"), modelslimDir(t, "W8A8_MXFP8")
	cases := []struct {
		q, dir string
		mode   string
		err    []string
	}{
		{"", fullDir, "", nil},
		{"", dyn, "", nil},
		{"fp8", dyn, "", nil},
		{"ascend", dyn, "ascend", nil},
		{"w8a8_dynamic", dyn, "ascend", nil},
		{"w8a8_mxfp8", mx, "ascend", nil},
		{"mxfp8", mx, "ascend", nil},
		{"modelopt_mxfp8", mx, "ascend", nil},
		{"ascend", fullDir, "", []string{"--quantization ascend: " + fullDir + " has no quant_model_description.json"}},
		{"w8a8", dyn, "", []string{"--quantization w8a8: ", dyn, "model_quant_type W8A8_DYNAMIC", "wants W8A8 "}},
		{"w8a8_dynamic", mx, "", []string{"--quantization w8a8_dynamic: ", "model_quant_type W8A8_MXFP8", "wants W8A8_DYNAMIC"}},
		{"awq", dyn, "", []string{`--quantization: must be one of ascend, fp8`, `got "awq"`}},
	}
	for _, tc := range cases {
		mode, err := CPULoadQuantization(tc.q, tc.dir)
		if tc.err == nil {
			if err != nil || mode != tc.mode {
				t.Errorf("CPULoadQuantization(%q, %s) = %q, %v; want %q", tc.q, tc.dir, mode, err, tc.mode)
			}
			continue
		}
		if err == nil {
			t.Errorf("CPULoadQuantization(%q, %s) = %q, want an error", tc.q, tc.dir, mode)
			continue
		}
		for _, w := range tc.err {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("CPULoadQuantization(%q, %s): error %q, want it to contain %q", tc.q, tc.dir, err, w)
			}
		}
	}
}

// TestPlanWeightFormats: how --quantization and the checkpoint's files
// resolve to bytes.
func TestPlanWeightFormats(t *testing.T) {
	full := loadModel(t, fullDir)
	desc := func(qt string) string { return modelslimDir(t, qt) }
	cases := []struct {
		name   string
		args   []string
		format string
		err    string
	}{
		{"fp8 checkpoint, default", []string{fullDir, "--device", "ascend", "-tp", "16", "-ep"}, "fp8_block128", ""},
		{"fp8 checkpoint on the cpu", []string{fullDir, "-tp", "16", "-ep"}, "fp8_block128", ""},
		{"msmodelslim W8A8", []string{desc("W8A8"), "--quantization", "ascend", "-tp", "16", "-ep"}, "w8a8", ""},
		{"msmodelslim W8A8_MXFP8", []string{desc("W8A8_MXFP8"), "--quantization", "ascend", "-tp", "8", "-ep"}, "mxfp8", ""},
		{"msmodelslim FLOAT", []string{desc("FLOAT"), "--quantization", "ascend", "-tp", "16", "-ep"}, "bfloat16", ""},
		{"msmodelslim W4A8", []string{desc("W4A8_DYNAMIC"), "--quantization", "ascend"}, "", `model_quant_type "W4A8_DYNAMIC"`},
		{"ascend without a hint", []string{"org/GLM-5.3-Flash", "--quantization", "ascend"}, "", "--quantization ascend: no quant_model_description.json"},
		{"explicit w8a8_mxfp8", []string{"org/GLM-5.3-Flash", "--quantization", "w8a8_mxfp8", "-tp", "8", "-ep"}, "mxfp8", ""},
		{"online fp8", []string{"org/GLM-5.3-Flash", "--device", "ascend", "--quantization", "fp8", "-tp", "16", "-ep"}, "fp8_per_tensor", ""},
		{"bf16", []string{"org/GLM-5.3-Flash", "--device", "ascend", "-tp", "16", "-ep"}, "bfloat16", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := BuildPlan(mustServe(t, tc.args...), full, nil)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want(t, "format", p.Weights.CheckpointFormat, tc.format)
		})
	}
	// Hand checks of the bytes per param.
	expertsOn := func(args ...string) int64 {
		p, err := BuildPlan(mustServe(t, args...), full, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range p.Weights.Parts {
			if x.Name == partRoutedExperts {
				return x.BytesPerRank
			}
		}
		t.Fatal("no routed experts part")
		return 0
	}
	const perLayer = 42 * 18 // TP16 EP: 18 experts per rank
	block := func(r, c int64) int64 { return r*c + 4*((r+127)/128)*((c+127)/128) }
	// Block FP8 stays FP8_BLOCK128 on the backends that keep it (cpu,
	// cuda, whatever --dtype says of the float matrices) and is
	// dequantised on ascend.
	want(t, "fp8 block-128 experts on cuda", expertsOn(fullDir, "--device", "cuda", "-tp", "16", "-ep"),
		perLayer*(2*block(2048, 4096)+block(4096, 2048)))
	want(t, "fp8 on ascend: dequantised to bf16", expertsOn(fullDir, "--device", "ascend", "-tp", "16", "-ep"), int64(perLayer*3*2048*4096*2))
	want(t, "bf16 experts", expertsOn("org/x", "--device", "ascend", "-tp", "16", "-ep"), int64(perLayer*3*2048*4096*2))
	want(t, "fp8 on the cpu: kept", expertsOn(fullDir, "-tp", "16", "-ep"), perLayer*(2*block(2048, 4096)+block(4096, 2048)))
	want(t, "fp8 on the cpu, --dtype float32: kept", expertsOn(fullDir, "-tp", "16", "-ep", "--dtype", "float32"), perLayer*(2*block(2048, 4096)+block(4096, 2048)))
	want(t, "cpu online fp8: as stored", expertsOn("org/x", "--quantization", "fp8", "-tp", "16", "-ep"), int64(perLayer*3*2048*4096*2))
	// w8a8 static: routed experts are W8A8_DYNAMIC (int8 + 4 B per row).
	want(t, "w8a8 experts", expertsOn(desc("W8A8"), "--quantization", "ascend", "-tp", "16", "-ep"),
		perLayer*(2*(2048*4096+2048*4)+(4096*2048+4096*4)))
	// Without EP each rank holds a 1/TP slice of every expert.
	want(t, "TP-sharded experts", expertsOn("org/x", "--device", "ascend", "-tp", "16"), int64(42*288*3*2048*4096*2/16))
}

// TestPlanBlockFP8: which tensors of a block-FP8 checkpoint the plan
// counts as kept FP8_BLOCK128 (fp8Kept, the loader's decideFP8 rules) and
// the note each backend prints.
func TestPlanBlockFP8(t *testing.T) {
	grp := func(name string, shape ...int) tensorGroup {
		return tensorGroup{TensorSpec: TensorSpec{Name: name, Shape: shape, Matrix: true, Quant: true}, layers: 1}
	}
	for _, c := range []struct {
		g          tensorGroup
		rows, cols int64
		kept       bool
	}{
		{grp("model.layers.0.self_attn.o_proj.weight", 4096, 8192), 4096, 8192, true},
		{grp("model.layers.0.self_attn.o_proj.weight", 4096, 8192), 4096, 512, true},    // TP16 columns: 4 blocks
		{grp("model.layers.0.self_attn.o_proj.weight", 4096, 8192), 4096, 64, false},    // TP128 columns cut a block
		{grp("model.layers.0.mlp.gate_proj.weight", 2048, 4096), 64, 4096, false},       // TP32 rows of a fused part
		{grp("model.layers.0.self_attn.q_proj.weight", 96, 4096), 96, 4096, false},      // a fused q|k|v part of 96 rows
		{grp("model.layers.0.self_attn.v_proj.weight", 96, 4096), 96, 4096, true},       // the last part may end in a partial block
		{grp("model.layers.0.self_attn.kv_b_proj.weight", 4096, 512), 4096, 512, false}, // absorbed into MLA
		{grp("model.layers.0.mlp.experts.3.down_proj.weight", 4096, 2048), 4096, 2048, true},
	} {
		if got := fp8Kept(c.g, c.rows, c.cols); got != c.kept {
			t.Errorf("fp8Kept(%s %v on a rank [%d %d]) = %v, want %v", c.g.Name, c.g.Shape, c.rows, c.cols, got, c.kept)
		}
	}
	full := loadModel(t, fullDir)
	for _, c := range []struct {
		device, format, note string
	}{
		{"cpu", "fp8_block128", "the cpu backend keeps the F8_E4M3 linears and routed experts as FP8_BLOCK128"},
		{"cuda", "fp8_block128", "the cuda backend keeps the F8_E4M3 linears"},
		{"ascend", "bfloat16", "the ascend backend has no FP8_BLOCK128 path, so the loader dequantises the F8_E4M3 weights to bfloat16"},
	} {
		p, err := BuildPlan(mustServe(t, fullDir, "--device", c.device, "-tp", "16", "-ep", "--quantization", "fp8"), full, nil)
		if err != nil {
			t.Fatal(err)
		}
		want(t, c.device+" device format", p.Weights.DeviceFormat, c.format)
		if !slices.ContainsFunc(p.Notes, func(n string) bool { return strings.Contains(n, c.note) }) {
			t.Errorf("%s: notes %q lack %q", c.device, p.Notes, c.note)
		}
	}
}

// TestPlanLayouts: DP ranks spread over nodes by --data-parallel-size-local.
func TestPlanLayouts(t *testing.T) {
	tiny := loadModel(t, tinyDir)
	cases := []struct {
		name      string
		args      []string
		roles     []string
		thisNode  int
		api       []int // ranks hosting API servers
		apiCount  int
		devices   []int // per rank
		nodeOfDP  []int
		balancing string
	}{
		{"single node DP2 TP2", []string{"m", "-dp", "2", "-tp", "2"}, []string{"head"}, 0, []int{0}, 2,
			[]int{0, 1, 2, 3}, []int{0, 0}, "internal"},
		{"4 nodes, third one headless", []string{"m", "-dp", "4", "-tp", "2", "-dpl", "1", "-dpr", "2", "--headless", "-dpa", "10.0.0.1"},
			[]string{"head", "headless", "headless", "headless"}, 2, []int{0}, 0, []int{0, 1, 0, 1, 0, 1, 0, 1}, []int{0, 1, 2, 3}, "internal"},
		{"hybrid load balancing", []string{"m", "-dp", "4", "-dpl", "2", "-dpr", "2", "-dpa", "10.0.0.1"},
			[]string{"head", "hybrid"}, 1, []int{0, 2}, 2, []int{0, 1, 0, 1}, []int{0, 0, 1, 1}, "hybrid"},
		{"API-only head", []string{"m", "-dp", "2", "-dpl", "0"},
			[]string{"head", "headless"}, 0, nil, 2, []int{0, 1}, []int{1, 1}, "internal"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := BuildPlan(mustServe(t, tc.args...), tiny, nil)
			if err != nil {
				t.Fatal(err)
			}
			var roles []string
			for _, n := range p.Nodes {
				roles = append(roles, n.Role)
			}
			want(t, "roles", roles, tc.roles)
			want(t, "this node", p.Parallel.ThisNode, tc.thisNode)
			var api, devices []int
			nodeOfDP := make([]int, p.Parallel.DataParallelSize)
			for _, r := range p.Ranks {
				if r.APIServer {
					api = append(api, r.Rank)
				}
				devices = append(devices, r.Device)
				nodeOfDP[r.DPRank] = r.Node
			}
			want(t, "API server ranks", api, tc.api)
			want(t, "api_server_count", p.Frontend.APIServerCount, tc.apiCount)
			want(t, "devices", devices, tc.devices)
			want(t, "node of DP rank", nodeOfDP, tc.nodeOfDP)
			want(t, "load balancing", strings.HasPrefix(p.Parallel.LoadBalancing, tc.balancing), true)
		})
	}
}

// TestPlanErrors: values that cannot work name the flag (or settings key).
func TestPlanErrors(t *testing.T) {
	tiny := loadModel(t, tinyDir)
	full := loadModel(t, fullDir)
	cases := []struct {
		name  string
		args  []string
		model *ModelConfig
		want  string
		plan  bool // the plan comes back with the error
	}{
		{"TP does not divide heads", []string{"m", "-tp", "3"}, tiny, "--tensor-parallel-size: 3 does not divide num_attention_heads (4)", false},
		{"TP does not divide the expert width", []string{"m", "-tp", "8"}, tiny, "--tensor-parallel-size: 8 does not divide num_attention_heads (4)", false},
		{"more EP ranks than experts", []string{"m", "-dp", "4", "-tp", "4", "-ep"}, tiny, "--enable-expert-parallel: 16 expert-parallel ranks (--data-parallel-size 4 × --tensor-parallel-size 4) exceed the 8 routed experts", false},
		{"block size", []string{"m", "--block-size", "6"}, tiny, "--block-size: must be a multiple of index_kpool (4)", false},
		{"max-model-len", []string{"m", "--max-model-len", "5000"}, tiny, "--max-model-len: 5000 exceeds the model's max_position_embeddings (4096)", false},
		{"weights do not fit", []string{"m", "--device-memory", "atlas-800-a2", "-tp", "4", "-ep", "--quantization", "w8a8"}, full,
			"--device-memory: the weights", true},
		{"utilization too low", []string{"m", "--device-memory", "atlas-800-a2", "-tp", "16", "-ep", "--quantization", "w8a8", "--gpu-memory-utilization", "0.3"}, full,
			"--gpu-memory-utilization: the weights", true},
		{"max len does not fit", []string{"m", "--device-memory", "atlas-800-a3", "-tp", "16", "-ep", "--quantization", "w8a8", "--max-num-seqs", "8", "--gpu-memory-utilization", "0.5"}, full,
			"--max-model-len: one sequence of 1048576 tokens needs", true},
		{"state slots do not fit", []string{"m", "--device-memory", "atlas-800-a2", "-tp", "16", "-ep", "--quantization", "w8a8", "--max-num-seqs", "4096", "--max-num-batched-tokens", "8192", "--max-model-len", "4096"}, full,
			"--max-num-seqs: 4096 state slots", true},
		{"settings restate the model wrongly", []string{"m", "--config", "testdata/settings/blog-settings.json", "--quantization", "w8a8_dynamic"}, tiny,
			"moe.dense_layers = 3, but config.json has mlp_layer_types (dense layers) = 2", false},
		{"settings EP size", []string{"m", "--config", "testdata/settings/blog-config.toml", "-tp", "16", "--max-model-len", "4096"}, full,
			"moe.expert_parallel = 8, but the expert-parallel group is --data-parallel-size × --tensor-parallel-size = 16", false},
		{"cpu float16", []string{"m", "--dtype", "float16"}, tiny, "--dtype: the cpu backend keeps weights in float32 or bfloat16", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := BuildPlan(mustServe(t, tc.args...), tc.model, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if (p != nil) != tc.plan {
				t.Fatalf("plan returned = %v, want %v", p != nil, tc.plan)
			}
		})
	}
	// The blog's settings match the full model: BuildPlan accepts them.
	p, err := BuildPlan(mustServe(t, "--config", "testdata/settings/blog-config.toml", "-tp", "8", "--max-model-len", "8192"), full, nil)
	if err != nil {
		t.Fatalf("blog settings on the full model: %v", err)
	}
	want(t, "EP size", p.Parallel.ExpertParallelSize, 8)
}

// TestPlanAutoMaxModelLen: --max-model-len auto takes the longest length
// that fits, capped by max_position_embeddings.
func TestPlanAutoMaxModelLen(t *testing.T) {
	tiny := loadModel(t, tinyDir)
	p, err := BuildPlan(mustServe(t, "m", "--max-model-len", "auto", "--device-memory", "1GiB"), tiny, nil)
	if err != nil {
		t.Fatal(err)
	}
	want(t, "max_model_len", p.Scheduler.MaxModelLen, 4096)
	full := loadModel(t, fullDir)
	p, err = BuildPlan(mustServe(t, "m", "--max-model-len", "auto", "--device-memory", "atlas-800-a3", "-tp", "16", "-ep", "--quantization", "w8a8", "--max-num-seqs", "16", "--gpu-memory-utilization", "0.5"), full, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := p.Memory
	want(t, "max_model_len", int64(p.Scheduler.MaxModelLen), m.TokenCapacity)
	if p.Scheduler.MaxModelLen >= full.MaxPositionEmbeddings || p.Scheduler.MaxModelLen%p.Scheduler.BlockSize != 0 {
		t.Errorf("auto max_model_len %d: want a whole number of blocks below %d", p.Scheduler.MaxModelLen, full.MaxPositionEmbeddings)
	}
	want(t, "one sequence fits", m.ConcurrentAtMaxLenPerDPRank, int64(1))
}

// TestPlanDefaults: vLLM's device-dependent scheduler defaults.
func TestPlanDefaults(t *testing.T) {
	tiny := loadModel(t, tinyDir)
	for _, tc := range []struct {
		mem            string
		tokens, seqs   int
		sourceContains string
	}{
		{"", 2048, 256, "unknown"},
		{"64GiB", 2048, 256, "below 70 GiB"},
		{"950dt", 8192, 1024, "70 GiB or more"},
	} {
		args := []string{"m"}
		if tc.mem != "" {
			args = append(args, "--device-memory", tc.mem, "--device", "cpu")
			if tc.mem == "950dt" {
				args = []string{"m", "--device-memory", "96GiB"}
			}
		}
		p, err := BuildPlan(mustServe(t, args...), tiny, nil)
		if err != nil {
			t.Fatal(err)
		}
		want(t, "max_num_batched_tokens "+tc.mem, p.Scheduler.MaxNumBatchedTokens, tc.tokens)
		want(t, "max_num_seqs "+tc.mem, p.Scheduler.MaxNumSeqs, tc.seqs)
		if !strings.Contains(p.Scheduler.MaxNumSeqsSource, tc.sourceContains) {
			t.Errorf("source %q, want %q", p.Scheduler.MaxNumSeqsSource, tc.sourceContains)
		}
	}
	// max_num_seqs is capped by an explicit max_num_batched_tokens.
	p, err := BuildPlan(mustServe(t, "m", "--max-num-batched-tokens", "100"), tiny, nil)
	if err != nil {
		t.Fatal(err)
	}
	want(t, "max_num_seqs", p.Scheduler.MaxNumSeqs, 100)
}

// TestPlanGoldenTiny pins the JSON of the tiny model's plan (field names
// and values); run with -update to rewrite it.
func TestPlanGoldenTiny(t *testing.T) {
	a := mustServe(t, tinyDir, "--device-memory", "1GiB", "--max-num-seqs", "4", "--served-model-name", "tiny",
		"--reasoning-parser", "glm45", "--tool-call-parser", "glm47", "--enable-auto-tool-choice", "--seed", "7")
	gen, err := a.LoadGenerationConfig(tinyDir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := BuildPlan(a, loadModel(t, tinyDir), gen)
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.JSON()
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "plan", "tiny.golden.json")
	if *updateGolden {
		if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	exp, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -run TestPlanGoldenTiny -update)", err)
	}
	if !bytes.Equal(got, exp) {
		t.Fatalf("plan JSON differs from %s (rerun with -update if intended):\n%s", golden, got)
	}
	// A few values by hand: the tiny model on the cpu (F32 cache).
	c := loadModel(t, tinyDir)
	r, di, kp := c.KVLoraRank, c.IndexHeadDim, c.IndexKPool
	want(t, "bytes per token", p.Cache.BytesPerToken, int64(c.NumDSALayers()*(r*4+2*di*4+di*4/kp)))
	h, k, w := c.LinearNumHeads, c.LinearHeadDim, c.LinearConvKernelDim
	want(t, "state per sequence", p.Cache.BytesPerSequenceState, int64(c.NumKDALayers()*((w-1)*3*h*k*4+h*k*k*4)))
	want(t, "generation temperature", *p.Generation.Temperature, 1.0)
	want(t, "eos", p.Generation.EOSTokenIDs, []int{480, 487, 489})
	// The cpu loader: matrices in the checkpoint dtype (F32 here), the rest F32.
	want(t, "weights", p.Weights.BytesPerRank, p.Params.Total*4)
	// generation-config vllm drops the file's defaults.
	b := mustServe(t, tinyDir, "--generation-config", "vllm")
	if g, err := b.LoadGenerationConfig(tinyDir); err != nil || g != nil {
		t.Errorf("--generation-config vllm loaded %+v, %v", g, err)
	}
	c2 := mustServe(t, tinyDir, "--generation-config", t.TempDir())
	if _, err := c2.LoadGenerationConfig(tinyDir); err == nil || !strings.Contains(err.Error(), "--generation-config: no generation_config.json") {
		t.Errorf("missing explicit generation config: %v", err)
	}
}
