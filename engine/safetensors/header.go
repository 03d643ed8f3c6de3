// Package safetensors reads and writes the safetensors checkpoint format
// (https://github.com/huggingface/safetensors): an 8-byte little-endian
// header length, a JSON header mapping tensor names to dtype, shape and
// byte range, then the raw little-endian tensor data.
//
// Checkpoint files come from outside, so the header parser trusts nothing:
// every length, offset and shape is checked before any byte is touched,
// and a malformed file gives an error naming the file and tensor, never a
// panic. Reading is zero-copy: tensor data is a slice of the memory-mapped
// file.
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"

	"github.com/npuserve/npuserve/npu"
)

// MaxHeaderSize bounds the JSON header (the Python library uses the same
// 100 MB limit); a larger length is a corrupt or hostile file.
const MaxHeaderSize = 100 << 20

// metadataKey is the reserved header entry for string metadata.
const metadataKey = "__metadata__"

// TensorInfo describes one tensor of a checkpoint.
type TensorInfo struct {
	Name  string
	DType npu.DType
	Shape []int
	// File is the path of the .safetensors file holding the data (empty
	// for a header parsed on its own).
	File string
	// DTypeName is the dtype as spelled in the file; it differs from
	// DType.String() for F8_E8M0, which is read as raw bytes (npu.U8).
	DTypeName string
	// Offset is the absolute byte offset of the data in the file, Size its
	// length in bytes.
	Offset, Size int64
}

// Numel is the number of elements (1 for a scalar).
func (t TensorInfo) Numel() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Header is a parsed, validated safetensors header.
type Header struct {
	// Tensors sorted by name.
	Tensors []TensorInfo
	// Metadata is the __metadata__ entry (empty map when absent).
	Metadata map[string]string
	// DataStart is 8 + header length: the file offset data_offsets count from.
	DataStart int64
}

// Tensor looks a tensor up by name.
func (h *Header) Tensor(name string) (TensorInfo, bool) {
	i, ok := slices.BinarySearchFunc(h.Tensors, name, func(t TensorInfo, name string) int {
		switch {
		case t.Name < name:
			return -1
		case t.Name > name:
			return 1
		}
		return 0
	})
	if !ok {
		return TensorInfo{}, false
	}
	return h.Tensors[i], true
}

// dtypes are the element types npuserve reads, by safetensors name.
var dtypes = map[string]npu.DType{
	"F32":     npu.F32,
	"F16":     npu.F16,
	"BF16":    npu.BF16,
	"I8":      npu.I8,
	"U8":      npu.U8,
	"I32":     npu.I32,
	"I64":     npu.I64,
	"F8_E4M3": npu.F8E4M3,
	"F8_E8M0": npu.U8, // MX block scales: raw exponent bytes
}

// rawEntry is one tensor's header entry before validation.
type rawEntry struct {
	DType       *string       `json:"dtype"`
	Shape       []json.Number `json:"shape"`
	DataOffsets []json.Number `json:"data_offsets"`
}

