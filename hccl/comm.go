package hccl

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/npuserve/npuserve/npu"
)

// Comm is one rank's handle on a communicator: a fixed group of Size()
// ranks, numbered 0..Size()-1, that run collectives together.
//
// Every rank must call the same collectives in the same order with matching
// arguments (dtype, element counts, op, root). That is the caller's
// contract, and in serving it has to hold by construction: idle DP ranks run
// dummy steps so every rank reaches every collective (serving-compat.md
// §3.5). Implementations check what they can and fail loudly on a mismatch
// instead of hanging.
//
// All methods block until the operation has completed on this rank, fail,
// or time out (Options.Timeout); none hangs. Any failure poisons the
// communicator: later calls fail at once with an error that wraps
// ErrPoisoned and the first failure. A Comm is driven by one goroutine (the
// rank's step loop); only Abort and Close may be called from another
// goroutine, to stop an operation in flight.
//
// Tensors are npu.Tensors of the backend the implementation serves (host
// tensors of the CPU backend for the TCP transport, device tensors for HCCL).
// Element counts are in elements of the tensor's dtype.
type Comm interface {
	// Rank is this rank's index in the communicator.
	Rank() int
	// Size is the number of ranks.
	Size() int

	// AllReduce replaces t on every rank with the elementwise reduction of
	// t over all ranks. Every rank gets bit-identical results (see the
	// package doc for the reduction order).
	AllReduce(t *npu.Tensor, op ReduceOp) error
	// AllGather concatenates in from every rank, in rank order, into out:
	// out.Numel() == Size()*in.Numel() and block r of out is rank r's in.
	// in may be block Rank() of out (in place).
	AllGather(out, in *npu.Tensor) error
	// ReduceScatter reduces in (Size() blocks of out.Numel() elements)
	// over all ranks and leaves block Rank() of the result in out.
	ReduceScatter(out, in *npu.Tensor, op ReduceOp) error
	// AllToAll sends block j of in to rank j and stores the block received
	// from rank i as block i of out; in and out hold Size() equal blocks
	// and must not overlap.
	AllToAll(out, in *npu.Tensor) error
	// AllToAllV is AllToAll with per-rank counts: inCounts[j] elements go
	// to rank j and outCounts[i] elements come from rank i, packed in rank
	// order from element 0 of in and out (displacements are the prefix
	// sums). in and out may be larger than the counts need (fixed-capacity
	// buffers); elements past the packed data are left alone. Every rank's
	// inCounts[j] must equal rank j's outCounts[Rank()].
	AllToAllV(out *npu.Tensor, outCounts []int, in *npu.Tensor, inCounts []int) error
	// Broadcast copies root's t into t on every other rank.
	Broadcast(t *npu.Tensor, root int) error
	// Barrier returns once every rank has entered it.
	Barrier() error
	// Send sends t to peer, which must call Recv with a tensor of the same
	// dtype and element count. Sends and receives between two ranks match
	// in call order. A Send may block until the peer receives (HCCL), so
	// order pairs so that they cannot wait on each other in a cycle.
	Send(t *npu.Tensor, peer int) error
	// Recv receives into t what peer sent with Send.
	Recv(t *npu.Tensor, peer int) error

	// Abort poisons the communicator with reason: an operation in flight
	// fails promptly, later ones fail fast, and the peers are told (so they
	// fail fast too instead of waiting for their timeout). For a liveness
	// monitor that learns of a dead rank by other means. Safe to call from
	// any goroutine, any number of times.
	Abort(reason error)
	// Close releases the connections and device resources. An operation in
	// flight fails; later calls return ErrClosed. Safe to call from any
	// goroutine, any number of times.
	Close() error
}

// ReduceOp is the reduction of AllReduce and ReduceScatter.
type ReduceOp uint8

// Reductions. The numeric values are HCCL's HcclReduceOp.
const (
	Sum  ReduceOp = 0
	Prod ReduceOp = 1
	Max  ReduceOp = 2
	Min  ReduceOp = 3
)

func (op ReduceOp) String() string {
	switch op {
	case Sum:
		return "sum"
	case Prod:
		return "prod"
	case Max:
		return "max"
	case Min:
		return "min"
	}
	return fmt.Sprintf("ReduceOp(%d)", uint8(op))
}

// Algorithm selects how the TCP transport runs AllReduce. HCCL chooses its
// own algorithm (HCCL_ALGO) and ignores this.
type Algorithm uint8

