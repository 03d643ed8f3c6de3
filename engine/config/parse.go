package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Model types accepted in config.json.
const (
	ModelTypeGlm5Next     = "glm5_next"      // multimodal wrapper (nested or flat)
	ModelTypeGlm5NextText = "glm5_next_text" // text model (text_config, or a flat text-only file)
)

// MLP and indexer kinds in ModelConfig.MLPLayerTypes and IndexerTypes.
const (
	MLPDense  = "dense"
	MLPSparse = "sparse"

	IndexerFull   = "full"   // the layer runs its own indexer
	IndexerShared = "shared" // the layer reuses the previous layer's top-k
)

// DefaultImageTokenID is Glm5NextConfig's image_token_id default, used when
// config.json does not say.
const DefaultImageTokenID = 154854

// maxLayers bounds num_hidden_layers before per-layer defaults are built,
// so a hostile config cannot make the parser allocate without bound.
const maxLayers = 1 << 16

// LoadModel reads dir/config.json. Every error names the file.
func LoadModel(dir string) (*ModelConfig, error) {
	path := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("model config: %w", err) // *PathError names the file
	}
	c, err := ParseModel(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseModel parses a glm5_next config.json, applies the defaults of
// transformers' Glm5NextTextConfig (dataclass defaults and __post_init__)
// for missing fields and validates the result for the engine.
//
// Two shapes are accepted: nested (model_type "glm5_next" with the text
// fields under text_config, model_type "glm5_next_text") and flat (the text
// fields at the top level, model_type "glm5_next" or "glm5_next_text").
// ModelType and Architectures are the top-level values.
func ParseModel(data []byte) (*ModelConfig, error) {
	top, err := object(data)
	if err != nil {
		return nil, err
	}
	topType, err := str(top, "model_type")
	if err != nil {
		return nil, err
	}
	if topType == nil {
		return nil, errors.New("missing model_type: npuserve serves glm5_next")
	}
	if *topType != ModelTypeGlm5Next && *topType != ModelTypeGlm5NextText {
		return nil, fmt.Errorf("unsupported model_type %q: npuserve serves glm5_next", *topType)
	}

	textRaw := data
	text := top
	nested := !isNull(top["text_config"])
	if nested {
		if *topType != ModelTypeGlm5Next {
			return nil, fmt.Errorf("model_type %q has a text_config section: only a %q config nests its text model", *topType, ModelTypeGlm5Next)
		}
		textRaw = top["text_config"]
		if text, err = object(textRaw); err != nil {
			return nil, fmt.Errorf("text_config: %w", err)
		}
		tt, err := str(text, "model_type")
		if err != nil {
			return nil, fmt.Errorf("text_config: %w", err)
		}
		if tt != nil && *tt != ModelTypeGlm5NextText {
			return nil, fmt.Errorf("unsupported text_config.model_type %q: npuserve serves glm5_next (text model %s)", *tt, ModelTypeGlm5NextText)
		}
	}

	c, err := parseText(textRaw, text)
	if err != nil {
		if nested {
			return nil, fmt.Errorf("text_config: %w", err)
		}
		return nil, err
	}
	c.ModelType = *topType
	c.Nested = nested
	c.Architectures = nil
	if err := decodeField(top, "architectures", &c.Architectures); err != nil {
		return nil, err
	}
	if nested {
		// The wrapper's own fields live at the top level.
		if err := decodeField(top, "tie_word_embeddings", &c.TieWordEmbeddings); err != nil {
			return nil, err
		}
		if c.Dtype == "" {
			if err := dtypeField(top, &c.Dtype); err != nil {
				return nil, err
			}
		}
	}
	c.ImageTokenID = DefaultImageTokenID
	if err := decodeField(top, "image_token_id", &c.ImageTokenID); err != nil {
		return nil, err
	}
	if v := top["vision_config"]; !isNull(v) {
		if _, err := object(v); err != nil {
			return nil, fmt.Errorf("vision_config: %w", err)
		}
		c.Vision = append(json.RawMessage(nil), v...)
	}
	if err := c.validate(); err != nil {
		if nested {
			return nil, fmt.Errorf("text_config: %w", err)
		}
		return nil, err
	}
	return c, nil
}

// defaults returns Glm5NextTextConfig's dataclass defaults, plus engine
// defaults for the fields transformers does not declare (they only pass
// through kwargs there; the HF model hard-codes their meaning).
func defaults() *ModelConfig {
	pad := 154820
	lb := -5.0
	return &ModelConfig{
		VocabSize:             154880,
		HiddenSize:            4096,
		IntermediateSize:      12288,
		MoEIntermediateSize:   2048,
		NumHiddenLayers:       45,
		NumAttentionHeads:     64,
		NumKeyValueHeads:      64,
		MaxPositionEmbeddings: 1048576,
		RMSNormEps:            1e-5,
		HiddenAct:             "silu",
		SwigluLimit:           10.0,
		PadTokenID:            &pad,

		FirstKDenseReplace:  3, // HF's mlp_layer_types default hard-codes 3 dense layers
		NRoutedExperts:      288,
		NSharedExperts:      1,
		NumExpertsPerTok:    8,
		ScoringFunc:         "sigmoid",  // the HF router always uses sigmoid
		TopkMethod:          "noaux_tc", // and bias-corrected selection
		NormTopkProb:        true,
		RoutedScalingFactor: 2.5,
		NGroup:              1,
		TopkGroup:           1,

		QLoraRank:     1536,
		KVLoraRank:    512,
		QKNopeHeadDim: 256,
		QKRopeHeadDim: 0,
		VHeadDim:      256,

		IndexNHeads:                32,
		IndexHeadDim:               128,
		IndexTopk:                  2048,
		IndexKPool:                 16,
		IndexKPoolAlwaysSelectTail: true,

		LinearNumHeads:      64,
		LinearHeadDim:       128,
		LinearConvKernelDim: 4,
		LinearLowerBound:    &lb,

		HCMult:          4,
		HCEps:           1e-6,
		HCSinkhornIters: 20,
	}
}

// nonNullable are Glm5NextTextConfig's dataclass fields whose type does
// not admit None: transformers' @strict rejects an explicit null for them
// when the field is set, before __post_init__ runs (so the post-init
// "num_key_value_heads is None" branch is unreachable from config.json;
// checked against transformers 5.17).
var nonNullable = []string{
	"vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size",
	"num_hidden_layers", "num_attention_heads", "num_key_value_heads", "n_shared_experts", "n_routed_experts",
	"routed_scaling_factor", "kv_lora_rank", "qk_rope_head_dim", "v_head_dim",
	"qk_nope_head_dim", "n_group", "topk_group", "num_experts_per_tok", "norm_topk_prob",
	"hidden_act", "max_position_embeddings", "rms_norm_eps", "tie_word_embeddings",
	"attention_bias", "index_topk", "index_head_dim", "index_n_heads", "swiglu_limit",
	"linear_head_dim", "linear_num_heads", "linear_conv_kernel_dim", "hc_mult", "hc_eps",
	"hc_sinkhorn_iters", "index_kpool", "index_kpool_always_select_tail",
}

// parseText decodes the text model's fields (raw, already split into
// fields) over the defaults and runs Glm5NextTextConfig.__post_init__.
func parseText(raw []byte, fields map[string]json.RawMessage) (*ModelConfig, error) {
	for _, k := range nonNullable {
		if v, ok := fields[k]; ok && isNull(v) {
			return nil, fmt.Errorf("%s: null is not allowed", k)
		}
	}
	if v, ok := fields["q_lora_rank"]; ok && isNull(v) {
		return nil, errors.New("q_lora_rank is required by the DSA attention layers (got null)")
	}
	c := defaults()
	if err := json.Unmarshal(raw, c); err != nil {
		return nil, jsonError(err)
	}
	if c.Dtype == "" {
		if err := dtypeField(fields, &c.Dtype); err != nil {
			return nil, err
		}
	}
	if c.NumHiddenLayers <= 0 || c.NumHiddenLayers > maxLayers {
		return nil, fmt.Errorf("num_hidden_layers must be in [1, %d], got %d", maxLayers, c.NumHiddenLayers)
	}
	n := c.NumHiddenLayers

	if c.MLPLayerTypes == nil { // first min(3, n) dense, regardless of first_k_dense_replace
		c.MLPLayerTypes = make([]string, n)
		for i := range n {
			c.MLPLayerTypes[i] = MLPSparse
			if i < 3 {
				c.MLPLayerTypes[i] = MLPDense
			}
		}
	}
	if c.LayerTypes == nil { // DSA at i % 4 == 3
		c.LayerTypes = make([]string, n)
		for i := range n {
			c.LayerTypes[i] = LayerKDA
			if i%4 == 3 {
				c.LayerTypes[i] = LayerDSA
			}
		}
	}
	for i, t := range c.LayerTypes {
		if t == "full_attention" {
			c.LayerTypes[i] = LayerDSA
		}
	}
	if c.IndexerTypes == nil {
		var err error
		if c.IndexerTypes, err = defaultIndexerTypes(fields, n); err != nil {
			return nil, err
		}
	}
	if err := applyLinearAttnConfig(c, fields); err != nil {
		return nil, err
	}
	return c, nil
}

// defaultIndexerTypes mirrors __post_init__: index_topk_pattern ("FSSF…"
// or a list) wins; otherwise layer i is "full" when
// max(i-offset+1, 0) % freq == 0 with freq = max(index_topk_freq, 1)
// (default 1) and offset = index_skip_topk_offset (default 2).
func defaultIndexerTypes(fields map[string]json.RawMessage, n int) ([]string, error) {
	if p, ok := fields["index_topk_pattern"]; ok && !isNull(p) {
		var s string
		if err := json.Unmarshal(p, &s); err == nil {
			out := make([]string, 0, len(s))
			for i, ch := range s {
				switch ch {
				case 'F':
					out = append(out, IndexerFull)
				case 'S':
					out = append(out, IndexerShared)
				default:
					return nil, fmt.Errorf("index_topk_pattern %q: character %q at %d is not F or S", s, ch, i)
				}
			}
			return out, nil
		}
		var list []string
		if err := json.Unmarshal(p, &list); err != nil {
			return nil, fmt.Errorf("index_topk_pattern: want a string of F/S or a list of indexer types, got %s", abbrev(p))
		}
		if list == nil {
			list = []string{}
		}
		return list, nil
	}
	freq, offset := 1, 2
	if err := decodeField(fields, "index_topk_freq", &freq); err != nil {
		return nil, err
	}
	if err := decodeField(fields, "index_skip_topk_offset", &offset); err != nil {
		return nil, err
	}
	freq = max(freq, 1)
	out := make([]string, n)
	for i := range out {
		out[i] = IndexerShared
		if max(i-offset+1, 0)%freq == 0 {
			out[i] = IndexerFull
		}
	}
	return out, nil
}

// applyLinearAttnConfig applies the linear_attn_config dict: its keys
// override the flattened linear_* fields, and with safe_gate (default true,
// Python truthiness) a null lower bound becomes -5.
func applyLinearAttnConfig(c *ModelConfig, fields map[string]json.RawMessage) error {
	raw, ok := fields["linear_attn_config"]
	if !ok || isNull(raw) {
		return nil
	}
	d, err := object(raw)
	if err != nil {
		return fmt.Errorf("linear_attn_config: %w", err)
	}
	for key, dst := range map[string]*int{
		"head_dim":               &c.LinearHeadDim,
		"num_heads":              &c.LinearNumHeads,
		"short_conv_kernel_size": &c.LinearConvKernelDim,
	} {
		v, ok := d[key]
		if !ok {
			continue
		}
		if isNull(v) {
			return fmt.Errorf("linear_attn_config.%s: null is not allowed", key)
		}
		if err := json.Unmarshal(v, dst); err != nil {
			return fmt.Errorf("linear_attn_config.%s: want an integer, got %s", key, abbrev(v))
		}
	}
	if v, ok := d["gate_lower_bound"]; ok {
		if isNull(v) {
			c.LinearLowerBound = nil
		} else {
			var f float64
			if err := json.Unmarshal(v, &f); err != nil {
				return fmt.Errorf("linear_attn_config.gate_lower_bound: want a number or null, got %s", abbrev(v))
			}
			c.LinearLowerBound = &f
		}
	}
	safe := true
	if v, ok := d["safe_gate"]; ok {
		var x any
		if err := json.Unmarshal(v, &x); err != nil {
			return fmt.Errorf("linear_attn_config.safe_gate: %w", err)
		}
		safe = truthy(x)
	}
	if safe && c.LinearLowerBound == nil {
		lb := -5.0
		c.LinearLowerBound = &lb
	}
	return nil
}

// validate checks transformers' validate_architecture rules plus what the
// engine relies on. Messages name the field and the offending value.
func (c *ModelConfig) validate() error {
	n := c.NumHiddenLayers
	positive := []struct {
		name string
		v    int
	}{
		{"vocab_size", c.VocabSize},
		{"hidden_size", c.HiddenSize},
		{"intermediate_size", c.IntermediateSize},
		{"moe_intermediate_size", c.MoEIntermediateSize},
		{"num_hidden_layers", c.NumHiddenLayers},
		{"num_attention_heads", c.NumAttentionHeads},
		{"num_key_value_heads", c.NumKeyValueHeads},
		{"max_position_embeddings", c.MaxPositionEmbeddings},
		{"n_routed_experts", c.NRoutedExperts},
		{"num_experts_per_tok", c.NumExpertsPerTok},
		{"n_group", c.NGroup},
		{"topk_group", c.TopkGroup},
		{"q_lora_rank", c.QLoraRank},
		{"kv_lora_rank", c.KVLoraRank},
		{"qk_nope_head_dim", c.QKNopeHeadDim},
		{"v_head_dim", c.VHeadDim},
		{"index_n_heads", c.IndexNHeads},
		{"index_head_dim", c.IndexHeadDim},
		{"index_topk", c.IndexTopk},
		{"index_kpool", c.IndexKPool},
		{"linear_num_heads", c.LinearNumHeads},
		{"linear_head_dim", c.LinearHeadDim},
		{"linear_conv_kernel_dim", c.LinearConvKernelDim},
		{"hc_mult", c.HCMult},
		{"hc_sinkhorn_iters", c.HCSinkhornIters},
	}
	for _, p := range positive {
		if p.v <= 0 {
			return fmt.Errorf("%s must be positive, got %d", p.name, p.v)
		}
	}
	nonNeg := []struct {
		name string
		v    int
	}{
		{"n_shared_experts", c.NSharedExperts},
		{"first_k_dense_replace", c.FirstKDenseReplace},
	}
	for _, p := range nonNeg {
		if p.v < 0 {
			return fmt.Errorf("%s must not be negative, got %d", p.name, p.v)
		}
	}
	if c.NumNextnPredictLayers < 0 || c.NumNextnPredictLayers > maxLayers {
		return fmt.Errorf("num_nextn_predict_layers must be in [0, %d], got %d", maxLayers, c.NumNextnPredictLayers)
	}
	floats := []struct {
		name string
		v    float64
	}{
		{"rms_norm_eps", c.RMSNormEps},
		{"hc_eps", c.HCEps},
		{"swiglu_limit", c.SwigluLimit},
		{"routed_scaling_factor", c.RoutedScalingFactor},
	}
	for _, p := range floats {
		if !(p.v > 0) {
			return fmt.Errorf("%s must be positive, got %g", p.name, p.v)
		}
	}

	// transformers' validate_architecture.
	if c.NumAttentionHeads != c.NumKeyValueHeads {
		return fmt.Errorf("num_attention_heads (%d) must equal num_key_value_heads (%d)", c.NumAttentionHeads, c.NumKeyValueHeads)
	}
	if c.IndexTopk%c.IndexKPool != 0 {
		return fmt.Errorf("index_topk (%d) must be divisible by index_kpool (%d)", c.IndexTopk, c.IndexKPool)
	}
	if c.QKRopeHeadDim != 0 {
		return fmt.Errorf("qk_rope_head_dim must be 0 (the DSA layers are NoPE), got %d", c.QKRopeHeadDim)
	}

	// MoE routing.
	if c.NRoutedExperts%c.NGroup != 0 {
		return fmt.Errorf("n_routed_experts (%d) must be divisible by n_group (%d)", c.NRoutedExperts, c.NGroup)
	}
	if c.TopkGroup > c.NGroup {
		return fmt.Errorf("topk_group (%d) must not exceed n_group (%d)", c.TopkGroup, c.NGroup)
	}
	if c.NumExpertsPerTok > c.NRoutedExperts {
		return fmt.Errorf("num_experts_per_tok (%d) must not exceed n_routed_experts (%d)", c.NumExpertsPerTok, c.NRoutedExperts)
	}
	if eligible := c.TopkGroup * (c.NRoutedExperts / c.NGroup); c.NumExpertsPerTok > eligible {
		return fmt.Errorf("num_experts_per_tok (%d) exceeds the %d experts of topk_group (%d) groups", c.NumExpertsPerTok, eligible, c.TopkGroup)
	}

	// What the engine implements (the HF model hard-codes these).
	if c.HiddenAct != "silu" {
		return fmt.Errorf("unsupported hidden_act %q: glm5_next uses silu", c.HiddenAct)
	}
	if c.ScoringFunc != "sigmoid" {
		return fmt.Errorf("unsupported scoring_func %q: glm5_next routes with sigmoid", c.ScoringFunc)
	}
	if c.TopkMethod != "noaux_tc" {
		return fmt.Errorf("unsupported topk_method %q: glm5_next routes with noaux_tc", c.TopkMethod)
	}
	if lb := c.LinearLowerBound; lb != nil && !(*lb < 0) {
		return fmt.Errorf("linear_lower_bound must be negative (or null for the softplus gate), got %g", *lb)
	}

	// Per-layer schedules.
	lists := []struct {
		name  string
		v     []string
		allow []string
	}{
		{"layer_types", c.LayerTypes, []string{LayerKDA, LayerDSA}},
		{"mlp_layer_types", c.MLPLayerTypes, []string{MLPDense, MLPSparse}},
		{"indexer_types", c.IndexerTypes, []string{IndexerFull, IndexerShared}},
	}
	for _, l := range lists {
		if len(l.v) != n {
			return fmt.Errorf("%s has %d entries, want num_hidden_layers = %d", l.name, len(l.v), n)
		}
		for i, t := range l.v {
			if !contains(l.allow, t) {
				return fmt.Errorf("%s[%d]: unknown type %q (want %q or %q)", l.name, i, t, l.allow[0], l.allow[1])
			}
		}
	}
	// A "shared" DSA layer reuses the top-k that only a directly preceding
	// DSA layer with its own ("full") indexer hands on; transformers raises
	// at run time otherwise.
	for l := range n {
		if !c.SharedIndexer(l) {
			continue
		}
		if l == 0 || c.LayerTypes[l-1] != LayerDSA || c.IndexerTypes[l-1] != IndexerFull {
			prev := "no previous layer"
			if l > 0 {
				prev = fmt.Sprintf("layer %d is %s with indexer %q", l-1, c.LayerTypes[l-1], c.IndexerTypes[l-1])
			}
			return fmt.Errorf("indexer_types[%d] is %q but %s: a shared indexer needs a directly preceding %s layer with a %q indexer",
				l, IndexerShared, prev, LayerDSA, IndexerFull)
		}
	}
	return nil
}

// IsDSA reports whether layer l uses DSA (NoPE MLA + indexer) attention.
// MTP layers (num_hidden_layers <= l < num_hidden_layers +
// num_nextn_predict_layers) are DSA layers.
func (c *ModelConfig) IsDSA(l int) bool {
	switch {
	case l < 0:
		return false
	case l < c.NumHiddenLayers:
		return c.LayerTypes[l] == LayerDSA
	default:
		return l < c.NumHiddenLayers+c.NumNextnPredictLayers
	}
}

// IsMoE reports whether layer l's MLP is the routed-expert MoE (else
// dense). MTP layers are MoE layers.
func (c *ModelConfig) IsMoE(l int) bool {
	switch {
	case l < 0:
		return false
	case l < c.NumHiddenLayers:
		return c.MLPLayerTypes[l] == MLPSparse
	default:
		return l < c.NumHiddenLayers+c.NumNextnPredictLayers
	}
}

// SharedIndexer reports whether DSA layer l reuses the previous layer's
// top-k selection instead of running its own indexer (so it has no
// indexer weights). False for KDA layers and MTP layers.
func (c *ModelConfig) SharedIndexer(l int) bool {
	return l >= 0 && l < c.NumHiddenLayers && c.LayerTypes[l] == LayerDSA && c.IndexerTypes[l] == IndexerShared
}

// NumDSALayers counts the DSA layers of the main model (MTP excluded).
func (c *ModelConfig) NumDSALayers() int {
	k := 0
	for _, t := range c.LayerTypes {
		if t == LayerDSA {
			k++
		}
	}
	return k
}

// NumKDALayers counts the KDA (linear attention) layers.
func (c *ModelConfig) NumKDALayers() int {
	k := 0
	for _, t := range c.LayerTypes {
		if t == LayerKDA {
			k++
		}
	}
	return k
}

// ---- small JSON helpers ----

// object decodes a JSON object into its raw fields; anything else is an
// error (null included).
func object(data []byte) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, jsonError(err)
	}
	if m == nil {
		return nil, errors.New("want a JSON object, got null")
	}
	return m, nil
}

