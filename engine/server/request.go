package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/npuserve/npuserve/engine/parser"
	"github.com/npuserve/npuserve/engine/pyfmt"
	"github.com/npuserve/npuserve/engine/sampling"
	"github.com/npuserve/npuserve/engine/tokenizer"
)

// streamOptions is vLLM's StreamOptions.
type streamOptions struct {
	IncludeUsage         bool // default true
	ContinuousUsageStats bool
}

// commonRequest holds the fields completions and chat requests share
// (vLLM's CompletionRequest / ChatCompletionRequest sampling fields).
type commonRequest struct {
	model            *string
	frequencyPenalty float64
	presencePenalty  float64
	logitBias        map[int32]float64
	n                int64
	seed             *int64
	stop             []string
	stream           bool
	streamOptions    *streamOptions
	temperature      *float64
	topP             *float64

	topK                   *int64
	minP                   *float64
	repetitionPenalty      *float64
	stopTokenIDs           []int64
	includeStopStrInOutput bool
	ignoreEOS              bool
	minTokens              int64
	skipSpecialTokens      bool
	truncatePromptTokens   *int64
	addSpecialTokens       bool
	priority               int64
	requestID              string
	returnTokensAsTokenIDs *bool
	returnTokenIDs         bool

	// unsupported lists fields that are set but that npuserve cannot
	// honour yet (answered with a clear 400).
	unsupported []string
	nFields     int
}

// completionRequest is a decoded /v1/completions body.
type completionRequest struct {
	commonRequest
	prompts   []promptSpec
	echo      bool
	logprobs  *int64
	maxTokens *int64 // default 16
	suffix    *string
}

// chatRequest is a decoded /v1/chat/completions body.
type chatRequest struct {
	commonRequest
	messages             json.RawMessage
	logprobs             bool
	topLogprobs          int64
	maxTokens            *int64 // max_completion_tokens or max_tokens
	maxTokensParam       string
	tools                json.RawMessage
	toolChoice           json.RawMessage
	reasoningEffort      *string
	includeReasoning     bool
	parallelToolCalls    bool
	echo                 bool
	addGenerationPrompt  bool
	continueFinalMessage bool
	documents            json.RawMessage
	chatTemplate         *string
	chatTemplateKwargs   json.RawMessage
	enableThinking       *bool
}

// promptSpec is one prompt of a completions request before tokenization.
type promptSpec struct {
	text   *string
	tokens []int64
}

