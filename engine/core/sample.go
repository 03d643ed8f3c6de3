package core

import (
	"github.com/npuserve/npuserve/engine/model"
	"github.com/npuserve/npuserve/engine/sampling"
	"github.com/npuserve/npuserve/npu"
)

// reduces reports whether the engine reduces logits on the device before
// sampling: when the backend implements npu.SampleReducer and is not the
// eager CPU backend, whose logits are host memory already (reducing
// there costs more than the copy it saves; cpu-async takes this path, so
// the tests cover it).
func reduces(be npu.Backend) (npu.SampleReducer, bool) {
	r, ok := be.(npu.SampleReducer)
	return r, ok && be.Name() != "cpu"
}

// sample picks the next token of every sampled request from the step's
// logits [R, V] (device memory; row i is e.sampled[i]'s). Greedy rows
// whose processors touch few ids are decided on the device's reduction:
// the top candidates, the raw values of the touched ids and the row's
// NaN/+Inf counts cross to the host (sampling.Sampler.SampleReduced, exact);
// every other row is downloaded whole. The downloads are the step's sync
// point. A failed download is the step's error; a bad row fails only its
// request (errs).
func (e *Engine) sample(logits *npu.Tensor) (toks []sampling.Token, errs []error, err error) {
	R := len(e.samplers)
	if R == 0 {
		return nil, nil, nil
	}
	be := e.be
	if sh, ok := e.model.(model.ShardedLogits); ok {
		if V, sharded := sh.VocabSharded(); sharded {
			return e.sampleSharded(sh, logits, V)
		}
	}
	red, ok := reduces(be)
	if !ok {
		rows, err := model.DownloadRows(be, logits)
		if err != nil {
			return nil, nil, err
		}
		toks, errs = sampling.SampleBatch(rows, e.samplers)
		return toks, errs, nil
	}
	V := logits.Dim(1)
	type rowPlan struct {
		touched []int32
		ok      bool
	}
	plans := make([]rowPlan, R)
	kmax := 0
	var gidx, full []int32
	for i, s := range e.samplers {
		k, touched, ok := s.Reducible(V)
		plans[i] = rowPlan{touched, ok}
		if !ok {
			full = append(full, int32(i))
			continue
		}
		kmax = max(kmax, k)
		for _, id := range touched {
			gidx = append(gidx, int32(i*V)+id)
		}
	}
	var bufs []*npu.Tensor
	defer func() {
		for _, t := range bufs {
			be.Free(t)
		}
	}()
	alloc := func(dt npu.DType, shape ...int) (*npu.Tensor, error) {
		t, err := be.Alloc(dt, shape...)
		if err == nil {
			bufs = append(bufs, t)
		}
		return t, err
	}
	upload := func(v []int32) (*npu.Tensor, error) {
		t, err := alloc(npu.I32, len(v))
		if err != nil {
			return nil, err
		}
		return t, be.Upload(t, npu.EncodeInt32s(v))
	}
	// Enqueue everything, then download (one wait).
	var vals, ids, stats, gathered, fullRows *npu.Tensor
	if kmax > 0 {
		if vals, err = alloc(npu.F32, R, kmax); err != nil {
			return nil, nil, err
		}
		if ids, err = alloc(npu.I32, R, kmax); err != nil {
			return nil, nil, err
		}
		if stats, err = alloc(npu.I32, R, 2); err != nil {
			return nil, nil, err
		}
		red.SampleReduce(vals, ids, stats, logits, kmax)
		if len(gidx) > 0 {
			gi, err := upload(gidx)
			if err != nil {
				return nil, nil, err
			}
			if gathered, err = alloc(npu.F32, len(gidx), 1); err != nil {
				return nil, nil, err
			}
			be.Gather(gathered, logits.Reshape(R*V, 1), gi)
		}
	}
	if len(full) > 0 {
		fi, err := upload(full)
		if err != nil {
			return nil, nil, err
		}
		if fullRows, err = alloc(npu.F32, len(full), V); err != nil {
			return nil, nil, err
		}
		be.Gather(fullRows, logits, fi)
	}
	toks, errs = make([]sampling.Token, R), make([]error, R)
	if fullRows != nil {
		rows, err := model.DownloadRows(be, fullRows)
		if err != nil {
			return nil, nil, err
		}
		ss := make([]*sampling.Sampler, len(full))
		for j, i := range full {
			ss[j] = e.samplers[i]
		}
		ft, fe := sampling.SampleBatch(rows, ss)
		for j, i := range full {
			toks[i], errs[i] = ft[j], fe[j]
		}
	}
	if kmax == 0 {
		return toks, errs, nil
	}
	hv, err := npu.DownloadF32(be, vals)
	if err != nil {
		return nil, nil, err
	}
	hi, err := npu.DownloadI32(be, ids)
	if err != nil {
		return nil, nil, err
	}
	hs, err := npu.DownloadI32(be, stats)
	if err != nil {
		return nil, nil, err
	}
	var tv []float32
	if gathered != nil {
		if tv, err = npu.DownloadF32(be, gathered); err != nil {
			return nil, nil, err
		}
	}
	var reds []sampling.Reduced
	var rs []*sampling.Sampler
	var at []int
	off := 0
	for i, p := range plans {
		if !p.ok {
			continue
		}
		reds = append(reds, sampling.Reduced{
			Vocab: V, IDs: hi[i*kmax : (i+1)*kmax], Vals: hv[i*kmax : (i+1)*kmax],
			Touched: p.touched, TouchedVals: tv[off : off+len(p.touched)],
			NaN: int(hs[2*i]), PosInf: int(hs[2*i+1]),
		})
		off += len(p.touched)
		rs, at = append(rs, e.samplers[i]), append(at, i)
	}
	rt, re := sampling.SampleReducedBatch(reds, rs)
	for j, i := range at {
		toks[i], errs[i] = rt[j], re[j]
	}
	return toks, errs, nil
}

// sampleSharded samples from a vocabulary-parallel model's sharded logits
// (model.ShardedLogits): when every row is reducible, from the ranks'
// merged reductions (only those cross between ranks); otherwise from
// whole rows gathered for the step.
func (e *Engine) sampleSharded(sh model.ShardedLogits, shard *npu.Tensor, V int) ([]sampling.Token, []error, error) {
	R := len(e.samplers)
	kmax := 0
	touched := make([][]int32, R)
	for i, s := range e.samplers {
		k, t, ok := s.Reducible(V)
		if !ok {
			full, err := sh.GatherLogits(shard)
			if err != nil {
				return nil, nil, err
			}
			defer e.be.Free(full)
			rows, err := model.DownloadRows(e.be, full)
			if err != nil {
				return nil, nil, err
			}
			toks, errs := sampling.SampleBatch(rows, e.samplers)
			return toks, errs, nil
		}
		kmax, touched[i] = max(kmax, k), t
	}
	reds, err := sh.ReduceLogits(shard, kmax, touched)
	if err != nil {
		return nil, nil, err
	}
	rs := make([]sampling.Reduced, R)
	for i, r := range reds {
		rs[i] = sampling.Reduced{Vocab: V, IDs: r.IDs, Vals: r.Vals, Touched: touched[i], TouchedVals: r.TouchedVals, NaN: r.NaN, PosInf: r.PosInf}
	}
	toks, errs := sampling.SampleReducedBatch(rs, e.samplers)
	return toks, errs, nil
}
