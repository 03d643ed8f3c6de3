package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/npuserve/npuserve/engine/chattemplate"
	"github.com/npuserve/npuserve/engine/core"
	"github.com/npuserve/npuserve/engine/sampling"
	"github.com/npuserve/npuserve/engine/tokenizer"
	"github.com/sirupsen/logrus"
)

const tinyDir = "../../testdata/glm5next/tiny"

var (
	tinyOnce      sync.Once
	tinyTok       *tokenizer.Tokenizer
	tinyTemplates *chattemplate.ModelTemplates
	tinyErr       error
)

// loadTiny loads the tiny fixture's tokenizer and chat template once.
func loadTiny(t testing.TB) (*tokenizer.Tokenizer, *chattemplate.ModelTemplates) {
	t.Helper()
	tinyOnce.Do(func() {
		tinyTok, tinyErr = tokenizer.Load(tinyDir)
		if tinyErr == nil {
			tinyTemplates, tinyErr = chattemplate.LoadFromModelDir(tinyDir)
		}
	})
	if tinyErr != nil {
		t.Fatal(tinyErr)
	}
	return tinyTok, tinyTemplates
}

func quietLog() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

// startServer serves eng over HTTP with the tiny tokenizer and template.
func startServer(t testing.TB, eng Engine, opt Options) (*httptest.Server, *Server) {
	t.Helper()
	tok, tm := loadTiny(t)
	if opt.ServedModelNames == nil {
		opt.ServedModelNames = []string{"tiny"}
	}
	if opt.Templates == nil {
		opt.Templates = tm
	}
	if opt.Log == nil {
		opt.Log = quietLog()
	}
	s, err := New(eng, tok, opt)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts, s
}

// textScript makes the fake engine generate text (then EOS when eos).
func textScript(t testing.TB, text string, eos bool) func(*core.Request) []int32 {
	tok, _ := loadTiny(t)
	var ids []int32
	for _, id := range tok.Encode(text, false) {
		ids = append(ids, int32(id))
	}
	if eos {
		ids = append(ids, 480)
	}
	return func(*core.Request) []int32 { return ids }
}

// post sends a JSON body and returns the status, headers and body.
func post(t *testing.T, url, body string, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// sseEvents splits an SSE body into its data payloads.
func sseEvents(t *testing.T, body []byte) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		if !strings.HasPrefix(line, "data: ") {
			t.Fatalf("bad SSE line %q", line)
		}
		out = append(out, strings.TrimPrefix(line, "data: "))
	}
	if len(out) == 0 || out[len(out)-1] != "[DONE]" {
		t.Fatalf("stream does not end with [DONE]: %q", body)
	}
	return out
}

// keys returns an object's keys in order.
func keys(t *testing.T, raw []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %s", raw)
	}
	var out []string
	for dec.More() {
		k, _ := dec.Token()
		out = append(out, k.(string))
		var skip json.RawMessage
		dec.Decode(&skip)
	}
	return out
}

func field(t *testing.T, raw []byte, path ...string) json.RawMessage {
	t.Helper()
	cur := json.RawMessage(raw)
	for _, p := range path {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(cur, &m); err != nil {
			var arr []json.RawMessage
			if err2 := json.Unmarshal(cur, &arr); err2 != nil {
				t.Fatalf("%v: %s is not an object or array", path, cur)
			}
			var i int
			fmt.Sscan(p, &i)
			cur = arr[i]
			continue
		}
		cur = m[p]
	}
	return cur
}

