// moe_check: k_moe_gemm_pipe (pre-split activations, cp.async stages,
// ldmatrix) against k_moe_gemm_tc2 (verified on the H200) on the
// emulator: the same bits, as moe.go promises, for the gate|up GEMM
// (rows gathered by token) and the down GEMM (rows in order), plus
// k_swiglu_split against k_swiglu then k_split_bf16, and both GEMMs
// against an fp64 sum.
#include "check.h"
namespace moe {
#include "moe.cu.simt"
}
namespace mm {
#include "matmul.cu.simt"
}
namespace ew {
#include "elementwise.cu.simt"
}

struct Route {
	std::vector<int> rows, tok, off, tiles;
	int ntiles = 0, maxTiles = 0;
};

static Route route(const std::vector<int> &ids, int k, int E) {
	const int n = (int)ids.size();
	Route r;
	r.maxTiles = n / 64 + E + 1;
	r.rows.assign(n, 0);
	r.tok.assign(n, 0);
	r.off.assign(E + 1, 0);
	r.tiles.assign(2 * r.maxTiles, -1);
	int err[3] = {0, 0, 0}, nt = 0;
	simt::launch(dim3(1), dim3(1024), 8 * E, [&] {
		moe::k_moe_route(r.rows.data(), r.tok.data(), r.off.data(), r.tiles.data(), &nt, ids.data(), n, k, E, 64,
				 err, 1);
	});
	r.ntiles = nt;
	if (err[0]) {
		printf("  k_moe_route reported %d\n", err[0]);
		chk::failures++;
	}
	return r;
}

static std::vector<float> tc2(const Route &rt, const std::vector<float> &A, const int *tok,
			      const std::vector<uint16_t> &W, int M, int N, int K) {
	std::vector<float> C((size_t)M * N, -7.0f);
	int nt = rt.ntiles;
	simt::launch(dim3((N + 127) / 128, rt.maxTiles), dim3(256), 0, [&] {
		moe::k_moe_gemm_tc2(C.data(), A.data(), tok, W.data(), rt.tiles.data(), &nt, rt.off.data(), M, N, K, 1);
	});
	return C;
}

static std::vector<float> pipe(const Route &rt, const std::vector<uint16_t> &hi, const std::vector<uint16_t> &lo,
			       const int *tok, const std::vector<uint16_t> &W, int M, int N, int K) {
	std::vector<float> C((size_t)M * N, -7.0f);
	int nt = rt.ntiles;
	simt::launch(dim3((N + 255) / 256, rt.maxTiles), dim3(256), MOE_PSMEM, [&] {
		moe::k_moe_gemm_pipe(C.data(), hi.data(), lo.data(), tok, W.data(), rt.tiles.data(), &nt, rt.off.data(),
				     M, N, K);
	});
	return C;
}

static std::vector<float> pipe1(const Route &rt, const std::vector<uint16_t> &hi, const int *tok,
				const std::vector<uint16_t> &W, int M, int N, int K) {
	std::vector<float> C((size_t)M * N, -7.0f);
	int nt = rt.ntiles;
	simt::launch(dim3((N + 255) / 256, rt.maxTiles), dim3(256), MOE_PSMEM, [&] {
		moe::k_moe_gemm_pipe1(C.data(), hi.data(), nullptr, tok, W.data(), rt.tiles.data(), &nt, rt.off.data(), M,
				      N, K);
	});
	return C;
}

static void split(const std::vector<float> &x, std::vector<uint16_t> &hi, std::vector<uint16_t> &lo) {
	hi.assign(x.size(), 0);
	lo.assign(x.size(), 0);
	simt::launch(dim3(3), dim3(128), 0, [&] { mm::k_split_bf16(hi.data(), lo.data(), x.data(), (long long)x.size()); });
}

// reference: C[r, n] = Σ_k A[a(r), k] W_e(r)[n, k] in fp64.
static std::vector<float> reference(const Route &rt, const std::vector<float> &A, const int *tok,
				    const std::vector<uint16_t> &W, int E, int M, int N, int K) {
	std::vector<float> C((size_t)M * N);
	for (int e = 0; e < E; e++) {
		for (int r = rt.off[e]; r < rt.off[e + 1]; r++) {
			const float *a = A.data() + (size_t)(tok ? tok[r] : r) * K;
			for (int n = 0; n < N; n++) {
				double s = 0;
				for (int k = 0; k < K; k++) {
					s += (double)a[k] * chk::bf16_f32(W[((size_t)e * N + n) * K + k]);
				}
				C[(size_t)r * N + n] = (float)s;
			}
		}
	}
	return C;
}

