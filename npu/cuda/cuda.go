// Package cuda registers the NVIDIA GPU backend, `--device cuda`.
//
// The binary builds without a CUDA toolkit: the driver API (libcuda.so.1)
// is loaded at run time through a small cgo/dlopen shim (lib.go) with our
// own declarations. Today the package is the runtime probe: where the
// driver or a GPU is missing, Open fails within milliseconds naming the
// library; where both are present it still fails, since this build has
// no CUDA op backend yet; "auto" then falls back to the cpu backend.
package cuda

import (
	"fmt"

	"github.com/npuserve/npuserve/npu"
)

func init() {
	npu.Register(npu.Registration{Name: "cuda", Accelerator: true, Priority: 1, Open: open})
}

func open(o npu.OpenOptions) (npu.Backend, error) {
	n, version, err := probe()
	if err != nil {
		return nil, fmt.Errorf("device cuda: %w: %w", err, npu.ErrUnavailable)
	}
	if o.Device < 0 || o.Device >= n {
		return nil, fmt.Errorf("device cuda: GPU %d of %d: %w", o.Device, n, npu.ErrUnavailable)
	}
	return nil, fmt.Errorf("device cuda: libcuda.so.1 loads (driver API %d, %d GPUs), but this build has no CUDA op backend yet; run with --device cpu: %w", version, n, npu.ErrUnavailable)
}
