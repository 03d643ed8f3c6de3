package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/cpu"
)

// The GPU tests run each op on the GPU and on the CPU backend (the
// numerical reference) with the same random inputs of odd sizes and
// compare. They skip where no GPU is usable, unless NPUSERVE_CUDA_TEST=1
// (make test-cuda) makes that a failure.

var (
	gpuOnce sync.Once
	gpuBE   *Backend
	gpuErr  error
	cpuBE   = cpu.New(0)
)

// gpu returns the shared test backend on GPU 0, or skips (fails under
// NPUSERVE_CUDA_TEST=1) when there is none.
func gpu(t testing.TB) *Backend {
	t.Helper()
	gpuOnce.Do(func() {
		gpuBE, gpuErr = New(0)
		if gpuErr == nil {
			for _, r := range gpuBE.Kernels() {
				fmt.Fprintf(os.Stderr, "cuda: %-16s %-8s %6.1f ms cached=%v kernels=%d err=%v\n", r.File, gpuBE.Arch(), float64(r.Duration.Microseconds())/1000, r.Cached, len(r.Kernels), r.Err)
				if r.Log != "" {
					fmt.Fprintf(os.Stderr, "cuda: %s log:\n%s\n", r.File, r.Log)
				}
			}
		}
	})
	if gpuErr != nil {
		if os.Getenv("NPUSERVE_CUDA_TEST") == "1" {
			t.Fatalf("NPUSERVE_CUDA_TEST=1 but no usable GPU: %v", gpuErr)
		}
		t.Skipf("no usable CUDA GPU: %v", gpuErr)
	}
	return gpuBE
}

// pair is one tensor on both backends, holding the same data.
type pair struct{ g, c *npu.Tensor }

// both holds the two backends of a comparison.
type both struct {
	t *testing.T
	g *Backend
	r *rand.Rand
}

func newBoth(t *testing.T, seed uint64) *both {
	t.Helper()
	return &both{t: t, g: gpu(t), r: rand.New(rand.NewPCG(seed, 7))}
}

// sync waits for the GPU and fails the test on an error.
func (h *both) sync() {
	h.t.Helper()
	if err := h.g.Sync(); err != nil {
		h.t.Fatalf("Sync: %v", err)
	}
}

// from makes a pair of dtype dt holding vals (rounded to dt).
func (h *both) from(dt npu.DType, vals []float32, shape ...int) pair {
	h.t.Helper()
	return h.raw(dt, encode(vals, dt), shape...)
}

// ints makes an I32 pair.
func (h *both) ints(vals []int32, shape ...int) pair {
	h.t.Helper()
	data := npu.EncodeInt32s(vals)
	g, err := h.g.FromHost(npu.I32, data, shape...)
	if err != nil {
		h.t.Fatal(err)
	}
	c, err := cpuBE.FromHost(npu.I32, append([]byte(nil), data...), shape...)
	if err != nil {
		h.t.Fatal(err)
	}
	return pair{g, c}
}

// rand makes a pair of normal random values times scale.
func (h *both) rand(dt npu.DType, scale float32, shape ...int) pair {
	n := 1
	for _, d := range shape {
		n *= d
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(h.r.NormFloat64()) * scale
	}
	return h.from(dt, v, shape...)
}

// zeros makes a zero-filled pair.
func (h *both) zeros(dt npu.DType, shape ...int) pair {
	h.t.Helper()
	return pair{npu.Must(h.g.Alloc(dt, shape...)), npu.Must(cpuBE.Alloc(dt, shape...))}
}

// layout uploads a batch layout to both backends.
func (h *both) layout(l *npu.BatchLayout) (g, c *npu.SeqLayout) {
	h.t.Helper()
	g, _, err := l.Upload(h.g)
	if err != nil {
		h.t.Fatal(err)
	}
	c, _, err = l.Upload(cpuBE)
	if err != nil {
		h.t.Fatal(err)
	}
	return g, c
}

// bytes downloads both sides of p.
func (h *both) bytes(p pair) (g, c []byte) {
	h.t.Helper()
	g = make([]byte, p.g.Bytes())
	if err := h.g.Download(g, p.g); err != nil {
		h.t.Fatalf("Download: %v", err)
	}
	c = make([]byte, p.c.Bytes())
	if err := cpuBE.Download(c, p.c); err != nil {
		h.t.Fatal(err)
	}
	return g, c
}

