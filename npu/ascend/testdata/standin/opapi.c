// STAND-IN CANN (test double): libopapi.so, the aclnn operators npu/ascend
// calls, each as XxxGetWorkspaceSize (phase 1: validate every argument as
// the operator's documentation states, copy the descriptors into the
// executor) and Xxx (phase 2: standin_phase2 validates the executor,
// workspace, thread context and stream, then the work is queued on the
// stream). Plain C on host memory; fp32 arithmetic.
#include "opapi.h"
#include "bf16.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t numel(const aclTensor *t) {
	int64_t n = 1;
	for (uint64_t i = 0; i < t->ndim; i++) {
		n *= t->dims[i];
	}
	return n;
}

// tensor_storage is the element count of t's storage.
int64_t tensor_storage(const aclTensor *t) {
	int64_t s = 1;
	for (uint64_t i = 0; i < t->nstorage; i++) {
		s *= t->storage[i];
	}
	return s;
}

// chk_fmt validates one tensor argument: live, dtype allowed, the format
// (ND-like, or FRACTAL_NZ when nz: offset 0 and a 4-D fractal storage),
// the view inside its storage and the storage inside device memory.
int chk_fmt(const char *op, const char *name, const aclTensor *t, uint64_t dtmask, int nz) {
	if (t == NULL) {
		return standin_violation(ACLNN_ERR_PARAM_NULLPTR, "required-tensor", "%s: %s is NULL", op, name);
	}
	if (t->magic != TENSOR_MAGIC) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "live-tensor", "%s: %s is not a live aclTensor", op, name);
	}
	if (t->dtype < 0 || t->dtype > 63 || !(dtmask & F(t->dtype))) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "dtype", "%s: %s has dtype %d, not one the operator documents", op, name, t->dtype);
	}
	int64_t store = tensor_storage(t);
	if (nz) {
		if (t->format != FMT_FRACTAL_NZ) {
			return standin_violation(ACLNN_ERR_PARAM_INVALID, "x2-fractal-nz", "%s: %s has format %d; this operator requires FRACTAL_NZ (29)", op, name,
						 t->format);
		}
		if (t->offset != 0 || t->nstorage != 4) {
			return standin_violation(ACLNN_ERR_PARAM_INVALID, "nz-storage-shape", "%s: %s: an NZ tensor has offset 0 and a 4-D fractal storage shape", op,
						 name);
		}
	} else {
		if (t->format != FMT_ND && t->format != FMT_NCHW && t->format != FMT_NCL && t->format != FMT_NCDHW) {
			return standin_violation(ACLNN_ERR_PARAM_INVALID, "format-nd", "%s: %s has format %d; this operator takes ND", op, name, t->format);
		}
		int64_t hi = t->offset;
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
		if (t->nstorage == 0 || t->offset < 0 || hi >= store) {
			return standin_violation(ACLNN_ERR_PARAM_INVALID, "view-in-storage",
						 "%s: %s's view (offset %lld, last element %lld) is outside its storage of %lld elements", op, name,
						 (long long)t->offset, (long long)hi, (long long)store);
		}
	}
	if (!standin_dev_range(t->data, (size_t)store * standin_dtype_size(t->dtype))) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "storage-in-device-memory", "%s: %s's storage (%lld elements at %p) is not live device memory", op, name,
					 (long long)store, t->data);
	}
	return 0;
}

// chk is chk_fmt for an ND-like tensor.
int chk(const char *op, const char *name, const aclTensor *t, uint64_t dtmask) { return chk_fmt(op, name, t, dtmask, 0); }

// elem is the storage element index of the lin-th element (row-major) of
// t's view.
int64_t elem(const aclTensor *t, int64_t lin) {
	// A row-major contiguous view (the common case) needs no divisions.
	int contiguous = 1;
	int64_t want = 1;
	for (int i = (int)t->ndim - 1; i >= 0; i--) {
		if (t->dims[i] != 1 && t->strides[i] != want) {
			contiguous = 0;
			break;
		}
		want *= t->dims[i];
	}
	if (contiguous) {
		return t->offset + lin;
	}
	int64_t off = t->offset;
	for (int i = (int)t->ndim - 1; i >= 0; i--) {
		int64_t d = t->dims[i];
		off += (lin % d) * t->strides[i];
		lin /= d;
	}
	return off;
}

void *ptr(const aclTensor *t, int64_t lin) { return (char *)t->data + elem(t, lin) * standin_dtype_size(t->dtype); }

