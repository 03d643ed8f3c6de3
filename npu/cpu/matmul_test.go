package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

// testKernels lists every MatMul implementation this CPU can run: the
// portable one and each SIMD one.
func testKernels() []*matmulKernels {
	return append([]*matmulKernels{&goKernels}, supportedSIMDKernels()...)
}

// withKernels runs fn with k as the active MatMul implementation.
func withKernels(k *matmulKernels, fn func()) {
	old := activeKernels
	activeKernels = k
	defer func() { activeKernels = old }()
	fn()
}

// matmulRef computes x·w^T in float64 with the error scale sum|x*w|.
func matmulRef(x, w []float64, M, N, K int) (out, scale []float64) {
	out, scale = make([]float64, M*N), make([]float64, M*N)
	for m := 0; m < M; m++ {
		for n := 0; n < N; n++ {
			var s, a float64
			for k := 0; k < K; k++ {
				p := x[m*K+k] * w[n*K+k]
				s += p
				a += math.Abs(p)
			}
			out[m*N+n], scale[m*N+n] = s, a
		}
	}
	return out, scale
}

func TestMatMul(t *testing.T) {
	shapes := [][3]int{ // M, N, K
		{1, 1, 1}, {1, 3, 7}, {1, 17, 33}, {1, 65, 129}, {1, 127, 1029}, {1, 7, 4100},
		{2, 5, 3}, {3, 7, 17}, {4, 6, 16}, {7, 33, 65}, {17, 129, 127}, {33, 65, 1030},
		{21, 9, 100}, {24, 13, 47}, {25, 13, 50},
		{129, 7, 33}, {130, 70, 2100}, {300, 3, 40}, {5, 1, 2049},
	}
	for _, k := range testKernels() {
		for _, threads := range coreThreads {
			be := New(threads)
			for _, dt := range []npu.DType{npu.F32, npu.BF16, npu.F16} {
				for _, sh := range shapes {
					M, N, K := sh[0], sh[1], sh[2]
					t.Run(fmt.Sprintf("%s/t%d/%v/%dx%dx%d", k.name, threads, dt, M, N, K), func(t *testing.T) {
						rng := rand.New(rand.NewPCG(uint64(M*N), uint64(K)))
						xv := coreRand(rng, M*K, 1, npu.F32)
						wv := coreRand(rng, N*K, 1, dt)
						// x and w are views at non-zero offsets.
						x := coreTensor(be, npu.F32, append(coreRand(rng, K, 1, npu.F32), xv...), M+1, K).Rows(1, M+1)
						w := coreTensor(be, dt, append(coreRand(rng, 3*K, 1, dt), wv...), N+3, K).Rows(3, N+3)
						out := coreTensor(be, npu.F32, coreRand(rng, M*N, 100, npu.F32), M, N) // garbage to overwrite
						withKernels(k, func() { be.MatMul(out, x, w) })
						want, scale := matmulRef(xv, wv, M, N, K)
						coreClose(t, "MatMul", coreValues(be, out), want, scale, 1e-6)
					})
				}
			}
		}
	}
}

// TestMatMulSpecials checks that Inf and NaN propagate (padding of packed
// panels must not turn them into zeros or spread them).
func TestMatMulSpecials(t *testing.T) {
	for _, k := range testKernels() {
		be := New(2)
		for _, M := range []int{1, 5} {
			t.Run(fmt.Sprintf("%s/M%d", k.name, M), func(t *testing.T) {
				const N, K = 9, 37
				xv := make([]float64, M*K)
				wv := make([]float64, N*K)
				for i := range xv {
					xv[i] = 1
				}
				for i := range wv {
					wv[i] = 0.5
				}
				xv[K-1] = math.Inf(1)  // row 0, last column: Inf * 0.5
				wv[2*K+3] = math.NaN() // row 2 of w
				out := npu.Must(be.Alloc(npu.F32, M, N))
				withKernels(k, func() {
					be.MatMul(out, coreTensor(be, npu.F32, xv, M, K), coreTensor(be, npu.BF16, wv, N, K))
				})
				want, _ := matmulRef(xv, wv, M, N, K)
				coreClose(t, "MatMul", coreValues(be, out), want, nil, 1e-6)
			})
		}
	}
}

func TestMatMulRank3(t *testing.T) {
	be := New(2)
	rng := rand.New(rand.NewPCG(3, 4))
	xv, wv := coreRand(rng, 2*3*8, 1, npu.F32), coreRand(rng, 2*5*8, 1, npu.BF16)
	out := npu.Must(be.Alloc(npu.F32, 6, 10))
	// x [2,3,8] and w [2,5,8] (a slice of stacked expert weights) flatten.
	be.MatMul(out, coreTensor(be, npu.F32, xv, 2, 3, 8), coreTensor(be, npu.BF16, wv, 2, 5, 8))
	want, scale := matmulRef(xv, wv, 6, 10, 8)
	coreClose(t, "MatMul", coreValues(be, out), want, scale, 1e-6)
}

func TestSelectKernels(t *testing.T) {
	if k := selectKernels("0"); k != &goKernels {
		t.Fatalf(`NPUSERVE_CPU_SIMD=0 selects %q, want "go"`, k.name)
	}
	simd := supportedSIMDKernels()
	best := &goKernels
	if len(simd) > 0 {
		best = simd[len(simd)-1]
	}
	for _, env := range []string{"", "1", "nonsense"} {
		if k := selectKernels(env); k != best {
			t.Fatalf("NPUSERVE_CPU_SIMD=%q selects %q, want %q", env, k.name, best.name)
		}
	}
	for _, k := range simd {
		if got := selectKernels(k.name); got != k {
			t.Fatalf("NPUSERVE_CPU_SIMD=%s selects %q", k.name, got.name)
		}
	}
	if want := selectKernels(os.Getenv("NPUSERVE_CPU_SIMD")); activeKernels != want || MatMulKernel() != want.name {
		t.Fatalf("active kernels %q, want %q", activeKernels.name, want.name)
	}
	t.Logf("MatMul kernels: default %q of %d SIMD sets", best.name, len(simd))
}
