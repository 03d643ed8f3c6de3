package nccl

import (
	"fmt"

	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/npu"
)

// addr is the device address of t's first element; t must be device
// memory of this communicator's GPU.
func (c *comm) addr(t *npu.Tensor) (uintptr, error) {
	if t == nil {
		return 0, hccl.Errorf(hccl.ErrInvalid, "nil tensor")
	}
	b, ok := t.Buffer().(deviceBuffer)
	if !ok {
		return 0, hccl.Errorf(hccl.ErrInvalid, "tensor %v is not in device memory (buffer %T): NCCL moves tensors of the CUDA backend; use the TCP transport for the CPU backend", t, t.Buffer())
	}
	if b.DeviceID() != c.dev.Ordinal() {
		return 0, hccl.Errorf(hccl.ErrInvalid, "tensor %v is on GPU %d, the communicator on GPU %d", t, b.DeviceID(), c.dev.Ordinal())
	}
	if b.DevicePointer() == 0 && b.Bytes() > 0 {
		return 0, hccl.Errorf(hccl.ErrInvalid, "tensor %v has no device memory (freed?)", t)
	}
	return b.DevicePointer() + uintptr(t.Offset()), nil
}

// pair resolves in and out, which must have the same dtype.
func (c *comm) pair(in, out *npu.Tensor) (pin, pout uintptr, err error) {
	if pin, err = c.addr(in); err != nil {
		return
	}
	if pout, err = c.addr(out); err != nil {
		return
	}
	if in.DType() != out.DType() {
		err = hccl.Errorf(hccl.ErrInvalid, "dtypes differ: in %v, out %v", in.DType(), out.DType())
	}
	return
}

// overlap reports whether [a, a+na) and [b, b+nb) share a byte.
func overlap(a uintptr, na int, b uintptr, nb int) bool {
	return na > 0 && nb > 0 && a < b+uintptr(nb) && b < a+uintptr(na)
}

// reduceType is NCCL's type for reducing dt with op.
func reduceType(dt npu.DType, op hccl.ReduceOp) (int, int, error) {
	t, ok := reduceTypes[dt]
	o, okOp := reduceOps[op]
	if !ok || !okOp || !hccl.Supported(dt, op) {
		return 0, 0, hccl.Errorf(hccl.ErrInvalid, "%v is not defined on %v", op, dt)
	}
	return t, o, nil
}

func (c *comm) stream() uintptr { return c.dev.StreamHandle() }

func (c *comm) AllReduce(t *npu.Tensor, op hccl.ReduceOp) error {
	var p uintptr
	var dt, nop int
	return c.run(call{
		name:     "AllReduce",
		describe: func() string { return fmt.Sprintf("%v %v", t, op) },
		check: func() (err error) {
			if p, err = c.addr(t); err != nil {
				return err
			}
			dt, nop, err = reduceType(t.DType(), op)
			return err
		},
		enqueue: func() (int, string) {
			if t.Numel() == 0 {
				return skipped, ""
			}
			return libAllReduce(p, p, t.Numel(), dt, nop, c.h, c.stream()), "ncclAllReduce"
		},
	})
}

func (c *comm) AllGather(out, in *npu.Tensor) error {
	var pin, pout uintptr
	return c.run(call{
		name:     "AllGather",
		describe: func() string { return fmt.Sprintf("out %v, in %v", out, in) },
		check: func() (err error) {
			if pin, pout, err = c.pair(in, out); err != nil {
				return err
			}
			if out.Numel() != c.Size()*in.Numel() {
				return hccl.Errorf(hccl.ErrInvalid, "out must hold Size()=%d blocks of in's %d elements, has %d", c.Size(), in.Numel(), out.Numel())
			}
			if overlap(pin, in.Bytes(), pout, out.Bytes()) && pin != pout+uintptr(c.Rank()*in.Bytes()) {
				return hccl.Errorf(hccl.ErrInvalid, "in overlaps out without being its block %d (in place)", c.Rank())
			}
			return nil
		},
		enqueue: func() (int, string) {
			if in.Bytes() == 0 {
				return skipped, ""
			}
			return libAllGather(pin, pout, in.Bytes(), ncclUint8, c.h, c.stream()), "ncclAllGather"
		},
	})
}

