package glm5next

import (
	"fmt"
	"strings"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/npu"
)

// mtpWeights is the MTP draft layer (layer num_hidden_layers of the
// checkpoint; glm5next-features.md §2.1): enorm/hnorm over the next
// token's embedding and the trunk's final-normed hidden state, eh_proj
// (split into its embedding and hidden halves), one DSA + MoE block with
// a plain residual (no mHC) and shared_head.norm. The embedding and the
// lm_head are the trunk's.
type mtpWeights struct {
	enorm, hnorm, headNorm *npu.Tensor // [D]
	eProj, hProj           *linear     // eh_proj[:, :D] and eh_proj[:, D:], [D, D]
	block                  *layer      // DSA + MoE, hcAttn/hcFFN unset
}

// HasMTP reports whether the model has an MTP draft layer (loaded with
// LoadOptions.MTP or added by AddRandomMTP).
func (m *Model) HasMTP() bool { return m.mtp != nil }

// mtpSpecs lists the MTP layer's tensors (checkpoint order within the
// layer does not matter to the loader): the spec table's
// (config.ModelConfig.MTPTensors) of layer num_hidden_layers.
func mtpSpecs(c *config.ModelConfig, f weightForm) []spec {
	var s []spec
	for _, x := range fromTable(c.MTPTensors(f.table())) {
		if x.row.Layer == c.NumHiddenLayers {
			s = append(s, x)
		}
	}
	return s
}

// checkMTP reports why the MTP layer cannot be loaded from a checkpoint
// with these tensor names.
func checkMTP(c *config.ModelConfig, names []string) error {
	L := c.NumHiddenLayers
	if c.NumNextnPredictLayers < 1 {
		return fmt.Errorf("glm5next: speculative decoding (method mtp) needs an MTP layer, but config.json has num_nextn_predict_layers = %d", c.NumNextnPredictLayers)
	}
	want := fmt.Sprintf("layers.%d.eh_proj.weight", L)
	for _, n := range names {
		if strings.HasSuffix(n, want) {
			return nil
		}
	}
	return fmt.Errorf("glm5next: speculative decoding (method mtp) needs the MTP layer's weights, but the checkpoint has no model.language_model.%s (num_nextn_predict_layers = %d)", want, c.NumNextnPredictLayers)
}

// mtpLayer builds the MTP layer from the loaded tensors.
func (a *assembler) mtpLayer(c *config.ModelConfig, d dims, f weightForm) *mtpWeights {
	p := layerPrefix(c.NumHiddenLayers)
	w := &mtpWeights{
		enorm: a.take(p + "enorm.weight"), hnorm: a.take(p + "hnorm.weight"),
		headNorm: a.take(p + "shared_head.norm.weight"),
	}
	eh := a.take(p + "eh_proj.weight") // [D, 2D]: row i = [e-half | h-half]
	ie, ih := make([]int32, d.D), make([]int32, d.D)
	for i := range d.D {
		ie[i], ih[i] = int32(2*i), int32(2*i+1)
	}
	halves := eh.Reshape(2*d.D, d.D)
	split := func(idx []int32) *npu.Tensor {
		it, err := a.be.FromHost(npu.I32, npu.EncodeInt32s(idx), len(idx))
		if err != nil {
			fail(err)
		}
		out := a.alloc(eh.DType(), d.D, d.D)
		a.be.Gather(out, halves, it)
		a.be.Free(it)
		return out
	}
	w.eProj = floatLinear(split(ie), module(p+"eh_proj.weight"))
	w.hProj = floatLinear(split(ih), module(p+"eh_proj.weight"))
	a.free(eh)
	w.block = a.layer(c, d, f, c.NumHiddenLayers, false)
	return w
}

