// SampleReduce (npu/cpu/sampling.go): per row of logits, the k best
// entries in TopK's order and the NaN and +Inf counts. Every entry is a
// 64-bit key ordered as the CPU backend ranks (value, then lower id; NaN
// lowest), unique because it holds the id, so any split of a row selects
// exactly the row's top k. Values are never computed on: the final pass
// copies each winner from the logits by its id.
//
// Pass structure (sample.go): segments of up to SAMPLE_SEG keys per block
// keep their best kk keys; the survivors of a row form the next pass's
// input until one segment holds them all. Key 0 ranks below every real
// key and pads short segments.

#define SAMPLE_SEG 4096   // keys per segment (sampleSeg in sample.go)
#define SAMPLE_ROUNDS 16 // up to this many keys kept: selection rounds, else a sort

__device__ __forceinline__ u64 sample_key(float v, int i) {
	u32 k = 0;
	if (v == v) {
		u32 u = v == 0.0f ? 0u : __float_as_uint(v);
		k = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
	}
	return ((u64)k << 32) | (u64)(0xffffffffu - (u32)i);
}

__device__ __forceinline__ int sample_id(u64 key) { return (int)(0xffffffffu - (u32)key); }

// sample_emit writes the j-th kept key of segment (row, part).
__device__ __forceinline__ void sample_emit(u64 key, int j, int row, int part, int parts, int kk, u64 *out, float *vals,
					    int *ids, const float *logits, int V, int k) {
	if (vals) {
		const int id = sample_id(key);
		vals[(i64)row * k + j] = logits[(i64)row * V + id];
		ids[(i64)row * k + j] = id;
	} else {
		out[((i64)row * parts + part) * kk + j] = key;
	}
}

// k_sample_seg: block (part, row) takes keys [part*SAMPLE_SEG, ...) of its
// row of n: from the logits (keys == 0; also counting NaN and +Inf into
// stats [R, 2]) or from the previous pass's keys [R, n]. It keeps its kk
// best, into out [R, parts, kk] or, in the final pass (vals != 0, one
// part), as vals/ids [R, k] copied from logits [R, V]. sortn is the
// power of two >= the segment length that a sort uses. Dynamic shared
// memory: sortn keys.
extern "C" __global__ __launch_bounds__(512) void k_sample_seg(u64 *out, float *vals, int *ids, int *stats, const float *logits,
							       const u64 *keys, int V, int n, int kk, int k, int sortn) {
	pdl_prologue();
	extern __shared__ u64 sk[];
	__shared__ int cnt[2];
	const int part = blockIdx.x, row = blockIdx.y, parts = gridDim.x;
	const int lo = part * SAMPLE_SEG, len = min(SAMPLE_SEG, n - lo);
	if (threadIdx.x < 2) {
		cnt[threadIdx.x] = 0;
	}
	__syncthreads();
	int nan = 0, inf = 0;
	for (int i = threadIdx.x; i < sortn; i += blockDim.x) {
		u64 key = 0;
		if (i < len) {
			if (keys) {
				key = keys[(i64)row * n + lo + i];
			} else {
				const float v = logits[(i64)row * V + lo + i];
				nan += v != v;
				inf += v == __uint_as_float(0x7f800000u);
				key = sample_key(v, lo + i);
			}
		}
		sk[i] = key;
	}
	if (stats && (nan | inf)) {
		atomicAdd(&cnt[0], nan);
		atomicAdd(&cnt[1], inf);
	}
	__syncthreads();
	if (stats && threadIdx.x == 0 && (cnt[0] | cnt[1])) {
		atomicAdd(&stats[2 * row], cnt[0]);
		atomicAdd(&stats[2 * row + 1], cnt[1]);
	}
	if (kk == 0) {
		return;
	}
	if (kk <= SAMPLE_ROUNDS) {
		u64 prev = ~0ull;
		for (int j = 0; j < kk; j++) {
			u64 best = 0;
			for (int i = threadIdx.x; i < len; i += blockDim.x) {
				const u64 key = sk[i];
				best = (key < prev && key > best) ? key : best;
			}
			best = block_max_u64(best);
			if (threadIdx.x == 0) {
				sample_emit(best, j, row, part, parts, kk, out, vals, ids, logits, V, k);
			}
			prev = best;
		}
		return;
	}
	for (int size = 2; size <= sortn; size <<= 1) {
		for (int stride = size >> 1; stride > 0; stride >>= 1) {
			for (int t = threadIdx.x; t < sortn / 2; t += blockDim.x) {
				const int pos = 2 * t - (t & (stride - 1));
				const bool desc = (pos & size) == 0;
				const u64 a = sk[pos], b = sk[pos + stride];
				if ((a < b) == desc) {
					sk[pos] = b;
					sk[pos + stride] = a;
				}
			}
			__syncthreads();
		}
	}
	for (int j = threadIdx.x; j < kk; j += blockDim.x) {
		sample_emit(j < sortn ? sk[j] : 0ull, j, row, part, parts, kk, out, vals, ids, logits, V, k);
	}
}

// k_sample_keys fills keys [R, p] (p a power of two >= V) with the keys of
// logits [R, V], zero beyond V, counting NaN and +Inf into stats: the
// start of the whole-row sort for a k beyond what segments serve.
extern "C" __global__ void k_sample_keys(u64 *keys, int *stats, const float *logits, int R, int V, int p) {
	pdl_prologue();
	GRID_STRIDE(i, (i64)R * p) {
		const i64 r = i / p;
		const int c = (int)(i - r * p);
		u64 key = 0;
		if (c < V) {
			const float v = logits[r * V + c];
			if (v != v) {
				atomicAdd(&stats[2 * r], 1);
			} else if (v == __uint_as_float(0x7f800000u)) {
				atomicAdd(&stats[2 * r + 1], 1);
			}
			key = sample_key(v, c);
		}
		keys[i] = key;
	}
}

// k_bitonic_step is one (size, stride) step of a descending bitonic sort
// of each row of keys [R, p].
extern "C" __global__ void k_bitonic_step(u64 *keys, int R, int p, int size, int stride) {
	pdl_prologue();
	GRID_STRIDE(i, (i64)R * (p / 2)) {
		const i64 r = i / (p / 2);
		const int t = (int)(i - r * (p / 2));
		const int pos = 2 * t - (t & (stride - 1));
		const bool desc = (pos & size) == 0;
		u64 *kr = keys + r * p;
		const u64 a = kr[pos], b = kr[pos + stride];
		if ((a < b) == desc) {
			kr[pos] = b;
			kr[pos + stride] = a;
		}
	}
}

// k_sample_take writes the first k of each sorted row of keys [R, p] as
// vals/ids copied from logits [R, V].
extern "C" __global__ void k_sample_take(float *vals, int *ids, const u64 *keys, const float *logits, int R, int V, int p, int k) {
	pdl_prologue();
	GRID_STRIDE(i, (i64)R * k) {
		const i64 r = i / k;
		const int j = (int)(i - r * k);
		const int id = sample_id(keys[r * p + j]);
		vals[i] = logits[r * V + id];
		ids[i] = id;
	}
}
