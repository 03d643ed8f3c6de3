package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/quant"
)

// i8KernelSets lists every int8 implementation this machine runs: the
// portable kernel and each supported SIMD set.
func i8KernelSets() []*i8Kernels {
	return append([]*i8Kernels{i8Portable}, supportedI8Kernels()...)
}

// randF32 returns n normal values times std.
func randF32(rng *rand.Rand, n int, std float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * std)
	}
	return v
}

// f32Tensor uploads values as an F32 tensor of the given shape.
func f32Tensor(be *Backend, v []float32, shape ...int) *npu.Tensor {
	t := npu.Must(be.Alloc(npu.F32, shape...))
	copy(F32(t), v)
	return t
}

// makeQuantWeight quantizes w [E][n][k] with scheme s into a QuantWeight
// the way a loader builds one from checkpoint tensors (E = 0: a linear).
func makeQuantWeight(t testing.TB, be *Backend, w []float32, E, n, k int, s quant.Scheme, actLo, actHi float32) *npu.QuantWeight {
	t.Helper()
	experts := max(E, 1)
	var wbytes, sbytes []byte
	var scales []float32
	qw := &npu.QuantWeight{GroupSize: 32}
	for e := range experts {
		ts, err := quant.QuantizeLinear(w[e*n*k:(e+1)*n*k], n, k, s, quant.LinearOptions{ParamsDType: npu.F32, ActMin: actLo, ActMax: actHi})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]quant.Tensor{}
		for _, x := range ts {
			m[x.Suffix] = x
		}
		wbytes = append(wbytes, m["weight"].Data...)
		switch s {
		case quant.W8A8Dynamic:
			sc, _ := quant.DecodeFloats(m["weight_scale"].Data, npu.F32)
			scales = append(scales, sc...)
		case quant.W8A8MXFP8:
			sbytes = append(sbytes, m["weight_scale"].Data...)
		case quant.W8A8:
			in, _ := quant.DecodeFloats(m["input_scale"].Data, npu.F32)
			qw.InputScale = in[0]
			qw.InputOffset = int32(int8(m["input_offset"].Data[0]))
			qw.QuantBias = npu.Must(be.Alloc(npu.I32, n))
			copy(bytesOf(qw.QuantBias), m["quant_bias"].Data)
			deq, _ := quant.DecodeFloats(m["deq_scale"].Data, npu.F32)
			qw.DeqScale = f32Tensor(be, deq, n)
		}
	}
	lead := []int{n}
	if E > 0 {
		lead = []int{E, n}
	}
	switch s {
	case quant.W8A8Dynamic:
		qw.Scheme = npu.QW8A8Dynamic
		qw.Weight = npu.Must(be.FromHost(npu.I8, wbytes, append(lead, k)...))
		qw.Scale = f32Tensor(be, scales, lead...)
	case quant.W8A8:
		qw.Scheme = npu.QW8A8
		qw.Weight = npu.Must(be.FromHost(npu.I8, wbytes, n, k))
	case quant.W8A8MXFP8:
		qw.Scheme = npu.QMXFP8
		qw.Weight = npu.Must(be.FromHost(npu.F8E4M3, wbytes, append(lead, k)...))
		qw.Scale = npu.Must(be.FromHost(npu.U8, sbytes, append(lead, (k+31)/32)...))
	}
	if err := qw.Check(); err != nil {
		t.Fatal(err)
	}
	return qw
}

