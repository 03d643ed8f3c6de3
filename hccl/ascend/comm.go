//go:build cgo

package ascend

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"time"
	"unsafe"

	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/ascend/acl"
)

func init() { hccl.Register(hccl.TransportHCCL, transport{}) }

type transport struct{}

func (transport) Available() error { return Available() }

func (transport) Init(ri hccl.RootInfo, rank, size int, opts hccl.Options) (hccl.Comm, error) {
	return initComm(ri, rank, size, opts)
}

func (transport) NewRootInfo(o hccl.RootOptions) (hccl.RootInfo, error) {
	if o.Comm.Timeout > 0 || o.Comm.InitTimeout > 0 {
		applyTimeoutEnv(o.Comm, nil) // before HcclGetRootInfo, as before an init (env.go)
	}
	return NewRootInfo(o.Device)
}

// stuckGrace is how long past an operation's timeout the device thread may
// stay inside CANN before it is declared stuck.
const stuckGrace = 5 * time.Second

// closeDrain bounds Close's wait for the communicator's stream to go idle.
const closeDrain = 5 * time.Second

// NewRootInfo creates the root info of a new HCCL communicator
// (HcclGetRootInfo) on logical device id; call it in rank 0's process and
// pass the String() to every rank's hccl.Init. HCCL picks the bootstrap
// NIC from HCCL_IF_IP / HCCL_SOCKET_IFNAME.
func NewRootInfo(id int) (hccl.RootInfo, error) {
	d, err := getDevice(id)
	if err != nil {
		return hccl.RootInfo{}, err
	}
	var info C.npu_hccl_root_info
	var herr error
	if err := d.do("HcclGetRootInfo", 2*time.Minute, func() {
		if rc := C.npu_HcclGetRootInfo(&info); rc != 0 {
			herr = hcclError("HcclGetRootInfo", rc)
		}
	}); err != nil {
		return hccl.RootInfo{}, err
	}
	if herr != nil {
		return hccl.RootInfo{}, herr
	}
	blob := C.GoBytes(unsafe.Pointer(&info), C.NPU_HCCL_ROOT_INFO_BYTES)
	return hccl.MakeRootInfo(hccl.TransportHCCL, base64.StdEncoding.EncodeToString(blob)), nil
}

// HcclResult names (hccl_types.h).
var resultNames = []string{"SUCCESS", "E_PARA", "E_PTR", "E_MEMORY", "E_INTERNAL", "E_NOT_SUPPORT", "E_NOT_FOUND",
	"E_UNAVAIL", "E_SYSCALL", "E_TIMEOUT", "E_OPEN_FILE_FAILURE", "E_TCP_CONNECT", "E_ROCE_CONNECT",
	"E_TCP_TRANSFER", "E_ROCE_TRANSFER", "E_RUNTIME", "E_DRV", "E_PROFILING", "E_CCE", "E_NETWORK",
	"E_AGAIN", "E_REMOTE", "E_SUSPENDING", "E_OPRETRY_FAIL", "E_OOM"}

// hcclError describes a failed HCCL call, with the kind an hccl caller can
// test for. Call it on the device thread (ACL's message is per thread).
func hcclError(what string, rc C.int) error {
	if rc == C.NPU_SHIM_SYMBOL_MISSING {
		return fmt.Errorf("%s: not in this CANN's libraries", what)
	}
	name := fmt.Sprintf("HcclResult %d", int(rc))
	if int(rc) >= 0 && int(rc) < len(resultNames) {
		name = "HCCL_" + resultNames[rc]
	}
	msg := fmt.Sprintf("%s: %s", what, name)
	if s := C.GoString(C.npu_HcclGetErrorString(rc)); s != "" {
		msg += " (" + s + ")"
	}
	if s := acl.RecentErrMsg(); s != "" {
		msg += ": " + s
	}
	switch rc {
	case 9: // E_TIMEOUT
		return hccl.Errorf(hccl.ErrTimeout, "%s", msg)
	case 11, 12, 13, 14, 19, 21: // TCP/RoCE connect or transfer, network, remote
		return hccl.Errorf(hccl.ErrPeerLost, "%s", msg)
	case 1, 2: // E_PARA, E_PTR
		return hccl.Errorf(hccl.ErrInvalid, "%s", msg)
	}
	return errors.New(msg)
}

