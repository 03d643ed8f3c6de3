// kda_check: k_kda_w (warp sums) against k_kda (block sums, verified on
// the H200) on the emulator: outputs and final states to fp32 summation
// order, and k_kda_w's bits the same whatever order its threads run in.
#include "check.h"
namespace cur {
#include "kda.cu.simt"
}

struct Case {
	int H, K;
	std::vector<int> rows;
};

// run launches kernel w (0 k_kda, 1 k_kda_w) on copies of the inputs,
// as kda.go does, returning out and state.
static void run(int w, const Case &c, const std::vector<float> &qkv, const std::vector<float> &g,
		const std::vector<float> &beta, std::vector<float> &out, std::vector<float> &state) {
	const int H = c.H, K = c.K, V = K, B = (int)c.rows.size();
	std::vector<int> qs(B + 1, 0), slots(B);
	for (int b = 0; b < B; b++) {
		qs[b + 1] = qs[b] + c.rows[b];
		slots[b] = (b * 3 + 1) % (B + 2);
	}
	const int T = qs[B], nslots = B + 2;
	int err[3] = {0, 0, 0};
	const float scale = 1.0f / sqrtf((float)K);
	const int tok = std::max(1, std::min(8, (36 << 10) / (3 * 4 * K)));
	out.assign((size_t)T * H * V, 0.0f);
	float *po = out.data(), *ps = state.data();
	const float *pq = qkv.data(), *pg = g.data(), *pb = beta.data();
	const int *pqs = qs.data(), *psl = slots.data();
	if (w == 0) {
		simt::launch(dim3(B * H, (V + 31) / 32), dim3(32, (K + 31) / 32), 3 * 4 * K * tok, [&] {
			cur::k_kda(po, pq, pg, pb, ps, pqs, psl, B, T, H, K, V, nslots, scale, tok, err, 7);
		});
	} else {
		simt::launch(dim3(B * H, (V + 31) / 32), dim3(256), 0, [&] {
			cur::k_kda_w(po, pq, pg, pb, ps, pqs, psl, B, T, H, K, V, nslots, scale, tok, err, 7);
		});
	}
	if (err[0] != 0) {
		printf("  kernel %d reported error %d (op %d, value %d)\n", w, err[0], err[1], err[2]);
		chk::failures++;
	}
}

// reference is the recurrence in fp64 (npu/cpu/kda.go's, unchunked).
static void reference(const Case &c, const std::vector<float> &qkv, const std::vector<float> &g,
		      const std::vector<float> &beta, std::vector<float> &out, std::vector<float> &state) {
	const int H = c.H, K = c.K, V = K, B = (int)c.rows.size();
	const long HK = (long)H * K;
	int t0 = 0, T = 0;
	for (int r : c.rows) {
		T += r;
	}
	out.assign((size_t)T * H * V, 0.0f);
	for (int b = 0; b < B; b++) {
		const int slot = (b * 3 + 1) % (B + 2);
		for (int h = 0; h < H; h++) {
			float *S = state.data() + ((size_t)slot * H + h) * K * V;
			std::vector<double> s(S, S + K * V);
			for (int t = t0; t < t0 + c.rows[b]; t++) {
				const float *q = qkv.data() + (size_t)t * 3 * HK + h * K, *k = q + HK, *v = q + 2 * HK;
				double qq = 0, kk = 0;
				for (int d = 0; d < K; d++) {
					qq += (double)q[d] * q[d];
					kk += (double)k[d] * k[d];
				}
				const double iq = 1 / sqrt(qq + 1e-6) / sqrt((double)K), ik = 1 / sqrt(kk + 1e-6);
				const double bt = beta[(size_t)t * H + h];
				for (int x = 0; x < V; x++) {
					double mem = 0, o = 0;
					for (int d = 0; d < K; d++) {
						mem += k[d] * ik * exp((double)g[(size_t)t * HK + h * K + d]) * s[d * V + x];
					}
					const double delta = bt * (v[x] - mem);
					for (int d = 0; d < K; d++) {
						double &e = s[d * V + x];
						e = e * exp((double)g[(size_t)t * HK + h * K + d]) + k[d] * ik * delta;
						o += q[d] * iq * e;
					}
					out[((size_t)t * H + h) * V + x] = (float)o;
				}
			}
			for (int i = 0; i < K * V; i++) {
				S[i] = (float)s[i];
			}
		}
		t0 += c.rows[b];
	}
}

int main() {
	const Case cases[] = {
		{3, 33, {37, 1, 20, 0, 16}},
		{2, 16, {20, 17, 2}},
		{2, 128, {40, 3, 1}},
		{1, 40, {35}},
		{1, 64, {1, 1}},
	};
	for (const Case &c : cases) {
		const int H = c.H, K = c.K, B = (int)c.rows.size();
		int T = 0;
		for (int r : c.rows) {
			T += r;
		}
		printf("H=%d K=%d B=%d T=%d\n", H, K, B, T);
		const std::vector<float> qkv = chk::randf((size_t)T * 3 * H * K, 1 + K);
		std::vector<float> g = chk::randf((size_t)T * H * K, 2 + K, -0.6f, -0.01f); // log decays
		const std::vector<float> beta = chk::randf((size_t)T * H, 3 + K, 0.05f, 0.95f);
		const std::vector<float> s0 = chk::randf((size_t)(B + 2) * H * K * K, 4 + K, -0.3f, 0.3f);
		std::vector<float> outR, stR = s0, outW, stW = s0, outF, stF = s0;
		reference(c, qkv, g, beta, outF, stF);
		simt::order = 0;
		run(0, c, qkv, g, beta, outR, stR);
		chk::near("out k_kda vs fp64", outR, outF, 1e-5, 1e-5);
		chk::near("state k_kda vs fp64", stR, stF, 1e-5, 1e-5);
		run(1, c, qkv, g, beta, outW, stW);
		chk::near("out k_kda_w vs k_kda", outW, outR, 2e-5, 2e-5);
		chk::near("state k_kda_w vs k_kda", stW, stR, 2e-5, 2e-5);
		for (int o = 1; o <= 2; o++) {
			simt::order = o;
			std::vector<float> out2, st2 = s0;
			run(1, c, qkv, g, beta, out2, st2);
			chk::same(o == 1 ? "k_kda_w out, threads reversed" : "k_kda_w out, threads shuffled", out2, outW);
			chk::same("k_kda_w state, another thread order", st2, stW);
		}
	}
	if (chk::failures) {
		printf("%d failures\n", chk::failures);
		return 1;
	}
	return 0;
}
