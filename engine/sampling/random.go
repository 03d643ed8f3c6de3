package sampling

import (
	"math"
	"slices"

	"github.com/npuserve/npuserve/npu"
)

// Random sampling works in d-space: d = (max - logit) / temperature >= 0,
// and a token's unnormalized probability is w = exp(-d) (the most likely
// token has w = 1). Every stage computes w with the same function (wbin,
// on npu.SampleBin's bin and fixed-point fraction), so the passes agree
// bit for bit, and so does a device (npu.SampleHistogrammer).
//
// Tokens with d >= histRange get w = 0: exp(-104) is below the smallest
// float32 denormal, so vLLM's float32 softmax gives them probability 0 too.
//
// Without top-k, one pass over the vocab accumulates the tokens' fractions
// into a histogram of d (binsPerUnit bins per unit of d) as integers, which
// any order of addition sums alike; bins are ordered most likely first.
//   - Top-p keeps whole every bin before the one where the cumulative mass
//     reaches top_p, and sorts only the tokens of that boundary bin to find
//     the exact cut (the kept set is the most-likely-first prefix whose
//     predecessors hold less than top_p).
//   - The draw picks a bin from the histogram (or a token of the sorted
//     boundary list), then the token inside the bin with one more pass that
//     computes weights only for that bin's tokens.
//
// Both are exact samplers of the processed distribution (up to float64
// rounding); no sort of the vocab and no vocab-sized buffer is needed. The
// passes after the histogram read the row only through a members function
// (a bin's tokens in id order), which a device answers as well as a host
// row (SampleRounds).
const (
	binsPerUnit = npu.SampleBinsPerUnit
	histRange   = npu.SampleHistRange
	histBins    = npu.SampleHistBins
)

// qScale turns npu.SampleBin's fixed-point fraction into a float64.
const qScale = 1.0 / (1 << npu.SampleQBits)

// expTable[b] is exp(-b/binsPerUnit), bin b's largest weight.
var expTable = func() (t [histBins]float64) {
	for b := range t {
		t[b] = math.Exp(-float64(b) / binsPerUnit)
	}
	return t
}()

// weight returns logit v's histogram bin and weight exp(-d) in a row with
// maximum m (a float32 value) at inverse temperature invT: bin -1 and
// weight 0 past histRange.
func weight(v float32, m, invT float64) (int, float64) {
	b, q := npu.SampleBin(v, float32(m), invT)
	if b < 0 {
		return -1, 0
	}
	return b, binWeight(b, q)
}

// binWeight is the weight of q (npu.SampleBin's fraction, or a sum of
// them) in bin b.
func binWeight(b int, q uint64) float64 {
	return expTable[b] * (float64(q) * qScale)
}

// wbin returns the histogram bin and weight of logit v given the row
// maximum m; bin -1 (weight 0) for tokens past histRange or below min-p.
// min-p keeps w >= min_p, i.e. p >= min_p * p_max (vLLM masks p < that).
func (s *Sampler) wbin(v float32, m, invT float64) (int, float64) {
	b, w := weight(v, m, invT)
	if b < 0 || w < s.minP {
		return -1, 0
	}
	return b, w
}

// binOf returns the histogram bin of logit v (as wbin, without the
// weight), -1 past histRange. Min-p is not checked.
func binOf(v float32, m, invT float64) int {
	b, _ := npu.SampleBin(v, float32(m), invT)
	return b
}

// binMembers lists a row's tokens of one histogram bin in id order (for
// the row maximum and temperature of the draw at hand); the candidates it
// returns are the caller's until the next call.
type binMembers func(bin int) ([]cand, error)

// rowMembers is binMembers over a host row, min-p applied.
func (s *Sampler) rowMembers(logits []float32, m, invT float64) binMembers {
	var buf []cand
	return func(bin int) ([]cand, error) {
		buf = buf[:0]
		for i, v := range logits {
			if binOf(v, m, invT) != bin {
				continue
			}
			if b, _ := s.wbin(v, m, invT); b == bin { // min-p
				buf = append(buf, cand{v, int32(i)})
			}
		}
		return buf, nil
	}
}

