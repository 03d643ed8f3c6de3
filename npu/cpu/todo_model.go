package cpu

// TEMPORARY during development: each method below moves to its real file
// when implemented; this file must be deleted before commit.

import "github.com/npuserve/npuserve/npu"

func (be *Backend) HCPre(collapsed, post, comb, x, fn, base, scale *npu.Tensor, p npu.HCParams) {
	panic("cpu: HCPre not implemented")
}

func (be *Backend) HCPost(out, y, post, comb, x *npu.Tensor) { panic("cpu: HCPost not implemented") }

func (be *Backend) HCMean(out, x *npu.Tensor) { panic("cpu: HCMean not implemented") }

func (be *Backend) Router(weights, ids, x, gate, bias *npu.Tensor, p npu.RouterParams) {
	panic("cpu: Router not implemented")
}

func (be *Backend) MoE(out, x, gateUp, down, weights, ids *npu.Tensor, limit float32) {
	panic("cpu: MoE not implemented")
}
