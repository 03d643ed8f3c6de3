// C side of the aclnn binding: libnnopbase.so (descriptors) and the aclnn
// operator libraries are dlopened at run time and called through function
// pointers declared once, in shim.c, from the public API (ascend-api.md
// §3-4). The ACL runtime is npu/ascend/acl's. Descriptors, executors,
// streams and device addresses cross into Go as uintptr_t.
#ifndef NPUSERVE_ACLNN_SHIM_H
#define NPUSERVE_ACLNN_SHIM_H

#include <stddef.h>
#include <stdint.h>

#define NPU_ACLNN_SYMBOL_MISSING -99998

// Operator ids (index of the op in the shim's table).
enum {
	NPU_OP_INPLACE_COPY,
	NPU_OP_CAST,
	NPU_OP_FILL_SCALAR,
	NPU_OP_ADD,
	NPU_OP_MUL,
	NPU_OP_MULS,
	NPU_OP_MATMUL,
	NPU_OP_RMS_NORM,
	NPU_OP_SOFTMAX,
	NPU_OP_SIGMOID,
	NPU_OP_SILU,
	NPU_OP_CLAMP,
	NPU_OP_CLAMP_MAX,
	NPU_OP_SWIGLU,
	NPU_OP_EMBEDDING,
	NPU_OP_INDEX_COPY,
	NPU_OP_NAN_TO_NUM,
	NPU_OP_SORT,
	NPU_OP_GATHER,
	NPU_OP_LAYER_NORM,
	NPU_OP_MEAN,
	NPU_OP_REDUCE_SUM,
	NPU_OP_BATCH_MATMUL,
	NPU_OP_EXP,
	NPU_OP_SOFTPLUS,
	NPU_OP_DIV,
	NPU_OP_SCATTER,
	NPU_OP_GROUPED_MATMUL_V4,
	NPU_OP_ARANGE,
	NPU_OP_COUNT
};

// npu_aclnn_load dlopens libnnopbase (path) and resolves each operator's
// two halves in the first of the n operator libraries (in order) that has
// both. Returns 0, -1 (nnopbase does not load) or -3 (missing nnopbase
// symbols); the reason is in err. Operators found nowhere stay missing.
int npu_aclnn_load(const char *nnopbase, const char *const *opapi, int n, char *err, size_t errlen);
// npu_aclnn_op_lib is the index of the library op was found in, -1 if none.
int npu_aclnn_op_lib(int op);
const char *npu_aclnn_op_name(int op);

uintptr_t npu_tensor(const int64_t *dims, uint64_t nd, int dtype, const int64_t *strides, int64_t offset, int64_t storage, uintptr_t data);
uintptr_t npu_tensor_fmt(const int64_t *dims, uint64_t nd, int dtype, const int64_t *strides, int64_t offset, int format, const int64_t *storage,
			 uint64_t ns, uintptr_t data);
int npu_destroy_tensor(uintptr_t t);
uintptr_t npu_scalar_f32(float v);
int npu_destroy_scalar(uintptr_t s);
uintptr_t npu_int_array(const int64_t *v, uint64_t n);
int npu_destroy_int_array(uintptr_t a);
// npu_tensor_list is aclCreateTensorList over n tensors, which it takes
// over: npu_destroy_tensor_list (aclDestroyTensorList) destroys them too.
uintptr_t npu_tensor_list(const uintptr_t *tensors, uint64_t n);
int npu_destroy_tensor_list(uintptr_t l);

