// Package hccltest is the conformance suite every hccl transport runs: the
// collectives against a serial reference for odd sizes and every dtype, and
// the failure behaviour (timeouts, dead or aborting peers, mismatched
// calls). It is ordinary code so that each transport's tests, and child
// processes re-executed by them, can share it.
package hccltest

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/npu"
)

// Caps says what a transport guarantees, so one suite serves all of them.
type Caps struct {
	// ExactReduce: reductions follow hccl's documented order exactly, so
	// results must equal the reference bit for bit (TCP). Otherwise float
	// sums and products are compared with a tolerance, and every rank must
	// still get identical bits (HCCL with deterministic mode).
	ExactReduce bool
	// Reduce reports whether a reduction is supported; nil means
	// hccl.Supported.
	Reduce func(npu.DType, hccl.ReduceOp) bool
	// DTypes to test; nil means F32, BF16, F16, I8, I32, I64.
	DTypes []npu.DType
	// NamesPeer: a timeout error names the rank that did not take part.
	NamesPeer bool
	// FastFailure: mismatched calls, closed and aborting peers are
	// reported at once rather than when the timeout expires.
	FastFailure bool
}

func (c Caps) dtypes() []npu.DType {
	if c.DTypes != nil {
		return c.DTypes
	}
	return []npu.DType{npu.F32, npu.BF16, npu.F16, npu.I8, npu.I32, npu.I64}
}

func (c Caps) reduces(dt npu.DType, op hccl.ReduceOp) bool {
	if c.Reduce != nil {
		return c.Reduce(dt, op)
	}
	return hccl.Supported(dt, op)
}

// Sizes are the element counts every collective is checked at.
var Sizes = []int{1, 3, 17, 1023, 65537}

// Case is one conformance check. Every rank runs Run concurrently with the
// same case. Run returns this rank's output (compared across ranks when
// Same is set) and an error when the rank's result is wrong; errors from
// the communicator itself are returned as they are (use IsCommError).
type Case struct {
	Name string
	Same bool
	Run  func(c hccl.Comm, m npu.Memory) ([]byte, error)
	// Done, if set, releases data the ranks shared; the harness calls it
	// once every rank in the process has finished the case.
	Done func()
}

// resultError is a wrong result, as opposed to a failed collective.
type resultError struct{ err error }

func (e *resultError) Error() string { return "wrong result: " + e.err.Error() }

// IsCommError reports whether err came from the communicator (the world is
// then broken and later cases cannot run) rather than from a result check.
func IsCommError(err error) bool {
	var re *resultError
	return err != nil && !errors.As(err, &re)
}

func wrong(format string, a ...any) error { return &resultError{fmt.Errorf(format, a...)} }

// lazy computes a value once, on first use, for all the ranks of a case
// that share this process: generating every rank's inputs on every rank
// would otherwise cost Size() times more than the collectives under test.
type lazy[T any] struct {
	once sync.Once
	f    func() T
	v    T
}

func newLazy[T any](f func() T) *lazy[T] { return &lazy[T]{f: f} }

func (l *lazy[T]) get() T {
	l.once.Do(func() { l.v = l.f() })
	return l.v
}

// release drops the value (a later get computes it again).
func (l *lazy[T]) release() {
	var zero T
	l.v = zero
	l.once = sync.Once{}
}

// genAll returns every rank's input.
func genAll(size int, seed uint64, n int, dt npu.DType, op hccl.ReduceOp) [][]byte {
	ins := make([][]byte, size)
	for k := range size {
		ins[k] = gen(seed, k, n, dt, op)
	}
	return ins
}

// tensor allocates a tensor of dt holding data (n elements).
func tensor(m npu.Memory, dt npu.DType, data []byte) *npu.Tensor {
	t := npu.Must(m.Alloc(dt, len(data)/dt.Size()))
	upload(m, t, data)
	return t
}

// upload copies data into t from a copy of its own: Upload may scribble
// its source (the contract), and the cases compare against data later.
func upload(m npu.Memory, t *npu.Tensor, data []byte) {
	if err := m.Upload(t, bytes.Clone(data)); err != nil {
		panic(err)
	}
}

