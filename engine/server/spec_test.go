package server

import (
	"testing"

	"github.com/npuserve/npuserve/engine/core"
)

func TestSpecLine(t *testing.T) {
	last := core.Stats{NumSpeculativeTokens: 3, SpecDrafts: 10, SpecDraftTokens: 30, SpecAcceptedTokens: 5, SpecAcceptedPerPos: []int64{3, 2}}
	cases := []struct {
		name string
		st   core.Stats
		want string
	}{
		{"off", core.Stats{}, ""},
		{"nothing drafted", last, ""},
		{"interval", core.Stats{NumSpeculativeTokens: 3, SpecDrafts: 20, SpecDraftTokens: 60, SpecAcceptedTokens: 20, SpecAcceptedPerPos: []int64{11, 7, 2}},
			"SpecDecoding metrics: Mean acceptance length: 2.50, Accepted: 15 tokens, Drafted: 30 tokens, Per-position acceptance rate: 0.800, 0.500, 0.200, Avg Draft acceptance rate: 50.0%"},
	}
	for _, c := range cases {
		if got := specLine(c.st, last); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
