package server

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
)

// FuzzDecodeRequest feeds arbitrary bodies through request decoding,
// validation and chat rendering: nothing may panic, and every rejection
// must be a well-formed API error.
func FuzzDecodeRequest(f *testing.F) {
	seeds := []string{
		`{"model":"tiny","prompt":"Hello","max_tokens":8,"temperature":0}`,
		`{"prompt":[1,2,3],"n":2,"logprobs":3,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`,
		`{"prompt":[[1,2],[3]],"echo":true,"max_tokens":0,"stop":["a","b"],"logit_bias":{"5":-100}}`,
		`{"prompt":["a","b"],"seed":-1,"top_k":-1,"min_p":0.5,"truncate_prompt_tokens":-1}`,
		`{"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":2}`,
		`{"messages":[{"role":"system","content":[{"type":"text","text":"a"},"b"]},{"role":"user","content":null}]}`,
		`{"messages":[{"role":"assistant","tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{\"x\": [1, {\"y\": null}]}"}}],"reasoning_content":"r"},{"role":"tool","tool_call_id":"1","content":"ok"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":"required"}`,
		`{"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"enable_thinking":false},"reasoning_effort":"max","continue_final_message":true,"add_generation_prompt":false}`,
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"function":{"name":"g"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`,
		`{"prompt": `, `[]`, `null`, `""`, `{"prompt":"a","temperature":"1e400"}`, `{"n":1e30,"prompt":"x"}`,
		`{"messages":[{"role":"wizard"}]}`, `{"messages":{}}`, `{"prompt":{"a":1}}`,
		`{"prompt":"a\ud800b"}`, `{"prompt":"\ud83d\ude00","stop":[""]}`, "{\"prompt\":\"\xff\"}", `{"prompt":"x","max_tokens":9223372036854775807,"presence_penalty":"NaN"}`,
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":"nope"}}],"reasoning_effort":"ultra"}`,
		`{"messages":[{"role":"user","content":"x"}],"tools":"x"}`, `{"prompt":[[1,[2]],{"a":"],"}]}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	tok, tm := loadTiny(f)
	r := &Renderer{Templates: tm, Tok: tok, ContentFormat: "auto"}
	ro := &Renderer{Templates: tm, Tok: tok, ContentFormat: "openai"}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, aerr := parseBody(data)
		if aerr != nil {
			checkAPIError(t, aerr)
			return
		}
		// pyInput counts containers without decoding them: the count must
		// be what decoding finds.
		for k, raw := range b.fields {
			var list []json.RawMessage
			var obj map[string]json.RawMessage
			if json.Unmarshal(raw, &list) == nil {
				if n := countElems(bytes.TrimSpace(raw)); n != len(list) {
					t.Fatalf("countElems(%s: %s) = %d, want %d", k, raw, n, len(list))
				}
			} else if json.Unmarshal(raw, &obj) == nil && !hasDuplicateKeys(raw) {
				if n := countElems(bytes.TrimSpace(raw)); n != len(obj) {
					t.Fatalf("countElems(%s: %s) = %d, want %d", k, raw, n, len(obj))
				}
			}
		}
		if b.present("messages") {
			req, aerr := decodeChat(b)
			if aerr != nil {
				checkAPIError(t, aerr)
				return
			}
			for _, rr := range []*Renderer{r, ro} {
				if _, aerr := rr.RenderChat(context.Background(), req.chatInput()); aerr != nil {
					checkAPIError(t, aerr)
				}
			}
			return
		}
		req, aerr := decodeCompletion(b)
		if aerr != nil {
			checkAPIError(t, aerr)
			return
		}
		if _, aerr := tokenizePrompts(tok, req.prompts, req.addSpecialTokens, promptLimit{chars: 1 << 16, modelLen: 4096}); aerr != nil {
			checkAPIError(t, aerr)
		}
	})
}

func checkAPIError(t *testing.T, e *APIError) {
	t.Helper()
	if e.Status < 400 || e.Status > 599 || e.Type == "" || e.Message == "" {
		t.Fatalf("malformed API error %+v", e)
	}
	if _, err := e.MarshalJSON(); err != nil {
		t.Fatal(err)
	}
}

// hasDuplicateKeys reports whether a JSON object repeats a key (decoding
// keeps one of them, counting sees both).
func hasDuplicateKeys(raw []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.Token()
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return false
		}
		k, _ := t.(string)
		if seen[k] {
			return true
		}
		seen[k] = true
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return false
		}
	}
	return false
}
