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

// func siluAVX512(dst, src *float32, n int)
// dst[i] = silu32(src[i]) = x·sigmoid32(x), n a positive multiple of 16:
// the same fp32 operations as the Go code (elementwise.go, no FMA), so the
// results are bitwise equal. e = exp32(−|x|) through one scaling
// y·2^(e+64)·2^-64, which rounds once like exp32's y·2^e; lanes with
// −|x| < exp32Min get e = 0; then x·e/(1+e) for x < 0, x·1/(1+e) otherwise.
TEXT ·siluAVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	MOVL $0x80000000, AX
	VPBROADCASTD AX, Z31 // sign bit
	MOVL $0x3fb8aa3b, AX
	VPBROADCASTD AX, Z30 // log2e
	MOVL $0x4b400000, AX
	VPBROADCASTD AX, Z29 // 1.5·2^23
	MOVL $0x3f318000, AX
	VPBROADCASTD AX, Z28 // C1
	MOVL $0xb95e8083, AX
	VPBROADCASTD AX, Z27 // C2
	MOVL $0x39506967, AX
	VPBROADCASTD AX, Z26 // p0
	MOVL $0x3ab743ce, AX
	VPBROADCASTD AX, Z25
	MOVL $0x3c088908, AX
	VPBROADCASTD AX, Z24
	MOVL $0x3d2aa9c1, AX
	VPBROADCASTD AX, Z23
	MOVL $0x3e2aaaaa, AX
	VPBROADCASTD AX, Z22
	MOVL $0x3f000000, AX
	VPBROADCASTD AX, Z21 // p5
	MOVL $0xc2cff1b5, AX
	VPBROADCASTD AX, Z20 // exp32Min
	MOVL $0x3f800000, AX
	VPBROADCASTD AX, Z19 // 1
	MOVL $0x1f800000, AX
	VPBROADCASTD AX, Z18 // 2^-64
	MOVL $191, AX
	VPBROADCASTD AX, Z17 // 64+127
	VPXORD Z16, Z16, Z16 // 0

siluloop:
	VMOVUPS (SI), Z0           // x
	VORPS   Z31, Z0, Z1        // z = -|x|
	VMULPS  Z30, Z1, Z2
	VADDPS  Z29, Z2, Z2        // t
	VSUBPS  Z29, Z2, Z2        // n
	VMULPS  Z28, Z2, Z3
	VSUBPS  Z3, Z1, Z3         // r = z - n·C1
	VMULPS  Z27, Z2, Z4
	VSUBPS  Z4, Z3, Z3         // r -= n·C2
	VMULPS  Z3, Z26, Z4
	VADDPS  Z25, Z4, Z4
	VMULPS  Z3, Z4, Z4
	VADDPS  Z24, Z4, Z4
	VMULPS  Z3, Z4, Z4
	VADDPS  Z23, Z4, Z4
	VMULPS  Z3, Z4, Z4
	VADDPS  Z22, Z4, Z4
	VMULPS  Z3, Z4, Z4
	VADDPS  Z21, Z4, Z4        // p
	VMULPS  Z3, Z3, Z5         // r·r
	VMULPS  Z5, Z4, Z4
	VADDPS  Z3, Z4, Z4
	VADDPS  Z19, Z4, Z4        // y
	VCVTPS2DQ Z2, Z6
	VPADDD  Z17, Z6, Z6
	VPSLLD  $23, Z6, Z6        // 2^(e+64)
	VMULPS  Z6, Z4, Z4
	VMULPS  Z18, Z4, Z4        // exp32(z)
	VCMPPS  $1, Z20, Z1, K1    // z < exp32Min
	VMOVAPS Z16, K1, Z4
	VADDPS  Z19, Z4, Z5        // 1+e
	VMOVAPS Z19, Z7
	VCMPPS  $1, Z16, Z0, K2    // x < 0
	VMOVAPS Z4, K2, Z7         // e where x < 0, else 1
	VDIVPS  Z5, Z7, Z7         // sigmoid32(x)
	VMULPS  Z7, Z0, Z7
	VMOVUPS Z7, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	DECQ    CX
	JNZ     siluloop
	VZEROUPPER
	RET

