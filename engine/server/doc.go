// Package server is npuserve's OpenAI-compatible HTTP front end (gin),
// wire-compatible with vLLM's: /v1/completions, /v1/chat/completions
// (JSON and server-sent events), /v1/models, /tokenize, /detokenize,
// /health, /version and /metrics (the vllm:* Prometheus series).
//
// # The request's path
//
//	decode (pydantic-like lax field rules, vLLM's error envelope)
//	→ model check, unsupported-feature check
//	→ prompt: tokenize text / take token ids, or render the chat template
//	  (Renderer, shared with `npuserve render`)
//	→ context-length checks and sampling.Params (generation_config
//	  defaults, max_tokens = min(request, room left, max_new_tokens))
//	→ one engine request per (prompt, n) sequence
//	→ per sequence: incremental detokenization, stop strings (held back
//	  while they could still match, never sent in part), parsers
//	  (reasoning / tool calls) for chat
//	→ one JSON response, or SSE chunks ending in "data: [DONE]".
//
// A client that goes away aborts its engine requests, which frees their
// cache before the engine's next step. Every response shape follows
// vLLM's pydantic models field by field (see protocol.go), and errors use
// vLLM's {"error": {"message", "type", "param", "code"}} envelope with
// vLLM's messages.
package server
