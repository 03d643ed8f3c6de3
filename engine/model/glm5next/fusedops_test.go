package glm5next

import (
	"math/rand/v2"
	"testing"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/cpu"
)

// hcNormRecorder is the CPU backend with npu.HCPreNormer,
// npu.HCPostPreNormer and npu.SwiGLUMatMuler, counting the calls and
// doing what the interfaces say: HCPre then RMSNorm, HCPost then
// HCPreNorm, SwiGLU then MatMul.
type hcNormRecorder struct {
	npu.Backend
	calls, postPre, swiglu int
	aliased                bool // an HCPostPreNorm whose new post or comb was its old one
}

func (r *hcNormRecorder) HCPostPreNorm(xn, y, post0, comb0, x, normed, collapsed, post, comb, fn, base, scale, w *npu.Tensor, p npu.HCParams, eps float32) {
	r.postPre++
	r.aliased = r.aliased || post == post0 || comb == comb0
	r.HCPost(xn, y, post0, comb0, x)
	r.HCPreNorm(normed, collapsed, post, comb, xn, fn, base, scale, w, p, eps)
}

func (r *hcNormRecorder) MatMulSwiGLU(out, gateUp, w *npu.Tensor, limit float32) {
	r.swiglu++
	act := npu.Must(r.Alloc(npu.F32, gateUp.Dim(0), w.Dim(1)))
	defer r.Free(act)
	r.SwiGLU(act, gateUp, limit)
	r.MatMul(out, act, w)
}

func (r *hcNormRecorder) HCPreNorm(normed, collapsed, post, comb, x, fn, base, scale, w *npu.Tensor, p npu.HCParams, eps float32) {
	r.calls++
	r.HCPre(collapsed, post, comb, x, fn, base, scale, p)
	r.RMSNorm(normed, collapsed, w, eps)
}

// TestFusedOpsUsed: on a backend with npu.HCPreNormer,
// npu.HCPostPreNormer and npu.SwiGLUMatMuler every sublayer's input side
// (two per layer and step; all but the first with the previous
// sublayer's HCPost) and every dense MLP's down projection (the shared
// experts' too) go through them, and the logits are those of the
// unfused ops.
func TestFusedOpsUsed(t *testing.T) {
	cfg := testConfig(t, nil)
	rec := &hcNormRecorder{Backend: cpu.New(1)}
	plain := testModel(t, cpu.New(1), cfg, 7)
	defer plain.Close()
	fused := testModel(t, rec, cfg, 7)
	defer fused.Close()
	toks := randTokens(rand.New(rand.NewPCG(1, 2)), 9, cfg.VocabSize)
	want := newSession(t, plain, 16, 4, 2).run(toks, 4)
	got := newSession(t, fused, 16, 4, 2).run(toks, 4)
	if d := relDiff(got, want); d != 0 {
		t.Errorf("logits through HCPreNorm differ from HCPre + RMSNorm: %g", d)
	}
	steps := (len(toks) + 3) / 4
	if n := 2 * cfg.NumHiddenLayers * steps; rec.calls != n {
		t.Errorf("HCPreNorm called %d times, want %d (2 per layer, %d steps)", rec.calls, n, steps)
	}
	if n := (2*cfg.NumHiddenLayers - 1) * steps; rec.postPre != n {
		t.Errorf("HCPostPreNorm called %d times, want %d (every sublayer's input side but the first, %d steps)", rec.postPre, n, steps)
	}
	if rec.aliased {
		t.Error("HCPostPreNorm got its old post or comb as the new one")
	}
	mlps := 0
	for _, ly := range fused.layers {
		if ly.mlp != nil || ly.moe != nil && ly.moe.shared != nil {
			mlps++
		}
	}
	if mlps == 0 {
		t.Fatal("the test config has no dense MLP")
	}
	if n := mlps * steps; rec.swiglu != n {
		t.Errorf("MatMulSwiGLU called %d times, want %d (%d MLPs, %d steps)", rec.swiglu, n, mlps, steps)
	}
}
