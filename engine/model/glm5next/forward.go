package glm5next

import (
	"fmt"
	"math"

	"github.com/npuserve/npuserve/engine/model"
	"github.com/npuserve/npuserve/npu"
)

// Batch is one forward step (model.Batch). glm5next calls all three of
// its hooks: Observe after every decoder layer l with the mHC streams
// [rows, hc_mult, hidden] and once more with l = num_hidden_layers and the
// final normed hidden states [len(LogitRows), hidden]; ObserveIndex after
// the indexer of every DSA layer that runs its own, with the selection
// [rows, width] (I32 sequence positions, -1 unused) exactly as DSAIndex
// produced it; ObserveLinear before every linear with the canonical
// checkpoint modules it computes (several for a fused q|k|v or gate|up
// weight) and its input [rows, K] (routed experts run inside the MoE op
// and are not shown).
type Batch = model.Batch

// plan is the host-side preparation of a batch shared by all layers: the
// batch description and its index tensors, uploaded in one copy.
type plan struct {
	rows     int
	decode   bool           // every sequence has exactly one row
	seqs     *npu.SeqLayout // the device form of Batch.Layout
	rowSlots *npu.Tensor    // I32 [rows] token slot of each row (the slot mapping)

	// Pools completed by this batch: the token slots of their positions
	// (kpool per pool, in order) and their pool slots.
	poolTokens *npu.Tensor // I32 [P*kpool]
	poolSlots  *npu.Tensor // I32 [P]
	pools      int

	logitRows *npu.Tensor // I32 [R], nil when every row is wanted in order
	nLogits   int
	fresh     []int // state slots of sequences starting at position 0
	// freshRange [lo, hi) is a run of state slots cleared like fresh
	// ones (a decode graph's padding slots); empty when lo == hi.
	freshRange [2]int

	// capture, when set, receives every KDA layer's per-row inputs;
	// layer is the index of the layer being computed.
	capture *kdaCapture
	layer   int

	// sel, when set, is the selection [rows, width] the DSA layers use
	// instead of running their indexers (MTP draft steps under
	// index_share_for_mtp_iteration).
	sel *npu.Tensor
}

// Forward runs the batch through the model, writing its cache entries, and
// returns the logits [len(LogitRows), vocab] (F32, on the device; the
// caller owns the tensor and frees it with the backend's Free). A failed
// allocation or collective is returned as an error (a collective failure
// wraps ErrCollective: the ranks can no longer be trusted to agree). A
// malformed batch (rows, slots or ids out of range) is a programming
// error and panics.
func (m *Model) Forward(c *Cache, b *Batch) (logits *npu.Tensor, err error) {
	defer func() {
		if e := stepFailure(recover()); e != nil {
			logits, err = nil, e
		}
	}()
	if m.graphs != nil {
		if g := m.graphs.pick(c, b); g != nil {
			return m.replay(g, c, b), nil
		}
	}
	logits, _ = m.forward(c, b, hiddenNone)
	return logits, nil
}

// ForwardHidden is Forward that also returns the final normed hidden
// states [len(LogitRows), hidden] of the logit rows (the lm_head input,
// what the MTP layer takes; the caller frees it).
func (m *Model) ForwardHidden(c *Cache, b *Batch) (logits, hidden *npu.Tensor, err error) {
	defer func() {
		if e := stepFailure(recover()); e != nil {
			logits, hidden, err = nil, nil, e
		}
	}()
	logits, hidden = m.forward(c, b, hiddenLogitRows)
	return logits, hidden, nil
}

// stepError carries a failure out of the forward pass's helpers (an
// allocation, a collective) to Forward, which returns it.
type stepError struct{ err error }

// stepFailure turns a recovered stepError into its error and re-panics
// anything else (programming errors).
func stepFailure(p any) error {
	if p == nil {
		return nil
	}
	if se, ok := p.(stepError); ok {
		return se.err
	}
	panic(p)
}

// fail aborts the forward pass with err (see stepError).
func fail(err error) { panic(stepError{err}) }

// hiddenMode says which final normed hidden states forward returns.
type hiddenMode int

const (
	hiddenNone      hiddenMode = iota // none
	hiddenLogitRows                   // those of the logit rows
	hiddenAllRows                     // every row's (the MTP layer's input in the engine)
)

