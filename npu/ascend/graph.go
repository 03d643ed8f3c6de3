//go:build cgo

package ascend

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"strings"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/ascend/acl"
)

// Graph capture (npu.GraphCapturer) with ACL's model runtime instances:
// aclmdlRICaptureBegin / aclmdlRICaptureEnd on the backend's stream,
// aclmdlRIExecuteAsync to replay, aclmdlRIDestroy (ascend-api.md §5).
//
// Everything runs on the device thread, which holds the context and is
// the one thread that begins and ends a capture (rule 6). The capture is
// THREAD_LOCAL: the synchronous memory calls are refused on the device
// thread only, so other devices' threads in the process (TP ranks) keep
// working while this one captures. Between BeginCapture and EndCapture:
//
//   - every aclnn executor is made repeatable right after its phase 1
//     (aclSetAclOpExecutorRepeatable) and belongs to the graph, which
//     destroys it (aclDestroyAclOpExecutor) when it is closed: phase 2 is
//     issued once per replay, and aclnn's executors are single-use
//     otherwise (§3);
//   - operator workspaces and op scratch (casts, rstd, composed ops'
//     intermediates, RMSNorm's unit gamma when first needed) are
//     aclrtMalloc'd for the graph and freed with it (rule 5: fixed
//     addresses until aclmdlRIDestroy); Graph.Bytes is their sum;
//   - Alloc, FromHost, Upload, Download and Sync return an error wrapping
//     npu.ErrCapturing and fail the capture (no query or sync of a stream
//     during a capture, rule 2; Upload's pinned staging buffer would be
//     freed under the graph); Free panics. Conv1d, KDA, DSAIndex and
//     SparseMLA of a batch that is not one row per sequence plan on the
//     host from the layout (hostread.go, dsa.go, mla.go) and fail a
//     capture; their decode forms (decode.go) plan on the device and
//     are captured. MoE
//     plans its routing on the device (moe.go), so a captured MoE
//     replays whatever routing its inputs hold.
//
// What a real CANN may do differently is unverified (the code has run
// against the stand-in only): in particular whether captured phase 2 of a
// repeatable executor replays as the stand-in assumes, and whether
// aclrtMalloc inside a capture is allowed (rule 3 lists only memset and
// memcpy as unsafe; torch_npu's private graph pool suggests it is).

var _ npu.GraphCapturer = (*Backend)(nil)

// capture is the state of a capture in progress, then of its graph: the
// repeatable executors and the device memory the graph owns.
type capture struct {
	execs   []C.uintptr_t
	mem     []uintptr
	bytes   int64
	ws      uintptr // operator workspace of the graph's ops (stream order)
	wsBytes int
	// singleUse leaves executors single-use (tests: it shows the
	// stand-in's rule against replaying them).
	singleUse bool
}

// errCapture wraps npu.ErrCapturing for the call named.
func errCapture(call string) error {
	return fmt.Errorf("ascend: %s during graph capture: %w", call, npu.ErrCapturing)
}

// refuse fails the capture with call's refusal and returns it.
func (b *Backend) refuse(call string) error {
	err := errCapture(call)
	b.do(func() { b.fail(err) })
	return err
}

// graphMissing names what this CANN lacks for graph capture ("" if none).
func graphMissing() string {
	var miss []string
	for _, s := range acl.GraphSymbols {
		if !acl.Has(s) {
			miss = append(miss, s)
		}
	}
	if C.npu_executor_api() == 0 {
		miss = append(miss, "aclSetAclOpExecutorRepeatable/aclDestroyAclOpExecutor (libnnopbase)")
	}
	return strings.Join(miss, ", ")
}

// BeginCapture starts capturing the stream. It waits for the work
// enqueued before it and returns that work's failure instead of starting.
func (b *Backend) BeginCapture() error {
	if b.cap != nil {
		return errors.New("ascend: BeginCapture: a capture is already running")
	}
	if miss := graphMissing(); miss != "" {
		return fmt.Errorf("ascend: graph capture needs %s, which this CANN lacks", miss)
	}
	if err := b.Sync(); err != nil {
		return err
	}
	var err error
	b.do(func() {
		if err = acl.CaptureBegin(b.stream, acl.CaptureModeThreadLocal); err == nil {
			b.cap = &capture{}
		}
	})
	if err != nil {
		return fmt.Errorf("ascend: BeginCapture: %w", err)
	}
	return nil
}

// EndCapture ends the capture and returns its graph. The first failure
// of a captured call (a refused Alloc, an operator's phase 1 or phase 2)
// fails the capture; the backend is eager again either way.
func (b *Backend) EndCapture() (npu.Graph, error) {
	if b.cap == nil {
		return nil, errors.New("ascend: EndCapture without BeginCapture")
	}
	var g *graph
	var err error
	b.do(func() {
		cp := b.cap
		b.cap = nil
		model, eerr := acl.CaptureEnd(b.stream)
		err, b.err = b.err, nil
		if err == nil {
			err = eerr
		}
		if err != nil {
			if model != 0 {
				_ = acl.DestroyModel(model)
			}
			cp.release() // nothing of it ran
			return
		}
		g = &graph{be: b, model: model, cap: cp}
	})
	if err != nil {
		return nil, fmt.Errorf("ascend: graph capture failed: %w", err)
	}
	return g, nil
}