// dataTypes maps npu dtypes to HcclDataType.
var dataTypes = map[npu.DType]C.int{
	npu.I8: 0, npu.I32: 2, npu.F16: 3, npu.F32: 4, npu.I64: 5, npu.U8: 7, npu.BF16: 11, npu.F8E4M3: 15,
}

// comm is an HCCL communicator driven from the device's thread.
type comm struct {
	hccl.DeviceComm
	dev       *device
	h         C.uintptr_t // HcclComm
	stream    C.uintptr_t
	ownStream bool
}

var _ hccl.Comm = (*comm)(nil)

func initComm(ri hccl.RootInfo, rank, size int, opts hccl.Options) (hccl.Comm, error) {
	start := time.Now()
	fail := func(err error) error {
		return &hccl.OpError{Comm: opts.Name, Rank: rank, Size: size, Op: "Init", Elapsed: time.Since(start), Limit: opts.InitTimeout, Err: err}
	}
	blob, err := base64.StdEncoding.DecodeString(ri.Data())
	if err != nil || len(blob) != C.NPU_HCCL_ROOT_INFO_BYTES {
		return nil, fail(hccl.Errorf(hccl.ErrInvalid, "not an HCCL root info (%d bytes, want %d)", len(blob), C.NPU_HCCL_ROOT_INFO_BYTES))
	}
	d, err := getDevice(opts.Device)
	if err != nil {
		return nil, fail(err)
	}
	applyTimeoutEnv(opts, nil) // before the process's first HcclCommInitRootInfo (env.go)
	c := &comm{dev: d}
	c.Init(rank, size, opts)
	var info C.npu_hccl_root_info
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&info)), len(blob)), blob)
	var herr error
	err = d.do("HcclCommInitRootInfoConfig", opts.InitTimeout, func() {
		if opts.Stream != 0 {
			c.stream = C.uintptr_t(opts.Stream)
		} else {
			s, err := acl.CreateStream()
			if err != nil {
				herr = err
				return
			}
			c.stream = C.uintptr_t(s)
			c.ownStream = true
		}
		name := C.CString(opts.Name)
		defer C.free(unsafe.Pointer(name))
		var cfg C.npu_hccl_comm_config
		// Deterministic reductions: every rank must get the same bits
		// (lockstep decoding). HCCL's own execution timeout follows ours,
		// so the device gives up about when we do.
		C.npu_hccl_config_init(&cfg, C.uint32_t(max(opts.HCCLBufferMB, 0)), 1, name, C.int32_t(math.Ceil(opts.Timeout.Seconds())))
		if rc := C.npu_HcclCommInitRootInfo(C.uint32_t(size), &info, C.uint32_t(rank), &cfg, &c.h); rc != 0 {
			herr = hcclError(fmt.Sprintf("HcclCommInitRootInfoConfig(rank %d of %d, device %d)", rank, size, opts.Device), rc)
			if c.ownStream {
				_ = acl.DestroyStream(uintptr(c.stream))
			}
		}
	})
	if errors.Is(err, hccl.ErrTimeout) {
		return nil, fail(fmt.Errorf("%w (HCCL waits up to HCCL_CONNECT_TIMEOUT+20 s for the other ranks; are they all started with the same root info and size?)", err))
	}
	if err != nil {
		return nil, fail(err)
	}
	if herr != nil {
		return nil, fail(herr)
	}
	return c, nil
}

// call is one HCCL operation: enqueue on the stream, wait for it with the
// timeout, check HCCL's asynchronous error. enqueue runs on the device
// thread and returns the HcclResult and the call's name.
type call struct {
	name     string
	p2p      bool
	describe func() string
	check    func() error // argument validation, before anything is enqueued
	enqueue  func() (C.int, string)
	cleanup  func() // after the stream is done with host memory (counts)
}

