package cuda

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/npuserve/npuserve/npu"
)

// CUDA graphs (npu.GraphCapturer): the stream is captured in thread-local
// mode, with the capturing goroutine locked to its OS thread from
// BeginCapture to EndCapture, so calls the driver cannot capture fail
// only for this backend's capture, not for other threads' work. The ops'
// own scratch (temp) comes from the stream-ordered allocator, whose
// allocations and frees inside a capture become graph memory nodes: each
// graph owns fixed scratch addresses, reported by Graph.Bytes (the
// device's graph-memory growth from the capture through its upload). Without that allocator a capture is refused: op scratch from
// cuMemAlloc would be freed under the graph.

var _ npu.GraphCapturer = (*Backend)(nil)

// errCapture wraps npu.ErrCapturing for the call named.
func errCapture(call string) error {
	return fmt.Errorf("cuda: %s during graph capture: %w", call, npu.ErrCapturing)
}

// BeginCapture starts capturing the stream. It waits for the work
// enqueued before it and returns that work's failure instead of starting.
func (b *Backend) BeginCapture() error {
	switch {
	case b.capturing:
		return errors.New("cuda: BeginCapture: a capture is already running")
	case !drvHasGraphs():
		return errors.New("cuda: the driver lacks the CUDA graph API (cuStreamBeginCapture_v2, cuGraphInstantiateWithFlags): update the NVIDIA driver")
	case !b.asyncAlloc:
		return errors.New("cuda: graph capture needs the stream-ordered allocator (cuMemAllocAsync), which this driver or GPU lacks")
	}
	if err := b.Sync(); err != nil {
		return err
	}
	if used, reserved, err := drvGraphMem(b.ctx, b.dev); err == nil {
		b.capBase = max(used, reserved)
	}
	runtime.LockOSThread()
	if err := drvBeginCapture(b.ctx, b.stream); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("cuda: BeginCapture: %w", err)
	}
	b.capturing = true
	return nil
}

// EndCapture ends the capture and instantiates the graph. The first
// failure of a captured call (a refused Alloc, a launch the driver
// rejected) fails the capture.
func (b *Backend) EndCapture() (npu.Graph, error) {
	if !b.capturing {
		return nil, errors.New("cuda: EndCapture without BeginCapture")
	}
	exec, err := drvEndCapture(b.ctx, b.stream)
	b.capturing = false
	runtime.UnlockOSThread()
	if b.err != nil {
		err, b.err = b.err, nil
		if exec != 0 {
			_ = drvGraphExecDestroy(b.ctx, exec)
		}
		return nil, fmt.Errorf("cuda: graph capture failed: %w", err)
	}
	if err != nil {
		if exec != 0 {
			_ = drvGraphExecDestroy(b.ctx, exec)
		}
		return nil, fmt.Errorf("cuda: graph capture failed: %w", err)
	}
	g := &graph{be: b, exec: exec, checked: b.errDirty}
	// Map the graph's memory now (cuGraphUpload, without running it), so
	// that Bytes is known and the first replay is not slower; a driver
	// without it maps at the first launch (Bytes is then 0).
	if err := drvGraphUpload(b.ctx, exec, b.stream); err != nil && !symbolMissing(err) {
		_ = g.Close()
		return nil, fmt.Errorf("cuda: uploading the captured graph: %w", err)
	}
	if err := b.Sync(); err != nil {
		_ = g.Close()
		return nil, fmt.Errorf("cuda: uploading the captured graph: %w", err)
	}
	if used, reserved, err := drvGraphMem(b.ctx, b.dev); err == nil {
		g.bytes = max(0, max(used, reserved)-b.capBase)
	}
	return g, nil
}

// graph is one instantiated CUDA graph of a Backend.
type graph struct {
	be      *Backend
	exec    uintptr
	bytes   int64
	checked bool // it holds kernels that may report a device error
}

// Launch enqueues the graph on the backend's stream.
func (g *graph) Launch() error {
	b := g.be
	switch {
	case g.exec == 0:
		return errors.New("cuda: Launch of a closed graph")
	case b.capturing:
		return errCapture("Graph.Launch")
	}
	if g.checked {
		b.errDirty = true
	}
	if err := drvGraphLaunch(b.ctx, g.exec, b.stream); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	return nil
}

// Bytes is the graph memory the graph added (its ops' scratch).
func (g *graph) Bytes() int64 { return g.bytes }

// Close waits for the stream and destroys the graph.
func (g *graph) Close() error {
	if g.exec == 0 {
		return nil
	}
	b := g.be
	err := drvStreamSync(b.ctx, b.stream)
	if derr := drvGraphExecDestroy(b.ctx, g.exec); err == nil {
		err = derr
	}
	g.exec = 0
	_ = drvGraphMemTrim(b.ctx, b.dev)
	return err
}

// symbolMissing reports whether err is the shim's "optional symbol
// missing".
func symbolMissing(err error) bool {
	var ce *cuError
	return errors.As(err, &ce) && ce.Code == shimSymbolMissing
}
