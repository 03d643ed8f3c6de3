package chattemplate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestLoadFromModelDirTiny loads the template shipped with the tiny test
// model and checks it renders the glm5 goldens.
func TestLoadFromModelDirTiny(t *testing.T) {
	m, err := LoadFromModelDir("../../testdata/glm5next/tiny")
	if err != nil {
		t.Fatal(err)
	}
	if m.Tokens.EOS != "<|endoftext|>" || m.Tokens.PAD != "<|endoftext|>" || m.Tokens.BOS != "" {
		t.Errorf("tokens %+v", m.Tokens)
	}
	tpl, err := m.Select("", true)
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range loadScenarios(t) {
		want, err := os.ReadFile(filepath.Join("testdata", "golden", "glm5", sc.Name+".txt"))
		if err != nil {
			continue // a scenario the template rejects
		}
		got, err := RenderChat(tpl, Chat{Messages: sc.Messages, Tools: sc.Tools, AddGenerationPrompt: sc.AddGenerationPrompt,
			ContinueFinalMessage: sc.ContinueFinalMessage, Kwargs: sc.Kwargs, Tokens: m.Tokens})
		if err != nil {
			t.Fatalf("%s: %v", sc.Name, err)
		}
		if got != string(want) {
			t.Fatalf("%s: mismatch", sc.Name)
		}
	}
}

func TestLoadFromModelDir(t *testing.T) {
	tests := []struct {
		name     string
		files    map[string]string
		tool     string // template picked with tools
		plain    string // template picked without tools
		source   string
		tokens   SpecialTokens
		errorSub string
	}{
		{
			name:  "string",
			files: map[string]string{"tokenizer_config.json": `{"chat_template": "A{{ bos_token }}", "bos_token": "<s>", "eos_token": {"__type": "AddedToken", "content": "</s>"}, "unk_token": null, "additional_special_tokens": ["<x>", {"content": "<y>"}]}`},
			tool:  "A<s>", plain: "A<s>", source: "tokenizer_config.json",
			tokens: SpecialTokens{BOS: "<s>", EOS: "</s>", Additional: []string{"<x>", "<y>"}},
		},
		{
			name: "jinja_file_clobbers_config",
			files: map[string]string{
				"tokenizer_config.json": `{"chat_template": "config"}`,
				"chat_template.jinja":   "file\n",
			},
			tool: "file", plain: "file", source: "chat_template.jinja",
		},
		{
			name:  "jinja_file_only",
			files: map[string]string{"chat_template.jinja": "{{ 'only' }}"},
			tool:  "only", plain: "only", source: "chat_template.jinja",
		},
		{
			name:  "named_list",
			files: map[string]string{"tokenizer_config.json": `{"chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}]}`},
			tool:  "T", plain: "D", source: "tokenizer_config.json",
		},
		{
			name:  "additional_templates_dir",
			files: map[string]string{"chat_template.jinja": "D", "additional_chat_templates/tool_use.jinja": "T"},
			tool:  "T", plain: "D", source: "chat_template.jinja",
		},
		{
			name:     "named_list_without_default",
			files:    map[string]string{"tokenizer_config.json": `{"chat_template": [{"name": "rag", "template": "R"}]}`},
			errorSub: "no default",
		},
		{name: "no_template", files: map[string]string{"tokenizer_config.json": `{"bos_token": "<s>"}`}, errorSub: "has no chat template"},
		{name: "bad_json", files: map[string]string{"tokenizer_config.json": `{"chat_template": `}, errorSub: "tokenizer_config.json"},
		{name: "bad_template_type", files: map[string]string{"tokenizer_config.json": `{"chat_template": 7}`}, errorSub: "neither a string nor a list"},
		{name: "syntax_error", files: map[string]string{"chat_template.jinja": "{% if %}"}, errorSub: "chat_template.jinja"},
		{name: "bad_token", files: map[string]string{"tokenizer_config.json": `{"chat_template": "x", "bos_token": 5}`}, errorSub: "bos_token"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeFiles(t, tc.files)
			m, err := LoadFromModelDir(dir)
			var tool, plain *Template
			if err == nil {
				tool, err = m.Select("", true)
			}
			if err == nil {
				plain, err = m.Select("", false)
			}
			if tc.errorSub != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errorSub) {
					t.Fatalf("error %v, want one containing %q", err, tc.errorSub)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				tpl  *Template
				want string
			}{{tool, tc.tool}, {plain, tc.plain}} {
				got, err := RenderChat(c.tpl, Chat{Messages: List(), Tokens: m.Tokens})
				if err != nil || got != c.want {
					t.Errorf("rendered %q, %v; want %q", got, err, c.want)
				}
			}
			if filepath.Base(m.Source) != tc.source {
				t.Errorf("source %s, want %s", m.Source, tc.source)
			}
			if tc.tokens.BOS != "" && (m.Tokens.BOS != tc.tokens.BOS || m.Tokens.EOS != tc.tokens.EOS || strings.Join(m.Tokens.Additional, ",") != strings.Join(tc.tokens.Additional, ",")) {
				t.Errorf("tokens %+v, want %+v", m.Tokens, tc.tokens)
			}
		})
	}
	m, err := LoadFromModelDir(writeFiles(t, map[string]string{"chat_template.jinja": "D"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Select("missing", false); err == nil {
		t.Fatal("selected a missing named template")
	}
	if _, err := LoadFromModelDir(filepath.Join(t.TempDir(), "nope")); err == nil {
		t.Fatal("loaded a missing directory")
	}
}
