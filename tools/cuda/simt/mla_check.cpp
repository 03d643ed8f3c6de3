// mla_check: k_mla_attn_tc with its tiles' cache rows read two tiles
// ahead against the version before that change (verified on the H200),
// bit for bit, whole rows and split across blocks (flash decoding), and
// against k_mla_attn (CUDA cores) to fp32 summation order.
#include "check.h"
namespace cur {
#include "mla.cu.simt"
}
namespace old {
#include "mla@5322537.cu.simt"
}

struct Out {
	std::vector<float> z, pm, pl, pacc;
};

// attn runs kernel w (0 today's k_mla_attn_tc, 1 the old one, 2
// k_mla_attn) over T rows as mla.go does, splits > 1 into partials.
static Out attn(int w, const std::vector<float> &q, const std::vector<uint16_t> &lat, const std::vector<int> &rows,
		const std::vector<int> &counts, int T, int H, int R, int width, int splits) {
	Out o;
	o.z = q;
	const float scale = 0.0625f;
	const int ptiles = (width + 31) / 32, tps = splits > 1 ? (ptiles + splits - 1) / splits : std::max(ptiles, 1);
	float *pm = nullptr, *pl = nullptr, *pacc = nullptr;
	if (splits > 1) {
		o.pm.assign((size_t)splits * T * H, -9.0f);
		o.pl.assign((size_t)splits * T * H, -9.0f);
		o.pacc.assign((size_t)splits * T * H * R, -9.0f);
		pm = o.pm.data(), pl = o.pl.data(), pacc = o.pacc.data();
	}
	float *z = o.z.data();
	const dim3 grid(T, (H + 15) / 16, splits);
	const int shTC = 2 * 3 * 16 * (R + 8) + 2 * 2 * 32 * (R + 8) + 4 * 8 * 16 * 32 + 4 * 16 * 33 + 4 * 3 * 16;
	if (w == 0) {
		simt::launch(grid, dim3(256), shTC + 4 * 3 * 32, [&] {
			cur::k_mla_attn_tc(z, lat.data(), rows.data(), counts.data(), 0, H, R, width, scale, tps, pm, pl, pacc);
		});
	} else if (w == 1) {
		simt::launch(grid, dim3(256), shTC + 4 * 2 * 32, [&] {
			old::k_mla_attn_tc(z, lat.data(), rows.data(), counts.data(), 0, H, R, width, scale, tps, pm, pl, pacc);
		});
	} else {
		const int hg = 16, sh = 4 * (hg * R + 32 * (R + 1) + hg * 33 + 3 * hg) + 4 * 32;
		simt::launch(grid, dim3(256), sh, [&] {
			cur::k_mla_attn(z, lat.data(), 1, rows.data(), counts.data(), 0, H, R, width, hg, scale, tps, pm, pl,
					pacc, 1);
		});
	}
	return o;
}

int main() {
	struct {
		int H, R, slots, width;
		std::vector<int> counts;
		int splits;
	} cases[] = {
		{16, 256, 300, 160, {160, 1, 0, 97, 33}, 1},
		{20, 128, 200, 130, {130, 64}, 1},
		{16, 512, 400, 200, {200, 31}, 1},
		{16, 256, 500, 300, {300, 170}, 3}, // decode: each row's latents split over 3 blocks
	};
	for (auto &c : cases) {
		const int T = (int)c.counts.size(), H = c.H, R = c.R;
		printf("H=%d R=%d T=%d width=%d splits=%d\n", H, R, T, c.width, c.splits);
		const std::vector<float> q = chk::randf((size_t)T * H * R, 21 + R, -0.5f, 0.5f);
		const std::vector<uint16_t> lat = chk::randbf((size_t)c.slots * R, 22 + R);
		std::vector<int> rows((size_t)T * c.width, -5);
		std::mt19937 rng(23 + R);
		for (int t = 0; t < T; t++) {
			for (int s = 0; s < c.counts[t]; s++) {
				rows[(size_t)t * c.width + s] = (int)(rng() % c.slots);
			}
		}
		simt::order = 0;
		const Out a = attn(0, q, lat, rows, c.counts, T, H, R, c.width, c.splits);
		const Out b = attn(1, q, lat, rows, c.counts, T, H, R, c.width, c.splits);
		if (c.splits == 1) {
			chk::same("z: k_mla_attn_tc vs before", a.z, b.z);
			chk::near("z: k_mla_attn_tc vs k_mla_attn", a.z, attn(2, q, lat, rows, c.counts, T, H, R, c.width, 1).z,
				  2e-5, 1e-4);
		} else {
			chk::same("pm: k_mla_attn_tc vs before", a.pm, b.pm);
			chk::same("pl: k_mla_attn_tc vs before", a.pl, b.pl);
			chk::same("pacc: k_mla_attn_tc vs before", a.pacc, b.pacc);
		}
		for (int o = 1; o <= 2; o++) {
			simt::order = o;
			const Out r = attn(0, q, lat, rows, c.counts, T, H, R, c.width, c.splits);
			chk::same("z: k_mla_attn_tc in another thread order", r.z, a.z);
			chk::same("pacc: k_mla_attn_tc in another thread order", r.pacc, a.pacc);
		}
	}
	if (chk::failures) {
		printf("%d failures\n", chk::failures);
		return 1;
	}
	return 0;
}
