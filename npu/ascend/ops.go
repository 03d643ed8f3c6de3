//go:build cgo

package ascend

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/ascend/acl"
)

// aclDataType of each dtype the backend passes to aclnn.
func aclDType(dt npu.DType) C.int {
	switch dt {
	case npu.F32:
		return 0
	case npu.F16:
		return 1
	case npu.I8:
		return 2
	case npu.I32:
		return 3
	case npu.U8:
		return 4
	case npu.I64:
		return 9
	case npu.BF16:
		return 27
	}
	panic(fmt.Sprintf("ascend: dtype %v has no aclnn equivalent", dt))
}

// call is one operator call being built on the device thread: the
// descriptors it made (destroyed once phase 2 is enqueued).
type call struct {
	b       *Backend
	tensors []C.uintptr_t
	scalars []C.uintptr_t
	arrays  []C.uintptr_t
	lists   []C.uintptr_t // aclTensorLists, which own their tensors
}

// tensor describes t viewed with shape (nil: t's own) and element strides
// (nil: contiguous). As torch_npu does, tensorData is the allocation base
// (32-byte aligned) and the view starts at an element offset.
func (c *call) tensor(t *npu.Tensor, shape []int, strides []int) C.uintptr_t {
	return c.view(t, 0, shape, strides)
}

// view is tensor starting off elements past t's first element.
func (c *call) view(t *npu.Tensor, off int, shape []int, strides []int) C.uintptr_t {
	buf := c.b.dbuf(t)
	if shape == nil {
		shape = t.Shape()
	}
	es := t.DType().Size()
	dims := make([]C.int64_t, max(len(shape), 1))
	for i, d := range shape {
		dims[i] = C.int64_t(d)
	}
	var sp *C.int64_t
	if strides != nil {
		st := make([]C.int64_t, len(strides))
		for i, s := range strides {
			st[i] = C.int64_t(s)
		}
		sp = &st[0]
	}
	h := C.npu_tensor(&dims[0], C.uint64_t(len(shape)), aclDType(t.DType()), sp, C.int64_t(t.Offset()/es+off), C.int64_t(buf.n/es), C.uintptr_t(buf.ptr))
	if h == 0 {
		panic(fmt.Sprintf("ascend: aclCreateTensor %v: %s", t, acl.RecentErrMsg()))
	}
	c.tensors = append(c.tensors, h)
	return h
}

func (c *call) scalar(v float32) C.uintptr_t {
	h := C.npu_scalar_f32(C.float(v))
	if h == 0 {
		panic(fmt.Sprintf("ascend: aclCreateScalar: %s", acl.RecentErrMsg()))
	}
	c.scalars = append(c.scalars, h)
	return h
}

// ints is an aclIntArray of v.
func (c *call) ints(v ...int) C.uintptr_t {
	a := make([]C.int64_t, max(len(v), 1))
	for i, x := range v {
		a[i] = C.int64_t(x)
	}
	h := C.npu_int_array(&a[0], C.uint64_t(len(v)))
	if h == 0 {
		panic(fmt.Sprintf("ascend: aclCreateIntArray: %s", acl.RecentErrMsg()))
	}
	c.arrays = append(c.arrays, h)
	return h
}

// list wraps tensor h (made by this call) in a one-tensor aclTensorList,
// the single-tensor form of the grouped operators. The list owns h
// (aclDestroyTensorList destroys its tensors, ascend-api.md §0.1 item 4),
// so h leaves c.tensors.
func (c *call) list(h C.uintptr_t) C.uintptr_t {
	for i := len(c.tensors) - 1; i >= 0; i-- {
		if c.tensors[i] == h {
			c.tensors = append(c.tensors[:i], c.tensors[i+1:]...)
			break
		}
	}
	l := C.npu_tensor_list(&h, 1)
	if l == 0 {
		C.npu_destroy_tensor(h)
		panic(fmt.Sprintf("ascend: aclCreateTensorList: %s", acl.RecentErrMsg()))
	}
	c.lists = append(c.lists, l)
	return l
}