// sampleRandom applies temperature, min-p, top-k and top-p to the processed
// row and draws one token with one uniform from s.rng.
func (s *Sampler) sampleRandom(logits []float32) (int32, error) {
	invT := 1 / s.temp
	if s.topK > 0 && s.topK < len(logits) {
		c, err := s.topKCands(logits)
		if err != nil {
			return 0, err
		}
		kept, m, z, err := s.topKKept(c, invT)
		if err != nil {
			return 0, err
		}
		return s.draw(nil, m, invT, 0, 0, kept, z)
	}
	mx, err := maxLogit(logits)
	if err != nil {
		return 0, err
	}
	return s.drawHist(logits, float64(mx), invT)
}

// drawHist is the draw without top-k: min-p against the row maximum m,
// top-p over the histogram, one uniform. It returns an id of logits, a
// host row holding every min-p survivor (or only them, in id order, with
// their ids: SampleReduced), which gives the same histogram, sums and
// draw as the whole row, bit for bit.
func (s *Sampler) drawHist(logits []float32, m, invT float64) (int32, error) {
	s.histFrom(logits, m, invT)
	return s.drawFrom(s.rowMembers(logits, m, invT), m, invT)
}

// histFrom accumulates the min-p survivors' fractions into s.hist by bin.
func (s *Sampler) histFrom(logits []float32, m, invT float64) {
	q := s.qsums()
	minP := s.minP
	for _, v := range logits {
		if b, f := npu.SampleBin(v, float32(m), invT); b >= 0 {
			if minP == 0 || binWeight(b, f) >= minP {
				q[b] += f
			}
		}
	}
}

// qsums returns s's cleared integer histogram.
func (s *Sampler) qsums() *[histBins]uint64 {
	if s.qhist == nil {
		s.qhist, s.hist = new([histBins]uint64), new([histBins]float64)
	}
	clear(s.qhist[:])
	return s.qhist
}

// drawFrom draws from the histogram in s.qhist (the processed row's
// survivors) and the members of its bins: top-p when set, one uniform.
func (s *Sampler) drawFrom(members binMembers, m, invT float64) (int32, error) {
	var z float64
	for b, q := range s.qhist {
		s.hist[b] = binWeight(b, q)
		z += s.hist[b]
	}
	if s.topP < 1 {
		full, cum, part, mass, err := s.topPSplit(members, m, invT, s.topP*z)
		if err != nil {
			return 0, err
		}
		return s.draw(members, m, invT, full, cum, part, mass)
	}
	return s.draw(members, m, invT, histBins, z, nil, 0)
}

// topPSplit finds the top-p cut for target = top_p * total mass: bins
// [0, full) are kept whole (mass cum), and part (most likely first, mass
// mass) are the kept tokens of the boundary bin. Normally one bin's
// members; when float rounding leaves the boundary bin short of the
// target, the next bins are added the same way.
func (s *Sampler) topPSplit(members binMembers, m, invT, target float64) (full int, cum float64, part []cand, mass float64, err error) {
	for full < histBins && cum+s.hist[full] < target {
		cum += s.hist[full]
		full++
	}
	part = s.cands[:0]
	for b := full; b < histBins; b++ {
		if s.hist[b] == 0 {
			continue
		}
		start := len(part)
		in, err := members(b)
		if err != nil {
			return 0, 0, nil, 0, err
		}
		part = append(part, in...)
		bin := part[start:]
		slices.SortFunc(bin, byValueDesc)
		for j, c := range bin {
			if cum+mass >= target {
				part = part[:start+j]
				s.cands = part
				return full, cum, part, mass, nil
			}
			_, w := s.wbin(c.v, m, invT)
			mass += w
		}
	}
	s.cands = part
	return full, cum, part, mass, nil
}

