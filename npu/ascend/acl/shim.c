//go:build cgo

// Loader and wrappers for the ACL runtime; see shim.h. Each foreign symbol
// is declared once, here, as a function pointer type and resolved with
// dlsym at load time. Calling an optional symbol that this CANN lacks
// returns NPU_ACL_SYMBOL_MISSING instead of crashing.
#include "shim.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

// X(required, ret, name, params); signatures from ascend-api.md §2.
#define NPU_ACL_API(X)                                                                                   \
	X(1, int, aclInit, (const char *config))                                                          \
	X(0, int, aclFinalize, (void))                                                                    \
	X(1, int, aclrtSetDevice, (int32_t device))                                                       \
	X(0, int, aclrtResetDevice, (int32_t device))                                                     \
	X(0, int, aclrtGetDeviceCount, (uint32_t * count))                                                \
	X(0, int, aclrtCreateContext, (void **ctx, int32_t device))                                       \
	X(0, int, aclrtDestroyContext, (void *ctx))                                                       \
	X(0, int, aclrtSetCurrentContext, (void *ctx))                                                    \
	X(0, int, aclrtGetCurrentContext, (void **ctx))                                                   \
	X(1, int, aclrtCreateStream, (void **stream))                                                     \
	X(1, int, aclrtDestroyStream, (void *stream))                                                     \
	X(1, int, aclrtSynchronizeStream, (void *stream))                                                 \
	X(0, int, aclrtSynchronizeStreamWithTimeout, (void *stream, int32_t timeout))                     \
	X(0, int, aclrtStreamAbort, (void *stream))                                                       \
	X(0, int, aclrtCreateEvent, (void **event))                                                       \
	X(0, int, aclrtDestroyEvent, (void *event))                                                       \
	X(0, int, aclrtRecordEvent, (void *event, void *stream))                                          \
	X(0, int, aclrtSynchronizeEvent, (void *event))                                                   \
	X(0, int, aclrtStreamWaitEvent, (void *stream, void *event))                                      \
	X(1, int, aclrtMalloc, (void **ptr, size_t size, int policy))                                     \
	X(1, int, aclrtFree, (void *ptr))                                                                 \
	X(0, int, aclrtMallocHost, (void **ptr, size_t size))                                             \
	X(0, int, aclrtFreeHost, (void *ptr))                                                             \
	X(1, int, aclrtMemcpy, (void *dst, size_t dst_max, const void *src, size_t count, int kind))      \
	X(0, int, aclrtMemcpyAsync,                                                                       \
	  (void *dst, size_t dst_max, const void *src, size_t count, int kind, void *stream))             \
	X(0, int, aclrtMemset, (void *ptr, size_t max, int32_t value, size_t count))                      \
	X(0, int, aclrtMemsetAsync, (void *ptr, size_t max, int32_t value, size_t count, void *stream))   \
	X(0, int, aclrtGetMemInfo, (int attr, size_t *free_bytes, size_t *total_bytes))                   \
	X(0, const char *, aclrtGetSocName, (void))                                                       \
	X(0, int, aclsysGetVersionStr, (char *pkg_name, char *version))                                   \
	X(0, int, aclrtGetVersion, (int32_t * major, int32_t * minor, int32_t * patch))                   \
	X(0, const char *, aclGetRecentErrMsg, (void))                                                    \
	X(0, int, aclmdlRICaptureBegin, (void *stream, int mode))                                         \
	X(0, int, aclmdlRICaptureGetInfo, (void *stream, int *status, void **model))                      \
	X(0, int, aclmdlRICaptureEnd, (void *stream, void **model))                                       \
	X(0, int, aclmdlRIExecuteAsync, (void *model, void *stream))                                      \
	X(0, int, aclmdlRIDestroy, (void *model))

#define NPU_DECLARE(req, ret, name, params) static ret(*p_##name) params;
NPU_ACL_API(NPU_DECLARE)

static void *h_acl;

