// STAND-IN CANN (test double): the grouped matmul of libopapi,
// aclnnGroupedMatmulV4, from its documentation (hicann ops-transformer
// gmm/grouped_matmul/docs/aclnnGroupedMatmulV4.md, read at
// repo-mirror-test/ops-transformer@50e9ae99; ascend-api.md §4.4), for the
// Atlas A2/A3 products. Implemented: groupType 0 with single-tensor lists
// ("单单单": x (M, K), weight (g, K, N) 3-D, plain or transposed, out
// (M, N)), groupListType 0 (cumsum) and 1 (counts), actType 0, without
// bias; non-quantized (FLOAT16, BFLOAT16, FLOAT32) and the int8 dynamic
// quantization (x and weight INT8, per-channel scale (g, N) FLOAT32 into
// FLOAT16 or BFLOAT16 into BFLOAT16, per-token scale (M,) FLOAT32 or none;
// no scale: INT32 out), and on Ascend 950 (the document's 910_95) the MX
// mode of its "动态量化（mx量化）场景约束" table: x and weight FLOAT8_E4M3FN
// (E5M2 is documented, not implemented), scale FLOAT8_E8M0 (g, ceil(K/64),
// N, 2) or, weight transposed, (g, N, ceil(K/64), 2), perTokenScale
// FLOAT8_E8M0 (M, ceil(K/64), 2), bias, offset and antiquant null, out
// BFLOAT16, FLOAT16 or FLOAT32, block sizes gsM = gsN = 1, gsK = 32:
// y[m,n] = sum_j (sum over block j of x·w) · perTokenScale[m, j] ·
// scale[j, n], block j at [j/2][..][j%2] of the pair axis. Everything else
// the document allows fails with a stand-in-* rule; everything it forbids
// with the rule it states.
#include "opapi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The document's limits.
#define GMM_MAX_LIST 128
#define GMM_MAX_GROUPS 1024
#define GMM_MAX_LAST 65536
#define DT_E5M2 35
#define DT_E4M3 36
#define DT_E8M0 37

const char *aclrtGetSocName(void); // libascendcl (the stand-in's)

typedef struct {
	aclTensor x, w, out, gl, scale, pts;
	int has_scale, has_pts, quant;
	int mx, wt_t; // MX mode; weight transposed (its scale (g, N, ceil(K/64), 2))
	int64_t list_type;
} gmm_args;

// list1 checks an optional list that must be NULL or a list of one tensor
// (single-tensor mode) and returns that tensor (NULL for a NULL list).
static int list1(const char *op, const char *name, const aclTensorList *l, int required, const aclTensor **t) {
	*t = NULL;
	if (l == NULL) {
		if (required) {
			return standin_violation(ACLNN_ERR_PARAM_NULLPTR, "required-tensor", "%s: %s is NULL", op, name);
		}
		return 0;
	}
	if (l->magic != TENSORLIST_MAGIC) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "live-tensor-list", "%s: %s is not a live aclTensorList", op, name);
	}
	if (l->n > GMM_MAX_LIST) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "gmm-list-length", "%s: %s has %llu tensors; at most %d", op, name, (unsigned long long)l->n,
					 GMM_MAX_LIST);
	}
	if (l->n == 0 && !required) {
		return 0;
	}
	if (l->n != 1) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "stand-in-gmm-single-tensor",
					 "%s: %s has %llu tensors; the stand-in implements groupType 0 with single-tensor lists only", op, name,
					 (unsigned long long)l->n);
	}
	*t = l->v[0];
	return 0;
}

// w_at is weight element (g, k, n) through the view's strides (plain or
// transposed); x and out are read and written by row-major index.
static double w_at(const aclTensor *w, int64_t g, int64_t k, int64_t n) {
	return get(w, (g * w->dims[1] + k) * w->dims[2] + n);
}

