//go:build cgo

package nccl

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import "unsafe"

// The Go side of the shim (shim.c): the only file of the package that
// calls C. Functions return NCCL's ncclResult_t as an int (0 is success;
// shimSymbolMissing and shimNotLoaded are the shim's own) and take
// communicators, device addresses and streams as uintptr.

// libLoad dlopens path and fills the symbol table; it returns 0, -1 (does
// not load) or -3 (symbols missing) and the message.
func libLoad(path string) (int, string) {
	p := C.CString(path)
	defer C.free(unsafe.Pointer(p))
	var buf [2048]C.char
	rc := C.npu_nccl_load(p, &buf[0], C.size_t(len(buf)))
	return int(rc), C.GoString(&buf[0])
}

// libSymbols lists the shim's symbol table.
func libSymbols() []symbolInfo {
	var out []symbolInfo
	for i := 0; ; i++ {
		var req, res C.int
		name := C.npu_nccl_symbol(C.int(i), &req, &res)
		if name == nil {
			return out
		}
		out = append(out, symbolInfo{Name: C.GoString(name), Required: req != 0, Resolved: res != 0})
	}
}

func libVersion() (int, int) {
	var v C.int
	rc := C.npu_ncclGetVersion(&v)
	return int(v), int(rc)
}

func libErrorString(rc int) string { return C.GoString(C.npu_ncclGetErrorString(C.int(rc))) }

func libLastError(comm uintptr) string {
	return C.GoString(C.npu_ncclGetLastError(C.uintptr_t(comm)))
}

func libUniqueID() ([uniqueIDBytes]byte, int) {
	var id C.npu_nccl_unique_id
	rc := C.npu_ncclGetUniqueId(&id)
	var out [uniqueIDBytes]byte
	copy(out[:], C.GoBytes(unsafe.Pointer(&id), C.NPU_NCCL_UNIQUE_ID_BYTES))
	return out, int(rc)
}

func libHasConfig() bool { return C.npu_nccl_has_config() != 0 }

func libInit(size int, id [uniqueIDBytes]byte, rank int, nonblocking bool) (uintptr, int) {
	var cid C.npu_nccl_unique_id
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&cid)), uniqueIDBytes), id[:])
	var comm C.uintptr_t
	nb := C.int(0)
	if nonblocking {
		nb = 1
	}
	rc := C.npu_nccl_init(&comm, C.int(size), &cid, C.int(rank), nb)
	return uintptr(comm), int(rc)
}

func libAsyncError(comm uintptr) int {
	var e C.int
	if rc := C.npu_ncclCommGetAsyncError(C.uintptr_t(comm), &e); rc != 0 {
		return int(rc)
	}
	return int(e)
}

func libFinalize(comm uintptr) int { return int(C.npu_ncclCommFinalize(C.uintptr_t(comm))) }
func libDestroy(comm uintptr) int  { return int(C.npu_ncclCommDestroy(C.uintptr_t(comm))) }
func libAbort(comm uintptr) int    { return int(C.npu_ncclCommAbort(C.uintptr_t(comm))) }

func libAllReduce(send, recv uintptr, count, dt, op int, comm, stream uintptr) int {
	return int(C.npu_ncclAllReduce(C.uintptr_t(send), C.uintptr_t(recv), C.size_t(count), C.int(dt), C.int(op), C.uintptr_t(comm), C.uintptr_t(stream)))
}

func libBroadcast(send, recv uintptr, count, dt, root int, comm, stream uintptr) int {
	return int(C.npu_ncclBroadcast(C.uintptr_t(send), C.uintptr_t(recv), C.size_t(count), C.int(dt), C.int(root), C.uintptr_t(comm), C.uintptr_t(stream)))
}

func libReduceScatter(send, recv uintptr, recvCount, dt, op int, comm, stream uintptr) int {
	return int(C.npu_ncclReduceScatter(C.uintptr_t(send), C.uintptr_t(recv), C.size_t(recvCount), C.int(dt), C.int(op), C.uintptr_t(comm), C.uintptr_t(stream)))
}

func libAllGather(send, recv uintptr, sendCount, dt int, comm, stream uintptr) int {
	return int(C.npu_ncclAllGather(C.uintptr_t(send), C.uintptr_t(recv), C.size_t(sendCount), C.int(dt), C.uintptr_t(comm), C.uintptr_t(stream)))
}

func libSend(buf uintptr, count, dt, peer int, comm, stream uintptr) int {
	return int(C.npu_ncclSend(C.uintptr_t(buf), C.size_t(count), C.int(dt), C.int(peer), C.uintptr_t(comm), C.uintptr_t(stream)))
}

func libRecv(buf uintptr, count, dt, peer int, comm, stream uintptr) int {
	return int(C.npu_ncclRecv(C.uintptr_t(buf), C.size_t(count), C.int(dt), C.int(peer), C.uintptr_t(comm), C.uintptr_t(stream)))
}

// libAllToAllV takes counts as shim.h's npu_nccl_alltoallv: 4*n byte
// values (send counts, send displacements, receive counts, receive
// displacements).
func libAllToAllV(send, recv uintptr, counts []int, comm, stream uintptr) int {
	n := len(counts) / 4
	cs := make([]C.size_t, len(counts))
	for i, v := range counts {
		cs[i] = C.size_t(v)
	}
	return int(C.npu_nccl_alltoallv(C.uintptr_t(send), C.uintptr_t(recv), &cs[0], C.int(n), C.uintptr_t(comm), C.uintptr_t(stream)))
}

// libConstants are shim.h's values, for TestShimConstants.
func libConstants() map[string][2]int {
	return map[string][2]int{
		"unique id bytes": {C.NPU_NCCL_UNIQUE_ID_BYTES, uniqueIDBytes},
		"success":         {C.NPU_NCCL_SUCCESS, ncclSuccess},
		"in progress":     {C.NPU_NCCL_IN_PROGRESS, ncclInProgress},
		"symbol missing":  {C.NPU_SHIM_SYMBOL_MISSING, shimSymbolMissing},
		"not loaded":      {C.NPU_SHIM_NOT_LOADED, shimNotLoaded},
		"int8":            {C.NPU_NCCL_INT8, ncclInt8},
		"uint8":           {C.NPU_NCCL_UINT8, ncclUint8},
		"int32":           {C.NPU_NCCL_INT32, ncclInt32},
		"int64":           {C.NPU_NCCL_INT64, ncclInt64},
		"float16":         {C.NPU_NCCL_FLOAT16, ncclFloat16},
		"float32":         {C.NPU_NCCL_FLOAT32, ncclFloat32},
		"bfloat16":        {C.NPU_NCCL_BFLOAT16, ncclBfloat16},
	}
}
