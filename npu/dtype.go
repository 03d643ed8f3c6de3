// Package npu is the device layer: dtypes, device tensors and the op set that
// model code is written against. Backends (npu/cpu today, Ascend later)
// implement Backend; model code never touches tensor memory directly, so an
// asynchronous accelerator backend fits without changing the model.
package npu

import "fmt"

// DType is the element type of a tensor.
type DType uint8

// Element types. The numeric values are internal; use String/ParseDType at
// the edges.
const (
	Invalid DType = iota
	F32
	BF16
	F16
	I8
	I32
	F8E4M3 // OCP FP8 e4m3 (fn: no infinities, one NaN pattern 0x7f/0xff)
	U8     // raw bytes, e.g. E8M0 scales of MX formats
	I64
)

var dtypeNames = [...]string{Invalid: "invalid", F32: "F32", BF16: "BF16", F16: "F16", I8: "I8", I32: "I32", F8E4M3: "F8_E4M3", U8: "U8", I64: "I64"}

var dtypeSizes = [...]int{Invalid: 0, F32: 4, BF16: 2, F16: 2, I8: 1, I32: 4, F8E4M3: 1, U8: 1, I64: 8}

// String returns the safetensors spelling of the dtype.
func (d DType) String() string {
	if int(d) < len(dtypeNames) {
		return dtypeNames[d]
	}
	return fmt.Sprintf("DType(%d)", d)
}

// Size is the element size in bytes.
func (d DType) Size() int {
	if int(d) < len(dtypeSizes) {
		return dtypeSizes[d]
	}
	return 0
}

// IsFloat reports whether values of d are floating point.
func (d DType) IsFloat() bool {
	switch d {
	case F32, BF16, F16, F8E4M3:
		return true
	}
	return false
}

// ParseDType maps a safetensors dtype string to a DType.
func ParseDType(s string) (DType, error) {
	switch s {
	case "F32":
		return F32, nil
	case "BF16":
		return BF16, nil
	case "F16":
		return F16, nil
	case "I8":
		return I8, nil
	case "I32":
		return I32, nil
	case "I64":
		return I64, nil
	case "U8", "F8_E8M0":
		return U8, nil
	case "F8_E4M3":
		return F8E4M3, nil
	}
	return Invalid, fmt.Errorf("unsupported dtype %q", s)
}
