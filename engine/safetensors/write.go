package safetensors

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/npuserve/npuserve/npu"
)

// WriteTensor is one tensor to write: Data holds its little-endian
// elements (numel × DType.Size() bytes).
type WriteTensor struct {
	Name  string
	DType npu.DType
	Shape []int
	Data  []byte
}

// dtypeRank orders dtypes as the Rust safetensors Dtype enum does; data
// is laid out by decreasing rank, which is also decreasing element size.
var dtypeRank = map[npu.DType]int{
	npu.U8: 1, npu.I8: 2, npu.F8E4M3: 3, npu.F16: 4, npu.BF16: 5, npu.I32: 6, npu.F32: 7, npu.I64: 8,
}

// Write writes a safetensors file the way the Python library does: data
// laid out contiguously by dtype (the library's order, decreasing element
// size, so every tensor is aligned to its element size), then by name;
// header entries in data order after __metadata__ (keys sorted); header
// padded with spaces to a multiple of 8 bytes. The file is written under a temporary name and renamed into
// place, so readers never see a partial file.
func Write(path string, tensors []WriteTensor, metadata map[string]string) error {
	ts := slices.Clone(tensors)
	seen := map[string]bool{}
	for _, t := range ts {
		if err := checkWrite(t); err != nil {
			return fmt.Errorf("%s: tensor %q: %w", path, t.Name, err)
		}
		if seen[t.Name] {
			return fmt.Errorf("%s: tensor %q given twice", path, t.Name)
		}
		seen[t.Name] = true
	}
	slices.SortFunc(ts, func(a, b WriteTensor) int {
		if ra, rb := dtypeRank[a.DType], dtypeRank[b.DType]; ra != rb {
			return rb - ra
		}
		return strings.Compare(a.Name, b.Name)
	})

	var hdr bytes.Buffer
	hdr.WriteByte('{')
	if len(metadata) > 0 {
		hdr.WriteString(quote(metadataKey) + ":{")
		for i, k := range slices.Sorted(maps.Keys(metadata)) {
			if i > 0 {
				hdr.WriteByte(',')
			}
			hdr.WriteString(quote(k) + ":" + quote(metadata[k]))
		}
		hdr.WriteByte('}')
	}
	off := 0
	for i, t := range ts {
		if i > 0 || len(metadata) > 0 {
			hdr.WriteByte(',')
		}
		shape, _ := json.Marshal(t.Shape)
		if t.Shape == nil {
			shape = []byte("[]")
		}
		fmt.Fprintf(&hdr, `%s:{"dtype":%s,"shape":%s,"data_offsets":[%d,%d]}`, quote(t.Name), quote(t.DType.String()), shape, off, off+len(t.Data))
		off += len(t.Data)
	}
	hdr.WriteByte('}')
	for hdr.Len()%8 != 0 {
		hdr.WriteByte(' ')
	}

	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	w := bufio.NewWriterSize(tmp, 1<<20)
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(hdr.Len()))
	w.Write(n[:])
	w.Write(hdr.Bytes())
	for _, t := range ts {
		w.Write(t.Data)
	}
	err = w.Flush()
	if err == nil {
		err = tmp.Chmod(0o644) // CreateTemp makes it 0600; a checkpoint is shared
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// checkWrite rejects what a reader would reject.
func checkWrite(t WriteTensor) error {
	if t.Name == metadataKey {
		return fmt.Errorf("%s is reserved", metadataKey)
	}
	if !utf8.ValidString(t.Name) {
		return fmt.Errorf("name is not valid UTF-8")
	}
	if _, ok := dtypes[t.DType.String()]; !ok {
		return fmt.Errorf("unsupported dtype %v", t.DType)
	}
	numel := 1
	for _, d := range t.Shape {
		if d < 0 {
			return fmt.Errorf("negative dimension in shape %v", t.Shape)
		}
		numel *= d
	}
	if want := numel * t.DType.Size(); len(t.Data) != want {
		return fmt.Errorf("%v %v needs %d bytes, got %d", t.DType, t.Shape, want, len(t.Data))
	}
	return nil
}

// quote writes s as a JSON string without HTML escaping.
func quote(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}
