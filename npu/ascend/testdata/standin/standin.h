// STAND-IN CANN: a test double, not Huawei's CANN. It implements the public
// ACL runtime / aclnn contract (as documented in ascend-api.md and the CANN
// API references it cites) on host memory, strictly: every call outside
// the documented contract fails with an ACL error code, sets the calling
// thread's aclGetRecentErrMsg to "stand-in: rule <name>: ...", and records
// the rule in standinLastViolation(). Built by npu/ascend's tests only.
#ifndef STANDIN_H
#define STANDIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STANDIN_MAX_DIMS 8

// aclDataType / aclFormat values (acl_base.h).
enum { DT_FLOAT = 0, DT_FLOAT16 = 1, DT_INT8 = 2, DT_INT32 = 3, DT_UINT8 = 4, DT_INT64 = 9, DT_BOOL = 12, DT_BF16 = 27 };
enum { FMT_NCHW = 0, FMT_ND = 2, FMT_FRACTAL_NZ = 29, FMT_NCDHW = 30, FMT_NCL = 47 };

// Error codes (acl_base.h, rt_error_codes.h, op_errno.h).
#define ACL_ERROR_INVALID_PARAM 100000
#define ACL_ERROR_UNINITIALIZE 100001
#define ACL_ERROR_REPEAT_INITIALIZE 100002
#define ACL_ERROR_RT_PARAM_INVALID 107000
#define ACL_ERROR_RT_INVALID_DEVICEID 107001
#define ACL_ERROR_RT_CONTEXT_NULL 107002
#define ACL_ERROR_RT_MEMORY_ALLOCATION 207001
#define ACL_ERROR_RT_STREAM_SYNC_TIMEOUT 507046
#define ACL_ERROR_RT_AICORE_EXCEPTION 507015
#define ACLNN_ERR_PARAM_NULLPTR 161001
#define ACLNN_ERR_PARAM_INVALID 161002
#define ACLNN_ERR_RUNTIME_ERROR 361001

typedef struct aclTensor {
	uint32_t magic;
	uint64_t ndim;
	int64_t dims[STANDIN_MAX_DIMS];
	int64_t strides[STANDIN_MAX_DIMS];
	int64_t offset;
	int dtype, format;
	uint64_t nstorage;
	int64_t storage[STANDIN_MAX_DIMS];
	void *data;
} aclTensor;

typedef struct aclScalar {
	uint32_t magic;
	int dtype;
	double v;
} aclScalar;

typedef struct aclIntArray {
	uint32_t magic;
	uint64_t n;
	int64_t v[STANDIN_MAX_DIMS];
} aclIntArray;

// A tensor list owns its tensors: aclDestroyTensorList destroys them too
// (OPBASE acl_op_api.cpp L157-172, ascend-api.md §0.1 item 4).
#define STANDIN_MAX_LIST 1024
typedef struct aclTensorList {
	uint32_t magic;
	uint64_t n;
	aclTensor **v;
} aclTensorList;

// An executor holds what phase 1 computed (a copy of the tensors: the
// caller may destroy its descriptors right after phase 2 is enqueued).
typedef struct aclOpExecutor {
	uint32_t magic;
	char op[64];
	uint64_t workspace;
	int used, repeatable;
	void *ctx;
	void (*run)(void *args, void *workspace);
	void *args;
} aclOpExecutor;

#define STANDIN_EXPORT __attribute__((visibility("default")))

// libascendcl exports these for the other two stand-in libraries.
// standin_violation records rule (a short name) and returns code.
STANDIN_EXPORT int standin_violation(int code, const char *rule, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
STANDIN_EXPORT const char *standinLastViolation(void);
STANDIN_EXPORT void standinClearViolation(void);
STANDIN_EXPORT void *standin_current_ctx(void);
// standin_stream_ok: stream is live and belongs to the current context.
STANDIN_EXPORT int standin_stream_ok(void *stream, const char *who);
// standin_enqueue runs fn(arg) on the stream's thread, in order; done(arg)
// runs after it (to free arg); a non-zero return of fn fails the stream.
STANDIN_EXPORT int standin_enqueue(void *stream, int (*fn)(void *), void *arg, void (*done)(void *));
// standin_dev_range: [p, p+n) lies in one live device allocation.
STANDIN_EXPORT int standin_dev_range(const void *p, size_t n);
// standin_stream_fail records an execution failure of the running task.
STANDIN_EXPORT void standin_stream_fail(const char *rule, const char *msg);
// standin_stream_aborts counts the stream's aclrtStreamAbort calls (a
// long-running task polls it to stop when its stream is aborted).
STANDIN_EXPORT uint64_t standin_stream_aborts(void *stream);
// standin_set_error sets the calling thread's aclGetRecentErrMsg (a
// failure that is not a contract violation: a timeout, a lost peer).
STANDIN_EXPORT void standin_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif

// libnnopbase exports these for libopapi.
#define TENSOR_MAGIC 0x7e7e7e7eu
#define SCALAR_MAGIC 0x5c5c5c5cu
#define INTARRAY_MAGIC 0x1a1a1a1au
#define EXEC_MAGIC 0xececececu
#define TENSORLIST_MAGIC 0x71717171u
STANDIN_EXPORT int standin_dtype_size(int dt);
// standin_executor_new makes the executor of phase 1 (args: malloc'd,
// owned by the executor, freed with it).
STANDIN_EXPORT aclOpExecutor *standin_executor_new(const char *op, uint64_t workspace, void (*run)(void *, void *), void *args);
// standin_phase2 validates and enqueues phase 2 of op.
STANDIN_EXPORT int standin_phase2(const char *op, void *workspace, uint64_t size, aclOpExecutor *e, void *stream);
