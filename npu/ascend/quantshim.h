// C side of the quantized-matmul operators (ascend-api.md §3 NZ weights,
// §4.2-4.3): their own table, resolved lazily in the operator libraries
// the backend loaded, so that a CANN without one of them (the 950-only
// aclnnDynamicMxQuant on an A2) still opens and fails only when a weight
// of that scheme is used. Each foreign symbol is declared once, in
// quantshim.c.
#ifndef NPUSERVE_ACLNN_QUANT_SHIM_H
#define NPUSERVE_ACLNN_QUANT_SHIM_H

#include <stddef.h>
#include <stdint.h>

enum {
	NPU_Q_FORMAT_CAST,      // aclnnNpuFormatCast
	NPU_Q_ASCEND_QUANT_V3,  // aclnnAscendQuantV3
	NPU_Q_DYNAMIC_MX_QUANT, // aclnnDynamicMxQuant
	NPU_Q_QMM_WEIGHT_NZ,    // aclnnQuantMatmulWeightNz
	NPU_Q_QMM_V5,           // aclnnQuantMatmulV5
	NPU_Q_ABS,              // aclnnAbs      (the fp32 per-token
	NPU_Q_AMAX,             // aclnnAmax      quantization of
	NPU_Q_DIVS,             // aclnnDivs      W8A8_DYNAMIC, quant.go
	NPU_Q_ROUND,            // aclnnRound     rowQuant)
	NPU_Q_COUNT
};

// npu_q_load resolves the operators in the first of the n libraries that
// has both halves (and aclnnNpuFormatCastCalculateSizeAndFormat).
void npu_q_load(const char *const *opapi, int n);
int npu_q_lib(int op);
const char *npu_q_name(int op);

// npu_q_nz_size is aclnnNpuFormatCastCalculateSizeAndFormat: the storage
// shape (at most max dims, copied into shape; CANN's new[]-allocated array
// is not freed, see quant.go) and the actual format of src cast to format.
int npu_q_nz_size(uintptr_t src, int format, int additional_dtype, int64_t *shape, uint64_t max, uint64_t *n, int *actual);
int npu_q_format_cast(uintptr_t src, uintptr_t dst, uint64_t *ws, uintptr_t *ex);
// roundMode "round", sqrtMode false.
int npu_q_ascend_quant_v3(uintptr_t x, uintptr_t scale, uintptr_t offset, int32_t dst_type, int32_t axis, uintptr_t y, uint64_t *ws, uintptr_t *ex);
// roundMode "rint".
int npu_q_dynamic_mx_quant(uintptr_t x, int64_t axis, int64_t dst_type, int64_t block, int64_t scale_alg, uintptr_t y, uintptr_t mxscale, uint64_t *ws,
			   uintptr_t *ex);
// op is NPU_Q_QMM_WEIGHT_NZ or NPU_Q_QMM_V5 (the V5 argument list);
// yScale and the offsets are NULL, no transposes.
int npu_q_qmm(int op, uintptr_t x1, uintptr_t x2, uintptr_t x1scale, uintptr_t x2scale, uintptr_t bias, int64_t group, uintptr_t out, uint64_t *ws,
	      uintptr_t *ex);
// The stock math operators of the per-token quantization (ops-math
// aclnnAbs, aclnnAmax, aclnnDivs, aclnnRound documents).
int npu_q_abs(uintptr_t self, uintptr_t out, uint64_t *ws, uintptr_t *ex);
int npu_q_amax(uintptr_t self, uintptr_t dims, int keepdim, uintptr_t out, uint64_t *ws, uintptr_t *ex);
int npu_q_divs(uintptr_t self, uintptr_t other, uintptr_t out, uint64_t *ws, uintptr_t *ex);
int npu_q_round(uintptr_t self, uintptr_t out, uint64_t *ws, uintptr_t *ex);
int npu_q_run(int op, uintptr_t workspace, uint64_t size, uintptr_t executor, uintptr_t stream);

#endif