const (
	// AlgoAuto uses AlgoDirect below DirectThresholdBytes and
	// AlgoReduceScatterAllGather above it.
	AlgoAuto Algorithm = iota
	// AlgoDirect sends the whole buffer to every peer and reduces locally:
	// one round trip, (Size()-1)×N bytes out per rank. Best for the small
	// tensors of decode steps.
	AlgoDirect
	// AlgoReduceScatterAllGather reduces block r on rank r (every peer
	// sends it block r) and then all-gathers the reduced blocks:
	// 2×(Size()-1)/Size()×N bytes out per rank, the same volume as a ring
	// and bandwidth-optimal, in two rounds instead of a ring's 2×(Size()-1).
	AlgoReduceScatterAllGather
)

// DirectThresholdBytes is where AlgoAuto switches from AlgoDirect to
// AlgoReduceScatterAllGather: below it the second round trip costs more
// than halving the bytes saves (BenchmarkAlgorithms, loopback; revisit on
// a real network). Both algorithms give bit-identical results.
const DirectThresholdBytes = 32 << 10

func (a Algorithm) String() string {
	switch a {
	case AlgoAuto:
		return "auto"
	case AlgoDirect:
		return "direct"
	case AlgoReduceScatterAllGather:
		return "reduce-scatter+all-gather"
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// Default timeouts. The operation timeout is far below HCCL's 1836 s
// default (HCCL_EXEC_TIMEOUT) so a dead rank is noticed in about a minute
// at worst; serving sets it lower still.
const (
	DefaultTimeout     = 60 * time.Second
	DefaultInitTimeout = 120 * time.Second
)

// Options configure Init.
type Options struct {
	// Timeout bounds every operation after Init, measured from the call;
	// 0 means DefaultTimeout. An operation that does not complete in time
	// fails with an error wrapping ErrTimeout that names the rank(s) it was
	// waiting for, and poisons the communicator.
	Timeout time.Duration
	// InitTimeout bounds Init: ranks that start later than this after the
	// first one make Init fail on every rank. 0 means DefaultInitTimeout.
	InitTimeout time.Duration
	// Name labels the communicator in errors ("tp", "ep", "dp"), since a
	// rank usually holds several. Every rank must use the same name (the
	// TCP transport checks).
	Name string
	// Algorithm is the TCP AllReduce algorithm (tests force each one).
	Algorithm Algorithm
	// Device is the logical accelerator id this rank drives (HCCL only;
	// after ASCEND_RT_VISIBLE_DEVICES remapping).
	Device int
	// HCCLBufferMB sets HcclCommConfig.hcclBufferSize (HCCL only); 0 keeps
	// HCCL_BUFFSIZE or HCCL's default (200 MB).
	HCCLBufferMB int
	// Stream is the aclrtStream to enqueue collectives on (HCCL only): the
	// Ascend backend's compute stream, so collectives are ordered after the
	// ops that produce their inputs. 0 gives the communicator its own
	// stream, and the caller must then Sync the backend first.
	Stream uintptr
	// Backend is the device backend whose tensors the communicator moves
	// and on whose stream it enqueues its collectives (NCCL: the rank's
	// *cuda.Backend, required), so they are ordered with the backend's
	// ops. The TCP and HCCL transports ignore it.
	Backend npu.Backend
}

// WithDefaults returns o with zero fields replaced by their defaults.
func (o Options) WithDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.InitTimeout <= 0 {
		o.InitTimeout = DefaultInitTimeout
	}
	return o
}

// Errors that failures wrap; test with errors.Is.
var (
	// ErrTimeout: an operation or Init did not complete within its limit.
	ErrTimeout = errors.New("timed out")
	// ErrPeerLost: a peer's connection broke (process died, node gone,
	// network down) or the peer closed its communicator.
	ErrPeerLost = errors.New("peer lost")
	// ErrPeerAborted: a peer failed and told us why.
	ErrPeerAborted = errors.New("peer aborted")
	// ErrMismatch: ranks called different collectives, or the same one
	// with different dtypes, counts, ops or roots.
	ErrMismatch = errors.New("collective mismatch")
	// ErrPoisoned: the communicator failed earlier and cannot be used.
	ErrPoisoned = errors.New("communicator failed earlier")
	// ErrClosed: the communicator was closed.
	ErrClosed = errors.New("communicator closed")
	// ErrBootstrap: Init was rejected (wrong session, rank or size) or a
	// rank could not reach another.
	ErrBootstrap = errors.New("bootstrap failed")
	// ErrInvalid: bad arguments (shapes, dtypes, ranks, tensor location).
	ErrInvalid = errors.New("invalid argument")
	// ErrUnavailable: the transport cannot be used in this process (HCCL
	// libraries missing, not linked in, built without cgo).
	ErrUnavailable = errors.New("transport unavailable")
)

// OpError describes a failed operation. Its message names the
// communicator, this rank, the operation and its sequence number, the peer
// rank(s) involved and the time spent, e.g.
//
//	hccl[tp] rank 0/4: AllReduce #12 (F32[4096] sum): timed out after 1.001s (limit 1s) waiting for rank 3
type OpError struct {
	Comm    string        // Options.Name
	Rank    int           // this rank
	Size    int           // communicator size
	Op      string        // "AllReduce", "Init", ...
	Seq     uint64        // collective sequence number, from 1; 0 for Init and point-to-point
	Detail  string        // dtype, shape and op of the call
	Peers   []int         // the peer rank(s) involved, ascending; empty if unknown
	Elapsed time.Duration // from the call to the failure
	Limit   time.Duration // the timeout in force
	Err     error         // the cause; wraps one of the sentinel errors
}

// Peer is the first peer involved, or -1 if unknown.
func (e *OpError) Peer() int {
	if len(e.Peers) == 0 {
		return -1
	}
	return e.Peers[0]
}

func (e *OpError) Error() string {
	var b strings.Builder
	b.WriteString("hccl")
	if e.Comm != "" {
		fmt.Fprintf(&b, "[%s]", e.Comm)
	}
	fmt.Fprintf(&b, " rank %d/%d: %s", e.Rank, e.Size, e.Op)
	if e.Seq > 0 {
		fmt.Fprintf(&b, " #%d", e.Seq)
	}
	if e.Detail != "" {
		fmt.Fprintf(&b, " (%s)", e.Detail)
	}
	b.WriteString(": ")
	if errors.Is(e.Err, ErrTimeout) && !errors.Is(e.Err, ErrPeerAborted) {
		fmt.Fprintf(&b, "timed out after %v (limit %v)", e.Elapsed.Round(time.Millisecond), e.Limit)
		if len(e.Peers) > 0 {
			fmt.Fprintf(&b, " waiting for %s", rankList(e.Peers))
		}
		if msg := e.Err.Error(); msg != "" && msg != ErrTimeout.Error() {
			fmt.Fprintf(&b, ": %s", msg)
		}
		return b.String()
	}
	b.WriteString(e.Err.Error())
	if e.Elapsed >= time.Millisecond {
		fmt.Fprintf(&b, " (after %v)", e.Elapsed.Round(time.Millisecond))
	}
	return b.String()
}

func (e *OpError) Unwrap() error { return e.Err }

// rankList formats ranks as "rank 3" or "ranks 1, 3".
func rankList(ranks []int) string {
	r := append([]int(nil), ranks...)
	sort.Ints(r)
	s := make([]string, len(r))
	for i, v := range r {
		s[i] = fmt.Sprint(v)
	}
	if len(r) == 1 {
		return "rank " + s[0]
	}
	return "ranks " + strings.Join(s, ", ")
}

// Transport is an implementation of Comm that Init dispatches to by the
// root info's transport name. The TCP transport is built in; the HCCL one
// registers itself when package hccl/ascend is linked in.
type Transport interface {
	// Available says why the transport cannot be used in this process, or
	// returns nil.
	Available() error
	// Init joins the communicator described by ri as rank of size.
	Init(ri RootInfo, rank, size int, opts Options) (Comm, error)
	// NewRootInfo creates the root info of a new communicator of this
	// transport, in the process of its rank 0 (see RootOptions).
	NewRootInfo(o RootOptions) (RootInfo, error)
}

// RootOptions say where a new communicator's root lives: the TCP
// transport listens on ListenHost, HCCL asks the runtime on Device; NCCL
// needs neither (its root listens on the interface NCCL_SOCKET_IFNAME
// picks, in the calling process).
type RootOptions struct {
	// ListenHost is the node's address on the network the ranks share
	// (TCP; default 127.0.0.1).
	ListenHost string
	// Device is the logical accelerator id of rank 0 (HCCL).
	Device int
	// Comm, when its timeouts are set, are the options the communicator
	// will be started with: HCCL sets HCCL_CONNECT_TIMEOUT and
	// HCCL_EXEC_TIMEOUT from them before HcclGetRootInfo, which may read
	// them (the root's rendezvous), as it does before an init.
	Comm Options
}

// NewRootInfoFor creates a root info with the transport called name
// ("" is TCP): how a launcher that knows only its device's transport
// (npu.TransportOf) makes the root infos of its groups.
func NewRootInfoFor(name string, o RootOptions) (RootInfo, error) {
	if name == "" {
		name = TransportTCP
	}
	t, err := lookup(name)
	if err != nil {
		return RootInfo{}, err
	}
	if err := t.Available(); err != nil {
		return RootInfo{}, err
	}
	return t.NewRootInfo(o)
}

// HostBuffers is implemented by communicators whose tensors live in host
// memory (the TCP transport): Memory allocates tensors they can move.
type HostBuffers interface {
	Memory() npu.Memory
}

// MemoryOf returns the memory c's tensors must be allocated in, when c
// says (HostBuffers); device transports move the tensors of their
// device's backend, which the caller holds.
func MemoryOf(c Comm) (npu.Memory, error) {
	if h, ok := c.(HostBuffers); ok {
		return h.Memory(), nil
	}
	return nil, fmt.Errorf("hccl: communicator %T does not provide host buffers: allocate its tensors on the device backend it was created for: %w", c, ErrInvalid)
}

// Transport names.
const (
	TransportTCP  = "tcp"
	TransportHCCL = "hccl"
	TransportNCCL = "nccl"
)

var (
	regMu      sync.Mutex
	transports = map[string]Transport{}
)

// Register makes a transport available to Init under name. It is called
// from the init function of the implementing package.
func Register(name string, t Transport) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := transports[name]; dup {
		panic("hccl: transport " + name + " registered twice")
	}
	transports[name] = t
}