func (c *comm) ReduceScatter(out, in *npu.Tensor, op hccl.ReduceOp) error {
	var pin, pout uintptr
	var dt, nop int
	return c.run(call{
		name:     "ReduceScatter",
		describe: func() string { return fmt.Sprintf("out %v, in %v, %v", out, in, op) },
		check: func() (err error) {
			if pin, pout, err = c.pair(in, out); err != nil {
				return err
			}
			if in.Numel() != c.Size()*out.Numel() {
				return hccl.Errorf(hccl.ErrInvalid, "in must hold Size()=%d blocks of out's %d elements, has %d", c.Size(), out.Numel(), in.Numel())
			}
			if overlap(pin, in.Bytes(), pout, out.Bytes()) && pout != pin+uintptr(c.Rank()*out.Bytes()) {
				return hccl.Errorf(hccl.ErrInvalid, "out overlaps in without being its block %d (in place)", c.Rank())
			}
			dt, nop, err = reduceType(in.DType(), op)
			return err
		},
		enqueue: func() (int, string) {
			if out.Numel() == 0 {
				return skipped, ""
			}
			return libReduceScatter(pin, pout, out.Numel(), dt, nop, c.h, c.stream()), "ncclReduceScatter"
		},
	})
}

func (c *comm) AllToAll(out, in *npu.Tensor) error {
	var pin, pout uintptr
	return c.run(call{
		name:     "AllToAll",
		describe: func() string { return fmt.Sprintf("out %v, in %v", out, in) },
		check: func() (err error) {
			if pin, pout, err = c.pair(in, out); err != nil {
				return err
			}
			if out.Numel() != in.Numel() || in.Numel()%c.Size() != 0 {
				return hccl.Errorf(hccl.ErrInvalid, "in (%d elements) and out (%d) must have the same element count, a multiple of Size()=%d", in.Numel(), out.Numel(), c.Size())
			}
			if overlap(pin, in.Bytes(), pout, out.Bytes()) {
				return hccl.Errorf(hccl.ErrInvalid, "in and out overlap")
			}
			return nil
		},
		enqueue: func() (int, string) {
			bs := in.Bytes() / c.Size()
			if bs == 0 {
				return skipped, ""
			}
			counts := make([]int, 4*c.Size())
			for k := range c.Size() {
				counts[k], counts[c.Size()+k] = bs, k*bs
				counts[2*c.Size()+k], counts[3*c.Size()+k] = bs, k*bs
			}
			return libAllToAllV(pin, pout, counts, c.h, c.stream()), "ncclSend/ncclRecv group"
		},
	})
}

func (c *comm) AllToAllV(out *npu.Tensor, outCounts []int, in *npu.Tensor, inCounts []int) error {
	var pin, pout uintptr
	var counts []int // bytes: send counts, send displacements, receive counts, receive displacements
	return c.run(call{
		name: "AllToAllV",
		describe: func() string {
			return fmt.Sprintf("out %v counts %v, in %v counts %v", out, outCounts, in, inCounts)
		},
		check: func() (err error) {
			if pin, pout, err = c.pair(in, out); err != nil {
				return err
			}
			counts, err = allToAllVCounts(c.Size(), in.DType().Size(), inCounts, outCounts, in.Numel(), out.Numel())
			if err != nil {
				return err
			}
			if overlap(pin, in.Bytes(), pout, out.Bytes()) {
				return hccl.Errorf(hccl.ErrInvalid, "in and out overlap")
			}
			return nil
		},
		enqueue: func() (int, string) {
			total := 0
			for k := range c.Size() {
				total += counts[k] + counts[2*c.Size()+k]
			}
			if total == 0 {
				return skipped, ""
			}
			return libAllToAllV(pin, pout, counts, c.h, c.stream()), "ncclSend/ncclRecv group"
		},
	})
}

