package config

import (
	"fmt"
	"strings"
)

// The glm5_next spec table: every tensor of the checkpoint (canonical
// flat name, shape, matrix or vector, plan part, layer, routed expert)
// with how tensor and expert parallelism split it, and every tensor of a
// rank's cache. The loader and NewRandom (engine/model/glm5next specs and
// shard), the planner's per-rank weights, ParamCount and the cache sizing
// (CacheFootprint, glm5next.NewCache) all read it; nothing else states
// the shapes.

// WeightForm is how a checkpoint stores the tensors transformers may
// write in either of two forms (its conversion mapping splits them on
// save for the official layout, but a model saved without the reverse
// mapping keeps the fused module parameters).
type WeightForm struct {
	// FusedConv: self_attn.conv1d.weight [3HK, 1, W] instead of
	// self_attn.{q,k,v}_conv1d.weight [HK, 1, W].
	FusedConv bool
	// FusedExperts: mlp.experts.gate_up_proj [E, 2I, D] and
	// mlp.experts.down_proj [E, D, I] instead of per-expert
	// mlp.experts.E.{gate,up,down}_proj.weight.
	FusedExperts bool
	// ForgetGate: the KDA forget-gate parameters under
	// self_attn.forget_gate. (HF module names) instead of directly under
	// self_attn.
	ForgetGate bool
	// LMHead: the checkpoint has lm_head.weight (always, unless the
	// embeddings are tied).
	LMHead bool
}

// OfficialForm is the form of an official checkpoint: split convs and
// experts, forget gate directly under self_attn, lm_head unless tied.
func (c *ModelConfig) OfficialForm() WeightForm { return WeightForm{LMHead: !c.TieWordEmbeddings} }

// DetectWeightForm reads the weight form from checkpoint tensor names (in
// any namespace: flat model.*, nested model.language_model.*).
func (c *ModelConfig) DetectWeightForm(names []string) WeightForm {
	f := c.OfficialForm()
	for _, n := range names {
		switch {
		case strings.HasSuffix(n, ".self_attn.conv1d.weight"):
			f.FusedConv = true
		case strings.HasSuffix(n, ".mlp.experts.gate_up_proj"):
			f.FusedExperts = true
		case strings.Contains(n, ".self_attn.forget_gate."):
			f.ForgetGate = true
		case n == "lm_head.weight":
			f.LMHead = true
		}
	}
	return f
}

// ShardKind is how tensor parallelism splits a tensor over the TP ranks of
// a DP rank.
type ShardKind uint8

const (
	// Replicated: every TP rank holds the whole tensor.
	Replicated ShardKind = iota
	// SplitHeads: along Dim the tensor is Groups consecutive groups of
	// Units units (heads, or channels) of Per elements; each TP rank takes
	// Units/TP units of every group. Dim 0 is column-parallel (output
	// rows), the last dimension row-parallel (input columns).
	SplitHeads
	// SplitVocab: the vocabulary rows (dim 0) are split Units/TP per rank
	// when TP divides the vocabulary; replicated otherwise.
	SplitVocab
)

// Shard is a tensor's TP rule. Routed-expert tensors follow it only
// without expert parallelism; with it they are split by expert
// (TensorSpec.Routed).
type Shard struct {
	Kind   ShardKind
	Dim    int
	Units  int
	Per    int
	Groups int
}

// Active reports whether tp ranks split the tensor (SplitVocab only when
// tp divides the vocabulary).
func (s Shard) Active(tp int) bool {
	switch s.Kind {
	case SplitHeads:
		return tp > 1
	case SplitVocab:
		return tp > 1 && s.Units%tp == 0
	}
	return false
}

// Ranges is the [lo, hi) element ranges along s.Dim that TP rank r of tp
// holds (nil when the tensor is not split).
func (s Shard) Ranges(tp, r int) [][2]int {
	if !s.Active(tp) {
		return nil
	}
	u := s.Units / tp
	var out [][2]int
	for g := range max(s.Groups, 1) {
		base := g * s.Units * s.Per
		out = append(out, [2]int{base + r*u*s.Per, base + (r+1)*u*s.Per})
	}
	return out
}

// LocalShape is shape as one of tp ranks holds it.
func (s Shard) LocalShape(shape []int, tp int) []int {
	out := append([]int(nil), shape...)
	if s.Active(tp) {
		out[s.Dim] /= tp
	}
	return out
}

