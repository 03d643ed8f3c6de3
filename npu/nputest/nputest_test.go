package nputest

import (
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

func TestDevice(t *testing.T) {
	for _, tc := range []struct{ env, want string }{
		{"", "cpu"},
		{"cpu", "cpu"},
		{"cpu-async", "cpu-async"},
	} {
		t.Setenv(EnvDevice, tc.env)
		if got := Device(); got != tc.want {
			t.Errorf("%s=%q: Device() = %q, want %q", EnvDevice, tc.env, got, tc.want)
		}
		if be := Backend(t, 1); be.Name() != tc.want {
			t.Errorf("%s=%q: Backend(...).Name() = %q, want %q", EnvDevice, tc.env, be.Name(), tc.want)
		}
	}
}

// fakeTB records failures; Fatalf ends the calling goroutine as
// testing.T's does.
type fakeTB struct {
	testing.TB
	mu       sync.Mutex
	msgs     []string
	cleanups []func()
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msgs = append(f.msgs, format)
}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.Errorf(format, args...)
	runtime.Goexit()
}
func (f *fakeTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }

// run calls Backend on f in a goroutine (Fatalf exits it) and then runs
// body and the cleanups.
func (f *fakeTB) run(body func(npu.Backend)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		body(Backend(f, 1))
	}()
	<-done
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

func TestBackendFailsOnUnknownDevice(t *testing.T) {
	t.Setenv(EnvDevice, "no-such-device")
	f := &fakeTB{TB: t}
	ran := false
	f.run(func(npu.Backend) { ran = true })
	if ran || len(f.msgs) != 1 || !strings.Contains(f.msgs[0], "opening device") {
		t.Errorf("Backend on an unknown device: ran %v, failures %q; want one Fatalf", ran, f.msgs)
	}
}

func TestBackendReportsUnsynchronisedFailure(t *testing.T) {
	t.Setenv(EnvDevice, "cpu-async")
	f := &fakeTB{TB: t}
	f.run(func(be npu.Backend) {
		x := npu.Must(be.Alloc(npu.F32, 2))
		y := npu.Must(be.Alloc(npu.F32, 3))
		be.Copy(x, y) // element counts differ: fails on the stream, never synced
	})
	if len(f.msgs) != 1 || !strings.Contains(f.msgs[0], "never synchronised") {
		t.Errorf("failures %q; want the unsynchronised failure reported at cleanup", f.msgs)
	}
}
