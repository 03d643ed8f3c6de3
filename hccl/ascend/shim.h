// C side of the HCCL binding: our own declarations of the few CANN types we
// use (written from the public API documentation; no CANN header is needed
// to build), a table of function pointers filled by dlsym, and thin
// wrappers that Go calls. Device addresses, streams and communicators cross
// into Go as uintptr_t only.
#ifndef NPUSERVE_HCCL_SHIM_H
#define NPUSERVE_HCCL_SHIM_H

#include <stddef.h>
#include <stdint.h>

// HcclRootInfo: an opaque 4108-byte blob (HCCL_ROOT_INFO_BYTES).
#define NPU_HCCL_ROOT_INFO_BYTES 4108
typedef struct {
	char internal[NPU_HCCL_ROOT_INFO_BYTES];
} npu_hccl_root_info;

// HcclCommConfig, version 10 (hccl_types.h HcclCommConfigDef; 2232 bytes on
// LP64). The leading 24 bytes carry {size, magic, version, reserved} so
// that HCCL releases with other layouts accept it; fields are only set when
// HcclGetCommConfigCapability says the library knows them.
typedef struct {
	size_t size;
	uint32_t magic;
	uint32_t version;
	uint64_t reserved;
	uint32_t buffer_size_mb;     // hcclBufferSize
	uint32_t deterministic;      // hcclDeterministic
	char comm_name[128];         // hcclCommName
	char udi[128];               // hcclUdi
	uint32_t op_expansion_mode;  // hcclOpExpansionMode
	uint32_t rdma_traffic_class; // hcclRdmaTrafficClass
	uint32_t rdma_service_level; // hcclRdmaServiceLevel
	uint32_t world_rank_id;      // hcclWorldRankID
	uint64_t job_id;             // hcclJobID
	uint8_t acl_graph_zero_copy; // aclGraphZeroCopyEnable
	int32_t exec_timeout_s;      // hcclExecTimeOut
	char algo[1600];             // hcclAlgo
	char retry_enable[50];       // hcclRetryEnable
	char retry_params[128];      // hcclRetryParams
	char buffer_name[128];       // hcclBufferName
	uint32_t qos;                // hcclQos
} npu_hccl_comm_config;

#define NPU_SHIM_SYMBOL_MISSING -99998 // an optional symbol this CANN lacks

// npu_hccl_load dlopens libhccl and libhcomm (hcomm may be NULL; the ACL
// runtime is loaded first by npu/ascend/acl) and fills the function table.
// It returns 0, or with a message in err: -2 when libhccl does not load,
// -3 when required symbols are missing.
int npu_hccl_load(const char *hccl_path, const char *hcomm_path, char *err, size_t errlen);

// npu_hccl_has reports whether an optional symbol was found.
int npu_hccl_has(const char *name);

// HCCL.
int npu_HcclGetRootInfo(npu_hccl_root_info *info);
int npu_HcclCommInitRootInfo(uint32_t nranks, const npu_hccl_root_info *info, uint32_t rank,
			     const npu_hccl_comm_config *config, uintptr_t *comm);
int npu_HcclCommDestroy(uintptr_t comm);
int npu_HcclGetCommAsyncError(uintptr_t comm, int *async_error);
const char *npu_HcclGetErrorString(int code);
// npu_hccl_config_init fills config like HcclCommConfigInit and sets the
// fields the library supports: buffer size (MB, 0 = unset),
// deterministic reductions, name and execution timeout (s, 0 = unset).
void npu_hccl_config_init(npu_hccl_comm_config *config, uint32_t buffer_mb, int deterministic,
			  const char *name, int32_t exec_timeout_s);

int npu_HcclAllReduce(uintptr_t send, uintptr_t recv, uint64_t count, int dtype, int op, uintptr_t comm,
		      uintptr_t stream);
int npu_HcclBroadcast(uintptr_t buf, uint64_t count, int dtype, uint32_t root, uintptr_t comm, uintptr_t stream);
int npu_HcclReduceScatter(uintptr_t send, uintptr_t recv, uint64_t recv_count, int dtype, int op, uintptr_t comm,
			  uintptr_t stream);
int npu_HcclAllGather(uintptr_t send, uintptr_t recv, uint64_t send_count, int dtype, uintptr_t comm,
		      uintptr_t stream);
int npu_HcclAlltoAll(uintptr_t send, uint64_t send_count, uintptr_t recv, uint64_t recv_count, int dtype,
		     uintptr_t comm, uintptr_t stream);
// counts: 4*n host uint64 values: send counts, send displacements, receive
// counts, receive displacements (elements).
int npu_HcclAlltoAllV(uintptr_t send, uintptr_t recv, const uint64_t *counts, uint32_t n, int dtype,
		      uintptr_t comm, uintptr_t stream);
int npu_HcclBarrier(uintptr_t comm, uintptr_t stream);
int npu_HcclSend(uintptr_t buf, uint64_t count, int dtype, uint32_t peer, uintptr_t comm, uintptr_t stream);
int npu_HcclRecv(uintptr_t buf, uint64_t count, int dtype, uint32_t peer, uintptr_t comm, uintptr_t stream);

#endif
