package cpu

import "golang.org/x/sys/cpu"

// simdFeatures lists the x86 features the kernels dispatch on that this
// CPU (and OS) support.
func simdFeatures() []string {
	var f []string
	for _, x := range []struct {
		name string
		has  bool
	}{
		{"avx2", cpu.X86.HasAVX2}, {"fma", cpu.X86.HasFMA}, {"f16c", cpu.X86.HasF16C},
		{"avx512f", cpu.X86.HasAVX512F}, {"avx512bw", cpu.X86.HasAVX512BW}, {"avx512vnni", cpu.X86.HasAVX512VNNI},
	} {
		if x.has {
			f = append(f, x.name)
		}
	}
	return f
}
