// Copy conversions and the elementwise ops (npu/cpu/copy.go,
// npu/cpu/elementwise.go). fp32 arithmetic; 16-bit operands are widened.

// k_convert converts n elements of src (dtype sdt) into dst (dtype ddt);
// equal dtypes are copied by the driver instead.
extern "C" __global__ void k_convert(void *dst, int ddt, const void *src, int sdt, i64 n) {
	pdl_prologue();
	GRID_STRIDE(i, n) { stf(dst, i, ddt, ldf(src, i, sdt)); }
}

// k_fill16 sets n 16-bit elements to h.
extern "C" __global__ void k_fill16(u16 *dst, u16 h, i64 n) {
	pdl_prologue();
	GRID_STRIDE(i, n) { dst[i] = h; }
}

// k_binary computes o = a op b (op 0: add, 1: mul) with b of bn elements
// (n, or one row broadcast over a's rows) and dtype bdt.
extern "C" __global__ void k_binary(float *o, const float *a, const void *b, int bdt, i64 n, i64 bn, int op) {
	pdl_prologue();
	GRID_STRIDE(i, n) {
		const i64 j = bn == n ? i : i % bn;
		const float bv = ldf(b, j, bdt);
		o[i] = op == 0 ? a[i] + bv : a[i] * bv;
	}
}

extern "C" __global__ void k_scale(float *o, const float *x, float s, i64 n) {
	pdl_prologue();
	GRID_STRIDE(i, n) { o[i] = s * x[i]; }
}

extern "C" __global__ void k_sigmoid(float *o, const float *x, i64 n) {
	pdl_prologue();
	GRID_STRIDE(i, n) { o[i] = sigmoidf_(x[i]); }
}

extern "C" __global__ void k_silu(float *o, const float *x, i64 n) {
	pdl_prologue();
	GRID_STRIDE(i, n) { o[i] = siluf_(x[i]); }
}

// swiglu_at is element i of k_swiglu's output.
__device__ __forceinline__ float swiglu_at(const float *gu, i64 i, int inter, float limit, int clamp) {
	const i64 r = i / inter;
	const int c = (int)(i - r * inter);
	float g = gu[r * 2 * inter + c];
	float u = gu[r * 2 * inter + inter + c];
	if (clamp) {
		g = g != g ? g : fminf(g, limit);
		u = u != u ? u : fmaxf(fminf(u, limit), -limit);
	}
	return siluf_(g) * u;
}

// k_swiglu: gu [rows, 2*inter] (gate columns first) into o [rows, inter]:
// silu(min(gate, limit)) * clamp(up, -limit, limit) when clamp is set,
// else silu(gate) * up. NaN propagates through min and max as in Go.
extern "C" __global__ void k_swiglu(float *o, const float *gu, i64 rows, int inter, float limit, int clamp) {
	pdl_prologue();
	const i64 n = rows * inter;
	GRID_STRIDE(i, n) {
		o[i] = swiglu_at(gu, i, inter, limit, clamp);
	}
}

// k_swiglu_split is k_swiglu writing each result v split as hi + lo
// (split_bf16) into hi and lo [rows, inter]: the input of
// k_moe_gemm_pipe; with lo NULL, hi alone (bf16(v), k_moe_gemm_pipe1's).
extern "C" __global__ void k_swiglu_split(u16 *hi, u16 *lo, const float *gu, i64 rows, int inter, float limit,
					  int clamp) {
	pdl_prologue();
	const i64 n = rows * inter;
	GRID_STRIDE(i, n) {
		u16 h, l;
		split_bf16(swiglu_at(gu, i, inter, limit, clamp), h, l);
		hi[i] = h;
		if (lo != NULL) {
			lo[i] = l;
		}
	}
}

// k_softmax: one block per row of d elements. A row whose maximum is -Inf
// comes out as zeros; a NaN anywhere in the row gives NaNs. o may alias x.
extern "C" __global__ void k_softmax(float *o, const float *x, int d) {
	pdl_prologue();
	const float *xr = x + (i64)blockIdx.x * d;
	float *orow = o + (i64)blockIdx.x * d;
	float m = neg_inf();
	for (int c = threadIdx.x; c < d; c += blockDim.x) {
		m = nanmax(m, xr[c]);
	}
	m = block_nanmax(m);
	if (m == neg_inf()) {
		for (int c = threadIdx.x; c < d; c += blockDim.x) {
			orow[c] = 0.0f;
		}
		return;
	}
	double s = 0;
	for (int c = threadIdx.x; c < d; c += blockDim.x) {
		const float e = expf(xr[c] - m);
		orow[c] = e;
		s += (double)e;
	}
	s = block_sum(s);
	const float inv = (float)(1.0 / s);
	for (int c = threadIdx.x; c < d; c += blockDim.x) {
		orow[c] *= inv;
	}
}