func TestCompletionResponseShape(t *testing.T) {
	eng := newFakeEngine(textScript(t, "Hello, world! How are you today?", false))
	ts, _ := startServer(t, eng, Options{Generation: sampling.GenerationDefaults{TopP: sampling.Ptr(0.95)}})
	code, hdr, body := post(t, ts.URL+"/v1/completions", `{"model":"tiny","prompt":"Hi there","max_tokens":4,"return_token_ids":true}`, "X-Request-Id", "abc")
	if code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	if got := hdr.Get("X-Request-Id"); got != "abc" {
		t.Errorf("X-Request-Id = %q", got)
	}
	want := []string{"id", "object", "created", "model", "choices", "service_tier", "system_fingerprint", "usage", "kv_transfer_params"}
	if got := keys(t, body); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("keys %v, want %v", got, want)
	}
	ch := field(t, body, "choices", "0")
	wantCh := []string{"index", "text", "logprobs", "finish_reason", "stop_reason", "token_ids", "prompt_logprobs", "prompt_token_ids"}
	if got := keys(t, ch); strings.Join(got, ",") != strings.Join(wantCh, ",") {
		t.Errorf("choice keys %v, want %v", got, wantCh)
	}
	var resp struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Model   string `json:"model"`
		Choices []struct {
			Text           string  `json:"text"`
			FinishReason   string  `json:"finish_reason"`
			TokenIDs       []int32 `json:"token_ids"`
			PromptTokenIDs []int32 `json:"prompt_token_ids"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
			TotalTokens      int `json:"total_tokens"`
		} `json:"usage"`
	}
	json.Unmarshal(body, &resp)
	tok, _ := loadTiny(t)
	ids := eng.script(nil)[:4]
	wantText := tok.Decode(toInts(ids), true)
	if resp.ID != "cmpl-abc" || resp.Object != "text_completion" || resp.Model != "tiny" {
		t.Errorf("header fields %+v", resp)
	}
	c := resp.Choices[0]
	if c.Text != wantText || c.FinishReason != "length" || fmt.Sprint(c.TokenIDs) != fmt.Sprint(ids) {
		t.Errorf("choice %+v, want text %q ids %v", c, wantText, ids)
	}
	if len(c.PromptTokenIDs) != len(tok.Encode("Hi there", true)) {
		t.Errorf("prompt_token_ids %v", c.PromptTokenIDs)
	}
	u := resp.Usage
	if u.CompletionTokens != 4 || u.PromptTokens != len(c.PromptTokenIDs) || u.TotalTokens != u.PromptTokens+4 {
		t.Errorf("usage %+v", u)
	}
	// generation_config.json's top_p became the default.
	reqs := eng.requests()
	if p := reqs[0].Params; p.TopP == nil || *p.TopP != 0.95 || *p.MaxTokens != 4 {
		t.Errorf("params %+v", p)
	}
}

func toInts(ids []int32) []int {
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out
}

func TestChatResponseShape(t *testing.T) {
	eng := newFakeEngine(textScript(t, "Fine, thanks.", true))
	ts, _ := startServer(t, eng, Options{})
	code, _, body := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"How are you?"}],"max_tokens":50}`)
	if code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	want := []string{"id", "object", "created", "model", "choices", "service_tier", "system_fingerprint", "usage", "prompt_logprobs", "prompt_token_ids", "kv_transfer_params"}
	if got := keys(t, body); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("keys %v, want %v", got, want)
	}
	msg := field(t, body, "choices", "0", "message")
	wantMsg := []string{"role", "content", "refusal", "annotations", "audio", "function_call", "tool_calls", "reasoning", "reasoning_content"}
	if got := keys(t, msg); strings.Join(got, ",") != strings.Join(wantMsg, ",") {
		t.Errorf("message keys %v, want %v", got, wantMsg)
	}
	if s := string(field(t, msg, "content")); s != `"Fine, thanks."` {
		t.Errorf("content %s", s)
	}
	if s := string(field(t, msg, "tool_calls")); s != `[]` {
		t.Errorf("tool_calls %s", s)
	}
	if s := string(field(t, body, "choices", "0", "finish_reason")); s != `"stop"` {
		t.Errorf("finish_reason %s (EOS must end with stop and stop_reason null)", s)
	}
	if s := string(field(t, body, "choices", "0", "stop_reason")); s != `null` {
		t.Errorf("stop_reason %s", s)
	}
	// The prompt is the template's rendering, tokenized without special
	// tokens added again.
	tok, tm := loadTiny(t)
	r := &Renderer{Templates: tm, Tok: tok, ContentFormat: "auto"}
	prompt, ids, err := r.RenderRequestJSON([]byte(`{"messages":[{"role":"user","content":"How are you?"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if prompt != "[gMASK]<sop><|user|>\nHow are you?<|assistant|><think>" {
		t.Errorf("prompt %q", prompt)
	}
	if got := eng.requests()[0].PromptTokens; fmt.Sprint(got) != fmt.Sprint(ids) {
		t.Errorf("engine prompt %v, rendered %v", got, ids)
	}
}

// errCase is one bad request and the envelope it must get.
type errCase struct {
	name, path, body  string
	status            int
	typ, param, inMsg string
	hdr               []string
}

func TestErrorEnvelope(t *testing.T) {
	eng := newFakeEngine(textScript(t, "ok", true))
	eng.maxLen = 64
	ts, _ := startServer(t, eng, Options{MaxBodyBytes: 4096})
	long := make([]string, 70)
	for i := range long {
		long[i] = "5"
	}
	ids70 := "[" + strings.Join(long, ",") + "]"
	cases := []errCase{
		{"malformed JSON", "/v1/completions", `{"prompt": `, 400, "Bad Request", "body.11", "JSON decode error", nil},
		{"not an object", "/v1/completions", `[1,2]`, 400, "Bad Request", "body", "valid dictionary", nil},
		{"empty body", "/v1/chat/completions", ``, 400, "Bad Request", "body", "Field required", nil},
		{"temperature type", "/v1/completions", `{"prompt":"a","temperature":"hot"}`, 400, "Bad Request", "body.temperature", "Input should be a valid number, unable to parse string as a number", nil},
		{"n type", "/v1/completions", `{"prompt":"a","n":1.5}`, 400, "Bad Request", "body.n", "fractional part", nil},
		{"stream type", "/v1/completions", `{"prompt":"a","stream":"maybe"}`, 400, "Bad Request", "body.stream", "valid boolean", nil},
		{"unknown model", "/v1/completions", `{"model":"nope","prompt":"a"}`, 404, "NotFoundError", "model", "The model `nope` does not exist.", nil},
		{"prompt too long", "/v1/completions", `{"prompt":` + ids70 + `,"max_tokens":1}`, 400, "BadRequestError", "input_tokens",
			"This model's maximum context length is 64 tokens. However, your request has 70 input tokens. Please reduce the length of the input messages. (parameter=input_tokens, value=70)", nil},
		{"max_tokens too large", "/v1/completions", `{"prompt":[1,2,3,4,5,6,7,8,9,10],"max_tokens":60}`, 400, "BadRequestError", "max_tokens",
			"'max_tokens' or 'max_completion_tokens' is too large: 60. This model's maximum context length is 64 tokens and your request has 10 input tokens (60 > 64 - 10). (parameter=max_tokens, value=60)", nil},
		{"chat max_completion_tokens too large", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":100}`, 400, "BadRequestError", "max_tokens", "'max_tokens' or 'max_completion_tokens' is too large: 100.", nil},
		{"temperature negative", "/v1/completions", `{"prompt":"a","temperature":-1}`, 400, "BadRequestError", "temperature", "temperature must be non-negative, got -1.0. (parameter=temperature, value=-1.0)", nil},
		{"top_p zero", "/v1/completions", `{"prompt":"a","top_p":0}`, 400, "BadRequestError", "top_p", "top_p must be in (0, 1], got 0.0. (parameter=top_p, value=0.0)", nil},
		{"top_p above one", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"top_p":1.5}`, 400, "BadRequestError", "top_p", "top_p must be in (0, 1], got 1.5.", nil},
		{"n zero", "/v1/completions", `{"prompt":"a","n":0}`, 400, "BadRequestError", "", "n must be at least 1, got 0.", nil},
		{"n greedy", "/v1/completions", `{"prompt":"a","n":2,"temperature":0}`, 400, "BadRequestError", "", "n must be 1 when using greedy sampling, got 2.", nil},
		{"logprobs 21", "/v1/completions", `{"prompt":"a","logprobs":21}`, 400, "BadRequestError", "logprobs", "Requested sample logprobs of 21, which is greater than max allowed: 20", nil},
		{"logprobs negative", "/v1/completions", `{"prompt":"a","logprobs":-1}`, 400, "Bad Request", "logprobs", "`logprobs` must be a positive value.", nil},
		{"top_logprobs 21", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":21}`, 400, "BadRequestError", "logprobs", "Requested sample logprobs of 21, which is greater than max allowed: 20", nil},
		{"top_logprobs without logprobs", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"top_logprobs":2}`, 400, "Bad Request", "top_logprobs", "when using `top_logprobs`, `logprobs` must be set to true.", nil},
		{"max_tokens zero", "/v1/completions", `{"prompt":"a","max_tokens":0}`, 400, "BadRequestError", "max_tokens", "max_tokens must be at least 1, got 0.", nil},
		{"empty messages", "/v1/chat/completions", `{"messages":[]}`, 400, "BadRequestError", "messages", "[] is too short - 'messages'", nil},
		{"missing messages", "/v1/chat/completions", `{"model":"tiny"}`, 400, "Bad Request", "body.messages", "Field required", nil},
		{"unknown role", "/v1/chat/completions", `{"messages":[{"role":"wizard","content":"hi"}]}`, 400, "BadRequestError", "messages.[0].role", "Invalid value: 'wizard'.", nil},
		{"image part", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, 400, "BadRequestError", "messages.[0].content.[0].type", "not supported by npuserve yet", nil},
		{"bad tool arguments", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{oops"}}]}]}`, 400, "BadRequestError", "messages.[1].tool_calls.[0].function.arguments", "not valid JSON", nil},
		{"suffix", "/v1/completions", `{"prompt":"a","suffix":"b"}`, 400, "BadRequestError", "", "suffix is not currently supported", nil},
		{"empty prompt", "/v1/completions", `{"prompt":""}`, 400, "Bad Request", "body", "Either prompt or prompt_embeds must be provided and non-empty.", nil},
		{"no prompt", "/v1/completions", `{"model":"tiny"}`, 400, "Bad Request", "body", "Either prompt or prompt_embeds must be provided and non-empty.", nil},
		{"empty token prompt", "/v1/completions", `{"prompt":[]}`, 400, "BadRequestError", "", "The decoder prompt cannot be empty", nil},
		{"token out of vocab", "/v1/completions", `{"prompt":[99999]}`, 400, "BadRequestError", "", "out of vocabulary", nil},
		{"prompt mixed", "/v1/completions", `{"prompt":["a",[1]]}`, 400, "Bad Request", "body.prompt", "Input should be", nil},
		{"stream_options without stream", "/v1/completions", `{"prompt":"a","stream_options":{"include_usage":true}}`, 400, "Bad Request", "stream_options", "Stream options can only be defined when `stream=True`.", nil},
		{"auto tools without flag", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}]}`, 400, "BadRequestError", "", `"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set`, nil},
		{"tool_choice without tools", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"tool_choice":"auto"}`, 400, "Bad Request", "body", "When using `tool_choice`, `tools` must be set.", nil},
		{"named tool missing", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`, 400, "Bad Request", "body", "does not match any of the specified `tools`", nil},
		{"beam search", "/v1/completions", `{"prompt":"a","use_beam_search":true}`, 400, "BadRequestError", "use_beam_search", "not supported", nil},
		{"json response format", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_object"}}`, 400, "BadRequestError", "response_format", "not supported", nil},
		{"bad logit_bias key", "/v1/completions", `{"prompt":"a","logit_bias":{"x":1}}`, 400, "BadRequestError", "", "invalid literal for int() with base 10: 'x'", nil},
		{"untrusted chat template", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"chat_template":"{{ 1 }}"}`, 400, "BadRequestError", "", "--trust-request-chat-template is not set", nil},
		{"priority", "/v1/completions", `{"prompt":"a","priority":1}`, 400, "BadRequestError", "priority", "Priority scheduling is not enabled", nil},
		{"body too large", "/v1/completions", `{"prompt":"` + strings.Repeat("x", 5000) + `"}`, 413, "Request Entity Too Large", "", "Request body too large", nil},
		{"truncate too large", "/v1/completions", `{"prompt":"a","truncate_prompt_tokens":100}`, 400, "BadRequestError", "truncate_prompt_tokens", "is greater than max_model_len (64)", nil},
		{"unknown path", "/v1/nothing", `{}`, 404, "Not Found", "", "Not Found", nil},
		// Issue 12: what a hostile or careless client found.
		{"presence_penalty out of range", "/v1/completions", `{"prompt":"a","presence_penalty":-5}`, 400, "BadRequestError", "", "presence_penalty must be in [-2, 2], got -5.0.", nil},
		{"presence_penalty NaN", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"presence_penalty":"NaN"}`, 400, "BadRequestError", "", "presence_penalty must be in [-2, 2], got nan.", nil},
		{"presence_penalty list", "/v1/completions", `{"prompt":"a","presence_penalty":[1]}`, 400, "Bad Request", "body.presence_penalty", "Input should be a valid number", nil},
		{"max_tokens int64 max", "/v1/completions", `{"prompt":"hello","max_tokens":9223372036854775807}`, 400, "BadRequestError", "max_tokens",
			"'max_tokens' or 'max_completion_tokens' is too large: 9223372036854775807. This model's maximum context length is 64 tokens", nil},
		{"completions max_completion_tokens int64 max", "/v1/completions", `{"prompt":"hello","max_completion_tokens":9223372036854775807}`, 400, "BadRequestError", "max_tokens", "is too large: 9223372036854775807.", nil},
		{"chat max_completion_tokens int64 max", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":9223372036854775807}`, 400, "BadRequestError", "max_tokens", "is too large: 9223372036854775807.", nil},
		{"stop empty string in list", "/v1/completions", `{"prompt":"a","stop":["x",""]}`, 400, "BadRequestError", "", "stop cannot contain an empty string.", nil},
		{"stop empty string", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"stop":""}`, 400, "BadRequestError", "", "stop cannot contain an empty string.", nil},
		{"reasoning_effort unknown", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"reasoning_effort":"ultra"}`, 400, "Bad Request", "body.reasoning_effort", `Input should be 'low', 'medium' or 'high'`, nil},
		{"reasoning_effort number", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"reasoning_effort":3}`, 400, "Bad Request", "body.reasoning_effort", `'input': 3, 'ctx': {'expected': "'low', 'medium' or 'high'"}`, nil},
		{"tool parameters a string", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":"nope"}}]}`, 400, "Bad Request", "body.tools.0.function.parameters", "Input should be a valid dictionary", nil},
		{"tools a string", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"tools":"x"}`, 400, "Bad Request", "body.tools", "'msg': 'Input should be a valid list', 'input': 'x'", nil},
		{"tool not an object", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"tools":[7]}`, 400, "Bad Request", "body.tools.0", "valid dictionary or object", nil},
		{"tool type", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"web","function":{"name":"f"}}]}`, 400, "Bad Request", "body.tools.0.type", "Input should be 'function'", nil},
		{"tool name type", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"tools":[{"function":{"name":1}}]}`, 400, "Bad Request", "body.tools.0.function.name", "Input should be a valid string", nil},
		{"tool without function", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function"}]}`, 400, "Bad Request", "body.tools.0.function", "Field required", nil},
		{"tools a string on tokenize", "/tokenize", `{"messages":[{"role":"user","content":"hi"}],"tools":"x"}`, 400, "Bad Request", "body.tools", "Input should be a valid list", nil},
		{"invalid UTF-8", "/v1/completions", "{\"prompt\":\"a\xff\xfeb\"}", 400, "Bad Request", "", "There was an error parsing the body", nil},
		{"invalid UTF-8 chat", "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"\xc3\"}]}", 400, "Bad Request", "", "There was an error parsing the body", nil},
		{"lone high surrogate", "/v1/completions", `{"prompt":"a\ud800b"}`, 400, "Bad Request", "", "There was an error parsing the body", nil},
		{"lone high surrogate at end", "/v1/completions", `{"prompt":"\ud83d"}`, 400, "Bad Request", "", "There was an error parsing the body", nil},
		{"lone low surrogate", "/v1/chat/completions", `{"messages":[{"role":"user","content":"\udc00"}]}`, 400, "Bad Request", "", "There was an error parsing the body", nil},
		{"high surrogate and a non-surrogate", "/tokenize", `{"prompt":"\ud800\u0041"}`, 400, "Bad Request", "", "There was an error parsing the body", nil},
		{"detokenize bad id", "/detokenize", `{"tokens":[99999]}`, 400, "BadRequestError", "", "out of vocabulary", nil},
		{"tokenize missing prompt", "/tokenize", `{}`, 400, "Bad Request", "body.prompt", "Field required", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, body := post(t, ts.URL+c.path, c.body, c.hdr...)
			checkEnvelope(t, code, body, c)
		})
	}
	resp, err := http.Get(ts.URL + "/v1/completions")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	checkEnvelope(t, resp.StatusCode, b, errCase{status: 405, typ: "Method Not Allowed", inMsg: "Method Not Allowed"})
	if n := eng.liveCount(); n != 0 || len(eng.requests()) != 0 {
		t.Errorf("bad requests reached the engine: %d live, %d added", n, len(eng.requests()))
	}
}

