// STAND-IN CANN (test double): libopapi.so, the aclnn operators npu/ascend
// calls, each as XxxGetWorkspaceSize (phase 1: validate every argument as
// the operator's documentation states, copy the descriptors into the
// executor) and Xxx (phase 2: standin_phase2 validates the executor,
// workspace, thread context and stream, then the work is queued on the
// stream). Plain C on host memory; fp32 arithmetic.
#include "standin.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define F(dt) (1u << (dt))
#define FLOATS (F(DT_FLOAT) | F(DT_FLOAT16) | F(DT_BF16))
#define ALLDT (FLOATS | F(DT_INT32) | F(DT_INT64) | F(DT_INT8) | F(DT_UINT8))

static int64_t numel(const aclTensor *t) {
	int64_t n = 1;
	for (uint64_t i = 0; i < t->ndim; i++) {
		n *= t->dims[i];
	}
	return n;
}

// chk validates one tensor argument: live, dtype allowed, ND-like format,
// the view inside its storage and the storage inside device memory.
static int chk(const char *op, const char *name, const aclTensor *t, unsigned dtmask) {
	if (t == NULL) {
		return standin_violation(ACLNN_ERR_PARAM_NULLPTR, "required-tensor", "%s: %s is NULL", op, name);
	}
	if (t->magic != TENSOR_MAGIC) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "live-tensor", "%s: %s is not a live aclTensor", op, name);
	}
	if (t->dtype < 0 || t->dtype > 31 || !(dtmask & F(t->dtype))) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "dtype", "%s: %s has dtype %d, not one the operator documents", op, name, t->dtype);
	}
	if (t->format != FMT_ND && t->format != FMT_NCHW && t->format != FMT_NCL && t->format != FMT_NCDHW) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "format-nd", "%s: %s has format %d; this operator takes ND", op, name, t->format);
	}
	int64_t hi = t->offset, store = 1;
	for (uint64_t i = 0; i < t->ndim; i++) {
		if (t->dims[i] == 0) {
			hi = -1;
			break;
		}
		if (t->strides[i] < 0) {
			return standin_violation(ACLNN_ERR_PARAM_INVALID, "strides", "%s: %s has a negative stride", op, name);
		}
		hi += (t->dims[i] - 1) * t->strides[i];
	}
	for (uint64_t i = 0; i < t->nstorage; i++) {
		store *= t->storage[i];
	}
	if (t->nstorage == 0 || t->offset < 0 || hi >= store) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "view-in-storage", "%s: %s's view (offset %lld, last element %lld) is outside its storage of %lld elements",
					 op, name, (long long)t->offset, (long long)hi, (long long)store);
	}
	if (!standin_dev_range(t->data, (size_t)store * standin_dtype_size(t->dtype))) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "storage-in-device-memory", "%s: %s's storage (%lld elements at %p) is not live device memory", op, name,
					 (long long)store, t->data);
	}
	return 0;
}

// elem is the storage element index of the lin-th element (row-major) of
// t's view.
static int64_t elem(const aclTensor *t, int64_t lin) {
	int64_t off = t->offset;
	for (int i = (int)t->ndim - 1; i >= 0; i--) {
		int64_t d = t->dims[i];
		off += (lin % d) * t->strides[i];
		lin /= d;
	}
	return off;
}

static float bf16_to_f(uint16_t b) {
	uint32_t u = (uint32_t)b << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}
static uint16_t f_to_bf16(float f) {
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u) {
		return (uint16_t)(u >> 16) | 0x40;
	}
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

static double get(const aclTensor *t, int64_t lin) {
	char *p = (char *)t->data + elem(t, lin) * standin_dtype_size(t->dtype);
	switch (t->dtype) {
	case DT_FLOAT:
		return *(float *)p;
	case DT_FLOAT16:
		return (float)*(_Float16 *)p;
	case DT_BF16:
		return bf16_to_f(*(uint16_t *)p);
	case DT_INT32:
		return *(int32_t *)p;
	case DT_INT64:
		return (double)*(int64_t *)p;
	case DT_INT8:
		return *(int8_t *)p;
	case DT_UINT8:
		return *(uint8_t *)p;
	}
	return NAN;
}

