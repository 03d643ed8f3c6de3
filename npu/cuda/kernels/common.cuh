// Prepended to every kernel file before NVRTC compiles it (kernels.go):
// types, dtype codes, conversions that match npu/convert.go bit for bit,
// block reductions and the device error report. NVRTC needs no header for
// any of it; tools/cuda/clang-check.sh type-checks the files with clang.

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

// dtype codes (dtypeCode in kernels.go).
#define DT_F32 0
#define DT_BF16 1
#define DT_F16 2
#define DT_I32 3
#define DT_F8E4M3 4

// Device error codes (deviceErrors in errors.go).
#define ERR_INDEX 1  // a row index outside its table
#define ERR_SLOT 2   // a state slot outside the state tensor
#define ERR_LAYOUT 3 // a SeqLayout that does not describe the batch
#define ERR_ROWS 4        // QueryStart does not split the batch's rows
#define ERR_SHARED_SLOT 5 // two sequences with rows share a state slot
#define ERR_POSITION 6    // a position outside its sequence, block table or cache

// pdl_prologue is every kernel's first statement. Kernels launch with
// programmatic dependent launch (usePDL in backend.go): a kernel's blocks
// may be scheduled before the previous kernel on the stream has finished,
// so each waits here for it (its completion and memory; a no-op when the
// launch was plain) before reading or writing anything, then lets the
// next kernel's blocks be scheduled as SMs free up: the drain-and-fill
// gap between kernels overlaps the waiting, not the work.
__device__ __forceinline__ void pdl_prologue() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("griddepcontrol.wait;" ::: "memory");
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

#define GRID_STRIDE(i, n) for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)blockDim.x * gridDim.x)

// report records the first device-side failure: its code, the op (opCode in
// errors.go) and the offending value. Sync reads and clears it.
__device__ __forceinline__ void report(int *err, int code, int op, int value) {
	if (atomicCAS(err, 0, code) == 0) {
		err[1] = op;
		err[2] = value;
	}
}

__device__ __forceinline__ float bf16_to_f32(u16 h) { return __uint_as_float(((u32)h) << 16); }

// bf16x8 widens the 8 BF16 values of a 16-byte load (element 0 in the low
// half of q.x) into wf.
__device__ __forceinline__ void bf16x8(float *wf, uint4 q) {
	const u32 w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
	for (int h = 0; h < 4; h++) {
		wf[2 * h] = __uint_as_float(w[h] << 16);
		wf[2 * h + 1] = __uint_as_float(w[h] & 0xffff0000u);
	}
}

// f16_to_f32 widens exactly; a NaN keeps its payload (as npu.F16ToF32).
__device__ __forceinline__ float f16_to_f32(u16 h) {
	if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0) {
		return __uint_as_float(((u32)(h & 0x8000u) << 16) | 0x7f800000u | ((u32)(h & 0x3ffu) << 13));
	}
	float f;
	asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
	return f;
}

// f32_to_bf16 rounds to nearest even; NaN stays a quiet NaN (npu.F32ToBF16).
__device__ __forceinline__ u16 f32_to_bf16(float f) {
	u32 u = __float_as_uint(f);
	if ((u & 0x7fffffffu) > 0x7f800000u) {
		return (u16)((u >> 16) | 0x40u);
	}
	u += 0x7fffu + ((u >> 16) & 1u);
	return (u16)(u >> 16);
}

// f32_to_f16 rounds to nearest even; a NaN becomes a quiet NaN keeping
// the top of its payload (as npu.F32ToF16).
__device__ __forceinline__ u16 f32_to_f16(float f) {
	const u32 u = __float_as_uint(f);
	if ((u & 0x7fffffffu) > 0x7f800000u) {
		return (u16)(((u >> 16) & 0x8000u) | 0x7e00u | ((u & 0x7fffffu) >> 13));
	}
	u16 h;
	asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
	return h;
}

