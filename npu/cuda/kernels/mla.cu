// Sparse NoPE MLA in the absorbed form (npu/cpu/mla.go): per row t and
// head h, q̃ = W_UK[h]ᵀ q[t,h] (k_mla_qlat), z = Σ_s softmax_s(scale
// q̃·c_s) c_s over the row's selected latents c_s with an online softmax
// (k_mla_attn), out[t,h] = W_UV[h] z (k_mla_out). k_mla_select first turns
// each row of sel into its distinct cache rows, in position order.

// seq_of returns the sequence of row t: the last b with qs[b] <= t.
__device__ __forceinline__ int seq_of(const int *qs, int B, int t) {
	int lo = 0, hi = B; // qs[lo] <= t < qs[hi]
	while (hi - lo > 1) {
		const int mid = (lo + hi) >> 1;
		if (qs[mid] <= t) {
			lo = mid;
		} else {
			hi = mid;
		}
	}
	return lo;
}

#define MLA_INT_MAX 0x7fffffff

// mla_sel_seq is the sequence b of row t and its length for the select
// kernels; -1 (reported, counts[t] = 0) for a row no sequence holds.
__device__ __forceinline__ int mla_sel_seq(const int *qs, const int *pos, int B, int t, int *counts, int *err, int op, int *b) {
	*b = seq_of(qs, B, t);
	if (qs[*b] > t || qs[*b + 1] <= t || pos[*b] < 0) {
		if (threadIdx.x == 0) {
			report(err, ERR_ROWS, op, *b);
			counts[t] = 0;
		}
		return -1;
	}
	return pos[*b] + qs[*b + 1] - qs[*b];
}

// mla_scan_excl is the block's exclusive prefix sum of c in thread order
// (scan: blockDim.x ints of shared memory; scan[blockDim.x - 1] is the
// total afterwards).
__device__ __forceinline__ int mla_scan_excl(int *scan, int c) {
	const int tid = threadIdx.x, nt = blockDim.x;
	scan[tid] = c;
	__syncthreads();
	for (int o = 1; o < nt; o <<= 1) {
		const int add = tid >= o ? scan[tid - o] : 0;
		__syncthreads();
		scan[tid] += add;
		__syncthreads();
	}
	return scan[tid] - c;
}

// mla_cache_row is the cache row of position v of sequence b through its
// block table, or -1 (reported) for a block that is missing or outside
// the cache.
__device__ __forceinline__ int mla_cache_row(int v, int b, const int *bt, int bs, int maxBlocks, int nslots, int *err, int op) {
	const int blk = v / bs;
	const int cb = blk < maxBlocks ? bt[(i64)b * maxBlocks + blk] : -1;
	const i64 r = (i64)cb * bs + (v - blk * bs);
	if (cb < 0 || r >= nslots) {
		report(err, ERR_POSITION, op, v);
		return -1;
	}
	return (int)r;
}

// k_mla_select: one block per row t; dynamic shared memory n2 ints (n2 a
// power of two >= width). rows [T, width] gets the cache rows of the
// row's distinct valid positions, ascending, then counts[t] their number.
// A position outside the sequence, or whose block is missing or outside
// the cache, is reported; such a cache row is written as -1 (skipped).
extern "C" __global__ void k_mla_select(int *rows, int *counts, const int *sel, const int *qs, const int *pos,
					const int *bt, int B, int width, int n2, int bs, int maxBlocks, int nslots, int *err,
					int op) {
	pdl_prologue();
	extern __shared__ int keys[];
	__shared__ int scan[1024];
	const int t = blockIdx.x, tid = threadIdx.x, nt = blockDim.x;
	int b;
	const int seqLen = mla_sel_seq(qs, pos, B, t, counts, err, op, &b);
	if (seqLen < 0) {
		return;
	}
	for (int i = tid; i < n2; i += nt) {
		int v = MLA_INT_MAX;
		if (i < width) {
			v = sel[(i64)t * width + i];
			if (v >= seqLen) {
				report(err, ERR_POSITION, op, v);
				v = MLA_INT_MAX;
			} else if (v < 0) {
				v = MLA_INT_MAX;
			}
		}
		keys[i] = v;
	}
	__syncthreads();
	for (int size = 2; size <= n2; size <<= 1) {
		for (int stride = size >> 1; stride > 0; stride >>= 1) {
			for (int u = tid; u < n2 / 2; u += nt) {
				const int p = 2 * u - (u & (stride - 1));
				const bool asc = (p & size) == 0;
				const int x = keys[p], y = keys[p + stride];
				if ((x > y) == asc) {
					keys[p] = y;
					keys[p + stride] = x;
				}
			}
			__syncthreads();
		}
	}
	// Compact the distinct valid keys: each thread a contiguous chunk, an
	// inclusive scan of the chunks' counts.
	const int chunk = (n2 + nt - 1) / nt, lo = min(tid * chunk, n2), hi = min(lo + chunk, n2);
	int c = 0;
	for (int i = lo; i < hi; i++) {
		c += keys[i] != MLA_INT_MAX && (i == 0 || keys[i - 1] != keys[i]);
	}
	int at = mla_scan_excl(scan, c);
	int *out = rows + (i64)t * width;
	for (int i = lo; i < hi; i++) {
		const int v = keys[i];
		if (v == MLA_INT_MAX || (i > 0 && keys[i - 1] == v)) {
			continue;
		}
		out[at++] = mla_cache_row(v, b, bt, bs, maxBlocks, nslots, err, op);
	}
	if (tid == nt - 1) {
		counts[t] = scan[tid];
	}
}

