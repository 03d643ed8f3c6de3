package config

// The weight inventory: every tensor of the text model (and of its MTP
// layers) as the loader sees it, with how tensor parallelism shards it and
// whether quantized checkpoints store it quantized. The plan sums it per
// rank; a test checks that it adds up to ParamCount.

// shard is how one tensor is split over the TP ranks of a DP rank.
type shard uint8

const (
	replicated shard = iota // every TP rank holds it
	colwise                 // output rows split over TP
	rowwise                 // input columns split over TP
	vocabRows               // vocabulary rows split over TP when TP divides the vocabulary, else replicated
)

// Plan part names (PlanPart.Name).
const (
	partEmbed         = "embed_tokens"
	partLMHead        = "lm_head"
	partKDA           = "kda_attention"
	partMLA           = "dsa_attention"
	partIndexer       = "dsa_indexer"
	partDenseMLP      = "dense_mlp"
	partRouter        = "moe_router"
	partRoutedExperts = "routed_experts"
	partSharedExperts = "shared_experts"
	partMHC           = "mhc"
	partNorms         = "norms"
)

// partOrder is the order of PlanWeights.Parts.
var partOrder = []string{partEmbed, partLMHead, partKDA, partMLA, partIndexer, partDenseMLP,
	partRouter, partRoutedExperts, partSharedExperts, partMHC, partNorms}

// tensorGroup is identical tensors: one per layer (layers of them), or one
// per layer and routed expert (layers×experts).
type tensorGroup struct {
	part    string
	name    string
	layers  int64
	experts int64 // routed experts per layer (0: not a routed-expert tensor)
	rows    int64 // output features (or the only dimension)
	cols    int64 // input features (1 for vectors)
	matrix  bool  // a matmul weight: the CPU loader keeps its dtype, other tensors are F32
	quant   bool  // stored quantized by w8a8 / mxfp8 / fp8 checkpoints
	shard   shard // split over TP (routed experts: see perRank)
	mtp     bool  // belongs to an MTP layer
}

// params is the group's parameter count.
func (g tensorGroup) params() int64 {
	n := g.layers * g.rows * g.cols
	if g.experts > 0 {
		n *= g.experts
	}
	return n
}

