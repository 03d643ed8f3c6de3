// STAND-IN CANN (test double): the quantization operators of libopapi.so
// (compiled into it with opapi.c): aclnnNpuFormatCastCalculateSizeAndFormat
// and aclnnNpuFormatCast (FRACTAL_NZ), aclnnAscendQuantV3,
// aclnnDynamicMxQuant (950 only), aclnnQuantMatmulWeightNz /
// aclnnQuantMatmulV5, and the stock aclnnAbs, aclnnAmax, aclnnDivs and
// aclnnRound of the fp32 per-token quantization. The arithmetic is what
// the CANN documents state (ascend-api.md §3, §4.2, §4.3, and the ops-nn
// aclnnAscendQuantV3 document) and what npu/cpu and package quant
// implement from them: rint rounding (half to even), int8 saturation,
// E4M3FN round-to-nearest-even with saturation to ±448, E8M0 block
// scales by scale_alg 0 (OCP: 2^(floor(log2 amax) - 8)) or 1 (amax/448
// rounded up to a power of two). Assumed where the documents are silent
// [INFERRED]: AscendQuantV3's "round" is half to even and saturates; an
// int32 bias is added to the int32 sums before the dequantization
// (out = (x1·x2 + bias) * x1Scale[m] * x2Scale[n]).
//
// FRACTAL_NZ, as the stand-in lays it out: a [rows, cols] matrix of
// 1-byte elements is stored as (ceil(cols/32), ceil(rows/16), 16, 32),
// element (r, c) at [c/32][r/16][r%16][c%32], padding zero. The data is
// really reordered, so an operator that read an NZ buffer as ND would
// compute garbage; operators that require NZ refuse ND (rule x2-fractal-nz).
#include "opapi.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DT_E4M3 36
#define DT_E8M0 37
#define NZ_R0 16 // rows per fractal
#define NZ_C0 32 // 1-byte columns per fractal (32 bytes)

const char *aclrtGetSocName(void); // libascendcl (the stand-in's)

#define QMASK_E4M3 F(DT_E4M3)
#define QMASK_E8M0 F(DT_E8M0)

static int q_soc950(const char *op) {
	const char *soc = aclrtGetSocName();
	if (soc == NULL || strncmp(soc, "Ascend950", 9) != 0) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "soc-950-only", "%s (MX FP8) is documented for Ascend 950 only; this SoC is %s", op,
					 soc ? soc : "unknown");
	}
	return 0;
}

// ---- E4M3FN and E8M0 (OCP) ----
float e4m3_dec(uint8_t b) {
	int e = (b >> 3) & 15, m = b & 7;
	float v;
	if (e == 15 && m == 7) {
		v = NAN;
	} else if (e == 0) {
		v = ldexpf((float)m, -9);
	} else {
		v = ldexpf(1.0f + m / 8.0f, e - 7);
	}
	return (b & 0x80) ? -v : v;
}

static uint8_t e4m3_enc(float f) {
	uint32_t u;
	memcpy(&u, &f, 4);
	uint8_t sign = (uint8_t)(u >> 24) & 0x80;
	uint32_t a = u & 0x7fffffffu;
	if (a > 0x7f800000u) {
		return sign | 0x7f;
	}
	if (a >= 0x43e00000u) { // 448: saturate
		return sign | 0x7e;
	}
	if (a < 0x3c800000u) { // below 2^-6: subnormal m * 2^-9
		float fa;
		memcpy(&fa, &a, 4);
		return sign | (uint8_t)nearbyint((double)fa * 512);
	}
	int exp = (int)(a >> 23) - 127;
	uint32_t mant = a & 0x7fffffu, keep = mant >> 20, rem = mant & 0xfffffu;
	if (rem > (1u << 19) || (rem == (1u << 19) && (keep & 1))) {
		keep++;
	}
	int e = exp + 7;
	if (keep == 8) {
		keep = 0;
		e++;
	}
	return sign | (uint8_t)(e << 3) | (uint8_t)keep;
}

double e8m0_dec(uint8_t s) { return s == 0xff ? NAN : ldexp(1, (int)s - 127); }

