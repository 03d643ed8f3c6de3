package config

import (
	"bufio"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// runServe builds EngineArgs from `serve`-style words through Build, the
// way every command line reaches engine/config. The words are a test
// shorthand, not a command line parser (that is cmd/npuserve's, tested
// there with vLLM's rules): a word starting with "-" is a flag as
// written; a bool flag takes no value or =true/=false; a value or list
// flag takes =VALUE or the next word (a list flag one word: repeat it, or
// call Build); other words are positional.
func runServe(t *testing.T, words ...string) (*EngineArgs, error) {
	t.Helper()
	var as []Assignment
	var positional []string
	for i := 0; i < len(words); i++ {
		w := words[i]
		if len(w) < 2 || w[0] != '-' {
			positional = append(positional, w)
			continue
		}
		name, value, hasValue := strings.Cut(w, "=")
		x := Assignment{Flag: name}
		info, _, ok := LookupFlag(name)
		switch {
		case !ok: // Build reports it
		case info.Kind == FlagBool:
			x.Bool = true
			if hasValue {
				b, err := strconv.ParseBool(value)
				if err != nil {
					t.Fatalf("test words: %s wants =true or =false", w)
				}
				x.Bool = b
			}
		default:
			if !hasValue {
				if i+1 == len(words) {
					t.Fatalf("test words: %s has no value", w)
				}
				i++
				value = words[i]
			}
			x.Value = value
			if info.Kind == FlagList {
				x.Value, x.List = "", []string{value}
			}
		}
		as = append(as, x)
	}
	return Build(as, positional)
}

// mustServe is runServe that fails the test on error.
func mustServe(t *testing.T, words ...string) *EngineArgs {
	t.Helper()
	a, err := runServe(t, words...)
	if err != nil {
		t.Fatalf("serve %q: %v", words, err)
	}
	return a
}

var assignRE = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)="([^"]*)"$`)

