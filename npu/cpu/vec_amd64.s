// Vector helpers for amd64 (AVX-512): bf16 widening and the KDA decode
// recurrence. Dispatch and bounds checks are in vec_amd64.go.

#include "textflag.h"

// func cvtBF16F32AVX512(dst *float32, src *byte, n int)
// dst[i] = float32 of the bf16 src[i], n a positive multiple of 16.
TEXT ·cvtBF16F32AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX

cvtloop:
	VPMOVZXWD (SI), Z0
	VPSLLD    $16, Z0, Z0
	VMOVUPS   Z0, (DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	DECQ      CX
	JNZ       cvtloop
	VZEROUPPER
	RET

// func kdaMemAVX512(s *float32, ke *float32, k int, v int, mem *float32)
// mem[0:v] = Σ_{d<k} ke[d] * s[d*v : d*v+v]; k > 0, v a positive multiple
// of 16. Two accumulators per column block (even and odd d).
TEXT ·kdaMemAVX512(SB), NOSPLIT, $0-40
	MOVQ s+0(FP), SI
	MOVQ ke+8(FP), DI
	MOVQ k+16(FP), CX
	MOVQ v+24(FP), R9
	MOVQ mem+32(FP), DX
	SHLQ $2, R9       // row pitch in bytes
	SHLQ $2, CX       // k in bytes of ke
	XORQ R10, R10     // column offset in bytes

memcol:
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	LEAQ   (SI)(R10*1), R11
	XORQ   R12, R12

memd:
	VBROADCASTSS (DI)(R12*1), Z2
	VFMADD231PS  (R11), Z2, Z0
	ADDQ         R9, R11
	ADDQ         $4, R12
	CMPQ         R12, CX
	JGE          memdone
	VBROADCASTSS (DI)(R12*1), Z3
	VFMADD231PS  (R11), Z3, Z1
	ADDQ         R9, R11
	ADDQ         $4, R12
	CMPQ         R12, CX
	JLT          memd

memdone:
	VADDPS  Z1, Z0, Z0
	VMOVUPS Z0, (DX)(R10*1)
	ADDQ    $64, R10
	CMPQ    R10, R9
	JLT     memcol
	VZEROUPPER
	RET

// func kdaUpdateAVX512(s, e, kn, qn, delta, o *float32, k, v int)
// For d < k: s[d,:] = s[d,:]*e[d] + kn[d]*delta; o = Σ_d qn[d]*s[d,:]
// (o overwritten); k > 0, v a positive multiple of 16.
TEXT ·kdaUpdateAVX512(SB), NOSPLIT, $0-64
	MOVQ s+0(FP), SI
	MOVQ e+8(FP), DI
	MOVQ kn+16(FP), R8
	MOVQ qn+24(FP), BX
	MOVQ delta+32(FP), DX
	MOVQ o+40(FP), CX
	MOVQ k+48(FP), AX
	MOVQ v+56(FP), R9
	SHLQ $2, R9
	SHLQ $2, AX
	XORQ R10, R10

updcol:
	VMOVUPS (DX)(R10*1), Z2
	VPXORD  Z0, Z0, Z0
	VPXORD  Z1, Z1, Z1
	LEAQ    (SI)(R10*1), R11
	XORQ    R12, R12

updd:
	VBROADCASTSS (DI)(R12*1), Z3
	VBROADCASTSS (R8)(R12*1), Z4
	VBROADCASTSS (BX)(R12*1), Z6
	VMULPS       (R11), Z3, Z5
	VFMADD231PS  Z2, Z4, Z5
	VMOVUPS      Z5, (R11)
	VFMADD231PS  Z5, Z6, Z0
	ADDQ         R9, R11
	ADDQ         $4, R12
	CMPQ         R12, AX
	JGE          upddone
	VBROADCASTSS (DI)(R12*1), Z3
	VBROADCASTSS (R8)(R12*1), Z4
	VBROADCASTSS (BX)(R12*1), Z6
	VMULPS       (R11), Z3, Z5
	VFMADD231PS  Z2, Z4, Z5
	VMOVUPS      Z5, (R11)
	VFMADD231PS  Z5, Z6, Z1
	ADDQ         R9, R11
	ADDQ         $4, R12
	CMPQ         R12, AX
	JLT          updd

upddone:
	VADDPS  Z1, Z0, Z0
	VMOVUPS Z0, (CX)(R10*1)
	ADDQ    $64, R10
	CMPQ    R10, R9
	JLT     updcol
	VZEROUPPER
	RET
