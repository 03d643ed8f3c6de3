package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/npuserve/npuserve/engine/chattemplate"
	"github.com/npuserve/npuserve/engine/pyfmt"
	"github.com/npuserve/npuserve/engine/tokenizer"
)

// Renderer turns chat requests into prompts the way vLLM's chat serving
// does: messages are normalised into vLLM's conversation form (content
// parts joined or kept as parts, tool-call arguments given as JSON
// strings parsed into objects, reasoning passed under both names), tools
// into the dump of vLLM's tool model, the chat template is chosen
// (request > --chat-template > the model's) and rendered with the
// request's template kwargs, and the text is tokenized without adding
// special tokens again (chat add_special_tokens defaults to false). The
// server and `npuserve render` share it.
type Renderer struct {
	Templates *chattemplate.ModelTemplates
	Override  *chattemplate.Template
	// Tok is nil when the tokenizer is not loaded.
	Tok *tokenizer.Tokenizer
	// ContentFormat: "string" (also for "auto") or "openai".
	ContentFormat string
	// TrustRequestChatTemplate allows a request's own chat_template.
	TrustRequestChatTemplate bool
	// MaxPromptChars refuses a rendered prompt of more characters before
	// it is tokenized (0: no limit); MaxModelLen is quoted in the error.
	MaxPromptChars int
	MaxModelLen    int
}

// ChatInput is the part of a chat request that shapes the prompt.
type ChatInput struct {
	// Messages is the raw "messages" array.
	Messages json.RawMessage
	// Tools is the raw "tools" array (nil: none).
	Tools json.RawMessage
	// Documents is the raw "documents" array (nil: none).
	Documents json.RawMessage
	// ChatTemplate is the request's chat_template.
	ChatTemplate *string
	// ChatTemplateKwargs is the raw chat_template_kwargs object.
	ChatTemplateKwargs json.RawMessage
	// ReasoningEffort is passed to the template when set.
	ReasoningEffort *string
	// EnableThinking is a top-level enable_thinking (an npuserve
	// convenience): it becomes the template kwarg unless
	// chat_template_kwargs sets it.
	EnableThinking *bool
	// AddGenerationPrompt, ContinueFinalMessage and AddSpecialTokens are
	// the request fields of those names.
	AddGenerationPrompt  bool
	ContinueFinalMessage bool
	AddSpecialTokens     bool
}

// RenderedChat is a rendered and tokenized chat prompt.
type RenderedChat struct {
	Prompt   string
	TokenIDs []int32
	// Kwargs are the template kwargs as plain values (the parsers read
	// "thinking" / "enable_thinking" from them).
	Kwargs map[string]any
	// LastRole and LastContent describe the final message (for echo).
	LastRole, LastContent string
}

// knownRoles are the message roles the OpenAI API defines.
var knownRoles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true, "function": true}

