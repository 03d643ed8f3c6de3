package config

import (
	"encoding/json"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// The files under testdata/hf and testdata/micro were produced by
// transformers 5.17.0 (the reference the brief pins) on the accelerator
// host:
//   - hf/cases.json: config.json inputs; hf/golden.json: what
//     Glm5NextConfig.from_dict (or Glm5NextTextConfig.from_dict for a flat
//     glm5_next_text file) resolved them to, or the error it raised.
//   - micro/config.json: a tiny model's save_pretrained config;
//     micro/model.safetensors.header.json: the header of its
//     model.safetensors (names, dtypes, shapes of every saved tensor).

// hfResult is one golden.json entry.
type hfResult struct {
	OK    bool   `json:"ok"`
	Error string `json:"error"`
	Text  struct {
		VocabSize           int      `json:"vocab_size"`
		HiddenSize          int      `json:"hidden_size"`
		NumHiddenLayers     int      `json:"num_hidden_layers"`
		NumAttentionHeads   int      `json:"num_attention_heads"`
		NumKeyValueHeads    int      `json:"num_key_value_heads"`
		LayerTypes          []string `json:"layer_types"`
		MLPLayerTypes       []string `json:"mlp_layer_types"`
		IndexerTypes        []string `json:"indexer_types"`
		LinearNumHeads      int      `json:"linear_num_heads"`
		LinearHeadDim       int      `json:"linear_head_dim"`
		LinearConvKernelDim int      `json:"linear_conv_kernel_dim"`
		LinearLowerBound    *float64 `json:"linear_lower_bound"`
		IndexKPool          int      `json:"index_kpool"`
		IndexTopk           int      `json:"index_topk"`
		QLoraRank           int      `json:"q_lora_rank"`
		PadTokenID          *int     `json:"pad_token_id"`
		NRoutedExperts      int      `json:"n_routed_experts"`
		HCMult              int      `json:"hc_mult"`
	} `json:"text"`
	Top struct {
		ImageTokenID      *int  `json:"image_token_id"`
		TieWordEmbeddings *bool `json:"tie_word_embeddings"`
	} `json:"top"`
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestTransformersGolden parses every case and compares with what
// transformers resolved: defaults, __post_init__ and validation.
func TestTransformersGolden(t *testing.T) {
	var cases map[string]json.RawMessage
	var golden map[string]hfResult
	readJSON(t, "testdata/hf/cases.json", &cases)
	readJSON(t, "testdata/hf/golden.json", &golden)
	if len(cases) != len(golden) || len(cases) < 30 {
		t.Fatalf("%d cases, %d golden results", len(cases), len(golden))
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			want, ok := golden[name]
			if !ok {
				t.Fatal("no golden result")
			}
			c, err := ParseModel(in)
			if !want.OK {
				if err == nil {
					t.Fatalf("accepted; transformers raised %s", want.Error)
				}
				return
			}
			if err != nil {
				t.Fatalf("rejected (%v); transformers accepted it", err)
			}
			w := want.Text
			got := []any{c.VocabSize, c.HiddenSize, c.NumHiddenLayers, c.NumAttentionHeads, c.NumKeyValueHeads,
				c.LayerTypes, c.MLPLayerTypes, c.IndexerTypes, c.LinearNumHeads, c.LinearHeadDim, c.LinearConvKernelDim,
				c.LinearLowerBound, c.IndexKPool, c.IndexTopk, c.QLoraRank, c.PadTokenID, c.NRoutedExperts, c.HCMult}
			exp := []any{w.VocabSize, w.HiddenSize, w.NumHiddenLayers, w.NumAttentionHeads, w.NumKeyValueHeads,
				w.LayerTypes, w.MLPLayerTypes, w.IndexerTypes, w.LinearNumHeads, w.LinearHeadDim, w.LinearConvKernelDim,
				w.LinearLowerBound, w.IndexKPool, w.IndexTopk, w.QLoraRank, w.PadTokenID, w.NRoutedExperts, w.HCMult}
			for i := range got {
				if !reflect.DeepEqual(got[i], exp[i]) {
					t.Errorf("field %d: got %v, transformers %v", i, show(got[i]), show(exp[i]))
				}
			}
			if w := want.Top.ImageTokenID; w != nil && *w != c.ImageTokenID {
				t.Errorf("image_token_id %d, transformers %d", c.ImageTokenID, *w)
			}
			if w := want.Top.TieWordEmbeddings; w != nil && *w != c.TieWordEmbeddings {
				t.Errorf("tie_word_embeddings %v, transformers %v", c.TieWordEmbeddings, *w)
			}
		})
	}
}

func show(v any) any {
	switch p := v.(type) {
	case *float64:
		if p != nil {
			return *p
		}
	case *int:
		if p != nil {
			return *p
		}
	}
	return v
}

// TestSavePretrainedConfig parses a config transformers wrote itself and
// checks ParamCount against the tensors its save_pretrained stored.
func TestSavePretrainedConfig(t *testing.T) {
	c, err := LoadModel("testdata/micro")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Nested || c.NumHiddenLayers != 4 || c.NumDSALayers() != 1 || c.LinearNumHeads != 2 || c.NumNextnPredictLayers != 1 {
		t.Errorf("parsed %+v", c)
	}
	var header map[string]struct {
		Shape []int `json:"shape"`
	}
	readJSON(t, "testdata/micro/model.safetensors.header.json", &header)
	var text, indexer, kda, moe int64
	for name, e := range header {
		if name == "__metadata__" || strings.HasPrefix(name, "model.visual.") {
			continue
		}
		n := int64(1)
		for _, d := range e.Shape {
			n *= int64(d)
		}
		text += n
		l := -1
		if rest, ok := strings.CutPrefix(name, "model.language_model.layers."); ok {
			l, _ = strconv.Atoi(rest[:strings.Index(rest, ".")])
		}
		switch {
		case strings.Contains(name, ".indexer."):
			indexer += n
		case strings.Contains(name, ".mlp.") && c.IsMoE(l):
			moe += n
		case strings.Contains(name, ".self_attn.") && l >= 0 && !c.IsDSA(l):
			kda += n
		}
	}
	p := c.ParamCount()
	if p.Total != text || p.Indexer != indexer || p.KDA != kda || p.MoE != moe {
		t.Errorf("ParamCount total %d indexer %d KDA %d MoE %d; checkpoint %d %d %d %d", p.Total, p.Indexer, p.KDA, p.MoE, text, indexer, kda, moe)
	}
}
