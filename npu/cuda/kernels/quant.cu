// Quantized matmuls (quant.go; npu/cpu/qmatmul.go is the reference):
// activation quantizers with the CPU's rounding bit for bit, the int8
// GEMMs (__dp4a: exact int32 sums) with the CPU's dequantisation, and the
// MX fake-quantisation that feeds the float GEMMs of moe.cu (Hopper has
// no block-32 scaled MMA, so MXFP8 is emulated in fp32).
//
// int8 operands are rows of kp bytes (kp = K rounded up to 16, zero
// padded, 16-byte aligned), so a row loads as uint4 and the padding adds
// nothing to a sum.

#define QI8_BM 64 // rows of the tiled int8 GEMM block (moeBM in moe.go)
#define QI8_BN 64
#define QI8_BKW 16 // K step in 4-byte words (64 int8 values)
#define QI8_SMALL_MT 8 // rows per pass of k_gemv_i8
#define QI8_SMALL_U 4  // weight loads in flight per lane in k_gemv_i8

// Epilogue modes (qDyn, qStatic in quant.go).
#define Q_DYN 0
#define Q_STATIC 1

// k_quant_dyn: one block per row of x [M, K]: npu_dynamic_quant (quant.
// DynamicToken): scale = max|x| / 127, q = rint(clamp(x / scale, -127,
// 127)) half to even (zeros for a zero scale), into q [M, kp] (padding
// zeroed) and xs [M].
extern "C" __global__ void k_quant_dyn(signed char *q, float *xs, const float *x, int K, int kp) {
	pdl_prologue();
	const i64 m = blockIdx.x;
	const float *xr = x + m * K;
	u32 amax = 0;
	for (int c = threadIdx.x; c < K; c += blockDim.x) {
		amax = max(amax, __float_as_uint(xr[c]) & 0x7fffffffu);
	}
	const float scale = __fdiv_rn(__uint_as_float((u32)block_max_u64(amax)), 127.0f);
	if (threadIdx.x == 0) {
		xs[m] = scale;
	}
	signed char *qr = q + m * kp;
	for (int c = threadIdx.x; c < kp; c += blockDim.x) {
		float v = 0.0f;
		if (c < K && scale != 0.0f) {
			v = rintf(fminf(fmaxf(__fdiv_rn(xr[c], scale), -127.0f), 127.0f));
		}
		qr[c] = (signed char)(int)v;
	}
}

// k_quant_static: npu_quantize (quant.StaticQuantize): q = rint(clamp(
// x * recip + offset, -128, 127)) with the product rounded before the
// sum, over x [M, K] into q [M, kp].
extern "C" __global__ void k_quant_static(signed char *q, const float *x, i64 M, int K, int kp, float recip, float offset) {
	pdl_prologue();
	GRID_STRIDE(i, M * kp) {
		const i64 m = i / kp;
		const int c = (int)(i - m * kp);
		float v = 0.0f;
		if (c < K) {
			const float y = __fadd_rn(__fmul_rn(x[m * K + c], recip), offset);
			v = rintf(fminf(fmaxf(y, -128.0f), 127.0f));
		}
		q[i] = (signed char)(int)v;
	}
}

// k_pad_i8 copies rows of K int8 values into rows of kp (zero padded).
extern "C" __global__ void k_pad_i8(u8 *dst, const u8 *src, i64 rows, int K, int kp) {
	pdl_prologue();
	GRID_STRIDE(i, rows * kp) {
		const i64 r = i / kp;
		const int c = (int)(i - r * kp);
		dst[i] = c < K ? src[r * K + c] : (u8)0;
	}
}