func checkEnvelope(t *testing.T, code int, body []byte, c errCase) {
	t.Helper()
	if code != c.status {
		t.Fatalf("status %d, want %d: %s", code, c.status, body)
	}
	if got := keys(t, body); strings.Join(got, ",") != "error" {
		t.Fatalf("envelope keys %v: %s", got, body)
	}
	inner := field(t, body, "error")
	if got := keys(t, inner); strings.Join(got, ",") != "message,type,param,code" {
		t.Fatalf("error keys %v: %s", got, body)
	}
	var e struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    int     `json:"code"`
	}
	json.Unmarshal(inner, &e)
	if e.Code != c.status || e.Type != c.typ {
		t.Errorf("type %q code %d, want %q %d: %s", e.Type, e.Code, c.typ, c.status, body)
	}
	param := ""
	if e.Param != nil {
		param = *e.Param
	}
	if param != c.param {
		t.Errorf("param %q, want %q: %s", param, c.param, body)
	}
	if !strings.Contains(e.Message, c.inMsg) {
		t.Errorf("message %q does not contain %q", e.Message, c.inMsg)
	}
}

func TestValidationMessageFormat(t *testing.T) {
	eng := newFakeEngine(textScript(t, "ok", true))
	ts, _ := startServer(t, eng, Options{})
	_, _, body := post(t, ts.URL+"/v1/completions", `{"prompt":"a","temperature":"hot","top_p":[1]}`)
	var e struct{ Error struct{ Message string } }
	json.Unmarshal(body, &e)
	want := "2 validation errors:\n" +
		"  {'type': 'float_parsing', 'loc': 'body.temperature', 'msg': 'Input should be a valid number, unable to parse string as a number', 'input': 'hot'}\n" +
		"  {'type': 'float_type', 'loc': 'body.top_p', 'msg': 'Input should be a valid number', 'input': '<list of 1 items>'}"
	if e.Error.Message != want {
		t.Errorf("message\n%s\nwant\n%s", e.Error.Message, want)
	}
}

