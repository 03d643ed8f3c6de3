//go:build cgo

// Loader and wrappers for aclnn; see shim.h. Each foreign symbol is
// declared once, here.
#include "shim.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

typedef void *T; // aclTensor*, aclScalar*, aclOpExecutor*

// libnnopbase (OPBASE acl_meta.h).
static T (*p_aclCreateTensor)(const int64_t *viewDims, uint64_t n, int dtype, const int64_t *stride, int64_t offset, int format,
			      const int64_t *storageDims, uint64_t ns, void *data);
static int (*p_aclDestroyTensor)(T);
static T (*p_aclCreateScalar)(void *value, int dtype);
static int (*p_aclDestroyScalar)(T);
static T (*p_aclCreateIntArray)(const int64_t *value, uint64_t size);
static int (*p_aclDestroyIntArray)(T);
static T (*p_aclCreateTensorList)(const T *value, uint64_t size);
static int (*p_aclDestroyTensorList)(T);
// Repeatable executors (OPBASE aclSetAclOpExecutorRepeatable.md,
// aclDestroyAclOpExecutor.md), for graph capture.
static int (*p_aclSetAclOpExecutorRepeatable)(T);
static int (*p_aclDestroyAclOpExecutor)(T);

// Phase 2 of every operator: (workspace, size, executor, stream).
typedef int (*run_fn)(void *, uint64_t, T, void *);

// Phase 1 signatures (ascend-api.md §4.1, §4.6; aclnnAdd/Mul/Muls/
// InplaceFillScalar/Silu from the CANN aclnn reference).
typedef int (*copy_fn)(T, T, uint64_t *, T *);
typedef int (*cast_fn)(T, int, T, uint64_t *, T *);
typedef int (*add_fn)(T, T, T, T, uint64_t *, T *);
typedef int (*bin_fn)(T, T, T, uint64_t *, T *);
typedef int (*mm_fn)(T, T, T, int8_t, uint64_t *, T *);
typedef int (*rms_fn)(T, T, double, T, T, uint64_t *, T *);
typedef int (*sm_fn)(T, int64_t, T, uint64_t *, T *);
// Operators of §4.6 (SwiGlu, Embedding, InplaceIndexCopy) and, from the
// CANN aclnn reference as we recall it (not from a header read for
// ascend-api.md): Clamp, ClampMax, NanToNum, Sort, Gather, LayerNorm, Mean,
// ReduceSum, BatchMatMul, Exp, Softplus, Div, Scatter, Arange.
typedef int (*clamp_fn)(T, T, T, T, uint64_t *, T *);
typedef int (*dimx_fn)(T, int64_t, T, uint64_t *, T *);
typedef int (*icopy_fn)(T, int64_t, T, T, uint64_t *, T *);
typedef int (*n2n_fn)(T, float, float, float, T, uint64_t *, T *);
typedef int (*sort_fn)(T, bool, int64_t, bool, T, T, uint64_t *, T *);
typedef int (*ln_fn)(T, T, T, T, double, T, T, T, uint64_t *, T *);
typedef int (*red_fn)(T, T, bool, int, T, uint64_t *, T *);
typedef int (*scatter_fn)(T, int64_t, T, T, int64_t, T, uint64_t *, T *);
// aclnnGroupedMatmulV4 (ascend-api.md §4.4; TF aclnn_grouped_matmul_v4.h).
typedef int (*gmm_fn)(T, T, T, T, T, T, T, T, T, T, T, T, int64_t, int64_t, int64_t, int64_t, T, T, T, uint64_t *, T *);

