package npu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSampleBin: the bin and fraction give exp(-d) to within 1.2e-10
// relative, bins follow d, values outside [0, SampleHistRange) have none,
// and the weight never rises as a logit falls within one bin.
func TestSampleBin(t *testing.T) {
	tests := []struct {
		name string
		v, m float32
		invT float64
		bin  int
	}{
		{"the maximum", 3, 3, 1, 0},
		{"one unit down", 2, 3, 1, SampleBinsPerUnit},
		{"temperature 0.5 doubles d", 2.5, 3, 2, SampleBinsPerUnit},
		{"-Inf", float32(math.Inf(-1)), 3, 1, -1},
		{"NaN", float32(math.NaN()), 3, 1, -1},
		{"above the maximum", 4, 3, 1, -1},
		{"+Inf", float32(math.Inf(1)), 3, 1, -1},
		{"at the range", 3 - SampleHistRange, 3, 1, -1},
		{"just inside the range", 3 - SampleHistRange + 0.01, 3, 1, SampleHistBins - 1},
	}
	for _, tc := range tests {
		if b, q := SampleBin(tc.v, tc.m, tc.invT); b != tc.bin || (b < 0) != (q == 0) {
			t.Errorf("%s: SampleBin(%v, %v, %v) = %d, %d; want bin %d", tc.name, tc.v, tc.m, tc.invT, b, q, tc.bin)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		m := float32(rng.NormFloat64() * 10)
		v := m - float32(rng.Float64()*SampleHistRange*0.999)
		invT := 1.0
		b, q := SampleBin(v, m, invT)
		d := (float64(m) - float64(v)) * invT
		if b != int(d*SampleBinsPerUnit) {
			t.Fatalf("SampleBin(%v, %v): bin %d for d %v", v, m, b, d)
		}
		w := math.Exp(-float64(b)/SampleBinsPerUnit) * float64(q) / (1 << SampleQBits)
		if want := math.Exp(-d); math.Abs(w-want) > 1.2e-10*want {
			t.Fatalf("SampleBin(%v, %v): weight %v, exp(-%v) = %v", v, m, w, d, want)
		}
		if u := math.Nextafter32(v, float32(math.Inf(-1))); u > float32(math.Inf(-1)) {
			if b2, q2 := SampleBin(u, m, invT); b2 == b && q2 > q {
				t.Fatalf("SampleBin: %v has fraction %d, the smaller %v %d", v, q, u, q2)
			}
		}
	}
}
