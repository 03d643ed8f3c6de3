package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

// rawFile assembles a file from a header string (padded to 8 bytes) and
// data, so tests can write headers no correct writer would.
func rawFile(header string, data []byte) []byte {
	for len(header)%8 != 0 {
		header += " "
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	out = append(out, header...)
	return append(out, data...)
}

// seq returns n bytes 0, 1, 2, … (mod 256) so misplaced ranges show.
func seq(n int, start byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = start + byte(i)
	}
	return b
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func sampleTensors() []WriteTensor {
	return []WriteTensor{
		{Name: "w.f32", DType: npu.F32, Shape: []int{2, 3}, Data: seq(24, 0)},
		{Name: "a.bf16", DType: npu.BF16, Shape: []int{3}, Data: seq(6, 100)},
		{Name: "b.f16", DType: npu.F16, Shape: []int{1, 1}, Data: seq(2, 110)},
		{Name: "c.i8", DType: npu.I8, Shape: []int{3}, Data: seq(3, 120)},
		{Name: "d.u8", DType: npu.U8, Shape: []int{1}, Data: seq(1, 130)},
		{Name: "e.i32", DType: npu.I32, Shape: []int{2}, Data: seq(8, 140)},
		{Name: "f.i64", DType: npu.I64, Shape: []int{1}, Data: seq(8, 150)},
		{Name: "g.fp8", DType: npu.F8E4M3, Shape: []int{5}, Data: seq(5, 160)},
		{Name: "scalar", DType: npu.F32, Shape: []int{}, Data: seq(4, 170)},
		{Name: "empty", DType: npu.F32, Shape: []int{0, 4}, Data: nil},
	}
}

func TestWriteOpenRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, SingleFile)
	in := sampleTensors()
	meta := map[string]string{"format": "pt", "note": "<&>"}
	if err := Write(path, in, meta); err != nil {
		t.Fatal(err)
	}
	ck, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if ck.Path() != path || !reflect.DeepEqual(ck.Files(), []string{path}) {
		t.Errorf("Path %q Files %v", ck.Path(), ck.Files())
	}
	var want []string
	for _, w := range in {
		want = append(want, w.Name)
	}
	slices.Sort(want)
	if !reflect.DeepEqual(ck.Names(), want) {
		t.Errorf("Names = %v, want %v", ck.Names(), want)
	}
	if !reflect.DeepEqual(ck.Metadata(), meta) {
		t.Errorf("Metadata = %v", ck.Metadata())
	}
	for _, w := range in {
		info, ok := ck.Info(w.Name)
		if !ok {
			t.Fatalf("Info(%q) missing", w.Name)
		}
		if info.DType != w.DType || !reflect.DeepEqual(info.Shape, w.Shape) || info.File != path || info.DTypeName != w.DType.String() {
			t.Errorf("Info(%q) = %+v", w.Name, info)
		}
		if info.Offset%int64(w.DType.Size()) != 0 {
			t.Errorf("%q at offset %d is not aligned to %d", w.Name, info.Offset, w.DType.Size())
		}
		got, err := ck.Data(w.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, w.Data) {
			t.Errorf("Data(%q) = %v, want %v", w.Name, got, w.Data)
		}
	}
	if _, ok := ck.Info("nope"); ok {
		t.Error("Info of a missing tensor")
	}
	if _, err := ck.Data("nope"); err == nil || !strings.Contains(err.Error(), `no tensor "nope"`) {
		t.Errorf("Data of a missing tensor: %v", err)
	}
	if err := ck.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := ck.Data("w.f32"); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Data after Close: %v", err)
	}
	if err := ck.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestWriteFormat pins the exact bytes: the Python library's layout