// TensorSpec is one tensor of the checkpoint.
type TensorSpec struct {
	// Name is the canonical flat name (model.layers.L.…; the loader maps
	// it to the checkpoint's namespace).
	Name  string
	Shape []int
	// Matrix marks a matmul weight, which may stay BF16/F16 on the device;
	// everything else loads as F32.
	Matrix bool
	// Quant marks the tensors quantized checkpoints (w8a8, mxfp8, fp8)
	// store quantized, for the planner's byte counts.
	Quant bool
	// Part is the plan part (PlanPart.Name) it counts in.
	Part string
	// Layer is the decoder layer (NumHiddenLayers+i for MTP layer i), -1
	// for the embedding, final norm and head.
	Layer int
	// MTP marks a tensor of an MTP layer.
	MTP bool
	// Routed marks a routed-expert tensor: expert Expert's when not
	// Stacked, else all experts stacked along dim 0 (the fused form).
	// Under expert parallelism a rank holds its experts of it, whole.
	Routed  bool
	Stacked bool
	Expert  int
	// TP is how tensor parallelism splits it.
	TP Shard
}

// Params is the tensor's element count.
func (t TensorSpec) Params() int64 { return numel(t.Shape) }

func numel(shape []int) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= int64(d)
	}
	return n
}

// replicatedShard and the split constructors name the rules of the table.
var replicatedShard = Shard{}

// colwise splits dim 0 (output rows, column-parallel) by units of per
// elements.
func colwise(units, per int) Shard {
	return Shard{Kind: SplitHeads, Dim: 0, Units: units, Per: per, Groups: 1}
}

// rowwise splits dimension dim (input columns, row-parallel) by units of
// per elements.
func rowwise(dim, units, per int) Shard {
	return Shard{Kind: SplitHeads, Dim: dim, Units: units, Per: per, Groups: 1}
}

// LayerPrefix is the canonical name prefix of layer l.
func LayerPrefix(l int) string { return fmt.Sprintf("model.layers.%d.", l) }

// Tensors lists every tensor of the main text model in form f, in
// checkpoint order (embedding, layers, final norm, head).
func (c *ModelConfig) Tensors(f WeightForm) []TensorSpec {
	outside := c.outsideTensors(f)
	s := outside[:1:1]
	for l := range c.NumHiddenLayers {
		s = append(s, c.LayerTensors(f, l)...)
	}
	return append(s, outside[1:]...)
}

// outsideTensors lists the tensors outside the decoder layers: the
// embedding, then the final norm and the head.
func (c *ModelConfig) outsideTensors(f WeightForm) []TensorSpec {
	d, v := c.HiddenSize, c.VocabSize
	vocab := Shard{Kind: SplitVocab, Units: v, Per: 1, Groups: 1}
	s := []TensorSpec{
		{Name: "model.embed_tokens.weight", Shape: []int{v, d}, Matrix: true, Part: partEmbed, Layer: -1, TP: vocab},
		{Name: "model.norm.weight", Shape: []int{d}, Part: partNorms, Layer: -1},
	}
	if f.LMHead {
		s = append(s, TensorSpec{Name: "lm_head.weight", Shape: []int{v, d}, Matrix: true, Part: partLMHead, Layer: -1, TP: vocab})
	}
	return s
}

// MTPTensors lists the tensors of the MTP layers (layers num_hidden_layers
// on): a DSA + MoE block with a plain residual (no mHC), enorm, hnorm,
// eh_proj [D, 2D] and shared_head.norm; the embedding and head are the
// main model's.
func (c *ModelConfig) MTPTensors(f WeightForm) []TensorSpec {
	var s []TensorSpec
	for i := range c.NumNextnPredictLayers {
		s = append(s, c.mtpLayerTensors(f, c.NumHiddenLayers+i)...)
	}
	return s
}

