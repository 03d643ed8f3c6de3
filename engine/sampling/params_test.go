package sampling

import (
	"errors"
	"math"
	"slices"
	"testing"
)

// withParams returns DefaultParams modified by f.
func withParams(f func(p *Params)) Params {
	p := DefaultParams()
	f(&p)
	return p
}

func TestValidateMessages(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, tc := range []struct {
		name  string
		p     Params
		want  string // full Error() text, as vLLM's str(VLLMValidationError)
		param string
	}{
		{"n0", withParams(func(p *Params) { p.N = 0 }), "n must be at least 1, got 0.", ""},
		{"nBig", withParams(func(p *Params) { p.N = MaxN + 1 }),
			"n must be at most 16384, got 16385. To increase this limit, set the VLLM_MAX_N_SEQUENCES environment variable.", ""},
		{"presence", withParams(func(p *Params) { p.PresencePenalty = 2.5 }), "presence_penalty must be in [-2, 2], got 2.5.", ""},
		{"presenceNaN", withParams(func(p *Params) { p.PresencePenalty = nan }), "presence_penalty must be in [-2, 2], got nan.", ""},
		{"frequency", withParams(func(p *Params) { p.FrequencyPenalty = -3 }), "frequency_penalty must be in [-2, 2], got -3.0.", ""},
		{"repInf", withParams(func(p *Params) { p.RepetitionPenalty = Ptr(inf) }), "repetition_penalty must be a finite number, got inf.", ""},
		{"repNaN", withParams(func(p *Params) { p.RepetitionPenalty = Ptr(nan) }), "repetition_penalty must be a finite number, got nan.", ""},
		{"repZero", withParams(func(p *Params) { p.RepetitionPenalty = Ptr(0.0) }), "repetition_penalty must be greater than zero, got 0.0.", ""},
		{"tempNeg", withParams(func(p *Params) { p.Temperature = Ptr(-1.0) }),
			"temperature must be non-negative, got -1.0. (parameter=temperature, value=-1.0)", "temperature"},
		{"tempNaN", withParams(func(p *Params) { p.Temperature = Ptr(nan) }),
			"temperature must be a finite number, got nan. (parameter=temperature, value=nan)", "temperature"},
		{"tempBig", withParams(func(p *Params) { p.Temperature = Ptr(2.5) }),
			"temperature must be in [0, 2], got 2.5. (parameter=temperature, value=2.5)", "temperature"},
		{"topP", withParams(func(p *Params) { p.TopP = Ptr(1.5) }),
			"top_p must be in (0, 1], got 1.5. (parameter=top_p, value=1.5)", "top_p"},
		{"topPZero", withParams(func(p *Params) { p.TopP = Ptr(0.0) }),
			"top_p must be in (0, 1], got 0.0. (parameter=top_p, value=0.0)", "top_p"},
		{"topK", withParams(func(p *Params) { p.TopK = Ptr(-2) }), "top_k must be 0 (disable), or at least 1, got -2.", ""},
		{"minP", withParams(func(p *Params) { p.MinP = Ptr(1.5) }), "min_p must be in [0, 1], got 1.5.", ""},
		{"minPNeg", withParams(func(p *Params) { p.MinP = Ptr(-0.1) }), "min_p must be in [0, 1], got -0.1.", ""},
		{"maxTokens", withParams(func(p *Params) { p.MaxTokens = Ptr(0) }),
			"max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)", "max_tokens"},
		{"minTokensNeg", withParams(func(p *Params) { p.MinTokens = -1 }), "min_tokens must be greater than or equal to 0, got -1.", ""},
		{"minGtMax", withParams(func(p *Params) { p.MinTokens = 6; p.MaxTokens = Ptr(5) }),
			"min_tokens must be less than or equal to max_tokens=5, got 6.", ""},
		{"logprobs", withParams(func(p *Params) { p.Logprobs = Ptr(-2) }),
			"logprobs must be non-negative or -1, got -2. (parameter=logprobs, value=-2)", "logprobs"},
		{"greedyN", withParams(func(p *Params) { p.Temperature = Ptr(0.0); p.N = 2 }), "n must be 1 when using greedy sampling, got 2.", ""},
		// vLLM's order: n before temperature, temperature before top_p.
		{"orderN", withParams(func(p *Params) { p.N = 0; p.Temperature = Ptr(-1.0) }), "n must be at least 1, got 0.", ""},
		{"orderTemp", withParams(func(p *Params) { p.Temperature = Ptr(-1.0); p.TopP = Ptr(2.0) }),
			"temperature must be non-negative, got -1.0. (parameter=temperature, value=-1.0)", "temperature"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.p
			err := p.Validate()
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Validate() = %v, want a *ValidationError", err)
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("Error() = %q\n want %q", got, tc.want)
			}
			if ve.Param != tc.param {
				t.Errorf("Param = %q, want %q", ve.Param, tc.param)
			}
		})
	}
}

