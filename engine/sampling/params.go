package sampling

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/npuserve/npuserve/engine/pyfmt"
)

// Constants taken from vLLM (vllm/sampling_params.py, vllm/config/model.py).
const (
	// GreedyEpsilon is vLLM's _SAMPLING_EPS: a temperature below it means
	// greedy decoding.
	GreedyEpsilon = 1e-5
	// MinTemperature is vLLM's _MAX_TEMP: a temperature in (0, 0.01) is
	// raised to 0.01 (with a warning in vLLM) before validation.
	MinTemperature = 1e-2
	// MaxN is VLLM_MAX_N_SEQUENCES' default, the largest n accepted.
	MaxN = 16384
	// DefaultMaxLogprobs is ModelConfig.max_logprobs' default (--max-logprobs).
	DefaultMaxLogprobs = 20
	// MaxLogitBias bounds every logit_bias value: vLLM clamps each bias into
	// [-MaxLogitBias, MaxLogitBias] (SamplingParams.from_optional).
	MaxLogitBias = 100.0
)

// Neutral values vLLM uses when neither the request nor the model's
// generation_config.json sets a field (OpenAI protocol
// _DEFAULT_SAMPLING_PARAMS).
const (
	DefaultTemperature       = 1.0
	DefaultTopP              = 1.0
	DefaultTopK              = 0 // 0 (or -1) disables top-k
	DefaultMinP              = 0.0
	DefaultRepetitionPenalty = 1.0
)

// Params are one request's sampling parameters, the fields of vLLM's
// SamplingParams that act on token selection and stopping. The five
// pointer fields that generation_config.json can default (Temperature,
// TopP, TopK, MinP, RepetitionPenalty) are nil when the request leaves them
// unset; ApplyDefaults fills them. A nil pointer that reaches Validate or
// NewSampler means vLLM's neutral value (DefaultTemperature, ...).
//
// Build Params with DefaultParams (N = 1) and set what the request sets.
type Params struct {
	// N is the number of sequences to return (vLLM n, default 1). A
	// Sampler samples one sequence; use Child for the n sequences.
	N int

	// Temperature scales logits; 0 (anything below GreedyEpsilon after
	// Validate) is greedy decoding. Valid range [0, 2].
	Temperature *float64
	// TopP keeps the smallest set of most likely tokens whose cumulative
	// probability reaches TopP. Valid range (0, 1]; 1 disables.
	TopP *float64
	// TopK keeps the K most likely tokens (ties at the K-th value are all
	// kept). 0 or -1 disables.
	TopK *int
	// MinP drops tokens whose probability is below MinP times the most
	// likely token's. Valid range [0, 1]; 0 disables.
	MinP *float64
	// RepetitionPenalty (> 0) divides the positive and multiplies the
	// non-positive logits of every token seen in the prompt or the output.
	// 1 disables.
	RepetitionPenalty *float64

	// PresencePenalty ([-2, 2]) is subtracted once from the logit of every
	// token already generated.
	PresencePenalty float64
	// FrequencyPenalty ([-2, 2]) is subtracted from a token's logit once
	// per time it was generated.
	FrequencyPenalty float64

	// Seed makes the request's draws reproducible: the same seed gives the
	// same tokens whatever else is in the batch. nil draws the generator's
	// seed from a global source. (OpenAI seed -1 means nil; see SeedFromInt.)
	Seed *uint64

	// StopTokenIDs end the sequence when generated (the token is kept in
	// the output). Validate drops duplicates, keeping the first.
	StopTokenIDs []int32
	// IgnoreEOS keeps generating after the EOS token.
	IgnoreEOS bool
	// MinTokens masks EOS and every stop token until that many tokens have
	// been generated.
	MinTokens int
	// MaxTokens bounds the generated tokens (nil: only the context window
	// bounds them). Must be at least 1 when set.
	MaxTokens *int

	// Logprobs asks for log-probabilities: nil returns none; n >= 0
	// returns the sampled token's logprob and the n most likely tokens'
	// (chat logprobs=true with top_logprobs=n, completions logprobs=n);
	// -1 returns every token's (rejected unless max_logprobs allows it).
	Logprobs *int

	// LogitBias adds a bias to a token's logit before penalties. Validate
	// clamps each value into [-100, 100] as vLLM does (NaN becomes -100).
	LogitBias map[int32]float64

	// Set by ApplyEOS (vLLM update_from_generation_config).
	eos     int32   // primary EOS id that stops the sequence, if hasEOS
	hasEOS  bool    // eos is set (and IgnoreEOS is off)
	allStop []int32 // every id min_tokens masks: stop ids + all EOS ids
	eosSet  bool    // ApplyEOS was called (allStop is complete)
}