// (header order = data order by dtype then name, compact JSON, __metadata__
// first, space padding to 8 bytes).
func TestWriteFormat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.safetensors")
	err := Write(path, []WriteTensor{
		{Name: "b", DType: npu.BF16, Shape: []int{1}, Data: []byte{1, 2}},
		{Name: "a", DType: npu.BF16, Shape: []int{1}, Data: []byte{3, 4}},
		{Name: "z", DType: npu.F32, Shape: []int{1}, Data: []byte{5, 6, 7, 8}},
	}, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	header := `{"__metadata__":{"format":"pt"},` +
		`"z":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},` +
		`"a":{"dtype":"BF16","shape":[1],"data_offsets":[4,6]},` +
		`"b":{"dtype":"BF16","shape":[1],"data_offsets":[6,8]}}`
	want := rawFile(header, []byte{5, 6, 7, 8, 3, 4, 1, 2})
	if !bytes.Equal(got, want) {
		t.Errorf("file bytes:\n got %q\nwant %q", got, want)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, %v", st.Mode(), err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}
}

func TestWriteErrors(t *testing.T) {
	tests := []struct {
		name string
		ts   []WriteTensor
		want string
	}{
		{"short data", []WriteTensor{{Name: "x", DType: npu.F32, Shape: []int{2}, Data: make([]byte, 7)}}, `tensor "x": F32 [2] needs 8 bytes, got 7`},
		{"negative dim", []WriteTensor{{Name: "x", DType: npu.F32, Shape: []int{-1}}}, "negative dimension"},
		{"bad dtype", []WriteTensor{{Name: "x", DType: npu.Invalid}}, "unsupported dtype"},
		{"duplicate", []WriteTensor{{Name: "x", DType: npu.U8, Shape: []int{1}, Data: []byte{1}}, {Name: "x", DType: npu.U8, Shape: []int{1}, Data: []byte{1}}}, `tensor "x" given twice`},
		{"reserved", []WriteTensor{{Name: "__metadata__", DType: npu.U8, Shape: []int{1}, Data: []byte{1}}}, "reserved"},
		{"bad utf8", []WriteTensor{{Name: "\xff", DType: npu.U8, Shape: []int{1}, Data: []byte{1}}}, "UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.safetensors")
			err := Write(path, tt.ts, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("error %v, want %q naming the file", err, tt.want)
			}
			if _, err := os.Stat(path); err == nil {
				t.Error("file written despite the error")
			}
		})
	}
	if err := Write(filepath.Join(t.TempDir(), "no", "such", "dir.safetensors"), nil, nil); err == nil {
		t.Error("write into a missing directory: no error")
	}
}

func TestParseHeader(t *testing.T) {
	data := rawFile(`{"__metadata__":{"k":"v"},"b":{"dtype":"F8_E8M0","shape":[2],"data_offsets":[4,6]},`+
		`"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"e":{"dtype":"BF16","shape":[0],"data_offsets":[6,6]}}`, seq(6, 0))
	h, err := ParseHeader(data, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Tensors) != 3 || h.Tensors[0].Name != "a" || h.Tensors[1].Name != "b" || h.Tensors[2].Name != "e" {
		t.Fatalf("tensors %+v", h.Tensors)
	}
	b, _ := h.Tensor("b")
	if b.DType != npu.U8 || b.DTypeName != "F8_E8M0" || b.Offset != h.DataStart+4 || b.Size != 2 {
		t.Errorf("b = %+v", b)
	}
	if a, _ := h.Tensor("a"); a.Numel() != 1 || a.Size != 4 {
		t.Errorf("scalar a = %+v", a)
	}
	if _, ok := h.Tensor("c"); ok {
		t.Error("found c")
	}
	if h.Metadata["k"] != "v" || h.DataStart%8 != 0 {
		t.Errorf("metadata %v, data start %d", h.Metadata, h.DataStart)
	}
	// A header prefix is enough when the file size is given.
	if _, err := ParseHeader(data[:h.DataStart], int64(len(data))); err != nil {
		t.Errorf("header prefix: %v", err)
	}
}

