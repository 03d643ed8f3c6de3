//go:build cgo

// Loader and wrappers for the CUDA backend; see shim.h. Each foreign symbol
// is declared once, in the NPU_API table below (library, required, return
// type, name, parameters), and resolved with dlsym at load time. Calling
// an optional symbol that the installed library lacks returns
// NPU_SHIM_SYMBOL_MISSING instead of crashing.
#include "shim.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Opaque handles and the few structs whose layout we need.
typedef void *CUcontext;
typedef void *CUstream;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUevent;
typedef void *CUmemoryPool;
typedef void *CUgraph;
typedef void *CUgraphExec;
typedef uint64_t CUdeviceptr;
typedef void *nvrtcProgram;
typedef void *cublasLtHandle_t;
typedef void *cublasLtMatmulDesc_t;
typedef void *cublasLtMatrixLayout_t;
typedef void *cublasLtMatmulPreference_t;

// cublasLtMatmulAlgo_t and cublasLtMatmulHeuristicResult_t (cublasLt.h).
typedef struct {
	uint64_t data[8];
} npu_lt_algo;
typedef struct {
	npu_lt_algo algo;
	size_t workspaceSize;
	int state;
	float wavesCount;
	int reserved[4];
} npu_lt_heuristic;
_Static_assert(sizeof(npu_lt_heuristic) == 96, "cublasLtMatmulHeuristicResult_t is 96 bytes");

// CUlaunchAttribute and CUlaunchConfig (cuda.h, CUDA 12.0+): the id padded
// to 8 bytes, then the 64-byte CUlaunchAttributeValue union.
typedef struct {
	int id;
	char pad[4];
	union {
		char raw[64];
		int programmaticStreamSerializationAllowed;
	} value;
} NPU_CUlaunchAttribute;
_Static_assert(sizeof(NPU_CUlaunchAttribute) == 72, "CUlaunchAttribute is 72 bytes");
typedef struct {
	unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
	CUstream hStream;
	NPU_CUlaunchAttribute *attrs;
	unsigned numAttrs;
} NPU_CUlaunchConfig;
_Static_assert(sizeof(NPU_CUlaunchConfig) == 56, "CUlaunchConfig is 56 bytes");

// Enum values (cuda.h, cublasLt.h).
enum {
	CU_STREAM_NON_BLOCKING = 1,
	NPU_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6,
	CU_EVENT_DEFAULT = 0,
	CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
	CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4,
	CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
	CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT = 0,
	CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT = 2,
	CUBLASLT_MATMUL_DESC_TRANSA = 3,
	CUBLASLT_MATMUL_DESC_TRANSB = 4,
	CUBLASLT_MATMUL_DESC_A_SCALE_POINTER = 17,
	CUBLASLT_MATMUL_DESC_B_SCALE_POINTER = 18,
	CUBLASLT_MATMUL_DESC_A_SCALE_MODE = 31,
	CUBLASLT_MATMUL_DESC_B_SCALE_MODE = 32,
	CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
	CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5, // B, C, D follow
};

#define L_CU NPU_LIB_CUDA
#define L_RTC NPU_LIB_NVRTC
#define L_LT NPU_LIB_CUBLASLT