static void run_gmm(void *p, void *ws) {
	gmm_args *a = p;
	int64_t G = a->w.dims[0], K = a->w.dims[1], N = a->w.dims[2], M = a->x.dims[0];
	int64_t *end = ws; // each group's end row, in the workspace
	int64_t acc = 0;
	for (int64_t g = 0; g < G; g++) {
		int64_t v = (int64_t)get(&a->gl, g);
		char msg[192];
		if (v < 0) {
			snprintf(msg, sizeof msg, "aclnnGroupedMatmulV4: groupList[%lld] = %lld is negative", (long long)g, (long long)v);
			standin_stream_fail("gmm-group-list-nonnegative", msg);
			return;
		}
		if (a->list_type == 0) {
			if (v < acc) {
				snprintf(msg, sizeof msg, "aclnnGroupedMatmulV4: groupListType 0 (cumsum) wants a non-decreasing list; [%lld] = %lld < %lld",
					 (long long)g, (long long)v, (long long)acc);
				standin_stream_fail("gmm-group-list-cumsum-monotonic", msg);
				return;
			}
			acc = v;
		} else {
			acc += v;
		}
		end[g] = acc;
	}
	if (acc != M) {
		char msg[192];
		snprintf(msg, sizeof msg, "aclnnGroupedMatmulV4: the group list covers %lld rows; groupType 0 wants %s equal to x's first dim %lld", (long long)acc,
			 a->list_type == 0 ? "its last value" : "its sum", (long long)M);
		standin_stream_fail("gmm-group-list-covers-m", msg);
		return;
	}
	// Each group's weight (as (N, K)) and each row of x are decoded once into
	// host scratch so the inner loops are contiguous; the products and their
	// order are those of the plain loops over (m, n, k).
	double *wt = malloc(sizeof(double) * (size_t)(K * N + 1)), *xr = malloc(sizeof(double) * (size_t)(K + 1));
	if (wt == NULL || xr == NULL) {
		free(wt);
		free(xr);
		standin_stream_fail("stand-in-host-memory", "aclnnGroupedMatmulV4: the stand-in could not allocate its host scratch");
		return;
	}
	int64_t r0 = 0;
	for (int64_t g = 0; g < G; g++) {
		if (end[g] > r0) {
			for (int64_t k = 0; k < K; k++) {
				for (int64_t n = 0; n < N; n++) {
					double v;
					if (a->mx) {
						v = e4m3_dec(*(uint8_t *)ptr(&a->w, (g * K + k) * N + n));
					} else if (a->quant) {
						v = (double)(int64_t)w_at(&a->w, g, k, n);
					} else {
						v = (float)w_at(&a->w, g, k, n);
					}
					wt[n * K + k] = v;
				}
			}
		}
		for (int64_t m = r0; m < end[g]; m++) {
			for (int64_t k = 0; k < K; k++) {
				if (a->mx) {
					xr[k] = e4m3_dec(*(uint8_t *)ptr(&a->x, m * K + k));
				} else if (a->quant) {
					xr[k] = (double)(int64_t)get(&a->x, m * K + k);
				} else {
					xr[k] = (float)get(&a->x, m * K + k);
				}
			}
			for (int64_t n = 0; n < N; n++) {
				const double *wr = wt + n * K;
				double r;
				if (a->mx) {
					int64_t kb2 = a->pts.dims[1];
					double acc = 0;
					for (int64_t kb = 0; kb * 32 < K; kb++) {
						double dot = 0;
						for (int64_t k = kb * 32; k < (kb + 1) * 32 && k < K; k++) {
							dot += xr[k] * wr[k];
						}
						uint8_t s1 = *(uint8_t *)ptr(&a->pts, (m * kb2 + kb / 2) * 2 + kb % 2);
						int64_t si = a->wt_t ? ((g * N + n) * kb2 + kb / 2) * 2 + kb % 2 : ((g * kb2 + kb / 2) * N + n) * 2 + kb % 2;
						uint8_t s2 = *(uint8_t *)ptr(&a->scale, si);
						acc += dot * e8m0_dec(s1) * e8m0_dec(s2);
					}
					r = (float)acc;
				} else if (a->quant) {
					int64_t s = 0;
					for (int64_t k = 0; k < K; k++) {
						s += (int64_t)xr[k] * (int64_t)wr[k];
					}
					float f = (float)(int32_t)s;
					if (a->has_pts) {
						f *= (float)get(&a->pts, m);
					}
					if (a->has_scale) {
						f *= (float)get(&a->scale, g * N + n);
					}
					r = a->has_scale ? f : (double)(int32_t)s;
				} else {
					float s = 0;
					for (int64_t k = 0; k < K; k++) {
						s += (float)xr[k] * (float)wr[k];
					}
					r = s;
				}
				set(&a->out, m * N + n, r);
			}
		}
		r0 = end[g];
	}
	free(wt);
	free(xr);
}

