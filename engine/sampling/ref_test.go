package sampling

import (
	"math"
	"slices"
)

// refConfig is a resolved sampling configuration for the reference.
type refConfig struct {
	temp, topP, minP float64
	topK             int
}

// refProbs is a direct float64 transcription of vLLM's random-sampling
// pipeline over a processed row (full sorts, dense masks, ascending cumsum
// as in apply_top_k_top_p): temperature, min-p, top-k, top-p, softmax.
// Greedy (temp < 1e-5) returns a one-hot at the lowest argmax.
func refProbs(row []float32, c refConfig) []float64 {
	n := len(row)
	out := make([]float64, n)
	if c.temp < GreedyEpsilon {
		best := 0
		for i, v := range row {
			if v > row[best] {
				best = i
			}
		}
		out[best] = 1
		return out
	}
	x := make([]float64, n)
	for i, v := range row {
		x[i] = float64(v) / c.temp
	}
	softmax := func(x []float64) []float64 {
		m := math.Inf(-1)
		for _, v := range x {
			m = max(m, v)
		}
		p := make([]float64, len(x))
		var z float64
		for i, v := range x {
			p[i] = math.Exp(v - m)
			z += p[i]
		}
		for i := range p {
			p[i] /= z
		}
		return p
	}
	ninf := math.Inf(-1)
	if c.minP > 0 {
		p := softmax(x)
		pmax := slices.Max(p)
		for i := range x {
			if p[i] < c.minP*pmax {
				x[i] = ninf
			}
		}
	}
	if c.topK > 0 && c.topK < n {
		s := slices.Clone(x)
		slices.Sort(s)
		kth := s[n-c.topK]
		for i := range x {
			if x[i] < kth {
				x[i] = ninf
			}
		}
	}
	if c.topP < 1 {
		// Ascending by value; among ties the higher id first, so that the
		// most-likely-first order breaks ties by lower id.
		idx := make([]int, n)
		for i := range idx {
			idx[i] = i
		}
		slices.SortFunc(idx, func(a, b int) int {
			switch {
			case x[a] < x[b]:
				return -1
			case x[a] > x[b]:
				return 1
			}
			return b - a
		})
		sorted := make([]float64, n)
		for j, i := range idx {
			sorted[j] = x[i]
		}
		p := softmax(sorted)
		var cum float64
		for j := range p {
			cum += p[j]
			if cum <= 1-c.topP && j != n-1 {
				x[idx[j]] = ninf
			}
		}
	}
	return softmax(x)
}

// support returns the ids with positive probability.
func support(p []float64) []int32 {
	var ids []int32
	for i, v := range p {
		if v > 0 {
			ids = append(ids, int32(i))
		}
	}
	return ids
}
