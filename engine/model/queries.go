package model

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/npuserve/npuserve/engine/sampling"
	"github.com/npuserve/npuserve/npu"
)

// QueryParts are one round of sampling.Query answered on a device
// (npu.SampleHistogrammer) for rows of a logits tensor: the histograms of
// the QueryHist queries and the bin members and counts of the QueryBin
// ones, in the order the queries came. They stay on the device until
// Answers (the round's sync point), so a TP rank can send them as they
// are (Tensors) and its leader receive them into AllocQueries' parts.
type QueryParts struct {
	kinds         []sampling.QueryKind
	out, in       []*npu.Tensor // outputs (Tensors' order), inputs
	hist          *npu.Tensor   // I64 [histogram queries, npu.SampleHistBins]
	vals, ids     *npu.Tensor   // F32, I32 [bin queries, sampling.MaxBinMembers]
	counts        *npu.Tensor   // I32 [bin queries, 2]
	numHist, nBin int
}

// AllocQueries allocates the outputs of a round of qs (no inputs, no ops):
// the buffers a TP leader receives a rank's answers into.
func AllocQueries(be npu.Backend, qs []sampling.Query) (p *QueryParts, err error) {
	p = &QueryParts{}
	for _, q := range qs {
		switch q.Kind {
		case sampling.QueryHist:
			p.numHist++
		case sampling.QueryBin:
			p.nBin++
		default:
			return nil, fmt.Errorf("model: sampling query of kind %d", q.Kind)
		}
		p.kinds = append(p.kinds, q.Kind)
	}
	defer func() {
		if err != nil {
			p.Free(be)
		}
	}()
	alloc := func(dt npu.DType, shape ...int) (*npu.Tensor, error) {
		t, err := be.Alloc(dt, shape...)
		if err == nil {
			p.out = append(p.out, t)
		}
		return t, err
	}
	if p.numHist > 0 {
		if p.hist, err = alloc(npu.I64, p.numHist, npu.SampleHistBins); err != nil {
			return nil, err
		}
	}
	if p.nBin > 0 {
		C := sampling.MaxBinMembers
		if p.counts, err = alloc(npu.I32, p.nBin, 2); err != nil {
			return nil, err
		}
		if p.vals, err = alloc(npu.F32, p.nBin, C); err != nil {
			return nil, err
		}
		if p.ids, err = alloc(npu.I32, p.nBin, C); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// EnqueueQueries enqueues the ops answering qs, query i on row rows[i] of
// logits [R, V] (F32), on be, which must implement
// npu.SampleHistogrammer: one SampleHist call for every histogram, one
// SampleBinMembers call for every bin. Nothing waits.
func EnqueueQueries(be npu.Backend, logits *npu.Tensor, rows []int, qs []sampling.Query) (p *QueryParts, err error) {
	hg, ok := be.(npu.SampleHistogrammer)
	if !ok {
		return nil, fmt.Errorf("model: backend %s has no sampling histograms", be.Name())
	}
	if len(rows) != len(qs) {
		return nil, fmt.Errorf("model: %d rows for %d sampling queries", len(rows), len(qs))
	}
	if p, err = AllocQueries(be, qs); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			p.Free(be)
		}
	}()
	var hRows, bRows, bins []int32
	var hParams, bParams []byte
	param := func(dst []byte, q sampling.Query) []byte {
		for _, w := range npu.SampleHistParams(q.M, q.InvT) {
			dst = binary.LittleEndian.AppendUint64(dst, uint64(w))
		}
		return dst
	}
	for i, q := range qs {
		if rows[i] < 0 || rows[i] >= logits.Dim(0) {
			return nil, fmt.Errorf("model: sampling query %d on row %d of %d", i, rows[i], logits.Dim(0))
		}
		if q.Kind == sampling.QueryHist {
			hRows, hParams = append(hRows, int32(rows[i])), param(hParams, q)
		} else {
			bRows, bParams, bins = append(bRows, int32(rows[i])), param(bParams, q), append(bins, int32(q.Bin))
		}
	}
	put := func(dt npu.DType, data []byte, shape ...int) (*npu.Tensor, error) {
		t, err := be.Alloc(dt, shape...)
		if err != nil {
			return nil, err
		}
		p.in = append(p.in, t)
		return t, be.Upload(t, data)
	}
	if n := p.numHist; n > 0 {
		rt, err := put(npu.I32, npu.EncodeInt32s(hRows), n)
		if err != nil {
			return nil, err
		}
		pt, err := put(npu.I64, hParams, n, 2)
		if err != nil {
			return nil, err
		}
		hg.SampleHist(p.hist, logits, rt, pt)
	}
	if n := p.nBin; n > 0 {
		rt, err := put(npu.I32, npu.EncodeInt32s(bRows), n)
		if err != nil {
			return nil, err
		}
		pt, err := put(npu.I64, bParams, n, 2)
		if err != nil {
			return nil, err
		}
		bt, err := put(npu.I32, npu.EncodeInt32s(bins), n)
		if err != nil {
			return nil, err
		}
		hg.SampleBinMembers(p.vals, p.ids, p.counts, logits, rt, pt, bt)
	}
	return p, nil
}