// streamText collects a completions stream's text and chunk texts.
func streamText(t *testing.T, body []byte) (string, []string, []map[string]any) {
	t.Helper()
	var all strings.Builder
	var pieces []string
	var choices []map[string]any
	for _, ev := range sseEvents(t, body) {
		if ev == "[DONE]" {
			break
		}
		var chunk struct {
			Choices []map[string]any `json:"choices"`
		}
		if err := json.Unmarshal([]byte(ev), &chunk); err != nil {
			t.Fatalf("bad chunk %s", ev)
		}
		for _, c := range chunk.Choices {
			s, _ := c["text"].(string)
			all.WriteString(s)
			pieces = append(pieces, s)
			choices = append(choices, c)
		}
	}
	return all.String(), pieces, choices
}

func TestStopStrings(t *testing.T) {
	text := "The answer is 42. STOP and more text after it"
	cases := []struct {
		name    string
		stop    string
		include bool
		want    string
	}{
		{"single", `["STOP"]`, false, "The answer is 42. "},
		{"include", `["STOP"]`, true, "The answer is 42. STOP"},
		{"spans tokens", `"is 42"`, false, "The answer "},
		{"first listed wins", `["after", "answer"]`, false, "The "},
		{"no match", `["zebra"]`, false, text},
	}
	for _, c := range cases {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", c.name, stream), func(t *testing.T) {
				eng := newFakeEngine(textScript(t, text, true))
				ts, _ := startServer(t, eng, Options{})
				body := fmt.Sprintf(`{"prompt":"q","max_tokens":100,"stop":%s,"include_stop_str_in_output":%v,"stream":%v}`, c.stop, c.include, stream)
				code, _, out := post(t, ts.URL+"/v1/completions", body)
				if code != 200 {
					t.Fatalf("status %d: %s", code, out)
				}
				var got string
				var reason, stopReason any
				if stream {
					var pieces []string
					var choices []map[string]any
					got, pieces, choices = streamText(t, out)
					last := choices[len(choices)-1]
					reason, stopReason = last["finish_reason"], last["stop_reason"]
					// No chunk may carry the stop string, whole or in part
					// at its end, unless it is kept in the output.
					var sofar string
					for _, p := range pieces {
						sofar += p
						if !c.include && c.want != text && len(sofar) > len(c.want) {
							t.Fatalf("streamed %q beyond the stop point %q", sofar, c.want)
						}
					}
				} else {
					got = string(field(t, out, "choices", "0", "text"))
					json.Unmarshal([]byte(got), &got)
					json.Unmarshal(field(t, out, "choices", "0", "finish_reason"), &reason)
					json.Unmarshal(field(t, out, "choices", "0", "stop_reason"), &stopReason)
				}
				if got != c.want {
					t.Errorf("text %q, want %q", got, c.want)
				}
				if c.want != text {
					var stops []string
					if json.Unmarshal([]byte(c.stop), &stops) != nil {
						var s string
						json.Unmarshal([]byte(c.stop), &s)
						stops = []string{s}
					}
					if reason != "stop" || !contains(stops, fmt.Sprint(stopReason)) {
						t.Errorf("finish %v stop_reason %v", reason, stopReason)
					}
					waitFor(t, func() bool { return eng.liveCount() == 0 })
				}
			})
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestStopHoldback(t *testing.T) {
	cases := []struct {
		text  string
		stops []string
		want  int
	}{
		{"hello wo", []string{"world"}, 2},
		{"hello w", []string{"world", "xw"}, 1},
		{"hello", []string{"lo!"}, 2},
		{"hello", []string{"abc"}, 0},
		{"hello", []string{"hello"}, 0},
		{"ab", []string{"abcdef"}, 2},
		{"x你", []string{"你好"}, 3},
	}
	for _, c := range cases {
		if got := stopHoldback(c.text, c.stops); got != c.want {
			t.Errorf("stopHoldback(%q, %q) = %d, want %d", c.text, c.stops, got, c.want)
		}
	}
}

