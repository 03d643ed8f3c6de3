//go:build !amd64

package cpu

// simdFeatures returns nil: the kernels dispatch on no CPU feature on this
// architecture (the portable Go kernels run).
func simdFeatures() []string { return nil }
