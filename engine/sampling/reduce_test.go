package sampling

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

// hostReduce is a plain host reference of the device reduction for one
// row: a stable sort by npu's TopK order (value descending, ties to the
// lower id, NaN last), the first k entries, the touched ids' raw values
// and the row's NaN and +Inf counts.
func hostReduce(row []float32, k int, touched []int32) Reduced {
	idx := npu.TopKOrder(row)
	r := Reduced{Vocab: len(row), Touched: touched}
	for _, i := range idx[:k] {
		r.IDs, r.Vals = append(r.IDs, i), append(r.Vals, row[i])
	}
	for _, id := range touched {
		r.TouchedVals = append(r.TouchedVals, row[id])
	}
	for _, v := range row {
		if v != v {
			r.NaN++
		} else if math.IsInf(float64(v), 1) {
			r.PosInf++
		}
	}
	return r
}

// sameOutcome reports whether two Sample results agree: both succeed with
// the same Token, or both fail with the same error.
func sameOutcome(ta Token, ea error, tb Token, eb error) bool {
	if ea != nil || eb != nil {
		return ea != nil && eb != nil && ea.Error() == eb.Error() &&
			errors.Is(ea, ErrBadLogits) == errors.Is(eb, ErrBadLogits) &&
			errors.Is(ea, ErrAllMasked) == errors.Is(eb, ErrAllMasked)
	}
	return reflect.DeepEqual(ta, tb)
}

// reduceCase is one request of the random corpus.
type reduceCase struct {
	name   string
	p      Params
	prompt []int32
	vocab  int
}

// randomCase draws a greedy request without logprobs over a small vocab
// (ties are likely), with any mix of min_tokens (stop ids and EOS, now and
// then outside the row), logit bias (up to +-100, so a low id can reach the
// top; now and then outside the row), repetition penalty (<1 and >1, over
// a prompt with ids now and then outside the row), frequency and presence
// penalties.
func randomCase(rng *rand.Rand, i int) reduceCase {
	vocabs := []int{1, 2, 3, 4, 5, 7, 16, 33, 100, 257}
	v := vocabs[rng.IntN(len(vocabs))]
	id := func() int32 {
		if rng.IntN(40) == 0 {
			return int32(v + rng.IntN(3)) // outside the row
		}
		return int32(rng.IntN(v))
	}
	p := greedyParams()
	p.Seed = Ptr(uint64(i))
	var desc []string
	if rng.IntN(2) == 0 {
		p.MinTokens = 1 + rng.IntN(4)
		for range rng.IntN(3) {
			p.StopTokenIDs = append(p.StopTokenIDs, id())
		}
		desc = append(desc, fmt.Sprintf("min_tokens=%d stop=%v", p.MinTokens, p.StopTokenIDs))
	}
	if rng.IntN(2) == 0 {
		p.LogitBias = map[int32]float64{}
		for range 1 + rng.IntN(3) {
			b := []float64{100, -100, 0.5, -0.5, 3, rng.NormFloat64() * 10}[rng.IntN(6)]
			p.LogitBias[id()] = b
		}
		desc = append(desc, fmt.Sprintf("bias=%v", p.LogitBias))
	}
	var prompt []int32
	for range rng.IntN(6) {
		prompt = append(prompt, id())
	}
	if rng.IntN(2) == 0 {
		p.RepetitionPenalty = Ptr([]float64{0.5, 0.8, 1.3, 2}[rng.IntN(4)])
		desc = append(desc, fmt.Sprintf("rep=%v", *p.RepetitionPenalty))
	}
	if rng.IntN(2) == 0 {
		p.FrequencyPenalty = []float64{0.5, -0.5, 2, -2}[rng.IntN(4)]
		desc = append(desc, fmt.Sprintf("freq=%v", p.FrequencyPenalty))
	}
	if rng.IntN(2) == 0 {
		p.PresencePenalty = []float64{0.5, -0.5, 2, 1.5}[rng.IntN(4)]
		desc = append(desc, fmt.Sprintf("pres=%v", p.PresencePenalty))
	}
	if err := p.Validate(); err != nil {
		panic(err)
	}
	eos := int32(-1)
	if rng.IntN(2) == 0 {
		eos = id()
	}
	p.ApplyEOS(eos, nil)
	desc = append(desc, fmt.Sprintf("eos=%d prompt=%v", eos, prompt))
	return reduceCase{fmt.Sprintf("case %d V=%d %s", i, v, strings.Join(desc, " ")), p, prompt, v}
}