double get(const aclTensor *t, int64_t lin) {
	char *p = ptr(t, lin);
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

void set(const aclTensor *t, int64_t lin, double v) {
	char *p = ptr(t, lin);
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
	if (a->ndim == out->ndim && memcmp(a->dims, out->dims, sizeof(int64_t) * a->ndim) == 0) {
		return lin; // no broadcast
	}
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

int need_ctx(const char *op) {
	if (standin_current_ctx() == NULL) {
		return standin_violation(ACL_ERROR_RT_CONTEXT_NULL, "context-on-thread",
					 "%sGetWorkspaceSize on a thread without a current context (phase 1 queries the thread's context)", op);
	}
	return 0;
}

int outs(const char *op, uint64_t *ws, aclOpExecutor **ex) {
	if (ws == NULL || ex == NULL) {
		return standin_violation(ACLNN_ERR_PARAM_NULLPTR, "phase1-outputs", "%s: workspaceSize and executor must not be NULL", op);
	}
	return 0;
}

int new_exec(const char *op, uint64_t wsz, void (*run)(void *, void *), void *args, size_t n, uint64_t *ws, aclOpExecutor **ex) {
	void *a = malloc(n);
	memcpy(a, args, n);
	*ex = standin_executor_new(op, wsz, run, a);
	*ws = wsz;
	return 0;
}

int same_shape(const aclTensor *a, const aclTensor *b) {
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

// ---- helpers of the operators below ----

static int chk_intarray(const char *op, const char *name, const aclIntArray *a) {
	if (a == NULL || a->magic != INTARRAY_MAGIC) {
		return standin_violation(ACLNN_ERR_PARAM_NULLPTR, "live-intarray", "%s: %s is not a live aclIntArray", op, name);
	}
	return 0;
}

// shape_is: t has exactly the n dims d.
static int shape_is(const aclTensor *t, uint64_t n, const int64_t *d) {
	if (t->ndim != n) {
		return 0;
	}
	for (uint64_t i = 0; i < n; i++) {
		if (t->dims[i] != d[i]) {
			return 0;
		}
	}
	return 1;
}

static int norm_dim(int64_t *dim, uint64_t ndim) {
	if (*dim < -(int64_t)ndim || *dim >= (int64_t)ndim) {
		return 0;
	}
	if (*dim < 0) {
		*dim += ndim;
	}
	return 1;
}

// ---- aclnnClamp (min and max scalars), aclnnClampMax: out = clamp(self) ----
// A NaN stays NaN (torch.clamp).
typedef struct {
	aclTensor out, x;
	double lo, hi;
	int has_lo;
} clamp_args;
static void run_clamp(void *p, void *ws) {
	(void)ws;
	clamp_args *a = p;
	int64_t n = numel(&a->out);
	for (int64_t i = 0; i < n; i++) {
		float v = (float)get(&a->x, i);
		if (v != v) {
			set(&a->out, i, v);
			continue;
		}
		if (a->has_lo && v < (float)a->lo) {
			v = (float)a->lo;
		}
		if (v > (float)a->hi) {
			v = (float)a->hi;
		}
		set(&a->out, i, v);
	}
}
static int clamp(const char *op, const aclTensor *self, const aclScalar *lo, const aclScalar *hi, aclTensor *out, uint64_t *ws, aclOpExecutor **ex) {
	TRY(need_ctx(op));
	TRY(outs(op, ws, ex));
	TRY(chk(op, "self", self, FLOATS | F(DT_INT32)));
	TRY(chk(op, "out", out, FLOATS | F(DT_INT32)));
	if (lo != NULL || strcmp(op, "aclnnClamp") == 0) {
		TRY(chk_scalar(op, "clipValueMin", lo));
	}
	TRY(chk_scalar(op, "clipValueMax", hi));
	if (!same_shape(self, out) || out->dtype != self->dtype) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "out-shape", "%s: out must have self's shape and dtype", op);
	}
	clamp_args a = {*out, *self, lo ? lo->v : 0, hi->v, lo != NULL};
	return new_exec(op, 0, run_clamp, &a, sizeof a, ws, ex);
}
int aclnnClampGetWorkspaceSize(const aclTensor *self, const aclScalar *clipValueMin, const aclScalar *clipValueMax, aclTensor *out, uint64_t *ws,
			       aclOpExecutor **ex) {
	return clamp("aclnnClamp", self, clipValueMin, clipValueMax, out, ws, ex);
}
PHASE2(aclnnClamp)
int aclnnClampMaxGetWorkspaceSize(const aclTensor *self, const aclScalar *clipValueMax, aclTensor *out, uint64_t *ws, aclOpExecutor **ex) {
	return clamp("aclnnClampMax", self, NULL, clipValueMax, out, ws, ex);
}
PHASE2(aclnnClampMax)

// ---- aclnnSwiGlu: out = silu(first half of x along dim) * second half ----
typedef struct {
	aclTensor out, x;
	int64_t dim;
} swiglu_args;
static void run_swiglu(void *p, void *ws) {
	(void)ws;
	swiglu_args *a = p;
	int64_t half = a->out.dims[a->dim], inner = 1, n = numel(&a->out);
	for (uint64_t i = a->dim + 1; i < a->out.ndim; i++) {
		inner *= a->out.dims[i];
	}
	for (int64_t i = 0; i < n; i++) {
		int64_t outer = i / (half * inner), j = (i / inner) % half, in = i % inner;
		int64_t xi = (outer * 2 * half + j) * inner + in;
		float g = (float)get(&a->x, xi), u = (float)get(&a->x, xi + half * inner);
		set(&a->out, i, g / (1.0f + expf(-g)) * u);
	}
}
int aclnnSwiGluGetWorkspaceSize(const aclTensor *x, int64_t dim, const aclTensor *out, uint64_t *ws, aclOpExecutor **ex) {
	const char *op = "aclnnSwiGlu";
	TRY(need_ctx(op));
	TRY(outs(op, ws, ex));
	TRY(chk(op, "x", x, FLOATS));
	TRY(chk(op, "out", out, FLOATS));
	if (x->ndim == 0 || !norm_dim(&dim, x->ndim) || x->dims[dim] % 2 != 0) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "swiglu-dim", "%s: dim must name a dimension of x of even size", op);
	}
	int64_t want[STANDIN_MAX_DIMS];
	memcpy(want, x->dims, sizeof want);
	want[dim] /= 2;
	if (!shape_is(out, x->ndim, want) || out->dtype != x->dtype) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "swiglu-out", "%s: out must be x's shape with dim halved, in x's dtype", op);
	}
	swiglu_args a = {*out, *x, dim};
	return new_exec(op, 0, run_swiglu, &a, sizeof a, ws, ex);
}
PHASE2(aclnnSwiGlu)