// refMatMulQ is the float64 reference of a quantized linear: the
// activations quantized by the quant package's reference functions, the
// products and sums in float64 (exact for the int8 schemes).
func refMatMulQ(w *npu.QuantWeight, x []float32, M int) []float64 {
	N, K := w.N(), w.K()
	wb := bytesOf(w.Weight)
	out := make([]float64, M*N)
	for m := range M {
		row := x[m*K : (m+1)*K]
		switch w.Scheme {
		case npu.QW8A8Dynamic, npu.QW8A8:
			q := make([]int8, K)
			var xs float64
			if w.Scheme == npu.QW8A8Dynamic {
				xs = float64(quant.DynamicToken(q, row))
			} else {
				quant.StaticQuantize(q, row, 1/w.InputScale, w.InputOffset)
			}
			for n := range N {
				var acc int64
				for k := range K {
					acc += int64(q[k]) * int64(int8(wb[n*K+k]))
				}
				if w.Scheme == npu.QW8A8Dynamic {
					out[m*N+n] = float64(acc) * xs * float64(F32(w.Scale)[n])
				} else {
					out[m*N+n] = float64(acc+int64(I32(w.QuantBias)[n])) * float64(F32(w.DeqScale)[n])
				}
			}
		case npu.QMXFP8:
			xq := append([]float32(nil), row...)
			quant.MXFakeQuant(xq, w.GroupSize, quant.ScaleAlg(w.ScaleAlg))
			nb := (K + w.GroupSize - 1) / w.GroupSize
			sc := bytesOf(w.Scale)
			for n := range N {
				var s float64
				for k := range K {
					wv := float64(quant.E4M3ToF32(wb[n*K+k])) * float64(quant.E8M0ToF32(sc[n*nb+k/w.GroupSize]))
					s += float64(xq[k]) * wv
				}
				out[m*N+n] = s
			}
		}
	}
	return out
}

// TestMatMulQAgainstReference runs every scheme on every int8 kernel set
// over odd sizes (tails in M, N and K, K across the K block) against the
// float64 reference; the int8 kernels must also agree bit for bit.
func TestMatMulQAgainstReference(t *testing.T) {
	be := New(2)
	rng := rand.New(rand.NewPCG(21, 22))
	sizes := [][3]int{{1, 1, 1}, {1, 17, 33}, {2, 3, 31}, {5, 65, 64}, {7, 130, 100}, {13, 64, 517}, {31, 70, 1030}, {6, 64, 4}}
	for _, sz := range sizes {
		M, N, K := sz[0], sz[1], sz[2]
		w := randF32(rng, N*K, 0.05)
		x := randF32(rng, M*K, 1)
		x[0] = 7 // an outlier, as activations have
		for _, s := range []quant.Scheme{quant.W8A8Dynamic, quant.W8A8, quant.W8A8MXFP8} {
			lo, hi := quant.MinMax(x)
			qw := makeQuantWeight(t, be, w, 0, N, K, s, lo, hi)
			ref := refMatMulQ(qw, x, M)
			var first []float32
			for _, ks := range i8KernelSets() {
				name := fmt.Sprintf("%s/%dx%dx%d/%s", s, M, N, K, ks.name)
				p := be.prepare(qw, ks)
				o := make([]float32, M*N)
				be.matMulQ(p, 0, qw, o, x, M)
				for i := range o {
					tol := 1e-5 * math.Max(1, math.Abs(ref[i]))
					if s == quant.W8A8MXFP8 {
						tol = 1e-4 * math.Max(1, math.Abs(ref[i]))
					}
					if d := math.Abs(float64(o[i]) - ref[i]); d > tol || o[i] != o[i] {
						t.Fatalf("%s: out[%d] = %v, reference %v", name, i, o[i], ref[i])
					}
				}
				if s != quant.W8A8MXFP8 {
					if first == nil {
						first = o
					} else {
						for i := range o {
							if o[i] != first[i] {
								t.Fatalf("%s: out[%d] = %v differs from the portable kernel's %v", name, i, o[i], first[i])
							}
						}
					}
				}
			}
		}
	}
}

