// MatMul micro-kernels for amd64: AVX-512 (zmm, 16 floats) and AVX2+FMA
// (ymm, 8 floats). Dispatch and bounds checks are in matmul_amd64.go.
//
// Packed layouts (see matmulKernels): x panels [kv][mr][vl] and w panels
// [kv][nr][vl] of f32, so each kernel walks two pointers linearly. The
// kernels compute mr*nr dot products over kv chunks of vl floats and store
// the sums to tile[i*nr+j].

#include "textflag.h"

// Lane permutation that gathers the reduced sums (see REDUCE8).
DATA reducePerm<>+0(SB)/4, $0
DATA reducePerm<>+4(SB)/4, $4
DATA reducePerm<>+8(SB)/4, $8
DATA reducePerm<>+12(SB)/4, $12
DATA reducePerm<>+16(SB)/4, $1
DATA reducePerm<>+20(SB)/4, $5
DATA reducePerm<>+24(SB)/4, $9
DATA reducePerm<>+28(SB)/4, $13
DATA reducePerm<>+32(SB)/4, $0
DATA reducePerm<>+36(SB)/4, $0
DATA reducePerm<>+40(SB)/4, $0
DATA reducePerm<>+44(SB)/4, $0
DATA reducePerm<>+48(SB)/4, $0
DATA reducePerm<>+52(SB)/4, $0
DATA reducePerm<>+56(SB)/4, $0
DATA reducePerm<>+60(SB)/4, $0
GLOBL reducePerm<>(SB), RODATA|NOPTR, $64

// PAIR512 folds zmm a and b to 256 bits each: a = [a.lo+a.hi, b.lo+b.hi]
// (each half-sum 8 lanes). Clobbers Z30, Z31.
#define PAIR512(a, b) \
	VSHUFF64X2 $0x44, b, a, Z30; \
	VSHUFF64X2 $0xEE, b, a, Z31; \
	VADDPS     Z31, Z30, a

// QUAD512 combines two PAIR512 results p (of a0,a1) and q (of a2,a3) into
// p whose 128-bit lane l holds 4 partial sums of a_l. Clobbers Z30, Z31.
#define QUAD512(p, q) \
	VSHUFF64X2 $0x88, q, p, Z30; \
	VSHUFF64X2 $0xDD, q, p, Z31; \
	VADDPS     Z31, Z30, p

// REDUCE8 sums each of the 8 zmm accumulators a0..a7 and stores the 8
// sums (in order) as 32 bytes at dst, with Z29 = reducePerm and K1 =
// 0xFF. Clobbers a0..a7, Z28, Z30, Z31.
#define REDUCE8(a0, a1, a2, a3, a4, a5, a6, a7, dst) \
	PAIR512(a0, a1); \
	PAIR512(a2, a3); \
	PAIR512(a4, a5); \
	PAIR512(a6, a7); \
	QUAD512(a0, a2); \
	QUAD512(a4, a6); \
	VSHUFPS $0x88, a4, a0, Z30; \
	VSHUFPS $0xDD, a4, a0, Z31; \
	VADDPS  Z31, Z30, a0; \
	VSHUFPS $0x88, a0, a0, Z30; \
	VSHUFPS $0xDD, a0, a0, Z31; \
	VADDPS  Z31, Z30, a0; \
	VPERMPS a0, Z29, Z28; \
	VMOVUPS Z28, K1, dst

// HADD4 sums each of the 4 ymm accumulators a0..a3 and stores the 4 sums
// as 16 bytes at dst. Clobbers a0, a2, X15 (Y15).
#define HADD4(a0, a1, a2, a3, x0, dst) \
	VHADDPS      a1, a0, a0; \
	VHADDPS      a3, a2, a2; \
	VHADDPS      a2, a0, a0; \
	VEXTRACTF128 $1, a0, X15; \
	VADDPS       X15, x0, x0; \
	VMOVUPS      x0, dst

