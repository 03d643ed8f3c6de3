package worker

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/npuserve/npuserve/engine/sampling"
	"github.com/npuserve/npuserve/npu"
)

// hostShardOf is one rank's reduction of row's columns [lo, hi), as
// reduceShard computes it on the device (ids local to the shard).
func hostShardOf(row []float32, lo, hi, k int, touched []int32) hostShard {
	h := hostShard{lo: lo, stats: make([]int32, 2), kt: min(k, hi-lo)}
	for _, id := range npu.TopKOrder(row[lo:hi])[:h.kt] {
		h.ids, h.vals = append(h.ids, id), append(h.vals, row[lo+int(id)])
	}
	for _, v := range row[lo:hi] {
		if v != v {
			h.stats[0]++
		} else if math.IsInf(float64(v), 1) {
			h.stats[1]++
		}
	}
	for _, id := range touched {
		if int(id) >= lo && int(id) < hi {
			h.touched = append(h.touched, row[id])
		}
	}
	return h
}

// TestMergeShardsIsTheWholeRowsReduction: the leader's merge of the
// ranks' reductions is the whole row's (the first k of npu.TopK's order,
// ties across shards to the lower id, NaN last; the counts; the touched
// values), for k from 1 to past a shard's width, on rows full of ties;
// and a top-k or min-p request sampled from the merge gets Sample's token
// on the whole row (or ErrNotReducible, never another token).
func TestMergeShardsIsTheWholeRowsReduction(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 9))
	ninf := float32(math.Inf(-1))
	decided := 0
	for it := range 400 {
		tp := []int{2, 4}[it%2]
		V := tp * (1 + rng.IntN(40))
		k := []int{1, 3, V / tp, V/tp + 1, V}[rng.IntN(5)]
		row := make([]float32, V)
		for i := range row {
			switch rng.IntN(12) {
			case 0:
				row[i] = ninf
			case 1:
				row[i] = float32(math.Copysign(0, -1))
			case 2:
				row[i] = float32(rng.NormFloat64())
			default:
				row[i] = float32(rng.IntN(5))
			}
		}
		if rng.IntN(10) == 0 {
			row[rng.IntN(V)] = float32(math.NaN())
		}
		var touched []int32
		for id := range V {
			if rng.IntN(8) == 0 {
				touched = append(touched, int32(id))
			}
		}
		host := make([]hostShard, tp)
		for r := range tp {
			host[r] = hostShardOf(row, V/tp*r, V/tp*(r+1), k, touched)
		}
		got := mergeShards(host, 1, k, V, tp, [][]int32{touched})[0]

		wantIDs := npu.TopKOrder(row)[:min(k, V)] // the merge holds at most the row
		wantVals := make([]float32, len(wantIDs))
		for j, id := range wantIDs {
			wantVals[j] = row[id]
		}
		sameVals := len(got.Vals) == len(wantVals)
		for j := range min(len(wantVals), len(got.Vals)) {
			sameVals = sameVals && math.Float32bits(got.Vals[j]) == math.Float32bits(wantVals[j])
		}
		if !slices.Equal(got.IDs, wantIDs) || !sameVals {
			t.Fatalf("V %d tp %d k %d: merged %v %v, whole row %v %v", V, tp, k, got.IDs, got.Vals, wantIDs, wantVals)
		}
		nan := 0
		for _, v := range row {
			if v != v {
				nan++
			}
		}
		if got.NaN != nan || got.PosInf != 0 || len(got.TouchedVals) != len(touched) {
			t.Fatalf("counts %d/%d (want %d/0), %d touched values for %d ids", got.NaN, got.PosInf, nan, len(got.TouchedVals), len(touched))
		}
		for j, id := range touched {
			if math.Float32bits(got.TouchedVals[j]) != math.Float32bits(row[id]) {
				t.Fatalf("touched id %d: %v, row %v", id, got.TouchedVals[j], row[id])
			}
		}

		// Sampling from the merge is sampling from the whole row.
		p := sampling.DefaultParams()
		p.Temperature, p.Seed = sampling.Ptr(1.0), sampling.Ptr(uint64(it))
		if it%3 == 0 {
			p.MinP = sampling.Ptr(0.3)
		} else {
			p.TopK = sampling.Ptr(1 + rng.IntN(4))
		}
		a, errA := sampling.NewSampler(p, nil)
		b, errB := sampling.NewSampler(p, nil)
		if errA != nil || errB != nil {
			t.Fatal(errA, errB)
		}
		red := sampling.Reduced{Vocab: V, IDs: got.IDs, Vals: got.Vals, NaN: got.NaN, PosInf: got.PosInf, Touched: []int32{}, TouchedVals: []float32{}}
		ta, ea := a.SampleReduced(red)
		if errors.Is(ea, sampling.ErrNotReducible) {
			continue
		}
		tb, eb := b.Sample(row)
		if ta.ID != tb.ID || (ea == nil) != (eb == nil) || (ea != nil && ea.Error() != eb.Error()) {
			t.Fatalf("V %d tp %d k %d: from the merge %+v %v, from the row %+v %v", V, tp, k, ta, ea, tb, eb)
		}
		decided++
	}
	if decided < 100 {
		t.Fatalf("only %d rows decided from the merge", decided)
	}
}
