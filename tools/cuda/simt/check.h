// check.h: what the simt kernel checks share (deterministic inputs,
// comparisons that name the first difference, a failure count).
#pragma once
#include "halves.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

namespace chk {

inline int failures = 0;

inline std::vector<float> randf(size_t n, unsigned seed, float lo = -1, float hi = 1) {
	std::mt19937 r(seed);
	std::uniform_real_distribution<float> u(lo, hi);
	std::vector<float> v(n);
	for (auto &x : v) {
		x = u(r);
	}
	return v;
}

inline uint16_t bf16(float f) { return (uint16_t)simt_bf16_rn(f); }

inline double bf16_f32(uint16_t h) { return simt_bf16_f32(h); }

inline std::vector<uint16_t> randbf(size_t n, unsigned seed, float lo = -1, float hi = 1) {
	std::vector<float> f = randf(n, seed, lo, hi);
	std::vector<uint16_t> v(n);
	for (size_t i = 0; i < n; i++) {
		v[i] = bf16(f[i]);
	}
	return v;
}

// same says whether a and b hold the same bits, reporting the first
// difference under name.
template <class T> bool same(const char *name, const std::vector<T> &a, const std::vector<T> &b) {
	if (a.size() != b.size()) {
		printf("  %s: sizes %zu and %zu\n", name, a.size(), b.size());
		failures++;
		return false;
	}
	for (size_t i = 0; i < a.size(); i++) {
		if (memcmp(&a[i], &b[i], sizeof(T)) != 0) {
			printf("  %s: element %zu differs: %.9g vs %.9g\n", name, i, (double)a[i], (double)b[i]);
			failures++;
			return false;
		}
	}
	return true;
}

// changed says whether out differs from its initial contents in (a
// launch that returned early everywhere would compare equal to another).
template <class T> bool changed(const char *name, const std::vector<T> &out, const std::vector<T> &init) {
	if (out.size() == init.size() && memcmp(out.data(), init.data(), out.size() * sizeof(T)) == 0) {
		printf("  %s: the output was never written\n", name);
		failures++;
		return false;
	}
	return true;
}

// near says whether |a - b| <= atol + rtol |b| everywhere (NaNs must match).
inline bool near(const char *name, const std::vector<float> &a, const std::vector<float> &b, double atol, double rtol) {
	if (a.size() != b.size()) {
		printf("  %s: sizes %zu and %zu\n", name, a.size(), b.size());
		failures++;
		return false;
	}
	double worst = 0;
	for (size_t i = 0; i < a.size(); i++) {
		const double d = std::fabs((double)a[i] - (double)b[i]);
		if (std::isnan(a[i]) != std::isnan(b[i]) || d > atol + rtol * std::fabs((double)b[i])) {
			printf("  %s: element %zu: %.9g vs %.9g\n", name, i, (double)a[i], (double)b[i]);
			failures++;
			return false;
		}
		worst = d > worst ? d : worst;
	}
	printf("  %s: max |diff| %.3g over %zu\n", name, worst, a.size());
	return true;
}

} // namespace chk