// k_mla_select_bm: k_mla_select's result through a bitmap of the row's
// positions (dynamic shared memory words u32, words*32 >= the positions
// the block table can address) instead of a sort: each valid position
// sets its bit, then the set bits are read back in ascending order, which
// also drops repeats. A few barriers where the sort has one per bitonic
// stage (66 for 2048 selections): a decode step's rows are latency-bound.
extern "C" __global__ void k_mla_select_bm(int *rows, int *counts, const int *sel, const int *qs, const int *pos,
					   const int *bt, int B, int width, int words, int bs, int maxBlocks, int nslots, int *err,
					   int op) {
	pdl_prologue();
	extern __shared__ unsigned bits[];
	__shared__ int scan[1024];
	const int t = blockIdx.x, tid = threadIdx.x, nt = blockDim.x;
	int b;
	const int seqLen = mla_sel_seq(qs, pos, B, t, counts, err, op, &b);
	if (seqLen < 0) {
		return;
	}
	const int nw = min(words, (seqLen + 31) / 32);
	for (int i = tid; i < nw; i += nt) {
		bits[i] = 0;
	}
	__syncthreads();
	for (int i = tid; i < width; i += nt) {
		const int v = sel[(i64)t * width + i];
		if (v >= seqLen || (v >= 0 && (v >> 5) >= nw)) {
			report(err, ERR_POSITION, op, v);
		} else if (v >= 0) {
			atomicOr(bits + (v >> 5), 1u << (v & 31));
		}
	}
	__syncthreads();
	const int chunk = (nw + nt - 1) / nt, lo = min(tid * chunk, nw), hi = min(lo + chunk, nw);
	int c = 0;
	for (int i = lo; i < hi; i++) {
		c += __popc(bits[i]);
	}
	int at = mla_scan_excl(scan, c);
	int *out = rows + (i64)t * width;
	for (int i = lo; i < hi; i++) {
		for (unsigned w = bits[i]; w != 0; w &= w - 1) {
			const int v = i * 32 + __ffs(w) - 1;
			out[at++] = mla_cache_row(v, b, bt, bs, maxBlocks, nslots, err, op);
		}
	}
	if (tid == nt - 1) {
		counts[t] = scan[tid];
	}
}

#define MLA_QT 8 // rows per block of k_mla_qlat and k_mla_out
#define MLA_OUT1_COLS 4 // output columns per warp of k_mla_out's one-row form (mlaOut1Cols in mla.go)

// k_mla_qlat: grid (ceil(n/8), H, column splits), 128 or 256 threads, dynamic shared memory
// 8*dk floats. qlat [n, H, R] for rows t0..t0+n: q̃[t,h,r] =
// Σ_i q[t,h,i] kvB[h*(dk+dv)+i][r].
extern "C" __global__ void k_mla_qlat(float *qlat, const float *q, const void *kvB, int wdt, int t0, int n, int H,
				      int dk, int dv, int R) {
	pdl_prologue();
	extern __shared__ float qsh[];
	const int r0 = blockIdx.x * MLA_QT, h = blockIdx.y, nr = min(MLA_QT, n - r0);
	for (int e = threadIdx.x; e < MLA_QT * dk; e += blockDim.x) {
		const int j = e / dk, i = e - j * dk;
		qsh[e] = j < nr ? q[((i64)(t0 + r0 + j) * H + h) * dk + i] : 0.0f;
	}
	__syncthreads();
	const i64 wb = (i64)h * (dk + dv) * R;
	// grid.z splits the latent columns, so that a decode step's few rows
	// still fill the GPU.
	for (int r = blockIdx.z * blockDim.x + threadIdx.x; r < R; r += blockDim.x * gridDim.z) {
		float acc[MLA_QT];
#pragma unroll
		for (int j = 0; j < MLA_QT; j++) {
			acc[j] = 0;
		}
#pragma unroll 4
		for (int i = 0; i < dk; i++) {
			const float wv = ldf(kvB, wb + (i64)i * R + r, wdt);
#pragma unroll
			for (int j = 0; j < MLA_QT; j++) {
				acc[j] += qsh[j * dk + i] * wv;
			}
		}
		for (int j = 0; j < nr; j++) {
			qlat[((i64)(r0 + j) * H + h) * R + r] = acc[j];
		}
	}
}

