package glm5next

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/safetensors"
	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/nputest"
)

// kdaOnly is a configuration without DSA layers, so these tests exercise
// loading (KDA, MoE, dense MLP, mHC) with generic ops only.
var kdaOnly = map[string]any{
	"layer_types":     []string{"linear_attention", "linear_attention", "linear_attention", "linear_attention"},
	"mlp_layer_types": []string{"dense", "sparse", "sparse", "dense"},
}

// checkpointValues draws values for every tensor of the split
// (official) form.
func checkpointValues(cfg *config.ModelConfig) (map[string][]float32, []spec) {
	sp := specs(cfg, weightForm{lmHead: true})
	vals := map[string][]float32{}
	for _, s := range sp {
		v := randomInit(s, cfg, 0.3, 5)
		if strings.HasSuffix(s.name, "norm.weight") || strings.HasSuffix(s.name, "_scale") {
			for i := range v {
				v[i] += float32(i%7) * 0.05 // not all ones: catch mixed-up norms
			}
		}
		vals[s.name] = v
	}
	return vals, sp
}

// writeCheckpoint writes vals (split form) to dir in form f with the given
// namespace ("model." flat or "model.language_model." nested) and dtype.
func writeCheckpoint(t *testing.T, dir string, cfg *config.ModelConfig, cfgJSON []byte, vals map[string][]float32, f weightForm, nested bool, dt npu.DType, mutate func(*safetensors.WriteTensor)) {
	t.Helper()
	d := newDims(cfg)
	name := func(canonical string) string {
		if nested && strings.HasPrefix(canonical, "model.") {
			return "model.language_model." + strings.TrimPrefix(canonical, "model.")
		}
		return canonical
	}
	var out []safetensors.WriteTensor
	add := func(canonical string, v []float32, shape ...int) {
		w := safetensors.WriteTensor{Name: name(canonical), DType: dt, Shape: shape, Data: npu.EncodeFloats(v, dt)}
		if mutate != nil {
			mutate(&w)
		}
		out = append(out, w)
	}
	used := map[string]bool{}
	take := func(n string) []float32 {
		v, ok := vals[n]
		if !ok {
			t.Fatalf("no value for %s", n)
		}
		used[n] = true
		return v
	}
	for _, s := range specs(cfg, f) {
		switch {
		case strings.HasSuffix(s.name, ".self_attn.conv1d.weight"):
			p := strings.TrimSuffix(s.name, "conv1d.weight")
			var v []float32
			for _, q := range []string{"q", "k", "v"} {
				v = append(v, take(p+q+"_conv1d.weight")...)
			}
			add(s.name, v, s.shape...)
		case strings.HasSuffix(s.name, ".mlp.experts.gate_up_proj"):
			p := strings.TrimSuffix(s.name, "gate_up_proj")
			var v []float32
			for e := range d.E {
				v = append(v, take(fmt.Sprintf("%s%d.gate_proj.weight", p, e))...)
				v = append(v, take(fmt.Sprintf("%s%d.up_proj.weight", p, e))...)
			}
			add(s.name, v, s.shape...)
		case strings.HasSuffix(s.name, ".mlp.experts.down_proj"):
			p := strings.TrimSuffix(s.name, "down_proj")
			var v []float32
			for e := range d.E {
				v = append(v, take(fmt.Sprintf("%s%d.down_proj.weight", p, e))...)
			}
			add(s.name, v, s.shape...)
		case strings.Contains(s.name, ".self_attn.forget_gate."):
			add(s.name, take(strings.Replace(s.name, "forget_gate.", "", 1)), s.shape...)
		default:
			add(s.name, take(s.name), s.shape...)
		}
	}
	if len(used) != len(vals) {
		t.Fatalf("form %+v used %d of %d tensors", f, len(used), len(vals))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), out, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfgJSON, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestLoadForms: every storage form transformers may write loads to the
// same model.
func TestLoadForms(t *testing.T) {
	be := nputest.Open(0)
	cfgJSON := testConfigJSON(kdaOnly)
	cfg := testConfig(t, kdaOnly)
	vals, _ := checkpointValues(cfg)
	toks := []int32{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5}
	var ref [][]float32
	forms := []struct {
		name   string
		form   weightForm
		nested bool
		dt     npu.DType
		dtype  string
	}{
		{"split nested", weightForm{lmHead: true}, true, npu.F32, "auto"},
		{"split flat", weightForm{lmHead: true}, false, npu.F32, "auto"},
		{"fused experts and conv", weightForm{fusedConv: true, fusedExperts: true, lmHead: true}, true, npu.F32, "float32"},
		{"forget_gate module names", weightForm{forgetGate: true, lmHead: true}, false, npu.F32, "auto"},
	}
	for _, fc := range forms {
		t.Run(fc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeCheckpoint(t, dir, cfg, cfgJSON, vals, fc.form, fc.nested, fc.dt, nil)
			var logs []string
			m, err := Load(be, dir, LoadOptions{DType: fc.dtype, Log: func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) }})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			got := newSession(t, m, 4, 8, 1).run(toks, 4)
			if ref == nil {
				ref = got
				return
			}
			if d := relDiff(got, ref); d != 0 {
				t.Fatalf("logits differ from the split nested form by %g", d)
			}
		})
	}
	t.Run("bf16 checkpoint", func(t *testing.T) {
		dir := t.TempDir()
		writeCheckpoint(t, dir, cfg, cfgJSON, vals, weightForm{lmHead: true}, true, npu.BF16, nil)
		for _, dtype := range []string{"auto", "float32"} {
			m, err := Load(be, dir, LoadOptions{DType: dtype})
			if err != nil {
				t.Fatal(err)
			}
			got := newSession(t, m, 4, 8, 1).run(toks, 4)
			if d := relDiff(got, ref); d > 0.05 || d == 0 {
				t.Fatalf("%s: bf16 weights vs f32 weights differ by %g", dtype, d)
			}
			m.Close()
		}
	})
}

