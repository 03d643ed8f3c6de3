package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

// refE4M3 decodes an E4M3 byte straight from the OCP MX specification
// (v1.0 §5.3.2): bias 7, subnormals at exponent field 0, S.1111.111 NaN.
func refE4M3(b uint8) float64 {
	s := 1.0
	if b&0x80 != 0 {
		s = -1
	}
	e, m := int(b>>3&0xf), float64(b&7)
	switch {
	case e == 15 && m == 7:
		return math.NaN()
	case e == 0:
		return s * math.Ldexp(m/8, 1-7)
	}
	return s * math.Ldexp(1+m/8, e-7)
}

// TestE4M3DecodeEveryValue checks all 256 encodings against the spec.
func TestE4M3DecodeEveryValue(t *testing.T) {
	for i := range 256 {
		b := uint8(i)
		want, got := refE4M3(b), float64(E4M3ToF32(b))
		if math.IsNaN(want) != math.IsNaN(got) || !math.IsNaN(want) && want != got {
			t.Errorf("E4M3ToF32(%#02x) = %v, want %v", b, got, want)
		}
	}
	// Landmarks of the format.
	for _, c := range []struct {
		b    uint8
		want float64
	}{{0x7e, 448}, {0x08, 1.0 / 64}, {0x01, math.Ldexp(1, -9)}, {0x07, 7 * math.Ldexp(1, -9)}, {0x38, 1}, {0xfe, -448}, {0x80, 0}} {
		if got := float64(E4M3ToF32(c.b)); got != c.want {
			t.Errorf("E4M3ToF32(%#02x) = %v, want %v", c.b, got, c.want)
		}
	}
	if !math.Signbit(float64(E4M3ToF32(0x80))) {
		t.Error("0x80 must decode to -0")
	}
}

// TestE4M3EncodeEveryValue: every finite encoding round-trips, both signs.
func TestE4M3EncodeEveryValue(t *testing.T) {
	for i := range 256 {
		b := uint8(i)
		v := refE4M3(b)
		if math.IsNaN(v) {
			if got := E4M3FromF32(float32(v)); got&0x7f != 0x7f {
				t.Errorf("NaN encodes as %#02x", got)
			}
			continue
		}
		f := float32(v)
		if b == 0x80 {
			f = float32(math.Copysign(0, -1))
		}
		if got := E4M3FromF32(f); got != b {
			t.Errorf("E4M3FromF32(%v) = %#02x, want %#02x", f, got, b)
		}
	}
}

// finiteE4M3 lists the non-negative finite values in increasing order with
// their encodings (0x00..0x7e).
func finiteE4M3() (vals []float64, codes []uint8) {
	for b := uint8(0); b <= 0x7e; b++ {
		vals = append(vals, refE4M3(b))
		codes = append(codes, b)
	}
	return
}

// TestE4M3RoundingBetweenEveryPair: for every pair of neighbours, the
// midpoint goes to the even encoding and anything off the midpoint by one
// float32 ulp goes to the nearer neighbour, for both signs.
func TestE4M3RoundingBetweenEveryPair(t *testing.T) {
	vals, codes := finiteE4M3()
	for i := 0; i+1 < len(vals); i++ {
		lo, hi := vals[i], vals[i+1]
		mid := float32((lo + hi) / 2)
		if float64(mid) != (lo+hi)/2 {
			t.Fatalf("midpoint of %v and %v is not exact in float32", lo, hi)
		}
		even := codes[i]
		if even&1 == 1 {
			even = codes[i+1]
		}
		below := math.Nextafter32(mid, float32(math.Inf(-1)))
		above := math.Nextafter32(mid, float32(math.Inf(1)))
		cases := []struct {
			f    float32
			want uint8
		}{{mid, even}, {below, codes[i]}, {above, codes[i+1]}, {float32(lo), codes[i]}, {float32(hi), codes[i+1]}}
		for _, c := range cases {
			if got := E4M3FromF32(c.f); got != c.want {
				t.Errorf("E4M3FromF32(%v) = %#02x, want %#02x (between %v and %v)", c.f, got, c.want, lo, hi)
			}
			if got := E4M3FromF32(-c.f); got != c.want|0x80 {
				t.Errorf("E4M3FromF32(%v) = %#02x, want %#02x", -c.f, got, c.want|0x80)
			}
		}
	}
}

