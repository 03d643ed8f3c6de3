// Kimi Delta Attention (npu/cpu/kda.go). Per sequence and head the state
// S [K, V] evolves column by column independently: with q, k
// l2-normalised (q scaled by K^-0.5) and e = exp(g_t),
//
//	mem = Σ_d k[d] e[d] S[d, :];  δ = β (v − mem);
//	S[d, :] = e[d] S[d, :] + k[d] δ;  o = Σ_d q[d] S[d, :].
//
// k_kda runs this token recurrence with one block per (sequence, head,
// tile of 32 columns): thread (x, y) holds rows [32y, 32y+32) of column x
// of the tile in registers, the two sums over d are reduced across the y
// slices through shared memory (two barriers per token), and the
// normalised q, k and e of KDA_TOK tokens at a time are staged in shared
// memory by all threads together, after the block's warps have formed
// each staged token's 1/‖q‖ and 1/‖k‖ for its head in fp64, as the CPU
// backend does (a decode step's norms need no launch of their own).

#define KDA_ROWS 32  // state rows per thread (one y slice)
#define KDA_COLS 32  // state columns per block (the x extent)
#define KDA_STAGE 8  // tokens per staging step at most (kdaStage in kda.go)

// k_kda: grid (B*H, ceil(V/32)), block (32, ceil(K/32)); dynamic shared
// memory 3*tok*K floats (tok <= KDA_STAGE). qkv [T, 3*H*K], g [T, H*K],
// beta [T, H], state [slots, H, K, V], out [T, H*V].
extern "C" __global__ void k_kda(float *out, const float *qkv, const float *g, const float *beta, float *state,
				 const int *qs, const int *slots, int B, int T, int H, int K, int V, int nslots, float scale,
				 int tok, int *err, int op) {
	pdl_prologue();
	extern __shared__ float stage[]; // [tok][3][K]: q̂, k̂, e
	__shared__ float red[2][32][KDA_COLS + 1];
	__shared__ double inv[KDA_STAGE][2]; // 1/‖q‖, 1/‖k‖ of the staged tokens
	const int b = blockIdx.x / H, h = blockIdx.x - b * H;
	const int x = threadIdx.x, y = threadIdx.y, ns = blockDim.y;
	const int nt = blockDim.x * blockDim.y, li = y * blockDim.x + x;
	const int v = blockIdx.y * KDA_COLS + x;
	const int r0 = qs[b], r1 = qs[b + 1];
	const bool lead = li == 0 && h == 0 && blockIdx.y == 0;
	if (r0 < 0 || r1 < r0 || r1 > T || (b == B - 1 && r1 != T) || (b == 0 && r0 != 0)) {
		if (lead) {
			report(err, ERR_ROWS, op, b);
		}
		return;
	}
	if (r1 == r0) {
		return;
	}
	const int slot = slots[b];
	if (slot < 0 || slot >= nslots) {
		if (lead) {
			report(err, ERR_SLOT, op, slot);
		}
		return;
	}
	if (lead) {
		for (int o = 0; o < b; o++) {
			if (qs[o + 1] > qs[o] && slots[o] == slot) {
				report(err, ERR_SHARED_SLOT, op, slot);
				break;
			}
		}
	}
	const i64 HK = (i64)H * K;
	float *S = state + ((i64)slot * H + h) * K * V;
	const int d0 = y * KDA_ROWS;
	float s[KDA_ROWS];
#pragma unroll
	for (int i = 0; i < KDA_ROWS; i++) {
		s[i] = (d0 + i < K && v < V) ? S[(i64)(d0 + i) * V + v] : 0.0f;
	}
	for (int c0 = r0; c0 < r1; c0 += tok) {
		const int n = min(tok, r1 - c0);
		__syncthreads(); // the previous stage has been read
		// Warp y forms norms y, y + ns, ... of the 2n (token, q|k): the
		// lane-strided fp64 sum of squares, then warp_sum.
		for (int wj = y; wj < 2 * n; wj += ns) {
			const int j = wj >> 1, which = wj & 1;
			const float *xr = qkv + (i64)(c0 + j) * 3 * HK + (i64)which * HK + (i64)h * K;
			double ss = 0;
			for (int d = x; d < K; d += 32) {
				ss += (double)xr[d] * (double)xr[d];
			}
			ss = warp_sum(ss);
			if (x == 0) {
				inv[j][which] = 1.0 / sqrt(ss + 1e-6);
			}
		}
		__syncthreads();
		for (int e = li; e < n * K; e += nt) {
			const int j = e / K, d = e - j * K;
			const i64 t = c0 + j;
			const float *row = qkv + t * 3 * HK + (i64)h * K;
			const double qi = inv[j][0], ki = inv[j][1];
			float *st = stage + (i64)j * 3 * K;
			st[d] = (float)((double)row[d] * qi) * scale;
			st[K + d] = (float)((double)row[HK + d] * ki);
			st[2 * K + d] = expf(g[t * HK + (i64)h * K + d]);
		}
		__syncthreads();
		for (int j = 0; j < n; j++) {
			const i64 t = c0 + j;
			const float *qn = stage + (i64)j * 3 * K, *kn = qn + K, *ev = kn + K;
			float mem = 0;
#pragma unroll
			for (int i = 0; i < KDA_ROWS; i++) {
				const int d = d0 + i;
				if (d < K) {
					mem += (kn[d] * ev[d]) * s[i];
				}
			}
			red[0][y][x] = mem;
			__syncthreads();
			mem = 0;
			for (int yy = 0; yy < ns; yy++) {
				mem += red[0][yy][x];
			}
			const float vv = v < V ? qkv[t * 3 * HK + 2 * HK + (i64)h * V + v] : 0.0f;
			const float delta = beta[t * H + h] * (vv - mem);
			float o = 0;
#pragma unroll
			for (int i = 0; i < KDA_ROWS; i++) {
				const int d = d0 + i;
				if (d < K) {
					s[i] = s[i] * ev[d] + kn[d] * delta;
					o += qn[d] * s[i];
				}
			}
			red[1][y][x] = o;
			__syncthreads();
			if (y == 0 && v < V) {
				o = 0;
				for (int yy = 0; yy < ns; yy++) {
					o += red[1][yy][x];
				}
				out[(t * H + h) * V + v] = o;
			}
		}
	}
	if (v < V) {
#pragma unroll
		for (int i = 0; i < KDA_ROWS; i++) {
			if (d0 + i < K) {
				S[(i64)(d0 + i) * V + v] = s[i];
			}
		}
	}
}
