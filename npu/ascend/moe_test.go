//go:build cgo

package ascend

import (
	"encoding/binary"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/cpu"
	"github.com/npuserve/npuserve/npu/opcheck"
)

func i64s(t *testing.T, b *Backend, v ...int64) *npu.Tensor {
	t.Helper()
	buf := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(buf[8*i:], uint64(x))
	}
	return npu.Must(b.FromHost(npu.I64, buf, len(v)))
}

// TestGroupedMatmulRules runs aclnnGroupedMatmulV4 as MoE calls it
// (groupType 0, single tensors, a transposed weight) against a product
// computed here, with the group list as counts and as a cumsum, and
// breaks one documented rule per case: the stand-in refuses each, naming
// it, at phase 1 or (the group list lives on the device) when it runs.
func TestGroupedMatmulRules(t *testing.T) {
	b := newBackend(t)
	r := rand.New(rand.NewPCG(11, 12))
	const M, K, N, E = 7, 5, 6, 3
	xv, wv := randF32(r, M*K), randF32(r, E*N*K) // w stored [E, N, K], used as (E, K, N)
	x := npu.Must(b.FromHost(npu.F32, npu.EncodeFloats(xv, npu.F32), M, K))
	w := npu.Must(b.FromHost(npu.F32, npu.EncodeFloats(wv, npu.F32), E, N, K))
	wShape, wT := []int{E, K, N}, []int{N * K, 1, K}
	want := make([]float32, M*N)
	end := []int{3, 3, 7} // each expert's end row
	for m, g := 0, 0; m < M; m++ {
		for m >= end[g] {
			g++
		}
		for n := range N {
			var s float32
			for k := range K {
				s += xv[m*K+k] * wv[(g*N+n)*K+k]
			}
			want[m*N+n] = s
		}
	}
	for _, tc := range []struct {
		name   string
		groups []int64
		list   int
	}{{"counts", []int64{3, 0, 4}, 1}, {"cumsum", []int64{3, 3, 7}, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			out := npu.Must(b.Alloc(npu.F32, M, N))
			g := i64s(t, b, tc.groups...)
			b.do(func() { b.gmmCall(x, w, g, out, nil, nil, wShape, wT, 3, 0, tc.list, 0) })
			got := download(t, b, out)
			for i := range want {
				if math.Abs(float64(got[i]-want[i])) > 1e-5*math.Max(1, math.Abs(float64(want[i]))) {
					t.Fatalf("element %d: %v, want %v", i, got[i], want[i])
				}
			}
		})
	}
	out := npu.Must(b.Alloc(npu.F32, M, N))
	for _, tc := range []struct {
		name, rule      string
		groups          []int64
		xShape, xStride []int
		split, gt, lt   int
		act             int
	}{
		{"counts short of M", "gmm-group-list-covers-m", []int64{3, 0, 3}, nil, nil, 3, 0, 1, 0},
		{"cumsum past M", "gmm-group-list-covers-m", []int64{3, 3, 8}, nil, nil, 3, 0, 0, 0},
		{"cumsum decreasing", "gmm-group-list-cumsum-monotonic", []int64{3, 2, 7}, nil, nil, 3, 0, 0, 0},
		{"a negative count", "gmm-group-list-nonnegative", []int64{8, -1, 0}, nil, nil, 3, 0, 1, 0},
		{"one group too few", "gmm-group-list-shape", []int64{3, 4}, nil, nil, 3, 0, 1, 0},
		{"splitItem 0 with single tensors", "gmm-split-item", []int64{3, 0, 4}, nil, nil, 0, 0, 1, 0},
		{"grouping along n", "gmm-no-n-grouping", []int64{3, 0, 4}, nil, nil, 3, 1, 1, 0},
		{"groupListType 3", "gmm-enums", []int64{3, 0, 4}, nil, nil, 3, 0, 3, 0},
		{"an activation without quantization", "gmm-activation-quant-only", []int64{3, 0, 4}, nil, nil, 3, 0, 1, 5},
		{"a transposed x", "gmm-x-not-transposed", []int64{3, 0, 4}, []int{M, K}, []int{1, M}, 3, 0, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := i64s(t, b, tc.groups...)
			b.do(func() { b.gmmCall(x, w, g, out, tc.xShape, tc.xStride, wShape, wT, tc.split, tc.gt, tc.lt, tc.act) })
			err := b.Sync()
			if err == nil || !strings.Contains(err.Error(), "rule "+tc.rule) {
				t.Fatalf("Sync: %v, want the stand-in's rule %q", err, tc.rule)
			}
		})
	}
}

