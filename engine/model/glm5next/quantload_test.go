package glm5next

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/safetensors"
	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/nputest"
	"github.com/npuserve/npuserve/quant"
)

// handMadeSchemes is a mixed msmodelslim layout over the four test layers
// (KDA dense, DSA MoE, KDA MoE, DSA MoE): every scheme, per-expert MoE
// weights, a static dense MLP, static KDA q/k/v, a dequantised kv_b_proj
// and lm_head.
func handMadeSchemes(cfg *config.ModelConfig) map[string]quant.Scheme {
	s := map[string]quant.Scheme{}
	L := func(l int, rest string) string { return fmt.Sprintf("model.layers.%d.%s", l, rest) }
	for _, p := range []string{"gate_proj", "up_proj", "down_proj"} {
		s[L(0, "mlp."+p+".weight")] = quant.W8A8
	}
	s[L(0, "self_attn.o_proj.weight")] = quant.W8A8Dynamic
	for _, p := range []string{"q_proj", "k_proj", "v_proj"} {
		s[L(2, "self_attn."+p+".weight")] = quant.W8A8 // one fused linear, one activation quantizer
	}
	s[L(1, "self_attn.q_a_proj.weight")] = quant.W8A8Dynamic
	s[L(1, "self_attn.kv_a_proj_with_mqa.weight")] = quant.W8A8Dynamic
	s[L(1, "self_attn.q_b_proj.weight")] = quant.W8A8MXFP8
	s[L(1, "self_attn.o_proj.weight")] = quant.W8A8
	s[L(1, "self_attn.kv_b_proj.weight")] = quant.W8A8Dynamic
	s[L(1, "self_attn.indexer.wq_b.weight")] = quant.W8A8Dynamic
	for e := range cfg.NRoutedExperts {
		for _, p := range []string{"gate_proj", "up_proj", "down_proj"} {
			s[L(1, fmt.Sprintf("mlp.experts.%d.%s.weight", e, p))] = quant.W8A8MXFP8
			s[L(2, fmt.Sprintf("mlp.experts.%d.%s.weight", e, p))] = quant.W8A8Dynamic
		}
	}
	for _, p := range []string{"gate_proj", "up_proj", "down_proj"} {
		s[L(1, "mlp.shared_experts."+p+".weight")] = quant.W8A8Dynamic
	}
	s["lm_head.weight"] = quant.W8A8Dynamic
	return s
}

