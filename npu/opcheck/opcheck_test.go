package opcheck

import (
	"encoding/json"
	"math"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/cpu"
	"github.com/npuserve/npuserve/npu/cpuasync"
)

// TestTableCoversOps: every method of npu.Ops (and npu.SampleReducer,
// npu.SampleHistogrammer) has
// at least one case, and no case names an op that does not exist.
func TestTableCoversOps(t *testing.T) {
	want := map[string]bool{}
	for _, typ := range []reflect.Type{reflect.TypeFor[npu.Ops](), reflect.TypeFor[npu.SampleReducer](), reflect.TypeFor[npu.SampleHistogrammer]()} {
		for i := range typ.NumMethod() {
			want[typ.Method(i).Name] = true
		}
	}
	delete(want, "PrepareQuant") // run by the MatMulQ and MoEQ cases' setup
	have := map[string]bool{}
	keys := map[string]bool{}
	for _, c := range Cases() {
		if !want[c.Op] {
			t.Errorf("case %q names no op of npu.Ops", c.Key())
		}
		if keys[c.Key()] {
			t.Errorf("case %q appears twice", c.Key())
		}
		keys[c.Key()], have[c.Op] = true, true
		if c.Why == "" || c.Tol < 0 {
			t.Errorf("case %q: tolerance %v without a reason", c.Key(), c.Tol)
		}
	}
	for op := range want {
		if !have[op] {
			t.Errorf("no case for %s", op)
		}
	}
}

// TestConformingBackends: the reference passes against itself (another
// thread count, so other work splits) and the checking asynchronous
// backend passes against the reference, every case.
func TestConformingBackends(t *testing.T) {
	cases := []struct {
		name string
		dev  npu.Backend
	}{
		{"cpu", cpu.New(3)},
		{"cpu-async", cpuasync.New(2)},
	}
	n := len(Cases())
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rs := Run(tc.dev, cpu.New(1), Options{Seed: 7, Reps: 1})
			if len(rs) != n {
				t.Errorf("%d results for %d cases (both backends have SampleReduce)", len(rs), n)
			}
			for _, r := range rs {
				t.Logf("%-13s %-45s rel %-9.3g abs %-9.3g tol %-6g %.3f ms", r.Op, r.Case, float64(r.MaxRelErr), float64(r.MaxAbsErr), r.Tol, r.Ms)
				if !r.Pass {
					t.Errorf("%s/%s failed: %v", r.Op, r.Case, r)
				}
				if r.Ms < 0 || math.IsNaN(r.Ms) {
					t.Errorf("%s/%s: time %v", r.Op, r.Case, r.Ms)
				}
			}
		})
	}
}

// wrong is a backend with one op broken in a chosen way.
type wrong struct {
	npu.Backend
	softmaxScale float32 // Softmax output scaled by this (0: unchanged)
	swapTopK     bool    // TopK's first two indices swapped
	panicKDA     bool    // KDA panics as an unimplemented op does
	failSync     bool    // Sync reports a stream failure
	asyncSoftmax bool    // Softmax fails on the "stream": the next Sync or Download reports it once
	pending      error
}

func (w *wrong) Download(dst []byte, src *npu.Tensor) error {
	if err := w.pending; err != nil {
		w.pending = nil
		return err
	}
	return w.Backend.Download(dst, src)
}

func (w *wrong) Softmax(out, x *npu.Tensor) {
	w.Backend.Softmax(out, x)
	if w.asyncSoftmax {
		w.pending = errStream
	}
	if w.softmaxScale != 0 {
		w.Backend.Scale(out, out, w.softmaxScale)
	}
}

func (w *wrong) TopK(vals, idx, x *npu.Tensor, k int) {
	w.Backend.TopK(vals, idx, x, k)
	if w.swapTopK {
		first := idx.Reshape(idx.Numel()).Rows(0, 2)
		v := npu.MustI32(w.Backend, first)
		if err := w.Backend.Upload(first, npu.EncodeInt32s([]int32{v[1], v[0]})); err != nil {
			panic(err)
		}
	}
}

func (w *wrong) KDA(out, qkv, g, beta, state *npu.Tensor, seqs *npu.SeqLayout, heads, headDim, chunk int) {
	if w.panicKDA {
		panic("cuda: KDA is not implemented")
	}
	w.Backend.KDA(out, qkv, g, beta, state, seqs, heads, headDim, chunk)
}

func (w *wrong) Sync() error {
	if w.failSync {
		return errStream
	}
	if err := w.pending; err != nil {
		w.pending = nil
		return err
	}
	return w.Backend.Sync()
}

var errStream = &npu.AllocError{Device: "wrong", Err: npu.ErrOutOfMemory}