// e4m3_to_f32 decodes OCP FP8 e4m3 (fn): no infinities, NaN 0x7f/0xff.
__device__ __forceinline__ float e4m3_to_f32(u8 b) {
	int e = (b >> 3) & 0xf, m = b & 7;
	float v;
	if (e == 0xf && m == 7) {
		v = __uint_as_float(0x7fc00000u);
	} else if (e == 0) {
		v = (float)m * 0.001953125f; // m/8 * 2^-6
	} else {
		v = ldexpf(1.0f + (float)m * 0.125f, e - 7);
	}
	return (b & 0x80) ? -v : v;
}

// ldf loads element i of p (dtype dt) as float.
__device__ __forceinline__ float ldf(const void *p, i64 i, int dt) {
	switch (dt) {
	case DT_F32:
		return ((const float *)p)[i];
	case DT_BF16:
		return bf16_to_f32(((const u16 *)p)[i]);
	case DT_F16:
		return f16_to_f32(((const u16 *)p)[i]);
	case DT_I32:
		return (float)((const int *)p)[i];
	default:
		return e4m3_to_f32(((const u8 *)p)[i]);
	}
}

// stf stores v as element i of p (dtype dt): halves round to nearest even,
// I32 truncates toward zero saturating with NaN giving 0 (cvt.rzi).
__device__ __forceinline__ void stf(void *p, i64 i, int dt, float v) {
	switch (dt) {
	case DT_F32:
		((float *)p)[i] = v;
		break;
	case DT_BF16:
		((u16 *)p)[i] = f32_to_bf16(v);
		break;
	case DT_F16:
		((u16 *)p)[i] = f32_to_f16(v);
		break;
	default:
		((int *)p)[i] = __float2int_rz(v);
		break;
	}
}

// copy_elem copies element si of src to element di of dst, esize bytes.
__device__ __forceinline__ void copy_elem(void *dst, i64 di, const void *src, i64 si, int esize) {
	switch (esize) {
	case 1:
		((u8 *)dst)[di] = ((const u8 *)src)[si];
		break;
	case 2:
		((u16 *)dst)[di] = ((const u16 *)src)[si];
		break;
	case 4:
		((u32 *)dst)[di] = ((const u32 *)src)[si];
		break;
	default:
		((u64 *)dst)[di] = ((const u64 *)src)[si];
		break;
	}
}

__device__ __forceinline__ float sigmoidf_(float x) {
	if (x < 0.0f) { // e/(1+e) keeps tiny results, as the CPU backend does
		float e = expf(x);
		return e / (1.0f + e);
	}
	return 1.0f / (1.0f + expf(-x));
}

__device__ __forceinline__ float siluf_(float x) { return x * sigmoidf_(x); }

// nanmax is max with NaN propagating (either operand NaN gives NaN).
__device__ __forceinline__ float nanmax(float a, float b) { return (a != a || a > b) ? a : b; }

__device__ __forceinline__ float neg_inf() { return __uint_as_float(0xff800000u); }

__device__ __forceinline__ float warp_sum(float v) {
	for (int o = 16; o > 0; o >>= 1) {
		v += __shfl_xor_sync(0xffffffffu, v, o);
	}
	return v;
}

__device__ __forceinline__ double warp_sum(double v) {
	for (int o = 16; o > 0; o >>= 1) {
		v += __shfl_xor_sync(0xffffffffu, v, o);
	}
	return v;
}

// fma4 returns s + a . w[0..3] as four fmaf in that order: the step of
// the warp-per-column dot products (dot16_lane, k_moe_gemv_f, the FP8
// decode GEMV).
__device__ __forceinline__ float fma4(float s, float4 a, const float *w) {
	s = fmaf(a.x, w[0], s);
	s = fmaf(a.y, w[1], s);
	s = fmaf(a.z, w[2], s);
	return fmaf(a.w, w[3], s);
}

#define W16_UNROLL 4 // 16-byte weight chunks in flight per lane (dot16_lane)