// TestGraphReplayMoE captures MoE and MoEQ W8A8_DYNAMIC (routing
// permuted, counted and combined on the device) and replays them with new
// inputs and a new routing uploaded into the same buffers, experts gaining
// and losing every row: each replay equals the eager run bit for bit, and
// MoE the CPU backend within the conformance tolerance. A routing baked in
// at capture would replay the captured one and fail.
func TestGraphReplayMoE(t *testing.T) {
	b := newBackend(t)
	c := cpu.New(1)
	r := rand.New(rand.NewPCG(7, 8))
	const T, D, E, I, k = 6, 16, 5, 8, 2
	gu := put(t, b, c, npu.BF16, randF32(r, E*2*I*D), E, 2*I, D)
	dn := put(t, b, c, npu.F32, randF32(r, E*D*I), E, D, I)
	qw := func(n, kk int) *npu.QuantWeight {
		wv := make([]byte, E*n*kk)
		for i := range wv {
			wv[i] = byte(int8(r.IntN(255) - 127))
		}
		return &npu.QuantWeight{Scheme: npu.QW8A8Dynamic, Weight: npu.Must(b.FromHost(npu.I8, wv, E, n, kk)),
			Scale: npu.Must(b.FromHost(npu.F32, npu.EncodeFloats(randF32(r, E*n), npu.F32), E, n))}
	}
	qgu, qdn := qw(2*I, D), qw(D, I)
	x, w := zeros(t, b, c, npu.F32, T, D), zeros(t, b, c, npu.F32, T, k)
	ids, out := zeros(t, b, c, npu.I32, T, k), zeros(t, b, c, npu.F32, T, D)
	routings := [][]int32{
		{0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1}, // captured: experts 2-4 idle
		{4, 3, 2, 4, 3, 2, 4, 3, 2, 4, 3, 2}, // replays: 0 and 1 idle
		{1, 4, 0, 2, 3, 1, 2, 0, 4, 3, 1, 0},
		{2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3},
	}
	for _, tc := range []struct {
		name string
		run  func()
		ref  bool // compare with the CPU backend's MoE
	}{
		{"MoE", func() { b.MoE(out.a, x.a, gu.a, dn.a, w.a, ids.a, 7) }, true},
		{"MoEQ W8A8_DYNAMIC", func() { b.MoEQ(out.a, x.a, qgu, qdn, w.a, ids.a, 7) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			upload := func(rep int) {
				xs, ws := randF32(r, T*D), randF32(r, T*k)
				for _, be := range []npu.Backend{b, c} {
					p := func(q pair) *npu.Tensor { return q.a }
					if be == npu.Backend(c) {
						p = func(q pair) *npu.Tensor { return q.c }
					}
					for _, u := range []struct {
						t    *npu.Tensor
						data []byte
					}{{p(x), npu.EncodeFloats(xs, npu.F32)}, {p(w), npu.EncodeFloats(ws, npu.F32)}, {p(ids), npu.EncodeInt32s(routings[rep])},
						{p(out), npu.EncodeFloats(make([]float32, T*D), npu.F32)}} {
						if err := be.Upload(u.t, u.data); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			upload(0)
			tc.run() // the first eager run makes what it keeps (prepared weights, unit vectors)
			if err := b.BeginCapture(); err != nil {
				t.Fatal(err)
			}
			tc.run()
			gr, err := b.EndCapture()
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := gr.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			}()
			for rep := 1; rep < len(routings); rep++ {
				upload(rep)
				if err := gr.Launch(); err != nil {
					t.Fatal(err)
				}
				got := download(t, b, out.a)
				if err := b.Upload(out.a, npu.EncodeFloats(make([]float32, T*D), npu.F32)); err != nil {
					t.Fatal(err)
				}
				tc.run()
				eager := download(t, b, out.a)
				if slices.Max(eager) == 0 && slices.Min(eager) == 0 {
					t.Fatalf("replay %d: the eager output is all zeros", rep)
				}
				for i := range eager {
					if got[i] != eager[i] {
						t.Fatalf("replay %d element %d: graph %v, eager %v", rep, i, got[i], eager[i])
					}
				}
				if !tc.ref {
					continue
				}
				c.MoE(out.c, x.c, gu.c, dn.c, w.c, ids.c, 7)
				want := download(t, c, out.c)
				var rms float64
				for _, v := range want {
					rms += float64(v) * float64(v)
				}
				rms = math.Sqrt(rms / float64(len(want)))
				for i := range want {
					if math.Abs(float64(got[i]-want[i])) > 1e-4*math.Max(rms, math.Abs(float64(want[i]))) {
						t.Fatalf("replay %d element %d: ascend %v, cpu %v", rep, i, got[i], want[i])
					}
				}
			}
		})
	}
}

// TestMoEQMXFP8Grouped: on the 950, MoEQ with W8A8_MXFP8 experts matches
// the CPU backend (npu/opcheck's case) through the grouped form: two
// aclnnDynamicMxQuant and two MX aclnnGroupedMatmulV4 calls, no
// per-expert aclnnQuantMatmulV5 (the dense form made 2E of them).
func TestMoEQMXFP8Grouped(t *testing.T) {
	t.Setenv("STANDIN_SOC", "Ascend950DT_9582")
	b := newBackend(t)
	c := cpu.New(1)
	ran := 0
	for _, tc := range opcheck.Cases() {
		if tc.Op != "MoEQ" || !strings.Contains(tc.Name, "MXFP8") || !tc.Applies(b) {
			continue
		}
		ran++
		before := maps.Clone(b.enqueued)
		if r := opcheck.RunCase(tc, b, c, opcheck.Options{Seed: 7, Reps: 1}); !r.Pass {
			t.Fatalf("%v", r)
		}
		runs := 2 // RunCase runs the case twice (once to check it repeats)
		for op, want := range map[string]int{"aclnnGroupedMatmulV4": 2, "aclnnDynamicMxQuant": 2, "aclnnQuantMatmulV5": 0} {
			if got := b.enqueued[op] - before[op]; got%runs != 0 || got/runs != want {
				t.Errorf("%s: %d calls of %s over %d runs, want %d per run", tc.Key(), got, op, runs, want)
			}
		}
	}
	if ran == 0 {
		t.Fatal("no MoEQ MXFP8 case applies on the 950")
	}
}

// TestGroupedMatmulMXRules: the stand-in's aclnnGroupedMatmulV4 MX mode
// takes the documented layouts (scale (g, ceil(K/64), N, 2), or
// (g, N, ceil(K/64), 2) with the weight transposed; perTokenScale
// (M, ceil(K/64), 2)) and refuses each broken rule, naming it.
func TestGroupedMatmulMXRules(t *testing.T) {
	t.Setenv("STANDIN_SOC", "Ascend950DT_9582")
	b := newBackend(t)
	const M, K, N, E, kb2 = 4, 96, 8, 2, 2
	buf := func(n int) *npu.Tensor { return npu.Must(b.FromHost(npu.U8, make([]byte, n), n)) }
	x, w, s, p := buf(M*K), buf(E*K*N), buf(E*kb2*N*2), buf(M*kb2*2)
	groups := i64s(t, b, 1, 3)
	out := npu.Must(b.Alloc(npu.F32, M, N))
	xs, ws, wT := []int{M, K}, []int{E, K, N}, []int{N * K, 1, K}
	for _, tc := range []struct {
		name, soc, rule string
		wStrides        []int
		sShape, pShape  []int
	}{
		{"plain weight", "", "", nil, []int{E, kb2, N, 2}, []int{M, kb2, 2}},
		{"transposed weight", "", "", wT, []int{E, N, kb2, 2}, []int{M, kb2, 2}},
		{"on an A2", "Ascend910B3", "gmm-mx-950-only", nil, []int{E, kb2, N, 2}, []int{M, kb2, 2}},
		{"no perTokenScale", "", "gmm-mx-dtypes", nil, []int{E, kb2, N, 2}, nil},
		{"scale per 32, not pairs", "", "gmm-mx-scale-shape", nil, []int{E, 2 * kb2, N}, []int{M, kb2, 2}},
		{"the transposed layout for a plain weight", "", "gmm-mx-scale-shape", nil, []int{E, N, kb2, 2}, []int{M, kb2, 2}},
		{"perTokenScale unpaired", "", "gmm-mx-per-token-scale-shape", nil, []int{E, kb2, N, 2}, []int{M, 2 * kb2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.soc != "" {
				t.Setenv("STANDIN_SOC", tc.soc)
			}
			b.do(func() { b.gmmMXCall(x, w, s, p, groups, out, xs, ws, tc.wStrides, tc.sShape, tc.pShape) })
			err := b.Sync()
			if tc.rule == "" {
				if err != nil {
					t.Fatalf("Sync: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "rule "+tc.rule) {
				t.Fatalf("Sync: %v, want the stand-in's rule %q", err, tc.rule)
			}
		})
	}
}