// allToAllVCounts checks AllToAllV's counts (elements) against the
// tensors' sizes and returns them in bytes with their displacements, in
// the shim's layout.
func allToAllVCounts(size, elem int, inCounts, outCounts []int, inNumel, outNumel int) ([]int, error) {
	if len(outCounts) != size || len(inCounts) != size {
		return nil, hccl.Errorf(hccl.ErrInvalid, "need Size()=%d counts each, have %d in and %d out", size, len(inCounts), len(outCounts))
	}
	v := make([]int, 4*size)
	sumIn, sumOut := 0, 0
	for k := range size {
		if inCounts[k] < 0 || outCounts[k] < 0 {
			return nil, hccl.Errorf(hccl.ErrInvalid, "negative count for rank %d", k)
		}
		v[k], v[size+k] = inCounts[k]*elem, sumIn*elem
		v[2*size+k], v[3*size+k] = outCounts[k]*elem, sumOut*elem
		sumIn += inCounts[k]
		sumOut += outCounts[k]
	}
	if sumIn > inNumel || sumOut > outNumel {
		return nil, hccl.Errorf(hccl.ErrInvalid, "counts need %d input and %d output elements; in has %d, out %d", sumIn, sumOut, inNumel, outNumel)
	}
	return v, nil
}

func (c *comm) Broadcast(t *npu.Tensor, root int) error {
	var p uintptr
	return c.run(call{
		name:     "Broadcast",
		describe: func() string { return fmt.Sprintf("%v from root %d", t, root) },
		check: func() (err error) {
			if err := c.CheckRoot(root); err != nil {
				return err
			}
			p, err = c.addr(t)
			return err
		},
		enqueue: func() (int, string) {
			if t.Bytes() == 0 {
				return skipped, ""
			}
			return libBroadcast(p, p, t.Bytes(), ncclUint8, root, c.h, c.stream()), "ncclBroadcast"
		},
	})
}

// Barrier all-reduces a one-element scratch tensor, allocated on the
// backend by the first Barrier: NCCL has no barrier of its own.
func (c *comm) Barrier() error {
	var p uintptr
	return c.run(call{
		name: "Barrier",
		check: func() (err error) {
			if c.barrier == nil {
				if c.be == nil {
					return hccl.Errorf(hccl.ErrInvalid, "no backend to allocate the barrier's scratch tensor on")
				}
				if c.barrier, err = c.be.Alloc(npu.I32, 1); err != nil {
					return fmt.Errorf("the barrier's scratch tensor: %w", err)
				}
			}
			p, err = c.addr(c.barrier)
			return err
		},
		enqueue: func() (int, string) {
			return libAllReduce(p, p, 1, ncclInt32, reduceOps[hccl.Sum], c.h, c.stream()), "ncclAllReduce"
		},
	})
}

func (c *comm) Send(t *npu.Tensor, peer int) error { return c.p2p("Send", t, peer, true) }
func (c *comm) Recv(t *npu.Tensor, peer int) error { return c.p2p("Recv", t, peer, false) }

func (c *comm) p2p(name string, t *npu.Tensor, peer int, send bool) error {
	var p uintptr
	return c.run(call{
		name:     name,
		p2p:      true,
		describe: func() string { return fmt.Sprintf("%v, peer rank %d", t, peer) },
		check: func() (err error) {
			if err := c.CheckPeer(peer); err != nil {
				return err
			}
			p, err = c.addr(t)
			return err
		},
		enqueue: func() (int, string) {
			if t.Bytes() == 0 { // both sides skip: counts must match
				return skipped, ""
			}
			if send {
				return libSend(p, t.Bytes(), ncclUint8, peer, c.h, c.stream()), "ncclSend"
			}
			return libRecv(p, t.Bytes(), ncclUint8, peer, c.h, c.stream()), "ncclRecv"
		},
	})
}