// func attnDot4AVX512(a, b0, b1, b2, b3 *float32, k int, c *float32)
// For j < 4: c[j] = Σ_{p<k} a[p] * bj[p]; k a positive multiple of 16.
// Each c[j] is 16 lane sums (one FMA chain per lane over p in increasing
// order) reduced in a fixed tree that depends only on bj's own lanes, so
// equal rows give bitwise equal sums whatever their slot j.
TEXT ·attnDot4AVX512(SB), NOSPLIT, $0-56
	MOVQ a+0(FP), SI
	MOVQ b0+8(FP), R8
	MOVQ b1+16(FP), R9
	MOVQ b2+24(FP), R10
	MOVQ b3+32(FP), R12
	MOVQ k+40(FP), CX
	MOVQ c+48(FP), DX
	SHLQ $2, CX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	XORQ   R11, R11

adp:
	VMOVUPS     (SI)(R11*1), Z4
	VFMADD231PS (R8)(R11*1), Z4, Z0
	VFMADD231PS (R9)(R11*1), Z4, Z1
	VFMADD231PS (R10)(R11*1), Z4, Z2
	VFMADD231PS (R12)(R11*1), Z4, Z3
	ADDQ        $64, R11
	CMPQ        R11, CX
	JLT         adp

	VEXTRACTF64X4 $1, Z0, Y4
	VADDPS        Y4, Y0, Y0
	VEXTRACTF64X4 $1, Z1, Y5
	VADDPS        Y5, Y1, Y1
	VEXTRACTF64X4 $1, Z2, Y6
	VADDPS        Y6, Y2, Y2
	VEXTRACTF64X4 $1, Z3, Y7
	VADDPS        Y7, Y3, Y3
	VHADDPS       Y1, Y0, Y0
	VHADDPS       Y3, Y2, Y2
	VHADDPS       Y2, Y0, Y0
	VEXTRACTF128  $1, Y0, X1
	VADDPS        X1, X0, X0
	VMOVUPS       X0, (DX)
	VZEROUPPER
	RET

// func dot64AVX512(a, b *float32, n int) float64
// Σ_{i<n} a[i]·b[i] with the products and sums in float64 (8 lanes, four
// accumulators); n a positive multiple of 32.
TEXT ·dot64AVX512(SB), NOSPLIT, $0-32
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ n+16(FP), CX
	SHLQ $2, CX
	VPXORQ Z0, Z0, Z0
	VPXORQ Z1, Z1, Z1
	VPXORQ Z2, Z2, Z2
	VPXORQ Z3, Z3, Z3
	XORQ   R11, R11

d64p:
	VCVTPS2PD   (SI)(R11*1), Z4
	VCVTPS2PD   (DI)(R11*1), Z5
	VFMADD231PD Z5, Z4, Z0
	VCVTPS2PD   32(SI)(R11*1), Z6
	VCVTPS2PD   32(DI)(R11*1), Z7
	VFMADD231PD Z7, Z6, Z1
	VCVTPS2PD   64(SI)(R11*1), Z8
	VCVTPS2PD   64(DI)(R11*1), Z9
	VFMADD231PD Z9, Z8, Z2
	VCVTPS2PD   96(SI)(R11*1), Z10
	VCVTPS2PD   96(DI)(R11*1), Z11
	VFMADD231PD Z11, Z10, Z3
	ADDQ        $128, R11
	CMPQ        R11, CX
	JLT         d64p

	VADDPD        Z1, Z0, Z0
	VADDPD        Z3, Z2, Z2
	VADDPD        Z2, Z0, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VADDPD        Y1, Y0, Y0
	VEXTRACTF128  $1, Y0, X1
	VADDPD        X1, X0, X0
	VPERMILPD     $1, X0, X1
	VADDSD        X1, X0, X0
	VMOVSD        X0, ret+24(FP)
	VZEROUPPER
	RET