static uint8_t mx_scale(float amax, int64_t alg) {
	if (isnan(amax) || isinf(amax)) {
		return 0xff;
	}
	if (amax <= 0) {
		return 0;
	}
	if (alg == 1) {
		float s = amax / 448.0f;
		uint32_t u;
		memcpy(&u, &s, 4);
		uint32_t exp = u >> 23, mant = u & 0x7fffffu;
		if (exp > 0 && exp < 254 && mant > 0) {
			exp++;
		} else if (exp == 0 && mant > (1u << 22)) {
			exp++;
		}
		return (uint8_t)exp;
	}
	int e;
	frexpf(amax, &e); // amax = f * 2^e, f in [0.5, 1): floor(log2 amax) = e - 1
	int x = e - 1 - 8;
	x = x < -127 ? -127 : x > 127 ? 127 : x;
	return (uint8_t)(x + 127);
}

// ---- aclnnNpuFormatCastCalculateSizeAndFormat / aclnnNpuFormatCast ----
static int nz_dims(const aclTensor *src, int64_t out[4]) {
	int64_t r = src->dims[0], c = src->dims[1];
	out[0] = (c + NZ_C0 - 1) / NZ_C0;
	out[1] = (r + NZ_R0 - 1) / NZ_R0;
	out[2] = NZ_R0;
	out[3] = NZ_C0;
	return 0;
}

int aclnnNpuFormatCastCalculateSizeAndFormat(const aclTensor *src, const int dstFormat, int additionalDtype, int64_t **dstShape, uint64_t *dstShapeSize,
					     int *actualFormat) {
	const char *op = "aclnnNpuFormatCastCalculateSizeAndFormat";
	if (standin_current_ctx() == NULL) {
		return standin_violation(ACL_ERROR_RT_CONTEXT_NULL, "context-on-thread", "%s on a thread without a current context", op);
	}
	if (dstShape == NULL || dstShapeSize == NULL || actualFormat == NULL) {
		return standin_violation(ACLNN_ERR_PARAM_NULLPTR, "phase1-outputs", "%s: NULL outputs", op);
	}
	TRY(chk_fmt(op, "srcTensor", src, F(DT_INT8) | QMASK_E4M3, 0));
	if (dstFormat != FMT_FRACTAL_NZ) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "stand-in-format-cast-nz", "%s: the stand-in casts to FRACTAL_NZ (29) only, not %d", op, dstFormat);
	}
	if (additionalDtype != src->dtype || standin_dtype_size(additionalDtype) != 1) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "format-cast-additional-dtype",
					 "%s: additionalDtype %d: pass the source dtype (the stand-in implements 1-byte elements, C0 = 32)", op, additionalDtype);
	}
	if (src->ndim != 2 || src->dims[0] <= 1 || src->dims[1] <= 1) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "nz-2d-no-unit-dims", "%s: NZ wants a 2-D source with both dims > 1 (n == 1 / k == 1 unsupported)", op);
	}
	int64_t *d = malloc(4 * sizeof *d); // CANN allocates with new[]
	nz_dims(src, d);
	*dstShape = d;
	*dstShapeSize = 4;
	*actualFormat = FMT_FRACTAL_NZ;
	return 0;
}

typedef struct {
	aclTensor src, dst;
} fcast_args;
static void run_fcast(void *p, void *ws) {
	(void)ws;
	fcast_args *a = p;
	int64_t R = a->src.dims[0], C = a->src.dims[1], k1 = a->dst.storage[1];
	uint8_t *d = a->dst.data;
	memset(d, 0, (size_t)tensor_storage(&a->dst));
	for (int64_t r = 0; r < R; r++) {
		for (int64_t c = 0; c < C; c++) {
			uint8_t v = *(uint8_t *)ptr(&a->src, r * C + c);
			d[((c / NZ_C0) * k1 + r / NZ_R0) * NZ_R0 * NZ_C0 + (r % NZ_R0) * NZ_C0 + c % NZ_C0] = v;
		}
	}
}
int aclnnNpuFormatCastGetWorkspaceSize(const aclTensor *src, aclTensor *dst, uint64_t *ws, aclOpExecutor **ex) {
	const char *op = "aclnnNpuFormatCast";
	TRY(need_ctx(op));
	TRY(outs(op, ws, ex));
	TRY(chk_fmt(op, "srcTensor", src, F(DT_INT8) | QMASK_E4M3, 0));
	TRY(chk_fmt(op, "dstTensor", dst, F(DT_INT8) | QMASK_E4M3, 1));
	int64_t want[4];
	if (src->ndim != 2 || dst->ndim != 2 || dst->dims[0] != src->dims[0] || dst->dims[1] != src->dims[1] || dst->dtype != src->dtype) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "format-cast-shapes", "%s: dst must have src's 2-D view shape and dtype", op);
	}
	nz_dims(src, want);
	for (int i = 0; i < 4; i++) {
		if (dst->storage[i] != want[i]) {
			return standin_violation(ACLNN_ERR_PARAM_INVALID, "nz-storage-shape",
						 "%s: dst storage must be the shape from aclnnNpuFormatCastCalculateSizeAndFormat", op);
		}
	}
	fcast_args a = {*src, *dst};
	return new_exec(op, 0, run_fcast, &a, sizeof a, ws, ex);
}
PHASE2(aclnnNpuFormatCast)

