package cuda

import (
	"fmt"

	"github.com/npuserve/npuserve/npu"
)

// The ops this build of the CUDA backend does not implement yet. Open
// refuses to open the backend while this list is not empty, so
// --device cuda never runs a partial backend; calling one directly (a
// test that constructs the Backend with New) is a programming error.
var unimplementedOps = []string{"MoE", "PrepareQuant", "MatMulQ", "MoEQ"}

func notImplemented(op string) {
	panic(fmt.Sprintf("cuda: %s is not implemented yet", op))
}

// MoE is not implemented yet.
func (b *Backend) MoE(out, x, gateUp, down, weights, ids *npu.Tensor, limit float32) {
	notImplemented("MoE")
}

// PrepareQuant is not implemented yet.
func (b *Backend) PrepareQuant(w *npu.QuantWeight) { notImplemented("PrepareQuant") }

// MatMulQ is not implemented yet.
func (b *Backend) MatMulQ(out, x *npu.Tensor, w *npu.QuantWeight) { notImplemented("MatMulQ") }

// MoEQ is not implemented yet.
func (b *Backend) MoEQ(out, x *npu.Tensor, gateUp, down *npu.QuantWeight, weights, ids *npu.Tensor, limit float32) {
	notImplemented("MoEQ")
}
