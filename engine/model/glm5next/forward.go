package glm5next

import (
	"fmt"
	"math"

	"github.com/npuserve/npuserve/npu"
)

// Batch is one forward step: several sequences, each contributing a run of
// consecutive new positions (a prefill chunk, or one decode token).
type Batch struct {
	// Tokens are the input ids of every row, sequences back to back in
	// Layout order.
	Tokens []int32
	// Layout splits the rows into sequences and addresses their cache
	// (kvcache.Manager.Layout builds it).
	Layout npu.SeqLayout
	// LogitRows are the rows whose logits Forward returns, in this order.
	// Nil means the last row of every sequence that has rows; an empty
	// non-nil slice computes no logits (a prefill chunk that samples
	// nothing).
	LogitRows []int
	// Observe, when set, is called after every decoder layer l with the
	// mHC streams [rows, hc_mult, hidden] (a device tensor valid during the
	// call), and once more with l = num_hidden_layers and the final normed
	// hidden states [len(LogitRows), hidden] that feed lm_head. For tests
	// and debugging.
	Observe func(l int, t *npu.Tensor)
	// ObserveIndex, when set, is called after the indexer of every DSA
	// layer l that runs its own with the selection [rows, width] (I32
	// sequence positions, -1 unused) exactly as DSAIndex produced it.
	ObserveIndex func(l int, sel *npu.Tensor)
	// ObserveLinear, when set, is called before every linear (matmul)
	// with the checkpoint modules it computes (canonical prefixes such as
	// "model.layers.0.mlp.down_proj"; several for a fused q|k|v or
	// gate|up weight, which share the input) and its input [rows, K] (a
	// device tensor valid during the call): the calibration hook of static
	// quantization. Routed experts run inside the MoE op and are not
	// shown.
	ObserveLinear func(modules []string, x *npu.Tensor)
}

// plan is the host-side preparation of a batch shared by all layers.
type plan struct {
	rows     int
	decode   bool        // every sequence has exactly one row
	rowSlots *npu.Tensor // I32 [rows] token slot of each row

	// Pools completed by this batch: the token slots of their positions
	// (kpool per pool, in order) and their pool slots.
	poolTokens *npu.Tensor // I32 [P*kpool]
	poolSlots  *npu.Tensor // I32 [P]
	pools      int

	logitRows *npu.Tensor // I32 [R], nil when every row is wanted in order
	nLogits   int
	fresh     []int // state slots of sequences starting at position 0
}