// The foreign API. X(library, required, ret, name, params)
#define NPU_API(X)                                                                                             \
	X(L_CU, 1, int, cuInit, (unsigned flags))                                                              \
	X(L_CU, 1, int, cuDriverGetVersion, (int *version))                                                    \
	X(L_CU, 1, int, cuDeviceGetCount, (int *count))                                                        \
	X(L_CU, 1, int, cuDeviceGet, (int *dev, int ordinal))                                                  \
	X(L_CU, 1, int, cuDeviceGetName, (char *name, int len, int dev))                                       \
	X(L_CU, 1, int, cuDeviceGetAttribute, (int *value, int attr, int dev))                                 \
	X(L_CU, 1, int, cuDeviceTotalMem_v2, (size_t * bytes, int dev))                                        \
	X(L_CU, 1, int, cuDevicePrimaryCtxRetain, (CUcontext * ctx, int dev))                                  \
	X(L_CU, 1, int, cuDevicePrimaryCtxRelease_v2, (int dev))                                               \
	X(L_CU, 1, int, cuCtxGetCurrent, (CUcontext * ctx))                                                    \
	X(L_CU, 1, int, cuCtxSetCurrent, (CUcontext ctx))                                                      \
	X(L_CU, 1, int, cuStreamCreate, (CUstream * stream, unsigned flags))                                   \
	X(L_CU, 1, int, cuStreamSynchronize, (CUstream stream))                                                \
	X(L_CU, 1, int, cuStreamDestroy_v2, (CUstream stream))                                                 \
	X(L_CU, 1, int, cuMemGetInfo_v2, (size_t * free_bytes, size_t * total_bytes))                          \
	X(L_CU, 1, int, cuMemAlloc_v2, (CUdeviceptr * ptr, size_t bytes))                                      \
	X(L_CU, 1, int, cuMemFree_v2, (CUdeviceptr ptr))                                                       \
	X(L_CU, 0, int, cuMemAllocAsync, (CUdeviceptr * ptr, size_t bytes, CUstream stream))                   \
	X(L_CU, 0, int, cuMemFreeAsync, (CUdeviceptr ptr, CUstream stream))                                    \
	X(L_CU, 0, int, cuDeviceGetDefaultMemPool, (CUmemoryPool * pool, int dev))                             \
	X(L_CU, 0, int, cuMemPoolSetAttribute, (CUmemoryPool pool, int attr, void *value))                     \
	X(L_CU, 0, int, cuMemPoolTrimTo, (CUmemoryPool pool, size_t keep))                                     \
	X(L_CU, 1, int, cuMemcpyHtoDAsync_v2, (CUdeviceptr dst, const void *src, size_t bytes, CUstream s))    \
	X(L_CU, 1, int, cuMemcpyDtoHAsync_v2, (void *dst, CUdeviceptr src, size_t bytes, CUstream s))          \
	X(L_CU, 1, int, cuMemcpyDtoDAsync_v2, (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s))    \
	X(L_CU, 1, int, cuMemsetD8Async, (CUdeviceptr dst, unsigned char v, size_t n, CUstream s))             \
	X(L_CU, 1, int, cuMemsetD16Async, (CUdeviceptr dst, unsigned short v, size_t n, CUstream s))           \
	X(L_CU, 1, int, cuMemsetD32Async, (CUdeviceptr dst, unsigned int v, size_t n, CUstream s))             \
	X(L_CU, 1, int, cuModuleLoadData, (CUmodule * mod, const void *image))                                 \
	X(L_CU, 1, int, cuModuleGetFunction, (CUfunction * fn, CUmodule mod, const char *name))                \
	X(L_CU, 0, int, cuFuncSetAttribute, (CUfunction fn, int attr, int value))                              \
	X(L_CU, 1, int, cuLaunchKernel,                                                                        \
	  (CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,        \
	   unsigned shmem, CUstream s, void **params, void **extra))                                           \
	X(L_CU, 0, int, cuLaunchKernelEx, (const NPU_CUlaunchConfig *cfg, CUfunction fn, void **params, void **extra)) \
	X(L_CU, 0, int, cuGetErrorName, (int rc, const char **name))                                           \
	X(L_CU, 0, int, cuGetErrorString, (int rc, const char **str))                                          \
	X(L_CU, 0, int, cuEventCreate, (CUevent * ev, unsigned flags))                                         \
	X(L_CU, 0, int, cuEventRecord, (CUevent ev, CUstream s))                                               \
	X(L_CU, 0, int, cuEventSynchronize, (CUevent ev))                                                      \
	X(L_CU, 0, int, cuEventElapsedTime, (float *ms, CUevent start, CUevent end))                           \
	X(L_CU, 0, int, cuEventDestroy_v2, (CUevent ev))                                                       \
	X(L_CU, 0, int, cuStreamBeginCapture_v2, (CUstream s, int mode))                                       \
	X(L_CU, 0, int, cuStreamEndCapture, (CUstream s, CUgraph * graph))                                     \
	X(L_CU, 0, int, cuGraphInstantiateWithFlags, (CUgraphExec * exec, CUgraph graph, unsigned long long f)) \
	X(L_CU, 0, int, cuGraphLaunch, (CUgraphExec exec, CUstream s))                                         \
	X(L_CU, 0, int, cuGraphUpload, (CUgraphExec exec, CUstream s))                                         \
	X(L_CU, 0, int, cuGraphExecDestroy, (CUgraphExec exec))                                                \
	X(L_CU, 0, int, cuGraphDestroy, (CUgraph graph))                                                       \
	X(L_CU, 0, int, cuDeviceGetGraphMemAttribute, (int dev, int attr, void *value))                        \
	X(L_CU, 0, int, cuDeviceGraphMemTrim, (int dev))                                                       \
	X(L_RTC, 1, int, nvrtcVersion, (int *major, int *minor))                                               \
	X(L_RTC, 1, const char *, nvrtcGetErrorString, (int rc))                                               \
	X(L_RTC, 1, int, nvrtcCreateProgram,                                                                   \
	  (nvrtcProgram * prog, const char *src, const char *name, int nheaders, const char *const *headers,   \
	   const char *const *include_names))                                                                  \
	X(L_RTC, 1, int, nvrtcCompileProgram, (nvrtcProgram prog, int nopts, const char *const *opts))         \
	X(L_RTC, 1, int, nvrtcGetProgramLogSize, (nvrtcProgram prog, size_t * size))                           \
	X(L_RTC, 1, int, nvrtcGetProgramLog, (nvrtcProgram prog, char *log))                                   \
	X(L_RTC, 1, int, nvrtcGetCUBINSize, (nvrtcProgram prog, size_t * size))                                \
	X(L_RTC, 1, int, nvrtcGetCUBIN, (nvrtcProgram prog, char *cubin))                                      \
	X(L_RTC, 1, int, nvrtcDestroyProgram, (nvrtcProgram * prog))                                           \
	X(L_LT, 1, size_t, cublasLtGetVersion, (void))                                                         \
	X(L_LT, 1, int, cublasLtCreate, (cublasLtHandle_t * handle))                                           \
	X(L_LT, 1, int, cublasLtDestroy, (cublasLtHandle_t handle))                                            \
	X(L_LT, 1, int, cublasLtMatmulDescCreate, (cublasLtMatmulDesc_t * desc, int compute, int scale_type))  \
	X(L_LT, 1, int, cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t desc))                                \
	X(L_LT, 1, int, cublasLtMatmulDescSetAttribute,                                                        \
	  (cublasLtMatmulDesc_t desc, int attr, const void *buf, size_t size))                                 \
	X(L_LT, 1, int, cublasLtMatrixLayoutCreate,                                                            \
	  (cublasLtMatrixLayout_t * layout, int type, uint64_t rows, uint64_t cols, int64_t ld))               \
	X(L_LT, 1, int, cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t layout))                          \
	X(L_LT, 1, int, cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * pref))                   \
	X(L_LT, 1, int, cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref))                    \
	X(L_LT, 1, int, cublasLtMatmulPreferenceSetAttribute,                                                  \
	  (cublasLtMatmulPreference_t pref, int attr, const void *buf, size_t size))                           \
	X(L_LT, 1, int, cublasLtMatmulAlgoGetHeuristic,                                                        \
	  (cublasLtHandle_t handle, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b, \
	   cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref, int requested,  \
	   npu_lt_heuristic *results, int *returned))                                                          \
	X(L_LT, 1, int, cublasLtMatmul,                                                                        \
	  (cublasLtHandle_t handle, cublasLtMatmulDesc_t op, const void *alpha, const void *a,                 \
	   cublasLtMatrixLayout_t adesc, const void *b, cublasLtMatrixLayout_t bdesc, const void *beta,        \
	   const void *c, cublasLtMatrixLayout_t cdesc, void *d, cublasLtMatrixLayout_t ddesc,                 \
	   const npu_lt_algo *algo, void *ws, size_t ws_bytes, CUstream s))