// k_mla_qlat_bf16 is k_mla_qlat for decode waves with BF16 kvB (R % 8 ==
// 0, kvB 16-byte aligned: host-checked): grid (ceil(n/8), H), R/8 * ks
// threads (ks <= dk: the head's dk rows split into ks slices), dynamic
// shared memory (8*dk + ks*R) floats. Each thread reads 8 consecutive
// latent columns (16 bytes) of its slice's rows, so a head's W_UK streams
// with many loads in flight instead of one 2-byte load per thread and
// row; the slices' partial sums are added in slice order (a fixed order:
// deterministic), fp32 throughout.
extern "C" __global__ __launch_bounds__(512) void k_mla_qlat_bf16(float *qlat, const float *q, const u16 *kvB, int t0, int n,
								   int H, int dk, int dv, int R, int ks) {
	pdl_prologue();
	extern __shared__ float sh[];
	float *qsh = sh, *red = sh + MLA_QT * dk;
	const int r0 = blockIdx.x * MLA_QT, h = blockIdx.y, nr = min(MLA_QT, n - r0);
	for (int e = threadIdx.x; e < MLA_QT * dk; e += blockDim.x) {
		const int j = e / dk, i = e - j * dk;
		qsh[e] = j < nr ? q[((i64)(t0 + r0 + j) * H + h) * dk + i] : 0.0f;
	}
	__syncthreads();
	const int cg = R / 8, g = threadIdx.x % cg, sl = threadIdx.x / cg;
	const int per = (dk + ks - 1) / ks, i0 = min(dk, sl * per), i1 = min(dk, i0 + per);
	float acc[MLA_QT][8];
#pragma unroll
	for (int j = 0; j < MLA_QT; j++) {
#pragma unroll
		for (int c = 0; c < 8; c++) {
			acc[j][c] = 0.0f;
		}
	}
	const u16 *wb = kvB + (i64)h * (dk + dv) * R + 8 * g;
	if (sl < ks && nr == 1) {
		// One row (decode, a batch of one): row 0's sums alone, eight
		// weight loads in flight per thread (the seven empty rows'
		// FMAs would bound the kernel), in the same order as below.
#pragma unroll 8
		for (int i = i0; i < i1; i++) {
			float wf[8];
			bf16x8(wf, *(const uint4 *)(wb + (i64)i * R));
			const float qv = qsh[i];
#pragma unroll
			for (int c = 0; c < 8; c++) {
				acc[0][c] += qv * wf[c];
			}
		}
	} else if (sl < ks) {
#pragma unroll 4
		for (int i = i0; i < i1; i++) {
			float wf[8];
			bf16x8(wf, *(const uint4 *)(wb + (i64)i * R));
#pragma unroll
			for (int j = 0; j < MLA_QT; j++) {
				const float qv = qsh[j * dk + i];
#pragma unroll
				for (int c = 0; c < 8; c++) {
					acc[j][c] += qv * wf[c];
				}
			}
		}
	}
	for (int j = 0; j < nr; j++) {
		if (sl < ks) {
#pragma unroll
			for (int c = 0; c < 8; c++) {
				red[sl * R + 8 * g + c] = acc[j][c];
			}
		}
		__syncthreads();
		for (int r = threadIdx.x; r < R; r += blockDim.x) {
			float v = red[r];
			for (int k = 1; k < ks; k++) {
				v += red[k * R + r];
			}
			qlat[((i64)(r0 + j) * H + h) * R + r] = v;
		}
		__syncthreads();
	}
}

#define MLA_PS 32 // latents per tile (one per lane in the scoring step)
#define MLA_HG 16 // heads per block, at most
#define MLA_RC 4  // latent columns per thread, at most (R <= 256*MLA_RC)

// mla_softmax_step is one tile's online softmax update of head h, the
// warp's lanes holding its 32 latents' scaled scores x (masked: no
// latent): p = e^(x - m') with m' the running max, ps[h] the tile's p,
// corr[h] the factor e^(m - m') for the accumulator, lsum[h] the running
// sum.
__device__ __forceinline__ void mla_softmax_step(float x, bool masked, int h, int lane, float *ps, float *corr,
						 float *ms, float *lsum) {
	if (masked) {
		x = neg_inf();
	}
	const float mt = warp_nanmax(x);
	const float mo = ms[h], mn = fmaxf(mo, mt);
	float p = 0, cr = 1;
	if (mn != neg_inf()) {
		p = expf(x - mn);
		cr = mo == neg_inf() ? 0.0f : expf(mo - mn);
	}
	const float sp = warp_sum(p);
	ps[h * (MLA_PS + 1) + lane] = p;
	__syncwarp();
	if (lane == 0) {
		corr[h] = cr;
		ms[h] = mn;
		lsum[h] = lsum[h] * cr + sp;
	}
}

