//go:build cgo

package cuda

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"strings"
	"sync"
	"unsafe"
)

// The Go side of the shim (shim.c): the only file of the package that
// calls C. Every function returns a Go error (a *cuError for a failing
// CUresult) and takes handles as uintptr, device pointers as uint64.

var (
	driverOnce sync.Once
	driverErr  error
)

// loadDriver dlopens libcuda.so.1 and calls cuInit, once per process.
func loadDriver() error {
	driverOnce.Do(func() {
		var buf [1024]C.char
		switch rc := C.npu_cuda_load(&buf[0], C.size_t(len(buf))); rc {
		case 0:
		case -1:
			driverErr = fmt.Errorf("libcuda.so.1 not found by the dynamic loader (LD_LIBRARY_PATH, ld.so.cache): install the NVIDIA driver: %s", C.GoString(&buf[0]))
			return
		default:
			driverErr = fmt.Errorf("libcuda.so.1 is too old for this backend: %s", C.GoString(&buf[0]))
			return
		}
		if rc := C.npu_cuInit(); rc != 0 {
			driverErr = fmt.Errorf("libcuda.so.1: cuInit failed with %v (no usable GPU or driver)", cuErr("cuInit", rc))
		}
	})
	return driverErr
}

// probe loads the CUDA driver and returns the number of GPUs and the
// driver API version.
func probe() (int, int, error) {
	if err := loadDriver(); err != nil {
		return 0, 0, err
	}
	var count, version C.int
	if rc := C.npu_cuDriverGetVersion(&version); rc != 0 {
		return 0, 0, fmt.Errorf("libcuda.so.1: %w", cuErr("cuDriverGetVersion", rc))
	}
	if rc := C.npu_cuDeviceGetCount(&count); rc != 0 {
		return 0, int(version), fmt.Errorf("libcuda.so.1: cuDeviceGetCount failed with CUresult %d (no usable GPU or driver)", int(rc))
	}
	if count == 0 {
		return 0, int(version), fmt.Errorf("libcuda.so.1 loads but sees no GPU")
	}
	return int(count), int(version), nil
}

// cuErr wraps a CUresult (nil for CUDA_SUCCESS).
func cuErr(op string, rc C.int) error {
	if rc == 0 {
		return nil
	}
	e := &cuError{Op: op, Code: int(rc)}
	if int(rc) != shimSymbolMissing && int(rc) != shimNotLoaded {
		e.Name = C.GoString(C.npu_cuGetErrorName(rc))
		e.Msg = C.GoString(C.npu_cuGetErrorString(rc))
	}
	return e
}

// statusErr wraps an NVRTC or cuBLASLt status (nil for 0).
func statusErr(op string, rc C.int) error {
	if rc == 0 {
		return nil
	}
	e := &cuError{Op: op, Code: int(rc)}
	if strings.HasPrefix(op, "nvrtc") && int(rc) > 0 {
		e.Name = C.GoString(C.npu_nvrtcGetErrorString(rc))
	}
	if strings.HasPrefix(op, "cublas") {
		e.Name = cublasStatusName(int(rc))
	}
	return e
}

// shimSymbols lists the shim's symbol table.
func shimSymbols() []symbolInfo {
	var out []symbolInfo
	for i := 0; ; i++ {
		var lib, req, res C.int
		name := C.npu_cuda_symbol(C.int(i), &lib, &req, &res)
		if name == nil {
			return out
		}
		out = append(out, symbolInfo{Name: C.GoString(name), Lib: int(lib), Required: req != 0, Resolved: res != 0})
	}
}

func drvDeviceGet(ordinal int) (int, error) {
	var dev C.int
	return int(dev), cuErr("cuDeviceGet", C.npu_cuDeviceGet(&dev, C.int(ordinal)))
}

