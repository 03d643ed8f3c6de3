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

// kda_seq finds sequence b's rows [r0, r1) and state slot, checking the
// layout as the CPU backend does; false when the block has nothing to do
// (no rows, or a bad layout, which the lead thread reports).
__device__ __forceinline__ bool kda_seq(const int *qs, const int *slots, int B, int T, int nslots, int *err, int op,
					bool lead, int b, int &r0, int &r1, int &slot) {
	r0 = qs[b], r1 = qs[b + 1];
	if (r0 < 0 || r1 < r0 || r1 > T || (b == B - 1 && r1 != T) || (b == 0 && r0 != 0)) {
		if (lead) {
			report(err, ERR_ROWS, op, b);
		}
		return false;
	}
	if (r1 == r0) {
		return false;
	}
	slot = slots[b];
	if (slot < 0 || slot >= nslots) {
		if (lead) {
			report(err, ERR_SLOT, op, slot);
		}
		return false;
	}
	if (lead) {
		for (int o = 0; o < b; o++) {
			if (qs[o + 1] > qs[o] && slots[o] == slot) {
				report(err, ERR_SHARED_SLOT, op, slot);
				break;
			}
		}
	}
	return true;
}

// kda_norms: warp w of nw forms norms w, w + nw, ... of the 2n (token,
// q|k) of head h from row c0 on, inv[j] = {1/‖q‖, 1/‖k‖}: the
// lane-strided fp64 sum of squares, then warp_sum.
__device__ __forceinline__ void kda_norms(double (*inv)[2], const float *qkv, i64 HK, int h, int K, int c0, int n, int w,
					  int nw, int lane) {
	for (int wj = w; wj < 2 * n; wj += nw) {
		const int j = wj >> 1, which = wj & 1;
		const float *xr = qkv + (i64)(c0 + j) * 3 * HK + (i64)which * HK + (i64)h * K;
		double ss = 0;
		for (int d = lane; d < K; d += 32) {
			ss += (double)xr[d] * (double)xr[d];
		}
		ss = warp_sum(ss);
		if (lane == 0) {
			inv[j][which] = 1.0 / sqrt(ss + 1e-6);
		}
	}
}

