// MatMul helpers (matmul.go): the exact small-M kernel and the split of
// fp32 activations into two bf16 terms for the tensor-core path.

#define GEMM_SMALL_MT 4     // rows of x per block row (gemmSmallM in matmul.go)
#define GEMM_SMALL_UNROLL 4 // weight chunks in flight per lane

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
		// GEMM_SMALL_UNROLL independent 16-byte weight loads in flight per
		// lane before their first use.
		const uint4 *wv = (const uint4 *)((const u16 *)w + (i64)n * K);
		const int nc = K / 8;
		for (int c0 = lane; c0 < nc; c0 += 32 * GEMM_SMALL_UNROLL) {
			uint4 q[GEMM_SMALL_UNROLL];
#pragma unroll
			for (int u = 0; u < GEMM_SMALL_UNROLL; u++) {
				uint4 v;
				v.x = v.y = v.z = v.w = 0u;
				if (c0 + 32 * u < nc) {
					v = wv[c0 + 32 * u];
				}
				q[u] = v;
			}
#pragma unroll
			for (int u = 0; u < GEMM_SMALL_UNROLL; u++) {
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
					for (int j = 0; j < GEMM_SMALL_MT; j++) {
						if (j < mt) {
							const float4 *xv = (const float4 *)(xr + (i64)j * K) + 2 * c;
							const float4 a = xv[0], b = xv[1];
							float s = acc[j];
							s = fmaf(a.x, wf[0], s);
							s = fmaf(a.y, wf[1], s);
							s = fmaf(a.z, wf[2], s);
							s = fmaf(a.w, wf[3], s);
							s = fmaf(b.x, wf[4], s);
							s = fmaf(b.y, wf[5], s);
							s = fmaf(b.z, wf[6], s);
							s = fmaf(b.w, wf[7], s);
							acc[j] = s;
						}
					}
				}
			}
		}
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
// (hi = bf16(x), lo = bf16(x - hi)); a non-finite x keeps lo = 0.
extern "C" __global__ void k_split_bf16(u16 *hi, u16 *lo, const float *x, i64 n) {
	pdl_prologue();
	GRID_STRIDE(i, n) {
		const float v = x[i];
		const u16 h = f32_to_bf16(v);
		const float r = v - bf16_to_f32(h);
		hi[i] = h;
		lo[i] = (r == r && fabsf(r) != __uint_as_float(0x7f800000u)) ? f32_to_bf16(r) : (u16)0;
	}
}
