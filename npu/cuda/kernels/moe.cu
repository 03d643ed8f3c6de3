// MoE (npu/cpu/moe.go) and the float grouped GEMMs that MoE, MoEQ's MXFP8
// path and MatMulQ's MXFP8 path share (moe.go, quant.go).
//
// The routing never leaves the device: k_moe_route counts the rows of each
// expert, lays the assignments out expert by expert and writes the tile
// table the grouped GEMMs walk. A grouped GEMM row's result depends only on
// its own input row and its expert (the accumulation order along K is
// fixed), so the order of rows inside an expert, which the shared-memory
// atomics decide, never changes a result.

#define MOE_BM 64 // rows of a tiled GEMM block (moeBM in moe.go)
#define MOE_BN 64 // output columns of a tiled GEMM block
#define MOE_BK 16 // K step of the float tiled GEMM
#define MOE_SMALL_MT 8 // rows per pass of the small (decode) kernels
#define MOE_MAX_K 64   // experts per token (moeMaxK in moe.go)

// Weight element codes of the float GEMMs: the DT_* codes, and DT_F8E4M3
// with one E8M0 scale per group of `group` elements along K (MXFP8).

// e8m0_to_f32 decodes an E8M0 scale byte: 2^(s-127), 2^-127 (subnormal)
// for 0, NaN for 0xff (npu/cpu's e8m0).
__device__ __forceinline__ float e8m0_to_f32(u8 s) {
	if (s == 0) {
		return __uint_as_float(0x00400000u);
	}
	if (s == 0xff) {
		return __uint_as_float(0x7fc00000u);
	}
	return __uint_as_float((u32)s << 23);
}

// ldw loads weight element i (row n of K, expert base already applied)
// as float: F32, BF16, F16, or an MXFP8 element times its block's scale.
__device__ __forceinline__ float ldw(const void *w, i64 i, int wdt, const u8 *scale, i64 srow, int k, int group) {
	if (wdt == DT_F8E4M3) {
		return e4m3_to_f32(((const u8 *)w)[i]) * e8m0_to_f32(scale[srow + k / group]);
	}
	return ldf(w, i, wdt);
}

// k_moe_route: one block. ids [n] (n = tokens * k assignments) into
// rows [n] (the GEMM row of each assignment, -1 for an id outside
// [0, E), which is reported), tok [n] (the token of each GEMM row), off
// [E+1] (expert e owns rows off[e] .. off[e+1]), tiles [2 * (n/bm + E)]
// ((expert, first row) of each bm-row tile, expert by expert) and
// ntiles [1]. Dynamic shared memory: 2*E ints.
extern "C" __global__ void k_moe_route(int *rows, int *tok, int *off, int *tiles, int *ntiles, const int *ids,
				       int n, int k, int E, int bm, int *err, int op) {
	pdl_prologue();
	extern __shared__ int sh[];
	int *cnt = sh, *cur = sh + E;
	for (int e = threadIdx.x; e < E; e += blockDim.x) {
		cnt[e] = 0;
	}
	__syncthreads();
	for (int a = threadIdx.x; a < n; a += blockDim.x) {
		const int e = ids[a];
		if (e >= 0 && e < E) {
			atomicAdd(&cnt[e], 1);
		} else {
			report(err, ERR_INDEX, op, e);
		}
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		int s = 0, t = 0;
		for (int e = 0; e < E; e++) {
			off[e] = s;
			cur[e] = s;
			for (int r = 0; r < cnt[e]; r += bm) {
				tiles[2 * t] = e;
				tiles[2 * t + 1] = s + r;
				t++;
			}
			s += cnt[e];
		}
		off[E] = s;
		ntiles[0] = t;
	}
	__syncthreads();
	for (int a = threadIdx.x; a < n; a += blockDim.x) {
		const int e = ids[a];
		int r = -1;
		if (e >= 0 && e < E) {
			r = atomicAdd(&cur[e], 1);
			tok[r] = a / k;
		}
		rows[a] = r;
	}
}