static void set(const aclTensor *t, int64_t lin, double v) {
	char *p = (char *)t->data + elem(t, lin) * standin_dtype_size(t->dtype);
	switch (t->dtype) {
	case DT_FLOAT:
		*(float *)p = (float)v;
		break;
	case DT_FLOAT16:
		*(_Float16 *)p = (_Float16)(float)v;
		break;
	case DT_BF16:
		*(uint16_t *)p = f_to_bf16((float)v);
		break;
	case DT_INT32:
		*(int32_t *)p = (int32_t)v;
		break;
	case DT_INT64:
		*(int64_t *)p = (int64_t)v;
		break;
	case DT_INT8:
		*(int8_t *)p = (int8_t)v;
		break;
	case DT_UINT8:
		*(uint8_t *)p = (uint8_t)v;
		break;
	}
}

// bcast_ok: a broadcasts to out's shape (numpy rules, trailing dims).
static int bcast_ok(const aclTensor *a, const aclTensor *out) {
	if (a->ndim > out->ndim) {
		return 0;
	}
	for (uint64_t i = 0; i < a->ndim; i++) {
		int64_t da = a->dims[a->ndim - 1 - i], d = out->dims[out->ndim - 1 - i];
		if (da != d && da != 1) {
			return 0;
		}
	}
	return 1;
}

// bidx maps out's lin-th element to a's (broadcast) linear index.
static int64_t bidx(const aclTensor *a, const aclTensor *out, int64_t lin) {
	int64_t r = 0, mul = 1;
	for (uint64_t i = 0; i < out->ndim; i++) {
		int64_t d = out->dims[out->ndim - 1 - i], c = lin % d;
		lin /= d;
		if (i < a->ndim) {
			int64_t da = a->dims[a->ndim - 1 - i];
			r += (da == 1 ? 0 : c) * mul;
			mul *= da;
		}
	}
	return r;
}

static int need_ctx(const char *op) {
	if (standin_current_ctx() == NULL) {
		return standin_violation(ACL_ERROR_RT_CONTEXT_NULL, "context-on-thread",
					 "%sGetWorkspaceSize on a thread without a current context (phase 1 queries the thread's context)", op);
	}
	return 0;
}

static int outs(const char *op, uint64_t *ws, aclOpExecutor **ex) {
	if (ws == NULL || ex == NULL) {
		return standin_violation(ACLNN_ERR_PARAM_NULLPTR, "phase1-outputs", "%s: workspaceSize and executor must not be NULL", op);
	}
	return 0;
}

#define TRY(x)                     \
	do {                       \
		int rc_ = (x);     \
		if (rc_) {         \
			return rc_; \
		}                  \
	} while (0)

