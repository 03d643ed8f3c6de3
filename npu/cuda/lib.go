//go:build cgo

package cuda

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

// The foreign API, each symbol declared once as a function pointer type.
typedef int (*npu_cuInit_t)(unsigned int flags);
typedef int (*npu_cuDriverGetVersion_t)(int *version);
typedef int (*npu_cuDeviceGetCount_t)(int *count);

// npu_cuda_probe dlopens the driver and counts the GPUs. It returns 0 on
// success, -1 when the library does not load (dlerror in err), -2 when a
// symbol is missing, or the CUresult of a failing call.
static int npu_cuda_probe(int *count, int *version, char *err, size_t errlen) {
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (h == NULL) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return -1;
	}
	npu_cuInit_t init = (npu_cuInit_t)dlsym(h, "cuInit");
	npu_cuDriverGetVersion_t ver = (npu_cuDriverGetVersion_t)dlsym(h, "cuDriverGetVersion");
	npu_cuDeviceGetCount_t cnt = (npu_cuDeviceGetCount_t)dlsym(h, "cuDeviceGetCount");
	if (init == NULL || ver == NULL || cnt == NULL) {
		snprintf(err, errlen, "libcuda.so.1 lacks cuInit/cuDriverGetVersion/cuDeviceGetCount");
		return -2;
	}
	int rc = init(0);
	if (rc != 0) {
		return rc;
	}
	rc = ver(version);
	if (rc != 0) {
		return rc;
	}
	return cnt(count);
}
*/
import "C"

import "fmt"

// probe loads the CUDA driver and returns the number of GPUs and the
// driver API version.
func probe() (int, int, error) {
	var count, version C.int
	var buf [512]C.char
	switch rc := C.npu_cuda_probe(&count, &version, &buf[0], C.size_t(len(buf))); rc {
	case 0:
		if count == 0 {
			return 0, int(version), fmt.Errorf("libcuda.so.1 loads but sees no GPU")
		}
		return int(count), int(version), nil
	case -1:
		return 0, 0, fmt.Errorf("libcuda.so.1 not found by the dynamic loader (LD_LIBRARY_PATH, ld.so.cache): install the NVIDIA driver: %s", C.GoString(&buf[0]))
	case -2:
		return 0, 0, fmt.Errorf("%s", C.GoString(&buf[0]))
	default:
		return 0, 0, fmt.Errorf("libcuda.so.1: cuInit/cuDeviceGetCount failed with CUresult %d (no usable GPU or driver)", int(rc))
	}
}