// ---- aclnnAscendQuantV3: y = round(x * scale + offset), int8 ----
typedef struct {
	aclTensor x, scale, offset, y;
	int has_offset;
} aq_args;
static void run_aq(void *p, void *ws) {
	(void)ws;
	aq_args *a = p;
	int64_t n = numel(&a->x), K = a->x.dims[a->x.ndim - 1], ns = numel(&a->scale);
	for (int64_t i = 0; i < n; i++) {
		int64_t c = ns == 1 ? 0 : i % K;
		float y = (float)get(&a->x, i) * (float)get(&a->scale, c);
		if (a->has_offset) {
			y = y + (float)get(&a->offset, c);
		}
		y = y < -128 ? -128 : y > 127 ? 127 : y;
		*(int8_t *)ptr(&a->y, i) = (int8_t)nearbyintf(y);
	}
}
int aclnnAscendQuantV3GetWorkspaceSize(const aclTensor *x, const aclTensor *scale, const aclTensor *offset, bool sqrtMode, const char *roundMode,
				       int32_t dstType, int32_t axis, const aclTensor *y, uint64_t *ws, aclOpExecutor **ex) {
	const char *op = "aclnnAscendQuantV3";
	TRY(need_ctx(op));
	TRY(outs(op, ws, ex));
	unsigned long long fl = F(DT_FLOAT) | F(DT_FLOAT16) | F(DT_BF16);
	TRY(chk_fmt(op, "x", x, fl, 0));
	TRY(chk_fmt(op, "scale", scale, fl, 0));
	if (offset != NULL) {
		TRY(chk_fmt(op, "offset", offset, fl, 0));
	}
	TRY(chk_fmt(op, "y", y, F(DT_INT8), 0));
	if (scale->dtype != x->dtype || (offset != NULL && (offset->dtype != x->dtype || numel(offset) != numel(scale)))) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "quant-scale-dtype", "%s: scale and offset have x's dtype and one shape", op);
	}
	if (sqrtMode || roundMode == NULL || strcmp(roundMode, "round") != 0 || dstType != DT_INT8) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "stand-in-ascend-quant-mode", "%s: the stand-in implements sqrtMode false, roundMode \"round\", dstType INT8", op);
	}
	int64_t K = x->ndim ? x->dims[x->ndim - 1] : 1;
	if (x->ndim < 1 || (axis != -1 && axis != (int32_t)x->ndim - 1) || scale->ndim != 1 || (scale->dims[0] != 1 && scale->dims[0] != K) ||
	    y->ndim != x->ndim || numel(y) != numel(x)) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "ascend-quant-shapes", "%s: scale/offset of size 1 or x's last dim (axis -1), y x's shape", op);
	}
	aq_args a = {*x, *scale, offset ? *offset : *scale, *y, offset != NULL};
	return new_exec(op, 0, run_aq, &a, sizeof a, ws, ex);
}
PHASE2(aclnnAscendQuantV3)

