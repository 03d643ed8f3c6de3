package cuda

import (
	"errors"
	"slices"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

// graphStep is a small decode-like chain: bf16 GEMMs (cuBLASLt: M is
// above the small-GEMM kernel's rows) and an fp32 one, SwiGLU, the router
// and MoE (ops with scratch of their own) and TopK.
type graphStep struct {
	x, w, w32, gu, dn, gate, bias *npu.Tensor // inputs (x rewritten per replay)
	h, h32, a, rw, ids, out       *npu.Tensor
	vals, top                     *npu.Tensor
}

func (s *graphStep) run(be npu.Backend) {
	be.MatMul(s.h32, s.x, s.w32)
	be.MatMul(s.h, s.x, s.w)
	be.Add(s.h, s.h, s.h32)
	be.SwiGLU(s.a, s.h, 0)
	be.Router(s.rw, s.ids, s.a, s.gate, s.bias, npu.RouterParams{TopK: 2, NGroup: 1, TopKGroup: 1, Normalize: true, Scale: 1})
	be.Fill(s.out, 0)
	be.MoE(s.out, s.a, s.gu, s.dn, s.rw, s.ids, 0)
	be.TopK(s.vals, s.top, s.out, 3)
}

// TestGPUGraphReplay captures a chain of ops once and replays it with new
// inputs uploaded into the same buffers before each Launch: every replay
// equals the eager run on those inputs, bit for bit.
func TestGPUGraphReplay(t *testing.T) {
	h := newBoth(t, 41)
	g := h.g
	const T, K, N, E, I = 9, 64, 96, 8, 16
	D := N / 2
	mk := func(dt npu.DType, scale float32, shape ...int) *npu.Tensor { return h.rand(dt, scale, shape...).g }
	zero := func(dt npu.DType, shape ...int) *npu.Tensor { return npu.Must(g.Alloc(dt, shape...)) }
	s := &graphStep{
		x: mk(npu.F32, 1, T, K), w: mk(npu.BF16, 0.2, N, K), w32: mk(npu.F32, 0.1, N, K),
		gu: mk(npu.BF16, 0.2, E, 2*I, D), dn: mk(npu.BF16, 0.2, E, D, I),
		gate: mk(npu.F32, 0.3, E, D), bias: mk(npu.F32, 0.1, E),
		h: zero(npu.F32, T, N), h32: zero(npu.F32, T, N), a: zero(npu.F32, T, D), rw: zero(npu.F32, T, 2), ids: zero(npu.I32, T, 2),
		out: zero(npu.F32, T, D), vals: zero(npu.F32, T, 3), top: zero(npu.I32, T, 3),
	}
	h.sync()
	if err := g.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	s.run(g)
	graph, err := g.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	defer graph.Close()
	t.Logf("graph memory: %d bytes", graph.Bytes())
	for rep := range 3 {
		xs := make([]float32, T*K)
		for i := range xs {
			xs[i] = float32(h.r.NormFloat64())
		}
		if err := g.Upload(s.x, encode(xs, npu.F32)); err != nil {
			t.Fatal(err)
		}
		if err := graph.Launch(); err != nil {
			t.Fatal(err)
		}
		gotOut := npu.MustF32(g, s.out)
		gotTop := npu.MustI32(g, s.top)
		s.run(g) // eager, same inputs
		wantOut := npu.MustF32(g, s.out)
		wantTop := npu.MustI32(g, s.top)
		if !slices.Equal(gotOut, wantOut) || !slices.Equal(gotTop, wantTop) {
			t.Fatalf("replay %d differs from eager: top %v, want %v", rep, gotTop, wantTop)
		}
	}
}

// TestGPUGraphRefusals: what cannot be captured fails the capture with
// ErrCapturing, and the backend runs eagerly afterwards.
func TestGPUGraphRefusals(t *testing.T) {
	g := gpu(t)
	x := npu.Must(g.Alloc(npu.F32, 4))
	defer g.Free(x)
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"Alloc", func() error { _, err := g.Alloc(npu.F32, 4); return err }},
		{"Upload", func() error { return g.Upload(x, make([]byte, 16)) }},
		{"Download", func() error { return g.Download(make([]byte, 16), x) }},
		{"Sync", g.Sync},
	} {
		if err := g.BeginCapture(); err != nil {
			t.Fatal(err)
		}
		g.Fill(x, 1)
		if err := c.call(); !errors.Is(err, npu.ErrCapturing) {
			t.Errorf("%s during capture: %v, want ErrCapturing", c.name, err)
		}
		if gr, err := g.EndCapture(); err == nil || !errors.Is(err, npu.ErrCapturing) {
			t.Errorf("%s: EndCapture = %v, %v; want the refusal", c.name, gr, err)
			if gr != nil {
				gr.Close()
			}
		}
		g.Fill(x, 2)
		if v, err := npu.DownloadF32(g, x); err != nil || v[0] != 2 {
			t.Fatalf("after a failed capture (%s): %v %v", c.name, v, err)
		}
	}
}