// DefaultParams returns vLLM's SamplingParams defaults: n = 1, every
// defaultable field unset, no penalties, no stop ids, no token limit.
func DefaultParams() Params { return Params{N: 1} }

// Ptr returns a pointer to v, for filling the optional Params fields.
func Ptr[T any](v T) *T { return &v }

// SeedFromInt converts an OpenAI/vLLM integer seed to Params.Seed: -1 means
// no seed (SamplingParams.__post_init__), any other value is taken modulo
// 2^64 (negative seeds wrap as torch's manual_seed does).
func SeedFromInt(seed int64) *uint64 {
	if seed == -1 {
		return nil
	}
	u := uint64(seed)
	return &u
}

// GenerationDefaults are the sampling defaults vLLM takes from the model's
// generation_config.json (ModelConfig.get_diff_sampling_param with the
// default --generation-config auto). A nil field has no default.
type GenerationDefaults struct {
	Temperature       *float64
	TopP              *float64
	TopK              *int
	MinP              *float64
	RepetitionPenalty *float64
	// MaxTokens is generation_config.json's max_new_tokens: a server-wide
	// cap on every request's max_tokens.
	MaxTokens *int
}

// WithoutHFClassDefaults returns g without the values equal to the
// defaults of transformers' GenerationConfig class (temperature 1.0,
// top_p 1.0, top_k 50, repetition_penalty 1.0). vLLM reads
// generation_config.json through GenerationConfig.to_diff_dict(), which
// drops those values, so e.g. an explicit "top_k": 50 in the file is
// ignored and top-k stays disabled (vllm-project/vllm#17553, #17787). Use
// it on defaults read straight from the JSON file to reproduce vLLM.
func (g GenerationDefaults) WithoutHFClassDefaults() GenerationDefaults {
	if g.Temperature != nil && *g.Temperature == 1.0 {
		g.Temperature = nil
	}
	if g.TopP != nil && *g.TopP == 1.0 {
		g.TopP = nil
	}
	if g.TopK != nil && *g.TopK == 50 {
		g.TopK = nil
	}
	if g.RepetitionPenalty != nil && *g.RepetitionPenalty == 1.0 {
		g.RepetitionPenalty = nil
	}
	return g
}

// ApplyDefaults fills the fields the request left unset from gen, as the
// OpenAI server's to_sampling_params does: temperature, top_p, top_k, min_p
// and repetition_penalty take gen's value when the request has none (vLLM's
// neutral value when gen has none either). When gen.MaxTokens is set it
// caps MaxTokens (min of the two; the server must still cap MaxTokens to
// the room left in the context window, see ClampMaxTokens).
func (p *Params) ApplyDefaults(gen GenerationDefaults) {
	fill := func(dst **float64, def *float64, neutral float64) {
		if *dst != nil {
			return
		}
		if def != nil {
			*dst = Ptr(*def)
		} else {
			*dst = Ptr(neutral)
		}
	}
	fill(&p.Temperature, gen.Temperature, DefaultTemperature)
	fill(&p.TopP, gen.TopP, DefaultTopP)
	fill(&p.MinP, gen.MinP, DefaultMinP)
	fill(&p.RepetitionPenalty, gen.RepetitionPenalty, DefaultRepetitionPenalty)
	if p.TopK == nil {
		if gen.TopK != nil {
			p.TopK = Ptr(*gen.TopK)
		} else {
			p.TopK = Ptr(DefaultTopK)
		}
	}
	if gen.MaxTokens != nil && (p.MaxTokens == nil || *gen.MaxTokens < *p.MaxTokens) {
		p.MaxTokens = Ptr(*gen.MaxTokens)
	}
}

// ClampMaxTokens caps MaxTokens to room, the tokens left in the context
// window (max_model_len - prompt length): vLLM's max_tokens is the minimum
// of the request's value, the generation-config cap and that room.
func (p *Params) ClampMaxTokens(room int) {
	if p.MaxTokens == nil || room < *p.MaxTokens {
		p.MaxTokens = Ptr(room)
	}
}

// ValidationError is a rejected parameter, carrying vLLM's message.
type ValidationError struct {
	// Message is vLLM's message, e.g. "temperature must be non-negative,
	// got -1.0.".
	Message string
	// Param is the parameter vLLM names in ErrorInfo.param ("" where vLLM
	// names none).
	Param string
	// Value is vLLM's rendering of the rejected value ("" where vLLM
	// gives none).
	Value string
}

