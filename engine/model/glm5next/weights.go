package glm5next

import (
	"fmt"
	"math"
	"strings"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/model/loader"
	"github.com/npuserve/npuserve/npu"
)

// weightForm records how a checkpoint stores the tensors transformers may
// write in either of two forms (its conversion mapping splits them on save
// for the official layout, but a model saved without the reverse mapping
// keeps the fused module parameters).
type weightForm struct {
	// fusedConv: self_attn.conv1d.weight [3HK, 1, W] instead of
	// self_attn.{q,k,v}_conv1d.weight [HK, 1, W].
	fusedConv bool
	// fusedExperts: mlp.experts.gate_up_proj [E, 2I, D] and
	// mlp.experts.down_proj [E, D, I] instead of per-expert
	// mlp.experts.E.{gate,up,down}_proj.weight.
	fusedExperts bool
	// forgetGate: the KDA forget-gate parameters under
	// self_attn.forget_gate. (HF module names) instead of directly under
	// self_attn.
	forgetGate bool
	// lmHead: the checkpoint has lm_head.weight (always, unless the
	// embeddings are tied).
	lmHead bool
}

// table is f as the spec table's config.WeightForm.
func (f weightForm) table() config.WeightForm {
	return config.WeightForm{FusedConv: f.fusedConv, FusedExperts: f.fusedExperts, ForgetGate: f.forgetGate, LMHead: f.lmHead}
}

// detectForm reads the weight form from checkpoint tensor names (in any
// namespace: flat model.*, nested model.language_model.*).
func detectForm(names []string, cfg *config.ModelConfig) weightForm {
	t := cfg.DetectWeightForm(names)
	return weightForm{fusedConv: t.FusedConv, fusedExperts: t.FusedExperts, forgetGate: t.ForgetGate, lmHead: t.LMHead}
}

// spec is one tensor the model needs: a row of the spec table
// (config.TensorSpec: canonical flat name, shape, whether it is a matmul
// weight, which may stay BF16/F16 on the device while everything else is
// loaded as F32, and its TP/EP rule), and how this rank loads it.
type spec struct {
	name   string
	shape  []int
	matrix bool
	// slice is this rank's part of the tensor (nil: all of it); skip
	// marks another expert-parallel rank's expert (see parallel.shard).
	slice *loader.Slice
	skip  bool
	// row is the table's row (sharding rule, layer, expert).
	row config.TensorSpec
}

// layerPrefix is the canonical name prefix of layer l.
func layerPrefix(l int) string { return config.LayerPrefix(l) }

// fromTable turns rows of the spec table into specs.
func fromTable(rows []config.TensorSpec) []spec {
	s := make([]spec, len(rows))
	for i, r := range rows {
		s[i] = spec{name: r.Name, shape: r.Shape, matrix: r.Matrix, row: r}
	}
	return s
}

// specs lists every tensor of the text model in form f, in checkpoint
// order (embedding, layers, norm, head): the spec table's
// (config.ModelConfig.Tensors).
func specs(c *config.ModelConfig, f weightForm) []spec { return fromTable(c.Tensors(f.table())) }

// assembler builds the model's tensors from loaded ones: it concatenates
// and stacks pieces into the layouts the ops take and frees the pieces.
// Quantized linears (q, by canonical weight name) are fused and stacked on
// the host and uploaded as npu.QuantWeights.
type assembler struct {
	be    npu.Backend
	t     map[string]*npu.Tensor
	q     map[string]*hostQuant
	mxAlg int                  // MX activation scale algorithm of quantized weights
	owned map[*npu.Tensor]bool // tensors the model must free (not views)
}

func newAssembler(be npu.Backend, t map[string]*npu.Tensor) *assembler {
	return &assembler{be: be, t: t, q: map[string]*hostQuant{}, owned: map[*npu.Tensor]bool{}}
}

