// mHC ops (npu/cpu/hc.go). HCPre's projection runs as a MatMul first
// (hc.go); k_hc_pre finishes one token per block.

#define HC_MAX_STREAMS 16

// hc_proj_block is block (j, t) of k_hc_proj (and of k_hc_fused).
__device__ __forceinline__ void hc_proj_block(float *m, const float *x, const float *fn, int nD, int mix, double *ss, int j, int t) {
	const float4 *x4 = (const float4 *)(x + (i64)t * nD);
	if (j == mix) {
		const double q = block_sum(thread_sumsq(x + (i64)t * nD, nD, true));
		if (threadIdx.x == 0) {
			ss[t] = q;
		}
		return;
	}
	const float4 *f4 = (const float4 *)(fn + (i64)j * nD);
	const int n4 = nD >> 2, step = blockDim.x;
	double acc = 0;
	for (int c0 = threadIdx.x; c0 < n4; c0 += 4 * step) {
		float4 a[4], b[4];
#pragma unroll
		for (int u = 0; u < 4; u++) {
			const int c = c0 + u * step;
			const bool ok = c < n4;
			a[u] = ok ? x4[c] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
			b[u] = ok ? f4[c] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
		}
#pragma unroll
		for (int u = 0; u < 4; u++) {
			acc += (double)a[u].x * (double)b[u].x;
			acc += (double)a[u].y * (double)b[u].y;
			acc += (double)a[u].z * (double)b[u].z;
			acc += (double)a[u].w * (double)b[u].w;
		}
	}
	acc = block_sum(acc);
	if (threadIdx.x == 0) {
		m[(i64)t * mix + j] = (float)acc;
	}
}

// k_hc_proj: grid (mix or mix + 1, T): m[t, j] = x[t] . fn[j] over nD
// for F32 fn, fp64 accumulation, float4 loads four in flight per thread
// (x and fn 16-byte aligned, nD % 4 == 0). HCPre's mixing projection at a
// decode step's few tokens: one block per output spreads fn's rows over
// the GPU where a GEMM library runs it as 24 dot products plus a
// reduction. With ss != 0 block mix adds the fp64 sum of squares of x[t]
// into ss[t] (k_hc_pre's RMS scale), off k_hc_pre's critical path.
extern "C" __global__ void k_hc_proj(float *m, const float *x, const float *fn, int nD, int mix, double *ss) {
	pdl_prologue();
	hc_proj_block(m, x, fn, nD, mix, ss, blockIdx.x, blockIdx.y);
}

// hc_sinkhorn_warp is k_hc_pre's n x n part for nn = n*n <= 32 in warp 0's
// registers: lane k = i*n + j holds z[i][j] (v, the logits on entry) and
// reads its row's and column's elements by shuffles, each sum in the CPU
// backend's order (index 0 first), so the results are the shared-memory
// form's bits without its barriers. Every lane of the warp calls it (the
// shuffles need them); lanes >= nn compute unused values. N > 0 fixes n
// at compile time (hc_sinkhorn: the model's 4 streams), so each sum's
// shuffles are issued together instead of one loop trip each.
template <int N>
__device__ __forceinline__ float hc_sinkhorn_warp_n(float v, int n, int ri, int cj, int iters, float eps) {
	const unsigned all = 0xffffffffu;
	if (N > 0) {
		n = N;
	}
	float mx = __shfl_sync(all, v, ri * n);
#pragma unroll
	for (int c = 1; c < (N > 0 ? N : n); c++) {
		mx = fmaxf(mx, __shfl_sync(all, v, ri * n + c));
	}
	const float e = expf(v - mx);
	float sm = 0;
#pragma unroll
	for (int c = 0; c < (N > 0 ? N : n); c++) {
		sm += __shfl_sync(all, e, ri * n + c);
	}
	v = e / sm + eps;
	const int cols = iters < 1 ? 1 : iters; // the CPU backend normalises the columns once regardless
	for (int it = 0; it < cols; it++) {
		if (it > 0 && iters >= 1) { // row normalisation
			sm = 0;
#pragma unroll
			for (int c = 0; c < (N > 0 ? N : n); c++) {
				sm += __shfl_sync(all, v, ri * n + c);
			}
			v = v / (sm + eps);
		}
		sm = 0; // column normalisation
#pragma unroll
		for (int i2 = 0; i2 < (N > 0 ? N : n); i2++) {
			sm += __shfl_sync(all, v, i2 * n + cj);
		}
		v = v / (sm + eps);
	}
	return v;
}