// ---- aclnnDynamicMxQuant (950): E4M3FN elements, E8M0 block scales ----
typedef struct {
	aclTensor x, y, s;
	int64_t block, alg;
} mxq_args;
static void run_mxq(void *p, void *ws) {
	(void)ws;
	mxq_args *a = p;
	int64_t K = a->x.dims[a->x.ndim - 1], M = numel(&a->x) / (K ? K : 1), B = a->block, nbe = a->s.dims[a->s.ndim - 1];
	for (int64_t m = 0; m < M; m++) {
		for (int64_t b = 0; b < nbe; b++) {
			float amax = 0;
			int nan = 0;
			for (int64_t k = b * B; k < (b + 1) * B && k < K; k++) {
				float v = fabsf((float)get(&a->x, m * K + k));
				nan |= isnan(v);
				amax = v > amax ? v : amax;
			}
			uint8_t s = b * B < K ? mx_scale(nan ? NAN : amax, a->alg) : 0; // padding scales are 0
			*(uint8_t *)ptr(&a->s, m * nbe + b) = s;
			float inv = s == 0xff ? NAN : ldexpf(1, 127 - (int)s);
			for (int64_t k = b * B; k < (b + 1) * B && k < K; k++) {
				*(uint8_t *)ptr(&a->y, m * K + k) = e4m3_enc((float)get(&a->x, m * K + k) * inv);
			}
		}
	}
}
int aclnnDynamicMxQuantGetWorkspaceSize(const aclTensor *x, int64_t axis, char *roundMode, int64_t dstType, int64_t blocksize, int64_t scaleAlg,
					const aclTensor *yOut, const aclTensor *mxscaleOut, uint64_t *ws, aclOpExecutor **ex) {
	const char *op = "aclnnDynamicMxQuant";
	TRY(need_ctx(op));
	TRY(outs(op, ws, ex));
	TRY(q_soc950(op));
	TRY(chk_fmt(op, "x", x, F(DT_FLOAT) | F(DT_FLOAT16) | F(DT_BF16), 0));
	TRY(chk_fmt(op, "yOut", yOut, QMASK_E4M3, 0));
	TRY(chk_fmt(op, "mxscaleOut", mxscaleOut, QMASK_E8M0, 0));
	if (dstType != DT_E4M3 || (roundMode != NULL && strcmp(roundMode, "rint") != 0)) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "mx-quant-mode", "%s: the stand-in implements dstType 36 (E4M3FN) with roundMode \"rint\" (FP8: rint only)", op);
	}
	if (blocksize <= 0 || blocksize % 32 != 0 || blocksize > 1024 || (x->dtype == DT_FLOAT && blocksize != 32)) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "mx-blocksize", "%s: blocksize %lld: a multiple of 32 up to 1024, 32 for FP32 x", op, (long long)blocksize);
	}
	if (scaleAlg != 0 && scaleAlg != 1) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "mx-scale-alg", "%s: scaleAlg %lld (0 OCP, 1 round-up)", op, (long long)scaleAlg);
	}
	if (x->ndim < 1 || (axis != -1 && axis != (int64_t)x->ndim - 1)) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "stand-in-mx-axis", "%s: the stand-in quantizes along the last axis only", op);
	}
	int64_t K = x->dims[x->ndim - 1], nb = (K + blocksize - 1) / blocksize, nbe = (nb + 1) / 2 * 2;
	int ok = yOut->ndim == x->ndim && mxscaleOut->ndim == x->ndim && mxscaleOut->dims[x->ndim - 1] == nbe;
	for (uint64_t i = 0; ok && i < x->ndim; i++) {
		ok = yOut->dims[i] == x->dims[i] && (i + 1 == x->ndim || mxscaleOut->dims[i] == x->dims[i]);
	}
	if (!ok) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "mx-quant-shapes", "%s: yOut x's shape; mxscaleOut's last axis ceil(K/blocksize) padded to even (%lld)", op,
					 (long long)nbe);
	}
	mxq_args a = {*x, *yOut, *mxscaleOut, blocksize, scaleAlg};
	return new_exec(op, 0, run_mxq, &a, sizeof a, ws, ex);
}
PHASE2(aclnnDynamicMxQuant)

