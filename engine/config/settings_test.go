package config

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// writeSettings writes a settings file into a temp dir.
func writeSettings(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestBlogSkeletons loads the configuration blog's settings.json and
// config.toml: both mean the same engine arguments.
func TestBlogSkeletons(t *testing.T) {
	for _, file := range []string{"blog-settings.json", "blog-config.toml"} {
		t.Run(file, func(t *testing.T) {
			a := mustServe(t, "--config", filepath.Join("testdata", "settings", file))
			want(t, "Model", a.Model, "/models/GLM-5.3-Flash")
			want(t, "ServedModelName", a.ServedModelName, []string{"glm-5.3-flash"})
			want(t, "TrustRemoteCode", a.TrustRemoteCode, true)
			want(t, "Dtype", a.Dtype, "bfloat16")
			want(t, "MaxModelLen", a.MaxModelLen, 1048576)
			want(t, "MaxNumBatchedTokens", a.MaxNumBatchedTokens, 32768)
			want(t, "KVCacheDtype", a.KVCacheDtype, "auto")
			want(t, "EnableExpertParallel", a.EnableExpertParallel, true)
			want(t, "epSize", a.epSize, 8)
			want(t, "SpeculativeConfig", string(a.SpeculativeConfig), `{"method":"mtp","num_speculative_tokens":4}`)
			want(t, "Quantization", a.Quantization, "w8a8")
			want(t, "Device", a.Device, "ascend")
			want(t, "Source(max-model-len)", strings.HasPrefix(a.Source("max-model-len"), "settings "), true)
			want(t, "checks", len(a.checks) >= 6, true)
			// Flags win over the file.
			b := mustServe(t, "/other/model", "--config", filepath.Join("testdata", "settings", file),
				"--max-model-len", "4096", "--served-model-name", "x", "--quantization", "w8a8_dynamic", "--no-enable-expert-parallel")
			want(t, "Model", b.Model, "/other/model")
			want(t, "MaxModelLen", b.MaxModelLen, 4096)
			want(t, "Source(max-model-len)", b.Source("max-model-len"), "flag")
			want(t, "ServedModelName", b.ServedModelName, []string{"x"})
			want(t, "Quantization", b.Quantization, "w8a8_dynamic")
			want(t, "EnableExpertParallel", b.EnableExpertParallel, false)
			want(t, "MaxNumBatchedTokens (from the file)", b.MaxNumBatchedTokens, 32768)
			// The tuning npuserve lacks is accepted and reported.
			ign := map[string]bool{}
			for _, x := range a.WithoutEffect("ascend") {
				ign[x.Flag] = true
			}
			// (speculative.mtp is honoured now: MTP speculative decoding.)
			for _, f := range []string{"--trust-remote-code"} {
				if !ign[f] {
					t.Errorf("%s missing from WithoutEffect: %v", f, ign)
				}
			}
			n := 0
			for f := range ign {
				if strings.HasPrefix(f, "settings ") {
					n++
				}
			}
			if n < 10 {
				t.Errorf("only %d settings keys reported without effect: %v", n, ign)
			}
		})
	}
}

// TestSettingsFlat: flat flag keys in dash or underscore form, JSON
// flags as tables/objects or JSON strings, lists.
func TestSettingsFlat(t *testing.T) {
	a := mustServe(t, "m", "--config", filepath.Join("testdata", "settings", "flat.toml"))
	want(t, "TP", a.TensorParallelSize, 8)
	want(t, "DP", a.DataParallelSize, 2)
	want(t, "EP", a.EnableExpertParallel, true)
	want(t, "MaxModelLen", a.MaxModelLen, 131072)
	want(t, "ServedModelName", a.ServedModelName, []string{"glm", "glm-5.3-flash"})
	want(t, "GPUMemoryUtilization", a.GPUMemoryUtilization, 0.85)
	want(t, "LimitMMPerPrompt", string(a.LimitMMPerPrompt), `{"image":1,"video":0}`)
	want(t, "SpeculativeConfig", string(a.SpeculativeConfig), `{"method":"mtp","num_speculative_tokens":3}`)
	want(t, "Source(tensor-parallel-size)", a.Source("tensor-parallel-size"), "settings tensor_parallel_size")

	p := writeSettings(t, "s.json", `{"tensor-parallel-size": 4, "port": "9000", "enforce_eager": true,
		"compilation_config": {"cudagraph_mode": "FULL_DECODE_ONLY"}, "served-model-name": "one"}`)
	b := mustServe(t, "m", "--config="+p, "--port", "9100")
	want(t, "TP", b.TensorParallelSize, 4)
	want(t, "Port", b.Port, 9100)
	want(t, "EnforceEager", b.EnforceEager, true)
	want(t, "CompilationConfig", string(b.CompilationConfig), `{"cudagraph_mode":"FULL_DECODE_ONLY"}`)
	want(t, "ServedModelName", b.ServedModelName, []string{"one"})

	// A file without a known extension is sniffed.
	c := mustServe(t, "m", "--config", writeSettings(t, "settings", "max_num_seqs = 7\n"))
	want(t, "MaxNumSeqs", c.MaxNumSeqs, 7)
}

// TestSettingsErrors: unknown keys and bad values name the key.
func TestSettingsErrors(t *testing.T) {
	cases := []struct {
		name, body, want string
	}{
		{"s.json", `{"tensor_parallel_sise": 8}`, `unknown key "tensor_parallel_sise"`},
		{"s.json", `{"moe": {"num_expert": 288}}`, `unknown key "moe.num_expert"`},
		{"s.toml", "[moe]\nnum_experts = 288\nexpert_parallelism = 8\n", `unknown key "moe.expert_parallelism"`},
		{"s.toml", "[scheduler]\nmax_num_seqs = 8\n", `unknown key "scheduler"`},
		{"s.json", `{"moe": 8}`, `moe: want a table/object of settings`},
		{"s.json", `{"gpu_memory_utilization": 1.5}`, `gpu_memory_utilization (--gpu-memory-utilization): must be in (0, 1], got 1.5`},
		{"s.toml", "max_model_len = 1.5\n", `max_model_len (--max-model-len): want an integer`},
		{"s.json", `{"port": true}`, `port (--port): want a string or a number, got true`},
		{"s.json", `{"enforce_eager": "yes"}`, `enforce_eager (--enforce-eager): want true or false, got "yes"`},
		{"s.json", `{"served_model_name": [1]}`, `want a list of strings`},
		{"s.json", `{"speculative_config": "{bad"}`, `speculative_config (--speculative-config): invalid JSON`},
		{"s.json", `{"speculative_config": 3}`, `want an object (or a JSON string), got 3`},
		{"s.json", `{"config": "other.json"}`, `config: a settings file cannot name another settings file`},
		{"s.json", `{"attention_backend": "flashmla"}`, `attention_backend: npuserve runs glm5_next's hybrid KDA + DSA attention (hybrid_kda_dsa), got "flashmla"`},
		{"s.json", `{"moe": {"num_experts": "many"}}`, `moe.num_experts: want an integer, got "many"`},
		{"s.json", `{"moe": {"expert_parallel_size": 0}}`, `moe.expert_parallel_size: must be at least 1, got 0`},
		{"s.json", `{"speculative": {"mtp": true, "draft_tokens": 0}}`, `speculative.draft_tokens: must be in [1, 64], got 0`},
		{"s.json", `{"speculative": {"mtp": true}, "speculative_config": {"method": "mtp"}}`, `speculative.mtp and speculative_config both configure speculative decoding`},
		{"s.json", `{"attention": {"interleave_pattern": "LLLD"}}`, `attention.interleave_pattern: want a pattern like "3linear_1sparse"`},
		{"s.json", `{"epd": {"enabled": {"x": 1}}}`, `epd.enabled: want a value`},
		{"s.json", `[1, 2]`, `want a JSON object at the top level`},
		{"s.json", `{"port": 1} {"port": 2}`, `trailing data`},
		{"s.json", `{"port": 1}}`, `trailing data`},
		{"s.json", `{"port": `, `invalid JSON`},
		{"s.toml", "port = \n", `line 1 (last key "port"): expected value`},
		{"s.toml", "[a]\nx = 1\n[a]\ny = 2\n", `line 3: Key 'a' has already been defined`},
		{"s.yaml", "port: 8000\n", `YAML settings files are not supported`},
	}
	for _, tc := range cases {
		p := writeSettings(t, tc.name, tc.body)
		_, err := runServe(t, "m", "--config", p)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s %q: error %v, want it to name the file and contain %q", tc.name, tc.body, err, tc.want)
		}
	}
}

