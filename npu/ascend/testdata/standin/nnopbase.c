// STAND-IN CANN (test double): libnnopbase.so, the aclnn object API
// (tensor, scalar and int-array descriptors; executors). See standin.h.
#include "standin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

STANDIN_EXPORT int standin_dtype_size(int dt) {
	switch (dt) {
	case DT_FLOAT:
	case DT_INT32:
		return 4;
	case DT_FLOAT16:
	case DT_BF16:
		return 2;
	case DT_INT8:
	case DT_UINT8:
	case DT_BOOL:
	case 36: // FLOAT8_E4M3FN
	case 37: // FLOAT8_E8M0
		return 1;
	case DT_INT64:
		return 8;
	}
	return 0;
}

aclTensor *aclCreateTensor(const int64_t *viewDims, uint64_t n, int dataType, const int64_t *stride, int64_t offset, int format,
			   const int64_t *storageDims, uint64_t ns, void *data) {
	if ((viewDims == NULL && n > 0) || n > STANDIN_MAX_DIMS || (storageDims == NULL && ns > 0) || ns > STANDIN_MAX_DIMS) {
		standin_violation(ACLNN_ERR_PARAM_NULLPTR, "tensor-dims", "aclCreateTensor: %llu view dims, %llu storage dims", (unsigned long long)n,
				  (unsigned long long)ns);
		return NULL;
	}
	if (standin_dtype_size(dataType) == 0) {
		standin_violation(ACLNN_ERR_PARAM_INVALID, "tensor-dtype", "aclCreateTensor: dtype %d not supported by the stand-in", dataType);
		return NULL;
	}
	if (((uintptr_t)data & 31) != 0) {
		standin_violation(ACLNN_ERR_PARAM_INVALID, "tensor-data-32-byte-aligned",
				  "aclCreateTensor: tensorData %p is not 32-byte aligned (pass the allocation base and an element offset)", data);
		return NULL;
	}
	aclTensor *t = calloc(1, sizeof *t);
	t->magic = TENSOR_MAGIC;
	t->ndim = n;
	t->dtype = dataType;
	t->format = format;
	t->offset = offset;
	t->data = data;
	t->nstorage = ns;
	int64_t acc = 1;
	for (int i = (int)n - 1; i >= 0; i--) {
		if (viewDims[i] < 0) {
			standin_violation(ACLNN_ERR_PARAM_INVALID, "tensor-dims", "aclCreateTensor: dimension %d is %lld", i, (long long)viewDims[i]);
			free(t);
			return NULL;
		}
		t->dims[i] = viewDims[i];
		t->strides[i] = stride ? stride[i] : acc;
		acc *= viewDims[i];
	}
	for (uint64_t i = 0; i < ns; i++) {
		t->storage[i] = storageDims[i];
	}
	return t;
}

int aclDestroyTensor(const aclTensor *t) {
	if (t == NULL) {
		return 0;
	}
	if (t->magic != TENSOR_MAGIC) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "destroy-once", "aclDestroyTensor(%p): not a live tensor (destroyed twice?)", (void *)t);
	}
	((aclTensor *)t)->magic = 0;
	free((void *)t);
	return 0;
}

aclScalar *aclCreateScalar(void *value, int dt) {
	if (value == NULL) {
		standin_violation(ACLNN_ERR_PARAM_NULLPTR, "scalar-value", "aclCreateScalar(NULL)");
		return NULL;
	}
	aclScalar *s = calloc(1, sizeof *s);
	s->magic = SCALAR_MAGIC;
	s->dtype = dt;
	switch (dt) {
	case DT_FLOAT:
		s->v = *(float *)value;
		break;
	case DT_INT32:
		s->v = *(int32_t *)value;
		break;
	case DT_INT64:
		s->v = (double)*(int64_t *)value;
		break;
	default:
		free(s);
		standin_violation(ACLNN_ERR_PARAM_INVALID, "scalar-dtype", "aclCreateScalar dtype %d not supported by the stand-in", dt);
		return NULL;
	}
	return s;
}

int aclDestroyScalar(const aclScalar *s) {
	if (s == NULL) {
		return 0;
	}
	if (s->magic != SCALAR_MAGIC) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "destroy-once", "aclDestroyScalar(%p): not a live scalar", (void *)s);
	}
	((aclScalar *)s)->magic = 0;
	free((void *)s);
	return 0;
}

aclIntArray *aclCreateIntArray(const int64_t *v, uint64_t n) {
	if ((v == NULL && n > 0) || n > STANDIN_MAX_DIMS) {
		standin_violation(ACLNN_ERR_PARAM_NULLPTR, "intarray-args", "aclCreateIntArray(%p, %llu)", (void *)v, (unsigned long long)n);
		return NULL;
	}
	aclIntArray *a = calloc(1, sizeof *a);
	a->magic = INTARRAY_MAGIC;
	a->n = n;
	memcpy(a->v, v, n * sizeof *v);
	return a;
}

int aclDestroyIntArray(const aclIntArray *a) {
	if (a == NULL) {
		return 0;
	}
	if (a->magic != INTARRAY_MAGIC) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "destroy-once", "aclDestroyIntArray(%p)", (void *)a);
	}
	((aclIntArray *)a)->magic = 0;
	free((void *)a);
	return 0;
}