// GEMV_PROLOGUE loads the arguments: SI = x, DI = w (row 0), R8 = row 2,
// BX = ldw in bytes, CX = k/vl chunks, DX = out.
#define GEMV_PROLOGUE(eshift, vshift) \
	MOVQ x+0(FP), SI; \
	MOVQ w+8(FP), DI; \
	MOVQ ldw+16(FP), BX; \
	SHLQ $eshift, BX; \
	MOVQ k+24(FP), CX; \
	SHRQ $vshift, CX; \
	MOVQ out+32(FP), DX; \
	LEAQ (DI)(BX*2), R8

// GEMV512_STEP does one chunk of 16: w rows widened by LOAD into Z9..Z12.
#define GEMV512_STEP(LOAD, wbytes) \
	PREFETCHT0  512(DI); \
	PREFETCHT0  512(DI)(BX*1); \
	PREFETCHT0  512(R8); \
	PREFETCHT0  512(R8)(BX*1); \
	VMOVUPS     (SI), Z8; \
	LOAD((DI), Z9); \
	LOAD((DI)(BX*1), Z10); \
	LOAD((R8), Z11); \
	LOAD((R8)(BX*1), Z12); \
	VFMADD231PS Z9, Z8, Z0; \
	VFMADD231PS Z10, Z8, Z1; \
	VFMADD231PS Z11, Z8, Z2; \
	VFMADD231PS Z12, Z8, Z3; \
	ADDQ        $64, SI; \
	ADDQ        $wbytes, DI; \
	ADDQ        $wbytes, R8

// GEMV512_EPILOGUE reduces Z0..Z3 and stores the 4 sums at DX.
#define GEMV512_EPILOGUE \
	VMOVDQU32 reducePerm<>(SB), Z29; \
	PAIR512(Z0, Z1); \
	PAIR512(Z2, Z3); \
	QUAD512(Z0, Z2); \
	VSHUFPS   $0x88, Z0, Z0, Z30; \
	VSHUFPS   $0xDD, Z0, Z0, Z31; \
	VADDPS    Z31, Z30, Z0; \
	VSHUFPS   $0x88, Z0, Z0, Z30; \
	VSHUFPS   $0xDD, Z0, Z0, Z31; \
	VADDPS    Z31, Z30, Z0; \
	VPERMPS   Z0, Z29, Z28; \
	MOVL      $0x0F, AX; \
	KMOVW     AX, K1; \
	VMOVUPS   Z28, K1, (DX); \
	VZEROUPPER

#define ZERO4_512 \
	VPXORD Z0, Z0, Z0; \
	VPXORD Z1, Z1, Z1; \
	VPXORD Z2, Z2, Z2; \
	VPXORD Z3, Z3, Z3

#define LOADF32_512(m, z) VMOVUPS m, z

#define LOADBF16_512(m, z) VPMOVZXWD m, z; VPSLLD $16, z, z

#define LOADF16_512(m, z) VCVTPH2PS m, z

// GEMV256_STEP does one chunk of 8: w rows widened by LOAD into Y9..Y12.
#define GEMV256_STEP(LOAD, wbytes) \
	PREFETCHT0  512(DI); \
	PREFETCHT0  512(DI)(BX*1); \
	PREFETCHT0  512(R8); \
	PREFETCHT0  512(R8)(BX*1); \
	VMOVUPS     (SI), Y8; \
	LOAD((DI), Y9); \
	LOAD((DI)(BX*1), Y10); \
	LOAD((R8), Y11); \
	LOAD((R8)(BX*1), Y12); \
	VFMADD231PS Y9, Y8, Y0; \
	VFMADD231PS Y10, Y8, Y1; \
	VFMADD231PS Y11, Y8, Y2; \
	VFMADD231PS Y12, Y8, Y3; \
	ADDQ        $32, SI; \
	ADDQ        $wbytes, DI; \
	ADDQ        $wbytes, R8

#define ZERO4_256 \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3

#define LOADF32_256(m, y) VMOVUPS m, y

#define LOADBF16_256(m, y) VPMOVZXWD m, y; VPSLLD $16, y, y

#define LOADF16_256(m, y) VCVTPH2PS m, y

