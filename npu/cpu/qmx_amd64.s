// MXFP8 weight expansion for amd64 (AVX-512 + F16C): E4M3 bytes to
// float32 through the half-precision layout. An E4M3 byte with its sign
// moved to bit 15 and its other seven bits to bits 7..13 is the half
// 2^-8 times the E4M3 value (normals and subnormals alike: E4M3's bias is
// 8 below half's), so VCVTPH2PS and one multiply by 2^8 times the block's
// scale give the value exactly. NaN encodings (0x7f, 0xff) are not
// preserved (valid weights have none).

#include "textflag.h"

// func e4m3DecodeAVX512(dst *float32, src *byte, scale *float32, blocks int)
// expands blocks blocks of 32 bytes, block b multiplied by scale[b].
TEXT ·e4m3DecodeAVX512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ scale+16(FP), DX
	MOVQ blocks+24(FP), CX
	VPCMPEQW Y15, Y15, Y15
	VPSRLW   $9, Y15, Y15    // 0x007f in every word
	VPCMPEQW Y14, Y14, Y14
	VPSRLW   $15, Y14, Y14
	VPSLLW   $7, Y14, Y14    // 0x0080 in every word

e4m3loop:
	VBROADCASTSS (DX), Z13
	VPMOVZXBW    (SI), Y0
	VPMOVZXBW    16(SI), Y2
	VPAND        Y14, Y0, Y1
	VPAND        Y14, Y2, Y3
	VPSLLW       $8, Y1, Y1
	VPSLLW       $8, Y3, Y3
	VPAND        Y15, Y0, Y0
	VPAND        Y15, Y2, Y2
	VPSLLW       $7, Y0, Y0
	VPSLLW       $7, Y2, Y2
	VPOR         Y1, Y0, Y0
	VPOR         Y3, Y2, Y2
	VCVTPH2PS    Y0, Z0
	VCVTPH2PS    Y2, Z2
	VMULPS       Z13, Z0, Z0
	VMULPS       Z13, Z2, Z2
	VMOVUPS      Z0, (DI)
	VMOVUPS      Z2, 64(DI)
	ADDQ         $32, SI
	ADDQ         $128, DI
	ADDQ         $4, DX
	DECQ         CX
	JNZ          e4m3loop
	VZEROUPPER
	RET
