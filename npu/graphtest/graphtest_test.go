package graphtest

import (
	"errors"
	"slices"
	"testing"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/cpu"
)

func TestReplayUsesUploadedInputs(t *testing.T) {
	be := New(cpu.New(0))
	x := npu.Must(be.Alloc(npu.F32, 3))
	y := npu.Must(be.Alloc(npu.F32, 3))
	if err := be.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	be.Scale(y, x, 2)
	be.Add(y, y, x)
	if v := npu.MustF32(be.Backend, y); !slices.Equal(v, []float32{0, 0, 0}) {
		t.Fatalf("ops ran during capture: %v", v)
	}
	g, err := be.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range [][]float32{{1, 2, 3}, {-1, 0.5, 4}} {
		if err := be.Upload(x, npu.EncodeFloats(in, npu.F32)); err != nil {
			t.Fatal(err)
		}
		if err := g.Launch(); err != nil {
			t.Fatal(err)
		}
		got := npu.MustF32(be, y)
		for i := range in {
			if got[i] != 3*in[i] {
				t.Fatalf("replay of %v gave %v", in, got)
			}
		}
	}
	if err := g.Close(); err != nil || g.Launch() == nil {
		t.Fatalf("Close = %v, and a closed graph launched", err)
	}
}

func TestCaptureRefusals(t *testing.T) {
	be := New(cpu.New(0))
	x := npu.Must(be.Alloc(npu.F32, 2))
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"Alloc", func() error { _, err := be.Alloc(npu.F32, 1); return err }},
		{"FromHost", func() error { _, err := be.FromHost(npu.F32, make([]byte, 4), 1); return err }},
		{"Upload", func() error { return be.Upload(x, make([]byte, 8)) }},
		{"Download", func() error { return be.Download(make([]byte, 8), x) }},
		{"Sync", be.Sync},
		{"RunOnStream", func() error { return be.RunOnStream(func() error { return nil }) }},
	} {
		if err := be.BeginCapture(); err != nil {
			t.Fatal(err)
		}
		if err := c.call(); !errors.Is(err, npu.ErrCapturing) {
			t.Errorf("%s while capturing: %v, want ErrCapturing", c.name, err)
		}
		if _, err := be.EndCapture(); !errors.Is(err, npu.ErrCapturing) {
			t.Errorf("%s: EndCapture = %v, want the refusal", c.name, err)
		}
		if err := c.call(); err != nil {
			t.Errorf("%s after the capture: %v", c.name, err)
		}
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Free during capture did not panic")
			}
		}()
		_ = be.BeginCapture()
		defer be.EndCapture()
		be.Free(x)
	}()
}
