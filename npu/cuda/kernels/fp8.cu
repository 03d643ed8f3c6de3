// FP8_BLOCK128 (npu.QFP8Block; npu/cpu/qmatmul.go's fp8block and
// quant/fp8block.go are the reference), emulated on fp32 FMAs: the
// activations are quantized per row per 128 columns to E4M3 and written
// back dequantized (exact in fp32: an E4M3 value times an F32 scale has
// at most 28 significant bits, rounded once as the CPU rounds it), the
// E4M3 weights decoded with their F32 128x128 block scales as the GEMMs
// load them, and multiplied with fp32 FMAs in ascending k. Results equal
// the CPU backend's up to fp32 summation order.

#define FP8B 128         // block edge (npu.FP8Block)
#define FP8_BM 64        // rows of a tiled GEMM block (moeBM: the routing's tiles)
#define FP8_BN 64        // output columns of a tiled GEMM block
#define FP8_BK 16        // K step of the tiled GEMM
#define FP8_SMALL_MT 8   // rows per pass of the warp-per-column kernel


// k_fp8_act: quant.FP8ActFakeQuant's quantization of each row of x
// [M, K]: per group of 128 columns, amax the largest magnitude (as
// quant.AbsMax: the largest |x| bit pattern, so a NaN wins), s =
// max(amax/448, 1e-12) (Go's max: NaN stays NaN), codes E4M3(x/s), every
// step rounded to nearest as the CPU rounds it. With q == 0 it writes
// the fake-quantized values E4M3(x/s) * s into o (may alias x); else the
// codes into q E4M3 [M, K] and the scales into sc F32 [ceil(K/128), M]
// (rows fastest: cuBLASLt's VEC128 layout, fp8.go's fp8TensorCore). One
// warp per (row, group).
extern "C" __global__ void k_fp8_act(float *o, u8 *q, float *sc, const float *x, i64 M, int K) {
	pdl_prologue();
	const int lane = threadIdx.x & 31;
	const int nb = (K + FP8B - 1) / FP8B;
	const i64 warps = (i64)gridDim.x * (blockDim.x >> 5);
	for (i64 w = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); w < M * nb; w += warps) {
		const i64 m = w / nb;
		const int b = (int)(w - m * nb);
		const int c0 = b * FP8B, c1 = min(K, c0 + FP8B);
		const float *xr = x + m * K;
		u32 amax = 0;
		for (int c = c0 + lane; c < c1; c += 32) {
			amax = max(amax, __float_as_uint(xr[c]) & 0x7fffffffu);
		}
		for (int s = 16; s > 0; s >>= 1) {
			amax = max(amax, __shfl_xor_sync(0xffffffffu, amax, s));
		}
		float s = __fdiv_rn(__uint_as_float(amax), 448.0f);
		if (s == s) {
			s = fmaxf(s, 1e-12f);
		}
		if (q == 0) {
			for (int c = c0 + lane; c < c1; c += 32) {
				o[m * K + c] = __fmul_rn(e4m3_to_f32(e4m3_from_f32(__fdiv_rn(xr[c], s))), s);
			}
			continue;
		}
		for (int c = c0 + lane; c < c1; c += 32) {
			q[m * K + c] = e4m3_from_f32(__fdiv_rn(xr[c], s));
		}
		if (lane == 0) {
			sc[(i64)b * M + m] = s;
		}
	}
}

// fp8b_w is weight (n, k) of expert base wbase / sbase as fp32: its E4M3
// value times the F32 scale of its 128x128 block (scale rows of nbk).
__device__ __forceinline__ float fp8b_w(const u8 *W, const float *S, i64 wbase, i64 sbase, int nbk, int n, int k, int K) {
	return __fmul_rn(e4m3_to_f32(W[wbase + (i64)n * K + k]), S[sbase + (i64)(n / FP8B) * nbk + k / FP8B]);
}