// writeMsmodelslim writes the split-form values as an msmodelslim
// checkpoint by hand (flat names, bf16 params, per-expert tensors, names
// and dtypes of serving-compat.md §4), with optional mutations of the
// tensors (return false to drop one) and of the description.
func writeMsmodelslim(t *testing.T, dir string, cfg *config.ModelConfig, cfgJSON []byte, vals map[string][]float32,
	schemes map[string]quant.Scheme, ranges map[string][2]float32, mutate func(*safetensors.WriteTensor) bool, mutateDesc func(map[string]any)) {
	t.Helper()
	desc := map[string]any{"version": "1.0.0", "model_quant_type": "W8A8_DYNAMIC", "group_size": 32, "optional": map[string]any{"note": "hand made"}}
	var out []safetensors.WriteTensor
	add := func(w safetensors.WriteTensor, s quant.Scheme) {
		if mutate != nil && !mutate(&w) {
			return
		}
		out = append(out, w)
		desc[w.Name] = string(s)
	}
	for _, sp := range specs(cfg, weightForm{lmHead: true}) {
		v := vals[sp.name]
		s := schemes[sp.name]
		if !s.Quantized() {
			add(safetensors.WriteTensor{Name: sp.name, DType: npu.BF16, Shape: sp.shape, Data: npu.EncodeFloats(v, npu.BF16)}, quant.Float)
			continue
		}
		r, ok := ranges[module(sp.name)]
		if !ok {
			r = [2]float32{-6, 6}
		}
		ts, err := quant.QuantizeLinear(v, sp.shape[0], sp.shape[1], s, quant.LinearOptions{ParamsDType: npu.BF16, ActMin: r[0], ActMax: r[1]})
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range ts {
			shape := x.Shape
			if x.Suffix == "weight_scale" && s == quant.W8A8Dynamic && strings.Contains(sp.name, "o_proj") {
				shape = []int{sp.shape[0]} // flattened [out] scales load too
			}
			add(safetensors.WriteTensor{Name: module(sp.name) + "." + x.Suffix, DType: x.DType, Shape: shape, Data: x.Data}, s)
		}
	}
	if mutateDesc != nil {
		mutateDesc(desc)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), out, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	b, _ := json.MarshalIndent(desc, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, quant.DescriptionFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfgJSON, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestLoadHandMadeMsmodelslim: a checkpoint laid out by hand the way
// msmodelslim writes one loads (every scheme, per-expert MoE, flattened
// scales, a dequantised kv_b_proj) and computes close to the float model
// (prefill and decode; TestQuantizeLayout generates with the runner).
func TestLoadHandMadeMsmodelslim(t *testing.T) {
	be := nputest.Open(0)
	over := map[string]any{"dtype": "bfloat16"}
	cfg := testConfig(t, over)
	vals, _ := checkpointValues(cfg)
	for _, v := range vals {
		for i := range v {
			v[i] = npu.BF16ToF32(npu.F32ToBF16(v[i])) // the reference sees the values as written
		}
	}
	// Calibrate the static linears' input ranges on the float model.
	ref := t.TempDir()
	writeCheckpoint(t, ref, cfg, testConfigJSON(over), vals, weightForm{lmHead: true}, false, npu.BF16, nil)
	fm, err := Load(be, ref, LoadOptions{DType: "float32"})
	if err != nil {
		t.Fatal(err)
	}
	ranges := map[string][2]float32{}
	calib := func(mods []string, x *npu.Tensor) {
		lo, hi := quant.MinMax(hostF32(be, x))
		for _, mod := range mods {
			if r, ok := ranges[mod]; ok {
				lo, hi = min(lo, r[0]), max(hi, r[1])
			}
			ranges[mod] = [2]float32{lo, hi}
		}
	}
	// (On the sequence checked below: the test is about loading, not about
	// how well a 16-token calibration generalises.)
	if _, err := fm.SequenceLogits([]int32{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5}, calib); err != nil {
		t.Fatal(err)
	}
	fm.Close()
	dir := t.TempDir()
	writeMsmodelslim(t, dir, cfg, testConfigJSON(over), vals, handMadeSchemes(cfg), ranges, nil, nil)

	var logs []string
	m, err := Load(be, dir, LoadOptions{Quantization: "ascend", DType: "float32", Log: func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) }})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if got := len(m.quantWeights()); got != 16 {
		t.Errorf("%d quantized weights, want 16", got)
	}
	if m.layers[1].mla.kvB.DType() != npu.F32 || m.layers[0].mlp.gateUp.q == nil || m.layers[0].mlp.gateUp.q.Scheme != npu.QW8A8 ||
		m.layers[1].moe.experts.qGateUp.Scheme != npu.QMXFP8 || m.layers[2].moe.experts.qDown.Scheme != npu.QW8A8Dynamic ||
		m.layers[2].moe.shared.gateUp.q != nil || m.lmHead.q == nil {
		t.Error("weights not assembled per the description")
	}
	if !strings.Contains(strings.Join(logs, "\n"), "kv_b_proj.weight is W8A8_DYNAMIC in the checkpoint: dequantised") {
		t.Errorf("no dequantisation note in %q", logs)
	}
	// Every linear, fed the quantized model's own inputs, reproduces the
	// float weights' product within its scheme's error (a wrong tensor,
	// scale or row order shows at once; whole-model logits would mostly
	// show how chaotic a random model is).
	lins := map[string]*linear{}
	for _, ly := range m.layers {
		for _, l := range ly.inLinears() {
			lins[strings.Join(l.modules, "|")] = l
		}
	}
	lins[strings.Join(m.lmHead.modules, "|")] = m.lmHead
	tol := map[npu.QScheme]float64{npu.QW8A8Dynamic: 0.03, npu.QW8A8: 0.08, npu.QMXFP8: 0.08}
	checked := map[string]bool{}
	observe := func(mods []string, x *npu.Tensor) {
		l := lins[strings.Join(mods, "|")]
		if l == nil {
			t.Fatalf("no linear for %v", mods)
		}
		if l.q == nil {
			return
		}
		var w []float32
		for _, mod := range mods {
			w = append(w, vals[mod+".weight"]...)
		}
		xs := hostF32(be, x)
		y := npu.Must(be.Alloc(npu.F32, x.Dim(0), l.N()))
		be.MatMulQ(y, x, l.q)
		ys := hostF32(be, y)
		N, K := l.N(), l.K()
		var e2, s2 float64
		for r := range x.Dim(0) {
			for n := range N {
				var ref float64
				for k := range K {
					ref += float64(xs[r*K+k]) * float64(w[n*K+k])
				}
				d := float64(ys[r*N+n]) - ref
				e2, s2 = e2+d*d, s2+ref*ref
			}
		}
		if s2 > 0 && math.Sqrt(e2/s2) > tol[l.q.Scheme] {
			t.Errorf("%v (%v): relative error %.4f", mods, l.q.Scheme, math.Sqrt(e2/s2))
		}
		checked[mods[0]] = true
	}
	if _, err := m.SequenceLogits([]int32{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5}, observe); err != nil {
		t.Fatal(err)
	}
	if len(checked) != 12 { // the 16 quantized weights less the 4 routed expert stacks
		t.Errorf("checked %d quantized linears: %v", len(checked), checked)
	}
	toks := []int32{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5}
	for _, row := range newSession(t, m, 4, 8, 1).run(toks, 4) {
		for _, v := range row {
			if v != v || math.IsInf(float64(v), 0) {
				t.Fatal("non-finite logits")
			}
		}
	}
}

