package npu

import (
	"errors"
	"fmt"
	"strings"
)

// ErrOutOfMemory is wrapped by the AllocError of an allocation the device
// cannot hold.
var ErrOutOfMemory = errors.New("out of device memory")

// ErrUnavailable is wrapped by the error of Open when a backend's runtime
// (driver, libraries, device) is not present on this machine.
var ErrUnavailable = errors.New("device runtime unavailable")

// AllocError is a failed allocation: which tensor, how many bytes, and why.
type AllocError struct {
	Device string // backend name (and device index)
	DType  DType
	Shape  []int
	Bytes  int64
	Free   int64 // bytes the device reported free, -1 if unknown
	Err    error // ErrOutOfMemory or the runtime's error
}

func (e *AllocError) Error() string {
	dims := make([]string, len(e.Shape))
	for i, d := range e.Shape {
		dims[i] = fmt.Sprint(d)
	}
	msg := fmt.Sprintf("%s: cannot allocate %s[%s] (%d bytes): %v", e.Device, e.DType, strings.Join(dims, ","), e.Bytes, e.Err)
	if e.Free >= 0 {
		msg += fmt.Sprintf(" (%d bytes free)", e.Free)
	}
	return msg
}

func (e *AllocError) Unwrap() error { return e.Err }

// ShapeBytes is the byte size of a dt tensor of the given shape, or an
// error for a negative dimension or a size that overflows int64.
func ShapeBytes(dt DType, shape ...int) (int64, error) {
	n := int64(dt.Size())
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("npu: negative dimension in shape %v", shape)
		}
		if d != 0 && n > (1<<62)/int64(d) {
			return 0, fmt.Errorf("npu: shape %v of %v overflows", shape, dt)
		}
		n *= int64(d)
	}
	return n, nil
}

// Must returns t, panicking on err: for tests and for code paths where a
// failed allocation is a programming error.
func Must(t *Tensor, err error) *Tensor {
	if err != nil {
		panic(err)
	}
	return t
}

// ErrCapturing is wrapped by the error of a memory operation or sync that
// a backend refuses while it records a graph (see GraphCapturer).
var ErrCapturing = errors.New("not allowed while capturing a graph")