// str returns the string field k, nil when absent or null.
func str(m map[string]json.RawMessage, k string) (*string, error) {
	v, ok := m[k]
	if !ok || isNull(v) {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return nil, fmt.Errorf("%s: want a string, got %s", k, abbrev(v))
	}
	return &s, nil
}

// decodeField decodes field k into dst when present and not null.
func decodeField(m map[string]json.RawMessage, k string, dst any) error {
	v, ok := m[k]
	if !ok || isNull(v) {
		return nil
	}
	if err := json.Unmarshal(v, dst); err != nil {
		return fmt.Errorf("%s: invalid value %s: %w", k, abbrev(v), jsonError(err))
	}
	return nil
}

// dtypeField reads "dtype", falling back to the older "torch_dtype".
func dtypeField(m map[string]json.RawMessage, dst *string) error {
	for _, k := range []string{"dtype", "torch_dtype"} {
		s, err := str(m, k)
		if err != nil {
			return err
		}
		if s != nil {
			*dst = *s
			return nil
		}
	}
	return nil
}

func isNull(v json.RawMessage) bool {
	return v == nil || bytes.Equal(bytes.TrimSpace(v), []byte("null"))
}

// truthy is Python's bool() for a decoded JSON value.
func truthy(x any) bool {
	switch v := x.(type) {
	case nil:
		return false
	case bool:
		return v
	case float64:
		return v != 0
	case string:
		return v != ""
	case []any:
		return len(v) > 0
	case map[string]any:
		return len(v) > 0
	}
	return true
}

// jsonError rewrites encoding/json errors to name the config field instead
// of the Go struct.
func jsonError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Errorf("%s: want %s, got JSON %s", te.Field, te.Type, te.Value)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("invalid JSON at byte %d: %w", se.Offset, err)
	}
	return err
}

// abbrev shortens a raw JSON value for an error message.
func abbrev(v json.RawMessage) string {
	s := string(bytes.TrimSpace(v))
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
