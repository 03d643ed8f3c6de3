// Normalisations (npu/cpu/norm.go): one block per group of n elements.
// Sums of squares and means accumulate in fp64, and the scale factors are
// formed in the CPU backend's order of operations, so results agree with
// it to within the fp32 rounding of the products.

// k_rmsnorm: y = x * rsqrt(mean(x^2) + eps) * w (w NULL: unweighted).
// vec: x and o 16-byte aligned and n % 4 == 0 (float4 loads and stores).
extern "C" __global__ void k_rmsnorm(float *o, const float *x, const void *w, int wdt, int n, float eps, int vec) {
	pdl_prologue();
	const i64 base = (i64)blockIdx.x * n;
	const double ss = block_sum(thread_sumsq(x + base, n, vec != 0));
	const float r = (float)(1.0 / sqrt((double)((float)(ss / n) + eps)));
	if (vec) {
		const float4 *x4 = (const float4 *)(x + base);
		float4 *o4 = (float4 *)(o + base);
		for (int c = threadIdx.x; c < n >> 2; c += blockDim.x) {
			const float4 v = x4[c];
			float y[4] = {v.x * r, v.y * r, v.z * r, v.w * r};
			if (w != 0) {
#pragma unroll
				for (int u = 0; u < 4; u++) {
					y[u] = y[u] * ldf(w, 4 * c + u, wdt);
				}
			}
			o4[c] = make_float4(y[0], y[1], y[2], y[3]);
		}
		return;
	}
	for (int c = threadIdx.x; c < n; c += blockDim.x) {
		float y = x[base + c] * r;
		if (w != 0) {
			y = y * ldf(w, c, wdt);
		}
		o[base + c] = y;
	}
}

// k_rmsnorm_gated: RMSNorm times sigmoid(gate).
extern "C" __global__ void k_rmsnorm_gated(float *o, const float *x, const float *gate, const void *w, int wdt, int n,
					   float eps) {
	pdl_prologue();
	const i64 base = (i64)blockIdx.x * n;
	double ss = 0;
	for (int c = threadIdx.x; c < n; c += blockDim.x) {
		const double v = x[base + c];
		ss += v * v;
	}
	ss = block_sum(ss);
	const float r = (float)(1.0 / sqrt((double)((float)(ss / n) + eps)));
	for (int c = threadIdx.x; c < n; c += blockDim.x) {
		o[base + c] = x[base + c] * r * ldf(w, c, wdt) * sigmoidf_(gate[base + c]);
	}
}

// k_layernorm: y = (x - mean) * rsqrt(var + eps) * w + b (b NULL: none;
// var is the biased variance).
extern "C" __global__ void k_layernorm(float *o, const float *x, const void *w, int wdt, const void *b, int bdt, int n,
				       float eps) {
	pdl_prologue();
	const i64 base = (i64)blockIdx.x * n;
	double s = 0;
	for (int c = threadIdx.x; c < n; c += blockDim.x) {
		s += (double)x[base + c];
	}
	const double mean = block_sum(s) / n;
	double ss = 0;
	for (int c = threadIdx.x; c < n; c += blockDim.x) {
		const double d = (double)x[base + c] - mean;
		ss += d * d;
	}
	ss = block_sum(ss);
	const float m = (float)mean;
	const float r = (float)(1.0 / sqrt((double)((float)(ss / n) + eps)));
	for (int c = threadIdx.x; c < n; c += blockDim.x) {
		float y = (x[base + c] - m) * r * ldf(w, c, wdt);
		if (b != 0) {
			y += ldf(b, c, bdt);
		}
		o[base + c] = y;
	}
}

// k_l2norm: y = x / sqrt(sum(x^2) + eps).
extern "C" __global__ void k_l2norm(float *o, const float *x, int n, float eps) {
	pdl_prologue();
	const i64 base = (i64)blockIdx.x * n;
	double ss = 0;
	for (int c = threadIdx.x; c < n; c += blockDim.x) {
		const double v = x[base + c];
		ss += v * v;
	}
	ss = block_sum(ss);
	const float r = (float)(1.0 / sqrt((double)(float)ss + (double)eps));
	for (int c = threadIdx.x; c < n; c += blockDim.x) {
		o[base + c] = x[base + c] * r;
	}
}
