// C side of the CUDA backend: our own declarations of the few driver,
// NVRTC and cuBLASLt types and constants we use (written from the public
// API documentation; no CUDA header or toolkit is needed to build), a table
// of function pointers filled by dlsym, and thin wrappers that Go calls.
// Device pointers, contexts, streams, modules, functions and cuBLASLt
// handles cross into Go as uint64_t / uintptr_t only.
//
// Every wrapper that needs a context takes it and makes it current on the
// calling OS thread first (a TLS read when it already is): a goroutine may
// run on another thread at each call, but never changes thread inside one
// C call, so no OS-locked goroutine is needed.
#ifndef NPUSERVE_CUDA_SHIM_H
#define NPUSERVE_CUDA_SHIM_H

#include <stddef.h>
#include <stdint.h>

// Codes of our own, outside every library's range.
#define NPU_SHIM_SYMBOL_MISSING -99998 // an optional symbol this library lacks
#define NPU_SHIM_NOT_LOADED -99997     // the library was never loaded

// Libraries of the symbol table.
#define NPU_LIB_CUDA 0
#define NPU_LIB_NVRTC 1
#define NPU_LIB_CUBLASLT 2

// CUdevice_attribute values we read.
#define NPU_CU_ATTR_MULTIPROCESSOR_COUNT 16
#define NPU_CU_ATTR_L2_CACHE_SIZE 38
#define NPU_CU_ATTR_CC_MAJOR 75
#define NPU_CU_ATTR_CC_MINOR 76
#define NPU_CU_ATTR_MAX_SHARED_PER_BLOCK_OPTIN 97
#define NPU_CU_ATTR_MEMORY_POOLS_SUPPORTED 115

// CUresult values we act on.
#define NPU_CUDA_SUCCESS 0
#define NPU_CUDA_ERROR_OUT_OF_MEMORY 2
#define NPU_CUDA_ERROR_NO_DEVICE 100

// cudaDataType_t and cublasComputeType_t values for cuBLASLt.
#define NPU_CUDA_R_32F 0
#define NPU_CUDA_R_16F 2
#define NPU_CUDA_R_16BF 14
#define NPU_CUDA_R_8F_E4M3 28
#define NPU_CUBLAS_COMPUTE_32F 68

// npu_*_load dlopen a library and fill its part of the function table.
// They return 0, or with a message in err: -1 when no candidate name
// loads (dlerror of the first), -3 when required symbols are missing. The
// name that loaded is written to path.
int npu_cuda_load(char *err, size_t errlen);
int npu_nvrtc_load(char *path, size_t pathlen, char *err, size_t errlen);
int npu_cublaslt_load(char *path, size_t pathlen, char *err, size_t errlen);

// The symbol table, for tests and diagnostics: entry i's name, library
// (NPU_LIB_*), whether it is required, and whether it was resolved. It
// returns NULL past the end.
const char *npu_cuda_symbol(int i, int *lib, int *required, int *resolved);

const char *npu_cuGetErrorName(int rc);
const char *npu_cuGetErrorString(int rc);

int npu_cuInit(void);
int npu_cuDriverGetVersion(int *version);
int npu_cuDeviceGetCount(int *count);
int npu_cuDeviceGet(int *dev, int ordinal);
int npu_cuDeviceGetName(char *name, int len, int dev);
int npu_cuDeviceGetAttribute(int *value, int attr, int dev);
int npu_cuDeviceTotalMem(size_t *bytes, int dev);
int npu_cuDevicePrimaryCtxRetain(uintptr_t *ctx, int dev);
int npu_cuDevicePrimaryCtxRelease(int dev);
int npu_ctx_bind(uintptr_t ctx);

int npu_cuStreamCreate(uintptr_t ctx, uintptr_t *stream);
int npu_cuStreamSynchronize(uintptr_t ctx, uintptr_t stream);
int npu_cuStreamDestroy(uintptr_t ctx, uintptr_t stream);

int npu_cuMemGetInfo(uintptr_t ctx, size_t *free_bytes, size_t *total_bytes);
int npu_cuMemAlloc(uintptr_t ctx, uint64_t *ptr, size_t bytes);
int npu_cuMemFree(uintptr_t ctx, uint64_t ptr);
// npu_has_async_alloc reports whether the stream-ordered allocator
// (cuMemAllocAsync, cuMemFreeAsync, the device's default pool) resolved.
int npu_has_async_alloc(void);
int npu_cuMemAllocAsync(uintptr_t ctx, uint64_t *ptr, size_t bytes, uintptr_t stream);
int npu_cuMemFreeAsync(uintptr_t ctx, uint64_t ptr, uintptr_t stream);
// npu_mempool_keep sets the device's default pool to keep freed memory
// (release threshold UINT64_MAX: a caching allocator); npu_mempool_trim
// returns the pool's unused memory to the device.
int npu_mempool_keep(uintptr_t ctx, int dev);
int npu_mempool_trim(uintptr_t ctx, int dev);

int npu_cuMemcpyHtoDAsync(uintptr_t ctx, uint64_t dst, const void *src, size_t bytes, uintptr_t stream);
int npu_cuMemcpyDtoHAsync(uintptr_t ctx, void *dst, uint64_t src, size_t bytes, uintptr_t stream);
int npu_cuMemcpyDtoDAsync(uintptr_t ctx, uint64_t dst, uint64_t src, size_t bytes, uintptr_t stream);
int npu_cuMemsetD8Async(uintptr_t ctx, uint64_t dst, unsigned char v, size_t n, uintptr_t stream);
int npu_cuMemsetD16Async(uintptr_t ctx, uint64_t dst, unsigned short v, size_t n, uintptr_t stream);
int npu_cuMemsetD32Async(uintptr_t ctx, uint64_t dst, unsigned int v, size_t n, uintptr_t stream);