// RenderChat renders and tokenizes a chat.
func (r *Renderer) RenderChat(ctx context.Context, in ChatInput) (*RenderedChat, *APIError) {
	msgs, last, err := r.conversation(in.Messages)
	if err != nil {
		return nil, err
	}
	tools, hasTools, err := normalizeTools(in.Tools)
	if err != nil {
		return nil, err
	}
	tmpl, err := r.template(in.ChatTemplate, hasTools)
	if err != nil {
		return nil, err
	}
	kw, plain, err := templateKwargs(in)
	if err != nil {
		return nil, err
	}
	docs := chattemplate.Undefined()
	if len(in.Documents) > 0 && !isNull(in.Documents) {
		v, derr := chattemplate.FromJSON(in.Documents)
		if derr != nil {
			return nil, badParam("documents", "documents: %v", derr)
		}
		docs = v
	}
	var tokens chattemplate.SpecialTokens
	if r.Templates != nil {
		tokens = r.Templates.Tokens
	}
	prompt, rerr := chattemplate.RenderChat(tmpl, chattemplate.Chat{
		Messages: msgs, Tools: tools, Documents: docs,
		AddGenerationPrompt: in.AddGenerationPrompt, ContinueFinalMessage: in.ContinueFinalMessage,
		Kwargs: kw, Tokens: tokens, Options: &chattemplate.RenderOptions{Context: ctx},
	})
	if rerr != nil {
		if msg, ok := chattemplate.RaisedMessage(rerr); ok {
			return nil, badRequest("%s", msg)
		}
		return nil, badRequest("%s", rerr.Error())
	}
	if r.Tok == nil {
		return nil, skipTokenizerError()
	}
	if aerr := r.limit().check(prompt); aerr != nil {
		return nil, aerr
	}
	ids := r.Tok.Encode(prompt, in.AddSpecialTokens)
	out := &RenderedChat{Prompt: prompt, TokenIDs: make([]int32, len(ids)), Kwargs: plain}
	for i, id := range ids {
		out.TokenIDs[i] = int32(id)
	}
	out.LastRole, out.LastContent = last.role, last.content
	return out, nil
}

func (r *Renderer) limit() promptLimit {
	return promptLimit{chars: r.MaxPromptChars, modelLen: r.MaxModelLen}
}

// skipTokenizerError is vLLM's error for text work without a tokenizer.
func skipTokenizerError() *APIError {
	return badParam("skip_tokenizer_init", "Unable to get tokenizer because `skip_tokenizer_init=True`")
}

// template picks the chat template: the request's (when trusted), then
// --chat-template, then the model's.
func (r *Renderer) template(reqTemplate *string, hasTools bool) (*chattemplate.Template, *APIError) {
	if reqTemplate != nil {
		if !r.TrustRequestChatTemplate {
			return nil, badRequest("Chat template is passed with request, but --trust-request-chat-template is not set. Refused request with untrusted chat template.")
		}
		t, err := chattemplate.Compile(*reqTemplate)
		if err != nil {
			return nil, badParam("chat_template", "%v", err)
		}
		return t, nil
	}
	if r.Override != nil {
		return r.Override, nil
	}
	if r.Templates != nil {
		t, err := r.Templates.Select("", hasTools)
		if err == nil {
			return t, nil
		}
	}
	return nil, badRequest("As of transformers v4.44, default chat template is no longer allowed, so you must provide a chat template if the tokenizer does not define one.")
}

type lastMessage struct{ role, content string }