// ---- aclnnEmbedding: out[i, :] = weight[indices[i], :] (weight 2-D) ----
// An index outside [0, rows) is an execution failure (an AI Core
// exception on a real NPU).
typedef struct {
	aclTensor w, idx, out;
} emb_args;
static void run_embedding(void *p, void *ws) {
	(void)ws;
	emb_args *a = p;
	int64_t m = numel(&a->idx), d = a->w.dims[1], rows = a->w.dims[0];
	for (int64_t i = 0; i < m; i++) {
		int64_t r = (int64_t)get(&a->idx, i);
		if (r < 0 || r >= rows) {
			char msg[128];
			snprintf(msg, sizeof msg, "aclnnEmbedding: index %lld out of range for %lld rows", (long long)r, (long long)rows);
			standin_stream_fail("index-in-range", msg);
			return;
		}
		for (int64_t j = 0; j < d; j++) {
			set(&a->out, i * d + j, get(&a->w, r * d + j));
		}
	}
}
int aclnnEmbeddingGetWorkspaceSize(const aclTensor *weight, const aclTensor *indices, const aclTensor *out, uint64_t *ws, aclOpExecutor **ex) {
	const char *op = "aclnnEmbedding";
	TRY(need_ctx(op));
	TRY(outs(op, ws, ex));
	TRY(chk(op, "weight", weight, ALLDT));
	TRY(chk(op, "indices", indices, F(DT_INT32) | F(DT_INT64)));
	TRY(chk(op, "out", out, ALLDT));
	if (weight->ndim != 2) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "embedding-weight-2d", "%s: weight must be 2-D", op);
	}
	int64_t want[STANDIN_MAX_DIMS];
	if (indices->ndim + 1 > STANDIN_MAX_DIMS) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "embedding-out", "%s: indices have too many dims", op);
	}
	memcpy(want, indices->dims, indices->ndim * sizeof *want);
	want[indices->ndim] = weight->dims[1];
	if (!shape_is(out, indices->ndim + 1, want) || out->dtype != weight->dtype) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "embedding-out", "%s: out must be indices' shape + [weight cols], in weight's dtype", op);
	}
	emb_args a = {*weight, *indices, *out};
	return new_exec(op, 0, run_embedding, &a, sizeof a, ws, ex);
}
PHASE2(aclnnEmbedding)

// ---- aclnnInplaceIndexCopy: selfRef.index_copy_(dim, index, source) ----
// Duplicate indices give an unspecified result (torch index_copy_): the
// stand-in copies the rows in reverse order, so the first wins, to show a
// caller that relies on any order.
typedef struct {
	aclTensor self, idx, src;
	int64_t dim;
} icopy_args;
static void run_index_copy(void *p, void *ws) {
	(void)ws;
	icopy_args *a = p;
	int64_t m = numel(&a->idx), rows = a->self.dims[a->dim], inner = 1, outer = 1;
	for (uint64_t i = a->dim + 1; i < a->self.ndim; i++) {
		inner *= a->self.dims[i];
	}
	for (int64_t i = 0; i < a->dim; i++) {
		outer *= a->self.dims[i];
	}
	for (int64_t i = m - 1; i >= 0; i--) {
		int64_t r = (int64_t)get(&a->idx, i);
		if (r < 0 || r >= rows) {
			char msg[128];
			snprintf(msg, sizeof msg, "aclnnInplaceIndexCopy: index %lld out of range for %lld", (long long)r, (long long)rows);
			standin_stream_fail("index-in-range", msg);
			return;
		}
		for (int64_t o = 0; o < outer; o++) {
			for (int64_t j = 0; j < inner; j++) {
				set(&a->self, (o * rows + r) * inner + j, get(&a->src, (o * m + i) * inner + j));
			}
		}
	}
}
int aclnnInplaceIndexCopyGetWorkspaceSize(aclTensor *selfRef, int64_t dim, const aclTensor *index, const aclTensor *source, uint64_t *ws,
					  aclOpExecutor **ex) {
	const char *op = "aclnnInplaceIndexCopy";
	TRY(need_ctx(op));
	TRY(outs(op, ws, ex));
	TRY(chk(op, "selfRef", selfRef, ALLDT));
	TRY(chk(op, "index", index, F(DT_INT32) | F(DT_INT64)));
	TRY(chk(op, "source", source, ALLDT));
	if (selfRef->ndim == 0 || !norm_dim(&dim, selfRef->ndim) || index->ndim > 1) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "index-copy-args", "%s: dim must name a dim of selfRef, index must be 1-D", op);
	}
	int64_t want[STANDIN_MAX_DIMS];
	memcpy(want, selfRef->dims, sizeof want);
	want[dim] = numel(index);
	if (source->dtype != selfRef->dtype || !shape_is(source, selfRef->ndim, want)) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "index-copy-source",
					 "%s: source must be selfRef's shape with dim %lld = len(index), in selfRef's dtype", op, (long long)dim);
	}
	icopy_args a = {*selfRef, *index, *source, dim};
	return new_exec(op, 0, run_index_copy, &a, sizeof a, ws, ex);
}
PHASE2(aclnnInplaceIndexCopy)

