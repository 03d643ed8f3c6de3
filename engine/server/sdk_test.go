package server

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/engine/core"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// sdkClient is the official OpenAI client pointed at ts.
func sdkClient(url string) openai.Client {
	return openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("none"), option.WithMaxRetries(0))
}

// weatherTool is a function tool with a string and an integer argument.
func weatherTool() openai.ChatCompletionToolUnionParam {
	return openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name:        "get_weather",
		Description: openai.String("Weather of a city"),
		Parameters: shared.FunctionParameters{
			"type": "object",
			"properties": map[string]any{
				"city": map[string]any{"type": "string"},
				"days": map[string]any{"type": "integer"},
			},
		},
	})
}

const toolOutput = "The user wants weather.</think>Let me look.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key><arg_value>3</arg_value></tool_call>"

func toolServer(t *testing.T) (*fakeEngine, string) {
	eng := newFakeEngine(textScript(t, toolOutput, true))
	ts, _ := startServer(t, eng, Options{ReasoningParser: "glm45", ToolCallParser: "glm47", EnableAutoToolChoice: true})
	return eng, ts.URL
}

func TestSDKToolCalls(t *testing.T) {
	_, url := toolServer(t)
	client := sdkClient(url)
	params := openai.ChatCompletionNewParams{
		Model:    "tiny",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in Paris for 3 days?")},
		Tools:    []openai.ChatCompletionToolUnionParam{weatherTool()},
	}
	resp, err := client.Chat.Completions.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	ch := resp.Choices[0]
	if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 {
		t.Fatalf("choice %s", ch.RawJSON())
	}
	tc := ch.Message.ToolCalls[0]
	if tc.Function.Name != "get_weather" || !jsonEqual(t, tc.Function.Arguments, `{"city":"Paris","days":3}`) || !strings.HasPrefix(tc.ID, "chatcmpl-tool-") {
		t.Errorf("tool call %s", tc.RawJSON())
	}
	if ch.Message.Content != "Let me look." {
		t.Errorf("content %q", ch.Message.Content)
	}
	var extra struct {
		Reasoning        string `json:"reasoning"`
		ReasoningContent string `json:"reasoning_content"`
	}
	json.Unmarshal([]byte(ch.Message.RawJSON()), &extra)
	if extra.Reasoning != "The user wants weather." || extra.ReasoningContent != extra.Reasoning {
		t.Errorf("reasoning %+v", extra)
	}

	// Streamed: the accumulator rebuilds the same call.
	stream := client.Chat.Completions.NewStreaming(context.Background(), params)
	acc := openai.ChatCompletionAccumulator{}
	var reasoning strings.Builder
	for stream.Next() {
		chunk := stream.Current()
		acc.AddChunk(chunk)
		if len(chunk.Choices) > 0 {
			var d struct {
				Reasoning string `json:"reasoning"`
			}
			json.Unmarshal([]byte(chunk.Choices[0].Delta.RawJSON()), &d)
			reasoning.WriteString(d.Reasoning)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	sc := acc.Choices[0]
	if sc.FinishReason != "tool_calls" || len(sc.Message.ToolCalls) != 1 {
		t.Fatalf("streamed choice %+v", sc)
	}
	stc := sc.Message.ToolCalls[0]
	if stc.Function.Name != "get_weather" || !jsonEqual(t, stc.Function.Arguments, `{"city":"Paris","days":3}`) {
		t.Errorf("streamed tool call %+v", stc)
	}
	if sc.Message.Content != "Let me look." || reasoning.String() != "The user wants weather." {
		t.Errorf("streamed content %q reasoning %q", sc.Message.Content, reasoning.String())
	}

	// tool_choice "none": no parsing of tool calls.
	params.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("none")}
	resp, err = client.Chat.Completions.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].FinishReason != "stop" || len(resp.Choices[0].Message.ToolCalls) != 0 || !strings.Contains(resp.Choices[0].Message.Content, "<tool_call>") {
		t.Errorf("tool_choice none: %s", resp.Choices[0].RawJSON())
	}
	// Named tool choice: parsed, finish_reason stays "stop" (vLLM).
	params.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfFunctionToolChoice: &openai.ChatCompletionNamedToolChoiceParam{
		Function: openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"}}}
	resp, err = client.Chat.Completions.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices[0].Message.ToolCalls) != 1 {
		t.Errorf("named tool choice: %s", resp.Choices[0].RawJSON())
	}
}

func jsonEqual(t *testing.T, a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

func TestSDKToolHistoryRendering(t *testing.T) {
	eng, url := toolServer(t)
	client := sdkClient(url)
	_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "tiny",
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.UserMessage("Weather?"),
			{OfAssistant: &openai.ChatCompletionAssistantMessageParam{ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{{
				OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{ID: "call_1",
					Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "get_weather", Arguments: `{"city": "Paris", "days": 3}`}},
			}}}},
			openai.ToolMessage("sunny", "call_1"),
		},
		Tools: []openai.ChatCompletionToolUnionParam{weatherTool()},
	})
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := loadTiny(t)
	prompt := tok.Decode(toInts(eng.requests()[0].PromptTokens), false)
	for _, want := range []string{
		`{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city", "parameters": {`,
		"<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
		"<|observation|>\n<tool_response>\nsunny\n</tool_response><|assistant|><think>",
	} {
		if !strings.Contains(prompt, want) {
			t.Errorf("prompt lacks %q:\n%s", want, prompt)
		}
	}
}

