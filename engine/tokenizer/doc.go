// Package tokenizer encodes and decodes text with Hugging Face
// tokenizer.json files that describe byte-level BPE models (GPT-2, Llama 3,
// Qwen 2/3, GLM-4/5, gpt-oss, DeepSeek V3 and their relatives).
//
// The goal is exactness: for every supported file, Encode and Decode return
// what the Rust tokenizers library (0.23) returns. Regular-expression
// pre-tokenizers are not compiled: each supported Split pattern is
// recognised by its exact text and run by a hand-written scanner that
// reproduces the backtracking (Oniguruma) semantics, including the
// `\s+(?!\S)` look-ahead that RE2 cannot express. Anything the package does
// not implement exactly (another model type, an unknown pattern, a
// normalizer or decoder it does not know) is rejected at load time instead
// of tokenizing differently from the reference.
//
// Supported components:
//
//   - model: BPE (merges as "a b" strings or [a, b] pairs, ignore_merges,
//     unk_token/fuse_unk); byte_fallback and dropout are rejected.
//   - normalizer: null, NFC, NFD, NFKC, NFKD, Sequence of these.
//   - pre_tokenizer: Sequence, Split (String patterns, and the Regex
//     patterns of GPT-2, cl100k/Llama 3/GLM, Qwen 2/3, o200k/gpt-oss and
//     DeepSeek V3; every behavior and invert), Digits, and ByteLevel as the
//     last step (add_prefix_space, use_regex).
//   - post_processor: null, ByteLevel, TemplateProcessing, Sequence.
//   - decoder: ByteLevel, or null (tokens joined by spaces).
//   - added tokens with the special, single_word, lstrip, rstrip and
//     normalized flags, matched leftmost-longest before pre-tokenization.
//
// Load also reads tokenizer_config.json when present, as transformers does:
// added_tokens_decoder entries missing from tokenizer.json and named special
// tokens (bos_token, eos_token, …) are added, and BOS/EOS are resolved.
// Encode(text, true) applies only the tokenizer.json post-processor, like HF
// tokenizers; see Config.AddBOS for the transformers difference.
//
// Character classes follow Oniguruma's Unicode tables, which are newer than
// Go's (unicode_tables.go holds the difference). The golden tests under
// testdata come from the Rust library itself (tools/tokgolden).
//
// A Tokenizer is safe for concurrent use. Stream turns generated ids into
// text incrementally without ever splitting a UTF-8 sequence.
package tokenizer
