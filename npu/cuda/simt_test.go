package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// simtDir is tools/cuda/simt, seen from this package, for a test that
// needs the emulator and tools; it skips the test in -short (why says
// what that saves), without one of tools, and where the test binary runs
// outside its package directory (a GPU host's copy of it).
func simtDir(t *testing.T, why string, tools ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: " + why)
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s: the emulator needs it", tool)
		}
	}
	dir := filepath.Join("..", "..", "tools", "cuda", "simt")
	if _, err := os.Stat(filepath.Join(dir, "simt.h")); err != nil {
		t.Skipf("no %s: the test binary runs outside its package directory (a GPU host's copy)", dir)
	}
	return dir
}

// TestSIMTKernels runs the CPU-emulated kernel checks of tools/cuda/simt
// (simt.h: CUDA threads as fibers, warp collectives, mma.sync, ldmatrix
// and cp.async emulated): each new kernel against the GPU-verified one it
// replaces, and the kernels changed since the last GPU run against their
// versions of that commit, bit for bit where they promise it. It is what
// of the kernels' results a machine without a GPU can check; timing still
// needs the GPU. Skipped in -short, without g++, python3 or git, and for
// a check whose reference commit a shallow clone lacks.
func TestSIMTKernels(t *testing.T) {
	dir := simtDir(t, "the emulated kernel checks take about a minute", "g++", "python3", "git")
	checks, err := filepath.Glob(filepath.Join(dir, "*_check.cpp"))
	if err != nil || len(checks) == 0 {
		t.Fatalf("no checks in %s (%v)", dir, err)
	}
	for _, c := range checks {
		name := filepath.Base(c)
		t.Run(strings.TrimSuffix(name, ".cpp"), func(t *testing.T) {
			t.Parallel()
			out, err := exec.Command("bash", filepath.Join(dir, "run.sh"), name).CombinedOutput()
			text := string(out)
			if len(text) > 4000 {
				text = "..." + text[len(text)-4000:]
			}
			t.Log(text)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if strings.HasPrefix(strings.TrimSpace(string(out)), "skip ") {
				t.Skip(strings.TrimSpace(string(out)))
			}
		})
	}
}
