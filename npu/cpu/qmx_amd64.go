package cpu

import "fmt"

//go:noescape
func e4m3DecodeAVX512(dst *float32, src *byte, scale *float32, blocks int)

// hasE4M3Decode says whether the SIMD MXFP8 expansion runs here.
var hasE4M3Decode = hasAVX512BW

// e4m3DecodeSIMD expands len(mul) whole blocks of 32 E4M3 bytes:
// dst[i] = E4M3(src[i]) * scale of block i/32, where mul holds 2^8 times
// each block's scale (the half-precision detour, see qmx_amd64.s).
func e4m3DecodeSIMD(dst []float32, src []byte, mul []float32) {
	blocks := len(mul)
	if blocks == 0 {
		return
	}
	if len(dst) < 32*blocks || len(src) < 32*blocks {
		panic(fmt.Sprintf("cpu: e4m3 decode of %d blocks into %d/%d elements", blocks, len(dst), len(src)))
	}
	e4m3DecodeAVX512(&dst[0], &src[0], &mul[0], blocks)
}
