package glm5next

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/model/loader"
	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/npu"
)

// Parallel places one rank's model in a tensor- and expert-parallel
// deployment (design.md "Parallelism"; the sharding matches
// config.BuildPlan's per-rank plan). A nil *Parallel, or one with both
// sizes at most 1, is a single rank.
//
// Tensor parallelism (TPSize ranks of one DP rank, which all run the same
// batch):
//
//   - DSA (MLA) heads: q_b_proj and kv_b_proj column-parallel by head,
//     o_proj row-parallel, then an AllReduce; q_a_proj, kv_a_proj_with_mqa
//     and their norms are replicated, so the cached latent is the same on
//     every TP rank. The indexer is replicated: every TP rank scores and
//     selects the same positions (identical inputs give identical
//     selections, so no collective is needed before top-k; its weights
//     are small next to the heads').
//   - KDA heads: q/k/v projections and conv channels, f_b/g_b projections,
//     dt_bias, A_log and b_proj by head; f_a/g_a and o_norm (per head, shared
//     weights) replicated; o_proj row-parallel, then an AllReduce. Each TP
//     rank caches the conv window and recurrent state of its heads only.
//   - Dense MLPs and shared experts: gate/up column-parallel, down
//     row-parallel, then an AllReduce (one per FFN, shared and routed
//     experts summed first).
//   - Routed experts without expert parallelism: every expert's gate/up
//     column-parallel and down row-parallel (intermediate dimension split).
//   - embed_tokens and lm_head: vocabulary-parallel (vocab/TP rows each)
//     when TP divides the vocabulary: the embedding is a masked lookup plus
//     an AllReduce, the logits an AllGather; replicated otherwise.
//   - Router, mHC and norms are replicated.
//
// Expert parallelism (EPSize ranks: every rank of the deployment, DP×TP):
// the routed experts are split into contiguous ranges, the first E%EP ranks
// holding one more (vLLM's rule). In every MoE layer each rank routes its
// share of the batch's rows (a TP rank takes rows [T·r/TP, T·(r+1)/TP) of
// its DP rank's batch), sends each (row, expert) pair to the expert's owner
// and gets the weighted outputs back with AllToAllV; the shared experts
// stay local (TP-sharded). Every EP rank runs the same four EP collectives
// in every MoE layer of every forward, rows or not (DummyStep), so ranks
// can never reach different collectives: a counts AllToAll (pairs per
// owner-local expert), then AllToAllV of the rows, of their routing
// weights and of the weighted expert outputs back. Host synchronisation:
// under EP each MoE layer downloads its routing (expert ids and weights)
// and the received counts, since they size the AllToAllV buffers; that is
// the one host round trip per MoE layer beside the step's sampled logits.
// Each row's expert outputs are summed in ascending expert order, as the
// single-rank MoE op does, so EP without TP reproduces the single-rank
// logits exactly on the CPU backend.
//
// Quantized (msmodelslim) checkpoints are sliced the same way, each rank
// reading only its part of every tensor (qloader.readQuant):
// column-parallel linears take their rows of the weight and of every
// per-output-channel tensor; row-parallel ones their weight columns (for
// W8A8_MXFP8 whole 32-element blocks and their scale columns: a TP size
// that splits a block is a load error) with the per-output tensors whole,
// static W8A8's folded quant_bias being added on TP rank 0 only so the
// all-reduce counts it once. Activations are quantized per rank on its
// input slice: exactly the single-rank values for static W8A8 (per-tensor
// scale), per-row scales of the slice for W8A8_DYNAMIC (each partial
// product is dequantized before the all-reduce), and unchanged blocks
// for MXFP8.
//
// Collectives inside a forward never depend on the batch beyond what the
// whole TP group shares (every TP rank runs the same batch): TP
// all-reduces of empty tensors are skipped by the whole group together,
// and the EP collectives run whatever the rows. Reductions are the
// communicator's, which gives every rank bit-identical results (the TCP
// transport reduces in rank order), so TP ranks stay identical.
type Parallel struct {
	// TPSize ranks split the heads and intermediate channels; TPRank is
	// this rank's index and TP the TP group's communicator (nil when
	// TPSize <= 1).
	TPSize, TPRank int
	TP             hccl.Comm
	// EPSize > 1 partitions the routed experts over EPSize ranks spanning
	// every DP×TP rank; EPRank is this rank's index (DPRank·TPSize+TPRank in
	// config.BuildPlan's numbering) and EP their communicator.
	EPSize, EPRank int
	EP             hccl.Comm
}