// k_mla_attn: grid (n, ceil(H/hg), splits), 256 threads; dynamic shared
// memory (hg*R + 32*(R+1) + hg*33 + 3*hg) floats + 32 ints. z [n, H, R]
// holds q̃ on entry. With one split (pacc NULL) it holds Σ_s p_s c_s
// (normalised) on exit, for rows t0..t0+n. With several (flash-decoding:
// a decode batch has too few rows to fill the GPU), split blockIdx.z
// covers the row's latents [z*tps*32, (z+1)*tps*32) and writes its
// running max, sum and unnormalised accumulator to pm, pl [splits, n, H]
// and pacc [splits, n, H, R]; k_mla_combine merges them into z. vec: BF16
// latents, R % 8 == 0, latents 16-byte aligned (and z's rows, R % 4 == 0).
extern "C" __global__ __launch_bounds__(256) void k_mla_attn(float *z, const void *lat, int ldt, const int *rows,
							     const int *counts, int t0, int H, int R, int width, int hg,
							     float scale, int tps, float *pm, float *pl, float *pacc, int vec) {
	pdl_prologue();
	extern __shared__ float sh[];
	const int tr = blockIdx.x, t = t0 + tr, h0 = blockIdx.y * hg, ng = min(hg, H - h0);
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int lr = R + 1;
	float *qsh = sh, *ls = qsh + hg * R, *ps = ls + MLA_PS * lr, *corr = ps + hg * (MLA_PS + 1), *ms = corr + hg,
	      *lsum = ms + hg;
	int *idx = (int *)(lsum + hg);
	float *zr = z + ((i64)tr * H + h0) * R;
	if (vec) { // R % 8 == 0 (host-checked): float4 loads, all in flight
		const float4 *z4 = (const float4 *)zr;
#pragma unroll 4
		for (int e = tid; e < ng * R / 4; e += blockDim.x) {
			const float4 v = z4[e];
			qsh[4 * e] = v.x;
			qsh[4 * e + 1] = v.y;
			qsh[4 * e + 2] = v.z;
			qsh[4 * e + 3] = v.w;
		}
	} else {
		for (int e = tid; e < ng * R; e += blockDim.x) {
			qsh[e] = zr[e];
		}
	}
	if (tid < hg) {
		ms[tid] = neg_inf();
		lsum[tid] = 0;
	}
	float acc[MLA_RC][MLA_HG];
#pragma unroll
	for (int c = 0; c < MLA_RC; c++) {
#pragma unroll
		for (int h = 0; h < MLA_HG; h++) {
			acc[c][h] = 0;
		}
	}
	const int *rr = rows + (i64)t * width;
	const int sBeg = pacc == NULL ? 0 : blockIdx.z * tps * MLA_PS;
	const int n = pacc == NULL ? counts[t] : min(counts[t], sBeg + tps * MLA_PS);
	for (int s0 = sBeg; s0 < n; s0 += MLA_PS) {
		__syncthreads(); // the previous tile has been used
		if (tid < MLA_PS) {
			idx[tid] = s0 + tid < n ? rr[s0 + tid] : -1;
		}
		__syncthreads();
		if (vec) {
			// BF16 latents, 16-byte aligned rows: 8 per load, a tile's
			// loads all in flight rather than one 2-byte load per element.
			const int r8 = R >> 3;
#pragma unroll 4
			for (int e = tid; e < MLA_PS * r8; e += blockDim.x) {
				const int s = e / r8, c = 8 * (e - s * r8), row = idx[s];
				float wf[8];
				if (row >= 0) {
					bf16x8(wf, *(const uint4 *)((const u16 *)lat + (i64)row * R + c));
				} else {
#pragma unroll
					for (int j = 0; j < 8; j++) {
						wf[j] = 0.0f;
					}
				}
#pragma unroll
				for (int j = 0; j < 8; j++) {
					ls[s * lr + c + j] = wf[j];
				}
			}
		} else {
			for (int e = tid; e < MLA_PS * R; e += blockDim.x) {
				const int s = e / R, c = e - s * R, row = idx[s];
				ls[s * lr + c] = row >= 0 ? ldf(lat, (i64)row * R + c, ldt) : 0.0f;
			}
		}
		__syncthreads();
		// Scores: lane = latent, warp w = heads w, w+8.
		for (int h = warp; h < ng; h += 8) {
			const float *qh = qsh + h * R, *lv = ls + lane * lr;
			float d = 0;
			for (int c = 0; c < R; c++) {
				d += qh[c] * lv[c];
			}
			mla_softmax_step(d * scale, idx[lane] < 0, h, lane, ps, corr, ms, lsum);
		}
		__syncthreads();
#pragma unroll
		for (int c = 0; c < MLA_RC; c++) {
			const int r = tid + c * 256;
			if (r < R) {
#pragma unroll
				for (int h = 0; h < MLA_HG; h++) {
					if (h < ng) {
						acc[c][h] *= corr[h];
					}
				}
				for (int s = 0; s < MLA_PS; s++) {
					const float lv = ls[s * lr + r];
#pragma unroll
					for (int h = 0; h < MLA_HG; h++) {
						if (h < ng) {
							acc[c][h] += ps[h * (MLA_PS + 1) + s] * lv;
						}
					}
				}
			}
		}
	}
	__syncthreads();
	if (pacc != NULL) {
		const i64 pr = ((i64)blockIdx.z * gridDim.x + tr) * H + h0;
		if (tid < ng) {
			pm[pr + tid] = ms[tid];
			pl[pr + tid] = lsum[tid];
		}
#pragma unroll
		for (int c = 0; c < MLA_RC; c++) {
			const int r = tid + c * 256;
			if (r < R) {
#pragma unroll
				for (int h = 0; h < MLA_HG; h++) {
					if (h < ng) {
						pacc[(pr + h) * R + r] = acc[c][h];
					}
				}
			}
		}
		return;
	}
#pragma unroll
	for (int c = 0; c < MLA_RC; c++) {
		const int r = tid + c * 256;
		if (r < R) {
#pragma unroll
			for (int h = 0; h < MLA_HG; h++) {
				if (h < ng) {
					const float l = lsum[h];
					zr[(i64)h * R + r] = l > 0 ? acc[c][h] * (float)(1.0 / (double)l) : 0.0f;
				}
			}
		}
	}
}

