// Package nccl is the NCCL transport of package hccl, registered as
// "nccl" (npu.TransportOf("cuda")): NVIDIA's collective library on the
// device tensors of the CUDA backend (npu/cuda, which links this package).
//
// libnccl.so.2 (or the path in NPUSERVE_NCCL_LIBRARY) is loaded at run time
// through a small cgo/dlopen shim (shim.c, lib.go) with our own
// declarations; nothing of NCCL or CUDA is needed to build, and a missing
// library is an error wrapping hccl.ErrUnavailable that names it. The root
// info is the ncclUniqueId, "nccl:<base64 of 128 bytes>", made by
// NewRootInfo (ncclGetUniqueId) in rank 0's process, which hosts NCCL's
// bootstrap root until the ranks have joined.
//
// Each rank's hccl.Options.Backend is its *cuda.Backend: collectives are
// enqueued on the backend's stream, so they run after the ops that made
// their inputs and before those that use their outputs, and every call
// then waits for the stream (hccl.Comm's contract: it returns once the
// operation is complete). NCCL calls for a GPU go through one OS thread
// with the GPU's context current. Communicators are created non-blocking
// (ncclCommInitRankConfig, blocking = 0), so Init honours InitTimeout and
// every wait polls, every 5 ms, the stop flag (Abort, Close),
// ncclCommGetAsyncError and the deadline while a helper goroutine
// synchronises the stream; on a timeout or failure the communicator is
// aborted (ncclCommAbort, which stops NCCL's kernels and closes its
// connections, so the peers fail too) and poisoned. The timeout counts
// from the call, so it includes the backend's work queued before the
// collective.
//
// Reductions take F32, BF16, F16, I8, I32 and I64 with sum, prod, max and
// min (hccl.Supported); data movement (AllGather, AllToAll(V) as grouped
// ncclSend/ncclRecv, Broadcast, Send/Recv) moves bytes, so any dtype.
// Barrier is an all-reduce of a 4-byte scratch tensor. NCCL's reduction
// order is its own, so sums may differ from the TCP transport's in the
// last bits; an all-reduce gives every rank the same bits.
//
// What NCCL cannot do that the TCP transport does: it does not check that
// the ranks called the same collective (a mismatch hangs until the
// timeout, or may complete with wrong data), a timeout does not name the
// missing rank, and Abort cannot pass its reason to the peers (they see
// their collective fail, or time out). Collectives sync the stream, so
// they cannot be captured in a CUDA graph yet.
//
// Status, honestly (2026-12): built and vetted here, and the tests that
// need no GPU pass here (the shim's table, root infos, error kinds, the
// library missing or not NCCL, argument checks). The GPU tests (gpu_test.go:
// the hccltest conformance suite on one rank and on two, ordering against
// the backend's ops, Init timeout, Abort, operation timeout) have not run
// on a GPU yet when this was written: run them with
// `tools/cuda/run-on-gpu.sh build-all` here and `STAGES=nccl
// tools/cuda/run-on-gpu.sh session` there (single GPU: the size-1 suite and
// the single-rank tests; the two-rank suite and hccltest's failure cases
// need the nvidia-h200-x2 kind and skip otherwise).
package nccl