// ---- aclnnNanToNum: NaN, +Inf, -Inf replaced ----
typedef struct {
	aclTensor out, x;
	float nan, pinf, ninf;
} n2n_args;
static void run_nan_to_num(void *p, void *ws) {
	(void)ws;
	n2n_args *a = p;
	int64_t n = numel(&a->out);
	for (int64_t i = 0; i < n; i++) {
		float v = (float)get(&a->x, i);
		set(&a->out, i, v != v ? a->nan : isinf(v) ? (v > 0 ? a->pinf : a->ninf) : v);
	}
}
int aclnnNanToNumGetWorkspaceSize(const aclTensor *self, float nan, float posInf, float negInf, aclTensor *out, uint64_t *ws, aclOpExecutor **ex) {
	const char *op = "aclnnNanToNum";
	TRY(need_ctx(op));
	TRY(outs(op, ws, ex));
	TRY(chk(op, "self", self, FLOATS));
	TRY(chk(op, "out", out, FLOATS));
	if (!same_shape(self, out) || self->dtype != out->dtype) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "out-shape", "%s: out must have self's shape and dtype", op);
	}
	n2n_args a = {*out, *self, nan, posInf, negInf};
	return new_exec(op, 0, run_nan_to_num, &a, sizeof a, ws, ex);
}
PHASE2(aclnnNanToNum)

// ---- aclnnSort(self, stable, dim, descending, values, indices INT64) ----
// NaN sorts as the largest value (torch.sort); stable keeps equal values in
// index order, and without it the stand-in orders them against it.
typedef struct {
	aclTensor x, vals, idx;
	int64_t dim;
	int stable, desc;
} sort_args;
typedef struct {
	float v;
	int64_t i;
} sort_ent;
static __thread int g_sort_desc, g_sort_stable; // qsort has no argument: per stream thread
static int sort_cmp(const void *pa, const void *pb) {
	const sort_ent *a = pa, *b = pb;
	int an = a->v != a->v, bn = b->v != b->v;
	int c = 0; // ascending order of value, NaN last
	if (an != bn) {
		c = an ? 1 : -1;
	} else if (!an && a->v != b->v) {
		c = a->v < b->v ? -1 : 1;
	}
	if (g_sort_desc) {
		c = -c;
	}
	if (c == 0) { // unstable: the stand-in breaks ties against index order
		c = a->i < b->i ? -1 : a->i > b->i;
		c = g_sort_stable ? c : -c;
	}
	return c;
}
static void run_sort(void *p, void *ws) {
	sort_args *a = p;
	sort_ent *e = ws;
	int64_t d = a->x.dims[a->dim], inner = 1, n = numel(&a->x);
	for (uint64_t i = a->dim + 1; i < a->x.ndim; i++) {
		inner *= a->x.dims[i];
	}
	g_sort_desc = a->desc;
	g_sort_stable = a->stable;
	for (int64_t base = 0; base < n; base++) {
		if ((base / inner) % d != 0) {
			continue;
		}
		for (int64_t j = 0; j < d; j++) {
			e[j].v = (float)get(&a->x, base + j * inner);
			e[j].i = j;
		}
		qsort(e, d, sizeof *e, sort_cmp);
		for (int64_t j = 0; j < d; j++) {
			set(&a->vals, base + j * inner, e[j].v);
			set(&a->idx, base + j * inner, (double)e[j].i);
		}
	}
}
int aclnnSortGetWorkspaceSize(const aclTensor *self, bool stable, int64_t dim, bool descending, aclTensor *valuesOut, aclTensor *indicesOut, uint64_t *ws,
			      aclOpExecutor **ex) {
	const char *op = "aclnnSort";
	TRY(need_ctx(op));
	TRY(outs(op, ws, ex));
	TRY(chk(op, "self", self, FLOATS | F(DT_INT32)));
	TRY(chk(op, "valuesOut", valuesOut, FLOATS | F(DT_INT32)));
	TRY(chk(op, "indicesOut", indicesOut, F(DT_INT64)));
	if (self->ndim == 0 || !norm_dim(&dim, self->ndim) || !same_shape(self, valuesOut) || !same_shape(self, indicesOut) ||
	    valuesOut->dtype != self->dtype) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "sort-args", "%s: dim of self; valuesOut (self's dtype) and indicesOut have self's shape", op);
	}
	sort_args a = {*self, *valuesOut, *indicesOut, dim, stable, descending};
	return new_exec(op, (uint64_t)self->dims[dim] * sizeof(sort_ent), run_sort, &a, sizeof a, ws, ex);
}
PHASE2(aclnnSort)

// ---- aclnnGather: out[..i..] = self[..index[..i..]..] along dim ----
typedef struct {
	aclTensor x, idx, out;
	int64_t dim;
} gather_args;
static void run_gather(void *p, void *ws) {
	(void)ws;
	gather_args *a = p;
	int64_t n = numel(&a->idx);
	for (int64_t lin = 0; lin < n; lin++) {
		int64_t rem = lin, coord[STANDIN_MAX_DIMS];
		for (int i = (int)a->idx.ndim - 1; i >= 0; i--) {
			coord[i] = rem % a->idx.dims[i];
			rem /= a->idx.dims[i];
		}
		int64_t r = (int64_t)get(&a->idx, lin);
		if (r < 0 || r >= a->x.dims[a->dim]) {
			standin_stream_fail("index-in-range", "aclnnGather: index out of range");
			return;
		}
		coord[a->dim] = r;
		int64_t xl = 0;
		for (uint64_t i = 0; i < a->x.ndim; i++) {
			xl = xl * a->x.dims[i] + coord[i];
		}
		set(&a->out, lin, get(&a->x, xl));
	}
}
int aclnnGatherGetWorkspaceSize(const aclTensor *self, int64_t dim, const aclTensor *index, aclTensor *out, uint64_t *ws, aclOpExecutor **ex) {
	const char *op = "aclnnGather";
	TRY(need_ctx(op));
	TRY(outs(op, ws, ex));
	TRY(chk(op, "self", self, ALLDT));
	TRY(chk(op, "index", index, F(DT_INT32) | F(DT_INT64)));
	TRY(chk(op, "out", out, ALLDT));
	if (self->ndim == 0 || !norm_dim(&dim, self->ndim) || index->ndim != self->ndim) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "gather-args", "%s: index must have self's rank, dim a dim of self", op);
	}
	for (uint64_t i = 0; i < self->ndim; i++) {
		if ((int64_t)i != dim && index->dims[i] > self->dims[i]) {
			return standin_violation(ACLNN_ERR_PARAM_INVALID, "gather-args", "%s: index dim %llu exceeds self's", op, (unsigned long long)i);
		}
	}
	if (!same_shape(index, out) || out->dtype != self->dtype) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "gather-out", "%s: out must have index's shape and self's dtype", op);
	}
	gather_args a = {*self, *index, *out, dim};
	return new_exec(op, 0, run_gather, &a, sizeof a, ws, ex);
}
PHASE2(aclnnGather)

