package main

import (
	"fmt"

	"github.com/npuserve/npuserve/npu"
	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"

	// The backends this binary offers (npu.Register in their init).
	_ "github.com/npuserve/npuserve/npu/ascend"
	_ "github.com/npuserve/npuserve/npu/cpu"
	_ "github.com/npuserve/npuserve/npu/cpuasync"
	_ "github.com/npuserve/npuserve/npu/cuda"
)

// openDevice opens the backend called name ("auto" resolves to the first
// accelerator whose runtime loads, else cpu, logged once). A backend whose
// runtime is missing fails here, within seconds, naming the library.
func openDevice(name string, threads int) (npu.Backend, error) {
	if name == "" {
		name = "cpu"
	}
	be, skipped, err := npu.OpenAuto(name, npu.OpenOptions{Threads: threads})
	if err != nil {
		return nil, fmt.Errorf("--device %s: %v", name, err)
	}
	if name == "auto" {
		for _, s := range skipped {
			logrus.Infof("--device auto: %s", s)
		}
		logrus.Infof("--device auto: using the %s backend", be.Name())
	}
	return be, nil
}

// backendThreads is the host threads a backend's ops use (CPU backends),
// 0 for accelerators.
func backendThreads(be npu.Backend) int {
	if t, ok := be.(interface{ Threads() int }); ok {
		return t.Threads()
	}
	return 0
}

// deviceFlag is --device of the offline commands (generate, eval, bench
// decode, quantize), with serve's choices.
func deviceFlag() cli.Flag {
	return &cli.StringFlag{Name: "device", Value: "cpu",
		Usage: "backend: auto (the first accelerator whose runtime loads, else cpu), cpu, cpu-async (checking asynchronous cpu backend), cuda or ascend"}
}

// openDeviceFlag opens the backend of a command's --device and --threads.
func openDeviceFlag(c *cli.Context) (npu.Backend, error) {
	be, err := openDevice(c.String("device"), c.Int("threads"))
	if err != nil {
		return nil, runError("%v", err)
	}
	return be, nil
}
