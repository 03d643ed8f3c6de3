// Depthwise causal conv1d (npu/cpu/conv1d.go). The output of a row needs
// only its W-1 predecessors (from x, or from the cached state before the
// sequence's first row), so every (row, channel) is computed at once;
// the state update runs afterwards, one thread per (sequence, channel).

#define CONV_MAX_W 16

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

// k_conv1d: x, out [T, C], w [C, W] (dtype wdt), state [slots, W-1, C].
extern "C" __global__ void k_conv1d(float *out, const float *x, const float *state, const void *w, int wdt,
				    const int *qs, const int *slots, int B, int T, int C, int W, int nslots, int silu,
				    int *err, int op) {
	pdl_prologue();
	const i64 total = (i64)T * C;
	const int H = W - 1;
	GRID_STRIDE(e, total) {
		const int t = (int)(e / C), c = (int)(e - (i64)t * C);
		const int b = seq_of(qs, B, t);
		const int slot = slots[b];
		if (slot < 0 || slot >= nslots) {
			report(err, ERR_SLOT, op, slot);
			continue;
		}
		const int t0 = qs[b];
		const float *st = state + (i64)slot * H * C;
		const i64 wo = (i64)c * W;
		float acc = ldf(w, wo + H, wdt) * x[e];
		for (int j = 0; j < H; j++) {
			const int u = t - H + j; // the input row w[c][j] multiplies
			const float v = u >= t0 ? x[(i64)u * C + c] : st[(i64)(H + (u - t0)) * C + c];
			acc += ldf(w, wo + j, wdt) * v;
		}
		out[e] = silu ? siluf_(acc) : acc;
	}
}

// k_conv1d_state: the state of each sequence becomes its last W-1 inputs
// (the old state followed by its rows).
extern "C" __global__ void k_conv1d_state(float *state, const float *x, const int *qs, const int *slots, int B, int C,
					  int W, int nslots) {
	pdl_prologue();
	const i64 total = (i64)B * C;
	const int H = W - 1;
	GRID_STRIDE(e, total) {
		const int b = (int)(e / C), c = (int)(e - (i64)b * C);
		const int slot = slots[b];
		if (slot < 0 || slot >= nslots) {
			continue; // reported by k_conv1d
		}
		const int t0 = qs[b], len = qs[b + 1] - t0;
		float *st = state + (i64)slot * H * C;
		float h[CONV_MAX_W];
#pragma unroll
		for (int j = 0; j < CONV_MAX_W - 1; j++) {
			if (j < H) {
				const int u = len + j; // index into old state ++ rows
				h[j] = u < H ? st[(i64)u * C + c] : x[(i64)(t0 + u - H) * C + c];
			}
		}
#pragma unroll
		for (int j = 0; j < CONV_MAX_W - 1; j++) {
			if (j < H) {
				st[(i64)j * C + c] = h[j];
			}
		}
	}
}

// k_conv1d_update: one new row per sequence (x, out [B, C]); the state
// shifts in place.
extern "C" __global__ void k_conv1d_update(float *out, const float *x, float *state, const void *w, int wdt,
					   const int *qs, const int *slots, int B, int C, int W, int nslots, int silu,
					   int *err, int op) {
	pdl_prologue();
	const i64 total = (i64)B * C;
	const int H = W - 1;
	GRID_STRIDE(e, total) {
		const int b = (int)(e / C), c = (int)(e - (i64)b * C);
		if (c == 0 && (qs[b] != b || (b == B - 1 && qs[B] != B))) {
			report(err, ERR_LAYOUT, op, b);
		}
		const int slot = slots[b];
		if (slot < 0 || slot >= nslots) {
			report(err, ERR_SLOT, op, slot);
			continue;
		}
		float *st = state + (i64)slot * H * C + c;
		const i64 wo = (i64)c * W;
		const float xc = x[e];
		float acc = ldf(w, wo + H, wdt) * xc;
		for (int j = 0; j < H; j++) {
			acc += ldf(w, wo + j, wdt) * st[(i64)j * C];
		}
		for (int j = 0; j + 1 < H; j++) {
			st[(i64)j * C] = st[(i64)(j + 1) * C];
		}
		if (H > 0) {
			st[(i64)(H - 1) * C] = xc;
		}
		out[e] = silu ? siluf_(acc) : acc;
	}
}