// run is phase 2 and the teardown: with phase 1's status rc, workspace
// size ws and executor ex, it provides the workspace, enqueues the
// operator and destroys the descriptors. Failures are held for Sync.
func (c *call) run(op C.int, rc C.int, ws C.uint64_t, ex C.uintptr_t) {
	b := c.b
	defer func() {
		for _, t := range c.tensors {
			C.npu_destroy_tensor(t)
		}
		for _, s := range c.scalars {
			C.npu_destroy_scalar(s)
		}
		for _, a := range c.arrays {
			C.npu_destroy_int_array(a)
		}
		for _, l := range c.lists {
			C.npu_destroy_tensor_list(l)
		}
	}()
	name := C.GoString(C.npu_aclnn_op_name(op))
	b.enqueue(name, rc, ws, ex, func(wsp C.uintptr_t) C.int { return C.npu_aclnn_run(op, wsp, ws, ex, C.uintptr_t(b.stream)) })
}

// enqueue is phase 2 of operator name, whose phase 1 returned rc, the
// workspace size ws and the executor ex: during a capture the executor is
// kept for the replays, the workspace is provided and run enqueues the
// operator with it. Failures are held for Sync.
func (b *Backend) enqueue(name string, rc C.int, ws C.uint64_t, ex C.uintptr_t, run func(wsp C.uintptr_t) C.int) {
	if rc != 0 {
		b.fail(aclnnError(name+"GetWorkspaceSize", rc))
		return
	}
	b.enqueued[name]++
	if b.cap != nil && !b.cap.keep(b, name, ex) {
		return
	}
	var wsp uintptr
	if ws > 0 {
		var err error
		if wsp, err = b.workspace(int(ws)); err != nil {
			b.fail(fmt.Errorf("ascend: %s workspace of %d bytes: %w", name, ws, err))
			return
		}
	}
	if rc := run(C.uintptr_t(wsp)); rc != 0 {
		b.fail(aclnnError(name, rc))
	}
}

// workspace returns at least n bytes of operator workspace. One buffer is
// reused: operators on the one stream run in order, so the next one may
// reuse it; a buffer outgrown is freed at the next Sync.
func (b *Backend) workspace(n int) (uintptr, error) {
	if b.cap != nil {
		return b.cap.workspace(b, n)
	}
	if n <= b.wsBytes {
		return b.ws, nil
	}
	size := max(n, 2*b.wsBytes, 1<<16)
	p, err := b.malloc(size)
	if err != nil {
		return 0, err
	}
	if b.ws != 0 {
		b.pending = append(b.pending, b.ws)
	}
	b.ws, b.wsBytes = p, size
	return p, nil
}

// scratch allocates a temporary tensor freed at the next Sync, or with
// the graph being captured (device thread).
func (b *Backend) scratch(dt npu.DType, shape ...int) *npu.Tensor {
	n, _ := npu.ShapeBytes(dt, shape...)
	size := max(int(n), 1)
	if l := b.reuse[size]; len(l) > 0 && b.cap == nil {
		p := l[len(l)-1]
		b.reuse[size] = l[:len(l)-1]
		return npu.NewTensor(&buffer{ptr: p, n: int(n), be: b}, 0, dt, shape...)
	}
	p, err := b.malloc(size)
	if err != nil {
		panic(fmt.Sprintf("ascend: scratch %v %v: %v", dt, shape, err))
	}
	b.later(p, size)
	return npu.NewTensor(&buffer{ptr: p, n: int(n), be: b}, 0, dt, shape...)
}

// recycle lets later scratch of the same size reuse t, a scratch tensor
// whose last use is enqueued (device thread): the backend's one stream
// runs those later ops after it, so the memory is free by then. Without
// it a step's weight casts (asF32 of every BF16 weight) would all stay
// allocated until the step's Sync. t == of (asF32 returned its input) and
// a capture in progress (the graph owns its scratch) recycle nothing.
func (b *Backend) recycle(t, of *npu.Tensor) {
	if t == nil || t == of || b.cap != nil {
		return
	}
	buf := t.Buffer().(*buffer)
	if b.reuse == nil {
		b.reuse = map[int][]uintptr{}
	}
	size := max(buf.n, 1)
	b.reuse[size] = append(b.reuse[size], buf.ptr)
}