// dot16_lane is a lane's share of a warp-per-column product over a row w
// of 16-bit weights (wdt BF16 or F16; nc chunks of 8, K = 8 nc, w and the
// rows 16-byte aligned): acc[j] += sum over the lane's chunks c = lane,
// lane + 32, ... (ascending) of ar[j][8c .. 8c+7] . w[8c .. 8c+7], for
// rows j < mt; warp_sum(acc[j]) is then the column's dot product.
// W16_UNROLL independent 16-byte weight loads are in flight per lane
// before their first use: one-row GEMVs are memory-latency bound.
// k_gemm_small and k_moe_gemv_f share it, so their sums are the same.
template <int MT>
__device__ __forceinline__ void dot16_lane(float *acc, const u16 *w, int nc, int wdt, const float *const *ar, int mt,
					   int lane) {
	const uint4 *wv = (const uint4 *)w;
	for (int c0 = lane; c0 < nc; c0 += 32 * W16_UNROLL) {
		uint4 q[W16_UNROLL];
#pragma unroll
		for (int u = 0; u < W16_UNROLL; u++) {
			uint4 v;
			v.x = v.y = v.z = v.w = 0u;
			if (c0 + 32 * u < nc) {
				v = wv[c0 + 32 * u];
			}
			q[u] = v;
		}
#pragma unroll
		for (int u = 0; u < W16_UNROLL; u++) {
			const int c = c0 + 32 * u;
			if (c < nc) {
				float wf[8];
				const u32 words[4] = {q[u].x, q[u].y, q[u].z, q[u].w};
#pragma unroll
				for (int h = 0; h < 4; h++) {
					const u16 lo = (u16)(words[h] & 0xffffu), hi = (u16)(words[h] >> 16);
					wf[2 * h] = wdt == DT_BF16 ? bf16_to_f32(lo) : f16_to_f32(lo);
					wf[2 * h + 1] = wdt == DT_BF16 ? bf16_to_f32(hi) : f16_to_f32(hi);
				}
#pragma unroll
				for (int j = 0; j < MT; j++) {
					if (j < mt) {
						const float4 *xv = (const float4 *)ar[j] + 2 * c;
						acc[j] = fma4(fma4(acc[j], xv[0], wf), xv[1], wf + 4);
					}
				}
			}
		}
	}
}

__device__ __forceinline__ float warp_nanmax(float v) {
	for (int o = 16; o > 0; o >>= 1) {
		v = nanmax(v, __shfl_xor_sync(0xffffffffu, v, o));
	}
	return v;
}

__device__ __forceinline__ u64 warp_max_u64(u64 v) {
	for (int o = 16; o > 0; o >>= 1) {
		u64 w = __shfl_xor_sync(0xffffffffu, v, o);
		v = w > v ? w : v;
	}
	return v;
}

// Block reductions: every thread of the block calls them and gets the
// result. The partial sums are added in warp order, so results do not
// depend on timing. blockDim.x is a multiple of 32, at most 1024.
__device__ __forceinline__ double block_sum(double v) {
	__shared__ double sh_d[32];
	v = warp_sum(v);
	const int nw = blockDim.x >> 5;
	__syncthreads();
	if ((threadIdx.x & 31) == 0) {
		sh_d[threadIdx.x >> 5] = v;
	}
	__syncthreads();
	double r = 0;
	for (int i = 0; i < nw; i++) {
		r += sh_d[i];
	}
	return r;
}

// thread_sumsq is this thread's fp64 sum of squares of x[0, n), the
// block's threads striding over it (the caller block_sums it). With vec
// (x 16-byte aligned, n % 4 == 0) it loads float4s, four in flight per
// thread, else scalars four at a time: a long row then costs a few memory
// latencies, not one per element per thread (a decode step's norms run
// one block per row).
__device__ __forceinline__ double thread_sumsq(const float *x, int n, bool vec) {
	double ss = 0;
	const int step = blockDim.x;
	if (vec) {
		const float4 *x4 = (const float4 *)x;
		const int n4 = n >> 2;
		for (int c0 = threadIdx.x; c0 < n4; c0 += 4 * step) {
			float4 v[4];
#pragma unroll
			for (int u = 0; u < 4; u++) {
				const int c = c0 + u * step;
				v[u] = c < n4 ? x4[c] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
			}
#pragma unroll
			for (int u = 0; u < 4; u++) {
				ss += (double)v[u].x * (double)v[u].x;
				ss += (double)v[u].y * (double)v[u].y;
				ss += (double)v[u].z * (double)v[u].z;
				ss += (double)v[u].w * (double)v[u].w;
			}
		}
		return ss;
	}
	for (int c0 = threadIdx.x; c0 < n; c0 += 4 * step) {
		float v[4];
#pragma unroll
		for (int u = 0; u < 4; u++) {
			const int c = c0 + u * step;
			v[u] = c < n ? x[c] : 0.0f;
		}
#pragma unroll
		for (int u = 0; u < 4; u++) {
			ss += (double)v[u] * (double)v[u];
		}
	}
	return ss;
}

