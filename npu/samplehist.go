package npu

import "math"

// Sampling histograms: the device half of random sampling and logprobs
// without the vocabulary row (engine/sampling's rounds). A logit v of a
// row whose maximum is m, at inverse temperature invT, lies at
// d = (m - v) * invT >= 0 from the most likely token; its weight
// exp(-d) is split into a histogram bin b (SampleBinsPerUnit bins per unit
// of d, SampleHistBins in all; d >= SampleHistRange weighs nothing) and a
// fixed-point fraction q of the bin's upper weight exp(-b/SampleBinsPerUnit)
// (SampleBin). Bin sums of q are integers, so a device adds them in any
// order, in parallel, and gets the host's sums exactly; the host turns them
// into weights with a table of its own.
const (
	// SampleBinsPerUnit is the number of histogram bins per unit of d.
	SampleBinsPerUnit = 32
	// SampleHistRange bounds d: exp(-104) is below the smallest float32
	// denormal, so float32 softmax gives such tokens probability 0 too.
	SampleHistRange = 104
	// SampleHistBins is the number of histogram bins.
	SampleHistBins = SampleBinsPerUnit * SampleHistRange
	// SampleQBits is q's fixed-point precision: q = trunc(p * 2^34) for
	// the bin fraction p in (exp(-1/32), 1], so a bin's sum over a 2^18
	// vocabulary stays below 2^53 (exact as a float64, too).
	SampleQBits = 34
)

// SampleBin returns the histogram bin b and fixed-point fraction q of logit
// v in a row with maximum m at inverse temperature invT, or b = -1 when
// d = (m - v) * invT is not in [0, SampleHistRange): v = -Inf or too
// unlikely to weigh anything, v above m (a raw value the sampler's
// processing lowered below the processed maximum), NaN. The token's weight is
// exp(-b/SampleBinsPerUnit) * q * 2^-SampleQBits: the fraction is a
// degree-5 Taylor polynomial of exp(-r) for the remainder r in [0, 1/32)
// (truncation error below 1.3e-12 relative), truncated to SampleQBits bits
// (6e-11 relative): far below float32's 6e-8, which vLLM's softmax has.
//
// This is the contract every backend's SampleHist and SampleBinMembers
// computes bit for bit: only IEEE float64 subtraction, multiplication and
// addition, each rounded on its own (no fused multiply-add: the explicit
// conversions stop Go from fusing, a CUDA kernel is compiled without
// contraction), and truncations.
func SampleBin(v float32, m float32, invT float64) (b int, q uint64) {
	d := float64(float64(m)-float64(v)) * invT
	if !(d >= 0 && d < SampleHistRange) {
		return -1, 0
	}
	x := d * SampleBinsPerUnit // exact: a power of two
	b = int(x)
	r := (x - float64(b)) * (1.0 / SampleBinsPerUnit) // exact
	p := float64(r*(-1.0/120)) + 1.0/24
	p = float64(r*p) - 1.0/6
	p = float64(r*p) + 1.0/2
	p = float64(r*p) - 1
	p = float64(r*p) + 1
	return b, uint64(p * (1 << SampleQBits)) // the product is exact
}

// SampleHistParams packs one query's row maximum and inverse temperature
// into the I64 pair SampleHist and SampleBinMembers read (float64 bit
// patterns: npu has no F64 tensors).
func SampleHistParams(m float32, invT float64) [2]int64 {
	return [2]int64{int64(math.Float64bits(float64(m))), int64(math.Float64bits(invT))}
}

// SampleHistogrammer is implemented by backends that compute sampling
// histograms and bin members on the device (see SampleBin), so that random
// sampling without top-k (plain temperature, top-p) and logprobs need a few
// kilobytes per row instead of the vocabulary row. Like SampleReducer it is
// asked for with a type assertion; without it those rows are downloaded
// whole, with the same result.
//
// Each query j reads row rows[j] of logits [R, V] (F32) with the
// parameters params[j] = SampleHistParams(m, invT) (I64 [Q, 2]), so one
// call serves several queries on one row (its raw and its processed
// histogram) and skips rows that ask nothing.
type SampleHistogrammer interface {
	// SampleHist writes hist I64 [Q, SampleHistBins]: hist[j][b] is the
	// sum of SampleBin's q over the entries of row rows[j] in bin b.
	// Entries outside every bin (b = -1) and NaN add nothing.
	SampleHist(hist, logits, rows, params *Tensor)
	// SampleBinMembers writes, for query j, the entries of row rows[j] in
	// bin bins[j] (I32 [Q]) in ascending id order: their ids (ids I32
	// [Q, C]) and values (vals F32 [Q, C]), the first C of them; and the
	// counts I32 [Q, 2]: counts[j][0] the bin's members (all of them, even
	// past C), counts[j][1] the row's entries in lower bins (every entry
	// with b in [0, bins[j])). A bin outside [0, SampleHistBins) has no
	// members and counts nothing. Exact: values are compared and copied.
	SampleBinMembers(vals, ids, counts, logits, rows, params, bins *Tensor)
}
