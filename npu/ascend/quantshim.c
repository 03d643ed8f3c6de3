//go:build cgo

// Loader and wrappers of the quantized-matmul operators; see quantshim.h.
#include "quantshim.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>

#include "shim.h"

typedef void *T;
typedef int (*run_fn)(void *, uint64_t, T, void *);

// Phase 1 signatures (ascend-api.md §3, §4.2, §4.3; aclnnAscendQuantV3
// from the ops-nn aclnnAscendQuantV3 document).
typedef int (*nzsize_fn)(T, int, int, int64_t **, uint64_t *, int *);
typedef int (*fcast_fn)(T, T, uint64_t *, T *);
typedef int (*aq_fn)(T, T, T, bool, char *, int32_t, int32_t, T, uint64_t *, T *);
typedef int (*mxq_fn)(T, int64_t, char *, int64_t, int64_t, int64_t, T, T, uint64_t *, T *);
typedef int (*un_fn)(T, T, uint64_t *, T *);          // aclnnAbs, aclnnRound
typedef int (*amax_fn)(T, T, bool, T, uint64_t *, T *); // self, dim, keepDim, out
typedef int (*divs_fn)(T, T, T, uint64_t *, T *);       // self, scalar other, out
typedef int (*qmm_fn)(T, T, T, T, T, T, T, T, T, bool, bool, int64_t, T, uint64_t *, T *);

static const char *q_names[NPU_Q_COUNT] = {
	[NPU_Q_FORMAT_CAST] = "aclnnNpuFormatCast",       [NPU_Q_ASCEND_QUANT_V3] = "aclnnAscendQuantV3",
	[NPU_Q_DYNAMIC_MX_QUANT] = "aclnnDynamicMxQuant",
	[NPU_Q_QMM_WEIGHT_NZ] = "aclnnQuantMatmulWeightNz", [NPU_Q_QMM_V5] = "aclnnQuantMatmulV5",
	[NPU_Q_ABS] = "aclnnAbs",                         [NPU_Q_AMAX] = "aclnnAmax",
	[NPU_Q_DIVS] = "aclnnDivs",                       [NPU_Q_ROUND] = "aclnnRound",
};
static void *q_phase1[NPU_Q_COUNT];
static run_fn q_phase2[NPU_Q_COUNT];
static int q_lib[NPU_Q_COUNT];
static nzsize_fn p_nz_size;

// Attributes passed as char* must outlive phase 2 (ascend-api.md §3).
static char round_round[] = "round";
static char round_rint[] = "rint";

void npu_q_load(const char *const *opapi, int n) {
	for (int op = 0; op < NPU_Q_COUNT; op++) {
		q_lib[op] = -1;
	}
	for (int i = 0; i < n; i++) {
		void *lib = dlopen(opapi[i], RTLD_LAZY | RTLD_GLOBAL);
		if (lib == NULL) {
			continue;
		}
		if (p_nz_size == NULL) {
			p_nz_size = (nzsize_fn)dlsym(lib, "aclnnNpuFormatCastCalculateSizeAndFormat");
		}
		for (int op = 0; op < NPU_Q_COUNT; op++) {
			if (q_lib[op] >= 0) {
				continue;
			}
			char name[128];
			snprintf(name, sizeof name, "%sGetWorkspaceSize", q_names[op]);
			void *p1 = dlsym(lib, name), *p2 = dlsym(lib, q_names[op]);
			if (p1 != NULL && p2 != NULL) {
				q_phase1[op] = p1;
				q_phase2[op] = (run_fn)p2;
				q_lib[op] = i;
			}
		}
	}
	if (p_nz_size == NULL) {
		q_lib[NPU_Q_FORMAT_CAST] = -1; // the cast is useless without its size query
		q_phase1[NPU_Q_FORMAT_CAST] = NULL;
	}
}

int npu_q_lib(int op) { return op >= 0 && op < NPU_Q_COUNT ? q_lib[op] : -1; }
const char *npu_q_name(int op) { return op >= 0 && op < NPU_Q_COUNT ? q_names[op] : "?"; }