#define NPU_DECLARE(lib, req, ret, name, params) static ret(*p_##name) params;
NPU_API(NPU_DECLARE)

typedef struct {
	const char *name;
	int lib, required;
	void **slot;
} npu_symbol;

#define NPU_ENTRY(lib, req, ret, name, params) {#name, lib, req, (void **)&p_##name},
static const npu_symbol symbols[] = {NPU_API(NPU_ENTRY)};
#define NSYMBOLS ((int)(sizeof(symbols) / sizeof(symbols[0])))

static void *handles[3];

const char *npu_cuda_symbol(int i, int *lib, int *required, int *resolved) {
	if (i < 0 || i >= NSYMBOLS) {
		return NULL;
	}
	*lib = symbols[i].lib;
	*required = symbols[i].required;
	*resolved = *symbols[i].slot != NULL;
	return symbols[i].name;
}

// load dlopens the first of names that loads and resolves lib's symbols.
static int load(int lib, const char *const *names, char *path, size_t pathlen, char *err, size_t errlen) {
	if (handles[lib] == NULL) {
		err[0] = '\0';
		for (int i = 0; names[i] != NULL; i++) {
			void *h = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL);
			if (h != NULL) {
				handles[lib] = h;
				if (path != NULL) {
					snprintf(path, pathlen, "%s", names[i]);
				}
				break;
			}
			if (err[0] == '\0') {
				const char *e = dlerror();
				snprintf(err, errlen, "%s", e ? e : "dlopen failed");
			}
		}
		if (handles[lib] == NULL) {
			return -1;
		}
	}
	err[0] = '\0';
	for (int i = 0; i < NSYMBOLS; i++) {
		if (symbols[i].lib != lib) {
			continue;
		}
		*symbols[i].slot = dlsym(handles[lib], symbols[i].name);
		if (*symbols[i].slot == NULL && symbols[i].required) {
			size_t used = strlen(err);
			snprintf(err + used, errlen - used, "%s%s", used ? ", " : "missing symbols: ", symbols[i].name);
		}
	}
	return err[0] ? -3 : 0;
}