// randomRow draws a row for a request whose touched ids are touched: ties
// (small integers), -0, +-MaxFloat32 (the repetition penalty can overflow
// them to +-Inf), -Inf, and sometimes a NaN or +Inf in an untouched or a
// touched position, a row all -Inf (or all -Inf but the touched ids), or a
// touched id lifted to (or tied with) the top so that masking, bias or a
// penalty decides.
func randomRow(rng *rand.Rand, v int, touched []int32) []float32 {
	row := make([]float32, v)
	ninf := float32(math.Inf(-1))
	for i := range row {
		switch rng.IntN(10) {
		case 0:
			row[i] = ninf
		case 1:
			row[i] = float32(rng.NormFloat64() * 5)
		case 2:
			row[i] = float32(math.Copysign(0, -1))
		default:
			row[i] = float32(rng.IntN(7) - 3)
		}
	}
	pick := func() int {
		if len(touched) > 0 && rng.IntN(2) == 0 {
			return int(touched[rng.IntN(len(touched))])
		}
		return rng.IntN(v)
	}
	switch rng.IntN(16) {
	case 0:
		row[pick()] = float32(math.NaN())
	case 1:
		row[pick()] = float32(math.Inf(1))
	case 2:
		for i := range row {
			row[i] = ninf
		}
	case 3:
		for i := range row {
			if _, ok := slices.BinarySearch(touched, int32(i)); !ok {
				row[i] = ninf
			}
		}
	case 4:
		row[pick()] = math.MaxFloat32
	case 5:
		row[pick()] = -math.MaxFloat32
	}
	if len(touched) > 0 && rng.IntN(2) == 0 {
		mx := ninf
		for _, x := range row {
			if x > mx {
				mx = x
			}
		}
		if mx < 1e30 && mx > ninf {
			t := touched[rng.IntN(len(touched))]
			row[t] = mx + float32(rng.IntN(2)) // tie with the top, or above it
		}
	}
	return row
}

// corpusResult counts what a corpus run saw.
type corpusResult struct {
	steps, mismatches, notReducible, declined               int
	touchedWins, untouchedWins, bad, masked, outOfRow, errs int
	firstMismatch                                           string
}

// runCorpus samples n random requests for several steps each twice, on
// twin Samplers: one from the full row with Sample, one with
// SampleReduced from hostReduce's reduction of the same row (after mutate,
// when given), with extra more candidates than Reducible asked for (a
// batch's larger k). Outcomes and histories are compared every step.
func runCorpus(t *testing.T, seed uint64, n, extra int, mutate func(*Reduced)) corpusResult {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	var res corpusResult
	for i := range n {
		c := randomCase(rng, i)
		full, red := mustSampler(t, c.p, c.prompt), mustSampler(t, c.p, c.prompt)
		desync := false
		for step := range 8 {
			k, touched, ok := red.Reducible(c.vocab, false)
			if !ok {
				res.declined++
				break
			}
			row := randomRow(rng, c.vocab, touched)
			r := hostReduce(row, min(k+extra, c.vocab), touched)
			if mutate != nil {
				mutate(&r)
			}
			tr, er := red.SampleReduced(r)
			tf, ef := full.Sample(row)
			res.steps++
			switch {
			case errors.Is(er, ErrNotReducible):
				res.notReducible++
				desync = true // red recorded nothing: drop the case
			case !sameOutcome(tr, er, tf, ef) || !slices.Equal(red.Output(), full.Output()):
				res.mismatches++
				desync = true
				if res.firstMismatch == "" {
					res.firstMismatch = fmt.Sprintf("%s step %d: row %v touched %v k %d: reduced (%+v, %v), full (%+v, %v)", c.name, step, row, touched, k, tr, er, tf, ef)
				}
			case ef == nil:
				if _, hit := slices.BinarySearch(touched, tf.ID); hit {
					res.touchedWins++
				} else {
					res.untouchedWins++
				}
			case errors.Is(ef, ErrBadLogits):
				res.bad++
			case errors.Is(ef, ErrAllMasked):
				res.masked++
			case strings.Contains(ef.Error(), "outside the vocab row"):
				res.outOfRow++
			default:
				res.errs++
			}
			if desync {
				break
			}
		}
	}
	return res
}