int npu_acl_load(const char *path, char *err, size_t errlen) {
	h_acl = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
	if (h_acl == NULL) {
		snprintf(err, errlen, "%s", dlerror());
		return -1;
	}
	err[0] = '\0';
#define NPU_RESOLVE(req, ret, name, params)                                                          \
	p_##name = (ret(*) params)dlsym(h_acl, #name);                                               \
	if (p_##name == NULL && req) {                                                               \
		size_t used = strlen(err);                                                           \
		snprintf(err + used, errlen - used, "%s%s", used ? ", " : "missing symbols: ", #name); \
	}
	NPU_ACL_API(NPU_RESOLVE)
	return err[0] ? -3 : 0;
}

int npu_acl_has(const char *name) {
#define NPU_HAS(req, ret, sym, params)  \
	if (strcmp(name, #sym) == 0) {  \
		return p_##sym != NULL; \
	}
	NPU_ACL_API(NPU_HAS)
	return 0;
}

#define CALL(name, ...) return p_##name == NULL ? NPU_ACL_SYMBOL_MISSING : p_##name(__VA_ARGS__)
#define P(x) ((void *)(x))
// OUT calls name with a pointer out-parameter and stores it as uintptr_t.
#define OUT(name, out, ...)                                                                  \
	do {                                                                                 \
		void *o_ = NULL;                                                             \
		int r_ = p_##name == NULL ? NPU_ACL_SYMBOL_MISSING : p_##name(&o_, ##__VA_ARGS__); \
		*(out) = (uintptr_t)o_;                                                      \
		return r_;                                                                   \
	} while (0)

int npu_aclInit(void) { CALL(aclInit, NULL); }
int npu_aclFinalize(void) { CALL(aclFinalize); }
int npu_aclrtSetDevice(int32_t device) { CALL(aclrtSetDevice, device); }
int npu_aclrtResetDevice(int32_t device) { CALL(aclrtResetDevice, device); }
int npu_aclrtGetDeviceCount(uint32_t *count) { CALL(aclrtGetDeviceCount, count); }
int npu_aclrtCreateContext(uintptr_t *ctx, int32_t device) { OUT(aclrtCreateContext, ctx, device); }
int npu_aclrtDestroyContext(uintptr_t ctx) { CALL(aclrtDestroyContext, P(ctx)); }
int npu_aclrtSetCurrentContext(uintptr_t ctx) { CALL(aclrtSetCurrentContext, P(ctx)); }
int npu_aclrtGetCurrentContext(uintptr_t *ctx) { OUT(aclrtGetCurrentContext, ctx); }
int npu_aclrtCreateStream(uintptr_t *stream) { OUT(aclrtCreateStream, stream); }
int npu_aclrtDestroyStream(uintptr_t stream) { CALL(aclrtDestroyStream, P(stream)); }
int npu_aclrtSynchronizeStream(uintptr_t stream) { CALL(aclrtSynchronizeStream, P(stream)); }
int npu_aclrtSynchronizeStreamWithTimeout(uintptr_t stream, int32_t timeout_ms) {
	CALL(aclrtSynchronizeStreamWithTimeout, P(stream), timeout_ms);
}
int npu_aclrtStreamAbort(uintptr_t stream) { CALL(aclrtStreamAbort, P(stream)); }
int npu_aclrtCreateEvent(uintptr_t *event) { OUT(aclrtCreateEvent, event); }
int npu_aclrtDestroyEvent(uintptr_t event) { CALL(aclrtDestroyEvent, P(event)); }
int npu_aclrtRecordEvent(uintptr_t event, uintptr_t stream) { CALL(aclrtRecordEvent, P(event), P(stream)); }
int npu_aclrtSynchronizeEvent(uintptr_t event) { CALL(aclrtSynchronizeEvent, P(event)); }
int npu_aclrtStreamWaitEvent(uintptr_t stream, uintptr_t event) { CALL(aclrtStreamWaitEvent, P(stream), P(event)); }
int npu_aclrtMalloc(uintptr_t *ptr, size_t size, int policy) { OUT(aclrtMalloc, ptr, size, policy); }
int npu_aclrtFree(uintptr_t ptr) { CALL(aclrtFree, P(ptr)); }
int npu_aclrtMallocHost(uintptr_t *ptr, size_t size) { OUT(aclrtMallocHost, ptr, size); }
int npu_aclrtFreeHost(uintptr_t ptr) { CALL(aclrtFreeHost, P(ptr)); }
int npu_aclrtMemcpy(uintptr_t dst, size_t dst_max, uintptr_t src, size_t count, int kind) {
	CALL(aclrtMemcpy, P(dst), dst_max, P(src), count, kind);
}
int npu_aclrtMemcpyAsync(uintptr_t dst, size_t dst_max, uintptr_t src, size_t count, int kind, uintptr_t stream) {
	CALL(aclrtMemcpyAsync, P(dst), dst_max, P(src), count, kind, P(stream));
}
int npu_aclrtMemset(uintptr_t ptr, size_t max, int32_t value, size_t count) {
	CALL(aclrtMemset, P(ptr), max, value, count);
}
int npu_aclrtMemsetAsync(uintptr_t ptr, size_t max, int32_t value, size_t count, uintptr_t stream) {
	CALL(aclrtMemsetAsync, P(ptr), max, value, count, P(stream));
}
int npu_aclrtGetMemInfo(int attr, size_t *free_bytes, size_t *total_bytes) {
	CALL(aclrtGetMemInfo, attr, free_bytes, total_bytes);
}

const char *npu_aclrtGetSocName(void) {
	const char *s = p_aclrtGetSocName == NULL ? NULL : p_aclrtGetSocName();
	return s == NULL ? "" : s;
}

int npu_aclsysGetVersionStr(const char *pkg, char *buf, size_t len) {
	// The version buffer is ACL_PKG_VERSION_MAX_SIZE (128, ascend-api.md
	// §1); ours is larger and always terminated.
	char v[512] = {0};
	char name[64];
	snprintf(name, sizeof name, "%s", pkg);
	buf[0] = '\0';
	if (p_aclsysGetVersionStr == NULL) {
		return NPU_ACL_SYMBOL_MISSING;
	}
	int rc = p_aclsysGetVersionStr(name, v);
	v[sizeof v - 1] = '\0';
	snprintf(buf, len, "%s", v);
	return rc;
}
int npu_aclrtGetVersion(int32_t *major, int32_t *minor, int32_t *patch) { CALL(aclrtGetVersion, major, minor, patch); }

void npu_aclGetRecentErrMsg(char *buf, size_t len) {
	buf[0] = '\0';
	if (p_aclGetRecentErrMsg != NULL) {
		const char *msg = p_aclGetRecentErrMsg();
		if (msg != NULL) {
			snprintf(buf, len, "%s", msg);
		}
	}
}

void npu_host_write(uintptr_t dst, const void *src, size_t n) { memcpy((void *)dst, src, n); }

// Graph capture (acl_mdl.h; ascend-api.md §5). The mode and status enums
// (aclmdlRICaptureMode, aclmdlRICaptureStatus) are passed as int.
int npu_aclmdlRICaptureBegin(uintptr_t stream, int mode) { CALL(aclmdlRICaptureBegin, P(stream), mode); }
int npu_aclmdlRICaptureGetInfo(uintptr_t stream, int *status, uintptr_t *model) {
	void *m = NULL;
	int rc = p_aclmdlRICaptureGetInfo == NULL ? NPU_ACL_SYMBOL_MISSING : p_aclmdlRICaptureGetInfo(P(stream), status, &m);
	*model = (uintptr_t)m;
	return rc;
}
int npu_aclmdlRICaptureEnd(uintptr_t stream, uintptr_t *model) {
	void *m = NULL;
	int rc = p_aclmdlRICaptureEnd == NULL ? NPU_ACL_SYMBOL_MISSING : p_aclmdlRICaptureEnd(P(stream), &m);
	*model = (uintptr_t)m;
	return rc;
}
int npu_aclmdlRIExecuteAsync(uintptr_t model, uintptr_t stream) { CALL(aclmdlRIExecuteAsync, P(model), P(stream)); }
int npu_aclmdlRIDestroy(uintptr_t model) { CALL(aclmdlRIDestroy, P(model)); }
