package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/npuserve/npuserve/engine/pyfmt"
)

// SpecialTokens are the tokenizer's named special tokens, which
// apply_chat_template passes to the template as variables
// (template_kwargs = {**tokenizer.special_tokens_map, **kwargs}). An empty
// string means the tokenizer has no such token, and the variable is not
// defined.
type SpecialTokens struct {
	BOS, EOS, UNK, SEP, PAD, CLS, Mask string
	// Additional is additional_special_tokens (passed only when
	// non-empty).
	Additional []string
}

// vars returns the template variables of the special tokens, in
// transformers' SPECIAL_TOKENS_ATTRIBUTES order.
func (t SpecialTokens) vars() []namedArg {
	var out []namedArg
	add := func(name, v string) {
		if v != "" {
			out = append(out, namedArg{name, String(v)})
		}
	}
	add("bos_token", t.BOS)
	add("eos_token", t.EOS)
	add("unk_token", t.UNK)
	add("sep_token", t.SEP)
	add("pad_token", t.PAD)
	add("cls_token", t.CLS)
	add("mask_token", t.Mask)
	if len(t.Additional) > 0 {
		out = append(out, namedArg{"additional_special_tokens", Strings(t.Additional...)})
	}
	return out
}

// Chat is one apply_chat_template call.
type Chat struct {
	// Messages is the list of message dicts (decode request JSON with
	// FromJSON so key order survives).
	Messages Value
	// Tools is the list of tool schemas; Undefined or None means no tools
	// (the template then sees tools=None, as in transformers).
	Tools Value
	// Documents is the RAG documents list; Undefined or None means None.
	Documents Value
	// AddGenerationPrompt is add_generation_prompt.
	AddGenerationPrompt bool
	// ContinueFinalMessage renders the final message open-ended, so the
	// model continues it (transformers' continue_final_message=True).
	ContinueFinalMessage bool
	// Kwargs are extra template variables (chat_template_kwargs,
	// reasoning_effort, enable_thinking, ...). They override special
	// tokens of the same name. A name that is also one of messages,
	// tools, documents or add_generation_prompt is an error, as in Python.
	Kwargs *Map
	// Tokens are the tokenizer's special tokens.
	Tokens SpecialTokens
	// Options adjust the render (limits, clock, cancellation); may be nil.
	Options *RenderOptions
}

// continueTag is transformers' marker for continue_final_message.
const continueTag = "CONTINUE_FINAL_MESSAGE_TAG "

// RenderChat renders a chat as transformers' apply_chat_template(...,
// tokenize=False) does with the given template.
func RenderChat(t *Template, c Chat) (string, error) {
	if t == nil {
		return "", errors.New("chattemplate: no chat template")
	}
	messages := c.Messages
	if c.ContinueFinalMessage && c.AddGenerationPrompt {
		return "", errors.New("chattemplate: continue_final_message and add_generation_prompt are not compatible. Use continue_final_message when you want the model to continue the final message, and add_generation_prompt when you want to add a header that will prompt it to start a new assistant message instead.")
	}
	var finalMessage string
	if c.ContinueFinalMessage {
		var err error
		messages, finalMessage, err = markFinalMessage(t, messages)
		if err != nil {
			return "", err
		}
	}
	vars := NewMap()
	vars.Set("messages", messages)
	tools := c.Tools
	if tools.kind == UndefinedKind {
		tools = None()
	}
	docs := c.Documents
	if docs.kind == UndefinedKind {
		docs = None()
	}
	vars.Set("tools", tools)
	vars.Set("documents", docs)
	vars.Set("add_generation_prompt", Bool(c.AddGenerationPrompt))
	reserved := map[string]bool{"messages": true, "tools": true, "documents": true, "add_generation_prompt": true}
	kw := NewMap()
	for _, tv := range c.Tokens.vars() {
		kw.Set(tv.name, tv.v)
	}
	if c.Kwargs != nil {
		for i, k := range c.Kwargs.keys {
			if k.kind != StringKind {
				return "", fmt.Errorf("chattemplate: template kwarg key %s is not a string", k.Repr())
			}
			kw.Set(k.str, c.Kwargs.vals[i])
		}
	}
	for i, k := range kw.keys {
		if reserved[k.str] {
			return "", fmt.Errorf("chattemplate: render() got multiple values for keyword argument '%s'", k.str)
		}
		vars.Set(k.str, kw.vals[i])
	}
	out, err := t.RenderValue(MapValue(vars), c.Options)
	if err != nil {
		return "", err
	}
	if c.ContinueFinalMessage {
		tag := strings.TrimSpace(continueTag)
		if !strings.Contains(out, strings.TrimFunc(finalMessage, pyfmt.IsSpace)) || !strings.Contains(out, tag) {
			return "", fmt.Errorf("chattemplate: continue_final_message is set but the final message does not appear in the chat after applying the chat template! This can happen if the chat template deletes portions of the final message. Please verify the chat template and final message in your chat to ensure they are compatible.Final message to continue: %s\nRendered chat:\n%s", strings.TrimFunc(finalMessage, pyfmt.IsSpace), out)
		}
		loc := strings.LastIndex(out, tag)
		if strings.HasPrefix(out[loc:], continueTag) {
			out = out[:loc]
		} else {
			out = strings.TrimRightFunc(out[:loc], pyfmt.IsSpace)
		}
	}
	return out, nil
}