// GEMM4X4_STEP does one chunk of 16 for 4 rows of x (SI, SI+AX, R9,
// R9+AX) against 4 rows of w (DI, DI+BX, R8, R8+BX) widened by LOAD;
// accumulator Z(4r+j) holds x row r times w row j.
#define GEMM4X4_STEP(LOAD, wbytes) \
	PREFETCHT0  512(DI); \
	PREFETCHT0  512(DI)(BX*1); \
	PREFETCHT0  512(R8); \
	PREFETCHT0  512(R8)(BX*1); \
	LOAD((DI), Z16); \
	LOAD((DI)(BX*1), Z17); \
	LOAD((R8), Z18); \
	LOAD((R8)(BX*1), Z19); \
	VMOVUPS     (SI), Z20; \
	VFMADD231PS Z16, Z20, Z0; \
	VFMADD231PS Z17, Z20, Z1; \
	VFMADD231PS Z18, Z20, Z2; \
	VFMADD231PS Z19, Z20, Z3; \
	VMOVUPS     (SI)(AX*1), Z21; \
	VFMADD231PS Z16, Z21, Z4; \
	VFMADD231PS Z17, Z21, Z5; \
	VFMADD231PS Z18, Z21, Z6; \
	VFMADD231PS Z19, Z21, Z7; \
	VMOVUPS     (R9), Z22; \
	VFMADD231PS Z16, Z22, Z8; \
	VFMADD231PS Z17, Z22, Z9; \
	VFMADD231PS Z18, Z22, Z10; \
	VFMADD231PS Z19, Z22, Z11; \
	VMOVUPS     (R9)(AX*1), Z23; \
	VFMADD231PS Z16, Z23, Z12; \
	VFMADD231PS Z17, Z23, Z13; \
	VFMADD231PS Z18, Z23, Z14; \
	VFMADD231PS Z19, Z23, Z15; \
	ADDQ        $64, SI; \
	ADDQ        $64, R9; \
	ADDQ        $wbytes, DI; \
	ADDQ        $wbytes, R8

// GEMM4X4_PROLOGUE loads the arguments and zeroes Z0..Z15.
#define GEMM4X4_PROLOGUE(eshift) \
	MOVQ   x+0(FP), SI; \
	MOVQ   ldx+8(FP), AX; \
	SHLQ   $2, AX; \
	MOVQ   w+16(FP), DI; \
	MOVQ   ldw+24(FP), BX; \
	SHLQ   $eshift, BX; \
	MOVQ   k+32(FP), CX; \
	SHRQ   $4, CX; \
	MOVQ   out+40(FP), DX; \
	LEAQ   (DI)(BX*2), R8; \
	LEAQ   (SI)(AX*2), R9; \
	VPXORD Z0, Z0, Z0; \
	VPXORD Z1, Z1, Z1; \
	VPXORD Z2, Z2, Z2; \
	VPXORD Z3, Z3, Z3; \
	VPXORD Z4, Z4, Z4; \
	VPXORD Z5, Z5, Z5; \
	VPXORD Z6, Z6, Z6; \
	VPXORD Z7, Z7, Z7; \
	VPXORD Z8, Z8, Z8; \
	VPXORD Z9, Z9, Z9; \
	VPXORD Z10, Z10, Z10; \
	VPXORD Z11, Z11, Z11; \
	VPXORD Z12, Z12, Z12; \
	VPXORD Z13, Z13, Z13; \
	VPXORD Z14, Z14, Z14; \
	VPXORD Z15, Z15, Z15

// GEMM4X4_EPILOGUE stores the 16 sums in order at DX.
#define GEMM4X4_EPILOGUE \
	VMOVDQU32 reducePerm<>(SB), Z29; \
	MOVL      $0xFF, AX; \
	KMOVW     AX, K1; \
	REDUCE8(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, 0(DX)); \
	REDUCE8(Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15, 32(DX)); \
	VZEROUPPER

// func dot4x6AVX512(kv int, xp, wp, tile *float32)
TEXT ·dot4x6AVX512(SB), NOSPLIT, $0-32
	MOVQ kv+0(FP), CX
	MOVQ xp+8(FP), SI
	MOVQ wp+16(FP), DI
	MOVQ tile+24(FP), DX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23