#define MLA_TC_HG 16 // heads per block: the MMA's m16
#define MLA_TC_PAD 8 // row padding (bf16) of the shared tiles: 16-byte rows, no bank conflicts
#define MLA_TC_NT 8  // 8-column MMA tiles per warp at most: R <= 8 warps x 8 x MLA_TC_NT (mlaTCMaxR)

// k_mla_attn_tc is k_mla_attn on the tensor cores, for BF16 latents with R
// % 128 == 0 and R <= 512 (host-checked; 16-byte aligned, as are z's rows): grid (n, ceil(H/16),
// splits), 256 threads, dynamic shared memory mla_tc_shared(R) bytes; the
// same arguments (but for hg, always 16), outputs and online softmax. A
// block holds its 16 heads' q̃ split in three bf16 parts (split3x2: all
// 24 bits of fp32) and streams the row's latents in tiles of 32 through
// two shared buffers (cp.async, the next tile loading while this one is
// used; the tiles' cache rows are read into shared memory two tiles
// ahead, so no copy waits on a global load). Per tile: scores = q̃ · latentsᵀ as m16n8k16 MMAs of each part
// (fp32 accumulation; warp w sums latent columns [wR/8, (w+1)R/8), the
// eight partial sums added in warp order), the softmax step as in
// k_mla_attn (warp w: heads 2w, 2w+1, lane = latent), then acc += p ·
// latents with p split in three parts likewise (warp w: latent columns
// [wR/8, (w+1)R/8)). Products are exact and sums fp32, so results agree
// with k_mla_attn to fp32 rounding in another summation order.
extern "C" __global__ __launch_bounds__(256) void k_mla_attn_tc(float *z, const u16 *lat, const int *rows,
								const int *counts, int t0, int H, int R, int width,
								float scale, int tps, float *pm, float *pl, float *pacc) {
	pdl_prologue();
	extern __shared__ __align__(16) unsigned char shb[];
	const int RP = R + MLA_TC_PAD;
	u16 *qs = (u16 *)shb;                        // [3][16][RP]: q̃'s parts hi, mid, lo
	u16 *ls = qs + 3 * MLA_TC_HG * RP;           // [2][32][RP]: latent tiles
	float *sp = (float *)(ls + 2 * MLA_PS * RP); // [8][16][32]: the warps' partial scores
	float *ps = sp + 8 * MLA_TC_HG * MLA_PS;     // [16][33]: this tile's probabilities
	float *corr = ps + MLA_TC_HG * (MLA_PS + 1), *ms = corr + MLA_TC_HG, *lsum = ms + MLA_TC_HG;
	int *idx = (int *)(lsum + MLA_TC_HG); // [3][32]: the cache rows of tiles it, it + 1, it + 2 at it % 3, ...
	const int tr = blockIdx.x, t = t0 + tr, h0 = blockIdx.y * MLA_TC_HG, ng = min(MLA_TC_HG, H - h0);
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
	float *zr = z + ((i64)tr * H + h0) * R;
	const int *rr = rows + (i64)t * width;
	const int sBeg = pacc == NULL ? 0 : blockIdx.z * tps * MLA_PS;
	const int n = pacc == NULL ? counts[t] : min(counts[t], sBeg + tps * MLA_PS);
	const int r8 = R >> 3;
	// The cache row of latent s (-1 past n).
	auto rowAt = [&](int s) { return s < n ? rr[s] : -1; };
	// The tile whose rows are idx[ib] into buffer st: 16-byte copies,
	// zeros for rows -1. The rows come from shared memory, read a tile
	// ahead: a copy's address never waits on a global load.
	auto load = [&](int st, int ib) {
		u16 *dst = ls + st * MLA_PS * RP;
		const int *ix = idx + ib * MLA_PS;
		for (int e = tid; e < MLA_PS * r8; e += blockDim.x) {
			const int s = e / r8, c = 8 * (e - s * r8);
			const int row = ix[s];
			cp_async16(dst + s * RP + c, row >= 0 ? lat + (i64)row * R + c : lat, row >= 0 ? 16 : 0);
		}
	};
	if (tid < MLA_PS) {
		idx[tid] = rowAt(sBeg + tid);
		idx[MLA_PS + tid] = rowAt(sBeg + MLA_PS + tid);
	}
	__syncthreads();
	if (sBeg < n) {
		load(0, 0);
	}
	cp_async_commit();
	// q̃'s parts; heads past ng are zeros.
	for (int e = tid; e < MLA_TC_HG * R / 2; e += blockDim.x) {
		const int h = e / (R / 2), c = 2 * (e - h * (R / 2));
		float2 v = make_float2(0.0f, 0.0f);
		if (h < ng) {
			v = *(const float2 *)(zr + (i64)h * R + c);
		}
		u32 p0, p1, p2;
		split3x2(v.x, v.y, p0, p1, p2);
		*(u32 *)(qs + h * RP + c) = p0;
		*(u32 *)(qs + (MLA_TC_HG + h) * RP + c) = p1;
		*(u32 *)(qs + (2 * MLA_TC_HG + h) * RP + c) = p2;
	}
	if (tid < MLA_TC_HG) {
		ms[tid] = neg_inf();
		lsum[tid] = 0;
	}
	const int wc = warp * (R / 8); // this warp's latent columns: [wc, wc + R/8)
	const int NT = R / 64;         // its 8-column MMA tiles
	float acc[MLA_TC_NT][4];
#pragma unroll
	for (int j = 0; j < MLA_TC_NT; j++) {
#pragma unroll
		for (int i = 0; i < 4; i++) {
			acc[j][i] = 0.0f;
		}
	}
	for (int s0 = sBeg, it = 0; s0 < n; s0 += MLA_PS, it++) {
		const int st = it & 1, ib = it % 3;
		// Tile it + 2's rows: loaded now, stored once this tile is done.
		const int nxt = tid < MLA_PS ? rowAt(s0 + 2 * MLA_PS + tid) : -1;
		__syncthreads(); // the previous tile's buffers have been used
		if (s0 + MLA_PS < n) {
			load(st ^ 1, (it + 1) % 3);
		}
		cp_async_commit();
		cp_async_wait1(); // this tile's copies (this thread's) are done
		__syncthreads();
		const u16 *lt = ls + st * MLA_PS * RP;
		// Partial scores over this warp's columns: 4 MMA tiles of 8 latents.
		float sacc[4][4];
#pragma unroll
		for (int j = 0; j < 4; j++) {
#pragma unroll
			for (int i = 0; i < 4; i++) {
				sacc[j][i] = 0.0f;
			}
		}
		for (int k = wc; k < wc + R / 8; k += 16) {
#pragma unroll
			for (int p = 2; p >= 0; p--) { // smallest part first
				u32 a0, a1, a2, a3;
				ldsm_x4(qs + (p * MLA_TC_HG + (lane & 15)) * RP + k + 8 * (lane >> 4), a0, a1, a2, a3);
#pragma unroll
				for (int j = 0; j < 4; j++) {
					const u16 *b = lt + (8 * j + g) * RP + k + 2 * q;
					mma_bf16(sacc[j], a0, a1, a2, a3, *(const u32 *)b, *(const u32 *)(b + 8));
				}
			}
		}
		// sacc[j]: heads g, g+8 x latents 8j + 2q, 8j + 2q + 1.
#pragma unroll
		for (int j = 0; j < 4; j++) {
			float *o = sp + warp * MLA_TC_HG * MLA_PS + 8 * j + 2 * q;
			o[g * MLA_PS] = sacc[j][0];
			o[g * MLA_PS + 1] = sacc[j][1];
			o[(g + 8) * MLA_PS] = sacc[j][2];
			o[(g + 8) * MLA_PS + 1] = sacc[j][3];
		}
		__syncthreads();
		// Online softmax, as k_mla_attn: warp w takes heads 2w and 2w+1.
#pragma unroll
		for (int hh = 0; hh < 2; hh++) {
			const int h = 2 * warp + hh;
			float d = 0;
#pragma unroll
			for (int w = 0; w < 8; w++) {
				d += sp[(w * MLA_TC_HG + h) * MLA_PS + lane];
			}
			mla_softmax_step(d * scale, idx[ib * MLA_PS + lane] < 0, h, lane, ps, corr, ms, lsum);
		}
		__syncthreads();
		// acc = acc * corr + p · latents over this warp's columns.
		const float c0 = corr[g], c1 = corr[g + 8];
#pragma unroll
		for (int j = 0; j < MLA_TC_NT; j++) {
			if (j < NT) {
				acc[j][0] *= c0;
				acc[j][1] *= c0;
				acc[j][2] *= c1;
				acc[j][3] *= c1;
			}
		}
#pragma unroll
		for (int kk = 0; kk < MLA_PS; kk += 16) {
			const float *pa = ps + g * (MLA_PS + 1) + kk + 2 * q, *pb = pa + 8 * (MLA_PS + 1);
			u32 a[3][4];
			split3x2(pa[0], pa[1], a[0][0], a[1][0], a[2][0]);
			split3x2(pb[0], pb[1], a[0][1], a[1][1], a[2][1]);
			split3x2(pa[8], pa[9], a[0][2], a[1][2], a[2][2]);
			split3x2(pb[8], pb[9], a[0][3], a[1][3], a[2][3]);
#pragma unroll
			for (int j = 0; j < MLA_TC_NT; j++) {
				if (j < NT) {
					u32 b0, b1;
					ldsm_x2_trans(lt + (kk + (lane & 15)) * RP + wc + 8 * j, b0, b1);
#pragma unroll
					for (int p = 2; p >= 0; p--) {
						mma_bf16(acc[j], a[p][0], a[p][1], a[p][2], a[p][3], b0, b1);
					}
				}
			}
		}
		if (tid < MLA_PS) {
			idx[((it + 2) % 3) * MLA_PS + tid] = nxt; // tile it - 1's slot: read before this tile's first barrier
		}
	}
	__syncthreads();
	// acc[j]: heads g, g+8 x latent columns wc + 8j + 2q, + 1.
	const bool split = pacc != NULL;
	const i64 pr = split ? ((i64)blockIdx.z * gridDim.x + tr) * H + h0 : 0;
	if (split && tid < ng) {
		pm[pr + tid] = ms[tid];
		pl[pr + tid] = lsum[tid];
	}
#pragma unroll
	for (int hh = 0; hh < 2; hh++) {
		const int h = g + 8 * hh;
		if (h >= ng) {
			continue;
		}
		const float l = lsum[h];
		const float inv = l > 0 ? (float)(1.0 / (double)l) : 0.0f;
#pragma unroll
		for (int j = 0; j < MLA_TC_NT; j++) {
			if (j < NT) {
				const int r = wc + 8 * j + 2 * q;
				const float v0 = acc[j][2 * hh], v1 = acc[j][2 * hh + 1];
				if (split) {
					pacc[(pr + h) * R + r] = v0;
					pacc[(pr + h) * R + r + 1] = v1;
				} else {
					zr[(i64)h * R + r] = l > 0 ? v0 * inv : 0.0f;
					zr[(i64)h * R + r + 1] = l > 0 ? v1 * inv : 0.0f;
				}
			}
		}
	}
}

