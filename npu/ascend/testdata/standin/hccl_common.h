// The element types and reductions of HCCL's collectives and the
// HcclCommConfig layout, shared by the
// two HCCL test doubles: the stand-in CANN's libhccl (hccl.c here) and
// hccl/ascend's in-process fake (hccl/ascend/testdata/fakecann). Dtype codes
// are HcclDataType's; ops HcclReduceOp's (0 sum, 1 prod, 2 max, 3 min).
// Reductions run in rank order, in F32 for the floating types (one
// rounding at the end for the 16-bit ones), wrapping for the integers.
#ifndef HCCL_COMMON_H
#define HCCL_COMMON_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "bf16.h"

static size_t esize(int dt) {
	switch (dt) {
	case 0: case 7: case 15: return 1; // INT8, UINT8, FP8E4M3
	case 3: case 11: return 2;         // FP16, BFP16
	case 2: case 4: return 4;          // INT32, FP32
	case 5: return 8;                  // INT64
	}
	return 0;
}

static int is_int(int dt) { return dt == 0 || dt == 2 || dt == 5; }

static int64_t load_i(int dt, const void *p, size_t i) {
	switch (dt) {
	case 0: return ((const int8_t *)p)[i];
	case 2: return ((const int32_t *)p)[i];
	default: return ((const int64_t *)p)[i];
	}
}

static float load_f(int dt, const void *p, size_t i) {
	switch (dt) {
	case 4: return ((const float *)p)[i];
	case 3: return (float)((const _Float16 *)p)[i];
	default: return bf16_to_f(((const uint16_t *)p)[i]);
	}
}

static void store(int dt, void *p, size_t i, float f, int64_t v) {
	switch (dt) {
	case 0: ((int8_t *)p)[i] = (int8_t)v; break;
	case 2: ((int32_t *)p)[i] = (int32_t)v; break;
	case 5: ((int64_t *)p)[i] = v; break;
	case 4: ((float *)p)[i] = f; break;
	case 3: ((_Float16 *)p)[i] = (_Float16)f; break;
	case 11: ((uint16_t *)p)[i] = f_to_bf16(f); break;
	}
}

static float fop(int op, float a, float b) {
	if (op == 2 || op == 3) {
		if (isnan(a) || isnan(b)) {
			return NAN;
		}
		return op == 2 ? (a > b ? a : b) : (a < b ? a : b);
	}
	return op == 0 ? a + b : a * b;
}

static int64_t iop(int op, int dt, int64_t a, int64_t b) {
	uint64_t r = op == 0 ? (uint64_t)a + (uint64_t)b
		     : op == 1 ? (uint64_t)a * (uint64_t)b
			       : (uint64_t)(op == 2 ? (a > b ? a : b) : (a < b ? a : b));
	switch (dt) {
	case 0: return (int8_t)r;
	case 2: return (int32_t)r;
	}
	return (int64_t)r;
}

// reduce: out[i] = in[0][off+i] op in[1][off+i] op ... in rank order, in
// F32 for the floating types (one rounding at the end for 16-bit ones).
static void reduce(int dt, int op, void *out, char **in, int n, size_t off, size_t count) {
	for (size_t i = 0; i < count; i++) {
		if (is_int(dt)) {
			int64_t acc = load_i(dt, in[0], off + i);
			for (int k = 1; k < n; k++) {
				acc = iop(op, dt, acc, load_i(dt, in[k], off + i));
			}
			store(dt, out, i, 0, acc);
		} else {
			float acc = load_f(dt, in[0], off + i);
			for (int k = 1; k < n; k++) {
				acc = fop(op, acc, load_f(dt, in[k], off + i));
			}
			store(dt, out, i, acc, 0);
		}
	}
}

// HcclCommConfig v10 (the fields the test doubles read).
typedef struct {
	size_t size;
	uint32_t magic, version;
	uint64_t reserved;
	uint32_t buffer_size_mb, deterministic;
	char name[128], udi[128];
	uint32_t expansion, tc, sl, world_rank;
	uint64_t job;
	uint8_t zero_copy;
	int32_t exec_timeout;
	char algo[1600], retry_enable[50], retry_params[128], buffer_name[128];
	uint32_t qos;
} config;

#endif