int npu_cuda_load(char *err, size_t errlen) {
	static const char *const names[] = {"libcuda.so.1", NULL};
	return load(L_CU, names, NULL, 0, err, errlen);
}

int npu_nvrtc_load(char *path, size_t pathlen, char *err, size_t errlen) {
	static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", NULL};
	return load(L_RTC, names, path, pathlen, err, errlen);
}

int npu_cublaslt_load(char *path, size_t pathlen, char *err, size_t errlen) {
	static const char *const names[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so", NULL};
	return load(L_LT, names, path, pathlen, err, errlen);
}

// CALL returns NPU_SHIM_SYMBOL_MISSING when a symbol is absent (optional,
// or its library never loaded).
#define CALL(name, ...) return p_##name == NULL ? NPU_SHIM_SYMBOL_MISSING : p_##name(__VA_ARGS__)
// BIND makes ctx current on this thread or returns the failure.
#define BIND(ctx)                               \
	do {                                    \
		int rc_ = npu_ctx_bind(ctx);    \
		if (rc_ != NPU_CUDA_SUCCESS) {  \
			return rc_;             \
		}                               \
	} while (0)
#define P(x) ((void *)(x))

const char *npu_cuGetErrorName(int rc) {
	const char *s = NULL;
	if (p_cuGetErrorName == NULL || p_cuGetErrorName(rc, &s) != 0 || s == NULL) {
		return "";
	}
	return s;
}

const char *npu_cuGetErrorString(int rc) {
	const char *s = NULL;
	if (p_cuGetErrorString == NULL || p_cuGetErrorString(rc, &s) != 0 || s == NULL) {
		return "";
	}
	return s;
}

int npu_cuInit(void) { CALL(cuInit, 0); }
int npu_cuDriverGetVersion(int *version) { CALL(cuDriverGetVersion, version); }
int npu_cuDeviceGetCount(int *count) { CALL(cuDeviceGetCount, count); }
int npu_cuDeviceGet(int *dev, int ordinal) { CALL(cuDeviceGet, dev, ordinal); }
int npu_cuDeviceGetName(char *name, int len, int dev) { CALL(cuDeviceGetName, name, len, dev); }
int npu_cuDeviceGetAttribute(int *value, int attr, int dev) { CALL(cuDeviceGetAttribute, value, attr, dev); }
int npu_cuDeviceTotalMem(size_t *bytes, int dev) { CALL(cuDeviceTotalMem_v2, bytes, dev); }

int npu_cuDevicePrimaryCtxRetain(uintptr_t *ctx, int dev) {
	CUcontext c = NULL;
	int rc = p_cuDevicePrimaryCtxRetain == NULL ? NPU_SHIM_SYMBOL_MISSING : p_cuDevicePrimaryCtxRetain(&c, dev);
	*ctx = (uintptr_t)c;
	return rc;
}

int npu_cuDevicePrimaryCtxRelease(int dev) { CALL(cuDevicePrimaryCtxRelease_v2, dev); }

int npu_ctx_bind(uintptr_t ctx) {
	if (p_cuCtxGetCurrent == NULL || p_cuCtxSetCurrent == NULL) {
		return NPU_SHIM_NOT_LOADED;
	}
	CUcontext cur = NULL;
	if (p_cuCtxGetCurrent(&cur) == NPU_CUDA_SUCCESS && cur == P(ctx)) {
		return NPU_CUDA_SUCCESS;
	}
	return p_cuCtxSetCurrent(P(ctx));
}

int npu_cuStreamCreate(uintptr_t ctx, uintptr_t *stream) {
	BIND(ctx);
	CUstream s = NULL;
	int rc = p_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
	*stream = (uintptr_t)s;
	return rc;
}

int npu_cuStreamSynchronize(uintptr_t ctx, uintptr_t stream) {
	BIND(ctx);
	CALL(cuStreamSynchronize, P(stream));
}

int npu_cuStreamDestroy(uintptr_t ctx, uintptr_t stream) {
	BIND(ctx);
	CALL(cuStreamDestroy_v2, P(stream));
}

int npu_cuMemGetInfo(uintptr_t ctx, size_t *free_bytes, size_t *total_bytes) {
	BIND(ctx);
	CALL(cuMemGetInfo_v2, free_bytes, total_bytes);
}

int npu_cuMemAlloc(uintptr_t ctx, uint64_t *ptr, size_t bytes) {
	BIND(ctx);
	CUdeviceptr p = 0;
	int rc = p_cuMemAlloc_v2(&p, bytes);
	*ptr = p;
	return rc;
}

int npu_cuMemFree(uintptr_t ctx, uint64_t ptr) {
	BIND(ctx);
	CALL(cuMemFree_v2, ptr);
}

int npu_has_async_alloc(void) {
	return p_cuMemAllocAsync != NULL && p_cuMemFreeAsync != NULL && p_cuDeviceGetDefaultMemPool != NULL &&
	       p_cuMemPoolSetAttribute != NULL;
}

int npu_cuMemAllocAsync(uintptr_t ctx, uint64_t *ptr, size_t bytes, uintptr_t stream) {
	BIND(ctx);
	CUdeviceptr p = 0;
	int rc = p_cuMemAllocAsync == NULL ? NPU_SHIM_SYMBOL_MISSING : p_cuMemAllocAsync(&p, bytes, P(stream));
	*ptr = p;
	return rc;
}

int npu_cuMemFreeAsync(uintptr_t ctx, uint64_t ptr, uintptr_t stream) {
	BIND(ctx);
	CALL(cuMemFreeAsync, ptr, P(stream));
}

int npu_mempool_keep(uintptr_t ctx, int dev) {
	BIND(ctx);
	if (!npu_has_async_alloc()) {
		return NPU_SHIM_SYMBOL_MISSING;
	}
	CUmemoryPool pool = NULL;
	int rc = p_cuDeviceGetDefaultMemPool(&pool, dev);
	if (rc != NPU_CUDA_SUCCESS) {
		return rc;
	}
	uint64_t keep = UINT64_MAX;
	return p_cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep);
}