// ErrCollective is wrapped by the error Forward and DummyStep return when
// a collective failed: the ranks' collective sequences can no longer be
// trusted to match, so the caller must stop (core treats a failed step of
// a collective model as fatal).
var ErrCollective = errors.New("glm5next: collective failed")

// parallel is a model's resolved placement.
type parallel struct {
	Parallel
	full     dims // the whole model's sizes (Model.d holds this rank's)
	vocab    bool // embed_tokens and lm_head split by vocabulary rows
	vLo, vHi int  // this rank's vocabulary rows
	sharded  bool // Forward's logits are this rank's columns (ShardLogits)
	// Routed experts: this rank holds [first, first+n); owner[e] is the EP
	// rank of expert e and local[e] its index there; maxLocal is the most
	// experts any EP rank holds.
	first, n int
	owner    []int32
	local    []int32
	maxLocal int
}

// tp reports whether tensor parallelism is on.
func (p *parallel) tp() bool { return p != nil && p.TPSize > 1 }

// ep reports whether expert parallelism is on.
func (p *parallel) ep() bool { return p != nil && p.EPSize > 1 }

// ExpertRange is vLLM's split of e routed experts over ep ranks: rank r
// holds [first, first+n), E/EP each and one more on the first E%EP ranks.
func ExpertRange(e, ep, r int) (first, n int) {
	base, rem := e/ep, e%ep
	n = base
	if r < rem {
		n++
	}
	return r*base + min(r, rem), n
}

// resolve checks p against the model (the TP sizes of the spec table,
// config.ModelConfig.TPSizes) and computes this rank's sizes; nil for a
// single rank.
func (p *Parallel) resolve(c *config.ModelConfig, full dims) (*parallel, error) {
	if p == nil || (p.TPSize <= 1 && p.EPSize <= 1) {
		return nil, nil
	}
	q := &parallel{Parallel: *p, full: full}
	if q.TPSize < 1 {
		q.TPSize, q.TPRank = 1, 0
	}
	if q.EPSize < 1 {
		q.EPSize, q.EPRank = 1, 0
	}
	check := func(name string, comm hccl.Comm, size, rank int) error {
		if rank < 0 || rank >= size {
			return fmt.Errorf("glm5next: %s rank %d outside [0, %d)", name, rank, size)
		}
		if size == 1 {
			return nil
		}
		if comm == nil {
			return fmt.Errorf("glm5next: %s size %d without a communicator", name, size)
		}
		if comm.Size() != size || comm.Rank() != rank {
			return fmt.Errorf("glm5next: %s rank %d of %d, but its communicator is rank %d of %d", name, rank, size, comm.Rank(), comm.Size())
		}
		return nil
	}
	tp := q.TPSize
	for _, d := range c.TPSizes(q.ep()) {
		if d.N%tp != 0 {
			return nil, fmt.Errorf("glm5next: tensor parallel size %d does not divide %s (%d)", tp, d.What, d.N)
		}
	}
	if q.ep() && q.EPSize > full.E {
		return nil, fmt.Errorf("glm5next: %d expert-parallel ranks exceed the %d routed experts", q.EPSize, full.E)
	}
	if err := check("TP", q.TP, q.TPSize, q.TPRank); err != nil {
		return nil, err
	}
	if err := check("EP", q.EP, q.EPSize, q.EPRank); err != nil {
		return nil, err
	}
	q.vocab = tp > 1 && full.V%tp == 0
	q.vLo, q.vHi = 0, full.V
	if q.vocab {
		q.vLo, q.vHi = full.V/tp*q.TPRank, full.V/tp*(q.TPRank+1)
	}
	q.first, q.n = 0, full.E
	if q.ep() {
		q.first, q.n = ExpertRange(full.E, q.EPSize, q.EPRank)
		q.owner, q.local = make([]int32, full.E), make([]int32, full.E)
		for r := range q.EPSize {
			f, n := ExpertRange(full.E, q.EPSize, r)
			q.maxLocal = max(q.maxLocal, n)
			for i := range n {
				q.owner[f+i], q.local[f+i] = int32(r), int32(i)
			}
		}
	}
	return q, nil
}