// TestLoadContradictions: a checkpoint that disagrees with its config is a
// clear error naming the tensor.
func TestLoadContradictions(t *testing.T) {
	be := nputest.Open(0)
	cfg := testConfig(t, kdaOnly)
	vals, _ := checkpointValues(cfg)
	cases := []struct {
		name   string
		cfg    map[string]any // config.json overrides (the checkpoint keeps cfg)
		mutate func(*safetensors.WriteTensor)
		want   []string
	}{
		{"wrong shape", nil, func(w *safetensors.WriteTensor) {
			if strings.HasSuffix(w.Name, "layers.1.self_attn.f_a_proj.weight") {
				w.Shape = []int{w.Shape[1], w.Shape[0]}
			}
		}, []string{"layers.1.self_attn.f_a_proj.weight"}},
		{"config says more experts", map[string]any{"n_routed_experts": 8}, nil, []string{"experts.6"}},
		{"config says wider hidden", map[string]any{"hidden_size": 48}, nil, []string{"embed_tokens.weight"}},
		{"config says a DSA layer", map[string]any{"layer_types": []string{"linear_attention", "deepseek_sparse_attention", "linear_attention", "linear_attention"}},
			nil, []string{"layers.1.self_attn.q_a_proj.weight"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			over := map[string]any{}
			for k, v := range kdaOnly {
				over[k] = v
			}
			for k, v := range c.cfg {
				over[k] = v
			}
			dir := t.TempDir()
			writeCheckpoint(t, dir, cfg, testConfigJSON(over), vals, weightForm{lmHead: true}, true, npu.F32, c.mutate)
			m, err := Load(be, dir, LoadOptions{})
			if err == nil {
				m.Close()
				t.Fatal("Load succeeded")
			}
			t.Log(err)
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