// hc_sinkhorn_warp dispatches hc_sinkhorn_warp_n: n = 4 unrolled, others
// as loops (the same arithmetic either way).
__device__ __forceinline__ float hc_sinkhorn_warp(float v, int n, int ri, int cj, int iters, float eps) {
	if (n == 4) {
		return hc_sinkhorn_warp_n<4>(v, n, ri, cj, iters, eps);
	}
	return hc_sinkhorn_warp_n<0>(v, n, ri, cj, iters, eps);
}

// fmaf4 is acc + p*v per component (fmaf each).
__device__ __forceinline__ float4 fmaf4(float p, float4 v, float4 acc) {
	return make_float4(fmaf(p, v.x, acc.x), fmaf(p, v.y, acc.y), fmaf(p, v.z, acc.z), fmaf(p, v.w, acc.w));
}

// hc_collapse4 is the float4 collapse of k_hc_pre and k_hc_fused:
// c4[d] = sum_i pre[i] x4[i*D4 + d] (first product, then fmaf in stream
// order) for d = d0, d0 + step, ... below hi. Four streams (the model's
// hc_mult) load all four before the first product: the same arithmetic
// without a memory latency per stream.
__device__ __forceinline__ void hc_collapse4(float4 *c4, const float4 *x4, const float *pre, int n, int D4, int d0, int hi, int step) {
	if (n == 4) {
		const float p0 = pre[0], p1 = pre[1], p2 = pre[2], p3 = pre[3];
		for (int d = d0; d < hi; d += step) {
			const float4 v0 = x4[d], v1 = x4[D4 + d], v2 = x4[2 * (i64)D4 + d], v3 = x4[3 * (i64)D4 + d];
			const float4 acc = make_float4(p0 * v0.x, p0 * v0.y, p0 * v0.z, p0 * v0.w);
			c4[d] = fmaf4(p3, v3, fmaf4(p2, v2, fmaf4(p1, v1, acc)));
		}
		return;
	}
	for (int d = d0; d < hi; d += step) {
		const float4 v = x4[d];
		float4 acc = make_float4(pre[0] * v.x, pre[0] * v.y, pre[0] * v.z, pre[0] * v.w);
		for (int i = 1; i < n; i++) {
			acc = fmaf4(pre[i], x4[(i64)i * D4 + d], acc);
		}
		c4[d] = acc;
	}
}

