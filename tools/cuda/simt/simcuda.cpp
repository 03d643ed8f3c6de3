// simcuda: a stand-in for the three NVIDIA libraries npu/cuda loads at
// run time (libcuda.so.1, libnvrtc.so.12, libcublasLt.so.12), built as
// one shared object and named three ways in a directory put on
// LD_LIBRARY_PATH (build.sh). It runs the backend, unchanged, on the CPU:
//
//   - NVRTC: nvrtcCompileProgram rewrites the source it is handed with
//     prep.py --module and compiles it with g++ against simt.h (the CUDA
//     execution model, emulated) into a shared object, which is the
//     "CUBIN" (magic, length, the object's bytes); a source g++ refuses
//     is a compile error with g++'s log.
//   - The driver: device memory is host memory (CUdeviceptr = address),
//     at most simcuda_total bytes; cuModuleLoadData loads the object,
//     cuModuleGetFunction finds simt_launch_<name>; a launch runs the
//     grid to completion before returning (a stream is in-order, so this
//     is one of the executions CUDA allows), checking the block size and
//     the dynamic shared memory against the opt-in limit as a GPU would;
//     stream capture records launches (their parameters copied),
//     copies, memsets and event records, and a graph replays them.
//   - cuBLASLt: the column-major GEMMs npu/cuda plans (F32, BF16 or F16
//     A and B, F32 or BF16 D, fp32 accumulation in fp64 here); scaled
//     FP8 is refused as unsupported, and the version reported (12.8) keeps
//     the backend off that path.
//
// A device that is not a GPU: timings mean nothing, results are the
// kernels' arithmetic (mma.sync emulated exactly, libm for expf). What
// it proves is the code between the model and the kernels: launch
// geometry, argument order, temporaries, graph capture, error words.
// SIMCUDA_TRACE=1 prints every launch (kernel, grid, block, shared
// memory) on stderr.
#include "halves.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#if !defined(SIMT_DIR) || !defined(SIMT_BUILD)
#error "build with build.sh (-DSIMT_DIR=\"<the directory of simt.h and prep.py>\" -DSIMT_BUILD=<n>)"
#endif