// AddRandomMTP gives a model without one a random MTP layer (seeded like
// NewRandom, float32 weights; tests and --load-format dummy).
func (m *Model) AddRandomMTP(seed int64) error {
	if m.mtp != nil {
		return fmt.Errorf("glm5next: the model already has an MTP layer")
	}
	cfg := *m.cfg
	if cfg.NumNextnPredictLayers < 1 {
		cfg.NumNextnPredictLayers = 1
	}
	form := weightForm{fusedConv: true, fusedExperts: true}
	t := map[string]*npu.Tensor{}
	sp := mtpSpecs(&cfg, form)
	if m.par != nil {
		// A rank's slices of the layer one rank would draw (NewRandomParallel).
		sp = m.par.shard(sp, &cfg)
	}
	for _, s := range sp {
		if s.skip {
			continue
		}
		vals := randomInit(s, &cfg, 0.02, seed)
		if strings.HasSuffix(s.name, "norm.weight") {
			// Unit norms would make the draft independent of which norm is
			// applied where; perturb them so the tests see the wiring.
			r := randomInit(spec{name: s.name + "#", shape: s.shape}, &cfg, 0.1, seed)
			for i := range vals {
				vals[i] += r[i]
			}
		}
		if strings.HasSuffix(s.name, "eh_proj.weight") || strings.Contains(s.name, "self_attn.") || strings.Contains(s.name, "mlp.") {
			for i := range vals {
				vals[i] *= 4 // a livelier block than initializer_range gives
			}
		}
		data, shape := npu.EncodeFloats(vals, npu.F32), s.shape
		if s.slice != nil {
			data = s.slice.Cut(data, s.shape, npu.F32.Size())
			shape, _ = s.slice.Shape(s.shape)
		}
		x, err := m.be.FromHost(npu.F32, data, shape...)
		if err != nil {
			for _, y := range t {
				m.be.Free(y)
			}
			return err
		}
		t[s.name] = x
	}
	if m.par != nil {
		m.par.renameExperts(t)
	}
	a := newAssembler(m.be, t)
	err := func() (err error) {
		defer func() {
			if e := stepFailure(recover()); e != nil {
				err = e
			}
		}()
		m.mtp = a.mtpLayer(&cfg, m.d, form)
		a.markWeights()
		return nil
	}()
	if err != nil {
		return err
	}
	for x := range a.owned {
		m.owned = append(m.owned, x)
	}
	return nil
}

// MTPForward runs the MTP layer over batch b: each row is a trunk position
// t, h [rows, D] the trunk's final-normed hidden state there and b.Tokens
// the token at t+1. It writes the MTP layer's cache rows and returns the
// draft logits [R, V] and post-shared_head.norm hidden states g [R, D] of
// b.LogitRows (the caller frees both). The embedding of a row at
// position 0 is zeroed (vLLM's rule).
func (m *Model) MTPForward(c *Cache, b *Batch, h *npu.Tensor) (logits, g *npu.Tensor, err error) {
	defer func() {
		if e := stepFailure(recover()); e != nil {
			logits, g, err = nil, nil, e
		}
	}()
	ids := m.ws.upload("mtp.ids", b.Tokens)
	logits, g = m.mtpForward(c, b, h, ids, nil)
	return logits, g, nil
}

// mtpShare carries index_share_for_mtp_iteration through the MTP layer:
// keep receives the indexer selection of rows keepRows (draft step 0);
// use replaces the indexer for every row (steps 1+).
type mtpShare struct {
	keep     *npu.Tensor // I32 [len(keepRows), SelW]
	keepRows *npu.Tensor // I32 row indices
	use      *npu.Tensor // I32 [rows, width]
}