func TestStopTokenIDs(t *testing.T) {
	tok, _ := loadTiny(t)
	ids := tok.Encode("alpha beta gamma delta", false)
	stopID := ids[2]
	eng := newFakeEngine(textScript(t, "alpha beta gamma delta", true))
	ts, _ := startServer(t, eng, Options{})
	body := fmt.Sprintf(`{"prompt":"q","max_tokens":20,"stop_token_ids":[%d],"return_token_ids":true}`, stopID)
	_, _, out := post(t, ts.URL+"/v1/completions", body)
	var resp struct {
		Choices []struct {
			Text         string  `json:"text"`
			FinishReason string  `json:"finish_reason"`
			StopReason   any     `json:"stop_reason"`
			TokenIDs     []int32 `json:"token_ids"`
		} `json:"choices"`
	}
	json.Unmarshal(out, &resp)
	c := resp.Choices[0]
	if c.FinishReason != "stop" || fmt.Sprint(c.StopReason) != fmt.Sprint(stopID) || len(c.TokenIDs) != 3 {
		t.Fatalf("choice %+v", c)
	}
	if want := tok.Decode(ids[:2], true); c.Text != want {
		t.Errorf("text %q, want %q (the stop token's text is not shown)", c.Text, want)
	}
}

func TestClientDisconnectAborts(t *testing.T) {
	long := strings.Repeat("word ", 400)
	eng := newFakeEngine(textScript(t, long, false))
	eng.delay = 5 * time.Millisecond
	ts, _ := startServer(t, eng, Options{})
	for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
		for _, stream := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/stream=%v", path, stream), func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				body := fmt.Sprintf(`{"prompt":"q","messages":[{"role":"user","content":"q"}],"max_tokens":1000,"n":2,"stream":%v}`, stream)
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+path, strings.NewReader(body))
				done := make(chan struct{})
				go func() {
					defer close(done)
					resp, err := http.DefaultClient.Do(req)
					if err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				}()
				waitFor(t, func() bool { return eng.liveCount() == 2 })
				time.Sleep(30 * time.Millisecond)
				cancel()
				<-done
				waitFor(t, func() bool { return eng.liveCount() == 0 })
			})
		}
	}
	eng.mu.Lock()
	n := len(eng.aborted)
	eng.mu.Unlock()
	if n != 8 {
		t.Errorf("%d aborts, want 8", n)
	}
}

func TestAuthAndRoutes(t *testing.T) {
	eng := newFakeEngine(textScript(t, "ok", true))
	ts, _ := startServer(t, eng, Options{APIKeys: []string{"sk-test"}, Version: "9.9"})
	cases := []struct {
		method, path, auth, body string
		status                   int
	}{
		{"POST", "/v1/completions", "", `{"prompt":"a","max_tokens":1}`, 401},
		{"POST", "/v1/completions", "Bearer wrong", `{"prompt":"a","max_tokens":1}`, 401},
		{"POST", "/v1/completions", "Basic sk-test", `{"prompt":"a","max_tokens":1}`, 401},
		{"POST", "/v1/completions", "Bearer sk-test", `{"prompt":"a","max_tokens":1}`, 200},
		{"POST", "/v1/completions", "bearer sk-test", `{"prompt":"a","max_tokens":1}`, 200},
		{"GET", "/v1/models", "", "", 401},
		{"GET", "/v1/models", "Bearer sk-test", "", 200},
		{"GET", "/health", "", "", 200},
		// Every /v1 path needs the key, unknown ones included; a trailing
		// slash is not redirected (JSON bodies only).
		{"GET", "/v1/nothing", "", "", 401},
		{"POST", "/v1/embeddings", "", `{}`, 401},
		{"GET", "/v1/models/", "", "", 401},
		{"GET", "/v1/models/", "Bearer sk-test", "", 404},
		{"GET", "/v1/nothing", "Bearer sk-test", "", 404},
		{"GET", "/v1", "", "", 401},
		{"GET", "/nothing", "", "", 404},
		{"GET", "/version", "", "", 200},
		{"GET", "/metrics", "", "", 200},
		{"POST", "/tokenize", "", `{"prompt":"hello"}`, 200},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, ts.URL+c.path, strings.NewReader(c.body))
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s %s (%q): %d, want %d: %s", c.method, c.path, c.auth, resp.StatusCode, c.status, b)
		}
		if c.status == 401 {
			checkEnvelope(t, resp.StatusCode, b, errCase{status: 401, typ: "Unauthorized", inMsg: "Unauthorized"})
		}
		if c.status == 404 {
			checkEnvelope(t, resp.StatusCode, b, errCase{status: 404, typ: "Not Found", inMsg: "Not Found"})
		}
		if ct := resp.Header.Get("Content-Type"); len(b) > 0 && !strings.HasPrefix(ct, "application/json") && !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
			t.Errorf("%s %s: Content-Type %q: %s", c.method, c.path, ct, b)
		}
		if c.path == "/version" && string(b) != `{"version":"9.9"}` {
			t.Errorf("/version = %s", b)
		}
		if c.path == "/health" && len(b) != 0 {
			t.Errorf("/health body %q", b)
		}
	}
}