// mtpLayerTensors lists MTP layer l's tensors.
func (c *ModelConfig) mtpLayerTensors(f WeightForm, l int) []TensorSpec {
	d := c.HiddenSize
	p := LayerPrefix(l)
	s := c.LayerTensors(f, l)
	for _, x := range []TensorSpec{
		{Name: p + "enorm.weight", Shape: []int{d}, Part: partNorms},
		{Name: p + "hnorm.weight", Shape: []int{d}, Part: partNorms},
		{Name: p + "eh_proj.weight", Shape: []int{d, 2 * d}, Matrix: true, Quant: true, Part: partMLA},
		{Name: p + "shared_head.norm.weight", Shape: []int{d}, Part: partNorms},
	} {
		x.Layer, x.MTP = l, true
		s = append(s, x)
	}
	return s
}

// eachTensorKind visits the table without listing every layer: each
// tensor of one representative layer per layer kind (attention, indexer,
// MLP) with the number of layers of that kind, the tensors outside the
// layers once, and the first MTP layer's with the number of MTP layers.
// Sums over it equal sums over Tensors and MTPTensors.
func (c *ModelConfig) eachTensorKind(f WeightForm, fn func(t TensorSpec, layers int64)) {
	type kind struct{ dsa, shared, moe bool }
	first := map[kind]int{}
	count := map[kind]int64{}
	var order []kind
	for l := range c.NumHiddenLayers {
		k := kind{c.IsDSA(l), c.SharedIndexer(l), c.IsMoE(l)}
		if _, ok := first[k]; !ok {
			first[k] = l
			order = append(order, k)
		}
		count[k]++
	}
	outside := c.outsideTensors(f)
	fn(outside[0], 1)
	for _, k := range order {
		for _, t := range c.LayerTensors(f, first[k]) {
			fn(t, count[k])
		}
	}
	for _, t := range outside[1:] {
		fn(t, 1)
	}
	if n := c.NumNextnPredictLayers; n > 0 {
		for _, t := range c.mtpLayerTensors(f, c.NumHiddenLayers) {
			fn(t, int64(n))
		}
	}
}