func (c *comm) run(k call) error {
	dc := hccl.DeviceCall{Name: k.name, P2P: k.p2p, Describe: k.describe, Check: k.check}
	return c.Run(dc, nil, func(deadline time.Time) (stuck, failed error) {
		err := c.dev.do(k.name, c.Opts.Timeout+stuckGrace, func() {
			if rc, what := k.enqueue(); rc != 0 {
				failed = hcclError(what, rc)
				return
			}
			failed = c.wait(deadline)
		})
		if err != nil { // the thread is stuck in CANN: leave its host memory alone
			return err, nil
		}
		if k.cleanup != nil {
			k.cleanup()
		}
		return nil, failed
	})
}

// wait waits for the stream (on the device thread) in slices of 100 ms, so
// that Abort and Close take effect promptly, until the deadline.
func (c *comm) wait(deadline time.Time) error {
	for {
		if c.Stop.Load() {
			_ = acl.StreamAbort(uintptr(c.stream))
			return hccl.Errorf(hccl.ErrPoisoned, "aborted while waiting for the stream")
		}
		left := time.Until(deadline)
		if left <= 0 {
			_ = acl.StreamAbort(uintptr(c.stream)) // drop the stuck collective if this CANN can
			return hccl.Errorf(hccl.ErrTimeout, "the collective did not complete on the stream (HCCL does not say which rank is missing: look for the rank that did not reach this call)")
		}
		ms := min(left, 100*time.Millisecond).Milliseconds()
		// A timeout's message was read (and so cleared) by acl's error,
		// so a real failure later reports its own.
		switch err := acl.SynchronizeStreamWithTimeout(uintptr(c.stream), int32(max(ms, 1))); acl.Code(err) {
		case acl.Success:
			return c.asyncError()
		case acl.ErrStreamSyncTimed, acl.ErrWaitTimeout: // not done yet
			continue
		case acl.SymbolMissing: // old CANN: an unbounded wait, bounded by device.do
			if err := acl.SynchronizeStream(uintptr(c.stream)); err != nil {
				return err
			}
			return c.asyncError()
		default:
			return err
		}
	}
}

func (c *comm) asyncError() error {
	var e C.int
	if rc := C.npu_HcclGetCommAsyncError(c.h, &e); rc == 0 && e != 0 {
		return hcclError("HcclGetCommAsyncError", e)
	}
	return nil
}

// Abort poisons the communicator and ends a wait in flight within about
// 100 ms. HCCL has no way to tell the peers: they fail at their timeout.
func (c *comm) Abort(reason error) {
	c.AbortWith(reason)
}

// Close destroys the HCCL communicator and its stream.
func (c *comm) Close() error {
	if already, _ := c.Health.MarkClosed(); already {
		return nil
	}
	c.Stop.Store(true)
	c.Mu.Lock()
	defer c.Mu.Unlock()
	var herr error
	err := c.dev.do("HcclCommDestroy", 30*time.Second, func() {
		if rc := C.npu_HcclCommDestroy(c.h); rc != 0 {
			herr = hcclError("HcclCommDestroy", rc)
		}
		if c.ownStream {
			// A collective that failed or timed out may still be ending
			// on the stream (HCCL stops it once the communicator is
			// destroyed), and a stream must be idle to be destroyed:
			// wait for it, bounded.
			_ = acl.SynchronizeStreamWithTimeout(uintptr(c.stream), int32(closeDrain.Milliseconds()))
			if err := acl.DestroyStream(uintptr(c.stream)); err != nil && herr == nil {
				herr = err
			}
		}
	})
	if err != nil {
		return err
	}
	return herr
}

func (c *comm) addr(t *npu.Tensor) (C.uintptr_t, error) {
	p, err := tensorAddr(t, c.dev.id)
	return C.uintptr_t(p), err
}

func dtypeOf(t *npu.Tensor) (C.int, error) {
	dt, ok := dataTypes[t.DType()]
	if !ok {
		return 0, hccl.Errorf(hccl.ErrInvalid, "HCCL has no data type for %v", t.DType())
	}
	return dt, nil
}

// args resolves tensors to device addresses and checks their dtype.
type args struct {
	ptrs []C.uintptr_t
	dt   C.int
}