// k_mla_combine: grid (n, H), 256 threads. Merges the splits of
// k_mla_attn (pm, pl [splits, n, H], pacc [splits, n, H, R]) into z
// [n, H, R]: with M the largest split max, z = Σ_s e^(m_s-M) acc_s /
// Σ_s e^(m_s-M) l_s (zeros for a row without latents).
extern "C" __global__ void k_mla_combine(float *z, const float *pm, const float *pl, const float *pacc, int splits,
					 int n, int H, int R) {
	pdl_prologue();
	const int tr = blockIdx.x, h = blockIdx.y;
	const i64 stride = (i64)n * H;
	const i64 at = (i64)tr * H + h;
	float M = neg_inf();
	for (int sp = 0; sp < splits; sp++) {
		M = fmaxf(M, pm[sp * stride + at]);
	}
	float L = 0;
	for (int sp = 0; sp < splits; sp++) {
		const float m = pm[sp * stride + at];
		L += m == neg_inf() ? 0.0f : expf(m - M) * pl[sp * stride + at];
	}
	const float inv = L > 0 ? (float)(1.0 / (double)L) : 0.0f;
	for (int r = threadIdx.x; r < R; r += blockDim.x) {
		float v = 0;
		for (int sp = 0; sp < splits; sp++) {
			const float m = pm[sp * stride + at];
			if (m != neg_inf()) {
				v += expf(m - M) * pacc[(sp * stride + at) * R + r];
			}
		}
		z[at * R + r] = L > 0 ? v * inv : 0.0f;
	}
}