#define PHASE2(name)                                                                                   \
	int name(void *ws, uint64_t size, aclOpExecutor *e, void *stream) {                            \
		return standin_phase2(#name, ws, size, e, stream);                                     \
	}

static int new_exec(const char *op, uint64_t wsz, void (*run)(void *, void *), void *args, size_t n, uint64_t *ws, aclOpExecutor **ex) {
	void *a = malloc(n);
	memcpy(a, args, n);
	*ex = standin_executor_new(op, wsz, run, a);
	*ws = wsz;
	return 0;
}

static int same_shape(const aclTensor *a, const aclTensor *b) {
	if (a->ndim != b->ndim) {
		return 0;
	}
	for (uint64_t i = 0; i < a->ndim; i++) {
		if (a->dims[i] != b->dims[i]) {
			return 0;
		}
	}
	return 1;
}

// ---- aclnnInplaceCopy: selfRef = src (src broadcast to selfRef, cast) ----
typedef struct {
	aclTensor dst, src;
} copy_args;
static void run_copy(void *p, void *ws) {
	(void)ws;
	copy_args *a = p;
	int64_t n = numel(&a->dst);
	for (int64_t i = 0; i < n; i++) {
		set(&a->dst, i, get(&a->src, bidx(&a->src, &a->dst, i)));
	}
}
int aclnnInplaceCopyGetWorkspaceSize(aclTensor *selfRef, const aclTensor *src, uint64_t *ws, aclOpExecutor **ex) {
	const char *op = "aclnnInplaceCopy";
	TRY(need_ctx(op));
	TRY(outs(op, ws, ex));
	TRY(chk(op, "selfRef", selfRef, ALLDT));
	TRY(chk(op, "src", src, ALLDT));
	if (!bcast_ok(src, selfRef)) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "broadcast", "%s: src does not broadcast to selfRef", op);
	}
	copy_args a = {*selfRef, *src};
	return new_exec(op, 0, run_copy, &a, sizeof a, ws, ex);
}
PHASE2(aclnnInplaceCopy)

// ---- aclnnCast: out = (dtype) self ----
int aclnnCastGetWorkspaceSize(const aclTensor *self, int dtype, aclTensor *out, uint64_t *ws, aclOpExecutor **ex) {
	const char *op = "aclnnCast";
	TRY(need_ctx(op));
	TRY(outs(op, ws, ex));
	TRY(chk(op, "self", self, ALLDT));
	TRY(chk(op, "out", out, ALLDT));
	if (out->dtype != dtype || !same_shape(self, out)) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "cast-out", "%s: out must have self's shape and dtype %d (has %d)", op, dtype, out->dtype);
	}
	copy_args a = {*out, *self};
	return new_exec(op, 0, run_copy, &a, sizeof a, ws, ex);
}
PHASE2(aclnnCast)

// ---- aclnnInplaceFillScalar ----
typedef struct {
	aclTensor dst;
	double v;
} fill_args;
static void run_fill(void *p, void *ws) {
	(void)ws;
	fill_args *a = p;
	int64_t n = numel(&a->dst);
	for (int64_t i = 0; i < n; i++) {
		set(&a->dst, i, a->v);
	}
}
static int chk_scalar(const char *op, const char *name, const aclScalar *s) {
	if (s == NULL || s->magic != SCALAR_MAGIC) {
		return standin_violation(ACLNN_ERR_PARAM_NULLPTR, "live-scalar", "%s: %s is not a live aclScalar", op, name);
	}
	return 0;
}
int aclnnInplaceFillScalarGetWorkspaceSize(aclTensor *selfRef, const aclScalar *value, uint64_t *ws, aclOpExecutor **ex) {
	const char *op = "aclnnInplaceFillScalar";
	TRY(need_ctx(op));
	TRY(outs(op, ws, ex));
	TRY(chk(op, "selfRef", selfRef, ALLDT));
	TRY(chk_scalar(op, "value", value));
	fill_args a = {*selfRef, value->v};
	return new_exec(op, 0, run_fill, &a, sizeof a, ws, ex);
}
PHASE2(aclnnInplaceFillScalar)

