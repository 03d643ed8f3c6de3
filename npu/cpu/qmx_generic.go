//go:build !amd64

package cpu

// hasE4M3Decode is false: no SIMD MXFP8 expansion on this architecture.
var hasE4M3Decode = false

// e4m3DecodeSIMD is never called without hasE4M3Decode.
func e4m3DecodeSIMD(dst []float32, src []byte, mul []float32) {
	panic("cpu: no SIMD E4M3 decode on this architecture")
}
