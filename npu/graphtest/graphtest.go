// Package graphtest is a capturing backend for tests: it wraps any
// npu.Backend (the CPU backend in practice) and implements
// npu.GraphCapturer by recording the ops enqueued between BeginCapture
// and EndCapture as closures over their arguments, replayed in order by
// Graph.Launch. It enforces the capture contract of npu.GraphCapturer
// (Alloc, FromHost, Upload, Download, Sync and RunOnStream refused with
// npu.ErrCapturing, Free panics), so model code that runs under it and
// gives the eager run's results uses graphs the way a device backend
// needs: fixed tensors, host values frozen at capture, metadata uploaded
// before each launch. It does not offer npu.SampleReducer (the engine's
// sampling then downloads whole rows, which gives the same tokens).
package graphtest

import (
	"errors"
	"fmt"

	"github.com/npuserve/npuserve/npu"
)

// Backend is the capturing wrapper of an inner backend.
type Backend struct {
	npu.Backend
	capturing bool
	ops       []func()
	err       error // first refused call of the running capture

	// Captures and Launches count the graphs made and replays run.
	Captures, Launches int
}

var (
	_ npu.Backend       = (*Backend)(nil)
	_ npu.GraphCapturer = (*Backend)(nil)
	_ npu.StreamRunner  = (*Backend)(nil)
)

// New wraps inner.
func New(inner npu.Backend) *Backend { return &Backend{Backend: inner} }

// Name is the inner backend's name with a "+graphs" suffix.
func (fb *Backend) Name() string { return fb.Backend.Name() + "+graphs" }

// op records fn while capturing, else runs it.
func (fb *Backend) op(fn func()) {
	if fb.capturing {
		fb.ops = append(fb.ops, fn)
		return
	}
	fn()
}

// refuse records and returns the refusal of call during a capture (nil
// when not capturing).
func (fb *Backend) refuse(call string) error {
	if !fb.capturing {
		return nil
	}
	err := fmt.Errorf("graphtest: %s during graph capture: %w", call, npu.ErrCapturing)
	if fb.err == nil {
		fb.err = err
	}
	return err
}

// fixLayout copies a layout so that its host values are those of the
// call, as a device graph bakes them in.
func fixLayout(l *npu.SeqLayout) *npu.SeqLayout {
	if l == nil {
		return nil
	}
	c := *l
	return &c
}

// Alloc is refused while capturing.
func (fb *Backend) Alloc(dt npu.DType, shape ...int) (*npu.Tensor, error) {
	if err := fb.refuse(fmt.Sprintf("Alloc %v %v", dt, shape)); err != nil {
		return nil, err
	}
	return fb.Backend.Alloc(dt, shape...)
}

// FromHost is refused while capturing.
func (fb *Backend) FromHost(dt npu.DType, data []byte, shape ...int) (*npu.Tensor, error) {
	if err := fb.refuse("FromHost"); err != nil {
		return nil, err
	}
	return fb.Backend.FromHost(dt, data, shape...)
}

// Upload is refused while capturing.
func (fb *Backend) Upload(dst *npu.Tensor, src []byte) error {
	if err := fb.refuse("Upload"); err != nil {
		return err
	}
	return fb.Backend.Upload(dst, src)
}

// Download is refused while capturing.
func (fb *Backend) Download(dst []byte, src *npu.Tensor) error {
	if err := fb.refuse("Download"); err != nil {
		return err
	}
	return fb.Backend.Download(dst, src)
}

// Sync is refused while capturing.
func (fb *Backend) Sync() error {
	if err := fb.refuse("Sync"); err != nil {
		return err
	}
	return fb.Backend.Sync()
}

// Free panics while capturing.
func (fb *Backend) Free(t *npu.Tensor) {
	if fb.capturing {
		panic(fmt.Sprintf("graphtest: Free of %v during graph capture", t))
	}
	fb.Backend.Free(t)
}

// RunOnStream is refused while capturing.
func (fb *Backend) RunOnStream(fn func() error) error {
	if err := fb.refuse("RunOnStream"); err != nil {
		return err
	}
	return npu.RunOnStream(fb.Backend, fn)
}

// PrepareQuant converts a weight: refused while capturing (it allocates).
func (fb *Backend) PrepareQuant(w *npu.QuantWeight) {
	if fb.refuse("PrepareQuant") != nil {
		return
	}
	fb.Backend.PrepareQuant(w)
}

// BeginCapture starts recording.
func (fb *Backend) BeginCapture() error {
	if fb.capturing {
		return errors.New("graphtest: BeginCapture: a capture is already running")
	}
	fb.capturing, fb.ops, fb.err = true, nil, nil
	return nil
}

// EndCapture returns the recorded ops as a Graph, or the first refused
// call.
func (fb *Backend) EndCapture() (npu.Graph, error) {
	if !fb.capturing {
		return nil, errors.New("graphtest: EndCapture without BeginCapture")
	}
	ops, err := fb.ops, fb.err
	fb.capturing, fb.ops, fb.err = false, nil, nil
	if err != nil {
		return nil, err
	}
	fb.Captures++
	return &graph{be: fb, ops: ops}, nil
}

// graph is a recorded run of ops.
type graph struct {
	be     *Backend
	ops    []func()
	closed bool
}

// Launch runs the recorded ops on the inner backend.
func (g *graph) Launch() error {
	switch {
	case g.closed:
		return errors.New("graphtest: Launch of a closed graph")
	case g.be.capturing:
		return g.be.refuse("Graph.Launch")
	}
	g.be.Launches++
	for _, fn := range g.ops {
		fn()
	}
	return nil
}

// Bytes is 0: the ops' scratch is the inner backend's.
func (g *graph) Bytes() int64 { return 0 }

// Close drops the recorded ops.
func (g *graph) Close() error {
	g.ops, g.closed = nil, true
	return nil
}
