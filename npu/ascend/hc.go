//go:build cgo

package ascend

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"

	"github.com/npuserve/npuserve/npu"
)

// konst is an F32 [1] scratch tensor holding v (device thread).
func (b *Backend) konst(v float32) *npu.Tensor {
	t := b.scratch(npu.F32, 1)
	b.launch(C.NPU_OP_FILL_SCALAR, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_fill_scalar(c.tensor(t, nil, nil), c.scalar(v), ws, ex)
	})
	return t
}

// affine enqueues dst [T, w] = src[:, off:off+w] (a view of src [T, mix])
// * scale[si] + base[off:off+w], both broadcast from device tensors
// (aclnnMul, aclnnAdd; device thread).
func (b *Backend) affine(dst, src, scale, base *npu.Tensor, T, mix, off, w, si int) {
	shape := []int{T, w}
	b.launch(C.NPU_OP_MUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_mul(c.view(src, off, shape, []int{mix, 1}), c.view(scale, si, []int{1}, nil), c.tensor(dst, shape, nil), ws, ex)
	})
	b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_add(c.tensor(dst, shape, nil), c.view(base, off, []int{w}, nil), c.scalar(1), c.tensor(dst, shape, nil), ws, ex)
	})
}

// normalise enqueues z [T, n, n] /= (sum over dim + eps) (aclnnReduceSum
// keepdim, aclnnAdd, aclnnDiv; device thread).
func (b *Backend) normalise(z, eps *npu.Tensor, T, n, dim int) {
	sshape := []int{T, n, 1}
	if dim == 1 {
		sshape = []int{T, 1, n}
	}
	s := b.scratch(npu.F32, sshape...)
	b.launch(C.NPU_OP_REDUCE_SUM, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_reduce_sum(c.tensor(z, nil, nil), c.ints(dim), 1, aclDType(npu.F32), c.tensor(s, nil, nil), ws, ex)
	})
	b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_add(c.tensor(s, nil, nil), c.tensor(eps, nil, nil), c.scalar(1), c.tensor(s, nil, nil), ws, ex)
	})
	b.launch(C.NPU_OP_DIV, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_div(c.tensor(z, nil, nil), c.tensor(s, nil, nil), c.tensor(z, nil, nil), ws, ex)
	})
}

// HCPre is the mHC input side, composed: the mixing logits m = x·fnᵀ over
// all tokens (MatMul), the per-token rsqrt(mean(x²)+RMSEps) as
// aclnnRmsNorm's rstd output (its normalised output is scratch, unused)
// times m (aclnnMul), the three affine maps by scale[i] and base (aclnnMul,
// aclnnAdd from device tensors, no host read), pre = sigmoid + eps, post =
// 2*sigmoid, comb = row softmax + eps then the Sinkhorn column/row
// normalisations (aclnnReduceSum, aclnnAdd, aclnnDiv each, 2*iters-1
// rounds), and collapsed = pre · x per token as one aclnnBatchMatMul
// ([T,1,n] @ [T,n,D]). Cost: about 22 + 6*SinkhornIters operators on
// small tensors plus one wasted write of x's size (RmsNorm's y); the
// Sinkhorn sums are double-accumulated in the stand-in where the CPU
// backend sums in fp32.
func (b *Backend) HCPre(collapsed, post, comb, x, fn, base, scale *npu.Tensor, p npu.HCParams) {
	n := p.Streams
	if n < 1 || x.Rank() != 3 || x.Dim(1) != n || x.DType() != npu.F32 {
		panic(fmt.Sprintf("ascend: HCPre x %v with %d streams", x, n))
	}
	T, D := x.Dim(0), x.Dim(2)
	mix, nD := (2+n)*n, n*D
	if fn.Numel() != mix*nD || fn.Dim(0) != mix || base.Numel() != mix || scale.Numel() != 3 {
		panic(fmt.Sprintf("ascend: HCPre fn %v base %v scale %v for %d streams of %d", fn, base, scale, n, D))
	}
	if collapsed.Numel() != T*D || post.Numel() != T*n || comb.Numel() != T*n*n ||
		collapsed.DType() != npu.F32 || post.DType() != npu.F32 || comb.DType() != npu.F32 {
		panic(fmt.Sprintf("ascend: HCPre outputs collapsed %v post %v comb %v for x %v", collapsed, post, comb, x))
	}
	if T == 0 {
		return
	}
	m := b.alloc(npu.F32, T, mix)
	b.MatMul(m, x.Reshape(T, nD), fn.Reshape(mix, nD))
	b.do(func() {
		sc, bs := b.asF32(scale), b.asF32(base)
		eps := b.konst(p.Eps)
		y, rstd := b.scratch(npu.F32, T, nD), b.scratch(npu.F32, T, 1)
		b.launch(C.NPU_OP_RMS_NORM, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_rms_norm(c.tensor(x, []int{T, nD}, nil), c.tensor(b.unitGamma(nD), nil, nil), C.double(p.RMSEps), c.tensor(y, nil, nil), c.tensor(rstd, nil, nil), ws, ex)
		})
		b.launch(C.NPU_OP_MUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_mul(c.tensor(m, nil, nil), c.tensor(rstd, nil, nil), c.tensor(m, nil, nil), ws, ex)
		})
		pre := b.scratch(npu.F32, T, n)
		b.affine(pre, m, sc, bs, T, mix, 0, n, 0)
		b.launch(C.NPU_OP_SIGMOID, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_sigmoid(c.tensor(pre, nil, nil), c.tensor(pre, nil, nil), ws, ex)
		})
		b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_add(c.tensor(pre, nil, nil), c.tensor(eps, nil, nil), c.scalar(1), c.tensor(pre, nil, nil), ws, ex)
		})
		b.affine(post, m, sc, bs, T, mix, n, n, 1)
		b.launch(C.NPU_OP_SIGMOID, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_sigmoid(c.tensor(post, flat(post), nil), c.tensor(post, flat(post), nil), ws, ex)
		})
		b.launch(C.NPU_OP_MULS, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_muls(c.tensor(post, flat(post), nil), c.scalar(2), c.tensor(post, flat(post), nil), ws, ex)
		})
		z := comb.Reshape(T, n, n)
		b.affine(z.Reshape(T, n*n), m, sc, bs, T, mix, 2*n, n*n, 2)
		b.launch(C.NPU_OP_SOFTMAX, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_softmax(c.tensor(z, nil, nil), -1, c.tensor(z, nil, nil), ws, ex)
		})
		b.launch(C.NPU_OP_ADD, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_add(c.tensor(z, nil, nil), c.tensor(eps, nil, nil), c.scalar(1), c.tensor(z, nil, nil), ws, ex)
		})
		b.normalise(z, eps, T, n, 1)
		for it := 1; it < p.SinkhornIters; it++ {
			b.normalise(z, eps, T, n, 2)
			b.normalise(z, eps, T, n, 1)
		}
		b.launch(C.NPU_OP_BATCH_MATMUL, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
			return C.npu_batch_matmul(c.tensor(pre, []int{T, 1, n}, nil), c.tensor(x, nil, nil), c.tensor(collapsed, []int{T, 1, D}, nil), 0, ws, ex)
		})
	})
}