// ---- aclnnAdd (out = self + alpha*other), aclnnMul, aclnnMuls ----
typedef struct {
	aclTensor out, a, b;
	double alpha;
	int kind; // 0 add, 1 mul, 2 muls (alpha is the scalar)
} bin_args;
static void run_bin(void *p, void *ws) {
	(void)ws;
	bin_args *a = p;
	int64_t n = numel(&a->out);
	for (int64_t i = 0; i < n; i++) {
		float x = (float)get(&a->a, bidx(&a->a, &a->out, i));
		float r;
		if (a->kind == 2) {
			r = x * (float)a->alpha;
		} else {
			float y = (float)get(&a->b, bidx(&a->b, &a->out, i));
			r = a->kind == 0 ? x + (float)a->alpha * y : x * y;
		}
		set(&a->out, i, r);
	}
}
static int binary(const char *op, int kind, const aclTensor *self, const aclTensor *other, double alpha, aclTensor *out, uint64_t *ws,
		  aclOpExecutor **ex) {
	TRY(need_ctx(op));
	TRY(outs(op, ws, ex));
	TRY(chk(op, "self", self, FLOATS | F(DT_INT32)));
	if (kind != 2) {
		TRY(chk(op, "other", other, FLOATS | F(DT_INT32)));
	}
	TRY(chk(op, "out", out, FLOATS | F(DT_INT32)));
	if (!bcast_ok(self, out) || (kind != 2 && !bcast_ok(other, out))) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "broadcast", "%s: the inputs do not broadcast to out's shape", op);
	}
	bin_args a = {*out, *self, kind != 2 ? *other : *self, alpha, kind};
	return new_exec(op, 0, run_bin, &a, sizeof a, ws, ex);
}
int aclnnAddGetWorkspaceSize(const aclTensor *self, const aclTensor *other, const aclScalar *alpha, aclTensor *out, uint64_t *ws, aclOpExecutor **ex) {
	TRY(chk_scalar("aclnnAdd", "alpha", alpha));
	return binary("aclnnAdd", 0, self, other, alpha->v, out, ws, ex);
}
PHASE2(aclnnAdd)
int aclnnMulGetWorkspaceSize(const aclTensor *self, const aclTensor *other, aclTensor *out, uint64_t *ws, aclOpExecutor **ex) {
	return binary("aclnnMul", 1, self, other, 0, out, ws, ex);
}
PHASE2(aclnnMul)
int aclnnMulsGetWorkspaceSize(const aclTensor *self, const aclScalar *other, aclTensor *out, uint64_t *ws, aclOpExecutor **ex) {
	TRY(chk_scalar("aclnnMuls", "other", other));
	return binary("aclnnMuls", 2, self, NULL, other->v, out, ws, ex);
}
PHASE2(aclnnMuls)

// ---- unary: aclnnSigmoid, aclnnSilu ----
typedef struct {
	aclTensor out, x;
	int kind;
} un_args;
static void run_un(void *p, void *ws) {
	(void)ws;
	un_args *a = p;
	int64_t n = numel(&a->out);
	for (int64_t i = 0; i < n; i++) {
		float x = (float)get(&a->x, i);
		float s = 1.0f / (1.0f + expf(-x));
		set(&a->out, i, a->kind == 0 ? s : x * s);
	}
}
static int unary(const char *op, int kind, const aclTensor *self, aclTensor *out, uint64_t *ws, aclOpExecutor **ex) {
	TRY(need_ctx(op));
	TRY(outs(op, ws, ex));
	TRY(chk(op, "self", self, FLOATS));
	TRY(chk(op, "out", out, FLOATS));
	if (!same_shape(self, out)) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "out-shape", "%s: out must have self's shape", op);
	}
	un_args a = {*out, *self, kind};
	return new_exec(op, 0, run_un, &a, sizeof a, ws, ex);
}
int aclnnSigmoidGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *ws, aclOpExecutor **ex) {
	return unary("aclnnSigmoid", 0, self, out, ws, ex);
}
PHASE2(aclnnSigmoid)
int aclnnSiluGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *ws, aclOpExecutor **ex) {
	return unary("aclnnSilu", 1, self, out, ws, ex);
}
PHASE2(aclnnSilu)