// op runs fn, which builds one operator call, on the device thread.
func (b *Backend) op(fn func(c *call)) {
	b.do(func() { fn(&call{b: b}) })
}

// cast enqueues dst = (dst's dtype) src (same shape) on the device thread.
func (b *Backend) cast(dst, src *npu.Tensor) {
	c := &call{b: b}
	var ws C.uint64_t
	var ex C.uintptr_t
	shape := []int{src.Numel()}
	rc := C.npu_cast(c.tensor(src, shape, nil), aclDType(dst.DType()), c.tensor(dst, shape, nil), &ws, &ex)
	c.run(C.NPU_OP_CAST, rc, ws, ex)
}

// asF32 is t as F32: t itself, or a scratch copy cast on the stream.
func (b *Backend) asF32(t *npu.Tensor) *npu.Tensor {
	if t.DType() == npu.F32 {
		return t
	}
	f := b.scratch(npu.F32, t.Shape()...)
	b.cast(f, t)
	return f
}

func flat(t *npu.Tensor) []int { return []int{t.Numel()} }

// Copy copies src to dst (same element count), converting between F32,
// BF16, F16 and I32 (aclnnInplaceCopy).
func (b *Backend) Copy(dst, src *npu.Tensor) {
	if dst.Numel() != src.Numel() || !npu.Convertible(dst.DType(), src.DType()) || src.DType() == npu.F8E4M3 {
		panic(fmt.Sprintf("ascend: Copy %v into %v", src, dst))
	}
	b.wrote(dst)
	if dst.Numel() == 0 {
		return
	}
	b.op(func(c *call) {
		var ws C.uint64_t
		var ex C.uintptr_t
		rc := C.npu_inplace_copy(c.tensor(dst, flat(dst), nil), c.tensor(src, flat(src), nil), &ws, &ex)
		c.run(C.NPU_OP_INPLACE_COPY, rc, ws, ex)
	})
}

// Fill sets every element of dst (F32) to v (aclnnInplaceFillScalar).
func (b *Backend) Fill(dst *npu.Tensor, v float32) {
	if dst.DType() != npu.F32 {
		panic(fmt.Sprintf("ascend: Fill %v: want F32", dst))
	}
	if dst.Numel() == 0 {
		return
	}
	b.op(func(c *call) {
		var ws C.uint64_t
		var ex C.uintptr_t
		rc := C.npu_fill_scalar(c.tensor(dst, flat(dst), nil), c.scalar(v), &ws, &ex)
		c.run(C.NPU_OP_FILL_SCALAR, rc, ws, ex)
	})
}

// binaryShapes checks Add/Mul's operands and returns the aclnn shapes of
// a (and out) and b: b has a's shape, or is one row broadcast over a's
// rows.
func binaryShapes(op string, out, a, b *npu.Tensor) (as, bs []int) {
	if out.Numel() != a.Numel() || out.DType() != npu.F32 || a.DType() != npu.F32 {
		panic(fmt.Sprintf("ascend: %s out %v does not match a %v (F32)", op, out, a))
	}
	switch b.DType() {
	case npu.F32, npu.BF16, npu.F16:
	default:
		panic(fmt.Sprintf("ascend: %s b %v: want F32, BF16 or F16", op, b))
	}
	n := a.Numel()
	if b.Numel() == n {
		return []int{n}, []int{n}
	}
	if a.Rank() == 0 || b.Numel() != a.Dim(-1) {
		panic(fmt.Sprintf("ascend: %s b %v neither matches a %v nor its last dimension", op, b, a))
	}
	d := b.Numel()
	return []int{n / d, d}, []int{d}
}

