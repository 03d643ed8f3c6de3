package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestMXScale(t *testing.T) {
	cases := []struct {
		amax float32
		alg  ScaleAlg
		want uint8
	}{
		{1, ScaleAlgOCP, 127 - 8}, {448, ScaleAlgOCP, 127}, {500, ScaleAlgOCP, 127}, {511.9, ScaleAlgOCP, 127},
		{512, ScaleAlgOCP, 128}, {255.9, ScaleAlgOCP, 126},
		{448, ScaleAlgRoundUp, 127}, {449, ScaleAlgRoundUp, 128}, {224, ScaleAlgRoundUp, 126},
		{1, ScaleAlgRoundUp, 127 - 8}, // 1/448 = 1.14*2^-9 rounds up to 2^-8
		{0, ScaleAlgOCP, 0}, {0, ScaleAlgRoundUp, 0},
		{float32(math.Inf(1)), ScaleAlgOCP, 0xff}, {float32(math.NaN()), ScaleAlgRoundUp, 0xff},
		{float32(math.Ldexp(1, -140)), ScaleAlgOCP, 0},        // clamps at 2^-127
		{float32(math.Ldexp(1, 126)), ScaleAlgOCP, 127 + 118}, // 2^(126-8)
	}
	for _, c := range cases {
		if got := MXScale(c.amax, c.alg); got != c.want {
			t.Errorf("MXScale(%v, %v) = %d, want %d", c.amax, c.alg, got, c.want)
		}
	}
}

// TestMXQuantizeProperties: the OCP algorithm puts the block maximum in
// [256, 512) before saturation, round-up never saturates, and both keep
// every element within half an E4M3 ulp (relative 2^-4) of the input, or
// the saturation error for OCP.
func TestMXQuantizeProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 31, 32, 33, 64, 95} {
		for _, alg := range []ScaleAlg{ScaleAlgOCP, ScaleAlgRoundUp} {
			for trial := range 50 {
				x := make([]float32, n)
				e := rng.IntN(40) - 20
				for i := range x {
					x[i] = float32(math.Ldexp(rng.NormFloat64(), e))
				}
				if trial == 0 {
					x[0] = 0
				}
				nb := (n + MXBlock - 1) / MXBlock
				q, s := make([]uint8, n), make([]uint8, nb)
				MXQuantize(q, s, x, MXBlock, alg)
				back := make([]float32, n)
				MXDequantize(back, q, s, MXBlock)
				for b := range nb {
					blk := x[b*MXBlock : min((b+1)*MXBlock, n)]
					amax := AbsMax(blk)
					if amax == 0 {
						continue
					}
					scale := float64(E8M0ToF32(s[b]))
					r := float64(amax) / scale
					if alg == ScaleAlgOCP && (r < 256 || r >= 512) {
						t.Fatalf("OCP scale %v puts amax %v at %v, want [256, 512)", scale, amax, r)
					}
					if alg == ScaleAlgRoundUp && (r > 448 || r <= 224) {
						t.Fatalf("round-up scale %v puts amax %v at %v, want (224, 448]", scale, amax, r)
					}
					for i, v := range blk {
						got := float64(back[b*MXBlock+i])
						err := math.Abs(got - float64(v))
						tol := math.Max(math.Abs(float64(v))/16, scale*math.Ldexp(1, -10))
						if math.Abs(float64(v))/scale > 448 {
							tol = math.Abs(float64(v)) - 448*scale
						}
						if err > tol*(1+1e-6) {
							t.Fatalf("alg %v: %v -> %v (error %v > %v, scale %v)", alg, v, got, err, tol, scale)
						}
					}
				}
			}
		}
	}
}

// TestMXScaleAlgMSE: per block, the MSE choice is never worse than either
// fixed algorithm.
func TestMXScaleAlgMSE(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for range 200 {
		x := make([]float32, MXBlock)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		errOf := func(alg ScaleAlg) float64 {
			q, s := make([]uint8, MXBlock), make([]uint8, 1)
			MXQuantize(q, s, x, MXBlock, alg)
			back := make([]float32, MXBlock)
			MXDequantize(back, q, s, MXBlock)
			var e float64
			for i := range x {
				e += math.Pow(float64(back[i]-x[i]), 2)
			}
			return e
		}
		if m := errOf(ScaleAlgMSE); m > errOf(ScaleAlgOCP) || m > errOf(ScaleAlgRoundUp) {
			t.Fatalf("MSE choice %v worse than OCP %v or round-up %v", m, errOf(ScaleAlgOCP), errOf(ScaleAlgRoundUp))
		}
	}
}

func TestMXFakeQuantMatchesRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	x := make([]float32, 2000)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	q, s := make([]uint8, len(x)), make([]uint8, (len(x)+31)/32)
	MXQuantize(q, s, x, 32, ScaleAlgOCP)
	want := make([]float32, len(x))
	MXDequantize(want, q, s, 32)
	MXFakeQuant(x, 32, ScaleAlgOCP)
	for i := range x {
		if x[i] != want[i] {
			t.Fatalf("element %d: %v != %v", i, x[i], want[i])
		}
	}
}
