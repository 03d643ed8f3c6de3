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

// ParamCount counts the model's parameters by part, summing the tensor
// table (Tensors and MTPTensors; the fused-experts form, whose counts are
// the official form's, keeps it to a few tensors per layer kind).
func (c *ModelConfig) ParamCount() ParamCount {
	var p ParamCount
	f := c.OfficialForm()
	f.FusedExperts = true
	e, k := int64(max(c.NRoutedExperts, 1)), int64(c.NumExpertsPerTok)
	var routed, mtpRouted int64
	c.eachTensorKind(f, func(t TensorSpec, layers int64) {
		n := t.Params() * layers
		if t.MTP {
			p.MTP += n
			if t.Routed {
				mtpRouted += n
			}
			return
		}
		switch t.Part {
		case partEmbed:
			p.Embed += n
		case partLMHead:
			p.LMHead += n
		case partKDA:
			p.KDA += n
		case partMLA:
			p.DSA += n
		case partIndexer:
			p.DSA += n
			p.Indexer += n
		case partDenseMLP:
			p.DenseMLP += n
		case partRouter, partSharedExperts:
			p.MoE += n
			p.MoEActive += n
		case partRoutedExperts:
			p.MoE += n
			routed += n
		case partMHC:
			p.MHC += n
		case partNorms:
			p.Norms += n
		}
	})
	// One token runs num_experts_per_tok of the routed experts.
	p.MoEActive += routed / e * k
	p.MTPActive = p.MTP - mtpRouted + mtpRouted/e*k
	p.Total = p.Embed + p.LMHead + p.KDA + p.DSA + p.DenseMLP + p.MoE + p.MHC + p.Norms
	// The lm_head matmul counts even when tied; the embedding lookup not.
	p.Active = int64(c.VocabSize)*int64(c.HiddenSize) + p.KDA + p.DSA + p.DenseMLP + p.MoEActive + p.MHC + p.Norms
	p.TotalWithMTP = p.Total + p.MTP
	p.ActiveWithMTP = p.Active + p.MTPActive
	return p
}