// ---- aclnnSoftmax over dim ----
typedef struct {
	aclTensor out, x;
	int64_t dim;
} sm_args;
static void run_softmax(void *p, void *ws) {
	sm_args *a = p;
	float *tmp = ws; // one row, in the workspace
	int64_t d = a->x.dims[a->dim], inner = 1, n = numel(&a->x);
	for (uint64_t i = a->dim + 1; i < a->x.ndim; i++) {
		inner *= a->x.dims[i];
	}
	for (int64_t base = 0; base < n; base++) {
		if ((base / inner) % d != 0) {
			continue; // not the first element of its row along dim
		}
		float m = -INFINITY, sum = 0;
		for (int64_t j = 0; j < d; j++) {
			tmp[j] = (float)get(&a->x, base + j * inner);
			m = tmp[j] > m ? tmp[j] : m;
		}
		for (int64_t j = 0; j < d; j++) {
			tmp[j] = expf(tmp[j] - m);
			sum += tmp[j];
		}
		for (int64_t j = 0; j < d; j++) {
			set(&a->out, base + j * inner, tmp[j] / sum);
		}
	}
}
int aclnnSoftmaxGetWorkspaceSize(const aclTensor *self, int64_t dim, aclTensor *out, uint64_t *ws, aclOpExecutor **ex) {
	const char *op = "aclnnSoftmax";
	TRY(need_ctx(op));
	TRY(outs(op, ws, ex));
	TRY(chk(op, "self", self, FLOATS));
	TRY(chk(op, "out", out, FLOATS));
	if (self->ndim == 0 || dim < -(int64_t)self->ndim || dim >= (int64_t)self->ndim || !same_shape(self, out)) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "softmax-args", "%s: dim %lld of a %llu-D tensor, out of self's shape", op, (long long)dim,
					 (unsigned long long)self->ndim);
	}
	if (dim < 0) {
		dim += self->ndim;
	}
	sm_args a = {*out, *self, dim};
	return new_exec(op, (uint64_t)self->dims[dim] * 4, run_softmax, &a, sizeof a, ws, ex);
}
PHASE2(aclnnSoftmax)

// ---- aclnnMatmul: out[M,N] = self[M,K] @ mat2[K,N] (2-D in the stand-in) ----
typedef struct {
	aclTensor out, x, w;
} mm_args;
static void run_mm(void *p, void *ws) {
	mm_args *a = p;
	float *acc = ws; // fp32 accumulators, M*N, in the workspace
	int64_t M = a->x.dims[0], K = a->x.dims[1], N = a->w.dims[1];
	for (int64_t i = 0; i < M; i++) {
		for (int64_t j = 0; j < N; j++) {
			float s = 0;
			for (int64_t k = 0; k < K; k++) {
				s += (float)get(&a->x, i * K + k) * (float)get(&a->w, k * N + j);
			}
			acc[i * N + j] = s;
		}
	}
	for (int64_t i = 0; i < M * N; i++) {
		set(&a->out, i, acc[i]);
	}
}
int aclnnMatmulGetWorkspaceSize(const aclTensor *self, const aclTensor *mat2, aclTensor *out, int8_t cubeMathType, uint64_t *ws, aclOpExecutor **ex) {
	const char *op = "aclnnMatmul";
	TRY(need_ctx(op));
	TRY(outs(op, ws, ex));
	TRY(chk(op, "self", self, FLOATS));
	TRY(chk(op, "mat2", mat2, FLOATS));
	TRY(chk(op, "out", out, FLOATS));
	if (cubeMathType < 0 || cubeMathType > 4) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "cube-math-type", "%s: cubeMathType %d", op, cubeMathType);
	}
	if (self->dtype != mat2->dtype || out->dtype != self->dtype) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "matmul-same-dtype", "%s: self dtype %d, mat2 %d, out %d: the stand-in wants one dtype", op,
					 self->dtype, mat2->dtype, out->dtype);
	}
	if (self->ndim != 2 || mat2->ndim != 2 || out->ndim != 2) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "stand-in-matmul-2d", "%s: the stand-in implements 2-D operands only", op);
	}
	if (self->dims[1] != mat2->dims[0] || out->dims[0] != self->dims[0] || out->dims[1] != mat2->dims[1]) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "matmul-shapes", "%s: [%lld,%lld] @ [%lld,%lld] into [%lld,%lld]", op, (long long)self->dims[0],
					 (long long)self->dims[1], (long long)mat2->dims[0], (long long)mat2->dims[1], (long long)out->dims[0],
					 (long long)out->dims[1]);
	}
	mm_args a = {*out, *self, *mat2};
	return new_exec(op, (uint64_t)(out->dims[0] * out->dims[1]) * 4, run_mm, &a, sizeof a, ws, ex);
}
PHASE2(aclnnMatmul)

