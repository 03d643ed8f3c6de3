// Sampling histograms (npu.SampleHistogrammer, npu/cpu/samplehist.go):
// per query j, row rows[j] of logits [R, V] (F32) at the parameters
// params[j] = (m, invT) as float64 bit patterns. sample_bin is npu.SampleBin
// bit for bit: every float64 operation is an explicitly rounded intrinsic
// (__dsub_rn, __dmul_rn, __dadd_rn are never contracted into a fused
// multiply-add, whatever NVRTC's --fmad), in the Go code's order, and the
// conversions truncate. Histogram sums are integer atomics, so they are
// exact in any order; bin members are compacted in id order by a
// block-wide scan.

#define HIST_PER_UNIT 32                          // npu.SampleBinsPerUnit
#define HIST_RANGE 104                            // npu.SampleHistRange
#define HIST_BINS (HIST_PER_UNIT * HIST_RANGE)    // npu.SampleHistBins
#define HIST_THREADS 256                          // sampleHistThreads in samplehist.go
#define HIST_CHUNK 4096                           // entries per block (sampleHistChunk)
#define MEM_THREADS 1024                          // sampleMembersThreads
#define MEM_WARPS (MEM_THREADS / 32)
#define MEM_ITEMS 8                               // entries per thread and tile
#define MEM_TILE (MEM_THREADS * MEM_ITEMS)
#define MEM_SLOTS (MEM_ITEMS * MEM_WARPS)         // warp counts of a tile
#define MEM_PER_LANE (MEM_SLOTS / 32)             // of them per lane of the scanning warp

static_assert(MEM_SLOTS % 32 == 0, "the scanning warp takes MEM_PER_LANE slots a lane");

// hist_params reads query j's (m, invT). m is rounded to float32 and widened
// again, as the CPU backend reads it (a float32 maximum passes unchanged).
__device__ __forceinline__ void hist_params(const i64 *params, int j, double *m, double *invT) {
	*m = (double)__double2float_rn(__longlong_as_double(params[2 * j]));
	*invT = __longlong_as_double(params[2 * j + 1]);
}

// sample_bin is npu.SampleBin: the bin of v (-1 outside every bin) and its
// fixed-point fraction q. The constants are Go's float64 values of -1/120,
// 1/24 and 1/6 (hex, so no compiler rounds a quotient its own way;
// TestSampleHistKernelConstants checks them against Go's).
__device__ __forceinline__ int sample_bin(float v, double m, double invT, u64 *q) {
	const double d = __dmul_rn(__dsub_rn(m, (double)v), invT);
	if (!(d >= 0.0 && d < (double)HIST_RANGE)) { // also NaN, +Inf, v above m
		*q = 0;
		return -1;
	}
	const double x = __dmul_rn(d, (double)HIST_PER_UNIT); // exact: a power of two
	const int b = __double2int_rz(x);
	const double r = __dmul_rn(__dsub_rn(x, (double)b), 0x1p-05); // * (1/32), exact
	double p = __dadd_rn(__dmul_rn(r, -0x1.1111111111111p-07), 0x1.5555555555555p-05); // r*(-1/120) + 1/24
	p = __dsub_rn(__dmul_rn(r, p), 0x1.5555555555555p-03);                              // r*p - 1/6
	p = __dadd_rn(__dmul_rn(r, p), 0.5);
	p = __dsub_rn(__dmul_rn(r, p), 1.0);
	p = __dadd_rn(__dmul_rn(r, p), 1.0);
	*q = __double2ull_rz(__dmul_rn(p, 17179869184.0)); // p * 2^34, exact; truncated
	return b;
}

// k_sample_hist: block (j, chunk) adds SampleBin's q of entries
// [chunk*HIST_CHUNK, ...) of row rows[j] into a shared histogram, then its
// nonzero bins into hist [Q, HIST_BINS] (zeroed before the launch). A row
// outside [0, R) is reported and adds nothing. Static shared memory: the
// histogram, HIST_BINS*8 bytes.
extern "C" __global__ __launch_bounds__(HIST_THREADS) void k_sample_hist(u64 *hist, const float *logits, const int *rows, const i64 *params,
									 int R, int V, int *err, int op) {
	pdl_prologue();
	__shared__ u64 sh[HIST_BINS];
	const int j = blockIdx.x;
	const int row = rows[j];
	if (row < 0 || row >= R) {
		if (blockIdx.y == 0 && threadIdx.x == 0) {
			report(err, ERR_INDEX, op, row);
		}
		return;
	}
	for (int i = threadIdx.x; i < HIST_BINS; i += blockDim.x) {
		sh[i] = 0;
	}
	__syncthreads();
	double m, invT;
	hist_params(params, j, &m, &invT);
	const float *x = logits + (i64)row * V;
	const int lo = blockIdx.y * HIST_CHUNK, hi = min(V, lo + HIST_CHUNK);
	for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) {
		u64 q;
		const int b = sample_bin(x[i], m, invT, &q);
		if (b >= 0) {
			atomicAdd(&sh[b], q);
		}
	}
	__syncthreads();
	u64 *h = hist + (i64)j * HIST_BINS;
	for (int i = threadIdx.x; i < HIST_BINS; i += blockDim.x) {
		const u64 s = sh[i];
		if (s != 0) {
			atomicAdd(&h[i], s);
		}
	}
}