// Forward runs the batch through the model, writing its cache entries, and
// returns the logits [len(LogitRows), vocab] (F32, on the device; the
// caller owns the tensor and frees it with the backend's Free). A malformed
// batch (rows, slots or ids out of range) is a programming error and
// panics.
func (m *Model) Forward(c *Cache, b *Batch) *npu.Tensor {
	be, d := m.be, m.d
	p := m.prepare(c, b)
	T := p.rows
	m.observeLinear = b.ObserveLinear
	defer func() { m.observeLinear = nil }()

	// Embedding straight into the n streams: row t*n+i looks up token t.
	x := m.ws.get("streams.a", npu.F32, T, d.n, d.D)
	y := m.ws.get("streams.b", npu.F32, T, d.n, d.D)
	if T > 0 {
		m.embedStreams(x, b.Tokens)
	}

	// A sequence starting at position 0 may reuse a slot of a finished
	// one: clear its KDA conv window and recurrent state.
	for _, slot := range p.fresh {
		for l := range m.layers {
			if lc := &c.Layers[l]; lc.Conv != nil {
				if lc.Conv.Numel() > 0 {
					be.Fill(lc.Conv.Rows(slot, slot+1), 0)
				}
				be.Fill(lc.State.Rows(slot, slot+1), 0)
			}
		}
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
			m.kda(out, h, ly.kda, lc, &b.Layout, p)
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
	logits := be.Alloc(npu.F32, R, d.V)
	if R == 0 {
		return logits
	}
	mean := m.ws.get("final.mean", npu.F32, T, d.D)
	be.HCMean(mean, x)
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
	return logits
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
func (m *Model) dsa(out, h *npu.Tensor, ly *layer, lc *LayerCache, b *Batch, p *plan) {
	be, d, T := m.be, m.d, p.rows
	w, L := ly.mla, &b.Layout
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

	sel := m.ws.get("sel", npu.I32, T, d.SelW)
	if x := w.idx; x != nil {
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

// prepare validates the batch against the cache and builds the host-side
// index tensors every layer uses.
func (m *Model) prepare(c *Cache, b *Batch) *plan {
	d, L := m.d, &b.Layout
	if len(c.Layers) != len(m.layers) {
		panic(fmt.Sprintf("glm5next: cache has %d layers, model %d", len(c.Layers), len(m.layers)))
	}
	B := L.NumSeqs()
	if B < 0 || len(L.Pos) != B || len(L.StateSlot) != B || len(L.TokenSlots) != B || len(L.PoolSlots) != B || L.QueryStart[0] != 0 {
		panic(fmt.Sprintf("glm5next: inconsistent layout for %d sequences", B))
	}
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
	rowSlots := make([]int32, 0, T)
	var poolTok, poolSlot []int32
	seen := map[int]bool{}
	for s := range B {
		n, pos := L.QueryStart[s+1]-L.QueryStart[s], L.Pos[s]
		if n < 0 || pos < 0 {
			panic(fmt.Sprintf("glm5next: sequence %d has %d rows at position %d", s, n, pos))
		}
		if n != 1 {
			p.decode = false
		}
		end := pos + n
		slot := L.StateSlot[s]
		if slot < 0 || slot >= c.StateSlots || seen[slot] {
			panic(fmt.Sprintf("glm5next: sequence %d state slot %d out of range [0, %d) or shared", s, slot, c.StateSlots))
		}
		seen[slot] = true
		if len(L.TokenSlots[s]) < end || len(L.PoolSlots[s]) < end/kp {
			panic(fmt.Sprintf("glm5next: sequence %d at positions [%d, %d) has %d token slots and %d pool slots",
				s, pos, end, len(L.TokenSlots[s]), len(L.PoolSlots[s])))
		}
		// Slots this step writes (the ops check the ones they read).
		for _, ts := range L.TokenSlots[s][pos/kp*kp : end] {
			if ts < 0 || int(ts) >= c.TokenSlots {
				panic(fmt.Sprintf("glm5next: sequence %d token slot %d outside the cache's %d", s, ts, c.TokenSlots))
			}
		}
		for _, ps := range L.PoolSlots[s][pos/kp : end/kp] {
			if ps < 0 || int(ps) >= c.PoolSlots {
				panic(fmt.Sprintf("glm5next: sequence %d pool slot %d outside the cache's %d", s, ps, c.PoolSlots))
			}
		}
		if pos == 0 && n > 0 {
			p.fresh = append(p.fresh, slot)
		}
		rowSlots = append(rowSlots, L.TokenSlots[s][pos:end]...)
		for i := pos / kp; i < end/kp; i++ {
			poolTok = append(poolTok, L.TokenSlots[s][i*kp:(i+1)*kp]...)
			poolSlot = append(poolSlot, L.PoolSlots[s][i])
		}
	}
	p.rowSlots = m.ws.upload("rowslots", rowSlots)
	p.pools = len(poolSlot)
	if p.pools > 0 {
		p.poolTokens = m.ws.upload("pooltokens", poolTok)
		p.poolSlots = m.ws.upload("poolslots", poolSlot)
	}

	want := b.LogitRows
	if want == nil {
		for s := range B {
			if L.QueryStart[s+1] > L.QueryStart[s] {
				want = append(want, L.QueryStart[s+1]-1)
			}
		}
	}
	p.nLogits = len(want)
	identity := len(want) == T
	idx := make([]int32, len(want))
	for i, r := range want {
		if r < 0 || r >= T {
			panic(fmt.Sprintf("glm5next: logit row %d outside the batch's %d rows", r, T))
		}
		idx[i] = int32(r)
		identity = identity && r == i
	}
	if !identity && len(want) > 0 {
		p.logitRows = m.ws.upload("logitrows", idx)
	}
	return p
}