// localDims is this rank's share of the model's sizes.
func (p *parallel) localDims() dims {
	d := p.full
	tp := p.TPSize
	d.HA /= tp
	d.H /= tp
	d.I /= tp
	d.Ish /= tp
	if p.ep() {
		d.E = p.n
	} else {
		d.Im /= tp
	}
	return d
}

// setParallel places m (built by newModel) according to par.
func (m *Model) setParallel(par *Parallel) error {
	p, err := par.resolve(m.cfg, m.d)
	if err != nil || p == nil {
		return err
	}
	m.par = p
	m.d = p.localDims()
	return nil
}

// Parallel returns the model's placement (the zero Parallel for a single
// rank).
func (m *Model) Parallel() Parallel {
	if m.par == nil {
		return Parallel{TPSize: 1, EPSize: 1}
	}
	return m.par.Parallel
}

// Collective reports whether Forward and DummyStep run collectives with
// other ranks (tensor or expert parallelism).
func (m *Model) Collective() bool { return m.par.tp() || m.par.ep() }

// shard sets the slice or skip of every spec for this rank (specs keep
// their full checkpoint shapes), by the spec table's rules: under expert
// parallelism a routed expert's tensors whole on its owner (a stacked
// tensor's rows of this rank's experts), else the TP share
// (config.Shard). The MTP layer's block shards like a trunk layer's (its
// attention heads and shared expert by TP, its routed experts by EP); its
// enorm, hnorm, eh_proj and shared_head norm are replicated.
func (p *parallel) shard(sp []spec, _ *config.ModelConfig) []spec {
	out := make([]spec, 0, len(sp))
	for _, s := range sp {
		s.slice, s.skip = p.sliceOf(s.row)
		out = append(out, s)
	}
	return out
}

// sliceOf is how this rank loads the tensor t: a slice, skip (another EP
// rank's expert), or whole (nil, false).
func (p *parallel) sliceOf(t config.TensorSpec) (*loader.Slice, bool) {
	if t.Routed && p.ep() {
		if t.Stacked {
			return loader.Rows(p.first, p.first+p.n), false
		}
		return nil, t.Expert < p.first || t.Expert >= p.first+p.n
	}
	rs := t.TP.Ranges(p.TPSize, p.TPRank)
	if rs == nil {
		return nil, false
	}
	sl := &loader.Slice{Dim: t.TP.Dim}
	for _, r := range rs {
		sl.Ranges = append(sl.Ranges, loader.Range{Lo: r[0], Hi: r[1]})
	}
	return sl, false
}

// expertOf parses "mlp.experts.<e>.<part>".
func expertOf(sub string) (e int, part string, ok bool) {
	rest, ok := strings.CutPrefix(sub, "mlp.experts.")
	if !ok {
		return 0, "", false
	}
	idx, part, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, "", false
	}
	e, err := strconv.Atoi(idx)
	if err != nil {
		return 0, "", false
	}
	return e, part, true
}

// renameExperts renumbers the per-expert tensors of an expert-parallel
// rank (global ids first..first+n-1) to local ids 0..n-1, the layout the
// assembler stacks.
func (p *parallel) renameExperts(t map[string]*npu.Tensor) { renameExperts(p, t) }

