package glm5next

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/kvcache"
	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/nputest"
)

// testConfigJSON is a tiny glm5_next text config; over replaces fields. The
// variants mirror the golden fixtures' feature coverage.
func testConfigJSON(over map[string]any) []byte {
	c := map[string]any{
		"model_type": "glm5_next_text", "dtype": "float32",
		"vocab_size": 96, "hidden_size": 32, "intermediate_size": 48, "moe_intermediate_size": 16,
		"num_hidden_layers": 4, "num_attention_heads": 2, "num_key_value_heads": 2,
		"rms_norm_eps": 1e-5, "swiglu_limit": 10.0, "pad_token_id": 0,
		"mlp_layer_types":  []string{"dense", "sparse", "sparse", "sparse"},
		"layer_types":      []string{"linear_attention", "deepseek_sparse_attention", "linear_attention", "deepseek_sparse_attention"},
		"n_routed_experts": 6, "n_shared_experts": 1, "num_experts_per_tok": 2,
		"norm_topk_prob": true, "routed_scaling_factor": 2.5, "n_group": 1, "topk_group": 1,
		"q_lora_rank": 16, "kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 0, "v_head_dim": 8,
		"index_n_heads": 8, "index_head_dim": 8, "index_topk": 8, "index_kpool": 4,
		"index_kpool_always_select_tail": true,
		"indexer_types":                  []string{"full", "full", "full", "full"},
		"hc_mult":                        4, "hc_eps": 1e-6, "hc_sinkhorn_iters": 20,
		"linear_attn_config": map[string]any{"num_heads": 2, "head_dim": 8, "short_conv_kernel_size": 4, "gate_lower_bound": -5.0},
	}
	for k, v := range over {
		c[k] = v
	}
	b, err := json.Marshal(c)
	if err != nil {
		panic(err)
	}
	return b
}

// testVariants are the configurations the consistency tests run over.
var testVariants = []struct {
	name string
	over map[string]any
}{
	{"tiny", nil},
	{"shared", map[string]any{
		"num_hidden_layers": 4,
		"layer_types":       []string{"linear_attention", "deepseek_sparse_attention", "deepseek_sparse_attention", "linear_attention"},
		"indexer_types":     []string{"full", "full", "shared", "full"},
		"n_shared_experts":  2,
	}},
	{"kpool1", map[string]any{
		"index_kpool": 1, "n_group": 2, "topk_group": 1, "norm_topk_prob": false, "hc_mult": 2,
		"mlp_layer_types":    []string{"sparse", "dense", "sparse", "dense"},
		"linear_attn_config": map[string]any{"num_heads": 2, "head_dim": 8, "short_conv_kernel_size": 4, "gate_lower_bound": nil, "safe_gate": false},
	}},
	{"kda only", map[string]any{
		"layer_types": []string{"linear_attention", "linear_attention", "linear_attention", "linear_attention"},
	}},
	{"kpool2", map[string]any{
		"index_kpool": 2, "index_kpool_always_select_tail": false, "n_group": 3, "topk_group": 2, "num_experts_per_tok": 3,
		"n_shared_experts":   0,
		"linear_attn_config": map[string]any{"num_heads": 1, "head_dim": 16, "short_conv_kernel_size": 3, "gate_lower_bound": -3.0},
	}},
}

