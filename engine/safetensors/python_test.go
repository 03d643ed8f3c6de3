package safetensors

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

// testdata/python/{meta,nometa}.safetensors were written by the Python
// library (safetensors 0.8.0, safetensors.torch.save_file, with and
// without metadata={"format": "pt"}) from these tensors:
//
//	z f32 [1.0]; b bf16 [1.0]; a bf16 [2.0, 3.0]; i64 int64 [3];
//	h f16 [1.5, 2.0]; q float8_e4m3fn [1, 1, 1]; u uint8 [0]; j int32 [7, 8];
//	k int8 [0]; s f32 scalar 5.0; e f32 zeros(0, 4)
func pythonTensors() []WriteTensor {
	return []WriteTensor{
		{Name: "z", DType: npu.F32, Shape: []int{1}, Data: []byte{0, 0, 0x80, 0x3f}},
		{Name: "b", DType: npu.BF16, Shape: []int{1}, Data: []byte{0x80, 0x3f}},
		{Name: "a", DType: npu.BF16, Shape: []int{2}, Data: []byte{0x00, 0x40, 0x40, 0x40}},
		{Name: "i64", DType: npu.I64, Shape: []int{1}, Data: []byte{3, 0, 0, 0, 0, 0, 0, 0}},
		{Name: "h", DType: npu.F16, Shape: []int{2}, Data: []byte{0x00, 0x3e, 0x00, 0x40}},
		{Name: "q", DType: npu.F8E4M3, Shape: []int{3}, Data: []byte{0x38, 0x38, 0x38}},
		{Name: "u", DType: npu.U8, Shape: []int{1}, Data: []byte{0}},
		{Name: "j", DType: npu.I32, Shape: []int{2}, Data: []byte{7, 0, 0, 0, 8, 0, 0, 0}},
		{Name: "k", DType: npu.I8, Shape: []int{1}, Data: []byte{0}},
		{Name: "s", DType: npu.F32, Shape: []int{}, Data: []byte{0, 0, 0xa0, 0x40}},
		{Name: "e", DType: npu.F32, Shape: []int{0, 4}, Data: nil},
	}
}

// TestPythonCompat reads files the Python library wrote and checks that
// Write produces the same bytes from the same tensors.
func TestPythonCompat(t *testing.T) {
	for _, tt := range []struct {
		file string
		meta map[string]string
	}{
		{"meta.safetensors", map[string]string{"format": "pt"}},
		{"nometa.safetensors", nil},
	} {
		t.Run(tt.file, func(t *testing.T) {
			path := filepath.Join("testdata", "python", tt.file)
			ck, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			if len(ck.Names()) != len(pythonTensors()) || len(ck.Metadata()) != len(tt.meta) {
				t.Errorf("names %v metadata %v", ck.Names(), ck.Metadata())
			}
			for _, w := range pythonTensors() {
				info, ok := ck.Info(w.Name)
				data, err := ck.Data(w.Name)
				if !ok || err != nil || info.DType != w.DType || !npu.SameShape(info.Shape, w.Shape) || !bytes.Equal(data, w.Data) {
					t.Errorf("%q: %+v %v (%v), want %v %v %v", w.Name, info, data, err, w.DType, w.Shape, w.Data)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), tt.file)
			if err := Write(out, pythonTensors(), tt.meta); err != nil {
				t.Fatal(err)
			}
			got, _ := os.ReadFile(out)
			if !bytes.Equal(got, want) {
				t.Errorf("Write differs from the Python library:\n got %q\nwant %q", got, want)
			}
		})
	}
}