func drvDeviceName(dev int) string {
	var buf [256]C.char
	if C.npu_cuDeviceGetName(&buf[0], C.int(len(buf)), C.int(dev)) != 0 {
		return "NVIDIA GPU"
	}
	return C.GoString(&buf[0])
}

func drvDeviceAttr(dev, attr int) (int, error) {
	var v C.int
	return int(v), cuErr("cuDeviceGetAttribute", C.npu_cuDeviceGetAttribute(&v, C.int(attr), C.int(dev)))
}

func drvTotalMem(dev int) (int64, error) {
	var n C.size_t
	return int64(n), cuErr("cuDeviceTotalMem", C.npu_cuDeviceTotalMem(&n, C.int(dev)))
}

func drvPrimaryCtxRetain(dev int) (uintptr, error) {
	var ctx C.uintptr_t
	return uintptr(ctx), cuErr("cuDevicePrimaryCtxRetain", C.npu_cuDevicePrimaryCtxRetain(&ctx, C.int(dev)))
}

func drvPrimaryCtxRelease(dev int) error {
	return cuErr("cuDevicePrimaryCtxRelease", C.npu_cuDevicePrimaryCtxRelease(C.int(dev)))
}

func drvStreamCreate(ctx uintptr) (uintptr, error) {
	var s C.uintptr_t
	return uintptr(s), cuErr("cuStreamCreate", C.npu_cuStreamCreate(C.uintptr_t(ctx), &s))
}

func drvStreamSync(ctx, s uintptr) error {
	return cuErr("cuStreamSynchronize", C.npu_cuStreamSynchronize(C.uintptr_t(ctx), C.uintptr_t(s)))
}

func drvStreamDestroy(ctx, s uintptr) error {
	return cuErr("cuStreamDestroy", C.npu_cuStreamDestroy(C.uintptr_t(ctx), C.uintptr_t(s)))
}

func drvMemGetInfo(ctx uintptr) (free, total int64, err error) {
	var f, t C.size_t
	err = cuErr("cuMemGetInfo", C.npu_cuMemGetInfo(C.uintptr_t(ctx), &f, &t))
	return int64(f), int64(t), err
}

func drvHasAsyncAlloc() bool { return C.npu_has_async_alloc() != 0 }

// drvMemAlloc allocates n bytes, stream-ordered on s when async.
func drvMemAlloc(ctx uintptr, n int, s uintptr, async bool) (uint64, error) {
	var p C.uint64_t
	if async {
		return uint64(p), cuErr("cuMemAllocAsync", C.npu_cuMemAllocAsync(C.uintptr_t(ctx), &p, C.size_t(n), C.uintptr_t(s)))
	}
	return uint64(p), cuErr("cuMemAlloc", C.npu_cuMemAlloc(C.uintptr_t(ctx), &p, C.size_t(n)))
}

// drvMemFree frees p, stream-ordered on s when async.
func drvMemFree(ctx uintptr, p uint64, s uintptr, async bool) error {
	if async {
		return cuErr("cuMemFreeAsync", C.npu_cuMemFreeAsync(C.uintptr_t(ctx), C.uint64_t(p), C.uintptr_t(s)))
	}
	return cuErr("cuMemFree", C.npu_cuMemFree(C.uintptr_t(ctx), C.uint64_t(p)))
}

func drvMemPoolKeep(ctx uintptr, dev int) error {
	return cuErr("cuMemPoolSetAttribute", C.npu_mempool_keep(C.uintptr_t(ctx), C.int(dev)))
}

func drvMemPoolTrim(ctx uintptr, dev int) error {
	return cuErr("cuMemPoolTrimTo", C.npu_mempool_trim(C.uintptr_t(ctx), C.int(dev)))
}