// Tensors lists the outputs in the order they travel between ranks.
func (p *QueryParts) Tensors() []*npu.Tensor { return p.out }

// Free frees the parts' device memory (after the ops that use it, in
// stream order).
func (p *QueryParts) Free(be npu.Backend) {
	for _, t := range append(p.out, p.in...) {
		be.Free(t)
	}
	p.out, p.in = nil, nil
}

// Answers downloads the answers (the round's sync point): the histograms,
// the counts, and of each bin only the members it holds, their ids moved
// by offset (a TP rank's first column).
func (p *QueryParts) Answers(be npu.Backend, offset int) ([]sampling.Answer, error) {
	ans := make([]sampling.Answer, len(p.kinds))
	var hist []byte
	var counts []int32
	var err error
	if p.hist != nil {
		hist = make([]byte, p.hist.Bytes())
		if err := be.Download(hist, p.hist); err != nil {
			return nil, err
		}
	}
	if p.counts != nil {
		if counts, err = npu.DownloadI32(be, p.counts); err != nil {
			return nil, err
		}
	}
	// The bins' members: one download of the rows up to the last bin
	// holding any, instead of two per bin (each a round trip).
	C := sampling.MaxBinMembers
	var vals []float32
	var ids []int32
	if last := lastHolding(counts); last >= 0 {
		n := (last + 1) * C
		if vals, err = npu.DownloadF32(be, p.vals.Reshape(p.nBin*C, 1).Rows(0, n)); err != nil {
			return nil, err
		}
		if ids, err = npu.DownloadI32(be, p.ids.Reshape(p.nBin*C, 1).Rows(0, n)); err != nil {
			return nil, err
		}
	}
	h, b := 0, 0
	for i, k := range p.kinds {
		a := &ans[i]
		if k == sampling.QueryHist {
			a.Hist = make([]int64, npu.SampleHistBins)
			for j := range a.Hist {
				a.Hist[j] = int64(binary.LittleEndian.Uint64(hist[8*(h*npu.SampleHistBins+j):]))
			}
			h++
			continue
		}
		a.Count, a.Below = int(counts[2*b]), int(counts[2*b+1])
		a.IDs, a.Vals = []int32{}, []float32{}
		if held := min(a.Count, C); held > 0 { // b <= last
			a.Vals = slices.Clone(vals[b*C : b*C+held])
			a.IDs = slices.Clone(ids[b*C : b*C+held])
			for j := range a.IDs {
				a.IDs[j] += int32(offset)
			}
		}
		b++
	}
	return ans, nil
}

// lastHolding is the last bin query whose counts (I32 pairs) show members,
// -1 for none.
func lastHolding(counts []int32) int {
	for b := len(counts)/2 - 1; b >= 0; b-- {
		if counts[2*b] > 0 {
			return b
		}
	}
	return -1
}

// MergeAnswers merges the answers of the ranks of a vocabulary-parallel
// group (parts[t] from rank t, whose columns follow rank t-1's) into the
// whole rows' answers: histograms and counts add up (integers, exact), the
// members follow in rank order, which is id order, the first
// sampling.MaxBinMembers of them kept.
func MergeAnswers(parts [][]sampling.Answer) []sampling.Answer {
	if len(parts) == 0 {
		return nil
	}
	out := make([]sampling.Answer, len(parts[0]))
	for i := range out {
		a := &out[i]
		for _, p := range parts {
			x := p[i]
			if x.Hist != nil {
				if a.Hist == nil {
					a.Hist = make([]int64, len(x.Hist))
				}
				for b, v := range x.Hist {
					a.Hist[b] += v
				}
				continue
			}
			a.Count += x.Count
			a.Below += x.Below
			room := sampling.MaxBinMembers - len(a.IDs)
			n := min(room, len(x.IDs))
			a.IDs, a.Vals = append(a.IDs, x.IDs[:n]...), append(a.Vals, x.Vals[:n]...)
		}
		if a.Hist == nil && a.IDs == nil {
			a.IDs, a.Vals = []int32{}, []float32{}
		}
	}
	return out
}