// kda_qke stages element d of a token: q̂ (q/‖q‖ scaled), k̂ = k/‖k‖ and e
// = exp(g), from its q row (k HK floats on) and gate row.
__device__ __forceinline__ void kda_qke(float &qd, float &kd, float &ed, const float *row, const float *grow, i64 HK,
					int d, const double *inv, float scale) {
	qd = (float)((double)row[d] * inv[0]) * scale;
	kd = (float)((double)row[HK + d] * inv[1]);
	ed = expf(grow[d]);
}

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
	int r0, r1, slot;
	if (!kda_seq(qs, slots, B, T, nslots, err, op, li == 0 && h == 0 && blockIdx.y == 0, b, r0, r1, slot)) {
		return;
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
		kda_norms(inv, qkv, HK, h, K, c0, n, y, ns, x);
		__syncthreads();
		for (int e = li; e < n * K; e += nt) {
			const int j = e / K, d = e - j * K;
			const i64 t = c0 + j;
			const float *row = qkv + t * 3 * HK + (i64)h * K;
			float *st = stage + (i64)j * 3 * K;
			kda_qke(st[d], st[K + d], st[2 * K + d], row, g + t * HK + (i64)h * K, HK, d, inv[j], scale);
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

#define KDA_W_R 16     // state rows per lane in k_kda_w: K <= 8 * KDA_W_R (kdaWarpMaxK)
#define KDA_W_STAGE 16 // tokens per staging step of k_kda_w

// k_kda_w is k_kda with the sums over d inside a warp, for K <= 128:
// grid (B*H, ceil(V/32)), 256 threads. Warp w holds columns 4w .. 4w + 3
// of the block's tile, lane l column l & 3, rows sl, sl + 8, ... (sl = l
// >> 2) in registers, so each token's two sums over d are three shuffles
// each instead of two block barriers: the tokens of a sequence still go
// one after another, but a token costs a warp's dependent chain, not the
// block's. The block stages KDA_W_STAGE tokens at a time (q̂, k̂, e with
// row d at (d % 8) * KDA_W_R + d / 8, so a lane's rows are consecutive
// float4s; v of the tile's columns; β), with the norms in fp64 as k_kda.
// Same arguments as k_kda (tok unused), same results up to fp32 summation
// order.
extern "C" __global__ __launch_bounds__(256) void k_kda_w(float *out, const float *qkv, const float *g,
							  const float *beta, float *state, const int *qs,
							  const int *slots, int B, int T, int H, int K, int V, int nslots,
							  float scale, int tok, int *err, int op) {
	pdl_prologue();
	constexpr int KP = 8 * KDA_W_R; // staged rows (K padded with zeros)
	__shared__ __align__(16) float st[KDA_W_STAGE][3][KP];
	__shared__ float vs[KDA_W_STAGE][KDA_COLS];
	__shared__ float bs[KDA_W_STAGE];
	__shared__ double inv[KDA_W_STAGE][2];
	const int b = blockIdx.x / H, h = blockIdx.x - b * H;
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int sl = lane >> 2, vc = 4 * warp + (lane & 3), v = blockIdx.y * KDA_COLS + vc;
	int r0, r1, slot;
	if (!kda_seq(qs, slots, B, T, nslots, err, op, tid == 0 && h == 0 && blockIdx.y == 0, b, r0, r1, slot)) {
		return;
	}
	const i64 HK = (i64)H * K;
	float *S = state + ((i64)slot * H + h) * K * V;
	float s[KDA_W_R];
#pragma unroll
	for (int i = 0; i < KDA_W_R; i++) {
		const int d = 8 * i + sl;
		s[i] = (d < K && v < V) ? S[(i64)d * V + v] : 0.0f;
	}
	for (int c0 = r0; c0 < r1; c0 += KDA_W_STAGE) {
		const int n = min(KDA_W_STAGE, r1 - c0);
		__syncthreads(); // the previous stage has been read
		kda_norms(inv, qkv, HK, h, K, c0, n, warp, 8, lane);
		__syncthreads();
		for (int e = tid; e < n * KP; e += 256) {
			const int j = e / KP, p = e - j * KP;
			const int d = 8 * (p % KDA_W_R) + p / KDA_W_R;
			const i64 t = c0 + j;
			float qd = 0.0f, kd = 0.0f, ed = 0.0f; // rows past K: zeros keep their state 0
			if (d < K) {
				kda_qke(qd, kd, ed, qkv + t * 3 * HK + (i64)h * K, g + t * HK + (i64)h * K, HK, d, inv[j], scale);
			}
			st[j][0][p] = qd;
			st[j][1][p] = kd;
			st[j][2][p] = ed;
		}
		for (int e = tid; e < n * KDA_COLS; e += 256) {
			const int j = e / KDA_COLS, c = e - j * KDA_COLS, vv = blockIdx.y * KDA_COLS + c;
			vs[j][c] = vv < V ? qkv[(i64)(c0 + j) * 3 * HK + 2 * HK + (i64)h * V + vv] : 0.0f;
		}
		if (tid < n) {
			bs[tid] = beta[(i64)(c0 + tid) * H + h];
		}
		__syncthreads();
		for (int j = 0; j < n; j++) {
			const float4 *q4 = (const float4 *)&st[j][0][sl * KDA_W_R];
			const float4 *k4 = (const float4 *)&st[j][1][sl * KDA_W_R];
			const float4 *e4 = (const float4 *)&st[j][2][sl * KDA_W_R];
			float mem = 0;
#pragma unroll
			for (int i = 0; i < KDA_W_R / 4; i++) {
				const float4 kk = k4[i], ee = e4[i];
				mem += (kk.x * ee.x) * s[4 * i];
				mem += (kk.y * ee.y) * s[4 * i + 1];
				mem += (kk.z * ee.z) * s[4 * i + 2];
				mem += (kk.w * ee.w) * s[4 * i + 3];
			}
			mem += __shfl_xor_sync(0xffffffffu, mem, 4);
			mem += __shfl_xor_sync(0xffffffffu, mem, 8);
			mem += __shfl_xor_sync(0xffffffffu, mem, 16);
			const float delta = bs[j] * (vs[j][vc] - mem);
			float o = 0;
#pragma unroll
			for (int i = 0; i < KDA_W_R / 4; i++) {
				const float4 qq = q4[i], kk = k4[i], ee = e4[i];
				s[4 * i] = s[4 * i] * ee.x + kk.x * delta;
				s[4 * i + 1] = s[4 * i + 1] * ee.y + kk.y * delta;
				s[4 * i + 2] = s[4 * i + 2] * ee.z + kk.z * delta;
				s[4 * i + 3] = s[4 * i + 3] * ee.w + kk.w * delta;
				o += qq.x * s[4 * i];
				o += qq.y * s[4 * i + 1];
				o += qq.z * s[4 * i + 2];
				o += qq.w * s[4 * i + 3];
			}
			o += __shfl_xor_sync(0xffffffffu, o, 4);
			o += __shfl_xor_sync(0xffffffffu, o, 8);
			o += __shfl_xor_sync(0xffffffffu, o, 16);
			if (sl == 0 && v < V) {
				out[((i64)(c0 + j) * H + h) * V + v] = o;
			}
		}
	}
	if (v < V) {
#pragma unroll
		for (int i = 0; i < KDA_W_R; i++) {
			const int d = 8 * i + sl;
			if (d < K) {
				S[(i64)d * V + v] = s[i];
			}
		}
	}
}