// TestSampleReducedMatchesSample: on a few thousand random greedy requests
// and rows (ties, -0, NaN and +Inf in untouched and touched positions,
// +-MaxFloat32 overflowing under the repetition penalty, rows all -Inf,
// min_tokens masking the top candidate, bias lifting a low id to the top,
// penalties demoting the top id, |T| = 0), SampleReduced of the reduced
// row gives Sample's token and error and the same history, with exactly
// the k candidates Reducible asks for and with more.
func TestSampleReducedMatchesSample(t *testing.T) {
	for _, extra := range []int{0, 3} {
		t.Run(fmt.Sprintf("extra%d", extra), func(t *testing.T) {
			res := runCorpus(t, 1, 3000, extra, nil)
			if res.mismatches > 0 || res.notReducible > 0 {
				t.Fatalf("%d mismatches, %d ErrNotReducible in %d steps; first: %s", res.mismatches, res.notReducible, res.steps, res.firstMismatch)
			}
			if res.declined > 0 || res.errs > 0 {
				t.Fatalf("%d requests declined, %d unexpected errors", res.declined, res.errs)
			}
			t.Logf("%+v", res)
			// The corpus must exercise every outcome, or the test proves little.
			for name, n := range map[string]int{"touched id wins": res.touchedWins, "untouched id wins": res.untouchedWins,
				"ErrBadLogits": res.bad, "ErrAllMasked": res.masked, "out-of-row id": res.outOfRow} {
				if n < 20 {
					t.Errorf("only %d steps with outcome %q", n, name)
				}
			}
		})
	}
}

// TestSampleReducedNeedsEveryPiece: the corpus notices a reduction that
// drops a piece. Without the NaN/+Inf counts, SampleReduced returns
// tokens where Sample fails; with one candidate too few, it must say
// ErrNotReducible rather than guess (and never mismatch).
func TestSampleReducedNeedsEveryPiece(t *testing.T) {
	t.Run("no counts", func(t *testing.T) {
		res := runCorpus(t, 2, 2000, 0, func(r *Reduced) { r.NaN, r.PosInf = 0, 0 })
		if res.mismatches == 0 {
			t.Fatalf("dropping the counts went unnoticed: %+v", res)
		}
	})
	t.Run("one candidate short", func(t *testing.T) {
		short, mism := 0, 0
		for seed := range uint64(20) {
			res := runCorpus(t, 100+seed, 200, 0, func(r *Reduced) {
				if len(r.IDs) > len(r.Touched) { // k = |T|+1 (not the whole row)
					r.IDs, r.Vals = r.IDs[:len(r.Touched)], r.Vals[:len(r.Touched)]
				}
			})
			short += res.notReducible
			mism += res.mismatches
		}
		if mism > 0 || short == 0 {
			t.Fatalf("with |T| candidates: %d mismatches (want 0), %d ErrNotReducible (want some)", mism, short)
		}
	})
	t.Run("touched value missing", func(t *testing.T) {
		res := runCorpus(t, 3, 2000, 0, func(r *Reduced) {
			if len(r.Touched) > 0 {
				r.Touched, r.TouchedVals = r.Touched[1:], r.TouchedVals[1:]
			}
		})
		if res.notReducible == 0 {
			t.Fatalf("a missing touched id went unnoticed: %+v", res)
		}
	})
}