// mx_scale is quant.MXScale of a block's largest magnitude (nan: the
// block holds a NaN): 0 = OCP, 1 = round up.
__device__ __forceinline__ u8 mx_scale(float amax, bool nan, int alg) {
	const u32 ab = __float_as_uint(amax);
	if (nan || ab >= 0x7f800000u) {
		return 0xff;
	}
	if (amax <= 0.0f) {
		return 0;
	}
	if (alg == 1) {
		const u32 s = __float_as_uint(__fdiv_rn(amax, 448.0f));
		u32 exp = s >> 23;
		const u32 mant = s & 0x7fffffu;
		if ((exp > 0 && exp < 254 && mant > 0) || (exp == 0 && mant > (1u << 22))) {
			exp++;
		}
		return (u8)exp;
	}
	int e = (int)(ab >> 23);
	e = e > 0 ? e - 127 : -150 + (32 - __clz((int)(ab & 0x7fffffu)));
	e = min(max(e - 8, -127), 127);
	return (u8)(e + 127);
}

// mx_inverse is 2^(127-s) (NaN for 0xff), exact.
__device__ __forceinline__ float mx_inverse(u8 s) {
	if (s == 0xff) {
		return __uint_as_float(0x7fc00000u);
	}
	const int e = 127 - (int)s;
	return e >= -126 ? __uint_as_float((u32)(e + 127) << 23) : __uint_as_float(0x00400000u);
}

__device__ __forceinline__ float mx_e8m0(u8 s) {
	if (s == 0) {
		return __uint_as_float(0x00400000u);
	}
	if (s == 0xff) {
		return __uint_as_float(0x7fc00000u);
	}
	return __uint_as_float((u32)s << 23);
}

// k_mx_fake: quant.MXFakeQuant of each row of x [M, K] into o (may alias
// x): per block of `group` elements, the E8M0 scale of its largest
// magnitude (alg), each element quantized to E4M3 and back. One warp per
// (row, block).
extern "C" __global__ void k_mx_fake(float *o, const float *x, i64 M, int K, int group, int alg) {
	pdl_prologue();
	const int lane = threadIdx.x & 31;
	const int nb = (K + group - 1) / group;
	const i64 warps = (i64)gridDim.x * (blockDim.x >> 5);
	for (i64 w = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); w < M * nb; w += warps) {
		const i64 m = w / nb;
		const int b = (int)(w - m * nb);
		const int c0 = b * group, c1 = min(K, c0 + group);
		const float *xr = x + m * K;
		float amax = 0.0f;
		int nan = 0;
		for (int c = c0 + lane; c < c1; c += 32) {
			const float a = fabsf(xr[c]);
			nan |= a != a;
			amax = fmaxf(amax, a);
		}
		for (int s = 16; s > 0; s >>= 1) {
			amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, s));
			nan |= __shfl_xor_sync(0xffffffffu, nan, s);
		}
		const u8 s = mx_scale(amax, nan != 0, alg);
		const float inv = mx_inverse(s), sc = mx_e8m0(s);
		for (int c = c0 + lane; c < c1; c += 32) {
			o[m * K + c] = e4m3_to_f32(e4m3_from_f32(xr[c] * inv)) * sc;
		}
	}
}

// qi8_store writes one output of the int8 GEMMs: dynamic
// float(acc) * xs[a] * ws[n]; static float(acc + qb[n]) * dq[n]
// (npu/cpu's epilogue.store, the same rounding steps).
__device__ __forceinline__ float qi8_out(int acc, int mode, float xs, const float *ws, const int *qb, const float *dq, i64 n) {
	if (mode == Q_DYN) {
		return __fmul_rn(__fmul_rn((float)acc, xs), ws[n]);
	}
	return __fmul_rn((float)(acc + qb[n]), dq[n]);
}

