// Package hccl is npuserve's collective communication: one Comm interface
// (all-reduce, all-gather, reduce-scatter, all-to-all(v), broadcast,
// barrier, send/recv) over three transports.
//
//   - "tcp" (this package): a full mesh of TCP connections between the
//     ranks' processes, on one host or many, moving tensors of the CPU
//     backend. It is the transport of CPU serving, of tests, and of the
//     multi-node machinery on machines without NPUs.
//   - "hccl" (package hccl/ascend, linked in by importing it): Huawei's HCCL
//     through cgo, loaded at run time, moving device tensors on Ascend.
//   - "nccl" (package hccl/nccl, linked in by the npu/cuda backend): NVIDIA's
//     NCCL through cgo, loaded at run time, moving the CUDA backend's device
//     tensors on its stream.
//
// # Bootstrap
//
// As with HcclCommInitRootInfo, rank 0 creates a RootInfo (NewRootInfo for
// TCP, ascend.NewRootInfo for HCCL); its String() travels to the other
// ranks by whatever channel the launcher has (flags, environment, the DP
// RPC handshake); every rank calls Init(ri, rank, size, opts). Init returns
// when all ranks are connected, or fails on all of them with the reason: a
// rank that never joined (named), a rank number used twice, ranks started
// with different sizes or communicator names, a root info from another
// launch (the TCP session id; such a rank is turned away, the others carry
// on). Strays on the root's port (scanners, health checks) are ignored.
//
// # Semantics every rank can rely on
//
// Ranks call the same collectives in the same order with matching
// arguments. The TCP transport checks this on every frame (operation,
// sequence number, dtype, op, root, size) and fails at once with
// ErrMismatch, naming both calls, instead of deadlocking or mixing data: a
// rank that skipped a collective is reported at its next one. HCCL cannot
// check; a mismatch there hangs until the timeout.
//
// Reductions are deterministic and identical on every rank. The TCP
// transport reduces in rank order (x0 ∘ x1 ∘ … ∘ x(n-1)) element by
// element; BF16 and F16 are accumulated in fp32 and rounded to
// nearest-even once; integers wrap. Both of its AllReduce algorithms
// (direct for small tensors, reduce-scatter + all-gather for large) use
// that same order, so results do not depend on the size or algorithm
// either. HCCL runs in its deterministic mode (same bits on every rank and
// every run) but in its own order.
//
// # Failures
//
// Every operation has a timeout (Options.Timeout, default 60 s; Init has
// Options.InitTimeout) and fails with an *OpError naming the communicator,
// the rank, the operation and its sequence number, the peer rank(s) it was
// waiting for and the time spent, e.g.
//
//	hccl[ep] rank 0/4: AllToAllV #812 (…): timed out after 2.001s (limit 2s) waiting for rank 3
//
// Errors wrap sentinels for errors.Is: ErrTimeout, ErrPeerLost (a peer's
// process died or its connection broke; noticed at once, not at the
// timeout), ErrPeerAborted (a peer failed and said why; its reason is in
// the message), ErrMismatch, ErrInvalid, ErrBootstrap, ErrClosed. Any
// failure poisons the communicator: later calls fail at once with
// ErrPoisoned wrapping the first failure, and the TCP transport tells the
// peers, so one rank's timeout or bad argument fails every rank within
// milliseconds rather than each waiting for its own timeout. Abort, safe
// from any goroutine, does the same on behalf of a liveness monitor that
// has learnt of a dead node by other means.
//
// The TCP transport's data goes out eagerly: a rank's collective can
// complete before a slow peer has even called it when that peer owes it
// nothing (the root of a Broadcast, a Send); the peer's absence is then
// reported by the next collective that needs it.
//
// # Concurrency and cost
//
// A Comm is driven by one goroutine. Operations on CPU tensors read and
// write the tensors' memory directly (no staging copies, except for odd
// byte sizes); each operation is one round (two for large all-reduces) in
// which every rank talks to all its peers concurrently. On two processes
// over loopback on a busy 2-core machine, a 4 KiB all-reduce takes about
// 25 µs; large all-gathers run at about three quarters of a plain TCP
// stream's speed and large all-reduces at about half (each rank moves as
// many bytes each way as the stream moves one way, and reduces them):
// BenchmarkLoopback.
package hccl