// markFinalMessage copies the messages with the continue tag appended to
// the final message's text (its last text block for content lists).
func markFinalMessage(t *Template, messages Value) (Value, string, error) {
	items := messages.Items()
	if len(items) == 0 {
		return Value{}, "", errors.New("chattemplate: continue_final_message is set but there are no messages")
	}
	last := items[len(items)-1].AsMap()
	if last == nil {
		return Value{}, "", errors.New("chattemplate: the final message is not a mapping")
	}
	content, ok := last.Get("content")
	if !ok || content.kind == NoneKind {
		return Value{}, "", errors.New(`chattemplate: continue_final_message is set but the final message has no "content" to continue!`)
	}
	if !strings.Contains(t.src, "content") {
		return Value{}, "", errors.New(`chattemplate: continue_final_message is set to "content" but this is not an accepted field in the chat_template`)
	}
	newLast := last.Clone()
	var final string
	switch content.kind {
	case ListKind, TupleKind:
		blocks := append([]Value(nil), content.list()...)
		found := false
		for i := len(blocks) - 1; i >= 0; i-- {
			bm := blocks[i].AsMap()
			if bm == nil {
				continue
			}
			text, ok := bm.Get("text")
			if !ok {
				continue
			}
			if text.kind != StringKind {
				return Value{}, "", fmt.Errorf("chattemplate: final message text is %s, not a string", text.typeName())
			}
			nb := bm.Clone()
			nb.Set("text", String(text.str+continueTag))
			blocks[i] = MapValue(nb)
			final, found = text.str, true
			break
		}
		if !found {
			return Value{}, "", errors.New("chattemplate: continue_final_message is set but we could not find any text to continue in the final message!")
		}
		newLast.Set("content", Value{kind: content.kind, ref: blocks})
	case StringKind:
		final = content.str
		newLast.Set("content", String(content.str+continueTag))
	default:
		return Value{}, "", fmt.Errorf("chattemplate: cannot continue a final message whose content is %s", content.typeName())
	}
	out := append([]Value(nil), items[:len(items)-1]...)
	out = append(out, MapValue(newLast))
	return List(out...), final, nil
}

// ModelTemplates are the chat templates of a model directory.
type ModelTemplates struct {
	// Default is the template apply_chat_template uses without a name
	// (nil when the model has only named templates without "default").
	Default *Template
	// Named are named templates (tokenizer_config.json list form or
	// additional_chat_templates/*.jinja), including "default".
	Named map[string]*Template
	// Tokens are the special tokens from tokenizer_config.json.
	Tokens SpecialTokens
	// Source names the file the default template came from.
	Source string
}

// Select picks a template as transformers' get_chat_template does: the
// named one if name is set, else "tool_use" when tools are given and it
// exists, else the default.
func (m *ModelTemplates) Select(name string, hasTools bool) (*Template, error) {
	if name != "" {
		if t, ok := m.Named[name]; ok {
			return t, nil
		}
		return nil, fmt.Errorf("chattemplate: the model has no chat template named %q (have %s)", name, strings.Join(m.names(), ", "))
	}
	if hasTools {
		if t, ok := m.Named["tool_use"]; ok {
			return t, nil
		}
	}
	if m.Default != nil {
		return m.Default, nil
	}
	return nil, fmt.Errorf("chattemplate: this model has multiple chat templates with no default specified (have %s); pick one by name", strings.Join(m.names(), ", "))
}

