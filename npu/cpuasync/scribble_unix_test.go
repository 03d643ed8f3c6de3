//go:build linux || darwin

package cpuasync

import (
	"bytes"
	"syscall"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

// TestUploadFromReadOnlyMemory: a source that cannot be written (a
// read-only mapping) is uploaded and left as it is, not a crash.
func TestUploadFromReadOnlyMemory(t *testing.T) {
	src, err := syscall.Mmap(-1, 0, 4096, syscall.PROT_READ, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		t.Skip(err)
	}
	defer syscall.Munmap(src)
	b := newBackend(t)
	x := npu.Must(b.Alloc(npu.U8, len(src)))
	b.Fill(npu.Must(b.Alloc(npu.F32, 1)), 1) // something queued before
	if err := b.Upload(x, src); err != nil {
		t.Fatal(err)
	}
	if got := download(t, b, x); !bytes.Equal(got, make([]byte, len(src))) {
		t.Fatal("device did not get the read-only source's bytes")
	}
}
