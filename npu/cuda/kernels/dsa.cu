// The DSA k-pool indexer (npu/cpu/dsa.go): KPool compresses complete
// pools of index keys; DSAIndex scores the pools visible to each query row
// (k_dsa_score) and selects the best (k_dsa_select), exactly in the CPU
// backend's rank order: score descending, ties to the lower pool, NaN last.

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

// dsa_row finds row t's sequence b and absolute position; false (after a
// report) when QueryStart does not put t in a sequence.
__device__ __forceinline__ bool dsa_row(const int *qs, const int *pos, int B, int t, int *b, int *p, int *err, int op) {
	*b = seq_of(qs, B, t);
	if (qs[*b] > t || qs[*b + 1] <= t || pos[*b] < 0) {
		if (threadIdx.x == 0) {
			report(err, ERR_ROWS, op, *b);
		}
		return false;
	}
	*p = pos[*b] + t - qs[*b];
	return true;
}

// k_kpool: out [P, d] = Σ_j softmax_j(gate + ape)[j] * key[j] per channel;
// keys, gates [P*kp, d] F32, ape [kp, d] (dtype adt). The logits are fp32
// sums, the softmax and the weighted sum fp64, as on the CPU.
extern "C" __global__ void k_kpool(float *out, const float *keys, const float *gates, const void *ape, int adt, i64 P,
				   int kp, int d) {
	pdl_prologue();
	GRID_STRIDE(e, P * d) {
		const i64 p = e / d;
		const int c = (int)(e - p * d);
		const i64 base = p * kp * d + c;
		double m = __longlong_as_double((i64)0xfff0000000000000ull); // -Inf
		for (int j = 0; j < kp; j++) {
			m = fmax(m, (double)(gates[base + (i64)j * d] + ldf(ape, (i64)j * d + c, adt)));
		}
		double sum = 0, acc = 0;
		for (int j = 0; j < kp; j++) {
			const double l = (double)(gates[base + (i64)j * d] + ldf(ape, (i64)j * d + c, adt));
			const double w = exp(l - m);
			sum += w;
			acc += w * (double)keys[base + (i64)j * d];
		}
		out[e] = (float)(acc / sum);
	}
}

#define DSA_PT 32 // pools per scoring block (one per lane)

// k_dsa_score: grid (rows, ceil(maxPools/32)) for rows t0.., 256 threads; dynamic shared
// memory (Hi*d + 32*(d+1) + Hi*33 + Hi) floats. scores [rows, maxPools] gets,
// for every pool i < vis of row t, Σ_h w[t,h] relu(scale q[t,h]·pooled[row
// of i]) (heads added in order, as the CPU does). A pool whose block is
// missing or outside the cache is reported and scores NaN.
extern "C" __global__ void k_dsa_score(float *scores, const float *q, const float *w, const void *pooled, int pdt,
				       const int *qs, const int *pos, const int *bt, int B, int t0, int Hi, int d, int kp,
				       int bs, int maxBlocks, int nslots, int maxPools, float scale, int *err, int op) {
	pdl_prologue();
	extern __shared__ float sh[];
	const int t = t0 + blockIdx.x;
	int b, p;
	if (!dsa_row(qs, pos, B, t, &b, &p, err, op)) {
		return;
	}
	int vis = (p + 1) / kp;
	if (vis > maxPools) {
		if (threadIdx.x == 0 && blockIdx.y == 0) {
			report(err, ERR_POSITION, op, p);
		}
		vis = maxPools;
	}
	const int p0 = blockIdx.y * DSA_PT;
	if (p0 >= vis) {
		return;
	}
	const int kd = d + 1;
	float *qsh = sh, *ksh = qsh + Hi * d, *rel = ksh + DSA_PT * kd, *wsh = rel + Hi * (DSA_PT + 1);
	__shared__ int bad[DSA_PT];
	const int nt = blockDim.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = nt >> 5;
	for (int i = tid; i < Hi * d; i += nt) {
		qsh[i] = q[(i64)t * Hi * d + i];
	}
	for (int i = tid; i < Hi; i += nt) {
		wsh[i] = w[(i64)t * Hi + i];
	}
	if (tid < DSA_PT) {
		bad[tid] = 0;
	}
	__syncthreads();
	const int per = bs / kp; // pools per block
	for (int e = tid; e < DSA_PT * d; e += nt) {
		const int j = e / d, c = e - j * d, i = p0 + j;
		float v = 0;
		if (i < vis) {
			const int blk = i / per;
			const int cb = blk < maxBlocks ? bt[(i64)b * maxBlocks + blk] : -1;
			const i64 row = (i64)cb * per + (i - blk * per);
			if (cb < 0 || row >= nslots) {
				bad[j] = 1;
			} else {
				v = ldf(pooled, row * d + c, pdt);
			}
		}
		ksh[j * kd + c] = v;
	}
	__syncthreads();
	for (int h = warp; h < Hi; h += nw) {
		const float *qh = qsh + h * d, *kj = ksh + lane * kd;
		float s = 0;
		for (int c = 0; c < d; c++) {
			s += qh[c] * kj[c];
		}
		float v = scale * s;
		if (v < 0) {
			v = 0;
		}
		rel[h * (DSA_PT + 1) + lane] = v;
	}
	__syncthreads();
	if (tid < DSA_PT && p0 + tid < vis) {
		float s = 0;
		for (int h = 0; h < Hi; h++) {
			s += wsh[h] * rel[h * (DSA_PT + 1) + tid];
		}
		if (bad[tid]) {
			report(err, ERR_POSITION, op, (p0 + tid) * kp);
			s = __uint_as_float(0x7fc00000u);
		}
		scores[(i64)blockIdx.x * maxPools + p0 + tid] = s;
	}
}