func testConfig(t testing.TB, over map[string]any) *config.ModelConfig {
	t.Helper()
	c, err := config.ParseModel(testConfigJSON(over))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// testModel is a random model whose weights are scaled up from the HF
// init so that routing, indexer selection and logits have clear margins
// (HF's 0.02 init leaves them nearly uniform).
func testModel(t testing.TB, be npu.Backend, cfg *config.ModelConfig, seed int64) *Model {
	t.Helper()
	m := NewRandom(be, cfg, "float32", seed)
	boost := func(x *npu.Tensor, s float32) { be.Scale(x, x, s) }
	boost(m.embed, 50)
	boost(m.lmHead.w, 30)
	for _, ly := range m.layers {
		boost(ly.hcAttn.fn, 2)
		boost(ly.hcFFN.fn, 2)
		if ly.mla != nil && ly.mla.idx != nil {
			boost(ly.mla.idx.wqB.w, 50)
			boost(ly.mla.idx.weightsProj.w, 50)
			boost(ly.mla.idx.wk.w, 20)
		}
		if ly.mla != nil {
			boost(ly.mla.qB.w, 10)
			boost(ly.mla.kvB, 10)
		}
		if ly.kda != nil {
			boost(ly.kda.conv, 15)
			boost(ly.kda.qkv.w, 5)
		}
		if ly.moe != nil {
			boost(ly.moe.gate, 25)
		}
	}
	// The weights were marked read-only (npu.WeightMarker): a Sync orders
	// these writes before every later read.
	if err := be.Sync(); err != nil {
		t.Fatal(err)
	}
	return m
}

// session runs sequences through a model with a paged cache.
type session struct {
	t     testing.TB
	m     *Model
	mgr   *kvcache.Manager
	cache *Cache
}

func newSession(t testing.TB, m *Model, blocks, bs, slots int) *session {
	t.Helper()
	mgr, err := kvcache.New(kvcache.Config{BlockSize: bs, NumBlocks: blocks, NumStateSlots: slots, KPool: m.cfg.IndexKPool})
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.NewCache(blocks, bs, slots)
	if err != nil {
		t.Fatal(err)
	}
	return &session{t: t, m: m, mgr: mgr, cache: c}
}

// feed is one sequence's part of a step.
type feed struct {
	seq    *kvcache.Seq
	tokens []int32
}

// step runs one batch and returns the logits of every row.
func (s *session) step(feeds []feed) [][]float32 {
	s.t.Helper()
	var seqs []*kvcache.Seq
	var rows []int
	var toks []int32
	for _, f := range feeds {
		if err := s.mgr.Append(f.seq, len(f.tokens)); err != nil {
			s.t.Fatal(err)
		}
		seqs = append(seqs, f.seq)
		rows = append(rows, len(f.tokens))
		toks = append(toks, f.tokens...)
	}
	all := make([]int, len(toks))
	for i := range all {
		all[i] = i
	}
	lg := must(s.m.Forward(s.cache, &Batch{Tokens: toks, Layout: s.mgr.Layout(seqs, rows), LogitRows: all}))
	defer s.m.be.Free(lg)
	return must(DownloadRows(s.m.be, lg))
}

// run feeds one new sequence in chunks and returns the logits of every
// position.
func (s *session) run(tokens []int32, chunk int) [][]float32 {
	s.t.Helper()
	seq, err := s.mgr.Allocate()
	if err != nil {
		s.t.Fatal(err)
	}
	defer s.mgr.Free(seq)
	var out [][]float32
	for i := 0; i < len(tokens); i += chunk {
		out = append(out, s.step([]feed{{seq, tokens[i:min(i+chunk, len(tokens))]}})...)
	}
	return out
}

// relDiff is max|a-b| / max|b| over all rows.
func relDiff(a, b [][]float32) float64 {
	var num, den float64
	for i := range b {
		for j := range b[i] {
			num = math.Max(num, math.Abs(float64(a[i][j])-float64(b[i][j])))
			den = math.Max(den, math.Abs(float64(b[i][j])))
		}
	}
	return num / den
}

func maxAbs(a [][]float32) float64 {
	var m float64
	for _, r := range a {
		for _, v := range r {
			m = math.Max(m, math.Abs(float64(v)))
		}
	}
	return m
}

func randTokens(r *rand.Rand, n, vocab int) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = int32(r.IntN(vocab))
	}
	return t
}

// TestSpecsMatchParamCount cross-checks the tensor list against the
// config's parameter arithmetic.
func TestSpecsMatchParamCount(t *testing.T) {
	for _, v := range testVariants {
		for _, fused := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/fused=%v", v.name, fused), func(t *testing.T) {
				cfg := testConfig(t, v.over)
				var n int64
				for _, s := range specs(cfg, weightForm{fusedConv: fused, fusedExperts: fused, lmHead: true}) {
					k := int64(1)
					for _, d := range s.shape {
						k *= int64(d)
					}
					n += k
				}
				if want := cfg.ParamCount().Total; n != want {
					t.Fatalf("specs hold %d parameters, config says %d", n, want)
				}
			})
		}
	}
}

// TestChunkedMatchesWhole: prefill in chunks of 1 (the decode path), 7, 64
// and the whole sequence give the same logits at every position.
func TestChunkedMatchesWhole(t *testing.T) {
	be := nputest.Open(0)
	for vi, v := range testVariants {
		t.Run(v.name, func(t *testing.T) {
			cfg := testConfig(t, v.over)
			m := testModel(t, be, cfg, int64(vi+1))
			toks := randTokens(rand.New(rand.NewPCG(uint64(vi), 1)), 45, cfg.VocabSize)
			s := newSession(t, m, 8, 8, 1)
			whole := s.run(toks, len(toks))
			for _, chunk := range []int{1, 7, 64} {
				got := s.run(toks, chunk)
				d := relDiff(got, whole)
				t.Logf("chunk %d: max relative logit difference %.3g (max |logit| %.3g)", chunk, d, maxAbs(whole))
				if d > 1e-4 || math.IsNaN(d) {
					t.Fatalf("chunk %d: max relative logit difference %g", chunk, d)
				}
			}
			if s.mgr.UsedBlocks() != 0 || s.mgr.UsedStateSlots() != 0 {
				t.Fatalf("cache not returned: %d blocks, %d slots", s.mgr.UsedBlocks(), s.mgr.UsedStateSlots())
			}
		})
	}
}

