package core

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/npuserve/npuserve/engine/sampling"
)

// samplingMix are requests of every sampling kind: reducible ones
// (greedy, top-k with temperature, top-p after top-k, min-p with and
// without top-k and top-p, penalties and bias over top-k) and ones that
// need their whole row (logprobs, top-p alone, plain temperature).
var samplingMix = []struct {
	name      string
	reducible bool
	set       func(p *sampling.Params)
}{
	{"greedy", true, func(p *sampling.Params) { p.Temperature = sampling.Ptr(0.0) }},
	{"top-k top-p", true, func(p *sampling.Params) {
		p.Temperature, p.TopK, p.TopP = sampling.Ptr(0.9), sampling.Ptr(50), sampling.Ptr(0.95)
	}},
	{"top-k hot", true, func(p *sampling.Params) { p.Temperature, p.TopK = sampling.Ptr(1.3), sampling.Ptr(5) }},
	{"top-k min-p", true, func(p *sampling.Params) {
		p.Temperature, p.TopK, p.MinP = sampling.Ptr(1.0), sampling.Ptr(20), sampling.Ptr(0.05)
	}},
	{"min-p", true, func(p *sampling.Params) { p.Temperature, p.MinP = sampling.Ptr(1.0), sampling.Ptr(0.1) }},
	{"min-p top-p", true, func(p *sampling.Params) {
		p.Temperature, p.MinP, p.TopP = sampling.Ptr(1.5), sampling.Ptr(0.02), sampling.Ptr(0.8)
	}},
	{"top-k penalties bias", true, func(p *sampling.Params) {
		p.Temperature, p.TopK = sampling.Ptr(0.8), sampling.Ptr(30)
		p.RepetitionPenalty = sampling.Ptr(1.3)
		p.FrequencyPenalty, p.PresencePenalty = 0.5, -0.3
		p.LogitBias = map[int32]float64{7: 5, 100: -100}
	}},
	{"top-p alone", false, func(p *sampling.Params) { p.Temperature, p.TopP = sampling.Ptr(1.0), sampling.Ptr(0.9) }},
	{"plain temperature", false, func(p *sampling.Params) { p.Temperature = sampling.Ptr(1.0) }},
	{"top-k logprobs", false, func(p *sampling.Params) {
		p.Temperature, p.TopK, p.Logprobs = sampling.Ptr(1.0), sampling.Ptr(10), sampling.Ptr(3)
	}},
	{"greedy logprobs", false, func(p *sampling.Params) { p.Temperature, p.Logprobs = sampling.Ptr(0.0), sampling.Ptr(2) }},
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
// device's reductions (on a backend with npu.SampleReducer other than the
// eager CPU, e.g. NPUSERVE_TEST_DEVICE=cpu-async) as when it downloads
// every row whole; a batch of reducible requests downloads no row whole.
func TestReducedSamplingMatchesWholeRows(t *testing.T) {
	m := tiny(t)
	opt := Options{MaxNumSeqs: 12, MaxNumBatchedTokens: 64, BlockSize: 4, NumBlocks: 256}
	red := newEngine(t, m, opt)
	opt.wholeRows = true
	whole := newEngine(t, m, opt)
	_, reducing := reduces(red.be)

	var reducibleKinds, allKinds []int
	for k, c := range samplingMix {
		if c.reducible {
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
				for i := range ps {
					kind := samplingMix[c.kinds[i]].name
					if !reflect.DeepEqual(gotT[i], wantT[i]) {
						t.Errorf("request %d (%s): reduced %v, whole rows %v", i, kind, gotT[i], wantT[i])
					}
					if !reflect.DeepEqual(gotL[i], wantL[i]) {
						t.Errorf("request %d (%s): logprobs differ:\nreduced %+v\nwhole   %+v", i, kind, gotL[i], wantL[i])
					}
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
