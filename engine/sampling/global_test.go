package sampling

import (
	"slices"
	"testing"
)

// TestGlobalSeed: with a global seed, unseeded requests sample the same
// sequence of tokens after a reseed; without one they differ.
func TestGlobalSeed(t *testing.T) {
	logits := make([]float32, 64)
	for i := range logits {
		logits[i] = float32(i%7) * 0.3
	}
	p := DefaultParams()
	p.Temperature = Ptr(1.0)
	draw := func() []int32 {
		var ids []int32
		for range 4 {
			s, err := NewSampler(p, nil)
			if err != nil {
				t.Fatal(err)
			}
			for range 8 {
				tok, err := s.Sample(logits)
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, tok.ID)
			}
		}
		return ids
	}
	SetGlobalSeed(7)
	a := draw()
	SetGlobalSeed(7)
	b := draw()
	SetGlobalSeed(8)
	c := draw()
	global.mu.Lock()
	global.rng = nil
	global.mu.Unlock()
	if !slices.Equal(a, b) {
		t.Fatalf("same global seed, different tokens:\n%v\n%v", a, b)
	}
	if slices.Equal(a, c) {
		t.Fatalf("different global seeds gave the same 32 tokens: %v", a)
	}
}
