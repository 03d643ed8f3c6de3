// regress_check: the kernels that changed after 77c9df7 (the last commit
// whose kernels ran on the H200: docs/performance.md) against their
// 77c9df7 versions, on the emulator, bit for bit: refactors that promise
// the same arithmetic (the mHC kernels after the decode fusions were
// dropped, k_rmsnorm, the tensor-core GEMMs and split3x2/split2x2 on
// bf2_rest, gemm_tc_tile with its transposed form beside it, k_kda on
// shared helpers, k_swiglu, k_split_bf16). After the next GPU run the
// reference commit becomes that run's.
#include "check.h"
namespace now {
namespace hc {
#include "hc.cu.simt"
}
namespace norm {
#include "norm.cu.simt"
}
namespace moe {
#include "moe.cu.simt"
}
namespace kda {
#include "kda.cu.simt"
}
namespace ew {
#include "elementwise.cu.simt"
}
namespace mm {
#include "matmul.cu.simt"
}
} // namespace now
namespace was {
namespace hc {
#include "hc@77c9df7.cu.simt"
}
namespace norm {
#include "norm@77c9df7.cu.simt"
}
namespace moe {
#include "moe@77c9df7.cu.simt"
}
namespace kda {
#include "kda@77c9df7.cu.simt"
}
namespace ew {
#include "elementwise@77c9df7.cu.simt"
}
namespace mm {
#include "matmul@77c9df7.cu.simt"
}
} // namespace was

using F = std::vector<float>;
template <class T> static T *P(const std::vector<T> &v) { return const_cast<T *>(v.data()); }
static int vecThreads(int n, bool vec) {
	if (!vec) {
		return n <= 128 ? 32 : n <= 1024 ? 128 : n <= 4096 ? 256 : 512;
	}
	return std::min(std::max((n / 4 + 31) / 32 * 32, 32), 1024);
}

// Both versions of one launch on copies of the outputs: each gets fresh
// copies of outs, then the copies are compared (and the first output must
// have been written: a launch that does nothing would pass).
#define BOTH(what, outs, call)                                                                                         \
	do {                                                                                                           \
		auto o0 = outs, o1 = outs;                                                                             \
		{                                                                                                      \
			auto &o = o0;                                                                                  \
			using namespace now;                                                                           \
			call;                                                                                          \
		}                                                                                                      \
		{                                                                                                      \
			auto &o = o1;                                                                                  \
			using namespace was;                                                                           \
			call;                                                                                          \
		}                                                                                                      \
		for (size_t i = 0; i < o0.size(); i++) {                                                               \
			chk::same(what, o0[i], o1[i]);                                                                 \
		}                                                                                                      \
		chk::changed(what, o0[0], outs[0]);                                                                    \
	} while (0)