// transportNames lists the registered transports, sorted.
func transportNames() []string {
	regMu.Lock()
	defer regMu.Unlock()
	names := make([]string, 0, len(transports))
	for n := range transports {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func lookup(name string) (Transport, error) {
	regMu.Lock()
	t, ok := transports[name]
	regMu.Unlock()
	if !ok {
		if name == TransportHCCL {
			return nil, fmt.Errorf("hccl: transport %q is not linked into this binary (import github.com/npuserve/npuserve/hccl/ascend): %w", name, ErrUnavailable)
		}
		if name == TransportNCCL {
			return nil, fmt.Errorf("hccl: transport %q is not linked into this binary (import github.com/npuserve/npuserve/hccl/nccl, or the npu/cuda backend that links it): %w", name, ErrUnavailable)
		}
		return nil, fmt.Errorf("hccl: transport %q is not in this build (it has: %s): %w", name, strings.Join(transportNames(), ", "), ErrUnavailable)
	}
	return t, nil
}

// Available says why transport ("tcp", "hccl" or "nccl") cannot be used in this
// process, or returns nil. Launchers call it at start-up so that asking for
// HCCL on a host without CANN fails at once with the reason.
func Available(transport string) error {
	t, err := lookup(transport)
	if err != nil {
		return err
	}
	return t.Available()
}

// Init joins the communicator described by ri as rank of size, like
// HcclCommInitRootInfo: every rank calls it with the same root info and
// size and its own rank, concurrently (within Options.InitTimeout of each
// other). It returns once every rank is connected, or fails on every rank
// with an error naming the cause (a rank that did not join, a rank number
// used twice, sizes that differ, a root info from another session).
//
// A rank that needs several communicators (TP, EP, DP) must create them
// one after another in the same order as every other rank: HCCL's Init
// blocks until all ranks of that communicator have joined, so two ranks
// creating two communicators in opposite orders wait on each other until
// the init timeout.
func Init(ri RootInfo, rank, size int, opts Options) (Comm, error) {
	if ri.transport == "" {
		return nil, fmt.Errorf("hccl: Init with an empty root info: %w", ErrInvalid)
	}
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("hccl: Init rank %d of size %d: rank must be in [0, size): %w", rank, size, ErrInvalid)
	}
	t, err := lookup(ri.transport)
	if err != nil {
		return nil, err
	}
	if err := t.Available(); err != nil {
		return nil, err
	}
	return t.Init(ri, rank, size, opts.WithDefaults())
}

// Supported reports whether op is defined on dtype dt. Reductions take F32,
// BF16, F16, I8, I32 and I64; data movement (AllGather, AllToAll(V),
// Broadcast, Send/Recv) takes any dtype.
func Supported(dt npu.DType, op ReduceOp) bool {
	switch dt {
	case npu.F32, npu.BF16, npu.F16, npu.I8, npu.I32, npu.I64:
	default:
		return false
	}
	return op <= Min
}