// ---- aclnnLayerNorm over the trailing normalizedShape dims ----
// weight/bias optional (NULL: 1 and 0); meanOut/rstdOut optional.
typedef struct {
	aclTensor x, w, b, out, mean, rstd;
	int has_w, has_b, has_mean, has_rstd;
	int64_t n;
	double eps;
} ln_args;
static void run_layer_norm(void *p, void *ws) {
	(void)ws;
	ln_args *a = p;
	int64_t n = a->n, rows = numel(&a->x) / n;
	for (int64_t r = 0; r < rows; r++) {
		double s = 0, ss = 0;
		for (int64_t j = 0; j < n; j++) {
			s += get(&a->x, r * n + j);
		}
		float mean = (float)(s / n);
		for (int64_t j = 0; j < n; j++) {
			double d = get(&a->x, r * n + j) - mean;
			ss += d * d;
		}
		float rs = 1.0f / sqrtf((float)(ss / n) + (float)a->eps);
		for (int64_t j = 0; j < n; j++) {
			float y = ((float)get(&a->x, r * n + j) - mean) * rs;
			if (a->has_w) {
				y *= (float)get(&a->w, j);
			}
			if (a->has_b) {
				y += (float)get(&a->b, j);
			}
			set(&a->out, r * n + j, y);
		}
		if (a->has_mean) {
			set(&a->mean, r, mean);
		}
		if (a->has_rstd) {
			set(&a->rstd, r, rs);
		}
	}
}
int aclnnLayerNormGetWorkspaceSize(const aclTensor *input, const aclIntArray *normalizedShape, const aclTensor *weightOptional,
				   const aclTensor *biasOptional, double eps, aclTensor *out, aclTensor *meanOutOptional, aclTensor *rstdOutOptional,
				   uint64_t *ws, aclOpExecutor **ex) {
	const char *op = "aclnnLayerNorm";
	TRY(need_ctx(op));
	TRY(outs(op, ws, ex));
	TRY(chk(op, "input", input, FLOATS));
	TRY(chk_intarray(op, "normalizedShape", normalizedShape));
	TRY(chk(op, "out", out, FLOATS));
	uint64_t k = normalizedShape->n;
	if (k == 0 || k > input->ndim) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "layernorm-shape", "%s: normalizedShape must be 1..rank(input) trailing dims", op);
	}
	int64_t n = 1;
	for (uint64_t i = 0; i < k; i++) {
		if (normalizedShape->v[i] != input->dims[input->ndim - k + i]) {
			return standin_violation(ACLNN_ERR_PARAM_INVALID, "layernorm-shape", "%s: normalizedShape[%llu] is not input's trailing dim", op,
						 (unsigned long long)i);
		}
		n *= normalizedShape->v[i];
	}
	const aclTensor *opt[2] = {weightOptional, biasOptional};
	for (int i = 0; i < 2; i++) {
		if (opt[i] == NULL) {
			continue;
		}
		TRY(chk(op, i ? "biasOptional" : "weightOptional", opt[i], FLOATS));
		if (!shape_is(opt[i], k, normalizedShape->v)) {
			return standin_violation(ACLNN_ERR_PARAM_INVALID, "layernorm-weight-shape", "%s: weight and bias have normalizedShape", op);
		}
	}
	if (!same_shape(input, out) || out->dtype != input->dtype) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "out-shape", "%s: out must have input's shape and dtype", op);
	}
	aclTensor *stats[2] = {meanOutOptional, rstdOutOptional};
	for (int i = 0; i < 2; i++) {
		if (stats[i] == NULL) {
			continue;
		}
		TRY(chk(op, i ? "rstdOutOptional" : "meanOutOptional", stats[i], FLOATS));
		if (numel(stats[i]) != numel(input) / n) {
			return standin_violation(ACLNN_ERR_PARAM_INVALID, "layernorm-stats-shape", "%s: mean/rstd hold one value per normalised group", op);
		}
	}
	ln_args a = {*input};
	if (weightOptional) {
		a.w = *weightOptional, a.has_w = 1;
	}
	if (biasOptional) {
		a.b = *biasOptional, a.has_b = 1;
	}
	a.out = *out;
	if (meanOutOptional) {
		a.mean = *meanOutOptional, a.has_mean = 1;
	}
	if (rstdOutOptional) {
		a.rstd = *rstdOutOptional, a.has_rstd = 1;
	}
	a.n = n;
	a.eps = eps;
	return new_exec(op, 0, run_layer_norm, &a, sizeof a, ws, ex);
}
PHASE2(aclnnLayerNorm)

