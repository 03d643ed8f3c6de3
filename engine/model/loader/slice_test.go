package loader

import (
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/npuserve/npuserve/engine/safetensors"
	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/cpu"
)

// refSlice cuts the elements of a row-major tensor of shape full that s
// selects, by walking every index (an independent reference for Cut).
func refSlice(v []float32, full []int, s *Slice) []float32 {
	keep := map[int]bool{}
	for _, i := range s.indices() {
		keep[i] = true
	}
	pos := map[int]int{}
	for k, i := range s.indices() {
		pos[i] = k
	}
	shape, _ := s.Shape(full)
	out := make([]float32, numel(shape))
	idx := make([]int, len(full))
	for flat := range v {
		r := flat
		for d := len(full) - 1; d >= 0; d-- {
			idx[d] = r % full[d]
			r /= full[d]
		}
		if !keep[idx[s.Dim]] {
			continue
		}
		o := 0
		for d := range full {
			x := idx[d]
			if d == s.Dim {
				x = pos[x]
			}
			o = o*shape[d] + x
		}
		out[o] = v[flat]
	}
	return out
}

// TestSlices loads parts of tensors (rows, columns, several ranges,
// dimension 1 of a 3-D tensor, FP8 rows and columns, with and without a
// dtype conversion) and checks them against a reference cut of the whole
// tensor; Skip claims a tensor (FP8 with its scales) without loading it.
func TestSlices(t *testing.T) {
	be := cpu.New(1)
	w8, s8, want8 := fp8Weight("model.layers.0.mlp.down_proj.weight", 130, 260)
	x8, xs8, _ := fp8Weight("model.layers.0.mlp.up_proj.weight", 4, 4)
	dir := t.TempDir()
	writeCk(t, dir, safetensors.SingleFile,
		tensor("model.embed_tokens.weight", npu.BF16, 1, 16, 8),
		tensor("model.layers.0.mlp.experts.gate_up_proj", npu.F32, 2, 4, 6, 5),
		tensor("model.layers.0.self_attn.conv1d.weight", npu.F32, 3, 12, 1, 3),
		tensor("model.layers.0.self_attn.o_proj.weight", npu.BF16, 4, 6, 8),
		w8, s8, x8, xs8,
	)
	ck := openCk(t, dir)
	cases := []struct {
		name   string
		shape  []int
		slice  *Slice
		matrix bool
		dtype  string
		alias  bool // the loaded tensor is the mapped file itself
	}{
		{"model.embed_tokens.weight", []int{16, 8}, Rows(4, 12), true, "auto", true},
		{"model.layers.0.mlp.experts.gate_up_proj", []int{4, 6, 5}, Along(1, Range{1, 3}, Range{4, 6}), true, "auto", false},
		{"model.layers.0.self_attn.conv1d.weight", []int{12, 1, 3}, Along(0, Range{2, 4}, Range{6, 8}, Range{10, 12}), false, "auto", false},
		{"model.layers.0.self_attn.o_proj.weight", []int{6, 8}, Along(1, Range{4, 8}), true, "float32", false},
		{"model.layers.0.mlp.down_proj.weight", []int{130, 260}, Rows(65, 130), true, "float32", false},
		{"model.layers.0.mlp.down_proj.weight", []int{130, 260}, Along(1, Range{0, 3}, Range{129, 200}), true, "float32", false},
	}
	for _, tc := range cases {
		t.Run(tc.name+" "+tc.slice.String(), func(t *testing.T) {
			skip := Spec{Name: "model.layers.0.mlp.up_proj.weight", Shape: []int{4, 4}, Matrix: true, Skip: true}
			var specs []Spec
			for _, c := range cases {
				sp := Spec{Name: c.name, Shape: c.shape, Matrix: c.matrix, Skip: c.name != tc.name}
				if c.name == tc.name {
					sp.Slice = tc.slice
				}
				if !containsName(specs, sp.Name) {
					specs = append(specs, sp)
				}
			}
			got, err := Load(be, ck, append(specs, skip), Options{DType: tc.dtype})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 {
				t.Fatalf("loaded %d tensors, want only the sliced one", len(got))
			}
			x := got[tc.name]
			wantShape, _ := tc.slice.Shape(tc.shape)
			if !reflect.DeepEqual(x.Shape(), wantShape) {
				t.Fatalf("shape %v, want %v", x.Shape(), wantShape)
			}
			var full []float32
			if tc.name == w8.Name {
				full = want8
			} else {
				info, _ := ck.Info(tc.name)
				data, _ := ck.Data(tc.name)
				full = floats(info.DType, data)
			}
			if v, want := download(be, x), refSlice(full, tc.shape, tc.slice); !reflect.DeepEqual(v, want) {
				t.Errorf("values\n%v\nwant\n%v", v, want)
			}
			if tc.alias {
				data, _ := ck.Data(tc.name)
				off := tc.slice.Ranges[0].Lo * tc.shape[1] * 2
				if unsafe.Pointer(unsafe.SliceData(cpu.U16(x))) != unsafe.Pointer(&data[off]) {
					t.Error("contiguous same-dtype slice was copied, want an alias of the mapped file")
				}
			}
		})
	}
}

func containsName(specs []Spec, name string) bool {
	for _, s := range specs {
		if s.Name == name {
			return true
		}
	}
	return false
}

// TestSliceErrors: slices that do not fit the tensor are load errors
// naming the tensor.
func TestSliceErrors(t *testing.T) {
	be := cpu.New(1)
	w8, s8, _ := fp8Weight("model.layers.0.mlp.down_proj.weight", 4, 4)
	dir := t.TempDir()
	writeCk(t, dir, safetensors.SingleFile, tensor("model.embed_tokens.weight", npu.BF16, 1, 16, 8), w8, s8)
	ck := openCk(t, dir)
	cases := []struct {
		slice *Slice
		want  string
	}{
		{Rows(8, 17), "outside dimension 0"},
		{Along(2, Range{0, 1}), "of a 2-D tensor"},
		{Along(1, Range{3, 3}), "outside dimension 1"},
		{&Slice{Dim: 0}, "selects nothing"},
	}
	for _, tc := range cases {
		_, err := Load(be, ck, []Spec{
			{Name: "model.embed_tokens.weight", Shape: []int{16, 8}, Matrix: true, Slice: tc.slice},
			{Name: w8.Name, Shape: []int{4, 4}, Skip: true},
		}, Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "model.embed_tokens.weight") {
			t.Errorf("slice %v: error %v, want one naming the tensor and %q", tc.slice, err, tc.want)
		}
	}
}
