package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDeviceUnavailable: a backend whose runtime is missing fails at
// start-up, within seconds, with a non-zero exit and one error line
// naming the device and the library it looked for (never a panic).
func TestDeviceUnavailable(t *testing.T) {
	tiny := filepath.Join(fixtures, "tiny")
	cases := []struct {
		device, lib string
		present     []string // where the runtime would be found: skip there
	}{
		{"cuda", "libcuda.so.1", []string{"/usr/local/nvidia/lib64/libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/lib/x86_64-linux-gnu/libcuda.so.1"}},
		{"ascend", "libascendcl.so", []string{"/usr/local/Ascend"}},
	}
	for _, tc := range cases {
		for _, cmd := range [][]string{
			{"serve", tiny, "--port", "0"},
			{"generate", "--model", tiny, "--prompt-ids", "1,2,3"},
			{"bench", "decode", "--config", filepath.Join(tiny, "config.json"), "--steps", "1"},
		} {
			t.Run(tc.device+"/"+cmd[0], func(t *testing.T) {
				for _, p := range tc.present {
					if _, err := os.Stat(p); err == nil {
						t.Skipf("%s exists: the %s runtime may be installed here", p, tc.device)
					}
				}
				start := time.Now()
				_, stderr, code := run(t, append(cmd, "--device", tc.device)...)
				took := time.Since(start)
				if code == 0 || strings.Contains(stderr, "panic") {
					t.Fatalf("exit %d, stderr %q", code, stderr)
				}
				lines := strings.Split(strings.TrimSpace(stderr), "\n")
				last := lines[len(lines)-1]
				if !strings.Contains(last, "--device "+tc.device) || !strings.Contains(last, tc.lib) {
					t.Errorf("last stderr line %q does not name --device %s and %s", last, tc.device, tc.lib)
				}
				if took > 5*time.Second {
					t.Errorf("took %v to fail (the bound is 5 s)", took)
				}
			})
		}
	}
}
