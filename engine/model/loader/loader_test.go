package loader

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/npuserve/npuserve/engine/safetensors"
	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/cpu"
)

// ---- building checkpoints ----

// values returns n distinct floats exactly representable in BF16 and F16
// (small integers and halves), so every dtype round-trips exactly.
func values(n int, seed float32) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = seed + float32(i%64)/2 - 8
	}
	return out
}

func encodeAs(dt npu.DType, f []float32) []byte {
	switch dt {
	case npu.F32, npu.BF16:
		return npu.EncodeFloats(f, dt)
	case npu.F16:
		out := make([]byte, 2*len(f))
		for i, v := range f {
			binary.LittleEndian.PutUint16(out[2*i:], npu.F32ToF16(v))
		}
		return out
	}
	panic(dt)
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// tensor makes a float tensor of dtype dt filled with values(seed).
func tensor(name string, dt npu.DType, seed float32, shape ...int) safetensors.WriteTensor {
	return safetensors.WriteTensor{Name: name, DType: dt, Shape: shape, Data: encodeAs(dt, values(numel(shape), seed))}
}

func writeCk(t *testing.T, dir, file string, ts ...safetensors.WriteTensor) {
	t.Helper()
	if err := safetensors.Write(filepath.Join(dir, file), ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
}

func openCk(t *testing.T, dir string) *safetensors.Checkpoint {
	t.Helper()
	ck, err := safetensors.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	return ck
}

// download returns a loaded tensor's elements as float32.
func download(be npu.Backend, x *npu.Tensor) []float32 {
	b := make([]byte, x.Bytes())
	be.Download(b, x)
	return floats(x.DType(), b)
}

// logger collects log lines.
type logger struct{ lines []string }

func (l *logger) logf(format string, args ...any) {
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

// ---- a small model in both layouts ----

// model is a toy glm5_next-like tensor set: canonical name, dtype, shape,
// matrix flag.
var model = []struct {
	name   string
	dt     npu.DType
	shape  []int
	matrix bool
}{
	{"model.embed_tokens.weight", npu.BF16, []int{16, 8}, true},
	{"model.norm.weight", npu.BF16, []int{8}, false},
	{"lm_head.weight", npu.F16, []int{16, 8}, true},
	{"model.layers.0.input_layernorm.weight", npu.F32, []int{8}, false},
	{"model.layers.0.hc_attn_fn", npu.F32, []int{24, 32}, false},
	{"model.layers.0.self_attn.q_proj.weight", npu.BF16, []int{8, 8}, true},
	{"model.layers.0.self_attn.q_conv1d.weight", npu.F32, []int{8, 1, 4}, false},
	{"model.layers.0.mlp.experts.5.gate_proj.weight", npu.F32, []int{4, 8}, true},
	{"model.layers.1.self_attn.indexer.index_kpool_compress_ape", npu.BF16, []int{4, 2}, false},
}

func specsOf() []Spec {
	var s []Spec
	for _, m := range model {
		s = append(s, Spec{Name: m.name, Shape: m.shape, Matrix: m.matrix})
	}
	return s
}

// build writes the model under layout l (extra tensors appended).
func build(t *testing.T, l Layout, extra ...safetensors.WriteTensor) string {
	dir := t.TempDir()
	var ts []safetensors.WriteTensor
	for i, m := range model {
		ts = append(ts, tensor(l.CheckpointName(m.name), m.dt, float32(i), m.shape...))
	}
	writeCk(t, dir, safetensors.SingleFile, append(ts, extra...)...)
	return dir
}

func TestLayoutNames(t *testing.T) {
	tests := []struct {
		l         Layout
		canonical string
		want      string
	}{
		{LayoutNested, "model.layers.3.hc_attn_fn", "model.language_model.layers.3.hc_attn_fn"},
		{LayoutNested, "model.embed_tokens.weight", "model.language_model.embed_tokens.weight"},
		{LayoutNested, "model.norm.weight", "model.language_model.norm.weight"},
		{LayoutNested, "lm_head.weight", "lm_head.weight"},
		{LayoutNested, "model.visual.merger.proj.weight", "model.visual.merger.proj.weight"},
		{LayoutFlat, "model.layers.3.hc_attn_fn", "model.layers.3.hc_attn_fn"},
		{LayoutFlat, "lm_head.weight", "lm_head.weight"},
	}
	for _, tt := range tests {
		if got := tt.l.CheckpointName(tt.canonical); got != tt.want {
			t.Errorf("%v.CheckpointName(%q) = %q, want %q", tt.l, tt.canonical, got, tt.want)
		}
	}
	if LayoutFlat.String() != "flat" || LayoutNested.String() != "nested" {
		t.Error("Layout.String")
	}
}

func TestDetectLayout(t *testing.T) {
	tests := []struct {
		name  string
		names []string
		want  Layout
		err   string
	}{
		{"nested", []string{"lm_head.weight", "model.language_model.norm.weight", "model.visual.x"}, LayoutNested, ""},
		{"flat layers", []string{"model.layers.0.x", "lm_head.weight"}, LayoutFlat, ""},
		{"flat embed only", []string{"model.embed_tokens.weight"}, LayoutFlat, ""},
		{"flat norm only", []string{"model.norm.weight"}, LayoutFlat, ""},
		{"mixed", []string{"model.language_model.norm.weight", "model.layers.0.x"}, 0, `mixed layouts: "model.language_model.norm.weight" is nested`},
		{"unknown", []string{"lm_head.weight", "transformer.h.0.w"}, 0, "unknown layout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			var ts []safetensors.WriteTensor
			for _, n := range tt.names {
				ts = append(ts, tensor(n, npu.F32, 0, 1))
			}
			writeCk(t, dir, safetensors.SingleFile, ts...)
			got, err := DetectLayout(openCk(t, dir))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), safetensors.SingleFile) {
					t.Errorf("error %v, want %q naming the file", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("DetectLayout = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestLoadLayouts(t *testing.T) {
	be := cpu.New(1)
	for _, l := range []Layout{LayoutFlat, LayoutNested} {
		t.Run(l.String(), func(t *testing.T) {
			var log logger
			ck := openCk(t, build(t, l))
			got, err := Load(be, ck, specsOf(), Options{Log: log.logf})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(model) {
				t.Errorf("%d tensors, want %d", len(got), len(model))
			}
			for i, m := range model {
				x := got[m.name]
				if x == nil {
					t.Fatalf("%q not loaded", m.name)
				}
				want := m.dt // auto keeps matrices' dtype
				if !m.matrix {
					want = npu.F32
				}
				if x.DType() != want || !reflect.DeepEqual(x.Shape(), m.shape) {
					t.Errorf("%q: %v, want %v%v", m.name, x, want, m.shape)
				}
				if v := download(be, x); !reflect.DeepEqual(v, values(numel(m.shape), float32(i))) {
					t.Errorf("%q values %v", m.name, v)
				}
			}
			if len(log.lines) != 1 || !strings.HasPrefix(log.lines[0], "loaded 9 tensors") || !strings.Contains(log.lines[0], l.String()+" layout") {
				t.Errorf("log %q", log.lines)
			}
		})
	}
}

func TestDTypePolicy(t *testing.T) {
	be := cpu.New(1)
	tests := []struct {
		src    npu.DType
		matrix bool
		mode   string
		want   npu.DType
	}{
		{npu.F32, true, "auto", npu.F32},
		{npu.BF16, true, "auto", npu.BF16},
		{npu.F16, true, "", npu.F16},
		{npu.F32, true, "float32", npu.F32},
		{npu.BF16, true, "float32", npu.F32},
		{npu.F16, true, "float32", npu.F32},
		{npu.F32, true, "bfloat16", npu.BF16},
		{npu.BF16, true, "bfloat16", npu.BF16},
		{npu.F16, true, "bfloat16", npu.BF16},
		{npu.F32, false, "bfloat16", npu.F32},
		{npu.BF16, false, "auto", npu.F32},
		{npu.F16, false, "bfloat16", npu.F32},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v/matrix=%v/%s", tt.src, tt.matrix, tt.mode), func(t *testing.T) {
			dir := t.TempDir()
			writeCk(t, dir, safetensors.SingleFile, tensor("model.layers.0.w", tt.src, 3, 4, 8))
			got, err := Load(be, openCk(t, dir), []Spec{{Name: "model.layers.0.w", Shape: []int{4, 8}, Matrix: tt.matrix}}, Options{DType: tt.mode})
			if err != nil {
				t.Fatal(err)
			}
			x := got["model.layers.0.w"]
			if x.DType() != tt.want {
				t.Fatalf("dtype %v, want %v", x.DType(), tt.want)
			}
			if v := download(be, x); !reflect.DeepEqual(v, values(32, 3)) {
				t.Errorf("values %v", v)
			}
		})
	}
}

// TestBF16Rounding checks float32 → bfloat16 rounds to nearest even.
func TestBF16Rounding(t *testing.T) {
	be := cpu.New(1)
	in := []float32{1 + 1.0/256, 1 + 3.0/256, 1 + 1.0/128 + 1.0/1024, -2.5}
	want := []float32{1, 1 + 4.0/256, 1 + 1.0/128, -2.5}
	dir := t.TempDir()
	writeCk(t, dir, safetensors.SingleFile, safetensors.WriteTensor{Name: "lm_head.weight", DType: npu.F32, Shape: []int{4}, Data: npu.EncodeFloats(in, npu.F32)},
		tensor("model.norm.weight", npu.F32, 0, 1))
	got, err := Load(be, openCk(t, dir), []Spec{{Name: "lm_head.weight", Shape: []int{4}, Matrix: true}, {Name: "model.norm.weight", Shape: []int{1}}}, Options{DType: "bfloat16"})
	if err != nil {
		t.Fatal(err)
	}
	if v := download(be, got["lm_head.weight"]); !reflect.DeepEqual(v, want) {
		t.Errorf("bf16 %v, want %v", v, want)
	}
}

// fp8Weight builds an e4m3 weight of rows×cols with bytes cycling through
// every finite code, and block scales that differ per block.
func fp8Weight(name string, rows, cols int) (w, s safetensors.WriteTensor, want []float32) {
	q := make([]byte, rows*cols)
	for i := range q {
		b := byte((i*7 + i/cols) % 256)
		if b&0x7f == 0x7f { // skip NaN codes
			b = 0x11
		}
		q[i] = b
	}
	sr, sc := (rows+127)/128, (cols+127)/128
	scale := make([]float32, sr*sc)
	for i := range scale {
		scale[i] = float32(i+1) * 0.5
	}
	want = make([]float32, rows*cols)
	for i := range rows {
		for j := range cols {
			want[i*cols+j] = npu.E4M3ToF32(q[i*cols+j]) * scale[(i/128)*sc+j/128]
		}
	}
	return safetensors.WriteTensor{Name: name, DType: npu.F8E4M3, Shape: []int{rows, cols}, Data: q},
		safetensors.WriteTensor{Name: name + "_scale_inv", DType: npu.F32, Shape: []int{sr, sc}, Data: npu.EncodeFloats(scale, npu.F32)}, want
}

func TestFP8Dequant(t *testing.T) {
	be := cpu.New(1)
	// 130×260: partial blocks in both directions (2×3 scale blocks).
	w, s, want := fp8Weight("model.language_model.layers.0.self_attn.o_proj.weight", 130, 260)
	g, gs, gwant := fp8Weight("model.language_model.layers.1.self_attn.indexer.index_kpool_compress_gate", 4, 8)
	dir := t.TempDir()
	writeCk(t, dir, safetensors.SingleFile, w, s, g, gs, tensor("lm_head.weight", npu.BF16, 0, 2))
	specs := []Spec{
		{Name: "model.layers.0.self_attn.o_proj.weight", Shape: []int{130, 260}, Matrix: true},
		{Name: "model.layers.1.self_attn.indexer.index_kpool_compress_gate", Shape: []int{4, 8}},
		{Name: "lm_head.weight", Shape: []int{2}, Matrix: true},
	}
	for _, tt := range []struct {
		mode string
		want npu.DType
	}{{"auto", npu.BF16}, {"bfloat16", npu.BF16}, {"float32", npu.F32}} {
		t.Run(tt.mode, func(t *testing.T) {
			got, err := Load(be, openCk(t, dir), specs, Options{DType: tt.mode})
			if err != nil {
				t.Fatal(err) // the scales are consumed, not "unexpected"
			}
			x := got["model.layers.0.self_attn.o_proj.weight"]
			if x.DType() != tt.want {
				t.Fatalf("dtype %v, want %v", x.DType(), tt.want)
			}
			v := download(be, x)
			for i := range want {
				e := want[i]
				if tt.want == npu.BF16 {
					e = npu.BF16ToF32(npu.F32ToBF16(e))
				}
				if v[i] != e {
					t.Fatalf("element %d (row %d col %d) = %g, want %g", i, i/260, i%260, v[i], e)
				}
			}
			gate := got["model.layers.1.self_attn.indexer.index_kpool_compress_gate"]
			if gate.DType() != npu.F32 || !reflect.DeepEqual(download(be, gate), gwant) {
				t.Errorf("non-matrix FP8: %v %v", gate, download(be, gate))
			}
		})
	}
}

func TestSharded(t *testing.T) {
	be := cpu.New(2)
	dir := t.TempDir()
	var a, b []safetensors.WriteTensor
	index := map[string]string{}
	for i, m := range model {
		ts := tensor(LayoutNested.CheckpointName(m.name), m.dt, float32(i), m.shape...)
		file := "model-00001-of-00002.safetensors"
		if i%2 == 1 {
			file = "model-00002-of-00002.safetensors"
			b = append(b, ts)
		} else {
			a = append(a, ts)
		}
		index[ts.Name] = file
	}
	w, s, want := fp8Weight("model.language_model.layers.0.mlp.down_proj.weight", 8, 130)
	b = append(b, w, s)
	index[w.Name], index[s.Name] = "model-00002-of-00002.safetensors", "model-00002-of-00002.safetensors"
	writeCk(t, dir, "model-00001-of-00002.safetensors", a...)
	writeCk(t, dir, "model-00002-of-00002.safetensors", b...)
	idx, _ := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": index})
	if err := os.WriteFile(filepath.Join(dir, safetensors.IndexFile), idx, 0o644); err != nil {
		t.Fatal(err)
	}
	specs := append(specsOf(), Spec{Name: "model.layers.0.mlp.down_proj.weight", Shape: []int{8, 130}, Matrix: true})
	got, err := Load(be, openCk(t, dir), specs, Options{DType: "float32"})
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range model {
		if v := download(be, got[m.name]); !reflect.DeepEqual(v, values(numel(m.shape), float32(i))) {
			t.Errorf("%q values %v", m.name, v)
		}
	}
	if v := download(be, got["model.layers.0.mlp.down_proj.weight"]); !reflect.DeepEqual(v, want) {
		t.Errorf("FP8 across shards: %v", v)
	}
}

// TestAliasing checks that a tensor needing no conversion is the mapped
// checkpoint memory itself (no copy), and a converted one is not.
func TestAliasing(t *testing.T) {
	be := cpu.New(1)
	ck := openCk(t, build(t, LayoutFlat))
	got, err := Load(be, ck, specsOf(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	same := func(name string) bool {
		data, err := ck.Data(name)
		if err != nil {
			t.Fatal(err)
		}
		x := got[name]
		var p unsafe.Pointer
		switch x.DType() {
		case npu.F32:
			p = unsafe.Pointer(unsafe.SliceData(cpu.F32(x)))
		default:
			p = unsafe.Pointer(unsafe.SliceData(cpu.U16(x)))
		}
		return p == unsafe.Pointer(unsafe.SliceData(data))
	}
	if !same("model.layers.0.hc_attn_fn") || !same("model.embed_tokens.weight") {
		t.Error("F32 non-matrix / BF16 matrix tensors were copied, want aliases of the mapped file")
	}
	if same("model.norm.weight") {
		t.Error("BF16 norm converted to F32 aliases the file")
	}
}

func TestSkips(t *testing.T) {
	be := cpu.New(1)
	mw, ms, _ := fp8Weight("model.language_model.layers.2.self_attn.q_a_proj.weight", 4, 4)
	extra := []safetensors.WriteTensor{
		tensor("model.visual.patch_embed.proj.weight", npu.BF16, 0, 2, 2),
		tensor("model.visual.blocks.0.attn.qkv.weight", npu.BF16, 0, 2),
		tensor("model.visual.merger.proj.weight", npu.BF16, 0, 2),
		tensor("model.language_model.layers.2.enorm.weight", npu.BF16, 0, 8),
		tensor("model.language_model.layers.2.hnorm.weight", npu.BF16, 0, 8),
		tensor("model.language_model.layers.2.eh_proj.weight", npu.BF16, 0, 8, 16),
		tensor("model.language_model.layers.2.shared_head.norm.weight", npu.BF16, 0, 8),
		tensor("model.language_model.layers.2.mlp.experts.0.up_proj.weight", npu.BF16, 0, 2),
		mw, ms,
		tensor("model.language_model.layers.12.self_attn.A_log", npu.F32, 0, 2),
	}
	dir := build(t, LayoutNested, extra...)
	var log logger
	got, err := Load(be, openCk(t, dir), specsOf(), Options{NumLayers: 2, Log: log.logf})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"skipping 3 vision tower tensors (model.visual.*): not implemented yet",
		"skipping 8 MTP layer tensors (model.language_model.layers.N.* with N >= 2): not loaded",
	}
	if len(log.lines) != 3 || !reflect.DeepEqual(log.lines[:2], want) || !strings.HasPrefix(log.lines[2], "loaded 9 tensors") {
		t.Errorf("log:\n%s\nwant:\n%s", strings.Join(log.lines, "\n"), strings.Join(want, "\n"))
	}
	if len(got) != len(model) {
		t.Errorf("%d tensors loaded", len(got))
	}

	// A spec may claim an MTP tensor: it is loaded, not skipped.
	log.lines = nil
	specs := append(specsOf(), Spec{Name: "model.layers.2.eh_proj.weight", Shape: []int{8, 16}, Matrix: true})
	got, err = Load(be, openCk(t, dir), specs, Options{NumLayers: 2, Log: log.logf})
	if err != nil {
		t.Fatal(err)
	}
	if got["model.layers.2.eh_proj.weight"] == nil || log.lines[1] != "skipping 7 MTP layer tensors (model.language_model.layers.N.* with N >= 2): not loaded" {
		t.Errorf("claimed MTP tensor: log %q", log.lines)
	}

	// Without NumLayers only MTP-only names are recognised; the other
	// layer-2 tensors are unexpected.
	_, err = Load(be, openCk(t, dir), specsOf(), Options{Log: log.logf})
	if err == nil || !strings.Contains(err.Error(), `unexpected tensor "model.language_model.layers.2.mlp.experts.0.up_proj.weight"`) ||
		strings.Contains(err.Error(), "enorm") || strings.Contains(err.Error(), "visual") {
		t.Errorf("NumLayers 0: %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	be := cpu.New(1)
	mw, ms, _ := fp8Weight("model.layers.0.self_attn.q_proj.weight", 8, 8)
	badScale := ms
	badScale.Shape, badScale.Data = []int{1, 2}, make([]byte, 8)
	i32Scale := ms
	i32Scale.DType = npu.I32
	replaced := func(ts ...safetensors.WriteTensor) func(string) []safetensors.WriteTensor {
		return func(string) []safetensors.WriteTensor { return ts }
	}
	tests := []struct {
		name   string
		layout Layout
		// swap replaces the q_proj tensor in the checkpoint (nil: keep)
		swap  func(name string) []safetensors.WriteTensor
		extra []safetensors.WriteTensor
		specs func([]Spec) []Spec
		opt   Options
		want  []string
	}{
		{name: "missing tensor nested", layout: LayoutNested, specs: func(s []Spec) []Spec {
			return append(s, Spec{Name: "model.layers.0.post_attention_layernorm.weight", Shape: []int{64}})
		}, want: []string{`model.safetensors: missing tensor "model.language_model.layers.0.post_attention_layernorm.weight" (expected shape [64])`}},
		{name: "missing tensor flat", layout: LayoutFlat, specs: func(s []Spec) []Spec {
			return append(s, Spec{Name: "model.layers.9.x", Shape: []int{2, 3}})
		}, want: []string{`model.safetensors: missing tensor "model.layers.9.x" (expected shape [2 3])`}},
		{name: "shape mismatch", layout: LayoutNested, specs: func(s []Spec) []Spec {
			s[5].Shape = []int{8, 4}
			return s
		}, want: []string{`model.safetensors: tensor "model.language_model.layers.0.self_attn.q_proj.weight" has shape [8 8], expected [8 4]`}},
		{name: "scalar vs [1]", layout: LayoutFlat, specs: func(s []Spec) []Spec {
			s[3].Shape = []int{}
			return s
		}, want: []string{`has shape [8], expected []`}},
		{name: "unexpected tensor", layout: LayoutNested, extra: []safetensors.WriteTensor{tensor("model.language_model.layers.0.mystery", npu.F32, 0, 1)},
			want: []string{`model.safetensors: unexpected tensor "model.language_model.layers.0.mystery": no spec claims it`}},
		{name: "unexpected scale of a BF16 weight", layout: LayoutFlat, extra: []safetensors.WriteTensor{tensor("model.layers.0.self_attn.q_proj.weight_scale_inv", npu.F32, 0, 1, 1)},
			want: []string{`unexpected tensor "model.layers.0.self_attn.q_proj.weight_scale_inv"`}},
		{name: "FP8 without scales", layout: LayoutFlat, swap: replaced(mw),
			want: []string{`model.safetensors: F8_E4M3 tensor "model.layers.0.self_attn.q_proj.weight" has no block scales "model.layers.0.self_attn.q_proj.weight_scale_inv"`}},
		{name: "FP8 scales of the wrong shape", layout: LayoutFlat, swap: replaced(mw, badScale),
			want: []string{`scales "model.layers.0.self_attn.q_proj.weight_scale_inv" of [8 8] weight "model.layers.0.self_attn.q_proj.weight" have shape [1 2], expected [1 1]`}},
		{name: "FP8 scales of the wrong dtype", layout: LayoutFlat, swap: replaced(mw, i32Scale),
			want: []string{`scales "model.layers.0.self_attn.q_proj.weight_scale_inv" have dtype I32`}},
		{name: "FP8 not 2-D", layout: LayoutFlat, extra: []safetensors.WriteTensor{
			{Name: "model.layers.0.fp8vec", DType: npu.F8E4M3, Shape: []int{4}, Data: make([]byte, 4)},
			tensor("model.layers.0.fp8vec_scale_inv", npu.F32, 0, 1),
		}, specs: func(s []Spec) []Spec { return append(s, Spec{Name: "model.layers.0.fp8vec", Shape: []int{4}}) },
			want: []string{`F8_E4M3 tensor "model.layers.0.fp8vec" has shape [4]: block-scaled dequantisation needs a 2-D weight`}},
		{name: "integer tensor", layout: LayoutFlat, extra: []safetensors.WriteTensor{{Name: "model.layers.0.ids", DType: npu.I32, Shape: []int{2}, Data: make([]byte, 8)}},
			specs: func(s []Spec) []Spec { return append(s, Spec{Name: "model.layers.0.ids", Shape: []int{2}}) },
			want:  []string{`tensor "model.layers.0.ids" has unsupported dtype I32 (want F32, BF16, F16 or F8_E4M3)`}},
		{name: "duplicate spec", layout: LayoutFlat, specs: func(s []Spec) []Spec { return append(s, s[0]) },
			want: []string{`spec "model.embed_tokens.weight" given twice`}},
		{name: "empty spec name", layout: LayoutFlat, specs: func(s []Spec) []Spec { return append(s, Spec{}) },
			want: []string{"spec with an empty name"}},
		{name: "bad dtype option", layout: LayoutFlat, opt: Options{DType: "fp16"}, want: []string{`unknown dtype "fp16"`}},
		{name: "several problems reported together", layout: LayoutNested,
			extra: []safetensors.WriteTensor{tensor("model.language_model.layers.0.extra", npu.F32, 0, 1)},
			specs: func(s []Spec) []Spec {
				s[1].Shape = []int{9}
				return append(s, Spec{Name: "model.layers.0.gone", Shape: []int{1}})
			},
			want: []string{`"model.language_model.norm.weight" has shape [8], expected [9]`, `missing tensor "model.language_model.layers.0.gone"`, `unexpected tensor "model.language_model.layers.0.extra"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			var ts []safetensors.WriteTensor
			for i, m := range model {
				name := tt.layout.CheckpointName(m.name)
				if tt.swap != nil && m.name == "model.layers.0.self_attn.q_proj.weight" {
					ts = append(ts, tt.swap(name)...)
					continue
				}
				ts = append(ts, tensor(name, m.dt, float32(i), m.shape...))
			}
			writeCk(t, dir, safetensors.SingleFile, append(ts, tt.extra...)...)
			specs := specsOf()
			if tt.specs != nil {
				specs = tt.specs(specs)
			}
			got, err := Load(be, openCk(t, dir), specs, tt.opt)
			if err == nil {
				t.Fatalf("no error (%d tensors), want %q", len(got), tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error:\n%v\nwant it to contain %q", err, w)
				}
			}
		})
	}
}

func TestManyErrorsTruncated(t *testing.T) {
	dir := build(t, LayoutFlat)
	specs := specsOf()
	for i := range 25 {
		specs = append(specs, Spec{Name: fmt.Sprintf("model.layers.0.missing%d", i), Shape: []int{1}})
	}
	_, err := Load(cpu.New(1), openCk(t, dir), specs, Options{})
	if err == nil || strings.Count(err.Error(), "missing tensor") != maxErrors || !strings.Contains(err.Error(), "... and 15 more problems") {
		t.Errorf("error:\n%v", err)
	}
}

// TestNoBarWithoutTerminal: a pipe or buffer gets no progress output.
func TestNoBarWithoutTerminal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := Load(cpu.New(1), openCk(t, build(t, LayoutFlat)), specsOf(), Options{Progress: w}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	var buf [64]byte
	if n, _ := r.Read(buf[:]); n != 0 {
		t.Errorf("progress output on a pipe: %q", buf[:n])
	}
}

// TestParallelMany loads many tensors with several workers (run with -race).
func TestParallelMany(t *testing.T) {
	be := cpu.New(2)
	dir := t.TempDir()
	var ts []safetensors.WriteTensor
	var specs []Spec
	for i := range 64 {
		dt := []npu.DType{npu.F32, npu.BF16, npu.F16}[i%3]
		name := fmt.Sprintf("model.layers.%d.w", i)
		ts = append(ts, tensor(name, dt, float32(i), 3, 5))
		specs = append(specs, Spec{Name: name, Shape: []int{3, 5}, Matrix: i%2 == 0})
	}
	writeCk(t, dir, safetensors.SingleFile, ts...)
	got, err := Load(be, openCk(t, dir), specs, Options{DType: "bfloat16"})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range specs {
		if v := download(be, got[s.Name]); !reflect.DeepEqual(v, values(15, float32(i))) {
			t.Errorf("%q values %v", s.Name, v)
		}
	}
}

func TestDequantNaN(t *testing.T) {
	// e4m3 0x7f is NaN: it must stay NaN through the scale, not become a number.
	f := dequantFP8([]byte{0x7f, 0x38}, 1, 2, []float32{2})
	if !math.IsNaN(float64(f[0])) || f[1] != 2 {
		t.Errorf("dequant %v", f)
	}
}
