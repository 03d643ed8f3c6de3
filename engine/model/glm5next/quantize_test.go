package glm5next_test

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/internal/runner"
	"github.com/npuserve/npuserve/engine/model/glm5next"
	"github.com/npuserve/npuserve/engine/safetensors"
	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/nputest"
	"github.com/npuserve/npuserve/quant"
)

// evalSequences are what the accuracy figures are measured on: a trained
// fixture's held-out windows, else the golden prompts plus random
// sequences (seeded).
func evalSequences(t *testing.T, dir string, vocab int) [][]int32 {
	t.Helper()
	if held, ok := heldOutWindows(t, dir); ok {
		return held
	}
	return append(goldenPrompts(t, dir), randomSequences(101, 6, 48, vocab)...)
}

// randomSequences are n sequences of length tokens below vocab, seeded.
func randomSequences(seed uint64, n, length, vocab int) [][]int32 {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	seqs := make([][]int32, n)
	for i := range seqs {
		seqs[i] = make([]int32, length)
		for j := range seqs[i] {
			seqs[i][j] = int32(rng.IntN(vocab))
		}
	}
	return seqs
}

// goldenPrompts reads a fixture's golden.json prompts.
func goldenPrompts(t *testing.T, dir string) [][]int32 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Prompts [][]int32 `json:"prompts"`
	}
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	return g.Prompts
}

// heldOutWindows reads a trained fixture's eval_prompts.jsonl: text
// windows the model was not trained on (tools/golden/train_fixture.py).
func heldOutWindows(t *testing.T, dir string) ([][]int32, bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "eval_prompts.jsonl"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	var seqs [][]int32
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var s []int32
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			t.Fatalf("%s/eval_prompts.jsonl: %v", dir, err)
		}
		seqs = append(seqs, s)
	}
	return seqs, true
}

// fixtureCalibration is what static W8A8 calibrates on: a trained
// fixture's golden prompts (held-out text, disjoint from its
// eval_prompts.jsonl windows), else random sequences.
func fixtureCalibration(t *testing.T, dir string, vocab int) [][]int32 {
	t.Helper()
	if !trainedFixture(dir) {
		return calibSequences(vocab)
	}
	return goldenPrompts(t, dir)
}

// calibSequences are random sequences disjoint from the evaluation ones.
func calibSequences(vocab int) [][]int32 { return randomSequences(201, 8, 40, vocab) }

// quantizeFixture quantizes a fixture dir into a temporary dir.
func quantizeFixture(t *testing.T, be npu.Backend, dir string, s quant.Scheme) string {
	t.Helper()
	out := t.TempDir()
	cfg, err := config.LoadModel(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = glm5next.Quantize(dir, out, glm5next.QuantizeOptions{
		Scheme: s, Calibration: fixtureCalibration(t, dir, cfg.VocabSize), Backend: be, MXScaleAlg: quant.ScaleAlgMSE,
	})
	if err != nil {
		t.Fatalf("%s %s: %v", filepath.Base(dir), s, err)
	}
	return out
}

// issueTargets are the top-1 agreement targets of issue 5.
var issueTargets = map[quant.Scheme]float64{quant.W8A8Dynamic: 0.97, quant.W8A8: 0.95, quant.W8A8MXFP8: 0.95}

// bugFloors are the agreement below which a random fixture's result
// means a bug, not quantization noise. The random fixtures' next-token
// distributions are nearly flat (top-1 margins of ~1e-3 of the logit
// range), so rounding the weights to bf16 alone — about six times less
// perturbation than int8 weights with int8 activations (0.16% against
// 0.8-1.5% relative output error per linear, ~4% for MXFP8) — already
// gives 0.96-0.98 agreement with the float32 model, and the quantized
// schemes measure 0.86-0.95 (int8) and 0.73-0.83 (MXFP8) on them. A wrong
// scale, tensor or layout drops agreement far below these floors. The
// issue's targets are asserted on the trained fixture, whose predictions
// are as peaked as a language model's.
var bugFloors = map[quant.Scheme]float64{quant.W8A8Dynamic: 0.80, quant.W8A8: 0.80, quant.W8A8MXFP8: 0.65}

// trainedFixture reports whether a fixture dir holds a trained model
// (tools/golden/train_fixture.py), on which issue 5's agreement targets
// hold as stated.
func trainedFixture(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "eval_prompts.jsonl"))
	return err == nil
}