// TestBatchMatchesSingle: sequences of different lengths batched together,
// each with its own chunking and then decoding, match each one alone.
func TestBatchMatchesSingle(t *testing.T) {
	be := nputest.Open(0)
	for vi, v := range testVariants {
		t.Run(v.name, func(t *testing.T) {
			cfg := testConfig(t, v.over)
			m := testModel(t, be, cfg, int64(vi+11))
			r := rand.New(rand.NewPCG(uint64(vi), 2))
			lens := []int{5, 23, 41}
			chunks := []int{2, 7, 16}
			const decode = 3
			seqToks := make([][]int32, len(lens))
			for i, n := range lens {
				seqToks[i] = randTokens(r, n+decode, cfg.VocabSize)
			}
			s := newSession(t, m, 24, 4*cfg.IndexKPool, 4)
			// A sequence run and freed first, so that the batch reuses its
			// state slot and blocks (they must be cleared).
			s.run(randTokens(r, 13, cfg.VocabSize), 13)
			seqs := make([]*kvcache.Seq, len(lens))
			for i := range seqs {
				var err error
				if seqs[i], err = s.mgr.Allocate(); err != nil {
					t.Fatal(err)
				}
			}
			got := make([][][]float32, len(lens))
			fed := make([]int, len(lens))
			for {
				var feeds []feed
				var who []int
				for i := range seqs {
					total := lens[i] + decode
					if fed[i] == total {
						continue
					}
					n := 1
					if fed[i] < lens[i] {
						n = min(chunks[i], lens[i]-fed[i])
					}
					feeds = append(feeds, feed{seqs[i], seqToks[i][fed[i] : fed[i]+n]})
					who = append(who, i)
					fed[i] += n
				}
				if len(feeds) == 0 {
					break
				}
				out := s.step(feeds)
				row := 0
				for k, i := range who {
					n := len(feeds[k].tokens)
					got[i] = append(got[i], out[row:row+n]...)
					row += n
				}
			}
			single := newSession(t, m, 24, 4*cfg.IndexKPool, 1)
			for i := range seqs {
				want := single.run(seqToks[i], len(seqToks[i]))
				if d := relDiff(got[i], want); d > 1e-4 || math.IsNaN(d) {
					t.Fatalf("sequence %d: batched vs single max relative difference %g", i, d)
				}
				s.mgr.Free(seqs[i])
			}
			if s.mgr.UsedBlocks() != 0 || s.mgr.UsedStateSlots() != 0 {
				t.Fatalf("cache not returned: %d blocks, %d slots", s.mgr.UsedBlocks(), s.mgr.UsedStateSlots())
			}
		})
	}
}

// TestObserve checks the observer hook's calls and shapes, and that the
// final hidden state it reports feeds the logits.
func TestObserve(t *testing.T) {
	be := nputest.Open(0)
	cfg := testConfig(t, nil)
	m := testModel(t, be, cfg, 3)
	s := newSession(t, m, 4, 8, 1)
	seq, _ := s.mgr.Allocate()
	toks := randTokens(rand.New(rand.NewPCG(5, 5)), 9, cfg.VocabSize)
	if err := s.mgr.Append(seq, len(toks)); err != nil {
		t.Fatal(err)
	}
	var calls []string
	lg := must(m.Forward(s.cache, &Batch{
		Tokens: toks, Layout: s.mgr.Layout([]*kvcache.Seq{seq}, []int{len(toks)}), LogitRows: []int{8, 2},
		Observe: func(l int, x *npu.Tensor) { calls = append(calls, fmt.Sprint(l, x.Shape())) },
	}))
	want := []string{}
	for l := range cfg.NumHiddenLayers {
		want = append(want, fmt.Sprint(l, []int{9, cfg.HCMult, cfg.HiddenSize}))
	}
	want = append(want, fmt.Sprint(cfg.NumHiddenLayers, []int{2, cfg.HiddenSize}))
	if strings.Join(calls, ";") != strings.Join(want, ";") {
		t.Fatalf("observer calls %v, want %v", calls, want)
	}
	if lg.Dim(0) != 2 || lg.Dim(1) != cfg.VocabSize {
		t.Fatalf("logits %v", lg)
	}
}

