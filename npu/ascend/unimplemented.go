//go:build cgo

package ascend

import (
	"fmt"

	"github.com/npuserve/npuserve/npu"
)

// The ops this build of the Ascend backend does not implement yet. Open
// refuses to open the backend while this list is not empty, so
// --device ascend never runs a partial backend; calling one directly (a
// test that constructs the Backend with New) is a programming error.
var unimplementedOps = []string{"PrepareQuant", "MatMulQ", "MoEQ"}

func notImplemented(op string) { panic(fmt.Sprintf("ascend: %s is not implemented yet", op)) }

// PrepareQuant is not implemented yet.
func (b *Backend) PrepareQuant(w *npu.QuantWeight) { notImplemented("PrepareQuant") }

// MatMulQ is not implemented yet.
func (b *Backend) MatMulQ(out, x *npu.Tensor, w *npu.QuantWeight) { notImplemented("MatMulQ") }

// MoEQ is not implemented yet.
func (b *Backend) MoEQ(out, x *npu.Tensor, gateUp, down *npu.QuantWeight, weights, ids *npu.Tensor, limit float32) {
	notImplemented("MoEQ")
}
