package core

import (
	"errors"
	"fmt"
	"reflect"

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
// logits [R, V] (device memory; row i is e.sampled[i]'s). Rows that
// sampling.Sampler.Reducible accepts (greedy, top-k and min-p sampling,
// and on a backend with npu.SampleHistogrammer also plain temperature,
// top-p and logprobs, whose processors touch few ids) are decided on the
// device's reduction: the top candidates, the raw values of the touched
// ids and the row's NaN/+Inf counts cross to the host, then, in rounds,
// the histograms and bin members the row asks for
// (sampling.SampleRoundsBatch, exact); every other row is downloaded
// whole, and so is a reduced row that turns out short (ErrNotReducible:
// ties, min-p survivors or bin members past what was held), in a last
// round. The downloads are the sync points. A failed download is the step's
// error; a bad row fails only its request (errs). e.wholeRows counts the
// rows downloaded whole.
func (e *Engine) sample(logits *npu.Tensor) (toks []sampling.Token, errs []error, err error) {
	if e.opt.crossCheck {
		return e.sampleChecked(logits)
	}
	return e.sampleRows(logits)
}

// sampleChecked is sampleRows checked against Sample on whole rows: the
// same logits, copies of the samplers taken before; every row whose token,
// logprobs or error differ is recorded in e.crossMismatches.
func (e *Engine) sampleChecked(logits *npu.Tensor) ([]sampling.Token, []error, error) {
	if sh, ok := e.model.(model.ShardedLogits); ok {
		if _, sharded := sh.VocabSharded(); sharded {
			return e.sampleRows(logits) // the TP tests check the reduction
		}
	}
	rows, err := model.DownloadRows(e.be, logits)
	if err != nil {
		return nil, nil, err
	}
	twins := make([]*sampling.Sampler, len(e.samplers))
	for i, s := range e.samplers {
		twins[i] = s.Clone()
	}
	toks, errs, err := e.sampleRows(logits)
	if err != nil {
		return nil, nil, err
	}
	wt, we := sampling.SampleBatch(rows, twins)
	for i := range toks {
		e.crossChecked++
		same := (errs[i] == nil) == (we[i] == nil) && (errs[i] == nil || errs[i].Error() == we[i].Error())
		if same && errs[i] == nil {
			same = reflect.DeepEqual(toks[i], wt[i])
		}
		if !same {
			e.crossMismatches = append(e.crossMismatches, fmt.Sprintf("row %d: reduced %+v %v, whole %+v %v", i, toks[i], errs[i], wt[i], we[i]))
		}
	}
	return toks, errs, nil
}

// sampleRows is sample without the cross-check.
func (e *Engine) sampleRows(logits *npu.Tensor) (toks []sampling.Token, errs []error, err error) {
	e.wholeRows = 0
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
	if !ok || e.opt.wholeRows {
		rows, err := model.DownloadRows(be, logits)
		if err != nil {
			return nil, nil, err
		}
		e.countWhole(R)
		toks, errs = sampling.SampleBatch(rows, e.samplers)
		return toks, errs, nil
	}
	V := logits.Dim(1)
	_, asks := be.(npu.SampleHistogrammer)
	type rowPlan struct {
		touched []int32
		ok      bool
	}
	plans := make([]rowPlan, R)
	kmax := 0
	var gidx, full []int32
	for i, s := range e.samplers {
		k, touched, ok := s.Reducible(V, asks)
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
	// gatherRows enqueues the copy of logits' rows idx into a new tensor.
	gatherRows := func(idx []int32) (*npu.Tensor, error) {
		fi, err := upload(idx)
		if err != nil {
			return nil, err
		}
		rows, err := alloc(npu.F32, len(idx), V)
		if err != nil {
			return nil, err
		}
		be.Gather(rows, logits, fi)
		return rows, nil
	}
	toks, errs = make([]sampling.Token, R), make([]error, R)
	// sampleWhole downloads the gathered rows idx and samples them.
	sampleWhole := func(rows *npu.Tensor, idx []int32) error {
		host, err := model.DownloadRows(be, rows)
		if err != nil {
			return err
		}
		e.countWhole(len(idx))
		ss := make([]*sampling.Sampler, len(idx))
		for j, i := range idx {
			ss[j] = e.samplers[i]
		}
		ft, fe := sampling.SampleBatch(host, ss)
		for j, i := range idx {
			toks[i], errs[i] = ft[j], fe[j]
		}
		return nil
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
		if fullRows, err = gatherRows(full); err != nil {
			return nil, nil, err
		}
	}
	if fullRows != nil {
		if err := sampleWhole(fullRows, full); err != nil {
			return nil, nil, err
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
	var rt []sampling.Token
	var re []error
	if asks {
		rt, re, err = sampling.SampleRoundsBatch(reds, rs, func(qs [][]sampling.Query) ([][]sampling.Answer, error) {
			return answerQueries(at, qs, askDevice(be, logits))
		})
		if err != nil {
			return nil, nil, err
		}
	} else {
		rt, re = sampling.SampleReducedBatch(reds, rs)
	}
	var short []int32
	for j, i := range at {
		toks[i], errs[i] = rt[j], re[j]
		if errors.Is(re[j], sampling.ErrNotReducible) {
			short = append(short, int32(i))
		}
	}
	if len(short) > 0 {
		// Nothing of these requests moved: their whole rows give the
		// tokens the reduction could not decide.
		rows, err := gatherRows(short)
		if err != nil {
			return nil, nil, err
		}
		if err := sampleWhole(rows, short); err != nil {
			return nil, nil, err
		}
	}
	return toks, errs, nil
}

// answerQueries answers one round of sampling.SampleRoundsBatch's
// queries (qs[j] for the row at[j] of logits): ask flattens them, then
// splits ask's answers back per row.
func answerQueries(at []int, qs [][]sampling.Query, ask func(rows []int, flat []sampling.Query) ([]sampling.Answer, error)) ([][]sampling.Answer, error) {
	var rows []int
	var flat []sampling.Query
	for j, list := range qs {
		for _, q := range list {
			rows, flat = append(rows, at[j]), append(flat, q)
		}
	}
	got, err := ask(rows, flat)
	if err != nil {
		return nil, err
	}
	if len(got) != len(flat) {
		return nil, fmt.Errorf("core: %d answers to %d sampling queries", len(got), len(flat))
	}
	ans := make([][]sampling.Answer, len(qs))
	for j, list := range qs {
		if list != nil {
			ans[j], got = got[:len(list):len(list)], got[len(list):]
		}
	}
	return ans, nil
}

// askDevice answers sampling queries on this engine's logits with the
// backend's histogram ops (model.EnqueueQueries), the downloads being the
// round's sync point.
func askDevice(be npu.Backend, logits *npu.Tensor) func(rows []int, qs []sampling.Query) ([]sampling.Answer, error) {
	return func(rows []int, qs []sampling.Query) ([]sampling.Answer, error) {
		p, err := model.EnqueueQueries(be, logits, rows, qs)
		if err != nil {
			return nil, err
		}
		defer p.Free(be)
		return p.Answers(be, 0)
	}
}

// countWhole counts n rows downloaded whole in this step.
func (e *Engine) countWhole(n int) {
	e.wholeRows += n
	e.counters.wholeRows += int64(n)
}

// sampleSharded samples from a vocabulary-parallel model's sharded logits
// (model.ShardedLogits): when every row is reducible, from the ranks'
// merged reductions (only those cross between ranks), then the rows whose
// reduction turned out short from whole rows gathered for them;
// otherwise every row from whole rows gathered for the step.
func (e *Engine) sampleSharded(sh model.ShardedLogits, shard *npu.Tensor, V int) ([]sampling.Token, []error, error) {
	R := len(e.samplers)
	kmax := 0
	touched := make([][]int32, R)
	_, asks := e.be.(npu.SampleHistogrammer)
	// gatherAll gathers every row whole, counting n of them as used.
	gatherAll := func(n int) ([][]float32, error) {
		full, err := sh.GatherLogits(shard)
		if err != nil {
			return nil, err
		}
		defer e.be.Free(full)
		rows, err := model.DownloadRows(e.be, full)
		if err != nil {
			return nil, err
		}
		e.countWhole(n)
		return rows, nil
	}
	for i, s := range e.samplers {
		k, t, ok := s.Reducible(V, asks)
		if !ok {
			rows, err := gatherAll(R)
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
	var toks []sampling.Token
	var errs []error
	if asks {
		at := make([]int, R)
		for i := range at {
			at[i] = i
		}
		toks, errs, err = sampling.SampleRoundsBatch(rs, e.samplers, func(qs [][]sampling.Query) ([][]sampling.Answer, error) {
			return answerQueries(at, qs, func(rows []int, flat []sampling.Query) ([]sampling.Answer, error) {
				return sh.QueryLogits(shard, rows, flat)
			})
		})
		if err != nil {
			return nil, nil, err
		}
	} else {
		toks, errs = sampling.SampleReducedBatch(rs, e.samplers)
	}
	var short []int32
	for i, err := range errs {
		if errors.Is(err, sampling.ErrNotReducible) {
			short = append(short, int32(i))
		}
	}
	if len(short) > 0 {
		rows, err := gatherAll(len(short))
		if err != nil {
			return nil, nil, err
		}
		for _, i := range short {
			toks[i], errs[i] = e.samplers[i].Sample(rows[i])
		}
	}
	return toks, errs, nil
}