// renameExperts is parallel.renameExperts for any map by canonical name
// (the quantized loader's host weights too).
func renameExperts[T any](p *parallel, t map[string]T) {
	if !p.ep() || p.first == 0 {
		return
	}
	renamed := make(map[string]T)
	for name, x := range t {
		rest, ok := strings.CutPrefix(name, "model.layers.")
		if !ok {
			continue
		}
		idx, sub, _ := strings.Cut(rest, ".")
		if e, part, ok := expertOf(sub); ok {
			delete(t, name)
			renamed[fmt.Sprintf("model.layers.%s.mlp.experts.%d.%s", idx, e-p.first, part)] = x
		}
	}
	for name, x := range renamed {
		t[name] = x
	}
}

// DummyStep runs one forward with no rows: on an expert-parallel rank
// whose DP rank has nothing scheduled it runs every MoE layer's EP
// collectives (sending and receiving no rows of its own but computing the
// experts for the other ranks' rows), so that every rank reaches every
// collective of the step. On a single rank it does nothing.
func (m *Model) DummyStep(c *Cache) error {
	logits, err := m.Forward(c, &Batch{Layout: npu.BatchLayout{QueryStart: []int{0}, BlockSize: c.BlockSize}, LogitRows: []int{}})
	if err == nil {
		m.be.Free(logits)
	}
	return err
}

// collective runs fn, a collective over this rank's tensors, on the
// backend's stream (after the ops enqueued before it: npu.RunOnStream)
// and aborts the forward pass with an error wrapping ErrCollective if it
// fails.
func (m *Model) collective(op string, fn func() error) {
	if err := npu.RunOnStream(m.be, fn); err != nil {
		fail(fmt.Errorf("%w: %s: %w", ErrCollective, op, err))
	}
}

// downloadI32 and downloadF32 copy routing results to the host (explicit
// sync points), aborting the forward pass on failure.
func (m *Model) downloadI32(t *npu.Tensor) []int32 {
	v, err := npu.DownloadI32(m.be, t)
	if err != nil {
		fail(err)
	}
	return v
}

func (m *Model) downloadF32(t *npu.Tensor) []float32 {
	v, err := npu.DownloadF32(m.be, t)
	if err != nil {
		fail(err)
	}
	return v
}

// tpAllReduce sums t over the TP group. Every TP rank runs the same batch,
// so all skip an empty t together.
func (m *Model) tpAllReduce(t *npu.Tensor) {
	if !m.par.tp() || t.Numel() == 0 {
		return
	}
	m.collective("tensor-parallel all-reduce", func() error { return m.par.TP.AllReduce(t, hccl.Sum) })
}

// embedStreams looks tokens up straight into the n mHC streams x [T, n, D]
// (row t·n+i holds token t). A vocabulary-parallel rank looks up the
// tokens of its rows (zeros elsewhere) and the TP group sums the rows.
func (m *Model) embedStreams(x *npu.Tensor, tokens []int32) {
	d, be := m.d, m.be
	T := len(tokens)
	if m.par == nil || !m.par.vocab {
		ids := make([]int32, T*d.n)
		for t, id := range tokens {
			for i := range d.n {
				ids[t*d.n+i] = id
			}
		}
		be.Embedding(x.Reshape(T*d.n, d.D), m.embed, m.ws.upload("ids", ids))
		return
	}
	p := m.par
	e := m.ws.get("embed.rows", npu.F32, T, d.D)
	be.Fill(e, 0)
	var local, rows []int32
	for t, id := range tokens {
		if int(id) >= p.vLo && int(id) < p.vHi {
			local = append(local, id-int32(p.vLo))
			rows = append(rows, int32(t))
		}
	}
	if len(local) > 0 {
		tmp := m.ws.get("embed.local", npu.F32, len(local), d.D)
		be.Embedding(tmp, m.embed, m.ws.upload("embed.ids", local))
		be.Scatter(e, tmp, m.ws.upload("embed.at", rows))
	}
	m.tpAllReduce(e)
	expand := make([]int32, T*d.n)
	for i := range expand {
		expand[i] = int32(i / d.n)
	}
	be.Gather(x.Reshape(T*d.n, d.D), e, m.ws.upload("embed.expand", expand))
}

