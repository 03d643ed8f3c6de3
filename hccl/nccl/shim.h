// C side of the NCCL binding: our own declarations of the few NCCL types we
// use (written from nccl.h's public API; no NCCL or CUDA header is needed to
// build), a table of function pointers filled by dlsym, and thin wrappers
// that Go calls. Communicators, device addresses and CUDA streams cross
// into Go as uintptr_t only.
#ifndef NPUSERVE_NCCL_SHIM_H
#define NPUSERVE_NCCL_SHIM_H

#include <stddef.h>
#include <stdint.h>

// ncclUniqueId: an opaque 128-byte blob (NCCL_UNIQUE_ID_BYTES).
#define NPU_NCCL_UNIQUE_ID_BYTES 128
typedef struct {
	char internal[NPU_NCCL_UNIQUE_ID_BYTES];
} npu_nccl_unique_id;

// ncclResult_t values we act on.
#define NPU_NCCL_SUCCESS 0
#define NPU_NCCL_IN_PROGRESS 7

// Codes of our own, outside NCCL's range.
#define NPU_SHIM_SYMBOL_MISSING -99998 // an optional symbol this NCCL lacks
#define NPU_SHIM_NOT_LOADED -99997     // the library was never loaded

// ncclDataType_t values.
#define NPU_NCCL_INT8 0
#define NPU_NCCL_UINT8 1
#define NPU_NCCL_INT32 2
#define NPU_NCCL_INT64 4
#define NPU_NCCL_FLOAT16 6
#define NPU_NCCL_FLOAT32 7
#define NPU_NCCL_BFLOAT16 9

// npu_nccl_load dlopens path and fills the function table. It returns 0,
// or with a message in err: -1 when the library does not load (dlerror),
// -3 when required symbols are missing (their names). On failure the
// table is left empty and the library closed, so a later call may try
// another path.
int npu_nccl_load(const char *path, char *err, size_t errlen);

// The symbol table, for tests and diagnostics: entry i's name, whether it
// is required and whether it was resolved; NULL past the end.
const char *npu_nccl_symbol(int i, int *required, int *resolved);

int npu_ncclGetVersion(int *version);
const char *npu_ncclGetErrorString(int rc);
// npu_ncclGetLastError is the last error message NCCL recorded for comm
// (0 for the process), "" when this NCCL cannot say.
const char *npu_ncclGetLastError(uintptr_t comm);
int npu_ncclGetUniqueId(npu_nccl_unique_id *id);
// npu_nccl_has_config reports whether ncclCommInitRankConfig resolved.
int npu_nccl_has_config(void);
// npu_nccl_init joins the communicator: with ncclCommInitRankConfig and
// blocking = 0 when nonblocking (the call returns ncclInProgress and
// ncclCommGetAsyncError says when it is done), else ncclCommInitRank.
int npu_nccl_init(uintptr_t *comm, int nranks, const npu_nccl_unique_id *id, int rank, int nonblocking);
int npu_ncclCommGetAsyncError(uintptr_t comm, int *async_error);
int npu_ncclCommFinalize(uintptr_t comm);
int npu_ncclCommDestroy(uintptr_t comm);
int npu_ncclCommAbort(uintptr_t comm);

int npu_ncclAllReduce(uintptr_t send, uintptr_t recv, size_t count, int dtype, int op, uintptr_t comm,
		      uintptr_t stream);
int npu_ncclBroadcast(uintptr_t send, uintptr_t recv, size_t count, int dtype, int root, uintptr_t comm,
		      uintptr_t stream);
int npu_ncclReduceScatter(uintptr_t send, uintptr_t recv, size_t recv_count, int dtype, int op, uintptr_t comm,
			  uintptr_t stream);
int npu_ncclAllGather(uintptr_t send, uintptr_t recv, size_t send_count, int dtype, uintptr_t comm,
		      uintptr_t stream);
int npu_ncclSend(uintptr_t buf, size_t count, int dtype, int peer, uintptr_t comm, uintptr_t stream);
int npu_ncclRecv(uintptr_t buf, size_t count, int dtype, int peer, uintptr_t comm, uintptr_t stream);
// npu_nccl_alltoallv runs, in one ncclGroupStart/End, an ncclSend of
// counts[j] bytes from send+counts[n+j] and an ncclRecv of counts[2n+j]
// bytes into recv+counts[3n+j] for every peer j with a nonzero count
// (host arrays: send counts, send displacements, receive counts, receive
// displacements, n each, in bytes). It returns ncclGroupEnd's result, or
// the first failing call's (the group is still ended).
int npu_nccl_alltoallv(uintptr_t send, uintptr_t recv, const size_t *counts, int n, uintptr_t comm,
		       uintptr_t stream);

#endif