// conversation normalises the request messages into vLLM's conversation
// (vllm/entrypoints/chat_utils.py _parse_chat_message_content and
// _postprocess_messages).
func (r *Renderer) conversation(raw json.RawMessage) (chattemplate.Value, lastMessage, *APIError) {
	var last lastMessage
	v, err := chattemplate.FromJSON(raw)
	if err != nil || v.Kind() != chattemplate.ListKind {
		return chattemplate.Value{}, last, validationError([]pydanticError{{Type: "list_type", Loc: "body.messages",
			Msg: "Input should be a valid list", Input: pyInput(raw)}})
	}
	items := v.Items()
	if len(items) == 0 {
		return chattemplate.Value{}, last, badParam("messages", "[] is too short - 'messages'")
	}
	openai := r.ContentFormat == "openai"
	out := make([]chattemplate.Value, 0, len(items))
	for i, it := range items {
		m := it.AsMap()
		loc := fmt.Sprintf("messages.[%d]", i)
		if m == nil {
			return chattemplate.Value{}, last, badParam(loc, "Invalid type for '%s': expected an object, but got %s instead.", loc, it.Kind())
		}
		roleV, ok := m.Get("role")
		role, isStr := roleV.AsString()
		if !ok || !isStr {
			return chattemplate.Value{}, last, badParam(loc+".role", "Missing required parameter: '%s.role'.", loc)
		}
		if !knownRoles[role] {
			return chattemplate.Value{}, last, badParam(loc+".role",
				"Invalid value: '%s'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.", role)
		}
		content, _ := m.Get("content")
		texts, perr := contentTexts(content, loc)
		if perr != nil {
			return chattemplate.Value{}, last, perr
		}
		msg := chattemplate.NewMap()
		msg.Set("role", chattemplate.String(role))
		joined := strings.Join(texts, "\n")
		if openai {
			parts := make([]chattemplate.Value, len(texts))
			for j, t := range texts {
				pm := chattemplate.NewMap()
				pm.Set("type", chattemplate.String("text"))
				pm.Set("text", chattemplate.String(t))
				parts[j] = chattemplate.MapValue(pm)
			}
			msg.Set("content", chattemplate.List(parts...))
		} else {
			msg.Set("content", chattemplate.String(joined))
		}
		switch role {
		case "assistant":
			if tc, ok := m.Get("tool_calls"); ok && !tc.IsNone() {
				calls, terr := toolCallsForTemplate(tc, loc)
				if terr != nil {
					return chattemplate.Value{}, last, terr
				}
				msg.Set("tool_calls", calls)
			}
			reasoning := ""
			found := false
			for _, k := range []string{"reasoning", "reasoning_content"} {
				if rv, ok := m.Get(k); ok && rv.Truth() {
					reasoning, found = rv.String(), true
					break
				}
			}
			if found {
				msg.Set("reasoning", chattemplate.String(reasoning))
				msg.Set("reasoning_content", chattemplate.String(reasoning))
			}
		case "tool":
			if id, ok := m.Get("tool_call_id"); ok {
				msg.Set("tool_call_id", id)
			}
		}
		if name, ok := m.Get("name"); ok {
			if _, isStr := name.AsString(); isStr {
				msg.Set("name", name)
			}
		}
		out = append(out, chattemplate.MapValue(msg))
		last = lastMessage{role, joined}
	}
	return chattemplate.List(out...), last, nil
}

// contentTexts returns the text parts of a message's content (a string,
// a list of parts, or None).
func contentTexts(content chattemplate.Value, loc string) ([]string, *APIError) {
	if s, ok := content.AsString(); ok {
		return []string{s}, nil
	}
	if content.IsUndefined() || content.IsNone() {
		return nil, nil
	}
	if content.Kind() != chattemplate.ListKind {
		return nil, badParam(loc+".content", "Invalid type for '%s.content': expected a string or an array of content parts, but got %s instead.", loc, content.Kind())
	}
	var texts []string
	for j, part := range content.Items() {
		if s, ok := part.AsString(); ok {
			texts = append(texts, s)
			continue
		}
		pm := part.AsMap()
		if pm == nil {
			return nil, badParam(fmt.Sprintf("%s.content.[%d]", loc, j), "Invalid content part at '%s.content.[%d]': expected an object.", loc, j)
		}
		typ := ""
		if t, ok := pm.Get("type"); ok {
			typ, _ = t.AsString()
		}
		switch typ {
		case "text", "input_text", "output_text", "":
			t, ok := pm.Get("text")
			s, isStr := t.AsString()
			if !ok || !isStr {
				return nil, badParam(fmt.Sprintf("%s.content.[%d].text", loc, j), "Missing required parameter: '%s.content.[%d].text'.", loc, j)
			}
			texts = append(texts, s)
		case "refusal":
			if t, ok := pm.Get("refusal"); ok {
				if s, isStr := t.AsString(); isStr {
					texts = append(texts, s)
				}
			}
		case "thinking":
			// Thinking parts are not text content (vLLM drops them from the
			// string form).
		default:
			return nil, badParam(fmt.Sprintf("%s.content.[%d].type", loc, j),
				"Content part type '%s' is not supported by npuserve yet: only text parts are (multimodal input is planned).", typ)
		}
	}
	return texts, nil
}