func (m *Model) forward(c *Cache, b *Batch, keep hiddenMode) (*npu.Tensor, *npu.Tensor) {
	return m.forwardStep(c, b, keep, nil)
}

// fixedStep is a forward whose device inputs and logits live in fixed
// buffers, uploaded by the caller (a decode graph's step, graph.go): its
// plan, the stream ids [rows*n] of the embedding, and the logits buffer
// [rows, logitWidth] written in place instead of allocated.
type fixedStep struct {
	p      *plan
	ids    *npu.Tensor
	logits *npu.Tensor
}

// forwardStep is forward, with the step's inputs prepared from b, or
// taken from fs when it is set (then b only carries its hooks).
func (m *Model) forwardStep(c *Cache, b *Batch, keep hiddenMode, fs *fixedStep) (*npu.Tensor, *npu.Tensor) {
	be, d := m.be, m.d
	var p *plan
	if fs != nil {
		p = fs.p
	} else {
		p = m.prepare(c, b)
	}
	p.capture = m.kdaCap
	T := p.rows
	m.observeLinear = b.ObserveLinear
	defer func() { m.observeLinear = nil }()

	// Embedding straight into the n streams: row t*n+i looks up token t.
	x := m.ws.get("streams.a", npu.F32, T, d.n, d.D)
	y := m.ws.get("streams.b", npu.F32, T, d.n, d.D)
	switch {
	case T > 0 && fs != nil:
		be.Embedding(x.Reshape(T*d.n, d.D), m.embed, fs.ids)
	case T > 0:
		m.embedStreams(x, b.Tokens)
	}

	// A sequence starting at position 0 may reuse a slot of a finished
	// one: clear its KDA conv window and recurrent state.
	clear := func(lo, hi int) {
		for l := range m.layers {
			if lc := &c.Layers[l]; lc.Conv != nil {
				if lc.Conv.Numel() > 0 {
					be.Fill(lc.Conv.Rows(lo, hi), 0)
				}
				be.Fill(lc.State.Rows(lo, hi), 0)
			}
		}
	}
	for _, slot := range p.fresh {
		clear(slot, slot+1)
	}
	if lo, hi := p.freshRange[0], p.freshRange[1]; lo < hi {
		clear(lo, hi)
	}

	col := m.ws.get("hc.collapsed", npu.F32, T, d.D)
	post := m.ws.get("hc.post", npu.F32, T, d.n)
	comb := m.ws.get("hc.comb", npu.F32, T, d.n, d.n)
	h := m.ws.get("h", npu.F32, T, d.D)
	out := m.ws.get("sublayer", npu.F32, T, d.D)
	for l, ly := range m.layers {
		if T == 0 {
			// Nothing to compute, but an expert-parallel layer still
			// serves the other ranks (DummyStep).
			m.idleLayer(ly)
			continue
		}
		lc := &c.Layers[l]
		be.HCPre(col, post, comb, x, ly.hcAttn.fn, ly.hcAttn.base, ly.hcAttn.scale, m.hc)
		be.RMSNorm(h, col, ly.inNorm, d.RMSEps)
		if ly.kda != nil {
			p.layer = l
			m.kda(out, h, ly.kda, lc, p.seqs, p)
		} else {
			m.dsa(out, h, ly, lc, b, p)
		}
		m.tpAllReduce(out)
		be.HCPost(y, out, post, comb, x)
		x, y = y, x

		be.HCPre(col, post, comb, x, ly.hcFFN.fn, ly.hcFFN.base, ly.hcFFN.scale, m.hc)
		be.RMSNorm(h, col, ly.postNorm, d.RMSEps)
		if ly.moe != nil {
			m.moeFFN(out, h, ly.moe, T)
		} else {
			m.mlp(out, h, ly.mlp, T)
		}
		m.tpAllReduce(out)
		be.HCPost(y, out, post, comb, x)
		x, y = y, x
		if b.Observe != nil {
			b.Observe(l, x)
		}
	}

	R := p.nLogits
	var logits *npu.Tensor
	var err error
	if fs != nil {
		logits = fs.logits
	} else if logits, err = be.Alloc(npu.F32, R, m.logitWidth()); err != nil {
		fail(err)
	}
	var hidden *npu.Tensor
	switch keep {
	case hiddenLogitRows:
		hidden, err = be.Alloc(npu.F32, R, d.D)
	case hiddenAllRows:
		hidden, err = be.Alloc(npu.F32, T, d.D)
	}
	if err != nil {
		be.Free(logits)
		fail(err)
	}
	if T == 0 || (R == 0 && keep != hiddenAllRows) {
		return logits, hidden
	}
	mean := m.ws.get("final.mean", npu.F32, T, d.D)
	be.HCMean(mean, x)
	if keep == hiddenAllRows {
		// Norm every row, then take the logit rows from the normed ones
		// (the same per-row arithmetic as norming the gathered rows).
		be.RMSNorm(hidden, mean, m.norm, d.RMSEps)
		if R == 0 {
			return logits, hidden
		}
		hn := hidden
		if p.logitRows != nil {
			hn = m.ws.get("final.norm", npu.F32, R, d.D)
			be.Gather(hn, hidden, p.logitRows)
		}
		if b.Observe != nil {
			b.Observe(len(m.layers), hn)
		}
		m.lmLogits(logits, hn)
		return logits, hidden
	}
	rows := mean
	if p.logitRows != nil {
		rows = m.ws.get("final.rows", npu.F32, R, d.D)
		be.Gather(rows, mean, p.logitRows)
	}
	hn := m.ws.get("final.norm", npu.F32, R, d.D)
	be.RMSNorm(hn, rows, m.norm, d.RMSEps)
	if b.Observe != nil {
		b.Observe(len(m.layers), hn)
	}
	m.lmLogits(logits, hn)
	if hidden != nil {
		be.Copy(hidden, hn)
	}
	return logits, hidden
}