// k_moe_gemm_f: C[r, n] = sum_k A[a(r), k] * W_e[n, k] for the rows of a
// tile (see moe_tile), fp32 accumulation in ascending k. A [*, K] fp32
// rows (a(r) = tok[r] when tok != 0, else r), W [E, N, K] of code wdt
// (MXFP8: scale [E, N, ceil(K/group)]), C [*, N]. 256 threads, each a
// 4x4 micro tile of the 64x64 block tile; K in steps of 16 through
// shared memory.
extern "C" __global__ __launch_bounds__(256) void k_moe_gemm_f(float *C, const float *A, const int *tok, const void *W,
							       int wdt, const u8 *scale, int group, const int *tiles,
							       const int *ntiles, const int *off, int M, int N, int K) {
	pdl_prologue();
	__shared__ float As[MOE_BK][MOE_BM + 4];
	__shared__ float Bs[MOE_BK][MOE_BN + 4];
	int e, r0, r1;
	if (!moe_tile(tiles, ntiles, off, M, MOE_BM, e, r0, r1)) {
		return;
	}
	const int n0 = blockIdx.x * MOE_BN;
	const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
	const int nb = group > 0 ? (K + group - 1) / group : 0;
	const i64 wbase = (i64)e * N * K;
	const i64 sbase = (i64)e * N * nb;
	// Loader roles: 4 elements of each tile per thread, (row, k) = (l/16, l%16).
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
	for (int k0 = 0; k0 < K; k0 += MOE_BK) {
#pragma unroll
		for (int i = 0; i < 4; i++) {
			const int l = threadIdx.x + 256 * i;
			const int rr = l >> 4, kk = l & 15, k = k0 + kk;
			As[kk][rr] = (aok[i] && k < K) ? A[arow[i] + k] : 0.0f;
			const int n = n0 + rr;
			Bs[kk][rr] = (bok[i] && k < K) ? ldw(W, wbase + (i64)n * K + k, wdt, scale, sbase + (i64)n * nb, k, group) : 0.0f;
		}
		__syncthreads();
#pragma unroll
		for (int kk = 0; kk < MOE_BK; kk++) {
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

#define MOE_TK 64 // K step of the tensor-core GEMM (a multiple of 32)
#define MOE_TP 8  // row padding (bf16 elements) of its shared tiles
#define MOE_TBN 128 // output columns of a tensor-core GEMM block (moeTCBN in moe.go)

// unpack8 stores the 8 bf16 values of a 16-byte load (element 0 in the
// low half of v.x) in w[0..7].
__device__ __forceinline__ void unpack8(u16 *w, uint4 v) {
	const u32 vv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
	for (int i = 0; i < 4; i++) {
		w[2 * i] = (u16)(vv[i] & 0xffffu);
		w[2 * i + 1] = (u16)(vv[i] >> 16);
	}
}

// gemm_tc_tile is a block's piece of a tensor-core GEMM with BF16
// weights: C[r, n] = Σ_k A[a(r), k] W[n, k] for rows r0 <= r < r1 (at most
// 64) and columns n0 <= n < min(N, n0 + MOE_TBN), a(r) = tok[r] when tok
// != 0; A rows lda floats apart, C rows ldc, W rows K. The fp32 A rows are
// split into three bf16 parts (hi = bf16(a), mid = bf16(a - hi), lo =
// bf16(a - hi - mid): 24 bits of a, all of an fp32 mantissa, split3x2)
// and C = lo·Wᵀ + mid·Wᵀ + hi·Wᵀ with fp32 accumulation, so results agree
// with fp32 FMAs to fp32 rounding. 256 threads = 8 warps, each a 32x32
// piece (2x4 m16n8k16 tiles); K in steps of MOE_TK (64), the next step's A and W
// loaded into registers while this one's MMAs run. vec (host-checked: K %
// 8 == 0, lda % 4 == 0, A and W 16-byte aligned) loads 8 elements at a
// time.
//
// P = 2 (k_moe_gemm_tc2) keeps two parts (hi, lo = bf16(a - hi): 16 bits
// of a, split2x2): two thirds of the MMAs and of the A tile's shared
// memory, results within bf16 weights' rounding of fp32's.
//
// WT (k_gemm_tc_strided_t) reads W transposed: element (n, k) at W[k ldw
// + n], a K x N row-major matrix (rows ldw apart); vec then also needs ldw
// % 8 == 0.
template <int P, bool WT = false>
__device__ __forceinline__ void gemm_tc_tile(float *C, i64 ldc, const float *A, i64 lda, const int *tok,
					     const u16 *W, int N, int K, int r0, int r1, int n0, int vec, i64 ldw = 0) {
	__shared__ __align__(16) u16 As[P][MOE_BM][MOE_TK + MOE_TP];
	__shared__ __align__(16) u16 Bs[MOE_TBN][MOE_TK + MOE_TP];
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int wm = (warp & 1) * 32, wn = (warp >> 1) * 32;
	const int g = lane >> 2, q = lane & 3;
	// Loader roles: A, MOE_TK/32 runs of 8 consecutive k of row tid/4 (32
	// apart); W, MOE_TK/2 consecutive k of row tid/2.
	constexpr int AR = MOE_TK / 32, WV = MOE_TK / 16;
	const int lr = tid >> 2, lk = (tid & 3) * 8;
	const int ar = r0 + lr;
	const bool aok = ar < r1;
	const i64 arow = aok ? (i64)(tok ? tok[ar] : ar) * lda : 0;
	const int br = tid >> 1, bk = (tid & 1) * (MOE_TK / 2);
	const int bn = n0 + br;
	const bool bok = bn < N;
	const u16 *wrow = W + (i64)(bok ? bn : 0) * K;
	// WT's loader roles: 32 consecutive n of k row tid/4 (coalesced).
	const int tk = tid >> 2, tn = (tid & 3) * (MOE_TBN / 4);
	float a[8 * AR];
	u16 w[8 * WV];
	// fetch loads step k0's A and W pieces of this thread into a and w.
	auto fetch = [&](int k0) {
#pragma unroll
		for (int s = 0; s < AR; s++) {
			const int ka = k0 + lk + 32 * s;
			float *as = a + 8 * s;
			if (vec && ka + 8 <= K && aok) {
				const float4 x0 = *(const float4 *)(A + arow + ka), x1 = *(const float4 *)(A + arow + ka + 4);
				as[0] = x0.x, as[1] = x0.y, as[2] = x0.z, as[3] = x0.w, as[4] = x1.x, as[5] = x1.y, as[6] = x1.z, as[7] = x1.w;
			} else {
#pragma unroll
				for (int i = 0; i < 8; i++) {
					as[i] = (aok && ka + i < K) ? A[arow + ka + i] : 0.0f;
				}
			}
		}
		if constexpr (WT) {
#pragma unroll
			for (int h = 0; h < WV; h++) {
				const int n = n0 + tn + 8 * h, k = k0 + tk;
				const u16 *src = W + (i64)(k < K ? k : 0) * ldw + n;
				if (vec && n + 8 <= N && k < K) {
					unpack8(w + 8 * h, *(const uint4 *)src);
				} else {
#pragma unroll
					for (int i = 0; i < 8; i++) {
						w[8 * h + i] = (k < K && n + i < N) ? src[i] : (u16)0;
					}
				}
			}
		} else {
#pragma unroll
			for (int h = 0; h < WV; h++) {
				const int k = k0 + bk + 8 * h;
				if (vec && k + 8 <= K && bok) {
					unpack8(w + 8 * h, *(const uint4 *)(wrow + k));
				} else {
#pragma unroll
					for (int i = 0; i < 8; i++) {
						w[8 * h + i] = (bok && k + i < K) ? wrow[k + i] : (u16)0;
					}
				}
			}
		}
	};
	float acc[2][4][4];
#pragma unroll
	for (int m = 0; m < 2; m++) {
#pragma unroll
		for (int j = 0; j < 4; j++) {
#pragma unroll
			for (int i = 0; i < 4; i++) {
				acc[m][j][i] = 0.0f;
			}
		}
	}
	fetch(0);
	for (int k0 = 0; k0 < K; k0 += MOE_TK) {
#pragma unroll
		for (int i = 0; i < 8 * AR; i += 2) {
			const int c = lk + 32 * (i >> 3) + (i & 7);
			if (P == 3) {
				u32 hi, mid, lo;
				split3x2(a[i], a[i + 1], hi, mid, lo);
				*(u32 *)&As[0][lr][c] = hi;
				*(u32 *)&As[1][lr][c] = mid;
				*(u32 *)&As[P - 1][lr][c] = lo;
			} else {
				u32 hi, lo;
				split2x2(a[i], a[i + 1], hi, lo);
				*(u32 *)&As[0][lr][c] = hi;
				*(u32 *)&As[P - 1][lr][c] = lo;
			}
		}
		if constexpr (WT) {
#pragma unroll
			for (int j = 0; j < 8 * WV; j++) {
				Bs[tn + j][tk] = w[j];
			}
		} else {
#pragma unroll
			for (int i = 0; i < 8 * WV; i += 2) {
				*(u32 *)&Bs[br][bk + i] = (u32)w[i] | (u32)w[i + 1] << 16;
			}
		}
		__syncthreads();
		if (k0 + MOE_TK < K) {
			fetch(k0 + MOE_TK); // in flight during this step's MMAs
		}
#pragma unroll
		for (int kk = 0; kk < MOE_TK; kk += 16) {
			const int c0 = kk + 2 * q;
			u32 b[4][2];
#pragma unroll
			for (int j = 0; j < 4; j++) {
				const int nn = wn + 8 * j + g;
				b[j][0] = *(const u32 *)&Bs[nn][c0];
				b[j][1] = *(const u32 *)&Bs[nn][c0 + 8];
			}
#pragma unroll
			for (int p = P - 1; p >= 0; p--) { // smallest part first
#pragma unroll
				for (int m = 0; m < 2; m++) {
					u32 a0, a1, a2, a3;
					ldsm_x4(&As[p][wm + 16 * m + (lane & 15)][kk + 8 * (lane >> 4)], a0, a1, a2, a3);
#pragma unroll
					for (int j = 0; j < 4; j++) {
						mma_bf16(acc[m][j], a0, a1, a2, a3, b[j][0], b[j][1]);
					}
				}
			}
		}
		__syncthreads();
	}
#pragma unroll
	for (int m = 0; m < 2; m++) {
#pragma unroll
		for (int j = 0; j < 4; j++) {
			const int n = n0 + wn + 8 * j + 2 * q;
#pragma unroll
			for (int h = 0; h < 2; h++) {
				const int r = r0 + wm + 16 * m + g + 8 * h;
				if (r < r1) {
					if (n < N) {
						C[(i64)r * ldc + n] = acc[m][j][2 * h];
					}
					if (n + 1 < N) {
						C[(i64)r * ldc + n + 1] = acc[m][j][2 * h + 1];
					}
				}
			}
		}
	}
}


// moe_gemm_tc is a block of k_moe_gemm_tc (P = 3) and k_moe_gemm_tc2 (P
// = 2): routing tile blockIdx.y's rows times expert e's columns
// blockIdx.x * MOE_TBN ... through gemm_tc_tile<P>.
template <int P>
__device__ __forceinline__ void moe_gemm_tc(float *C, const float *A, const int *tok, const u16 *W, const int *tiles,
					    const int *ntiles, const int *off, int M, int N, int K, int vec) {
	int e, r0, r1;
	if (!moe_tile(tiles, ntiles, off, M, MOE_BM, e, r0, r1)) {
		return;
	}
	gemm_tc_tile<P>(C, N, A, K, tok, W + (i64)e * N * K, N, K, r0, r1, blockIdx.x * MOE_TBN, vec);
}

// k_moe_gemm_tc is k_moe_gemm_f for BF16 weights on the tensor cores
// (gemm_tc_tile, three-part activations): grid (ceil(N/MOE_TBN), routing
// tiles), 256 threads.
extern "C" __global__ __launch_bounds__(256) void k_moe_gemm_tc(float *C, const float *A, const int *tok,
								const u16 *W, const int *tiles, const int *ntiles,
								const int *off, int M, int N, int K, int vec) {
	pdl_prologue();
	moe_gemm_tc<3>(C, A, tok, W, tiles, ntiles, off, M, N, K, vec);
}

// k_moe_gemm_tc2 is k_moe_gemm_tc on two-part activations: the prefill MoE
// GEMMs (moeTCParts).
extern "C" __global__ __launch_bounds__(256) void k_moe_gemm_tc2(float *C, const float *A, const int *tok,
								 const u16 *W, const int *tiles, const int *ntiles,
								 const int *off, int M, int N, int K, int vec) {
	pdl_prologue();
	moe_gemm_tc<2>(C, A, tok, W, tiles, ntiles, off, M, N, K, vec);
}

#define MOE_PBN 256 // output columns of a k_moe_gemm_pipe block (moePipeBN in moe.go)
#define MOE_PBK 32  // K step of one pipeline stage
#define MOE_PST 3   // pipeline stages
#define MOE_PLD (MOE_PBK + 8) // shared row length (bf16): 80 bytes, so ldmatrix's 8 rows hit distinct banks
// MOE_PSMEM is k_moe_gemm_pipe's dynamic shared memory (moePipeShared in
// moe.go): per stage the hi and lo A tiles and the W tile.
#define MOE_PSMEM (MOE_PST * (2 * MOE_BM + MOE_PBN) * MOE_PLD * 2)

// k_moe_gemm_pipe is k_moe_gemm_tc2 on activations split beforehand (hi
// and lo bf16 rows, k_split_bf16 or k_swiglu_split): C[r, n] = Σ_k (lo[a(r),
// k] + hi[a(r), k]) W_e[n, k] for the rows r0 <= r < r1 of routing tile
// blockIdx.y (moe_tile) and columns blockIdx.x * MOE_PBN ..., a(r) =
// tok[r] when tok != 0, hi, lo and C rows K, K and N elements long. With
// no conversion left in the loop every operand goes from global to shared
// memory by cp.async, MOE_PST stages deep, so the loads of the next stages
// overlap this one's MMAs; 8 warps, each 32 rows x 64 columns (2x8
// m16n8k16 tiles per part), operands by ldmatrix. The arithmetic is
// k_moe_gemm_tc2's (each k step lo·Wᵀ then hi·Wᵀ into one fp32
// accumulator), so the results are its bits (activations within 2^-9 of
// FLT_MAX aside: split_bf16). The host checks K % 8 == 0,
// N even and 16-byte aligned hi, lo and W. Dynamic shared memory:
// MOE_PSMEM bytes.
//
// P = 1 (k_moe_gemm_pipe1) takes hi alone: activations rounded to bf16,
// as a bf16 model's GEMMs take them (NPUSERVE_CUDA_BF16_ACTIVATIONS), half
// the MMAs; Alo is not read.
template <int P>
__device__ __forceinline__ void moe_gemm_pipe(u16 *psm, float *C, const u16 *Ahi, const u16 *Alo, const int *tok,
					      const u16 *W, const int *tiles, const int *ntiles, const int *off, int M,
					      int N, int K) {
	int e, r0, r1;
	if (!moe_tile(tiles, ntiles, off, M, MOE_BM, e, r0, r1)) {
		return;
	}
	const u16 *We = W + (i64)e * N * K;
	const int n0 = blockIdx.x * MOE_PBN;
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int wm = (warp & 1) * 32, wn = (warp >> 1) * 64;
	const int g = lane >> 2, q = lane & 3;
	// Stage s: A part p row r at psm + s * stage + (p * MOE_BM + r) * MOE_PLD,
	// W row n at psm + s * stage + (2 * MOE_BM + n) * MOE_PLD.
	constexpr int stage = (2 * MOE_BM + MOE_PBN) * MOE_PLD;
	// Loader roles: 16-byte chunk c = tid & 3 of A row tid >> 2 (both
	// parts) and of W rows tid >> 2 + 64 i, i < 4.
	const int lrow = tid >> 2, lc = (tid & 3) * 8;
	const int ar = r0 + lrow;
	const bool aok = ar < r1;
	const i64 aoff = aok ? (i64)(tok ? tok[ar] : ar) * K : 0;
	i64 woff[MOE_PBN / 64];
	bool wok[MOE_PBN / 64];
#pragma unroll
	for (int i = 0; i < MOE_PBN / 64; i++) {
		const int n = n0 + lrow + 64 * i;
		wok[i] = n < N;
		woff[i] = wok[i] ? (i64)n * K : 0;
	}
	const int nk = (K + MOE_PBK - 1) / MOE_PBK;
	// load issues stage kt's copies into buffer kt % MOE_PST (zeros past
	// the rows, columns and K).
	auto load = [&](int kt) {
		u16 *s = psm + (kt % MOE_PST) * stage;
		const int k = kt * MOE_PBK + lc;
		const bool kin = k < K;
		const int ab = aok && kin ? 16 : 0;
		cp_async16(s + lrow * MOE_PLD + lc, Ahi + (ab ? aoff + k : 0), ab);
		if (P == 2) {
			cp_async16(s + (MOE_BM + lrow) * MOE_PLD + lc, Alo + (ab ? aoff + k : 0), ab);
		}
#pragma unroll
		for (int i = 0; i < MOE_PBN / 64; i++) {
			const int wb = wok[i] && kin ? 16 : 0;
			cp_async16(s + (2 * MOE_BM + lrow + 64 * i) * MOE_PLD + lc, We + (wb ? woff[i] + k : 0), wb);
		}
	};
	float acc[2][8][4];
#pragma unroll
	for (int m = 0; m < 2; m++) {
#pragma unroll
		for (int j = 0; j < 8; j++) {
#pragma unroll
			for (int i = 0; i < 4; i++) {
				acc[m][j][i] = 0.0f;
			}
		}
	}
#pragma unroll
	for (int s = 0; s < MOE_PST - 1; s++) {
		if (s < nk) {
			load(s);
		}
		cp_async_commit();
	}
	for (int kt = 0; kt < nk; kt++) {
		cp_async_wait1(); // stage kt has landed (MOE_PST - 2 groups may still be in flight)
		__syncthreads();  // ... for every thread, and stage kt - 1's buffer is free
		if (kt + MOE_PST - 1 < nk) {
			load(kt + MOE_PST - 1);
		}
		cp_async_commit();
		const u16 *s = psm + (kt % MOE_PST) * stage;
#pragma unroll
		for (int kk = 0; kk < MOE_PBK; kk += 16) {
			u32 a[P][2][4]; // [part: 0 hi, 1 lo][m]
#pragma unroll
			for (int p = 0; p < P; p++) {
#pragma unroll
				for (int m = 0; m < 2; m++) {
					ldsm_x4(s + (p * MOE_BM + wm + 16 * m + (lane & 15)) * MOE_PLD + kk + 8 * (lane >> 4),
						a[p][m][0], a[p][m][1], a[p][m][2], a[p][m][3]);
				}
			}
#pragma unroll
			for (int jp = 0; jp < 4; jp++) {
				// Matrices (n tile 2jp, k 0..7), (2jp, 8..15), (2jp+1, 0..7), (2jp+1, 8..15).
				u32 b[2][2];
				ldsm_x4(s + (2 * MOE_BM + wn + 16 * jp + 8 * (lane >> 4) + (lane & 7)) * MOE_PLD + kk +
						8 * ((lane >> 3) & 1),
					b[0][0], b[0][1], b[1][0], b[1][1]);
#pragma unroll
				for (int p = P - 1; p >= 0; p--) { // lo first, as k_moe_gemm_tc2
#pragma unroll
					for (int m = 0; m < 2; m++) {
#pragma unroll
						for (int jj = 0; jj < 2; jj++) {
							mma_bf16(acc[m][2 * jp + jj], a[p][m][0], a[p][m][1], a[p][m][2], a[p][m][3],
								 b[jj][0], b[jj][1]);
						}
					}
				}
			}
		}
	}
	cp_async_wait0();
#pragma unroll
	for (int m = 0; m < 2; m++) {
#pragma unroll
		for (int h = 0; h < 2; h++) {
			const int r = r0 + wm + 16 * m + g + 8 * h;
			if (r >= r1) {
				continue;
			}
			float *cr = C + (i64)r * N;
#pragma unroll
			for (int j = 0; j < 8; j++) {
				const int n = n0 + wn + 8 * j + 2 * q;
				if (n < N) { // N is even, so n + 1 < N too
					*(float2 *)(cr + n) = make_float2(acc[m][j][2 * h], acc[m][j][2 * h + 1]);
				}
			}
		}
	}
}

// k_moe_gemm_pipe is moe_gemm_pipe<2>, described above.
extern "C" __global__ __launch_bounds__(256, 2) void k_moe_gemm_pipe(float *C, const u16 *Ahi, const u16 *Alo,
								     const int *tok, const u16 *W, const int *tiles,
								     const int *ntiles, const int *off, int M, int N,
								     int K) {
	pdl_prologue();
	extern __shared__ __align__(16) u16 psm[];
	moe_gemm_pipe<2>(psm, C, Ahi, Alo, tok, W, tiles, ntiles, off, M, N, K);
}

// k_moe_gemm_pipe1 is k_moe_gemm_pipe on hi alone (P = 1; Alo unused).
extern "C" __global__ __launch_bounds__(256, 2) void k_moe_gemm_pipe1(float *C, const u16 *Ahi, const u16 *Alo,
								      const int *tok, const u16 *W, const int *tiles,
								      const int *ntiles, const int *off, int M, int N,
								      int K) {
	pdl_prologue();
	extern __shared__ __align__(16) u16 psm[];
	moe_gemm_pipe<1>(psm, C, Ahi, Alo, tok, W, tiles, ntiles, off, M, N, K);
}

// k_gemm_tc_strided is a strided batch of dense tensor-core GEMMs
// (gemm_tc_tile): for batch b = blockIdx.z, C_b[r, n] = Σ_k A_b[r, k]
// W_b[n, k] with A_b = A + b sa (rows lda apart), W_b = W + b sw (rows K
// apart) and C_b = C + b sc (rows ldc apart), r < M, n < N. Grid
// (ceil(N/MOE_TBN), ceil(M/64), batches), 256 threads. SparseMLA's output
// projection at prefill: one batch per head.
extern "C" __global__ __launch_bounds__(256) void k_gemm_tc_strided(float *C, i64 ldc, i64 sc, const float *A, i64 lda,
								    i64 sa, const u16 *W, i64 sw, int M, int N, int K,
								    int vec) {
	pdl_prologue();
	const i64 z = blockIdx.z;
	const int r0 = blockIdx.y * MOE_BM;
	gemm_tc_tile<3>(C + z * sc, ldc, A + z * sa, lda, 0, W + z * sw, N, K, r0, min(M, r0 + MOE_BM), blockIdx.x * MOE_TBN,
		     vec);
}

// k_gemm_tc_strided_t is k_gemm_tc_strided with W_b transposed: C_b[r,
// n] = Σ_k A_b[r, k] W_b[k, n], W_b = W + b sw a K x N matrix with rows
// ldw apart (vec: also ldw % 8 == 0). SparseMLA's absorbed query at
// prefill: q̃ = q_nope · W_UK per head.
extern "C" __global__ __launch_bounds__(256) void k_gemm_tc_strided_t(float *C, i64 ldc, i64 sc, const float *A,
								      i64 lda, i64 sa, const u16 *W, i64 sw, i64 ldw,
								      int M, int N, int K, int vec) {
	pdl_prologue();
	const i64 z = blockIdx.z;
	const int r0 = blockIdx.y * MOE_BM;
	gemm_tc_tile<3, true>(C + z * sc, ldc, A + z * sa, lda, 0, W + z * sw, N, K, r0, min(M, r0 + MOE_BM),
			      blockIdx.x * MOE_TBN, vec, ldw);
}

// decode8 widens 8 consecutive weights starting at element i (i % 8 == 0,
// 16-byte aligned halves or 8-byte aligned E4M3) into wf.
__device__ __forceinline__ void decode8(float *wf, const void *W, i64 i, int wdt, const u8 *scale, i64 srow, int k,
					int group) {
	if (wdt == DT_F8E4M3) {
		const uint2 q = *(const uint2 *)((const u8 *)W + i);
		const float s = e8m0_to_f32(scale[srow + k / group]);
#pragma unroll
		for (int h = 0; h < 4; h++) {
			wf[h] = e4m3_to_f32((u8)(q.x >> (8 * h))) * s;
			wf[4 + h] = e4m3_to_f32((u8)(q.y >> (8 * h))) * s;
		}
		return;
	}
	if (wdt == DT_F32) {
		const float4 a = *(const float4 *)((const float *)W + i), b = *((const float4 *)((const float *)W + i) + 1);
		wf[0] = a.x, wf[1] = a.y, wf[2] = a.z, wf[3] = a.w;
		wf[4] = b.x, wf[5] = b.y, wf[6] = b.z, wf[7] = b.w;
		return;
	}
	const uint4 q = *(const uint4 *)((const u16 *)W + i);
	const u32 words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
	for (int h = 0; h < 4; h++) {
		const u16 lo = (u16)(words[h] & 0xffffu), hi = (u16)(words[h] >> 16);
		wf[2 * h] = wdt == DT_BF16 ? bf16_to_f32(lo) : f16_to_f32(lo);
		wf[2 * h + 1] = wdt == DT_BF16 ? bf16_to_f32(hi) : f16_to_f32(hi);
	}
}

// k_moe_gemv_f: the small-row form of k_moe_gemm_f for decode, where the
// weights' bandwidth is the limit: one warp per output column n, up to
// MOE_SMALL_MT rows of a tile (moe_tile) per pass (so each weight is read
// once for up to that many rows). Grouped (tiles != 0): blockIdx.y is a
// tile of the routing, so no block waits on an expert without rows. vec (host-checked: K % 8 == 0, A and W
// aligned) loads 8 weights at a time.
extern "C" __global__ void k_moe_gemv_f(float *C, const float *A, const int *tok, const void *W, int wdt,
					const u8 *scale, int group, const int *tiles, const int *ntiles, const int *off,
					int M, int N, int K, int vec) {
	pdl_prologue();
	const int lane = threadIdx.x & 31;
	const int n = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	if (n >= N) {
		return;
	}
	int e, rb, re;
	if (!moe_tile(tiles, ntiles, off, M, MOE_BM, e, rb, re)) {
		return;
	}
	const int nb = group > 0 ? (K + group - 1) / group : 0;
	const i64 wrow = ((i64)e * N + n) * K;
	const i64 srow = ((i64)e * N + n) * nb;
	for (int m0 = rb; m0 < re; m0 += MOE_SMALL_MT) {
		const int mt = min(MOE_SMALL_MT, re - m0);
		const float *ar[MOE_SMALL_MT];
		float acc[MOE_SMALL_MT];
#pragma unroll
		for (int j = 0; j < MOE_SMALL_MT; j++) {
			acc[j] = 0.0f;
			const int r = m0 + min(j, mt - 1);
			ar[j] = A + (i64)(tok ? tok[r] : r) * K;
		}
		if (vec && (wdt == DT_BF16 || wdt == DT_F16)) {
			// The loads batched ahead of their use (dot16_lane): the
			// same sums as the decode8 loop below.
			dot16_lane<MOE_SMALL_MT>(acc, (const u16 *)W + wrow, K / 8, wdt, ar, mt, lane);
		} else if (vec) {
#pragma unroll 4
			for (int c = lane * 8; c < K; c += 256) {
				float wf[8];
				decode8(wf, W, wrow + c, wdt, scale, srow, c, group);
#pragma unroll
				for (int j = 0; j < MOE_SMALL_MT; j++) {
					if (j < mt) {
						acc[j] = fma4(fma4(acc[j], *(const float4 *)(ar[j] + c), wf), *(const float4 *)(ar[j] + c + 4), wf + 4);
					}
				}
			}
		} else {
			for (int c = lane; c < K; c += 32) {
				const float wf = ldw(W, wrow + c, wdt, scale, srow, c, group);
#pragma unroll
				for (int j = 0; j < MOE_SMALL_MT; j++) {
					if (j < mt) {
						acc[j] = fmaf(ar[j][c], wf, acc[j]);
					}
				}
			}
		}
#pragma unroll
		for (int j = 0; j < MOE_SMALL_MT; j++) {
			const float s = warp_sum(acc[j]);
			if (lane == 0 && j < mt) {
				C[(i64)(m0 + j) * N + n] = s;
			}
		}
	}
}

// k_moe_combine: grid (tokens of the chunk, column blocks of D): out[t]
// += sum over its k assignments, in ascending expert order (stable in j,
// as the CPU backend sums), of weights[t, j] * y[rows[t*k + j]]. An
// assignment without a row (an expert id out of range, already reported)
// adds nothing. The assignments' rows and weights are read once into
// shared memory, so a thread's k loads of y are independent (a decode
// step's one token spreads over D / blockDim.x blocks).
extern "C" __global__ void k_moe_combine(float *out, const float *y, const float *weights, const int *ids,
					 const int *rows, int k, int D) {
	pdl_prologue();
	__shared__ int srow[MOE_MAX_K];
	__shared__ float sw[MOE_MAX_K];
	const i64 t = blockIdx.x;
	if (threadIdx.x == 0) {
		int order[MOE_MAX_K];
		for (int j = 0; j < k; j++) {
			const int e = ids[t * k + j];
			int i = j;
			while (i > 0 && ids[t * k + order[i - 1]] > e) {
				order[i] = order[i - 1];
				i--;
			}
			order[i] = j;
		}
		for (int i = 0; i < k; i++) {
			srow[i] = rows[t * k + order[i]];
			sw[i] = weights[t * k + order[i]];
		}
	}
	__syncthreads();
	const int d = blockIdx.y * blockDim.x + threadIdx.x;
	if (d >= D) {
		return;
	}
	float acc = 0.0f;
#pragma unroll 8
	for (int i = 0; i < k; i++) {
		const int r = srow[i];
		if (r >= 0) {
			// Rounded product, then sum: the CPU loop's arithmetic.
			acc = __fadd_rn(acc, __fmul_rn(y[(i64)r * D + d], sw[i]));
		}
	}
	out[t * D + d] += acc;
}

#define GEMV_MT 8    // rows per pass of k_gemv_tc: the MMA's n8 (gemvMaxM in matmul.go)
#define GEMV_U 4     // 32-wide k blocks in flight per warp (gemvU in moe.go)
#define GEMV_MAXW 16 // warps per block at most (gemvMaxW in moe.go)

// ld_stream loads 16 weight bytes that are read once: not kept in L1, so
// the activation rows stay there.
__device__ __forceinline__ uint4 ld_stream(const u16 *p) {
	uint4 v;
	asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
	    : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
	    : "l"(p));
	return v;
}

// gemv_rows points lane (g, q) of gemv_tc at its two weight rows, n0 + g
// and n0 + g + 8 of expert e (rows past N read row N-1; their sums are not
// stored), 8q into the row.
__device__ __forceinline__ void gemv_rows(const u16 *W, int e, int N, int K, const u16 *&wa, const u16 *&wb) {
	const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
	const int n0 = blockIdx.x * 16;
	wa = W + ((i64)e * N + min(n0 + g, N - 1)) * K + 8 * q;
	wb = W + ((i64)e * N + min(n0 + g + 8, N - 1)) * K + 8 * q;
}

// gemv_wload loads lane q's 16 bytes of weight rows wa and wb at the
// 32-wide k block kb of gemv_tc (zeros past kbHi or K).
__device__ __forceinline__ void gemv_wload(uint4 &va, uint4 &vb, const u16 *wa, const u16 *wb, int kb, int kbHi, int K,
					   int q) {
	const i64 k = (i64)kb * 32;
	va = vb = make_uint4(0u, 0u, 0u, 0u);
	if (kb < kbHi && k + 8 * q < K) {
		va = ld_stream(wa + k);
		vb = ld_stream(wb + k);
	}
}

// gemv_krange is block z's range [kbLo, kbHi) of 32-wide k blocks: all of
// K unless the host split K over gridDim.z.
__device__ __forceinline__ void gemv_krange(int K, int &kbLo, int &kbHi) {
	const int nkb = (K + 31) / 32, ks = gridDim.z;
	const int kps = (nkb + ks - 1) / ks;
	kbLo = blockIdx.z * kps;
	kbHi = min(nkb, kbLo + kps);
}

// gemv_tc is k_gemv_tc (R = 1: passes of 8 rows) and k_gemv_tc16 (R =
// 2: passes of 16, the MMA's n8 twice): C[r, n] = sum_k A[a(r), k] *
// W_e[n, k] for the rows of a tile (moe_tile; a(r) = tok[r] when tok !=
// 0), in passes of 8R rows, so each weight is read once per pass at
// memory speed. A block is a 16-column tile of W and its blockDim.x/32
// warps split K (warp w takes the 32-wide k blocks w, w + warps, ...);
// their partial sums are added in warp order through shared memory (red:
// [GEMV_MAXW][128 R]), so a row's result depends only on N, K and the
// block shape: not on timing, on the number of rows or on R.
//
// Each warp step is two m16n8k16 MMAs per part (six in all) per 16
// columns x 32 k x 8 rows: lane (g, q) loads 8 consecutive weights of
// rows g and g+8 (16 bytes each) and the same 8 k of activation row g
// (and g+8), and hands them to the MMAs as their k positions {2q, 2q+1,
// 2q+8, 2q+9} (a permutation of k that weights and activations share, so
// the dot products are unchanged). The fp32 activations are split in
// three bf16 parts (split3x2) and the fp32 accumulation adds the smallest
// part first, the two MMAs of a k block in two accumulators added at the
// end (half the chain of dependent MMAs). Requires (host-checked) K % 8
// == 0, A and W 16-byte aligned.
template <int R>
__device__ __forceinline__ void gemv_tc(float *red, float *C, const float *A, const int *tok, const u16 *W,
					const int *tiles, const int *ntiles, const int *off, int M, int N, int K,
					float *part, int *cnt, int early) {
	constexpr int U = GEMV_U / R; // loads in flight per lane: the same registers for both R
	constexpr int MT = GEMV_MT * R;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, S = blockDim.x >> 5;
	const int g = lane >> 2, q = lane & 3;
	const int n0 = blockIdx.x * 16;
	const int na = n0 + g, nb = n0 + g + 8;
	// Split K (dense, one pass of at most MT rows, host-chosen): block z
	// takes k blocks [kbLo, kbHi) and stores its partial sums in part
	// [gridDim.z, M, N]; the last block of a column tile to finish adds
	// them in z order (below).
	const int ks = gridDim.z;
	int kbLo, kbHi;
	gemv_krange(K, kbLo, kbHi);
	// early (dense only, host-chosen for weights no kernel writes): the
	// first group's weight loads are issued before the wait on the
	// previous kernel, so they overlap its tail; nothing else is read
	// before the wait.
	const u16 *wa, *wb;
	gemv_rows(W, 0, N, K, wa, wb); // the dense rows (expert 0); a grouped launch's expert is known after the wait
	uint4 pa[U], pb[U];
	const bool pre = early && tiles == 0;
	if (pre) {
#pragma unroll
		for (int u = 0; u < U; u++) {
			gemv_wload(pa[u], pb[u], wa, wb, kbLo + warp + S * u, kbHi, K, q);
		}
	}
	pdl_prologue();
	int e, r0, r1;
	if (!moe_tile(tiles, ntiles, off, M, MOE_BM, e, r0, r1)) {
		return;
	}
	if (tiles != 0) {
		gemv_rows(W, e, N, K, wa, wb);
	}
	float *dst = ks > 1 ? part + (i64)blockIdx.z * M * N : C;
	for (int m0 = r0; m0 < r1; m0 += MT) {
		const int mt = min(MT, r1 - m0);
		const float *xr[R];
#pragma unroll
		for (int h = 0; h < R; h++) {
			const int m = 8 * h + g;
			xr[h] = m < mt ? A + (i64)(tok ? tok[m0 + m] : m0 + m) * K + 8 * q : A;
		}
		float acc[R][2][4];
#pragma unroll
		for (int h = 0; h < R; h++) {
#pragma unroll
			for (int i = 0; i < 4; i++) {
				acc[h][0][i] = acc[h][1][i] = 0.0f;
			}
		}
		for (int kb0 = kbLo + warp; kb0 < kbHi; kb0 += S * U) {
			uint4 va[U], vb[U];
			float4 x0[U][R], x1[U][R];
#pragma unroll
			for (int u = 0; u < U; u++) {
				const int kb = kb0 + S * u;
				const i64 k = (i64)kb * 32;
				const bool ok = kb < kbHi && k + 8 * q < K;
				if (pre && m0 == r0 && kb0 == kbLo + warp) { // the first group (one pass: dense rows fit it)
					va[u] = pa[u];
					vb[u] = pb[u];
				} else {
					gemv_wload(va[u], vb[u], wa, wb, kb, kbHi, K, q);
				}
#pragma unroll
				for (int h = 0; h < R; h++) {
					x0[u][h] = x1[u][h] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
					if (ok && 8 * h + g < mt) {
						x0[u][h] = *(const float4 *)(xr[h] + k);
						x1[u][h] = *(const float4 *)(xr[h] + k + 4);
					}
				}
			}
#pragma unroll
			for (int u = 0; u < U; u++) {
				if (kb0 + S * u >= kbHi) {
					break;
				}
#pragma unroll
				for (int h = 0; h < R; h++) {
					// Pairs of k: 8q+{0,1}, +{2,3} (first MMA), +{4,5}, +{6,7}.
					u32 p[3][4];
					split3x2(x0[u][h].x, x0[u][h].y, p[0][0], p[1][0], p[2][0]);
					split3x2(x0[u][h].z, x0[u][h].w, p[0][1], p[1][1], p[2][1]);
					split3x2(x1[u][h].x, x1[u][h].y, p[0][2], p[1][2], p[2][2]);
					split3x2(x1[u][h].z, x1[u][h].w, p[0][3], p[1][3], p[2][3]);
#pragma unroll
					for (int j = 2; j >= 0; j--) { // smallest part first
						mma_bf16(acc[h][0], va[u].x, vb[u].x, va[u].y, vb[u].y, p[j][0], p[j][1]);
						mma_bf16(acc[h][1], va[u].z, vb[u].z, va[u].w, vb[u].w, p[j][2], p[j][3]);
					}
				}
			}
		}
		// acc[h][0]: rows m = 8h + 2q, 8h + 2q + 1 x columns na, nb as c0
		// (2q, na), c1 (2q+1, na), c2 (2q, nb), c3 (2q+1, nb).
		if (S > 1) {
#pragma unroll
			for (int h = 0; h < R; h++) {
#pragma unroll
				for (int i = 0; i < 4; i++) {
					red[warp * 128 * R + 128 * h + 4 * lane + i] = acc[h][0][i] + acc[h][1][i];
				}
			}
			__syncthreads();
			for (int t = threadIdx.x; t < 128 * R; t += blockDim.x) {
				float s = red[t];
				for (int w = 1; w < S; w++) {
					s += red[w * 128 * R + t];
				}
				const int h = t >> 7, l = (t >> 2) & 31, i = t & 3;
				const int m = 8 * h + 2 * (l & 3) + (i & 1), n = n0 + (l >> 2) + 8 * (i >> 1);
				if (m < mt && n < N) {
					dst[(i64)(m0 + m) * N + n] = s;
				}
			}
			__syncthreads();
		} else {
#pragma unroll
			for (int h = 0; h < R; h++) {
#pragma unroll
				for (int i = 0; i < 4; i++) {
					const int m = 8 * h + 2 * q + (i & 1), n = (i >> 1) ? nb : na;
					if (m < mt && n < N) {
						dst[(i64)(m0 + m) * N + n] = acc[h][0][i] + acc[h][1][i];
					}
				}
			}
		}
	}
	if (ks > 1) {
		// The threadFenceReduction pattern: partials visible device-wide,
		// then one count per column tile; its last block sums them in z
		// order (so the result does not depend on which block was last)
		// and resets the count for the next launch.
		__shared__ int last;
		__threadfence();
		__syncthreads();
		if (threadIdx.x == 0) {
			last = atomicAdd(&cnt[blockIdx.x], 1) == ks - 1;
		}
		__syncthreads();
		if (last) {
			__threadfence();
			const int rows = r1 - r0;
			for (int t = threadIdx.x; t < rows * 16; t += blockDim.x) {
				const int m = r0 + (t >> 4), n = n0 + (t & 15);
				if (n < N) {
					float v = 0.0f;
					for (int z = 0; z < ks; z++) {
						v += __ldcg(part + ((i64)z * M + m) * N + n);
					}
					C[(i64)m * N + n] = v;
				}
			}
			if (threadIdx.x == 0) {
				cnt[blockIdx.x] = 0;
			}
		}
	}
}

// k_gemv_tc: gemv_tc in passes of 8 rows: the MoE decode GEMMs (grouped
// over the routing's tiles) and the dense MatMul (tiles == 0) up to 8
// rows.
extern "C" __global__ __launch_bounds__(512) void k_gemv_tc(float *C, const float *A, const int *tok, const u16 *W,
							    const int *tiles, const int *ntiles, const int *off, int M,
							    int N, int K, float *part, int *cnt, int early) {
	// pdl_prologue inside gemv_tc, after the early weight loads (they read no kernel's output).
	__shared__ float red[GEMV_MAXW * 128];
	gemv_tc<1>(red, C, A, tok, W, tiles, ntiles, off, M, N, K, part, cnt, early);
}

// k_gemv_tc16: gemv_tc in passes of 16 rows: the dense MatMul of 9 to 16
// rows, each weight read once.
extern "C" __global__ __launch_bounds__(512) void k_gemv_tc16(float *C, const float *A, const int *tok, const u16 *W,
							      const int *tiles, const int *ntiles, const int *off, int M,
							      int N, int K, float *part, int *cnt, int early) {
	// pdl_prologue inside gemv_tc, after the early weight loads (they read no kernel's output).
	__shared__ float red[GEMV_MAXW * 256];
	gemv_tc<2>(red, C, A, tok, W, tiles, ntiles, off, M, N, K, part, cnt, early);
}
