//go:build cgo

package ascend

import (
	"fmt"
	"strings"

	_ "github.com/npuserve/npuserve/hccl/ascend" // links the "hccl" transport with the backend
	"github.com/npuserve/npuserve/npu"
)

func init() {
	npu.Register(npu.Registration{Name: "ascend", Accelerator: true, Priority: 0, Open: open, Transport: "hccl"})
}

// open loads CANN (failing within milliseconds, naming the library and
// the directories searched, where it is missing), then refuses while this
// build lacks ops or the installed CANN lacks an operator the backend
// calls, so --device ascend never runs a partial backend.
func open(o npu.OpenOptions) (npu.Backend, error) {
	l, err := load()
	if err != nil {
		return nil, err
	}
	if miss := missingOps(); len(miss) > 0 {
		return nil, fmt.Errorf("device ascend: CANN at %s lacks the aclnn operators %s (searched %s): %w", l.ACL, strings.Join(miss, ", "), strings.Join(l.OpAPI, ", "), npu.ErrUnavailable)
	}
	if len(unimplementedOps) > 0 {
		return nil, fmt.Errorf("device ascend: CANN loads (%s), but this build of the Ascend backend does not implement %s yet; run with --device cpu: %w", l.ACL, strings.Join(unimplementedOps, ", "), npu.ErrUnavailable)
	}
	return New(o.Device)
}
