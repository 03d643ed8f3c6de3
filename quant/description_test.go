package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

// serving-compat.md §4.1's example, with a hybrid linear-attention model.
const exampleDescription = `{"version": "1.0.0", "model_quant_type": "W8A8_DYNAMIC",
 "model.embed_tokens.weight": "FLOAT",
 "model.layers.0.self_attn.q_a_proj.weight": "W8A8",
 "model.layers.0.mlp.gate_proj.weight": "W8A8_DYNAMIC",
 "model.layers.3.mlp.experts.0.gate_proj.weight": "W8A8_DYNAMIC",
 "model.layers.0.linear_attn.in_proj_qkvz.weight_scale": "W8A8_DYNAMIC",
 "model.layers.0.linear_attn.in_proj_qkvz.weight_offset": "W8A8_DYNAMIC",
 "model.layers.0.linear_attn.conv1d.weight": "FLOAT",
 "optional": {"note": 1}}`

func TestParseDescription(t *testing.T) {
	d, err := ParseDescription([]byte(exampleDescription))
	if err != nil {
		t.Fatal(err)
	}
	if d.Version != "1.0.0" || d.ModelQuantType != "W8A8_DYNAMIC" || d.GroupSize != 32 {
		t.Errorf("globals: %+v", d)
	}
	if len(d.Tensors) != 7 || d.Tensors["model.layers.0.self_attn.q_a_proj.weight"] != W8A8 ||
		d.Tensors["model.embed_tokens.weight"] != Float {
		t.Errorf("tensors: %v", d.Tensors)
	}
	if _, ok := d.Extra["optional"]; !ok {
		t.Error("optional metadata dropped")
	}
	// Round trip through Marshal.
	d2, err := ParseDescription(d.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if len(d2.Tensors) != len(d.Tensors) || d2.ModelQuantType != d.ModelQuantType {
		t.Errorf("round trip: %+v", d2)
	}
}

func TestParseDescriptionErrors(t *testing.T) {
	cases := []struct {
		name, json, want string
	}{
		{"unknown scheme", `{"model.layers.0.mlp.down_proj.weight": "W9A9"}`, `tensor "model.layers.0.mlp.down_proj.weight": unknown quantization scheme "W9A9"`},
		{"unsupported scheme", `{"model.layers.1.mlp.up_proj.weight": "W4A8_DYNAMIC"}`, `tensor "model.layers.1.mlp.up_proj.weight": quantization scheme "W4A8_DYNAMIC" is not supported`},
		{"lower case", `{"a.weight": "w8a8"}`, `must be upper case`},
		{"not a string", `{"a.weight": 3}`, `tensor "a.weight": scheme must be a string`},
		{"bad group", `{"group_size": 20}`, `"group_size": must be a positive multiple of 32`},
		{"kv cache", `{"kv_cache_type": "C8"}`, `KV-cache/attention quantization`},
		{"not json", `{`, `quant_model_description.json`},
		{"not an object", `[1]`, `quant_model_description.json`},
		{"trailing data", `{"version": "1.0.0"} {}`, `trailing data`},
		{"trailing brace", `{"version": "1.0.0"}}`, `trailing data`},
	}
	for _, c := range cases {
		_, err := ParseDescription([]byte(c.json))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to contain %q", c.name, err, c.want)
		}
	}
}

func TestParseScheme(t *testing.T) {
	for in, want := range map[string]Scheme{"w8a8_dynamic": W8A8Dynamic, "W8A8": W8A8, "w8a8_mxfp8": W8A8MXFP8, "float": Float} {
		if got, err := ParseScheme(in); err != nil || got != want {
			t.Errorf("ParseScheme(%q) = %q, %v", in, got, err)
		}
	}
}

