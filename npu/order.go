package npu

import (
	"cmp"
	"slices"
)

// CompareTopK orders two entries (value, id) as TopK and SampleReducer rank
// them: the larger value first, NaN after every number, equal values
// (-0 and +0 alike, NaN and NaN) by the lower id.
func CompareTopK(va float32, ia int32, vb float32, ib int32) int {
	switch an, bn := va != va, vb != vb; {
	case an != bn:
		if an {
			return 1
		}
		return -1
	case !an && va != vb:
		if va > vb {
			return -1
		}
		return 1
	}
	return cmp.Compare(ia, ib)
}

// TopKOrder returns the ids of row in CompareTopK's order: the reference
// for TopK's and SampleReduce's candidates.
func TopKOrder(row []float32) []int32 {
	ids := make([]int32, len(row))
	for i := range ids {
		ids[i] = int32(i)
	}
	slices.SortFunc(ids, func(a, b int32) int { return CompareTopK(row[a], a, row[b], b) })
	return ids
}