// topKCands returns the tokens whose logit is at least the k-th largest
// (vLLM keeps every tie; ties at -Inf, which weigh nothing, are dropped),
// unordered, in s.cands: ErrBadLogits for a NaN or +Inf anywhere in the
// row.
func (s *Sampler) topKCands(logits []float32) ([]cand, error) {
	k := s.topK
	h, ties := s.heap[:0], s.ties[:0]
	for i, v := range logits {
		c := cand{v, int32(i)}
		if len(h) < k {
			if v != v || v > math.MaxFloat32 {
				return nil, ErrBadLogits
			}
			h = append(h, c)
			if len(h) == k {
				heapify(h)
			}
			continue
		}
		root := h[0]
		if v < root.v {
			continue
		}
		if v != v || v > math.MaxFloat32 {
			return nil, ErrBadLogits
		}
		if v == root.v { // a later id ties the k-th value: kept as a tie
			if !math.IsInf(float64(v), -1) { // masked ties weigh nothing
				ties = append(ties, c)
			}
			continue
		}
		h[0] = c
		siftDownFrom(h, 0)
		if h[0].v == root.v {
			if !math.IsInf(float64(root.v), -1) {
				ties = append(ties, root)
			}
		} else {
			ties = ties[:0]
		}
	}
	s.heap, s.ties = h, ties
	c := append(append(s.cands[:0], h...), ties...)
	s.cands = c
	return c, nil
}

// topKKept sorts the top-k candidates c (topKCands) most likely first,
// applies min-p against the row's maximum (c's largest) and top-p over the
// survivors, and returns the survivors most likely first (in c's storage)
// with the row's maximum m and their mass z. Candidates at -Inf never
// survive, so c may lack them (SampleReduced); ErrAllMasked when c holds
// nothing above -Inf.
func (s *Sampler) topKKept(c []cand, invT float64) (kept []cand, m, z float64, err error) {
	slices.SortFunc(c, byValueDesc)
	if len(c) == 0 {
		return nil, 0, 0, ErrAllMasked
	}
	mx := c[0].v
	if math.IsInf(float64(mx), -1) {
		return nil, 0, 0, ErrAllMasked
	}
	m = float64(mx)
	// Min-p, then top-p renormalized over the survivors.
	kept = c[:0]
	for _, x := range c {
		if b, w := s.wbin(x.v, m, invT); b >= 0 {
			kept = append(kept, x)
			z += w
		}
	}
	if s.topP < 1 {
		target := s.topP * z
		var mass float64
		for j, x := range kept {
			if mass >= target {
				kept = kept[:j]
				break
			}
			_, w := s.wbin(x.v, m, invT)
			mass += w
		}
		z = mass
	}
	return kept, m, z, nil
}

// draw picks one token with one uniform from the kept set: every token of
// bins [0, full) (mass cum, from s.hist, their tokens from members)
// followed by part (most likely first, mass mass).
func (s *Sampler) draw(members binMembers, m, invT float64, full int, cum float64, part []cand, mass float64) (int32, error) {
	u := s.rng.Float64() * (cum + mass)
	if len(part) == 0 || u < cum {
		// A bin, then a token inside it.
		bin, before := -1, 0.0
		for b := range full {
			if w := s.hist[b]; w > 0 {
				if before+w > u {
					bin = b
					break
				}
				before += w
			}
		}
		if bin < 0 { // rounding put u past the last bin: take the last one
			for b := full - 1; b >= 0; b-- {
				if s.hist[b] > 0 {
					bin, before = b, cum-s.hist[b]
					break
				}
			}
		}
		u -= before
		in, err := members(bin)
		if err != nil {
			return 0, err
		}
		var acc float64
		last := int32(-1)
		for _, c := range in {
			_, w := s.wbin(c.v, m, invT)
			last = c.id
			if acc += w; acc > u {
				return last, nil
			}
		}
		return last, nil
	}
	u -= cum
	var acc float64
	for _, x := range part {
		_, w := s.wbin(x.v, m, invT)
		if acc += w; acc > u {
			return x.id, nil
		}
	}
	return part[len(part)-1].id, nil
}

// maxLogit returns the row's largest logit, rejecting NaN and +Inf and a
// row that is all -Inf.
func maxLogit(logits []float32) (float32, error) {
	i, err := argmax(logits)
	if err != nil {
		return 0, err
	}
	return logits[i], nil
}

// heapify arranges h as a top-k min-heap (see less).
func heapify(h []cand) {
	for i := len(h)/2 - 1; i >= 0; i-- {
		siftDownFrom(h, i)
	}
}