__device__ __forceinline__ float block_sumf(float v) {
	__shared__ float sh_f[32];
	v = warp_sum(v);
	const int nw = blockDim.x >> 5;
	__syncthreads();
	if ((threadIdx.x & 31) == 0) {
		sh_f[threadIdx.x >> 5] = v;
	}
	__syncthreads();
	float r = 0;
	for (int i = 0; i < nw; i++) {
		r += sh_f[i];
	}
	return r;
}

__device__ __forceinline__ float block_nanmax(float v) {
	__shared__ float sh_m[32];
	v = warp_nanmax(v);
	const int nw = blockDim.x >> 5;
	__syncthreads();
	if ((threadIdx.x & 31) == 0) {
		sh_m[threadIdx.x >> 5] = v;
	}
	__syncthreads();
	float r = sh_m[0];
	for (int i = 1; i < nw; i++) {
		r = nanmax(r, sh_m[i]);
	}
	return r;
}

__device__ __forceinline__ u64 block_max_u64(u64 v) {
	__shared__ u64 sh_u[32];
	v = warp_max_u64(v);
	const int nw = blockDim.x >> 5;
	__syncthreads();
	if ((threadIdx.x & 31) == 0) {
		sh_u[threadIdx.x >> 5] = v;
	}
	__syncthreads();
	u64 r = sh_u[0];
	for (int i = 1; i < nw; i++) {
		r = sh_u[i] > r ? sh_u[i] : r;
	}
	return r;
}

// Grouped-GEMM addressing of the MoE and int8 GEMM kernels (moe.cu,
// quant.cu): a block's expert e and its rows [r0, r1). Grouped (tiles != 0): tile
// blockIdx.y of the table, rows up to the expert's end; dense (tiles ==
// 0): expert 0, rows of M.
__device__ __forceinline__ bool moe_tile(const int *tiles, const int *ntiles, const int *off, int M, int bm, int &e,
					 int &r0, int &r1) {
	if (tiles == 0) {
		e = 0;
		r0 = blockIdx.y * bm;
		r1 = min(M, r0 + bm);
		return r0 < M;
	}
	if ((int)blockIdx.y >= ntiles[0]) {
		return false;
	}
	e = tiles[2 * blockIdx.y];
	r0 = tiles[2 * blockIdx.y + 1];
	r1 = min(off[e + 1], r0 + bm);
	return true;
}

// e4m3_from_f32 is quant.E4M3FromF32 (MXFP8 and FP8_BLOCK128
// activations): round to nearest even, saturating
// to ±448, NaN to 0x7f with the sign, the sign of zero kept.
__device__ __forceinline__ u8 e4m3_from_f32(float f) {
	const u32 u = __float_as_uint(f);
	const u8 sign = (u8)((u >> 24) & 0x80u);
	const u32 a = u & 0x7fffffffu;
	if (a > 0x7f800000u) {
		return sign | 0x7f;
	}
	if (a >= 0x43e00000u) {
		return sign | 0x7e;
	}
	if (a < 0x3c800000u) {
		return sign | (u8)(int)rintf(__uint_as_float(a) * 512.0f);
	}
	const int exp = (int)(a >> 23) - 127;
	const u32 mant = a & 0x7fffffu;
	u32 keep = mant >> 20;
	const u32 rem = mant & 0xfffffu;
	if (rem > (1u << 19) || (rem == (1u << 19) && (keep & 1u))) {
		keep++;
	}
	int e = exp + 7;
	if (keep == 8) {
		keep = 0;
		e++;
	}
	return sign | (u8)(e << 3) | (u8)keep;
}