// TestQuantizedAgreement quantizes every golden fixture with every scheme,
// loads the result and compares it with the float model, teacher forced,
// next to the bf16-weight baseline.
func TestQuantizedAgreement(t *testing.T) {
	paths, _ := filepath.Glob(filepath.Join(fixtureRoot, "*", "golden.json"))
	if len(paths) == 0 {
		t.Skip("no golden fixtures")
	}
	be := nputest.Open(0)
	for _, gj := range paths {
		dir := filepath.Dir(gj)
		name := filepath.Base(dir)
		ref, err := glm5next.Load(be, dir, glm5next.LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		seqs := evalSequences(t, dir, ref.Config().VocabSize)
		if bf, err := glm5next.Load(be, dir, glm5next.LoadOptions{DType: "bfloat16"}); err == nil {
			r, err := glm5next.Compare(bf, ref, seqs)
			bf.Close()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%-7s %-13s top1 %.4f  mean KL %.3g  (%d tokens; bf16 matmul weights, no quantization)", name, "bf16", r.Top1Agreement, r.MeanKL, r.Tokens)
		}
		for _, s := range []quant.Scheme{quant.W8A8Dynamic, quant.W8A8, quant.W8A8MXFP8} {
			m, err := glm5next.Load(be, quantizeFixture(t, be, dir, s), glm5next.LoadOptions{})
			if err != nil {
				t.Fatalf("%s %s: %v", name, s, err)
			}
			if !m.Quantized() {
				t.Fatalf("%s %s: loaded model has no quantized weights", name, s)
			}
			r, err := glm5next.Compare(m, ref, seqs)
			m.Close()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%-7s %-13s top1 %.4f  mean KL %.3g  (issue target %.2f)", name, s, r.Top1Agreement, r.MeanKL, issueTargets[s])
			if trainedFixture(dir) {
				if r.Top1Agreement < issueTargets[s] {
					t.Errorf("%s %s: top-1 agreement %.4f below the target %.2f", name, s, r.Top1Agreement, issueTargets[s])
				}
			} else if r.Top1Agreement < bugFloors[s] {
				t.Errorf("%s %s: top-1 agreement %.4f below %.2f: a quantization bug, not noise", name, s, r.Top1Agreement, bugFloors[s])
			}
		}
		ref.Close()
	}
}

// readAll reads every tensor of a checkpoint dir (copies).
func readAll(t *testing.T, dir string) []safetensors.WriteTensor {
	t.Helper()
	ck, err := safetensors.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var out []safetensors.WriteTensor
	for _, n := range ck.Names() {
		info, _ := ck.Info(n)
		b, err := ck.Data(n)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, safetensors.WriteTensor{Name: n, DType: info.DType, Shape: info.Shape, Data: slices.Clone(b)})
	}
	return out
}

