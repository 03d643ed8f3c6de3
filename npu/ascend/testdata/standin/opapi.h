// Internal to the stand-in's libopapi (opapi*.c): the helpers every
// operator uses to validate its arguments, read and write elements and
// make its executor. Hidden from the library's exports.
#ifndef OPAPI_H
#define OPAPI_H

#include "standin.h"

#pragma GCC visibility push(hidden)

#define F(dt) (1ull << (dt))
#define FLOATS (F(DT_FLOAT) | F(DT_FLOAT16) | F(DT_BF16))
#define ALLDT (FLOATS | F(DT_INT32) | F(DT_INT64) | F(DT_INT8) | F(DT_UINT8))

#define TRY(x)                     \
	do {                       \
		int rc_ = (x);     \
		if (rc_) {         \
			return rc_; \
		}                  \
	} while (0)

// PHASE2 defines operator name's phase 2 (standin_phase2 checks it).
#define PHASE2(name)                                                                                   \
	int name(void *ws, uint64_t size, aclOpExecutor *e, void *stream) {                            \
		return standin_phase2(#name, ws, size, e, stream);                                     \
	}

int64_t numel(const aclTensor *t);
int64_t tensor_storage(const aclTensor *t);
// elem is the storage element index of the lin-th element (row-major) of
// t's view; ptr its address.
int64_t elem(const aclTensor *t, int64_t lin);
void *ptr(const aclTensor *t, int64_t lin);
// get and set read and write the lin-th element of t's view in any of the
// dtypes the operators take (floats round through float32).
double get(const aclTensor *t, int64_t lin);
void set(const aclTensor *t, int64_t lin, double v);
int chk_fmt(const char *op, const char *name, const aclTensor *t, uint64_t dtmask, int nz);
int chk(const char *op, const char *name, const aclTensor *t, uint64_t dtmask);
// need_ctx and outs are phase 1's checks of the thread's context and of
// its output pointers.
int need_ctx(const char *op);
int outs(const char *op, uint64_t *ws, aclOpExecutor **ex);
int new_exec(const char *op, uint64_t wsz, void (*run)(void *, void *), void *args, size_t n, uint64_t *ws, aclOpExecutor **ex);
int same_shape(const aclTensor *a, const aclTensor *b);
// e4m3_dec and e8m0_dec decode an OCP FLOAT8_E4M3FN element and a
// FLOAT8_E8M0 scale (2^(s-127), 0xff NaN): the MX operators' arithmetic.
float e4m3_dec(uint8_t b);
double e8m0_dec(uint8_t s);

#pragma GCC visibility pop

#endif
