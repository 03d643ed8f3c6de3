//go:build cgo

package ascend

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/cpu"
	"github.com/npuserve/npuserve/npu/opcheck"
)

// syncWatch is the backend with the ops that plan on the host (or, MoE,
// used to) wrapped to count the stream syncs each call makes.
type syncWatch struct {
	*Backend
	calls, syncs int
}

func (w *syncWatch) watch(fn func()) {
	before := w.Backend.syncs
	fn()
	w.calls++
	w.syncs += w.Backend.syncs - before
}

func (w *syncWatch) Conv1d(out, x, state, wt *npu.Tensor, seqs *npu.SeqLayout, silu bool) {
	w.watch(func() { w.Backend.Conv1d(out, x, state, wt, seqs, silu) })
}

func (w *syncWatch) KDA(out, qkv, g, beta, state *npu.Tensor, seqs *npu.SeqLayout, heads, headDim, chunk int) {
	w.watch(func() { w.Backend.KDA(out, qkv, g, beta, state, seqs, heads, headDim, chunk) })
}

func (w *syncWatch) MoE(out, x, gateUp, down, weights, ids *npu.Tensor, limit float32) {
	w.watch(func() { w.Backend.MoE(out, x, gateUp, down, weights, ids, limit) })
}

func (w *syncWatch) DSAIndex(out, q, wt, pooled *npu.Tensor, seqs *npu.SeqLayout, p npu.IndexParams) {
	w.watch(func() { w.Backend.DSAIndex(out, q, wt, pooled, seqs, p) })
}

func (w *syncWatch) SparseMLA(out, q, latents, kvB, sel *npu.Tensor, seqs *npu.SeqLayout, heads, dk, dv int, scale float32) {
	w.watch(func() { w.Backend.SparseMLA(out, q, latents, kvB, sel, seqs, heads, dk, dv, scale) })
}

// TestOpsDoNotSync runs the conformance cases of the ops that need the
// batch layout or device-computed ids (layouts uploaded by
// BatchLayout.Upload, as the model does) and checks that no call syncs
// the stream: the layout comes from the upload's host shadow, MoE's ids
// stay on the device.
func TestOpsDoNotSync(t *testing.T) {
	b := newBackend(t)
	c := cpu.New(1)
	for _, op := range []string{"Conv1d", "KDA", "MoE", "DSAIndex", "SparseMLA"} {
		t.Run(op, func(t *testing.T) {
			w := &syncWatch{Backend: b}
			for _, tc := range opcheck.Cases() {
				if tc.Op != op || !tc.Applies(w) {
					continue
				}
				if r := opcheck.RunCase(tc, w, c, opcheck.Options{Seed: 11}); !r.Pass {
					t.Fatalf("%v", r)
				}
			}
			if w.calls == 0 {
				t.Fatalf("no %s case ran", op)
			}
			if w.syncs != 0 {
				t.Fatalf("%d calls of %s made %d stream syncs, want none", w.calls, op, w.syncs)
			}
		})
	}
}