// drvHtoD enqueues a copy of src to dst. From pageable memory the driver
// copies src to its staging memory before returning, so src may be
// reused at once (the Upload contract).
func drvHtoD(ctx uintptr, dst uint64, src []byte, s uintptr) error {
	if len(src) == 0 {
		return nil
	}
	return cuErr("cuMemcpyHtoDAsync", C.npu_cuMemcpyHtoDAsync(C.uintptr_t(ctx), C.uint64_t(dst), unsafe.Pointer(&src[0]), C.size_t(len(src)), C.uintptr_t(s)))
}

// drvDtoH copies src to dst on s; into pageable memory the call returns
// once the copy is complete.
func drvDtoH(ctx uintptr, dst []byte, src uint64, s uintptr) error {
	if len(dst) == 0 {
		return nil
	}
	return cuErr("cuMemcpyDtoHAsync", C.npu_cuMemcpyDtoHAsync(C.uintptr_t(ctx), unsafe.Pointer(&dst[0]), C.uint64_t(src), C.size_t(len(dst)), C.uintptr_t(s)))
}

func drvDtoD(ctx uintptr, dst, src uint64, n int, s uintptr) error {
	if n == 0 {
		return nil
	}
	return cuErr("cuMemcpyDtoDAsync", C.npu_cuMemcpyDtoDAsync(C.uintptr_t(ctx), C.uint64_t(dst), C.uint64_t(src), C.size_t(n), C.uintptr_t(s)))
}

func drvMemsetD8(ctx uintptr, dst uint64, v byte, n int, s uintptr) error {
	if n == 0 {
		return nil
	}
	return cuErr("cuMemsetD8Async", C.npu_cuMemsetD8Async(C.uintptr_t(ctx), C.uint64_t(dst), C.uchar(v), C.size_t(n), C.uintptr_t(s)))
}

func drvMemsetD16(ctx uintptr, dst uint64, v uint16, n int, s uintptr) error {
	if n == 0 {
		return nil
	}
	return cuErr("cuMemsetD16Async", C.npu_cuMemsetD16Async(C.uintptr_t(ctx), C.uint64_t(dst), C.ushort(v), C.size_t(n), C.uintptr_t(s)))
}

func drvMemsetD32(ctx uintptr, dst uint64, v uint32, n int, s uintptr) error {
	if n == 0 {
		return nil
	}
	return cuErr("cuMemsetD32Async", C.npu_cuMemsetD32Async(C.uintptr_t(ctx), C.uint64_t(dst), C.uint(v), C.size_t(n), C.uintptr_t(s)))
}

func drvModuleLoad(ctx uintptr, image []byte) (uintptr, error) {
	if len(image) == 0 {
		return 0, fmt.Errorf("cuModuleLoadData: empty image")
	}
	// The image must stay put during the call only; copy it to C memory
	// so the driver never sees a Go pointer.
	cimg := C.CBytes(image)
	defer C.free(cimg)
	var mod C.uintptr_t
	return uintptr(mod), cuErr("cuModuleLoadData", C.npu_cuModuleLoadData(C.uintptr_t(ctx), &mod, cimg))
}

func drvModuleFunction(ctx, mod uintptr, name string) (uintptr, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var fn C.uintptr_t
	return uintptr(fn), cuErr("cuModuleGetFunction("+name+")", C.npu_cuModuleGetFunction(C.uintptr_t(ctx), &fn, C.uintptr_t(mod), cname))
}

func drvFuncMaxShared(ctx, fn uintptr, bytes int) error {
	return cuErr("cuFuncSetAttribute", C.npu_cuFuncSetMaxDynamicShared(C.uintptr_t(ctx), C.uintptr_t(fn), C.int(bytes)))
}

