package runner

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/model/glm5next"
	"github.com/npuserve/npuserve/npu/cpu"
)

const tinyConfig = `{
  "model_type": "glm5_next_text", "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48,
  "moe_intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
  "mlp_layer_types": ["dense", "sparse"], "layer_types": ["linear_attention", "deepseek_sparse_attention"],
  "indexer_types": ["full", "full"], "n_routed_experts": 4, "num_experts_per_tok": 2,
  "q_lora_rank": 16, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "v_head_dim": 8,
  "index_n_heads": 4, "index_head_dim": 8, "index_topk": 8, "index_kpool": 4,
  "linear_attn_config": {"num_heads": 2, "head_dim": 8, "short_conv_kernel_size": 4}
}`

func tinyModel(t *testing.T) *glm5next.Model {
	t.Helper()
	cfg, err := config.ParseModel([]byte(tinyConfig))
	if err != nil {
		t.Fatal(err)
	}
	return glm5next.NewRandom(cpu.New(0), cfg, "float32", 42)
}

func prompts(n int) [][]int32 {
	r := rand.New(rand.NewPCG(1, 2))
	out := make([][]int32, n)
	for i := range out {
		out[i] = make([]int32, 3+7*i)
		for j := range out[i] {
			out[i][j] = int32(r.IntN(64))
		}
	}
	return out
}

// TestBatchingInvariance: outputs do not depend on batching, chunking or
// cache pressure; sampling depends only on the request's seed.
func TestBatchingInvariance(t *testing.T) {
	m := tinyModel(t)
	ps := prompts(4)
	mk := func(temp float64) []Request {
		var reqs []Request
		for i, p := range ps {
			reqs = append(reqs, Request{Prompt: p, MaxNewTokens: 5 + i, Temperature: temp, Seed: 9})
		}
		return reqs
	}
	for _, temp := range []float64{0, 0.8} {
		ref, err := Generate(m, mk(temp), Options{})
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range ref {
			if len(r) != 5+i {
				t.Fatalf("request %d generated %d tokens, want %d", i, len(r), 5+i)
			}
		}
		variants := []struct {
			name string
			opt  Options
		}{
			{"chunked", Options{ChunkSize: 3}},
			{"small blocks", Options{ChunkSize: 5, BlockSize: 4}},
			{"tight cache", Options{ChunkSize: 4, BlockSize: 8, NumBlocks: 6}},
			{"one at a time", Options{MaxSeqs: 1}},
		}
		for _, v := range variants {
			got, err := Generate(m, mk(temp), v.opt)
			if err != nil {
				t.Fatalf("%s: %v", v.name, err)
			}
			for i := range ref {
				if !slices.Equal(got[i], ref[i]) {
					t.Fatalf("temperature %g, %s: request %d gave %v, want %v", temp, v.name, i, got[i], ref[i])
				}
			}
		}
		// Alone, each request gives the same output.
		for i, r := range mk(temp) {
			alone, err := Generate(m, []Request{r}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(alone[0], ref[i]) {
				t.Fatalf("temperature %g: request %d alone gave %v, batched %v", temp, i, alone[0], ref[i])
			}
		}
	}
}

func TestStopAndErrors(t *testing.T) {
	m := tinyModel(t)
	p := prompts(1)[0]
	ref, err := Generate(m, []Request{{Prompt: p, MaxNewTokens: 6}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := Generate(m, []Request{{Prompt: p, MaxNewTokens: 6}}, Options{StopTokens: []int32{ref[0][2]}})
	if err != nil {
		t.Fatal(err)
	}
	want := ref[0][:slices.Index(ref[0], ref[0][2])+1]
	if !slices.Equal(got[0], want) {
		t.Fatalf("with stop token %d: %v, want %v", ref[0][2], got[0], want)
	}
	bad := []struct {
		name string
		reqs []Request
		opt  Options
	}{
		{"empty prompt", []Request{{MaxNewTokens: 1}}, Options{}},
		{"token outside vocab", []Request{{Prompt: []int32{64}, MaxNewTokens: 1}}, Options{}},
		{"negative temperature", []Request{{Prompt: p, MaxNewTokens: 1, Temperature: -1}}, Options{}},
		{"cache too small", []Request{{Prompt: p, MaxNewTokens: 40}}, Options{BlockSize: 4, NumBlocks: 2}},
		{"bad block size", []Request{{Prompt: p, MaxNewTokens: 1}}, Options{BlockSize: 6}},
	}
	for _, b := range bad {
		if _, err := Generate(m, b.reqs, b.opt); err == nil {
			t.Errorf("%s: no error", b.name)
		}
	}
	if out, err := Generate(m, []Request{{Prompt: p, MaxNewTokens: 0}}, Options{}); err != nil || len(out[0]) != 0 {
		t.Fatalf("zero new tokens: %v %v", out, err)
	}
}