dot4x6loop:
	PREFETCHT0  1024(SI)
	PREFETCHT0  1088(SI)
	PREFETCHT0  1152(SI)
	PREFETCHT0  1216(SI)
	VMOVUPS     0(SI), Z24
	VMOVUPS     64(SI), Z25
	VMOVUPS     128(SI), Z26
	VMOVUPS     192(SI), Z27
	VMOVUPS     0(DI), Z28
	VFMADD231PS Z28, Z24, Z0
	VFMADD231PS Z28, Z25, Z6
	VFMADD231PS Z28, Z26, Z12
	VFMADD231PS Z28, Z27, Z18
	VMOVUPS     64(DI), Z29
	VFMADD231PS Z29, Z24, Z1
	VFMADD231PS Z29, Z25, Z7
	VFMADD231PS Z29, Z26, Z13
	VFMADD231PS Z29, Z27, Z19
	VMOVUPS     128(DI), Z28
	VFMADD231PS Z28, Z24, Z2
	VFMADD231PS Z28, Z25, Z8
	VFMADD231PS Z28, Z26, Z14
	VFMADD231PS Z28, Z27, Z20
	VMOVUPS     192(DI), Z29
	VFMADD231PS Z29, Z24, Z3
	VFMADD231PS Z29, Z25, Z9
	VFMADD231PS Z29, Z26, Z15
	VFMADD231PS Z29, Z27, Z21
	VMOVUPS     256(DI), Z28
	VFMADD231PS Z28, Z24, Z4
	VFMADD231PS Z28, Z25, Z10
	VFMADD231PS Z28, Z26, Z16
	VFMADD231PS Z28, Z27, Z22
	VMOVUPS     320(DI), Z29
	VFMADD231PS Z29, Z24, Z5
	VFMADD231PS Z29, Z25, Z11
	VFMADD231PS Z29, Z26, Z17
	VFMADD231PS Z29, Z27, Z23
	ADDQ        $256, SI
	ADDQ        $384, DI
	DECQ        CX
	JNZ         dot4x6loop

	VMOVDQU32 reducePerm<>(SB), Z29
	MOVL      $0xFF, AX
	KMOVW     AX, K1
	REDUCE8(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, 0(DX))
	REDUCE8(Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15, 32(DX))
	REDUCE8(Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23, 64(DX))
	VZEROUPPER
	RET

// func dot3x4AVX2(kv int, xp, wp, tile *float32)
TEXT ·dot3x4AVX2(SB), NOSPLIT, $0-32
	MOVQ   kv+0(FP), CX
	MOVQ   xp+8(FP), SI
	MOVQ   wp+16(FP), DI
	MOVQ   tile+24(FP), DX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

dot3x4loop:
	VMOVUPS     0(SI), Y12
	VMOVUPS     32(SI), Y13
	VMOVUPS     64(SI), Y14
	VMOVUPS     0(DI), Y15
	VFMADD231PS Y15, Y12, Y0
	VFMADD231PS Y15, Y13, Y4
	VFMADD231PS Y15, Y14, Y8
	VMOVUPS     32(DI), Y15
	VFMADD231PS Y15, Y12, Y1
	VFMADD231PS Y15, Y13, Y5
	VFMADD231PS Y15, Y14, Y9
	VMOVUPS     64(DI), Y15
	VFMADD231PS Y15, Y12, Y2
	VFMADD231PS Y15, Y13, Y6
	VFMADD231PS Y15, Y14, Y10
	VMOVUPS     96(DI), Y15
	VFMADD231PS Y15, Y12, Y3
	VFMADD231PS Y15, Y13, Y7
	VFMADD231PS Y15, Y14, Y11
	ADDQ        $96, SI
	ADDQ        $128, DI
	DECQ        CX
	JNZ         dot3x4loop

	HADD4(Y0, Y1, Y2, Y3, X0, 0(DX))
	HADD4(Y4, Y5, Y6, Y7, X4, 16(DX))
	HADD4(Y8, Y9, Y10, Y11, X8, 32(DX))
	VZEROUPPER
	RET

// Packing: n chunks of vl elements from src (contiguous) to dst, chunk q
// at dst + q*stride floats, converted to f32.

// func packF32x16AVX512(dst *float32, stride int, src *byte, n int)
TEXT ·packF32x16AVX512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ stride+8(FP), BX
	SHLQ $2, BX
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX

packF32x16loop:
	VMOVUPS (SI), Z0
	VMOVUPS Z0, (DI)
	ADDQ    $64, SI
	ADDQ    BX, DI
	DECQ    CX
	JNZ     packF32x16loop
	VZEROUPPER
	RET

// func packBF16x16AVX512(dst *float32, stride int, src *byte, n int)
TEXT ·packBF16x16AVX512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ stride+8(FP), BX
	SHLQ $2, BX
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX

packBF16x16loop:
	VPMOVZXWD (SI), Z0
	VPSLLD    $16, Z0, Z0
	VMOVUPS   Z0, (DI)
	ADDQ      $32, SI
	ADDQ      BX, DI
	DECQ      CX
	JNZ       packBF16x16loop
	VZEROUPPER
	RET

// func packF16x16AVX512(dst *float32, stride int, src *byte, n int)
TEXT ·packF16x16AVX512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ stride+8(FP), BX
	SHLQ $2, BX
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX

packF16x16loop:
	VCVTPH2PS (SI), Z0
	VMOVUPS   Z0, (DI)
	ADDQ      $32, SI
	ADDQ      BX, DI
	DECQ      CX
	JNZ       packF16x16loop
	VZEROUPPER
	RET

// func packF32x8AVX2(dst *float32, stride int, src *byte, n int)
TEXT ·packF32x8AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ stride+8(FP), BX
	SHLQ $2, BX
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX

packF32x8loop:
	VMOVUPS (SI), Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    BX, DI
	DECQ    CX
	JNZ     packF32x8loop
	VZEROUPPER
	RET

// func packBF16x8AVX2(dst *float32, stride int, src *byte, n int)
TEXT ·packBF16x8AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ stride+8(FP), BX
	SHLQ $2, BX
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX

packBF16x8loop:
	VPMOVZXWD (SI), Y0
	VPSLLD    $16, Y0, Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      BX, DI
	DECQ      CX
	JNZ       packBF16x8loop
	VZEROUPPER
	RET

// func packF16x8AVX2(dst *float32, stride int, src *byte, n int)
TEXT ·packF16x8AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ stride+8(FP), BX
	SHLQ $2, BX
	MOVQ src+16(FP), SI
	MOVQ n+24(FP), CX

packF16x8loop:
	VCVTPH2PS (SI), Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      BX, DI
	DECQ      CX
	JNZ       packF16x8loop
	VZEROUPPER
	RET

// Matrix-vector kernels: 4 dot products of x (k floats, k a multiple of
// vl) with rows w, w+ldw, w+2ldw, w+3ldw (ldw in elements), converting w
// to f32 on the fly; out gets the 4 sums.

// func gemv4F32AVX512(x *float32, w *byte, ldw int, k int, out *[4]float32)
TEXT ·gemv4F32AVX512(SB), NOSPLIT, $0-40
	GEMV_PROLOGUE(2, 4)
	ZERO4_512

gemv4F32AVX512loop:
	GEMV512_STEP(LOADF32_512, 64)
	DECQ CX
	JNZ  gemv4F32AVX512loop
	GEMV512_EPILOGUE
	RET

// func gemv4BF16AVX512(x *float32, w *byte, ldw int, k int, out *[4]float32)
TEXT ·gemv4BF16AVX512(SB), NOSPLIT, $0-40
	GEMV_PROLOGUE(1, 4)
	ZERO4_512

gemv4BF16AVX512loop:
	GEMV512_STEP(LOADBF16_512, 32)
	DECQ CX
	JNZ  gemv4BF16AVX512loop
	GEMV512_EPILOGUE
	RET

// func gemv4F16AVX512(x *float32, w *byte, ldw int, k int, out *[4]float32)
TEXT ·gemv4F16AVX512(SB), NOSPLIT, $0-40
	GEMV_PROLOGUE(1, 4)
	ZERO4_512

gemv4F16AVX512loop:
	GEMV512_STEP(LOADF16_512, 32)
	DECQ CX
	JNZ  gemv4F16AVX512loop
	GEMV512_EPILOGUE
	RET

