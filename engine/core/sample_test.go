package core

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/npuserve/npuserve/engine/sampling"
	"github.com/npuserve/npuserve/npu"
)

// Reduction needs of a sampling kind.
const (
	reduceAlone  = iota // decided from npu.SampleReducer's candidates
	reduceRounds        // also needs npu.SampleHistogrammer's rounds
	reduceNever         // always downloaded whole
)

// samplingMix are requests of every sampling kind: ones the candidates
// decide (greedy, top-k with temperature, top-p after top-k, min-p with
// and without top-k and top-p, penalties and bias over top-k), ones that
// need a histogramming device (logprobs, top-p alone, plain temperature)
// and ones that always need their whole row (every logprob, top-k above
// sampling.MaxReducedTopK).
var samplingMix = []struct {
	name  string
	needs int
	set   func(p *sampling.Params)
}{
	{"greedy", reduceAlone, func(p *sampling.Params) { p.Temperature = sampling.Ptr(0.0) }},
	{"top-k top-p", reduceAlone, func(p *sampling.Params) {
		p.Temperature, p.TopK, p.TopP = sampling.Ptr(0.9), sampling.Ptr(50), sampling.Ptr(0.95)
	}},
	{"top-k hot", reduceAlone, func(p *sampling.Params) { p.Temperature, p.TopK = sampling.Ptr(1.3), sampling.Ptr(5) }},
	{"top-k min-p", reduceAlone, func(p *sampling.Params) {
		p.Temperature, p.TopK, p.MinP = sampling.Ptr(1.0), sampling.Ptr(20), sampling.Ptr(0.05)
	}},
	{"min-p", reduceAlone, func(p *sampling.Params) { p.Temperature, p.MinP = sampling.Ptr(1.0), sampling.Ptr(0.1) }},
	{"min-p top-p", reduceAlone, func(p *sampling.Params) {
		p.Temperature, p.MinP, p.TopP = sampling.Ptr(1.5), sampling.Ptr(0.02), sampling.Ptr(0.8)
	}},
	{"top-k penalties bias", reduceAlone, func(p *sampling.Params) {
		p.Temperature, p.TopK = sampling.Ptr(0.8), sampling.Ptr(30)
		p.RepetitionPenalty = sampling.Ptr(1.3)
		p.FrequencyPenalty, p.PresencePenalty = 0.5, -0.3
		p.LogitBias = map[int32]float64{7: 5, 100: -100}
	}},
	{"top-p alone", reduceRounds, func(p *sampling.Params) { p.Temperature, p.TopP = sampling.Ptr(1.0), sampling.Ptr(0.9) }},
	{"plain temperature", reduceRounds, func(p *sampling.Params) { p.Temperature = sampling.Ptr(1.0) }},
	{"plain temperature penalties bias", reduceRounds, func(p *sampling.Params) {
		p.Temperature, p.RepetitionPenalty = sampling.Ptr(0.7), sampling.Ptr(1.2)
		p.FrequencyPenalty, p.PresencePenalty = 0.4, 0.2
		p.LogitBias = map[int32]float64{3: 8, 50: -100}
	}},
	{"top-k logprobs", reduceRounds, func(p *sampling.Params) {
		p.Temperature, p.TopK, p.Logprobs = sampling.Ptr(1.0), sampling.Ptr(10), sampling.Ptr(3)
	}},
	{"greedy logprobs", reduceRounds, func(p *sampling.Params) { p.Temperature, p.Logprobs = sampling.Ptr(0.0), sampling.Ptr(2) }},
	{"top-p logprobs", reduceRounds, func(p *sampling.Params) {
		p.Temperature, p.TopP, p.Logprobs = sampling.Ptr(1.2), sampling.Ptr(0.7), sampling.Ptr(5)
	}},
	{"every logprob", reduceNever, func(p *sampling.Params) { p.Temperature, p.Logprobs = sampling.Ptr(1.0), sampling.Ptr(-1) }},
	{"top-k past the reduction", reduceNever, func(p *sampling.Params) {
		p.Temperature, p.TopK = sampling.Ptr(1.0), sampling.Ptr(sampling.MaxReducedTopK+1)
	}},
}

// mixParams is request i's parameters: samplingMix[kinds[i]], seeded by
// seed and i, 12 tokens.
func mixParams(kinds []int, seed uint64) func(i int) sampling.Params {
	return func(i int) sampling.Params {
		p := sampling.DefaultParams()
		samplingMix[kinds[i]].set(&p)
		p.Seed = sampling.Ptr(seed*1000 + uint64(i))
		p.MaxTokens = sampling.Ptr(12)
		p.IgnoreEOS = true
		return p
	}
}