int npu_mempool_trim(uintptr_t ctx, int dev) {
	BIND(ctx);
	if (p_cuDeviceGetDefaultMemPool == NULL || p_cuMemPoolTrimTo == NULL) {
		return NPU_SHIM_SYMBOL_MISSING;
	}
	CUmemoryPool pool = NULL;
	int rc = p_cuDeviceGetDefaultMemPool(&pool, dev);
	if (rc != NPU_CUDA_SUCCESS) {
		return rc;
	}
	return p_cuMemPoolTrimTo(pool, 0);
}

int npu_cuMemcpyHtoDAsync(uintptr_t ctx, uint64_t dst, const void *src, size_t bytes, uintptr_t stream) {
	BIND(ctx);
	CALL(cuMemcpyHtoDAsync_v2, dst, src, bytes, P(stream));
}

int npu_cuMemcpyDtoHAsync(uintptr_t ctx, void *dst, uint64_t src, size_t bytes, uintptr_t stream) {
	BIND(ctx);
	CALL(cuMemcpyDtoHAsync_v2, dst, src, bytes, P(stream));
}

int npu_cuMemcpyDtoDAsync(uintptr_t ctx, uint64_t dst, uint64_t src, size_t bytes, uintptr_t stream) {
	BIND(ctx);
	CALL(cuMemcpyDtoDAsync_v2, dst, src, bytes, P(stream));
}

int npu_cuMemsetD8Async(uintptr_t ctx, uint64_t dst, unsigned char v, size_t n, uintptr_t stream) {
	BIND(ctx);
	CALL(cuMemsetD8Async, dst, v, n, P(stream));
}

int npu_cuMemsetD16Async(uintptr_t ctx, uint64_t dst, unsigned short v, size_t n, uintptr_t stream) {
	BIND(ctx);
	CALL(cuMemsetD16Async, dst, v, n, P(stream));
}

int npu_cuMemsetD32Async(uintptr_t ctx, uint64_t dst, unsigned int v, size_t n, uintptr_t stream) {
	BIND(ctx);
	CALL(cuMemsetD32Async, dst, v, n, P(stream));
}

int npu_cuModuleLoadData(uintptr_t ctx, uintptr_t *mod, const void *image) {
	BIND(ctx);
	CUmodule m = NULL;
	int rc = p_cuModuleLoadData(&m, image);
	*mod = (uintptr_t)m;
	return rc;
}

int npu_cuModuleGetFunction(uintptr_t ctx, uintptr_t *fn, uintptr_t mod, const char *name) {
	BIND(ctx);
	CUfunction f = NULL;
	int rc = p_cuModuleGetFunction(&f, P(mod), name);
	*fn = (uintptr_t)f;
	return rc;
}

int npu_cuFuncSetMaxDynamicShared(uintptr_t ctx, uintptr_t fn, int bytes) {
	BIND(ctx);
	CALL(cuFuncSetAttribute, P(fn), CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes);
}

#define NPU_MAX_ARGS 32