// TestQuantizeLinearTensors checks names, dtypes and shapes per scheme and
// params dtype (serving-compat.md §4.2-4.5).
func TestQuantizeLinearTensors(t *testing.T) {
	n, k := 6, 40
	rng := rand.New(rand.NewPCG(9, 10))
	w := make([]float32, n*k)
	for i := range w {
		w[i] = float32(rng.NormFloat64() * 0.05)
	}
	type want struct {
		dt    npu.DType
		shape []int
	}
	cases := []struct {
		s    Scheme
		pdt  npu.DType
		want map[string]want
	}{
		{W8A8Dynamic, npu.BF16, map[string]want{"weight": {npu.I8, []int{n, k}}, "weight_scale": {npu.BF16, []int{n, 1}}, "weight_offset": {npu.BF16, []int{n, 1}}}},
		{W8A8, npu.BF16, map[string]want{"weight": {npu.I8, []int{n, k}}, "weight_scale": {npu.BF16, []int{n, 1}}, "weight_offset": {npu.BF16, []int{n, 1}},
			"input_scale": {npu.BF16, []int{1}}, "input_offset": {npu.I8, []int{1}}, "quant_bias": {npu.I32, []int{n}}, "deq_scale": {npu.F32, []int{n}}}},
		{W8A8, npu.F16, map[string]want{"weight": {npu.I8, []int{n, k}}, "weight_scale": {npu.F16, []int{n, 1}}, "weight_offset": {npu.F16, []int{n, 1}},
			"input_scale": {npu.F16, []int{1}}, "input_offset": {npu.I8, []int{1}}, "quant_bias": {npu.I32, []int{n}}, "deq_scale": {npu.I64, []int{n}}}},
		{W8A8MXFP8, npu.BF16, map[string]want{"weight": {npu.F8E4M3, []int{n, k}}, "weight_scale": {npu.U8, []int{n, 2}}}},
	}
	for _, c := range cases {
		ts, err := QuantizeLinear(w, n, k, c.s, LinearOptions{ParamsDType: c.pdt, ActMin: -2, ActMax: 3})
		if err != nil {
			t.Fatal(err)
		}
		if len(ts) != len(c.want) {
			t.Errorf("%s/%v: %d tensors, want %d", c.s, c.pdt, len(ts), len(c.want))
		}
		got := map[string]Tensor{}
		for i, x := range ts {
			if x.Suffix != c.s.Suffixes()[i] {
				t.Errorf("%s: tensor %d is %q, want %q", c.s, i, x.Suffix, c.s.Suffixes()[i])
			}
			got[x.Suffix] = x
			wt, ok := c.want[x.Suffix]
			if !ok || x.DType != wt.dt || !npu.SameShape(x.Shape, wt.shape) {
				t.Errorf("%s/%v %s: %v %v, want %v %v", c.s, c.pdt, x.Suffix, x.DType, x.Shape, wt.dt, wt.shape)
			}
			numel := 1
			for _, d := range x.Shape {
				numel *= d
			}
			if len(x.Data) != numel*x.DType.Size() {
				t.Errorf("%s %s: %d bytes for %v %v", c.s, x.Suffix, len(x.Data), x.DType, x.Shape)
			}
		}
		back, err := DequantizeLinear(c.s, got, n, k, 32)
		if err != nil {
			t.Fatal(err)
		}
		// int8: half a step of the row's scale; MX: an E4M3 half-ulp, or
		// the OCP algorithm's saturation (up to 1/8 of the block maximum).
		tol := float64(AbsMax(w)) / 127
		if c.s == W8A8MXFP8 {
			tol = float64(AbsMax(w)) / 8
		}
		for i := range w {
			if d := math.Abs(float64(back[i] - w[i])); d > tol {
				t.Fatalf("%s: w[%d] %v -> %v", c.s, i, w[i], back[i])
			}
		}
	}
}

// TestStaticLinearArithmetic: (sum xq*q + quant_bias) * deq_scale with
// activations quantized by StaticQuantize reproduces x·w^T within the
// quantization error, in float64.
func TestStaticLinearArithmetic(t *testing.T) {
	n, k := 7, 33
	rng := rand.New(rand.NewPCG(11, 12))
	w := make([]float32, n*k)
	for i := range w {
		w[i] = float32(rng.NormFloat64() * 0.1)
	}
	x := make([]float32, k)
	for i := range x {
		x[i] = float32(rng.Float64()*4 - 1) // [-1, 3)
	}
	lo, hi := MinMax(x)
	ts, err := QuantizeLinear(w, n, k, W8A8, LinearOptions{ParamsDType: npu.F32, ActMin: lo, ActMax: hi})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]Tensor{}
	for _, x := range ts {
		m[x.Suffix] = x
	}
	inScale, _ := DecodeFloats(m["input_scale"].Data, npu.F32)
	off := int32(int8(m["input_offset"].Data[0]))
	deq, _ := DecodeFloats(m["deq_scale"].Data, npu.F32)
	xq := make([]int8, k)
	StaticQuantize(xq, x, 1/inScale[0], off)
	for r := range n {
		acc := int32(binary.LittleEndian.Uint32(m["quant_bias"].Data[4*r:]))
		var ref float64
		for c := range k {
			acc += int32(xq[c]) * int32(int8(m["weight"].Data[r*k+c]))
			ref += float64(x[c]) * float64(w[r*k+c])
		}
		got := float64(acc) * float64(deq[r])
		if math.Abs(got-ref) > 0.02 {
			t.Errorf("row %d: %v, want %v", r, got, ref)
		}
	}
}

func TestSchemeQScheme(t *testing.T) {
	for s, want := range map[Scheme]npu.QScheme{W8A8Dynamic: npu.QW8A8Dynamic, W8A8: npu.QW8A8, W8A8MXFP8: npu.QMXFP8, Float: npu.QNone, "": npu.QNone} {
		if got := s.QScheme(); got != want {
			t.Errorf("%q.QScheme() = %v, want %v", s, got, want)
		}
	}
}
