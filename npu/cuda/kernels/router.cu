// Router (npu/cpu/moe.go): sigmoid scores, group-limited top-k on biased
// scores, weights from unbiased scores. One block per token; the scores
// live in dynamic shared memory (2*E floats).

__device__ __forceinline__ u64 rank_key(float v, int i) {
	u32 k = 0;
	if (v == v) {
		u32 u = v == 0.0f ? 0u : __float_as_uint(v);
		k = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
	}
	return ((u64)k << 32) | (u64)(0xffffffffu - (u32)i);
}

#define ROUTER_MAX_GROUPS 64
#define ROUTER_MAX_K 64

// router_score is block (t, e) of k_router_scores and k_router_fused:
// the sigmoid score of expert e for token t (the dot product accumulated
// in fp64) into scores [T, E].
__device__ __forceinline__ void router_score(float *scores, const float *x, const void *gate, int gdt, int D, int t, int e, int E) {
	const float *xt = x + (i64)t * D;
	const i64 go = (i64)e * D;
	double acc = 0;
	const int step = blockDim.x;
	for (int c0 = threadIdx.x; c0 < D; c0 += 8 * step) { // eight loads in flight per thread
		float g[8], v[8];
#pragma unroll
		for (int u = 0; u < 8; u++) {
			const int c = c0 + u * step;
			g[u] = c < D ? ldf(gate, go + c, gdt) : 0.0f;
			v[u] = c < D ? xt[c] : 0.0f;
		}
#pragma unroll
		for (int u = 0; u < 8; u++) {
			acc += (double)g[u] * (double)v[u];
		}
	}
	acc = block_sum(acc);
	if (threadIdx.x == 0) {
		scores[(i64)t * E + e] = sigmoidf_((float)acc);
	}
}

// k_router_scores: grid (T, E), 256 threads: router_score. One block per
// (token, expert), so a decode step's few tokens still spread the gate's
// rows over the GPU.
extern "C" __global__ void k_router_scores(float *scores, const float *x, const void *gate, int gdt, int D) {
	pdl_prologue();
	router_score(scores, x, gate, gdt, D, blockIdx.x, blockIdx.y, gridDim.y);
}

// router_select is the selection for token t from its scores [T, E],
// bias [E] (dtype bdt) into weights [T, k], ids [T, k]: k_router's block
// and k_router_fused's last one (every thread calls it; sh: 2*E floats of
// dynamic shared memory; the scores are read through L2, another block
// may have written them).
__device__ __forceinline__ void router_select(float *weights, int *ids, const float *scores, const void *bias, int bdt,
					      int E, int k, int ngroup, int topk_group, int normalize, float scale, int t,
					      float *sh) {
	float *s = sh;      // [E] sigmoid scores
	float *sb = sh + E; // [E] biased scores, -Inf outside the chosen groups
	__shared__ int order[ROUTER_MAX_K];
	for (int e = threadIdx.x; e < E; e += blockDim.x) {
		const float v = __ldcg(scores + (i64)t * E + e);
		s[e] = v;
		sb[e] = v + ldf(bias, e, bdt);
	}
	__syncthreads();
	if (ngroup > 1 && topk_group < ngroup && threadIdx.x == 0) {
		const int per = E / ngroup;
		float gscore[ROUTER_MAX_GROUPS];
		for (int g = 0; g < ngroup; g++) {
			float b1 = neg_inf(), b2 = neg_inf();
			for (int e = g * per; e < (g + 1) * per; e++) {
				const float v = sb[e];
				if (v > b1) {
					b2 = b1;
					b1 = v;
				} else if (v > b2) {
					b2 = v;
				}
			}
			if (per == 1) {
				b2 = 0.0f;
			}
			gscore[g] = b1 + b2;
		}
		// Keep the topk_group best groups (ties to the lower group).
		u64 prev = ~0ull;
		u64 keep[ROUTER_MAX_GROUPS];
		for (int r = 0; r < topk_group; r++) {
			u64 best = 0;
			for (int g = 0; g < ngroup; g++) {
				const u64 key = rank_key(gscore[g], g);
				if (key < prev && key > best) {
					best = key;
				}
			}
			keep[r] = best;
			prev = best;
		}
		for (int g = 0; g < ngroup; g++) {
			const u64 key = rank_key(gscore[g], g);
			bool kept = false;
			for (int r = 0; r < topk_group; r++) {
				kept = kept || keep[r] == key;
			}
			if (!kept) {
				for (int e = g * per; e < (g + 1) * per; e++) {
					sb[e] = neg_inf();
				}
			}
		}
	}
	__syncthreads();
	u64 prev = ~0ull;
	for (int r = 0; r < k; r++) {
		u64 best = 0;
		for (int e = threadIdx.x; e < E; e += blockDim.x) {
			const u64 key = rank_key(sb[e], e);
			if (key < prev && key > best) {
				best = key;
			}
		}
		best = block_max_u64(best);
		if (threadIdx.x == 0) {
			order[r] = (int)(0xffffffffu - (u32)best);
		}
		prev = best;
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		float sum = 0;
		for (int j = 0; j < k; j++) {
			sum += s[order[j]];
		}
		if (normalize) {
			sum += 1e-20f;
		}
		for (int j = 0; j < k; j++) {
			float w = s[order[j]];
			if (normalize) {
				w /= sum;
			}
			weights[(i64)t * k + j] = w * scale;
			ids[(i64)t * k + j] = order[j];
		}
	}
}

// k_router: grid (T), router_select for token blockIdx.x from
// k_router_scores' scores.
extern "C" __global__ void k_router(float *weights, int *ids, const float *scores, const void *bias, int bdt, int E,
				    int k, int ngroup, int topk_group, int normalize, float scale) {
	pdl_prologue();
	extern __shared__ float sh[];
	router_select(weights, ids, scores, bias, bdt, E, k, ngroup, topk_group, normalize, scale, blockIdx.x, sh);
}

// k_router_fused: k_router_scores and k_router in one launch for a
// decode step's few tokens: grid (T, E), block (t, e) forms token t's
// score of expert e; the last of token t's blocks to finish (cnt[t], an
// atomicInc that wraps back to 0 for the next launch) then selects its
// experts as k_router does (the same bits). Dynamic shared memory: 2*E
// floats.
extern "C" __global__ void k_router_fused(float *weights, int *ids, float *scores, const float *x, const void *gate,
					  int gdt, int D, const void *bias, int bdt, int k, int ngroup, int topk_group,
					  int normalize, float scale, unsigned *cnt) {
	pdl_prologue();
	extern __shared__ float sh[];
	__shared__ bool last;
	const int t = blockIdx.x, E = gridDim.y;
	router_score(scores, x, gate, gdt, D, t, blockIdx.y, E);
	if (threadIdx.x == 0) {
		__threadfence(); // this block's score before its count
		last = atomicInc(cnt + t, E - 1) == E - 1;
	}
	__syncthreads();
	if (!last) {
		return;
	}
	__threadfence();
	router_select(weights, ids, scores, bias, bdt, E, k, ngroup, topk_group, normalize, scale, t, sh);
}
