package cuda

import (
	"fmt"

	_ "github.com/npuserve/npuserve/hccl/nccl" // links the "nccl" transport with the backend (npu.TransportOf("cuda"))
)

// Accessors for device transports (hccl/nccl): what a collective library
// needs to work on this backend's tensors in order with its ops. Tensors'
// device addresses come from their buffers, which implement
// DevicePointer() uintptr and DeviceID() int (memory.go).

// Ordinal is the index of the backend's GPU among those this process sees
// (New's argument).
func (b *Backend) Ordinal() int { return b.ordinal }

// StreamHandle is the CUstream every op, copy and allocation of the
// backend is enqueued on. Work that a library enqueues there runs after
// the backend's earlier ops and before its later ones.
func (b *Backend) StreamHandle() uintptr { return b.stream }

// ContextHandle is the backend's CUcontext (the GPU's primary context, as
// the CUDA runtime and libraries built on it use).
func (b *Backend) ContextHandle() uintptr { return b.ctx }

// BindContext makes the backend's context current on the calling OS
// thread, for a caller that has locked its goroutine to the thread and
// then calls a library that works on the current context (NCCL). Every
// shim call binds the context it is given and leaves it current; this one
// asks the driver for the free memory, the cheapest call that takes a
// context.
func (b *Backend) BindContext() error {
	if b.closed {
		return errClosed
	}
	_, _, err := drvMemGetInfo(b.ctx)
	return err
}

// SyncStream waits for the work enqueued on the stream so far. Unlike
// Sync it does not report or clear the failures the backend holds for its
// next Sync, and it touches no other backend state, so a transport may
// call it from another goroutine while the backend's goroutine is blocked
// in a collective.
func (b *Backend) SyncStream() error {
	if err := drvStreamSync(b.ctx, b.stream); err != nil {
		return fmt.Errorf("cuda: the stream failed: %w", err)
	}
	return nil
}