// TestSampleReducedHandPicked pins the cases the issue names, each with
// the token or error Sample gives.
func TestSampleReducedHandPicked(t *testing.T) {
	ninf, nan, pinf := float32(math.Inf(-1)), float32(math.NaN()), float32(math.Inf(1))
	cases := []struct {
		name    string
		row     []float32
		prompt  []int32
		history []int32
		set     func(p *Params)
		wantID  int32
		wantErr error
	}{
		{"plain argmax, |T| = 0", []float32{1, 3, 2, 3}, nil, nil, nil, 1, nil},
		{"NaN in an unselected position", []float32{1, 3, nan, 0}, nil, nil, nil, 0, ErrBadLogits},
		{"+Inf", []float32{1, pinf, 2}, nil, nil, nil, 0, ErrBadLogits},
		{"all -Inf", []float32{ninf, ninf, ninf}, nil, nil, nil, 0, ErrAllMasked},
		{"min_tokens masks the top candidate", []float32{1, 5, 4, 2}, nil, nil,
			func(p *Params) { p.MinTokens = 1; p.StopTokenIDs = []int32{1} }, 2, nil},
		{"min_tokens masks everything left", []float32{ninf, 5, ninf}, nil, nil,
			func(p *Params) { p.MinTokens = 1; p.StopTokenIDs = []int32{1} }, 0, ErrAllMasked},
		{"min_tokens over a NaN stop id", []float32{1, nan, 0}, nil, nil,
			func(p *Params) { p.MinTokens = 1; p.StopTokenIDs = []int32{1} }, 0, ErrBadLogits},
		{"bias lifts a low id to the top", []float32{0, 5, 4, -3}, nil, nil,
			func(p *Params) { p.LogitBias = map[int32]float64{3: 9} }, 3, nil},
		{"bias ties the top: lower id wins", []float32{0, 5, 4, -3}, nil, nil,
			func(p *Params) { p.LogitBias = map[int32]float64{3: 8} }, 1, nil},
		{"bias ties the top from below: lower id wins", []float32{-1, 5, 4, 3}, nil, nil,
			func(p *Params) { p.LogitBias = map[int32]float64{0: 6} }, 0, nil},
		{"repetition penalty demotes the top id", []float32{1, 5, 4, 2}, []int32{1}, nil,
			func(p *Params) { p.RepetitionPenalty = Ptr(2.0) }, 2, nil},
		{"repetition penalty overflows to +Inf", []float32{1, math.MaxFloat32, 4}, []int32{1}, nil,
			func(p *Params) { p.RepetitionPenalty = Ptr(0.5) }, 0, ErrBadLogits},
		{"frequency penalty demotes the top id", []float32{1, 5, 4.5, 2}, nil, []int32{1, 1},
			func(p *Params) { p.FrequencyPenalty = 0.5 }, 2, nil},
		{"presence penalty demotes the top id", []float32{1, 5, 4.5, 2}, nil, []int32{1},
			func(p *Params) { p.PresencePenalty = 1 }, 2, nil},
		{"bias id outside the row", []float32{1, 5}, nil, nil,
			func(p *Params) { p.LogitBias = map[int32]float64{7: 1} }, 0,
			errors.New("sampling: token id 7 outside the vocab row of 2 logits")},
		{"-0 ties +0: lower id", []float32{ninf, float32(math.Copysign(0, -1)), 0}, nil, nil, nil, 1, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := greedyParams()
			if c.set != nil {
				c.set(&p)
			}
			full, red := mustSampler(t, p, c.prompt), mustSampler(t, p, c.prompt)
			for _, id := range c.history {
				full.record(id)
				red.record(id)
			}
			k, touched, ok := red.Reducible(len(c.row), false)
			if !ok {
				t.Fatal("not reducible")
			}
			tf, ef := full.Sample(c.row)
			tr, er := red.SampleReduced(hostReduce(c.row, k, touched))
			if !sameOutcome(tr, er, tf, ef) || !slices.Equal(red.Output(), full.Output()) {
				t.Fatalf("reduced (%+v, %v), full (%+v, %v)", tr, er, tf, ef)
			}
			switch {
			case c.wantErr == nil && (ef != nil || tf.ID != c.wantID):
				t.Fatalf("Sample = (%d, %v), want %d", tf.ID, ef, c.wantID)
			case c.wantErr != nil && (ef == nil || ef.Error() != c.wantErr.Error()):
				t.Fatalf("Sample error %v, want %v", ef, c.wantErr)
			}
		})
	}
}