// ---- aclnnMean / aclnnReduceSum over dims (keepDim, dtype of out) ----
typedef struct {
	aclTensor x, out;
	int reduce[STANDIN_MAX_DIMS];
	int mean;
} red_args;
static void run_reduce(void *p, void *ws) {
	red_args *a = p;
	double *acc = ws; // one accumulator per output element
	int64_t on = numel(&a->out), n = numel(&a->x), cnt = n / (on ? on : 1);
	memset(acc, 0, on * sizeof *acc);
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
		acc[o] += get(&a->x, lin);
	}
	for (int64_t i = 0; i < on; i++) {
		set(&a->out, i, a->mean ? acc[i] / cnt : acc[i]);
	}
}
static int reduce_op(const char *op, int mean, const aclTensor *self, const aclIntArray *dim, bool keepDim, int dtype, aclTensor *out, uint64_t *ws,
		     aclOpExecutor **ex) {
	TRY(need_ctx(op));
	TRY(outs(op, ws, ex));
	TRY(chk(op, "self", self, FLOATS));
	TRY(chk_intarray(op, "dim", dim));
	TRY(chk(op, "out", out, FLOATS));
	if (out->dtype != dtype) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "reduce-dtype", "%s: out's dtype %d is not dtype %d", op, out->dtype, dtype);
	}
	red_args a = {*self, *out};
	a.mean = mean;
	for (uint64_t i = 0; i < dim->n; i++) {
		int64_t d = dim->v[i];
		if (!norm_dim(&d, self->ndim) || a.reduce[d]) {
			return standin_violation(ACLNN_ERR_PARAM_INVALID, "reduce-dims", "%s: dim %lld repeated or outside self", op, (long long)dim->v[i]);
		}
		a.reduce[d] = 1;
	}
	int64_t want[STANDIN_MAX_DIMS];
	uint64_t nd = 0;
	for (uint64_t i = 0; i < self->ndim; i++) {
		if (!a.reduce[i]) {
			want[nd++] = self->dims[i];
		} else if (keepDim) {
			want[nd++] = 1;
		}
	}
	if (!shape_is(out, nd, want)) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "reduce-out-shape", "%s: out has not self's shape less the reduced dims", op);
	}
	return new_exec(op, (uint64_t)numel(out) * sizeof(double), run_reduce, &a, sizeof a, ws, ex);
}
int aclnnMeanGetWorkspaceSize(const aclTensor *self, const aclIntArray *dim, bool keepDim, int dtype, aclTensor *out, uint64_t *ws, aclOpExecutor **ex) {
	return reduce_op("aclnnMean", 1, self, dim, keepDim, dtype, out, ws, ex);
}
PHASE2(aclnnMean)
int aclnnReduceSumGetWorkspaceSize(const aclTensor *self, const aclIntArray *dim, bool keepDim, int dtype, aclTensor *out, uint64_t *ws,
				   aclOpExecutor **ex) {
	return reduce_op("aclnnReduceSum", 0, self, dim, keepDim, dtype, out, ws, ex);
}
PHASE2(aclnnReduceSum)

// ---- aclnnMatmul: out[M,N] = self[M,K] @ mat2[K,N] (2-D in the stand-in);
// aclnnBatchMatMul: out[b] = self[b] @ mat2[b] (3-D in the stand-in) ----
typedef struct {
	aclTensor out, x, w;
} mm_args;
static void run_mm(void *p, void *ws) {
	mm_args *a = p;
	float *acc = ws; // fp32 accumulators, B*M*N, in the workspace
	int nd = a->x.ndim;
	int64_t B = nd == 3 ? a->x.dims[0] : 1, M = a->x.dims[nd - 2], K = a->x.dims[nd - 1], N = a->w.dims[nd - 1];
	// The operands are read once through their views into host scratch
	// (x as is, w transposed to (B, N, K)) so the inner loop is contiguous;
	// the products and their order are those of a plain triple loop.
	float *x = malloc(sizeof(float) * (size_t)(B * M * K + 1)), *wt = malloc(sizeof(float) * (size_t)(B * K * N + 1));
	if (x == NULL || wt == NULL) {
		free(x);
		free(wt);
		standin_stream_fail("stand-in-host-memory", "aclnnMatmul: the stand-in could not allocate its host scratch");
		return;
	}
	for (int64_t i = 0; i < B * M * K; i++) {
		x[i] = (float)get(&a->x, i);
	}
	for (int64_t b = 0; b < B; b++) {
		for (int64_t k = 0; k < K; k++) {
			for (int64_t j = 0; j < N; j++) {
				wt[(b * N + j) * K + k] = (float)get(&a->w, (b * K + k) * N + j);
			}
		}
	}
	for (int64_t b = 0; b < B; b++) {
		for (int64_t i = 0; i < M; i++) {
			const float *xr = x + (b * M + i) * K;
			for (int64_t j = 0; j < N; j++) {
				const float *wr = wt + (b * N + j) * K;
				float s = 0;
				for (int64_t k = 0; k < K; k++) {
					s += xr[k] * wr[k];
				}
				acc[(b * M + i) * N + j] = s;
			}
		}
	}
	free(x);
	free(wt);
	for (int64_t i = 0; i < B * M * N; i++) {
		set(&a->out, i, acc[i]);
	}
}
// mm_checks is what both ops check before their shapes: operands of one
// float dtype, a valid cubeMathType, ndim dimensions each (rule names the
// stand-in's limit).
static int mm_checks(const char *op, const aclTensor *self, const aclTensor *mat2, const aclTensor *out, int8_t cubeMathType, uint64_t *ws,
		     aclOpExecutor **ex, int ndim, const char *rule) {
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
	if (self->ndim != (uint64_t)ndim || mat2->ndim != (uint64_t)ndim || out->ndim != (uint64_t)ndim) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, rule, "%s: the stand-in implements %d-D operands only", op, ndim);
	}
	return 0;
}
int aclnnMatmulGetWorkspaceSize(const aclTensor *self, const aclTensor *mat2, aclTensor *out, int8_t cubeMathType, uint64_t *ws, aclOpExecutor **ex) {
	const char *op = "aclnnMatmul";
	TRY(mm_checks(op, self, mat2, out, cubeMathType, ws, ex, 2, "stand-in-matmul-2d"));
	if (self->dims[1] != mat2->dims[0] || out->dims[0] != self->dims[0] || out->dims[1] != mat2->dims[1]) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "matmul-shapes", "%s: [%lld,%lld] @ [%lld,%lld] into [%lld,%lld]", op, (long long)self->dims[0],
					 (long long)self->dims[1], (long long)mat2->dims[0], (long long)mat2->dims[1], (long long)out->dims[0],
					 (long long)out->dims[1]);
	}
	mm_args a = {*out, *self, *mat2};
	return new_exec(op, (uint64_t)(out->dims[0] * out->dims[1]) * 4, run_mm, &a, sizeof a, ws, ex);
}
PHASE2(aclnnMatmul)
int aclnnBatchMatMulGetWorkspaceSize(const aclTensor *self, const aclTensor *mat2, aclTensor *out, int8_t cubeMathType, uint64_t *ws, aclOpExecutor **ex) {
	const char *op = "aclnnBatchMatMul";
	TRY(mm_checks(op, self, mat2, out, cubeMathType, ws, ex, 3, "stand-in-bmm-3d"));
	int64_t want[3] = {self->dims[0], self->dims[1], mat2->dims[2]};
	if (mat2->dims[0] != self->dims[0] || self->dims[2] != mat2->dims[1] || !shape_is(out, 3, want)) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "bmm-shapes", "%s: [B,M,K] @ [B,K,N] into [B,M,N]", op);
	}
	mm_args a = {*out, *self, *mat2};
	return new_exec(op, (uint64_t)(want[0] * want[1] * want[2]) * 4, run_mm, &a, sizeof a, ws, ex);
}
PHASE2(aclnnBatchMatMul)