// toolCallsForTemplate copies an assistant message's tool_calls with
// string arguments parsed into objects (empty or missing arguments
// become {}), as vLLM's _postprocess_messages does.
func toolCallsForTemplate(tc chattemplate.Value, loc string) (chattemplate.Value, *APIError) {
	if tc.Kind() != chattemplate.ListKind {
		return chattemplate.Value{}, badParam(loc+".tool_calls", "Invalid type for '%s.tool_calls': expected an array.", loc)
	}
	var calls []chattemplate.Value
	for j, item := range tc.Items() {
		im := item.AsMap()
		if im == nil {
			return chattemplate.Value{}, badParam(fmt.Sprintf("%s.tool_calls.[%d]", loc, j), "Invalid tool call at '%s.tool_calls.[%d]': expected an object.", loc, j)
		}
		fn, _ := im.Get("function")
		fm := fn.AsMap()
		if fm == nil {
			return chattemplate.Value{}, badParam(fmt.Sprintf("%s.tool_calls.[%d].function", loc, j), "Missing required parameter: '%s.tool_calls.[%d].function'.", loc, j)
		}
		fm = fm.Clone()
		args, _ := fm.Get("arguments")
		switch {
		case !args.Truth():
			fm.Set("arguments", chattemplate.MapValue(chattemplate.NewMap()))
		case args.Kind() == chattemplate.StringKind:
			s, _ := args.AsString()
			parsed, err := chattemplate.FromJSON([]byte(s))
			if err != nil {
				return chattemplate.Value{}, badParam(fmt.Sprintf("%s.tool_calls.[%d].function.arguments", loc, j),
					"tool call arguments at '%s.tool_calls.[%d].function.arguments' are not valid JSON: %v", loc, j, strings.TrimPrefix(err.Error(), "chattemplate: "))
			}
			fm.Set("arguments", parsed)
		}
		nm := im.Clone()
		nm.Set("function", chattemplate.MapValue(fm))
		calls = append(calls, chattemplate.MapValue(nm))
	}
	return chattemplate.List(calls...), nil
}

// normalizeTools converts the request's tools into what vLLM passes to
// the template, the dump of its tool model: {"type": "function",
// "function": {"name", "description", "parameters", ...extra}, ...extra}
// with null description / parameters when absent. hasTools is false for
// a null or absent list.
func normalizeTools(raw json.RawMessage) (chattemplate.Value, bool, *APIError) {
	if len(bytes.TrimSpace(raw)) == 0 || isNull(raw) {
		return chattemplate.Undefined(), false, nil
	}
	v, err := chattemplate.FromJSON(raw)
	if err != nil || v.Kind() != chattemplate.ListKind {
		return chattemplate.Value{}, false, validationError([]pydanticError{{Type: "list_type", Loc: "body.tools",
			Msg: "Input should be a valid list", Input: pyInput(raw)}})
	}
	var out []chattemplate.Value
	for i, it := range v.Items() {
		m := it.AsMap()
		fn, _ := m.Get("function")
		fm := fn.AsMap()
		if m == nil || fm == nil {
			return chattemplate.Value{}, false, validationError([]pydanticError{{Type: "missing",
				Loc: fmt.Sprintf("body.tools.%d.function", i), Msg: "Field required", Input: pyInput(nil)}})
		}
		name, ok := fm.Get("name")
		if _, isStr := name.AsString(); !ok || !isStr {
			return chattemplate.Value{}, false, validationError([]pydanticError{{Type: "missing",
				Loc: fmt.Sprintf("body.tools.%d.function.name", i), Msg: "Field required", Input: pyfmt.Repr(fmt.Sprintf("<dict of %d items>", fm.Len()))}})
		}
		nf := chattemplate.NewMap()
		nf.Set("name", name)
		for _, k := range []string{"description", "parameters"} {
			if x, ok := fm.Get(k); ok {
				nf.Set(k, x)
			} else {
				nf.Set(k, chattemplate.None())
			}
		}
		copyExtra(nf, fm)
		nt := chattemplate.NewMap()
		typ, ok := m.Get("type")
		if !ok {
			typ = chattemplate.String("function")
		}
		nt.Set("type", typ)
		nt.Set("function", chattemplate.MapValue(nf))
		copyExtra(nt, m)
		out = append(out, chattemplate.MapValue(nt))
	}
	return chattemplate.List(out...), true, nil
}