// decodeCommon reads the shared fields in vLLM's declaration order.
func decodeCommon(b *body, r *commonRequest) {
	r.nFields = len(b.keys)
	r.model = b.optString("model")
	r.frequencyPenalty = b.floatOrNull("frequency_penalty", 0)
	if raw, ok := b.get("logit_bias"); ok {
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil {
			b.fail("logit_bias", "dict_type", "Input should be a valid dictionary", raw)
		} else {
			r.logitBias = map[int32]float64{}
			for k, v := range m {
				f, typ, msg := laxFloat(v)
				if typ != "" {
					b.fail("logit_bias."+k, typ, msg, v)
					continue
				}
				id, err := strconv.ParseInt(strings.TrimSpace(k), 10, 32)
				if err != nil {
					// int(token) fails in to_sampling_params: a 400 after
					// field validation.
					r.unsupported = append(r.unsupported, "!logit_bias:"+k)
					continue
				}
				r.logitBias[int32(id)] = f
			}
		}
	}
	r.n = b.int("n", 1)
	r.presencePenalty = b.floatOrNull("presence_penalty", 0)
	// seed: Field(ge=LONG_MIN, le=LONG_MAX), which any int64 satisfies.
	r.seed = b.optInt("seed")
	r.stop = b.stringOrList("stop")
	r.stream = b.boolOrNull("stream", false)
	if raw, ok := b.get("stream_options"); ok {
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil {
			b.fail("stream_options", "model_attributes_type", "Input should be a valid dictionary or object to extract fields from", raw)
		} else {
			so := &streamOptions{IncludeUsage: true}
			if v, ok := m["include_usage"]; ok && !isNull(v) {
				x, typ, msg := laxBool(v)
				if typ != "" {
					b.fail("stream_options.include_usage", typ, msg, v)
				}
				so.IncludeUsage = x
			}
			if v, ok := m["continuous_usage_stats"]; ok && !isNull(v) {
				x, typ, msg := laxBool(v)
				if typ != "" {
					b.fail("stream_options.continuous_usage_stats", typ, msg, v)
				}
				so.ContinuousUsageStats = x
			}
			r.streamOptions = so
		}
	}
	r.temperature = b.optFloat("temperature")
	r.topP = b.optFloat("top_p")
	b.optString("user")

	if b.bool("use_beam_search", false) {
		r.unsupported = append(r.unsupported, "use_beam_search")
	}
	r.topK = b.optInt("top_k")
	r.minP = b.optFloat("min_p")
	r.repetitionPenalty = b.optFloat("repetition_penalty")
	b.float("length_penalty", 1)
	r.stopTokenIDs = b.intList("stop_token_ids")
	r.includeStopStrInOutput = b.bool("include_stop_str_in_output", false)
	r.ignoreEOS = b.bool("ignore_eos", false)
	r.minTokens = b.int("min_tokens", 0)
	r.skipSpecialTokens = b.bool("skip_special_tokens", true)
	// spaces_between_special_tokens only affects slow (Python)
	// tokenizers; for tokenizer.json tokenizers vLLM ignores it too.
	b.bool("spaces_between_special_tokens", true)
	if r.truncatePromptTokens = b.optInt("truncate_prompt_tokens"); r.truncatePromptTokens != nil && *r.truncatePromptTokens < -1 {
		b.errs = append(b.errs, pydanticError{Type: "greater_than_equal", Loc: "body.truncate_prompt_tokens",
			Msg: "Input should be greater than or equal to -1", Input: strconv.FormatInt(*r.truncatePromptTokens, 10), Ctx: "{'ge': -1}"})
	}
	if b.intList("allowed_token_ids") != nil {
		r.unsupported = append(r.unsupported, "allowed_token_ids")
	}
	if b.stringOrList("bad_words") != nil {
		r.unsupported = append(r.unsupported, "bad_words")
	}
	if p := b.optInt("prompt_logprobs"); p != nil {
		r.unsupported = append(r.unsupported, "prompt_logprobs")
	}
	if raw, ok := b.get("response_format"); ok {
		var rf struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(raw, &rf) != nil || rf.Type != "text" {
			r.unsupported = append(r.unsupported, "response_format")
		}
	}
	if _, ok := b.get("structured_outputs"); ok {
		r.unsupported = append(r.unsupported, "structured_outputs")
	}
	if _, ok := b.get("guided_json"); ok {
		r.unsupported = append(r.unsupported, "guided_json")
	}
	if _, ok := b.get("logits_processors"); ok {
		r.unsupported = append(r.unsupported, "logits_processors")
	}
	r.priority = b.int("priority", 0)
	if id := b.optString("request_id"); id != nil {
		r.requestID = *id
	}
	r.returnTokensAsTokenIDs = b.optBool("return_tokens_as_token_ids")
	r.returnTokenIDs = b.boolOrNull("return_token_ids", false)
	if s := b.optString("cache_salt"); s != nil && *s == "" {
		r.unsupported = append(r.unsupported, "!cache_salt")
	} else if b.present("cache_salt") && !b.null("cache_salt") && s == nil {
		r.unsupported = append(r.unsupported, "!cache_salt")
	}
	b.object("kv_transfer_params")
	b.object("vllm_xargs")
	for _, k := range []string{"max_repetition_pattern_size", "min_repetition_pattern_size", "repetition_min_count"} {
		b.int(k, 0)
	}
}