// floats downloads both sides of a float pair as float32.
func (h *both) floats(p pair) (g, c []float32) {
	h.t.Helper()
	gb, cb := h.bytes(p)
	return decode(gb, p.g.DType()), decode(cb, p.c.DType())
}

// free releases both sides.
func (h *both) free(ps ...pair) {
	for _, p := range ps {
		h.g.Free(p.g)
		cpuBE.Free(p.c)
	}
}

func encode(v []float32, dt npu.DType) []byte {
	if dt == npu.I32 {
		iv := make([]int32, len(v))
		for i, x := range v {
			iv[i] = int32(x)
		}
		return npu.EncodeInt32s(iv)
	}
	return npu.EncodeFloats(v, dt)
}

func decode(b []byte, dt npu.DType) []float32 {
	if dt == npu.I32 {
		out := make([]float32, len(b)/4)
		for i := range out {
			out[i] = float32(int32(binary.LittleEndian.Uint32(b[4*i:])))
		}
		return out
	}
	f, err := npu.DecodeFloats(b, dt)
	if err != nil {
		panic(err)
	}
	return f
}

func int32s(b []byte) []int32 {
	out := make([]int32, len(b)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// maxRelErr is max_i |g_i - c_i| / max(|c_i|, floor): the error relative
// to the value, or to floor (a scale of the op's magnitudes) where the
// value is smaller. NaN must match NaN and infinities match exactly.
func maxRelErr(g, c []float32, floor float64) (float64, int) {
	worst, at := 0.0, -1
	for i := range c {
		gv, cv := float64(g[i]), float64(c[i])
		var e float64
		switch {
		case math.IsNaN(cv) || math.IsNaN(gv):
			if math.IsNaN(cv) != math.IsNaN(gv) {
				e = math.Inf(1)
			}
		case math.IsInf(cv, 0) || math.IsInf(gv, 0):
			if gv != cv {
				e = math.Inf(1)
			}
		default:
			e = math.Abs(gv-cv) / math.Max(math.Abs(cv), floor)
		}
		if e > worst || at < 0 {
			worst, at = e, i
		}
	}
	return worst, at
}

// rms is the root mean square of v (finite values), at least tiny.
func rms(v []float32) float64 {
	var s float64
	n := 0
	for _, x := range v {
		if !math.IsNaN(float64(x)) && !math.IsInf(float64(x), 0) {
			s += float64(x) * float64(x)
			n++
		}
	}
	if n == 0 {
		return 1e-30
	}
	return math.Max(math.Sqrt(s/float64(n)), 1e-30)
}

// close compares p's two sides within tol relative to each value or to the
// RMS of the reference (floorFrac of it), and logs the max error.
func (h *both) close(name string, p pair, tol float64) {
	h.t.Helper()
	g, c := h.floats(p)
	h.closeVals(name, g, c, tol, rms(c))
}

func (h *both) closeVals(name string, g, c []float32, tol, floor float64) {
	h.t.Helper()
	if len(g) != len(c) {
		h.t.Fatalf("%s: %d values on the GPU, %d on the CPU", name, len(g), len(c))
	}
	e, at := maxRelErr(g, c, floor)
	if at < 0 {
		return
	}
	h.t.Logf("%s: max rel err %.3g (tol %.3g) at %d of %d", name, e, tol, at, len(c))
	if e > tol {
		h.t.Errorf("%s: element %d: GPU %v, CPU %v: rel err %.3g > %.3g", name, at, g[at], c[at], e, tol)
	}
}

// exact requires p's two sides to be bit-identical.
func (h *both) exact(name string, p pair) {
	h.t.Helper()
	g, c := h.bytes(p)
	sz := p.g.DType().Size()
	for i := 0; i < len(c); i += sz {
		if string(g[i:i+sz]) != string(c[i:i+sz]) {
			h.t.Errorf("%s: element %d: GPU bytes %x, CPU %x", name, i/sz, g[i:i+sz], c[i:i+sz])
			return
		}
	}
	h.t.Logf("%s: %d elements bit-identical", name, len(c)/max(sz, 1))
}