// inLinears lists the layer's linears that go through Model.linear.
func (ly *layer) inLinears() []*linear {
	var out []*linear
	if w := ly.kda; w != nil {
		out = append(out, w.qkv, w.fA, w.fB, w.b, w.gA, w.gB, w.o)
	}
	if w := ly.mla; w != nil {
		out = append(out, w.qA, w.qB, w.kvA, w.o)
		if x := w.idx; x != nil {
			out = append(out, x.wqB, x.wk, x.weightsProj, x.gate)
		}
	}
	if w := ly.mlp; w != nil {
		out = append(out, w.gateUp, w.down)
	}
	if w := ly.moe; w != nil && w.shared != nil {
		out = append(out, w.shared.gateUp, w.shared.down)
	}
	return out
}

// hostF32 copies an F32 tensor to the host.
func hostF32(be npu.Backend, t *npu.Tensor) []float32 {
	b := make([]byte, t.Bytes())
	be.Download(b, t)
	f, _ := quant.DecodeFloats(b, npu.F32)
	return f
}

// update rewrites committed fixtures that tests compare against.
var update = flag.Bool("update", false, "rewrite testdata/msmodelslim/handmade")

// handMadeDir is the committed hand-made msmodelslim checkpoint.
const handMadeDir = "../../../testdata/msmodelslim/handmade"