// LayerTensors lists the tensors of decoder layer l in form f: with its
// mHC parameters for a layer of the main model, without for an MTP layer
// (l >= num_hidden_layers). The TP rules follow glm5_next's
// base_model_tp_plan (DSA heads, dense MLP and shared experts split) plus
// KDA heads (issue 4): the indexer, router, mHC and norms are replicated.
func (c *ModelConfig) LayerTensors(f WeightForm, l int) []TensorSpec {
	var s []TensorSpec
	mtp := l >= c.NumHiddenLayers
	part := ""
	add := func(name string, matrix, quant bool, sh Shard, shape ...int) {
		s = append(s, TensorSpec{Name: name, Shape: shape, Matrix: matrix, Quant: quant, Part: part, Layer: l, MTP: mtp, TP: sh})
	}
	D := c.HiddenSize
	p := LayerPrefix(l)
	if !mtp {
		part = partMHC
		n := c.HCMult
		mix := (2 + n) * n
		for _, site := range []string{"hc_attn_", "hc_ffn_"} {
			add(p+site+"fn", false, false, replicatedShard, mix, n*D)
			add(p+site+"base", false, false, replicatedShard, mix)
			add(p+site+"scale", false, false, replicatedShard, 3)
		}
	}
	part = partNorms
	add(p+"input_layernorm.weight", false, false, replicatedShard, D)
	add(p+"post_attention_layernorm.weight", false, false, replicatedShard, D)
	a := p + "self_attn."
	if c.IsDSA(l) {
		// NoPE MLA: q_b_proj and kv_b_proj colwise and o_proj rowwise by
		// head; kv_a_proj_with_mqa and the rest whole, so the cached
		// latent is the same on every TP rank.
		part = partMLA
		ha, qr, r := c.NumAttentionHeads, c.QLoraRank, c.KVLoraRank
		dk := c.QKNopeHeadDim + c.QKRopeHeadDim
		dkv := c.QKNopeHeadDim + c.VHeadDim
		add(a+"q_a_proj.weight", true, true, replicatedShard, qr, D)
		add(a+"q_a_layernorm.weight", false, false, replicatedShard, qr)
		add(a+"q_b_proj.weight", true, true, colwise(ha, dk), ha*dk, qr)
		add(a+"kv_a_proj_with_mqa.weight", true, true, replicatedShard, r+c.QKRopeHeadDim, D)
		add(a+"kv_a_layernorm.weight", false, false, replicatedShard, r)
		add(a+"kv_b_proj.weight", true, true, colwise(ha, dkv), ha*dkv, r)
		add(a+"o_proj.weight", true, true, rowwise(1, ha, c.VHeadDim), D, ha*c.VHeadDim)
		if !c.SharedIndexer(l) {
			// The indexer is not in the tp_plan: replicated.
			part = partIndexer
			x := a + "indexer."
			hi, di := c.IndexNHeads, c.IndexHeadDim
			add(x+"wq_b.weight", true, true, replicatedShard, hi*di, qr)
			add(x+"wk.weight", true, true, replicatedShard, di, D)
			add(x+"k_norm.weight", false, false, replicatedShard, di)
			add(x+"k_norm.bias", false, false, replicatedShard, di)
			add(x+"weights_proj.weight", true, false, replicatedShard, hi, D)
			add(x+"index_kpool_compress_gate", true, false, replicatedShard, di, D)
			add(x+"index_kpool_compress_ape", false, false, replicatedShard, c.IndexKPool, di)
		}
	} else {
		// KDA, heads over TP: per-head projections, conv channels and gate
		// parameters split, the low-rank f_a/g_a projections and the
		// per-head o_norm replicated, o_proj row-parallel.
		part = partKDA
		h, k, w := c.LinearNumHeads, c.LinearHeadDim, c.LinearConvKernelDim
		hk := h * k
		heads := colwise(h, k)
		for _, q := range []string{"q", "k", "v"} {
			add(a+q+"_proj.weight", true, true, heads, hk, D)
		}
		if f.FusedConv {
			add(a+"conv1d.weight", false, false, Shard{Kind: SplitHeads, Units: h, Per: k, Groups: 3}, 3*hk, 1, w)
		} else {
			for _, q := range []string{"q", "k", "v"} {
				add(a+q+"_conv1d.weight", false, false, heads, hk, 1, w)
			}
		}
		fg := a
		if f.ForgetGate {
			fg = a + "forget_gate."
		}
		add(fg+"f_a_proj.weight", true, false, replicatedShard, k, D)
		add(fg+"f_b_proj.weight", true, false, heads, hk, k)
		add(fg+"dt_bias", false, false, heads, hk)
		add(fg+"A_log", false, false, colwise(h, 1), h)
		add(a+"b_proj.weight", true, false, colwise(h, 1), h, D)
		add(a+"g_a_proj.weight", true, false, replicatedShard, k, D)
		add(a+"g_b_proj.weight", true, false, heads, hk, k)
		add(a+"o_norm.weight", false, false, replicatedShard, k)
		add(a+"o_proj.weight", true, true, rowwise(1, h, k), D, hk)
	}
	mp := p + "mlp."
	if c.IsMoE(l) {
		e, im := c.NRoutedExperts, c.MoEIntermediateSize
		part = partRouter
		add(mp+"gate.weight", false, false, replicatedShard, e, D)
		add(mp+"gate.e_score_correction_bias", false, false, replicatedShard, e)
		// Routed experts: expert-parallel, or each expert TP-sharded
		// (moe_tp_experts: gate/up colwise, down rowwise).
		part = partRoutedExperts
		routed := func(name string, expert int, stacked bool, sh Shard, shape ...int) {
			add(name, true, true, sh, shape...)
			s[len(s)-1].Routed, s[len(s)-1].Expert, s[len(s)-1].Stacked = true, expert, stacked
		}
		if f.FusedExperts {
			routed(mp+"experts.gate_up_proj", -1, true, Shard{Kind: SplitHeads, Dim: 1, Units: im, Per: 1, Groups: 2}, e, 2*im, D)
			routed(mp+"experts.down_proj", -1, true, rowwise(2, im, 1), e, D, im)
		} else {
			for x := range e {
				ep := fmt.Sprintf("%sexperts.%d.", mp, x)
				routed(ep+"gate_proj.weight", x, false, colwise(im, 1), im, D)
				routed(ep+"up_proj.weight", x, false, colwise(im, 1), im, D)
				routed(ep+"down_proj.weight", x, false, rowwise(1, im, 1), D, im)
			}
		}
		if ish := im * c.NSharedExperts; ish > 0 {
			part = partSharedExperts
			add(mp+"shared_experts.gate_proj.weight", true, true, colwise(ish, 1), ish, D)
			add(mp+"shared_experts.up_proj.weight", true, true, colwise(ish, 1), ish, D)
			add(mp+"shared_experts.down_proj.weight", true, true, rowwise(1, ish, 1), D, ish)
		}
	} else {
		part = partDenseMLP
		i := c.IntermediateSize
		add(mp+"gate_proj.weight", true, true, colwise(i, 1), i, D)
		add(mp+"up_proj.weight", true, true, colwise(i, 1), i, D)
		add(mp+"down_proj.weight", true, true, rowwise(1, i, 1), D, i)
	}
	return s
}

