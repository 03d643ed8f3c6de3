//go:build cgo

package ascend

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/ascend/acl"
	"github.com/npuserve/npuserve/npu/cpu"
	"github.com/npuserve/npuserve/npu/opcheck"
)

// The tests run against the stand-in CANN (testdata/standin, a test
// double), compiled here with the system C compiler into a temporary
// ASCEND_HOME_PATH. Nothing here has run against a real CANN or NPU.

var standinErr string

func TestMain(m *testing.M) {
	dir, err := buildStandin()
	if err != nil {
		standinErr = err.Error()
	} else {
		os.Setenv("ASCEND_HOME_PATH", dir)
		os.Setenv("STANDIN_HBM_BYTES", fmt.Sprint(64<<20))
	}
	code := m.Run()
	if dir != "" {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

func buildStandin() (string, error) {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		return "", fmt.Errorf("no C compiler to build the stand-in CANN: %v", err)
	}
	dir, err := os.MkdirTemp("", "standin-cann")
	if err != nil {
		return "", err
	}
	lib := filepath.Join(dir, "lib64")
	os.MkdirAll(lib, 0o755)
	src := filepath.Join("testdata", "standin")
	// libopapi.so is compiled from every testdata/standin/opapi*.c (sorted).
	opapi, err := filepath.Glob(filepath.Join(src, "opapi*.c"))
	if err != nil || len(opapi) == 0 {
		os.RemoveAll(dir)
		return "", fmt.Errorf("no stand-in operator sources in %s: %v", src, err)
	}
	sort.Strings(opapi)
	for _, l := range []struct {
		srcs []string
		name string
	}{{[]string{filepath.Join(src, "acl.c")}, "libascendcl.so"}, {[]string{filepath.Join(src, "nnopbase.c")}, "libnnopbase.so"}, {opapi, "libopapi.so"}} {
		args := append([]string{"-shared", "-fPIC", "-O1", "-fvisibility=default", "-o", filepath.Join(lib, l.name)}, l.srcs...)
		args = append(args, "-L"+lib, "-Wl,-rpath,"+lib)
		switch l.name {
		case "libnnopbase.so":
			args = append(args, "-lascendcl")
		case "libopapi.so":
			args = append(args, "-lnnopbase", "-lascendcl")
		}
		if out, err := exec.Command(cc, append(args, "-lpthread", "-lm")...).CombinedOutput(); err != nil {
			os.RemoveAll(dir)
			return "", fmt.Errorf("building the stand-in CANN (%s) failed: %v: %s", l.name, err, out)
		}
	}
	return dir, nil
}

func newBackend(t *testing.T) *Backend {
	t.Helper()
	if standinErr != "" {
		t.Skip(standinErr)
	}
	b, err := New(0)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

func randF32(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

// pair holds a tensor on both backends.
type pair struct{ a, c *npu.Tensor }

func put(t *testing.T, b *Backend, c *cpu.Backend, dt npu.DType, vals []float32, shape ...int) pair {
	t.Helper()
	data := npu.EncodeFloats(vals, dt)
	at, err := b.FromHost(dt, data, shape...)
	if err != nil {
		t.Fatal(err)
	}
	ct, err := c.FromHost(dt, append([]byte(nil), data...), shape...)
	if err != nil {
		t.Fatal(err)
	}
	return pair{at, ct}
}

func zeros(t *testing.T, b *Backend, c *cpu.Backend, dt npu.DType, shape ...int) pair {
	return pair{npu.Must(b.Alloc(dt, shape...)), npu.Must(c.Alloc(dt, shape...))}
}

func download(t *testing.T, be npu.Backend, x *npu.Tensor) []float32 {
	t.Helper()
	buf := make([]byte, x.Bytes())
	if err := be.Download(buf, x); err != nil {
		t.Fatalf("Download %v: %v", x, err)
	}
	v, err := npu.DecodeFloats(buf, npu.F32)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestOpsMatchCPU(t *testing.T) {
	b := newBackend(t)
	c := cpu.New(1)
	r := rand.New(rand.NewPCG(1, 2))
	const M, K, N = 7, 13, 5
	cases := []struct {
		name string
		run  func() (out pair)
		tol  float64
	}{
		{"Copy BF16->F32", func() pair {
			src := put(t, b, c, npu.BF16, randF32(r, M*K), M, K)
			out := zeros(t, b, c, npu.F32, M, K)
			b.Copy(out.a, src.a)
			c.Copy(out.c, src.c)
			return out
		}, 0},
		{"Fill", func() pair {
			out := zeros(t, b, c, npu.F32, M, K)
			b.Fill(out.a, -2.5)
			c.Fill(out.c, -2.5)
			return out
		}, 0},
		{"Add row broadcast BF16", func() pair {
			x := put(t, b, c, npu.F32, randF32(r, M*K), M, K)
			y := put(t, b, c, npu.BF16, randF32(r, K), K)
			out := zeros(t, b, c, npu.F32, M, K)
			b.Add(out.a, x.a, y.a)
			c.Add(out.c, x.c, y.c)
			return out
		}, 1e-6},
		{"Mul in place", func() pair {
			x := put(t, b, c, npu.F32, randF32(r, M*K), M, K)
			y := put(t, b, c, npu.F32, randF32(r, M*K), M, K)
			b.Mul(x.a, x.a, y.a)
			c.Mul(x.c, x.c, y.c)
			return x
		}, 1e-6},
		{"Scale", func() pair {
			x := put(t, b, c, npu.F32, randF32(r, M*K), M, K)
			out := zeros(t, b, c, npu.F32, M, K)
			b.Scale(out.a, x.a, 0.37)
			c.Scale(out.c, x.c, 0.37)
			return out
		}, 1e-6},
		{"MatMul F32", func() pair {
			x := put(t, b, c, npu.F32, randF32(r, M*K), M, K)
			w := put(t, b, c, npu.F32, randF32(r, N*K), N, K)
			out := zeros(t, b, c, npu.F32, M, N)
			b.MatMul(out.a, x.a, w.a)
			c.MatMul(out.c, x.c, w.c)
			return out
		}, 1e-5},
		{"MatMul BF16 weight, row view", func() pair {
			x := put(t, b, c, npu.F32, randF32(r, (M+2)*K), M+2, K)
			w := put(t, b, c, npu.BF16, randF32(r, N*K), N, K)
			out := zeros(t, b, c, npu.F32, M, N)
			b.MatMul(out.a, x.a.Rows(2, M+2), w.a)
			c.MatMul(out.c, x.c.Rows(2, M+2), w.c)
			return out
		}, 1e-5},
		{"RMSNorm F16 weight", func() pair {
			x := put(t, b, c, npu.F32, randF32(r, M*K), M, K)
			w := put(t, b, c, npu.F16, randF32(r, K), K)
			out := zeros(t, b, c, npu.F32, M, K)
			b.RMSNorm(out.a, x.a, w.a, 1e-6)
			c.RMSNorm(out.c, x.c, w.c, 1e-6)
			return out
		}, 1e-5},
		{"RMSNorm unweighted", func() pair {
			x := put(t, b, c, npu.F32, randF32(r, M*K), M, K)
			out := zeros(t, b, c, npu.F32, M, K)
			b.RMSNorm(out.a, x.a, nil, 1e-5)
			c.RMSNorm(out.c, x.c, nil, 1e-5)
			return out
		}, 1e-5},
		{"Softmax", func() pair {
			x := put(t, b, c, npu.F32, randF32(r, M*K), M, K)
			b.Softmax(x.a, x.a)
			c.Softmax(x.c, x.c)
			return x
		}, 1e-6},
		{"Sigmoid", func() pair {
			x := put(t, b, c, npu.F32, randF32(r, M*K), M, K)
			out := zeros(t, b, c, npu.F32, M, K)
			b.Sigmoid(out.a, x.a)
			c.Sigmoid(out.c, x.c)
			return out
		}, 1e-6},
		{"SiLU", func() pair {
			x := put(t, b, c, npu.F32, randF32(r, M*K), M, K)
			out := zeros(t, b, c, npu.F32, M, K)
			b.SiLU(out.a, x.a)
			c.SiLU(out.c, x.c)
			return out
		}, 1e-6},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := tc.run()
			got, want := download(t, b, out.a), download(t, c, out.c)
			for i := range want {
				if d := math.Abs(float64(got[i] - want[i])); d > tc.tol*math.Max(1, math.Abs(float64(want[i]))) {
					t.Fatalf("element %d: ascend %v, cpu %v", i, got[i], want[i])
				}
			}
		})
	}
}

func TestAllocOutOfMemory(t *testing.T) {
	b := newBackend(t)
	_, err := b.Alloc(npu.F32, 1<<20, 32) // 128 MiB of a 64 MiB stand-in device
	var ae *npu.AllocError
	if !errors.As(err, &ae) || !errors.Is(err, npu.ErrOutOfMemory) || ae.Bytes != 128<<20 || ae.Free <= 0 {
		t.Fatalf("Alloc beyond the device: %v, want an AllocError wrapping ErrOutOfMemory with the free bytes", err)
	}
	if err := b.Sync(); err != nil {
		t.Fatalf("Sync after a refused allocation: %v", err)
	}
}

// TestContractViolations shows the stand-in catches calls outside the
// documented contract and that they surface, naming the rule, at Sync.
func TestContractViolations(t *testing.T) {
	b := newBackend(t)
	x := npu.Must(b.Alloc(npu.F32, 33))
	cases := []struct {
		name, rule string
		do         func()
	}{
		{"phase 1 on a thread without the context", "context-on-thread", func() {
			done := make(chan struct{})
			go func() {
				defer close(done)
				runtime.LockOSThread() // a fresh thread never given a context
				defer runtime.UnlockOSThread()
				b.cast(x, x)
			}()
			<-done
		}},
		{"phase 2 twice on one executor", "executor-single-use", func() {
			b.do(func() { b.fillReusingExecutor(x, 1) })
		}},
		{"a Gather index beyond the table", "index-in-range", func() {
			idx := npu.Must(b.FromHost(npu.I32, npu.EncodeInt32s([]int32{0, 11}), 2))
			b.Gather(npu.Must(b.Alloc(npu.F32, 2, 3)), x.Reshape(11, 3), idx)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.do()
			err := b.Sync()
			if err == nil || !strings.Contains(err.Error(), "rule "+tc.rule) {
				t.Fatalf("Sync: %v, want the stand-in's rule %q", err, tc.rule)
			}
			if err := b.Sync(); err != nil {
				t.Fatalf("the failure was reported twice: %v", err)
			}
		})
	}
}

// TestStreamsDefer: the stand-in runs queued work only when someone waits,
// so a raw read of device memory before a sync sees the old bytes, and
// Download (the sync point) sees the results.
func TestStreamsDefer(t *testing.T) {
	b := newBackend(t)
	x := npu.Must(b.Alloc(npu.F32, 9))
	b.Fill(x, 3)
	raw := make([]byte, x.Bytes())
	b.do(func() {
		if err := acl.MemcpyToHost(raw, b.dbuf(x).ptr); err != nil {
			t.Errorf("raw read: %v", err)
		}
	})
	before, _ := npu.DecodeFloats(raw, npu.F32)
	for i, v := range before {
		if v == 3 || v == 0 {
			t.Fatalf("element %d is %v before any sync: the stand-in's stream did not defer the work", i, v)
		}
	}
	for i, v := range download(t, b, x) {
		if v != 3 {
			t.Fatalf("element %d after Download: %v, want 3", i, v)
		}
	}
}

// TestOpenOverStandin: with every op implemented, --device ascend opens
// over the stand-in CANN (a real CANN lacking an operator is refused,
// naming it: missingOps).
func TestOpenOverStandin(t *testing.T) {
	if standinErr != "" {
		t.Skip(standinErr)
	}
	if len(unimplementedOps) > 0 {
		t.Fatalf("ops still unimplemented: %v", unimplementedOps)
	}
	be, err := npu.Open("ascend", npu.OpenOptions{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if be.Name() != "ascend" || !be.Info().Accelerator {
		t.Errorf("Open: %s, %+v", be.Name(), be.Info())
	}
	if c, ok := be.(interface{ Close() error }); ok {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}
}

func TestSocAndPreset(t *testing.T) {
	b := newBackend(t)
	if b.SocName() != "Ascend910B3" {
		t.Errorf("SocName %q, want the stand-in's default Ascend910B3", b.SocName())
	}
	for _, tc := range []struct{ soc, want string }{
		{"Ascend910B3", "atlas-800-a2"}, {"Ascend910B4-1", "atlas-800-a2"}, {"Ascend910_9382", "atlas-800-a3"},
		{"Ascend950DT_9582", "950dt"}, {"Ascend950PR_9589", "950dt"}, {"Ascend310P3", ""}, {"", ""},
	} {
		if got := Preset(tc.soc); got != tc.want {
			t.Errorf("Preset(%q) = %q, want %q", tc.soc, got, tc.want)
		}
	}
}

// knownDeviations are conformance cases this backend misses for a measured
// reason outside its control, each with the bound it must still meet
// (a regression beyond it fails).
var knownDeviations = map[string]struct {
	bound float64
	why   string
}{
	// Measured on the stand-in (max rel err): seed 7 1.566e-2, seeds 1-5
	// 1.3e-3 to 4.0e-3; 3.2e-4 on seed 7 when the gate/up matmul writes
	// F32 (which A2/A3 do not document for int8, ascend-api.md §4.2),
	// 1.585e-2 with BF16. One activation of the down projection that the
	// F16 rounding of gate/up moves across an int8 rounding boundary
	// quantizes one step apart from the CPU's (quant.go).
	"MoEQ/W8A8_DYNAMIC T11 D64 E5 I32 top2": {0.02, "A2/A3 int8 matmul writes F16, which MoEQ requantizes"},
}

// TestConformanceTable runs npu/opcheck's table (what `npuserve selftest`
// runs) for every op this build implements, against the CPU backend.
func TestConformanceTable(t *testing.T) {
	b := newBackend(t)
	c := cpu.New(1)
	missing := map[string]bool{}
	for _, op := range unimplementedOps {
		missing[op] = true
	}
	ran := 0
	for _, tc := range opcheck.Cases() {
		if missing[tc.Op] || !tc.Applies(b) {
			continue
		}
		ran++
		t.Run(tc.Key(), func(t *testing.T) {
			if strings.Contains(tc.Name, "MXFP8") {
				t.Setenv("STANDIN_SOC", "Ascend950DT_9582") // MX FP8 operators are 950-only
			}
			r := opcheck.RunCase(tc, b, c, opcheck.Options{Seed: 7, Reps: 1})
			if d, ok := knownDeviations[tc.Key()]; ok && !r.Pass && r.Err == "" && float64(r.MaxRelErr) <= d.bound {
				t.Logf("known deviation (bound %v, %s): %v", d.bound, d.why, r)
				return
			}
			if !r.Pass {
				t.Fatalf("%v", r)
			}
		})
	}
	if ran == 0 {
		t.Fatal("no case of the table applies")
	}
}

// TestTopKTiesAndNaN: equal values go to the lower index and NaN ranks
// last, as on the CPU backend (the composition relies on a stable sort;
// the stand-in breaks ties the other way when it is not asked for one).
func TestTopKTiesAndNaN(t *testing.T) {
	b := newBackend(t)
	c := cpu.New(1)
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	rows := [][]float32{
		{1, 3, 3, 2, 3, 0, 1, 2},
		{nan, 0, nan, 0, -1, 0, 5, nan},
		{-inf, inf, 2, inf, -inf, 2, 0, 1},
		{7, 7, 7, 7, 7, 7, 7, 7},
	}
	const N = 8
	var v []float32
	for _, r := range rows {
		v = append(v, r...)
	}
	for _, k := range []int{1, 3, 8} {
		t.Run(fmt.Sprint("k", k), func(t *testing.T) {
			x := put(t, b, c, npu.F32, v, len(rows), N)
			vals, idx := zeros(t, b, c, npu.F32, len(rows), k), zeros(t, b, c, npu.I32, len(rows), k)
			b.TopK(vals.a, idx.a, x.a, k)
			c.TopK(vals.c, idx.c, x.c, k)
			gv, wv := download(t, b, vals.a), download(t, c, vals.c)
			gi, wi := downloadI32(t, b, idx.a), downloadI32(t, c, idx.c)
			for i := range wv {
				if gi[i] != wi[i] || !(gv[i] == wv[i] || (gv[i] != gv[i] && wv[i] != wv[i])) {
					t.Fatalf("row %d entry %d: ascend (%v, %d), cpu (%v, %d)", i/k, i%k, gv[i], gi[i], wv[i], wi[i])
				}
			}
		})
	}
}

func downloadI32(t *testing.T, be npu.Backend, x *npu.Tensor) []int32 {
	t.Helper()
	buf := make([]byte, x.Bytes())
	if err := be.Download(buf, x); err != nil {
		t.Fatalf("Download %v: %v", x, err)
	}
	v := make([]int32, len(buf)/4)
	for i := range v {
		v[i] = int32(uint32(buf[4*i]) | uint32(buf[4*i+1])<<8 | uint32(buf[4*i+2])<<16 | uint32(buf[4*i+3])<<24)
	}
	return v
}

func TestDescribe(t *testing.T) {
	b := newBackend(t)
	d := npu.Describe(b)
	for key, want := range map[string]string{"cann": "8.5.0-standin", "cann_opbase": "8.5.0-standin", "acl_api": "1.17.0", "soc": "Ascend910B3",
		"preset": "atlas-800-a2", "hbm_total_bytes": fmt.Sprint(64 << 20)} {
		if d[key] != want {
			t.Errorf("Describe()[%q] = %q, want %q", key, d[key], want)
		}
	}
	if !strings.HasSuffix(d["libascendcl"], "libascendcl.so") || d["hbm_free_bytes"] == "" {
		t.Errorf("Describe() = %v, want the library paths and free HBM", d)
	}
}