// drvLaunch launches fn; args holds one 8-byte slot per kernel parameter.
// With pdl the launch allows programmatic dependent launch
// (cuLaunchKernelEx; the kernel waits for its predecessor itself).
func drvLaunch(ctx, fn uintptr, grid, block [3]uint32, shmem uint32, s uintptr, args []uint64, pdl bool) error {
	var p *C.uint64_t
	if len(args) > 0 {
		p = (*C.uint64_t)(unsafe.Pointer(&args[0]))
	}
	name, flag := "cuLaunchKernel", C.int(0)
	if pdl {
		name, flag = "cuLaunchKernelEx", 1
	}
	return cuErr(name, C.npu_cuLaunch(C.uintptr_t(ctx), C.uintptr_t(fn),
		C.uint(grid[0]), C.uint(grid[1]), C.uint(grid[2]), C.uint(block[0]), C.uint(block[1]), C.uint(block[2]),
		C.uint(shmem), C.uintptr_t(s), p, C.int(len(args)), flag))
}

// drvHasLaunchEx reports whether the driver has cuLaunchKernelEx.
func drvHasLaunchEx() bool { return C.npu_cuHasLaunchEx() != 0 }

func drvEventCreate(ctx uintptr) (uintptr, error) {
	var e C.uintptr_t
	return uintptr(e), cuErr("cuEventCreate", C.npu_cuEventCreate(C.uintptr_t(ctx), &e))
}

func drvEventRecord(ctx, e, s uintptr) error {
	return cuErr("cuEventRecord", C.npu_cuEventRecord(C.uintptr_t(ctx), C.uintptr_t(e), C.uintptr_t(s)))
}

func drvEventSync(ctx, e uintptr) error {
	return cuErr("cuEventSynchronize", C.npu_cuEventSynchronize(C.uintptr_t(ctx), C.uintptr_t(e)))
}

func drvEventElapsed(ctx, start, end uintptr) (float32, error) {
	var ms C.float
	return float32(ms), cuErr("cuEventElapsedTime", C.npu_cuEventElapsedTime(C.uintptr_t(ctx), &ms, C.uintptr_t(start), C.uintptr_t(end)))
}

func drvEventDestroy(ctx, e uintptr) error {
	return cuErr("cuEventDestroy", C.npu_cuEventDestroy(C.uintptr_t(ctx), C.uintptr_t(e)))
}

func drvHasGraphs() bool { return C.npu_has_graphs() != 0 }

func drvBeginCapture(ctx, s uintptr) error {
	return cuErr("cuStreamBeginCapture", C.npu_cuStreamBeginCapture(C.uintptr_t(ctx), C.uintptr_t(s)))
}

// drvEndCapture ends the capture on s and instantiates its graph.
func drvEndCapture(ctx, s uintptr) (uintptr, error) {
	var e C.uintptr_t
	return uintptr(e), cuErr("cuStreamEndCapture/cuGraphInstantiateWithFlags", C.npu_graph_end(C.uintptr_t(ctx), C.uintptr_t(s), &e))
}

func drvGraphLaunch(ctx, exec, s uintptr) error {
	return cuErr("cuGraphLaunch", C.npu_cuGraphLaunch(C.uintptr_t(ctx), C.uintptr_t(exec), C.uintptr_t(s)))
}

// drvGraphUpload prepares exec on s without running it; errMissing when
// the driver lacks cuGraphUpload.
func drvGraphUpload(ctx, exec, s uintptr) error {
	return cuErr("cuGraphUpload", C.npu_cuGraphUpload(C.uintptr_t(ctx), C.uintptr_t(exec), C.uintptr_t(s)))
}

func drvGraphExecDestroy(ctx, exec uintptr) error {
	return cuErr("cuGraphExecDestroy", C.npu_cuGraphExecDestroy(C.uintptr_t(ctx), C.uintptr_t(exec)))
}

// drvGraphMem is the device's graph memory: in use and reserved bytes.
func drvGraphMem(ctx uintptr, dev int) (used, reserved int64, err error) {
	var u, r C.uint64_t
	err = cuErr("cuDeviceGetGraphMemAttribute", C.npu_graph_mem(C.uintptr_t(ctx), C.int(dev), &u, &r))
	return int64(u), int64(r), err
}