func TestSDKCompletionsStreamNLogprobs(t *testing.T) {
	eng := newFakeEngine(textScript(t, "one two three four five six seven", false))
	ts, _ := startServer(t, eng, Options{})
	client := sdkClient(ts.URL)
	stream := client.Completions.NewStreaming(context.Background(), openai.CompletionNewParams{
		Model:         "tiny",
		Prompt:        openai.CompletionNewParamsPromptUnion{OfArrayOfStrings: []string{"a", "b"}},
		MaxTokens:     openai.Int(5),
		N:             openai.Int(2),
		Logprobs:      openai.Int(2),
		Seed:          openai.Int(7),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	texts := map[int64]string{}
	finish := map[int64]string{}
	var usage openai.CompletionUsage
	for stream.Next() {
		c := stream.Current()
		for _, ch := range c.Choices {
			texts[ch.Index] += ch.Text
			if ch.FinishReason != "" {
				finish[ch.Index] = string(ch.FinishReason)
			}
			if len(ch.Logprobs.Tokens) != len(ch.Logprobs.TokenLogprobs) {
				t.Errorf("logprobs %s", ch.Logprobs.RawJSON())
			}
		}
		if c.Usage.TotalTokens > 0 {
			usage = c.Usage
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	tok, _ := loadTiny(t)
	want := tok.Decode(toInts(eng.script(nil)[:5]), true)
	if len(texts) != 4 {
		t.Fatalf("%d choices, want 4 (2 prompts × n=2)", len(texts))
	}
	for i := int64(0); i < 4; i++ {
		if texts[i] != want || finish[i] != "length" {
			t.Errorf("choice %d: %q %q", i, texts[i], finish[i])
		}
	}
	if usage.CompletionTokens != 20 {
		t.Errorf("usage %+v", usage)
	}
	// Seeds: the four sequences got seed+index per prompt (vLLM's n>1).
	var seeds []uint64
	for _, r := range eng.requests() {
		seeds = append(seeds, *r.Params.Seed)
	}
	if len(seeds) != 4 || seeds[0] != 7 || seeds[1] != 8 || seeds[2] != 7 || seeds[3] != 8 {
		t.Errorf("seeds %v", seeds)
	}
}

func TestSDKChatLogprobsAndStream(t *testing.T) {
	eng := newFakeEngine(textScript(t, "alpha beta gamma", true))
	ts, _ := startServer(t, eng, Options{})
	client := sdkClient(ts.URL)
	params := openai.ChatCompletionNewParams{
		Model:       "tiny",
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage("hi")},
		Logprobs:    openai.Bool(true),
		TopLogprobs: openai.Int(3),
		N:           openai.Int(2),
	}
	resp, err := client.Chat.Completions.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != 2 {
		t.Fatalf("%d choices", len(resp.Choices))
	}
	lp := resp.Choices[0].Logprobs.Content
	n := len(eng.script(nil))
	if len(lp) != n || len(lp[0].TopLogprobs) != 3 || lp[0].Logprob != -0.25 || lp[0].TopLogprobs[0].Token != lp[0].Token {
		t.Errorf("logprobs %s", resp.Choices[0].Logprobs.RawJSON())
	}
	if resp.Choices[0].Message.Content != "alpha beta gamma" || resp.Usage.CompletionTokens != int64(2*n) {
		t.Errorf("message %q usage %+v", resp.Choices[0].Message.Content, resp.Usage)
	}
	stream := client.Chat.Completions.NewStreaming(context.Background(), params)
	acc := openai.ChatCompletionAccumulator{}
	chunks := 0
	for stream.Next() {
		acc.AddChunk(stream.Current())
		chunks++
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(acc.Choices) != 2 || acc.Choices[1].Message.Content != "alpha beta gamma" || acc.Choices[1].FinishReason != "stop" {
		t.Errorf("accumulated %+v", acc.Choices)
	}
}

func TestSDKErrors(t *testing.T) {
	eng := newFakeEngine(textScript(t, "x", true))
	ts, _ := startServer(t, eng, Options{})
	client := sdkClient(ts.URL)
	_, err := client.Completions.New(context.Background(), openai.CompletionNewParams{
		Model: "other", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("a")}})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Message != "The model `other` does not exist." || apiErr.Type != "NotFoundError" {
		t.Errorf("unknown model: %v", err)
	}
	_, err = client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "tiny", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("a")}, Temperature: openai.Float(-2)})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Param != "temperature" {
		t.Errorf("temperature: %v", err)
	}
	// A failure inside the engine mid-stream arrives as an error event.
	eng.script = func(*core.Request) []int32 { return []int32{5, 6, 7} }
	eng.mu.Lock()
	eng.failAdd = errors.New("engine: closed")
	eng.mu.Unlock()
	_, err = client.Completions.New(context.Background(), openai.CompletionNewParams{
		Model: "tiny", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("a")}})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 {
		t.Errorf("add failure: %v", err)
	}
}