func TestParseHeaderErrors(t *testing.T) {
	entry := func(dtype, shape, offsets string) string {
		return `{"t":{"dtype":"` + dtype + `","shape":` + shape + `,"data_offsets":` + offsets + `}}`
	}
	lenOnly := func(n uint64) []byte { return binary.LittleEndian.AppendUint64(nil, n) }
	tests := []struct {
		name string
		file []byte
		want string
	}{
		{"empty file", nil, "truncated file: 0 bytes"},
		{"short length", []byte{1, 2, 3}, "truncated file: 3 bytes"},
		{"huge header length", lenOnly(1 << 40), "exceeds the 104857600-byte limit"},
		{"header beyond file", append(lenOnly(100), "{}"...), "truncated file: header length 100 needs 108 bytes, file has 10"},
		{"not JSON", rawFile("hello", nil), "header is not a JSON object"},
		{"JSON array", rawFile("[1]", nil), "header is not a JSON object"},
		{"bad JSON", rawFile(`{"t":{"dtype":`, nil), "tensor \"t\": bad header entry"},
		{"trailing garbage", rawFile(`{}x`, nil), "trailing data"},
		{"two objects", rawFile(`{}{}`, nil), "trailing data"},
		{"unknown dtype", rawFile(entry("F64", "[1]", "[0,8]"), seq(8, 0)), `tensor "t": unsupported dtype "F64"`},
		{"missing dtype", rawFile(`{"t":{"shape":[1],"data_offsets":[0,4]}}`, seq(4, 0)), `tensor "t": missing dtype`},
		{"missing shape", rawFile(`{"t":{"dtype":"F32","data_offsets":[0,4]}}`, seq(4, 0)), `tensor "t": missing shape`},
		{"entry not object", rawFile(`{"t":5}`, nil), `tensor "t": bad header entry`},
		{"negative dim", rawFile(entry("F32", "[-1]", "[0,4]"), seq(4, 0)), `tensor "t": shape [-1]: dimension 0 is not a non-negative integer`},
		{"fractional dim", rawFile(entry("F32", "[1.5]", "[0,4]"), seq(4, 0)), "dimension 0 is not a non-negative integer"},
		{"huge dims", rawFile(entry("F32", "[4294967296,4294967296]", "[0,4]"), seq(4, 0)), "element count overflows"},
		{"byte size overflow", rawFile(entry("I64", "[2305843009213693952]", "[0,4]"), seq(4, 0)), "byte size overflows"},
		{"dim beyond int64", rawFile(entry("F32", "[99999999999999999999]", "[0,4]"), seq(4, 0)), "not a non-negative integer"},
		{"one offset", rawFile(entry("F32", "[1]", "[0]"), seq(4, 0)), "data_offsets has 1 entries"},
		{"negative offset", rawFile(entry("F32", "[1]", "[-4,0]"), seq(4, 0)), "is not a valid offset"},
		{"offset beyond int64", rawFile(entry("F32", "[1]", "[0,18446744073709551615]"), seq(4, 0)), "is not a valid offset"},
		{"begin after end", rawFile(entry("F32", "[0]", "[4,0]"), seq(4, 0)), "data_offsets [4, 0]: begin after end"},
		{"end beyond data", rawFile(entry("F32", "[2]", "[0,8]"), seq(4, 0)), "data_offsets [0, 8] end beyond the 4-byte data section"},
		{"size mismatch", rawFile(entry("F32", "[2]", "[0,4]"), seq(8, 0)), "data_offsets [0, 4] hold 4 bytes, but F32 [2] needs 8"},
		{"overlap", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, seq(8, 0)),
			`tensor "b": data [4, 8) overlaps tensor "a" [0, 8)`},
		{"same range", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, seq(4, 0)),
			"overlaps tensor"},
		{"duplicate name", rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, seq(8, 0)),
			`tensor "a": duplicate header entry`},
		{"metadata not strings", rawFile(`{"__metadata__":{"n":1}}`, nil), "__metadata__: want an object of strings"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := ParseHeader(tt.file, int64(len(tt.file)))
			if err == nil {
				t.Fatalf("no error (%+v), want %q", h, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q\nwant it to contain %q", err, tt.want)
			}
		})
	}
}

// shard writes tensors to dir/name.
func shard(t *testing.T, dir, name string, ts ...WriteTensor) {
	t.Helper()
	if err := Write(filepath.Join(dir, name), ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
}

func f32(name string, v byte) WriteTensor {
	return WriteTensor{Name: name, DType: npu.F32, Shape: []int{1}, Data: []byte{v, 0, 0, 0}}
}

func writeIndex(t *testing.T, dir string, m map[string]string) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 12}, "weight_map": m})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, IndexFile), b)
}