// TestMatMulQOp goes through the public op with tensors (the active
// kernels) and checks the quantization error against the float product.
func TestMatMulQOp(t *testing.T) {
	be := New(0)
	rng := rand.New(rand.NewPCG(23, 24))
	M, N, K := 9, 40, 96
	w := randF32(rng, N*K, 0.05)
	x := randF32(rng, M*K, 1)
	for _, s := range []quant.Scheme{quant.W8A8Dynamic, quant.W8A8, quant.W8A8MXFP8} {
		lo, hi := quant.MinMax(x)
		qw := makeQuantWeight(t, be, w, 0, N, K, s, lo, hi)
		be.PrepareQuant(qw)
		out := npu.Must(be.Alloc(npu.F32, M, N))
		be.MatMulQ(out, f32Tensor(be, x, M, K), qw)
		o := F32(out)
		var maxRef, maxErr float64
		for m := range M {
			for n := range N {
				var ref float64
				for k := range K {
					ref += float64(x[m*K+k]) * float64(w[n*K+k])
				}
				maxRef = math.Max(maxRef, math.Abs(ref))
				maxErr = math.Max(maxErr, math.Abs(ref-float64(o[m*N+n])))
			}
		}
		if maxErr > 0.06*maxRef {
			t.Errorf("%s: max error %v vs max |out| %v", s, maxErr, maxRef)
		}
	}
}

// TestMoEQ compares the grouped op with experts computed one token at a
// time through MatMulQ on per-expert weights.
func TestMoEQ(t *testing.T) {
	be := New(2)
	rng := rand.New(rand.NewPCG(25, 26))
	T, D, I, E, k := 11, 140, 72, 5, 2
	schemes := []struct {
		name string
		make func(w []float32, E, n, k int) *npu.QuantWeight
	}{
		{"W8A8_DYNAMIC", func(w []float32, E, n, k int) *npu.QuantWeight {
			return makeQuantWeight(t, be, w, E, n, k, quant.W8A8Dynamic, 0, 0)
		}},
		{"W8A8_MXFP8", func(w []float32, E, n, k int) *npu.QuantWeight {
			return makeQuantWeight(t, be, w, E, n, k, quant.W8A8MXFP8, 0, 0)
		}},
		{"FP8_BLOCK128", func(w []float32, E, n, k int) *npu.QuantWeight {
			return makeFP8BlockWeight(t, be, w, E, n, k)
		}},
	}
	for _, sc := range schemes {
		s := sc.name
		gw := randF32(rng, E*2*I*D, 0.1)
		dw := randF32(rng, E*D*I, 0.1)
		gu := sc.make(gw, E, 2*I, D)
		dn := sc.make(dw, E, D, I)
		x := randF32(rng, T*D, 1)
		ids := make([]int32, T*k)
		wts := make([]float32, T*k)
		for i := range ids {
			ids[i] = int32(rng.IntN(E))
			if i%k == 1 && ids[i] == ids[i-1] {
				ids[i] = (ids[i] + 1) % int32(E)
			}
			wts[i] = rng.Float32()
		}
		out := f32Tensor(be, randF32(rng, T*D, 1), T, D)
		want := append([]float32(nil), F32(out)...)
		idT := npu.Must(be.Alloc(npu.I32, T, k))
		copy(I32(idT), ids)
		be.MoEQ(out, f32Tensor(be, x, T, D), gu, dn, f32Tensor(be, wts, T, k), idT, 7)

		expert := func(qw *npu.QuantWeight, e int) *npu.QuantWeight {
			n, kk := qw.N(), qw.K()
			c := &npu.QuantWeight{Scheme: qw.Scheme, GroupSize: qw.GroupSize,
				Weight: qw.Weight.Rows(e, e+1).Reshape(n, kk), Scale: qw.Scale.Rows(e, e+1).Reshape(qw.Scale.Shape()[1:]...)}
			return c
		}
		for tk := range T {
			acc := make([]float32, D)
			order := []int{0, 1}
			if ids[tk*k] > ids[tk*k+1] {
				order = []int{1, 0}
			}
			for _, j := range order {
				e := int(ids[tk*k+j])
				h := npu.Must(be.Alloc(npu.F32, 1, 2*I))
				be.MatMulQ(h, f32Tensor(be, x[tk*D:(tk+1)*D], 1, D), expert(gu, e))
				hv := F32(h)
				act := make([]float32, I)
				for i := range act {
					g, u := min(hv[i], 7), max(min(hv[I+i], 7), -7)
					act[i] = g * sigmoid32(g) * u
				}
				y := npu.Must(be.Alloc(npu.F32, 1, D))
				be.MatMulQ(y, f32Tensor(be, act, 1, I), expert(dn, e))
				for d, v := range F32(y) {
					acc[d] += v * wts[tk*k+j]
				}
			}
			for d := range acc {
				want[tk*D+d] += acc[d]
			}
		}
		for i, v := range F32(out) {
			if math.Abs(float64(v-want[i])) > 1e-5*math.Max(1, math.Abs(float64(want[i]))) {
				t.Fatalf("%s: out[%d] = %v, want %v", s, i, v, want[i])
			}
		}
	}
}