func download(m npu.Memory, t *npu.Tensor) []byte {
	b := make([]byte, t.Bytes())
	m.Download(b, t)
	return b
}

// Cases returns the conformance cases for a communicator of size ranks.
func Cases(size int, caps Caps) []Case {
	var cs []Case
	ops := []hccl.ReduceOp{hccl.Sum, hccl.Prod, hccl.Max, hccl.Min}
	seed := uint64(1)
	next := func() uint64 { seed++; return seed }
	for _, dt := range caps.dtypes() {
		for _, op := range ops {
			if !caps.reduces(dt, op) {
				continue
			}
			for _, n := range Sizes {
				cs = append(cs, allReduceCase(size, caps, dt, op, n, next()))
			}
		}
		for _, op := range []hccl.ReduceOp{hccl.Sum, hccl.Max} {
			if !caps.reduces(dt, op) {
				continue
			}
			for _, n := range Sizes {
				cs = append(cs, reduceScatterCase(size, caps, dt, op, n, next(), false))
			}
		}
		for _, n := range Sizes {
			cs = append(cs, allGatherCase(size, dt, n, next(), false))
			cs = append(cs, allToAllCase(size, dt, n, next()))
			cs = append(cs, broadcastCase(size, dt, n, next()%uint64(size), next()))
		}
		for _, maxCount := range []int{0, 5, 40, 70000} {
			cs = append(cs, allToAllVCase(size, dt, maxCount, next()))
		}
		if size > 1 {
			for _, n := range []int{1, 17, 65537} {
				cs = append(cs, sendRecvCase(size, dt, n, next()))
			}
		}
	}
	if caps.reduces(npu.F32, hccl.Sum) {
		cs = append(cs, reduceScatterCase(size, caps, npu.F32, hccl.Sum, 1023, next(), true))
		cs = append(cs, viewCase(size, caps, next()))
	}
	cs = append(cs, allGatherCase(size, npu.F32, 1023, next(), true))
	cs = append(cs, barrierCase(size), sequenceCase(size, caps, next()))
	return cs
}

func allReduceCase(size int, caps Caps, dt npu.DType, op hccl.ReduceOp, n int, seed uint64) Case {
	ins := newLazy(func() [][]byte { return genAll(size, seed, n, dt, op) })
	want := newLazy(func() []byte { return Reference(dt, op, ins.get()) })
	return Case{
		Name: fmt.Sprintf("AllReduce/%v/%v/n=%d", dt, op, n),
		Same: true,
		Done: func() { ins.release(); want.release() },
		Run: func(c hccl.Comm, m npu.Memory) ([]byte, error) {
			ins := ins.get()
			t := tensor(m, dt, ins[c.Rank()])
			defer m.Free(t)
			if err := c.AllReduce(t, op); err != nil {
				return nil, err
			}
			got := download(m, t)
			if err := compare(dt, op, got, want.get(), ins, caps.ExactReduce); err != nil {
				return got, wrong("%v", err)
			}
			return got, nil
		},
	}
}

func reduceScatterCase(size int, caps Caps, dt npu.DType, op hccl.ReduceOp, n int, seed uint64, inPlace bool) Case {
	ins := newLazy(func() [][]byte { return genAll(size, seed, size*n, dt, op) })
	name := fmt.Sprintf("ReduceScatter/%v/%v/n=%d", dt, op, n)
	if inPlace {
		name += "/in-place"
	}
	return Case{
		Name: name,
		Done: ins.release,
		Run: func(c hccl.Comm, m npu.Memory) ([]byte, error) {
			es := dt.Size()
			ins := ins.get()
			r := c.Rank()
			blocks := make([][]byte, size)
			for k := range size {
				blocks[k] = ins[k][r*n*es : (r+1)*n*es]
			}
			want := Reference(dt, op, blocks)
			in := tensor(m, dt, ins[r])
			defer m.Free(in)
			out := in.Reshape(size, n).Rows(r, r+1)
			if !inPlace {
				out = npu.Must(m.Alloc(dt, n))
				defer m.Free(out)
			}
			if err := c.ReduceScatter(out, in, op); err != nil {
				return nil, err
			}
			got := download(m, out)
			if err := compare(dt, op, got, want, blocks, caps.ExactReduce); err != nil {
				return got, wrong("%v", err)
			}
			return got, nil
		},
	}
}

