package cpu

import (
	"runtime"
	"strconv"
	"strings"

	"github.com/npuserve/npuserve/npu"
	pscpu "github.com/shirou/gopsutil/v3/cpu"
)

var _ npu.Describer = (*Backend)(nil)

// Describe names the host CPU, its cores, the threads ops use, the SIMD
// features the CPU offers among those the kernels dispatch on, and the
// matmul kernels chosen (NPUSERVE_CPU_SIMD may force the portable ones).
func (b *Backend) Describe() map[string]string {
	d := map[string]string{
		"cpu_model":     cpuModel(),
		"cores":         strconv.Itoa(runtime.NumCPU()),
		"threads":       strconv.Itoa(b.threads),
		"arch":          runtime.GOOS + "/" + runtime.GOARCH,
		"go":            runtime.Version(),
		"simd":          strings.Join(simdFeatures(), " "),
		"matmul_kernel": MatMulKernel(),
		"int8_kernel":   Int8Kernel(),
	}
	if d["simd"] == "" {
		d["simd"] = "none"
	}
	return d
}

// cpuModel is the host CPU's model name ("unknown" where the OS does not
// say).
func cpuModel() string {
	infos, err := pscpu.Info()
	if err != nil || len(infos) == 0 || infos[0].ModelName == "" {
		return "unknown"
	}
	return strings.TrimSpace(infos[0].ModelName)
}