// kda is a Kimi Delta Attention layer (§4.3) on the normed input h.
func (m *Model) kda(out, h *npu.Tensor, w *kdaWeights, lc *LayerCache, L *npu.SeqLayout, p *plan) {
	be, d, T := m.be, m.d, p.rows
	hk := d.H * d.K
	qkv := m.ws.get("kda.qkv", npu.F32, T, 3*hk)
	m.linear(qkv, h, w.qkv)
	u := m.ws.get("kda.conv", npu.F32, T, 3*hk)
	if p.decode {
		be.Conv1dUpdate(u, qkv, lc.Conv, w.conv, L, true)
	} else {
		be.Conv1d(u, qkv, lc.Conv, w.conv, L, true)
	}
	low := m.ws.get("kda.low", npu.F32, T, d.K)
	f := m.ws.get("kda.f", npu.F32, T, hk)
	m.linear(low, h, w.fA)
	m.linear(f, low, w.fB)
	g := m.ws.get("kda.g", npu.F32, T, hk)
	be.KDAGate(g, f, w.dtBias, w.aLog, m.gate)
	beta := m.ws.get("kda.beta", npu.F32, T, d.H)
	m.linear(beta, h, w.b)
	be.Sigmoid(beta, beta)
	if cp := p.capture; cp != nil {
		cp.keep(m, p.layer, qkv, g, beta)
	}
	o := m.ws.get("kda.o", npu.F32, T, hk)
	chunk := kdaChunk
	if p.decode {
		chunk = 0
	}
	be.KDA(o, u, g, beta, lc.State, L, d.H, d.K, chunk)
	gate := m.ws.get("kda.gate", npu.F32, T, hk)
	m.linear(low, h, w.gA)
	m.linear(gate, low, w.gB)
	on := m.ws.get("kda.onorm", npu.F32, T, hk)
	be.RMSNormGated(on, o, gate, w.oNorm, d.RMSEps)
	m.linear(out, on, w.o)
}

// kdaChunk is the chunk size of the chunked KDA algorithm for prefill (the
// reference's and FLA's default).
const kdaChunk = 64

