package server

import (
	"bytes"
	"encoding/json"

	"github.com/npuserve/npuserve/engine/parser"
)

// The response types follow vLLM's pydantic models field by field and in
// declaration order (pydantic dumps fields in that order), so the JSON
// keys match what vLLM sends.

// usage is vLLM's UsageInfo.
type usage struct {
	PromptTokens        int                 `json:"prompt_tokens"`
	TotalTokens         int                 `json:"total_tokens"`
	CompletionTokens    int                 `json:"completion_tokens"`
	PromptTokensDetails *promptTokenDetails `json:"prompt_tokens_details"`
}

// usageNoNull is usage as vLLM dumps it with exclude_none (the final
// usage chunk of a stream).
type usageNoNull struct {
	PromptTokens        int                 `json:"prompt_tokens"`
	TotalTokens         int                 `json:"total_tokens"`
	CompletionTokens    int                 `json:"completion_tokens"`
	PromptTokensDetails *promptTokenDetails `json:"prompt_tokens_details,omitempty"`
}

// promptTokenDetails is vLLM's PromptTokenUsageInfo. It reports prefix-cache
// hits, and prefix caching is not implemented, so usage always carries it
// as null (vLLM sends null too when nothing was cached);
// --enable-prompt-tokens-details is reported as without effect.
type promptTokenDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// completionLogprobs is vLLM's CompletionLogProbs.
type completionLogprobs struct {
	TextOffset    []int              `json:"text_offset"`
	TokenLogprobs []*float64         `json:"token_logprobs"`
	Tokens        []string           `json:"tokens"`
	TopLogprobs   []*orderedFloatMap `json:"top_logprobs"`
}

// orderedFloatMap is a JSON object of token → logprob keeping insertion
// order (Python dicts do).
type orderedFloatMap struct {
	keys []string
	vals []float64
}

func (m *orderedFloatMap) set(k string, v float64) {
	for _, kk := range m.keys {
		if kk == k {
			return // first wins: a dict comprehension over a dict whose
			// earlier key decodes to the same text keeps the later value,
			// but vLLM's keys are distinct ids; identical text is rare.
		}
	}
	m.keys = append(m.keys, k)
	m.vals = append(m.vals, v)
}

// MarshalJSON writes the object in insertion order.
func (m *orderedFloatMap) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range m.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		vb, _ := json.Marshal(m.vals[i])
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// completionChoice is vLLM's CompletionResponseChoice.
type completionChoice struct {
	Index          int                 `json:"index"`
	Text           string              `json:"text"`
	Logprobs       *completionLogprobs `json:"logprobs"`
	FinishReason   *string             `json:"finish_reason"`
	StopReason     any                 `json:"stop_reason"`
	TokenIDs       []int32             `json:"token_ids"`
	PromptLogprobs any                 `json:"prompt_logprobs"`
	PromptTokenIDs []int32             `json:"prompt_token_ids"`
}

// completionResponse is vLLM's CompletionResponse.
type completionResponse struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	Choices           []completionChoice `json:"choices"`
	ServiceTier       *string            `json:"service_tier"`
	SystemFingerprint *string            `json:"system_fingerprint"`
	Usage             usage              `json:"usage"`
	KVTransferParams  any                `json:"kv_transfer_params"`
}

// completionStreamChoice is vLLM's CompletionResponseStreamChoice.
type completionStreamChoice struct {
	Index          int                 `json:"index"`
	Text           string              `json:"text"`
	Logprobs       *completionLogprobs `json:"logprobs"`
	FinishReason   *string             `json:"finish_reason"`
	StopReason     any                 `json:"stop_reason"`
	PromptTokenIDs []int32             `json:"prompt_token_ids"`
	TokenIDs       []int32             `json:"token_ids"`
}

// completionStreamResponse is vLLM's CompletionStreamResponse (dumped
// with exclude_unset=False: every field, nulls included).
type completionStreamResponse struct {
	ID      string                   `json:"id"`
	Object  string                   `json:"object"`
	Created int64                    `json:"created"`
	Model   string                   `json:"model"`
	Choices []completionStreamChoice `json:"choices"`
	Usage   *usage                   `json:"usage"`
}

// usageChunk is the final usage-only chunk (dumped with exclude_none).
type usageChunk struct {
	ID      string      `json:"id"`
	Object  string      `json:"object"`
	Created int64       `json:"created"`
	Model   string      `json:"model"`
	Choices []struct{}  `json:"choices"`
	Usage   usageNoNull `json:"usage"`
}

// chatLogprob is vLLM's ChatCompletionLogProb.
type chatLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// chatLogprobsContent is vLLM's ChatCompletionLogProbsContent.
type chatLogprobsContent struct {
	Token       string        `json:"token"`
	Logprob     float64       `json:"logprob"`
	Bytes       []int         `json:"bytes"`
	TopLogprobs []chatLogprob `json:"top_logprobs"`
}

// chatLogprobs is vLLM's ChatCompletionLogProbs.
type chatLogprobs struct {
	Content []chatLogprobsContent `json:"content"`
}

// chatMessage is vLLM's ChatMessage, with reasoning also sent as the
// older name reasoning_content (serving-compat.md §2(a)).
type chatMessage struct {
	Role             string            `json:"role"`
	Content          *string           `json:"content"`
	Refusal          *string           `json:"refusal"`
	Annotations      any               `json:"annotations"`
	Audio            any               `json:"audio"`
	FunctionCall     any               `json:"function_call"`
	ToolCalls        []parser.ToolCall `json:"tool_calls"`
	Reasoning        *string           `json:"reasoning"`
	ReasoningContent *string           `json:"reasoning_content"`
}