// take returns (and forgets) the tensor called name; the model owns it.
func (a *assembler) take(name string) *npu.Tensor {
	t, ok := a.t[name]
	if !ok {
		panic(fmt.Sprintf("glm5next: tensor %s missing after loading", name))
	}
	delete(a.t, name)
	a.owned[t] = true
	return t
}

// alloc allocates a tensor the model owns.
func (a *assembler) alloc(dt npu.DType, shape ...int) *npu.Tensor {
	return a.own(a.be.Alloc(dt, shape...))
}

// own records a tensor the model owns; a failed allocation aborts the
// assembly (see assemble).
func (a *assembler) own(t *npu.Tensor, err error) *npu.Tensor {
	if err != nil {
		fail(err)
	}
	a.owned[t] = true
	return t
}

// assemble builds m from the loaded tensors; a failed device allocation
// is returned as an error (the model's tensors are freed).
func (a *assembler) assemble(m *Model, form weightForm) (err error) {
	defer func() {
		if e := stepFailure(recover()); e != nil {
			for t := range a.owned {
				a.be.Free(t)
			}
			for _, t := range a.t {
				a.be.Free(t)
			}
			err = fmt.Errorf("glm5next: %w", e)
		}
	}()
	a.build(m, form)
	a.markWeights()
	return nil
}

// markWeights tells a backend that can use it (npu.WeightMarker) that
// the tensors the model owns are read-only from now on: no op of the
// forward writes a weight.
func (a *assembler) markWeights() {
	wm, ok := a.be.(npu.WeightMarker)
	if !ok {
		return
	}
	ts := make([]*npu.Tensor, 0, len(a.owned))
	for t := range a.owned {
		ts = append(ts, t)
	}
	wm.MarkWeights(ts...)
}

// free releases a piece that was copied into a bigger tensor.
func (a *assembler) free(t *npu.Tensor) {
	delete(a.owned, t)
	a.be.Free(t)
}

// concat concatenates tensors along dimension 0 into one tensor of the
// first one's dtype with row shape rowShape, freeing the parts.
func (a *assembler) concat(rowShape []int, parts ...*npu.Tensor) *npu.Tensor {
	rowSize := 1
	for _, d := range rowShape {
		rowSize *= d
	}
	rows := 0
	for _, p := range parts {
		if p.Numel()%rowSize != 0 {
			panic(fmt.Sprintf("glm5next: cannot concatenate %v into rows of %v", p, rowShape))
		}
		rows += p.Numel() / rowSize
	}
	out := a.alloc(parts[0].DType(), append([]int{rows}, rowShape...)...)
	r := 0
	for _, p := range parts {
		n := p.Numel() / rowSize
		a.be.Copy(out.Rows(r, r+n), p.Reshape(append([]int{n}, rowShape...)...))
		r += n
		a.free(p)
	}
	return out
}

// module is the checkpoint module of a canonical weight name.
func module(name string) string { return strings.TrimSuffix(name, ".weight") }

// lin builds the linear stored under name (quantized or float).
func (a *assembler) lin(name string) *linear {
	return a.linCat(name)
}

// linCat builds one linear from the row-concatenation of the weights
// called names (a fused q|k|v or gate|up). The parts are all float or all
// quantized with one scheme (the loader checks fused groups).
func (a *assembler) linCat(names ...string) *linear {
	mods := make([]string, len(names))
	var qs []*hostQuant
	for i, n := range names {
		mods[i] = module(n)
		if hq, ok := a.q[n]; ok {
			qs = append(qs, hq)
			delete(a.q, n)
		}
	}
	if len(qs) > 0 {
		if len(qs) != len(names) {
			panic(fmt.Sprintf("glm5next: fused linear %v mixes quantized and float parts", mods))
		}
		return &linear{q: a.uploadQuant(concatQuant(qs), 0), modules: mods}
	}
	if len(names) == 1 {
		return floatLinear(a.take(names[0]), mods...)
	}
	parts := make([]*npu.Tensor, len(names))
	for i, n := range names {
		parts[i] = a.take(n)
	}
	return floatLinear(a.concat(parts[0].Shape()[1:], parts...), mods...)
}