// dsa is a DeepSeek sparse attention layer (§4.4–4.5): NoPE MLA over the
// positions its k-pool indexer selects (or, on a "shared" layer, over the
// previous layer's selection, still in the "sel" scratch buffer).
// dsa is one DSA attention sublayer; it returns the selection it used.
func (m *Model) dsa(out, h *npu.Tensor, ly *layer, lc *LayerCache, b *Batch, p *plan) *npu.Tensor {
	be, d, T := m.be, m.d, p.rows
	w, L := ly.mla, p.seqs
	qa := m.ws.get("dsa.qa", npu.F32, T, d.QR)
	m.linear(qa, h, w.qA)
	cq := m.ws.get("dsa.cq", npu.F32, T, d.QR)
	be.RMSNorm(cq, qa, w.qANorm, d.RMSEps)
	q := m.ws.get("dsa.q", npu.F32, T, d.HA*d.Dk)
	m.linear(q, cq, w.qB)
	kva := m.ws.get("dsa.kva", npu.F32, T, d.R)
	m.linear(kva, h, w.kvA)
	lat := m.ws.get("dsa.latent", npu.F32, T, d.R)
	be.RMSNorm(lat, kva, w.kvANorm, d.RMSEps)
	be.Scatter(lc.Latent, lat, p.rowSlots)

	sel := p.sel
	if sel == nil {
		sel = m.ws.get("sel", npu.I32, T, d.SelW)
	}
	if x := w.idx; x != nil && p.sel == nil {
		qi := m.ws.get("idx.q", npu.F32, T, d.Hi*d.Di)
		m.linear(qi, cq, x.wqB)
		kraw := m.ws.get("idx.kraw", npu.F32, T, d.Di)
		m.linear(kraw, h, x.wk)
		ki := m.ws.get("idx.k", npu.F32, T, d.Di)
		be.LayerNorm(ki, kraw, x.kNormW, x.kNormB, d.IdxEps)
		gi := m.ws.get("idx.gate", npu.F32, T, d.Di)
		m.linear(gi, h, x.gate)
		hw := m.ws.get("idx.w", npu.F32, T, d.Hi)
		m.linear(hw, h, x.weightsProj)
		be.Scale(hw, hw, x.weightsScale)
		be.Scatter(lc.IndexKeys, ki, p.rowSlots)
		be.Scatter(lc.IndexGates, gi, p.rowSlots)
		if p.pools > 0 {
			keys := m.ws.get("idx.poolkeys", npu.F32, p.pools*d.KPool, d.Di)
			gates := m.ws.get("idx.poolgates", npu.F32, p.pools*d.KPool, d.Di)
			be.Gather(keys, lc.IndexKeys, p.poolTokens)
			be.Gather(gates, lc.IndexGates, p.poolTokens)
			pooled := m.ws.get("idx.pooled", npu.F32, p.pools, d.Di)
			be.KPool(pooled, keys, gates, x.ape)
			be.Scatter(lc.Pooled, pooled, p.poolSlots)
		}
		be.DSAIndex(sel, qi, hw, lc.Pooled, L, m.index)
		if b.ObserveIndex != nil {
			b.ObserveIndex(ly.index, sel)
		}
	}
	attn := m.ws.get("dsa.attn", npu.F32, T, d.HA*d.Dv)
	be.SparseMLA(attn, q, lc.Latent, w.kvB, sel, L, d.HA, d.Dk, d.Dv, float32(1/math.Sqrt(float64(d.Dk))))
	m.linear(out, attn, w.o)
	return sel
}

// mlp is a dense clamped-SwiGLU MLP.
func (m *Model) mlp(out, h *npu.Tensor, w *mlpWeights, T int) {
	I := w.down.K()
	gu := m.ws.get("mlp.gateup", npu.F32, T, 2*I)
	m.linear(gu, h, w.gateUp)
	act := m.ws.get("mlp.act", npu.F32, T, I)
	m.be.SwiGLU(act, gu, m.d.Limit)
	m.linear(out, act, w.down)
}

// moeFFN is the routed experts plus the shared experts.
func (m *Model) moeFFN(out, h *npu.Tensor, w *moeWeights, T int) {
	if m.par.ep() {
		m.moeEP(out, h, w, T)
		return
	}
	if w.shared != nil {
		m.mlp(out, h, w.shared, T)
	} else {
		m.be.Fill(out, 0)
	}
	wts := m.ws.get("moe.weights", npu.F32, T, m.d.TopK)
	ids := m.ws.get("moe.ids", npu.I32, T, m.d.TopK)
	m.be.Router(wts, ids, h, w.gate, w.bias, m.router)
	m.moe(out, h, &w.experts, wts, ids)
}

