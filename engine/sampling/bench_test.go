package sampling

import (
	"math/rand/v2"
	"testing"
)

// benchVocab is GLM-5.3-Flash's vocab row.
const benchVocab = 154880

// benchRow returns a logits row: Gaussian noise (std 2) and, when peaked,
// a few dozen tokens well above it, as a trained model's rows look. The
// flat row is top-p's worst case: the 0.95 nucleus spans most of the vocab.
func benchRow(peaked bool) []float32 {
	r := rand.New(rand.NewPCG(1, 2))
	row := make([]float32, benchVocab)
	for i := range row {
		row[i] = float32(r.NormFloat64() * 2)
	}
	if peaked {
		for j := range 40 {
			row[r.IntN(benchVocab)] = float32(6 + 8*r.Float64() - float64(j)/10)
		}
	}
	return row
}

// BenchmarkSample times one Sample call on a 154880-token row.
func BenchmarkSample(b *testing.B) {
	peaked, flat := benchRow(true), benchRow(false)
	for _, bc := range []struct {
		name string
		row  []float32
		f    func(p *Params)
	}{
		{"greedy", peaked, func(p *Params) { p.Temperature = Ptr(0.0) }},
		{"top_p=0.95", peaked, func(p *Params) { p.TopP = Ptr(0.95) }},
		{"top_k=50", peaked, func(p *Params) { p.TopK = Ptr(50) }},
		{"temperature=0.7", peaked, func(p *Params) { p.Temperature = Ptr(0.7) }},
		{"top_k=50,top_p=0.95,min_p=0.05", peaked, func(p *Params) { p.TopK, p.TopP, p.MinP = Ptr(50), Ptr(0.95), Ptr(0.05) }},
		{"greedy,logprobs=5", peaked, func(p *Params) { p.Temperature = Ptr(0.0); p.Logprobs = Ptr(5) }},
		{"greedy,penalties", peaked, func(p *Params) {
			p.Temperature, p.RepetitionPenalty, p.FrequencyPenalty = Ptr(0.0), Ptr(1.1), 0.2
		}},
		{"flat,top_p=0.95", flat, func(p *Params) { p.TopP = Ptr(0.95) }},
		{"flat,top_k=50", flat, func(p *Params) { p.TopK = Ptr(50) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			p := DefaultParams()
			p.Seed = Ptr(uint64(1))
			bc.f(&p)
			prompt := make([]int32, 4000) // a 4k-token prompt for the repetition penalty
			for i := range prompt {
				prompt[i] = int32(i * 37 % benchVocab)
			}
			s, err := NewSampler(p, prompt)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(benchVocab * 4)
			for b.Loop() {
				if _, err := s.Sample(bc.row); err != nil {
					b.Fatal(err)
				}
				if len(s.out) > 256 { // keep the history (and penalty work) bounded
					s.out, s.outUnique = s.out[:0], s.outUnique[:0]
					clear(s.counts)
				}
			}
		})
	}
}

// BenchmarkSampleRounds times SampleRounds on a 154880-token row whose
// candidates and device answers are ready (host work only: the device's
// part is npu.SampleHistogrammer's), and reports what crossed to the host
// per row (candidates, histograms, bin members) against the 619,520 bytes
// of the whole row, and the device rounds.
func BenchmarkSampleRounds(b *testing.B) {
	peaked, flat := benchRow(true), benchRow(false)
	for _, bc := range []struct {
		name string
		row  []float32
		f    func(p *Params)
	}{
		{"temperature=0.7", peaked, func(p *Params) { p.Temperature = Ptr(0.7) }},
		{"top_p=0.95", peaked, func(p *Params) { p.TopP = Ptr(0.95) }},
		{"greedy,logprobs=5", peaked, func(p *Params) { p.Temperature = Ptr(0.0); p.Logprobs = Ptr(5) }},
		{"top_p=0.9,logprobs=5", peaked, func(p *Params) { p.TopP, p.Logprobs = Ptr(0.9), Ptr(5) }},
		{"flat,temperature=1", flat, func(p *Params) { p.Temperature = Ptr(1.0) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			p := DefaultParams()
			p.Seed = Ptr(uint64(1))
			bc.f(&p)
			s, err := NewSampler(p, nil)
			if err != nil {
				b.Fatal(err)
			}
			k, touched, ok := s.Reducible(benchVocab, true)
			if !ok {
				b.Fatal("not reducible")
			}
			r := hostReduce(bc.row, k, touched)
			// The answers the row asks for, cached by query: the benchmark
			// times the host's part.
			cache := map[Query]Answer{}
			var crossed, rounds, n int
			ask := func(qs []Query) ([]Answer, error) {
				out := make([]Answer, len(qs))
				for i, q := range qs {
					a, hit := cache[q]
					if !hit {
						a = AnswerRow(bc.row, q, MaxBinMembers)
						cache[q] = a
					}
					out[i] = a
					crossed += 8*len(a.Hist) + 8*len(a.IDs) + 8
				}
				rounds++
				return out, nil
			}
			crossed0 := 8*len(r.IDs) + 4*len(r.TouchedVals) + 8
			for b.Loop() {
				if _, err := s.SampleRounds(r, ask); err != nil {
					b.Fatal(err)
				}
				n++
				s.out, s.outUnique = s.out[:0], s.outUnique[:0]
				clear(s.counts)
			}
			b.ReportMetric(float64(crossed0)+float64(crossed)/float64(n), "bytes/row")
			b.ReportMetric(float64(rounds)/float64(n), "rounds/row")
		})
	}
}