// build fills m's weights from the loaded tensors (canonical names, form f).
func (a *assembler) build(m *Model, f weightForm) {
	c, d := m.cfg, m.d
	m.embed = a.take("model.embed_tokens.weight")
	m.layers = make([]*layer, c.NumHiddenLayers)
	for l := range c.NumHiddenLayers {
		m.layers[l] = a.layer(c, d, f, l, true)
	}
	if _, ok := a.t[layerPrefix(c.NumHiddenLayers)+"eh_proj.weight"]; ok {
		m.mtp = a.mtpLayer(c, d, f)
	}
	a.finish(m, f)
}

// layer builds decoder layer l (with mHC weights when hc).
func (a *assembler) layer(c *config.ModelConfig, d dims, f weightForm, l int, hc bool) *layer {
	{
		p := layerPrefix(l)
		ly := &layer{index: l}
		if hc {
			ly.hcAttn = hcWeights{a.take(p + "hc_attn_fn"), a.take(p + "hc_attn_base"), a.take(p + "hc_attn_scale")}
			ly.hcFFN = hcWeights{a.take(p + "hc_ffn_fn"), a.take(p + "hc_ffn_base"), a.take(p + "hc_ffn_scale")}
		}
		ly.inNorm = a.take(p + "input_layernorm.weight")
		ly.postNorm = a.take(p + "post_attention_layernorm.weight")
		s := p + "self_attn."
		if c.IsDSA(l) {
			w := &mlaWeights{
				qA: a.lin(s + "q_a_proj.weight"), qANorm: a.take(s + "q_a_layernorm.weight"),
				qB:  a.lin(s + "q_b_proj.weight"),
				kvA: a.lin(s + "kv_a_proj_with_mqa.weight"), kvANorm: a.take(s + "kv_a_layernorm.weight"),
				kvB: a.take(s + "kv_b_proj.weight"),
				o:   a.lin(s + "o_proj.weight"),
			}
			if !c.SharedIndexer(l) {
				x := s + "indexer."
				w.idx = &indexerWeights{
					wqB: a.lin(x + "wq_b.weight"), wk: a.lin(x + "wk.weight"),
					kNormW: a.take(x + "k_norm.weight"), kNormB: a.take(x + "k_norm.bias"),
					weightsProj: a.lin(x + "weights_proj.weight"),
					gate:        a.lin(x + "index_kpool_compress_gate"),
					ape:         a.take(x + "index_kpool_compress_ape"),
					// weights_proj output is scaled by Hi^-0.5 (HF-G5).
					weightsScale: float32(1 / math.Sqrt(float64(d.Hi))),
				}
			}
			ly.mla = w
		} else {
			hk := d.H * d.K
			w := &kdaWeights{}
			w.qkv = a.linCat(s+"q_proj.weight", s+"k_proj.weight", s+"v_proj.weight")
			if f.fusedConv {
				w.conv = a.take(s+"conv1d.weight").Reshape(3*hk, d.W)
			} else {
				w.conv = a.concat([]int{d.W}, a.take(s+"q_conv1d.weight"), a.take(s+"k_conv1d.weight"), a.take(s+"v_conv1d.weight"))
			}
			fg := s
			if f.forgetGate {
				fg = s + "forget_gate."
			}
			w.fA, w.fB = a.lin(fg+"f_a_proj.weight"), a.lin(fg+"f_b_proj.weight")
			w.dtBias, w.aLog = a.take(fg+"dt_bias"), a.take(fg+"A_log")
			w.b = a.lin(s + "b_proj.weight")
			w.gA, w.gB = a.lin(s+"g_a_proj.weight"), a.lin(s+"g_b_proj.weight")
			w.oNorm, w.o = a.take(s+"o_norm.weight"), a.lin(s+"o_proj.weight")
			ly.kda = w
		}
		mp := p + "mlp."
		if c.IsMoE(l) {
			w := &moeWeights{gate: a.take(mp + "gate.weight"), bias: a.take(mp + "gate.e_score_correction_bias")}
			if f.fusedExperts {
				w.experts.gateUp = a.take(mp + "experts.gate_up_proj")
				w.experts.down = a.take(mp + "experts.down_proj")
			} else {
				w.experts = a.stackExperts(mp+"experts.", d.E, d.Im, d.D)
			}
			if d.Ish > 0 {
				w.shared = a.mlp(mp + "shared_experts.")
			}
			ly.moe = w
		} else {
			ly.mlp = a.mlp(mp)
		}
		return ly
	}
}