// gmm_mx checks the MX mode's arguments (the 910_95 "mx量化" table) and
// fills a's MX fields.
static int gmm_mx(const char *op, gmm_args *a, const aclTensor *wt, const aclTensor *st, const aclTensor *pt, const aclTensor *ot, int64_t M,
		  int64_t K, int64_t G, int64_t N, int transposed, int64_t actType) {
	const char *soc = aclrtGetSocName();
	if (soc == NULL || strncmp(soc, "Ascend950", 9) != 0) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "gmm-mx-950-only", "%s: the MX mode is documented for the 910_95 (Ascend 950) only; this SoC is %s",
					 op, soc ? soc : "unknown");
	}
	if (a->x.dtype != DT_E4M3 || wt->dtype != DT_E4M3) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "stand-in-gmm-mx-e5m2",
					 "%s: the stand-in implements MX with FLOAT8_E4M3FN x and weight (E5M2 is documented); x %d, weight %d", op, a->x.dtype,
					 wt->dtype);
	}
	if (st == NULL || pt == NULL) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "gmm-mx-dtypes", "%s: MX takes a FLOAT8_E8M0 scale and perTokenScale (both required)", op);
	}
	TRY(chk(op, "scaleOptional", st, F(DT_E8M0)));
	TRY(chk(op, "perTokenScaleOptional", pt, F(DT_E8M0)));
	TRY(chk(op, "out", ot, FLOATS));
	if (actType != 0) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "gmm-950-act-type", "%s: the 910_95 takes actType 0 only", op);
	}
	int64_t kb2 = (K + 63) / 64;
	if (transposed ? st->ndim != 4 || st->dims[0] != G || st->dims[1] != N || st->dims[2] != kb2 || st->dims[3] != 2
		       : st->ndim != 4 || st->dims[0] != G || st->dims[1] != kb2 || st->dims[2] != N || st->dims[3] != 2) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "gmm-mx-scale-shape",
					 "%s: an MX scale of a single weight is (g, ceil(K/64), N, 2) = (%lld, %lld, %lld, 2), or (g, N, ceil(K/64), 2) "
					 "with the weight transposed",
					 op, (long long)G, (long long)kb2, (long long)N);
	}
	if (pt->ndim != 3 || pt->dims[0] != M || pt->dims[1] != kb2 || pt->dims[2] != 2) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "gmm-mx-per-token-scale-shape", "%s: an MX perTokenScale is (M, ceil(K/64), 2) = (%lld, %lld, 2)",
					 op, (long long)M, (long long)kb2);
	}
	a->mx = 1;
	a->wt_t = transposed;
	a->scale = *st;
	a->pts = *pt;
	a->has_scale = a->has_pts = 1;
	return 0;
}