// copyExtra appends src's keys that dst lacks.
func copyExtra(dst, src *chattemplate.Map) {
	for i, k := range src.Keys() {
		if _, ok := dst.GetKey(k); !ok {
			dst.SetKey(k, src.Values()[i])
		}
	}
}

// reservedKwargs are render() arguments a template kwarg cannot
// override.
var reservedKwargs = map[string]bool{"messages": true, "tools": true, "documents": true,
	"add_generation_prompt": true, "continue_final_message": true, "chat_template": true, "tokenize": true}

// templateKwargs merges chat_template_kwargs with reasoning_effort (which
// wins when set, vLLM merge_kwargs) and the top-level enable_thinking.
func templateKwargs(in ChatInput) (*chattemplate.Map, map[string]any, *APIError) {
	kw := chattemplate.NewMap()
	plain := map[string]any{}
	if len(in.ChatTemplateKwargs) > 0 && !isNull(in.ChatTemplateKwargs) {
		v, err := chattemplate.FromJSON(in.ChatTemplateKwargs)
		m := v.AsMap()
		if err != nil || m == nil {
			return nil, nil, validationError([]pydanticError{{Type: "dict_type", Loc: "body.chat_template_kwargs",
				Msg: "Input should be a valid dictionary", Input: pyInput(in.ChatTemplateKwargs)}})
		}
		for i, k := range m.Keys() {
			ks, _ := k.AsString()
			if reservedKwargs[ks] {
				continue
			}
			kw.Set(ks, m.Values()[i])
		}
		json.Unmarshal(in.ChatTemplateKwargs, &plain)
		for k := range reservedKwargs {
			delete(plain, k)
		}
	}
	if in.ReasoningEffort != nil {
		kw.Set("reasoning_effort", chattemplate.String(*in.ReasoningEffort))
		plain["reasoning_effort"] = *in.ReasoningEffort
	}
	if in.EnableThinking != nil {
		if _, ok := kw.Get("enable_thinking"); !ok {
			kw.Set("enable_thinking", chattemplate.Bool(*in.EnableThinking))
			plain["enable_thinking"] = *in.EnableThinking
		}
	}
	return kw, plain, nil
}

// RenderRequestJSON renders a whole request body the way the server
// would build its prompt: a chat request ("messages") through the chat
// template, a completions request ("prompt", a single string or token
// ids) through the tokenizer. It returns the prompt text ("" for a
// token-id prompt) and ids. `npuserve render` prints its result.
func (r *Renderer) RenderRequestJSON(data []byte) (prompt string, ids []int32, err error) {
	b, aerr := parseBody(data)
	if aerr != nil {
		return "", nil, aerr
	}
	if b.present("messages") {
		req, aerr := decodeChat(b)
		if aerr != nil {
			return "", nil, aerr
		}
		rc, aerr := r.RenderChat(context.Background(), req.chatInput())
		if aerr != nil {
			return "", nil, aerr
		}
		return rc.Prompt, rc.TokenIDs, nil
	}
	req, aerr := decodeCompletion(b)
	if aerr != nil {
		return "", nil, aerr
	}
	prompts, aerr := tokenizePrompts(r.Tok, req.prompts, req.addSpecialTokens, r.limit())
	if aerr != nil {
		return "", nil, aerr
	}
	if len(prompts) != 1 {
		return "", nil, errors.New("render: the request has a batch of prompts; give one")
	}
	return prompts[0].text, prompts[0].ids, nil
}
