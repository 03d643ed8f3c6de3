// Package config holds the model configuration read from a checkpoint's
// config.json and (later) the engine's settings from flags and files.
package config

import (
	"bytes"
	"encoding/json"
)

// Layer kinds in ModelConfig.LayerTypes.
const (
	LayerKDA = "linear_attention"          // Kimi Delta Attention
	LayerDSA = "deepseek_sparse_attention" // NoPE MLA with the k-pool indexer
)

// ModelConfig is the glm5_next text model configuration: every structural
// knob the engine reads. Field names follow config.json.
type ModelConfig struct {
	ModelType     string   `json:"model_type"`
	Architectures []string `json:"architectures"`

	VocabSize             int     `json:"vocab_size"`
	HiddenSize            int     `json:"hidden_size"`
	IntermediateSize      int     `json:"intermediate_size"`
	MoEIntermediateSize   int     `json:"moe_intermediate_size"`
	NumHiddenLayers       int     `json:"num_hidden_layers"`
	NumAttentionHeads     int     `json:"num_attention_heads"`
	NumKeyValueHeads      int     `json:"num_key_value_heads"`
	MaxPositionEmbeddings int     `json:"max_position_embeddings"`
	RMSNormEps            float64 `json:"rms_norm_eps"`
	HiddenAct             string  `json:"hidden_act"`
	SwigluLimit           float64 `json:"swiglu_limit"`
	AttentionBias         bool    `json:"attention_bias"`
	TieWordEmbeddings     bool    `json:"tie_word_embeddings"`
	PadTokenID            *int    `json:"pad_token_id"`
	BOSTokenID            *int    `json:"bos_token_id"`
	EOSTokenID            IntList `json:"eos_token_id"`
	Dtype                 string  `json:"dtype"`

	// MoE
	FirstKDenseReplace  int      `json:"first_k_dense_replace"`
	MLPLayerTypes       []string `json:"mlp_layer_types"` // "dense" | "sparse"
	NRoutedExperts      int      `json:"n_routed_experts"`
	NSharedExperts      int      `json:"n_shared_experts"`
	NumExpertsPerTok    int      `json:"num_experts_per_tok"`
	ScoringFunc         string   `json:"scoring_func"`
	TopkMethod          string   `json:"topk_method"`
	NormTopkProb        bool     `json:"norm_topk_prob"`
	RoutedScalingFactor float64  `json:"routed_scaling_factor"`
	NGroup              int      `json:"n_group"`
	TopkGroup           int      `json:"topk_group"`

	// MLA
	QLoraRank     int `json:"q_lora_rank"`
	KVLoraRank    int `json:"kv_lora_rank"`
	QKNopeHeadDim int `json:"qk_nope_head_dim"`
	QKRopeHeadDim int `json:"qk_rope_head_dim"`
	VHeadDim      int `json:"v_head_dim"`

	// DSA indexer
	IndexNHeads                int      `json:"index_n_heads"`
	IndexHeadDim               int      `json:"index_head_dim"`
	IndexTopk                  int      `json:"index_topk"`
	IndexKPool                 int      `json:"index_kpool"`
	IndexKPoolAlwaysSelectTail bool     `json:"index_kpool_always_select_tail"`
	IndexerTypes               []string `json:"indexer_types"` // "full" | "shared"

	// Layer schedule
	LayerTypes []string `json:"layer_types"`

	// KDA (flattened HF names; linear_attn_config overrides them)
	LinearNumHeads      int      `json:"linear_num_heads"`
	LinearHeadDim       int      `json:"linear_head_dim"`
	LinearConvKernelDim int      `json:"linear_conv_kernel_dim"`
	LinearLowerBound    *float64 `json:"linear_lower_bound"` // nil: softplus gate

	// mHC
	HCMult          int     `json:"hc_mult"`
	HCEps           float64 `json:"hc_eps"`
	HCSinkhornIters int     `json:"hc_sinkhorn_iters"`

	// MTP
	NumNextnPredictLayers int `json:"num_nextn_predict_layers"`
	// IndexShareForMTPIteration: MTP draft steps after the first reuse
	// the first step's indexer selection (glm5next-features.md §2.1).
	IndexShareForMTPIteration bool `json:"index_share_for_mtp_iteration"`

	// Top-level (multimodal wrapper) fields kept for later parts.
	ImageTokenID int             `json:"-"`
	Vision       json.RawMessage `json:"-"`
	// Nested is true when config.json had a text_config section.
	Nested bool `json:"-"`
}

// IntList accepts a JSON int or list of ints (eos_token_id).
type IntList []int

// UnmarshalJSON accepts null, an int or an array of ints.
func (l *IntList) UnmarshalJSON(b []byte) error {
	if string(bytes.TrimSpace(b)) == "null" {
		*l = nil
		return nil
	}
	var one int
	if err := json.Unmarshal(b, &one); err == nil {
		*l = IntList{one}
		return nil
	}
	var many []int
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	*l = many
	return nil
}
