//go:build !amd64

package cpu

// supportedI8Kernels returns nil: there are no int8 assembly kernels for
// this architecture, so MatMulQ uses the portable Go kernel.
func supportedI8Kernels() []*i8Kernels { return nil }

// int8Peak returns 0: there is no int8 peak loop for this architecture.
func int8Peak(iters int) int64 { return 0 }