// ---- aclnnRmsNorm: y = x * rstd * gamma over gamma's (trailing) dims ----
typedef struct {
	aclTensor x, g, y, rstd;
	double eps;
} rms_args;
static void run_rms(void *p, void *ws) {
	(void)ws;
	rms_args *a = p;
	int64_t n = numel(&a->g), rows = numel(&a->x) / n;
	for (int64_t r = 0; r < rows; r++) {
		float ss = 0;
		for (int64_t j = 0; j < n; j++) {
			float v = (float)get(&a->x, r * n + j);
			ss += v * v;
		}
		float rs = 1.0f / sqrtf(ss / (float)n + (float)a->eps);
		for (int64_t j = 0; j < n; j++) {
			set(&a->y, r * n + j, (float)get(&a->x, r * n + j) * rs * (float)get(&a->g, j));
		}
		set(&a->rstd, r, rs);
	}
}
int aclnnRmsNormGetWorkspaceSize(const aclTensor *x, const aclTensor *gamma, double eps, const aclTensor *yOut, const aclTensor *rstdOut, uint64_t *ws,
				 aclOpExecutor **ex) {
	const char *op = "aclnnRmsNorm";
	TRY(need_ctx(op));
	TRY(outs(op, ws, ex));
	TRY(chk(op, "x", x, FLOATS));
	TRY(chk(op, "gamma", gamma, FLOATS));
	TRY(chk(op, "yOut", yOut, FLOATS));
	TRY(chk(op, "rstdOut", rstdOut, F(DT_FLOAT)));
	if (gamma->dtype != x->dtype || yOut->dtype != x->dtype || !same_shape(x, yOut)) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "rmsnorm-dtypes", "%s: gamma and yOut must have x's dtype (and yOut its shape)", op);
	}
	if (gamma->ndim == 0 || gamma->ndim > x->ndim || x->ndim > 8) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "rmsnorm-gamma-trailing", "%s: gamma must be x's trailing dimensions", op);
	}
	uint64_t lead = x->ndim - gamma->ndim;
	for (uint64_t i = 0; i < gamma->ndim; i++) {
		if (gamma->dims[i] != x->dims[lead + i]) {
			return standin_violation(ACLNN_ERR_PARAM_INVALID, "rmsnorm-gamma-trailing", "%s: gamma dim %llu is %lld, x's trailing dim %lld", op,
						 (unsigned long long)i, (long long)gamma->dims[i], (long long)x->dims[lead + i]);
		}
	}
	if (rstdOut->ndim != x->ndim) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "rmsnorm-rstd-shape", "%s: rstdOut must have x's rank with the normalised dims 1", op);
	}
	for (uint64_t i = 0; i < x->ndim; i++) {
		if (rstdOut->dims[i] != (i < lead ? x->dims[i] : 1)) {
			return standin_violation(ACLNN_ERR_PARAM_INVALID, "rmsnorm-rstd-shape", "%s: rstdOut dim %llu is %lld", op, (unsigned long long)i,
						 (long long)rstdOut->dims[i]);
		}
	}
	rms_args a = {*x, *gamma, *yOut, *rstdOut, eps};
	return new_exec(op, 0, run_rms, &a, sizeof a, ws, ex);
}
PHASE2(aclnnRmsNorm)