// Error renders the error as vLLM's VLLMValidationError.__str__, which is
// what the OpenAI server puts in ErrorInfo.message: the message followed by
// " (parameter=..., value=...)" when vLLM attached them.
func (e *ValidationError) Error() string {
	var extras []string
	if e.Param != "" {
		extras = append(extras, "parameter="+e.Param)
	}
	if e.Value != "" {
		extras = append(extras, "value="+e.Value)
	}
	if len(extras) == 0 {
		return e.Message
	}
	return e.Message + " (" + strings.Join(extras, ", ") + ")"
}

func invalid(format string, args ...any) *ValidationError {
	return &ValidationError{Message: fmt.Sprintf(format, args...)}
}

func invalidParam(param, value, format string, args ...any) *ValidationError {
	return &ValidationError{Message: fmt.Sprintf(format, args...), Param: param, Value: value}
}

// Validate normalizes p and checks it exactly as SamplingParams.__post_init__
// and _verify_args do (vllm/sampling_params.py), returning the first error
// in vLLM's order with vLLM's message. Normalization: a temperature in
// (0, 0.01) becomes 0.01; duplicate stop ids are dropped; logit biases are
// clamped into [-100, 100]; a greedy request (temperature < 1e-5) gets
// top_p 1, top_k 0 and min_p 0. Validate is idempotent.
func (p *Params) Validate() error {
	if p.Temperature != nil && *p.Temperature > 0 && *p.Temperature < MinTemperature {
		p.Temperature = Ptr(MinTemperature)
	}
	if len(p.StopTokenIDs) > 1 {
		seen := make(map[int32]bool, len(p.StopTokenIDs))
		out := make([]int32, 0, len(p.StopTokenIDs))
		for _, id := range p.StopTokenIDs {
			if !seen[id] {
				seen[id] = true
				out = append(out, id)
			}
		}
		p.StopTokenIDs = out
	}
	if len(p.LogitBias) > 0 {
		lb := make(map[int32]float64, len(p.LogitBias))
		for id, b := range p.LogitBias {
			lb[id] = clampBias(b)
		}
		p.LogitBias = lb
	}

	// _verify_args, in vLLM's order.
	if p.N < 1 {
		return invalid("n must be at least 1, got %d.", p.N)
	}
	if p.N > MaxN {
		return invalid("n must be at most %d, got %d. To increase this limit, set the VLLM_MAX_N_SEQUENCES environment variable.", MaxN, p.N)
	}
	if v := p.PresencePenalty; !(-2 <= v && v <= 2) {
		return invalid("presence_penalty must be in [-2, 2], got %s.", pyfmt.FloatRepr(v))
	}
	if v := p.FrequencyPenalty; !(-2 <= v && v <= 2) {
		return invalid("frequency_penalty must be in [-2, 2], got %s.", pyfmt.FloatRepr(v))
	}
	if p.RepetitionPenalty != nil {
		v := *p.RepetitionPenalty
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return invalid("repetition_penalty must be a finite number, got %s.", pyfmt.FloatRepr(v))
		}
		if v <= 0 {
			return invalid("repetition_penalty must be greater than zero, got %s.", pyfmt.FloatRepr(v))
		}
	}
	if p.Temperature != nil {
		v := *p.Temperature
		s := pyfmt.FloatRepr(v)
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return invalidParam("temperature", s, "temperature must be a finite number, got %s.", s)
		}
		if v < 0 {
			return invalidParam("temperature", s, "temperature must be non-negative, got %s.", s)
		}
		if v > 2 {
			return invalidParam("temperature", s, "temperature must be in [0, 2], got %s.", s)
		}
	}
	if p.TopP != nil {
		if v := *p.TopP; !(0 < v && v <= 1) {
			s := pyfmt.FloatRepr(v)
			return invalidParam("top_p", s, "top_p must be in (0, 1], got %s.", s)
		}
	}
	if p.TopK != nil && *p.TopK < -1 {
		return invalid("top_k must be 0 (disable), or at least 1, got %d.", *p.TopK)
	}
	if p.MinP != nil {
		if v := *p.MinP; !(0 <= v && v <= 1) {
			return invalid("min_p must be in [0, 1], got %s.", pyfmt.FloatRepr(v))
		}
	}
	if p.MaxTokens != nil && *p.MaxTokens < 1 {
		s := strconv.Itoa(*p.MaxTokens)
		return invalidParam("max_tokens", s, "max_tokens must be at least 1, got %s.", s)
	}
	if p.MinTokens < 0 {
		return invalid("min_tokens must be greater than or equal to 0, got %d.", p.MinTokens)
	}
	if p.MaxTokens != nil && p.MinTokens > *p.MaxTokens {
		return invalid("min_tokens must be less than or equal to max_tokens=%d, got %d.", *p.MaxTokens, p.MinTokens)
	}
	if p.Logprobs != nil && *p.Logprobs != -1 && *p.Logprobs < 0 {
		s := strconv.Itoa(*p.Logprobs)
		return invalidParam("logprobs", s, "logprobs must be non-negative or -1, got %s.", s)
	}

	if p.greedy() {
		p.TopP = Ptr(1.0)
		p.TopK = Ptr(0)
		p.MinP = Ptr(0.0)
		if p.N > 1 {
			return invalid("n must be 1 when using greedy sampling, got %d.", p.N)
		}
	}
	return nil
}