func (c *comm) resolve(ts ...*npu.Tensor) (args, error) {
	var a args
	for _, t := range ts {
		if t == nil {
			return a, hccl.Errorf(hccl.ErrInvalid, "nil tensor")
		}
		p, err := c.addr(t)
		if err != nil {
			return a, err
		}
		a.ptrs = append(a.ptrs, p)
	}
	if len(ts) == 2 && ts[0].DType() != ts[1].DType() {
		return a, hccl.Errorf(hccl.ErrInvalid, "dtypes differ: %v and %v", ts[0].DType(), ts[1].DType())
	}
	dt, err := dtypeOf(ts[0])
	a.dt = dt
	return a, err
}

func (c *comm) AllReduce(t *npu.Tensor, op hccl.ReduceOp) error {
	var a args
	return c.run(call{
		name:     "AllReduce",
		describe: func() string { return fmt.Sprintf("%v %v", t, op) },
		check: func() (err error) {
			if a, err = c.resolve(t); err != nil {
				return err
			}
			if !hccl.Supported(t.DType(), op) {
				return hccl.Errorf(hccl.ErrInvalid, "%v is not defined on %v", op, t.DType())
			}
			return nil
		},
		enqueue: func() (C.int, string) {
			if t.Numel() == 0 {
				return 0, ""
			}
			return C.npu_HcclAllReduce(a.ptrs[0], a.ptrs[0], C.uint64_t(t.Numel()), a.dt, C.int(op), c.h, c.stream), "HcclAllReduce"
		},
	})
}

func (c *comm) AllGather(out, in *npu.Tensor) error {
	var a args
	return c.run(call{
		name:     "AllGather",
		describe: func() string { return fmt.Sprintf("out %v, in %v", out, in) },
		check: func() (err error) {
			if a, err = c.resolve(in, out); err != nil {
				return err
			}
			if out.Numel() != c.Size()*in.Numel() {
				return hccl.Errorf(hccl.ErrInvalid, "out must hold Size()=%d blocks of in's elements", c.Size())
			}
			return nil
		},
		enqueue: func() (C.int, string) {
			if in.Numel() == 0 {
				return 0, ""
			}
			return C.npu_HcclAllGather(a.ptrs[0], a.ptrs[1], C.uint64_t(in.Numel()), a.dt, c.h, c.stream), "HcclAllGather"
		},
	})
}

func (c *comm) ReduceScatter(out, in *npu.Tensor, op hccl.ReduceOp) error {
	var a args
	return c.run(call{
		name:     "ReduceScatter",
		describe: func() string { return fmt.Sprintf("out %v, in %v, %v", out, in, op) },
		check: func() (err error) {
			if a, err = c.resolve(in, out); err != nil {
				return err
			}
			if in.Numel() != c.Size()*out.Numel() {
				return hccl.Errorf(hccl.ErrInvalid, "in must hold Size()=%d blocks of out's elements", c.Size())
			}
			if !hccl.Supported(in.DType(), op) {
				return hccl.Errorf(hccl.ErrInvalid, "%v is not defined on %v", op, in.DType())
			}
			return nil
		},
		enqueue: func() (C.int, string) {
			if out.Numel() == 0 {
				return 0, ""
			}
			return C.npu_HcclReduceScatter(a.ptrs[0], a.ptrs[1], C.uint64_t(out.Numel()), a.dt, C.int(op), c.h, c.stream), "HcclReduceScatter"
		},
	})
}

func (c *comm) AllToAll(out, in *npu.Tensor) error {
	var a args
	return c.run(call{
		name:     "AllToAll",
		describe: func() string { return fmt.Sprintf("out %v, in %v", out, in) },
		check: func() (err error) {
			if a, err = c.resolve(in, out); err != nil {
				return err
			}
			if out.Numel() != in.Numel() || in.Numel()%c.Size() != 0 {
				return hccl.Errorf(hccl.ErrInvalid, "in and out must have the same element count, a multiple of Size()=%d", c.Size())
			}
			return nil
		},
		enqueue: func() (C.int, string) {
			n := C.uint64_t(in.Numel() / c.Size())
			if n == 0 {
				return 0, ""
			}
			return C.npu_HcclAlltoAll(a.ptrs[0], n, a.ptrs[1], n, a.dt, c.h, c.stream), "HcclAlltoAll"
		},
	})
}