// func gemv4F32AVX2(x *float32, w *byte, ldw int, k int, out *[4]float32)
TEXT ·gemv4F32AVX2(SB), NOSPLIT, $0-40
	GEMV_PROLOGUE(2, 3)
	ZERO4_256

gemv4F32AVX2loop:
	GEMV256_STEP(LOADF32_256, 32)
	DECQ CX
	JNZ  gemv4F32AVX2loop
	HADD4(Y0, Y1, Y2, Y3, X0, (DX))
	VZEROUPPER
	RET

// func gemv4BF16AVX2(x *float32, w *byte, ldw int, k int, out *[4]float32)
TEXT ·gemv4BF16AVX2(SB), NOSPLIT, $0-40
	GEMV_PROLOGUE(1, 3)
	ZERO4_256

gemv4BF16AVX2loop:
	GEMV256_STEP(LOADBF16_256, 16)
	DECQ CX
	JNZ  gemv4BF16AVX2loop
	HADD4(Y0, Y1, Y2, Y3, X0, (DX))
	VZEROUPPER
	RET

// func gemv4F16AVX2(x *float32, w *byte, ldw int, k int, out *[4]float32)
TEXT ·gemv4F16AVX2(SB), NOSPLIT, $0-40
	GEMV_PROLOGUE(1, 3)
	ZERO4_256

gemv4F16AVX2loop:
	GEMV256_STEP(LOADF16_256, 16)
	DECQ CX
	JNZ  gemv4F16AVX2loop
	HADD4(Y0, Y1, Y2, Y3, X0, (DX))
	VZEROUPPER
	RET

// Small-M kernels: 4 rows of x (ldx floats apart, k a multiple of 16)
// against 4 rows of w (ldw elements apart) read in place and widened on
// the fly; out[4r+j] = x_r · w_j.

// func gemm4x4F32AVX512(x *float32, ldx int, w *byte, ldw int, k int, out *[16]float32)
TEXT ·gemm4x4F32AVX512(SB), NOSPLIT, $0-48
	GEMM4X4_PROLOGUE(2)

gemm4x4F32AVX512loop:
	GEMM4X4_STEP(LOADF32_512, 64)
	DECQ CX
	JNZ  gemm4x4F32AVX512loop
	GEMM4X4_EPILOGUE
	RET

// func gemm4x4BF16AVX512(x *float32, ldx int, w *byte, ldw int, k int, out *[16]float32)
TEXT ·gemm4x4BF16AVX512(SB), NOSPLIT, $0-48
	GEMM4X4_PROLOGUE(1)

gemm4x4BF16AVX512loop:
	GEMM4X4_STEP(LOADBF16_512, 32)
	DECQ CX
	JNZ  gemm4x4BF16AVX512loop
	GEMM4X4_EPILOGUE
	RET

// func gemm4x4F16AVX512(x *float32, ldx int, w *byte, ldw int, k int, out *[16]float32)
TEXT ·gemm4x4F16AVX512(SB), NOSPLIT, $0-48
	GEMM4X4_PROLOGUE(1)

gemm4x4F16AVX512loop:
	GEMM4X4_STEP(LOADF16_512, 32)
	DECQ CX
	JNZ  gemm4x4F16AVX512loop
	GEMM4X4_EPILOGUE
	RET

// func fmaPeakAVX512(iters int)
// 24 independent FMA chains per iteration, registers only.
TEXT ·fmaPeakAVX512(SB), NOSPLIT, $0-8
	MOVQ   iters+0(FP), CX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23
	VPXORD Z30, Z30, Z30
	VPXORD Z31, Z31, Z31