func TestValidateAcceptsAndNormalizes(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    Params
	}{
		{"defaults", DefaultParams()},
		{"topK0", withParams(func(p *Params) { p.TopK = Ptr(0) })},
		{"topKMinus1", withParams(func(p *Params) { p.TopK = Ptr(-1) })},
		{"edges", withParams(func(p *Params) {
			p.Temperature, p.TopP, p.MinP = Ptr(2.0), Ptr(1.0), Ptr(1.0)
			p.PresencePenalty, p.FrequencyPenalty = -2, 2
			p.MinTokens, p.MaxTokens = 5, Ptr(5)
		})},
		{"logprobsAll", withParams(func(p *Params) { p.Logprobs = Ptr(-1) })},
		{"greedyN1", withParams(func(p *Params) { p.Temperature = Ptr(0.0) })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.p
			if err := p.Validate(); err != nil {
				t.Fatalf("Validate() = %v", err)
			}
		})
	}

	// A tiny positive temperature is raised to 0.01 (not greedy).
	p := withParams(func(p *Params) { p.Temperature = Ptr(0.001); p.N = 3 })
	if err := p.Validate(); err != nil || *p.Temperature != MinTemperature || p.greedy() {
		t.Errorf("temperature 0.001: err %v, temperature %v, greedy %v", err, *p.Temperature, p.greedy())
	}
	// Greedy resets top_p, top_k and min_p.
	p = withParams(func(p *Params) { p.Temperature, p.TopP, p.TopK, p.MinP = Ptr(0.0), Ptr(0.5), Ptr(3), Ptr(0.2) })
	if err := p.Validate(); err != nil || *p.TopP != 1 || *p.TopK != 0 || *p.MinP != 0 {
		t.Errorf("greedy normalization: err %v, top_p %v top_k %v min_p %v", err, *p.TopP, *p.TopK, *p.MinP)
	}
	// Stop ids lose duplicates, keeping the first occurrence's order.
	p = withParams(func(p *Params) { p.StopTokenIDs = []int32{7, 3, 7, 1, 3} })
	if err := p.Validate(); err != nil || !slices.Equal(p.StopTokenIDs, []int32{7, 3, 1}) {
		t.Errorf("stop ids: err %v, %v", err, p.StopTokenIDs)
	}
	// Logit biases are clamped into [-100, 100]; NaN becomes -100 (Python
	// min(100, max(-100, nan))). The caller's map is left alone.
	orig := map[int32]float64{1: 250, 2: -1e9, 3: math.NaN(), 4: 3.5, 5: math.Inf(1)}
	p = withParams(func(p *Params) { p.LogitBias = orig })
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	want := map[int32]float64{1: 100, 2: -100, 3: -100, 4: 3.5, 5: 100}
	for id, w := range want {
		if p.LogitBias[id] != w {
			t.Errorf("bias[%d] = %v, want %v", id, p.LogitBias[id], w)
		}
	}
	if orig[1] != 250 {
		t.Errorf("Validate modified the caller's bias map")
	}
}

func TestVerify(t *testing.T) {
	const vocab = 154880
	for _, tc := range []struct {
		name string
		p    Params
		max  int
		want string
	}{
		{"logprobs21", withParams(func(p *Params) { p.Logprobs = Ptr(21) }), DefaultMaxLogprobs,
			"Requested sample logprobs of 21, which is greater than max allowed: 20 (parameter=logprobs, value=21)"},
		{"logprobsAll", withParams(func(p *Params) { p.Logprobs = Ptr(-1) }), DefaultMaxLogprobs,
			"Requested sample logprobs of 154880, which is greater than max allowed: 20 (parameter=logprobs, value=154880)"},
		{"bias", withParams(func(p *Params) { p.LogitBias = map[int32]float64{vocab: 1, -1: 2, 5: 1} }), DefaultMaxLogprobs,
			"token_id(s) [-1, 154880] in logit_bias contain out-of-vocab token ids. Vocabulary size: 154880 (parameter=logit_bias, value=[-1, 154880])"},
		{"stop", withParams(func(p *Params) { p.StopTokenIDs = []int32{3, 200000, 154880} }), DefaultMaxLogprobs,
			"token_id(s) [200000, 154880] in stop_token_ids contain out-of-vocab token ids. Vocabulary size: 154880 (parameter=stop_token_ids, value=[200000, 154880])"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.Verify(tc.max, vocab)
			if err == nil || err.Error() != tc.want {
				t.Errorf("Verify() = %v\n want %s", err, tc.want)
			}
		})
	}
	for _, p := range []Params{
		withParams(func(p *Params) { p.Logprobs = Ptr(20) }),
		withParams(func(p *Params) { p.Logprobs = Ptr(0) }),
		withParams(func(p *Params) { p.StopTokenIDs = []int32{0, vocab - 1}; p.LogitBias = map[int32]float64{vocab - 1: 1} }),
	} {
		if err := p.Verify(DefaultMaxLogprobs, vocab); err != nil {
			t.Errorf("Verify(%+v) = %v", p, err)
		}
	}
	p := withParams(func(p *Params) { p.Logprobs = Ptr(-1) })
	if err := p.Verify(-1, vocab); err != nil {
		t.Errorf("max_logprobs -1 must allow logprobs -1: %v", err)
	}
}

