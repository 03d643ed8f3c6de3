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
