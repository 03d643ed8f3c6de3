package cuda

import (
	"fmt"
	"strings"
)

// The shim's types and constants that need no cgo (shared with nocgo.go).
// Their values are shim.h's; TestShimConstants checks that they agree.

const (
	shimSymbolMissing = -99998
	shimNotLoaded     = -99997
)

// Device attributes the backend reads (CUdevice_attribute).
const (
	attrSMCount          = 16
	attrL2Bytes          = 38
	attrCCMajor          = 75
	attrCCMinor          = 76
	attrMaxSharedOptin   = 97
	attrMemPoolSupported = 115
)

// cudaErrorOutOfMemory is CUDA_ERROR_OUT_OF_MEMORY.
const cudaErrorOutOfMemory = 2

// cudaDataType_t values.
const (
	cudaR32F    = 0
	cudaR16F    = 2
	cudaR16BF   = 14
	cudaR8FE4M3 = 28
)

// cublasLtMatmulMatrixScale_t values: how a GEMM operand's scale tensor
// applies (scaleNone: no scale tensor).
const (
	scaleNone      = -1
	scaleVec128F32 = 4 // one F32 per 128 elements along K
	scaleBlk128F32 = 5 // one F32 per 128x128 block
)

// Libraries of the symbol table.
const (
	libCUDA     = 0
	libNVRTC    = 1
	libCublasLt = 2
)

// cuError is a failing call of the driver, NVRTC or cuBLASLt.
type cuError struct {
	Op   string // the call, e.g. "cuMemAlloc"
	Code int    // its status code
	Name string // the library's name of the code ("CUDA_ERROR_OUT_OF_MEMORY"), if known
	Msg  string // the library's description, if known
}

func (e *cuError) Error() string {
	switch {
	case e.Code == shimSymbolMissing:
		return fmt.Sprintf("%s: the installed library lacks this symbol", e.Op)
	case e.Code == shimNotLoaded:
		return fmt.Sprintf("%s: the library is not loaded", e.Op)
	case e.Name != "" && e.Msg != "":
		return fmt.Sprintf("%s: %s (%d): %s", e.Op, e.Name, e.Code, e.Msg)
	case e.Name != "":
		return fmt.Sprintf("%s: %s (%d)", e.Op, e.Name, e.Code)
	}
	return fmt.Sprintf("%s failed with status %d", e.Op, e.Code)
}

// symbolInfo is one entry of the shim's symbol table.
type symbolInfo struct {
	Name     string
	Lib      int // libCUDA, libNVRTC or libCublasLt
	Required bool
	Resolved bool
}

// outOfMemory reports whether err is the driver's CUDA_ERROR_OUT_OF_MEMORY.
func outOfMemory(err error) bool {
	e, ok := err.(*cuError)
	return ok && e.Code == cudaErrorOutOfMemory && strings.HasPrefix(e.Op, "cu") && !strings.HasPrefix(e.Op, "cublas")
}
