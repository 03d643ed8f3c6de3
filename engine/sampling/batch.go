package sampling

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
)

// ErrBatchShape reports a SampleBatch call whose rows and samplers do not
// pair up (different lengths, a nil sampler, or one sampler twice).
var ErrBatchShape = errors.New("sampling: SampleBatch needs one distinct sampler per row")

// SampleBatch samples rows[i] with samplers[i] for every i, spreading the
// rows over up to GOMAXPROCS goroutines. Each sequence uses only its own
// generator and history, so its tokens are the same whatever else is in
// the batch and however the rows are scheduled. errs[i] is rows[i]'s error
// (see Sampler.Sample); a failed row does not affect the others. When the
// shapes do not pair up, every errs entry is ErrBatchShape and nothing is
// sampled.
func SampleBatch(rows [][]float32, samplers []*Sampler) (toks []Token, errs []error) {
	n := max(len(rows), len(samplers))
	toks, errs = make([]Token, n), make([]error, n)
	if !distinct(rows, samplers) {
		for i := range errs {
			errs[i] = ErrBatchShape
		}
		return toks, errs
	}
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for i := range rows {
			toks[i], errs[i] = samplers[i].Sample(rows[i])
		}
		return toks, errs
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				toks[i], errs[i] = samplers[i].Sample(rows[i])
			}
		})
	}
	wg.Wait()
	return toks, errs
}

// distinct reports whether rows and samplers pair up one to one.
func distinct(rows [][]float32, samplers []*Sampler) bool {
	if len(rows) != len(samplers) {
		return false
	}
	seen := make(map[*Sampler]bool, len(samplers))
	for _, s := range samplers {
		if s == nil || seen[s] {
			return false
		}
		seen[s] = true
	}
	return true
}
