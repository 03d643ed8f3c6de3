// Package ascend registers the Ascend NPU backend, `--device ascend`.
//
// Today it is the runtime probe only: opening it looks for CANN's
// libascendcl.so where torch_npu and CANN's set_env.sh put it and loads
// it with libhccl.so (through hccl/ascend's loader, the one place their
// symbols are declared). Where CANN is missing it fails within
// milliseconds naming the library and the directories searched. The op
// backend itself (aclnn two-phase calls, one locked device thread, graph
// capture) is not in this build yet, so with CANN present Open still
// fails, saying so; "auto" then falls back to the cpu backend.
package ascend

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	hcclascend "github.com/npuserve/npuserve/hccl/ascend"
	"github.com/npuserve/npuserve/npu"
)

func init() {
	npu.Register(npu.Registration{Name: "ascend", Accelerator: true, Priority: 0, Open: open, Transport: "hccl"})
}

func open(o npu.OpenOptions) (npu.Backend, error) {
	dirs := hcclascend.SearchDirs()
	found := false
	for _, d := range dirs {
		if st, err := os.Stat(filepath.Join(d, "libascendcl.so")); err == nil && !st.IsDir() {
			found = true
			break
		}
	}
	if err := hcclascend.Available(); err != nil {
		if !found {
			home := os.Getenv("ASCEND_HOME_PATH")
			if home == "" {
				home = "unset"
			}
			return nil, fmt.Errorf("device ascend: libascendcl.so not found (ASCEND_HOME_PATH %s; searched %s and the dynamic loader's path): install CANN and source its set_env.sh, or use --device cpu: %w",
				home, strings.Join(dirs, ", "), npu.ErrUnavailable)
		}
		return nil, fmt.Errorf("device ascend: %v: %w", err, npu.ErrUnavailable)
	}
	acl, _, _ := hcclascend.Libraries()
	return nil, fmt.Errorf("device ascend: CANN loads (%s), but this build has no Ascend op backend yet (only HCCL collectives); run with --device cpu: %w", acl, npu.ErrUnavailable)
}