// strided: k_gemm_tc_strided_t on W stored transposed (K x N rows of
// ldw) gives k_gemm_tc_strided's bits on W (N x K): the same tiles in
// shared memory, the same MMAs.
static void strided() {
	const int B = 3, M = 70, N = 136, K = 40, ldw = 144;
	printf("k_gemm_tc_strided_t B=%d M=%d N=%d K=%d\n", B, M, N, K);
	const std::vector<float> A = chk::randf((size_t)B * M * K, 81);
	const std::vector<uint16_t> W = chk::randbf((size_t)B * N * K, 82);
	std::vector<uint16_t> WT((size_t)B * K * ldw, 0x7fc0);
	for (int b = 0; b < B; b++) {
		for (int n = 0; n < N; n++) {
			for (int k = 0; k < K; k++) {
				WT[((size_t)b * K + k) * ldw + n] = W[((size_t)b * N + n) * K + k];
			}
		}
	}
	for (int vec = 0; vec < 2; vec++) {
		std::vector<float> c0((size_t)B * M * N, -7.0f), c1 = c0;
		simt::launch(dim3((N + 127) / 128, (M + 63) / 64, B), dim3(256), 0, [&] {
			moe::k_gemm_tc_strided(c0.data(), N, (long long)M * N, A.data(), K, (long long)M * K, W.data(),
					       (long long)N * K, M, N, K, vec);
		});
		simt::launch(dim3((N + 127) / 128, (M + 63) / 64, B), dim3(256), 0, [&] {
			moe::k_gemm_tc_strided_t(c1.data(), N, (long long)M * N, A.data(), K, (long long)M * K, WT.data(),
						 (long long)K * ldw, ldw, M, N, K, vec);
		});
		chk::same(vec ? "k_gemm_tc_strided_t vs k_gemm_tc_strided (vec)" : "k_gemm_tc_strided_t vs k_gemm_tc_strided",
			  c1, c0);
		chk::changed("k_gemm_tc_strided_t", c1, std::vector<float>(c1.size(), -7.0f));
	}
}

