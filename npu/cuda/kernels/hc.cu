// mHC ops (npu/cpu/hc.go). HCPre's projection runs as a MatMul first
// (hc.go); k_hc_pre finishes one token per block.

#define HC_MAX_STREAMS 16

// k_hc_pre: for token t with the projection m [T, mix] (mix = (2+n)n) of
// the raw streams x [T, n, D]: scale m by the streams' inverse RMS, form
// pre, post [T, n] and comb [T, n, n] (Sinkhorn, in the CPU backend's
// order of operations) and collapsed [T, D] = sum_i pre_i x_i.
extern "C" __global__ void k_hc_pre(float *collapsed, float *post, float *comb, const float *x, const float *m,
				    const void *base, int bdt, const void *scale, int sdt, int n, int D, int iters,
				    float eps, float rms_eps) {
	__shared__ float pre[HC_MAX_STREAMS];
	__shared__ float z[HC_MAX_STREAMS * HC_MAX_STREAMS];
	const int t = blockIdx.x;
	const int nD = n * D, mix = (2 + n) * n;
	const float *xt = x + (i64)t * nD;
	double ss = 0;
	for (int c = threadIdx.x; c < nD; c += blockDim.x) {
		const double v = xt[c];
		ss += v * v;
	}
	ss = block_sum(ss);
	if (threadIdx.x == 0) {
		const float r = (float)(1.0 / sqrt(ss / (double)nD + (double)rms_eps));
		const float *mt = m + (i64)t * mix;
		const float s0 = ldf(scale, 0, sdt), s1 = ldf(scale, 1, sdt), s2 = ldf(scale, 2, sdt);
		for (int i = 0; i < n; i++) {
			pre[i] = sigmoidf_((mt[i] * r) * s0 + ldf(base, i, bdt)) + eps;
			post[(i64)t * n + i] = 2.0f * sigmoidf_((mt[n + i] * r) * s1 + ldf(base, n + i, bdt));
		}
		for (int k = 0; k < n * n; k++) {
			z[k] = (mt[2 * n + k] * r) * s2 + ldf(base, 2 * n + k, bdt);
		}
		// Row softmax plus eps.
		for (int i = 0; i < n; i++) {
			float *row = z + i * n;
			float mx = row[0];
			for (int j = 1; j < n; j++) {
				mx = fmaxf(mx, row[j]);
			}
			float s = 0;
			for (int j = 0; j < n; j++) {
				const float e = expf(row[j] - mx);
				row[j] = e;
				s += e;
			}
			for (int j = 0; j < n; j++) {
				row[j] = row[j] / s + eps;
			}
		}
		for (int it = 0; it < iters; it++) {
			if (it > 0) { // row normalisation
				for (int i = 0; i < n; i++) {
					float s = 0;
					for (int j = 0; j < n; j++) {
						s += z[i * n + j];
					}
					s += eps;
					for (int j = 0; j < n; j++) {
						z[i * n + j] /= s;
					}
				}
			}
			for (int j = 0; j < n; j++) { // column normalisation
				float s = 0;
				for (int i = 0; i < n; i++) {
					s += z[i * n + j];
				}
				s += eps;
				for (int i = 0; i < n; i++) {
					z[i * n + j] /= s;
				}
			}
		}
		if (iters < 1) { // the CPU backend normalises the columns once regardless
			for (int j = 0; j < n; j++) {
				float s = 0;
				for (int i = 0; i < n; i++) {
					s += z[i * n + j];
				}
				s += eps;
				for (int i = 0; i < n; i++) {
					z[i * n + j] /= s;
				}
			}
		}
		for (int k = 0; k < n * n; k++) {
			comb[(i64)t * n * n + k] = z[k];
		}
	}
	__syncthreads();
	for (int d = threadIdx.x; d < D; d += blockDim.x) {
		float acc = pre[0] * xt[d];
		for (int i = 1; i < n; i++) {
			acc = fmaf(pre[i], xt[(i64)i * D + d], acc);
		}
		collapsed[(i64)t * D + d] = acc;
	}
}

// k_hc_post: out[t, j, d] = sum_i comb[t, i, j] x[t, i, d] + post[t, j] y[t, d].
extern "C" __global__ void k_hc_post(float *out, const float *y, const float *post, const float *comb, const float *x,
				     i64 T, int n, int D) {
	const i64 total = T * n * D;
	GRID_STRIDE(e, total) {
		const i64 t = e / ((i64)n * D);
		const int rem = (int)(e - t * n * D);
		const int j = rem / D, d = rem - j * D;
		const float *ct = comb + t * n * n;
		const float *xt = x + t * n * D;
		float acc = ct[j] * xt[d];
		for (int i = 1; i < n; i++) {
			acc = fmaf(ct[i * n + j], xt[(i64)i * D + d], acc);
		}
		out[e] = fmaf(post[t * n + j], y[t * D + d], acc);
	}
}

// k_hc_mean: out[t, d] = (sum_i x[t, i, d]) / n.
extern "C" __global__ void k_hc_mean(float *out, const float *x, i64 T, int n, int D) {
	const i64 total = T * D;
	GRID_STRIDE(e, total) {
		const i64 t = e / D;
		const int d = (int)(e - t * D);
		const float *xt = x + t * n * D;
		float s = xt[d];
		for (int i = 1; i < n; i++) {
			s += xt[(i64)i * D + d];
		}
		out[e] = s / (float)n;
	}
}
