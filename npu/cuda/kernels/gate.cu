// KDAGate (npu/cpu/kda.go): the KDA forget gate, elementwise.

// k_kda_gate: g[t, c] from f[t, c] (HK = H*K channels per row), dt_bias
// [HK] and a_log [H], both of dtype dt/adt. With a lower bound:
// lb * sigmoid(exp(a_log[h]) * (f + dt_bias)); otherwise
// -exp(a_log[h]) * softplus(f + dt_bias), softplus(x) = x above 20. The
// exponentials and softplus are formed in fp64 and rounded, as on the CPU.
extern "C" __global__ void k_kda_gate(float *g, const float *f, const void *dt_bias, int dt, const void *a_log, int adt,
				      i64 n, int HK, int K, int has_lb, float lb) {
	pdl_prologue();
	GRID_STRIDE(i, n) {
		const int c = (int)(i % HK);
		const float x = f[i] + ldf(dt_bias, c, dt);
		const float a = (float)exp((double)ldf(a_log, c / K, adt));
		if (has_lb) {
			g[i] = lb * sigmoidf_(a * x);
		} else {
			float sp = x;
			if (!(x > 20.0f)) {
				sp = (float)log1p(exp((double)x));
			}
			g[i] = -a * sp;
		}
	}
}