// scriptArgs extracts the `vllm serve ...` (or `python -m
// vllm.entrypoints.openai.api_server ...`) command from a launch script,
// joins its continuation lines and splits it like sh (single quotes,
// double quotes, $name from the script's NAME="value" lines). It returns
// the arguments after the program: only the binary name changes.
func scriptArgs(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	vars := map[string]string{}
	var cmd []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if m := assignRE.FindStringSubmatch(strings.TrimSpace(line)); m != nil && !in {
			vars[m[1]] = m[2]
			continue
		}
		trimmed := strings.TrimSpace(line)
		if !in && (strings.HasPrefix(trimmed, "vllm serve") || strings.HasPrefix(trimmed, "python -m vllm")) {
			in = true
		}
		if !in {
			continue
		}
		cont := strings.HasSuffix(strings.TrimRight(line, " "), `\`)
		cmd = append(cmd, strings.TrimSuffix(strings.TrimRight(line, " "), `\`))
		if !cont {
			break
		}
	}
	if len(cmd) == 0 {
		t.Fatalf("%s: no vllm command", path)
	}
	words := shellSplit(t, strings.Join(cmd, " "), vars)
	switch {
	case len(words) >= 2 && words[0] == "vllm" && words[1] == "serve":
		return words[2:]
	case len(words) >= 3 && words[0] == "python" && words[1] == "-m":
		return words[3:]
	}
	t.Fatalf("%s: unexpected command %q", path, words)
	return nil
}

// shellSplit splits s into words like sh does for the launch scripts.
func shellSplit(t *testing.T, s string, vars map[string]string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	inWord := false
	expand := func(i int) int { // s[i] == '$'
		j := i + 1
		for j < len(s) && (s[j] == '_' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= '0' && s[j] <= '9') {
			j++
		}
		v, ok := vars[s[i+1:j]]
		if !ok {
			t.Fatalf("undefined shell variable $%s", s[i+1:j])
		}
		cur.WriteString(v)
		return j
	}
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
			i++
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				t.Fatalf("unterminated ' in %q", s)
			}
			cur.WriteString(s[i+1 : i+1+j])
			inWord, i = true, i+j+2
		case c == '"':
			i++
			for i < len(s) && s[i] != '"' {
				if s[i] == '$' {
					i = expand(i)
					continue
				}
				cur.WriteByte(s[i])
				i++
			}
			inWord, i = true, i+1
		case c == '$':
			inWord, i = true, expand(i)
		default:
			cur.WriteByte(c)
			inWord = true
			i++
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

func want[T any](t *testing.T, what string, got, exp T) {
	t.Helper()
	if !reflect.DeepEqual(got, exp) {
		t.Errorf("%s = %#v, want %#v", what, got, exp)
	}
}

// TestFlagValues: defaults, values that imply others and values stored
// normalized. (The spellings vLLM accepts are cmd/npuserve's parser's,
// tested there.)
func TestFlagValues(t *testing.T) {
	cases := []struct {
		name  string
		args  []string
		check func(t *testing.T, a *EngineArgs)
	}{
		{"served name default", []string{"/models/x"}, func(t *testing.T, a *EngineArgs) {
			want(t, "ServedModelNames", a.ServedModelNames(), []string{"/models/x"})
		}},
		{"--model flag", []string{"--model", "/m", "--port", "1"}, func(t *testing.T, a *EngineArgs) {
			want(t, "Model", a.Model, "/m")
		}},
		{"device from preset", []string{"m", "--device-memory", "atlas-800-a3"}, func(t *testing.T, a *EngineArgs) {
			want(t, "Device", a.Device, "ascend")
			want(t, "DeviceMemory", a.DeviceMemory, int64(64<<30))
		}},
		{"defaults", []string{"m"}, func(t *testing.T, a *EngineArgs) {
			want(t, "Port", a.Port, 8000)
			want(t, "Device", a.Device, "cpu")
			want(t, "GPUMemoryUtilization", a.GPUMemoryUtilization, 0.9)
			want(t, "DataParallelRPCPort", a.DataParallelRPCPort, 29550)
			want(t, "GenerationConfig", a.GenerationConfig, "auto")
			want(t, "Source(port)", a.Source("port"), "default")
			want(t, "AcceptedWithoutEffect", len(a.WithoutEffect("cpu")), 0)
		}},
		{"json flags compacted", []string{"m", "--additional-config", `{ "enable_dsa_cp" : true }`, "--hf-overrides={}"}, func(t *testing.T, a *EngineArgs) {
			want(t, "AdditionalConfig", string(a.AdditionalConfig), `{"enable_dsa_cp":true}`)
			want(t, "HFOverrides", string(a.HFOverrides), `{}`)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, mustServe(t, tc.args...))
		})
	}
}

// TestHumanInt follows vLLM's human_readable_int(_or_auto) for
// --max-model-len and --max-num-batched-tokens.
func TestHumanInt(t *testing.T) {
	cases := []struct {
		in   string
		want int
		err  string
	}{
		{"133120", 133120, ""},
		{"1k", 1000, ""},
		{"1K", 1024, ""},
		{"128k", 128000, ""},
		{"128K", 131072, ""},
		{"25.6k", 25600, ""},
		{"1m", 1000000, ""},
		{"1M", 1048576, ""},
		{"1.5K", 0, "decimals are not allowed with binary suffixes"},
		{"1x", 0, "want an integer"},
		{"", 0, "want an integer"},
	}
	for _, tc := range cases {
		got, err := humanInt(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("humanInt(%q) = %d, %v; want error %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("humanInt(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for in, exp := range map[string]int{"1M": 1048576, "auto": -1, "AUTO": -1, "-1": -1, "128k": 128000} {
		a := mustServe(t, "m", "--max-model-len", in)
		want(t, "--max-model-len "+in, a.MaxModelLen, exp)
	}
	a := mustServe(t, "m", "--max-num-batched-tokens", "16K")
	want(t, "MaxNumBatchedTokens", a.MaxNumBatchedTokens, 16384)
}

// TestDeviceMemory checks byte sizes and presets.
func TestDeviceMemory(t *testing.T) {
	cases := []struct {
		in   string
		want int64
		name string
		err  string
	}{
		{"64GiB", 64 << 30, "", ""},
		{"64Gi", 64 << 30, "", ""},
		{"64G", 64 << 30, "", ""},
		{"64GB", 64e9, "", ""},
		{"65536MiB", 64 << 30, "", ""},
		{"1.5GiB", 3 << 29, "", ""},
		{"68719476736", 64 << 30, "", ""},
		{"atlas-800-a2", 64 << 30, "atlas-800-a2", ""},
		{"Atlas-800-A3", 64 << 30, "atlas-800-a3", ""},
		{"950dt", 96 << 30, "950dt", ""},
		{"64 parsecs", 0, "", "unknown unit"},
		{"0", 0, "", "must be between"},
		{"lots", 0, "", "want a byte size"},
	}
	for _, tc := range cases {
		n, name, err := ParseDeviceMemory(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseDeviceMemory(%q) = %d, %v; want error %q", tc.in, n, err, tc.err)
			}
			continue
		}
		if err != nil || n != tc.want || name != tc.name {
			t.Errorf("ParseDeviceMemory(%q) = %d, %q, %v; want %d, %q", tc.in, n, name, err, tc.want, tc.name)
		}
	}
}

// TestArgValidationErrors: bad values fail with the flag and the value
// named (the parser's own errors are tested in cmd/npuserve).
func TestArgValidationErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"m", "--gpu-memory-utilization", "1.5"}, "--gpu-memory-utilization: must be in (0, 1], got 1.5"},
		{[]string{"m", "--gpu-memory-utilization=0"}, "--gpu-memory-utilization: must be in (0, 1], got 0"},
		{[]string{"--gpu-memory-utilization", "abc", "m"}, `--gpu-memory-utilization: want a number, got "abc"`},
		{[]string{"m", "--port", "70000"}, "--port: must be in [0, 65535], got 70000"},
		{[]string{"m", "--tensor-parallel-size", "0"}, "--tensor-parallel-size: must be in [1, 4096], got 0"},
		{[]string{"m", "-tp", "x"}, `-tp: want an integer, got "x"`},
		{[]string{"m", "--data-parallel-rpc-port", "0"}, "--data-parallel-rpc-port: must be in [1, 65535], got 0"},
		{[]string{"m", "--max-model-len", "0"}, "--max-model-len: must be positive (or -1/auto), got 0"},
		{[]string{"m", "--max-model-len", "1.5M"}, "--max-model-len: decimals are not allowed"},
		{[]string{"m", "--max-num-seqs", "0"}, "--max-num-seqs: must be in [1, 1048576], got 0"},
		{[]string{"m", "--seed", "-1"}, "--seed: must not be negative, got -1"},
		{[]string{"m", "--block-size", "-16"}, "--block-size: must be in [1, 65536], got -16"},
		{[]string{"m", "--threads", "-1"}, "--threads: must be in [0, 65536], got -1"},
		{[]string{"m", "--speculative-config", `{"method": "mtp",`}, "--speculative-config: invalid JSON"},
		{[]string{"m", "--speculative-config", `[1]`}, "--speculative-config: want a JSON object"},
		{[]string{"m", "--speculative-config", `{"method": "mtp", "num_speculative_tokens": 0}`}, "--speculative-config: num_speculative_tokens: must be in [1, 5], got 0"},
		{[]string{"m", "--speculative-config", `{"method": "mtp", "num_speculative_tokens": 6}`}, "--speculative-config: num_speculative_tokens: must be in [1, 5], got 6"},
		{[]string{"m", "--speculative-config", `{"method": "mtp"}`}, "--speculative-config: num_speculative_tokens: required"},
		{[]string{"m", "--speculative-config", `{"num_speculative_tokens": 3}`}, "--speculative-config: method: required (mtp or deepseek_mtp)"},
		{[]string{"m", "--speculative-config", `{"method": "ngram", "num_speculative_tokens": 3}`}, `--speculative-config: method: "ngram" is not supported; npuserve runs the model's MTP layer (method mtp or deepseek_mtp)`},
		{[]string{"m", "--compilation-config", `{"cudagraph_mode": "SOMETIMES"}`}, `--compilation-config: cudagraph_mode: must be one of NONE`},
		{[]string{"m", "--compilation-config", `{"cudagraph_capture_sizes": [0]}`}, `--compilation-config: cudagraph_capture_sizes: want positive integers, got 0`},
		{[]string{"m", "--limit-mm-per-prompt", `{"audio": 1}`}, `--limit-mm-per-prompt: modality "audio": glm5_next takes image and video inputs`},
		{[]string{"m", "--limit-mm-per-prompt", `{"image": -1}`}, `--limit-mm-per-prompt: image: want a non-negative integer, got -1`},
		{[]string{"m", "--limit-mm-per-prompt", `{image: 1}`}, `--limit-mm-per-prompt: invalid JSON`},
		{[]string{"m", "--additional-config", `not json`}, `--additional-config: invalid JSON`},
		{[]string{"m", "--quantization", "awq"}, `--quantization: must be one of ascend, fp8`},
		{[]string{"m", "--dtype", "int4"}, `--dtype: must be one of auto`},
		{[]string{"m", "--kv-cache-dtype", "int4"}, `--kv-cache-dtype: must be one of auto`},
		{[]string{"m", "--load-format", "gguf"}, `--load-format: must be one of auto, safetensors, dummy; got "gguf"`},
		{[]string{"m", "--reasoning-parser", "deepseek_r1"}, `--reasoning-parser: must be one of glm45, glm47; got "deepseek_r1"`},
		{[]string{"m", "--device", "tpu"}, `--device: must be one of auto, cpu, cpu-async, cuda, ascend; got "tpu"`},
		{[]string{"m", "--device-memory", "lots"}, `--device-memory: want a byte size`},
		{[]string{"m", "--frobnicate"}, "unknown flag --frobnicate"},
		{[]string{"m", "--no-port"}, "unknown flag --no-port"},
		{[]string{"m", "extra"}, `unexpected argument "extra"`},
		{[]string{"--model", "a", "b"}, `unexpected argument "b": the model is already given by --model`},
		{[]string{"--port", "8000"}, "no model"},
		{[]string{"m", "-dp", "2", "-dpr", "2"}, "--data-parallel-start-rank: must be below --data-parallel-size (2), got 2"},
		{[]string{"m", "-dp", "2", "-dpr", "1", "-dpl", "2"}, "--data-parallel-size-local: 2 ranks from --data-parallel-start-rank 1 exceed --data-parallel-size 2"},
		{[]string{"m", "-dp", "2", "-dpr", "1", "--headless"}, "--headless: needs --data-parallel-address"},
		{[]string{"m", "-dp", "2", "-dpr", "1", "--headless", "-dpa", "h", "--api-server-count", "1"}, "--api-server-count: cannot be used with --headless"},
		{[]string{"m", "-dp", "2", "-dpr", "1", "--headless", "-dpa", "h", "-dpl", "0"}, "--data-parallel-size-local: must be > 0 with --headless, got 0"},
		{[]string{"m", "--enable-auto-tool-choice"}, "--enable-auto-tool-choice: needs --tool-call-parser"},
		{[]string{"m", "--max-num-seqs", "64", "--max-num-batched-tokens", "32"}, "--max-num-batched-tokens: must be at least --max-num-seqs (64), got 32"},
		{[]string{"m", "--device", "cpu", "--device-memory", "950dt"}, "--device-memory: 950dt is an Ascend device but --device is cpu"},
		{[]string{"m", "--config", "testdata/settings/missing.json"}, "--config: open testdata/settings/missing.json"},
	}
	for _, tc := range cases {
		_, err := runServe(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("serve %q: error %v, want it to contain %q", tc.args, err, tc.want)
		}
	}
}

// TestAcceptedWithoutEffect: the seed flags that do nothing yet are
// listed, the ones that work are not.
func TestAcceptedWithoutEffect(t *testing.T) {
	a := mustServe(t, scriptArgs(t, filepath.Join("testdata", "serve", "a3-tp16.sh"))...)
	var got []string
	for _, x := range a.WithoutEffect("ascend") {
		got = append(got, x.Flag)
	}
	// --compilation-config has an effect on ascend (decode graphs).
	exp := []string{"--trust-remote-code", "--safetensors-load-strategy", "--speculative-config", "--limit-mm-per-prompt"}
	if !reflect.DeepEqual(got, exp) {
		t.Errorf("WithoutEffect flags = %q, want %q", got, exp)
	}
	b := mustServe(t, "m", "--kv-cache-dtype", "fp8", "--enable-prefix-caching", "--enforce-eager", "--threads", "4",
		"--additional-config", `{"ascend_compilation_config": {}}`, "--api-server-count", "4", "--no-enable-chunked-prefill")
	reasons := map[string]string{}
	for _, x := range b.WithoutEffect("ascend") {
		reasons[x.Flag] = x.Reason
	}
	for _, f := range []string{"--kv-cache-dtype", "--enable-prefix-caching", "--threads", "--additional-config", "--api-server-count", "--enable-chunked-prefill"} {
		if reasons[f] == "" {
			t.Errorf("%s missing from WithoutEffect(ascend): %v", f, reasons)
		}
	}
	if r := reasons["--enforce-eager"]; r != "" {
		t.Errorf("--enforce-eager listed without effect on ascend (it captures decode graphs): %s", r)
	}
	if !strings.Contains(reasons["--kv-cache-dtype"], "bfloat16") {
		t.Errorf("kv-cache-dtype reason %q does not name the ascend cache dtype", reasons["--kv-cache-dtype"])
	}
	for _, x := range b.WithoutEffect("cpu") {
		if x.Flag == "--threads" {
			t.Error("--threads has an effect on the cpu backend")
		}
	}
	c := mustServe(t, "m", "--no-enable-prefix-caching", "--no-trust-remote-code", "--seed", "7", "--block-size", "64")
	if got := c.WithoutEffect("cpu"); len(got) != 0 {
		t.Errorf("AcceptedWithoutEffect = %q, want none", got)
	}
}