int npu_cuLaunch(uintptr_t ctx, uintptr_t fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
		 unsigned bz, unsigned shmem, uintptr_t stream, const uint64_t *args, int nargs, int pdl) {
	BIND(ctx);
	void *params[NPU_MAX_ARGS];
	if (nargs < 0 || nargs > NPU_MAX_ARGS) {
		return 1; // CUDA_ERROR_INVALID_VALUE
	}
	for (int i = 0; i < nargs; i++) {
		params[i] = (void *)&args[i];
	}
	if (pdl) {
		if (p_cuLaunchKernelEx == NULL) {
			return NPU_SHIM_SYMBOL_MISSING;
		}
		NPU_CUlaunchAttribute attr;
		memset(&attr, 0, sizeof attr);
		attr.id = NPU_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
		attr.value.programmaticStreamSerializationAllowed = 1;
		NPU_CUlaunchConfig cfg;
		memset(&cfg, 0, sizeof cfg);
		cfg.gridDimX = gx, cfg.gridDimY = gy, cfg.gridDimZ = gz;
		cfg.blockDimX = bx, cfg.blockDimY = by, cfg.blockDimZ = bz;
		cfg.sharedMemBytes = shmem;
		cfg.hStream = P(stream);
		cfg.attrs = &attr;
		cfg.numAttrs = 1;
		return p_cuLaunchKernelEx(&cfg, P(fn), params, NULL);
	}
	CALL(cuLaunchKernel, P(fn), gx, gy, gz, bx, by, bz, shmem, P(stream), params, NULL);
}

int npu_cuHasLaunchEx(void) { return p_cuLaunchKernelEx != NULL; }

int npu_cuEventCreate(uintptr_t ctx, uintptr_t *ev) {
	BIND(ctx);
	CUevent e = NULL;
	int rc = p_cuEventCreate == NULL ? NPU_SHIM_SYMBOL_MISSING : p_cuEventCreate(&e, CU_EVENT_DEFAULT);
	*ev = (uintptr_t)e;
	return rc;
}

int npu_cuEventRecord(uintptr_t ctx, uintptr_t ev, uintptr_t stream) {
	BIND(ctx);
	CALL(cuEventRecord, P(ev), P(stream));
}

int npu_cuEventSynchronize(uintptr_t ctx, uintptr_t ev) {
	BIND(ctx);
	CALL(cuEventSynchronize, P(ev));
}

int npu_cuEventElapsedTime(uintptr_t ctx, float *ms, uintptr_t start, uintptr_t end) {
	BIND(ctx);
	CALL(cuEventElapsedTime, ms, P(start), P(end));
}

int npu_cuEventDestroy(uintptr_t ctx, uintptr_t ev) {
	BIND(ctx);
	CALL(cuEventDestroy_v2, P(ev));
}

int npu_has_graphs(void) {
	return p_cuStreamBeginCapture_v2 != NULL && p_cuStreamEndCapture != NULL && p_cuGraphInstantiateWithFlags != NULL &&
	       p_cuGraphLaunch != NULL && p_cuGraphExecDestroy != NULL && p_cuGraphDestroy != NULL;
}

int npu_cuStreamBeginCapture(uintptr_t ctx, uintptr_t stream) {
	BIND(ctx);
	CALL(cuStreamBeginCapture_v2, P(stream), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
}

int npu_graph_end(uintptr_t ctx, uintptr_t stream, uintptr_t *exec) {
	BIND(ctx);
	*exec = 0;
	if (!npu_has_graphs()) {
		return NPU_SHIM_SYMBOL_MISSING;
	}
	CUgraph g = NULL;
	int rc = p_cuStreamEndCapture(P(stream), &g);
	if (rc != NPU_CUDA_SUCCESS) {
		if (g != NULL) {
			p_cuGraphDestroy(g);
		}
		return rc;
	}
	CUgraphExec e = NULL;
	rc = p_cuGraphInstantiateWithFlags(&e, g, 0);
	p_cuGraphDestroy(g); // the executable graph does not need it
	*exec = (uintptr_t)e;
	return rc;
}

int npu_cuGraphLaunch(uintptr_t ctx, uintptr_t exec, uintptr_t stream) {
	BIND(ctx);
	CALL(cuGraphLaunch, P(exec), P(stream));
}

int npu_cuGraphUpload(uintptr_t ctx, uintptr_t exec, uintptr_t stream) {
	BIND(ctx);
	CALL(cuGraphUpload, P(exec), P(stream));
}

int npu_cuGraphExecDestroy(uintptr_t ctx, uintptr_t exec) {
	BIND(ctx);
	CALL(cuGraphExecDestroy, P(exec));
}

int npu_graph_mem(uintptr_t ctx, int dev, uint64_t *used, uint64_t *reserved) {
	BIND(ctx);
	*used = 0;
	*reserved = 0;
	if (p_cuDeviceGetGraphMemAttribute == NULL) {
		return NPU_SHIM_SYMBOL_MISSING;
	}
	int rc = p_cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, used);
	if (rc != NPU_CUDA_SUCCESS) {
		return rc;
	}
	return p_cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, reserved);
}