// lmLogits computes the logits of the final hidden states hn [R, D]:
// [R, V], or this rank's columns [R, vHi-vLo] when the logits stay
// sharded (ShardLogits). A vocabulary-parallel rank computes its vocab/TP
// columns and, unless they stay sharded, the TP group gathers them.
func (m *Model) lmLogits(logits, hn *npu.Tensor) {
	if m.par == nil || !m.par.vocab {
		m.linear(logits, hn, m.lmHead)
		return
	}
	if m.par.sharded {
		m.linear(logits, hn, m.lmHead)
		return
	}
	m.wholeLogits(logits, hn)
}

// wholeLogits is lmLogits into whole rows [R, V] whether or not Forward's
// logits stay sharded: the MTP layer's logits, whose greedy drafts every
// TP rank needs (the same ids on every rank, from the same gathered
// values).
func (m *Model) wholeLogits(logits, hn *npu.Tensor) {
	if m.par == nil || !m.par.vocab {
		m.linear(logits, hn, m.lmHead)
		return
	}
	p := m.par
	part := m.ws.get("logits.part", npu.F32, hn.Dim(0), p.vHi-p.vLo)
	m.linear(part, hn, m.lmHead)
	m.gatherShards(logits, part)
}

// gatherShards all-gathers every TP rank's columns part [R, vl] of the
// logits into logits [R, V].
func (m *Model) gatherShards(logits, part *npu.Tensor) {
	p, be := m.par, m.be
	R, tp, vl := part.Dim(0), p.TPSize, p.vHi-p.vLo
	all := m.ws.get("logits.all", npu.F32, tp, R, vl)
	m.collective("logits all-gather", func() error { return p.TP.AllGather(all, part) })
	// Block t of all holds columns [t·vl, (t+1)·vl) of every row: row
	// r·tp+t of logits viewed as [R·tp, vl] is row t·R+r of all.
	idx := make([]int32, R*tp)
	for r := range R {
		for t := range tp {
			idx[r*tp+t] = int32(t*R + r)
		}
	}
	be.Gather(logits.Reshape(R*tp, vl), all.Reshape(tp*R, vl), m.ws.upload("logits.order", idx))
}

// ShardLogits makes a vocabulary-parallel model's Forward return this
// rank's columns of the logits, [R, hi-lo] (VocabShard), instead of
// all-gathering whole rows to every TP rank: the TP leader then samples
// from a reduction of every rank's columns (engine/worker), so only the
// reduced values cross between ranks, to the leader only. It has no
// effect on a model that is not vocabulary-parallel. Every rank of the
// TP group must make the same choice.
func (m *Model) ShardLogits(on bool) {
	if m.par != nil && m.par.vocab {
		m.par.sharded = on
	}
}

// VocabShard returns the vocabulary columns [lo, hi) this rank's logits
// hold and whether Forward returns only those (ShardLogits).
func (m *Model) VocabShard() (lo, hi int, sharded bool) {
	if m.par == nil || !m.par.vocab {
		return 0, m.d.V, false
	}
	return m.par.vLo, m.par.vHi, m.par.sharded
}

// GatherShards all-gathers the sharded logits shard [R, hi-lo] of the
// last Forward into whole rows [R, V] (a new tensor the caller frees);
// every TP rank calls it (a collective), for the steps whose sampling
// needs whole rows.
func (m *Model) GatherShards(shard *npu.Tensor) (logits *npu.Tensor, err error) {
	defer func() {
		if e := stepFailure(recover()); e != nil {
			if logits != nil {
				m.be.Free(logits)
			}
			logits, err = nil, e
		}
	}()
	if m.par == nil || !m.par.sharded {
		return nil, errors.New("glm5next: GatherShards on a model whose logits are not sharded")
	}
	if logits, err = m.be.Alloc(npu.F32, shard.Dim(0), m.par.full.V); err != nil {
		return nil, err
	}
	if shard.Dim(0) > 0 {
		m.gatherShards(logits, shard)
	}
	return logits, nil
}