static const char *op_names[NPU_OP_COUNT] = {
	[NPU_OP_INPLACE_COPY] = "aclnnInplaceCopy", [NPU_OP_CAST] = "aclnnCast",       [NPU_OP_FILL_SCALAR] = "aclnnInplaceFillScalar",
	[NPU_OP_ADD] = "aclnnAdd",                  [NPU_OP_MUL] = "aclnnMul",         [NPU_OP_MULS] = "aclnnMuls",
	[NPU_OP_MATMUL] = "aclnnMatmul",            [NPU_OP_RMS_NORM] = "aclnnRmsNorm", [NPU_OP_SOFTMAX] = "aclnnSoftmax",
	[NPU_OP_SIGMOID] = "aclnnSigmoid",          [NPU_OP_SILU] = "aclnnSilu",
	[NPU_OP_CLAMP] = "aclnnClamp",              [NPU_OP_CLAMP_MAX] = "aclnnClampMax",
	[NPU_OP_SWIGLU] = "aclnnSwiGlu",            [NPU_OP_EMBEDDING] = "aclnnEmbedding",
	[NPU_OP_INDEX_COPY] = "aclnnInplaceIndexCopy", [NPU_OP_NAN_TO_NUM] = "aclnnNanToNum",
	[NPU_OP_SORT] = "aclnnSort",                [NPU_OP_GATHER] = "aclnnGather",
	[NPU_OP_LAYER_NORM] = "aclnnLayerNorm",     [NPU_OP_MEAN] = "aclnnMean",
	[NPU_OP_REDUCE_SUM] = "aclnnReduceSum",     [NPU_OP_BATCH_MATMUL] = "aclnnBatchMatMul",
	[NPU_OP_EXP] = "aclnnExp",                  [NPU_OP_SOFTPLUS] = "aclnnSoftplus",
	[NPU_OP_DIV] = "aclnnDiv",                  [NPU_OP_SCATTER] = "aclnnScatter",
	[NPU_OP_GROUPED_MATMUL_V4] = "aclnnGroupedMatmulV4", [NPU_OP_ARANGE] = "aclnnArange",
};
static void *phase1[NPU_OP_COUNT];
static run_fn phase2[NPU_OP_COUNT];
static int op_lib[NPU_OP_COUNT];

int npu_aclnn_load(const char *nnopbase, const char *const *opapi, int n, char *err, size_t errlen) {
	void *h = dlopen(nnopbase, RTLD_NOW | RTLD_GLOBAL);
	if (h == NULL) {
		snprintf(err, errlen, "%s", dlerror());
		return -1;
	}
	p_aclCreateTensor = dlsym(h, "aclCreateTensor");
	p_aclDestroyTensor = dlsym(h, "aclDestroyTensor");
	p_aclCreateScalar = dlsym(h, "aclCreateScalar");
	p_aclDestroyScalar = dlsym(h, "aclDestroyScalar");
	p_aclCreateIntArray = dlsym(h, "aclCreateIntArray");
	p_aclDestroyIntArray = dlsym(h, "aclDestroyIntArray");
	p_aclCreateTensorList = dlsym(h, "aclCreateTensorList");
	p_aclDestroyTensorList = dlsym(h, "aclDestroyTensorList");
	p_aclSetAclOpExecutorRepeatable = dlsym(h, "aclSetAclOpExecutorRepeatable"); // optional: graph capture only
	p_aclDestroyAclOpExecutor = dlsym(h, "aclDestroyAclOpExecutor");
	if (!p_aclCreateTensor || !p_aclDestroyTensor || !p_aclCreateScalar || !p_aclDestroyScalar || !p_aclCreateIntArray || !p_aclDestroyIntArray ||
	    !p_aclCreateTensorList || !p_aclDestroyTensorList) {
		snprintf(err, errlen,
			 "%s lacks aclCreateTensor/aclDestroyTensor/aclCreateScalar/aclDestroyScalar/aclCreateIntArray/aclDestroyIntArray/"
			 "aclCreateTensorList/aclDestroyTensorList",
			 nnopbase);
		return -3;
	}
	err[0] = '\0';
	for (int op = 0; op < NPU_OP_COUNT; op++) {
		op_lib[op] = -1;
	}
	for (int i = 0; i < n; i++) {
		void *lib = dlopen(opapi[i], RTLD_LAZY | RTLD_GLOBAL);
		if (lib == NULL) {
			continue;
		}
		for (int op = 0; op < NPU_OP_COUNT; op++) {
			if (op_lib[op] >= 0) {
				continue;
			}
			char name[128];
			snprintf(name, sizeof name, "%sGetWorkspaceSize", op_names[op]);
			void *p1 = dlsym(lib, name), *p2 = dlsym(lib, op_names[op]);
			if (p1 != NULL && p2 != NULL) { // both halves, as torch_npu checks
				phase1[op] = p1;
				phase2[op] = (run_fn)p2;
				op_lib[op] = i;
			}
		}
	}
	return 0;
}

