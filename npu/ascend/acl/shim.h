// C side of the ACL runtime binding: libascendcl.so is dlopened at run time
// and its symbols called through function pointers declared once, in
// shim.c, from the public API (ascend-api.md §2); no CANN header is needed
// to build. Device addresses, streams, events and contexts cross into Go as
// uintptr_t only.
#ifndef NPUSERVE_ACL_SHIM_H
#define NPUSERVE_ACL_SHIM_H

#include <stddef.h>
#include <stdint.h>

#define NPU_ACL_SYMBOL_MISSING -99998 // an optional symbol this CANN lacks

// npu_acl_load dlopens libascendcl (RTLD_NOW | RTLD_GLOBAL, so libraries
// loaded later resolve against it) and fills the function table. It
// returns 0; -1 when the library does not load; -3 when required symbols
// are missing; the reason is in err.
int npu_acl_load(const char *path, char *err, size_t errlen);
// npu_acl_has reports whether an optional symbol was found.
int npu_acl_has(const char *name);

int npu_aclInit(void);
int npu_aclFinalize(void);
int npu_aclrtSetDevice(int32_t device);
int npu_aclrtResetDevice(int32_t device);
int npu_aclrtGetDeviceCount(uint32_t *count);
int npu_aclrtCreateContext(uintptr_t *ctx, int32_t device);
int npu_aclrtDestroyContext(uintptr_t ctx);
int npu_aclrtSetCurrentContext(uintptr_t ctx);
int npu_aclrtGetCurrentContext(uintptr_t *ctx);
int npu_aclrtCreateStream(uintptr_t *stream);
int npu_aclrtDestroyStream(uintptr_t stream);
int npu_aclrtSynchronizeStream(uintptr_t stream);
int npu_aclrtSynchronizeStreamWithTimeout(uintptr_t stream, int32_t timeout_ms);
int npu_aclrtStreamAbort(uintptr_t stream);
int npu_aclrtCreateEvent(uintptr_t *event);
int npu_aclrtDestroyEvent(uintptr_t event);
int npu_aclrtRecordEvent(uintptr_t event, uintptr_t stream);
int npu_aclrtSynchronizeEvent(uintptr_t event);
int npu_aclrtStreamWaitEvent(uintptr_t stream, uintptr_t event);
int npu_aclrtMalloc(uintptr_t *ptr, size_t size, int policy);
int npu_aclrtFree(uintptr_t ptr);
int npu_aclrtMallocHost(uintptr_t *ptr, size_t size);
int npu_aclrtFreeHost(uintptr_t ptr);
int npu_aclrtMemcpy(uintptr_t dst, size_t dst_max, uintptr_t src, size_t count, int kind);
int npu_aclrtMemcpyAsync(uintptr_t dst, size_t dst_max, uintptr_t src, size_t count, int kind, uintptr_t stream);
int npu_aclrtMemset(uintptr_t ptr, size_t max, int32_t value, size_t count);
int npu_aclrtMemsetAsync(uintptr_t ptr, size_t max, int32_t value, size_t count, uintptr_t stream);
int npu_aclrtGetMemInfo(int attr, size_t *free_bytes, size_t *total_bytes);
// npu_aclrtGetSocName returns "" when the symbol is missing or fails.
const char *npu_aclrtGetSocName(void);
// npu_aclsysGetVersionStr copies pkg's version (e.g. "runtime") into buf.
int npu_aclsysGetVersionStr(const char *pkg, char *buf, size_t len);
int npu_aclrtGetVersion(int32_t *major, int32_t *minor, int32_t *patch);
// npu_aclGetRecentErrMsg copies the calling thread's last ACL error
// message (reading clears it); empty when there is none.
void npu_aclGetRecentErrMsg(char *buf, size_t len);

// Graph capture: aclmdlRICaptureBegin/GetInfo/End, aclmdlRIExecuteAsync,
// aclmdlRIDestroy (models cross as uintptr_t).
int npu_aclmdlRICaptureBegin(uintptr_t stream, int mode);
int npu_aclmdlRICaptureGetInfo(uintptr_t stream, int *status, uintptr_t *model);
int npu_aclmdlRICaptureEnd(uintptr_t stream, uintptr_t *model);
int npu_aclmdlRIExecuteAsync(uintptr_t model, uintptr_t stream);
int npu_aclmdlRIDestroy(uintptr_t model);

// npu_host_write copies n bytes of src into host memory at dst (memory
// from aclrtMallocHost, addressed by uintptr_t).
void npu_host_write(uintptr_t dst, const void *src, size_t n);

#endif
