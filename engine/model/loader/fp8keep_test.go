package loader

import (
	"reflect"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/engine/safetensors"
	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/cpu"
)

// TestSliceBlocks maps slices to the block slices of their scales: whole
// blocks only, a partial block at the end of the dimension allowed.
func TestSliceBlocks(t *testing.T) {
	for _, c := range []struct {
		name string
		s    *Slice
		full int
		want *Slice
		err  string
	}{
		{"one block", Rows(128, 256), 300, Along(0, Range{1, 2}), ""},
		{"to a partial end", Rows(256, 300), 300, Along(0, Range{2, 3}), ""},
		{"several ranges", Along(1, Range{0, 128}, Range{256, 260}), 260, Along(1, Range{0, 1}, Range{2, 3}), ""},
		{"unaligned start", Rows(64, 128), 256, nil, "range [64:128] of dimension 0 (length 256)"},
		{"unaligned end", Along(1, Range{0, 192}), 256, nil, "range [0:192]"},
		{"partial end before the last range", Along(0, Range{256, 300}, Range{0, 128}), 300, nil, "range [256:300]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.s.Blocks(FP8Block, c.full)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one mentioning %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("blocks %v, want %v", got, c.want)
			}
		})
	}
}

// TestReadBlockFP8 reads a block-FP8 weight whole and in parts: the part's
// E4M3 bytes are the slice of the whole's and its scales the matching
// blocks, so that dequantising the part gives the slice of the dequantised
// whole; Load claims a KeepFP8 tensor and its scales without uploading
// them and refuses a KeepFP8 slice that cuts a block.
func TestReadBlockFP8(t *testing.T) {
	be := cpu.New(1)
	const name = "model.layers.0.mlp.down_proj.weight"
	w, s, want := fp8Weight(name, 300, 260) // 3x3 scale blocks, partial in both directions
	dir := t.TempDir()
	writeCk(t, dir, safetensors.SingleFile, w, s, tensor("model.norm.weight", npu.F32, 1, 4))
	ck := openCk(t, dir)
	scales := floats(npu.F32, s.Data)
	full := []int{300, 260}
	for _, c := range []struct {
		name       string
		sl         *Slice
		n, k       int
		wantScales []float32
	}{
		{"whole", nil, 300, 260, scales},
		{"column parallel rank 1 of 2", Rows(128, 300), 172, 260, scales[3:]},
		{"row parallel rank 0 of 2", Along(1, Range{0, 128}), 300, 128, []float32{scales[0], scales[3], scales[6]}},
		{"row parallel to the partial end", Along(1, Range{256, 260}), 300, 4, []float32{scales[2], scales[5], scales[8]}},
		{"two row ranges", Along(0, Range{0, 128}, Range{256, 300}), 172, 260, append(append([]float32{}, scales[:3]...), scales[6:]...)},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ReadBlockFP8(ck, name, c.sl)
			if err != nil {
				t.Fatal(err)
			}
			if got.N != c.n || got.K != c.k {
				t.Fatalf("shape [%d %d], want [%d %d]", got.N, got.K, c.n, c.k)
			}
			if !reflect.DeepEqual(got.Scale, c.wantScales) {
				t.Errorf("scales %v, want %v", got.Scale, c.wantScales)
			}
			wantW, wantF := w.Data, want
			if c.sl != nil {
				wantW = c.sl.Cut(w.Data, full, 1)
				wantF = refSlice(want, full, c.sl)
			}
			if !reflect.DeepEqual(got.Weight, wantW) {
				t.Error("E4M3 bytes differ from the slice of the whole weight")
			}
			if d := dequantFP8(got.Weight, got.N, got.K, got.Scale); !reflect.DeepEqual(d, wantF) {
				t.Error("the part dequantised differs from the slice of the dequantised whole")
			}
		})
	}
	if _, err := ReadBlockFP8(ck, name, Rows(64, 192)); err == nil || !strings.Contains(err.Error(), "128-element block") {
		t.Errorf("unaligned part: error %v", err)
	}
	if _, err := ReadBlockFP8(ck, "model.norm.weight", nil); err == nil || !strings.Contains(err.Error(), "want F8_E4M3") {
		t.Errorf("float tensor: error %v", err)
	}

	norm := Spec{Name: "model.norm.weight", Shape: []int{4}}
	got, err := Load(be, ck, []Spec{{Name: name, Shape: full, Matrix: true, KeepFP8: true, Slice: Rows(128, 256)}, norm}, Options{})
	if err != nil {
		t.Fatal(err) // weight and scales claimed
	}
	if _, ok := got[name]; ok || len(got) != 1 {
		t.Errorf("loaded %d tensors (%v): a KeepFP8 weight must not be uploaded", len(got), got)
	}
	_, err = Load(be, ck, []Spec{{Name: name, Shape: full, Matrix: true, KeepFP8: true, Slice: Rows(0, 150)}, norm}, Options{})
	if err == nil || !strings.Contains(err.Error(), "kept block-scaled") {
		t.Errorf("unaligned KeepFP8 slice: error %v", err)
	}
}