int npu_aclnn_op_lib(int op) { return op >= 0 && op < NPU_OP_COUNT ? op_lib[op] : -1; }
const char *npu_aclnn_op_name(int op) { return op >= 0 && op < NPU_OP_COUNT ? op_names[op] : "?"; }

// ACL_FORMAT_ND = 2: every tensor we pass is a plain row-major view.
uintptr_t npu_tensor(const int64_t *dims, uint64_t nd, int dtype, const int64_t *strides, int64_t offset, int64_t storage, uintptr_t data) {
	return (uintptr_t)p_aclCreateTensor(dims, nd, dtype, strides, offset, 2, &storage, 1, (void *)data);
}
// npu_tensor_fmt is npu_tensor with an explicit aclFormat and storage
// shape (FRACTAL_NZ weights: the fractal shape from
// aclnnNpuFormatCastCalculateSizeAndFormat).
uintptr_t npu_tensor_fmt(const int64_t *dims, uint64_t nd, int dtype, const int64_t *strides, int64_t offset, int format, const int64_t *storage,
			 uint64_t ns, uintptr_t data) {
	return (uintptr_t)p_aclCreateTensor(dims, nd, dtype, strides, offset, format, storage, ns, (void *)data);
}
int npu_destroy_tensor(uintptr_t t) { return p_aclDestroyTensor((T)t); }
uintptr_t npu_scalar_f32(float v) { return (uintptr_t)p_aclCreateScalar(&v, 0); }
int npu_destroy_scalar(uintptr_t s) { return p_aclDestroyScalar((T)s); }
uintptr_t npu_int_array(const int64_t *v, uint64_t n) { return (uintptr_t)p_aclCreateIntArray(v, n); }
int npu_destroy_int_array(uintptr_t a) { return p_aclDestroyIntArray((T)a); }
uintptr_t npu_tensor_list(const uintptr_t *tensors, uint64_t n) {
	T v[128];
	if (n > sizeof v / sizeof v[0]) {
		return 0;
	}
	for (uint64_t i = 0; i < n; i++) {
		v[i] = (T)tensors[i];
	}
	return (uintptr_t)p_aclCreateTensorList(v, n);
}
int npu_destroy_tensor_list(uintptr_t l) { return p_aclDestroyTensorList((T)l); }

#define P1(op, type, ...)                                                        \
	if (phase1[op] == NULL) {                                                \
		return NPU_ACLNN_SYMBOL_MISSING;                                 \
	}                                                                        \
	T e = NULL;                                                              \
	int rc = ((type)phase1[op])(__VA_ARGS__, ws, &e);                        \
	*ex = (uintptr_t)e;                                                      \
	return rc
#define A(x) ((T)(x))