// TestHandMadeFixture: testdata/msmodelslim/handmade is the checkpoint
// writeMsmodelslim lays out by hand for handMadeSchemes (every scheme,
// per-expert MoE, flat names, bf16 params, a flattened scale; `go test
// -run TestHandMadeFixture -update ./engine/model/glm5next/` rewrites it),
// committed so that cmd/npuserve's tests can serve it from a real process.
// It must equal what the writer writes, and load.
func TestHandMadeFixture(t *testing.T) {
	over := map[string]any{"dtype": "bfloat16", "max_position_embeddings": 1024}
	cfg := testConfig(t, over)
	vals, _ := checkpointValues(cfg)
	dir := t.TempDir()
	writeMsmodelslim(t, dir, cfg, testConfigJSON(over), vals, handMadeSchemes(cfg), nil, nil, nil)
	files, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.MkdirAll(handMadeDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range files {
		want, err := os.ReadFile(filepath.Join(dir, f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(handMadeDir, f.Name())
		if *update {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s differs from what writeMsmodelslim writes (%v): rerun with -update", path, err)
		}
	}
	m, err := Load(nputest.Open(1), handMadeDir, LoadOptions{Quantization: "ascend"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if got := len(m.quantWeights()); got != 16 {
		t.Errorf("%d quantized weights, want 16", got)
	}
}

// TestLoadMsmodelslimErrors: bad descriptions and tensors are clear
// errors naming the tensor or module.
func TestLoadMsmodelslimErrors(t *testing.T) {
	be := nputest.Open(0)
	over := map[string]any{"dtype": "bfloat16"}
	cfg := testConfig(t, over)
	vals, _ := checkpointValues(cfg)
	cases := []struct {
		name       string
		schemes    func(map[string]quant.Scheme)
		mutate     func(*safetensors.WriteTensor) bool
		mutateDesc func(map[string]any)
		want       []string
	}{
		{"description names a missing tensor", nil, nil, func(d map[string]any) {
			d["model.layers.0.mlp.down_proj.smooth_factor"] = "W8A8"
		}, []string{`names tensor "model.layers.0.mlp.down_proj.smooth_factor"`}},
		{"scale of the wrong shape", nil, func(w *safetensors.WriteTensor) bool {
			if w.Name == "model.layers.2.mlp.experts.3.down_proj.weight_scale" {
				w.Shape = []int{w.Shape[0] / 2, 2}
			}
			return true
		}, nil, []string{`"model.layers.2.mlp.experts.3.down_proj.weight_scale" has shape`}},
		{"MX scale of the wrong shape", nil, func(w *safetensors.WriteTensor) bool {
			if w.Name == "model.layers.1.self_attn.q_b_proj.weight_scale" {
				w.Shape = []int{w.Shape[1], w.Shape[0]}
			}
			return true
		}, nil, []string{`"model.layers.1.self_attn.q_b_proj.weight_scale" has shape`}},
		{"unknown scheme", nil, nil, func(d map[string]any) {
			d["model.layers.1.self_attn.o_proj.weight"] = "W9A9"
		}, []string{`tensor "model.layers.1.self_attn.o_proj.weight": unknown quantization scheme "W9A9"`}},
		{"unsupported scheme", nil, nil, func(d map[string]any) {
			d["model.layers.2.mlp.experts.0.gate_proj.weight"] = "W4A8_DYNAMIC"
		}, []string{`"model.layers.2.mlp.experts.0.gate_proj.weight"`, "not supported"}},
		{"fused q_a/kv_a mismatch", func(s map[string]quant.Scheme) {
			delete(s, "model.layers.1.self_attn.kv_a_proj_with_mqa.weight")
		}, nil, nil, []string{"fused module model.layers.1.self_attn.fused_qkv_a_proj", "kv_a_proj_with_mqa is FLOAT"}},
		{"fused gate/up mismatch", func(s map[string]quant.Scheme) {
			s["model.layers.0.mlp.up_proj.weight"] = quant.W8A8Dynamic
		}, nil, nil, []string{"fused module model.layers.0.mlp.gate_up_proj"}},
		{"fused q/k/v mismatch", func(s map[string]quant.Scheme) {
			s["model.layers.0.self_attn.k_proj.weight"] = quant.W8A8Dynamic
		}, nil, nil, []string{"fused module model.layers.0.self_attn.qkv_proj"}},
		{"experts disagree", func(s map[string]quant.Scheme) {
			s["model.layers.2.mlp.experts.4.up_proj.weight"] = quant.W8A8MXFP8
		}, nil, nil, []string{"fused module model.layers.2.mlp.experts"}},
		{"static experts", func(s map[string]quant.Scheme) {
			for n, v := range s {
				if v == quant.W8A8Dynamic && strings.Contains(n, "layers.2.mlp.experts") {
					s[n] = quant.W8A8
				}
			}
		}, nil, nil, []string{"W8A8 (static), which vllm-ascend has no MoE method for"}},
		{"missing deq_scale", nil, func(w *safetensors.WriteTensor) bool {
			return w.Name != "model.layers.1.self_attn.o_proj.deq_scale"
		}, nil, []string{`missing tensor "model.layers.1.self_attn.o_proj.deq_scale"`}},
		{"float weight under a quantized scheme", nil, func(w *safetensors.WriteTensor) bool {
			if w.Name == "model.layers.0.self_attn.o_proj.weight" {
				w.DType, w.Data = npu.BF16, make([]byte, 2*len(w.Data))
			}
			return true
		}, nil, []string{`"model.layers.0.self_attn.o_proj.weight" has dtype BF16`}},
		{"quantized norm", nil, nil, func(d map[string]any) {
			d["model.layers.0.input_layernorm.weight"] = "W8A8_DYNAMIC"
		}, []string{`"model.layers.0.input_layernorm.weight" is described as W8A8_DYNAMIC, but only linear weights`}},
		{"stray tensor", nil, func(w *safetensors.WriteTensor) bool {
			if w.Name == "model.layers.0.mlp.down_proj.quant_bias" {
				w.Name = "model.layers.0.mlp.down_proj.quant_bias_extra"
			}
			return true
		}, func(d map[string]any) {
			delete(d, "model.layers.0.mlp.down_proj.quant_bias")
			d["model.layers.0.mlp.down_proj.quant_bias_extra"] = "W8A8"
		}, []string{`missing tensor "model.layers.0.mlp.down_proj.quant_bias"`, `unexpected tensor "model.layers.0.mlp.down_proj.quant_bias_extra"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := handMadeSchemes(cfg)
			if c.schemes != nil {
				c.schemes(s)
			}
			dir := t.TempDir()
			writeMsmodelslim(t, dir, cfg, testConfigJSON(over), vals, s, nil, c.mutate, c.mutateDesc)
			m, err := Load(be, dir, LoadOptions{})
			if err == nil {
				m.Close()
				t.Fatal("Load succeeded")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	t.Run("ascend without a description", func(t *testing.T) {
		dir := t.TempDir()
		writeCheckpoint(t, dir, cfg, testConfigJSON(over), vals, weightForm{lmHead: true}, false, npu.BF16, nil)
		if _, err := Load(be, dir, LoadOptions{Quantization: "ascend"}); err == nil || !strings.Contains(err.Error(), quant.DescriptionFile) {
			t.Fatalf("error %v", err)
		}
		m, err := Load(be, dir, LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if m.Quantized() {
			t.Error("a float checkpoint loaded quantized")
		}
		m.Close()
	})
}

// TestQuantizeFromBlockFP8: an official-style block-FP8 checkpoint
// (quantization_config.quant_method fp8, F8_E4M3 weights with
// weight_scale_inv per 128x128 block) loads through the float loader,
// keeping its linears FP8_BLOCK128 by default and dequantised with
// quantization "none", and Quantize reads it (dequantising the blocks)
// into an msmodelslim checkpoint that loads and computes close to the
// dequantised model.
func TestQuantizeFromBlockFP8(t *testing.T) {
	be := nputest.Open(0)
	cfg := testConfig(t, nil)
	vals, _ := checkpointValues(cfg)
	floatDir := t.TempDir()
	writeCheckpoint(t, floatDir, cfg, testConfigJSON(nil), vals, weightForm{lmHead: true}, true, npu.F32, nil)
	// Re-encode the linears as block FP8.
	ck, err := safetensors.Open(floatDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []safetensors.WriteTensor
	for _, n := range ck.Names() {
		info, _ := ck.Info(n)
		b, _ := ck.Data(n)
		f, _ := quant.DecodeFloats(b, info.DType)
		if !strings.HasSuffix(n, "_proj.weight") || len(info.Shape) != 2 {
			out = append(out, safetensors.WriteTensor{Name: n, DType: npu.BF16, Shape: info.Shape, Data: npu.EncodeFloats(f, npu.BF16)})
			continue
		}
		rows, cols := info.Shape[0], info.Shape[1]
		br, bc := (rows+127)/128, (cols+127)/128
		scale := make([]float32, br*bc)
		for i := range scale {
			r0, c0 := i/bc*128, i%bc*128
			var amax float32
			for r := r0; r < min(r0+128, rows); r++ {
				amax = max(amax, quant.AbsMax(f[r*cols+c0:r*cols+min(c0+128, cols)]))
			}
			scale[i] = amax / quant.E4M3Max
		}
		q := make([]byte, rows*cols)
		for r := range rows {
			for c := range cols {
				q[r*cols+c] = quant.E4M3FromF32(f[r*cols+c] / scale[r/128*bc+c/128])
			}
		}
		out = append(out, safetensors.WriteTensor{Name: n, DType: npu.F8E4M3, Shape: info.Shape, Data: q},
			safetensors.WriteTensor{Name: n + "_scale_inv", DType: npu.F32, Shape: []int{br, bc}, Data: npu.EncodeFloats(scale, npu.F32)})
	}
	ck.Close()
	fp8Dir := t.TempDir()
	if err := safetensors.Write(filepath.Join(fp8Dir, "model.safetensors"), out, nil); err != nil {
		t.Fatal(err)
	}
	var cfgMap map[string]any
	json.Unmarshal(testConfigJSON(nil), &cfgMap)
	cfgMap["quantization_config"] = map[string]any{"quant_method": "fp8", "weight_block_size": []int{128, 128}, "activation_scheme": "dynamic"}
	cb, _ := json.Marshal(cfgMap)
	os.WriteFile(filepath.Join(fp8Dir, "config.json"), cb, 0o644)

	km, err := Load(be, fp8Dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer km.Close()
	if qs := km.quantWeights(); len(qs) == 0 || qs[0].Scheme != npu.QFP8Block {
		t.Fatalf("block FP8 must load kept as FP8_BLOCK128 by default, got %v", qs)
	}
	fm, err := Load(be, fp8Dir, LoadOptions{Quantization: "none"})
	if err != nil {
		t.Fatal(err)
	}
	defer fm.Close()
	if fm.Quantized() {
		t.Fatal(`block FP8 must load dequantised under quantization "none"`)
	}
	qDir := t.TempDir()
	if _, err := Quantize(fp8Dir, qDir, QuantizeOptions{Scheme: quant.W8A8Dynamic}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(qDir, "config.json"))
	if strings.Contains(string(b), "quantization_config") || !strings.Contains(string(b), `"quantize": "w8a8_dynamic"`) {
		t.Errorf("config.json keeps the FP8 quantization_config or lacks quantize: %s", b)
	}
	qm, err := Load(be, qDir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer qm.Close()
	if !qm.Quantized() {
		t.Fatal("quantized dir loaded without quantized weights")
	}
	// Same inputs, per linear: the int8 product of the dequantised FP8
	// weights stays within int8 error of the FP8 model's float product.
	var checked int
	lins := map[string]*linear{}
	for _, ly := range fm.layers {
		for _, l := range ly.inLinears() {
			lins[strings.Join(l.modules, "|")] = l
		}
	}
	observe := func(mods []string, x *npu.Tensor) {
		fl := lins[strings.Join(mods, "|")]
		var ql *linear
		for _, ly := range qm.layers {
			for _, l := range ly.inLinears() {
				if strings.Join(l.modules, "|") == strings.Join(mods, "|") {
					ql = l
				}
			}
		}
		if fl == nil || ql == nil || ql.q == nil {
			return
		}
		a, c := npu.Must(be.Alloc(npu.F32, x.Dim(0), fl.N())), npu.Must(be.Alloc(npu.F32, x.Dim(0), fl.N()))
		be.MatMul(a, x, fl.w)
		be.MatMulQ(c, x, ql.q)
		av, cv := hostF32(be, a), hostF32(be, c)
		var e2, s2 float64
		for i := range av {
			e2 += float64(av[i]-cv[i]) * float64(av[i]-cv[i])
			s2 += float64(av[i]) * float64(av[i])
		}
		if s2 > 0 && math.Sqrt(e2/s2) > 0.03 {
			t.Errorf("%v: relative error %.4f against the FP8 weights", mods, math.Sqrt(e2/s2))
		}
		checked++
	}
	if _, err := qm.SequenceLogits([]int32{3, 1, 4, 1, 5, 9, 2, 6}, observe); err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Error("no quantized linear checked")
	}
}
