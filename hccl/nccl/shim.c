//go:build cgo

// Loader and wrappers for the NCCL binding; see shim.h. Each foreign symbol
// is declared once, as a function pointer type, and resolved with dlsym at
// load time. Calling an optional symbol that this NCCL lacks returns
// NPU_SHIM_SYMBOL_MISSING instead of crashing.
#include "shim.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

_Static_assert(sizeof(npu_nccl_unique_id) == 128, "ncclUniqueId is 128 bytes");

// ncclConfig_t as NCCL 2.17 declared it (ncclConfig_v21700). Later NCCLs
// read the leading size bytes of the struct we pass and give the fields
// of later versions their defaults, so this older layout is accepted by
// every release since (init.cc parseCommConfig).
typedef struct {
	size_t size;
	unsigned int magic;
	unsigned int version;
	int blocking;
	int cga_cluster_size;
	int min_ctas;
	int max_ctas;
	const char *net_name;
	int split_share;
} npu_nccl_config;

#if UINTPTR_MAX == 0xffffffffffffffffu
_Static_assert(sizeof(npu_nccl_config) == 48, "ncclConfig_v21700 is 48 bytes on LP64");
_Static_assert(offsetof(npu_nccl_config, blocking) == 16, "blocking");
_Static_assert(offsetof(npu_nccl_config, net_name) == 32, "netName");
#endif

#define NPU_NCCL_API_MAGIC 0xcafebeefu
#define NPU_NCCL_CONFIG_VERSION 21700 // NCCL_VERSION(2, 17, 0)
#define NPU_NCCL_UNDEF_INT INT_MIN

typedef void *ncclComm_t;
typedef void *cudaStream_t;

// The foreign API: X(required, ret, name, params).
#define NPU_API(X)                                                                                             \
	X(1, int, ncclGetVersion, (int *version))                                                               \
	X(1, const char *, ncclGetErrorString, (int rc))                                                        \
	X(0, const char *, ncclGetLastError, (ncclComm_t comm))                                                 \
	X(1, int, ncclGetUniqueId, (npu_nccl_unique_id * id))                                                   \
	X(1, int, ncclCommInitRank, (ncclComm_t * comm, int nranks, npu_nccl_unique_id id, int rank))           \
	X(0, int, ncclCommInitRankConfig,                                                                       \
	  (ncclComm_t * comm, int nranks, npu_nccl_unique_id id, int rank, npu_nccl_config *config))            \
	X(1, int, ncclCommGetAsyncError, (ncclComm_t comm, int *async_error))                                   \
	X(0, int, ncclCommFinalize, (ncclComm_t comm))                                                          \
	X(1, int, ncclCommDestroy, (ncclComm_t comm))                                                           \
	X(1, int, ncclCommAbort, (ncclComm_t comm))                                                             \
	X(1, int, ncclAllReduce,                                                                                \
	  (const void *send, void *recv, size_t count, int dtype, int op, ncclComm_t comm, cudaStream_t stream)) \
	X(1, int, ncclBroadcast,                                                                                \
	  (const void *send, void *recv, size_t count, int dtype, int root, ncclComm_t comm, cudaStream_t stream)) \
	X(1, int, ncclReduceScatter,                                                                            \
	  (const void *send, void *recv, size_t recv_count, int dtype, int op, ncclComm_t comm,                 \
	   cudaStream_t stream))                                                                                \
	X(1, int, ncclAllGather,                                                                                \
	  (const void *send, void *recv, size_t send_count, int dtype, ncclComm_t comm, cudaStream_t stream))   \
	X(1, int, ncclSend, (const void *buf, size_t count, int dtype, int peer, ncclComm_t comm, cudaStream_t stream)) \
	X(1, int, ncclRecv, (void *buf, size_t count, int dtype, int peer, ncclComm_t comm, cudaStream_t stream)) \
	X(1, int, ncclGroupStart, (void))                                                                       \
	X(1, int, ncclGroupEnd, (void))

#define NPU_DECLARE(req, ret, name, params) static ret(*p_##name) params;
NPU_API(NPU_DECLARE)

static const struct {
	const char *name;
	int required;
	void **slot;
} symbols[] = {
#define NPU_ENTRY(req, ret, name, params) {#name, req, (void **)&p_##name},
    NPU_API(NPU_ENTRY)};

#define NSYMBOLS ((int)(sizeof(symbols) / sizeof(symbols[0])))

static void *handle;

const char *npu_nccl_symbol(int i, int *required, int *resolved) {
	if (i < 0 || i >= NSYMBOLS) {
		return NULL;
	}
	*required = symbols[i].required;
	*resolved = *symbols[i].slot != NULL;
	return symbols[i].name;
}

int npu_nccl_load(const char *path, char *err, size_t errlen) {
	if (handle != NULL) {
		return 0;
	}
	err[0] = '\0';
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return -1;
	}
	for (int i = 0; i < NSYMBOLS; i++) {
		*symbols[i].slot = dlsym(h, symbols[i].name);
		if (*symbols[i].slot == NULL && symbols[i].required) {
			size_t used = strlen(err);
			snprintf(err + used, errlen - used, "%s%s", used ? ", " : "missing symbols: ", symbols[i].name);
		}
	}
	if (err[0] != '\0') {
		for (int i = 0; i < NSYMBOLS; i++) {
			*symbols[i].slot = NULL;
		}
		dlclose(h);
		return -3;
	}
	handle = h;
	return 0;
}