// ---- aclnnQuantMatmulWeightNz / aclnnQuantMatmulV5 ----
typedef struct {
	aclTensor x1, x2, x1s, x2s, bias, out;
	int has_bias, mx;
} qmm_args;
// x2at reads x2 (view [k, n]) at (k, n), through the NZ order if NZ.
static const void *x2at(const aclTensor *t, int64_t k, int64_t n) {
	if (t->format == FMT_FRACTAL_NZ) {
		int64_t k1 = t->storage[1];
		return (uint8_t *)t->data + ((n / NZ_C0) * k1 + k / NZ_R0) * NZ_R0 * NZ_C0 + (k % NZ_R0) * NZ_C0 + n % NZ_C0;
	}
	return ptr(t, k * t->dims[1] + n);
}
static void run_qmm(void *p, void *ws) {
	(void)ws;
	qmm_args *a = p;
	int64_t M = a->x1.dims[0], K = a->x1.dims[1], N = a->x2.dims[1];
	// x2 (as (N, K)) and each row of x1 are decoded once into host scratch so
	// the inner loops are contiguous; the products and their order are those
	// of the plain loops over (m, n, k).
	double *wt = malloc(sizeof(double) * (size_t)(K * N + 1)), *xr = malloc(sizeof(double) * (size_t)(K + 1));
	if (wt == NULL || xr == NULL) {
		free(wt);
		free(xr);
		standin_stream_fail("stand-in-host-memory", "aclnnQuantMatmul: the stand-in could not allocate its host scratch");
		return;
	}
	for (int64_t k = 0; k < K; k++) {
		for (int64_t n = 0; n < N; n++) {
			const void *q = x2at(&a->x2, k, n);
			wt[n * K + k] = a->mx ? (double)e4m3_dec(*(const uint8_t *)q) : (double)*(const int8_t *)q;
		}
	}
	for (int64_t m = 0; m < M; m++) {
		for (int64_t k = 0; k < K; k++) {
			const void *q = ptr(&a->x1, m * K + k);
			xr[k] = a->mx ? (double)e4m3_dec(*(const uint8_t *)q) : (double)*(const int8_t *)q;
		}
		for (int64_t n = 0; n < N; n++) {
			const double *wr = wt + n * K;
			float r;
			if (a->mx) {
				// x1Scale (m, ceil(k/64), 2), x2Scale (ceil(k/64), n, 2): block kb at [kb/2][..][kb%2]
				double acc = 0;
				for (int64_t kb = 0; kb * 32 < K; kb++) {
					double dot = 0;
					for (int64_t k = kb * 32; k < (kb + 1) * 32 && k < K; k++) {
						dot += xr[k] * wr[k];
					}
					uint8_t s1 = *(uint8_t *)ptr(&a->x1s, (m * a->x1s.dims[1] + kb / 2) * 2 + kb % 2);
					uint8_t s2 = *(uint8_t *)ptr(&a->x2s, ((kb / 2) * N + n) * 2 + kb % 2);
					acc += dot * e8m0_dec(s1) * e8m0_dec(s2);
				}
				r = (float)acc;
				if (a->has_bias) {
					r += (float)get(&a->bias, n);
				}
			} else {
				int64_t acc = 0;
				for (int64_t k = 0; k < K; k++) {
					acc += (int64_t)xr[k] * (int64_t)wr[k];
				}
				if (a->has_bias && a->bias.dtype == DT_INT32) {
					acc += *(int32_t *)ptr(&a->bias, n);
				}
				r = (float)(int32_t)acc * (float)get(&a->x1s, m);
				r = r * (float)get(&a->x2s, n);
				if (a->has_bias && a->bias.dtype != DT_INT32) {
					r += (float)get(&a->bias, n);
				}
			}
			set(&a->out, m * N + n, r);
		}
	}
	free(wt);
	free(xr);
}
static int qmm(const char *op, int needNz, const aclTensor *x1, const aclTensor *x2, const aclTensor *x1Scale, const aclTensor *x2Scale,
	       const aclTensor *yScale, const aclTensor *x1Offset, const aclTensor *x2Offset, const aclTensor *yOffset, const aclTensor *bias,
	       bool transposeX1, bool transposeX2, int64_t groupSize, aclTensor *out, uint64_t *ws, aclOpExecutor **ex) {
	TRY(need_ctx(op));
	TRY(outs(op, ws, ex));
	TRY(chk_fmt(op, "x1", x1, F(DT_INT8) | QMASK_E4M3, 0));
	int mx = x1->dtype == DT_E4M3;
	TRY(chk_fmt(op, "x2", x2, mx ? QMASK_E4M3 : F(DT_INT8), needNz || (x2 != NULL && x2->format == FMT_FRACTAL_NZ)));
	if (yScale != NULL || x1Offset != NULL || x2Offset != NULL || yOffset != NULL) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "qmm-null-offsets", "%s: yScale, x1Offset, x2Offset and yOffset must be NULL here", op);
	}
	if (transposeX1 || transposeX2) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "stand-in-qmm-no-transpose", "%s: the stand-in implements transposeX1 = transposeX2 = false", op);
	}
	if (x1Scale == NULL) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "stand-in-qmm-pertoken-scale",
					 "%s: the stand-in implements the per-token (K-C && K-T) and MX modes, which take x1Scale", op);
	}
	if (x1->ndim != 2 || x2->ndim != 2 || x1->dims[1] != x2->dims[0]) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "qmm-shapes", "%s: x1 (m,k), x2 (k,n)", op);
	}
	int64_t M = x1->dims[0], K = x1->dims[1], N = x2->dims[1];
	if (x2->format == FMT_FRACTAL_NZ) {
		if (x2->storage[0] != (N + NZ_C0 - 1) / NZ_C0 || x2->storage[1] != (K + NZ_R0 - 1) / NZ_R0 || x2->storage[2] != NZ_R0 || x2->storage[3] != NZ_C0) {
			return standin_violation(ACLNN_ERR_PARAM_INVALID, "nz-storage-shape", "%s: NZ x2 (k,n) is stored (n1, k1, 16, 32)", op);
		}
	}
	if (mx) {
		TRY(q_soc950(op));
		TRY(chk_fmt(op, "x1Scale", x1Scale, QMASK_E8M0, 0));
		TRY(chk_fmt(op, "x2Scale", x2Scale, QMASK_E8M0, 0));
		TRY(chk_fmt(op, "out", out, F(DT_FLOAT16) | F(DT_BF16) | F(DT_FLOAT), 0));
		if (bias != NULL) {
			TRY(chk_fmt(op, "bias", bias, F(DT_FLOAT), 0));
		}
		if (groupSize != 4295032864LL) {
			return standin_violation(ACLNN_ERR_PARAM_INVALID, "mx-group-size", "%s: MX wants groupSize 4295032864 ([1,1,32]), got %lld", op, (long long)groupSize);
		}
		int64_t kb2 = (K + 63) / 64;
		if (x1Scale->ndim != 3 || x1Scale->dims[0] != M || x1Scale->dims[1] != kb2 || x1Scale->dims[2] != 2 || x2Scale->ndim != 3 ||
		    x2Scale->dims[0] != kb2 || x2Scale->dims[1] != N || x2Scale->dims[2] != 2) {
			return standin_violation(ACLNN_ERR_PARAM_INVALID, "mx-scale-shapes", "%s: x1Scale (m, ceil(k/64), 2), x2Scale (ceil(k/64), n, 2)", op);
		}
	} else {
		TRY(chk_fmt(op, "x1Scale", x1Scale, F(DT_FLOAT), 0));
		TRY(chk_fmt(op, "out", out, F(DT_FLOAT16) | F(DT_BF16), 0));
		TRY(chk_fmt(op, "x2Scale", x2Scale, out->dtype == DT_BF16 ? F(DT_FLOAT) | F(DT_BF16) : F(DT_FLOAT), 0));
		if (bias != NULL) {
			TRY(chk_fmt(op, "bias", bias, out->dtype == DT_BF16 ? F(DT_INT32) | F(DT_BF16) | F(DT_FLOAT) : F(DT_INT32) | F(DT_FLOAT16) | F(DT_FLOAT), 0));
		}
		if (groupSize != 0) {
			return standin_violation(ACLNN_ERR_PARAM_INVALID, "qmm-group-size", "%s: per-channel/per-token mode wants groupSize 0", op);
		}
		if (x1Scale->ndim != 1 || x1Scale->dims[0] != M || x2Scale->ndim != 1 || x2Scale->dims[0] != N) {
			return standin_violation(ACLNN_ERR_PARAM_INVALID, "qmm-scale-shapes", "%s: x1Scale (m,), x2Scale (n,)", op);
		}
	}
	if (bias != NULL && (bias->ndim != 1 || bias->dims[0] != N)) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "qmm-bias-shape", "%s: bias (n,)", op);
	}
	if (out->ndim != 2 || out->dims[0] != M || out->dims[1] != N) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "qmm-shapes", "%s: out (m,n)", op);
	}
	qmm_args a = {*x1, *x2, *x1Scale, *x2Scale, bias ? *bias : *x1Scale, *out, bias != NULL, mx};
	return new_exec(op, 0, run_qmm, &a, sizeof a, ws, ex);
}
int aclnnQuantMatmulWeightNzGetWorkspaceSize(const aclTensor *x1, const aclTensor *x2, const aclTensor *x1Scale, const aclTensor *x2Scale,
					     const aclTensor *yScale, const aclTensor *x1Offset, const aclTensor *x2Offset, const aclTensor *yOffset,
					     const aclTensor *bias, bool transposeX1, bool transposeX2, int64_t groupSize, aclTensor *out, uint64_t *ws,
					     aclOpExecutor **ex) {
	return qmm("aclnnQuantMatmulWeightNz", 1, x1, x2, x1Scale, x2Scale, yScale, x1Offset, x2Offset, yOffset, bias, transposeX1, transposeX2, groupSize,
		   out, ws, ex);
}
PHASE2(aclnnQuantMatmulWeightNz)
int aclnnQuantMatmulV5GetWorkspaceSize(const aclTensor *x1, const aclTensor *x2, const aclTensor *x1Scale, const aclTensor *x2Scale, const aclTensor *yScale,
				       const aclTensor *x1Offset, const aclTensor *x2Offset, const aclTensor *yOffset, const aclTensor *bias, bool transposeX1,
				       bool transposeX2, int64_t groupSize, aclTensor *out, uint64_t *ws, aclOpExecutor **ex) {
	return qmm("aclnnQuantMatmulV5", 0, x1, x2, x1Scale, x2Scale, yScale, x1Offset, x2Offset, yOffset, bias, transposeX1, transposeX2, groupSize, out, ws,
		   ex);
}
PHASE2(aclnnQuantMatmulV5)

