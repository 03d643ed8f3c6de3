// Row gathers and scatters (npu/cpu/gather.go). Indices outside the table
// are reported (ERR_INDEX) and their rows skipped.

// k_gather: out[i] = src[idx[i]] for m rows of d elements, converting
// dtype sdt to odt (equal dtypes copy esize-byte elements).
extern "C" __global__ void k_gather(void *out, int odt, const void *src, int sdt, const int *idx, i64 m, i64 rows, i64 d,
				    int esize, int *err, int op) {
	pdl_prologue();
	for (i64 i = blockIdx.x; i < m; i += gridDim.x) {
		const int r = idx[i];
		if (r < 0 || r >= rows) {
			if (threadIdx.x == 0) {
				report(err, ERR_INDEX, op, r);
			}
			continue;
		}
		const i64 so = (i64)r * d, oo = i * d;
		if (odt == sdt) {
			for (i64 c = threadIdx.x; c < d; c += blockDim.x) {
				copy_elem(out, oo + c, src, so + c, esize);
			}
		} else {
			for (i64 c = threadIdx.x; c < d; c += blockDim.x) {
				stf(out, oo + c, odt, ldf(src, so + c, sdt));
			}
		}
	}
}

// k_scatter: dst[idx[i]] = src[i]. When an index repeats, the last row
// wins: a row is skipped when a later row has the same index.
extern "C" __global__ void k_scatter(void *dst, int ddt, const void *src, int sdt, const int *idx, i64 m, i64 rows, i64 d,
				     int esize, int *err, int op) {
	pdl_prologue();
	for (i64 i = blockIdx.x; i < m; i += gridDim.x) {
		const int r = idx[i];
		if (r < 0 || r >= rows) {
			if (threadIdx.x == 0) {
				report(err, ERR_INDEX, op, r);
			}
			continue;
		}
		int later = 0;
		for (i64 j = i + 1 + threadIdx.x; j < m && !later; j += blockDim.x) {
			later = idx[j] == r;
		}
		if (__syncthreads_or(later)) {
			continue;
		}
		const i64 dof = (i64)r * d, so = i * d;
		if (ddt == sdt) {
			for (i64 c = threadIdx.x; c < d; c += blockDim.x) {
				copy_elem(dst, dof + c, src, so + c, esize);
			}
		} else {
			for (i64 c = threadIdx.x; c < d; c += blockDim.x) {
				stf(dst, dof + c, ddt, ldf(src, so + c, sdt));
			}
		}
	}
}