// aclCreateTensorList takes the tensors over: the list's destroy destroys
// them (OPBASE acl_op_api.cpp L157-172), so a caller must not destroy them
// itself.
aclTensorList *aclCreateTensorList(const aclTensor *const *value, uint64_t size) {
	if ((value == NULL && size > 0) || size > STANDIN_MAX_LIST) {
		standin_violation(ACLNN_ERR_PARAM_NULLPTR, "tensorlist-args", "aclCreateTensorList(%p, %llu)", (void *)value, (unsigned long long)size);
		return NULL;
	}
	for (uint64_t i = 0; i < size; i++) {
		if (value[i] == NULL || value[i]->magic != TENSOR_MAGIC) {
			standin_violation(ACLNN_ERR_PARAM_INVALID, "tensorlist-live-tensors", "aclCreateTensorList: element %llu is not a live aclTensor",
					  (unsigned long long)i);
			return NULL;
		}
	}
	aclTensorList *l = calloc(1, sizeof *l);
	l->magic = TENSORLIST_MAGIC;
	l->n = size;
	l->v = calloc(size > 0 ? size : 1, sizeof *l->v);
	memcpy(l->v, value, size * sizeof *l->v);
	return l;
}

int aclDestroyTensorList(const aclTensorList *l) {
	if (l == NULL) {
		return 0;
	}
	if (l->magic != TENSORLIST_MAGIC) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "destroy-once", "aclDestroyTensorList(%p): not a live tensor list", (void *)l);
	}
	for (uint64_t i = 0; i < l->n; i++) {
		int rc = aclDestroyTensor(l->v[i]);
		if (rc) {
			return rc;
		}
	}
	((aclTensorList *)l)->magic = 0;
	free(l->v);
	free((void *)l);
	return 0;
}

STANDIN_EXPORT aclOpExecutor *standin_executor_new(const char *op, uint64_t ws, void (*run)(void *, void *), void *args) {
	aclOpExecutor *e = calloc(1, sizeof *e);
	e->magic = EXEC_MAGIC;
	snprintf(e->op, sizeof e->op, "%s", op);
	e->workspace = ws;
	e->ctx = standin_current_ctx();
	e->run = run;
	e->args = args;
	return e;
}

// exec_free retires an executor; its header stays allocated (dead) so that
// a later use is reported instead of reading freed memory.
static void exec_free(aclOpExecutor *e) {
	e->magic = 0xdeadu;
	free(e->args);
	e->args = NULL;
}

int aclSetAclOpExecutorRepeatable(aclOpExecutor *e) {
	if (e == NULL || e->magic != EXEC_MAGIC || e->used) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "repeatable-before-run", "aclSetAclOpExecutorRepeatable(%p): call it right after phase 1", (void *)e);
	}
	e->repeatable = 1;
	return 0;
}

int aclDestroyAclOpExecutor(aclOpExecutor *e) {
	if (e == NULL || e->magic != EXEC_MAGIC || !e->repeatable) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "destroy-repeatable-executor-only",
					 "aclDestroyAclOpExecutor(%p): only a repeatable executor is destroyed by the caller", (void *)e);
	}
	exec_free(e);
	return 0;
}

typedef struct {
	aclOpExecutor *e;
	void *ws;
} run_arg;

// run_task runs phase 2 on the stream. A single-use executor is consumed
// by its run: a graph that recorded it (acl.c's capture) finds it dead on
// its second replay and fails, naming the rule.
static int run_task(void *p) {
	run_arg *r = p;
	if (r->e->magic != EXEC_MAGIC) {
		char msg[256];
		snprintf(msg, sizeof msg,
			 "%s: a replayed graph runs a single-use executor that its first replay consumed: make each captured executor repeatable "
			 "(aclSetAclOpExecutorRepeatable right after phase 1) and destroy it with the graph",
			 r->e->op);
		standin_stream_fail("graph-executor-repeatable", msg);
		return 0;
	}
	r->e->run(r->e->args, r->ws);
	if (!r->e->repeatable) {
		exec_free(r->e); // single-use: the framework frees it after phase 2
	}
	return 0;
}

static void run_done(void *p) { free(p); }

STANDIN_EXPORT int standin_phase2(const char *op, void *ws, uint64_t size, aclOpExecutor *e, void *stream) {
	if (standin_current_ctx() == NULL) {
		return standin_violation(ACL_ERROR_RT_CONTEXT_NULL, "context-on-thread", "%s (phase 2) on a thread without a current context", op);
	}
	if (e == NULL || e->magic != EXEC_MAGIC) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "executor-single-use",
					 "%s: executor %p is not live (phase 2 already ran on it? an executor is single-use unless made repeatable)", op, (void *)e);
	}
	if (strcmp(e->op, op) != 0) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "executor-of-this-op", "%s: the executor came from %sGetWorkspaceSize", op, e->op);
	}
	if (e->used && !e->repeatable) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "executor-single-use", "%s: phase 2 issued twice on one executor", op);
	}
	if (size < e->workspace) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "workspace-size", "%s: workspaceSize %llu < %llu from phase 1", op, (unsigned long long)size,
					 (unsigned long long)e->workspace);
	}
	if (e->workspace > 0 && !standin_dev_range(ws, e->workspace)) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "workspace-device-memory", "%s: workspace %p is not %llu bytes of live device memory", op, ws,
					 (unsigned long long)e->workspace);
	}
	if (e->workspace == 0 && ws != NULL) {
		return standin_violation(ACLNN_ERR_PARAM_INVALID, "workspace-null-when-zero", "%s: workspace size 0 wants a NULL workspace", op);
	}
	int rc = standin_stream_ok(stream, op);
	if (rc) {
		return rc;
	}
	e->used = 1;
	run_arg *r = malloc(sizeof *r);
	r->e = e;
	r->ws = ws;
	return standin_enqueue(stream, run_task, r, run_done);
}
