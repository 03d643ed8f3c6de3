package sampling

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// randomSampledCase is randomCase (min_tokens, bias, penalties, EOS) made
// a random request: a temperature, a seed, and any mix of top-k (now and
// then at or above the vocab, which turns it off), top-p and min-p.
func randomSampledCase(rng *rand.Rand, i int) reduceCase {
	c := randomCase(rng, i)
	p := &c.p
	p.Temperature = Ptr([]float64{0.05, 0.5, 1, 1.7, 2}[rng.IntN(5)])
	var desc []string
	desc = append(desc, fmt.Sprintf("T=%v", *p.Temperature))
	// Top-k or min-p (or both); top-p on top of either, now and then.
	switch rng.IntN(3) {
	case 0, 1:
		p.TopK = Ptr([]int{1, 2, 3, 5, 8, 20, 50, c.vocab, c.vocab + 1}[rng.IntN(9)])
		desc = append(desc, fmt.Sprintf("top_k=%d", *p.TopK))
		if rng.IntN(2) == 0 {
			p.MinP = Ptr([]float64{0.01, 0.1, 0.5, 1}[rng.IntN(4)])
		}
	default:
		p.MinP = Ptr([]float64{1e-6, 0.01, 0.05, 0.2, 0.9, 1}[rng.IntN(6)])
	}
	if p.MinP != nil {
		desc = append(desc, fmt.Sprintf("min_p=%v", *p.MinP))
	}
	if rng.IntN(2) == 0 {
		p.TopP = Ptr([]float64{0.1, 0.5, 0.9, 0.999}[rng.IntN(4)])
		desc = append(desc, fmt.Sprintf("top_p=%v", *p.TopP))
	}
	if err := p.Validate(); err != nil {
		panic(err)
	}
	c.name += " " + strings.Join(desc, " ")
	return c
}

// smoothRow is a row a model could give: normal logits (scale 1 to 8)
// rounded to a grid now and then (bf16-like ties), with the odd -Inf.
func smoothRow(rng *rand.Rand, v int) []float32 {
	row := make([]float32, v)
	scale := []float64{1, 3, 8}[rng.IntN(3)]
	grid := rng.IntN(2) == 0
	for i := range row {
		x := rng.NormFloat64() * scale
		if grid {
			x = math.Round(x*8) / 8
		}
		row[i] = float32(x)
		if rng.IntN(50) == 0 {
			row[i] = float32(math.Inf(-1))
		}
	}
	return row
}

// randomResult counts what a random corpus run saw.
type randomResult struct {
	steps, decided, hidden, notReducible, mismatches int
	tokens, bad, masked, otherErrs                   int
	firstMismatch                                    string
}

// runRandomCorpus samples n random requests (randomSampledCase) for
// several steps on twin Samplers with equal seeds: one with Sample on the
// whole row, one with SampleReduced on hostReduce's reduction of the same
// row to size(k, V) candidates (k is Reducible's). A reduction that does
// not decide the row must be ErrNotReducible, leave the request as it was
// (the twin then samples the row whole, and must still agree); one that
// decides it must give Sample's token or error, and the same history.
func runRandomCorpus(t *testing.T, seed uint64, n int, vocab func(c reduceCase) int, row func(v int, touched []int32) []float32, size func(k, v int) int) randomResult {
	return runMixedCorpus(t, seed, n, randomSampledCase, vocab, row, size, 0)
}

