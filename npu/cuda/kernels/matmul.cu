// MatMul helpers (matmul.go): the exact small-M kernel and the split of
// fp32 activations into two bf16 terms for the tensor-core path.

#define GEMM_SMALL_MT 4     // rows of x per block row (gemmSmallM in matmul.go)

// k_gemm_small: out[m, n] = sum_k x[m, k] * w[n, k] for up to
// GEMM_SMALL_MT rows of x per blockIdx.y, one warp per n. w (dtype wdt)
// is widened to fp32 and multiplied in fp32: the CPU backend's numerics,
// read once per GEMM_SMALL_MT rows at memory speed. vec (host-checked:
// K % 8 == 0, x and w 16-byte aligned) loads 8 weights at a time.
extern "C" __global__ void k_gemm_small(float *out, const float *x, const void *w, int wdt, int M, int N, int K, int vec) {
	pdl_prologue();
	const int lane = threadIdx.x & 31;
	const int n = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	if (n >= N) {
		return;
	}
	const int m0 = blockIdx.y * GEMM_SMALL_MT;
	const int mt = min(GEMM_SMALL_MT, M - m0);
	const float *xr = x + (i64)m0 * K;
	float acc[GEMM_SMALL_MT];
#pragma unroll
	for (int j = 0; j < GEMM_SMALL_MT; j++) {
		acc[j] = 0.0f;
	}
	if (vec && wdt != DT_F32) {
		const float *ar[GEMM_SMALL_MT];
#pragma unroll
		for (int j = 0; j < GEMM_SMALL_MT; j++) {
			ar[j] = xr + (i64)min(j, mt - 1) * K;
		}
		dot16_lane<GEMM_SMALL_MT>(acc, (const u16 *)w + (i64)n * K, K / 8, wdt, ar, mt, lane);
	} else {
		const i64 wo = (i64)n * K;
		for (int c = lane; c < K; c += 32) {
			const float wf = ldf(w, wo + c, wdt);
#pragma unroll
			for (int j = 0; j < GEMM_SMALL_MT; j++) {
				if (j < mt) {
					acc[j] = fmaf(xr[(i64)j * K + c], wf, acc[j]);
				}
			}
		}
	}
#pragma unroll
	for (int j = 0; j < GEMM_SMALL_MT; j++) {
		const float s = warp_sum(acc[j]);
		if (lane == 0 && j < mt) {
			out[(i64)(m0 + j) * N + n] = s;
		}
	}
}

// k_split_bf16 writes x = hi + lo + O(2^-18 |x|) as two bf16 tensors
// (split_bf16: hi = bf16(x), lo = bf16(x - hi)); a non-finite x keeps
// lo = 0.
extern "C" __global__ void k_split_bf16(u16 *hi, u16 *lo, const float *x, i64 n) {
	pdl_prologue();
	GRID_STRIDE(i, n) {
		split_bf16(x[i], hi[i], lo[i]);
	}
}