int npu_cuDeviceGraphMemTrim(uintptr_t ctx, int dev) {
	BIND(ctx);
	CALL(cuDeviceGraphMemTrim, dev);
}

// NVRTC.

int npu_nvrtcVersion(int *major, int *minor) { CALL(nvrtcVersion, major, minor); }

const char *npu_nvrtcGetErrorString(int rc) {
	const char *s = p_nvrtcGetErrorString == NULL ? NULL : p_nvrtcGetErrorString(rc);
	return s == NULL ? "" : s;
}

#define NPU_MAX_OPTS 32

int npu_nvrtc_build(const char *src, const char *name, const char *options, char **cubin, size_t *cubin_len,
		    char **log, size_t *log_len) {
	*cubin = NULL;
	*cubin_len = 0;
	*log = NULL;
	*log_len = 0;
	if (p_nvrtcCreateProgram == NULL) {
		return NPU_SHIM_NOT_LOADED;
	}
	// Split the options at newlines.
	char *opts = strdup(options);
	const char *argv[NPU_MAX_OPTS];
	int argc = 0;
	for (char *s = opts; s != NULL && *s != '\0' && argc < NPU_MAX_OPTS;) {
		argv[argc++] = s;
		char *nl = strchr(s, '\n');
		if (nl == NULL) {
			break;
		}
		*nl = '\0';
		s = nl + 1;
	}
	nvrtcProgram prog = NULL;
	int rc = p_nvrtcCreateProgram(&prog, src, name, 0, NULL, NULL);
	if (rc != 0) {
		free(opts);
		return rc;
	}
	rc = p_nvrtcCompileProgram(prog, argc, argv);
	free(opts);
	size_t n = 0;
	if (p_nvrtcGetProgramLogSize(prog, &n) == 0 && n > 0) {
		*log = malloc(n);
		if (*log != NULL && p_nvrtcGetProgramLog(prog, *log) == 0) {
			*log_len = n - 1; // without the terminating NUL
		}
	}
	if (rc == 0) {
		n = 0;
		int rc2 = p_nvrtcGetCUBINSize(prog, &n);
		if (rc2 == 0 && n > 0) {
			*cubin = malloc(n);
			if (*cubin != NULL && (rc2 = p_nvrtcGetCUBIN(prog, *cubin)) == 0) {
				*cubin_len = n;
			} else {
				free(*cubin);
				*cubin = NULL;
			}
		}
		if (rc2 != 0) {
			rc = rc2;
		}
	}
	p_nvrtcDestroyProgram(&prog);
	return rc;
}

// cuBLASLt.

size_t npu_cublasLtGetVersion(void) { return p_cublasLtGetVersion == NULL ? 0 : p_cublasLtGetVersion(); }

int npu_cublasLtCreate(uintptr_t ctx, uintptr_t *handle) {
	BIND(ctx);
	cublasLtHandle_t h = NULL;
	int rc = p_cublasLtCreate == NULL ? NPU_SHIM_NOT_LOADED : p_cublasLtCreate(&h);
	*handle = (uintptr_t)h;
	return rc;
}

int npu_cublasLtDestroy(uintptr_t handle) { CALL(cublasLtDestroy, P(handle)); }

// A plan: one GEMM's descriptors and the heuristic's algorithm.
typedef struct {
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t a, b, d;
	npu_lt_algo algo;
	int scaled; // A and B scale modes set: runs take their scale tensors
} npu_lt_plan;

// lt_set_scales points a block-scaled descriptor at A's and B's scale
// tensors.
static int lt_set_scales(cublasLtMatmulDesc_t op, uint64_t a_scale, uint64_t b_scale) {
	void *as = P(a_scale), *bs = P(b_scale);
	int rc = p_cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &as, sizeof(as));
	if (rc == 0) {
		rc = p_cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &bs, sizeof(bs));
	}
	return rc;
}

void npu_lt_plan_destroy(uintptr_t plan) {
	npu_lt_plan *p = (npu_lt_plan *)plan;
	if (p == NULL) {
		return;
	}
	if (p->op != NULL) {
		p_cublasLtMatmulDescDestroy(p->op);
	}
	if (p->a != NULL) {
		p_cublasLtMatrixLayoutDestroy(p->a);
	}
	if (p->b != NULL) {
		p_cublasLtMatrixLayoutDestroy(p->b);
	}
	if (p->d != NULL) {
		p_cublasLtMatrixLayoutDestroy(p->d);
	}
	free(p);
}

