// simt.h runs the CUDA kernels of npu/cuda/kernels on the CPU, so that a
// machine without a GPU can check a kernel against another one (a new
// kernel against the GPU-verified one it replaces, bit for bit where they
// promise that). It is the CUDA execution model, emulated: each thread of
// a block is a fiber on one OS thread (a six-register stack switch on
// x86-64, ucontext elsewhere), blocks run one after
// another; __syncthreads parks a fiber until every live thread of the
// block has arrived; warp collectives (shuffles, ballot, ldmatrix,
// mma.sync) park the lanes and are executed by the scheduler once every
// lane of the mask has arrived; cp.async copies are deferred to the
// cp.async.wait_group that retires them, so a kernel that reads its
// buffer too early reads stale bytes. Fibers run in a chosen order
// (simt::order: forward, reverse or shuffled) between synchronisation
// points, so a result that depends on it is a race. Not a timing model:
// only results mean anything.
//
// Used by tools/cuda/simt/run.sh, which includes this header ahead of a
// check program and the kernel files it names, rewritten by prep.py (the
// inline-PTX helpers give way to the emulations at the bottom of this
// file). Not used by the build.
#pragma once
#include "halves.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <ucontext.h>
#include <vector>

#define __device__
#define __host__
#define __global__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__ __restrict

