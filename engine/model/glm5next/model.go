// Package glm5next is the GLM-5.3-Flash (model_type glm5_next) text model:
// weights, per-layer caches and the batched forward pass, written against
// the npu op interface only. It computes what transformers'
// Glm5NextTextModel + lm_head compute (see
// shared/docs/glm5next-architecture.md §3–§4): mHC residual streams, Kimi
// Delta Attention (KDA) layers, DeepSeek sparse attention (DSA: NoPE MLA
// with the k-pool indexer) layers, dense and MoE MLPs.
package glm5next

import (
	"fmt"
	"math"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/safetensors"
	"github.com/npuserve/npuserve/npu"
)

// Model holds one rank's weights and the constants of the forward pass.
// Forward is not safe for concurrent use: it reuses scratch buffers.
type Model struct {
	be  npu.Backend
	cfg *config.ModelConfig
	d   dims

	embed  *npu.Tensor // [V, D]
	norm   *npu.Tensor // [D]
	lmHead *linear     // [V, D] (the embedding when tied)
	layers []*layer
	mtp    *mtpWeights // the MTP draft layer (nil: not loaded)
	// mtpVocab: the MTP layer's embedding lookup on a vocabulary-parallel
	// rank (made at its first forward).
	mtpVocab *mtpVocab

	hc     npu.HCParams
	gate   npu.KDAGateParams
	index  npu.IndexParams
	router npu.RouterParams

	ws    scratch
	ck    *safetensors.Checkpoint // the mapped checkpoint Load read (nil for NewRandom)
	par   *parallel               // tensor/expert-parallel placement (nil: single rank)
	owned []*npu.Tensor           // every weight tensor to free on Close

	// cacheDT is the per-token cache's element type.
	cacheDT npu.DType

	// hostWords is the reused host buffer of the step's batch upload.
	hostWords []int32

	// observeLinear is the running batch's ObserveLinear hook.
	observeLinear func(modules []string, x *npu.Tensor)

	// graphs are the decode graphs (CaptureDecodeGraphs), nil when none.
	graphs *graphRunner

	// pending is the engine's speculative step between SpecForward and
	// SpecCommit.
	pending *specPending
	// kdaCap, while set, makes forward keep every KDA layer's per-row
	// inputs (the verify forward of a speculative step; see replayKDA).
	kdaCap *kdaCapture

	// noMTPIndexShare turns index_share_for_mtp_iteration off (tests
	// against the unshared reference chain).
	noMTPIndexShare bool
}

// dims are the sizes the forward pass uses, derived from the config.
type dims struct {
	D, V   int // hidden size, vocabulary
	n, mix int // mHC streams, (2+n)*n mixing logits

	H, K, W int // KDA heads, head dim (keys and values), conv width

	HA, Dk, Dv int // MLA heads, query/key head dim (NoPE + RoPE), value head dim
	QR, R      int // q_lora_rank, kv_lora_rank (the cached latent)

	Hi, Di  int // indexer heads, indexer head dim
	KPool   int // tokens per pooled indexer key
	SelW    int // width of a selection row: index_topk (+ kpool-1 with tail)
	Tail    bool
	IdxEps  float32
	RMSEps  float32
	Limit   float32 // swiglu_limit
	I       int     // dense MLP intermediate size
	E, TopK int     // routed experts, experts per token
	Im      int     // routed expert intermediate size
	Ish     int     // shared experts' intermediate size (0: none)
}

func newDims(c *config.ModelConfig) dims {
	d := dims{
		D: c.HiddenSize, V: c.VocabSize, n: c.HCMult, mix: (2 + c.HCMult) * c.HCMult,
		H: c.LinearNumHeads, K: c.LinearHeadDim, W: c.LinearConvKernelDim,
		HA: c.NumAttentionHeads, Dk: c.QKNopeHeadDim + c.QKRopeHeadDim, Dv: c.VHeadDim,
		QR: c.QLoraRank, R: c.KVLoraRank,
		Hi: c.IndexNHeads, Di: c.IndexHeadDim, KPool: c.IndexKPool,
		Tail:   c.IndexKPoolAlwaysSelectTail,
		IdxEps: 1e-6, // the indexer's k_norm is a LayerNorm with eps 1e-6 (HF-G5)
		RMSEps: float32(c.RMSNormEps),
		Limit:  float32(c.SwigluLimit),
		I:      c.IntermediateSize,
		E:      c.NRoutedExperts, TopK: c.NumExpertsPerTok,
		Im: c.MoEIntermediateSize, Ish: c.MoEIntermediateSize * c.NSharedExperts,
	}
	d.SelW = c.IndexTopk
	if d.Tail {
		d.SelW += d.KPool - 1
	}
	return d
}

// layer is one decoder layer's weights. Exactly one of kda/mla is set, and
// one of mlp/moe.
type layer struct {
	index            int
	hcAttn, hcFFN    hcWeights
	inNorm, postNorm *npu.Tensor // [D]
	kda              *kdaWeights
	mla              *mlaWeights
	mlp              *mlpWeights
	moe              *moeWeights
}

type hcWeights struct {
	fn    *npu.Tensor // [mix, n*D]
	base  *npu.Tensor // [mix]
	scale *npu.Tensor // [3]
}