int npu_lt_plan_create(uintptr_t ctx, uintptr_t handle, int transa, int transb, uint64_t m, uint64_t n, uint64_t k, int ab_type,
		       int d_type, int64_t lda, int64_t ldb, int64_t ldd, unsigned align, size_t ws_bytes, int a_scale_mode,
		       int b_scale_mode, uint64_t a_scale, uint64_t b_scale, uintptr_t *plan) {
	*plan = 0;
	BIND(ctx);
	if (p_cublasLtCreate == NULL) {
		return NPU_SHIM_NOT_LOADED;
	}
	npu_lt_plan *p = calloc(1, sizeof(*p));
	if (p == NULL) {
		return 3; // CUBLAS_STATUS_ALLOC_FAILED
	}
	int32_t ta = transa, tb = transb;
	int rc = p_cublasLtMatmulDescCreate(&p->op, NPU_CUBLAS_COMPUTE_32F, NPU_CUDA_R_32F);
	if (rc == 0) {
		rc = p_cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
	}
	if (rc == 0) {
		rc = p_cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
	}
	if (a_scale_mode >= 0 && b_scale_mode >= 0) {
		int32_t am = a_scale_mode, bm = b_scale_mode;
		p->scaled = 1;
		if (rc == 0) {
			rc = p_cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &am, sizeof(am));
		}
		if (rc == 0) {
			rc = p_cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &bm, sizeof(bm));
		}
		if (rc == 0) {
			rc = lt_set_scales(p->op, a_scale, b_scale);
		}
	}
	// Stored shapes: A is m x k (k x m when transposed), B is k x n (n x k).
	if (rc == 0) {
		rc = p_cublasLtMatrixLayoutCreate(&p->a, ab_type, transa ? k : m, transa ? m : k, lda);
	}
	if (rc == 0) {
		rc = p_cublasLtMatrixLayoutCreate(&p->b, ab_type, transb ? n : k, transb ? k : n, ldb);
	}
	if (rc == 0) {
		rc = p_cublasLtMatrixLayoutCreate(&p->d, d_type, m, n, ldd);
	}
	cublasLtMatmulPreference_t pref = NULL;
	if (rc == 0) {
		rc = p_cublasLtMatmulPreferenceCreate(&pref);
	}
	uint64_t ws = ws_bytes;
	if (rc == 0) {
		rc = p_cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
							     sizeof(ws));
	}
	uint32_t al = align;
	for (int attr = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES; rc == 0 && attr < CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES + 4; attr++) {
		rc = p_cublasLtMatmulPreferenceSetAttribute(pref, attr, &al, sizeof(al));
	}
	npu_lt_heuristic res;
	int got = 0;
	if (rc == 0) {
		memset(&res, 0, sizeof(res));
		rc = p_cublasLtMatmulAlgoGetHeuristic(P(handle), p->op, p->a, p->b, p->d, p->d, pref, 1, &res, &got);
		if (rc == 0 && got < 1) {
			rc = 15; // CUBLAS_STATUS_NOT_SUPPORTED
		}
	}
	if (pref != NULL) {
		p_cublasLtMatmulPreferenceDestroy(pref);
	}
	if (rc != 0) {
		npu_lt_plan_destroy((uintptr_t)p);
		return rc;
	}
	p->algo = res.algo;
	*plan = (uintptr_t)p;
	return 0;
}

int npu_lt_plan_run(uintptr_t ctx, uintptr_t handle, uintptr_t plan, float alpha, float beta, uint64_t a,
		    uint64_t b, uint64_t d, uint64_t a_scale, uint64_t b_scale, uint64_t ws, size_t ws_bytes, uintptr_t stream) {
	BIND(ctx);
	npu_lt_plan *p = (npu_lt_plan *)plan;
	if (p_cublasLtMatmul == NULL || p == NULL) {
		return NPU_SHIM_NOT_LOADED;
	}
	if (p->scaled) {
		// The descriptor holds the scale addresses; cublasLtMatmul reads them
		// when it enqueues (so a captured graph keeps this call's).
		int rc = lt_set_scales(p->op, a_scale, b_scale);
		if (rc != 0) {
			return rc;
		}
	}
	return p_cublasLtMatmul(P(handle), p->op, &alpha, P(a), p->a, P(b), p->b, &beta, P(d), p->d, P(d), p->d,
				&p->algo, P(ws), ws_bytes, P(stream));
}