// inventory lists the model's tensors. Counts follow the loader's specs
// (engine/model/glm5next) and glm5next-architecture.md §6.1.
func inventory(c *ModelConfig) []tensorGroup {
	var gs []tensorGroup
	d := int64(c.HiddenSize)
	v := int64(c.VocabSize)
	n := int64(c.HCMult)
	mix := (2 + n) * n
	h, k := int64(c.LinearNumHeads), int64(c.LinearHeadDim)
	hk := h * k
	ha := int64(c.NumAttentionHeads)
	dk := int64(c.QKNopeHeadDim + c.QKRopeHeadDim)
	qr, r := int64(c.QLoraRank), int64(c.KVLoraRank)
	hi, di := int64(c.IndexNHeads), int64(c.IndexHeadDim)
	e := int64(c.NRoutedExperts)
	im := int64(c.MoEIntermediateSize)
	ish := im * int64(c.NSharedExperts)
	add := func(g tensorGroup) {
		if g.layers > 0 && g.rows > 0 && g.cols > 0 {
			gs = append(gs, g)
		}
	}
	var kda, dsaOwn, dsaShared, dense, moe int64
	for l := range c.NumHiddenLayers {
		switch {
		case c.IsDSA(l) && c.SharedIndexer(l):
			dsaShared++
		case c.IsDSA(l):
			dsaOwn++
		default:
			kda++
		}
		if c.IsMoE(l) {
			moe++
		} else {
			dense++
		}
	}
	layers := int64(c.NumHiddenLayers)
	mtp := int64(c.NumNextnPredictLayers)

	add(tensorGroup{part: partEmbed, name: "embed_tokens", layers: 1, rows: v, cols: d, matrix: true, shard: vocabRows})
	if !c.TieWordEmbeddings {
		add(tensorGroup{part: partLMHead, name: "lm_head", layers: 1, rows: v, cols: d, matrix: true, shard: vocabRows})
	}
	// KDA: heads over TP (issue 4; glm5_next's base_model_tp_plan leaves
	// KDA out): per-head projections, conv channels and gate parameters
	// split, the low-rank f_a/g_a projections and the per-head o_norm
	// replicated, o_proj row-parallel (engine/model/glm5next.Parallel).
	for _, x := range []struct {
		name       string
		rows, cols int64
		matrix     bool
		quant      bool
		shard      shard
	}{
		{"q_proj+k_proj+v_proj", 3 * hk, d, true, true, colwise},
		{"q/k/v_conv1d", 3 * hk, int64(c.LinearConvKernelDim), false, false, colwise},
		{"f_a_proj", k, d, true, false, replicated},
		{"f_b_proj", hk, k, true, false, colwise},
		{"dt_bias", hk, 1, false, false, colwise},
		{"A_log", h, 1, false, false, colwise},
		{"b_proj", h, d, true, false, colwise},
		{"g_a_proj", k, d, true, false, replicated},
		{"g_b_proj", hk, k, true, false, colwise},
		{"o_norm", k, 1, false, false, replicated},
		{"o_proj", d, hk, true, true, rowwise},
	} {
		add(tensorGroup{part: partKDA, name: x.name, layers: kda, rows: x.rows, cols: x.cols, matrix: x.matrix, quant: x.quant, shard: x.shard})
	}
	// DSA (NoPE MLA): base_model_tp_plan shards q_b_proj and kv_b_proj
	// colwise and o_proj rowwise (heads split); kv_a_proj_with_mqa
	// ("mla_kv_a_proj") and the rest stay whole.
	mla := func(layers int64, isMTP bool) {
		for _, x := range []struct {
			name       string
			rows, cols int64
			matrix     bool
			quant      bool
			shard      shard
		}{
			{"q_a_proj", qr, d, true, true, replicated},
			{"q_a_layernorm", qr, 1, false, false, replicated},
			{"q_b_proj", ha * dk, qr, true, true, colwise},
			{"kv_a_proj_with_mqa", r + int64(c.QKRopeHeadDim), d, true, true, replicated},
			{"kv_a_layernorm", r, 1, false, false, replicated},
			{"kv_b_proj", ha * int64(c.QKNopeHeadDim+c.VHeadDim), r, true, true, colwise},
			{"o_proj", d, ha * int64(c.VHeadDim), true, true, rowwise},
		} {
			add(tensorGroup{part: partMLA, name: x.name, layers: layers, rows: x.rows, cols: x.cols, matrix: x.matrix, quant: x.quant, shard: x.shard, mtp: isMTP})
		}
	}
	// The indexer is not in the tp_plan: replicated.
	indexer := func(layers int64, isMTP bool) {
		for _, x := range []struct {
			name       string
			rows, cols int64
			matrix     bool
			quant      bool
		}{
			{"wq_b", hi * di, qr, true, true},
			{"wk", di, d, true, true},
			{"k_norm weight+bias", 2 * di, 1, false, false},
			{"weights_proj", hi, d, true, false},
			{"index_kpool_compress_gate", di, d, true, false},
			{"index_kpool_compress_ape", int64(c.IndexKPool), di, false, false},
		} {
			add(tensorGroup{part: partIndexer, name: x.name, layers: layers, rows: x.rows, cols: x.cols, matrix: x.matrix, quant: x.quant, shard: replicated, mtp: isMTP})
		}
	}
	mla(dsaOwn+dsaShared, false)
	indexer(dsaOwn, false)
	// Dense MLP: gate/up colwise, down rowwise.
	add(tensorGroup{part: partDenseMLP, name: "gate_proj+up_proj", layers: 2 * dense, rows: int64(c.IntermediateSize), cols: d, matrix: true, quant: true, shard: colwise})
	add(tensorGroup{part: partDenseMLP, name: "down_proj", layers: dense, rows: d, cols: int64(c.IntermediateSize), matrix: true, quant: true, shard: rowwise})
	moeLayer := func(layers int64, isMTP bool) {
		add(tensorGroup{part: partRouter, name: "gate", layers: layers, rows: e, cols: d, shard: replicated, mtp: isMTP})
		add(tensorGroup{part: partRouter, name: "e_score_correction_bias", layers: layers, rows: e, cols: 1, shard: replicated, mtp: isMTP})
		// Routed experts: expert-parallel, or each expert TP-sharded
		// (moe_tp_experts: gate_up packed colwise, down rowwise).
		add(tensorGroup{part: partRoutedExperts, name: "experts.gate_proj+up_proj", layers: 2 * layers, experts: e, rows: im, cols: d, matrix: true, quant: true, shard: colwise, mtp: isMTP})
		add(tensorGroup{part: partRoutedExperts, name: "experts.down_proj", layers: layers, experts: e, rows: d, cols: im, matrix: true, quant: true, shard: rowwise, mtp: isMTP})
		add(tensorGroup{part: partSharedExperts, name: "shared_experts.gate_proj+up_proj", layers: 2 * layers, rows: ish, cols: d, matrix: true, quant: true, shard: colwise, mtp: isMTP})
		add(tensorGroup{part: partSharedExperts, name: "shared_experts.down_proj", layers: layers, rows: d, cols: ish, matrix: true, quant: true, shard: rowwise, mtp: isMTP})
	}
	moeLayer(moe, false)
	add(tensorGroup{part: partMHC, name: "hc_attn/hc_ffn fn", layers: 2 * layers, rows: mix, cols: n * d, shard: replicated})
	add(tensorGroup{part: partMHC, name: "hc_attn/hc_ffn base+scale", layers: 2 * layers, rows: mix + 3, cols: 1, shard: replicated})
	add(tensorGroup{part: partNorms, name: "input/post_attention_layernorm", layers: 2 * layers, rows: d, cols: 1, shard: replicated})
	add(tensorGroup{part: partNorms, name: "norm", layers: 1, rows: d, cols: 1, shard: replicated})

	// MTP layers: DSA attention with its own indexer, MoE, plain norms,
	// enorm/hnorm, eh_proj [D, 2D] and shared_head.norm; the embedding and
	// head are the main model's.
	if mtp > 0 {
		mla(mtp, true)
		indexer(mtp, true)
		moeLayer(mtp, true)
		add(tensorGroup{part: partNorms, name: "mtp input/post_attention_layernorm, enorm, hnorm, shared_head.norm", layers: 5 * mtp, rows: d, cols: 1, mtp: true})
		add(tensorGroup{part: partMLA, name: "mtp eh_proj", layers: mtp, rows: d, cols: 2 * d, matrix: true, quant: true, mtp: true})
	}
	return gs
}