// ---- aclnnExp; aclnnSoftplus: log1p(exp(beta x))/beta, x where beta x > threshold ----
typedef struct {
	aclTensor out, x;
	double beta, threshold;
	int softplus;
} ex_args;
static void run_expish(void *p, void *ws) {
	(void)ws;
	ex_args *a = p;
	int64_t n = numel(&a->out);
	for (int64_t i = 0; i < n; i++) {
		float x = (float)get(&a->x, i);
		if (!a->softplus) {
			set(&a->out, i, expf(x));
			continue;
		}
		float bx = (float)a->beta * x;
		set(&a->out, i, bx > (float)a->threshold ? x : (float)(log1p(exp((double)bx)) / a->beta));
	}
}
static int expish(const char *op, const aclTensor *self, aclTensor *out, ex_args *a, uint64_t *ws, aclOpExecutor **ex) {
	TRY(need_ctx(op));
	TRY(outs(op, ws, ex));
	TRY(chk(op, "self", self, FLOATS));
	TRY(chk(op, "out", out, FLOATS));
	if (!same_shape(self, out)) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "out-shape", "%s: out must have self's shape", op);
	}
	a->out = *out;
	a->x = *self;
	return new_exec(op, 0, run_expish, a, sizeof *a, ws, ex);
}
int aclnnExpGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *ws, aclOpExecutor **ex) {
	ex_args a = {0};
	return expish("aclnnExp", self, out, &a, ws, ex);
}
PHASE2(aclnnExp)
int aclnnSoftplusGetWorkspaceSize(const aclTensor *self, const aclScalar *beta, const aclScalar *threshold, aclTensor *out, uint64_t *ws,
				  aclOpExecutor **ex) {
	TRY(chk_scalar("aclnnSoftplus", "beta", beta));
	TRY(chk_scalar("aclnnSoftplus", "threshold", threshold));
	if (beta->v == 0) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "softplus-beta", "aclnnSoftplus: beta 0");
	}
	ex_args a = {0};
	a.beta = beta->v;
	a.threshold = threshold->v;
	a.softplus = 1;
	return expish("aclnnSoftplus", self, out, &a, ws, ex);
}
PHASE2(aclnnSoftplus)

// ---- aclnnDiv: out = self / other (broadcast) ----
typedef struct {
	aclTensor out, a, b;
} div_args;
static void run_div(void *p, void *ws) {
	(void)ws;
	div_args *a = p;
	int64_t n = numel(&a->out);
	for (int64_t i = 0; i < n; i++) {
		set(&a->out, i, (float)get(&a->a, bidx(&a->a, &a->out, i)) / (float)get(&a->b, bidx(&a->b, &a->out, i)));
	}
}
int aclnnDivGetWorkspaceSize(const aclTensor *self, const aclTensor *other, aclTensor *out, uint64_t *ws, aclOpExecutor **ex) {
	const char *op = "aclnnDiv";
	TRY(need_ctx(op));
	TRY(outs(op, ws, ex));
	TRY(chk(op, "self", self, FLOATS | F(DT_INT32)));
	TRY(chk(op, "other", other, FLOATS | F(DT_INT32)));
	TRY(chk(op, "out", out, FLOATS));
	if (!bcast_ok(self, out) || !bcast_ok(other, out)) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "broadcast", "%s: the inputs do not broadcast to out's shape", op);
	}
	div_args a = {*out, *self, *other};
	return new_exec(op, 0, run_div, &a, sizeof a, ws, ex);
}
PHASE2(aclnnDiv)