// mtpForward is MTPForward with the tokens in a device tensor ids (I32
// [rows]; b.Tokens then only needs valid placeholder ids) and the indexer
// selection shared as share says (nil: the indexer runs, nothing kept).
func (m *Model) mtpForward(c *Cache, b *Batch, h, ids *npu.Tensor, share *mtpShare) (*npu.Tensor, *npu.Tensor) {
	if m.mtp == nil {
		panic("glm5next: MTPForward on a model without an MTP layer")
	}
	if c.MTP.Latent == nil {
		panic("glm5next: MTPForward on a cache made before the MTP layer was added")
	}
	be, d, w := m.be, m.d, m.mtp
	p := m.prepare(c, b)
	T := p.rows
	if h.Dim(0) != T || h.Dim(1) != d.D {
		panic(fmt.Sprintf("glm5next: MTP hidden %v for %d rows", h, T))
	}
	R := p.nLogits
	logits, err := be.Alloc(npu.F32, R, d.V)
	if err != nil {
		fail(err)
	}
	g, err := be.Alloc(npu.F32, R, d.D)
	if err != nil {
		be.Free(logits)
		fail(err)
	}
	if T == 0 {
		m.idleMTP()
		return logits, g
	}
	e := m.ws.get("mtp.e", npu.F32, T, d.D)
	m.mtpEmbedding(e, ids)
	L := &b.Layout
	for s := range L.NumSeqs() {
		if L.Pos[s] == 0 && L.SeqRows(s) > 0 {
			be.Fill(e.Rows(L.QueryStart[s], L.QueryStart[s]+1), 0)
		}
	}
	en := m.ws.get("mtp.en", npu.F32, T, d.D)
	be.RMSNorm(en, e, w.enorm, d.RMSEps)
	hn := m.ws.get("mtp.hn", npu.F32, T, d.D)
	be.RMSNorm(hn, h, w.hnorm, d.RMSEps)
	ue := m.ws.get("mtp.ue", npu.F32, T, d.D)
	uh := m.ws.get("mtp.uh", npu.F32, T, d.D)
	m.linear(ue, en, w.eProj)
	m.linear(uh, hn, w.hProj)
	u0 := m.ws.get("mtp.u0", npu.F32, T, d.D)
	be.Add(u0, ue, uh)

	x := m.ws.get("h", npu.F32, T, d.D)
	out := m.ws.get("sublayer", npu.F32, T, d.D)
	be.RMSNorm(x, u0, w.block.inNorm, d.RMSEps)
	if share != nil {
		p.sel = share.use
	}
	sel := m.dsa(out, x, w.block, &c.MTP, b, p)
	if share != nil && share.keep != nil {
		be.Gather(share.keep, sel, share.keepRows)
	}
	m.tpAllReduce(out)
	a := m.ws.get("mtp.a", npu.F32, T, d.D)
	be.Add(a, u0, out)
	if R == 0 {
		m.idleMTP()
		return logits, g
	}
	// Only the attention half writes the cache: the MoE half runs on the
	// logit rows alone (exact, row by row; glm5next-features.md §2.2).
	rows := a
	if p.logitRows != nil {
		rows = m.ws.get("mtp.rows", npu.F32, R, d.D)
		be.Gather(rows, a, p.logitRows)
	}
	x2 := m.ws.get("mtp.x2", npu.F32, R, d.D)
	be.RMSNorm(x2, rows, w.block.postNorm, d.RMSEps)
	f := m.ws.get("mtp.ffn", npu.F32, R, d.D)
	m.moeFFN(f, x2, w.block.moe, R)
	m.tpAllReduce(f)
	u1 := m.ws.get("mtp.u1", npu.F32, R, d.D)
	be.Add(u1, rows, f)
	be.RMSNorm(g, u1, w.headNorm, d.RMSEps)
	m.wholeLogits(logits, g)
	return logits, g
}

// mtpVocab is a vocabulary-parallel rank's embedding lookup for ids on
// the device (the draft chain's ids never reach the host): local maps
// every id to its row of table, this rank's rows of the embedding plus a
// zero row that every other rank's id maps to, so the TP group's sum of
// the looked-up rows is the embedding (exactly: one term is not zero).
type mtpVocab struct {
	local *npu.Tensor // I32 [V, 1]
	table *npu.Tensor // [vHi-vLo+1, D], the embedding's dtype
}

// mtpEmbedding looks ids (I32 [T], on the device) up into e [T, D]: on a
// vocabulary-parallel rank through mtpVocab and a TP all-reduce.
func (m *Model) mtpEmbedding(e, ids *npu.Tensor) {
	be := m.be
	if m.par == nil || !m.par.vocab {
		be.Embedding(e, m.embed, ids)
		return
	}
	if m.mtpVocab == nil {
		v, err := m.newMTPVocab()
		if err != nil {
			fail(err)
		}
		m.mtpVocab = v
	}
	T := ids.Numel()
	loc := m.ws.get("mtp.local", npu.I32, T, 1)
	be.Gather(loc, m.mtpVocab.local, ids)
	be.Embedding(e, m.mtpVocab.table, loc.Reshape(T))
	m.tpAllReduce(e)
}

// newMTPVocab builds mtpVocab (once, at the first MTP forward): one more
// copy of this rank's embedding rows, (V/TP+1)·D elements, and V ids.
func (m *Model) newMTPVocab() (*mtpVocab, error) {
	be, p := m.be, m.par
	V, n, D := p.full.V, p.vHi-p.vLo, m.embed.Dim(1)
	local := make([]int32, V)
	for id := range local {
		local[id] = int32(n)
		if id >= p.vLo && id < p.vHi {
			local[id] = int32(id - p.vLo)
		}
	}
	l, err := be.FromHost(npu.I32, npu.EncodeInt32s(local), V, 1)
	if err != nil {
		return nil, err
	}
	dt := m.embed.DType()
	t, err := be.FromHost(dt, make([]byte, (n+1)*D*dt.Size()), n+1, D)
	if err != nil {
		be.Free(l)
		return nil, err
	}
	be.Copy(t.Rows(0, n), m.embed)
	m.owned = append(m.owned, l, t)
	return &mtpVocab{local: l, table: t}, nil
}
