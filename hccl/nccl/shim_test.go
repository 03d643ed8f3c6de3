//go:build cgo

package nccl

import (
	"errors"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/hccl"
)

// TestShimSymbols pins the shim's table: the NCCL API this binding calls,
// and which of it is required (the rest has fallbacks).
func TestShimSymbols(t *testing.T) {
	want := []struct {
		name     string
		required bool
	}{
		{"ncclGetVersion", true}, {"ncclGetErrorString", true}, {"ncclGetLastError", false},
		{"ncclGetUniqueId", true}, {"ncclCommInitRank", true}, {"ncclCommInitRankConfig", false},
		{"ncclCommGetAsyncError", true}, {"ncclCommFinalize", false}, {"ncclCommDestroy", true},
		{"ncclCommAbort", true}, {"ncclAllReduce", true}, {"ncclBroadcast", true},
		{"ncclReduceScatter", true}, {"ncclAllGather", true}, {"ncclSend", true}, {"ncclRecv", true},
		{"ncclGroupStart", true}, {"ncclGroupEnd", true},
	}
	got := libSymbols()
	if len(got) != len(want) {
		t.Fatalf("%d symbols, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].Name != w.name || got[i].Required != w.required {
			t.Errorf("symbol %d = %s (required %v), want %s (required %v)", i, got[i].Name, got[i].Required, w.name, w.required)
		}
	}
}

func TestShimConstants(t *testing.T) {
	for name, v := range libConstants() {
		if v[0] != v[1] {
			t.Errorf("%s: shim.h says %d, Go %d", name, v[0], v[1])
		}
	}
}

// A library that loads but is not NCCL is refused with the missing
// symbols named, and leaves the table empty for another attempt.
func TestLoadErrors(t *testing.T) {
	if Available() == nil {
		t.Skip("NCCL is loaded in this process: the loader keeps it")
	}
	for _, tc := range []struct {
		path string
		want []string
	}{
		{"/nonexistent/libnccl.so.2", []string{"/nonexistent/libnccl.so.2 does not load", LibraryEnv}},
		{"libc.so.6", []string{"not a usable NCCL", "missing symbols: ncclGetVersion", "ncclGroupEnd"}},
	} {
		err := loadLibrary(tc.path)
		if !errors.Is(err, hccl.ErrUnavailable) {
			t.Errorf("loadLibrary(%s): %v; want ErrUnavailable", tc.path, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("loadLibrary(%s): %v; want it to mention %q", tc.path, err, w)
			}
		}
		for _, s := range libSymbols() {
			if s.Resolved {
				t.Errorf("after a failed load of %s, %s is resolved", tc.path, s.Name)
			}
		}
	}
}
