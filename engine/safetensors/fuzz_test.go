package safetensors

import (
	"testing"
)

// FuzzParseHeader feeds arbitrary files to the header parser. It must never
// panic, and an accepted header must describe tensors that lie inside the
// file, do not overlap and have exactly numel × element size bytes, so
// slicing the file with them is safe.
func FuzzParseHeader(f *testing.F) {
	f.Add(rawFile(`{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, seq(8, 0)))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := ParseHeader(data, int64(len(data)))
		if err != nil {
			if h != nil {
				t.Fatal("header returned with an error")
			}
			return
		}
		for i, ti := range h.Tensors {
			if i > 0 && h.Tensors[i-1].Name >= ti.Name {
				t.Fatalf("tensors not sorted: %q, %q", h.Tensors[i-1].Name, ti.Name)
			}
			if ti.Offset < h.DataStart || ti.Offset+ti.Size > int64(len(data)) {
				t.Fatalf("%q [%d, +%d) outside data section [%d, %d)", ti.Name, ti.Offset, ti.Size, h.DataStart, len(data))
			}
			if int64(ti.Numel())*int64(ti.DType.Size()) != ti.Size {
				t.Fatalf("%q: %d bytes for %v %v", ti.Name, ti.Size, ti.DType, ti.Shape)
			}
			if got, ok := h.Tensor(ti.Name); !ok || got.Offset != ti.Offset {
				t.Fatalf("Tensor(%q) = %+v, %v", ti.Name, got, ok)
			}
		}
	})
}
