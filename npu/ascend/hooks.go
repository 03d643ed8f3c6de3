//go:build cgo

package ascend

/*
#include "shim.h"
*/
import "C"

import "github.com/npuserve/npuserve/npu"

// fillReusingExecutor enqueues Fill's phase 2 twice on one executor,
// breaking aclnn's single-use rule on purpose: the tests use it to show
// the stand-in catches the violation (a real CANN is expected to fail it
// too). Device thread.
func (b *Backend) fillReusingExecutor(dst *npu.Tensor, v float32) {
	c := &call{b: b}
	var ws C.uint64_t
	var ex C.uintptr_t
	rc := C.npu_fill_scalar(c.tensor(dst, flat(dst), nil), c.scalar(v), &ws, &ex)
	c.run(C.NPU_OP_FILL_SCALAR, rc, ws, ex)
	if rc := C.npu_aclnn_run(C.NPU_OP_FILL_SCALAR, 0, ws, ex, C.uintptr_t(b.stream)); rc != 0 {
		b.fail(aclnnError("aclnnInplaceFillScalar (again)", rc))
	}
}

// gmmCall enqueues aclnnGroupedMatmulV4 over F32 x viewed with xShape and
// xStrides (nil: contiguous), w viewed with wShape and wStrides, the I64
// group list groups and out (M, N), with the enum arguments as given:
// the tests use it to show the stand-in's grouped-matmul rules, valid or
// broken on purpose. Device thread.
func (b *Backend) gmmCall(x, w, groups, out *npu.Tensor, xShape, xStrides, wShape, wStrides []int, splitItem, groupType, listType, actType int) {
	b.launch(C.NPU_OP_GROUPED_MATMUL_V4, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		return C.npu_grouped_matmul_v4(c.list(c.tensor(x, xShape, xStrides)), c.list(c.tensor(w, wShape, wStrides)), 0, 0, 0, 0, 0, 0,
			c.tensor(groups, nil, nil), 0, 0, 0, C.int64_t(splitItem), C.int64_t(groupType), C.int64_t(listType), C.int64_t(actType),
			c.list(c.tensor(out, nil, nil)), 0, 0, ws, ex)
	})
}

// gmmMXCall enqueues aclnnGroupedMatmulV4 in its MX mode over U8 buffers
// read as FLOAT8_E4M3FN x (xShape) and weight (wShape, wStrides; nil:
// contiguous), FLOAT8_E8M0 scale (sShape) and perTokenScale (pShape; nil:
// no perTokenScale), the I64 group list as counts and out: the tests use
// it to show the stand-in's MX rules. Device thread.
func (b *Backend) gmmMXCall(x, w, scale, pts, groups, out *npu.Tensor, xShape, wShape, wStrides, sShape, pShape []int) {
	b.launch(C.NPU_OP_GROUPED_MATMUL_V4, func(c *call, ws *C.uint64_t, ex *C.uintptr_t) C.int {
		var pl C.uintptr_t
		if pShape != nil {
			pl = c.list(c.qtensor(pts, aclF8E8M0, 0, pShape, nil))
		}
		return C.npu_grouped_matmul_v4(c.list(c.qtensor(x, aclF8E4M3, 0, xShape, nil)), c.list(c.qtensor(w, aclF8E4M3, 0, wShape, wStrides)), 0,
			c.list(c.qtensor(scale, aclF8E8M0, 0, sShape, nil)), 0, 0, 0, pl, c.tensor(groups, nil, nil), 0, 0, 0, 3, 0, 1, 0,
			c.list(c.tensor(out, nil, nil)), 0, 0, ws, ex)
	})
}
