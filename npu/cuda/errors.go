package cuda

import "fmt"

// Device-side failures: kernels that find a bad index, slot or layout in
// device data (which the host never reads before enqueueing) record the
// first one in the backend's error word instead of faulting; the next
// Sync, Download or RunOnStream reports it once and clears it.

// Device error codes (ERR_* in kernels/common.cuh).
const (
	devErrIndex      = 1
	devErrSlot       = 2
	devErrLayout     = 3
	devErrRows       = 4
	devErrSharedSlot = 5
	devErrPosition   = 6
)

// Op codes that kernels report with their failure.
const (
	opGather = iota + 1
	opEmbedding
	opScatter
	opConv1d
	opConv1dUpdate
	opKDA
	opDSAIndex
	opSparseMLA
)

var opNames = map[int]string{
	opGather:       "Gather",
	opEmbedding:    "Embedding",
	opScatter:      "Scatter",
	opConv1d:       "Conv1d",
	opConv1dUpdate: "Conv1dUpdate",
	opKDA:          "KDA",
	opDSAIndex:     "DSAIndex",
	opSparseMLA:    "SparseMLA",
}

// DeviceError is a failure that a kernel detected in device data: an
// index outside its table, a state slot outside the state tensor, a
// layout that does not describe the batch. The op's outputs are undefined.
type DeviceError struct {
	Op    string // the op, e.g. "Gather"
	Code  int    // devErr*
	Value int    // the offending index, slot or sequence
}

func (e *DeviceError) Error() string {
	switch e.Code {
	case devErrIndex:
		return fmt.Sprintf("cuda: %s: index %d out of range (detected on the device)", e.Op, e.Value)
	case devErrSlot:
		return fmt.Sprintf("cuda: %s: state slot %d out of range (detected on the device)", e.Op, e.Value)
	case devErrLayout:
		return fmt.Sprintf("cuda: %s: the layout does not have one row per sequence (sequence %d; detected on the device)", e.Op, e.Value)
	case devErrRows:
		return fmt.Sprintf("cuda: %s: QueryStart does not split the batch's rows at sequence %d (detected on the device)", e.Op, e.Value)
	case devErrSharedSlot:
		return fmt.Sprintf("cuda: %s: two sequences share state slot %d (detected on the device)", e.Op, e.Value)
	case devErrPosition:
		return fmt.Sprintf("cuda: %s: position %d is outside its sequence, block table or cache (detected on the device)", e.Op, e.Value)
	}
	return fmt.Sprintf("cuda: %s: device error %d (value %d)", e.Op, e.Code, e.Value)
}

func deviceError(code, op, value int32) *DeviceError {
	name := opNames[int(op)]
	if name == "" {
		name = fmt.Sprintf("op %d", op)
	}
	return &DeviceError{Op: name, Code: int(code), Value: int(value)}
}

// cublasStatusName names a cublasStatus_t.
func cublasStatusName(rc int) string {
	switch rc {
	case 1:
		return "CUBLAS_STATUS_NOT_INITIALIZED"
	case 3:
		return "CUBLAS_STATUS_ALLOC_FAILED"
	case 7:
		return "CUBLAS_STATUS_INVALID_VALUE"
	case 8:
		return "CUBLAS_STATUS_ARCH_MISMATCH"
	case 11:
		return "CUBLAS_STATUS_MAPPING_ERROR"
	case 13:
		return "CUBLAS_STATUS_EXECUTION_FAILED"
	case 14:
		return "CUBLAS_STATUS_INTERNAL_ERROR"
	case 15:
		return "CUBLAS_STATUS_NOT_SUPPORTED"
	case 16:
		return "CUBLAS_STATUS_LICENSE_ERROR"
	}
	return ""
}