func drvGraphMemTrim(ctx uintptr, dev int) error {
	return cuErr("cuDeviceGraphMemTrim", C.npu_cuDeviceGraphMemTrim(C.uintptr_t(ctx), C.int(dev)))
}

var (
	nvrtcOnce sync.Once
	nvrtcPath string
	nvrtcErr  error
)

// nvrtcLoad dlopens NVRTC (libnvrtc.so.13, else .12), once per process.
func nvrtcLoad() (string, error) {
	nvrtcOnce.Do(func() {
		var path [256]C.char
		var buf [1024]C.char
		switch rc := C.npu_nvrtc_load(&path[0], C.size_t(len(path)), &buf[0], C.size_t(len(buf))); rc {
		case 0:
			nvrtcPath = C.GoString(&path[0])
		case -1:
			nvrtcErr = fmt.Errorf("libnvrtc.so.13 (or .12) not found by the dynamic loader: install the CUDA runtime compiler (the cuda-nvrtc package of CUDA 12 or 13): %s", C.GoString(&buf[0]))
		default:
			nvrtcErr = fmt.Errorf("NVRTC is too old for this backend: %s", C.GoString(&buf[0]))
		}
	})
	return nvrtcPath, nvrtcErr
}

func nvrtcVersion() (int, int, error) {
	var major, minor C.int
	return int(major), int(minor), statusErr("nvrtcVersion", C.npu_nvrtcVersion(&major, &minor))
}

// nvrtcBuild compiles one CUDA C source to a CUBIN with opts; the log
// comes back also on success (warnings).
func nvrtcBuild(src, name string, opts []string) ([]byte, string, error) {
	csrc, cname, copts := C.CString(src), C.CString(name), C.CString(strings.Join(opts, "\n"))
	defer C.free(unsafe.Pointer(csrc))
	defer C.free(unsafe.Pointer(cname))
	defer C.free(unsafe.Pointer(copts))
	var cubin, log *C.char
	var cubinLen, logLen C.size_t
	rc := C.npu_nvrtc_build(csrc, cname, copts, &cubin, &cubinLen, &log, &logLen)
	var img []byte
	var msg string
	if cubin != nil {
		img = C.GoBytes(unsafe.Pointer(cubin), C.int(cubinLen))
		C.free(unsafe.Pointer(cubin))
	}
	if log != nil {
		msg = C.GoStringN(log, C.int(logLen))
		C.free(unsafe.Pointer(log))
	}
	return img, strings.TrimSpace(msg), statusErr("nvrtcCompileProgram("+name+")", rc)
}

var (
	ltOnce sync.Once
	ltPath string
	ltErr  error
)

// ltLoad dlopens cuBLASLt (libcublasLt.so.13, else .12), once per process.
func ltLoad() (string, error) {
	ltOnce.Do(func() {
		var path [256]C.char
		var buf [1024]C.char
		switch rc := C.npu_cublaslt_load(&path[0], C.size_t(len(path)), &buf[0], C.size_t(len(buf))); rc {
		case 0:
			ltPath = C.GoString(&path[0])
		case -1:
			ltErr = fmt.Errorf("libcublasLt.so.13 (or .12) not found by the dynamic loader: install cuBLAS (the libcublas package of CUDA 12 or 13): %s", C.GoString(&buf[0]))
		default:
			ltErr = fmt.Errorf("cuBLASLt is too old for this backend: %s", C.GoString(&buf[0]))
		}
	})
	return ltPath, ltErr
}

func ltVersion() int { return int(C.npu_cublasLtGetVersion()) }

func ltCreate(ctx uintptr) (uintptr, error) {
	var h C.uintptr_t
	return uintptr(h), statusErr("cublasLtCreate", C.npu_cublasLtCreate(C.uintptr_t(ctx), &h))
}

func ltDestroy(h uintptr) { C.npu_cublasLtDestroy(C.uintptr_t(h)) }

