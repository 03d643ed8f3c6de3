// Package cuda is the NVIDIA GPU backend, `--device cuda`.
//
// The binary builds without a CUDA toolkit: the driver API (libcuda.so.1),
// NVRTC (libnvrtc.so.13, else .12) and cuBLASLt (libcublasLt.so.13, else
// .12) are loaded at run time through a small cgo/dlopen shim (shim.c,
// lib.go) with our own declarations. The kernels are CUDA C sources
// embedded in the binary (kernels/), compiled by NVRTC for the GPU at
// start-up and cached on disk (kernels.go); dense GEMMs go to cuBLASLt
// (matmul.go). Every op matches the CPU backend, the numerical reference,
// within fp32 rounding (matmul.go states the bf16 GEMM's bound).
//
// Where the driver or a GPU is missing, Open fails within milliseconds
// naming the library, and "auto" falls back to the cpu backend. While the
// backend lacks some ops (unimplemented.go), Open also fails, naming them:
// --device cuda never runs a partial backend.
package cuda

import (
	"fmt"
	"strings"

	"github.com/npuserve/npuserve/npu"
)

func init() {
	npu.Register(npu.Registration{Name: "cuda", Accelerator: true, Priority: 1, Open: open, Transport: "nccl"})
}

func open(o npu.OpenOptions) (npu.Backend, error) {
	n, version, err := probe()
	if err != nil {
		return nil, fmt.Errorf("device cuda: %w: %w", err, npu.ErrUnavailable)
	}
	if o.Device < 0 || o.Device >= n {
		return nil, fmt.Errorf("device cuda: GPU %d of %d: %w", o.Device, n, npu.ErrUnavailable)
	}
	if len(unimplementedOps) > 0 {
		return nil, fmt.Errorf("device cuda: libcuda.so.1 loads (driver API %d, %d GPUs), but this build of the CUDA backend does not implement %s yet; run with --device cpu: %w",
			version, n, strings.Join(unimplementedOps, ", "), npu.ErrUnavailable)
	}
	b, err := New(o.Device)
	if err != nil {
		return nil, fmt.Errorf("device cuda: %w", err)
	}
	if bad := b.kernelErrors(); bad != "" {
		b.Close()
		return nil, fmt.Errorf("device cuda: kernels failed to build: %s", bad)
	}
	return b, nil
}
