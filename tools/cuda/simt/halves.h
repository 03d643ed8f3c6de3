// halves.h: the 16-bit float conversions the emulator (simt.h), the
// kernel checks (check.h) and simcuda's cuBLASLt share, as the GPU does
// them: bf16 rounding to nearest even with a NaN becoming the canonical
// 0x7fff (cvt.rn.bf16.f32), bf16 widening exactly, and IEEE half through
// GCC's _Float16 (cvt.f32.f16, cvt.rn.f16.f32).
#pragma once
#include <cstdint>
#include <cstring>

inline uint32_t simt_bf16_rn(float f) {
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u) {
		return 0x7fffu;
	}
	u += 0x7fffu + ((u >> 16) & 1u);
	return u >> 16;
}

inline float simt_bf16_f32(uint32_t h) {
	const uint32_t u = (h & 0xffffu) << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

inline float simt_f16_to_f32(uint16_t h) {
	_Float16 x;
	memcpy(&x, &h, 2);
	return (float)x;
}

inline uint16_t simt_f32_to_f16(float f) {
	const _Float16 x = (_Float16)f;
	uint16_t h;
	memcpy(&h, &x, 2);
	return h;
}