// finish takes the final norm and head, checks that every loaded tensor
// was used and prepares the quantized weights.
func (a *assembler) finish(m *Model, f weightForm) {
	c := m.cfg
	m.norm = a.take("model.norm.weight")
	if f.lmHead {
		m.lmHead = a.lin("lm_head.weight")
	}
	if c.TieWordEmbeddings {
		if m.lmHead != nil && m.lmHead.w != nil {
			a.free(m.lmHead.w)
		}
		m.lmHead = floatLinear(m.embed, "lm_head")
	}
	if len(a.t) > 0 || len(a.q) > 0 {
		panic(fmt.Sprintf("glm5next: %d loaded tensors unused by the model", len(a.t)+len(a.q)))
	}
	for t := range a.owned {
		m.owned = append(m.owned, t)
	}
	for _, q := range m.quantWeights() {
		a.be.PrepareQuant(q)
	}
}

// mlp builds a clamped-SwiGLU MLP from prefix{gate,up,down}_proj.weight.
func (a *assembler) mlp(prefix string) *mlpWeights {
	return &mlpWeights{
		gateUp: a.linCat(prefix+"gate_proj.weight", prefix+"up_proj.weight"),
		down:   a.lin(prefix + "down_proj.weight"),
	}
}

// stackExperts stacks per-expert weights into gateUp [E, 2I, D] (gate rows
// then up rows per expert) and down [E, D, I], float or quantized.
func (a *assembler) stackExperts(prefix string, E, I, D int) experts {
	if _, ok := a.q[prefix+"0.gate_proj.weight"]; ok {
		var gus, dns []*hostQuant
		for e := range E {
			ep := fmt.Sprintf("%s%d.", prefix, e)
			g, u, dn := a.q[ep+"gate_proj.weight"], a.q[ep+"up_proj.weight"], a.q[ep+"down_proj.weight"]
			if g == nil || u == nil || dn == nil {
				panic(fmt.Sprintf("glm5next: expert %s is not quantized like expert 0", ep))
			}
			delete(a.q, ep+"gate_proj.weight")
			delete(a.q, ep+"up_proj.weight")
			delete(a.q, ep+"down_proj.weight")
			gus = append(gus, concatQuant([]*hostQuant{g, u}))
			dns = append(dns, dn)
		}
		return experts{qGateUp: a.uploadQuant(stackQuant(gus), E), qDown: a.uploadQuant(stackQuant(dns), E)}
	}
	var gateUp, down *npu.Tensor
	for e := range E {
		ep := fmt.Sprintf("%s%d.", prefix, e)
		g, u, dn := a.take(ep+"gate_proj.weight"), a.take(ep+"up_proj.weight"), a.take(ep+"down_proj.weight")
		if gateUp == nil {
			gateUp = a.alloc(g.DType(), E, 2*I, D)
			down = a.alloc(dn.DType(), E, D, I)
		}
		gu := gateUp.Rows(e, e+1).Reshape(2*I, D)
		a.be.Copy(gu.Rows(0, I), g)
		a.be.Copy(gu.Rows(I, 2*I), u)
		a.be.Copy(down.Rows(e, e+1).Reshape(D, I), dn)
		a.free(g)
		a.free(u)
		a.free(dn)
	}
	return experts{gateUp: gateUp, down: down}
}