// k_hc_pre: grid (T, S): for token t with the projection m [T, mix] (mix
// = (2+n)n) of the raw streams x [T, n, D]: scale m by the streams'
// inverse RMS (from ss[t] when ss != 0, k_hc_proj's, else summed here),
// form pre, post [T, n] and comb [T, n, n] (Sinkhorn, in the CPU
// backend's order of operations) and collapsed [T, D] = sum_i pre_i x_i,
// block y writing the y-th of S slices of D (every block forms pre; block
// 0 writes post and comb). S > 1 spreads a decode step's collapse, and
// its reads of x, over S SMs.
extern "C" __global__ void k_hc_pre(float *collapsed, float *post, float *comb, const float *x, const float *m,
				    const void *base, int bdt, const void *scale, int sdt, int n, int D, int iters,
				    float eps, float rms_eps, int vec, const double *ss) {
	pdl_prologue();
	__shared__ float pre[HC_MAX_STREAMS];
	__shared__ float z[HC_MAX_STREAMS * HC_MAX_STREAMS];
	const int t = blockIdx.x;
	const bool first = blockIdx.y == 0;
	const int nD = n * D, mix = (2 + n) * n;
	const float *xt = x + (i64)t * nD;
	const double q = ss != 0 ? ss[t] : block_sum(thread_sumsq(xt, nD, vec != 0));
	__shared__ float zb[2][HC_MAX_STREAMS * HC_MAX_STREAMS];
	const int tid = threadIdx.x, nn = n * n;
	const int ri = tid / max(n, 1), cj = tid - ri * n;
	const float r = (float)(1.0 / sqrt(q / (double)nD + (double)rms_eps));
	const float *mt = m + (i64)t * mix;
	if (tid < n) {
		const float s0 = ldf(scale, 0, sdt), s1 = ldf(scale, 1, sdt);
		pre[tid] = sigmoidf_((mt[tid] * r) * s0 + ldf(base, tid, bdt)) + eps;
		if (first) {
			post[(i64)t * n + tid] = 2.0f * sigmoidf_((mt[n + tid] * r) * s1 + ldf(base, n + tid, bdt));
		}
	}
	if (nn <= 32) {
		if (tid < 32) {
			const float z0 = tid < nn ? (mt[2 * n + tid] * r) * ldf(scale, 2, sdt) + ldf(base, 2 * n + tid, bdt) : 0.0f;
			const float v = hc_sinkhorn_warp(z0, n, ri, cj, iters, eps);
			if (first && tid < nn) {
				comb[(i64)t * nn + tid] = v;
			}
		}
	} else {
		// One thread per element (thread k = i*n+j), each sum read in the
		// CPU backend's order so the results are the same bits; phases
		// are separated by barriers, z ping-pongs.
		if (tid < nn) {
			z[tid] = (mt[2 * n + tid] * r) * ldf(scale, 2, sdt) + ldf(base, 2 * n + tid, bdt);
		}
		__syncthreads();
		// Row softmax plus eps.
		if (tid < nn) {
			const float *row = z + ri * n;
			float mx = row[0];
			for (int c = 1; c < n; c++) {
				mx = fmaxf(mx, row[c]);
			}
			zb[0][tid] = expf(row[cj] - mx);
		}
		__syncthreads();
		if (tid < nn) {
			float sm = 0;
			for (int c = 0; c < n; c++) {
				sm += zb[0][ri * n + c];
			}
			z[tid] = zb[0][tid] / sm + eps;
		}
		__syncthreads();
		float *cur = z, *nxt = zb[1];
		const int cols = iters < 1 ? 1 : iters;
		for (int it = 0; it < cols; it++) {
			if (it > 0 && iters >= 1) { // row normalisation
				if (tid < nn) {
					float sm = 0;
					for (int c = 0; c < n; c++) {
						sm += cur[ri * n + c];
					}
					nxt[tid] = cur[tid] / (sm + eps);
				}
				__syncthreads();
				float *tmp = cur;
				cur = nxt;
				nxt = tmp;
			}
			if (tid < nn) { // column normalisation
				float sm = 0;
				for (int i2 = 0; i2 < n; i2++) {
					sm += cur[i2 * n + cj];
				}
				nxt[tid] = cur[tid] / (sm + eps);
			}
			__syncthreads();
			float *tmp = cur;
			cur = nxt;
			nxt = tmp;
		}
		if (first && tid < nn) {
			comb[(i64)t * nn + tid] = cur[tid];
		}
	}
	__syncthreads(); // pre
	const int S = gridDim.y, y = blockIdx.y;
	if (vec) { // the same per-element arithmetic on float4s
		const float4 *x4 = (const float4 *)xt;
		float4 *c4 = (float4 *)(collapsed + (i64)t * D);
		const int D4 = D >> 2, per = (D4 + S - 1) / S;
		hc_collapse4(c4, x4, pre, n, D4, y * per + threadIdx.x, min(D4, (y + 1) * per), blockDim.x);
		return;
	}
	const int per = (D + S - 1) / S, hi = min(D, (y + 1) * per);
	for (int d = y * per + threadIdx.x; d < hi; d += blockDim.x) {
		float acc = pre[0] * xt[d];
		for (int i = 1; i < n; i++) {
			acc = fmaf(pre[i], xt[(i64)i * D + d], acc);
		}
		collapsed[(i64)t * D + d] = acc;
	}
}

