package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/quant"
)

// writeLines writes a prompts file.
func writeLines(t *testing.T, lines ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "prompts.jsonl")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestQuantizeEvalGenerate: `npuserve quantize` writes an msmodelslim dir
// for every scheme that `npuserve generate` serves, and `npuserve eval
// --json` compares it with the float model, its JSON on the last line.
func TestQuantizeEvalGenerate(t *testing.T) {
	tiny := filepath.Join(fixtures, "tiny")
	g := loadGolden(t, "tiny")
	calib := writeLines(t, `"Hello, world! 你好"`, "", mustJSON(g.Prompts[1]), mustJSON(g.Prompts[2]))
	prompts := writeLines(t, mustJSON(g.Prompts[0]), mustJSON(g.Prompts[3]), `"The quick brown fox"`)
	for _, scheme := range []string{"w8a8_dynamic", "w8a8", "w8a8_mxfp8"} {
		t.Run(scheme, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "q")
			stdout, stderr, code := run(t, "quantize", "--model", tiny, "--out", out, "--scheme", scheme, "--calib-prompts", calib)
			if code != 0 {
				t.Fatalf("quantize: exit %d: %s", code, stderr)
			}
			if !strings.Contains(stdout, "wrote "+out) {
				t.Errorf("quantize output %q", stdout)
			}
			desc, err := quant.ReadDescription(out)
			if err != nil {
				t.Fatal(err)
			}
			if desc.ModelQuantType != strings.ToUpper(scheme) {
				t.Errorf("model_quant_type %q", desc.ModelQuantType)
			}
			stdout, stderr, code = run(t, "eval", "--model", out, "--reference", tiny, "--prompts-file", prompts, "--json")
			if code != 0 {
				t.Fatalf("eval: exit %d: %s", code, stderr)
			}
			lines := strings.Split(strings.TrimSpace(stdout), "\n")
			var r struct {
				Top1  *float64 `json:"top1_agreement"`
				KL    *float64 `json:"mean_kl"`
				Count *int     `json:"tokens"`
			}
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil || r.Top1 == nil || r.KL == nil || r.Count == nil {
				t.Fatalf("eval --json last line %q: %v", lines[len(lines)-1], err)
			}
			wantTokens := len(g.Prompts[0]) + len(g.Prompts[3])
			if *r.Count <= wantTokens || *r.Top1 < 0.7 || *r.Top1 > 1 || *r.KL < 0 || *r.KL > 0.5 {
				t.Errorf("eval: %+v (top1 %v, KL %v, tokens %v; want > %d tokens)", r, *r.Top1, *r.KL, *r.Count, wantTokens)
			}
			stdout, stderr, code = run(t, "generate", "--model", out, "--prompt-ids", idsArg(g.Prompts[0]), "--max-tokens", "5", "--ignore-eos", "--json")
			var res generateResult
			if code != 0 || json.Unmarshal([]byte(stdout), &res) != nil || len(res.TokenIDs) != 5 {
				t.Fatalf("generate on the quantized dir: exit %d, %q, %s", code, stdout, stderr)
			}
		})
	}
	// eval without --json is one human-readable line; a model against
	// itself agrees everywhere.
	stdout, stderr, code := run(t, "eval", "--model", tiny, "--reference", tiny, "--prompts-file", prompts)
	if code != 0 || !strings.Contains(stdout, "top-1 agreement 1.0000") {
		t.Fatalf("eval: exit %d: %q %s", code, stdout, stderr)
	}
}

// TestQuantizeEvalBadInput: bad flags and files exit non-zero with a
// message naming the flag or the file.
func TestQuantizeEvalBadInput(t *testing.T) {
	tiny := filepath.Join(fixtures, "tiny")
	good := writeLines(t, "[1, 2, 3]")
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"bad scheme", []string{"quantize", "--model", tiny, "--out", t.TempDir(), "--scheme", "w4a4"}, 2, "--scheme"},
		{"static without calibration", []string{"quantize", "--model", tiny, "--out", t.TempDir(), "--scheme", "w8a8"}, 2, "--calib-prompts"},
		{"bad skip pattern", []string{"quantize", "--model", tiny, "--out", t.TempDir(), "--scheme", "w8a8_dynamic", "--skip", "("}, 1, "skip pattern"},
		{"bad calibration line", []string{"quantize", "--model", tiny, "--out", t.TempDir(), "--scheme", "w8a8", "--calib-prompts", writeLines(t, "[1, 2]", "{\"a\": 1}")}, 2, "prompts.jsonl:2"},
		{"calibration id out of vocab", []string{"quantize", "--model", tiny, "--out", t.TempDir(), "--scheme", "w8a8", "--calib-prompts", writeLines(t, "[1, 99999]")}, 1, "99999"},
		{"quantize a quantized dir", []string{"quantize", "--model", "QUANTIZED", "--out", t.TempDir(), "--scheme", "w8a8_dynamic"}, 1, "already an msmodelslim checkpoint"},
		{"missing model", []string{"quantize", "--model", "/nonexistent/m", "--out", t.TempDir(), "--scheme", "w8a8_dynamic"}, 1, "/nonexistent/m"},
		{"eval missing prompts", []string{"eval", "--model", tiny, "--reference", tiny, "--prompts-file", "/nonexistent/p.jsonl"}, 2, "--prompts-file"},
		{"eval negative id", []string{"eval", "--model", tiny, "--reference", tiny, "--prompts-file", writeLines(t, "[1, -2]")}, 2, "not a token id"},
		{"eval empty file", []string{"eval", "--model", tiny, "--reference", tiny, "--prompts-file", writeLines(t, "")}, 2, "no prompts"},
		{"eval bad reference", []string{"eval", "--model", tiny, "--reference", "/nonexistent/r", "--prompts-file", good}, 1, "--reference"},
		{"eval --quantization ascend of a float dir", []string{"eval", "--model", tiny, "--reference", tiny, "--prompts-file", good, "--quantization", "ascend"}, 2,
			"--quantization ascend: " + tiny + " has no quant_model_description.json"},
		{"eval --quantization of another type", []string{"eval", "--model", "QUANTIZED", "--reference", tiny, "--prompts-file", good, "-q", "w8a8_mxfp8"}, 2,
			"model_quant_type W8A8_DYNAMIC, but --quantization w8a8_mxfp8 wants W8A8_MXFP8"},
		{"generate --quantization of another type", []string{"generate", "--model", "QUANTIZED", "--prompt-ids", "1,2", "--quantization", "w8a8"}, 2,
			"model_quant_type W8A8_DYNAMIC, but --quantization w8a8 wants W8A8"},
		{"generate unknown --quantization", []string{"generate", "--model", tiny, "--prompt-ids", "1,2", "--quantization", "awq"}, 2, `--quantization: must be one of`},
	}
	var quantized string
	base := t.TempDir() // the quantized dir outlives the subtest that makes it
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := c.args
			if args[2] == "QUANTIZED" {
				if quantized == "" {
					quantized = filepath.Join(base, "q")
					if _, e, code := run(t, "quantize", "--model", tiny, "--out", quantized, "--scheme", "w8a8_dynamic"); code != 0 {
						t.Fatal(e)
					}
				}
				args = append([]string{args[0], args[1], quantized}, args[3:]...)
			}
			_, stderr, code := run(t, args...)
			if code != c.code || !strings.Contains(stderr, c.want) || strings.Contains(stderr, "panic") {
				t.Fatalf("exit %d (want %d), stderr %q (want %q)", code, c.code, stderr, c.want)
			}
		})
	}
}