// TestLayoutShadow: an op refuses (panics, naming the cause) a layout
// whose values the host has no shadow of, and shadows follow the bytes:
// a device write or a Free drops them, a later Upload replaces them.
func TestLayoutShadow(t *testing.T) {
	b := newBackend(t)
	l := &npu.BatchLayout{QueryStart: []int{0, 2, 3}, Pos: []int{0, 5}, StateSlot: []int{1, 0}, BlockSize: 4,
		BlockTables: [][]int32{{2}, {0, 1}}}
	x, state, w := npu.Must(b.Alloc(npu.F32, 3, 4)), npu.Must(b.Alloc(npu.F32, 2, 2, 4)), npu.Must(b.Alloc(npu.F32, 4, 3))
	out := npu.Must(b.Alloc(npu.F32, 3, 4))
	conv := func(seqs *npu.SeqLayout) (msg string) {
		defer func() {
			if p := recover(); p != nil {
				msg, _ = p.(string)
			}
		}()
		b.Conv1d(out, x, state, w, seqs, true)
		return ""
	}
	cases := []struct {
		name  string
		seqs  func() *npu.SeqLayout
		panic string // "" for a call that must succeed
	}{
		{"uploaded", func() *npu.SeqLayout {
			s, _, err := l.Upload(b)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}, ""},
		{"written on the device since", func() *npu.SeqLayout {
			s, buf, _ := l.Upload(b)
			src := npu.Must(b.FromHost(npu.I32, npu.EncodeInt32s([]int32{0, 2, 3}), 3))
			b.Copy(buf.Rows(0, 3), src) // same values, but the device wrote them
			return s
		}, "no host shadow"},
		{"freed", func() *npu.SeqLayout {
			s, buf, _ := l.Upload(b)
			b.Free(buf)
			return s
		}, "no host shadow"},
		{"uploaded again after a device write", func() *npu.SeqLayout {
			s, buf, _ := l.Upload(b)
			b.Fill(npu.Must(b.Alloc(npu.F32, 1)), 0)
			b.Copy(buf.Rows(0, 1), npu.Must(b.FromHost(npu.I32, npu.EncodeInt32s([]int32{0}), 1)))
			words := l.Encode(nil)
			if err := b.Upload(buf.Rows(0, len(words)), npu.EncodeInt32s(words)); err != nil {
				t.Fatal(err)
			}
			return s
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			seqs := tc.seqs()
			msg := conv(seqs)
			if tc.panic == "" && msg != "" || tc.panic != "" && !strings.Contains(msg, tc.panic) {
				t.Fatalf("Conv1d: panic %q, want %q", msg, tc.panic)
			}
			if err := b.Sync(); err != nil {
				t.Fatalf("Sync: %v", err)
			}
		})
	}
}

// TestWeightCastsReused: a step's MatMuls with BF16 weights cast each
// weight to an F32 scratch copy; recycled in stream order, the copies of
// twenty MatMuls take the memory of one (the pending list does not grow)
// and the results are unchanged, where without recycling every copy
// stayed allocated until the Sync.
func TestWeightCastsReused(t *testing.T) {
	b := newBackend(t)
	r := rand.New(rand.NewPCG(3, 4))
	const M, K, N, steps = 3, 64, 40, 20
	xb := npu.EncodeFloats(randF32(r, M*K), npu.F32)
	x := npu.Must(b.FromHost(npu.F32, xb, M, K))
	ws, wbs := make([]*npu.Tensor, steps), make([][]byte, steps)
	outs := make([]*npu.Tensor, steps)
	for i := range ws {
		wbs[i] = npu.EncodeFloats(randF32(r, N*K), npu.BF16)
		ws[i] = npu.Must(b.FromHost(npu.BF16, wbs[i], N, K))
		outs[i] = npu.Must(b.Alloc(npu.F32, M, N))
	}
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	var before int
	b.do(func() { before = len(b.pending) })
	for i := range ws {
		b.MatMul(outs[i], x, ws[i])
	}
	var after int
	b.do(func() { after = len(b.pending) })
	// One cast copy and, possibly, the operator workspace.
	if after-before > 2 {
		t.Errorf("%d MatMuls left %d more scratch allocations pending, want at most 2", steps, after-before)
	}
	c := cpu.New(1)
	for i := range ws {
		got := download(t, b, outs[i])
		want := npu.Must(c.Alloc(npu.F32, M, N))
		c.MatMul(want, npu.Must(c.FromHost(npu.F32, xb, M, K)), npu.Must(c.FromHost(npu.BF16, wbs[i], N, K)))
		wv := npu.MustF32(c, want)
		for j := range wv {
			if d := math.Abs(float64(got[j] - wv[j])); d > 1e-5*math.Max(1, math.Abs(float64(wv[j]))) {
				t.Fatalf("MatMul %d element %d: %v, want %v", i, j, got[j], wv[j])
			}
		}
	}
}