// ---- Stock math operators of the fp32 per-token quantization (quant.go
// rowQuant): aclnnAbs, aclnnAmax (ops-math reduce_max/docs/aclnnAmax.md),
// aclnnDivs, aclnnRound. The documents list integer dtypes too; the
// stand-in implements the floating ones (FLOAT, FLOAT16, BFLOAT16), out
// in self's dtype (aclnnAmax: "out 数据类型需要与self相同"), elementwise
// outs of self's shape. Amax propagates NaN (torch.amax); Round is half to
// even (torch.round); Divs divides in float32.


typedef struct {
	aclTensor x, out;
	double s;
	int kind; // 0 abs, 1 divs, 2 round
} ew_args;
static void run_ew(void *p, void *ws) {
	(void)ws;
	ew_args *a = p;
	int64_t n = numel(&a->out);
	for (int64_t i = 0; i < n; i++) {
		float v = (float)get(&a->x, i);
		switch (a->kind) {
		case 0:
			v = fabsf(v);
			break;
		case 1:
			v = v / (float)a->s;
			break;
		default:
			v = nearbyintf(v);
		}
		set(&a->out, i, v);
	}
}
static int q_elementwise(const char *op, int kind, const aclTensor *self, const aclScalar *s, aclTensor *out, uint64_t *ws, aclOpExecutor **ex) {
	TRY(need_ctx(op));
	TRY(outs(op, ws, ex));
	TRY(chk_fmt(op, "self", self, FLOATS, 0));
	TRY(chk_fmt(op, "out", out, FLOATS, 0));
	if (kind == 1 && (s == NULL || s->magic != SCALAR_MAGIC)) {
		return standin_violation(ACLNN_ERR_PARAM_NULLPTR, "live-scalar", "%s: other is not a live aclScalar", op);
	}
	if (!same_shape(self, out) || (kind != 1 && out->dtype != self->dtype)) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "out-shape", "%s: out must have self's shape%s", op, kind != 1 ? " and dtype" : "");
	}
	ew_args a = {*self, *out, s ? s->v : 0, kind};
	return new_exec(op, 0, run_ew, &a, sizeof a, ws, ex);
}
int aclnnAbsGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *ws, aclOpExecutor **ex) {
	return q_elementwise("aclnnAbs", 0, self, NULL, out, ws, ex);
}
PHASE2(aclnnAbs)
int aclnnDivsGetWorkspaceSize(const aclTensor *self, const aclScalar *other, aclTensor *out, uint64_t *ws, aclOpExecutor **ex) {
	return q_elementwise("aclnnDivs", 1, self, other, out, ws, ex);
}
PHASE2(aclnnDivs)
int aclnnRoundGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *ws, aclOpExecutor **ex) {
	return q_elementwise("aclnnRound", 2, self, NULL, out, ws, ex);
}
PHASE2(aclnnRound)