// runMixedCorpus is runRandomCorpus over the requests gen makes; with a
// positive members cap the reduced twin samples with SampleRounds, asking
// hostAsk on the row (bins answered with at most members of their
// members).
func runMixedCorpus(t *testing.T, seed uint64, n int, gen func(*rand.Rand, int) reduceCase, vocab func(c reduceCase) int, row func(v int, touched []int32) []float32, size func(k, v int) int, members int) randomResult {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 11))
	var res randomResult
	for i := range n {
		c := gen(rng, i)
		c.vocab = vocab(c)
		full, red := mustSampler(t, c.p, c.prompt), mustSampler(t, c.p, c.prompt)
		for step := range 6 {
			k, touched, ok := red.Reducible(c.vocab, members > 0)
			if !ok {
				// Not reducible by its parameters: keep the twins in step.
				x := row(c.vocab, touched)
				tf, ef := full.Sample(x)
				tr, er := red.Sample(x)
				if !sameOutcome(tr, er, tf, ef) {
					t.Fatalf("%s: twins disagree on a whole row", c.name)
				}
				continue
			}
			x := row(c.vocab, touched)
			r := hostReduce(x, min(size(k, c.vocab), c.vocab), touched)
			res.steps++
			var tr Token
			var er error
			if members > 0 {
				tr, er = red.SampleRounds(r, hostAsk(x, members))
			} else {
				tr, er = red.SampleReduced(r)
			}
			if errors.Is(er, ErrNotReducible) {
				res.notReducible++
				tr, er = red.Sample(x) // the engine's fallback
			} else {
				res.decided++
				if len(r.IDs) < c.vocab {
					res.hidden++
				}
			}
			tf, ef := full.Sample(x)
			if !sameOutcome(tr, er, tf, ef) || !slices.Equal(red.Output(), full.Output()) {
				res.mismatches++
				if res.firstMismatch == "" {
					res.firstMismatch = fmt.Sprintf("%s step %d: V %d touched %v k %d held %d: reduced (%+v, %v), full (%+v, %v)", c.name, step, c.vocab, touched, k, len(r.IDs), tr, er, tf, ef)
				}
				break
			}
			switch {
			case ef == nil:
				res.tokens++
			case errors.Is(ef, ErrBadLogits):
				res.bad++
			case errors.Is(ef, ErrAllMasked):
				res.masked++
			default:
				res.otherErrs++
			}
		}
	}
	return res
}

// The vocabularies of the random tests' cases: the case's own (small), or
// model-like 300, 1000 or 3000 by seed (large).
func small(c reduceCase) int { return c.vocab }

func large(c reduceCase) int { return []int{300, 1000, 3000}[int(*c.p.Seed%3)] }

// TestSampleReducedRandomMatchesSample: for random requests mixing
// temperature, top-k, top-p and min-p with every logits processor, on
// rows with ties, -0, NaN, +-Inf and +-MaxFloat32 (randomRow) and on
// model-like rows (smoothRow, vocabularies up to 3000), SampleReduced of
// a reduction gives Sample's token and error and history for every seed,
// or says ErrNotReducible without moving the request; with Reducible's k
// the reduction decides nearly every row, and a shorter prefix of the
// candidates (any size) is never decided wrongly.
func TestSampleReducedRandomMatchesSample(t *testing.T) {
	cases := []struct {
		name  string
		seed  uint64
		n     int
		vocab func(c reduceCase) int
		row   func(rng *rand.Rand) func(v int, touched []int32) []float32
		size  func(rng *rand.Rand) func(k, v int) int
		// minDecided is the least fraction of reducible steps decided.
		minDecided float64
	}{
		{"edge rows, Reducible's k", 1, 2000, small,
			func(rng *rand.Rand) func(int, []int32) []float32 {
				return func(v int, touched []int32) []float32 { return randomRow(rng, v, touched) }
			},
			func(*rand.Rand) func(k, v int) int { return func(k, _ int) int { return k } }, 0.8},
		{"edge rows, any prefix", 2, 3000, small,
			func(rng *rand.Rand) func(int, []int32) []float32 {
				return func(v int, touched []int32) []float32 { return randomRow(rng, v, touched) }
			},
			func(rng *rand.Rand) func(k, v int) int { return func(_, v int) int { return rng.IntN(v + 1) } }, 0},
		{"model-like rows, Reducible's k", 3, 600, large,
			func(rng *rand.Rand) func(int, []int32) []float32 {
				return func(v int, _ []int32) []float32 { return smoothRow(rng, v) }
			},
			func(*rand.Rand) func(k, v int) int { return func(k, _ int) int { return k } }, 0.8},
		{"model-like rows, short reductions", 4, 600, large,
			func(rng *rand.Rand) func(int, []int32) []float32 {
				return func(v int, _ []int32) []float32 { return smoothRow(rng, v) }
			},
			func(rng *rand.Rand) func(k, v int) int { return func(k, _ int) int { return 1 + rng.IntN(min(k, 80)) } }, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(c.seed, 3))
			res := runRandomCorpus(t, c.seed, c.n, c.vocab, c.row(rng), c.size(rng))
			t.Logf("%+v", res)
			if res.mismatches > 0 {
				t.Fatalf("%d mismatches in %d steps; first: %s", res.mismatches, res.steps, res.firstMismatch)
			}
			if res.steps == 0 || float64(res.decided) < c.minDecided*float64(res.steps) {
				t.Fatalf("only %d of %d reducible steps decided from the reduction", res.decided, res.steps)
			}
			if res.hidden < 50 || res.tokens < 100 {
				t.Errorf("the corpus proves little: %d steps decided with hidden entries, %d tokens", res.hidden, res.tokens)
			}
		})
	}
}

