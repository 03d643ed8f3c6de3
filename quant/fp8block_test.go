package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestFP8BlockScale(t *testing.T) {
	cases := []struct{ amax, want float32 }{
		{448, 1}, {896, 2}, {1, 1.0 / 448}, {0, FP8BlockMinScale}, {1e-12, FP8BlockMinScale},
	}
	for _, c := range cases {
		if got := FP8BlockScale(c.amax); got != c.want {
			t.Errorf("FP8BlockScale(%v) = %v, want %v", c.amax, got, c.want)
		}
	}
}

// TestFP8BlockQuantizeRoundTrip: every tile's maximum maps to ±448
// exactly, and every element comes back within half an E4M3 ulp
// (relative 2^-4) or, below the normal range, half a subnormal step.
func TestFP8BlockQuantizeRoundTrip(t *testing.T) {
	cases := []struct{ n, k, block int }{
		{1, 1, 128}, {128, 128, 128}, {129, 200, 128}, {300, 129, 128}, {7, 9, 4}, {5, 5, 2},
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, c := range cases {
		w := make([]float32, c.n*c.k)
		for i := range w {
			w[i] = float32(math.Ldexp(rng.NormFloat64(), rng.IntN(8)-4))
		}
		if len(w) > 2 {
			w[1] = 0
		}
		nb, kb := (c.n+c.block-1)/c.block, (c.k+c.block-1)/c.block
		q, s := make([]uint8, len(w)), make([]float32, nb*kb)
		if err := FP8BlockQuantize(q, s, w, c.n, c.k, c.block); err != nil {
			t.Fatal(err)
		}
		back := make([]float32, len(w))
		if err := FP8BlockDequantize(back, q, s, c.n, c.k, c.block); err != nil {
			t.Fatal(err)
		}
		tileMax := make([]float32, nb*kb)
		for r := range c.n {
			for col := range c.k {
				i := (r/c.block)*kb + col/c.block
				tileMax[i] = max(tileMax[i], float32(math.Abs(float64(w[r*c.k+col]))))
			}
		}
		for i, m := range tileMax {
			if want := FP8BlockScale(m); s[i] != want {
				t.Errorf("%v: scale[%d] = %v, want %v", c, i, s[i], want)
			}
		}
		for i, v := range w {
			sc := float64(s[(i/c.k/c.block)*kb+(i%c.k)/c.block])
			tol := math.Max(math.Abs(float64(v))/16, sc*math.Ldexp(1, -10))
			if d := math.Abs(float64(back[i]) - float64(v)); d > tol*1.0001 {
				t.Errorf("%v: w[%d] = %v came back as %v (tolerance %v)", c, i, v, back[i], tol)
			}
		}
	}
}

func TestFP8BlockQuantizeErrors(t *testing.T) {
	cases := []struct {
		name        string
		q, w, s     int
		n, k, block int
	}{
		{"short scales", 16, 16, 1, 4, 4, 2},
		{"short q", 15, 16, 4, 4, 4, 2},
		{"zero block", 16, 16, 4, 4, 4, 0},
		{"negative n", 0, 0, 0, -1, 4, 2},
	}
	for _, c := range cases {
		err := FP8BlockQuantize(make([]uint8, c.q), make([]float32, c.s), make([]float32, c.w), c.n, c.k, c.block)
		if err == nil {
			t.Errorf("%s: FP8BlockQuantize accepted it", c.name)
		}
		err = FP8BlockDequantize(make([]float32, c.w), make([]uint8, c.q), make([]float32, c.s), c.n, c.k, c.block)
		if err == nil {
			t.Errorf("%s: FP8BlockDequantize accepted it", c.name)
		}
	}
}

// TestFP8ActFakeQuant: fake quantization equals quantize-then-dequantize
// per group, zero groups stay zero, and each group's maximum is exact.
func TestFP8ActFakeQuant(t *testing.T) {
	cases := []struct {
		name  string
		x     []float32
		block int
	}{
		{"exact", []float32{448, -224, 1, 0}, 4},
		{"zeros", []float32{0, 0, 0, 3, 0.001}, 3},
		{"ragged", []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 4},
		{"tiny", []float32{1e-20, -3e-20}, 128},
	}
	for _, c := range cases {
		got := append([]float32(nil), c.x...)
		FP8ActFakeQuant(got, c.block)
		q, s := make([]uint8, len(c.x)), make([]float32, (len(c.x)+c.block-1)/c.block)
		FP8ActQuantize(q, s, c.x, c.block)
		for i, v := range c.x {
			want := E4M3ToF32(q[i]) * s[i/c.block]
			if got[i] != want {
				t.Errorf("%s: x[%d] = %v fake-quantized to %v, want %v", c.name, i, v, got[i], want)
			}
			if v == 0 && got[i] != 0 {
				t.Errorf("%s: zero x[%d] became %v", c.name, i, got[i])
			}
		}
		for g := range s {
			blk := c.x[g*c.block : min((g+1)*c.block, len(c.x))]
			m := AbsMax(blk)
			for i, v := range blk {
				switch {
				case m/E4M3Max < FP8BlockMinScale:
					// The scale guard flushes groups this small to zero.
					if got[g*c.block+i] != 0 {
						t.Errorf("%s: tiny x[%d] = %v became %v, want 0", c.name, g*c.block+i, v, got[g*c.block+i])
					}
				case float32(math.Abs(float64(v))) == m:
					if rel := math.Abs(float64(got[g*c.block+i])-float64(v)) / float64(m); rel > 1e-6 {
						t.Errorf("%s: group %d maximum %v became %v", c.name, g, v, got[g*c.block+i])
					}
				}
			}
		}
	}
	x := []float32{448, -224, 1, 0}
	FP8ActFakeQuant(x, 4)
	if x[0] != 448 || x[1] != -224 || x[2] != 1 || x[3] != 0 {
		t.Errorf("exactly representable values changed: %v", x)
	}
}
