package config

// ParamCount is the parameter count implied by a ModelConfig, used for
// memory planning, logs and as a cross-check that a checkpoint matches its
// config. The formulas follow glm5next-architecture.md §6.1; they count
// elements, not bytes (FP8 scale tensors are not parameters).
//
// "Main" is the served model: embedding, layers [0, num_hidden_layers),
// final norm and lm_head. MTP layers are counted separately.
type ParamCount struct {
	// Total is every parameter of the main model.
	Total int64
	// Active is what one token touches in the main model's matmuls and
	// norms: Total minus the embedding table and the routed experts not
	// selected (the lm_head matmul counts even when tied).
	Active int64

	Embed    int64 // embed_tokens
	LMHead   int64 // lm_head (0 when tied to the embedding)
	KDA      int64 // all KDA attention blocks
	DSA      int64 // all DSA attention blocks, indexers included
	Indexer  int64 // the indexer part of DSA
	DenseMLP int64 // dense MLP layers
	MoE      int64 // MoE layers: routed + shared experts, router gate and bias
	// MoEActive is the per-token part of MoE: num_experts_per_tok routed
	// experts, the shared experts and the router.
	MoEActive int64
	MHC       int64 // mHC fn/base/scale of both sites of every layer
	Norms     int64 // input/post-attention norms of every layer + final norm

	// MTP is all num_nextn_predict_layers MTP layers (DSA + MoE + norms +
	// enorm/hnorm/eh_proj/shared_head.norm; embedding and head are shared).
	MTP       int64
	MTPActive int64

	TotalWithMTP  int64 // Total + MTP: the whole text model
	ActiveWithMTP int64 // Active + MTPActive
}

// Per-block parameter counts, exported through ParamCount.

// kdaParams is one KDA attention block.
func (c *ModelConfig) kdaParams() int64 {
	d := int64(c.HiddenSize)
	h, k := int64(c.LinearNumHeads), int64(c.LinearHeadDim)
	hk := h * k
	return 3*hk*d + // q/k/v_proj
		3*hk*int64(c.LinearConvKernelDim) + // q/k/v_conv1d
		k*d + hk*k + // f_a_proj, f_b_proj
		hk + h + // dt_bias, A_log
		h*d + // b_proj
		k*d + hk*k + // g_a_proj, g_b_proj
		k + // o_norm
		d*hk // o_proj
}

// indexerParams is one DSA indexer.
func (c *ModelConfig) indexerParams() int64 {
	d := int64(c.HiddenSize)
	hi, id := int64(c.IndexNHeads), int64(c.IndexHeadDim)
	return int64(c.QLoraRank)*hi*id + // wq_b
		id*d + // wk
		2*id + // k_norm weight, bias
		hi*d + // weights_proj
		id*d + // index_kpool_compress_gate
		int64(c.IndexKPool)*id // index_kpool_compress_ape
}

// mlaParams is one DSA attention block without its indexer.
func (c *ModelConfig) mlaParams() int64 {
	d := int64(c.HiddenSize)
	h := int64(c.NumAttentionHeads)
	q, kv := int64(c.QLoraRank), int64(c.KVLoraRank)
	qk := int64(c.QKNopeHeadDim + c.QKRopeHeadDim)
	return d*q + q + // q_a_proj, q_a_layernorm
		q*h*qk + // q_b_proj
		d*(kv+int64(c.QKRopeHeadDim)) + kv + // kv_a_proj_with_mqa, kv_a_layernorm
		kv*h*int64(c.QKNopeHeadDim+c.VHeadDim) + // kv_b_proj
		h*int64(c.VHeadDim)*d // o_proj
}

// moeParams returns one MoE layer's total and per-token counts.
func (c *ModelConfig) moeParams() (total, active int64) {
	d, e := int64(c.HiddenSize), int64(c.NRoutedExperts)
	expert := 3 * d * int64(c.MoEIntermediateSize)
	router := e*d + e // gate.weight, gate.e_score_correction_bias
	shared := int64(c.NSharedExperts) * expert
	return e*expert + shared + router, int64(c.NumExpertsPerTok)*expert + shared + router
}

// ParamCount counts the model's parameters by part.
func (c *ModelConfig) ParamCount() ParamCount {
	var p ParamCount
	d, v := int64(c.HiddenSize), int64(c.VocabSize)
	n := int64(c.HCMult)
	mix := (2 + n) * n
	mhcLayer := 2 * (mix*n*d + mix + 3)
	moeTotal, moeActive := c.moeParams()
	dense := 3 * d * int64(c.IntermediateSize)

	p.Embed = v * d
	if !c.TieWordEmbeddings {
		p.LMHead = v * d
	}
	for l := range c.NumHiddenLayers {
		if c.IsDSA(l) {
			p.DSA += c.mlaParams()
			if !c.SharedIndexer(l) {
				p.DSA += c.indexerParams()
				p.Indexer += c.indexerParams()
			}
		} else {
			p.KDA += c.kdaParams()
		}
		if c.IsMoE(l) {
			p.MoE += moeTotal
			p.MoEActive += moeActive
		} else {
			p.DenseMLP += dense
		}
		p.MHC += mhcLayer
		p.Norms += 2 * d
	}
	p.Norms += d // final norm
	p.Total = p.Embed + p.LMHead + p.KDA + p.DSA + p.DenseMLP + p.MoE + p.MHC + p.Norms
	p.Active = v*d + p.KDA + p.DSA + p.DenseMLP + p.MoEActive + p.MHC + p.Norms

	// An MTP layer: DSA attention (own indexer) + MoE, plain pre-norm
	// residual (no mHC), enorm, hnorm, eh_proj [D, 2D], shared_head.norm.
	mtpFixed := c.mlaParams() + c.indexerParams() + 2*d + 2*d + 2*d*d + d
	k := int64(c.NumNextnPredictLayers)
	p.MTP = k * (mtpFixed + moeTotal)
	p.MTPActive = k * (mtpFixed + moeActive)
	p.TotalWithMTP = p.Total + p.MTP
	p.ActiveWithMTP = p.Active + p.MTPActive
	return p
}