// dsa_key orders (score, pool): a larger key ranks first; -0 ranks as +0,
// NaN below every number.
__device__ __forceinline__ u64 dsa_key(float v, int i) {
	u32 k = 0;
	if (v == v) {
		u32 u = v == 0.0f ? 0u : __float_as_uint(v);
		k = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
	}
	return ((u64)k << 32) | (u64)(0xffffffffu - (u32)i);
}

__device__ __forceinline__ int dsa_index(u64 key) { return (int)(0xffffffffu - (u32)key); }

// dsa_sort sorts keys[0:n2) (n2 a power of two) descending.
__device__ __forceinline__ void dsa_sort(u64 *keys, int n2) {
	for (int size = 2; size <= n2; size <<= 1) {
		for (int stride = size >> 1; stride > 0; stride >>= 1) {
			for (int t = threadIdx.x; t < n2 / 2; t += blockDim.x) {
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
}

__device__ __forceinline__ int pow2_at_least(int n) {
	int p = 1;
	while (p < n) {
		p <<= 1;
	}
	return p;
}

// k_dsa_select: one block per row (t0..); dynamic shared memory of cap u64 keys
// (cap a power of two >= min(vis, sortMax) and >= min(topk, vis)). Rows
// of at most sortMax visible pools sort all their keys; longer rows find
// the k-th best key by an 8-bit radix select over the (distinct) keys,
// gather the k keys at or above it and sort those. out [T, width]: the
// selected pools' positions in rank order, the tail, then -1.
extern "C" __global__ void k_dsa_select(int *out, const float *scores, const int *qs, const int *pos, int B, int t0,
					int kp, int topk, int tail, int width, int maxPools, int sortMax, int *err, int op) {
	pdl_prologue();
	extern __shared__ u64 keys[];
	__shared__ int hist[256];
	__shared__ int sel[2];
	const int t = t0 + blockIdx.x, tid = threadIdx.x, nt = blockDim.x;
	int *row = out + (i64)t * width;
	int b, p;
	if (!dsa_row(qs, pos, B, t, &b, &p, err, op)) {
		return;
	}
	const int vis = min((p + 1) / kp, maxPools); // an overflow was reported by k_dsa_score
	const int k = min(topk, vis);
	const float *sc = scores + (i64)blockIdx.x * maxPools;
	if (k > 0 && vis <= sortMax) {
		const int n2 = pow2_at_least(vis);
		for (int i = tid; i < n2; i += nt) {
			keys[i] = i < vis ? dsa_key(sc[i], i) : 0ull;
		}
		__syncthreads();
		dsa_sort(keys, n2);
	} else if (k > 0) {
		u64 prefix = 0, mask = 0;
		int rem = k;
		for (int shift = 56; shift >= 0; shift -= 8) {
			for (int i = tid; i < 256; i += nt) {
				hist[i] = 0;
			}
			__syncthreads();
			for (int i = tid; i < vis; i += nt) {
				const u64 key = dsa_key(sc[i], i);
				if ((key & mask) == prefix) {
					atomicAdd(&hist[(int)((key >> shift) & 255)], 1);
				}
			}
			__syncthreads();
			if (tid == 0) {
				int acc = 0, dg = 255;
				for (; dg > 0; dg--) {
					if (acc + hist[dg] >= rem) {
						break;
					}
					acc += hist[dg];
				}
				sel[0] = dg;
				sel[1] = rem - acc;
			}
			__syncthreads();
			prefix |= (u64)sel[0] << shift;
			mask |= 255ull << shift;
			rem = sel[1];
			__syncthreads();
		}
		// prefix is the k-th best key: exactly k keys are >= it.
		const int n2 = pow2_at_least(k);
		if (tid == 0) {
			sel[0] = 0;
		}
		for (int i = tid; i < n2; i += nt) {
			keys[i] = 0ull;
		}
		__syncthreads();
		for (int i = tid; i < vis; i += nt) {
			const u64 key = dsa_key(sc[i], i);
			if (key >= prefix) {
				const int at = atomicAdd(&sel[0], 1);
				if (at < n2) {
					keys[at] = key;
				}
			}
		}
		__syncthreads();
		dsa_sort(keys, n2);
	}
	const int nsel = k * kp;
	const int ntail = tail ? (p + 1) - vis * kp : 0;
	for (int e = tid; e < width; e += nt) {
		int v = -1;
		if (e < nsel) {
			const int r = e / kp;
			v = dsa_index(keys[r]) * kp + (e - r * kp);
		} else if (e - nsel < ntail) {
			v = vis * kp + (e - nsel);
		}
		row[e] = v;
	}
}