// mma_bf16 is one m16n8k16 tensor-core MMA, bf16 inputs, fp32 accumulate.
__device__ __forceinline__ void mma_bf16(float *c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
		     "{%0,%1,%2,%3};"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// bf2 rounds a and b to bf16 (nearest even; a NaN stays a NaN) packed as
// a | b << 16, an MMA operand register.
__device__ __forceinline__ u32 bf2(float a, float b) {
	u32 d;
	asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(b), "f"(a));
	return d;
}

__device__ __forceinline__ float bf2_lo(u32 v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf2_hi(u32 v) { return __uint_as_float(v & 0xffff0000u); }

// bf2_rest is the pair (a, b) less its packed bf16 rounding hi, with a
// NaN remainder (a non-finite value, carried by hi alone) replaced by 0,
// so an infinity stays one: the remainders split3x2 and split2x2 round.
__device__ __forceinline__ void bf2_rest(float a, float b, u32 hi, float &ra, float &rb) {
	ra = a - bf2_lo(hi);
	rb = b - bf2_hi(hi);
	ra = ra == ra ? ra : 0.0f;
	rb = rb == rb ? rb : 0.0f;
}

// split_bf16 writes v = hi + lo to 16 bits (hi = bf16(v), lo = bf16(v -
// hi)); a non-finite remainder (v infinite or NaN, or rounding up to an
// infinity) gives lo = 0. These are split2x2's halves for every v but
// those within 2^-9 of FLT_MAX, whose hi rounds to an infinity: split2x2
// keeps the remainder (-inf, so hi + lo is NaN), this gives lo = 0.
__device__ __forceinline__ void split_bf16(float v, u16 &hi, u16 &lo) {
	hi = f32_to_bf16(v);
	const float r = v - bf16_to_f32(hi);
	lo = (r == r && fabsf(r) != __uint_as_float(0x7f800000u)) ? f32_to_bf16(r) : (u16)0;
}

// split3x2 writes the pair (a, b) as three packed bf16 pairs with a =
// hi + mid + lo to 24 bits (all of an fp32 mantissa, as k_moe_gemm_tc
// splits), likewise b.
__device__ __forceinline__ void split3x2(float a, float b, u32 &hi, u32 &mid, u32 &lo) {
	float ra, rb;
	hi = bf2(a, b);
	bf2_rest(a, b, hi, ra, rb);
	mid = bf2(ra, rb);
	lo = bf2(ra - bf2_lo(mid), rb - bf2_hi(mid));
}

// split2x2 writes the pair (a, b) as two packed bf16 pairs with a = hi +
// lo to 16 bits (k_moe_gemm_tc2), likewise b.
__device__ __forceinline__ void split2x2(float a, float b, u32 &hi, u32 &lo) {
	float ra, rb;
	hi = bf2(a, b);
	bf2_rest(a, b, hi, ra, rb);
	lo = bf2(ra, rb);
}

// cp_async16 copies 16 bytes from global to shared memory asynchronously
// (cp.async.cg: through L2 only), filling with zeros when bytes is 0.
__device__ __forceinline__ void cp_async16(void *dst, const void *src, int bytes) {
	const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(bytes) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

__device__ __forceinline__ void cp_async_wait1() { asm volatile("cp.async.wait_group 1;" ::: "memory"); }

__device__ __forceinline__ void cp_async_wait0() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

// ldsm_x4 is ldmatrix.x4: lane l names row (l & 15) at column 8 (l >> 4)
// of a 16x16 bf16 tile, giving the m16n8k16 A fragment (a0..a3).
__device__ __forceinline__ void ldsm_x4(const u16 *p, u32 &a0, u32 &a1, u32 &a2, u32 &a3) {
	const unsigned s = (unsigned)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
		     : "=r"(a0), "=r"(a1), "=r"(a2), "=r"(a3)
		     : "r"(s));
}

// ldsm_x2_trans is ldmatrix.x2.trans: lanes 0..15 name rows k = 0..15 of
// a row-major [k][n] 16x8 bf16 tile, giving the m16n8k16 B fragment
// (b0, b1) of that tile.
__device__ __forceinline__ void ldsm_x2_trans(const u16 *p, u32 &b0, u32 &b1) {
	const unsigned s = (unsigned)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];" : "=r"(b0), "=r"(b1) : "r"(s));
}