int npu_q_nz_size(uintptr_t src, int format, int additional_dtype, int64_t *shape, uint64_t max, uint64_t *n, int *actual) {
	if (p_nz_size == NULL) {
		return NPU_ACLNN_SYMBOL_MISSING;
	}
	int64_t *dims = NULL;
	int rc = p_nz_size((T)src, format, additional_dtype, &dims, n, actual);
	if (rc != 0) {
		return rc;
	}
	if (*n > max || dims == NULL) {
		return -1;
	}
	for (uint64_t i = 0; i < *n; i++) {
		shape[i] = dims[i];
	}
	return 0; // dims came from new[]: not freeable from C (a few bytes per weight)
}

#define Q1(op, type, ...)                                 \
	if (q_phase1[op] == NULL) {                       \
		return NPU_ACLNN_SYMBOL_MISSING;          \
	}                                                 \
	T e = NULL;                                       \
	int rc = ((type)q_phase1[op])(__VA_ARGS__, ws, &e); \
	*ex = (uintptr_t)e;                               \
	return rc
#define A(x) ((T)(x))

int npu_q_format_cast(uintptr_t src, uintptr_t dst, uint64_t *ws, uintptr_t *ex) { Q1(NPU_Q_FORMAT_CAST, fcast_fn, A(src), A(dst)); }
int npu_q_ascend_quant_v3(uintptr_t x, uintptr_t scale, uintptr_t offset, int32_t dst_type, int32_t axis, uintptr_t y, uint64_t *ws, uintptr_t *ex) {
	Q1(NPU_Q_ASCEND_QUANT_V3, aq_fn, A(x), A(scale), A(offset), false, round_round, dst_type, axis, A(y));
}
int npu_q_dynamic_mx_quant(uintptr_t x, int64_t axis, int64_t dst_type, int64_t block, int64_t scale_alg, uintptr_t y, uintptr_t mxscale, uint64_t *ws,
			   uintptr_t *ex) {
	Q1(NPU_Q_DYNAMIC_MX_QUANT, mxq_fn, A(x), axis, round_rint, dst_type, block, scale_alg, A(y), A(mxscale));
}
int npu_q_qmm(int op, uintptr_t x1, uintptr_t x2, uintptr_t x1scale, uintptr_t x2scale, uintptr_t bias, int64_t group, uintptr_t out, uint64_t *ws,
	      uintptr_t *ex) {
	if (op != NPU_Q_QMM_WEIGHT_NZ && op != NPU_Q_QMM_V5) {
		return -1;
	}
	Q1(op, qmm_fn, A(x1), A(x2), A(x1scale), A(x2scale), NULL, NULL, NULL, NULL, A(bias), false, false, group, A(out));
}

int npu_q_abs(uintptr_t self, uintptr_t out, uint64_t *ws, uintptr_t *ex) { Q1(NPU_Q_ABS, un_fn, A(self), A(out)); }
int npu_q_amax(uintptr_t self, uintptr_t dims, int keepdim, uintptr_t out, uint64_t *ws, uintptr_t *ex) {
	Q1(NPU_Q_AMAX, amax_fn, A(self), A(dims), keepdim != 0, A(out));
}
int npu_q_divs(uintptr_t self, uintptr_t other, uintptr_t out, uint64_t *ws, uintptr_t *ex) { Q1(NPU_Q_DIVS, divs_fn, A(self), A(other), A(out)); }
int npu_q_round(uintptr_t self, uintptr_t out, uint64_t *ws, uintptr_t *ex) { Q1(NPU_Q_ROUND, un_fn, A(self), A(out)); }

int npu_q_run(int op, uintptr_t workspace, uint64_t size, uintptr_t executor, uintptr_t stream) {
	if (op < 0 || op >= NPU_Q_COUNT || q_phase2[op] == NULL) {
		return NPU_ACLNN_SYMBOL_MISSING;
	}
	return q_phase2[op]((void *)workspace, size, (T)executor, (void *)stream);
}