// validatorError runs the checks shared by the request models' "before"
// validators (vLLM raises them before field validation; npuserve after,
// which only changes which of two problems is reported first).
func (r *commonRequest) validatorError(b *body) *APIError {
	if b.truthy("stream_options") && !b.truthy("stream") {
		return valueError("stream_options", r.nFields, "VLLMValidationError", "Stream options can only be defined when `stream=True`.")
	}
	for _, u := range r.unsupported {
		if u == "!cache_salt" {
			return valueError("", r.nFields, "ValueError", "Parameter 'cache_salt' must be a non-empty string if provided.")
		}
	}
	return nil
}

// unsupportedError answers fields npuserve accepts in the schema but
// cannot honour yet, and bad logit_bias keys.
func (r *commonRequest) unsupportedError() *APIError {
	for _, u := range r.unsupported {
		switch {
		case strings.HasPrefix(u, "!logit_bias:"):
			return badRequest("invalid literal for int() with base 10: %s", pyfmt.Repr(strings.TrimPrefix(u, "!logit_bias:")))
		case u == "!cache_salt":
		case u == "use_beam_search":
			return badParam(u, "Beam search (use_beam_search) is not supported by npuserve yet.")
		case u == "response_format" || u == "structured_outputs" || u == "guided_json":
			return badParam(u, "Structured outputs (%s) are not supported by npuserve yet; only response_format {\"type\": \"text\"} is accepted.", u)
		default:
			return badParam(u, "%s is not supported by npuserve yet.", u)
		}
	}
	return nil
}

// decodeCompletion decodes and checks a completions body.
func decodeCompletion(b *body) (*completionRequest, *APIError) {
	r := &completionRequest{}
	decodeCommon(b, &r.commonRequest)
	r.addSpecialTokens = b.bool("add_special_tokens", true)
	if raw, ok := b.get("prompt"); ok {
		ps, err := decodePrompt(raw)
		if err != nil {
			b.errs = append(b.errs, *err)
		}
		r.prompts = ps
	}
	r.echo = b.boolOrNull("echo", false)
	r.logprobs = b.optInt("logprobs")
	// max_tokens: int | None = 16 (null: only the context window bounds
	// the output).
	hasMax := b.present("max_tokens")
	r.maxTokens = b.optInt("max_tokens")
	if !hasMax {
		r.maxTokens = ptr(int64(16))
	}
	// vLLM's CompletionRequest has no max_completion_tokens (it ignores
	// it); the GLM tutorials pass it to /v1/completions, so npuserve
	// honours it when max_tokens is absent.
	if mct := b.optInt("max_completion_tokens"); mct != nil && !hasMax {
		r.maxTokens = mct
	}
	r.suffix = b.optString("suffix")
	b.get("prompt_embeds")
	if len(b.errs) > 0 {
		return nil, validationError(b.errs)
	}
	if err := r.validatorError(b); err != nil {
		return nil, err
	}
	if r.logprobs != nil && *r.logprobs < 0 {
		return nil, valueError("logprobs", r.nFields, "VLLMValidationError", "`logprobs` must be a positive value.")
	}
	if len(r.prompts) == 0 || (len(r.prompts) == 1 && r.prompts[0].text != nil && *r.prompts[0].text == "") {
		return nil, valueError("", r.nFields, "ValueError", "Either prompt or prompt_embeds must be provided and non-empty.")
	}
	return r, nil
}

// decodePrompt decodes prompt: str | list[str] | list[int] |
// list[list[int]].
func decodePrompt(raw json.RawMessage) ([]promptSpec, *pydanticError) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []promptSpec{{text: &s}}, nil
	}
	bad := &pydanticError{Type: "union_type", Loc: "body.prompt",
		Msg: "Input should be a string, a list of strings, a list of token ids or a list of token id lists", Input: pyInput(raw)}
	// A list of token ids, the large case, decodes straight to ids (8 bytes
	// an id, not a raw value each).
	var ids []int64
	if json.Unmarshal(raw, &ids) == nil {
		if ids == nil {
			ids = []int64{}
		}
		return []promptSpec{{tokens: ids}}, nil
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return nil, bad
	}
	var out []promptSpec
	for _, it := range items {
		var s string
		if json.Unmarshal(it, &s) == nil {
			out = append(out, promptSpec{text: &s})
			continue
		}
		var l []int64
		if json.Unmarshal(it, &l) == nil {
			out = append(out, promptSpec{tokens: l})
			continue
		}
		return nil, bad
	}
	// Mixed strings and lists are not one of the union's types.
	texts, lists := 0, 0
	for _, p := range out {
		if p.text != nil {
			texts++
		} else {
			lists++
		}
	}
	if texts > 0 && lists > 0 {
		return nil, bad
	}
	return out, nil
}

