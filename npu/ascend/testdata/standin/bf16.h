// BF16 <-> F32 conversions (round to nearest even, NaN kept quiet) shared
// by the stand-in's C sources and the HCCL test doubles.
#ifndef STANDIN_BF16_H
#define STANDIN_BF16_H

#include <stdint.h>
#include <string.h>

static float bf16_to_f(uint16_t h) {
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static uint16_t f_to_bf16(float f) {
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffff) > 0x7f800000) {
		return (uint16_t)(u >> 16) | 0x40;
	}
	u += 0x7fff + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

#endif