// TPSize is a size the TP size must divide, named for messages.
type TPSize struct {
	What string
	N    int
}

// TPSizes lists the sizes the table's SplitHeads rules split over TP (the
// routed experts' intermediate size only without expert parallelism,
// when each expert is split): what the planner and the model check a TP
// size against.
func (c *ModelConfig) TPSizes(ep bool) []TPSize {
	s := []TPSize{
		{"num_attention_heads", c.NumAttentionHeads},
		{"linear_attn_config.num_heads (KDA heads)", c.LinearNumHeads},
		{"intermediate_size (dense MLP)", c.IntermediateSize},
		{"the shared experts' intermediate size", c.MoEIntermediateSize * c.NSharedExperts},
	}
	if !ep {
		s = append(s, TPSize{"moe_intermediate_size (routed experts without expert parallelism)", c.MoEIntermediateSize})
	}
	return s
}

// Cache tensor names (CacheTensor.Name).
const (
	CacheLatent     = "latent"      // DSA: normalised MLA latent, kv_lora_rank per token
	CacheIndexKeys  = "index_keys"  // full-indexer DSA: raw indexer key per token
	CacheIndexGates = "index_gates" // full-indexer DSA: pooling gate logits per token
	CachePooled     = "pooled"      // full-indexer DSA: pooled key per index_kpool tokens
	CacheConv       = "conv"        // KDA: last W-1 pre-conv q|k|v inputs per sequence
	CacheState      = "state"       // KDA: fp32 recurrent state per sequence
)

// CacheTensor is one tensor of a rank's cache.
type CacheTensor struct {
	Name  string
	Layer int // decoder layer (NumHiddenLayers+i: MTP layer i)
	// PerToken: one row per token slot, or per Pool token slots (pooled
	// keys); otherwise one row per state slot.
	PerToken bool
	Pool     int
	// Row is the shape of one row.
	Row []int
	// F32 marks the KDA state, float32 whatever the cache dtype.
	F32 bool
}

// RowElems is the element count of one row.
func (t CacheTensor) RowElems() int64 { return numel(t.Row) }

// CacheTensors lists the cache of one rank of tp TP ranks (which split the
// KDA heads; the DSA latent and indexer keys are not split), layer by
// layer, then the DSA caches of the mtp MTP layers the model runs (DSA
// layers with their own indexer).
func (c *ModelConfig) CacheTensors(tp, mtp int) []CacheTensor {
	tp = max(tp, 1)
	var s []CacheTensor
	r, di, kp := c.KVLoraRank, c.IndexHeadDim, max(c.IndexKPool, 1)
	for l := range c.NumHiddenLayers + max(mtp, 0) {
		if l >= c.NumHiddenLayers || c.IsDSA(l) {
			s = append(s, CacheTensor{Name: CacheLatent, Layer: l, PerToken: true, Pool: 1, Row: []int{r}})
			if !c.SharedIndexer(l) {
				s = append(s,
					CacheTensor{Name: CacheIndexKeys, Layer: l, PerToken: true, Pool: 1, Row: []int{di}},
					CacheTensor{Name: CacheIndexGates, Layer: l, PerToken: true, Pool: 1, Row: []int{di}},
					CacheTensor{Name: CachePooled, Layer: l, PerToken: true, Pool: kp, Row: []int{di}})
			}
			continue
		}
		h, k, w := c.LinearNumHeads/tp, c.LinearHeadDim, c.LinearConvKernelDim
		s = append(s,
			CacheTensor{Name: CacheConv, Layer: l, Row: []int{w - 1, 3 * h * k}, F32: true},
			CacheTensor{Name: CacheState, Layer: l, Row: []int{h, k, k}, F32: true})
	}
	return s
}