struct __attribute__((aligned(8))) int2 { int x, y; };
struct __attribute__((aligned(16))) int4 { int x, y, z, w; };
struct __attribute__((aligned(8))) uint2 { unsigned x, y; };
struct uint3 { unsigned x, y, z; };
struct __attribute__((aligned(16))) uint4 { unsigned x, y, z, w; };
struct __attribute__((aligned(8))) float2 { float x, y; };
struct __attribute__((aligned(16))) float4 { float x, y, z, w; };
struct __attribute__((aligned(16))) double2 { double x, y; };
struct __attribute__((aligned(16))) longlong2 { long long x, y; };
struct dim3 {
	unsigned x = 1, y = 1, z = 1;
	dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

namespace simt {

#if defined(__x86_64__)
// Context is a fiber's saved stack pointer: switchTo pushes the
// callee-saved registers on the current stack, saves its pointer in
// *from, loads to and pops them back: no system call, unlike swapcontext
// (which saves the signal mask), so a block switch costs nanoseconds.
struct Context {
	void *sp = nullptr;
};
__attribute__((naked, noinline)) static void switchStack(void **from, void *to) {
	asm volatile("pushq %rbp\n\tpushq %rbx\n\tpushq %r12\n\tpushq %r13\n\tpushq %r14\n\tpushq %r15\n\t"
		     "movq %rsp, (%rdi)\n\tmovq %rsi, %rsp\n\t"
		     "popq %r15\n\tpopq %r14\n\tpopq %r13\n\tpopq %r12\n\tpopq %rbx\n\tpopq %rbp\n\tret");
}
inline void switchTo(Context &from, Context &to) { switchStack(&from.sp, to.sp); }
// prime makes c start fn on the stack [stack, stack + size) when switched to.
inline void prime(Context &c, char *stack, size_t size, void (*fn)()) {
	uintptr_t top = ((uintptr_t)stack + size) & ~(uintptr_t)15;
	void **sp = (void **)(top - 16);
	sp[0] = (void *)fn; // ret lands in fn with the stack as after a call
	sp[1] = nullptr;
	sp -= 6;            // the six registers switchStack pops
	for (int i = 0; i < 6; i++) {
		sp[i] = nullptr;
	}
	c.sp = sp;
}
#else
struct Context {
	ucontext_t uc;
};
inline void switchTo(Context &from, Context &to) { swapcontext(&from.uc, &to.uc); }
inline void prime(Context &c, char *stack, size_t size, void (*fn)()) {
	getcontext(&c.uc);
	c.uc.uc_stack.ss_sp = stack;
	c.uc.uc_stack.ss_size = size;
	c.uc.uc_link = nullptr;
	makecontext(&c.uc, fn, 0);
}
#endif

enum { RUN, BAR, WARP, DONE };
enum { OP_SHFL_XOR, OP_SHFL_IDX, OP_SHFL_UP, OP_BALLOT, OP_SYNCWARP, OP_MMA_BF16, OP_MMA_S8, OP_LDSM_X4, OP_LDSM_X2T };

struct Copy {
	void *dst;
	const void *src;
	int bytes;
	long group;
};

// Thread is one CUDA thread: its fiber, its pending cp.async copies and
// the record of the warp collective it is parked in.
struct Thread {
	Context ctx;
	uint3 idx;
	int state = DONE;
	int barv = 0;
	std::vector<Copy> copies;
	long committed = 0;
	int op = 0, width = 32;
	unsigned mask = 0;
	uint64_t val = 0;
	int arg = 0;
	uint32_t in[6] = {};
	float fc[4] = {};
	int ic[4] = {};
	const void *addr = nullptr;
	uint32_t out[4] = {};
	uint64_t rv = 0;
};

inline Thread *cur;
inline std::vector<Thread> threads;
inline std::vector<char *> stacks;
inline Context sched;
inline uint3 bidx;
inline dim3 bdim, gdim;
inline std::vector<unsigned char> dyn;
inline std::function<void()> body;
inline int order = 0; // 0 forward, 1 reverse, 2 shuffled
inline unsigned seed = 1;
inline int barOr = 0;
constexpr size_t stackSize = 256 << 10;

inline void park(int st) {
	cur->state = st;
	switchTo(cur->ctx, sched);
}

inline void retire(Thread *t, long keep) {
	std::vector<Copy> rest;
	for (const Copy &c : t->copies) {
		if (c.group < t->committed - keep) {
			memcpy(c.dst, c.src, c.bytes);
			memset((char *)c.dst + c.bytes, 0, 16 - c.bytes);
		} else {
			rest.push_back(c);
		}
	}
	t->copies.swap(rest);
}

// entry is every fiber's first frame; it never returns (the scheduler
// does not resume a finished thread).
inline void entry() {
	body();
	cur->committed++;
	retire(cur, 0); // copies still in flight land before the block ends
	cur->state = DONE;
	for (;;) {
		switchTo(cur->ctx, sched);
	}
}

// warpOp executes the collective the lanes of warp w are parked in.
inline void warpOp(Thread *l, int n) {
	const int op = l[0].op;
	for (int i = 0; i < n; i++) {
		Thread &t = l[i];
		if (t.state != WARP) {
			continue;
		}
		const int seg = (i / t.width) * t.width;
		int src = i;
		switch (op) {
		case OP_SHFL_XOR:
			src = i ^ t.arg;
			break;
		case OP_SHFL_IDX:
			src = seg + t.arg % t.width;
			break;
		case OP_SHFL_UP:
			src = i - t.arg;
			break;
		}
		if (op <= OP_SHFL_UP) {
			if (src < seg || src >= seg + t.width || src >= n || l[src].state != WARP) {
				src = i;
			}
			t.rv = l[src].val;
		}
	}
	if (op == OP_BALLOT) {
		uint64_t b = 0;
		for (int i = 0; i < n; i++) {
			if (l[i].state == WARP && l[i].val) {
				b |= 1ull << i;
			}
		}
		for (int i = 0; i < n; i++) {
			l[i].rv = b & l[i].mask;
		}
	}
	if (op == OP_MMA_BF16 || op == OP_MMA_S8) {
		const int KK = op == OP_MMA_BF16 ? 16 : 32;
		double A[16][32], B[32][8], C[16][8];
		for (int i = 0; i < 32; i++) {
			const int g = i >> 2, q = i & 3;
			const Thread &t = l[i];
			if (op == OP_MMA_BF16) {
				for (int j = 0; j < 2; j++) {
					A[g][2 * q + j] = simt_bf16_f32(t.in[0] >> (16 * j) & 0xffff);
					A[g + 8][2 * q + j] = simt_bf16_f32(t.in[1] >> (16 * j) & 0xffff);
					A[g][2 * q + 8 + j] = simt_bf16_f32(t.in[2] >> (16 * j) & 0xffff);
					A[g + 8][2 * q + 8 + j] = simt_bf16_f32(t.in[3] >> (16 * j) & 0xffff);
					B[2 * q + j][g] = simt_bf16_f32(t.in[4] >> (16 * j) & 0xffff);
					B[2 * q + 8 + j][g] = simt_bf16_f32(t.in[5] >> (16 * j) & 0xffff);
					C[g][2 * q + j] = t.fc[j];
					C[g + 8][2 * q + j] = t.fc[2 + j];
				}
			} else {
				for (int j = 0; j < 4; j++) {
					A[g][4 * q + j] = (int8_t)(t.in[0] >> (8 * j));
					A[g + 8][4 * q + j] = (int8_t)(t.in[1] >> (8 * j));
					A[g][4 * q + 16 + j] = (int8_t)(t.in[2] >> (8 * j));
					A[g + 8][4 * q + 16 + j] = (int8_t)(t.in[3] >> (8 * j));
					B[4 * q + j][g] = (int8_t)(t.in[4] >> (8 * j));
					B[4 * q + 16 + j][g] = (int8_t)(t.in[5] >> (8 * j));
				}
				for (int j = 0; j < 2; j++) {
					C[g][2 * q + j] = t.ic[j];
					C[g + 8][2 * q + j] = t.ic[2 + j];
				}
			}
		}
		for (int i = 0; i < 32; i++) {
			const int g = i >> 2, q = i & 3;
			Thread &t = l[i];
			for (int h = 0; h < 2; h++) {
				for (int j = 0; j < 2; j++) {
					const int r = g + 8 * h, c = 2 * q + j;
					double s = 0;
					for (int k = 0; k < KK; k++) {
						s += A[r][k] * B[k][c];
					}
					if (op == OP_MMA_BF16) {
						t.fc[2 * h + j] = (float)(C[r][c] + s);
					} else {
						t.ic[2 * h + j] = (int)((int64_t)C[r][c] + (int64_t)s);
					}
				}
			}
		}
	}
	if (op == OP_LDSM_X4 || op == OP_LDSM_X2T) {
		const int nm = op == OP_LDSM_X4 ? 4 : 2;
		for (int i = 0; i < 32; i++) {
			for (int m = 0; m < nm; m++) {
				if (op == OP_LDSM_X4) {
					const char *row = (const char *)l[8 * m + i / 4].addr;
					memcpy(&l[i].out[m], row + 4 * (i % 4), 4);
				} else {
					uint16_t e[2];
					for (int j = 0; j < 2; j++) {
						const uint16_t *row = (const uint16_t *)l[8 * m + 2 * (i % 4) + j].addr;
						e[j] = row[i / 4];
					}
					l[i].out[m] = e[0] | (uint32_t)e[1] << 16;
				}
			}
		}
	}
	for (int i = 0; i < n; i++) {
		if (l[i].state == WARP) {
			l[i].state = RUN;
		}
	}
}

inline void fail(const char *what) {
	fprintf(stderr, "simt: %s (block %u,%u,%u)\n", what, bidx.x, bidx.y, bidx.z);
	int shown = 0;
	for (size_t i = 0; i < threads.size() && shown < 16; i++) {
		if (threads[i].state != DONE) {
			fprintf(stderr, "  thread %zu: %s, collective %d\n", i,
				threads[i].state == BAR ? "at __syncthreads" : threads[i].state == WARP ? "at a warp collective" : "running",
				threads[i].op);
			shown++;
		}
	}
	exit(3);
}

// ready says whether the lanes of warp l (m of them) parked at a
// collective can go: every live lane of its mask has arrived at it.
inline bool ready(Thread *l, int m) {
	int first = -1;
	for (int i = 0; i < m; i++) {
		if (l[i].state == WARP) {
			first = i;
			break;
		}
	}
	if (first < 0) {
		return false;
	}
	const unsigned mask = l[first].mask;
	for (int i = 0; i < m; i++) {
		if ((mask >> i & 1) && l[i].state != DONE && (l[i].state != WARP || l[i].op != l[first].op)) {
			return false;
		}
	}
	if ((l[first].op == OP_MMA_BF16 || l[first].op == OP_MMA_S8 || l[first].op >= OP_LDSM_X4) &&
	    (m != 32 || mask != 0xffffffffu)) {
		fail("a tensor-core collective without all 32 lanes");
	}
	for (int i = 0; i < m; i++) {
		if ((mask >> i & 1) == 0 && l[i].state == WARP && l[i].op == l[first].op) {
			fail("lanes of one warp in different collectives' masks");
		}
	}
	return true;
}

// runBlock runs block bidx of the launch to completion. Warps run one at
// a time, each as far as it can go (to a __syncthreads, or a collective
// that waits for lanes that are done or elsewhere) before the next one
// starts: a warp always runs ahead of the others, so reading what another
// warp has not yet written without a barrier between reads stale data.
// simt::order picks which warp runs ahead (and the lanes' order within a
// warp): first to last, last to first, or shuffled at every step.
inline void runBlock(int n) {
	std::mt19937 rng(seed + bidx.x * 7919 + bidx.y * 104729 + bidx.z * 1299709);
	const int nw = (n + 31) / 32;
	std::vector<int> wseq(nw), lseq(32);
	for (int i = 0; i < nw; i++) {
		wseq[i] = order == 1 ? nw - 1 - i : i;
	}
	for (int i = 0; i < 32; i++) {
		lseq[i] = order == 1 ? 31 - i : i;
	}
	for (int i = 0; i < n; i++) {
		Thread &t = threads[i];
		t.idx = {(unsigned)(i % bdim.x), (unsigned)(i / bdim.x % bdim.y), (unsigned)(i / (bdim.x * bdim.y))};
		t.state = RUN;
		t.copies.clear();
		t.committed = 0;
		prime(t.ctx, stacks[i], stackSize, entry);
	}
	memset(dyn.data(), 0xff, dyn.size()); // uninitialised shared memory reads as NaNs
	for (;;) {
		if (order == 2) {
			std::shuffle(wseq.begin(), wseq.end(), rng);
		}
		bool progress = false;
		for (int w : wseq) {
			Thread *l = &threads[32 * w];
			const int m = n - 32 * w < 32 ? n - 32 * w : 32;
			for (;;) {
				if (order == 2) {
					std::shuffle(lseq.begin(), lseq.end(), rng);
				}
				for (int i : lseq) {
					if (i < m && l[i].state == RUN) {
						cur = &l[i];
						switchTo(sched, cur->ctx);
						progress = true;
					}
				}
				if (!ready(l, m)) {
					break;
				}
				warpOp(l, m);
				progress = true;
			}
		}
		if (progress) {
			continue;
		}
		int live = 0, atBar = 0, orv = 0;
		for (int i = 0; i < n; i++) {
			if (threads[i].state != DONE) {
				live++;
			}
			if (threads[i].state == BAR) {
				atBar++;
				orv |= threads[i].barv;
			}
		}
		if (live == 0) {
			return;
		}
		if (atBar != live) {
			fail("deadlock: threads parked at a warp collective that cannot complete, or split between it and __syncthreads");
		}
		barOr = orv;
		for (int i = 0; i < n; i++) {
			if (threads[i].state == BAR) {
				threads[i].state = RUN;
			}
		}
	}
}

// launch runs kernel call f over grid × block with smem bytes of dynamic
// shared memory.
inline void launch(dim3 grid, dim3 block, size_t smem, std::function<void()> f) {
	const int n = block.x * block.y * block.z;
	if (n > 1024 || n <= 0) {
		fprintf(stderr, "simt: block of %d threads\n", n);
		exit(3);
	}
	if ((int)threads.size() < n) {
		threads.resize(n);
	}
	while ((int)stacks.size() < n) {
		stacks.push_back((char *)malloc(stackSize));
	}
	dyn.assign(smem + 16, 0);
	body = f;
	bdim = block;
	gdim = grid;
	for (unsigned z = 0; z < grid.z; z++) {
		for (unsigned y = 0; y < grid.y; y++) {
			for (unsigned x = 0; x < grid.x; x++) {
				bidx = {x, y, z};
				runBlock(n);
			}
		}
	}
}

inline void *dynsmem() { return (void *)(((uintptr_t)dyn.data() + 15) & ~(uintptr_t)15); }

template <class T> inline T collective(int op, unsigned mask, T v, int arg, int width) {
	static_assert(sizeof(T) <= 8, "collective of a value wider than 8 bytes");
	cur->op = op;
	cur->mask = mask;
	cur->width = width;
	cur->arg = arg;
	cur->val = 0;
	memcpy(&cur->val, &v, sizeof(T));
	park(WARP);
	T r;
	memcpy(&r, &cur->rv, sizeof(T));
	return r;
}

} // namespace simt

#define threadIdx (simt::cur->idx)
#define blockIdx (simt::bidx)
#define blockDim (simt::bdim)
#define gridDim (simt::gdim)
#define SIMT_DYN(T) ((T *)simt::dynsmem())

inline void __syncthreads() {
	simt::cur->barv = 0;
	simt::park(simt::BAR);
}
inline int __syncthreads_or(int p) {
	simt::cur->barv = p != 0;
	simt::park(simt::BAR);
	return simt::barOr;
}
inline void __syncwarp(unsigned mask = 0xffffffffu) { simt::collective<int>(simt::OP_SYNCWARP, mask, 0, 0, 32); }
template <class T> inline T __shfl_xor_sync(unsigned mask, T v, int m, int width = 32) {
	return simt::collective<T>(simt::OP_SHFL_XOR, mask, v, m, width);
}
template <class T> inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
	return simt::collective<T>(simt::OP_SHFL_IDX, mask, v, src, width);
}
template <class T> inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32) {
	return simt::collective<T>(simt::OP_SHFL_UP, mask, v, (int)d, width);
}
inline unsigned __ballot_sync(unsigned mask, int p) {
	return (unsigned)simt::collective<uint64_t>(simt::OP_BALLOT, mask, p != 0, 0, 32);
}
inline void __threadfence() {}
inline void __threadfence_block() {}