func TestSelectI8Kernels(t *testing.T) {
	for _, env := range []string{"0", "off", "false", "go"} {
		if k := selectI8Kernels(env); k != i8Portable {
			t.Errorf("NPUSERVE_CPU_SIMD=%s selects %s", env, k.name)
		}
	}
	ks := supportedI8Kernels()
	for _, k := range ks {
		if got := selectI8Kernels(k.name); got != k {
			t.Errorf("NPUSERVE_CPU_SIMD=%s selects %s", k.name, got.name)
		}
	}
	if len(ks) > 0 && selectI8Kernels("") != ks[len(ks)-1] {
		t.Errorf("default selects %s, want the best (%s)", selectI8Kernels("").name, ks[len(ks)-1].name)
	}
}

// TestPackI8Weights checks the packed layout element by element.
func TestPackI8Weights(t *testing.T) {
	k := &i8Kernels{name: "t", mr: 2, nr: 3, kg: 4, unsignedW: true}
	n, K := 4, 6
	w := make([]byte, n*K)
	for i := range w {
		w[i] = byte(int8(i - 10))
	}
	kpad := 8
	p := packI8Weights(k, w, n, K, kpad)
	if len(p) != 2*2*3*4 {
		t.Fatalf("packed %d bytes", len(p))
	}
	for r := range 6 { // 2 panels of 3 channels
		for kk := range kpad {
			got := p[(r/3)*2*3*4+(kk/4)*3*4+(r%3)*4+kk%4]
			want := byte(128)
			if r < n && kk < K {
				want = w[r*K+kk] + 128
			}
			if got != want {
				t.Fatalf("channel %d k %d: %d, want %d", r, kk, got, want)
			}
		}
	}
	_ = binary.LittleEndian
}

// TestDecodeMXRow checks the MXFP8 row expansion, SIMD and portable,
// against quant.MXDequantize for every E4M3 value under a range of
// scales (extremes included), group sizes and a ragged tail.
func TestDecodeMXRow(t *testing.T) {
	const K = 256 + 32 + 7
	q := make([]byte, K)
	for i := range q {
		q[i] = byte(i)
		if q[i]&0x7f == 0x7f { // NaN encodings: the SIMD path does not keep them
			q[i] = 0x42
		}
	}
	for _, group := range []int{32, 64} {
		nb := (K + group - 1) / group
		for _, base := range []int{0, 1, 60, 127, 200, 246, 247, 254} {
			scales := make([]byte, nb)
			for i := range scales {
				scales[i] = byte(min(base+i%3, 254))
			}
			want := make([]float32, K)
			quant.MXDequantize(want, q, scales, group)
			for _, simd := range []bool{false, true} {
				if simd && !hasE4M3Decode {
					continue
				}
				got := make([]float32, K)
				decodeMXRow(got, q, scales, group, simd, nil)
				for i := range got {
					if got[i] != want[i] {
						t.Fatalf("group %d scale %d simd %v: element %d (%#02x): %v, want %v", group, base, simd, i, q[i], got[i], want[i])
					}
				}
			}
		}
	}
}