static void mhc() {
	const int n = 4, mix = (2 + n) * n, iters = 20;
	const F base = chk::randf(mix, 31, -0.5f, 0.5f), scale = chk::randf(3, 32, 0.5f, 1.5f);
	for (int D : {256, 2048}) {
		const int nD = n * D;
		for (int T : {3, 20}) {
			printf("mHC n=%d D=%d T=%d\n", n, D, T);
			const F x = chk::randf((size_t)T * nD, 33 + D + T), fn = chk::randf((size_t)mix * nD, 34 + D, -0.05f, 0.05f);
			const F m0 = chk::randf((size_t)T * mix, 35 + T, -2, 2);
			// outs: collapsed, post, comb, m (with ss behind it, doubles as floats)
			std::vector<F> outs = {F((size_t)T * D), F((size_t)T * n), F((size_t)T * n * n), F((size_t)T * mix + 2 * T + 2)};
			if (T <= 16) {
				// k_hc_proj then k_hc_pre on its sums of squares (S slices).
				const int S = std::min(std::max(D / 1024, 1), 8);
				const int th = std::max(vecThreads((D + S - 1) / S, true), (n * n + 31) / 32 * 32);
				BOTH("k_hc_proj + k_hc_pre", outs, {
					double *ss = (double *)(o[3].data() + ((T * mix + 1) & ~1));
					simt::launch(dim3(mix + 1, T), dim3(vecThreads(nD / 4, true)), 0,
						     [&] { hc::k_hc_proj(o[3].data(), P(x), P(fn), nD, mix, ss); });
					simt::launch(dim3(T, S), dim3(th), 0, [&] {
						hc::k_hc_pre(o[0].data(), o[1].data(), o[2].data(), P(x), o[3].data(), P(base), 0, P(scale),
							     0, n, D, iters, 1e-6f, 1e-6f, 1, ss);
					});
				});
				std::vector<unsigned> cnt(T, 0);
				{
					auto o0 = outs, o1 = outs;
					auto c0 = cnt, c1 = cnt;
					const int th2 = std::max(vecThreads(nD / 4, true), 64);
					double *s0 = (double *)(o0[3].data() + ((T * mix + 1) & ~1));
					double *s1 = (double *)(o1[3].data() + ((T * mix + 1) & ~1));
					simt::launch(dim3(mix + 1, T), dim3(th2), 0, [&] {
						now::hc::k_hc_fused(o0[0].data(), o0[1].data(), o0[2].data(), o0[3].data(), P(x), P(fn), P(base),
								    0, P(scale), 0, n, D, iters, 1e-6f, 1e-6f, s0, c0.data());
					});
					simt::launch(dim3(mix + 1, T), dim3(th2), 0, [&] {
						was::hc::k_hc_fused(o1[0].data(), o1[1].data(), o1[2].data(), o1[3].data(), P(x), P(fn), P(base),
								    0, P(scale), 0, n, D, iters, 1e-6f, 1e-6f, s1, c1.data(), nullptr, nullptr,
								    0, 0.0f);
					});
					for (int i = 0; i < 4; i++) {
						chk::same("k_hc_fused", o0[i], o1[i]);
					}
					chk::same("k_hc_fused counters", c0, c1);
				}
			} else {
				// The projection by MatMul (m given), k_hc_pre forms the sums.
				outs[3] = m0;
				const int th = std::max(vecThreads(nD, true), (n * n + 31) / 32 * 32);
				BOTH("k_hc_pre", outs, {
					simt::launch(dim3(T, 1), dim3(th), 0, [&] {
						hc::k_hc_pre(o[0].data(), o[1].data(), o[2].data(), P(x), o[3].data(), P(base), 0, P(scale),
							     0, n, D, iters, 1e-6f, 1e-6f, 1, nullptr);
					});
				});
			}
			const F y = chk::randf((size_t)T * D, 36 + T), post = chk::randf((size_t)T * n, 37), comb = chk::randf((size_t)T * n * n, 38);
			std::vector<F> po = {F((size_t)T * nD)}, pm = {F((size_t)T * D)};
			BOTH("k_hc_post", po, simt::launch(dim3(7), dim3(128), 0, [&] {
				     hc::k_hc_post(o[0].data(), P(y), P(post), P(comb), P(x), (long long)T, n, D);
			     }));
			BOTH("k_hc_mean", pm, simt::launch(dim3(5), dim3(128), 0, [&] {
				     hc::k_hc_mean(o[0].data(), P(x), (long long)T, n, D);
			     }));
		}
	}
}

static void rmsnorm() {
	for (int n : {256, 100, 4096}) {
		const int rows = 5;
		printf("k_rmsnorm n=%d\n", n);
		const F x = chk::randf((size_t)rows * n, 41 + n);
		const std::vector<uint16_t> w = chk::randbf(n, 42 + n, 0.5f, 1.5f);
		const bool vec = n % 4 == 0;
		for (int withW = 0; withW < 2; withW++) {
			std::vector<F> outs = {F((size_t)rows * n)};
			BOTH("k_rmsnorm", outs, simt::launch(dim3(rows), dim3(vecThreads(n, vec)), 0, [&] {
				     norm::k_rmsnorm(o[0].data(), P(x), withW ? (const void *)w.data() : nullptr, 1, n, 1e-6f, vec);
			     }));
		}
	}
}

