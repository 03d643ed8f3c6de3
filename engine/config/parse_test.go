package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// tinyJSON returns the §7 tiny config as a generic JSON tree that tests
// mutate before marshalling.
func tinyJSON(t testing.TB) map[string]any {
	t.Helper()
	data, err := os.ReadFile("testdata/tiny/config.json")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func textOf(m map[string]any) map[string]any { return m["text_config"].(map[string]any) }

func marshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// flatten moves the text fields of a nested config to the top level.
func flatten(m map[string]any, modelType string) map[string]any {
	out := map[string]any{}
	for k, v := range textOf(m) {
		out[k] = v
	}
	for k, v := range m {
		if k != "text_config" && k != "model_type" {
			out[k] = v
		}
	}
	out["model_type"] = modelType
	return out
}

func strs(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func TestLoadFullConfig(t *testing.T) {
	c, err := LoadModel("testdata/glm5.3-flash")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Nested || c.ModelType != "glm5_next" || c.ImageTokenID != 154854 || len(c.Vision) == 0 {
		t.Errorf("wrapper fields: nested=%v model_type=%q image=%d vision=%d bytes", c.Nested, c.ModelType, c.ImageTokenID, len(c.Vision))
	}
	if !reflect.DeepEqual(c.Architectures, []string{"Glm5NextForConditionalGeneration"}) {
		t.Errorf("architectures = %v", c.Architectures)
	}
	if c.Dtype != "bfloat16" || c.IndexKPool != 4 || c.NumNextnPredictLayers != 1 || c.LinearLowerBound == nil || *c.LinearLowerBound != -5 {
		t.Errorf("text fields: dtype=%q kpool=%d nextn=%d lb=%v", c.Dtype, c.IndexKPool, c.NumNextnPredictLayers, c.LinearLowerBound)
	}
	if c.NumDSALayers() != 11 || c.NumKDALayers() != 34 {
		t.Errorf("DSA/KDA layers = %d/%d, want 11/34", c.NumDSALayers(), c.NumKDALayers())
	}
	for l := range 46 {
		wantDSA := l%4 == 3 || l == 45
		if c.IsDSA(l) != wantDSA {
			t.Errorf("IsDSA(%d) = %v", l, !wantDSA)
		}
		if c.IsMoE(l) != (l >= 3) {
			t.Errorf("IsMoE(%d) = %v", l, l < 3)
		}
		if c.SharedIndexer(l) {
			t.Errorf("SharedIndexer(%d) = true", l)
		}
	}
	if c.IsDSA(46) || c.IsMoE(46) || c.IsDSA(-1) || c.IsMoE(-1) {
		t.Error("helpers true outside the model's layers")
	}
	// The table of glm5next-architecture.md §6.1.
	p := c.ParamCount()
	want := ParamCount{
		Total:         313_326_811_966,
		Active:        16_742_333_246,
		Embed:         634_388_480,
		LMHead:        634_388_480,
		KDA:           4_682_897_792,
		DSA:           1_374_058_752,
		Indexer:       11 * 7_471_872,
		DenseMLP:      452_984_832,
		MoE:           305_512_329_024,
		MoEActive:     9_562_238_784,
		MHC:           35_391_870,
		Norms:         372_736,
		MTP:           7_432_592_416,
		MTPActive:     386_161_696,
		TotalWithMTP:  320_759_404_382,
		ActiveWithMTP: 17_128_494_942,
	}
	if p != want {
		t.Errorf("ParamCount:\n got %+v\nwant %+v", p, want)
	}
}

func TestTinyParamCount(t *testing.T) {
	c, err := LoadModel("testdata/tiny")
	if err != nil {
		t.Fatal(err)
	}
	p := c.ParamCount()
	want := ParamCount{
		Total:         9_450_872,
		Active:        5_649_784,
		Embed:         262_144,
		LMHead:        262_144,
		KDA:           6 * 332_100,
		DSA:           2 * 214_400,
		Indexer:       2 * 33_984,
		DenseMLP:      2 * 393_216,
		MoE:           6 * 886_792,
		MoEActive:     6 * 296_968,
		MHC:           8 * 49_206,
		Norms:         8*512 + 256,
		MTP:           1_233_544,
		MTPActive:     214_400 + 296_968 + 512 + 512 + 2*256*256 + 256,
		TotalWithMTP:  9_450_872 + 1_233_544,
		ActiveWithMTP: 5_649_784 + 214_400 + 296_968 + 512 + 512 + 2*256*256 + 256,
	}
	if p != want {
		t.Errorf("ParamCount:\n got %+v\nwant %+v", p, want)
	}
	// A shared indexer layer has no indexer weights; a tied head none.
	m := tinyJSON(t)
	tc := textOf(m)
	tc["num_hidden_layers"] = 9
	tc["layer_types"] = append(tc["layer_types"].([]any), LayerDSA)
	tc["mlp_layer_types"] = append(tc["mlp_layer_types"].([]any), MLPSparse)
	tc["indexer_types"] = append(strs(IndexerFull, 8), IndexerShared)
	m["tie_word_embeddings"] = true
	c2, err := ParseModel(marshal(t, m))
	if err != nil {
		t.Fatal(err)
	}
	p2 := c2.ParamCount()
	if p2.Indexer != p.Indexer || p2.DSA != p.DSA+214_400-33_984 || p2.LMHead != 0 || p2.Total != p.Total+214_400-33_984+886_792+49_206+512-262_144 {
		t.Errorf("shared/tied: %+v", p2)
	}
}

func TestDefaults(t *testing.T) {
	c, err := ParseModel([]byte(`{"model_type": "glm5_next_text"}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Nested || c.ModelType != ModelTypeGlm5NextText || c.Vision != nil || c.ImageTokenID != DefaultImageTokenID {
		t.Errorf("wrapper fields: %+v", c)
	}
	d := defaults()
	if c.VocabSize != d.VocabSize || c.HiddenSize != 4096 || c.NumHiddenLayers != 45 || c.NumKeyValueHeads != 64 ||
		c.IndexKPool != 16 || c.PadTokenID == nil || *c.PadTokenID != 154820 || c.LinearLowerBound == nil ||
		*c.LinearLowerBound != -5 || c.QLoraRank != 1536 || c.HCSinkhornIters != 20 || c.EOSTokenID != nil {
		t.Errorf("defaults not applied: %+v", c)
	}
	if c.NumDSALayers() != 11 || !c.IsDSA(3) || c.IsDSA(4) || c.IsMoE(2) || !c.IsMoE(3) {
		t.Errorf("default schedule: layer_types=%v mlp=%v", c.LayerTypes, c.MLPLayerTypes)
	}
	if !reflect.DeepEqual(c.IndexerTypes, strs(IndexerFull, 45)) {
		t.Errorf("indexer_types = %v", c.IndexerTypes)
	}
	// Defaults for fewer than three layers: HF's list arithmetic.
	c, err = ParseModel([]byte(`{"model_type": "glm5_next_text", "num_hidden_layers": 2}`))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.MLPLayerTypes, []string{"dense", "dense"}) || !reflect.DeepEqual(c.LayerTypes, strs(LayerKDA, 2)) {
		t.Errorf("2-layer defaults: %v %v", c.MLPLayerTypes, c.LayerTypes)
	}
}

func TestNestedAndFlat(t *testing.T) {
	nested, err := ParseModel(marshal(t, tinyJSON(t)))
	if err != nil {
		t.Fatal(err)
	}
	if !nested.Nested || nested.ImageTokenID != 1000 || nested.Vision == nil {
		t.Fatalf("nested: %+v", nested)
	}
	for _, mt := range []string{ModelTypeGlm5Next, ModelTypeGlm5NextText} {
		flat, err := ParseModel(marshal(t, flatten(tinyJSON(t), mt)))
		if err != nil {
			t.Fatalf("%s: %v", mt, err)
		}
		if flat.Nested || flat.ModelType != mt {
			t.Errorf("%s: nested=%v model_type=%q", mt, flat.Nested, flat.ModelType)
		}
		// Everything else matches the nested parse.
		a, b := *nested, *flat
		a.Nested, a.ModelType, a.Vision = false, "", nil
		b.ModelType, b.Vision = "", nil
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: flat differs from nested:\n%+v\n%+v", mt, a, b)
		}
		if string(flat.Vision) != string(nested.Vision) {
			t.Errorf("%s: vision_config %s, want %s", mt, flat.Vision, nested.Vision)
		}
	}
}

func TestFieldHandling(t *testing.T) {
	ptr := func(f float64) *float64 { return &f }
	tests := []struct {
		name   string
		mutate func(m, tc map[string]any)
		check  func(t *testing.T, c *ModelConfig)
	}{
		{"full_attention renamed", func(m, tc map[string]any) {
			tc["layer_types"].([]any)[3] = "full_attention"
		}, func(t *testing.T, c *ModelConfig) {
			if c.LayerTypes[3] != LayerDSA {
				t.Errorf("layer_types[3] = %q", c.LayerTypes[3])
			}
		}},
		{"eos list", func(m, tc map[string]any) { tc["eos_token_id"] = []int{1, 2} },
			func(t *testing.T, c *ModelConfig) {
				if !reflect.DeepEqual(c.EOSTokenID, IntList{1, 2}) {
					t.Errorf("eos = %v", c.EOSTokenID)
				}
			}},
		{"eos int", func(m, tc map[string]any) { tc["eos_token_id"] = 7 },
			func(t *testing.T, c *ModelConfig) {
				if !reflect.DeepEqual(c.EOSTokenID, IntList{7}) {
					t.Errorf("eos = %v", c.EOSTokenID)
				}
			}},
		{"eos null", func(m, tc map[string]any) { tc["eos_token_id"] = nil },
			func(t *testing.T, c *ModelConfig) {
				if c.EOSTokenID != nil {
					t.Errorf("eos = %v", c.EOSTokenID)
				}
			}},
		{"pad null", func(m, tc map[string]any) { tc["pad_token_id"] = nil },
			func(t *testing.T, c *ModelConfig) {
				if c.PadTokenID != nil {
					t.Errorf("pad = %v", *c.PadTokenID)
				}
			}},
		{"torch_dtype fallback", func(m, tc map[string]any) {
			delete(tc, "dtype")
			tc["torch_dtype"] = "bfloat16"
		}, func(t *testing.T, c *ModelConfig) {
			if c.Dtype != "bfloat16" {
				t.Errorf("dtype = %q", c.Dtype)
			}
		}},
		{"top-level dtype", func(m, tc map[string]any) {
			delete(tc, "dtype")
			m["dtype"] = "float16"
		}, func(t *testing.T, c *ModelConfig) {
			if c.Dtype != "float16" {
				t.Errorf("dtype = %q", c.Dtype)
			}
		}},
		{"image token default", func(m, tc map[string]any) { delete(m, "image_token_id") },
			func(t *testing.T, c *ModelConfig) {
				if c.ImageTokenID != DefaultImageTokenID {
					t.Errorf("image_token_id = %d", c.ImageTokenID)
				}
			}},
		{"no vision_config", func(m, tc map[string]any) { delete(m, "vision_config") },
			func(t *testing.T, c *ModelConfig) {
				if c.Vision != nil {
					t.Errorf("vision = %s", c.Vision)
				}
			}},
		{"linear_attn_config overrides", func(m, tc map[string]any) {
			tc["linear_num_heads"], tc["linear_head_dim"], tc["linear_conv_kernel_dim"], tc["linear_lower_bound"] = 99, 99, 99, -1.0
			tc["linear_attn_config"] = map[string]any{"num_heads": 8, "head_dim": 16, "short_conv_kernel_size": 3, "gate_lower_bound": -2.5}
		}, func(t *testing.T, c *ModelConfig) {
			if c.LinearNumHeads != 8 || c.LinearHeadDim != 16 || c.LinearConvKernelDim != 3 || *c.LinearLowerBound != -2.5 {
				t.Errorf("linear = %d %d %d %v", c.LinearNumHeads, c.LinearHeadDim, c.LinearConvKernelDim, *c.LinearLowerBound)
			}
		}},
		{"flat linear fields kept without dict keys", func(m, tc map[string]any) {
			tc["linear_num_heads"], tc["linear_head_dim"], tc["linear_lower_bound"] = 2, 32, -3.0
			tc["linear_attn_config"] = map[string]any{"short_conv_kernel_size": 2}
		}, func(t *testing.T, c *ModelConfig) {
			if c.LinearNumHeads != 2 || c.LinearHeadDim != 32 || c.LinearConvKernelDim != 2 || *c.LinearLowerBound != -3 {
				t.Errorf("linear = %d %d %d %v", c.LinearNumHeads, c.LinearHeadDim, c.LinearConvKernelDim, *c.LinearLowerBound)
			}
		}},
	}
	lowerBound := []struct {
		name string
		top  any // linear_lower_bound at text level; "absent" = not set
		dict any // linear_attn_config; "absent" = not set
		want *float64
	}{
		{"top null, no dict: softplus gate", nil, "absent", nil},
		{"top null, dict without bound: safe_gate default", nil, map[string]any{}, ptr(-5)},
		{"dict null bound, safe_gate default true", "absent", map[string]any{"gate_lower_bound": nil}, ptr(-5)},
		{"dict null bound, safe_gate false", "absent", map[string]any{"gate_lower_bound": nil, "safe_gate": false}, nil},
		{"dict null bound, safe_gate null (falsy)", "absent", map[string]any{"gate_lower_bound": nil, "safe_gate": nil}, nil},
		{"dict null bound, safe_gate 0 (falsy)", "absent", map[string]any{"gate_lower_bound": nil, "safe_gate": 0}, nil},
		{"dict null bound, safe_gate \"yes\" (truthy)", "absent", map[string]any{"gate_lower_bound": nil, "safe_gate": "yes"}, ptr(-5)},
		{"top -3, dict without bound", -3.0, map[string]any{"num_heads": 4}, ptr(-3)},
		{"top absent, no dict: default", "absent", "absent", ptr(-5)},
		{"dict null linear_attn_config ignored", -4.0, nil, ptr(-4)},
	}
	for _, lb := range lowerBound {
		tests = append(tests, struct {
			name   string
			mutate func(m, tc map[string]any)
			check  func(t *testing.T, c *ModelConfig)
		}{"lower bound: " + lb.name, func(m, tc map[string]any) {
			delete(tc, "linear_attn_config")
			if lb.top != "absent" {
				tc["linear_lower_bound"] = lb.top
			}
			if lb.dict != "absent" {
				tc["linear_attn_config"] = lb.dict
			}
		}, func(t *testing.T, c *ModelConfig) {
			got := c.LinearLowerBound
			if (got == nil) != (lb.want == nil) || (got != nil && *got != *lb.want) {
				t.Errorf("linear_lower_bound = %v, want %v", deref(got), deref(lb.want))
			}
		}})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := tinyJSON(t)
			tt.mutate(m, textOf(m))
			c, err := ParseModel(marshal(t, m))
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func deref(p *float64) any {
	if p == nil {
		return "nil"
	}
	return *p
}

func TestIndexerTypeDefaults(t *testing.T) {
	tests := []struct {
		name  string
		extra map[string]any
		want  string // F/S per layer of 8
	}{
		{"default all full", nil, "FFFFFFFF"},
		{"pattern string", map[string]any{"index_topk_pattern": "FFFFFFFS"}, "FFFFFFFS"},
		{"pattern list", map[string]any{"index_topk_pattern": []string{"full", "full", "full", "full", "full", "full", "full", "shared"}}, "FFFFFFFS"},
		{"pattern wins over freq", map[string]any{"index_topk_pattern": "FFFFFFFF", "index_topk_freq": 2}, "FFFFFFFF"},
		// max(i-2+1, 0) % 2 == 0 → F for i = 0,1,3,5,7.
		{"freq 2", map[string]any{"index_topk_freq": 2}, "FFSFSFSF"},
		{"freq 2 offset 0", map[string]any{"index_topk_freq": 2, "index_skip_topk_offset": 0}, "SFSFSFSF"},
		{"freq 0 clamps to 1", map[string]any{"index_topk_freq": 0}, "FFFFFFFF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := tinyJSON(t)
			tc := textOf(m)
			delete(tc, "indexer_types")
			// All layers KDA: "shared" entries then mean nothing and pass
			// validation, so any generated schedule can be inspected.
			tc["layer_types"] = strs(LayerKDA, 8)
			for k, v := range tt.extra {
				tc[k] = v
			}
			c, err := ParseModel(marshal(t, m))
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			for _, s := range c.IndexerTypes {
				got += strings.ToUpper(s[:1])
			}
			if got != tt.want {
				t.Errorf("indexer_types = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestValidationErrors(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(m, tc map[string]any)
		want   string
	}{
		{"model_type llama", func(m, tc map[string]any) { m["model_type"] = "llama" },
			`unsupported model_type "llama": npuserve serves glm5_next`},
		{"model_type missing", func(m, tc map[string]any) { delete(m, "model_type") }, "missing model_type"},
		{"model_type not a string", func(m, tc map[string]any) { m["model_type"] = 5 }, "model_type: want a string, got 5"},
		{"text model_type", func(m, tc map[string]any) { tc["model_type"] = "deepseek_v3" },
			`unsupported text_config.model_type "deepseek_v3"`},
		{"text_config under text model", func(m, tc map[string]any) { m["model_type"] = "glm5_next_text" },
			`model_type "glm5_next_text" has a text_config section`},
		{"text_config not object", func(m, tc map[string]any) { m["text_config"] = []int{1} }, "text_config: "},
		{"heads != kv heads", func(m, tc map[string]any) { tc["num_key_value_heads"] = 2 },
			"num_attention_heads (4) must equal num_key_value_heads (2)"},
		{"kv heads default 64", func(m, tc map[string]any) { delete(tc, "num_key_value_heads") },
			"num_attention_heads (4) must equal num_key_value_heads (64)"},
		{"topk % kpool", func(m, tc map[string]any) { tc["index_topk"] = 18 },
			"index_topk (18) must be divisible by index_kpool (4)"},
		{"kpool zero", func(m, tc map[string]any) { tc["index_kpool"] = 0 }, "index_kpool must be positive, got 0"},
		{"q_lora_rank null", func(m, tc map[string]any) { tc["q_lora_rank"] = nil }, "q_lora_rank is required"},
		{"q_lora_rank zero", func(m, tc map[string]any) { tc["q_lora_rank"] = 0 }, "q_lora_rank must be positive, got 0"},
		{"rope dim", func(m, tc map[string]any) { tc["qk_rope_head_dim"] = 64 }, "qk_rope_head_dim must be 0 (the DSA layers are NoPE), got 64"},
		{"layer_types length", func(m, tc map[string]any) { tc["layer_types"] = strs(LayerKDA, 7) },
			"layer_types has 7 entries, want num_hidden_layers = 8"},
		{"mlp_layer_types length", func(m, tc map[string]any) { tc["mlp_layer_types"] = strs(MLPSparse, 9) },
			"mlp_layer_types has 9 entries, want num_hidden_layers = 8"},
		{"indexer_types length", func(m, tc map[string]any) { tc["indexer_types"] = []string{} },
			"indexer_types has 0 entries, want num_hidden_layers = 8"},
		{"pattern length", func(m, tc map[string]any) {
			delete(tc, "indexer_types")
			tc["index_topk_pattern"] = "FF"
		}, "indexer_types has 2 entries"},
		{"pattern char", func(m, tc map[string]any) {
			delete(tc, "indexer_types")
			tc["index_topk_pattern"] = "FFXFFFFF"
		}, `index_topk_pattern "FFXFFFFF": character 'X' at 2 is not F or S`},
		{"pattern type", func(m, tc map[string]any) {
			delete(tc, "indexer_types")
			tc["index_topk_pattern"] = 3
		}, "index_topk_pattern: want a string of F/S or a list"},
		{"unknown layer type", func(m, tc map[string]any) { tc["layer_types"].([]any)[5] = "sliding_attention" },
			`layer_types[5]: unknown type "sliding_attention"`},
		{"unknown mlp type", func(m, tc map[string]any) { tc["mlp_layer_types"].([]any)[2] = "moe" },
			`mlp_layer_types[2]: unknown type "moe"`},
		{"unknown indexer type", func(m, tc map[string]any) { tc["indexer_types"].([]any)[3] = "none" },
			`indexer_types[3]: unknown type "none"`},
		{"shared after KDA", func(m, tc map[string]any) { tc["indexer_types"].([]any)[3] = "shared" },
			`indexer_types[3] is "shared" but layer 2 is linear_attention with indexer "full"`},
		{"shared at layer 0", func(m, tc map[string]any) {
			tc["layer_types"].([]any)[0] = LayerDSA
			tc["indexer_types"].([]any)[0] = "shared"
		}, `indexer_types[0] is "shared" but no previous layer`},
		{"shared after shared", func(m, tc map[string]any) {
			tc["layer_types"] = strs(LayerDSA, 8)
			tc["indexer_types"] = []string{"full", "shared", "shared", "full", "full", "full", "full", "full"}
		}, `indexer_types[2] is "shared" but layer 1 is deepseek_sparse_attention with indexer "shared"`},
		{"experts % groups", func(m, tc map[string]any) { tc["n_group"] = 3 },
			"n_routed_experts (8) must be divisible by n_group (3)"},
		{"topk_group > n_group", func(m, tc map[string]any) { tc["topk_group"] = 2 }, "topk_group (2) must not exceed n_group (1)"},
		{"top-k > experts", func(m, tc map[string]any) { tc["num_experts_per_tok"] = 9 },
			"num_experts_per_tok (9) must not exceed n_routed_experts (8)"},
		{"top-k > group-limited experts", func(m, tc map[string]any) { tc["n_group"] = 4; tc["num_experts_per_tok"] = 3 },
			"num_experts_per_tok (3) exceeds the 2 experts of topk_group (1) groups"},
		{"hidden_size zero", func(m, tc map[string]any) { tc["hidden_size"] = 0 }, "hidden_size must be positive, got 0"},
		{"vocab negative", func(m, tc map[string]any) { tc["vocab_size"] = -1 }, "vocab_size must be positive, got -1"},
		{"experts zero", func(m, tc map[string]any) { tc["n_routed_experts"] = 0 }, "n_routed_experts must be positive, got 0"},
		{"hc_mult zero", func(m, tc map[string]any) { tc["hc_mult"] = 0 }, "hc_mult must be positive, got 0"},
		{"shared experts negative", func(m, tc map[string]any) { tc["n_shared_experts"] = -1 }, "n_shared_experts must not be negative, got -1"},
		{"nextn negative", func(m, tc map[string]any) { tc["num_nextn_predict_layers"] = -1 }, "num_nextn_predict_layers must be in [0, 65536], got -1"},
		{"eps zero", func(m, tc map[string]any) { tc["rms_norm_eps"] = 0 }, "rms_norm_eps must be positive, got 0"},
		{"layers zero", func(m, tc map[string]any) { tc["num_hidden_layers"] = 0 }, "num_hidden_layers must be in [1, 65536], got 0"},
		{"layers huge", func(m, tc map[string]any) { tc["num_hidden_layers"] = 1 << 40 }, "num_hidden_layers must be in [1, 65536], got 1099511627776"},
		{"null int field", func(m, tc map[string]any) { tc["hidden_size"] = nil }, "hidden_size: null is not allowed"},
		{"kv heads null", func(m, tc map[string]any) { tc["num_key_value_heads"] = nil }, "num_key_value_heads: null is not allowed"},
		{"string int field", func(m, tc map[string]any) { tc["hidden_size"] = "256" }, "hidden_size: want int, got JSON string"},
		{"fractional int field", func(m, tc map[string]any) { tc["index_topk"] = 16.5 }, "index_topk: want int, got JSON number 16.5"},
		{"activation", func(m, tc map[string]any) { tc["hidden_act"] = "gelu" }, `unsupported hidden_act "gelu"`},
		{"scoring", func(m, tc map[string]any) { tc["scoring_func"] = "softmax" }, `unsupported scoring_func "softmax"`},
		{"topk method", func(m, tc map[string]any) { tc["topk_method"] = "greedy" }, `unsupported topk_method "greedy"`},
		{"positive lower bound", func(m, tc map[string]any) {
			tc["linear_attn_config"].(map[string]any)["gate_lower_bound"] = 1.0
		}, "linear_lower_bound must be negative (or null for the softplus gate), got 1"},
		{"linear dict null head_dim", func(m, tc map[string]any) {
			tc["linear_attn_config"].(map[string]any)["head_dim"] = nil
		}, "linear_attn_config.head_dim: null is not allowed"},
		{"linear dict bad num_heads", func(m, tc map[string]any) {
			tc["linear_attn_config"].(map[string]any)["num_heads"] = "4"
		}, `linear_attn_config.num_heads: want an integer, got "4"`},
		{"linear dict zero heads", func(m, tc map[string]any) {
			tc["linear_attn_config"].(map[string]any)["num_heads"] = 0
		}, "linear_num_heads must be positive, got 0"},
		{"linear dict not object", func(m, tc map[string]any) { tc["linear_attn_config"] = 5 }, "linear_attn_config: "},
		{"vision not object", func(m, tc map[string]any) { m["vision_config"] = "x" }, "vision_config: "},
		{"architectures type", func(m, tc map[string]any) { m["architectures"] = "Glm5Next" }, "architectures: invalid value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := tinyJSON(t)
			tt.mutate(m, textOf(m))
			_, err := ParseModel(marshal(t, m))
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q\nwant it to contain %q", err, tt.want)
			}
		})
	}
}

func TestParseModelNotJSON(t *testing.T) {
	for _, in := range []string{"", "null", "[]", "{", `{"model_type": "glm5_next", "text_config": {"hidden_size": }}`} {
		if _, err := ParseModel([]byte(in)); err == nil {
			t.Errorf("ParseModel(%q): no error", in)
		}
	}
}

func TestLoadModelErrorsNameFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	if _, err := LoadModel(dir); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("missing file: %v", err)
	}
	if err := os.WriteFile(path, []byte(`{"model_type": "llama"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadModel(dir)
	if err == nil || !strings.Contains(err.Error(), path+`: unsupported model_type "llama"`) {
		t.Errorf("bad config: %v", err)
	}
	if err := os.WriteFile(path, []byte(`{"model_type": `), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadModel(dir); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("bad JSON: %v", err)
	}
}
