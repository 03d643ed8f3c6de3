//go:build cgo

// Loader and wrappers for the HCCL binding; see shim.h. Each foreign
// symbol is declared once, as a function pointer type, and resolved with
// dlsym at load time. Calling an optional symbol that this CANN lacks
// returns NPU_SHIM_SYMBOL_MISSING instead of crashing.
#include "shim.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

_Static_assert(sizeof(npu_hccl_root_info) == 4108, "HcclRootInfo is 4108 bytes");
#if UINTPTR_MAX == 0xffffffffffffffffu
_Static_assert(sizeof(npu_hccl_comm_config) == 2232, "HcclCommConfig v10 is 2232 bytes on LP64");
_Static_assert(offsetof(npu_hccl_comm_config, buffer_size_mb) == 24, "hcclBufferSize");
_Static_assert(offsetof(npu_hccl_comm_config, comm_name) == 32, "hcclCommName");
_Static_assert(offsetof(npu_hccl_comm_config, op_expansion_mode) == 288, "hcclOpExpansionMode");
_Static_assert(offsetof(npu_hccl_comm_config, job_id) == 304, "hcclJobID");
_Static_assert(offsetof(npu_hccl_comm_config, exec_timeout_s) == 316, "hcclExecTimeOut");
_Static_assert(offsetof(npu_hccl_comm_config, algo) == 320, "hcclAlgo");
_Static_assert(offsetof(npu_hccl_comm_config, buffer_name) == 2098, "hcclBufferName");
_Static_assert(offsetof(npu_hccl_comm_config, qos) == 2228, "hcclQos");
#endif

// The foreign API: name, return type, parameters. X(required, ret, name, params)
// The ACL runtime symbols are declared once, in npu/ascend/acl, which
// loads libascendcl.so (RTLD_GLOBAL) before npu_hccl_load runs.
#define NPU_API(X)                                                                                        \
	X(1, int, HcclGetRootInfo, (npu_hccl_root_info * info))                                            \
	X(1, int, HcclCommInitRootInfo, (uint32_t n, const npu_hccl_root_info *info, uint32_t rank, void **comm)) \
	X(0, int, HcclCommInitRootInfoConfig,                                                              \
	  (uint32_t n, const npu_hccl_root_info *info, uint32_t rank, const npu_hccl_comm_config *config,  \
	   void **comm))                                                                                   \
	X(0, uint32_t, HcclGetCommConfigCapability, (void))                                                \
	X(1, int, HcclCommDestroy, (void *comm))                                                           \
	X(0, int, HcclGetCommAsyncError, (void *comm, int *err))                                           \
	X(0, const char *, HcclGetErrorString, (int code))                                                 \
	X(1, int, HcclAllReduce,                                                                           \
	  (void *send, void *recv, uint64_t count, int dtype, int op, void *comm, void *stream))            \
	X(1, int, HcclBroadcast, (void *buf, uint64_t count, int dtype, uint32_t root, void *comm, void *stream)) \
	X(1, int, HcclReduceScatter,                                                                       \
	  (void *send, void *recv, uint64_t recv_count, int dtype, int op, void *comm, void *stream))       \
	X(1, int, HcclAllGather, (void *send, void *recv, uint64_t send_count, int dtype, void *comm, void *stream)) \
	X(1, int, HcclAlltoAll,                                                                            \
	  (const void *send, uint64_t send_count, int send_type, const void *recv, uint64_t recv_count,    \
	   int recv_type, void *comm, void *stream))                                                       \
	X(1, int, HcclAlltoAllV,                                                                           \
	  (const void *send, const void *send_counts, const void *sdispls, int send_type, const void *recv, \
	   const void *recv_counts, const void *rdispls, int recv_type, void *comm, void *stream))         \
	X(1, int, HcclBarrier, (void *comm, void *stream))                                                 \
	X(1, int, HcclSend, (void *buf, uint64_t count, int dtype, uint32_t peer, void *comm, void *stream)) \
	X(1, int, HcclRecv, (void *buf, uint64_t count, int dtype, uint32_t peer, void *comm, void *stream))