static void gemms() {
	const int T = 30, k = 3, E = 5, K = 200, N = 136;
	printf("MoE GEMMs T=%d k=%d E=%d K=%d N=%d\n", T, k, E, K, N);
	std::vector<int> ids;
	for (int t = 0; t < T; t++) {
		for (int j = 0; j < k; j++) {
			ids.push_back(j == 0 ? 0 : 1 + (t * 5 + j) % (E - 2));
		}
	}
	const int n = (int)ids.size(), maxTiles = n / 64 + E + 1;
	std::vector<int> rows(n), tok(n), off(E + 1), tiles(2 * maxTiles, -1);
	int err[3] = {}, nt = 0;
	simt::launch(dim3(1), dim3(1024), 8 * E, [&] {
		now::moe::k_moe_route(rows.data(), tok.data(), off.data(), tiles.data(), &nt, ids.data(), n, k, E, 64, err, 1);
	});
	const F x = chk::randf((size_t)T * K, 51);
	const std::vector<uint16_t> W = chk::randbf((size_t)E * N * K, 52, -0.2f, 0.2f);
	for (int vec = 0; vec < 2; vec++) {
		std::vector<F> outs = {F((size_t)n * N, -7.0f)};
		BOTH("k_moe_gemm_tc", outs, simt::launch(dim3((N + 127) / 128, maxTiles), dim3(256), 0, [&] {
			     moe::k_moe_gemm_tc(o[0].data(), P(x), tok.data(), P(W), tiles.data(), &nt, off.data(), n, N, K, vec);
		     }));
		BOTH("k_moe_gemm_tc2", outs, simt::launch(dim3((N + 127) / 128, maxTiles), dim3(256), 0, [&] {
			     moe::k_moe_gemm_tc2(o[0].data(), P(x), tok.data(), P(W), tiles.data(), &nt, off.data(), n, N, K, vec);
		     }));
	}
	// k_gemm_tc_strided (SparseMLA's prefill output projection).
	{
		const int B = 2, M = 70, Ns = 136, Ks = 40;
		const F A = chk::randf((size_t)B * M * Ks, 53);
		const std::vector<uint16_t> Ws = chk::randbf((size_t)B * Ns * Ks, 54);
		std::vector<F> outs = {F((size_t)B * M * Ns, -7.0f)};
		BOTH("k_gemm_tc_strided", outs, simt::launch(dim3((Ns + 127) / 128, (M + 63) / 64, B), dim3(256), 0, [&] {
			     moe::k_gemm_tc_strided(o[0].data(), Ns, (long long)M * Ns, P(A), Ks, (long long)M * Ks, P(Ws),
						    (long long)Ns * Ks, M, Ns, Ks, 1);
		     }));
	}
	// k_gemv_tc: the MoE decode form (tiles) and the dense one (no
	// tiles), whole K and split over 2 slices.
	{
		const int Md = 6;
		std::vector<F> outs = {F((size_t)n * N, -7.0f)};
		BOTH("k_gemv_tc (MoE)", outs, simt::launch(dim3((N + 15) / 16, std::min(maxTiles, n)), dim3(128), 0, [&] {
			     moe::k_gemv_tc(o[0].data(), P(x), tok.data(), P(W), tiles.data(), &nt, off.data(), n, N, K, nullptr,
					    nullptr, 0);
		     }));
		for (int ks : {1, 2}) {
			std::vector<F> d = {F((size_t)Md * N, -7.0f), F((size_t)ks * Md * N)};
			std::vector<int> cnt(64, 0);
			BOTH("k_gemv_tc (dense)", d, simt::launch(dim3((N + 15) / 16, 1, ks), dim3(128), 0, [&] {
				     moe::k_gemv_tc(o[0].data(), P(x), nullptr, P(W), nullptr, nullptr, nullptr, Md, N, K,
						    ks > 1 ? o[1].data() : nullptr, ks > 1 ? cnt.data() : nullptr, 1);
			     }));
		}
	}
}

static void kda() {
	const int H = 2, K = 48, V = K, B = 3;
	const std::vector<int> qs = {0, 13, 14, 30}, slots = {2, 0, 4};
	const int T = qs[B];
	printf("k_kda H=%d K=%d T=%d\n", H, K, T);
	const F qkv = chk::randf((size_t)T * 3 * H * K, 61), g = chk::randf((size_t)T * H * K, 62, -0.6f, -0.01f);
	const F beta = chk::randf((size_t)T * H, 63, 0.05f, 0.95f);
	const int tok = std::max(1, std::min(8, (36 << 10) / (3 * 4 * K)));
	std::vector<F> outs = {F((size_t)T * H * V), chk::randf((size_t)5 * H * K * V, 64, -0.3f, 0.3f)};
	std::vector<int> err(3, 0);
	BOTH("k_kda", outs, simt::launch(dim3(B * H, (V + 31) / 32), dim3(32, (K + 31) / 32), 3 * 4 * K * tok, [&] {
		     kda::k_kda(o[0].data(), P(qkv), P(g), P(beta), o[1].data(), qs.data(), slots.data(), B, T, H, K, V, 5,
				0.125f, tok, err.data(), 7);
	     }));
}

static void elementwise() {
	const int rows = 7, I = 90;
	printf("k_swiglu, k_split_bf16\n");
	F gu = chk::randf((size_t)rows * 2 * I, 71, -3, 3);
	gu[5] = NAN;
	gu[2 * I + 3] = INFINITY;
	for (int clamp = 0; clamp < 2; clamp++) {
		std::vector<F> outs = {F((size_t)rows * I)};
		BOTH("k_swiglu", outs, simt::launch(dim3(2), dim3(128), 0, [&] {
			     ew::k_swiglu(o[0].data(), P(gu), (long long)rows, I, 2.5f, clamp);
		     }));
	}
	F x = chk::randf(1000, 72, -1e3f, 1e3f);
	x[1] = NAN, x[2] = INFINITY, x[3] = -INFINITY, x[4] = 3.4e38f, x[5] = 1e-40f;
	std::vector<std::vector<uint16_t>> outs = {std::vector<uint16_t>(1000), std::vector<uint16_t>(1000)};
	BOTH("k_split_bf16", outs, simt::launch(dim3(3), dim3(128), 0, [&] {
		     mm::k_split_bf16(o[0].data(), o[1].data(), P(x), 1000LL);
	     }));
}

int main() {
	mhc();
	rmsnorm();
	gemms();
	kda();
	elementwise();
	if (chk::failures) {
		printf("%d failures\n", chk::failures);
		return 1;
	}
	return 0;
}