namespace {

typedef uint64_t CUdeviceptr;
constexpr char magic[8] = {'S', 'I', 'M', 'C', 'U', 'D', 'A', 0};

enum {
	OK = 0,
	ERR_INVALID_VALUE = 1,
	ERR_OUT_OF_MEMORY = 2,
	ERR_INVALID_DEVICE = 101,
	ERR_INVALID_IMAGE = 200,
	ERR_INVALID_HANDLE = 400,
	ERR_NOT_FOUND = 500,
	ERR_LAUNCH_OUT_OF_RESOURCES = 701,
	ERR_NOT_SUPPORTED = 801,
	ERR_CAPTURE_UNSUPPORTED = 900,
};

std::recursive_mutex mu;
size_t total = 8ull << 30, used = 0, graphBytes = 0;
std::map<uintptr_t, size_t> allocs;

using Op = std::function<void()>;

struct Owned {
	std::vector<void *> blocks;
	size_t bytes = 0;
	~Owned() {
		std::lock_guard<std::recursive_mutex> l(mu);
		for (void *p : blocks) {
			free(p);
		}
		graphBytes -= bytes;
	}
};

struct Stream {
	bool capturing = false;
	std::vector<Op> ops;
	std::shared_ptr<Owned> owned;
};

struct Graph {
	std::vector<Op> ops;
	std::shared_ptr<Owned> owned;
};

struct Func {
	void (*launch)(const unsigned *, unsigned, void **);
	const int *args;
	std::string name;
	int maxShared = 48 << 10;
};

// run executes op now, or records it when s is capturing.
int run(void *s, Op op) {
	Stream *st = (Stream *)s;
	if (st != nullptr && st->capturing) {
		st->ops.push_back(std::move(op));
		return OK;
	}
	std::lock_guard<std::recursive_mutex> l(mu);
	op();
	return OK;
}

void *allocate(size_t n) {
	const size_t r = (n + 255) & ~(size_t)255;
	void *p = aligned_alloc(256, r == 0 ? 256 : r);
	if (p != nullptr && r <= (64u << 20)) {
		memset(p, 0xff, r); // fresh device memory is not zeroed: NaNs show a read of it
	}
	return p;
}

double nowMs() {
	return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int launch(Func *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shmem,
	   void *s, void **params) {
	if (f == nullptr) {
		return ERR_INVALID_HANDLE;
	}
	const unsigned long threads = (unsigned long)bx * by * bz;
	if (gx == 0 || gy == 0 || gz == 0 || threads == 0 || gy > 65535 || gz > 65535 || gx > 0x7fffffffu) {
		return ERR_INVALID_VALUE;
	}
	if (threads > 1024 || bz > 64) {
		return ERR_INVALID_VALUE;
	}
	if ((int)shmem > f->maxShared) {
		fprintf(stderr, "simcuda: %s: %u bytes of dynamic shared memory over its limit %d\n", f->name.c_str(),
			shmem, f->maxShared);
		return ERR_INVALID_VALUE;
	}
	static const bool trace = getenv("SIMCUDA_TRACE") != nullptr;
	if (trace) {
		fprintf(stderr, "simcuda: launch %s grid %u,%u,%u block %u,%u,%u shared %u%s\n", f->name.c_str(), gx, gy, gz,
			bx, by, bz, shmem, s != nullptr && ((Stream *)s)->capturing ? " (captured)" : "");
	}
	// The parameters, copied: a capture replays them later, and the
	// caller's slots may change in between.
	int n = 0;
	while (f->args[n] != 0) {
		n++;
	}
	auto blob = std::make_shared<std::vector<uint64_t>>(n);
	for (int i = 0; i < n; i++) {
		memcpy(&(*blob)[i], params[i], f->args[i]);
	}
	const unsigned d[6] = {gx, gy, gz, bx, by, bz};
	std::vector<unsigned> dims(d, d + 6);
	return run(s, [f, blob, dims, shmem, n] {
		std::vector<void *> p(n);
		for (int i = 0; i < n; i++) {
			p[i] = &(*blob)[i];
		}
		f->launch(dims.data(), shmem, p.data());
	});
}

// NVRTC programs.
struct Prog {
	std::string src, name, log;
	std::vector<char> cubin;
};

std::string shellQuote(const std::string &s) {
	std::string r = "'";
	for (char c : s) {
		if (c == '\'') {
			r += "'\\''";
		} else {
			r += c;
		}
	}
	return r + "'";
}

std::string slurp(const std::string &path) {
	FILE *f = fopen(path.c_str(), "rb");
	if (f == nullptr) {
		return "";
	}
	std::string s;
	char buf[65536];
	size_t n;
	while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
		s.append(buf, n);
	}
	fclose(f);
	return s;
}

const char *simtDir() {
	const char *d = getenv("NPUSERVE_SIMT_DIR");
	return d != nullptr && *d ? d : SIMT_DIR;
}

// cuBLASLt objects.
struct MatmulDesc {
	int transa = 0, transb = 0, amode = 0, bmode = 0;
	const void *ascale = nullptr, *bscale = nullptr;
};
struct Layout {
	int type;
	uint64_t rows, cols;
	int64_t ld;
};
enum { R_32F = 0, R_16F = 2, R_16BF = 14 };

double loadElem(const void *p, int type, size_t i) {
	switch (type) {
	case R_32F:
		return ((const float *)p)[i];
	case R_16BF:
		return simt_bf16_f32(((const uint16_t *)p)[i]);
	case R_16F:
		return simt_f16_to_f32(((const uint16_t *)p)[i]);
	}
	return NAN;
}

void storeElem(void *p, int type, size_t i, double v) {
	const float f = (float)v;
	if (type == R_32F) {
		((float *)p)[i] = f;
		return;
	}
	((uint16_t *)p)[i] = (uint16_t)simt_bf16_rn(f);
}

bool supported(const MatmulDesc *op, const Layout *a, const Layout *b, const Layout *d) {
	auto ab = [](int t) { return t == R_32F || t == R_16BF || t == R_16F; };
	return op->amode == 0 && op->bmode == 0 && ab(a->type) && a->type == b->type && (d->type == R_32F || d->type == R_16BF);
}

} // namespace

