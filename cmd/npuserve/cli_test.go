package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// binPath is the npuserve binary built once for the CLI tests: the tests run
// the real process, as a user would.
var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "npuserve-cli")
	if err != nil {
		panic(err)
	}
	// NPUSERVE_TEST_BINARY runs the tests against a binary built
	// elsewhere (the GPU host has no Go: tools/cuda/run-on-gpu.sh).
	if binPath = os.Getenv("NPUSERVE_TEST_BINARY"); binPath == "" {
		binPath = filepath.Join(dir, "npuserve")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			os.Stderr.Write(out)
			os.Exit(1)
		}
	}
	code := m.Run()
	stopServers() // serve_test.go
	os.RemoveAll(dir)
	os.Exit(code)
}

func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code = 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v", args, err)
	}
	return o.String(), e.String(), code
}

const fixtures = "../../testdata/glm5next"

type golden struct {
	Prompts        [][]int32 `json:"prompts"`
	Greedy         [][]int32 `json:"greedy"`
	GreedyBF16     [][]int32 `json:"greedy_bf16"`
	TextPrompt     string    `json:"text_prompt"`
	TextPromptIDs  []int32   `json:"text_prompt_ids"`
	TextGreedy     []int32   `json:"text_greedy"`
	TextGreedyBF16 []int32   `json:"text_greedy_bf16"`
}

func loadGolden(t *testing.T, name string) golden {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtures, name, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

func idsArg(ids []int32) string {
	return joinIDs(ids)
}

// TestGenerateReproducesReference: `npuserve generate --json` on every
// fixture model reproduces transformers' greedy continuations, for token-id
// prompts and a text prompt, with f32 and bf16 weights.
func TestGenerateReproducesReference(t *testing.T) {
	names := []string{"tiny", "shared", "kpool1", "kpool2"}
	for _, name := range names {
		g := loadGolden(t, name)
		type tc struct {
			dir, desc string
			args      []string
			want      []int32
		}
		var cases []tc
		for i, p := range g.Prompts {
			cases = append(cases, tc{name, "ids", []string{"--prompt-ids", idsArg(p)}, g.Greedy[i]})
		}
		cases = append(cases,
			tc{name, "text", []string{"--prompt", g.TextPrompt}, g.TextGreedy},
			tc{name + "-bf16", "bf16-ids", []string{"--prompt-ids", idsArg(g.Prompts[1])}, g.GreedyBF16[1]},
			tc{name + "-bf16", "bf16-text", []string{"--prompt", g.TextPrompt}, g.TextGreedyBF16},
		)
		for _, c := range cases {
			t.Run(name+"/"+c.desc, func(t *testing.T) {
				args := append([]string{"generate", "--model", filepath.Join(fixtures, c.dir), "--max-tokens", "8", "--ignore-eos", "--json", "--chunk-size", "7"}, c.args...)
				out, errOut, code := run(t, args...)
				if code != 0 {
					t.Fatalf("exit %d: %s", code, errOut)
				}
				var res generateResult
				if err := json.Unmarshal([]byte(out), &res); err != nil {
					t.Fatalf("bad JSON %q: %v", out, err)
				}
				if !equalIDs(res.TokenIDs, c.want) {
					t.Fatalf("token_ids = %v, want %v", res.TokenIDs, c.want)
				}
				if c.desc == "text" && !equalIDs(res.PromptTokenIDs, g.TextPromptIDs) {
					t.Fatalf("prompt_token_ids = %v, want %v", res.PromptTokenIDs, g.TextPromptIDs)
				}
			})
		}
	}
}

func equalIDs(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestTokenize(t *testing.T) {
	g := loadGolden(t, "tiny")
	dir := filepath.Join(fixtures, "tiny")
	out, errOut, code := run(t, "tokenize", "--model", dir, "--json", g.TextPrompt)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var ids []int32
	if err := json.Unmarshal([]byte(out), &ids); err != nil || !equalIDs(ids, g.TextPromptIDs) {
		t.Fatalf("tokenize --json = %q, want %v (%v)", out, g.TextPromptIDs, err)
	}
	// A dir with only the tokenizer files is enough.
	tokOnly := t.TempDir()
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(tokOnly, f), b, 0o644)
	}
	lines := filepath.Join(t.TempDir(), "in.jsonl")
	os.WriteFile(lines, []byte("\"Hello, world! 你好\"\n\"\"\n\"<|user|>hi\"\n"), 0o644)
	out, errOut, code = run(t, "tokenize", "--model", tokOnly, "--jsonl", lines)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	rows := strings.Split(strings.TrimSpace(out), "\n")
	if len(rows) != 3 || rows[0] != mustJSON(g.TextPromptIDs) || rows[1] != "[]" {
		t.Fatalf("--jsonl output %q", out)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestBadInput: every bad flag or model dir exits non-zero with a message
// naming the flag or the file, never a panic.
func TestBadInput(t *testing.T) {
	tiny := filepath.Join(fixtures, "tiny")
	empty := t.TempDir()
	truncated := t.TempDir()
	for _, f := range []string{"config.json", "tokenizer.json", "tokenizer_config.json"} {
		b, _ := os.ReadFile(filepath.Join(tiny, f))
		os.WriteFile(filepath.Join(truncated, f), b, 0o644)
	}
	st, _ := os.ReadFile(filepath.Join(tiny, "model.safetensors"))
	os.WriteFile(filepath.Join(truncated, "model.safetensors"), st[:len(st)/2], 0o644)
	badType := t.TempDir()
	os.WriteFile(filepath.Join(badType, "config.json"), []byte(`{"model_type": "llama", "hidden_size": 8}`), 0o644)

	cases := []struct {
		name string
		args []string
		want string // substring of stderr
	}{
		{"no prompt", []string{"generate", "--model", tiny}, "--prompt"},
		{"both prompts", []string{"generate", "--model", tiny, "--prompt", "a", "--prompt-ids", "1"}, "--prompt"},
		{"bad ids", []string{"generate", "--model", tiny, "--prompt-ids", "1,x"}, "--prompt-ids"},
		{"id out of vocab", []string{"generate", "--model", tiny, "--prompt-ids", "99999"}, "99999"},
		{"negative temperature", []string{"generate", "--model", tiny, "--prompt-ids", "1", "--temperature", "-1"}, "--temperature"},
		{"bad dtype", []string{"generate", "--model", tiny, "--prompt-ids", "1", "--dtype", "int4"}, "--dtype"},
		{"missing dir", []string{"generate", "--model", "/nonexistent/model", "--prompt-ids", "1"}, "/nonexistent/model"},
		{"empty dir", []string{"generate", "--model", empty, "--prompt-ids", "1"}, "config.json"},
		{"truncated weights", []string{"generate", "--model", truncated, "--prompt-ids", "1"}, "model.safetensors"},
		{"unsupported model_type", []string{"generate", "--model", badType, "--prompt-ids", "1"}, "llama"},
		{"tokenize no text", []string{"tokenize", "--model", tiny}, "TEXT"},
		{"tokenize bad dir", []string{"tokenize", "--model", empty, "x"}, "tokenizer.json"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, errOut, code := run(t, c.args...)
			if code == 0 {
				t.Fatalf("exit 0, want failure")
			}
			if strings.Contains(errOut, "panic") || strings.Contains(errOut, "goroutine ") {
				t.Fatalf("panicked: %s", errOut)
			}
			if !strings.Contains(errOut, c.want) {
				t.Fatalf("stderr %q does not mention %q", errOut, c.want)
			}
		})
	}
}
