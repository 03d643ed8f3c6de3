// Package acl is the one binding of CANN's ACL runtime (libascendcl.so):
// init, devices, contexts, streams, events, device memory and the
// runtime's error messages. The Ascend backend (npu/ascend) and the HCCL
// transport (hccl/ascend) both call the runtime through it, so each
// foreign symbol is declared once (shim.c) and the library is loaded once
// per process, RTLD_GLOBAL, before the libraries that depend on it
// (libnnopbase, libopapi, libhccl).
//
// The functions are thin: they call the symbol on the calling OS thread
// and turn a non-zero aclError into an *Error carrying the runtime's
// message (aclGetRecentErrMsg, which is per thread). ACL contexts are
// bound to threads (ascend-api.md §8.1), so callers run them from a
// goroutine locked to its OS thread that holds the device's context.
//
// Without cgo the package has only SearchDirs, FindLib and Load, which
// fails saying so.
package acl