// TestNewRandomDeterministic: the same seed gives the same model, another
// seed a different one.
func TestNewRandomDeterministic(t *testing.T) {
	be := nputest.Open(0)
	cfg := testConfig(t, nil)
	toks := []int32{1, 2, 3, 4, 5, 6}
	logits := func(seed int64, dtype string) [][]float32 {
		m := NewRandom(be, cfg, dtype, seed)
		return newSession(t, m, 2, 8, 1).run(toks, len(toks))
	}
	a, b, c := logits(7, "float32"), logits(7, "float32"), logits(8, "float32")
	if d := relDiff(a, b); d != 0 {
		t.Fatalf("same seed differs by %g", d)
	}
	if d := relDiff(a, c); d == 0 {
		t.Fatal("different seeds give identical logits")
	}
	if d := relDiff(logits(7, "bfloat16"), a); d > 0.1 || d == 0 {
		t.Fatalf("bf16 weights vs f32 weights differ by %g", d)
	}
}

func TestCapacity(t *testing.T) {
	be := nputest.Open(0)
	cfg := testConfig(t, nil)
	m := NewRandom(be, cfg, "float32", 1)
	if err := m.SetCacheDType(npu.F32); err != nil { // the default on accelerators is bf16
		t.Fatal(err)
	}
	// 2 DSA layers with full indexers: latent 16 + key 8 + gate 8 + pool 8/4.
	if got, want := m.BytesPerToken(), int64(2*(16+8+8+2)*4); got != want {
		t.Fatalf("BytesPerToken %d, want %d", got, want)
	}
	// 2 KDA layers: conv 3 x 3*16 + state 2x8x8.
	if got, want := m.BytesPerSequenceState(), int64(2*(3*48+2*8*8)*4); got != want {
		t.Fatalf("BytesPerSequenceState %d, want %d", got, want)
	}
	if _, err := m.NewCache(4, 6, 1); err == nil {
		t.Fatal("NewCache accepted a block size that is not a multiple of index_kpool")
	}
}

// must returns v, panicking on err: for the tests' forwards.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestHalfCache: a bf16 or f16 per-token cache (--kv-cache-dtype) halves
// the bytes per token, keeps the KDA state fp32, and gives logits within
// 16-bit rounding of the f32 cache through prefill chunks and decode steps.
func TestHalfCache(t *testing.T) {
	be := nputest.Open(0)
	for vi, v := range testVariants {
		for _, dt := range []npu.DType{npu.BF16, npu.F16} {
			t.Run(fmt.Sprintf("%s/%v", v.name, dt), func(t *testing.T) {
				cfg := testConfig(t, v.over)
				m := testModel(t, be, cfg, int64(vi+1))
				if err := m.SetCacheDType(npu.F32); err != nil { // the reference; accelerators default to bf16
					t.Fatal(err)
				}
				toks := randTokens(rand.New(rand.NewPCG(uint64(vi), 2)), 40, cfg.VocabSize)
				full, state := m.BytesPerToken(), m.BytesPerSequenceState()
				ref := newSession(t, m, 8, 8, 1).run(toks, 7)
				if err := m.SetCacheDType(dt); err != nil {
					t.Fatal(err)
				}
				defer m.SetCacheDType(npu.F32)
				if got := m.BytesPerToken(); 2*got != full {
					t.Fatalf("%v cache: %d bytes per token, f32 %d", dt, got, full)
				}
				if got := m.BytesPerSequenceState(); got != state {
					t.Fatalf("%v cache: state %d bytes per sequence, want the fp32 %d", dt, got, state)
				}
				s := newSession(t, m, 8, 8, 1)
				for _, lc := range s.cache.Layers {
					if lc.Latent != nil && lc.Latent.DType() != dt || lc.State != nil && lc.State.DType() != npu.F32 {
						t.Fatalf("cache tensors %v / %v", lc.Latent, lc.State)
					}
				}
				got := s.run(toks, 7)
				d := relDiff(got, ref)
				t.Logf("%v cache: max relative logit difference %.3g", dt, d)
				if d > 2e-2 || math.IsNaN(d) {
					t.Fatalf("%v cache: max relative logit difference %g", dt, d)
				}
				if (d == 0) != (full == 0) { // no DSA layer: nothing per token is cached
					t.Fatalf("%v cache: difference %g with %d f32 bytes per token", dt, d, full)
				}
			})
		}
	}
	if err := (&Model{}).SetCacheDType(npu.I8); err == nil {
		t.Error("an I8 cache was accepted")
	}
}