func (m *ModelTemplates) names() []string {
	var out []string
	for n := range m.Named {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// LoadFromModelDir loads a model's chat template(s) and special tokens as
// AutoTokenizer.from_pretrained does: chat_template.jinja, when present,
// clobbers the chat_template of tokenizer_config.json (transformers'
// test_chat_template_file_priority); otherwise tokenizer_config.json's
// chat_template, a string or a list of {"name", "template"}. Named
// templates also come from additional_chat_templates/<name>.jinja.
func LoadFromModelDir(dir string) (*ModelTemplates, error) {
	m := &ModelTemplates{Named: map[string]*Template{}}
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	var cfg map[string]json.RawMessage
	if data, err := os.ReadFile(cfgPath); err == nil {
		if err := json.Unmarshal(data, &cfg); err != nil {
			return nil, fmt.Errorf("chattemplate: %s: %w", cfgPath, err)
		}
		tok, err := parseSpecialTokens(cfg)
		if err != nil {
			return nil, fmt.Errorf("chattemplate: %s: %w", cfgPath, err)
		}
		m.Tokens = tok
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("chattemplate: %w", err)
	}
	compile := func(src, origin string) (*Template, error) {
		t, err := Compile(src)
		if err != nil {
			return nil, fmt.Errorf("chattemplate: %s: %w", origin, err)
		}
		return t, nil
	}
	if raw, ok := cfg["chat_template"]; ok && string(raw) != "null" {
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			t, err := compile(s, cfgPath+": chat_template")
			if err != nil {
				return nil, err
			}
			m.Default, m.Source = t, cfgPath
		} else {
			var list []struct {
				Name     string `json:"name"`
				Template string `json:"template"`
			}
			if err := json.Unmarshal(raw, &list); err != nil {
				return nil, fmt.Errorf("chattemplate: %s: chat_template is neither a string nor a list of {name, template}", cfgPath)
			}
			for _, e := range list {
				t, err := compile(e.Template, fmt.Sprintf("%s: chat_template %q", cfgPath, e.Name))
				if err != nil {
					return nil, err
				}
				m.Named[e.Name] = t
			}
			if t, ok := m.Named["default"]; ok {
				m.Default, m.Source = t, cfgPath
			}
		}
	}
	jinjaPath := filepath.Join(dir, "chat_template.jinja")
	if data, err := os.ReadFile(jinjaPath); err == nil {
		t, err := compile(string(data), jinjaPath)
		if err != nil {
			return nil, err
		}
		m.Default, m.Source = t, jinjaPath
		m.Named["default"] = t
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("chattemplate: %w", err)
	}
	extra, _ := filepath.Glob(filepath.Join(dir, "additional_chat_templates", "*.jinja"))
	for _, p := range extra {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("chattemplate: %w", err)
		}
		t, err := compile(string(data), p)
		if err != nil {
			return nil, err
		}
		m.Named[strings.TrimSuffix(filepath.Base(p), ".jinja")] = t
	}
	if m.Default == nil && len(m.Named) == 0 {
		return nil, fmt.Errorf("chattemplate: %s has no chat template (no chat_template in tokenizer_config.json and no chat_template.jinja)", dir)
	}
	return m, nil
}

// parseSpecialTokens reads the named special tokens of a
// tokenizer_config.json; each is a string or an AddedToken object with a
// "content" field.
func parseSpecialTokens(cfg map[string]json.RawMessage) (SpecialTokens, error) {
	get := func(name string) (string, error) {
		raw, ok := cfg[name]
		if !ok || string(raw) == "null" {
			return "", nil
		}
		s, err := tokenContent(raw)
		if err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		return s, nil
	}
	var t SpecialTokens
	for _, f := range []struct {
		name string
		dst  *string
	}{{"bos_token", &t.BOS}, {"eos_token", &t.EOS}, {"unk_token", &t.UNK}, {"sep_token", &t.SEP},
		{"pad_token", &t.PAD}, {"cls_token", &t.CLS}, {"mask_token", &t.Mask}} {
		s, err := get(f.name)
		if err != nil {
			return t, err
		}
		*f.dst = s
	}
	if raw, ok := cfg["additional_special_tokens"]; ok && string(raw) != "null" {
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return t, fmt.Errorf("additional_special_tokens is not a list")
		}
		for i, it := range items {
			s, err := tokenContent(it)
			if err != nil {
				return t, fmt.Errorf("additional_special_tokens[%d]: %w", i, err)
			}
			t.Additional = append(t.Additional, s)
		}
	}
	return t, nil
}

// tokenContent reads a special token: a string or an AddedToken object.
func tokenContent(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Content == nil {
		return "", errors.New("neither a string nor a token object")
	}
	return *obj.Content, nil
}

// FixedClock returns a RenderOptions.Now that always answers t.
func FixedClock(t time.Time) func() time.Time { return func() time.Time { return t } }