// TestQuantizeLayout checks what Quantize writes: msmodelslim's tensor
// names, dtypes and shapes per scheme, the description, config.json and
// the tokenizer, and that the result loads and generates.
func TestQuantizeLayout(t *testing.T) {
	be := nputest.Open(0)
	dir := filepath.Join(fixtureRoot, "tiny")
	const L = "model.language_model.layers."
	type want struct {
		dt    npu.DType
		shape []int
	}
	cases := []struct {
		s       quant.Scheme
		tensors map[string]want
	}{
		{quant.W8A8Dynamic, map[string]want{
			L + "3.self_attn.q_b_proj.weight":                   {npu.I8, []int{64, 32}},
			L + "3.self_attn.q_b_proj.weight_scale":             {npu.F32, []int{64, 1}},
			L + "3.self_attn.q_b_proj.weight_offset":            {npu.F32, []int{64, 1}},
			L + "3.mlp.experts.5.down_proj.weight":              {npu.I8, []int{64, 32}},
			L + "3.mlp.experts.5.down_proj.weight_scale":        {npu.F32, []int{64, 1}},
			L + "0.self_attn.o_proj.weight":                     {npu.I8, []int{64, 64}},
			L + "0.self_attn.q_proj.weight":                     {npu.I8, []int{64, 64}},
			L + "0.self_attn.f_a_proj.weight":                   {npu.F32, []int{16, 64}},
			L + "3.mlp.gate.weight":                             {npu.F32, []int{8, 64}},
			L + "3.self_attn.kv_b_proj.weight":                  {npu.F32, []int{128, 32}},
			"lm_head.weight":                                    {npu.F32, []int{512, 64}},
			"model.language_model.embed_tokens.weight":          {npu.F32, []int{512, 64}},
			L + "3.self_attn.indexer.index_kpool_compress_gate": {npu.F32, []int{16, 64}},
		}},
		{quant.W8A8, map[string]want{
			L + "0.mlp.down_proj.weight":                 {npu.I8, []int{64, 128}},
			L + "0.mlp.down_proj.weight_scale":           {npu.F32, []int{64, 1}},
			L + "0.mlp.down_proj.weight_offset":          {npu.F32, []int{64, 1}},
			L + "0.mlp.down_proj.input_scale":            {npu.F32, []int{1}},
			L + "0.mlp.down_proj.input_offset":           {npu.I8, []int{1}},
			L + "0.mlp.down_proj.quant_bias":             {npu.I32, []int{64}},
			L + "0.mlp.down_proj.deq_scale":              {npu.F32, []int{64}},
			L + "3.mlp.experts.0.gate_proj.weight":       {npu.I8, []int{32, 64}}, // experts are dynamic
			L + "3.mlp.experts.0.gate_proj.weight_scale": {npu.F32, []int{32, 1}},
		}},
		{quant.W8A8MXFP8, map[string]want{
			L + "3.self_attn.o_proj.weight":              {npu.F8E4M3, []int{64, 64}},
			L + "3.self_attn.o_proj.weight_scale":        {npu.U8, []int{64, 2}},
			L + "3.mlp.experts.2.up_proj.weight":         {npu.F8E4M3, []int{32, 64}},
			L + "3.mlp.experts.2.up_proj.weight_scale":   {npu.U8, []int{32, 2}},
			L + "3.mlp.experts.2.down_proj.weight_scale": {npu.U8, []int{64, 1}},
		}},
	}
	for _, c := range cases {
		out := quantizeFixture(t, be, dir, c.s)
		got := map[string]safetensors.WriteTensor{}
		for _, w := range readAll(t, out) {
			got[w.Name] = w
		}
		for n, w := range c.tensors {
			g, ok := got[n]
			if !ok {
				t.Errorf("%s: no tensor %q", c.s, n)
				continue
			}
			if g.DType != w.dt || !npu.SameShape(g.Shape, w.shape) {
				t.Errorf("%s: %s is %v %v, want %v %v", c.s, n, g.DType, g.Shape, w.dt, w.shape)
			}
		}
		if _, ok := got[L+"0.mlp.down_proj.input_scale"]; ok != (c.s == quant.W8A8) {
			t.Errorf("%s: input_scale present = %v", c.s, ok)
		}
		desc, err := quant.ReadDescription(out)
		if err != nil {
			t.Fatal(err)
		}
		if desc.ModelQuantType != string(c.s) || len(desc.Tensors) != len(got) {
			t.Errorf("%s: description %s with %d tensors for %d written", c.s, desc.ModelQuantType, len(desc.Tensors), len(got))
		}
		for n, w := range c.tensors {
			wantScheme := c.s
			if w.dt == npu.F32 && !strings.Contains(n, "_scale") && !strings.Contains(n, "_offset") {
				wantScheme = quant.Float
			} else if c.s == quant.W8A8 && strings.Contains(n, ".experts.") {
				wantScheme = quant.W8A8Dynamic
			}
			if desc.Tensors[n] != wantScheme {
				t.Errorf("%s: description says %s for %s, want %s", c.s, desc.Tensors[n], n, wantScheme)
			}
		}
		var cfgJSON map[string]any
		b, _ := os.ReadFile(filepath.Join(out, "config.json"))
		if err := json.Unmarshal(b, &cfgJSON); err != nil || cfgJSON["quantize"] != strings.ToLower(string(c.s)) || cfgJSON["quantization_config"] != nil {
			t.Errorf("%s: config.json quantize=%v quantization_config=%v (%v)", c.s, cfgJSON["quantize"], cfgJSON["quantization_config"], err)
		}
		for _, f := range []string{"tokenizer.json", "tokenizer_config.json", "generation_config.json"} {
			if _, err := os.Stat(filepath.Join(out, f)); err != nil {
				t.Errorf("%s: %v", c.s, err)
			}
		}
		m, err := glm5next.Load(be, out, glm5next.LoadOptions{Quantization: "ascend"})
		if err != nil {
			t.Fatal(err)
		}
		gen, err := runner.Generate(m, []runner.Request{{Prompt: []int32{1, 2, 3, 4, 5}, MaxNewTokens: 6}, {Prompt: []int32{7, 8}, MaxNewTokens: 4}}, runner.Options{ChunkSize: 3})
		m.Close()
		if err != nil || len(gen[0]) != 6 || len(gen[1]) != 4 {
			t.Errorf("%s: generate: %v %v", c.s, gen, err)
		}
	}
}

// TestWeightBytesSmallConfig computes the weight bytes of configs/small
// (and of the full-size GLM-5.3-Flash config) quantized against bf16.
func TestWeightBytesSmallConfig(t *testing.T) {
	for _, dir := range []string{"../../../configs/small", "../../config/testdata/glm5.3-flash"} {
		cfg, err := config.LoadModel(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []quant.Scheme{quant.W8A8Dynamic, quant.W8A8, quant.W8A8MXFP8} {
			for _, all := range []bool{false, true} {
				q, b := glm5next.WeightBytes(cfg, s, all)
				ratio := float64(q) / float64(b)
				t.Logf("%s %-13s all linears %-5v: %d of %d bf16 bytes = %.4f", filepath.Base(dir), s, all, q, b, ratio)
				// Issue 5's target: ≤ 0.55 of bf16 with the default FLOAT
				// set (the small config's embedding and lm_head, 2 x 4096
				// x 1024, are 2.9% of its parameters and stay bf16).
				limit := map[bool]float64{false: 0.55, true: 0.54}[all]
				if ratio > limit || ratio < 0.5 {
					t.Errorf("%s %s: ratio %.4f outside [0.5, %.3f]", dir, s, ratio, limit)
				}
			}
		}
	}
}