inline unsigned __float_as_uint(float f) {
	unsigned u;
	memcpy(&u, &f, 4);
	return u;
}
inline float __uint_as_float(unsigned u) {
	float f;
	memcpy(&f, &u, 4);
	return f;
}
inline int __float_as_int(float f) { return (int)__float_as_uint(f); }
inline float __int_as_float(int i) { return __uint_as_float((unsigned)i); }
inline double __longlong_as_double(long long v) {
	double d;
	memcpy(&d, &v, 8);
	return d;
}
inline long long __double_as_longlong(double d) {
	long long v;
	memcpy(&v, &d, 8);
	return v;
}
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fdividef(float a, float b) { return a / b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __saturatef(float x) { return x < 0 ? 0 : x > 1 ? 1 : x; }
// The conversions to integers saturate, NaN giving 0 (cvt.rzi), where a
// C++ cast of an out-of-range value is undefined.
inline int __double2int_rz(double x) { return x != x ? 0 : x >= 2147483647.0 ? 2147483647 : x <= -2147483648.0 ? (-2147483647 - 1) : (int)x; }
inline int __float2int_rz(float x) { return __double2int_rz(x); }
inline unsigned long long __double2ull_rz(double x) {
	return x != x || x <= 0 ? 0 : x >= 18446744073709551615.0 ? ~0ull : (unsigned long long)x;
}
inline float __double2float_rn(double x) { return (float)x; }
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __popcll(unsigned long long v) { return __builtin_popcountll(v); }
inline int __ffs(int v) { return __builtin_ffs(v); }
inline int __clz(int v) { return v == 0 ? 32 : __builtin_clz((unsigned)v); }
inline int __clzll(long long v) { return v == 0 ? 64 : __builtin_clzll((unsigned long long)v); }
template <class T> inline T __ldcg(const T *p) { return *p; }
template <class T> inline T __ldg(const T *p) { return *p; }
inline int __dp4a(int a, int b, int c) {
	for (int i = 0; i < 4; i++) {
		c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
	}
	return c;
}
inline unsigned __cvta_generic_to_shared(const void *p) { return (unsigned)(uintptr_t)p; }
template <class A, class B> inline auto min(A a, B b) -> decltype(a + b) { return b < a ? b : a; }
template <class A, class B> inline auto max(A a, B b) -> decltype(a + b) { return a < b ? b : a; }

// Atomics: the fibers of a block never run at once, so plain updates are atomic.
template <class T, class F> inline T rmw(T *p, F f) {
	const T o = *p;
	*p = f(o);
	return o;
}
template <class T, class U> inline T atomicAdd(T *p, U v) { return rmw(p, [&](T o) { return (T)(o + (T)v); }); }
template <class T, class U> inline T atomicSub(T *p, U v) { return rmw(p, [&](T o) { return (T)(o - (T)v); }); }
template <class T, class U> inline T atomicMax(T *p, U v) { return rmw(p, [&](T o) { return o < (T)v ? (T)v : o; }); }
template <class T, class U> inline T atomicMin(T *p, U v) { return rmw(p, [&](T o) { return (T)v < o ? (T)v : o; }); }
template <class T, class U> inline T atomicExch(T *p, U v) { return rmw(p, [&](T) { return (T)v; }); }
template <class T, class U> inline T atomicOr(T *p, U v) { return rmw(p, [&](T o) { return (T)(o | (T)v); }); }
template <class T, class U> inline T atomicAnd(T *p, U v) { return rmw(p, [&](T o) { return (T)(o & (T)v); }); }
template <class U> inline unsigned atomicInc(unsigned *p, U v) {
	return rmw(p, [&](unsigned o) { return o >= (unsigned)v ? 0u : o + 1; });
}
template <class T, class U, class V> inline T atomicCAS(T *p, U c, V v) {
	return rmw(p, [&](T o) { return o == (T)c ? (T)v : o; });
}

// The inline-PTX helpers of common.cuh, moe.cu and quant.cu (prep.py's
// EMULATED, which removes the originals), emulated.
// (The conversions, simt_f16_to_f32, simt_f32_to_f16 and simt_bf16_rn,
// are halves.h's.)
inline void mma_bf16(float *c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
	simt::Thread *t = simt::cur;
	const unsigned in[6] = {a0, a1, a2, a3, b0, b1};
	memcpy(t->in, in, sizeof in);
	memcpy(t->fc, c, 16);
	t->op = simt::OP_MMA_BF16;
	t->mask = 0xffffffffu;
	simt::park(simt::WARP);
	memcpy(c, t->fc, 16);
}
inline void mma_s8(int *c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
	simt::Thread *t = simt::cur;
	const unsigned in[6] = {a0, a1, a2, a3, b0, b1};
	memcpy(t->in, in, sizeof in);
	memcpy(t->ic, c, 16);
	t->op = simt::OP_MMA_S8;
	t->mask = 0xffffffffu;
	simt::park(simt::WARP);
	memcpy(c, t->ic, 16);
}
inline unsigned bf2(float a, float b) { return simt_bf16_rn(a) | simt_bf16_rn(b) << 16; }
inline void cp_async16(void *dst, const void *src, int bytes) {
	if (((uintptr_t)dst | (uintptr_t)src) & 15) {
		fprintf(stderr, "simt: cp.async dst %p src %p\n", dst, src);
		simt::fail("cp.async of a misaligned 16-byte chunk");
	}
	simt::cur->copies.push_back({dst, src, bytes, simt::cur->committed});
}
inline void cp_async_commit() { simt::cur->committed++; }
inline void cp_async_wait1() { simt::retire(simt::cur, 1); }
inline void cp_async_wait0() { simt::retire(simt::cur, 0); }
inline void simt_ldsm(int op, const void *p, unsigned *out, int n) {
	simt::Thread *t = simt::cur;
	if ((uintptr_t)p & 15) {
		simt::fail("ldmatrix row address not 16-byte aligned");
	}
	t->addr = p;
	t->op = op;
	t->mask = 0xffffffffu;
	simt::park(simt::WARP);
	memcpy(out, t->out, 4 * n);
}
inline void ldsm_x4(const unsigned short *p, unsigned &a0, unsigned &a1, unsigned &a2, unsigned &a3) {
	unsigned o[4];
	simt_ldsm(simt::OP_LDSM_X4, p, o, 4);
	a0 = o[0], a1 = o[1], a2 = o[2], a3 = o[3];
}
inline void ldsm_x2_trans(const unsigned short *p, unsigned &b0, unsigned &b1) {
	unsigned o[2];
	simt_ldsm(simt::OP_LDSM_X2T, p, o, 2);
	b0 = o[0], b1 = o[1];
}
inline uint4 ld_stream(const unsigned short *p) { return *(const uint4 *)p; }