// k_fp8b_gemm_f: C[r, n] = sum_k A[a(r), k] * W_e[n, k] for the rows of a
// tile (moe_tile; tiles == 0: dense over M rows), fp32 accumulation in
// ascending k. A [*, K] fp32 rows (fake-quantized; a(r) = tok[r] when
// tok != 0, else r), W E4M3 [E, N, K], S F32 [E, ceil(N/128),
// ceil(K/128)], C [*, N]. k_moe_gemm_f's tiling: 256 threads, each a 4x4
// micro tile of the 64x64 block tile; K in steps of 16 through shared
// memory.
extern "C" __global__ __launch_bounds__(256) void k_fp8b_gemm_f(float *C, const float *A, const int *tok, const u8 *W,
								const float *S, const int *tiles, const int *ntiles,
								const int *off, int M, int N, int K) {
	pdl_prologue();
	__shared__ float As[FP8_BK][FP8_BM + 4];
	__shared__ float Bs[FP8_BK][FP8_BN + 4];
	int e, r0, r1;
	if (!moe_tile(tiles, ntiles, off, M, FP8_BM, e, r0, r1)) {
		return;
	}
	const int n0 = blockIdx.x * FP8_BN;
	const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
	const int nbk = (K + FP8B - 1) / FP8B, nbn = (N + FP8B - 1) / FP8B;
	const i64 wbase = (i64)e * N * K;
	const i64 sbase = (i64)e * nbn * nbk;
	i64 arow[4];
	bool aok[4], bok[4];
#pragma unroll
	for (int i = 0; i < 4; i++) {
		const int l = threadIdx.x + 256 * i;
		const int r = r0 + (l >> 4);
		aok[i] = r < r1;
		arow[i] = aok[i] ? (i64)(tok ? tok[r] : r) * K : 0;
		bok[i] = n0 + (l >> 4) < N;
	}
	float acc[4][4];
#pragma unroll
	for (int i = 0; i < 4; i++) {
#pragma unroll
		for (int j = 0; j < 4; j++) {
			acc[i][j] = 0.0f;
		}
	}
	for (int k0 = 0; k0 < K; k0 += FP8_BK) {
#pragma unroll
		for (int i = 0; i < 4; i++) {
			const int l = threadIdx.x + 256 * i;
			const int rr = l >> 4, kk = l & 15, k = k0 + kk;
			As[kk][rr] = (aok[i] && k < K) ? A[arow[i] + k] : 0.0f;
			Bs[kk][rr] = (bok[i] && k < K) ? fp8b_w(W, S, wbase, sbase, nbk, n0 + rr, k, K) : 0.0f;
		}
		__syncthreads();
#pragma unroll
		for (int kk = 0; kk < FP8_BK; kk++) {
			float a[4], b[4];
#pragma unroll
			for (int i = 0; i < 4; i++) {
				a[i] = As[kk][ty + 16 * i];
				b[i] = Bs[kk][tx + 16 * i];
			}
#pragma unroll
			for (int i = 0; i < 4; i++) {
#pragma unroll
				for (int j = 0; j < 4; j++) {
					acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
				}
			}
		}
		__syncthreads();
	}
#pragma unroll
	for (int i = 0; i < 4; i++) {
		const int r = r0 + ty + 16 * i;
		if (r < r1) {
#pragma unroll
			for (int j = 0; j < 4; j++) {
				const int n = n0 + tx + 16 * j;
				if (n < N) {
					C[(i64)r * N + n] = acc[i][j];
				}
			}
		}
	}
}

// k_fp8b_gemv_f: the small-row form of k_fp8b_gemm_f for decode (the
// weights' bandwidth is the limit): one warp per output column n, up to
// FP8_SMALL_MT rows of a tile per pass, so each weight is read once for
// that many rows. blockIdx.y is a tile of the routing (or of M rows when
// tiles == 0). vec (host-checked: K % 4 == 0, A 16-byte and W 4-byte
// aligned) loads 4 weights (one block's: 128 % 4 == 0) at a time.
extern "C" __global__ void k_fp8b_gemv_f(float *C, const float *A, const int *tok, const u8 *W, const float *S,
					 const int *tiles, const int *ntiles, const int *off, int M, int N, int K,
					 int vec) {
	pdl_prologue();
	const int lane = threadIdx.x & 31;
	const int n = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	if (n >= N) {
		return;
	}
	int e, rb, re;
	if (!moe_tile(tiles, ntiles, off, M, FP8_BM, e, rb, re)) {
		return;
	}
	const int nbk = (K + FP8B - 1) / FP8B, nbn = (N + FP8B - 1) / FP8B;
	const u8 *wrow = W + ((i64)e * N + n) * K;
	const float *srow = S + ((i64)e * nbn + n / FP8B) * nbk;
	for (int m0 = rb; m0 < re; m0 += FP8_SMALL_MT) {
		const int mt = min(FP8_SMALL_MT, re - m0);
		const float *ar[FP8_SMALL_MT];
		float acc[FP8_SMALL_MT];
#pragma unroll
		for (int j = 0; j < FP8_SMALL_MT; j++) {
			acc[j] = 0.0f;
			const int r = m0 + min(j, mt - 1);
			ar[j] = A + (i64)(tok ? tok[r] : r) * K;
		}
		if (vec) {
#pragma unroll 4
			for (int c = lane * 4; c < K; c += 128) {
				const u32 q = *(const u32 *)(wrow + c);
				const float sc = srow[c / FP8B];
				float wf[4];
#pragma unroll
				for (int h = 0; h < 4; h++) {
					wf[h] = __fmul_rn(e4m3_to_f32((u8)(q >> (8 * h))), sc);
				}
#pragma unroll
				for (int j = 0; j < FP8_SMALL_MT; j++) {
					if (j < mt) {
						acc[j] = fma4(acc[j], *(const float4 *)(ar[j] + c), wf);
					}
				}
			}
		} else {
			for (int c = lane; c < K; c += 32) {
				const float wf = __fmul_rn(e4m3_to_f32(wrow[c]), srow[c / FP8B]);
#pragma unroll
				for (int j = 0; j < FP8_SMALL_MT; j++) {
					if (j < mt) {
						acc[j] = fmaf(ar[j][c], wf, acc[j]);
					}
				}
			}
		}
#pragma unroll
		for (int j = 0; j < FP8_SMALL_MT; j++) {
			const float s = warp_sum(acc[j]);
			if (lane == 0 && j < mt) {
				C[(i64)(m0 + j) * N + n] = s;
			}
		}
	}
}