// logitWidth is the width of Forward's logits: V, or this rank's columns
// when they stay sharded.
func (m *Model) logitWidth() int {
	if m.par != nil && m.par.sharded {
		return m.par.vHi - m.par.vLo
	}
	return m.d.V
}

// idleLayer is a decoder layer of a forward without rows: an
// expert-parallel MoE layer still serves the other ranks' rows.
func (m *Model) idleLayer(ly *layer) {
	if m.par.ep() && ly.moe != nil {
		m.epExperts(nil, ly.moe, nil, nil)
	}
}

// idleMTP is an MTP forward of a rank with no rows for the MTP layer's
// MoE: under expert parallelism it still serves the other ranks' rows.
// Every MTP forward of an expert-parallel rank reaches the MoE's EP
// collectives exactly once, through moeEP or idleMTP.
func (m *Model) idleMTP() {
	if m.par.ep() {
		m.epExperts(nil, m.mtp.block.moe, nil, nil)
	}
}

// moeEP is an expert-parallel MoE layer on the normed input h [T, D]: the
// shared experts (this rank's TP share) plus the routed experts of this TP
// rank's rows, dispatched to their owners. The TP all-reduce that follows
// adds the other TP ranks' rows and shared-expert shares.
func (m *Model) moeEP(out, h *npu.Tensor, w *moeWeights, T int) {
	p, be, k := m.par, m.be, m.d.TopK
	if w.shared != nil {
		m.mlp(out, h, w.shared, T)
	} else {
		be.Fill(out, 0)
	}
	lo, hi := T*p.TPRank/p.TPSize, T*(p.TPRank+1)/p.TPSize
	n := hi - lo
	var ids []int32
	var wts []float32
	var x *npu.Tensor
	if n > 0 {
		x = h.Rows(lo, hi)
		wt := m.ws.get("moe.weights", npu.F32, n, k)
		it := m.ws.get("moe.ids", npu.I32, n, k)
		be.Router(wt, it, x, w.gate, w.bias, m.router)
		// The routing decides the AllToAllV sizes: a host sync.
		ids, wts = m.downloadI32(it), m.downloadF32(wt)
	}
	acc := m.epExperts(x, w, ids, wts)
	if n > 0 {
		o := out.Rows(lo, hi)
		be.Add(o, o, acc)
	}
}

