package nputest

import (
	"fmt"

	"github.com/npuserve/npuserve/npu"
)

// Open opens Device() for a fixture shared by several tests (a model
// loaded once per package), panicking when it does not open. Unlike
// Backend it is never closed.
func Open(threads int) npu.Backend {
	be, err := npu.Open(Device(), npu.OpenOptions{Threads: threads})
	if err != nil {
		panic(fmt.Sprintf("nputest: opening device %q ($%s): %v", Device(), EnvDevice, err))
	}
	return be
}
