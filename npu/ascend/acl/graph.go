//go:build cgo

package acl

/*
#include "shim.h"
*/
import "C"

// Capture modes (aclmdlRICaptureMode): which threads may still make the
// synchronous memory calls (aclrtMemcpy, aclrtMemset) while a capture
// runs — none (Global), all but the capturing thread (ThreadLocal), or
// all (Relaxed). Query and sync of streams and events are refused in
// every mode (ascend-api.md §5).
const (
	CaptureModeGlobal      = 0
	CaptureModeThreadLocal = 1
	CaptureModeRelaxed     = 2
)

// Capture statuses (aclmdlRICaptureStatus).
const (
	CaptureStatusNone        = 0
	CaptureStatusActive      = 1
	CaptureStatusInvalidated = 2
)

// GraphSymbols are the optional graph-capture symbols of libascendcl.
var GraphSymbols = []string{"aclmdlRICaptureBegin", "aclmdlRICaptureEnd", "aclmdlRIExecuteAsync", "aclmdlRIDestroy"}

// CaptureBegin starts recording the work enqueued on s
// (aclmdlRICaptureBegin); end it on the same thread.
func CaptureBegin(s uintptr, mode int) error {
	return check("aclmdlRICaptureBegin", C.npu_aclmdlRICaptureBegin(C.uintptr_t(s), C.int(mode)))
}

// CaptureInfo is aclmdlRICaptureGetInfo: the capture status of s and the
// model being recorded (0 when none).
func CaptureInfo(s uintptr) (status int, model uintptr, err error) {
	var st C.int
	var m C.uintptr_t
	err = check("aclmdlRICaptureGetInfo", C.npu_aclmdlRICaptureGetInfo(C.uintptr_t(s), &st, &m))
	return int(st), uintptr(m), err
}

// CaptureEnd stops recording s and returns the model (aclmdlRICaptureEnd).
// The model may be non-zero even when err is not nil: destroy it then.
func CaptureEnd(s uintptr) (uintptr, error) {
	var m C.uintptr_t
	err := check("aclmdlRICaptureEnd", C.npu_aclmdlRICaptureEnd(C.uintptr_t(s), &m))
	return uintptr(m), err
}

// ExecuteModel enqueues a captured model's work on s (aclmdlRIExecuteAsync).
func ExecuteModel(model, s uintptr) error {
	return check("aclmdlRIExecuteAsync", C.npu_aclmdlRIExecuteAsync(C.uintptr_t(model), C.uintptr_t(s)))
}

// DestroyModel releases a captured model (aclmdlRIDestroy); its replays
// must have run.
func DestroyModel(model uintptr) error {
	return check("aclmdlRIDestroy", C.npu_aclmdlRIDestroy(C.uintptr_t(model)))
}