int npu_inplace_copy(uintptr_t self, uintptr_t src, uint64_t *ws, uintptr_t *ex) { P1(NPU_OP_INPLACE_COPY, copy_fn, A(self), A(src)); }
int npu_cast(uintptr_t self, int dtype, uintptr_t out, uint64_t *ws, uintptr_t *ex) { P1(NPU_OP_CAST, cast_fn, A(self), dtype, A(out)); }
int npu_fill_scalar(uintptr_t self, uintptr_t value, uint64_t *ws, uintptr_t *ex) { P1(NPU_OP_FILL_SCALAR, copy_fn, A(self), A(value)); }
int npu_add(uintptr_t self, uintptr_t other, uintptr_t alpha, uintptr_t out, uint64_t *ws, uintptr_t *ex) {
	P1(NPU_OP_ADD, add_fn, A(self), A(other), A(alpha), A(out));
}
int npu_mul(uintptr_t self, uintptr_t other, uintptr_t out, uint64_t *ws, uintptr_t *ex) { P1(NPU_OP_MUL, bin_fn, A(self), A(other), A(out)); }
int npu_muls(uintptr_t self, uintptr_t other, uintptr_t out, uint64_t *ws, uintptr_t *ex) { P1(NPU_OP_MULS, bin_fn, A(self), A(other), A(out)); }
int npu_matmul(uintptr_t self, uintptr_t mat2, uintptr_t out, int8_t cube_math, uint64_t *ws, uintptr_t *ex) {
	P1(NPU_OP_MATMUL, mm_fn, A(self), A(mat2), A(out), cube_math);
}
int npu_rms_norm(uintptr_t x, uintptr_t gamma, double eps, uintptr_t y, uintptr_t rstd, uint64_t *ws, uintptr_t *ex) {
	P1(NPU_OP_RMS_NORM, rms_fn, A(x), A(gamma), eps, A(y), A(rstd));
}
int npu_softmax(uintptr_t self, int64_t dim, uintptr_t out, uint64_t *ws, uintptr_t *ex) { P1(NPU_OP_SOFTMAX, sm_fn, A(self), dim, A(out)); }
int npu_sigmoid(uintptr_t self, uintptr_t out, uint64_t *ws, uintptr_t *ex) { P1(NPU_OP_SIGMOID, copy_fn, A(self), A(out)); }
int npu_silu(uintptr_t self, uintptr_t out, uint64_t *ws, uintptr_t *ex) { P1(NPU_OP_SILU, copy_fn, A(self), A(out)); }