// k_hc_fused: k_hc_proj and k_hc_pre in one launch for a decode step's
// few tokens (n*n <= 32, float4 rows): grid (mix + 1, T), block (j, t)
// forms m[t, j] (or ss[t]) as k_hc_proj does; the last block of token t
// to finish (cnt[t], an atomicInc that wraps back to 0 for the next
// launch) then forms pre and post, runs the Sinkhorn combination in warp
// 0 while the warps off its scheduler collapse the streams, with
// k_hc_pre's arithmetic (the same bits).
extern "C" __global__ void k_hc_fused(float *collapsed, float *post, float *comb, float *m, const float *x, const float *fn,
				      const void *base, int bdt, const void *scale, int sdt, int n, int D, int iters, float eps,
				      float rms_eps, double *ss, unsigned *cnt) {
	pdl_prologue();
	__shared__ float pre[HC_MAX_STREAMS];
	__shared__ bool last;
	const int t = blockIdx.y, nD = n * D, mix = (2 + n) * n, tid = threadIdx.x;
	hc_proj_block(m, x, fn, nD, mix, ss, blockIdx.x, t);
	if (tid == 0) {
		__threadfence(); // this block's m[t, j] (or ss[t]) before its count
		last = atomicInc(cnt + t, gridDim.x - 1) == gridDim.x - 1;
	}
	__syncthreads();
	if (!last) {
		return;
	}
	__threadfence();
	const float r = (float)(1.0 / sqrt(__ldcg(ss + t) / (double)nD + (double)rms_eps));
	const float *mt = m + (i64)t * mix;
	if (tid < n) {
		const float s0 = ldf(scale, 0, sdt), s1 = ldf(scale, 1, sdt);
		pre[tid] = sigmoidf_((__ldcg(mt + tid) * r) * s0 + ldf(base, tid, bdt)) + eps;
		post[(i64)t * n + tid] = 2.0f * sigmoidf_((__ldcg(mt + n + tid) * r) * s1 + ldf(base, n + tid, bdt));
	}
	__syncthreads(); // pre
	const int nn = n * n;
	if (tid < 32) {
		const int ri = tid / n, cj = tid - ri * n;
		const float z0 = tid < nn ? (__ldcg(mt + 2 * n + tid) * r) * ldf(scale, 2, sdt) + ldf(base, 2 * n + tid, bdt) : 0.0f;
		const float v = hc_sinkhorn_warp(z0, n, ri, cj, iters, eps);
		if (tid < nn) {
			comb[(i64)t * nn + tid] = v;
		}
		return;
	}
	// The collapse runs on the warps that do not share warp 0's scheduler
	// (warp w on sub-partition w % 4): issuing beside the Sinkhorn's
	// chain of shuffles and divisions doubled its latency.
	const int w = tid >> 5, nw = blockDim.x >> 5;
	if ((w & 3) == 0) {
		return;
	}
	const int ci = (w - (w >> 2) - 1) * 32 + (tid & 31), cn = (nw - (nw + 3) / 4) * 32;
	const float4 *x4 = (const float4 *)(x + (i64)t * nD);
	float4 *c4 = (float4 *)(collapsed + (i64)t * D);
	hc_collapse4(c4, x4, pre, n, D >> 2, ci, D >> 2, cn);
}

// k_hc_post: out[t, j, d] = sum_i comb[t, i, j] x[t, i, d] + post[t, j] y[t, d].
extern "C" __global__ void k_hc_post(float *out, const float *y, const float *post, const float *comb, const float *x,
				     i64 T, int n, int D) {
	pdl_prologue();
	const i64 total = T * n * D;
	GRID_STRIDE(e, total) {
		const i64 t = e / ((i64)n * D);
		const int rem = (int)(e - t * n * D);
		const int j = rem / D, d = rem - j * D;
		const float *ct = comb + t * n * n;
		const float *xt = x + t * n * D;
		float acc = ct[j] * xt[d];
		for (int i = 1; i < n; i++) {
			acc = fmaf(ct[i * n + j], xt[(i64)i * D + d], acc);
		}
		out[e] = fmaf(post[t * n + j], y[t * D + d], acc);
	}
}

// k_hc_mean: out[t, d] = (sum_i x[t, i, d]) / n.
extern "C" __global__ void k_hc_mean(float *out, const float *x, i64 T, int n, int D) {
	pdl_prologue();
	const i64 total = T * D;
	GRID_STRIDE(e, total) {
		const i64 t = e / D;
		const int d = (int)(e - t * D);
		const float *xt = x + t * n * D;
		float s = xt[d];
		for (int i = 1; i < n; i++) {
			s += xt[(i64)i * D + d];
		}
		out[e] = s / (float)n;
	}
}