// TestReducible: who reduces, with which k and touched ids.
func TestReducible(t *testing.T) {
	seq := func(n int) []int32 {
		ids := make([]int32, n)
		for i := range ids {
			ids[i] = int32(i)
		}
		return ids
	}
	cases := []struct {
		name    string
		set     func(p *Params)
		prompt  []int32
		history []int32
		vocab   int
		wantOK  bool
		wantK   int
		wantT   []int32
	}{
		{"greedy", nil, []int32{5, 6}, nil, 100, true, 1, []int32{}},
		{"random sampling", func(p *Params) { p.Temperature = Ptr(0.7) }, nil, nil, 100, false, 0, nil},
		{"top-p alone", func(p *Params) { p.Temperature = Ptr(0.7); p.TopP = Ptr(0.9) }, nil, nil, 100, false, 0, nil},
		{"top-k", func(p *Params) { p.Temperature = Ptr(0.7); p.TopK = Ptr(5) }, nil, nil, 100, true, 5 + 32, []int32{}},
		{"top-k, bias, top-p", func(p *Params) {
			p.Temperature = Ptr(1.0)
			p.TopK = Ptr(50)
			p.TopP = Ptr(0.5)
			p.LogitBias = map[int32]float64{7: 1}
		}, nil, nil, 1000, true, 50 + 1 + 32, []int32{7}},
		{"top-k capped by the row", func(p *Params) { p.Temperature = Ptr(0.7); p.TopK = Ptr(90) }, nil, nil, 100, true, 100, []int32{}},
		{"top-k at the bound", func(p *Params) { p.Temperature = Ptr(0.7); p.TopK = Ptr(MaxReducedTopK) }, nil, nil, 5000, true, MaxReducedTopK + 32, []int32{}},
		{"top-k above the bound", func(p *Params) { p.Temperature = Ptr(0.7); p.TopK = Ptr(MaxReducedTopK + 1) }, nil, nil, 5000, false, 0, nil},
		{"top-k off (>= vocab), no min-p", func(p *Params) { p.Temperature = Ptr(0.7); p.TopK = Ptr(100) }, nil, nil, 100, false, 0, nil},
		{"min-p", func(p *Params) { p.Temperature = Ptr(0.7); p.MinP = Ptr(0.1) }, nil, nil, 5000, true, ReducedMinPCandidates, []int32{}},
		{"min-p, small row", func(p *Params) { p.Temperature = Ptr(0.7); p.MinP = Ptr(0.1); p.TopP = Ptr(0.9) }, nil, nil, 100, true, 100, []int32{}},
		{"top-k with logprobs", func(p *Params) { p.Temperature = Ptr(0.7); p.TopK = Ptr(5); p.Logprobs = Ptr(2) }, nil, nil, 100, false, 0, nil},
		{"logprobs", func(p *Params) { p.Logprobs = Ptr(0) }, nil, nil, 100, false, 0, nil},
		{"empty row", nil, nil, nil, 0, false, 0, nil},
		{"min_tokens pending", func(p *Params) { p.MinTokens = 2; p.StopTokenIDs = []int32{9, 3, 200} }, nil, []int32{4}, 100, true, 3, []int32{3, 9}},
		{"min_tokens met", func(p *Params) { p.MinTokens = 1; p.StopTokenIDs = []int32{9, 3} }, nil, []int32{4}, 100, true, 1, []int32{}},
		{"bias", func(p *Params) { p.LogitBias = map[int32]float64{7: 1, 2: -1, -1: 3} }, nil, nil, 100, true, 3, []int32{2, 7}},
		{"repetition penalty: prompt and output", func(p *Params) { p.RepetitionPenalty = Ptr(1.2) }, []int32{5, 1, 5, 150}, []int32{9, 1}, 100, true, 4, []int32{1, 5, 9}},
		{"frequency penalty: output only", func(p *Params) { p.FrequencyPenalty = 1 }, []int32{5}, []int32{9, 1, 9}, 100, true, 3, []int32{1, 9}},
		{"every id touched", func(p *Params) { p.RepetitionPenalty = Ptr(1.2) }, []int32{0, 1, 2}, nil, 3, true, 3, []int32{0, 1, 2}},
		{"prompt at the limit", func(p *Params) { p.RepetitionPenalty = Ptr(1.2) }, seq(MaxReducedTouched), nil, 1000, true, MaxReducedTouched + 1, seq(MaxReducedTouched)},
		{"long prompt, repetition penalty", func(p *Params) { p.RepetitionPenalty = Ptr(1.2) }, seq(MaxReducedTouched + 1), nil, 1000, false, 0, nil},
		{"long prompt, no repetition penalty", nil, seq(5000), nil, 1000, true, 1, []int32{}},
		{"long output, presence penalty", func(p *Params) { p.PresencePenalty = 1 }, nil, seq(MaxReducedTouched + 1), 1000, false, 0, nil},
		{"prompt + bias over the limit", func(p *Params) {
			p.RepetitionPenalty = Ptr(1.2)
			p.LogitBias = map[int32]float64{999: 1}
		}, seq(MaxReducedTouched), nil, 1000, false, 0, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := greedyParams()
			if c.set != nil {
				c.set(&p)
			}
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
			p.ApplyEOS(-1, nil)
			s := mustSampler(t, p, c.prompt)
			for _, id := range c.history {
				s.record(id)
			}
			k, touched, ok := s.Reducible(c.vocab, false)
			if ok != c.wantOK || k != c.wantK || !slices.Equal(touched, c.wantT) {
				t.Fatalf("Reducible(%d, false) = %d, %v, %v; want %d, %v, %v", c.vocab, k, touched, ok, c.wantK, c.wantT, c.wantOK)
			}
		})
	}
}