// CALL returns NPU_SHIM_SYMBOL_MISSING when a symbol is absent (optional,
// or the library never loaded).
#define CALL(name, ...) return p_##name == NULL ? NPU_SHIM_SYMBOL_MISSING : p_##name(__VA_ARGS__)
#define P(x) ((void *)(x))

int npu_ncclGetVersion(int *version) { CALL(ncclGetVersion, version); }

const char *npu_ncclGetErrorString(int rc) {
	if (p_ncclGetErrorString == NULL) {
		return "";
	}
	const char *s = p_ncclGetErrorString(rc);
	return s ? s : "";
}

const char *npu_ncclGetLastError(uintptr_t comm) {
	if (p_ncclGetLastError == NULL) {
		return "";
	}
	const char *s = p_ncclGetLastError(P(comm));
	return s ? s : "";
}

int npu_ncclGetUniqueId(npu_nccl_unique_id *id) { CALL(ncclGetUniqueId, id); }

int npu_nccl_has_config(void) { return p_ncclCommInitRankConfig != NULL; }

int npu_nccl_init(uintptr_t *comm, int nranks, const npu_nccl_unique_id *id, int rank, int nonblocking) {
	ncclComm_t c = NULL;
	int rc;
	if (nonblocking) {
		if (p_ncclCommInitRankConfig == NULL) {
			return NPU_SHIM_SYMBOL_MISSING;
		}
		npu_nccl_config cfg = {sizeof(npu_nccl_config), NPU_NCCL_API_MAGIC, NPU_NCCL_CONFIG_VERSION, 0,
				       NPU_NCCL_UNDEF_INT, NPU_NCCL_UNDEF_INT, NPU_NCCL_UNDEF_INT, NULL, NPU_NCCL_UNDEF_INT};
		rc = p_ncclCommInitRankConfig(&c, nranks, *id, rank, &cfg);
	} else {
		if (p_ncclCommInitRank == NULL) {
			return NPU_SHIM_NOT_LOADED;
		}
		rc = p_ncclCommInitRank(&c, nranks, *id, rank);
	}
	*comm = (uintptr_t)c;
	return rc;
}

int npu_ncclCommGetAsyncError(uintptr_t comm, int *async_error) { CALL(ncclCommGetAsyncError, P(comm), async_error); }
int npu_ncclCommFinalize(uintptr_t comm) { CALL(ncclCommFinalize, P(comm)); }
int npu_ncclCommDestroy(uintptr_t comm) { CALL(ncclCommDestroy, P(comm)); }
int npu_ncclCommAbort(uintptr_t comm) { CALL(ncclCommAbort, P(comm)); }

int npu_ncclAllReduce(uintptr_t send, uintptr_t recv, size_t count, int dtype, int op, uintptr_t comm,
		      uintptr_t stream) {
	CALL(ncclAllReduce, P(send), P(recv), count, dtype, op, P(comm), P(stream));
}

int npu_ncclBroadcast(uintptr_t send, uintptr_t recv, size_t count, int dtype, int root, uintptr_t comm,
		      uintptr_t stream) {
	CALL(ncclBroadcast, P(send), P(recv), count, dtype, root, P(comm), P(stream));
}

int npu_ncclReduceScatter(uintptr_t send, uintptr_t recv, size_t recv_count, int dtype, int op, uintptr_t comm,
			  uintptr_t stream) {
	CALL(ncclReduceScatter, P(send), P(recv), recv_count, dtype, op, P(comm), P(stream));
}

int npu_ncclAllGather(uintptr_t send, uintptr_t recv, size_t send_count, int dtype, uintptr_t comm,
		      uintptr_t stream) {
	CALL(ncclAllGather, P(send), P(recv), send_count, dtype, P(comm), P(stream));
}

int npu_ncclSend(uintptr_t buf, size_t count, int dtype, int peer, uintptr_t comm, uintptr_t stream) {
	CALL(ncclSend, P(buf), count, dtype, peer, P(comm), P(stream));
}

int npu_ncclRecv(uintptr_t buf, size_t count, int dtype, int peer, uintptr_t comm, uintptr_t stream) {
	CALL(ncclRecv, P(buf), count, dtype, peer, P(comm), P(stream));
}

int npu_nccl_alltoallv(uintptr_t send, uintptr_t recv, const size_t *counts, int n, uintptr_t comm,
		       uintptr_t stream) {
	if (p_ncclGroupStart == NULL || p_ncclGroupEnd == NULL || p_ncclSend == NULL || p_ncclRecv == NULL) {
		return NPU_SHIM_NOT_LOADED;
	}
	int rc = p_ncclGroupStart();
	if (rc != NPU_NCCL_SUCCESS) {
		return rc;
	}
	int first = NPU_NCCL_SUCCESS;
	for (int j = 0; j < n && first == NPU_NCCL_SUCCESS; j++) {
		if (counts[j] > 0) {
			first = p_ncclSend(P(send + counts[n + j]), counts[j], NPU_NCCL_UINT8, j, P(comm), P(stream));
		}
		if (first == NPU_NCCL_SUCCESS && counts[2 * n + j] > 0) {
			first = p_ncclRecv(P(recv + counts[3 * n + j]), counts[2 * n + j], NPU_NCCL_UINT8, j, P(comm),
					   P(stream));
		}
	}
	rc = p_ncclGroupEnd();
	return first != NPU_NCCL_SUCCESS ? first : rc;
}