// ---- aclnnScatter: out = self with out[..index[..i..]..] = src[..i..]
// along dim (torch.scatter); reduce 1 adds src there, 2 multiplies
// (torch's scatter_(reduce="add" | "multiply")) ----
typedef struct {
	aclTensor self, idx, src, out;
	int64_t dim, reduce;
} scatter_args;
static void run_scatter(void *p, void *ws) {
	(void)ws;
	scatter_args *a = p;
	int64_t n = numel(&a->out);
	for (int64_t i = 0; i < n; i++) {
		set(&a->out, i, get(&a->self, i));
	}
	n = numel(&a->idx);
	for (int64_t lin = 0; lin < n; lin++) {
		int64_t rem = lin, coord[STANDIN_MAX_DIMS];
		for (int i = (int)a->idx.ndim - 1; i >= 0; i--) {
			coord[i] = rem % a->idx.dims[i];
			rem /= a->idx.dims[i];
		}
		int64_t sl = 0;
		for (uint64_t i = 0; i < a->src.ndim; i++) {
			sl = sl * a->src.dims[i] + coord[i];
		}
		int64_t r = (int64_t)get(&a->idx, lin);
		if (r < 0 || r >= a->out.dims[a->dim]) {
			standin_stream_fail("index-in-range", "aclnnScatter: index out of range");
			return;
		}
		coord[a->dim] = r;
		int64_t ol = 0;
		for (uint64_t i = 0; i < a->out.ndim; i++) {
			ol = ol * a->out.dims[i] + coord[i];
		}
		double v = get(&a->src, sl);
		if (a->reduce == 1) {
			v = (float)get(&a->out, ol) + (float)v;
		} else if (a->reduce == 2) {
			v = (float)get(&a->out, ol) * (float)v;
		}
		set(&a->out, ol, v);
	}
}
int aclnnScatterGetWorkspaceSize(const aclTensor *self, int64_t dim, const aclTensor *index, const aclTensor *src, int64_t reduce, aclTensor *out,
				 uint64_t *ws, aclOpExecutor **ex) {
	const char *op = "aclnnScatter";
	TRY(need_ctx(op));
	TRY(outs(op, ws, ex));
	TRY(chk(op, "self", self, ALLDT));
	TRY(chk(op, "index", index, F(DT_INT32) | F(DT_INT64)));
	TRY(chk(op, "src", src, ALLDT));
	TRY(chk(op, "out", out, ALLDT));
	if (reduce < 0 || reduce > 2) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "scatter-reduce", "%s: reduce %lld (0 none, 1 add, 2 multiply)", op, (long long)reduce);
	}
	if (self->ndim == 0 || !norm_dim(&dim, self->ndim) || index->ndim != self->ndim || src->ndim != self->ndim) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "scatter-args", "%s: index and src must have self's rank", op);
	}
	for (uint64_t i = 0; i < self->ndim; i++) {
		if (index->dims[i] > src->dims[i] || ((int64_t)i != dim && index->dims[i] > self->dims[i])) {
			return standin_violation(ACLNN_ERR_PARAM_INVALID, "scatter-args", "%s: index dim %llu exceeds src's or self's", op, (unsigned long long)i);
		}
	}
	if (!same_shape(self, out) || out->dtype != self->dtype || src->dtype != self->dtype) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "scatter-out", "%s: out and src have self's dtype, out self's shape", op);
	}
	scatter_args a = {*self, *index, *src, *out, dim, reduce};
	return new_exec(op, 0, run_scatter, &a, sizeof a, ws, ex);
}
PHASE2(aclnnScatter)

// ---- aclnnArange: out[i] = start + i*step, i < ceil((end - start) / step) ----
// As the CANN aclnn reference documents it: start, end and step are
// scalars, step is not zero and has the sign of end - start (or end ==
// start), out is 1-D with exactly that many elements (the caller sizes
// it), in a float or integer dtype; no workspace. Values are computed in
// double and rounded once to out's dtype.
typedef struct {
	aclTensor out;
	double start, step;
} arange_args;
static void run_arange(void *p, void *ws) {
	(void)ws;
	arange_args *a = p;
	int64_t n = numel(&a->out);
	for (int64_t i = 0; i < n; i++) {
		set(&a->out, i, a->start + (double)i * a->step);
	}
}
int aclnnArangeGetWorkspaceSize(const aclScalar *start, const aclScalar *end, const aclScalar *step, aclTensor *out, uint64_t *ws, aclOpExecutor **ex) {
	const char *op = "aclnnArange";
	TRY(need_ctx(op));
	TRY(outs(op, ws, ex));
	TRY(chk_scalar(op, "start", start));
	TRY(chk_scalar(op, "end", end));
	TRY(chk_scalar(op, "step", step));
	TRY(chk(op, "out", out, FLOATS | F(DT_INT32) | F(DT_INT64)));
	double s = start->v, e = end->v, d = step->v;
	if (d == 0 || isnan(s) || isnan(e) || isnan(d) || isinf(s) || isinf(e) || isinf(d) || (e - s) * d < 0) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "arange-range", "%s: start %g, end %g, step %g: step must be finite, non-zero and point from start to end",
					 op, s, e, d);
	}
	int64_t want = (int64_t)ceil((e - s) / d);
	if (out->ndim != 1 || out->dims[0] != want) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "arange-out", "%s: out must be 1-D of ceil((end-start)/step) = %lld elements", op, (long long)want);
	}
	arange_args a = {*out, s, d};
	return new_exec(op, 0, run_arange, &a, sizeof a, ws, ex);
}
PHASE2(aclnnArange)