// ltPlanCreate describes one column-major GEMM (see shim.h) and picks its
// algorithm; aMode and bMode are A's and B's scale modes (scaleNone: no
// scale tensors), aScale and bScale scale tensors of the shape.
func ltPlanCreate(ctx, h uintptr, transA, transB bool, m, n, k int, abType, dType int, lda, ldb, ldd int, align, ws int, aMode, bMode int, aScale, bScale uint64) (uintptr, error) {
	var p C.uintptr_t
	ta, tb := C.int(0), C.int(0)
	if transA {
		ta = 1
	}
	if transB {
		tb = 1
	}
	rc := C.npu_lt_plan_create(C.uintptr_t(ctx), C.uintptr_t(h), ta, tb, C.uint64_t(m), C.uint64_t(n), C.uint64_t(k),
		C.int(abType), C.int(dType), C.int64_t(lda), C.int64_t(ldb), C.int64_t(ldd), C.uint(align), C.size_t(ws),
		C.int(aMode), C.int(bMode), C.uint64_t(aScale), C.uint64_t(bScale), &p)
	return uintptr(p), statusErr("cublasLtMatmulAlgoGetHeuristic", rc)
}

// ltPlanRun enqueues a plan's GEMM; aScale and bScale are its scale
// tensors (0 for a plan without scale modes).
func ltPlanRun(ctx, h, plan uintptr, alpha, beta float32, a, b, d, aScale, bScale, ws uint64, wsBytes int, s uintptr) error {
	return statusErr("cublasLtMatmul", C.npu_lt_plan_run(C.uintptr_t(ctx), C.uintptr_t(h), C.uintptr_t(plan),
		C.float(alpha), C.float(beta), C.uint64_t(a), C.uint64_t(b), C.uint64_t(d), C.uint64_t(aScale), C.uint64_t(bScale),
		C.uint64_t(ws), C.size_t(wsBytes), C.uintptr_t(s)))
}

func ltPlanDestroy(p uintptr) { C.npu_lt_plan_destroy(C.uintptr_t(p)) }

// shimConstants pairs the Go constants of shim_types.go with shim.h's,
// for TestShimConstants.
func shimConstants() map[string][2]int {
	return map[string][2]int{
		"symbol missing": {shimSymbolMissing, int(C.NPU_SHIM_SYMBOL_MISSING)},
		"not loaded":     {shimNotLoaded, int(C.NPU_SHIM_NOT_LOADED)},
		"SM count":       {attrSMCount, int(C.NPU_CU_ATTR_MULTIPROCESSOR_COUNT)},
		"L2":             {attrL2Bytes, int(C.NPU_CU_ATTR_L2_CACHE_SIZE)},
		"cc major":       {attrCCMajor, int(C.NPU_CU_ATTR_CC_MAJOR)},
		"cc minor":       {attrCCMinor, int(C.NPU_CU_ATTR_CC_MINOR)},
		"shared optin":   {attrMaxSharedOptin, int(C.NPU_CU_ATTR_MAX_SHARED_PER_BLOCK_OPTIN)},
		"pools":          {attrMemPoolSupported, int(C.NPU_CU_ATTR_MEMORY_POOLS_SUPPORTED)},
		"out of memory":  {cudaErrorOutOfMemory, int(C.NPU_CUDA_ERROR_OUT_OF_MEMORY)},
		"R_32F":          {cudaR32F, int(C.NPU_CUDA_R_32F)},
		"R_16F":          {cudaR16F, int(C.NPU_CUDA_R_16F)},
		"R_16BF":         {cudaR16BF, int(C.NPU_CUDA_R_16BF)},
		"lib cuda":       {libCUDA, int(C.NPU_LIB_CUDA)},
		"lib nvrtc":      {libNVRTC, int(C.NPU_LIB_NVRTC)},
		"lib cublasLt":   {libCublasLt, int(C.NPU_LIB_CUBLASLT)},
	}
}