func TestModelsAndTokenize(t *testing.T) {
	eng := newFakeEngine(textScript(t, "ok", true))
	eng.maxLen = 1234
	ts, _ := startServer(t, eng, Options{ServedModelNames: []string{"glm", "alias"}, ModelPath: "/models/glm"})
	resp, err := http.Get(ts.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	card := field(t, b, "data", "0")
	want := "id,object,created,owned_by,root,parent,max_model_len,permission"
	if got := strings.Join(keys(t, card), ","); got != want {
		t.Errorf("card keys %s", got)
	}
	if string(field(t, card, "max_model_len")) != "1234" || string(field(t, card, "root")) != `"/models/glm"` || string(field(t, b, "data", "1", "id")) != `"alias"` {
		t.Errorf("models %s", b)
	}
	// Both names are served; the first is reported.
	code, _, out := post(t, ts.URL+"/v1/completions", `{"model":"alias","prompt":"a","max_tokens":1}`)
	if code != 200 || string(field(t, out, "model")) != `"glm"` {
		t.Errorf("alias: %d %s", code, out)
	}
	tok, _ := loadTiny(t)
	_, _, out = post(t, ts.URL+"/tokenize", `{"prompt":"Hello, world!","return_token_strs":true}`)
	var tr struct {
		Count       int      `json:"count"`
		MaxModelLen int      `json:"max_model_len"`
		Tokens      []int    `json:"tokens"`
		TokenStrs   []string `json:"token_strs"`
	}
	json.Unmarshal(out, &tr)
	ids := tok.Encode("Hello, world!", true)
	if tr.Count != len(ids) || fmt.Sprint(tr.Tokens) != fmt.Sprint(ids) || tr.MaxModelLen != 1234 || len(tr.TokenStrs) != len(ids) {
		t.Errorf("tokenize %s", out)
	}
	_, _, out = post(t, ts.URL+"/detokenize", fmt.Sprintf(`{"tokens":%s}`, mustJSON(ids)))
	if string(out) != `{"prompt":"Hello, world!"}` {
		t.Errorf("detokenize %s", out)
	}
	// Chat tokenize renders the template like chat completions.
	_, _, out = post(t, ts.URL+"/tokenize", `{"messages":[{"role":"user","content":"How are you?"}]}`)
	json.Unmarshal(out, &tr)
	r := &Renderer{Templates: tinyTemplates, Tok: tok}
	_, want2, _ := r.RenderRequestJSON([]byte(`{"messages":[{"role":"user","content":"How are you?"}]}`))
	if fmt.Sprint(tr.Tokens) != fmt.Sprint(want2) {
		t.Errorf("chat tokenize %v, want %v", tr.Tokens, want2)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestMetricsExposition(t *testing.T) {
	eng := newFakeEngine(textScript(t, "one two three", true))
	ts, s := startServer(t, eng, Options{})
	post(t, ts.URL+"/v1/completions", `{"prompt":"a","max_tokens":50}`)
	post(t, ts.URL+"/v1/completions", `{"prompt":"a","max_tokens":2,"stream":true}`)
	s.OnStep(core.StepStats{NumTokens: 7})
	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(b)
	lbl := `{engine="0",model_name="tiny"}`
	for _, want := range []string{
		"vllm:num_requests_running" + lbl + " 0",
		"vllm:num_requests_waiting" + lbl + " 0",
		"vllm:kv_cache_usage_perc" + lbl + " 0",
		"vllm:prompt_tokens_total" + lbl,
		"vllm:generation_tokens_total" + lbl,
		"vllm:num_preemptions_total" + lbl,
		`vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny"} 1`,
		`vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 1`,
		`vllm:request_success_total{engine="0",finished_reason="abort",model_name="tiny"} 0`,
		"vllm:time_to_first_token_seconds_count" + lbl + " 2",
		"vllm:inter_token_latency_seconds_count" + lbl,
		"vllm:time_per_output_token_seconds_count" + lbl,
		"vllm:e2e_request_latency_seconds_count" + lbl + " 2",
		"vllm:request_queue_time_seconds_count" + lbl,
		"vllm:request_prefill_time_seconds_count" + lbl,
		"vllm:request_decode_time_seconds_count" + lbl,
		"vllm:request_inference_time_seconds_count" + lbl,
		"vllm:request_prompt_tokens_count" + lbl,
		"vllm:request_generation_tokens_count" + lbl,
		"vllm:request_params_n_count" + lbl + " 2",
		"vllm:request_params_max_tokens_count" + lbl,
		"vllm:iteration_tokens_total_count" + lbl + " 1",
		`vllm:time_to_first_token_seconds_bucket{engine="0",model_name="tiny",le="0.001"}`,
		`vllm:request_prompt_tokens_bucket{engine="0",model_name="tiny",le="2000"}`,
		"vllm:cache_config_info{",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q\n%s", want, grepLines(text, "request_success"))
		}
	}
}

func TestStatsLine(t *testing.T) {
	got := statsLine(core.Stats{Running: 3, Waiting: 1, KVUsage: 0.125}, 12.34, 56.78)
	want := "Engine 000: Avg prompt throughput: 12.3 tokens/s, Avg generation throughput: 56.8 tokens/s, Running: 3 reqs, Waiting: 1 reqs, GPU KV cache usage: 12.5%, Prefix cache hit rate: 0.0%"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestBuckets125(t *testing.T) {
	got := fmt.Sprint(buckets125(4096))
	if got != "[1 2 5 10 20 50 100 200 500 1000 2000]" {
		t.Errorf("buckets125(4096) = %s", got)
	}
}

func TestPyRepr(t *testing.T) {
	cases := []struct {
		in   string
		want string
	}{
		{`"it's"`, `"it's"`},
		{`"a\nb"`, `'a\nb'`},
		{`1.5`, `1.5`},
		{`1e20`, `1e+20`},
		{`true`, `True`},
		{`null`, `None`},
		{`[1,2]`, `'<list of 2 items>'`},
		{`{"a":1}`, `'<dict of 1 items>'`},
		{`[]`, `'<list of 0 items>'`},
		{` [ ] `, `'<list of 0 items>'`},
		{`[[1,2],{"a":[3,4]},"x,]"]`, `'<list of 3 items>'`},
		{`{"a":{"b":1,"c":2},"d":"\",","e":[]}`, `'<dict of 3 items>'`},
	}
	for _, c := range cases {
		if got := pyInput(json.RawMessage(c.in)); got != c.want {
			t.Errorf("pyInput(%s) = %s, want %s", c.in, got, c.want)
		}
	}
}

func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestEchoTruncateAndSpecialTokens(t *testing.T) {
	tok, _ := loadTiny(t)
	// The script ends its text with <|user|> (a special token) before EOS.
	special := []int32{}
	for _, id := range tok.Encode("done<|user|>", false) {
		special = append(special, int32(id))
	}
	eng := newFakeEngine(func(*core.Request) []int32 { return append(append([]int32{}, special...), 480) })
	var logBuf bytes.Buffer
	lg := logrus.New()
	lg.SetOutput(&logBuf)
	ts, _ := startServer(t, eng, Options{LogRequests: true, Log: lg})
	cases := []struct {
		name, body, want string
	}{
		{"echo", `{"prompt":"Hi","max_tokens":20,"echo":true}`, "Hidone"},
		{"echo only", `{"prompt":"Hi","max_tokens":0,"echo":true}`, "Hi"},
		{"keep special", `{"prompt":"Hi","max_tokens":20,"skip_special_tokens":false}`, "done<|user|>"},
		{"skip special", `{"prompt":"Hi","max_tokens":20}`, "done"},
	}
	for _, c := range cases {
		code, _, out := post(t, ts.URL+"/v1/completions", c.body)
		var got string
		json.Unmarshal(field(t, out, "choices", "0", "text"), &got)
		if code != 200 || got != c.want {
			t.Errorf("%s: %d %q, want %q (%s)", c.name, code, got, c.want, out)
		}
	}
	code, _, out := post(t, ts.URL+"/v1/completions", `{"prompt":[1,2,3,4,5,6],"truncate_prompt_tokens":2,"max_tokens":1}`)
	if code != 200 || string(field(t, out, "usage", "prompt_tokens")) != "2" {
		t.Errorf("truncate: %d %s", code, out)
	}
	if got := eng.requests()[len(eng.requests())-1].PromptTokens; fmt.Sprint(got) != "[5 6]" {
		t.Errorf("truncated prompt %v, want the last two tokens", got)
	}
	if !strings.Contains(logBuf.String(), "Received request cmpl-") || !strings.Contains(logBuf.String(), "SamplingParams(n=1, presence_penalty=0.0") {
		t.Errorf("request log: %s", logBuf.String())
	}
}

func TestEngineFailureMidRequest(t *testing.T) {
	eng := newFakeEngine(func(*core.Request) []int32 { return []int32{100, 101, -1} })
	ts, _ := startServer(t, eng, Options{})
	code, _, out := post(t, ts.URL+"/v1/completions", `{"prompt":"a","max_tokens":10}`)
	checkEnvelope(t, code, out, errCase{status: 500, typ: "InternalServerError", inMsg: "boom"})
	for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
		code, _, out = post(t, ts.URL+path, `{"prompt":"a","messages":[{"role":"user","content":"a"}],"max_tokens":10,"stream":true}`)
		evs := sseEvents(t, out)
		if code != 200 || len(evs) < 2 || !strings.Contains(evs[len(evs)-2], `"type":"InternalServerError"`) {
			t.Errorf("%s: stream %d %q", path, code, evs)
		}
	}
	waitFor(t, func() bool { return eng.liveCount() == 0 })
}

// TestSamplingFieldsReachEngine: presence_penalty (never read before issue
// 12) and frequency_penalty reach the engine's parameters; a well-formed
// surrogate pair is not refused with the lone ones.
func TestSamplingFieldsReachEngine(t *testing.T) {
	eng := newFakeEngine(textScript(t, "ok", true))
	ts, _ := startServer(t, eng, Options{})
	for _, c := range []struct{ path, body string }{
		{"/v1/completions", `{"prompt":"hi \ud83d\ude00","presence_penalty":2,"frequency_penalty":-1.5,"max_tokens":2}`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi \ud83d\ude00"}],"presence_penalty":"2","frequency_penalty":-1.5,"max_tokens":2}`},
	} {
		code, _, out := post(t, ts.URL+c.path, c.body)
		if code != 200 {
			t.Fatalf("%s: %d %s", c.path, code, out)
		}
		reqs := eng.requests()
		p := reqs[len(reqs)-1].Params
		if p.PresencePenalty != 2 || p.FrequencyPenalty != -1.5 {
			t.Errorf("%s: presence %v frequency %v, want 2 and -1.5", c.path, p.PresencePenalty, p.FrequencyPenalty)
		}
	}
}

// TestCORS: preflight requests are answered (they answered 405 before issue
// 12) as Starlette's CORSMiddleware answers them, with vLLM's defaults
// (everything allowed) or the configured lists.
func TestCORS(t *testing.T) {
	eng := newFakeEngine(textScript(t, "ok", true))
	open, _ := startServer(t, eng, Options{APIKeys: []string{"k"}})
	strict, _ := startServer(t, eng, Options{CORS: CORS{AllowedOrigins: []string{"https://a.example"}, AllowedMethods: []string{"POST"},
		AllowedHeaders: []string{"Authorization"}, AllowCredentials: true}})
	do := func(method, url string, hdr ...string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, url, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, b
	}
	pre := func(origin, method, headers string) []string {
		return []string{"Origin", origin, "Access-Control-Request-Method", method, "Access-Control-Request-Headers", headers}
	}
	cases := []struct {
		name, method, url string
		hdr               []string
		status            int
		want              map[string]string // header -> value ("" absent)
	}{
		{"preflight, defaults", "OPTIONS", open.URL + "/v1/chat/completions", pre("https://x.example", "POST", "authorization, content-type"), 200,
			map[string]string{"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Methods": "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT",
				"Access-Control-Allow-Headers": "authorization, content-type", "Access-Control-Max-Age": "600", "Access-Control-Allow-Credentials": ""}},
		{"preflight of an unknown path", "OPTIONS", open.URL + "/v1/nothing", pre("https://x.example", "GET", ""), 200,
			map[string]string{"Access-Control-Allow-Origin": "*"}},
		{"simple request, defaults", "GET", open.URL + "/health", []string{"Origin", "https://x.example"}, 200,
			map[string]string{"Access-Control-Allow-Origin": "*", "Vary": ""}},
		{"simple request with a cookie", "GET", open.URL + "/health", []string{"Origin", "https://x.example", "Cookie", "a=b"}, 200,
			map[string]string{"Access-Control-Allow-Origin": "https://x.example", "Vary": "Origin"}},
		{"unauthorized, with CORS headers", "GET", open.URL + "/v1/models", []string{"Origin", "https://x.example"}, 401,
			map[string]string{"Access-Control-Allow-Origin": "*"}},
		{"no Origin: no CORS headers", "GET", open.URL + "/health", nil, 200, map[string]string{"Access-Control-Allow-Origin": ""}},
		{"OPTIONS that is not a preflight", "OPTIONS", open.URL + "/v1/completions", []string{"Origin", "https://x.example"}, 405, nil},
		{"preflight, allowed origin", "OPTIONS", strict.URL + "/v1/completions", pre("https://a.example", "POST", "Authorization"), 200,
			map[string]string{"Access-Control-Allow-Origin": "https://a.example", "Vary": "Origin", "Access-Control-Allow-Methods": "POST",
				"Access-Control-Allow-Headers": "Accept, Accept-Language, Authorization, Content-Language, Content-Type", "Access-Control-Allow-Credentials": "true"}},
		{"preflight, other origin", "OPTIONS", strict.URL + "/v1/completions", pre("https://b.example", "POST", ""), 400,
			map[string]string{"Access-Control-Allow-Origin": ""}},
		{"preflight, other method and header", "OPTIONS", strict.URL + "/v1/completions", pre("https://a.example", "PUT", "X-Secret"), 400, nil},
		{"simple request, allowed origin", "GET", strict.URL + "/health", []string{"Origin", "https://a.example"}, 200,
			map[string]string{"Access-Control-Allow-Origin": "https://a.example", "Access-Control-Allow-Credentials": "true"}},
		{"simple request, other origin", "GET", strict.URL + "/health", []string{"Origin", "https://b.example"}, 200,
			map[string]string{"Access-Control-Allow-Origin": ""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, b := do(c.method, c.url, c.hdr...)
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.status, b)
			}
			for k, v := range c.want {
				if got := resp.Header.Get(k); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			if c.status == 400 {
				checkEnvelope(t, resp.StatusCode, b, errCase{status: 400, typ: "Bad Request", inMsg: "Disallowed CORS"})
			}
		})
	}
}

// TestStopStringInAcceptedRun: a stop string completed inside a
// multi-token output (an accepted speculative run) ends the sequence at
// the token that completed it: text, token_ids, logprobs and usage equal
// those of one token per output, and no token after the stop comes back.
func TestStopStringInAcceptedRun(t *testing.T) {
	tok, _ := loadTiny(t)
	text := "alpha beta gamma delta epsilon zeta"
	ids := tok.Encode(text, false)
	type result struct {
		text, finish, stopReason string
		ids                      []int32
		logprobs, usage          int
	}
	get := func(t *testing.T, chunk int, stop string, minToks int) result {
		eng := newFakeEngine(textScript(t, text, true))
		eng.chunk = chunk
		ts, _ := startServer(t, eng, Options{})
		body := fmt.Sprintf(`{"prompt":"q","max_tokens":50,"stop":[%q],"min_tokens":%d,"return_token_ids":true,"logprobs":1}`, stop, minToks)
		code, _, out := post(t, ts.URL+"/v1/completions", body)
		if code != 200 {
			t.Fatalf("status %d: %s", code, out)
		}
		var resp struct {
			Choices []struct {
				Text         string  `json:"text"`
				FinishReason string  `json:"finish_reason"`
				StopReason   any     `json:"stop_reason"`
				TokenIDs     []int32 `json:"token_ids"`
				Logprobs     struct {
					Tokens []string `json:"tokens"`
				} `json:"logprobs"`
			} `json:"choices"`
			Usage struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(out, &resp); err != nil {
			t.Fatal(err)
		}
		c := resp.Choices[0]
		return result{c.Text, c.FinishReason, fmt.Sprint(c.StopReason), c.TokenIDs, len(c.Logprobs.Tokens), resp.Usage.CompletionTokens}
	}
	cases := []struct {
		name    string
		stop    string
		minToks int
	}{
		{"mid run", "gamma", 0},
		{"first token", "alpha", 0},
		{"min_tokens past the first match", "a", 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := get(t, 1, c.stop, c.minToks)
			n := len(base.ids)
			if base.finish != "stop" || base.stopReason != c.stop || n == 0 || n >= len(ids) || n <= c.minToks {
				t.Fatalf("one token per output: %+v (of %d tokens)", base, len(ids))
			}
			if base.logprobs != n || base.usage != n {
				t.Fatalf("one token per output: %d logprobs, %d completion tokens for %d ids", base.logprobs, base.usage, n)
			}
			if c.minToks == 0 {
				// The shortest prefix whose text holds the stop string.
				if !strings.Contains(tok.Decode(ids[:n], true), c.stop) || strings.Contains(tok.Decode(ids[:n-1], true), c.stop) {
					t.Fatalf("one token per output stopped after %d tokens %q", n, tok.Decode(ids[:n], true))
				}
			}
			for _, chunk := range []int{2, 3, 5} {
				got := get(t, chunk, c.stop, c.minToks)
				if got.text != base.text || got.finish != base.finish || got.stopReason != base.stopReason ||
					!slices.Equal(got.ids, base.ids) || got.logprobs != n || got.usage != n {
					t.Errorf("chunk %d: %+v, want %+v", chunk, got, base)
				}
			}
		})
	}
}
