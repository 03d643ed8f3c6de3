// Package parser splits GLM model output into reasoning, content and tool
// calls the way vLLM does for `--reasoning-parser glm45` and
// `--tool-call-parser glm47`, both for whole outputs (non-streaming) and
// for incremental text deltas (streaming).
//
// # Wire format
//
// GLM-4.5 … GLM-5.3-Flash wrap reasoning in <think>…</think> (the chat
// template usually ends the prompt with <think>, so the output starts
// inside reasoning) and emit tool calls as
//
//	<tool_call>name\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n</tool_call>
//
// where the newline after the name is optional (GLM-4.7+ often writes
// name<arg_key>…), whitespace between tags is insignificant and a call may
// have no arguments. GLM-5.3-Flash may instead put a JSON object after the
// name (<tool_call>name\n{"k": 1}</tool_call>, <tool_call>name>{…}) or a
// whole {"name": …, "arguments": …} object; both are accepted.
//
// The eight tags are single added tokens in GLM tokenizers, but this
// package only looks at text: a tag split over several deltas is
// recognised, and any suffix of the text seen so far that could still
// become a tag is held back until the next delta decides it. Nothing is
// ever dropped except the tags themselves (and whitespace where vLLM drops
// it): Flush releases held-back text as content.
//
// # Pieces
//
//   - GLM45Reasoning (NewReasoning): <think>/</think> state machine with
//     Extract for whole outputs and Feed/Flush for deltas.
//   - GLM47Tools (NewTools): the tool-call parser over content text, with
//     Extract and Feed/Flush producing DeltaEvents.
//   - Stream / Parse: both combined, producing OpenAI-shaped ChatDelta
//     chunks and a final Message, including the finish_reason rules of
//     vLLM's chat serving layer.
//
// Streaming and non-streaming share one implementation (Extract is Feed
// of the whole text followed by Flush), so the concatenation of streamed
// reasoning, content and tool-call argument fragments never depends on
// how the output was split into deltas. The doc comments of
// GLM45Reasoning and GLM47Tools say where behaviour follows, or
// deliberately departs from, vLLM.
//
// Nothing in this package is safe for concurrent use; create one parser
// (or Stream) per request choice.
package parser
