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
var unimplementedOps = []string{"DSAIndex", "SparseMLA"}

func notImplemented(op string) { panic(fmt.Sprintf("ascend: %s is not implemented yet", op)) }

// DSAIndex is not implemented yet.
func (b *Backend) DSAIndex(out, q, w, pooled *npu.Tensor, seqs *npu.SeqLayout, p npu.IndexParams) {
	notImplemented("DSAIndex")
}

// SparseMLA is not implemented yet.
func (b *Backend) SparseMLA(out, q, latents, kvB, sel *npu.Tensor, seqs *npu.SeqLayout, heads, dk, dv int, scale float32) {
	notImplemented("SparseMLA")
}