// prepare validates the batch against the cache, builds the host-side
// index lists every layer uses (from the block tables: the slot mapping
// of the new rows, the token rows and pooled rows of the pools this batch
// completes, the logit rows) and uploads them with the layout in one copy.
func (m *Model) prepare(c *Cache, b *Batch) *plan {
	d, L := m.d, &b.Layout
	if len(c.Layers) != len(m.layers) {
		panic(fmt.Sprintf("glm5next: cache has %d layers, model %d", len(c.Layers), len(m.layers)))
	}
	if err := L.Check(); err != nil {
		panic(fmt.Sprintf("glm5next: %v", err))
	}
	if L.BlockSize != c.BlockSize {
		panic(fmt.Sprintf("glm5next: layout block size %d, cache %d", L.BlockSize, c.BlockSize))
	}
	B := L.NumSeqs()
	T := L.Rows()
	if len(b.Tokens) != T {
		panic(fmt.Sprintf("glm5next: %d tokens for a layout of %d rows", len(b.Tokens), T))
	}
	for i, id := range b.Tokens {
		if id < 0 || int(id) >= d.V {
			panic(fmt.Sprintf("glm5next: token %d at row %d outside the vocabulary of %d", id, i, d.V))
		}
	}
	p := &plan{rows: T, decode: T > 0}
	kp := d.KPool
	words := L.Encode(m.hostWords[:0])
	nLayout := len(words)
	seen := map[int]bool{}
	for s := range B {
		n, pos := L.SeqRows(s), L.Pos[s]
		if n != 1 {
			p.decode = false
		}
		end := pos + n
		slot := L.StateSlot[s]
		if slot < 0 || slot >= c.StateSlots || seen[slot] {
			panic(fmt.Sprintf("glm5next: sequence %d state slot %d out of range [0, %d) or shared", s, slot, c.StateSlots))
		}
		seen[slot] = true
		// Blocks this step writes (the ops check the ones they read).
		if n > 0 {
			for _, blk := range L.BlockTables[s][pos/kp*kp/c.BlockSize : (end-1)/c.BlockSize+1] {
				if blk < 0 || int(blk) >= c.NumBlocks {
					panic(fmt.Sprintf("glm5next: sequence %d block %d outside the cache's %d", s, blk, c.NumBlocks))
				}
			}
		}
		if pos == 0 && n > 0 {
			p.fresh = append(p.fresh, slot)
		}
	}
	// Slot mapping, then the completed pools' token rows and pool rows.
	words = L.SlotMapping(words)
	nPoolTok := 0
	for s := range B {
		pos, end := L.Pos[s], L.Pos[s]+L.SeqRows(s)
		for i := pos / kp; i < end/kp; i++ {
			for j := i * kp; j < (i+1)*kp; j++ {
				words = append(words, L.TokenRow(s, j))
			}
			nPoolTok += kp
		}
	}
	for s := range B {
		pos, end := L.Pos[s], L.Pos[s]+L.SeqRows(s)
		for i := pos / kp; i < end/kp; i++ {
			words = append(words, L.PoolRow(s, i, kp))
		}
	}
	p.pools = nPoolTok / kp

	want := b.LogitRows
	if want == nil {
		for s := range B {
			if L.SeqRows(s) > 0 {
				want = append(want, L.QueryStart[s+1]-1)
			}
		}
	}
	p.nLogits = len(want)
	identity := len(want) == T
	for i, r := range want {
		if r < 0 || r >= T {
			panic(fmt.Sprintf("glm5next: logit row %d outside the batch's %d rows", r, T))
		}
		identity = identity && r == i
	}
	if !identity {
		for _, r := range want {
			words = append(words, int32(r))
		}
	}
	m.hostWords = words

	buf := m.ws.upload("batch", words)
	p.seqs = L.Views(buf)
	o := nLayout
	take := func(n int) *npu.Tensor {
		t := buf.Rows(o, o+n)
		o += n
		return t
	}
	p.rowSlots = take(T)
	if p.pools > 0 {
		p.poolTokens = take(nPoolTok)
		p.poolSlots = take(p.pools)
	} else {
		o += nPoolTok
	}
	if !identity && len(want) > 0 {
		p.logitRows = take(len(want))
	}
	return p
}
