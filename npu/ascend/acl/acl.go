//go:build cgo

package acl

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"
)

// ACL error codes the callers act on (acl_base.h, rt_error_codes.h).
const (
	Success            = 0
	ErrRepeatInit      = 100002
	ErrContextNull     = 107002
	ErrWaitTimeout     = 107019
	ErrMemAllocation   = 207001 // device out of memory
	ErrBadAlloc        = 200000
	ErrStreamSyncTimed = 507046
	SymbolMissing      = C.NPU_ACL_SYMBOL_MISSING // an optional symbol this CANN lacks
)

// Memcpy kinds (aclrtMemcpyKind).
const (
	HostToDevice   = 1
	DeviceToHost   = 2
	DeviceToDevice = 3
)

// HBM is aclrtMemAttr ACL_HBM_MEM, the device memory GetMemInfo reports.
const HBM = 1

var (
	loadMu   sync.Mutex
	loadPath string
	loadErr  error
)

// Load dlopens libascendcl.so at path (once per process: later calls
// return the first call's result, whatever their path). The error names
// the path and the loader's reason.
func Load(path string) error {
	loadMu.Lock()
	defer loadMu.Unlock()
	if loadPath != "" || loadErr != nil {
		return loadErr
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var buf [2048]C.char
	switch rc := C.npu_acl_load(cpath, &buf[0], C.size_t(len(buf))); rc {
	case 0:
		loadPath = path
	case -1:
		loadErr = &LoadError{Path: path, Reason: C.GoString(&buf[0])}
	default:
		loadErr = &LoadError{Path: path, Reason: C.GoString(&buf[0]), TooOld: true}
	}
	return loadErr
}

// Path is the libascendcl.so that loaded ("" before a successful Load).
func Path() string {
	loadMu.Lock()
	defer loadMu.Unlock()
	return loadPath
}

// Has reports whether the loaded library has the optional symbol name.
func Has(name string) bool {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	return C.npu_acl_has(cname) != 0
}

// Error is a failed ACL call: the call, the aclError and the runtime's
// message for it.
type Error struct {
	Call string
	Code int
	Msg  string
}

func (e *Error) Error() string {
	if e.Code == SymbolMissing {
		return fmt.Sprintf("%s: not in this CANN's libraries", e.Call)
	}
	if e.Msg != "" {
		return fmt.Sprintf("%s: ACL error %d: %s", e.Call, e.Code, e.Msg)
	}
	return fmt.Sprintf("%s: ACL error %d", e.Call, e.Code)
}

// Code is the aclError of err (an *Error), 0 when err is nil and -1 when
// it is another error.
func Code(err error) int {
	if err == nil {
		return 0
	}
	if e, ok := err.(*Error); ok {
		return e.Code
	}
	return -1
}

// RecentErrMsg reads (and clears) the calling thread's last ACL error
// message.
func RecentErrMsg() string {
	var buf [2048]C.char
	C.npu_aclGetRecentErrMsg(&buf[0], C.size_t(len(buf)))
	return C.GoString(&buf[0])
}

// check turns rc into an *Error with the thread's message (call it right
// after the failed call, on the same thread).
func check(call string, rc C.int) error {
	if rc == Success {
		return nil
	}
	e := &Error{Call: call, Code: int(rc)}
	if rc != SymbolMissing {
		e.Msg = RecentErrMsg()
	}
	return e
}

// Init is aclInit(NULL); a repeated initialisation is not an error.
func Init() error {
	if rc := C.npu_aclInit(); rc != ErrRepeatInit {
		return check("aclInit", rc)
	}
	return nil
}

// Finalize is aclFinalize.
func Finalize() error { return check("aclFinalize", C.npu_aclFinalize()) }

// SetDevice binds device to the calling thread (its default context).
func SetDevice(device int) error {
	return check(fmt.Sprintf("aclrtSetDevice(%d)", device), C.npu_aclrtSetDevice(C.int32_t(device)))
}

// ResetDevice releases the calling process's resources on device.
func ResetDevice(device int) error {
	return check(fmt.Sprintf("aclrtResetDevice(%d)", device), C.npu_aclrtResetDevice(C.int32_t(device)))
}

// DeviceCount is aclrtGetDeviceCount.
func DeviceCount() (int, error) {
	var n C.uint32_t
	err := check("aclrtGetDeviceCount", C.npu_aclrtGetDeviceCount(&n))
	return int(n), err
}

// CreateContext creates a context on device and makes it current.
func CreateContext(device int) (uintptr, error) {
	var c C.uintptr_t
	err := check("aclrtCreateContext", C.npu_aclrtCreateContext(&c, C.int32_t(device)))
	return uintptr(c), err
}

// DestroyContext destroys a context made by CreateContext.
func DestroyContext(ctx uintptr) error {
	return check("aclrtDestroyContext", C.npu_aclrtDestroyContext(C.uintptr_t(ctx)))
}

// SetCurrentContext makes ctx the calling thread's context.
func SetCurrentContext(ctx uintptr) error {
	return check("aclrtSetCurrentContext", C.npu_aclrtSetCurrentContext(C.uintptr_t(ctx)))
}

// CurrentContext is the calling thread's context.
func CurrentContext() (uintptr, error) {
	var c C.uintptr_t
	err := check("aclrtGetCurrentContext", C.npu_aclrtGetCurrentContext(&c))
	return uintptr(c), err
}

// CreateStream creates a stream in the current context.
func CreateStream() (uintptr, error) {
	var s C.uintptr_t
	err := check("aclrtCreateStream", C.npu_aclrtCreateStream(&s))
	return uintptr(s), err
}

// DestroyStream destroys a stream (synchronise it first).
func DestroyStream(s uintptr) error {
	return check("aclrtDestroyStream", C.npu_aclrtDestroyStream(C.uintptr_t(s)))
}

// SynchronizeStream waits for all work on s.
func SynchronizeStream(s uintptr) error {
	return check("aclrtSynchronizeStream", C.npu_aclrtSynchronizeStream(C.uintptr_t(s)))
}

// SynchronizeStreamWithTimeout waits at most ms milliseconds (-1: for
// ever); a timeout is ErrStreamSyncTimed (or ErrWaitTimeout), a missing
// symbol SymbolMissing.
func SynchronizeStreamWithTimeout(s uintptr, ms int32) error {
	return check("aclrtSynchronizeStreamWithTimeout", C.npu_aclrtSynchronizeStreamWithTimeout(C.uintptr_t(s), C.int32_t(ms)))
}

// StreamAbort drops the work queued on s.
func StreamAbort(s uintptr) error {
	return check("aclrtStreamAbort", C.npu_aclrtStreamAbort(C.uintptr_t(s)))
}

// CreateEvent creates an event in the current context.
func CreateEvent() (uintptr, error) {
	var e C.uintptr_t
	err := check("aclrtCreateEvent", C.npu_aclrtCreateEvent(&e))
	return uintptr(e), err
}

// DestroyEvent destroys an event.
func DestroyEvent(e uintptr) error {
	return check("aclrtDestroyEvent", C.npu_aclrtDestroyEvent(C.uintptr_t(e)))
}

// RecordEvent enqueues e on s.
func RecordEvent(e, s uintptr) error {
	return check("aclrtRecordEvent", C.npu_aclrtRecordEvent(C.uintptr_t(e), C.uintptr_t(s)))
}

// SynchronizeEvent waits until e's recorded point is reached.
func SynchronizeEvent(e uintptr) error {
	return check("aclrtSynchronizeEvent", C.npu_aclrtSynchronizeEvent(C.uintptr_t(e)))
}

// StreamWaitEvent makes s wait for e.
func StreamWaitEvent(s, e uintptr) error {
	return check("aclrtStreamWaitEvent", C.npu_aclrtStreamWaitEvent(C.uintptr_t(s), C.uintptr_t(e)))
}

// Malloc allocates n bytes of device memory with ACL_MEM_MALLOC_HUGE_FIRST.
func Malloc(n int) (uintptr, error) {
	var p C.uintptr_t
	err := check(fmt.Sprintf("aclrtMalloc(%d)", n), C.npu_aclrtMalloc(&p, C.size_t(n), 0))
	return uintptr(p), err
}

// Free releases device memory from Malloc.
func Free(p uintptr) error { return check("aclrtFree", C.npu_aclrtFree(C.uintptr_t(p))) }

// MallocHost allocates n bytes of page-locked host memory.
func MallocHost(n int) (uintptr, error) {
	var p C.uintptr_t
	err := check(fmt.Sprintf("aclrtMallocHost(%d)", n), C.npu_aclrtMallocHost(&p, C.size_t(n)))
	return uintptr(p), err
}

// HostWrite copies src into MallocHost memory at p (len(src) bytes).
func HostWrite(p uintptr, src []byte) {
	if len(src) > 0 {
		C.npu_host_write(C.uintptr_t(p), unsafe.Pointer(&src[0]), C.size_t(len(src)))
	}
}

// FreeHost releases memory from MallocHost.
func FreeHost(p uintptr) error { return check("aclrtFreeHost", C.npu_aclrtFreeHost(C.uintptr_t(p))) }

// Memcpy copies count bytes synchronously (kind: HostToDevice, …).
// Host addresses are uintptr of memory the caller keeps alive and pinned
// (C memory, or a Go slice for the duration of the call).
func Memcpy(dst uintptr, dstMax int, src uintptr, count int, kind int) error {
	return check("aclrtMemcpy", C.npu_aclrtMemcpy(C.uintptr_t(dst), C.size_t(dstMax), C.uintptr_t(src), C.size_t(count), C.int(kind)))
}

// MemcpyToDevice copies src into device memory at dst.
func MemcpyToDevice(dst uintptr, dstMax int, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return check("aclrtMemcpy host to device", C.npu_aclrtMemcpy(C.uintptr_t(dst), C.size_t(dstMax), C.uintptr_t(uintptr(unsafe.Pointer(&src[0]))), C.size_t(len(src)), HostToDevice))
}

// MemcpyToHost copies device memory at src into dst.
func MemcpyToHost(dst []byte, src uintptr) error {
	if len(dst) == 0 {
		return nil
	}
	return check("aclrtMemcpy device to host", C.npu_aclrtMemcpy(C.uintptr_t(uintptr(unsafe.Pointer(&dst[0]))), C.size_t(len(dst)), C.uintptr_t(src), C.size_t(len(dst)), DeviceToHost))
}

// MemcpyAsync enqueues a copy on s; host memory must stay valid until s
// has passed it (use MallocHost memory).
func MemcpyAsync(dst uintptr, dstMax int, src uintptr, count int, kind int, s uintptr) error {
	return check("aclrtMemcpyAsync", C.npu_aclrtMemcpyAsync(C.uintptr_t(dst), C.size_t(dstMax), C.uintptr_t(src), C.size_t(count), C.int(kind), C.uintptr_t(s)))
}

// Memset fills count bytes at p with value, synchronously.
func Memset(p uintptr, max int, value byte, count int) error {
	return check("aclrtMemset", C.npu_aclrtMemset(C.uintptr_t(p), C.size_t(max), C.int32_t(value), C.size_t(count)))
}

// MemsetAsync enqueues the fill of count bytes at p on s.
func MemsetAsync(p uintptr, max int, value byte, count int, s uintptr) error {
	return check("aclrtMemsetAsync", C.npu_aclrtMemsetAsync(C.uintptr_t(p), C.size_t(max), C.int32_t(value), C.size_t(count), C.uintptr_t(s)))
}

// MemInfo is aclrtGetMemInfo(attr): free and total bytes of the current
// context's device.
func MemInfo(attr int) (free, total int64, err error) {
	var f, t C.size_t
	err = check("aclrtGetMemInfo", C.npu_aclrtGetMemInfo(C.int(attr), &f, &t))
	return int64(f), int64(t), err
}

// SocName is aclrtGetSocName ("" when unknown).
func SocName() string { return C.GoString(C.npu_aclrtGetSocName()) }

// VersionStr is aclsysGetVersionStr(pkg): the installed version of a
// CANN package ("runtime", "opbase", "ops_nn", "hccl", ... as torch_npu
// names them, ascend-api.md §1).
func VersionStr(pkg string) (string, error) {
	cp := C.CString(pkg)
	defer C.free(unsafe.Pointer(cp))
	var buf [512]C.char
	if err := check("aclsysGetVersionStr", C.npu_aclsysGetVersionStr(cp, &buf[0], C.size_t(len(buf)))); err != nil {
		return "", err
	}
	return C.GoString(&buf[0]), nil
}

// APIVersion is aclrtGetVersion: the ACL API version (not the CANN
// release).
func APIVersion() (major, minor, patch int, err error) {
	var a, b, c C.int32_t
	err = check("aclrtGetVersion", C.npu_aclrtGetVersion(&a, &b, &c))
	return int(a), int(b), int(c), err
}