fmaPeak512loop:
	VFMADD231PS Z30, Z31, Z0
	VFMADD231PS Z30, Z31, Z1
	VFMADD231PS Z30, Z31, Z2
	VFMADD231PS Z30, Z31, Z3
	VFMADD231PS Z30, Z31, Z4
	VFMADD231PS Z30, Z31, Z5
	VFMADD231PS Z30, Z31, Z6
	VFMADD231PS Z30, Z31, Z7
	VFMADD231PS Z30, Z31, Z8
	VFMADD231PS Z30, Z31, Z9
	VFMADD231PS Z30, Z31, Z10
	VFMADD231PS Z30, Z31, Z11
	VFMADD231PS Z30, Z31, Z12
	VFMADD231PS Z30, Z31, Z13
	VFMADD231PS Z30, Z31, Z14
	VFMADD231PS Z30, Z31, Z15
	VFMADD231PS Z30, Z31, Z16
	VFMADD231PS Z30, Z31, Z17
	VFMADD231PS Z30, Z31, Z18
	VFMADD231PS Z30, Z31, Z19
	VFMADD231PS Z30, Z31, Z20
	VFMADD231PS Z30, Z31, Z21
	VFMADD231PS Z30, Z31, Z22
	VFMADD231PS Z30, Z31, Z23
	DECQ        CX
	JNZ         fmaPeak512loop
	VZEROUPPER
	RET

// func fmaPeakAVX2(iters int)
// 12 independent FMA chains per iteration, registers only.
TEXT ·fmaPeakAVX2(SB), NOSPLIT, $0-8
	MOVQ   iters+0(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	VXORPS Y14, Y14, Y14
	VXORPS Y15, Y15, Y15

fmaPeak256loop:
	VFMADD231PS Y14, Y15, Y0
	VFMADD231PS Y14, Y15, Y1
	VFMADD231PS Y14, Y15, Y2
	VFMADD231PS Y14, Y15, Y3
	VFMADD231PS Y14, Y15, Y4
	VFMADD231PS Y14, Y15, Y5
	VFMADD231PS Y14, Y15, Y6
	VFMADD231PS Y14, Y15, Y7
	VFMADD231PS Y14, Y15, Y8
	VFMADD231PS Y14, Y15, Y9
	VFMADD231PS Y14, Y15, Y10
	VFMADD231PS Y14, Y15, Y11
	DECQ        CX
	JNZ         fmaPeak256loop
	VZEROUPPER
	RET

// func prefetchLines(p *byte, lines int)
// Prefetches `lines` consecutive 64-byte cache lines from p into L1.
TEXT ·prefetchLines(SB), NOSPLIT, $0-16
	MOVQ  p+0(FP), SI
	MOVQ  lines+8(FP), CX
	TESTQ CX, CX
	JLE   prefetchdone

prefetchloop:
	PREFETCHT0 (SI)
	ADDQ       $64, SI
	DECQ       CX
	JNZ        prefetchloop

prefetchdone:
	RET

// func gemv4BF16PfAVX512(x *float32, w *byte, ldw int, k int, pf int, out *[4]float32)
// gemv4BF16AVX512 with the prefetch distance pf (bytes ahead of each row's
// read position) as an argument: 4*ldw*2 prefetches the next 4-row group.
TEXT ·gemv4BF16PfAVX512(SB), NOSPLIT, $0-48
	MOVQ x+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ ldw+16(FP), BX
	SHLQ $1, BX
	MOVQ k+24(FP), CX
	SHRQ $4, CX
	MOVQ pf+32(FP), R9
	MOVQ out+40(FP), DX
	LEAQ (DI)(BX*2), R8
	LEAQ (DI)(R9*1), R10
	LEAQ (R8)(R9*1), R11
	ZERO4_512

gemv4BF16PfAVX512loop:
	PREFETCHT0  (R10)
	PREFETCHT0  (R10)(BX*1)
	PREFETCHT0  (R11)
	PREFETCHT0  (R11)(BX*1)
	VMOVUPS     (SI), Z8
	LOADBF16_512((DI), Z9)
	LOADBF16_512((DI)(BX*1), Z10)
	LOADBF16_512((R8), Z11)
	LOADBF16_512((R8)(BX*1), Z12)
	VFMADD231PS Z9, Z8, Z0
	VFMADD231PS Z10, Z8, Z1
	VFMADD231PS Z11, Z8, Z2
	VFMADD231PS Z12, Z8, Z3
	ADDQ        $64, SI
	ADDQ        $32, DI
	ADDQ        $32, R8
	ADDQ        $32, R10
	ADDQ        $32, R11
	DECQ        CX
	JNZ         gemv4BF16PfAVX512loop
	GEMV512_EPILOGUE
	RET