func allGatherCase(size int, dt npu.DType, n int, seed uint64, inPlace bool) Case {
	want := newLazy(func() []byte { return bytes.Join(genAll(size, seed, n, dt, hccl.Sum), nil) })
	name := fmt.Sprintf("AllGather/%v/n=%d", dt, n)
	if inPlace {
		name += "/in-place"
	}
	return Case{
		Name: name,
		Same: true,
		Done: want.release,
		Run: func(c hccl.Comm, m npu.Memory) ([]byte, error) {
			want := want.get()
			r, es := c.Rank(), dt.Size()
			out := npu.Must(m.Alloc(dt, size, n))
			defer m.Free(out)
			in := out.Rows(r, r+1)
			if inPlace {
				upload(m, in, want[r*n*es:(r+1)*n*es])
			} else {
				in = tensor(m, dt, want[r*n*es:(r+1)*n*es])
				defer m.Free(in)
			}
			if err := c.AllGather(out, in); err != nil {
				return nil, err
			}
			got := download(m, out)
			if !bytes.Equal(got, want) {
				return got, wrong("%v", firstDiff(dt, got, want))
			}
			return got, nil
		},
	}
}

func allToAllCase(size int, dt npu.DType, n int, seed uint64) Case {
	ins := newLazy(func() [][]byte { return genAll(size, seed, size*n, dt, hccl.Sum) })
	return Case{
		Name: fmt.Sprintf("AllToAll/%v/n=%d", dt, n),
		Done: ins.release,
		Run: func(c hccl.Comm, m npu.Memory) ([]byte, error) {
			r, bs := c.Rank(), n*dt.Size()
			var want []byte
			for k := range size {
				want = append(want, ins.get()[k][r*bs:(r+1)*bs]...)
			}
			in := tensor(m, dt, ins.get()[r])
			defer m.Free(in)
			out := npu.Must(m.Alloc(dt, size*n))
			defer m.Free(out)
			if err := c.AllToAll(out, in); err != nil {
				return nil, err
			}
			got := download(m, out)
			if !bytes.Equal(got, want) {
				return got, wrong("%v", firstDiff(dt, got, want))
			}
			return got, nil
		},
	}
}

// allToAllVCase exchanges a random count matrix (entries in [0, maxCount],
// zeros included) between buffers 7 elements larger than needed, whose
// tails must stay untouched.
func allToAllVCase(size int, dt npu.DType, maxCount int, seed uint64) Case {
	return Case{
		Name: fmt.Sprintf("AllToAllV/%v/max=%d", dt, maxCount),
		Run: func(c hccl.Comm, m npu.Memory) ([]byte, error) {
			rg := newRNG(seed, -1)
			counts := make([][]int, size) // counts[i][j]: elements i sends j
			for i := range size {
				counts[i] = make([]int, size)
				for j := range size {
					counts[i][j] = int(rg.intn(0, int64(maxCount)))
				}
			}
			r, es := c.Rank(), dt.Size()
			inputs := make([][]byte, size)
			for i := range size {
				total := 0
				for _, v := range counts[i] {
					total += v
				}
				inputs[i] = gen(seed, i, total, dt, hccl.Sum)
			}
			var want []byte
			outCounts := make([]int, size)
			for i := range size {
				off := 0
				for j := range r {
					off += counts[i][j]
				}
				want = append(want, inputs[i][off*es:(off+counts[i][r])*es]...)
				outCounts[i] = counts[i][r]
			}
			const slack = 7
			in := npu.Must(m.Alloc(dt, len(inputs[r])/es+slack))
			defer m.Free(in)
			upload(m, in.Reshape(-1).Rows(0, len(inputs[r])/es), inputs[r])
			out := npu.Must(m.Alloc(dt, len(want)/es+slack))
			defer m.Free(out)
			fill := bytes.Repeat([]byte{0x5a}, out.Bytes())
			upload(m, out, fill)
			if err := c.AllToAllV(out, outCounts, in, counts[r]); err != nil {
				return nil, err
			}
			got := download(m, out)
			if !bytes.Equal(got[:len(want)], want) {
				return got, wrong("%v", firstDiff(dt, got[:len(want)], want))
			}
			if !bytes.Equal(got[len(want):], fill[len(want):]) {
				return got, wrong("AllToAllV wrote past the %d elements the counts cover", len(want)/es)
			}
			return got, nil
		},
	}
}