// k_mla_out: grid (ceil(n/8), H, column splits), 256 threads, dynamic shared memory 8*R
// floats. out[t, h*dv+j] = Σ_r kvB[h*(dk+dv)+dk+j][r] z[t,h,r] for rows
// t0..t0+n; one warp per output column j. vec: BF16 kvB read 8 weights
// per lane load (R % 8 == 0, 16-byte aligned).
extern "C" __global__ void k_mla_out(float *out, const float *z, const void *kvB, int wdt, int t0, int n, int H,
				     int dk, int dv, int R, int vec) {
	pdl_prologue();
	extern __shared__ float zsh[];
	const int r0 = blockIdx.x * MLA_QT, h = blockIdx.y, nr = min(MLA_QT, n - r0);
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	const bool one = vec && nr == 1;
	for (int e = threadIdx.x; e < (one ? R : MLA_QT * R); e += blockDim.x) {
		const int j = e / R, r = e - j * R;
		zsh[e] = j < nr ? z[((i64)(r0 + j) * H + h) * R + r] : 0.0f;
	}
	__syncthreads();
	if (one) {
		// One row (a decode wave's tile of one token): the same sums for
		// row 0 without the seven empty rows' FMAs and shared loads, z
		// read as float4s (conflict-free across the warp's 8-float
		// strides). A warp takes MLA_OUT1_COLS columns, their 16-byte
		// weight loads of each 256-wide step issued together: the
		// one-row form is bound by memory latency, not bandwidth.
		for (int j0 = (blockIdx.z * nw + warp) * MLA_OUT1_COLS; j0 < dv; j0 += nw * gridDim.z * MLA_OUT1_COLS) {
			const u16 *wr = (const u16 *)kvB + ((i64)h * (dk + dv) + dk + j0) * R;
			float acc[MLA_OUT1_COLS];
#pragma unroll
			for (int c = 0; c < MLA_OUT1_COLS; c++) {
				acc[c] = 0;
			}
#pragma unroll 2
			for (int r = lane * 8; r < R; r += 256) {
				uint4 wq[MLA_OUT1_COLS];
#pragma unroll
				for (int c = 0; c < MLA_OUT1_COLS; c++) {
					wq[c] = j0 + c < dv ? *(const uint4 *)(wr + (i64)c * R + r) : make_uint4(0u, 0u, 0u, 0u);
				}
				const float4 z0 = *(const float4 *)(zsh + r), z1 = *(const float4 *)(zsh + r + 4);
#pragma unroll
				for (int c = 0; c < MLA_OUT1_COLS; c++) {
					float wf[8];
					bf16x8(wf, wq[c]);
					float a = acc[c];
					a += wf[0] * z0.x;
					a += wf[1] * z0.y;
					a += wf[2] * z0.z;
					a += wf[3] * z0.w;
					a += wf[4] * z1.x;
					a += wf[5] * z1.y;
					a += wf[6] * z1.z;
					a += wf[7] * z1.w;
					acc[c] = a;
				}
			}
#pragma unroll
			for (int c = 0; c < MLA_OUT1_COLS; c++) {
				const float v = warp_sum(acc[c]);
				if (lane == 0 && j0 + c < dv) {
					out[((i64)(t0 + r0) * H + h) * dv + j0 + c] = v;
				}
			}
		}
		return;
	}
	for (int jj = blockIdx.z * nw + warp; jj < dv; jj += nw * gridDim.z) { // grid.z splits the columns
		const i64 wb = ((i64)h * (dk + dv) + dk + jj) * R;
		float acc[MLA_QT];
#pragma unroll
		for (int j = 0; j < MLA_QT; j++) {
			acc[j] = 0;
		}
		if (vec) {
			// BF16 rows, R % 8 == 0, 16-byte aligned (host-checked): 8
			// weights per lane load.
			for (int r = lane * 8; r < R; r += 256) {
				float wf[8];
				bf16x8(wf, *(const uint4 *)((const u16 *)kvB + wb + r));
#pragma unroll
				for (int j = 0; j < MLA_QT; j++) {
#pragma unroll
					for (int c = 0; c < 8; c++) {
						acc[j] += wf[c] * zsh[j * R + r + c];
					}
				}
			}
		} else {
			for (int r = lane; r < R; r += 32) {
				const float wv = ldf(kvB, wb + r, wdt);
#pragma unroll
				for (int j = 0; j < MLA_QT; j++) {
					acc[j] += wv * zsh[j * R + r];
				}
			}
		}
#pragma unroll
		for (int j = 0; j < MLA_QT; j++) {
			acc[j] = warp_sum(acc[j]);
		}
		if (lane == 0) {
			for (int j = 0; j < nr; j++) {
				out[((i64)(t0 + r0 + j) * H + h) * dv + jj] = acc[j];
			}
		}
	}
}