// Add computes out = a + b (aclnnAdd, alpha 1). out may alias a.
func (b *Backend) Add(out, x, y *npu.Tensor) {
	as, bs := binaryShapes("Add", out, x, y)
	if out.Numel() == 0 {
		return
	}
	b.op(func(c *call) {
		var ws C.uint64_t
		var ex C.uintptr_t
		rc := C.npu_add(c.tensor(x, as, nil), c.tensor(y, bs, nil), c.scalar(1), c.tensor(out, as, nil), &ws, &ex)
		c.run(C.NPU_OP_ADD, rc, ws, ex)
	})
}

// Mul computes out = a * b with Add's broadcasting (aclnnMul).
func (b *Backend) Mul(out, x, y *npu.Tensor) {
	as, bs := binaryShapes("Mul", out, x, y)
	if out.Numel() == 0 {
		return
	}
	b.op(func(c *call) {
		var ws C.uint64_t
		var ex C.uintptr_t
		rc := C.npu_mul(c.tensor(x, as, nil), c.tensor(y, bs, nil), c.tensor(out, as, nil), &ws, &ex)
		c.run(C.NPU_OP_MUL, rc, ws, ex)
	})
}

// Scale computes out = s * x (aclnnMuls). out may alias x.
func (b *Backend) Scale(out, x *npu.Tensor, s float32) {
	if out.Numel() != x.Numel() || out.DType() != npu.F32 || x.DType() != npu.F32 {
		panic(fmt.Sprintf("ascend: Scale out %v, x %v", out, x))
	}
	if out.Numel() == 0 {
		return
	}
	b.op(func(c *call) {
		var ws C.uint64_t
		var ex C.uintptr_t
		rc := C.npu_muls(c.tensor(x, flat(x), nil), c.scalar(s), c.tensor(out, flat(out), nil), &ws, &ex)
		c.run(C.NPU_OP_MULS, rc, ws, ex)
	})
}

// MatMul computes out[M,N] = x[M,K] · w[N,K]^T with aclnnMatmul: w is
// passed as the [K,N] view of its rows (strides {1, K}), the way
// op-plugin passes transposed weights. A BF16/F16 weight is first cast to
// an F32 scratch copy (aclnnMatmul wants one dtype): correct, but an extra
// pass over the weight per call; a prepared F32 or a bf16-compute path is
// for later. cubeMathType 0 (KEEP_DTYPE): fp32 arithmetic, as the CPU
// backend does.
func (b *Backend) MatMul(out, x, w *npu.Tensor) {
	M, N, K, err := npu.MatMulDims(out, x, w)
	if err != nil {
		panic("ascend: " + err.Error())
	}
	if out.DType() != npu.F32 || x.DType() != npu.F32 {
		panic(fmt.Sprintf("ascend: MatMul out %v, x %v: want F32", out, x))
	}
	if M*N == 0 {
		return
	}
	b.op(func(c *call) {
		wf := b.asF32(w)
		var ws C.uint64_t
		var ex C.uintptr_t
		rc := C.npu_matmul(c.tensor(x, []int{M, K}, nil), c.tensor(wf, []int{K, N}, []int{1, K}), c.tensor(out, []int{M, N}, nil), 0, &ws, &ex)
		c.run(C.NPU_OP_MATMUL, rc, ws, ex)
		b.recycle(wf, w)
	})
}

