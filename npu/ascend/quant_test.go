//go:build cgo

package ascend

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/quant"
)

// TestNZReorders: PrepareQuant's aclnnNpuFormatCast really reorders the
// int8 weight into the stand-in's FRACTAL_NZ order, the NZ-only matmul
// refuses an ND weight naming the rule, and a kernel that reads the NZ
// bytes as ND computes wrong results (so the format cannot be ignored).
func TestNZReorders(t *testing.T) {
	b := newBackend(t)
	r := rand.New(rand.NewPCG(3, 4))
	const M, N, K = 3, 40, 77
	wv := make([]byte, N*K)
	for i := range wv {
		wv[i] = byte(int8(r.IntN(7) - 3))
	}
	xv := make([]byte, M*K)
	for i := range xv {
		xv[i] = byte(int8(r.IntN(7) - 3))
	}
	ones := func(n int) *npu.Tensor {
		v := make([]float32, n)
		for i := range v {
			v[i] = 1
		}
		return npu.Must(b.FromHost(npu.F32, npu.EncodeFloats(v, npu.F32), n))
	}
	w := &npu.QuantWeight{Scheme: npu.QW8A8Dynamic, Weight: npu.Must(b.FromHost(npu.I8, wv, N, K)), Scale: ones(N)}
	b.PrepareQuant(w)
	p := w.Prepared().(*qprep)
	if !p.nz || len(p.nzShape) != 4 {
		t.Fatalf("prepared form %+v: want an NZ weight", p)
	}
	nz := make([]byte, p.w.Bytes())
	if err := b.Download(nz, p.w); err != nil {
		t.Fatal(err)
	}
	k1, same := p.nzShape[1], 0
	for n := range N {
		for k := range K {
			if got := nz[((n/32)*k1+k/16)*512+(k%16)*32+n%32]; got != wv[n*K+k] {
				t.Fatalf("NZ element (k %d, n %d) = %d, want %d", k, n, int8(got), int8(wv[n*K+k]))
			}
			if nz[k*N+n] == wv[n*K+k] { // where a [K, N] ND layout would hold it
				same++
			}
		}
	}
	if same > N*K/2 {
		t.Fatalf("%d of %d elements sit where the ND layout has them: the cast did not reorder", same, N*K)
	}

	want := make([]int32, M*N)
	for m := range M {
		for n := range N {
			for k := range K {
				want[m*N+n] += int32(int8(xv[m*K+k])) * int32(int8(wv[n*K+k]))
			}
		}
	}
	x := npu.Must(b.FromHost(npu.I8, xv, M, K))
	x1s := ones(M)
	qmm := func(nzOp, asND bool) *npu.Tensor {
		out := npu.Must(b.Alloc(npu.F16, M, N))
		b.do(func() { b.qmmInt8(nzOp, asND, p, 0, x, x1s, w.Scale, 0, nil, out) })
		return out
	}
	check := func(name string, out *npu.Tensor, wantEqual bool) {
		buf := make([]byte, out.Bytes())
		if err := b.Download(buf, out); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := npu.DecodeFloats(buf, npu.F16)
		if err != nil {
			t.Fatal(err)
		}
		diff := 0
		for i := range want {
			if got[i] != float32(want[i]) {
				diff++
			}
		}
		if wantEqual && diff > 0 {
			t.Fatalf("%s: %d of %d outputs differ from the int32 products", name, diff, len(want))
		}
		if !wantEqual && diff < len(want)/2 {
			t.Fatalf("%s: only %d of %d outputs differ: reading NZ bytes as ND should give garbage", name, diff, len(want))
		}
	}
	check("aclnnQuantMatmulWeightNz, NZ weight", qmm(true, false), true)
	check("aclnnQuantMatmulV5, NZ weight", qmm(false, false), true)
	check("aclnnQuantMatmulV5, the NZ bytes described as ND", qmm(false, true), false)

	qmm(true, true)
	if err := b.Sync(); err == nil || !strings.Contains(err.Error(), "rule x2-fractal-nz") {
		t.Fatalf("aclnnQuantMatmulWeightNz with an ND weight: %v, want the stand-in's rule x2-fractal-nz", err)
	}
}