func broadcastCase(size int, dt npu.DType, n int, root uint64, seed uint64) Case {
	return Case{
		Name: fmt.Sprintf("Broadcast/%v/n=%d/root=%d", dt, n, root),
		Same: true,
		Run: func(c hccl.Comm, m npu.Memory) ([]byte, error) {
			want := gen(seed, int(root), n, dt, hccl.Sum)
			init := want
			if c.Rank() != int(root) {
				init = gen(seed+1, c.Rank(), n, dt, hccl.Sum) // overwritten
			}
			t := tensor(m, dt, init)
			defer m.Free(t)
			if err := c.Broadcast(t, int(root)); err != nil {
				return nil, err
			}
			got := download(m, t)
			if !bytes.Equal(got, want) {
				return got, wrong("%v", firstDiff(dt, got, want))
			}
			return got, nil
		},
	}
}

// sendRecvCase passes tensors around the ring; even ranks send first and
// odd ranks receive first, so it also works where Send blocks until
// matched (HCCL).
func sendRecvCase(size int, dt npu.DType, n int, seed uint64) Case {
	return Case{
		Name: fmt.Sprintf("SendRecv/%v/n=%d", dt, n),
		Run: func(c hccl.Comm, m npu.Memory) ([]byte, error) {
			r := c.Rank()
			next, prev := (r+1)%size, (r+size-1)%size
			src := tensor(m, dt, gen(seed, r, n, dt, hccl.Sum))
			defer m.Free(src)
			dst := npu.Must(m.Alloc(dt, n))
			defer m.Free(dst)
			steps := []func() error{
				func() error { return c.Send(src, next) },
				func() error { return c.Recv(dst, prev) },
			}
			if r%2 == 1 {
				steps[0], steps[1] = steps[1], steps[0]
			}
			for _, s := range steps {
				if err := s(); err != nil {
					return nil, err
				}
			}
			got := download(m, dst)
			if want := gen(seed, prev, n, dt, hccl.Sum); !bytes.Equal(got, want) {
				return got, wrong("from rank %d: %v", prev, firstDiff(dt, got, want))
			}
			return got, nil
		},
	}
}

// viewCase all-reduces rows 1..2 of a 4-row tensor: the transport must
// honour the view's offset and leave rows 0 and 3 alone.
func viewCase(size int, caps Caps, seed uint64) Case {
	const cols = 33
	return Case{
		Name: "AllReduce/F32/rows-view",
		Same: true,
		Run: func(c hccl.Comm, m npu.Memory) ([]byte, error) {
			full := make([][]byte, size)
			mid := make([][]byte, size)
			for k := range size {
				full[k] = gen(seed, k, 4*cols, npu.F32, hccl.Sum)
				mid[k] = full[k][cols*4 : 3*cols*4]
			}
			t := tensor(m, npu.F32, full[c.Rank()])
			defer m.Free(t)
			if err := c.AllReduce(t.Reshape(4, cols).Rows(1, 3), hccl.Sum); err != nil {
				return nil, err
			}
			got := download(m, t)
			want := append(append(append([]byte{}, full[c.Rank()][:cols*4]...), Reference(npu.F32, hccl.Sum, mid)...), full[c.Rank()][3*cols*4:]...)
			if err := compare(npu.F32, hccl.Sum, got[cols*4:3*cols*4], want[cols*4:3*cols*4], mid, caps.ExactReduce); err != nil {
				return got, wrong("rows 1..2: %v", err)
			}
			if !bytes.Equal(got[:cols*4], want[:cols*4]) || !bytes.Equal(got[3*cols*4:], want[3*cols*4:]) {
				return got, wrong("rows outside the view changed")
			}
			return got[cols*4 : 3*cols*4], nil
		},
	}
}

