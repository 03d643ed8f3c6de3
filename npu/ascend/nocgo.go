//go:build !cgo

package ascend

import (
	"errors"

	_ "github.com/npuserve/npuserve/hccl/ascend" // registers the "hccl" transport, which says why it cannot run
	"github.com/npuserve/npuserve/npu"
)

// Without cgo nothing can call CANN: the backend registers so that asking
// for it fails with the reason rather than "unknown device".

func init() {
	npu.Register(npu.Registration{Name: "ascend", Accelerator: true, Priority: 0, Open: func(npu.OpenOptions) (npu.Backend, error) {
		return nil, errNoCgo
	}, Probe: func() error { return errNoCgo }})
}

var errNoCgo = errors.Join(errors.New("device ascend: this binary was built with CGO_ENABLED=0 and cannot load libascendcl.so: rebuild with cgo or use --device cpu"), npu.ErrUnavailable)