func TestOpenLayouts(t *testing.T) {
	t.Run("sharded", func(t *testing.T) {
		dir := t.TempDir()
		shard(t, dir, "model-00001-of-00002.safetensors", f32("a", 1), f32("b", 2))
		shard(t, dir, "model-00002-of-00002.safetensors", f32("c", 3))
		writeIndex(t, dir, map[string]string{"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"})
		ck, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer ck.Close()
		if ck.Path() != filepath.Join(dir, IndexFile) || len(ck.Files()) != 2 || !reflect.DeepEqual(ck.Names(), []string{"a", "b", "c"}) {
			t.Errorf("Path %q Files %v Names %v", ck.Path(), ck.Files(), ck.Names())
		}
		c, _ := ck.Info("c")
		d, _ := ck.Data("c")
		if c.File != filepath.Join(dir, "model-00002-of-00002.safetensors") || d[0] != 3 {
			t.Errorf("c in %s = %v", c.File, d)
		}
		if ck.Metadata()["format"] != "pt" {
			t.Errorf("metadata %v", ck.Metadata())
		}
	})
	t.Run("single file wins over index", func(t *testing.T) {
		dir := t.TempDir()
		shard(t, dir, SingleFile, f32("a", 1))
		writeIndex(t, dir, map[string]string{"x": "missing.safetensors"})
		ck, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer ck.Close()
		if !reflect.DeepEqual(ck.Names(), []string{"a"}) {
			t.Errorf("Names %v", ck.Names())
		}
	})
	t.Run("any safetensors files", func(t *testing.T) {
		dir := t.TempDir()
		shard(t, dir, "one.safetensors", f32("a", 1))
		shard(t, dir, "two.safetensors", f32("b", 2))
		writeFile(t, filepath.Join(dir, "notes.txt"), []byte("ignored"))
		ck, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer ck.Close()
		if ck.Path() != dir || !reflect.DeepEqual(ck.Names(), []string{"a", "b"}) {
			t.Errorf("Path %q Names %v", ck.Path(), ck.Names())
		}
	})
	t.Run("file path", func(t *testing.T) {
		dir := t.TempDir()
		shard(t, dir, "weights.safetensors", f32("a", 1))
		ck, err := Open(filepath.Join(dir, "weights.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		defer ck.Close()
		if d, _ := ck.Data("a"); len(d) != 4 || d[0] != 1 {
			t.Errorf("a = %v", d)
		}
	})
}

func TestOpenErrors(t *testing.T) {
	good := rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, seq(8, 0))
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string) // builds the checkpoint in dir
		want  []string                       // substrings of the error
	}{
		{"empty directory", func(t *testing.T, dir string) {}, []string{"no model.safetensors, model.safetensors.index.json or *.safetensors files"}},
		{"truncated before the header ends", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, SingleFile), good[:20])
		}, []string{SingleFile + ": truncated file: header length"}},
		{"truncated data", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, SingleFile), good[:len(good)-1])
		}, []string{SingleFile + `: tensor "a": data_offsets [0, 8] end beyond the 7-byte data section (truncated file?)`}},
		{"zero-length file", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, SingleFile), nil)
		}, []string{SingleFile + ": truncated file: 0 bytes"}},
		{"lying offsets", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, SingleFile), rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`, seq(8, 0)))
		}, []string{SingleFile + `: tensor "a": data_offsets [8, 16] end beyond`}},
		{"unknown dtype", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, SingleFile), rawFile(`{"a":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}}`, seq(8, 0)))
		}, []string{SingleFile + `: tensor "a": unsupported dtype "C64"`}},
		{"index: missing shard", func(t *testing.T, dir string) {
			shard(t, dir, "s1.safetensors", f32("a", 1))
			writeIndex(t, dir, map[string]string{"a": "s1.safetensors", "b": "s2.safetensors"})
		}, []string{IndexFile + `: shard "s2.safetensors" (holding tensor "b")`, "no such file"}},
		{"index: tensor absent from its shard", func(t *testing.T, dir string) {
			shard(t, dir, "s1.safetensors", f32("a", 1))
			writeIndex(t, dir, map[string]string{"a": "s1.safetensors", "ghost": "s1.safetensors"})
		}, []string{IndexFile + `: tensor "ghost" is mapped to s1.safetensors, which does not contain it`}},
		{"index: tensor in another shard", func(t *testing.T, dir string) {
			shard(t, dir, "s1.safetensors", f32("a", 1))
			shard(t, dir, "s2.safetensors", f32("b", 1))
			writeIndex(t, dir, map[string]string{"a": "s2.safetensors", "b": "s2.safetensors"})
		}, []string{`tensor "a" is mapped to s2.safetensors, which does not contain it`}},
		{"index: unlisted shard tensor", func(t *testing.T, dir string) {
			shard(t, dir, "s1.safetensors", f32("a", 1), f32("extra", 2))
			writeIndex(t, dir, map[string]string{"a": "s1.safetensors"})
		}, []string{IndexFile + ": ", `s1.safetensors holds tensor "extra", which the index does not list`}},
		{"index: bad shard file", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "s1.safetensors"), []byte("garbage!garbage!"))
			writeIndex(t, dir, map[string]string{"a": "s1.safetensors"})
		}, []string{"s1.safetensors: ", "exceeds the"}},
		{"index: escaping path", func(t *testing.T, dir string) {
			writeIndex(t, dir, map[string]string{"a": "../s1.safetensors"})
		}, []string{`tensor "a": shard "../s1.safetensors" is not a file inside the checkpoint directory`}},
		{"index: bad JSON", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, IndexFile), []byte("{"))
		}, []string{IndexFile + ": "}},
		{"index: no weight_map", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, IndexFile), []byte(`{"metadata":{}}`))
		}, []string{IndexFile + ": empty or missing weight_map"}},
		{"files: duplicate tensor", func(t *testing.T, dir string) {
			shard(t, dir, "one.safetensors", f32("a", 1))
			shard(t, dir, "two.safetensors", f32("a", 2))
		}, []string{`two.safetensors: tensor "a" is also in `, "one.safetensors"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.setup(t, dir)
			ck, err := Open(dir)
			if err == nil {
				ck.Close()
				t.Fatalf("no error, want %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nwant it to contain %q", err, w)
				}
			}
		})
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing directory: %v", err)
	}
}
