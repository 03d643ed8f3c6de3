package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestParamsQuantize(t *testing.T) {
	cases := []struct {
		name       string
		p          Params
		x          float32
		qmin, qmax int32
		want       int8
	}{
		{"exact", Params{Scale: 0.5}, 3, -127, 127, 6},
		{"half to even down", Params{Scale: 1}, 2.5, -127, 127, 2},
		{"half to even up", Params{Scale: 1}, 3.5, -127, 127, 4},
		{"negative half", Params{Scale: 1}, -2.5, -127, 127, -2},
		{"clamp sym", Params{Scale: 1}, -300, -127, 127, -127},
		{"clamp asym", Params{Scale: 1}, -300, -128, 127, -128},
		{"offset", Params{Scale: 0.1, Offset: -20}, 1, -128, 127, -10},
		{"zero scale", Params{Offset: 5}, 9, -128, 127, 5},
	}
	for _, c := range cases {
		if got := c.p.Quantize(c.x, c.qmin, c.qmax); got != c.want {
			t.Errorf("%s: Quantize(%v) = %d, want %d", c.name, c.x, got, c.want)
		}
	}
}

func TestAsymParams(t *testing.T) {
	cases := []struct {
		lo, hi float32
	}{{-1, 3}, {0.5, 2}, {-4, -1}, {-1, 1}, {-0.001, 1000}}
	for _, c := range cases {
		p := AsymParams(c.lo, c.hi)
		// Zero is exact and both ends land inside int8.
		if q := p.Quantize(0, AsymMin, AsymMax); p.Dequantize(q) != 0 {
			t.Errorf("%v: 0 -> %d -> %v", c, q, p.Dequantize(q))
		}
		lo, hi := min(c.lo, 0), max(c.hi, 0)
		for _, v := range []float32{lo, hi} {
			q := p.Quantize(v, AsymMin, AsymMax)
			if d := math.Abs(float64(p.Dequantize(q) - v)); d > float64(p.Scale)*0.5001+1e-6 {
				t.Errorf("%v: %v -> %d -> %v (scale %v)", c, v, q, p.Dequantize(q), p.Scale)
			}
		}
	}
	if p := AsymParams(0, 0); p.Scale != 0 || p.Offset != 0 {
		t.Errorf("empty range: %+v", p)
	}
}

// TestMatrixRoundTrip: every granularity and symmetry reconstructs within
// half a step of its group's scale.
func TestMatrixRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, g := range []Granularity{PerTensor, PerChannel, PerToken} {
		for _, sym := range []bool{true, false} {
			rows, cols := 5, 37
			x := make([]float32, rows*cols)
			for i := range x {
				x[i] = float32(rng.NormFloat64()) * float32(1+i/cols) // rows of different ranges
			}
			x[3] = 0
			q := make([]int8, len(x))
			ps := Matrix(q, x, rows, cols, g, sym)
			if want := map[bool]int{true: 1, false: rows}[g == PerTensor]; len(ps) != want {
				t.Fatalf("%v: %d params, want %d", g, len(ps), want)
			}
			back := make([]float32, len(x))
			DequantizeMatrix(back, q, rows, cols, ps)
			for i := range x {
				p := ps[0]
				if g != PerTensor {
					p = ps[i/cols]
				}
				if sym && (q[i] < -SymMax) {
					t.Fatalf("symmetric value %d below -127", q[i])
				}
				if d := math.Abs(float64(back[i] - x[i])); d > float64(p.Scale)*0.5001 {
					t.Fatalf("%v sym=%v: x[%d]=%v -> %v (scale %v)", g, sym, i, x[i], back[i], p.Scale)
				}
			}
		}
	}
}

func TestDynamicToken(t *testing.T) {
	x := []float32{0.5, -1.27, 0.01, 0}
	q := make([]int8, len(x))
	s := DynamicToken(q, x)
	if s != float32(1.27)/127 {
		t.Errorf("scale %v", s)
	}
	want := []int8{50, -127, 1, 0}
	for i := range q {
		if q[i] != want[i] {
			t.Errorf("q = %v, want %v", q, want)
			break
		}
	}
	zero := make([]int8, 3)
	if s := DynamicToken(zero, make([]float32, 3)); s != 0 || zero[0] != 0 {
		t.Errorf("all-zero row: scale %v q %v", s, zero)
	}
}

func TestStaticQuantize(t *testing.T) {
	x := []float32{0, 1, -1, 100, -100, 0.05}
	q := make([]int8, len(x))
	StaticQuantize(q, x, 10, -3)
	want := []int8{-3, 7, -13, 127, -128, -2} // 0.5 - 3 = -2.5 rounds to -2
	for i := range q {
		if q[i] != want[i] {
			t.Fatalf("q = %v, want %v", q, want)
		}
	}
}
