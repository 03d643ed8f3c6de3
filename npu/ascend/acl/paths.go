package acl

import (
	"os"
	"path/filepath"
	"runtime"
)

// SearchDirs lists the directories searched for the CANN libraries, in
// order: $ASCEND_HOME_PATH and $ASCEND_TOOLKIT_HOME (lib64 and
// <arch>-linux/lib64), $LD_LIBRARY_PATH, then the default install
// locations. A library found in none of them is left to the dynamic
// loader's own search (ld.so.cache).
func SearchDirs() []string {
	arch := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[runtime.GOARCH]
	var dirs []string
	for _, env := range []string{"ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"} {
		if v := os.Getenv(env); v != "" {
			dirs = append(dirs, filepath.Join(v, "lib64"))
			if arch != "" {
				dirs = append(dirs, filepath.Join(v, arch+"-linux", "lib64"))
			}
		}
	}
	for _, d := range filepath.SplitList(os.Getenv("LD_LIBRARY_PATH")) {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	dirs = append(dirs, "/usr/local/Ascend/ascend-toolkit/latest/lib64", "/usr/local/Ascend/cann/lib64", "/usr/local/Ascend/latest/lib64")
	seen := map[string]bool{}
	out := dirs[:0]
	for _, d := range dirs {
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}

// FindLib returns the first dirs/name that exists, else the bare name for
// the dynamic loader to find.
func FindLib(name string, dirs []string) string {
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	return name
}