__device__ __forceinline__ int warp_sum_i32(int v) {
	for (int o = 16; o > 0; o >>= 1) {
		v += __shfl_xor_sync(0xffffffffu, v, o);
	}
	return v;
}

// k_sample_bin_members: block j walks row rows[j] in tiles of MEM_TILE
// entries. Entry t0 + k*MEM_THREADS + threadIdx.x is thread threadIdx.x's
// k-th of the tile, so (k, warp, lane) orders a tile's entries by id: each
// warp's ballot of members is counted per (k, warp) slot, one warp scans
// the slots, and a member goes to position base + slot offset + members
// on lower lanes (written when below C). base carries the members of
// earlier tiles. counts [Q, 2] get the member count and the entries in
// lower bins; a bin outside [0, HIST_BINS) counts nothing and a row
// outside [0, R) is reported, both with zero counts.
extern "C" __global__ __launch_bounds__(MEM_THREADS) void k_sample_bin_members(float *vals, int *ids, int *counts, const float *logits,
									       const int *rows, const i64 *params, const int *bins, int R,
									       int V, int C, int *err, int op) {
	pdl_prologue();
	__shared__ int cnt[MEM_SLOTS];
	__shared__ int off[MEM_SLOTS];
	__shared__ int total;
	__shared__ int below_w[MEM_WARPS];
	const int j = blockIdx.x, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	const int row = rows[j], want = bins[j];
	if (row < 0 || row >= R || want < 0 || want >= HIST_BINS) {
		if (threadIdx.x == 0) {
			if (row < 0 || row >= R) {
				report(err, ERR_INDEX, op, row);
			}
			counts[2 * j] = 0;
			counts[2 * j + 1] = 0;
		}
		return;
	}
	double m, invT;
	hist_params(params, j, &m, &invT);
	const float *x = logits + (i64)row * V;
	float *vj = vals + (i64)j * C;
	int *ij = ids + (i64)j * C;
	const u32 lower = (1u << lane) - 1u;
	int base = 0, below = 0;
	for (int t0 = 0; t0 < V; t0 += MEM_TILE) {
		u32 bal[MEM_ITEMS];
		float v[MEM_ITEMS];
#pragma unroll
		for (int k = 0; k < MEM_ITEMS; k++) {
			const int i = t0 + k * MEM_THREADS + threadIdx.x;
			int b = -1;
			v[k] = 0.0f;
			if (i < V) {
				u64 q;
				v[k] = x[i];
				b = sample_bin(v[k], m, invT, &q);
			}
			below += b >= 0 && b < want;
			bal[k] = __ballot_sync(0xffffffffu, b == want);
			if (lane == 0) {
				cnt[k * MEM_WARPS + w] = __popc(bal[k]);
			}
		}
		__syncthreads();
		// Exclusive scan of the slots in (k, warp) order. off and total
		// are rewritten only after the next tile's first barrier, which
		// every thread reaches after reading them.
		if (w == 0) {
			int s[MEM_PER_LANE], sum = 0;
#pragma unroll
			for (int e = 0; e < MEM_PER_LANE; e++) {
				s[e] = cnt[lane * MEM_PER_LANE + e];
				sum += s[e];
			}
			int incl = sum;
			for (int o = 1; o < 32; o <<= 1) {
				const int y = __shfl_up_sync(0xffffffffu, incl, o);
				if (lane >= o) {
					incl += y;
				}
			}
			int run = incl - sum;
#pragma unroll
			for (int e = 0; e < MEM_PER_LANE; e++) {
				off[lane * MEM_PER_LANE + e] = run;
				run += s[e];
			}
			if (lane == 31) {
				total = incl;
			}
		}
		__syncthreads();
#pragma unroll
		for (int k = 0; k < MEM_ITEMS; k++) {
			if ((bal[k] >> lane) & 1u) {
				const int pos = base + off[k * MEM_WARPS + w] + __popc(bal[k] & lower);
				if (pos < C) {
					vj[pos] = v[k];
					ij[pos] = t0 + k * MEM_THREADS + threadIdx.x;
				}
			}
		}
		base += total;
	}
	below = warp_sum_i32(below);
	if (lane == 0) {
		below_w[w] = below;
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		int s = 0;
		for (int i = 0; i < MEM_WARPS; i++) {
			s += below_w[i];
		}
		counts[2 * j] = base;
		counts[2 * j + 1] = s;
	}
}