// mma_s8 is one m16n8k32 tensor-core MMA (IMMA): int8 inputs, exact
// int32 accumulation.
__device__ __forceinline__ void mma_s8(int *c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
	asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
		     "{%0,%1,%2,%3};"
		     : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
		     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// k_gemm_i8_tc: C[r, n] = epilogue(sum_k A[a(r), k] * W_e[n, k]) with
// int8 A [*, kp] (a(r) = tok[r] when tok != 0), W [E, N, kp], on the
// tensor cores (IMMA, mma.sync m16n8k32 s8): exact int32 sums (integer
// addition in any order), so the results equal the CPU's bit for bit.
// Tiles as k_moe_gemm_f (moe_tile). ws is W's per-channel scale [E, N]
// (dynamic; xs [*] the per-row activation scales) or qb, dq [N] (static).
// 256 threads = 8 warps, each a 16x32 piece of the 64x64 block tile (4
// MMAs of n8 per 32 K values); the shared tiles hold 4-byte words of 4
// consecutive K values, As[kw][row], Bs[kw][col], which is the MMA
// fragments' packing (PTX ISA, mma.m16n8k32 .s8: A registers rows g /
// g+8, K words t and t+4; B columns g, K words t and t+4; C rows g / g+8,
// columns 2t, 2t+1; g = lane/4, t = lane%4).
extern "C" __global__ __launch_bounds__(256) void k_gemm_i8_tc(float *C, const signed char *A, const int *tok, const signed char *W,
							       int mode, const float *xs, const float *ws, const int *qb,
							       const float *dq, const int *tiles, const int *ntiles, const int *off,
							       int M, int N, int kp) {
	pdl_prologue();
	__shared__ u32 As[QI8_BKW][QI8_BM + 1];
	__shared__ u32 Bs[QI8_BKW][QI8_BN + 1];
	int e, r0, r1;
	if (!moe_tile(tiles, ntiles, off, M, QI8_BM, e, r0, r1)) {
		return;
	}
	const int n0 = blockIdx.x * QI8_BN;
	const int lr = threadIdx.x >> 2, lq = threadIdx.x & 3;
	const bool aok = r0 + lr < r1, bok = n0 + lr < N;
	const uint4 *ap = (const uint4 *)(A + (aok ? (i64)(tok ? tok[r0 + lr] : r0 + lr) * kp : 0)) + lq;
	const uint4 *bp = (const uint4 *)(W + (bok ? ((i64)e * N + n0 + lr) * kp : 0)) + lq;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const int wm = (warp & 3) * 16, wn = (warp >> 2) * 32;
	const int g = lane >> 2, t = lane & 3;
	int acc[4][4];
#pragma unroll
	for (int j = 0; j < 4; j++) {
#pragma unroll
		for (int i = 0; i < 4; i++) {
			acc[j][i] = 0;
		}
	}
	for (int k0 = 0; k0 < kp; k0 += 4 * QI8_BKW) {
		uint4 a = make_uint4(0, 0, 0, 0), b = make_uint4(0, 0, 0, 0);
		if (k0 + 16 * lq < kp) {
			if (aok) {
				a = ap[k0 / 16];
			}
			if (bok) {
				b = bp[k0 / 16];
			}
		}
		As[4 * lq][lr] = a.x;
		As[4 * lq + 1][lr] = a.y;
		As[4 * lq + 2][lr] = a.z;
		As[4 * lq + 3][lr] = a.w;
		Bs[4 * lq][lr] = b.x;
		Bs[4 * lq + 1][lr] = b.y;
		Bs[4 * lq + 2][lr] = b.z;
		Bs[4 * lq + 3][lr] = b.w;
		__syncthreads();
#pragma unroll
		for (int ks = 0; ks < QI8_BKW; ks += 8) {
			const u32 a0 = As[ks + t][wm + g], a1 = As[ks + t][wm + g + 8];
			const u32 a2 = As[ks + 4 + t][wm + g], a3 = As[ks + 4 + t][wm + g + 8];
#pragma unroll
			for (int j = 0; j < 4; j++) {
				const int col = wn + 8 * j + g;
				mma_s8(acc[j], a0, a1, a2, a3, Bs[ks + t][col], Bs[ks + 4 + t][col]);
			}
		}
		__syncthreads();
	}
	const float *wse = ws ? ws + (i64)e * N : ws;
#pragma unroll
	for (int h = 0; h < 2; h++) {
		const int r = r0 + wm + g + 8 * h;
		if (r < r1) {
			const float x = mode == Q_DYN ? xs[tok ? tok[r] : r] : 0.0f;
#pragma unroll
			for (int j = 0; j < 4; j++) {
#pragma unroll
				for (int q = 0; q < 2; q++) {
					const int n = n0 + wn + 8 * j + 2 * t + q;
					if (n < N) {
						C[(i64)r * N + n] = qi8_out(acc[j][2 * h + q], mode, x, wse, qb, dq, n);
					}
				}
			}
		}
	}
}

// k_gemv_i8: the small-row form of k_gemm_i8_tc for decode: one warp per
// output column n, the rows of a tile (k_gemm_i8_tc's addressing: grouped,
// blockIdx.y is a tile of the routing, so no block waits on an expert
// without rows) in passes of up to QI8_SMALL_MT, 16 weights per lane
// load and QI8_SMALL_U loads in flight per lane before their first use.
extern "C" __global__ void k_gemv_i8(float *C, const signed char *A, const int *tok, const signed char *W, int mode,
				     const float *xs, const float *ws, const int *qb, const float *dq, const int *tiles,
				     const int *ntiles, const int *off, int M, int N, int kp) {
	pdl_prologue();
	const int lane = threadIdx.x & 31;
	const int n = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	if (n >= N) {
		return;
	}
	int e, r0, r1;
	if (!moe_tile(tiles, ntiles, off, M, QI8_BM, e, r0, r1)) {
		return;
	}
	const uint4 *wr = (const uint4 *)(W + ((i64)e * N + n) * kp);
	const int nc = kp / 16;
	const float *wse = ws ? ws + (i64)e * N : ws;
	for (int m0 = r0; m0 < r1; m0 += QI8_SMALL_MT) {
		const int mt = min(QI8_SMALL_MT, r1 - m0);
		const uint4 *ar[QI8_SMALL_MT];
		int acc[QI8_SMALL_MT];
#pragma unroll
		for (int j = 0; j < QI8_SMALL_MT; j++) {
			acc[j] = 0;
			const int r = m0 + min(j, mt - 1);
			ar[j] = (const uint4 *)(A + (i64)(tok ? tok[r] : r) * kp);
		}
		for (int c0 = lane; c0 < nc; c0 += 32 * QI8_SMALL_U) {
			uint4 wq[QI8_SMALL_U];
#pragma unroll
			for (int u = 0; u < QI8_SMALL_U; u++) {
				wq[u] = make_uint4(0u, 0u, 0u, 0u);
				if (c0 + 32 * u < nc) {
					wq[u] = wr[c0 + 32 * u];
				}
			}
#pragma unroll
			for (int u = 0; u < QI8_SMALL_U; u++) {
				const int c = c0 + 32 * u;
				if (c >= nc) {
					break;
				}
				const uint4 w = wq[u];
#pragma unroll
				for (int j = 0; j < QI8_SMALL_MT; j++) {
					if (j < mt) {
						const uint4 a = ar[j][c];
						int s = acc[j];
						s = __dp4a((int)a.x, (int)w.x, s);
						s = __dp4a((int)a.y, (int)w.y, s);
						s = __dp4a((int)a.z, (int)w.z, s);
						s = __dp4a((int)a.w, (int)w.w, s);
						acc[j] = s;
					}
				}
			}
		}
#pragma unroll
		for (int j = 0; j < QI8_SMALL_MT; j++) {
			int s = acc[j];
			for (int o = 16; o > 0; o >>= 1) {
				s += __shfl_xor_sync(0xffffffffu, s, o);
			}
			if (lane == 0 && j < mt) {
				const int r = m0 + j;
				const float x = mode == Q_DYN ? xs[tok ? tok[r] : r] : 0.0f;
				C[(i64)r * N + n] = qi8_out(s, mode, x, wse, qb, dq, n);
			}
		}
	}
}