int main() {
	strided();
	struct {
		int T, k, E, D, I;
	} cases[] = {{40, 4, 6, 136, 136}, {30, 3, 5, 256, 64}, {9, 2, 4, 64, 40}};
	for (auto c : cases) {
		printf("T=%d k=%d E=%d D=%d I=%d\n", c.T, c.k, c.E, c.D, c.I);
		// Skewed routing: expert 0 in every token (more than 64 rows for
		// T > 64/1), the last expert in none.
		std::vector<int> ids;
		for (int t = 0; t < c.T; t++) {
			for (int j = 0; j < c.k; j++) {
				ids.push_back(j == 0 ? 0 : 1 + (t * 7 + j * 3) % (c.E - 2));
			}
		}
		const int n = (int)ids.size();
		const Route rt = route(ids, c.k, c.E);
		const std::vector<float> x = chk::randf((size_t)c.T * c.D, 11 + c.D);
		const std::vector<uint16_t> gu = chk::randbf((size_t)c.E * 2 * c.I * c.D, 12 + c.I, -0.2f, 0.2f);
		const std::vector<uint16_t> dw = chk::randbf((size_t)c.E * c.D * c.I, 13 + c.I, -0.2f, 0.2f);
		std::vector<uint16_t> xh, xl;
		split(x, xh, xl);
		simt::order = 0;
		const std::vector<float> up2 = tc2(rt, x, rt.tok.data(), gu, n, 2 * c.I, c.D);
		const std::vector<float> upP = pipe(rt, xh, xl, rt.tok.data(), gu, n, 2 * c.I, c.D);
		chk::same("gate|up: k_moe_gemm_pipe vs k_moe_gemm_tc2", upP, up2);
		chk::near("gate|up: k_moe_gemm_tc2 vs fp64", up2, reference(rt, x, rt.tok.data(), gu, c.E, n, 2 * c.I, c.D),
			  2e-5, 1e-4);
		for (int o = 1; o <= 2; o++) {
			simt::order = o;
			chk::same("gate|up: k_moe_gemm_pipe in another thread order",
				  pipe(rt, xh, xl, rt.tok.data(), gu, n, 2 * c.I, c.D), upP);
		}
		simt::order = 0;
		// One part (bf16 activations): k_moe_gemm_pipe1 on hi is
		// k_moe_gemm_tc2 on x rounded to bf16 (whose lo parts are 0), and
		// the fp64 product of the rounded x.
		{
			std::vector<float> xr(x.size());
			for (size_t i = 0; i < x.size(); i++) {
				xr[i] = (float)chk::bf16_f32(xh[i]);
			}
			const std::vector<float> up1 = pipe1(rt, xh, rt.tok.data(), gu, n, 2 * c.I, c.D);
			chk::same("gate|up: k_moe_gemm_pipe1 vs k_moe_gemm_tc2 on bf16(x)", up1,
				  tc2(rt, xr, rt.tok.data(), gu, n, 2 * c.I, c.D));
			chk::near("gate|up: k_moe_gemm_pipe1 vs fp64 on bf16(x)", up1,
				  reference(rt, xr, rt.tok.data(), gu, c.E, n, 2 * c.I, c.D), 2e-5, 1e-4);
			std::vector<uint16_t> h1((size_t)n * c.I);
			simt::launch(dim3(4), dim3(256), 0, [&] {
				ew::k_swiglu_split(h1.data(), nullptr, up2.data(), (long long)n, c.I, 0.9f, 1);
			});
			std::vector<uint16_t> hh0((size_t)n * c.I), hl0((size_t)n * c.I);
			simt::launch(dim3(4), dim3(256), 0, [&] {
				ew::k_swiglu_split(hh0.data(), hl0.data(), up2.data(), (long long)n, c.I, 0.9f, 1);
			});
			chk::same("k_swiglu_split hi alone vs with lo", h1, hh0);
			// The down GEMM (rows in order) on the rounded SwiGLU rows.
			std::vector<float> h1f(h1.size());
			for (size_t i = 0; i < h1.size(); i++) {
				h1f[i] = (float)chk::bf16_f32(h1[i]);
			}
			chk::near("down: k_moe_gemm_pipe1 vs fp64 on bf16(h)", pipe1(rt, h1, nullptr, dw, n, c.D, c.I),
				  reference(rt, h1f, nullptr, dw, c.E, n, c.D, c.I), 2e-5, 1e-4);
		}
		// SwiGLU then the down GEMM (rows in order: tok = 0).
		std::vector<float> h((size_t)n * c.I);
		std::vector<uint16_t> hh((size_t)n * c.I), hl((size_t)n * c.I), sh, sl;
		simt::launch(dim3(4), dim3(256), 0,
			     [&] { ew::k_swiglu(h.data(), up2.data(), (long long)n, c.I, 0.9f, 1); });
		simt::launch(dim3(4), dim3(256), 0, [&] {
			ew::k_swiglu_split(hh.data(), hl.data(), up2.data(), (long long)n, c.I, 0.9f, 1);
		});
		split(h, sh, sl);
		chk::same("k_swiglu_split hi vs k_swiglu + k_split_bf16", hh, sh);
		chk::same("k_swiglu_split lo vs k_swiglu + k_split_bf16", hl, sl);
		const std::vector<float> dn2 = tc2(rt, h, nullptr, dw, n, c.D, c.I);
		const std::vector<float> dnP = pipe(rt, hh, hl, nullptr, dw, n, c.D, c.I);
		chk::same("down: k_moe_gemm_pipe vs k_moe_gemm_tc2", dnP, dn2);
		chk::near("down: k_moe_gemm_tc2 vs fp64", dn2, reference(rt, h, nullptr, dw, c.E, n, c.D, c.I), 2e-5, 1e-4);
	}
	if (chk::failures) {
		printf("%d failures\n", chk::failures);
		return 1;
	}
	return 0;
}
