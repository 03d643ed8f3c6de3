// TopK (npu/cpu/topk.go): per row, the k largest values, descending, ties
// to the lower index, NaN below every number. Each element becomes a
// 64-bit key ordered as the CPU backend ranks (value order, then lower
// index), so both kernels are exact.

// topk_key orders (v, i): a larger key ranks first. -0 ranks as +0.
__device__ __forceinline__ u64 topk_key(float v, int i) {
	u32 k = 0;
	if (v == v) {
		u32 u = v == 0.0f ? 0u : __float_as_uint(v);
		k = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
	}
	return ((u64)k << 32) | (u64)(0xffffffffu - (u32)i);
}

__device__ __forceinline__ int topk_index(u64 key) { return (int)(0xffffffffu - (u32)key); }

// k_topk_rounds: one block per row; round r picks the best key below the
// previous round's: k passes over the row, no scratch memory.
extern "C" __global__ void k_topk_rounds(float *vals, int *idx, const float *x, int n, int k) {
	pdl_prologue();
	const float *xr = x + (i64)blockIdx.x * n;
	u64 prev = ~0ull;
	for (int r = 0; r < k; r++) {
		u64 best = 0;
		for (int c = threadIdx.x; c < n; c += blockDim.x) {
			const u64 key = topk_key(xr[c], c);
			if (key < prev && key > best) {
				best = key;
			}
		}
		best = block_max_u64(best);
		if (threadIdx.x == 0) {
			const int j = topk_index(best);
			vals[(i64)blockIdx.x * k + r] = xr[j];
			idx[(i64)blockIdx.x * k + r] = j;
		}
		prev = best;
	}
}

// k_topk_sort: one block per row of n <= p elements (p a power of two, p
// keys of dynamic shared memory): a bitonic sort, descending.
extern "C" __global__ void k_topk_sort(float *vals, int *idx, const float *x, int n, int k, int p) {
	pdl_prologue();
	extern __shared__ u64 keys[];
	const float *xr = x + (i64)blockIdx.x * n;
	for (int i = threadIdx.x; i < p; i += blockDim.x) {
		keys[i] = i < n ? topk_key(xr[i], i) : 0ull;
	}
	__syncthreads();
	for (int size = 2; size <= p; size <<= 1) {
		for (int stride = size >> 1; stride > 0; stride >>= 1) {
			for (int t = threadIdx.x; t < p / 2; t += blockDim.x) {
				const int pos = 2 * t - (t & (stride - 1));
				const bool desc = (pos & size) == 0;
				const u64 a = keys[pos], b = keys[pos + stride];
				if ((a < b) == desc) {
					keys[pos] = b;
					keys[pos + stride] = a;
				}
			}
			__syncthreads();
		}
	}
	for (int i = threadIdx.x; i < k; i += blockDim.x) {
		const int j = topk_index(keys[i]);
		vals[(i64)blockIdx.x * k + i] = xr[j];
		idx[(i64)blockIdx.x * k + i] = j;
	}
}