extern "C" {

// ---- the driver API (libcuda.so.1) ----
int cuInit(unsigned) { return OK; }
int cuDriverGetVersion(int *v) {
	*v = 13000;
	return OK;
}
int cuDeviceGetCount(int *n) {
	*n = 1;
	return OK;
}
int cuDeviceGet(int *dev, int ordinal) {
	if (ordinal != 0) {
		return ERR_INVALID_DEVICE;
	}
	*dev = 0;
	return OK;
}
int cuDeviceGetName(char *name, int len, int) {
	snprintf(name, len, "simcuda (sm_90 emulated on the CPU)");
	return OK;
}
int cuDeviceGetAttribute(int *v, int attr, int) {
	switch (attr) {
	case 1: // max threads per block
		*v = 1024;
		break;
	case 16: // SMs: the H200's, so launches take the shapes they take there
		*v = 132;
		break;
	case 38: // L2 bytes
		*v = 60 << 20;
		break;
	case 75:
		*v = 9;
		break;
	case 76:
		*v = 0;
		break;
	case 97: // max dynamic shared memory per block, opted in
		*v = 232448;
		break;
	case 115: // memory pools
		*v = 1;
		break;
	default:
		*v = 0;
	}
	return OK;
}
int cuDeviceTotalMem_v2(size_t *bytes, int) {
	*bytes = total;
	return OK;
}
int cuDevicePrimaryCtxRetain(void **ctx, int) {
	*ctx = (void *)0x5c;
	return OK;
}
int cuDevicePrimaryCtxRelease_v2(int) { return OK; }
int cuCtxGetCurrent(void **ctx) {
	*ctx = (void *)0x5c;
	return OK;
}
int cuCtxSetCurrent(void *) { return OK; }
int cuStreamCreate(void **s, unsigned) {
	*s = new Stream();
	return OK;
}
int cuStreamSynchronize(void *s) { return s != nullptr && ((Stream *)s)->capturing ? ERR_CAPTURE_UNSUPPORTED : OK; }
int cuStreamDestroy_v2(void *s) {
	delete (Stream *)s;
	return OK;
}
int cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes) {
	std::lock_guard<std::recursive_mutex> l(mu);
	*free_bytes = total - used - graphBytes;
	*total_bytes = total;
	return OK;
}
// reserve allocates n bytes within the device's total (mu held).
static void *reserve(size_t n) { return used + graphBytes + n > total ? nullptr : allocate(n); }
int cuMemAlloc_v2(CUdeviceptr *ptr, size_t n) {
	std::lock_guard<std::recursive_mutex> l(mu);
	void *p = reserve(n);
	if (p == nullptr) {
		return ERR_OUT_OF_MEMORY;
	}
	allocs[(uintptr_t)p] = n;
	used += n;
	*ptr = (CUdeviceptr)(uintptr_t)p;
	return OK;
}
int cuMemFree_v2(CUdeviceptr p) {
	std::lock_guard<std::recursive_mutex> l(mu);
	auto it = allocs.find((uintptr_t)p);
	if (it == allocs.end()) {
		return ERR_INVALID_VALUE;
	}
	used -= it->second;
	allocs.erase(it);
	free((void *)(uintptr_t)p);
	return OK;
}
int cuMemAllocAsync(CUdeviceptr *ptr, size_t n, void *s) {
	Stream *st = (Stream *)s;
	if (st == nullptr || !st->capturing) {
		return cuMemAlloc_v2(ptr, n);
	}
	// Inside a capture the graph owns the allocation, until it is destroyed.
	std::lock_guard<std::recursive_mutex> l(mu);
	void *p = reserve(n);
	if (p == nullptr) {
		return ERR_OUT_OF_MEMORY;
	}
	st->owned->blocks.push_back(p);
	st->owned->bytes += n;
	graphBytes += n;
	*ptr = (CUdeviceptr)(uintptr_t)p;
	return OK;
}
int cuMemFreeAsync(CUdeviceptr p, void *s) {
	Stream *st = (Stream *)s;
	if (st != nullptr && st->capturing) {
		for (void *q : st->owned->blocks) {
			if ((uintptr_t)q == p) {
				return OK; // the graph's: freed with it
			}
		}
		return ERR_CAPTURE_UNSUPPORTED;
	}
	return cuMemFree_v2(p);
}
int cuDeviceGetDefaultMemPool(void **pool, int) {
	*pool = (void *)0x9e;
	return OK;
}
int cuMemPoolSetAttribute(void *, int, void *) { return OK; }
int cuMemPoolTrimTo(void *, size_t) { return OK; }
int cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *s) {
	return run(s, [=] { memcpy((void *)(uintptr_t)dst, src, n); });
}
int cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *s) {
	return run(s, [=] { memcpy(dst, (const void *)(uintptr_t)src, n); });
}
int cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void *s) {
	return run(s, [=] { memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n); });
}
int cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, void *s) {
	return run(s, [=] { memset((void *)(uintptr_t)dst, v, n); });
}
int cuMemsetD16Async(CUdeviceptr dst, unsigned short v, size_t n, void *s) {
	return run(s, [=] {
		for (size_t i = 0; i < n; i++) {
			((uint16_t *)(uintptr_t)dst)[i] = v;
		}
	});
}
int cuMemsetD32Async(CUdeviceptr dst, unsigned v, size_t n, void *s) {
	return run(s, [=] {
		for (size_t i = 0; i < n; i++) {
			((uint32_t *)(uintptr_t)dst)[i] = v;
		}
	});
}
int cuModuleLoadData(void **mod, const void *image) {
	const char *img = (const char *)image;
	if (memcmp(img, magic, 8) != 0) {
		return ERR_INVALID_IMAGE;
	}
	uint64_t n;
	memcpy(&n, img + 8, 8);
	char path[] = "/tmp/simcuda-module-XXXXXX";
	const int fd = mkstemp(path);
	if (fd < 0) {
		return ERR_INVALID_IMAGE;
	}
	const bool wrote = write(fd, img + 16, n) == (ssize_t)n;
	close(fd);
	void *h = wrote ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
	if (h == nullptr) {
		fprintf(stderr, "simcuda: cuModuleLoadData: %s\n", dlerror());
	}
	unlink(path);
	if (h == nullptr) {
		return ERR_INVALID_IMAGE;
	}
	*mod = h;
	return OK;
}
int cuModuleGetFunction(void **fn, void *mod, const char *name) {
	void *l = dlsym(mod, ("simt_launch_" + std::string(name)).c_str());
	void *a = dlsym(mod, ("simt_args_" + std::string(name)).c_str());
	if (l == nullptr || a == nullptr) {
		return ERR_NOT_FOUND;
	}
	Func *f = new Func();
	f->launch = (void (*)(const unsigned *, unsigned, void **))l;
	f->args = (const int *)a;
	f->name = name;
	*fn = f;
	return OK;
}
int cuFuncSetAttribute(void *fn, int attr, int value) {
	if (attr == 8) { // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
		if (value < 0 || value > 232448) {
			return ERR_INVALID_VALUE;
		}
		((Func *)fn)->maxShared = value;
	}
	return OK;
}
int cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		   unsigned shmem, void *s, void **params, void **) {
	return launch((Func *)fn, gx, gy, gz, bx, by, bz, shmem, s, params);
}
struct LaunchConfig {
	unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
	void *hStream;
	void *attrs;
	unsigned numAttrs;
};
int cuLaunchKernelEx(const LaunchConfig *c, void *fn, void **params, void **) {
	return launch((Func *)fn, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
		      c->sharedMemBytes, c->hStream, params);
}
int cuGetErrorName(int rc, const char **name) {
	switch (rc) {
	case OK:
		*name = "CUDA_SUCCESS";
		break;
	case ERR_INVALID_VALUE:
		*name = "CUDA_ERROR_INVALID_VALUE";
		break;
	case ERR_OUT_OF_MEMORY:
		*name = "CUDA_ERROR_OUT_OF_MEMORY";
		break;
	case ERR_INVALID_DEVICE:
		*name = "CUDA_ERROR_INVALID_DEVICE";
		break;
	case ERR_INVALID_IMAGE:
		*name = "CUDA_ERROR_INVALID_IMAGE";
		break;
	case ERR_INVALID_HANDLE:
		*name = "CUDA_ERROR_INVALID_HANDLE";
		break;
	case ERR_NOT_FOUND:
		*name = "CUDA_ERROR_NOT_FOUND";
		break;
	case ERR_CAPTURE_UNSUPPORTED:
		*name = "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED";
		break;
	default:
		*name = "CUDA_ERROR_UNKNOWN";
	}
	return OK;
}
int cuGetErrorString(int rc, const char **str) {
	cuGetErrorName(rc, str);
	return OK;
}
int cuEventCreate(void **ev, unsigned) {
	*ev = new double(0);
	return OK;
}
int cuEventRecord(void *ev, void *s) {
	return run(s, [ev] { *(double *)ev = nowMs(); });
}
int cuEventSynchronize(void *) { return OK; }
int cuEventElapsedTime(float *ms, void *a, void *b) {
	*ms = (float)(*(double *)b - *(double *)a);
	return OK;
}
int cuEventDestroy_v2(void *ev) {
	delete (double *)ev;
	return OK;
}
int cuStreamBeginCapture_v2(void *s, int) {
	Stream *st = (Stream *)s;
	if (st == nullptr || st->capturing) {
		return ERR_INVALID_VALUE;
	}
	st->capturing = true;
	st->ops.clear();
	st->owned = std::make_shared<Owned>();
	return OK;
}
int cuStreamEndCapture(void *s, void **graph) {
	Stream *st = (Stream *)s;
	if (st == nullptr || !st->capturing) {
		return ERR_INVALID_VALUE;
	}
	Graph *g = new Graph();
	g->ops.swap(st->ops);
	g->owned = st->owned;
	st->owned.reset();
	st->capturing = false;
	*graph = g;
	return OK;
}
int cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long) {
	*exec = new Graph(*(Graph *)graph);
	return OK;
}
int cuGraphLaunch(void *exec, void *s) {
	Graph *g = (Graph *)exec;
	return run(s, [g] {
		for (auto &op : g->ops) {
			op();
		}
	});
}
int cuGraphUpload(void *, void *) { return OK; }
int cuGraphExecDestroy(void *exec) {
	delete (Graph *)exec;
	return OK;
}
int cuGraphDestroy(void *g) {
	delete (Graph *)g;
	return OK;
}
int cuDeviceGetGraphMemAttribute(int, int attr, void *value) {
	std::lock_guard<std::recursive_mutex> l(mu);
	*(uint64_t *)value = attr == 0 || attr == 2 ? graphBytes : 0;
	return OK;
}
int cuDeviceGraphMemTrim(int) { return OK; }