type kdaWeights struct {
	qkv    *linear     // [3HK, D]: q_proj | k_proj | v_proj
	conv   *npu.Tensor // [3HK, W]: q | k | v depthwise conv taps
	fA, fB *linear     // forget gate low-rank projection [K, D], [HK, K]
	dtBias *npu.Tensor // [HK]
	aLog   *npu.Tensor // [H]
	b      *linear     // beta projection [H, D]
	gA, gB *linear     // output gate low-rank projection [K, D], [HK, K]
	oNorm  *npu.Tensor // [K]
	o      *linear     // [D, HK]
}

type mlaWeights struct {
	qA, qB  *linear     // [QR, D], [HA*Dk, QR]
	qANorm  *npu.Tensor // [QR]
	kvA     *linear     // [R, D]
	kvANorm *npu.Tensor // [R]
	kvB     *npu.Tensor // [HA*(Dk+Dv), R] (absorbed by SparseMLA: always float)
	o       *linear     // [D, HA*Dv]
	idx     *indexerWeights
}

// indexerWeights is nil on "shared" layers, which reuse the previous
// layer's selection.
type indexerWeights struct {
	wqB          *linear     // [Hi*Di, QR]
	wk           *linear     // [Di, D]
	kNormW       *npu.Tensor // [Di]
	kNormB       *npu.Tensor // [Di]
	weightsProj  *linear     // [Hi, D]
	gate         *linear     // index_kpool_compress_gate [Di, D]
	ape          *npu.Tensor // index_kpool_compress_ape [KPool, Di]
	weightsScale float32     // Hi^-0.5
}

type mlpWeights struct {
	gateUp *linear // [2I, D]: gate rows then up rows
	down   *linear // [D, I]
}

type moeWeights struct {
	gate    *npu.Tensor // router [E, D]
	bias    *npu.Tensor // e_score_correction_bias [E]
	experts experts     // [E, 2Im, D] and [E, D, Im]
	shared  *mlpWeights // nil when n_shared_experts == 0
}

// Config is the model configuration the model was built from.
func (m *Model) Config() *config.ModelConfig { return m.cfg }

// Backend is the backend holding the model's tensors.
func (m *Model) Backend() npu.Backend { return m.be }

// newModel fills the constants shared by Load and NewRandom.
func newModel(be npu.Backend, cfg *config.ModelConfig) (*Model, error) {
	if err := checkConfig(cfg); err != nil {
		return nil, err
	}
	d := newDims(cfg)
	m := &Model{be: be, cfg: cfg, d: d, ws: scratch{be: be}, cacheDT: npu.F32}
	if be.Info().Accelerator {
		m.cacheDT = npu.BF16 // config.CacheDType("auto", ...)
	}
	m.hc = npu.HCParams{Streams: d.n, SinkhornIters: cfg.HCSinkhornIters, Eps: float32(cfg.HCEps), RMSEps: d.RMSEps}
	m.gate = npu.KDAGateParams{HeadDim: d.K}
	if lb := cfg.LinearLowerBound; lb != nil {
		m.gate.HasLowerBound, m.gate.LowerBound = true, float32(*lb)
	}
	m.index = npu.IndexParams{
		TopKPools: cfg.IndexTopk / d.KPool, KPool: d.KPool, Tail: d.Tail,
		Scale: float32(1 / math.Sqrt(float64(d.Di))),
	}
	m.router = npu.RouterParams{
		TopK: d.TopK, NGroup: cfg.NGroup, TopKGroup: cfg.TopkGroup,
		Normalize: cfg.NormTopkProb, Scale: float32(cfg.RoutedScalingFactor),
	}
	return m, nil
}

// checkConfig rejects configurations the forward pass does not implement.
// config.ParseModel already enforces transformers' own rules; this guards
// hand-built configs (NewRandom) too.
func checkConfig(c *config.ModelConfig) error {
	if c == nil {
		return fmt.Errorf("glm5next: nil model config")
	}
	if len(c.LayerTypes) != c.NumHiddenLayers || len(c.MLPLayerTypes) != c.NumHiddenLayers || len(c.IndexerTypes) != c.NumHiddenLayers {
		return fmt.Errorf("glm5next: layer_types/mlp_layer_types/indexer_types must have num_hidden_layers = %d entries (have %d, %d, %d)",
			c.NumHiddenLayers, len(c.LayerTypes), len(c.MLPLayerTypes), len(c.IndexerTypes))
	}
	if c.QKRopeHeadDim != 0 {
		return fmt.Errorf("glm5next: qk_rope_head_dim must be 0 (NoPE attention), got %d", c.QKRopeHeadDim)
	}
	if c.IndexKPool < 1 || c.IndexTopk < c.IndexKPool || c.IndexTopk%c.IndexKPool != 0 {
		return fmt.Errorf("glm5next: index_topk %d must be a positive multiple of index_kpool %d", c.IndexTopk, c.IndexKPool)
	}
	for l := range c.NumHiddenLayers {
		if c.SharedIndexer(l) {
			prev := -1
			for p := l - 1; p >= 0; p-- {
				if c.IsDSA(p) {
					prev = p
					break
				}
			}
			if prev < 0 {
				return fmt.Errorf("glm5next: layer %d shares the indexer selection but no DSA layer precedes it", l)
			}
		}
	}
	if c.NumExpertsPerTok > c.NRoutedExperts && hasMoE(c) {
		return fmt.Errorf("glm5next: num_experts_per_tok %d exceeds n_routed_experts %d", c.NumExpertsPerTok, c.NRoutedExperts)
	}
	return nil
}

func hasMoE(c *config.ModelConfig) bool {
	for l := range c.NumHiddenLayers {
		if c.IsMoE(l) {
			return true
		}
	}
	return false
}