// aclnnAmax: the max over the dims in dim (each in [-ndim, ndim), none
// twice; an empty list reduces all), out self's shape with those dims 1
// (keepDim) or removed.
typedef struct {
	aclTensor x, out;
	int reduce[STANDIN_MAX_DIMS];
} amax_args;
static void run_amax(void *p, void *ws) {
	(void)ws;
	amax_args *a = p;
	int64_t on = numel(&a->out), n = numel(&a->x);
	float *acc = malloc((on ? on : 1) * sizeof *acc);
	for (int64_t i = 0; i < on; i++) {
		acc[i] = -INFINITY;
	}
	for (int64_t lin = 0; lin < n; lin++) {
		int64_t rem = lin, o = 0, mul = 1;
		for (int i = (int)a->x.ndim - 1; i >= 0; i--) {
			int64_t c = rem % a->x.dims[i];
			rem /= a->x.dims[i];
			if (!a->reduce[i]) {
				o += c * mul;
				mul *= a->x.dims[i];
			}
		}
		float v = (float)get(&a->x, lin);
		if (isnan(v) || v > acc[o]) {
			acc[o] = isnan(acc[o]) ? acc[o] : v;
		}
	}
	for (int64_t i = 0; i < on; i++) {
		set(&a->out, i, acc[i]);
	}
	free(acc);
}
int aclnnAmaxGetWorkspaceSize(const aclTensor *self, const aclIntArray *dim, bool keepDim, aclTensor *out, uint64_t *ws, aclOpExecutor **ex) {
	const char *op = "aclnnAmax";
	TRY(need_ctx(op));
	TRY(outs(op, ws, ex));
	TRY(chk_fmt(op, "self", self, FLOATS, 0));
	TRY(chk_fmt(op, "out", out, FLOATS, 0));
	if (dim == NULL || dim->magic != INTARRAY_MAGIC) {
		return standin_violation(ACLNN_ERR_PARAM_NULLPTR, "live-intarray", "%s: dim is not a live aclIntArray", op);
	}
	if (out->dtype != self->dtype) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "amax-dtype", "%s: out's dtype %d is not self's %d", op, out->dtype, self->dtype);
	}
	amax_args a = {*self, *out};
	for (uint64_t i = 0; i < dim->n; i++) {
		int64_t d = dim->v[i];
		if (d < -(int64_t)self->ndim || d >= (int64_t)self->ndim || a.reduce[d < 0 ? d + (int64_t)self->ndim : d]) {
			return standin_violation(ACLNN_ERR_PARAM_INVALID, "amax-dim", "%s: dim %lld out of range for %llu-D self, or repeated", op, (long long)d,
						 (unsigned long long)self->ndim);
		}
		a.reduce[d < 0 ? d + (int64_t)self->ndim : d] = 1;
	}
	if (dim->n == 0) {
		for (uint64_t i = 0; i < self->ndim; i++) {
			a.reduce[i] = 1;
		}
	}
	uint64_t k = 0;
	int ok = 1;
	for (uint64_t i = 0; i < self->ndim && ok; i++) {
		if (a.reduce[i] && !keepDim) {
			continue;
		}
		int64_t want = a.reduce[i] ? 1 : self->dims[i];
		ok = k < out->ndim && out->dims[k] == want;
		k++;
	}
	if (!ok || k != out->ndim) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "amax-out-shape", "%s: out must be self's shape with the dims reduced (kept as 1 with keepDim)",
					 op);
	}
	return new_exec(op, 0, run_amax, &a, sizeof a, ws, ex);
}
PHASE2(aclnnAmax)