// TestWrongBackendFails: a perturbed op fails its cases (and only those),
// with a reason where tolerance is not the reason.
func TestWrongBackendFails(t *testing.T) {
	cases := []struct {
		name    string
		dev     *wrong
		filter  string
		failOp  string
		errPart string // in Result.Err ("" : a tolerance failure)
	}{
		{"softmax off by 1e-3", &wrong{softmaxScale: 1.001}, "^(Softmax|Sigmoid|Add)/", "Softmax", ""},
		{"softmax off by 1e-7 passes", &wrong{softmaxScale: 1 + 1e-7}, "^Softmax/", "", ""},
		{"topk indices swapped", &wrong{swapTopK: true}, "^(TopK|Gather)/", "TopK", "integers differ"},
		{"kda unimplemented", &wrong{panicKDA: true}, "^(KDA|KDAGate)/", "KDA", "KDA panicked: cuda: KDA is not implemented"},
		{"sync fails", &wrong{failSync: true}, "^Fill/", "Fill", "Sync"},
		{"stream failure of one op", &wrong{asyncSoftmax: true}, "^(Softmax|SwiGLU)/", "Softmax", "Softmax: Download of output 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.dev.Backend = cpu.New(2)
			rs := Run(tc.dev, cpu.New(1), Options{Seed: 3, Filter: regexp.MustCompile(tc.filter), Reps: 1})
			if len(rs) == 0 {
				t.Fatal("no cases ran")
			}
			for _, r := range rs {
				if shouldFail := r.Op == tc.failOp; r.Pass == shouldFail {
					t.Errorf("%s/%s: pass = %v: %v", r.Op, r.Case, r.Pass, r)
				}
				if r.Op == tc.failOp && !strings.Contains(r.Err, tc.errPart) {
					t.Errorf("%s/%s: error %q does not contain %q", r.Op, r.Case, r.Err, tc.errPart)
				}
				if r.Op == tc.failOp && tc.errPart == "" && !(float64(r.MaxRelErr) > r.Tol) {
					t.Errorf("%s/%s: failed with max rel err %v <= tol %v", r.Op, r.Case, r.MaxRelErr, r.Tol)
				}
			}
			if ops, n, failed := Summary(rs); ops == 0 || n != len(rs) || (tc.failOp != "") != (failed > 0) {
				t.Errorf("Summary = %d ops, %d cases, %d failed", ops, n, failed)
			}
		})
	}
}

// TestSampleReduceOnlyWhereImplemented: a backend without
// npu.SampleReducer gets no SampleReduce case.
func TestSampleReduceOnlyWhereImplemented(t *testing.T) {
	rs := Run(&wrong{Backend: cpu.New(1)}, cpu.New(1), Options{Filter: regexp.MustCompile("^SampleReduce/")})
	if len(rs) != 0 {
		t.Fatalf("ran %v on a backend without SampleReduce", rs)
	}
	rs = Run(cpu.New(1), cpu.New(1), Options{Filter: regexp.MustCompile("^SampleReduce/")})
	if len(rs) != 1 || !rs[0].Pass {
		t.Fatalf("SampleReduce on cpu: %v", rs)
	}
}

// TestDeterministic: a seed gives the same inputs (the same results on
// the reference), another seed other inputs.
func TestDeterministic(t *testing.T) {
	c := Cases()[0]
	run := func(seed uint64) []hostOut {
		o, _, err := execute(c, cpu.New(1), caseSeed(seed, c.Key()), 0)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	if a, b := run(1), run(1); !reflect.DeepEqual(a, b) {
		t.Error("seed 1 gave different outputs twice")
	}
	if a, b := run(1), run(2); reflect.DeepEqual(a, b) {
		t.Error("seeds 1 and 2 gave the same outputs")
	}
}

func TestCompare(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	cases := []struct {
		name      string
		got, want hostOut
		rel, abs  float64
		msg       bool
	}{
		{"equal", hostOut{f: []float64{1, -2, nan, inf}}, hostOut{f: []float64{1, -2, nan, inf}}, 0, 0, false},
		{"relative", hostOut{f: []float64{1.01, 3}}, hostOut{f: []float64{1, 3}}, 0.01 / math.Sqrt(5), 0.01, false},
		{"near zero uses rms", hostOut{f: []float64{1e-3, 4}}, hostOut{f: []float64{0, 4}}, 1e-3 / math.Sqrt(8), 1e-3, false},
		{"nan where a number", hostOut{f: []float64{nan}}, hostOut{f: []float64{1}}, inf, inf, true},
		{"ints", hostOut{int: true, i: []int64{1, 5, 3, 4}}, hostOut{int: true, i: []int64{1, 2, 3, 4}}, 0.25, 3, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rel, abs, msg := compare(tc.got, tc.want)
			if math.Abs(rel-tc.rel) > 1e-12*math.Max(1, tc.rel) && !(math.IsInf(rel, 1) && math.IsInf(tc.rel, 1)) {
				t.Errorf("rel = %v, want %v", rel, tc.rel)
			}
			if math.Abs(abs-tc.abs) > 1e-12 && !(math.IsInf(abs, 1) && math.IsInf(tc.abs, 1)) {
				t.Errorf("abs = %v, want %v", abs, tc.abs)
			}
			if (msg != "") != tc.msg {
				t.Errorf("msg = %q", msg)
			}
		})
	}
}

// TestResultJSON: non-finite errors are null, so the JSON stays valid.
func TestResultJSON(t *testing.T) {
	b, err := json.Marshal(Result{Op: "Softmax", Case: "x", MaxRelErr: Metric(math.Inf(1)), MaxAbsErr: 0.5, Tol: 1e-5})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["max_rel_err"] != nil || m["max_abs_err"] != 0.5 || m["op"] != "Softmax" || m["pass"] != false {
		t.Errorf("JSON %s", b)
	}
}

// TestCasesNonTrivial: every case's reference outputs hold at least two
// distinct values, so a device that wrote nothing (or a constant) could
// not pass by matching an empty reference.
func TestCasesNonTrivial(t *testing.T) {
	for _, c := range Cases() {
		if c.Op == "Fill" {
			continue // a constant by definition; its input is random
		}
		outs, _, err := execute(c, cpu.New(1), caseSeed(1, c.Key()), 0)
		if err != nil {
			t.Fatalf("%s: %v", c.Key(), err)
		}
		for i, o := range outs {
			distinct := map[float64]bool{}
			for _, v := range o.f {
				distinct[v] = true
			}
			for _, v := range o.i {
				distinct[float64(v)] = true
			}
			if len(distinct) < 2 {
				t.Errorf("%s: output %d holds one value", c.Key(), i)
			}
		}
	}
}