func (c *comm) AllToAllV(out *npu.Tensor, outCounts []int, in *npu.Tensor, inCounts []int) error {
	var a args
	var counts *C.uint64_t // send counts, send displs, recv counts, recv displs: host memory HCCL reads
	return c.run(call{
		name: "AllToAllV",
		describe: func() string {
			return fmt.Sprintf("out %v counts %v, in %v counts %v", out, outCounts, in, inCounts)
		},
		check: func() (err error) {
			if a, err = c.resolve(in, out); err != nil {
				return err
			}
			if len(outCounts) != c.Size() || len(inCounts) != c.Size() {
				return hccl.Errorf(hccl.ErrInvalid, "need Size()=%d counts each", c.Size())
			}
			sumIn, sumOut := 0, 0
			for k := range c.Size() {
				if inCounts[k] < 0 || outCounts[k] < 0 {
					return hccl.Errorf(hccl.ErrInvalid, "negative count")
				}
				sumIn += inCounts[k]
				sumOut += outCounts[k]
			}
			if sumIn > in.Numel() || sumOut > out.Numel() {
				return hccl.Errorf(hccl.ErrInvalid, "counts need %d input and %d output elements", sumIn, sumOut)
			}
			counts = (*C.uint64_t)(C.malloc(C.size_t(4 * c.Size() * 8)))
			v := unsafe.Slice(counts, 4*c.Size())
			sumIn, sumOut = 0, 0
			for k := range c.Size() {
				v[k], v[c.Size()+k] = C.uint64_t(inCounts[k]), C.uint64_t(sumIn)
				v[2*c.Size()+k], v[3*c.Size()+k] = C.uint64_t(outCounts[k]), C.uint64_t(sumOut)
				sumIn += inCounts[k]
				sumOut += outCounts[k]
			}
			return nil
		},
		enqueue: func() (C.int, string) {
			return C.npu_HcclAlltoAllV(a.ptrs[0], a.ptrs[1], counts, C.uint32_t(c.Size()), a.dt, c.h, c.stream), "HcclAlltoAllV"
		},
		cleanup: func() { C.free(unsafe.Pointer(counts)) },
	})
}

func (c *comm) Broadcast(t *npu.Tensor, root int) error {
	var a args
	return c.run(call{
		name:     "Broadcast",
		describe: func() string { return fmt.Sprintf("%v from root %d", t, root) },
		check: func() (err error) {
			if err := c.CheckRoot(root); err != nil {
				return err
			}
			a, err = c.resolve(t)
			return err
		},
		enqueue: func() (C.int, string) {
			if t.Numel() == 0 {
				return 0, ""
			}
			return C.npu_HcclBroadcast(a.ptrs[0], C.uint64_t(t.Numel()), a.dt, C.uint32_t(root), c.h, c.stream), "HcclBroadcast"
		},
	})
}

func (c *comm) Barrier() error {
	return c.run(call{
		name:    "Barrier",
		enqueue: func() (C.int, string) { return C.npu_HcclBarrier(c.h, c.stream), "HcclBarrier" },
	})
}

func (c *comm) Send(t *npu.Tensor, peer int) error { return c.p2p("Send", t, peer, true) }
func (c *comm) Recv(t *npu.Tensor, peer int) error { return c.p2p("Recv", t, peer, false) }

func (c *comm) p2p(name string, t *npu.Tensor, peer int, send bool) error {
	var a args
	return c.run(call{
		name:     name,
		p2p:      true,
		describe: func() string { return fmt.Sprintf("%v, peer rank %d", t, peer) },
		check: func() (err error) {
			if err := c.CheckPeer(peer); err != nil {
				return err
			}
			a, err = c.resolve(t)
			return err
		},
		enqueue: func() (C.int, string) {
			if t.Numel() == 0 { // both sides skip: counts must match
				return 0, ""
			}
			if send {
				return C.npu_HcclSend(a.ptrs[0], C.uint64_t(t.Numel()), a.dt, C.uint32_t(peer), c.h, c.stream), "HcclSend"
			}
			return C.npu_HcclRecv(a.ptrs[0], C.uint64_t(t.Numel()), a.dt, C.uint32_t(peer), c.h, c.stream), "HcclRecv"
		},
	})
}