// ---- NVRTC (libnvrtc.so.12) ----
int nvrtcVersion(int *major, int *minor) {
	// 12.<SIMT_BUILD>, from the emulator's sources (build.sh): no real
	// NVRTC's version, and a new one whenever the emulation changes, so
	// the backend's kernel cache never hands back a stale module.
	*major = 12;
	*minor = SIMT_BUILD;
	return OK;
}
const char *nvrtcGetErrorString(int rc) { return rc == 0 ? "NVRTC_SUCCESS" : rc == 6 ? "NVRTC_ERROR_COMPILATION" : "NVRTC_ERROR"; }
int nvrtcCreateProgram(void **prog, const char *src, const char *name, int, const char *const *, const char *const *) {
	Prog *p = new Prog();
	p->src = src;
	p->name = name ? name : "kernel.cu";
	*prog = p;
	return OK;
}
int nvrtcCompileProgram(void *prog, int nopts, const char *const *opts) {
	Prog *p = (Prog *)prog;
	char tmpl[] = "/tmp/simcuda-nvrtc-XXXXXX";
	if (mkdtemp(tmpl) == nullptr) {
		p->log = "simcuda: mkdtemp failed";
		return 6;
	}
	const std::string dir = tmpl, src = dir + "/" + p->name, mod = dir + "/module.cpp", so = dir + "/module.so";
	FILE *f = fopen(src.c_str(), "wb");
	fwrite(p->src.data(), 1, p->src.size(), f);
	fclose(f);
	std::string defs;
	for (int i = 0; i < nopts; i++) {
		if (strncmp(opts[i], "-D", 2) == 0) {
			defs += " " + shellQuote(opts[i]);
		}
	}
	const std::string sd = simtDir();
	const char *cxx = getenv("CXX");
	const std::string cmd = "python3 " + shellQuote(sd + "/prep.py") + " --module " + shellQuote(mod) + " " +
				shellQuote(src) + " && " + (cxx && *cxx ? cxx : "g++") +
				" -std=c++17 -O1 -ffp-contract=off -w -fPIC -shared" + defs + " -include " +
				shellQuote(sd + "/simt.h") + " -o " + shellQuote(so) + " " + shellQuote(mod) + " > " +
				shellQuote(dir + "/log") + " 2>&1";
	const int rc = system(cmd.c_str());
	p->log = slurp(dir + "/log");
	const std::string obj = rc == 0 ? slurp(so) : "";
	system(("rm -rf " + shellQuote(dir)).c_str());
	if (rc != 0 || obj.empty()) {
		return 6;
	}
	const uint64_t n = obj.size();
	p->cubin.assign(magic, magic + 8);
	p->cubin.insert(p->cubin.end(), (const char *)&n, (const char *)&n + 8);
	p->cubin.insert(p->cubin.end(), obj.begin(), obj.end());
	return OK;
}
int nvrtcGetProgramLogSize(void *prog, size_t *n) {
	*n = ((Prog *)prog)->log.size() + 1;
	return OK;
}
int nvrtcGetProgramLog(void *prog, char *log) {
	const std::string &s = ((Prog *)prog)->log;
	memcpy(log, s.c_str(), s.size() + 1);
	return OK;
}
int nvrtcGetCUBINSize(void *prog, size_t *n) {
	*n = ((Prog *)prog)->cubin.size();
	return OK;
}
int nvrtcGetCUBIN(void *prog, char *out) {
	const std::vector<char> &c = ((Prog *)prog)->cubin;
	memcpy(out, c.data(), c.size());
	return OK;
}
int nvrtcDestroyProgram(void **prog) {
	delete (Prog *)*prog;
	*prog = nullptr;
	return OK;
}