// Verify runs the model-dependent checks of SamplingParams.verify: the
// logprobs count against maxLogprobs (-1: vocabSize) and the token ids of
// logit_bias and stop_token_ids against vocabSize, in vLLM's order and
// wording. Out-of-vocab logit_bias ids are listed in ascending order (a Go
// map keeps no insertion order).
func (p *Params) Verify(maxLogprobs, vocabSize int) error {
	if maxLogprobs == -1 {
		maxLogprobs = vocabSize
	}
	if p.Logprobs != nil && *p.Logprobs != 0 {
		n := *p.Logprobs
		if n == -1 {
			n = vocabSize
		}
		if n > maxLogprobs {
			return invalidParam("logprobs", strconv.Itoa(n),
				"Requested sample logprobs of %d, which is greater than max allowed: %d", n, maxLogprobs)
		}
	}
	if len(p.LogitBias) > 0 {
		var bad []int32
		for id := range p.LogitBias {
			if id < 0 || int(id) >= vocabSize {
				bad = append(bad, id)
			}
		}
		if len(bad) > 0 {
			slices.Sort(bad)
			l := pyIntList(bad)
			return invalidParam("logit_bias", l,
				"token_id(s) %s in logit_bias contain out-of-vocab token ids. Vocabulary size: %d", l, vocabSize)
		}
	}
	var bad []int32
	for _, id := range p.StopTokenIDs {
		if id < 0 || int(id) >= vocabSize {
			bad = append(bad, id)
		}
	}
	if len(bad) > 0 {
		l := pyIntList(bad)
		return invalidParam("stop_token_ids", l,
			"token_id(s) %s in stop_token_ids contain out-of-vocab token ids. Vocabulary size: %d", l, vocabSize)
	}
	return nil
}

// ApplyEOS records the model's end-of-sequence ids as vLLM's
// update_from_generation_config does. eos is the tokenizer's EOS id (-1:
// none): it stops the sequence unless IgnoreEOS. genEOS are
// generation_config.json's eos_token_id values: those other than eos join
// StopTokenIDs unless IgnoreEOS. Every one of them, and every stop id, is
// masked until MinTokens tokens are generated, even with IgnoreEOS (vLLM
// adds them to _all_stop_token_ids unconditionally). Call it once, after
// Validate.
func (p *Params) ApplyEOS(eos int32, genEOS []int32) {
	p.eos, p.hasEOS, p.eosSet = eos, !p.IgnoreEOS && eos >= 0, true
	all := slices.Clone(p.StopTokenIDs)
	if eos >= 0 {
		all = append(all, eos)
	}
	var extra []int32
	for _, id := range genEOS {
		if id != eos && !slices.Contains(extra, id) {
			extra = append(extra, id)
		}
	}
	all = append(all, extra...)
	if len(extra) > 0 && !p.IgnoreEOS {
		stop := slices.Clone(extra)
		for _, id := range p.StopTokenIDs {
			if !slices.Contains(stop, id) {
				stop = append(stop, id)
			}
		}
		p.StopTokenIDs = stop
	}
	slices.Sort(all)
	p.allStop = slices.Compact(all)
}

// Child returns the parameters of the index-th of the n sequences of a
// request, as vLLM's ParentRequest does: n = 1 and, when seeded, seed +
// index, so each sequence draws differently yet reproducibly.
func (p Params) Child(index int) Params {
	c := p
	c.N = 1
	if p.Seed != nil {
		c.Seed = Ptr(*p.Seed + uint64(index))
	}
	return c
}

// greedy reports whether p selects tokens by argmax.
func (p *Params) greedy() bool {
	return p.Temperature != nil && *p.Temperature < GreedyEpsilon
}

// clampBias is min(100.0, max(-100.0, b)) with Python's semantics, where a
// NaN loses both comparisons and becomes -100.
func clampBias(b float64) float64 {
	if !(b > -MaxLogitBias) {
		b = -MaxLogitBias
	}
	if !(b < MaxLogitBias) {
		b = MaxLogitBias
	}
	return b
}

// pyIntList formats ids as a Python list repr: "[1, 2, 3]".
func pyIntList(ids []int32) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, id := range ids {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(int(id)))
	}
	b.WriteByte(']')
	return b.String()
}