// TestE4M3Saturation: beyond 448 (and infinities) saturate to ±448, NaN
// stays NaN, tiny values flush to signed zero.
func TestE4M3Saturation(t *testing.T) {
	inf := float32(math.Inf(1))
	cases := []struct {
		f    float32
		want uint8
	}{
		{448, 0x7e}, {math.Nextafter32(448, inf), 0x7e}, {456, 0x7e}, {464, 0x7e}, {480, 0x7e}, {512, 0x7e},
		{1e30, 0x7e}, {math.MaxFloat32, 0x7e}, {inf, 0x7e}, {-inf, 0xfe}, {-1e9, 0xfe},
		{float32(math.Ldexp(1, -10)), 0x00},                                         // tie between 0 and 2^-9: even is 0
		{math.Nextafter32(float32(math.Ldexp(1, -10)), inf), 0x01},                  // just above the tie
		{float32(math.Ldexp(3, -10)), 0x02},                                         // tie between 2^-9 and 2^-8: even is 2
		{float32(math.Ldexp(1, -140)), 0x00}, {-float32(math.Ldexp(1, -149)), 0x80}, // float32 subnormals
		{float32(math.Ldexp(15, -10)), 0x08}, // 7.5*2^-9 ties up to the smallest normal
	}
	for _, c := range cases {
		if got := E4M3FromF32(c.f); got != c.want {
			t.Errorf("E4M3FromF32(%v) = %#02x, want %#02x", c.f, got, c.want)
		}
	}
	if got := E4M3FromF32(float32(math.NaN())); got&0x7f != 0x7f {
		t.Errorf("NaN -> %#02x", got)
	}
}

// refEncodeE4M3 is a brute-force reference: the nearest finite value
// (ties to the even encoding), saturating.
func refEncodeE4M3(f float32) uint8 {
	if f != f {
		return 0x7f
	}
	vals, codes := finiteE4M3()
	a := math.Abs(float64(f))
	sign := uint8(0)
	if math.Signbit(float64(f)) {
		sign = 0x80
	}
	best := 0
	for i, v := range vals {
		d, bd := math.Abs(a-v), math.Abs(a-vals[best])
		if d < bd || d == bd && codes[i]&1 == 0 {
			best = i
		}
	}
	if a >= 448 {
		best = len(vals) - 1
	}
	return sign | codes[best]
}

// TestE4M3EncodeRandom compares the bit-level encoder with the
// brute-force reference over random float32s of every magnitude.
func TestE4M3EncodeRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200000 {
		var f float32
		if i%2 == 0 {
			f = math.Float32frombits(rng.Uint32()) // every bit pattern class
		} else {
			f = float32(math.Ldexp(rng.Float64()*2-1, rng.IntN(24)-14)) // the E4M3 range
		}
		if f != f {
			continue
		}
		if got, want := E4M3FromF32(f), refEncodeE4M3(f); got != want {
			t.Fatalf("E4M3FromF32(%v [%#08x]) = %#02x, want %#02x", f, math.Float32bits(f), got, want)
		}
	}
}

func TestE8M0(t *testing.T) {
	for i := range 255 {
		if got, want := E8M0ToF32(uint8(i)), float32(math.Ldexp(1, i-127)); got != want {
			t.Errorf("E8M0ToF32(%d) = %v, want %v", i, got, want)
		}
		if got := E8M0FromF32(float32(math.Ldexp(1, i-127))); got != uint8(i) {
			t.Errorf("E8M0FromF32(2^%d) = %d, want %d", i-127, got, i)
		}
		if got := E8M0FromExp(i - 127); got != uint8(i) {
			t.Errorf("E8M0FromExp(%d) = %d", i-127, got)
		}
	}
	if v := E8M0ToF32(0xff); v == v {
		t.Error("0xff must decode to NaN")
	}
	cases := []struct {
		f    float32
		want uint8
	}{
		{1.25, 127}, {1.5, 128}, {1.75, 128}, {math.Nextafter32(1.5, 0), 127}, {3, 129}, {0.75, 127},
		// float32 subnormals (PyTorch's bit-level rounding): 2^-127 itself
		// is exact, anything between it and 2^-126 rounds up.
		{float32(math.Ldexp(1, -127)), 0}, {float32(math.Ldexp(0.9, -127)), 0},
		{float32(math.Ldexp(1.25, -127)), 1}, {float32(math.Ldexp(1.75, -127)), 1},
		{float32(math.Ldexp(1.5, 127)), 0xff}, {float32(math.Inf(1)), 0xff}, {float32(math.NaN()), 0xff},
		{0, 0}, {-1, 0},
	}
	for _, c := range cases {
		if got := E8M0FromF32(c.f); got != c.want {
			t.Errorf("E8M0FromF32(%v) = %d, want %d", c.f, got, c.want)
		}
	}
	if E8M0FromExp(-200) != 0 || E8M0FromExp(300) != 254 {
		t.Error("E8M0FromExp must clamp to [-127, 127]")
	}
}

func TestF32Exponent(t *testing.T) {
	for e := -149; e <= 127; e++ {
		for _, m := range []float64{1, 1.5, 1.999} {
			f := float32(math.Ldexp(m, e))
			if float64(f) != math.Ldexp(m, e) {
				continue // not a float32
			}
			if got := F32Exponent(f); got != e {
				t.Fatalf("F32Exponent(%v) = %d, want %d", f, got, e)
			}
		}
	}
}