int aclnnGroupedMatmulV4GetWorkspaceSize(const aclTensorList *x, const aclTensorList *weight, const aclTensorList *biasOptional,
					 const aclTensorList *scaleOptional, const aclTensorList *offsetOptional, const aclTensorList *antiquantScaleOptional,
					 const aclTensorList *antiquantOffsetOptional, const aclTensorList *perTokenScaleOptional,
					 const aclTensor *groupListOptional, const aclTensorList *activationInputOptional,
					 const aclTensorList *activationQuantScaleOptional, const aclTensorList *activationQuantOffsetOptional, int64_t splitItem,
					 int64_t groupType, int64_t groupListType, int64_t actType, aclTensorList *out,
					 aclTensorList *activationFeatureOutOptional, aclTensorList *dynQuantScaleOutOptional, uint64_t *ws, aclOpExecutor **ex) {
	const char *op = "aclnnGroupedMatmulV4";
	TRY(need_ctx(op));
	TRY(outs(op, ws, ex));
	if (activationInputOptional || activationQuantScaleOptional || activationQuantOffsetOptional || activationFeatureOutOptional ||
	    dynQuantScaleOutOptional) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "gmm-activation-lists-null",
					 "%s: activationInput, activationQuantScale, activationQuantOffset, activationFeatureOut and dynQuantScaleOut only take nullptr",
					 op);
	}
	if (groupType < -1 || groupType > 2 || splitItem < 0 || splitItem > 3 || groupListType < 0 || groupListType > 2 || actType < 0 || actType > 5) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "gmm-enums",
					 "%s: groupType %lld (-1..2), splitItem %lld (0..3), groupListType %lld (0..2), actType %lld (0..5)", op,
					 (long long)groupType, (long long)splitItem, (long long)groupListType, (long long)actType);
	}
	if (groupType == 1) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "gmm-no-n-grouping", "%s: A2/A3 do not group along n (groupType 1)", op);
	}
	if (groupType != 0) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "stand-in-gmm-group-type", "%s: the stand-in implements groupType 0 only", op);
	}
	if (splitItem != 2 && splitItem != 3) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "gmm-split-item", "%s: groupType 0 with single tensors takes splitItem 2 or 3, not %lld", op,
					 (long long)splitItem);
	}
	if (groupListType == 2) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "stand-in-gmm-group-list-type", "%s: the stand-in implements groupListType 0 and 1", op);
	}
	const aclTensor *xt, *wt, *ot, *bt, *st, *ofs, *aqs, *aqo, *pt;
	TRY(list1(op, "x", x, 1, &xt));
	TRY(list1(op, "weight", weight, 1, &wt));
	TRY(list1(op, "out", out, 1, &ot));
	TRY(list1(op, "biasOptional", biasOptional, 0, &bt));
	TRY(list1(op, "scaleOptional", scaleOptional, 0, &st));
	TRY(list1(op, "offsetOptional", offsetOptional, 0, &ofs));
	TRY(list1(op, "antiquantScaleOptional", antiquantScaleOptional, 0, &aqs));
	TRY(list1(op, "antiquantOffsetOptional", antiquantOffsetOptional, 0, &aqo));
	TRY(list1(op, "perTokenScaleOptional", perTokenScaleOptional, 0, &pt));
	int mx = xt->dtype == DT_E4M3 || xt->dtype == DT_E5M2;
	if (mx && (bt || ofs || aqs || aqo)) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "gmm-mx-null-inputs",
					 "%s: MX (FLOAT8 x) takes no bias, offset, antiquantScale or antiquantOffset", op);
	}
	if (bt || ofs || aqs || aqo) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "stand-in-gmm-optional-inputs",
					 "%s: the stand-in implements no bias, offset or antiquant (pseudo-quantization) inputs", op);
	}
	TRY(chk(op, "x", xt, FLOATS | F(DT_INT8) | F(DT_E4M3)));
	TRY(chk(op, "out", ot, FLOATS | F(DT_INT8) | F(DT_INT32)));
	if (wt != NULL && wt->format == FMT_FRACTAL_NZ) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "stand-in-gmm-weight-nz",
					 "%s: the stand-in implements ND weights only (FRACTAL_NZ is documented)", op);
	}
	TRY(chk(op, "weight", wt, FLOATS | F(DT_INT8) | F(DT_E4M3)));
	if (groupListOptional == NULL) {
		return standin_violation(ACLNN_ERR_PARAM_NULLPTR, "gmm-group-list-required", "%s: groupType 0 requires groupListOptional", op);
	}
	TRY(chk(op, "groupListOptional", groupListOptional, F(DT_INT64)));
	if (xt->ndim != 2 || wt->ndim != 3 || ot->ndim != 2) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "gmm-single-tensor-ranks", "%s: groupType 0 single tensors: x 2-D, weight 3-D, out 2-D", op);
	}
	int64_t M = xt->dims[0], K = xt->dims[1], G = wt->dims[0], N = wt->dims[2];
	if (wt->dims[1] != K || ot->dims[0] != M || ot->dims[1] != N) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "gmm-shapes", "%s: x (%lld, %lld), weight (%lld, %lld, %lld), out (%lld, %lld)", op,
					 (long long)M, (long long)K, (long long)G, (long long)wt->dims[1], (long long)N, (long long)ot->dims[0],
					 (long long)ot->dims[1]);
	}
	if (K > 1 && xt->strides[1] != 1) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "gmm-x-not-transposed", "%s: x is not transposable (its last dim must be contiguous)", op);
	}
	int transposed = N > 1 && wt->strides[2] != 1;
	if (transposed && wt->strides[1] != 1) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "gmm-weight-layout", "%s: weight is (g, K, N) or its transpose (K contiguous)", op);
	}
	if (K >= GMM_MAX_LAST || (transposed ? K : N) >= GMM_MAX_LAST) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "gmm-last-dim", "%s: the last dim of x and of weight must be below %d", op, GMM_MAX_LAST);
	}
	if (groupListOptional->ndim != 1 || groupListOptional->dims[0] != G) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "gmm-group-list-shape", "%s: groupListOptional must be 1-D with one entry per group (%lld)", op,
					 (long long)G);
	}
	if (G > GMM_MAX_GROUPS) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "gmm-max-groups", "%s: %lld groups; at most %d", op, (long long)G, GMM_MAX_GROUPS);
	}
	gmm_args a = {.x = *xt, .w = *wt, .out = *ot, .gl = *groupListOptional, .list_type = groupListType};
	if (mx) {
		TRY(gmm_mx(op, &a, wt, st, pt, ot, M, K, G, N, transposed, actType));
	} else if (wt->dtype == DT_E4M3) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "gmm-dtype-combination", "%s: a FLOAT8 weight wants FLOAT8 x (x has %d)", op, xt->dtype);
	} else if (xt->dtype != DT_INT8) {
		// Non-quantized combinations (A2/A3): x, weight and out of one dtype;
		// FLOAT32 only with single tensors (which the stand-in requires).
		if (wt->dtype != xt->dtype || ot->dtype != xt->dtype || st || pt) {
			return standin_violation(ACLNN_ERR_PARAM_INVALID, "gmm-dtype-combination",
						 "%s: non-quantized x %d wants weight and out of its dtype and no scale or perTokenScale", op, xt->dtype);
		}
		if (actType != 0) {
			return standin_violation(ACLNN_ERR_PARAM_INVALID, "gmm-activation-quant-only",
						 "%s: the activation is computed only in the per-token quantized and dequantized cases", op);
		}
	} else {
		a.quant = 1;
		if (wt->dtype != DT_INT8) {
			return standin_violation(ACLNN_ERR_PARAM_INVALID, "gmm-dtype-combination", "%s: INT8 x wants an INT8 weight", op);
		}
		if (st != NULL) {
			TRY(chk(op, "scaleOptional", st, F(DT_FLOAT) | F(DT_BF16)));
			int want = st->dtype == DT_FLOAT ? DT_FLOAT16 : DT_BF16;
			if (ot->dtype != want) {
				return standin_violation(ACLNN_ERR_PARAM_INVALID, "gmm-dtype-combination",
							 "%s: INT8 with a FLOAT32 scale writes FLOAT16, with a BFLOAT16 scale BFLOAT16 (out has %d)", op, ot->dtype);
			}
			if (st->ndim != 2 || st->dims[0] != G || st->dims[1] != N) {
				return standin_violation(ACLNN_ERR_PARAM_INVALID, "gmm-scale-shape", "%s: a per-channel scale of a single weight is (g, N)", op);
			}
			a.scale = *st;
			a.has_scale = 1;
		} else if (ot->dtype != DT_INT32 || pt != NULL) {
			return standin_violation(ACLNN_ERR_PARAM_INVALID, "gmm-dtype-combination", "%s: INT8 without a scale writes INT32 and takes no perTokenScale", op);
		}
		if (pt != NULL) {
			TRY(chk(op, "perTokenScaleOptional", pt, F(DT_FLOAT)));
			if (pt->ndim != 1 || pt->dims[0] != M) {
				return standin_violation(ACLNN_ERR_PARAM_INVALID, "gmm-per-token-scale-shape", "%s: perTokenScaleOptional is (M,) = (%lld,)", op,
							 (long long)M);
			}
			a.pts = *pt;
			a.has_pts = 1;
		}
		if (actType != 0) {
			return standin_violation(ACLNN_ERR_PARAM_INVALID, "stand-in-gmm-activation", "%s: the stand-in implements actType 0 only", op);
		}
	}
	return new_exec(op, (uint64_t)G * sizeof(int64_t), run_gmm, &a, sizeof a, ws, ex);
}
PHASE2(aclnnGroupedMatmulV4)