#define NPU_DECLARE(req, ret, name, params) static ret(*p_##name) params;
NPU_API(NPU_DECLARE)

static void *h_hccl, *h_hcomm;

// resolve looks a symbol up in the libraries, HCCL's comm-management split
// (libhcomm.so, CANN 9.x) included.
static void *resolve(const char *name) {
	void *handles[2] = {h_hccl, h_hcomm};
	for (int i = 0; i < 2; i++) {
		if (handles[i] != NULL) {
			void *p = dlsym(handles[i], name);
			if (p != NULL) {
				return p;
			}
		}
	}
	return NULL;
}

int npu_hccl_load(const char *hccl_path, const char *hcomm_path, char *err, size_t errlen) {
	h_hccl = dlopen(hccl_path, RTLD_NOW | RTLD_GLOBAL);
	if (h_hccl == NULL) {
		snprintf(err, errlen, "%s", dlerror());
		return -2;
	}
	if (hcomm_path != NULL) {
		h_hcomm = dlopen(hcomm_path, RTLD_NOW | RTLD_GLOBAL); // optional
	}
	err[0] = '\0';
#define NPU_RESOLVE(req, ret, name, params)                                                  \
	p_##name = (ret(*) params)resolve(#name);                                            \
	if (p_##name == NULL && req) {                                                       \
		size_t used = strlen(err);                                                   \
		snprintf(err + used, errlen - used, "%s%s", used ? ", " : "missing symbols: ", #name); \
	}
	NPU_API(NPU_RESOLVE)
	return err[0] ? -3 : 0;
}

int npu_hccl_has(const char *name) {
#define NPU_HAS(req, ret, sym, params)          \
	if (strcmp(name, #sym) == 0) {          \
		return p_##sym != NULL;         \
	}
	NPU_API(NPU_HAS)
	return 0;
}

// CALL returns NPU_SHIM_SYMBOL_MISSING when an optional symbol is absent.
#define CALL(name, ...) return p_##name == NULL ? NPU_SHIM_SYMBOL_MISSING : p_##name(__VA_ARGS__)
#define P(x) ((void *)(x))

int npu_HcclGetRootInfo(npu_hccl_root_info *info) { CALL(HcclGetRootInfo, info); }

int npu_HcclCommInitRootInfo(uint32_t nranks, const npu_hccl_root_info *info, uint32_t rank,
			     const npu_hccl_comm_config *config, uintptr_t *comm) {
	void *c = NULL;
	int ret;
	if (config != NULL && p_HcclCommInitRootInfoConfig != NULL) {
		ret = p_HcclCommInitRootInfoConfig(nranks, info, rank, config, &c);
	} else if (p_HcclCommInitRootInfo != NULL) {
		ret = p_HcclCommInitRootInfo(nranks, info, rank, &c);
	} else {
		ret = NPU_SHIM_SYMBOL_MISSING;
	}
	*comm = (uintptr_t)c;
	return ret;
}

int npu_HcclCommDestroy(uintptr_t comm) { CALL(HcclCommDestroy, P(comm)); }
int npu_HcclGetCommAsyncError(uintptr_t comm, int *async_error) { CALL(HcclGetCommAsyncError, P(comm), async_error); }

const char *npu_HcclGetErrorString(int code) {
	const char *s = p_HcclGetErrorString == NULL ? NULL : p_HcclGetErrorString(code);
	return s == NULL ? "" : s;
}

// Capability numbers (HcclGetCommConfigCapability): a field is supported
// when the returned value is greater than its number.
enum { CAP_BUFFER_SIZE = 0, CAP_DETERMINISTIC = 1, CAP_COMM_NAME = 2, CAP_EXEC_TIMEOUT = 8 };

void npu_hccl_config_init(npu_hccl_comm_config *c, uint32_t buffer_mb, int deterministic, const char *name,
			  int32_t exec_timeout_s) {
	memset(c, 0, sizeof(*c));
	c->size = sizeof(*c);
	c->magic = 0xf0f0f0f0u;
	c->version = 10;
	c->buffer_size_mb = 0xffffffffu; // not set: HCCL_BUFFSIZE or the default
	c->deterministic = 0xffffffffu;
	c->rdma_traffic_class = 0xffffffffu;
	c->rdma_service_level = 0xffffffffu;
	c->exec_timeout_s = -1;
	c->qos = 0xffffffffu;
	uint32_t cap = p_HcclGetCommConfigCapability == NULL ? 0 : p_HcclGetCommConfigCapability();
	if (buffer_mb > 0 && cap > CAP_BUFFER_SIZE) {
		c->buffer_size_mb = buffer_mb;
	}
	if (cap > CAP_DETERMINISTIC) {
		c->deterministic = deterministic ? 1 : 0;
	}
	if (name != NULL && cap > CAP_COMM_NAME) {
		snprintf(c->comm_name, sizeof(c->comm_name), "%s", name);
	}
	if (exec_timeout_s > 0 && cap > CAP_EXEC_TIMEOUT) {
		c->exec_timeout_s = exec_timeout_s;
	}
}

int npu_HcclAllReduce(uintptr_t send, uintptr_t recv, uint64_t count, int dtype, int op, uintptr_t comm,
		      uintptr_t stream) {
	CALL(HcclAllReduce, P(send), P(recv), count, dtype, op, P(comm), P(stream));
}
int npu_HcclBroadcast(uintptr_t buf, uint64_t count, int dtype, uint32_t root, uintptr_t comm, uintptr_t stream) {
	CALL(HcclBroadcast, P(buf), count, dtype, root, P(comm), P(stream));
}
int npu_HcclReduceScatter(uintptr_t send, uintptr_t recv, uint64_t recv_count, int dtype, int op, uintptr_t comm,
			  uintptr_t stream) {
	CALL(HcclReduceScatter, P(send), P(recv), recv_count, dtype, op, P(comm), P(stream));
}
int npu_HcclAllGather(uintptr_t send, uintptr_t recv, uint64_t send_count, int dtype, uintptr_t comm,
		      uintptr_t stream) {
	CALL(HcclAllGather, P(send), P(recv), send_count, dtype, P(comm), P(stream));
}
int npu_HcclAlltoAll(uintptr_t send, uint64_t send_count, uintptr_t recv, uint64_t recv_count, int dtype,
		     uintptr_t comm, uintptr_t stream) {
	CALL(HcclAlltoAll, P(send), send_count, dtype, P(recv), recv_count, dtype, P(comm), P(stream));
}
int npu_HcclAlltoAllV(uintptr_t send, uintptr_t recv, const uint64_t *counts, uint32_t n, int dtype,
		      uintptr_t comm, uintptr_t stream) {
	CALL(HcclAlltoAllV, P(send), counts, counts + n, dtype, P(recv), counts + 2 * n, counts + 3 * n, dtype,
	     P(comm), P(stream));
}
int npu_HcclBarrier(uintptr_t comm, uintptr_t stream) { CALL(HcclBarrier, P(comm), P(stream)); }
int npu_HcclSend(uintptr_t buf, uint64_t count, int dtype, uint32_t peer, uintptr_t comm, uintptr_t stream) {
	CALL(HcclSend, P(buf), count, dtype, peer, P(comm), P(stream));
}
int npu_HcclRecv(uintptr_t buf, uint64_t count, int dtype, uint32_t peer, uintptr_t comm, uintptr_t stream) {
	CALL(HcclRecv, P(buf), count, dtype, peer, P(comm), P(stream));
}
