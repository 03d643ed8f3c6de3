package cuda

import (
	"errors"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

func TestGPUMemoryContract(t *testing.T) {
	b := gpu(t)
	info := b.Info()
	t.Logf("device %s: %d bytes, %d free, stream-ordered allocator %v", info.Name, info.MemoryBytes, info.FreeBytes, b.asyncAlloc)
	if !info.Accelerator || info.MemoryBytes <= 0 {
		t.Fatalf("Info %+v", info)
	}

	// Alloc zero-fills.
	z := npu.Must(b.Alloc(npu.F32, 1000, 3))
	got := make([]byte, z.Bytes())
	if err := b.Download(got, z); err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if v != 0 {
			t.Fatalf("Alloc: byte %d is %d, want 0", i, v)
		}
	}

	// Upload copies src before it returns: overwriting src at once does
	// not change what lands on the device.
	src := npu.EncodeFloats([]float32{1, 2, 3, 4}, npu.F32)
	want := append([]byte(nil), src...)
	d := npu.Must(b.Alloc(npu.F32, 4))
	if err := b.Upload(d, src); err != nil {
		t.Fatal(err)
	}
	for i := range src {
		src[i] = 0xee
	}
	out := make([]byte, 16)
	if err := b.Download(out, d); err != nil {
		t.Fatal(err)
	}
	if string(out) != string(want) {
		t.Fatalf("Upload then overwrite: device holds %x, want %x", out, want)
	}

	// Free is stream-ordered: an op enqueued before the Free still reads
	// the tensor, and a new allocation after it sees its own data.
	big := npu.Must(b.Alloc(npu.F32, 1<<22))
	b.Fill(big, 2)
	dst := npu.Must(b.Alloc(npu.F32, 1<<22))
	b.Scale(dst, big, 3)
	b.Free(big)
	again := npu.Must(b.Alloc(npu.F32, 1<<22))
	b.Fill(again, -1)
	v := make([]byte, 16)
	if err := b.Download(v, dst.Rows(1<<22-4, 1<<22)); err != nil {
		t.Fatal(err)
	}
	f, _ := npu.DecodeFloats(v, npu.F32)
	for _, x := range f {
		if x != 6 {
			t.Fatalf("op before Free read %v, want 6", f)
		}
	}
	b.Free(dst)
	b.Free(again)
	b.Free(again) // a second Free is a no-op

	// A request the GPU cannot hold is an *npu.AllocError wrapping
	// npu.ErrOutOfMemory, and the backend stays usable.
	_, err := b.Alloc(npu.F32, 1<<40)
	var ae *npu.AllocError
	if !errors.As(err, &ae) || !errors.Is(err, npu.ErrOutOfMemory) {
		t.Fatalf("Alloc of 4 TiB: %v, want an AllocError wrapping ErrOutOfMemory", err)
	}
	t.Logf("too large: %v", err)
	if err := b.Sync(); err != nil {
		t.Fatalf("Sync after a failed Alloc: %v", err)
	}

	// RunOnStream runs fn after the enqueued work.
	ran := false
	if err := b.RunOnStream(func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("RunOnStream: ran %v, err %v", ran, err)
	}
	b.Free(z)
	b.Free(d)
}

func TestOpenWholeBackend(t *testing.T) {
	gpu(t)
	if len(unimplementedOps) > 0 {
		t.Fatalf("ops still unimplemented: %v", unimplementedOps)
	}
	be, err := open(npu.OpenOptions{})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if be.Name() != "cuda" || !be.Info().Accelerator {
		t.Errorf("open: %s, %+v", be.Name(), be.Info())
	}
	if c, ok := be.(interface{ Close() error }); ok {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}
}
