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