int npu_clamp(uintptr_t self, uintptr_t lo, uintptr_t hi, uintptr_t out, uint64_t *ws, uintptr_t *ex) {
	P1(NPU_OP_CLAMP, clamp_fn, A(self), A(lo), A(hi), A(out));
}
int npu_clamp_max(uintptr_t self, uintptr_t hi, uintptr_t out, uint64_t *ws, uintptr_t *ex) { P1(NPU_OP_CLAMP_MAX, bin_fn, A(self), A(hi), A(out)); }
int npu_swiglu(uintptr_t x, int64_t dim, uintptr_t out, uint64_t *ws, uintptr_t *ex) { P1(NPU_OP_SWIGLU, sm_fn, A(x), dim, A(out)); }
int npu_embedding(uintptr_t weight, uintptr_t indices, uintptr_t out, uint64_t *ws, uintptr_t *ex) {
	P1(NPU_OP_EMBEDDING, bin_fn, A(weight), A(indices), A(out));
}
int npu_index_copy(uintptr_t self, int64_t dim, uintptr_t index, uintptr_t source, uint64_t *ws, uintptr_t *ex) {
	P1(NPU_OP_INDEX_COPY, icopy_fn, A(self), dim, A(index), A(source));
}
int npu_nan_to_num(uintptr_t self, float nan, float posinf, float neginf, uintptr_t out, uint64_t *ws, uintptr_t *ex) {
	P1(NPU_OP_NAN_TO_NUM, n2n_fn, A(self), nan, posinf, neginf, A(out));
}
int npu_sort(uintptr_t self, int stable, int64_t dim, int descending, uintptr_t values, uintptr_t indices, uint64_t *ws, uintptr_t *ex) {
	P1(NPU_OP_SORT, sort_fn, A(self), stable != 0, dim, descending != 0, A(values), A(indices));
}
int npu_gather(uintptr_t self, int64_t dim, uintptr_t index, uintptr_t out, uint64_t *ws, uintptr_t *ex) {
	P1(NPU_OP_GATHER, icopy_fn, A(self), dim, A(index), A(out));
}
int npu_layer_norm(uintptr_t input, uintptr_t shape, uintptr_t weight, uintptr_t bias, double eps, uintptr_t out, uintptr_t mean, uintptr_t rstd,
		   uint64_t *ws, uintptr_t *ex) {
	P1(NPU_OP_LAYER_NORM, ln_fn, A(input), A(shape), A(weight), A(bias), eps, A(out), A(mean), A(rstd));
}
int npu_mean(uintptr_t self, uintptr_t dims, int keepdim, int dtype, uintptr_t out, uint64_t *ws, uintptr_t *ex) {
	P1(NPU_OP_MEAN, red_fn, A(self), A(dims), keepdim != 0, dtype, A(out));
}
int npu_reduce_sum(uintptr_t self, uintptr_t dims, int keepdim, int dtype, uintptr_t out, uint64_t *ws, uintptr_t *ex) {
	P1(NPU_OP_REDUCE_SUM, red_fn, A(self), A(dims), keepdim != 0, dtype, A(out));
}
int npu_batch_matmul(uintptr_t self, uintptr_t mat2, uintptr_t out, int8_t cube_math, uint64_t *ws, uintptr_t *ex) {
	P1(NPU_OP_BATCH_MATMUL, mm_fn, A(self), A(mat2), A(out), cube_math);
}
int npu_exp(uintptr_t self, uintptr_t out, uint64_t *ws, uintptr_t *ex) { P1(NPU_OP_EXP, copy_fn, A(self), A(out)); }
int npu_softplus(uintptr_t self, uintptr_t beta, uintptr_t threshold, uintptr_t out, uint64_t *ws, uintptr_t *ex) {
	P1(NPU_OP_SOFTPLUS, clamp_fn, A(self), A(beta), A(threshold), A(out));
}
int npu_arange(uintptr_t start, uintptr_t end, uintptr_t step, uintptr_t out, uint64_t *ws, uintptr_t *ex) {
	P1(NPU_OP_ARANGE, clamp_fn, A(start), A(end), A(step), A(out));
}
int npu_div(uintptr_t self, uintptr_t other, uintptr_t out, uint64_t *ws, uintptr_t *ex) { P1(NPU_OP_DIV, bin_fn, A(self), A(other), A(out)); }
int npu_scatter(uintptr_t self, int64_t dim, uintptr_t index, uintptr_t src, int64_t reduce, uintptr_t out, uint64_t *ws, uintptr_t *ex) {
	P1(NPU_OP_SCATTER, scatter_fn, A(self), dim, A(index), A(src), reduce, A(out));
}
int npu_grouped_matmul_v4(uintptr_t x, uintptr_t weight, uintptr_t bias, uintptr_t scale, uintptr_t offset, uintptr_t antiquant_scale,
			  uintptr_t antiquant_offset, uintptr_t per_token_scale, uintptr_t group_list, uintptr_t act_input, uintptr_t act_quant_scale,
			  uintptr_t act_quant_offset, int64_t split_item, int64_t group_type, int64_t group_list_type, int64_t act_type, uintptr_t out,
			  uintptr_t act_feature_out, uintptr_t dyn_quant_scale_out, uint64_t *ws, uintptr_t *ex) {
	P1(NPU_OP_GROUPED_MATMUL_V4, gmm_fn, A(x), A(weight), A(bias), A(scale), A(offset), A(antiquant_scale), A(antiquant_offset), A(per_token_scale),
	   A(group_list), A(act_input), A(act_quant_scale), A(act_quant_offset), split_item, group_type, group_list_type, act_type, A(out),
	   A(act_feature_out), A(dyn_quant_scale_out));
}

int npu_aclnn_run(int op, uintptr_t workspace, uint64_t size, uintptr_t executor, uintptr_t stream) {
	if (op < 0 || op >= NPU_OP_COUNT || phase2[op] == NULL) {
		return NPU_ACLNN_SYMBOL_MISSING;
	}
	return phase2[op]((void *)workspace, size, (T)executor, (void *)stream);
}

int npu_executor_api(void) { return p_aclSetAclOpExecutorRepeatable != NULL && p_aclDestroyAclOpExecutor != NULL; }
int npu_executor_repeatable(uintptr_t ex) {
	return p_aclSetAclOpExecutorRepeatable == NULL ? NPU_ACLNN_SYMBOL_MISSING : p_aclSetAclOpExecutorRepeatable((T)ex);
}
int npu_executor_destroy(uintptr_t ex) { return p_aclDestroyAclOpExecutor == NULL ? NPU_ACLNN_SYMBOL_MISSING : p_aclDestroyAclOpExecutor((T)ex); }