// endCaptureForClose abandons a capture in progress (device thread).
func (b *Backend) endCaptureForClose() {
	if b.cap == nil {
		return
	}
	if model, _ := acl.CaptureEnd(b.stream); model != 0 {
		_ = acl.DestroyModel(model)
	}
	b.cap.release()
	b.cap = nil
}

// keep makes the executor of a captured operator repeatable and the
// graph's (device thread); false when it could not (the capture fails).
func (cp *capture) keep(b *Backend, name string, ex C.uintptr_t) bool {
	if cp.singleUse {
		return true
	}
	if rc := C.npu_executor_repeatable(ex); rc != 0 {
		b.fail(aclnnError("aclSetAclOpExecutorRepeatable ("+name+")", rc))
		return false
	}
	cp.execs = append(cp.execs, ex)
	return true
}

// own makes n bytes of device memory at p the graph's.
func (cp *capture) own(p uintptr, n int) {
	cp.mem = append(cp.mem, p)
	cp.bytes += int64(n)
}

// workspace is Backend.workspace for a captured operator: the graph's own
// buffer, grown as needed (the smaller ones stay with the graph: the ops
// recorded before still use them).
func (cp *capture) workspace(b *Backend, n int) (uintptr, error) {
	if n <= cp.wsBytes {
		return cp.ws, nil
	}
	size := max(n, 2*cp.wsBytes, 1<<16)
	p, err := b.malloc(size)
	if err != nil {
		return 0, err
	}
	cp.own(p, size)
	cp.ws, cp.wsBytes = p, size
	return p, nil
}

// release destroys the executors and frees the memory (device thread;
// nothing may still use them).
func (cp *capture) release() {
	for _, ex := range cp.execs {
		_ = C.npu_executor_destroy(ex)
	}
	for _, p := range cp.mem {
		_ = acl.Free(p)
	}
	cp.execs, cp.mem, cp.bytes = nil, nil, 0
}

// later frees device memory p (n bytes) at the next Sync, or with the
// graph when it belongs to a capture (device thread).
func (b *Backend) later(p uintptr, n int) {
	if b.cap != nil {
		b.cap.own(p, n)
		return
	}
	b.pending = append(b.pending, p)
}

// graph is one captured model of a Backend.
type graph struct {
	be    *Backend
	model uintptr
	cap   *capture
}

// Launch enqueues the graph on the backend's stream (aclmdlRIExecuteAsync).
func (g *graph) Launch() error {
	b := g.be
	switch {
	case g.model == 0:
		return errors.New("ascend: Launch of a closed graph")
	case b.cap != nil:
		return errCapture("Graph.Launch")
	}
	var err error
	b.do(func() { err = acl.ExecuteModel(g.model, b.stream) })
	if err != nil {
		return fmt.Errorf("ascend: %w", err)
	}
	return nil
}

// Bytes is the device memory the graph owns (its workspaces and scratch).
func (g *graph) Bytes() int64 { return g.cap.bytes }

// Close waits for the stream, destroys the model and releases the
// graph's executors and memory. A failure of the work it waited for is
// held for the next Sync or Download, like any op's.
func (g *graph) Close() error {
	if g.model == 0 {
		return nil
	}
	b := g.be
	if b.cap != nil {
		return errCapture("Graph.Close")
	}
	var err error
	b.do(func() {
		if serr := acl.SynchronizeStream(b.stream); serr != nil {
			b.fail(fmt.Errorf("ascend: the stream failed: %w", serr))
		}
		err = acl.DestroyModel(g.model)
		g.cap.release()
	})
	g.model = 0
	if err != nil {
		return fmt.Errorf("ascend: %w", err)
	}
	return nil
}

// ReplayableOps implements npu.GraphLimiter and returns nil: a decode
// step replays. Its Conv1d, KDA, DSAIndex and SparseMLA take their decode
// forms (decode.go) for a batch of one row per sequence, which read the
// layout from its device tensors, so a replay follows whatever layout
// its fixed buffers were given; the other ops (GEMMs, norms,
// elementwise, TopK, MoE and MoEQ, whose routing is planned on the
// device) never depend on the layout. A prefill or mixed batch would
// plan those four ops on the host (hostread.go, dsa.go, mla.go) and bake
// its layout in: such an op refuses a capture (it fails with
// npu.ErrCapturing), so what replays is decode steps only, which is what
// engines capture (FULL_DECODE_ONLY).
func (b *Backend) ReplayableOps() error { return nil }
