package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/quant"
)

// makeFP8BlockWeight quantizes w [E][n][k] to FP8_BLOCK128 (E4M3 and F32
// 128x128 block scales, as a block-FP8 checkpoint stores it; E = 0: a
// linear).
func makeFP8BlockWeight(t testing.TB, be *Backend, w []float32, E, n, k int) *npu.QuantWeight {
	t.Helper()
	B := npu.FP8Block
	nb, kb := (n+B-1)/B, (k+B-1)/B
	experts := max(E, 1)
	q := make([]byte, experts*n*k)
	sc := make([]float32, experts*nb*kb)
	for e := range experts {
		if err := quant.FP8BlockQuantize(q[e*n*k:(e+1)*n*k], sc[e*nb*kb:(e+1)*nb*kb], w[e*n*k:(e+1)*n*k], n, k, B); err != nil {
			t.Fatal(err)
		}
	}
	wshape, sshape := []int{n, k}, []int{nb, kb}
	if E > 0 {
		wshape, sshape = append([]int{E}, wshape...), append([]int{E}, sshape...)
	}
	qw := &npu.QuantWeight{Scheme: npu.QFP8Block, GroupSize: B,
		Weight: npu.Must(be.FromHost(npu.F8E4M3, q, wshape...)), Scale: f32Tensor(be, sc, sshape...)}
	if err := qw.Check(); err != nil {
		t.Fatal(err)
	}
	return qw
}

// refFP8Block is the float64 reference of an FP8_BLOCK128 linear, in the
// checkpoint arithmetic: per 128-column group of each token the E4M3 dot
// product of the quantized activation and weight blocks times both
// scales, summed over the groups.
func refFP8Block(w *npu.QuantWeight, x []float32, M int) []float64 {
	N, K, B := w.N(), w.K(), npu.FP8Block
	kb := (K + B - 1) / B
	wb, ws := bytesOf(w.Weight), F32(w.Scale)
	out := make([]float64, M*N)
	xq, xs := make([]uint8, K), make([]float32, kb)
	for m := range M {
		quant.FP8ActQuantize(xq, xs, x[m*K:(m+1)*K], B)
		for n := range N {
			var acc float64
			for g := range kb {
				var dot float64
				for k := g * B; k < min((g+1)*B, K); k++ {
					dot += float64(quant.E4M3ToF32(xq[k])) * float64(quant.E4M3ToF32(wb[n*K+k]))
				}
				acc += float64(xs[g]) * float64(ws[(n/B)*kb+g]) * dot
			}
			out[m*N+n] = acc
		}
	}
	return out
}

// TestMatMulQFP8Block runs FP8_BLOCK128 linears over odd sizes (N and K
// below, at and across the 128 blocks, tails in both) on the SIMD and
// the portable float kernels against the float64 reference, and checks
// the quantization error against the float product.
func TestMatMulQFP8Block(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	sizes := [][3]int{{1, 1, 1}, {1, 17, 33}, {3, 128, 128}, {5, 129, 200}, {7, 300, 129}, {2, 64, 517}, {9, 257, 256}}
	for _, portable := range []bool{false, true} {
		saved := activeKernels
		if portable {
			activeKernels = &goKernels
		}
		be := New(2)
		for _, sz := range sizes {
			M, N, K := sz[0], sz[1], sz[2]
			name := fmt.Sprintf("%dx%dx%d/portable=%v", M, N, K, portable)
			w := randF32(rng, N*K, 0.05)
			x := randF32(rng, M*K, 1)
			x[0] = 7 // an outlier, as activations have
			qw := makeFP8BlockWeight(t, be, w, 0, N, K)
			ref := refFP8Block(qw, x, M)
			out := npu.Must(be.Alloc(npu.F32, M, N))
			be.MatMulQ(out, f32Tensor(be, x, M, K), qw)
			o := F32(out)
			var maxRef, maxErr float64
			for i := range o {
				if d := math.Abs(float64(o[i]) - ref[i]); d > 1e-4*math.Max(1, math.Abs(ref[i])) || o[i] != o[i] {
					t.Fatalf("%s: out[%d] = %v, reference %v", name, i, o[i], ref[i])
				}
				m, n := i/N, i%N
				var f float64
				for k := range K {
					f += float64(x[m*K+k]) * float64(w[n*K+k])
				}
				maxRef = math.Max(maxRef, math.Abs(f))
				maxErr = math.Max(maxErr, math.Abs(f-float64(o[i])))
			}
			if maxErr > 0.06*maxRef {
				t.Errorf("%s: max error %v vs max |out| %v against the float product", name, maxErr, maxRef)
			}
		}
		activeKernels = saved
	}
}

// TestDecodeBlockRow: the SIMD and portable FP8_BLOCK128 row expansions
// agree bit for bit with E4M3 times the block scale, over rows with
// tails and scales that would overflow the SIMD detour.
func TestDecodeBlockRow(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	cases := []struct {
		k     int
		scale float32
	}{{1, 1}, {31, 0.5}, {32, 1e-3}, {129, 3}, {300, 7e-9}, {256, math.MaxFloat32 / 2}}
	for _, c := range cases {
		q := make([]byte, c.k)
		for i := range q {
			q[i] = byte(rng.IntN(256))
			if q[i]&0x7f == 0x7f {
				q[i] = 0 // no NaN
			}
		}
		sc := make([]float32, (c.k+npu.FP8Block-1)/npu.FP8Block)
		for i := range sc {
			sc[i] = c.scale * float32(i+1)
		}
		for _, simd := range []bool{false, hasE4M3Decode} {
			dst := make([]float32, c.k)
			decodeBlockRow(dst, q, sc, simd, nil)
			for i := range dst {
				want := quant.E4M3ToF32(q[i]) * sc[i/npu.FP8Block]
				if dst[i] != want {
					t.Fatalf("k %d scale %v simd %v: dst[%d] = %v, want %v", c.k, c.scale, simd, i, dst[i], want)
				}
			}
		}
	}
}