// runOutputs is runAll keeping every output's tokens and logprobs.
func runOutputs(t *testing.T, e *Engine, ps [][]int32, params func(i int) sampling.Params) (toks [][]int32, lps [][]sampling.Token) {
	t.Helper()
	chans := make([]<-chan Output, len(ps))
	for i, p := range ps {
		ch, err := e.Add(&Request{ID: fmt.Sprint("r", i), PromptTokens: p, Params: params(i)})
		if err != nil {
			t.Fatal(err)
		}
		chans[i] = ch
	}
	toks, lps = make([][]int32, len(ps)), make([][]sampling.Token, len(ps))
	for i, ch := range chans {
		timeout := time.After(60 * time.Second)
	loop:
		for {
			select {
			case out, ok := <-ch:
				if !ok {
					break loop
				}
				if out.Err != nil {
					t.Fatalf("request %d: %v", i, out.Err)
				}
				toks[i] = append(toks[i], out.Tokens...)
				lps[i] = append(lps[i], out.Logprobs...)
			case <-timeout:
				t.Fatalf("request %d stuck", i)
			}
		}
	}
	return toks, lps
}

// TestReducedSamplingMatchesWholeRows: batches mixing greedy, top-k,
// top-p after top-k, min-p (with and without top-k and top-p), penalties
// and bias, logprobs, top-p alone and plain temperature give the same
// tokens and logprobs, bit for bit, when the engine samples from the
// device's reductions and histograms (on a backend with npu.SampleReducer
// other than the eager CPU, e.g. NPUSERVE_TEST_DEVICE=cpu-async, which
// also has npu.SampleHistogrammer) as when it downloads every row whole;
// a batch of reducible requests downloads no row whole.
func TestReducedSamplingMatchesWholeRows(t *testing.T) {
	m := tiny(t)
	opt := Options{MaxNumSeqs: 12, MaxNumBatchedTokens: 64, BlockSize: 4, NumBlocks: 256, MaxLogprobs: -1, crossCheck: true}
	red := newEngine(t, m, opt)
	opt.wholeRows, opt.crossCheck = true, false
	whole := newEngine(t, m, opt)
	_, reducing := reduces(red.be)
	_, asks := red.be.(npu.SampleHistogrammer)
	reducible := func(needs int) bool { return needs == reduceAlone || (needs == reduceRounds && asks) }

	var reducibleKinds, allKinds []int
	for k, c := range samplingMix {
		if reducible(c.needs) {
			reducibleKinds = append(reducibleKinds, k)
		}
		allKinds = append(allKinds, k)
	}
	cases := []struct {
		name  string
		kinds []int
	}{
		{"reducible", append(reducibleKinds, reducibleKinds...)},
		{"mixed", allKinds},
	}
	for _, c := range cases {
		for seed := range uint64(3) {
			t.Run(fmt.Sprintf("%s/seed%d", c.name, seed), func(t *testing.T) {
				ps := prompts(len(c.kinds), 40+seed)
				params := mixParams(c.kinds, seed)
				before := waitIdle(t, red)
				gotT, gotL := runOutputs(t, red, ps, params)
				after := waitIdle(t, red)
				wantT, wantL := runOutputs(t, whole, ps, params)
				// The engines batch the requests as they arrive, and a
				// row's logits may differ in the last bits with the
				// batch around it: logprobs are compared on the same
				// logits (crossCheck), tokens across the engines.
				for i := range ps {
					kind := samplingMix[c.kinds[i]].name
					if !reflect.DeepEqual(gotT[i], wantT[i]) {
						t.Errorf("request %d (%s): reduced %v, whole rows %v", i, kind, gotT[i], wantT[i])
					}
					if len(gotL[i]) != len(wantL[i]) {
						t.Errorf("request %d (%s): %d logprobs, whole rows %d", i, kind, len(gotL[i]), len(wantL[i]))
					}
				}
				if red.crossMismatches != nil || red.crossChecked == 0 {
					t.Fatalf("%d rows checked against whole rows on the same logits, %d differ: %v", red.crossChecked, len(red.crossMismatches), red.crossMismatches)
				}
				rows := after.GenerationTokens - before.GenerationTokens
				wholeRows := after.NumWholeRows - before.NumWholeRows
				t.Logf("%s: %d rows sampled, %d downloaded whole", red.be.Name(), rows, wholeRows)
				switch {
				case !reducing && wholeRows != rows:
					t.Errorf("backend %s does not reduce, yet %d of %d rows were not downloaded whole", red.be.Name(), rows-wholeRows, rows)
				case reducing && c.name == "reducible" && wholeRows != 0:
					t.Errorf("%d of %d rows of reducible requests downloaded whole", wholeRows, rows)
				case reducing && c.name == "mixed" && (wholeRows == 0 || wholeRows == rows):
					t.Errorf("%d of %d rows of a mixed batch downloaded whole; want some, not all", wholeRows, rows)
				}
			})
		}
	}
	if s := whole.Stats(); s.NumWholeRows != s.GenerationTokens {
		t.Errorf("the whole-row engine downloaded %d rows whole for %d tokens", s.NumWholeRows, s.GenerationTokens)
	}
}
