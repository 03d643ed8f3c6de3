// Package nputest opens the device that tests of other packages run on:
// $NPUSERVE_TEST_DEVICE, default "cpu". Running a package's tests with
// NPUSERVE_TEST_DEVICE=cpu-async runs them on the checking asynchronous
// backend (npu/cpuasync), which catches host reads outside sync points,
// Upload sources read after the call and tensors used after Free. The
// package links the CPU backends so that both names open.
package nputest

import (
	"io"
	"os"
	"testing"

	"github.com/npuserve/npuserve/npu"
	_ "github.com/npuserve/npuserve/npu/ascend"   // registers "ascend" (over CANN or its stand-in)
	_ "github.com/npuserve/npuserve/npu/cpu"      // registers "cpu"
	_ "github.com/npuserve/npuserve/npu/cpuasync" // registers "cpu-async"
	_ "github.com/npuserve/npuserve/npu/cuda"     // registers "cuda" (tests on the GPU host)
)

// EnvDevice is the environment variable naming the test device.
const EnvDevice = "NPUSERVE_TEST_DEVICE"

// Device is the name of the backend tests open: $NPUSERVE_TEST_DEVICE, or
// "cpu" when it is unset or empty.
func Device() string {
	if d := os.Getenv(EnvDevice); d != "" {
		return d
	}
	return "cpu"
}

// Backend opens Device() with threads op threads (0 = GOMAXPROCS), failing
// the test when it does not open. A backend that can be closed (cpu-async)
// is closed when the test ends, and a failure of its queued work that the
// test never synchronised on fails the test: on the eager CPU backend that
// failure would have been a panic at the call.
func Backend(tb testing.TB, threads int) npu.Backend {
	tb.Helper()
	name := Device()
	be, err := npu.Open(name, npu.OpenOptions{Threads: threads})
	if err != nil {
		tb.Fatalf("nputest: opening device %q ($%s): %v", name, EnvDevice, err)
	}
	if c, ok := be.(io.Closer); ok {
		tb.Cleanup(func() {
			if err := c.Close(); err != nil {
				tb.Errorf("nputest: device %q: queued work failed and the test never synchronised on it: %v", name, err)
			}
		})
	}
	return be
}