int npu_cuModuleLoadData(uintptr_t ctx, uintptr_t *mod, const void *image);
int npu_cuModuleGetFunction(uintptr_t ctx, uintptr_t *fn, uintptr_t mod, const char *name);
int npu_cuFuncSetMaxDynamicShared(uintptr_t ctx, uintptr_t fn, int bytes);
// npu_cuLaunch launches fn with nargs parameters, each in one 8-byte slot
// of args (a 4-byte parameter in the slot's low bytes); with pdl through
// cuLaunchKernelEx with programmatic stream serialization (the kernel may
// start while the previous one finishes: it must griddepcontrol.wait
// before touching memory, kernels/common.cuh pdl_prologue).
int npu_cuLaunch(uintptr_t ctx, uintptr_t fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
		 unsigned bz, unsigned shmem, uintptr_t stream, const uint64_t *args, int nargs, int pdl);
// npu_cuHasLaunchEx reports whether the driver has cuLaunchKernelEx.
int npu_cuHasLaunchEx(void);

int npu_cuEventCreate(uintptr_t ctx, uintptr_t *ev);
int npu_cuEventRecord(uintptr_t ctx, uintptr_t ev, uintptr_t stream);
int npu_cuEventSynchronize(uintptr_t ctx, uintptr_t ev);
int npu_cuEventElapsedTime(uintptr_t ctx, float *ms, uintptr_t start, uintptr_t end);
int npu_cuEventDestroy(uintptr_t ctx, uintptr_t ev);

// CUDA graphs (stream capture). npu_has_graphs reports whether the
// graph API resolved. npu_cuStreamBeginCapture starts a thread-local
// capture of stream; npu_graph_end ends it and instantiates the graph
// into *exec (the CUgraph itself is destroyed at once). npu_graph_mem
// reads the device's graph-memory use (bytes in use by graph
// allocations, bytes reserved for them).
int npu_has_graphs(void);
int npu_cuStreamBeginCapture(uintptr_t ctx, uintptr_t stream);
int npu_graph_end(uintptr_t ctx, uintptr_t stream, uintptr_t *exec);
int npu_cuGraphLaunch(uintptr_t ctx, uintptr_t exec, uintptr_t stream);
// npu_cuGraphUpload maps an instantiated graph's memory and uploads it to
// the device without running it (NPU_SHIM_SYMBOL_MISSING before CUDA 11.1).
int npu_cuGraphUpload(uintptr_t ctx, uintptr_t exec, uintptr_t stream);
int npu_cuGraphExecDestroy(uintptr_t ctx, uintptr_t exec);
int npu_graph_mem(uintptr_t ctx, int dev, uint64_t *used, uint64_t *reserved);
int npu_cuDeviceGraphMemTrim(uintptr_t ctx, int dev);

// NVRTC.
int npu_nvrtcVersion(int *major, int *minor);
const char *npu_nvrtcGetErrorString(int rc);
// npu_nvrtc_build compiles src (named name) with the newline-separated
// options and returns the CUBIN and the compiler log in malloc'ed buffers
// (*cubin NULL when compilation failed); the caller frees both.
int npu_nvrtc_build(const char *src, const char *name, const char *options, char **cubin, size_t *cubin_len,
		    char **log, size_t *log_len);

// cuBLASLt.
size_t npu_cublasLtGetVersion(void);
int npu_cublasLtCreate(uintptr_t ctx, uintptr_t *handle);
int npu_cublasLtDestroy(uintptr_t handle);
// npu_lt_plan_create describes the column-major GEMM
// D[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * D with A and B of
// type ab_type, D of type d_type, fp32 compute and scale, and picks the
// heuristic's best algorithm within ws_bytes of workspace for operands
// whose addresses are multiples of align bytes (cuBLASLt assumes 256).
// a_scale_mode and b_scale_mode, when not negative, are the
// cublasLtMatmulMatrixScale_t of A's and B's scale tensors (FP8 block
// scaling), whose addresses npu_lt_plan_run then takes; a_scale and
// b_scale are scale tensors of the shape for the heuristic (cuBLASLt
// refuses block scale modes with no scale pointer set).
int npu_lt_plan_create(uintptr_t ctx, uintptr_t handle, int transa, int transb, uint64_t m, uint64_t n, uint64_t k, int ab_type,
		       int d_type, int64_t lda, int64_t ldb, int64_t ldd, unsigned align, size_t ws_bytes, int a_scale_mode,
		       int b_scale_mode, uint64_t a_scale, uint64_t b_scale, uintptr_t *plan);
// npu_lt_plan_run enqueues the plan's GEMM; a_scale and b_scale are the
// scale tensors' device addresses for a plan with scale modes (else 0).
int npu_lt_plan_run(uintptr_t ctx, uintptr_t handle, uintptr_t plan, float alpha, float beta, uint64_t a,
		    uint64_t b, uint64_t d, uint64_t a_scale, uint64_t b_scale, uint64_t ws, size_t ws_bytes, uintptr_t stream);
void npu_lt_plan_destroy(uintptr_t plan);

#endif