// chatChoice is vLLM's ChatCompletionResponseChoice.
type chatChoice struct {
	Index        int           `json:"index"`
	Message      chatMessage   `json:"message"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
	StopReason   any           `json:"stop_reason"`
	TokenIDs     []int32       `json:"token_ids"`
}

// chatResponse is vLLM's ChatCompletionResponse.
type chatResponse struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []chatChoice `json:"choices"`
	ServiceTier       *string      `json:"service_tier"`
	SystemFingerprint *string      `json:"system_fingerprint"`
	Usage             usage        `json:"usage"`
	PromptLogprobs    any          `json:"prompt_logprobs"`
	PromptTokenIDs    []int32      `json:"prompt_token_ids"`
	KVTransferParams  any          `json:"kv_transfer_params"`
}

// chatDelta is vLLM's DeltaMessage dumped with exclude_unset: only the
// fields that were set.
type chatDelta struct {
	Role  string
	Delta parser.ChatDelta
	// ContentSet sends "content" even when empty (the first chunk's
	// {"role": "assistant", "content": ""}).
	ContentSet bool
}

// MarshalJSON writes role (when set), then the parser delta's fields.
func (d chatDelta) MarshalJSON() ([]byte, error) {
	inner, err := d.Delta.MarshalJSON()
	if err != nil {
		return nil, err
	}
	if d.Role == "" && !d.ContentSet {
		return inner, nil
	}
	var b bytes.Buffer
	b.WriteByte('{')
	if d.Role != "" {
		b.WriteString(`"role":`)
		rb, _ := marshal(d.Role)
		b.Write(rb)
	}
	if d.ContentSet && d.Delta.Content == "" {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		b.WriteString(`"content":""`)
	}
	if rest := bytes.TrimSpace(inner[1 : len(inner)-1]); len(rest) > 0 {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		b.Write(rest)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// chatStreamChoice is vLLM's ChatCompletionResponseStreamChoice as it is
// built in the stream generator (index, delta, logprobs and finish_reason
// always set; stop_reason on the last chunk; token_ids when asked).
type chatStreamChoice struct {
	Index        int           `json:"index"`
	Delta        chatDelta     `json:"delta"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
	// StopReason and TokenIDs are written only when set (see MarshalJSON
	// of chatStreamResponse).
	StopReason    any     `json:"-"`
	HasStopReason bool    `json:"-"`
	TokenIDs      []int32 `json:"-"`
	WantTokenIDs  bool    `json:"-"`
}

// MarshalJSON adds stop_reason and token_ids only when they were set, as
// exclude_unset does.
func (c chatStreamChoice) MarshalJSON() ([]byte, error) {
	type base chatStreamChoice
	b, err := marshal(base(c))
	if err != nil {
		return nil, err
	}
	var extra bytes.Buffer
	if c.HasStopReason {
		sb, _ := marshal(c.StopReason)
		extra.WriteString(`,"stop_reason":`)
		extra.Write(sb)
	}
	if c.WantTokenIDs {
		tb, _ := marshal(c.TokenIDs)
		extra.WriteString(`,"token_ids":`)
		extra.Write(tb)
	}
	if extra.Len() == 0 {
		return b, nil
	}
	return append(b[:len(b)-1], append(extra.Bytes(), '}')...), nil
}

// chatStreamResponse is vLLM's ChatCompletionStreamResponse (dumped with
// exclude_unset: usage and prompt_token_ids only when set).
type chatStreamResponse struct {
	ID             string             `json:"id"`
	Object         string             `json:"object"`
	Created        int64              `json:"created"`
	Model          string             `json:"model"`
	Choices        []chatStreamChoice `json:"choices"`
	Usage          *usage             `json:"usage,omitempty"`
	PromptTokenIDs []int32            `json:"prompt_token_ids,omitempty"`
}

// modelCard is vLLM's ModelCard.
type modelCard struct {
	ID          string            `json:"id"`
	Object      string            `json:"object"`
	Created     int64             `json:"created"`
	OwnedBy     string            `json:"owned_by"`
	Root        *string           `json:"root"`
	Parent      *string           `json:"parent"`
	MaxModelLen int               `json:"max_model_len"`
	Permission  []modelPermission `json:"permission"`
}

// modelPermission is vLLM's ModelPermission.
type modelPermission struct {
	ID                 string  `json:"id"`
	Object             string  `json:"object"`
	Created            int64   `json:"created"`
	AllowCreateEngine  bool    `json:"allow_create_engine"`
	AllowSampling      bool    `json:"allow_sampling"`
	AllowLogprobs      bool    `json:"allow_logprobs"`
	AllowSearchIndices bool    `json:"allow_search_indices"`
	AllowView          bool    `json:"allow_view"`
	AllowFineTuning    bool    `json:"allow_fine_tuning"`
	Organization       string  `json:"organization"`
	Group              *string `json:"group"`
	IsBlocking         bool    `json:"is_blocking"`
}

// modelList is vLLM's ModelList.
type modelList struct {
	Object string      `json:"object"`
	Data   []modelCard `json:"data"`
}

// marshal is json.Marshal without HTML escaping (Python's json and
// pydantic leave '<', '>' and '&' alone).
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// strPtr returns &s.
func strPtr(s string) *string { return &s }