// TestSampleReducedRejects: requests that do not reduce and malformed rows
// are ErrNotReducible and record nothing.
func TestSampleReducedRejects(t *testing.T) {
	row := []float32{1, 2, 3}
	good := hostReduce(row, 1, []int32{})
	random := DefaultParams()
	random.Temperature = Ptr(1.0)
	lp := greedyParams()
	lp.Logprobs = Ptr(1)
	for _, c := range []struct {
		name string
		p    Params
		r    Reduced
	}{
		{"random sampling", random, good},
		{"logprobs", lp, good},
		{"no candidates", greedyParams(), Reduced{Vocab: 3, Touched: []int32{}}},
		{"lengths differ", greedyParams(), Reduced{Vocab: 3, IDs: []int32{2}, Touched: []int32{}}},
		{"touched not ascending", greedyParams(), Reduced{Vocab: 3, IDs: []int32{2}, Vals: []float32{3}, Touched: []int32{1, 0}, TouchedVals: []float32{2, 1}}},
		{"candidate outside the row", greedyParams(), Reduced{Vocab: 3, IDs: []int32{3}, Vals: []float32{3}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := mustSampler(t, c.p, nil)
			if _, err := s.SampleReduced(c.r); !errors.Is(err, ErrNotReducible) {
				t.Fatalf("SampleReduced = %v, want ErrNotReducible", err)
			}
			if len(s.Output()) != 0 {
				t.Fatalf("recorded %v", s.Output())
			}
		})
	}
	s := mustSampler(t, greedyParams(), nil)
	if _, err := s.SampleReduced(Reduced{}); err != ErrEmptyLogits {
		t.Fatalf("empty row: %v, want ErrEmptyLogits", err)
	}
}

// TestSampleReducedBatch mirrors SampleBatch: per-row results and the
// shape errors.
func TestSampleReducedBatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var rows [][]float32
	var reds []Reduced
	var full, red []*Sampler
	for i := range 9 {
		c := randomCase(rng, i)
		a, b := mustSampler(t, c.p, c.prompt), mustSampler(t, c.p, c.prompt)
		k, touched, ok := b.Reducible(c.vocab, false)
		if !ok {
			t.Fatal("not reducible")
		}
		row := randomRow(rng, c.vocab, touched)
		rows, reds = append(rows, row), append(reds, hostReduce(row, k, touched))
		full, red = append(full, a), append(red, b)
	}
	wt, we := SampleBatch(rows, full)
	gt, ge := SampleReducedBatch(reds, red)
	for i := range rows {
		if !sameOutcome(gt[i], ge[i], wt[i], we[i]) {
			t.Errorf("row %d: reduced (%+v, %v), full (%+v, %v)", i, gt[i], ge[i], wt[i], we[i])
		}
	}
	for name, ss := range map[string][]*Sampler{"short": red[:2], "nil": {red[0], nil, red[2]}, "repeated": {red[0], red[0], red[2]}} {
		_, errs := SampleReducedBatch(reds[:3], ss)
		for i, err := range errs {
			if err != ErrBatchShape {
				t.Errorf("%s: errs[%d] = %v, want ErrBatchShape", name, i, err)
			}
		}
	}
}

// BenchmarkSampleReduced compares the host's work per greedy row: Sample
// over a whole benchVocab-entry row against SampleReduced over its reduction
// (k = |T|+1 candidates) for |T| = 0 and 16 (a biased request).
func BenchmarkSampleReduced(b *testing.B) {
	row := benchRow(false)
	V := len(row)
	for _, nt := range []int{0, 16} {
		p := greedyParams()
		if nt > 0 {
			p.LogitBias = map[int32]float64{}
			for i := range nt {
				p.LogitBias[int32(i*997)] = 1
			}
		}
		s := mustSampler(b, p, nil)
		k, touched, _ := s.Reducible(V, false)
		r := hostReduce(row, k, touched)
		b.Run(fmt.Sprintf("T%d/full", nt), func(b *testing.B) {
			for b.Loop() {
				if _, err := s.Sample(row); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("T%d/reduced", nt), func(b *testing.B) {
			for b.Loop() {
				if _, err := s.SampleReduced(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