// epExperts runs the routed experts of x [n, D] (routed to ids, weights
// wts [n, k] on the host; x nil when n = 0) on their owners and returns
// the sum over each row's experts [n, D], added in ascending expert order
// as the single-rank MoE op does. It always runs the same four EP
// collectives (counts AllToAll; rows, weights and results AllToAllV),
// whatever the row counts on any rank.
func (m *Model) epExperts(x *npu.Tensor, w *moeWeights, ids []int32, wts []float32) *npu.Tensor {
	p, be, D := m.par, m.be, m.d.D
	k := m.d.TopK
	n := len(ids) / k
	ep, L := p.EPSize, p.maxLocal
	E := p.full.E

	// Pairs (row, slot) in expert order (so grouped by owner, then by
	// owner-local expert), rows ascending within an expert.
	cnt := make([]int, E+1)
	for _, e := range ids {
		cnt[e+1]++
	}
	for e := range E {
		cnt[e+1] += cnt[e]
	}
	np := len(ids)
	next := append([]int(nil), cnt[:E]...)
	pos := make([]int32, np)    // pair t·k+j -> send position
	srcRow := make([]int32, np) // send position -> row of x
	sendW := make([]float32, np)
	for a, e := range ids {
		q := next[e]
		next[e]++
		pos[a], srcRow[q], sendW[q] = int32(q), int32(a/k), wts[a]
	}
	sendCnt := make([]int32, ep*L)
	inCounts := make([]int, ep)
	for e := range E {
		c := cnt[e+1] - cnt[e]
		sendCnt[int(p.owner[e])*L+int(p.local[e])] = int32(c)
		inCounts[p.owner[e]] += c
	}

	// 1. Counts per (owner, local expert): the sizes of everything else.
	cin := m.ws.upload("ep.sendcnt", sendCnt)
	cout := m.ws.get("ep.recvcnt", npu.I32, ep*L)
	m.collective("expert-parallel counts all-to-all", func() error { return p.EP.AllToAll(cout, cin) })
	recvCnt := m.downloadI32(cout)
	outCounts := make([]int, ep)
	var recvIDs []int32
	for s := range ep {
		for l := range L {
			c := int(recvCnt[s*L+l])
			outCounts[s] += c
			for range c {
				recvIDs = append(recvIDs, int32(l))
			}
		}
	}
	N := len(recvIDs)
	scaled := func(c []int, f int) []int {
		out := make([]int, len(c))
		for i, v := range c {
			out[i] = v * f
		}
		return out
	}

	// 2. Rows and 3. weights to the owners.
	sendX := m.ws.get("ep.sendx", npu.F32, np, D)
	if np > 0 {
		be.Gather(sendX, x, m.ws.upload("ep.srcrow", srcRow))
	}
	recvX := m.ws.get("ep.recvx", npu.F32, N, D)
	m.collective("expert-parallel dispatch all-to-all", func() error {
		return p.EP.AllToAllV(recvX, scaled(outCounts, D), sendX, scaled(inCounts, D))
	})
	sw := m.ws.get("ep.sendw", npu.F32, np)
	if np > 0 {
		if err := be.Upload(sw, npu.EncodeFloats(sendW, npu.F32)); err != nil {
			fail(err)
		}
	}
	rw := m.ws.get("ep.recvw", npu.F32, N)
	m.collective("expert-parallel weights all-to-all", func() error { return p.EP.AllToAllV(rw, outCounts, sw, inCounts) })

	// This rank's experts on everything it received: one (row, expert)
	// pair per row, weighted.
	y := m.ws.get("ep.y", npu.F32, N, D)
	if N > 0 {
		be.Fill(y, 0)
		m.moe(y, recvX, &w.experts, rw.Reshape(N, 1), m.ws.upload("ep.recvids", recvIDs).Reshape(N, 1))
	}

	// 4. Results back to the rows' ranks, in the order they were sent.
	back := m.ws.get("ep.back", npu.F32, np, D)
	m.collective("expert-parallel combine all-to-all", func() error {
		return p.EP.AllToAllV(back, scaled(inCounts, D), y, scaled(outCounts, D))
	})
	if n == 0 {
		return nil
	}

	// Sum each row's experts in ascending expert order.
	order := make([]int32, k)
	idx := make([][]int32, k)
	for j := range idx {
		idx[j] = make([]int32, n)
	}
	for t := range n {
		for j := range k {
			order[j] = pos[t*k+j] // positions ascend with the expert id
		}
		for i := 1; i < k; i++ {
			for q := i; q > 0 && order[q-1] > order[q]; q-- {
				order[q-1], order[q] = order[q], order[q-1]
			}
		}
		for j := range k {
			idx[j][t] = order[j]
		}
	}
	acc := m.ws.get("ep.acc", npu.F32, n, D)
	be.Gather(acc, back, m.ws.upload(combNames[0], idx[0]))
	tmp := m.ws.get("ep.tmp", npu.F32, n, D)
	for j := 1; j < k; j++ {
		be.Gather(tmp, back, m.ws.upload(combNames[j%len(combNames)], idx[j]))
		be.Add(acc, acc, tmp)
	}
	return acc
}

// combNames name the combine's index uploads (distinct buffers, so an
// upload never overwrites indices an enqueued Gather still reads).
var combNames = func() []string {
	s := make([]string, 16)
	for i := range s {
		s[i] = fmt.Sprintf("ep.comb%d", i)
	}
	return s
}()