// ParseHeader parses and validates the header at the start of b, a
// safetensors file of fileSize bytes (b may be the whole file or just its
// first 8+N bytes). It checks the header length against MaxHeaderSize and
// fileSize, that every dtype is supported, every shape non-negative without
// overflow, every data_offsets pair ordered, inside the data section and
// exactly numel*elemsize long, and that no two tensors overlap. Errors name
// the tensor; the caller adds the file name.
func ParseHeader(b []byte, fileSize int64) (*Header, error) {
	if fileSize < 8 || len(b) < 8 {
		return nil, fmt.Errorf("truncated file: %d bytes, shorter than the 8-byte header length", min(fileSize, int64(len(b))))
	}
	n := binary.LittleEndian.Uint64(b[:8])
	if n > MaxHeaderSize {
		return nil, fmt.Errorf("header length %d exceeds the %d-byte limit (corrupt file?)", n, MaxHeaderSize)
	}
	dataStart := 8 + int64(n)
	if dataStart > fileSize {
		return nil, fmt.Errorf("truncated file: header length %d needs %d bytes, file has %d", n, dataStart, fileSize)
	}
	if dataStart > int64(len(b)) {
		return nil, fmt.Errorf("header length %d needs %d bytes, only %d given", n, dataStart, len(b))
	}
	dataSize := fileSize - dataStart

	dec := json.NewDecoder(bytes.NewReader(b[8:dataStart]))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("header is not a JSON object (%v)", headerErr(tok, err))
	}
	h := &Header{Metadata: map[string]string{}, DataStart: dataStart}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("header JSON: %w", err)
		}
		name := tok.(string) // object keys are strings once Token succeeded
		if seen[name] {
			return nil, fmt.Errorf("tensor %q: duplicate header entry", name)
		}
		seen[name] = true
		if name == metadataKey {
			var md map[string]string
			if err := dec.Decode(&md); err != nil {
				return nil, fmt.Errorf("%s: want an object of strings: %w", metadataKey, err)
			}
			for k, v := range md {
				h.Metadata[k] = v
			}
			continue
		}
		var e rawEntry
		if err := dec.Decode(&e); err != nil {
			return nil, fmt.Errorf("tensor %q: bad header entry: %w", name, err)
		}
		t, err := checkEntry(name, &e, dataStart, dataSize)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		h.Tensors = append(h.Tensors, t)
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, fmt.Errorf("header JSON: %w", err)
	}
	if tok, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("header JSON: trailing data after the object (%v)", headerErr(tok, err))
	}

	// No two tensors may share bytes.
	byOffset := make([]TensorInfo, 0, len(h.Tensors))
	for _, t := range h.Tensors {
		if t.Size > 0 {
			byOffset = append(byOffset, t)
		}
	}
	slices.SortFunc(byOffset, func(a, b TensorInfo) int {
		if a.Offset != b.Offset {
			return cmpInt64(a.Offset, b.Offset)
		}
		return cmpInt64(a.Size, b.Size)
	})
	for i := 1; i < len(byOffset); i++ {
		prev, cur := byOffset[i-1], byOffset[i]
		if cur.Offset < prev.Offset+prev.Size {
			return nil, fmt.Errorf("tensor %q: data [%d, %d) overlaps tensor %q [%d, %d)", cur.Name,
				cur.Offset-dataStart, cur.Offset-dataStart+cur.Size, prev.Name, prev.Offset-dataStart, prev.Offset-dataStart+prev.Size)
		}
	}
	slices.SortFunc(h.Tensors, func(a, b TensorInfo) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return h, nil
}

// checkEntry validates one tensor entry against a data section of
// dataSize bytes starting at file offset dataStart.
func checkEntry(name string, e *rawEntry, dataStart, dataSize int64) (TensorInfo, error) {
	t := TensorInfo{Name: name}
	if e.DType == nil {
		return t, errors.New("missing dtype")
	}
	dt, ok := dtypes[*e.DType]
	if !ok {
		return t, fmt.Errorf("unsupported dtype %q (supported: F32, F16, BF16, I8, U8, I32, I64, F8_E4M3, F8_E8M0)", *e.DType)
	}
	t.DType, t.DTypeName = dt, *e.DType
	if e.Shape == nil {
		return t, errors.New("missing shape")
	}
	t.Shape = make([]int, len(e.Shape))
	numel, zero := int64(1), false
	for i, s := range e.Shape {
		d, err := strconv.ParseInt(string(s), 10, 64)
		if err != nil || d < 0 || d > math.MaxInt {
			return t, fmt.Errorf("shape %v: dimension %d is not a non-negative integer", e.Shape, i)
		}
		t.Shape[i] = int(d)
		if d == 0 {
			zero = true
		} else if !zero {
			if numel > math.MaxInt64/d {
				return t, fmt.Errorf("shape %v: element count overflows", e.Shape)
			}
			numel *= d
		}
	}
	if zero {
		numel = 0
	}
	if numel > math.MaxInt64/int64(dt.Size()) {
		return t, fmt.Errorf("shape %v: byte size overflows", e.Shape)
	}
	want := numel * int64(dt.Size())
	if len(e.DataOffsets) != 2 {
		return t, fmt.Errorf("data_offsets has %d entries, want [begin, end]", len(e.DataOffsets))
	}
	var off [2]int64
	for i, s := range e.DataOffsets {
		v, err := strconv.ParseUint(string(s), 10, 64)
		if err != nil || v > math.MaxInt64 {
			return t, fmt.Errorf("data_offsets %v: %q is not a valid offset", e.DataOffsets, s)
		}
		off[i] = int64(v)
	}
	switch {
	case off[0] > off[1]:
		return t, fmt.Errorf("data_offsets [%d, %d]: begin after end", off[0], off[1])
	case off[1] > dataSize:
		return t, fmt.Errorf("data_offsets [%d, %d] end beyond the %d-byte data section (truncated file?)", off[0], off[1], dataSize)
	case off[1]-off[0] != want:
		return t, fmt.Errorf("data_offsets [%d, %d] hold %d bytes, but %s %v needs %d", off[0], off[1], off[1]-off[0], t.DTypeName, t.Shape, want)
	}
	t.Offset, t.Size = dataStart+off[0], want
	return t, nil
}

func headerErr(tok json.Token, err error) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("found %v", tok)
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
