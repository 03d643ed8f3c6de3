//go:build !amd64

package cpu

// supportedSIMDKernels returns nil: there are no assembly kernels for this
// architecture, so MatMul uses the portable Go kernels.
func supportedSIMDKernels() []*matmulKernels { return nil }

// fmaPeak returns 0: there is no assembly FMA loop for this architecture.
func fmaPeak(iters int) int64 { return 0 }

// fmaPeakISAs returns nil: there is no assembly FMA loop for this
// architecture.
func fmaPeakISAs() []fmaPeakLoop { return nil }

// prefetchLines does nothing on this architecture.
func prefetchLines(p *byte, lines int) {}
