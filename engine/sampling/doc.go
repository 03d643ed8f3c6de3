// Package sampling turns a row of host logits into the next token with
// vLLM v1's sampling semantics, and validates request sampling parameters
// with vLLM's error messages.
//
// # Request flow
//
//	p := sampling.DefaultParams()        // n = 1, defaultable fields unset
//	p.Temperature = sampling.Ptr(0.7)    // ... fields the request sets
//	p.ApplyDefaults(gen)                 // generation_config.json defaults
//	p.ClampMaxTokens(maxModelLen - len(prompt)) // after rejecting over-long prompts
//	if err := p.Validate(); err != nil { ... }                   // 400, err.Error()
//	if err := p.Verify(sampling.DefaultMaxLogprobs, vocab); err != nil { ... }
//	p.ApplyEOS(eosID, genConfigEOS)
//	s, _ := sampling.NewSampler(p.Child(i), prompt) // one per sequence
//	tok, err := s.Sample(row)                       // each step
//	reason, stopTok := s.CheckStop(maxModelLen)
//
// # Semantics (checked against vLLM sources)
//
// Parameters: vllm/sampling_params.py (SamplingParams.__post_init__,
// _verify_args, verify/_validate_logprobs, update_from_generation_config);
// defaults: OpenAI protocol to_sampling_params (_DEFAULT_SAMPLING_PARAMS
// temperature 1, top_p 1, top_k 0, min_p 0, repetition_penalty 1) and
// vllm/config/model.py get_diff_sampling_param (generation_config.json's
// repetition_penalty, temperature, top_k, top_p, min_p, max_new_tokens).
//
// Order of operations per step (vllm/v1/sample/sampler.py Sampler.forward
// and sample):
//
//  1. Raw logprobs: log_softmax of the untouched logits (logprobs_mode
//     "raw_logprobs", vLLM v1's default).
//  2. Non-argmax-invariant logits processors
//     (vllm/v1/sample/logits_processor/builtin.py): min_tokens sets EOS and
//     every stop id to -Inf while fewer than min_tokens tokens were
//     generated; logit_bias adds each bias.
//  3. Penalties (vllm/v1/sample/ops/penalties.py,
//     vllm/model_executor/layers/utils.py apply_penalties): repetition
//     penalty on tokens seen in the prompt or the output (logit > 0:
//     multiplied by 1/p, else by p), then logit -= frequency * count and
//     logit -= presence * [count > 0] over output tokens, in float32.
//  4. temperature < 1e-5: argmax of the processed logits (lowest id on
//     ties). Otherwise:
//  5. logits / temperature; min-p (argmax-invariant processor: drop tokens
//     whose probability is below min_p times the largest); top-k (drop
//     logits below the k-th largest, ties kept); top-p (renormalized over
//     what is left, drop the tokens whose ascending cumulative probability
//     is <= 1 - top_p, never the most likely)
//     (vllm/v1/sample/ops/topk_topp_sampler.py); draw.
//
// Differences from vLLM, all deliberate: the draw is an inverse-CDF draw
// from a per-sequence PCG generator, not torch's exponential race, so a seed
// reproduces npuserve's tokens, not vLLM's; probabilities are computed in
// float64 from the float32 logits (vLLM: float32), which can only move a
// top-p or min-p boundary on values within rounding of it; and NaN or +Inf
// logits are an error instead of silently producing garbage.
//
// Cost on the host is one pass over the row for greedy decoding and top-k
// (a k-sized heap), and for the other random modes one pass computing
// weights into a histogram plus one cheap pass to locate the drawn token;
// top-p sorts only the tokens of the histogram bin where the cumulative
// probability crosses top_p. Nothing sorts or copies the whole vocab.
package sampling