// barrierCase: after a first barrier, rank r sleeps r×20 ms and enters a
// second one, which nobody may leave before the last rank has entered.
func barrierCase(size int) Case {
	const step = 20 * time.Millisecond
	return Case{
		Name: "Barrier",
		Run: func(c hccl.Comm, m npu.Memory) ([]byte, error) {
			if err := c.Barrier(); err != nil {
				return nil, err
			}
			start := time.Now()
			time.Sleep(time.Duration(c.Rank()) * step)
			if err := c.Barrier(); err != nil {
				return nil, err
			}
			if el, min := time.Since(start), time.Duration(size-1)*step-5*time.Millisecond; el < min {
				return nil, wrong("left the barrier after %v, before rank %d entered it (%v)", el, size-1, min)
			}
			return nil, nil
		},
	}
}

// sequenceCase runs different collectives back to back, as a model step
// does, checking that they stay in step.
func sequenceCase(size int, caps Caps, seed uint64) Case {
	return Case{
		Name: "Sequence",
		Same: true,
		Run: func(c hccl.Comm, m npu.Memory) ([]byte, error) {
			r := c.Rank()
			var out []byte
			for i := range 3 {
				ins := make([][]byte, size)
				for k := range size {
					ins[k] = gen(seed+uint64(i), k, 17, npu.F32, hccl.Sum)
				}
				a := tensor(m, npu.F32, ins[r])
				if err := c.AllReduce(a, hccl.Sum); err != nil {
					return nil, err
				}
				got := download(m, a)
				m.Free(a)
				if err := compare(npu.F32, hccl.Sum, got, Reference(npu.F32, hccl.Sum, ins), ins, caps.ExactReduce); err != nil {
					return nil, wrong("step %d AllReduce: %v", i, err)
				}
				root := (i + 1) % size
				b := tensor(m, npu.BF16, gen(seed+10+uint64(i), r, 5, npu.BF16, hccl.Sum))
				if err := c.Broadcast(b, root); err != nil {
					return nil, err
				}
				gotB := download(m, b)
				m.Free(b)
				if want := gen(seed+10+uint64(i), root, 5, npu.BF16, hccl.Sum); !bytes.Equal(gotB, want) {
					return nil, wrong("step %d Broadcast: %v", i, firstDiff(npu.BF16, gotB, want))
				}
				in := tensor(m, npu.I32, gen(seed+20+uint64(i), r, 3, npu.I32, hccl.Sum))
				g := npu.Must(m.Alloc(npu.I32, 3*size))
				if err := c.AllGather(g, in); err != nil {
					return nil, err
				}
				gotG := download(m, g)
				m.Free(in)
				m.Free(g)
				var want []byte
				for k := range size {
					want = append(want, gen(seed+20+uint64(i), k, 3, npu.I32, hccl.Sum)...)
				}
				if !bytes.Equal(gotG, want) {
					return nil, wrong("step %d AllGather: %v", i, firstDiff(npu.I32, gotG, want))
				}
				out = append(append(append(out, got...), gotB...), gotG...)
			}
			return out, nil
		},
	}
}

func firstDiff(dt npu.DType, got, want []byte) error {
	if len(got) != len(want) {
		return fmt.Errorf("got %d bytes, want %d", len(got), len(want))
	}
	es := max(dt.Size(), 1)
	for i := 0; i < len(got); i += es {
		if !bytes.Equal(got[i:i+es], want[i:i+es]) {
			return fmt.Errorf("element %d of %d: got %s, want %s", i/es, len(got)/es, show(dt, got, i/es), show(dt, want, i/es))
		}
	}
	return nil
}
