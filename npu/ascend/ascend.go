//go:build cgo

package ascend

import (
	"fmt"
	"strings"

	_ "github.com/npuserve/npuserve/hccl/ascend" // links the "hccl" transport with the backend
	"github.com/npuserve/npuserve/npu"
)

func init() {
	npu.Register(npu.Registration{Name: "ascend", Accelerator: true, Priority: 0, Open: open, Probe: probe, Transport: "hccl"})
}

// open loads CANN (failing within milliseconds, naming the library and
// the directories searched, where it is missing), then refuses while this
// build lacks ops or the installed CANN lacks an operator the backend
// calls, so --device ascend never runs a partial backend.
func open(o npu.OpenOptions) (npu.Backend, error) {
	if err := probe(); err != nil {
		return nil, err
	}
	return New(o.Device)
}

// probe is open's checks without a device (npu.Registration.Probe): CANN
// loads with every operator the backend calls, and the build has every op.
func probe() error {
	l, err := load()
	if err != nil {
		return err
	}
	if miss := missingOps(); len(miss) > 0 {
		return fmt.Errorf("device ascend: CANN at %s lacks the aclnn operators %s (searched %s): %w", l.ACL, strings.Join(miss, ", "), strings.Join(l.OpAPI, ", "), npu.ErrUnavailable)
	}
	if len(unimplementedOps) > 0 {
		return fmt.Errorf("device ascend: CANN loads (%s), but this build of the Ascend backend does not implement %s yet; run with --device cpu: %w", l.ACL, strings.Join(unimplementedOps, ", "), npu.ErrUnavailable)
	}
	return nil
}
