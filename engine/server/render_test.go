package server

import (
	"strings"
	"testing"
)

func TestRenderChat(t *testing.T) {
	tok, tm := loadTiny(t)
	cases := []struct {
		name, format, body string
		want               string // the whole prompt
	}{
		{"plain", "auto", `{"messages":[{"role":"user","content":"Hi"}]}`,
			"[gMASK]<sop><|user|>\nHi<|assistant|><think>"},
		{"reasoning effort", "auto", `{"messages":[{"role":"user","content":"Hi"}],"reasoning_effort":"high"}`,
			"[gMASK]<sop><|system|>\nReasoning effort: high<|user|>\nHi<|assistant|><think>"},
		{"thinking off by kwargs", "auto", `{"messages":[{"role":"user","content":"Hi"}],"chat_template_kwargs":{"enable_thinking":false}}`,
			"[gMASK]<sop><|user|>\nHi/nothink<|assistant|>\n<think></think>"},
		{"thinking off top level", "auto", `{"messages":[{"role":"user","content":"Hi"}],"enable_thinking":false}`,
			"[gMASK]<sop><|user|>\nHi/nothink<|assistant|>\n<think></think>"},
		{"kwargs win over top level", "auto", `{"messages":[{"role":"user","content":"Hi"}],"enable_thinking":false,"chat_template_kwargs":{"enable_thinking":true}}`,
			"[gMASK]<sop><|user|>\nHi<|assistant|><think>"},
		{"string parts", "string", `{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`,
			"[gMASK]<sop><|user|>\na\nb<|assistant|><think>"},
		{"openai parts", "openai", `{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`,
			"[gMASK]<sop><|user|>\nab<|assistant|><think>"},
		{"continue final", "auto", `{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Sure, "}],"add_generation_prompt":false,"continue_final_message":true}`,
			"[gMASK]<sop><|user|>\nHi<|assistant|>\n<think></think>\nSure,"},
		{"history reasoning", "auto", `{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Yo","reasoning_content":"think"},{"role":"user","content":"Again"}],"add_generation_prompt":false}`,
			"[gMASK]<sop><|user|>\nHi<|assistant|>\n<think></think>\nYo<|user|>\nAgain"},
		{"null assistant content", "auto", `{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":null}],"add_generation_prompt":false}`,
			"[gMASK]<sop><|user|>\nHi<|assistant|>\n<think></think>"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &Renderer{Templates: tm, Tok: tok, ContentFormat: c.format}
			prompt, ids, err := r.RenderRequestJSON([]byte(c.body))
			if err != nil {
				t.Fatal(err)
			}
			if prompt != c.want {
				t.Errorf("prompt\n%q\nwant\n%q", prompt, c.want)
			}
			if want := tok.Encode(prompt, false); len(ids) != len(want) {
				t.Errorf("ids %v, want %v (no special tokens added)", ids, want)
			}
		})
	}
}

func TestRenderToolsNormalised(t *testing.T) {
	tok, tm := loadTiny(t)
	r := &Renderer{Templates: tm, Tok: tok}
	prompt, _, err := r.RenderRequestJSON([]byte(`{"messages":[{"role":"user","content":"Hi"}],"tools":[{"function":{"parameters":{"type":"object"},"name":"f","strict":true},"type":"function"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	// vLLM passes its tool model's dump: type first, then function with
	// name, description (null when absent), parameters, then extras.
	want := `{"type": "function", "function": {"name": "f", "description": null, "parameters": {"type": "object"}, "strict": true}}`
	if !strings.Contains(prompt, want) {
		t.Errorf("prompt lacks %s:\n%s", want, prompt)
	}
}