// hostAsk answers SampleRounds' queries on a host row (AnswerRow, at
// most members members of a bin).
func hostAsk(row []float32, members int) Asker {
	return func(qs []Query) ([]Answer, error) {
		out := make([]Answer, len(qs))
		for j, q := range qs {
			if q.Kind != QueryHist && q.Kind != QueryBin {
				return nil, fmt.Errorf("query kind %d", q.Kind)
			}
			out[j] = AnswerRow(row, q, members)
		}
		return out, nil
	}
}

// roundsCase is a request of any kind SampleRounds takes: randomCase's
// processors, greedy or random (randomSampledCase's mixes, plain
// temperature, top-p alone, top-k above MaxReducedTopK), and logprobs now
// and then (every logprob among them).
func roundsCase(rng *rand.Rand, i int) reduceCase {
	var c reduceCase
	switch rng.IntN(4) {
	case 0:
		c = randomCase(rng, i)
	case 1:
		c = randomSampledCase(rng, i)
	default:
		c = randomCase(rng, i)
		p := &c.p
		p.Temperature = Ptr([]float64{0.05, 0.5, 1, 1.7, 2}[rng.IntN(5)])
		c.name += fmt.Sprintf(" T=%v", *p.Temperature)
		switch rng.IntN(3) {
		case 0:
			p.TopP = Ptr([]float64{0.1, 0.5, 0.9, 0.999}[rng.IntN(4)])
			c.name += fmt.Sprintf(" top_p=%v", *p.TopP)
		case 1:
			p.TopK = Ptr(MaxReducedTopK + 1)
			c.name += " top_k>max"
		}
	}
	if rng.IntN(2) == 0 {
		c.p.Logprobs = Ptr([]int{0, 1, 3, 5, 20, -1}[rng.IntN(6)])
		c.name += fmt.Sprintf(" logprobs=%d", *c.p.Logprobs)
	}
	if err := c.p.Validate(); err != nil {
		panic(err)
	}
	return c
}

// TestSampleRoundsMatchesSample: SampleRounds, asking a device for
// histograms and bin members, gives Sample's token, logprobs, error and
// history for every kind of request (plain temperature and top-p, which
// the candidates alone never decide, logprobs) on edge rows and
// model-like rows, or says ErrNotReducible without moving the request
// (bins past the members a device returns, every logprob); with
// MaxBinMembers nearly every step is decided.
func TestSampleRoundsMatchesSample(t *testing.T) {
	cases := []struct {
		name    string
		seed    uint64
		n       int
		vocab   func(c reduceCase) int
		row     func(rng *rand.Rand) func(v int, touched []int32) []float32
		members int
		// minDecided is the least fraction of reducible steps decided.
		minDecided float64
	}{
		{"edge rows", 5, 2000, small,
			func(rng *rand.Rand) func(int, []int32) []float32 {
				return func(v int, touched []int32) []float32 { return randomRow(rng, v, touched) }
			}, MaxBinMembers, 0.8},
		{"model-like rows", 6, 600, large,
			func(rng *rand.Rand) func(int, []int32) []float32 {
				return func(v int, _ []int32) []float32 { return smoothRow(rng, v) }
			}, MaxBinMembers, 0.9},
		{"model-like rows, bins capped at 3 members", 7, 600, large,
			func(rng *rand.Rand) func(int, []int32) []float32 {
				return func(v int, _ []int32) []float32 { return smoothRow(rng, v) }
			}, 3, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(c.seed, 3))
			res := runMixedCorpus(t, c.seed, c.n, roundsCase, c.vocab, c.row(rng), func(k, _ int) int { return k }, c.members)
			t.Logf("%+v", res)
			if res.mismatches > 0 {
				t.Fatalf("%d mismatches in %d steps; first: %s", res.mismatches, res.steps, res.firstMismatch)
			}
			if res.steps == 0 || float64(res.decided) < c.minDecided*float64(res.steps) {
				t.Fatalf("only %d of %d reducible steps decided from the reduction", res.decided, res.steps)
			}
			if res.hidden < 50 || res.tokens < 100 {
				t.Errorf("the corpus proves little: %d steps decided with hidden entries, %d tokens", res.hidden, res.tokens)
			}
		})
	}
}
