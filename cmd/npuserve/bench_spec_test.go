package main

import (
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchSpec runs `bench spec` on the MTP golden fixture (its own MTP
// layer) and on the trained fixture (none: a random one is added) and
// checks each line's bookkeeping: speculation never changes the greedy
// output, one rate per drafted position, non-increasing rates, the mean
// acceptance length their sum plus one, and the speed-ups' definitions.
func TestBenchSpec(t *testing.T) {
	cases := []struct {
		name, model string
		random      bool
	}{
		{"own MTP layer", "mtp", false},
		{"random MTP layer", "trained", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := run(t, "bench", "spec", "--model", filepath.Join(fixtures, c.model), "--speculative-tokens", "0,1,3",
				"--num-prompts", "2", "--prompt-len", "20", "--max-tokens", "12")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if got := strings.Contains(errOut, "random MTP layer"); got != c.random {
				t.Errorf("random-MTP warning %v, want %v: %s", got, c.random, errOut)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 3 {
				t.Fatalf("%d lines: %s", len(lines), out)
			}
			for i, want := range []int{0, 1, 3} {
				var r specResult
				if err := json.Unmarshal([]byte(lines[i]), &r); err != nil {
					t.Fatal(err)
				}
				if r.K != want || !r.SameAsBaseline || r.DecodeTokens != 2*11 || r.DecodeSteps < 1 || r.TokensPerS <= 0 {
					t.Errorf("line %d: %+v", i, r)
				}
				if want == 0 {
					if r.TokensPerStep != 1 || r.PerPos != nil || r.Speedup != 0 {
						t.Errorf("baseline %+v", r)
					}
					continue
				}
				sum := 0.0
				for j, p := range r.PerPos {
					sum += p
					if p < 0 || p > 1 || (j > 0 && p > r.PerPos[j-1]) {
						t.Errorf("k=%d: per-position rates %v", want, r.PerPos)
					}
				}
				if len(r.PerPos) != want || math.Abs(r.MeanAcceptanceLength-1-sum) > 1e-9 {
					t.Errorf("k=%d: rates %v, mean acceptance length %v", want, r.PerPos, r.MeanAcceptanceLength)
				}
				if math.Abs(r.ImpliedSpeedup-r.Speedup) > 1e-3*r.Speedup || r.StepCost <= 0 {
					t.Errorf("k=%d: implied %v measured %v cost %v", want, r.ImpliedSpeedup, r.Speedup, r.StepCost)
				}
			}
		})
	}
}