// RMSNorm normalises groups of n = w.Numel() elements (the last dimension
// when w is nil) with aclnnRmsNorm; a nil w is a unit gamma kept per n, a
// BF16/F16 w is cast to an F32 scratch copy (gamma has x's dtype).
func (b *Backend) RMSNorm(out, x, w *npu.Tensor, eps float32) {
	n := 0
	if w != nil {
		n = w.Numel()
	} else if x.Rank() > 0 {
		n = x.Dim(-1)
	}
	if n == 0 || x.Numel()%n != 0 || out.Numel() != x.Numel() || x.DType() != npu.F32 || out.DType() != npu.F32 {
		panic(fmt.Sprintf("ascend: RMSNorm out %v, x %v, w %v", out, x, w))
	}
	rows := x.Numel() / n
	if rows == 0 {
		return
	}
	b.op(func(c *call) {
		var g *npu.Tensor
		if w == nil {
			g = b.unitGamma(n)
		} else {
			g = b.asF32(w)
		}
		rstd := b.scratch(npu.F32, rows, 1)
		var ws C.uint64_t
		var ex C.uintptr_t
		shape := []int{rows, n}
		rc := C.npu_rms_norm(c.tensor(x, shape, nil), c.tensor(g, []int{n}, nil), C.double(eps), c.tensor(out, shape, nil), c.tensor(rstd, nil, nil), &ws, &ex)
		c.run(C.NPU_OP_RMS_NORM, rc, ws, ex)
	})
}

// unitGamma is an F32 tensor of n ones, made once per n (device thread).
func (b *Backend) unitGamma(n int) *npu.Tensor {
	if t := b.ones[n]; t != nil {
		return t
	}
	p, err := b.malloc(4 * n)
	if err != nil {
		panic(fmt.Sprintf("ascend: RMSNorm unit gamma of %d: %v", n, err))
	}
	t := npu.NewTensor(&buffer{ptr: p, n: 4 * n, be: b}, 0, npu.F32, n)
	c := &call{b: b}
	var ws C.uint64_t
	var ex C.uintptr_t
	rc := C.npu_fill_scalar(c.tensor(t, nil, nil), c.scalar(1), &ws, &ex)
	c.run(C.NPU_OP_FILL_SCALAR, rc, ws, ex)
	if b.cap != nil { // its fill is recorded, not run: the graph's own
		b.cap.own(p, 4*n)
		return t
	}
	b.ones[n] = t
	return t
}

// rowsOf is x as [rows, last] for the row-wise ops.
func rowsOf(op string, out, x *npu.Tensor) []int {
	if x.Rank() == 0 || out.Numel() != x.Numel() || x.DType() != npu.F32 || out.DType() != npu.F32 {
		panic(fmt.Sprintf("ascend: %s out %v, x %v", op, out, x))
	}
	d := x.Dim(-1)
	return []int{x.Numel() / max(d, 1), d}
}

// Softmax over the last dimension (aclnnSoftmax, dim -1). out may alias x.
func (b *Backend) Softmax(out, x *npu.Tensor) {
	shape := rowsOf("Softmax", out, x)
	if x.Numel() == 0 {
		return
	}
	b.op(func(c *call) {
		var ws C.uint64_t
		var ex C.uintptr_t
		rc := C.npu_softmax(c.tensor(x, shape, nil), -1, c.tensor(out, shape, nil), &ws, &ex)
		c.run(C.NPU_OP_SOFTMAX, rc, ws, ex)
	})
}

func (b *Backend) unary(op string, id C.int, out, x *npu.Tensor) {
	if out.Numel() != x.Numel() || x.DType() != npu.F32 || out.DType() != npu.F32 {
		panic(fmt.Sprintf("ascend: %s out %v, x %v", op, out, x))
	}
	if x.Numel() == 0 {
		return
	}
	b.op(func(c *call) {
		var ws C.uint64_t
		var ex C.uintptr_t
		var rc C.int
		xs, os := c.tensor(x, flat(x), nil), c.tensor(out, flat(out), nil)
		if id == C.NPU_OP_SIGMOID {
			rc = C.npu_sigmoid(xs, os, &ws, &ex)
		} else {
			rc = C.npu_silu(xs, os, &ws, &ex)
		}
		c.run(id, rc, ws, ex)
	})
}

// Sigmoid elementwise (aclnnSigmoid). out may alias x.
func (b *Backend) Sigmoid(out, x *npu.Tensor) { b.unary("Sigmoid", C.NPU_OP_SIGMOID, out, x) }

// SiLU elementwise (aclnnSilu). out may alias x.
func (b *Backend) SiLU(out, x *npu.Tensor) { b.unary("SiLU", C.NPU_OP_SILU, out, x) }