// ---- cuBLASLt (libcublasLt.so.12) ----
size_t cublasLtGetVersion(void) { return 120800; }
int cublasLtCreate(void **h) {
	*h = (void *)0x17;
	return OK;
}
int cublasLtDestroy(void *) { return OK; }
int cublasLtMatmulDescCreate(void **desc, int, int) {
	*desc = new MatmulDesc();
	return OK;
}
int cublasLtMatmulDescDestroy(void *desc) {
	delete (MatmulDesc *)desc;
	return OK;
}
int cublasLtMatmulDescSetAttribute(void *desc, int attr, const void *buf, size_t size) {
	MatmulDesc *d = (MatmulDesc *)desc;
	int v = 0;
	memcpy(&v, buf, size < 4 ? size : 4);
	switch (attr) {
	case 3:
		d->transa = v;
		break;
	case 4:
		d->transb = v;
		break;
	case 17:
		memcpy(&d->ascale, buf, sizeof(void *));
		break;
	case 18:
		memcpy(&d->bscale, buf, sizeof(void *));
		break;
	case 31:
		d->amode = v;
		break;
	case 32:
		d->bmode = v;
		break;
	}
	return OK;
}
int cublasLtMatrixLayoutCreate(void **layout, int type, uint64_t rows, uint64_t cols, int64_t ld) {
	*layout = new Layout{type, rows, cols, ld};
	return OK;
}
int cublasLtMatrixLayoutDestroy(void *layout) {
	delete (Layout *)layout;
	return OK;
}
int cublasLtMatmulPreferenceCreate(void **pref) {
	*pref = new int(0);
	return OK;
}
int cublasLtMatmulPreferenceDestroy(void *pref) {
	delete (int *)pref;
	return OK;
}
int cublasLtMatmulPreferenceSetAttribute(void *, int, const void *, size_t) { return OK; }
int cublasLtMatmulAlgoGetHeuristic(void *, void *op, void *a, void *b, void *, void *d, void *, int requested,
				   void *results, int *returned) {
	*returned = 0;
	if (requested < 1 || !supported((MatmulDesc *)op, (Layout *)a, (Layout *)b, (Layout *)d)) {
		return 15; // CUBLAS_STATUS_NOT_SUPPORTED
	}
	memset(results, 0, 96);
	*returned = 1;
	return OK;
}
int cublasLtMatmul(void *, void *opv, const void *alpha, const void *A, void *adesc, const void *B, void *bdesc,
		   const void *beta, const void *C, void *cdesc, void *D, void *ddesc, const void *, void *, size_t, void *s) {
	const MatmulDesc *op = (const MatmulDesc *)opv;
	const Layout *a = (const Layout *)adesc, *b = (const Layout *)bdesc, *c = (const Layout *)cdesc, *d = (const Layout *)ddesc;
	if (!supported(op, a, b, d)) {
		return 15;
	}
	const uint64_t m = d->rows, n = d->cols, k = op->transa ? a->rows : a->cols;
	if ((op->transa ? a->cols : a->rows) != m || (op->transb ? b->rows : b->cols) != n ||
	    (op->transb ? b->cols : b->rows) != k) {
		return 7; // CUBLAS_STATUS_INVALID_VALUE
	}
	const float al = *(const float *)alpha, be = *(const float *)beta;
	const MatmulDesc o = *op;
	const Layout la = *a, lb = *b, lc = *c, ld = *d;
	return run(s, [=] {
		for (uint64_t j = 0; j < n; j++) {
			for (uint64_t i = 0; i < m; i++) {
				double acc = 0;
				for (uint64_t q = 0; q < k; q++) {
					const size_t ai = o.transa ? q + i * la.ld : i + q * la.ld;
					const size_t bi = o.transb ? j + q * lb.ld : q + j * lb.ld;
					acc += loadElem(A, la.type, ai) * loadElem(B, lb.type, bi);
				}
				double v = al * acc;
				if (be != 0) {
					v += be * loadElem(C, lc.type, i + j * lc.ld);
				}
				storeElem(D, ld.type, i + j * ld.ld, v);
			}
		}
	});
}

} // extern "C"