func TestApplyDefaults(t *testing.T) {
	gen := GenerationDefaults{
		Temperature: Ptr(0.6), TopP: Ptr(0.95), TopK: Ptr(40), MinP: Ptr(0.05),
		RepetitionPenalty: Ptr(1.1), MaxTokens: Ptr(1000),
	}
	// Unset fields take the generation config's values.
	p := DefaultParams()
	p.ApplyDefaults(gen)
	if *p.Temperature != 0.6 || *p.TopP != 0.95 || *p.TopK != 40 || *p.MinP != 0.05 ||
		*p.RepetitionPenalty != 1.1 || *p.MaxTokens != 1000 {
		t.Errorf("defaults not applied: %+v", p)
	}
	// Fields the request sets win; max_tokens is the minimum.
	p = DefaultParams()
	p.Temperature, p.TopK, p.MaxTokens = Ptr(0.0), Ptr(0), Ptr(50)
	p.ApplyDefaults(gen)
	if *p.Temperature != 0 || *p.TopK != 0 || *p.TopP != 0.95 || *p.MaxTokens != 50 {
		t.Errorf("request values overridden: %+v", p)
	}
	p = DefaultParams()
	p.MaxTokens = Ptr(5000)
	p.ApplyDefaults(gen)
	if *p.MaxTokens != 1000 {
		t.Errorf("max_tokens = %d, want the generation-config cap 1000", *p.MaxTokens)
	}
	// No generation config: vLLM's neutral values.
	p = DefaultParams()
	p.ApplyDefaults(GenerationDefaults{})
	if *p.Temperature != 1 || *p.TopP != 1 || *p.TopK != 0 || *p.MinP != 0 || *p.RepetitionPenalty != 1 || p.MaxTokens != nil {
		t.Errorf("neutral defaults: %+v", p)
	}
	p.ClampMaxTokens(77)
	if *p.MaxTokens != 77 {
		t.Errorf("ClampMaxTokens: %d", *p.MaxTokens)
	}
	p.ClampMaxTokens(100)
	if *p.MaxTokens != 77 {
		t.Errorf("ClampMaxTokens raised max_tokens to %d", *p.MaxTokens)
	}

	// to_diff_dict drops values equal to transformers' class defaults.
	d := GenerationDefaults{Temperature: Ptr(1.0), TopP: Ptr(0.8), TopK: Ptr(50), RepetitionPenalty: Ptr(1.0), MinP: Ptr(0.0)}.WithoutHFClassDefaults()
	if d.Temperature != nil || d.TopK != nil || d.RepetitionPenalty != nil || d.TopP == nil || *d.TopP != 0.8 || d.MinP == nil {
		t.Errorf("WithoutHFClassDefaults = %+v", d)
	}
}

func TestApplyEOSAndChild(t *testing.T) {
	p := withParams(func(p *Params) { p.StopTokenIDs = []int32{9} })
	p.ApplyEOS(2, []int32{2, 5, 5, 6})
	if !p.hasEOS || p.eos != 2 {
		t.Errorf("eos = %d (has %v)", p.eos, p.hasEOS)
	}
	if got := slices.Sorted(slices.Values(p.StopTokenIDs)); !slices.Equal(got, []int32{5, 6, 9}) {
		t.Errorf("stop ids = %v, want generation-config EOS ids added", p.StopTokenIDs)
	}
	if !slices.Equal(p.allStop, []int32{2, 5, 6, 9}) {
		t.Errorf("allStop = %v", p.allStop)
	}
	// ignore_eos: EOS no longer stops, but min_tokens still masks it.
	q := withParams(func(p *Params) { p.IgnoreEOS = true; p.StopTokenIDs = []int32{9} })
	q.ApplyEOS(2, []int32{2, 5})
	if q.hasEOS || !slices.Equal(q.StopTokenIDs, []int32{9}) || !slices.Equal(q.allStop, []int32{2, 5, 9}) {
		t.Errorf("ignore_eos: hasEOS %v stop %v allStop %v", q.hasEOS, q.StopTokenIDs, q.allStop)
	}

	p.N, p.Seed = 3, Ptr(uint64(10))
	for i := range 3 {
		c := p.Child(i)
		if c.N != 1 || *c.Seed != uint64(10+i) {
			t.Errorf("child %d: n %d seed %d", i, c.N, *c.Seed)
		}
	}
	if *p.Seed != 10 {
		t.Errorf("Child modified the parent's seed")
	}
	p.Seed = nil
	if p.Child(1).Seed != nil {
		t.Errorf("unseeded child got a seed")
	}

	if SeedFromInt(-1) != nil || *SeedFromInt(42) != 42 || *SeedFromInt(-2) != math.MaxUint64-1 {
		t.Errorf("SeedFromInt")
	}
}