// TestTOML covers the TOML subset the settings files use.
func TestTOML(t *testing.T) {
	src := `# comment
title = "a \"quoted\" \u00e9 string" # trailing comment
literal = 'C:\path\x'
int = 1_000
neg = -17
hex = 0xff
float = 6.25e-2
inf = inf
yes = true
ml = """
line one \
   continued"""
mll = '''
raw\n'''
arr = [ 1, 2,
  3, # comment inside
]
nested = [[1, 2], ["a"]]
inline = { a = 1, b.c = "x" }
"quoted key" = 1
dotted.key = "v"

[table.sub]
x = 1
[table]
y = 2
`
	got, err := parseTOML(src)
	if err != nil {
		t.Fatal(err)
	}
	if !math.IsInf(got["inf"].(float64), 1) {
		t.Errorf("inf = %v", got["inf"])
	}
	delete(got, "inf")
	exp := map[string]any{
		"title": "a \"quoted\" é string", "literal": `C:\path\x`, "int": int64(1000), "neg": int64(-17),
		"hex": int64(255), "float": 0.0625, "yes": true, "ml": "line one continued", "mll": `raw\n`,
		"arr":        []any{int64(1), int64(2), int64(3)},
		"nested":     []any{[]any{int64(1), int64(2)}, []any{"a"}},
		"inline":     map[string]any{"a": int64(1), "b": map[string]any{"c": "x"}},
		"quoted key": int64(1), "dotted": map[string]any{"key": "v"},
		"table": map[string]any{"sub": map[string]any{"x": int64(1)}, "y": int64(2)},
	}
	if !reflect.DeepEqual(got, exp) {
		t.Errorf("parseTOML =\n%#v\nwant\n%#v", got, exp)
	}

	bad := []struct{ src, want string }{
		{"a = 1979-05-27\n", "dates and times are not supported"},
		{"[[servers]]\n", "arrays of tables"},
		{"a = 1\na = 2\n", `line 2 (last key "a"): Key 'a' has already been defined`},
		{"a = 1\na.b = 2\n", `line 2 (last key "a.b")`},
		{"a = \"open\n", "line 1 (last key \"a\"): strings cannot contain newlines"},
		{"a = hello\n", `expected value but found "hello"`},
		{"a = 012\n", "cannot have leading zeroes"},
		{"a = 1__0\n", "underscores must be surrounded by digits"},
		{"a = 1.\n", "Invalid float"},
		{"a = [1, 2\n", "array terminator"},
		{"a = {b = 1\n", "inline table"},
		{"a = 1 b = 2\n", "expected a top-level item to end with a newline"},
		{"= 1\n", "key name appears blank"},
		{"a 1\n", "expected '.' or '='"},
		{"a = \"\\q\"\n", `invalid escape in string '\q'`},
	}
	for _, tc := range bad {
		_, err := parseTOML(tc.src)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseTOML(%q): error %v, want %q", tc.src, err, tc.want)
		}
	}
}