// Phase 1 of each operator (ws, ex: outputs).
int npu_inplace_copy(uintptr_t self, uintptr_t src, uint64_t *ws, uintptr_t *ex);
int npu_cast(uintptr_t self, int dtype, uintptr_t out, uint64_t *ws, uintptr_t *ex);
int npu_fill_scalar(uintptr_t self, uintptr_t value, uint64_t *ws, uintptr_t *ex);
int npu_add(uintptr_t self, uintptr_t other, uintptr_t alpha, uintptr_t out, uint64_t *ws, uintptr_t *ex);
int npu_mul(uintptr_t self, uintptr_t other, uintptr_t out, uint64_t *ws, uintptr_t *ex);
int npu_muls(uintptr_t self, uintptr_t other, uintptr_t out, uint64_t *ws, uintptr_t *ex);
int npu_matmul(uintptr_t self, uintptr_t mat2, uintptr_t out, int8_t cube_math, uint64_t *ws, uintptr_t *ex);
int npu_rms_norm(uintptr_t x, uintptr_t gamma, double eps, uintptr_t y, uintptr_t rstd, uint64_t *ws, uintptr_t *ex);
int npu_softmax(uintptr_t self, int64_t dim, uintptr_t out, uint64_t *ws, uintptr_t *ex);
int npu_sigmoid(uintptr_t self, uintptr_t out, uint64_t *ws, uintptr_t *ex);
int npu_silu(uintptr_t self, uintptr_t out, uint64_t *ws, uintptr_t *ex);
int npu_clamp(uintptr_t self, uintptr_t lo, uintptr_t hi, uintptr_t out, uint64_t *ws, uintptr_t *ex);
int npu_clamp_max(uintptr_t self, uintptr_t hi, uintptr_t out, uint64_t *ws, uintptr_t *ex);
int npu_swiglu(uintptr_t x, int64_t dim, uintptr_t out, uint64_t *ws, uintptr_t *ex);
int npu_embedding(uintptr_t weight, uintptr_t indices, uintptr_t out, uint64_t *ws, uintptr_t *ex);
int npu_index_copy(uintptr_t self, int64_t dim, uintptr_t index, uintptr_t source, uint64_t *ws, uintptr_t *ex);
int npu_nan_to_num(uintptr_t self, float nan, float posinf, float neginf, uintptr_t out, uint64_t *ws, uintptr_t *ex);
int npu_sort(uintptr_t self, int stable, int64_t dim, int descending, uintptr_t values, uintptr_t indices, uint64_t *ws, uintptr_t *ex);
int npu_gather(uintptr_t self, int64_t dim, uintptr_t index, uintptr_t out, uint64_t *ws, uintptr_t *ex);
int npu_layer_norm(uintptr_t input, uintptr_t shape, uintptr_t weight, uintptr_t bias, double eps, uintptr_t out, uintptr_t mean, uintptr_t rstd,
		   uint64_t *ws, uintptr_t *ex);
int npu_mean(uintptr_t self, uintptr_t dims, int keepdim, int dtype, uintptr_t out, uint64_t *ws, uintptr_t *ex);
int npu_reduce_sum(uintptr_t self, uintptr_t dims, int keepdim, int dtype, uintptr_t out, uint64_t *ws, uintptr_t *ex);
int npu_batch_matmul(uintptr_t self, uintptr_t mat2, uintptr_t out, int8_t cube_math, uint64_t *ws, uintptr_t *ex);
int npu_exp(uintptr_t self, uintptr_t out, uint64_t *ws, uintptr_t *ex);
int npu_div(uintptr_t self, uintptr_t other, uintptr_t out, uint64_t *ws, uintptr_t *ex);
int npu_scatter(uintptr_t self, int64_t dim, uintptr_t index, uintptr_t src, int64_t reduce, uintptr_t out, uint64_t *ws, uintptr_t *ex);
int npu_softplus(uintptr_t self, uintptr_t beta, uintptr_t threshold, uintptr_t out, uint64_t *ws, uintptr_t *ex);
// aclnnArange(start, end, step, out): out[i] = start + i*step (1-D).
int npu_arange(uintptr_t start, uintptr_t end, uintptr_t step, uintptr_t out, uint64_t *ws, uintptr_t *ex);
// aclnnGroupedMatmulV4 (ascend-api.md §4.4): every list argument is an
// aclTensorList (0: NULL), groupList an aclTensor.
int npu_grouped_matmul_v4(uintptr_t x, uintptr_t weight, uintptr_t bias, uintptr_t scale, uintptr_t offset, uintptr_t antiquant_scale,
			  uintptr_t antiquant_offset, uintptr_t per_token_scale, uintptr_t group_list, uintptr_t act_input, uintptr_t act_quant_scale,
			  uintptr_t act_quant_offset, int64_t split_item, int64_t group_type, int64_t group_list_type, int64_t act_type, uintptr_t out,
			  uintptr_t act_feature_out, uintptr_t dyn_quant_scale_out, uint64_t *ws, uintptr_t *ex);

// Repeatable executors (libnnopbase), for graph capture: npu_executor_api
// reports whether both symbols loaded; npu_executor_repeatable is
// aclSetAclOpExecutorRepeatable (right after phase 1), npu_executor_destroy
// aclDestroyAclOpExecutor (of a repeatable executor).
int npu_executor_api(void);
int npu_executor_repeatable(uintptr_t ex);
int npu_executor_destroy(uintptr_t ex);

// Phase 2, the same signature for every operator.
int npu_aclnn_run(int op, uintptr_t workspace, uint64_t size, uintptr_t executor, uintptr_t stream);

#endif