// decodeChat decodes and checks a chat body.
func decodeChat(b *body) (*chatRequest, *APIError) {
	r := &chatRequest{}
	raw, ok := b.get("messages")
	if !ok {
		b.errs = append(b.errs, b.missing("messages"))
	} else {
		r.messages = raw
	}
	decodeCommon(b, &r.commonRequest)
	r.logprobs = b.boolOrNull("logprobs", false)
	if tl := b.optInt("top_logprobs"); tl != nil {
		r.topLogprobs = *tl
	}
	mt := b.optInt("max_tokens")
	mct := b.optInt("max_completion_tokens")
	switch {
	case mct != nil && *mct != 0:
		r.maxTokens, r.maxTokensParam = mct, "max_completion_tokens"
	case mt != nil:
		r.maxTokens, r.maxTokensParam = mt, "max_tokens"
	case mct != nil:
		r.maxTokens, r.maxTokensParam = mct, "max_completion_tokens"
	}
	if t, ok := b.get("tools"); ok && checkTools(b, t) {
		r.tools = t
	}
	if tc, ok := b.get("tool_choice"); ok {
		r.toolChoice = tc
	}
	r.reasoningEffort = b.literal("reasoning_effort", "low", "medium", "high")
	r.includeReasoning = b.bool("include_reasoning", true)
	r.parallelToolCalls = b.boolOrNull("parallel_tool_calls", true)
	r.echo = b.bool("echo", false)
	r.addGenerationPrompt = b.bool("add_generation_prompt", true)
	r.continueFinalMessage = b.bool("continue_final_message", false)
	r.addSpecialTokens = b.bool("add_special_tokens", false)
	if d, ok := b.get("documents"); ok {
		r.documents = d
	}
	r.chatTemplate = b.optString("chat_template")
	r.chatTemplateKwargs = b.object("chat_template_kwargs")
	r.enableThinking = b.optBool("enable_thinking")
	b.object("mm_processor_kwargs")
	b.object("function_call")
	b.get("functions")
	b.get("modalities")
	b.get("audio")
	b.get("metadata")
	b.get("store")
	b.get("service_tier")
	b.get("prediction")
	b.get("web_search_options")
	if len(b.errs) > 0 {
		return nil, validationError(b.errs)
	}
	if err := r.validatorError(b); err != nil {
		return nil, err
	}
	if b.present("top_logprobs") && !b.null("top_logprobs") {
		tl := r.topLogprobs
		if tl < 0 && tl != -1 {
			return nil, valueError("top_logprobs", r.nFields, "VLLMValidationError", "`top_logprobs` must be a positive value or -1.")
		}
		if (tl == -1 || tl > 0) && !r.logprobs {
			return nil, valueError("top_logprobs", r.nFields, "VLLMValidationError", "when using `top_logprobs`, `logprobs` must be set to true.")
		}
	}
	if err := r.checkToolUsage(b); err != nil {
		return nil, err
	}
	if r.continueFinalMessage && r.addGenerationPrompt && b.truthy("add_generation_prompt") {
		return nil, valueError("", r.nFields, "ValueError", "Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
	}
	return r, nil
}

// checkTools validates tools as pydantic validates vLLM's
// list[ChatCompletionToolsParam]: a list of objects whose type is
// "function" (the default) and whose function is an object with a string
// name, an optional string description and an optional object parameters.
// Problems are recorded on b; it reports whether there were none.
func checkTools(b *body, raw json.RawMessage) bool {
	before := len(b.errs)
	fail := func(loc, typ, msg string, v json.RawMessage, ctx string) {
		b.errs = append(b.errs, pydanticError{Type: typ, Loc: "body.tools" + loc, Msg: msg, Input: pyInput(v), Ctx: ctx})
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		fail("", "list_type", "Input should be a valid list", raw, "")
		return false
	}
	const notObject = "Input should be a valid dictionary or object to extract fields from"
	for i, it := range items {
		loc := "." + strconv.Itoa(i)
		var tool map[string]json.RawMessage
		if isNull(it) || json.Unmarshal(it, &tool) != nil {
			fail(loc, "model_attributes_type", notObject, it, "")
			continue
		}
		if typ, ok := tool["type"]; ok {
			var s string
			if json.Unmarshal(typ, &s) != nil || s != "function" {
				fail(loc+".type", "literal_error", "Input should be 'function'", typ, `{'expected': "'function'"}`)
			}
		}
		fnRaw, ok := tool["function"]
		if !ok {
			fail(loc+".function", "missing", "Field required", it, "")
			continue
		}
		var fn map[string]json.RawMessage
		if isNull(fnRaw) || json.Unmarshal(fnRaw, &fn) != nil {
			fail(loc+".function", "model_attributes_type", notObject, fnRaw, "")
			continue
		}
		var str string
		if name, ok := fn["name"]; !ok {
			fail(loc+".function.name", "missing", "Field required", fnRaw, "")
		} else if json.Unmarshal(name, &str) != nil {
			fail(loc+".function.name", "string_type", "Input should be a valid string", name, "")
		}
		if d, ok := fn["description"]; ok && !isNull(d) && json.Unmarshal(d, &str) != nil {
			fail(loc+".function.description", "string_type", "Input should be a valid string", d, "")
		}
		if p, ok := fn["parameters"]; ok && !isNull(p) {
			if t := bytes.TrimSpace(p); len(t) == 0 || t[0] != '{' {
				fail(loc+".function.parameters", "dict_type", "Input should be a valid dictionary", p, "")
			}
		}
	}
	return len(b.errs) == before
}

// checkToolUsage is ChatCompletionRequest.check_tool_usage: tool_choice
// defaults to "auto" with tools; "required" with an empty tools list
// means "none"; a named tool must exist.
func (r *chatRequest) checkToolUsage(b *body) *APIError {
	hasTools := len(r.tools) > 0
	if !b.present("tool_choice") && b.truthy("tools") {
		r.toolChoice = json.RawMessage(`"auto"`)
	}
	if len(r.toolChoice) == 0 {
		return nil
	}
	var s string
	isStr := json.Unmarshal(r.toolChoice, &s) == nil
	if isStr && s == "none" {
		return nil
	}
	if !hasTools {
		return valueError("", r.nFields, "ValueError", "When using `tool_choice`, `tools` must be set.")
	}
	var named map[string]json.RawMessage
	isObj := json.Unmarshal(r.toolChoice, &named) == nil
	if !isObj && !(isStr && (s == "auto" || s == "required")) {
		shown := s
		if !isStr {
			shown = string(r.toolChoice)
		}
		return valueError("", r.nFields, "ValueError", fmt.Sprintf("Invalid value for `tool_choice`: %s! Only named tools, \"none\", \"auto\" or \"required\" are supported.", shown))
	}
	var list []json.RawMessage
	json.Unmarshal(r.tools, &list)
	if isStr && s == "required" && len(list) == 0 {
		r.toolChoice = json.RawMessage(`"none"`)
		r.tools = nil
		return nil
	}
	if isObj {
		correct := "Correct usage: `{\"type\": \"function\", \"function\": {\"name\": \"my_function\"}}`"
		var fn map[string]json.RawMessage
		if json.Unmarshal(named["function"], &fn) != nil {
			return valueError("", r.nFields, "ValueError", fmt.Sprintf("Invalid value for `function`: `%s` in `tool_choice`! %s", pyValue(named["function"]), correct))
		}
		nameRaw, ok := fn["name"]
		if !ok {
			return valueError("", r.nFields, "ValueError", "Expected field `name` in `function` in `tool_choice`! "+correct)
		}
		var name string
		if json.Unmarshal(nameRaw, &name) != nil || name == "" {
			return valueError("", r.nFields, "ValueError", fmt.Sprintf("Invalid `name` in `function`: `%s` in `tool_choice`! %s", pyValue(nameRaw), correct))
		}
		tools, err := parser.ParseTools(r.tools)
		if err != nil {
			return badParam("tools", "%v", err)
		}
		for _, t := range tools {
			if t.Name == name {
				return nil
			}
		}
		return valueError("", r.nFields, "ValueError", "The tool specified in `tool_choice` does not match any of the specified `tools`")
	}
	return nil
}

// pyValue renders a JSON value as Python's str() would show it in an
// f-string (None for null or absent).
func pyValue(raw json.RawMessage) string {
	if len(raw) == 0 || isNull(raw) {
		return "None"
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return strings.Trim(pyInput(raw), "'")
}

// chatInput returns what the renderer needs.
func (r *chatRequest) chatInput() ChatInput {
	return ChatInput{
		Messages: r.messages, Tools: r.tools, Documents: r.documents,
		ChatTemplate: r.chatTemplate, ChatTemplateKwargs: r.chatTemplateKwargs,
		ReasoningEffort: r.reasoningEffort, EnableThinking: r.enableThinking,
		AddGenerationPrompt: r.addGenerationPrompt, ContinueFinalMessage: r.continueFinalMessage,
		AddSpecialTokens: r.addSpecialTokens,
	}
}

// prompt is one tokenized prompt.
type prompt struct {
	// text is the prompt text ("" for token-id prompts, whose text is
	// decoded lazily for echo).
	text     string
	textKnow bool
	ids      []int32
}

// promptLimit is the longest text that is tokenized (--max-prompt-chars).
// The zero value has no limit.
type promptLimit struct {
	chars    int // 0: no limit
	modelLen int // for the message
}

// check refuses a text of more than chars characters without tokenizing
// it (with the automatic limit, such a text cannot fit max_model_len).
func (l promptLimit) check(text string) *APIError {
	if l.chars <= 0 || len(text) <= l.chars {
		return nil // a character is at least a byte
	}
	n := utf8.RuneCountInString(text)
	if n <= l.chars {
		return nil
	}
	return badParam("input_tokens", "This model's maximum context length is %d tokens. However, your prompt has %d characters, more than the %d this server tokenizes (--max-prompt-chars). Please reduce the length of the input messages.",
		l.modelLen, n, l.chars)
}

// tokenizePrompts tokenizes text prompts (tok nil: only token ids are
// accepted); a text longer than lim is refused before tokenization.
func tokenizePrompts(tok *tokenizer.Tokenizer, specs []promptSpec, addSpecial bool, lim promptLimit) ([]prompt, *APIError) {
	out := make([]prompt, len(specs))
	for i, p := range specs {
		if p.text != nil {
			if tok == nil {
				return nil, skipTokenizerError()
			}
			if aerr := lim.check(*p.text); aerr != nil {
				return nil, aerr
			}
			ids := tok.Encode(*p.text, addSpecial)
			out[i] = prompt{text: *p.text, textKnow: true, ids: make([]int32, len(ids))}
			for j, id := range ids {
				out[i].ids[j] = int32(id)
			}
			continue
		}
		ids := make([]int32, len(p.tokens))
		for j, id := range p.tokens {
			if id < 0 || id > math.MaxInt32 {
				return nil, badRequest("Token id %d is out of vocabulary", id)
			}
			ids[j] = int32(id)
		}
		out[i] = prompt{ids: ids}
	}
	return out, nil
}

// samplingParams builds the engine parameters of one prompt from the
// request (vLLM to_sampling_params with get_max_tokens). maxTokens is the
// request's max_tokens (nil: none); promptLen the prompt's length.
func (s *Server) samplingParams(r *commonRequest, maxTokens *int64, promptLen int, logprobs *int) (sampling.Params, *APIError) {
	p := sampling.DefaultParams()
	p.N = clampInt(r.n)
	p.Temperature, p.TopP, p.MinP, p.RepetitionPenalty = r.temperature, r.topP, r.minP, r.repetitionPenalty
	if r.topK != nil {
		p.TopK = ptr(clampInt(*r.topK))
	}
	p.PresencePenalty, p.FrequencyPenalty = r.presencePenalty, r.frequencyPenalty
	if r.seed != nil {
		p.Seed = sampling.SeedFromInt(*r.seed)
	}
	for _, id := range r.stopTokenIDs {
		if id < math.MinInt32 || id > math.MaxInt32 {
			return p, badParam("stop_token_ids", "token_id(s) [%d] in stop_token_ids contain out-of-vocab token ids.", id)
		}
		p.StopTokenIDs = append(p.StopTokenIDs, int32(id))
	}
	p.IgnoreEOS = r.ignoreEOS
	p.MinTokens = clampInt(r.minTokens)
	p.Logprobs = logprobs
	p.LogitBias = r.logitBias
	p.ApplyDefaults(s.opt.Generation)
	// get_max_tokens: the smallest of the room left, the request's value
	// and the generation config's max_new_tokens.
	room := s.maxModelLen - promptLen
	if maxTokens != nil {
		if *maxTokens < int64(room) {
			p.MaxTokens = ptr(clampInt(*maxTokens))
		} else {
			p.MaxTokens = ptr(room)
		}
		if s.opt.Generation.MaxTokens != nil && *s.opt.Generation.MaxTokens < *p.MaxTokens {
			p.MaxTokens = ptr(*s.opt.Generation.MaxTokens)
		}
	} else {
		p.ClampMaxTokens(room)
	}
	if err := p.Validate(); err != nil {
		return p, fromError(err)
	}
	// The last check of vLLM's _verify_args (stop strings are not part of
	// sampling.Params: the server applies them).
	if slices.Contains(r.stop, "") {
		return p, badRequest("stop cannot contain an empty string.")
	}
	if err := p.Verify(s.opt.MaxLogprobs, s.vocab()); err != nil {
		return p, fromError(err)
	}
	return p, nil
}

// vocab is the vocabulary size the server checks ids against.
func (s *Server) vocab() int {
	if s.vocabSize > 0 {
		return s.vocabSize
	}
	return math.MaxInt32
}

// checkContext is vLLM's input validation against max_model_len: the
// prompt must fit, and so must prompt + max_tokens when max_tokens is
// given.
func (s *Server) checkContext(promptLen int, maxTokens *int64) *APIError {
	if promptLen > s.maxModelLen {
		return badParam("input_tokens", "This model's maximum context length is %d tokens. However, your request has %d input tokens. Please reduce the length of the input messages. (parameter=input_tokens, value=%d)",
			s.maxModelLen, promptLen, promptLen)
	}
	// Compared with the room left, not as promptLen + max_tokens, which
	// overflows for max_tokens near 2^63.
	if maxTokens != nil && *maxTokens > 0 && *maxTokens > int64(s.maxModelLen-promptLen) {
		return badParam("max_tokens", "'max_tokens' or 'max_completion_tokens' is too large: %d. This model's maximum context length is %d tokens and your request has %d input tokens (%d > %d - %d). (parameter=max_tokens, value=%d)",
			*maxTokens, s.maxModelLen, promptLen, *maxTokens, s.maxModelLen, promptLen, *maxTokens)
	}
	return nil
}

// truncate applies truncate_prompt_tokens (keep the last k tokens; -1:
// max_model_len).
func (s *Server) truncate(ids []int32, k *int64) ([]int32, *APIError) {
	if k == nil {
		return ids, nil
	}
	n := *k
	if n == -1 {
		n = int64(s.maxModelLen)
	}
	if n > int64(s.maxModelLen) {
		return nil, badParam("truncate_prompt_tokens", "truncate_prompt_tokens value (%d) is greater than max_model_len (%d). Please request a smaller truncation size.", n, s.maxModelLen)
	}
	if int64(len(ids)) > n {
		ids = ids[int64(len(ids))-n:]
	}
	return ids, nil
}

func ptr[T any](v T) *T { return &v }