// TestQuantSupport: the int8 schemes run on every SoC, W8A8_MXFP8 on
// the 950 only, FP8_BLOCK128 nowhere (no CANN path), each refusal with a
// reason that names the scheme.
func TestQuantSupport(t *testing.T) {
	cases := []struct {
		s    npu.QScheme
		soc  string
		want string // "" = supported; else a substring of the refusal
	}{
		{npu.QW8A8Dynamic, "Ascend910B3", ""},
		{npu.QW8A8, "Ascend910_9391", ""},
		{npu.QMXFP8, "Ascend950DT", ""},
		{npu.QMXFP8, "Ascend910B3", "needs an Ascend 950"},
		{npu.QFP8Block, "Ascend910B3", "FP8_BLOCK128"},
		{npu.QFP8Block, "Ascend950DT", "no CANN path"},
		{npu.QNone, "Ascend910B3", "unknown"},
	}
	for _, c := range cases {
		err := quantSupport(c.s, c.soc)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v on %s: %v, want supported", c.s, c.soc, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v on %s: %v, want a refusal containing %q", c.s, c.soc, err, c.want)
		}
	}
}

// TestMXFP8NeedsA950: the MX operators are documented for the 950 only;
// on the stand-in's default A2 SoC the failure names the rule at Sync.
func TestMXFP8NeedsA950(t *testing.T) {
	t.Setenv("STANDIN_SOC", "Ascend910B3") // whatever the run's SoC
	b := newBackend(t)
	const M, N, K = 2, 8, 64
	w := &npu.QuantWeight{Scheme: npu.QMXFP8, GroupSize: 32,
		Weight: npu.Must(b.Alloc(npu.F8E4M3, N, K)), Scale: npu.Must(b.Alloc(npu.U8, N, K/32))}
	out := npu.Must(b.Alloc(npu.F32, M, N))
	b.MatMulQ(out, npu.Must(b.Alloc(npu.F32, M, K)), w)
	if err := b.Sync(); err == nil || !strings.Contains(err.Error(), "rule soc-950-only") {
		t.Fatalf("MXFP8 MatMulQ on %s: %v, want the stand-in's rule soc-950-only", b.SocName(), err)
	}
}

// TestRowQuant: the fp32 per-token quantization of W8A8_DYNAMIC gives
// the CPU's int8 values and scales (quant.DynamicToken) bit for bit,
// including halfway cases (rint: to even), an all-zero row (xq 0; the
// guard's scale FLT_MIN times acc 0 is 0) and a random row; a row whose
// max|x| is below 127·FLT_MIN is quantized with the FLT_MIN floor.
func TestRowQuant(t *testing.T) {
	b := newBackend(t)
	const M, K = 4, 37
	r := rand.New(rand.NewPCG(5, 6))
	xv := make([]float32, M*K)
	xv[1*K] = 127 // row 1: scale 1, halfway values
	for i, v := range []float32{2.5, -3.5, 0.5, -0.5, 1.5, 126.5, -126.5} {
		xv[1*K+1+i] = v
	}
	for k := range K {
		xv[2*K+k] = float32(r.NormFloat64())
		xv[3*K+k] = float32(r.NormFloat64()) * 1e-38 // below 127·FLT_MIN
	}
	x := npu.Must(b.FromHost(npu.F32, npu.EncodeFloats(xv, npu.F32), M, K))
	xq, xs := npu.Must(b.Alloc(npu.I8, M, K)), npu.Must(b.Alloc(npu.F32, M))
	b.do(func() { b.rowQuant(xq, xs, x, M, K) })
	q := make([]byte, M*K)
	sb := make([]byte, 4*M)
	if err := b.Download(q, xq); err != nil {
		t.Fatal(err)
	}
	if err := b.Download(sb, xs); err != nil {
		t.Fatal(err)
	}
	scales, err := npu.DecodeFloats(sb, npu.F32)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]int8, K)
	for m := range M {
		s := quant.DynamicToken(want, xv[m*K:(m+1)*K])
		switch m {
		case 0:
			s = math.Float32frombits(0x00800000) // FLT_MIN: the zero-row guard
		case 3:
			s = math.Float32frombits(0x00800000)
			quant.QuantizeSym(want, xv[m*K:(m+1)*K], s)
		}
		if scales[m] != s {
			t.Errorf("row %d: scale %g, want %g", m, scales[m], s)
		}
		for k := range K {
			if got := int8(q[m*K+k]); got != want[k] {
				t.Errorf("row %d: xq[%d] = %d, want %d (x %g)", m, k, got, want[k], xv[m*K+k])
			}
		}
	}
	if got := []int8{int8(q[K+1]), int8(q[K+2]), int8(q[K+3]), int8(q[K+4]), int8(q[K+5]), int8(q[K+6]), int8(q[K+7])}; !slices.Equal(got, []int8{2, -4, 0, 0, 2, 126, -126}) {
		t.Errorf("halfway values quantized to %v, want to even", got)
	}
}
