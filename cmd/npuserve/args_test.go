package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/engine/config"
)

// TestParseServeArgs: the parser's assignments and positional arguments
// for vLLM's spellings.
func TestParseServeArgs(t *testing.T) {
	type as = []config.Assignment
	cases := []struct {
		name       string
		args       []string
		want       as
		positional []string
		help       bool
	}{
		{"space and equals", []string{"m", "--port", "9000", "--host=127.0.0.1"},
			as{{Flag: "--port", Value: "9000"}, {Flag: "--host", Value: "127.0.0.1"}}, []string{"m"}, false},
		{"value with equals inside", []string{"--api-key=a=b", "m"}, as{{Flag: "--api-key", Value: "a=b"}}, []string{"m"}, false},
		{"value that looks like a flag", []string{"m", "--api-key", "--port"}, as{{Flag: "--api-key", Value: "--port"}}, []string{"m"}, false},
		{"bools", []string{"--enforce-eager", "--no-enable-prefix-caching", "--trust-remote-code=false", "m"},
			as{{Flag: "--enforce-eager", Bool: true}, {Flag: "--no-enable-prefix-caching", Bool: true}, {Flag: "--trust-remote-code", Bool: false}}, []string{"m"}, false},
		{"aliases", []string{"-tp", "4", "-dp=2", "-ep", "m"},
			as{{Flag: "-tp", Value: "4"}, {Flag: "-dp", Value: "2"}, {Flag: "-ep", Bool: true}}, []string{"m"}, false},
		{"underscores kept as written", []string{"m", "--max_model_len", "8k"}, as{{Flag: "--max_model_len", Value: "8k"}}, []string{"m"}, false},
		{"nargs+ stops at a flag", []string{"m", "--served-model-name", "a", "b", "--port", "1"},
			as{{Flag: "--served-model-name", List: []string{"a", "b"}}, {Flag: "--port", Value: "1"}}, []string{"m"}, false},
		{"nargs+ takes negative numbers", []string{"m", "--served-model-name", "a", "-1", "-.5"},
			as{{Flag: "--served-model-name", List: []string{"a", "-1", "-.5"}}}, []string{"m"}, false},
		{"nargs+ with equals takes one", []string{"--served-model-name=a", "m"}, as{{Flag: "--served-model-name", List: []string{"a"}}}, []string{"m"}, false},
		{"negative numbers are values", []string{"m", "--max-model-len", "-1"}, as{{Flag: "--max-model-len", Value: "-1"}}, []string{"m"}, false},
		{"a dash alone is positional", []string{"-"}, nil, []string{"-"}, false},
		{"double dash", []string{"--port", "5", "--", "m", "--port"}, as{{Flag: "--port", Value: "5"}}, []string{"m", "--port"}, false},
		{"help", []string{"m", "--port", "1", "--help", "--frobnicate"}, as{{Flag: "--port", Value: "1"}}, []string{"m"}, true},
		{"short help", []string{"-h"}, nil, nil, true},
		{"help after double dash is positional", []string{"--", "-h"}, nil, []string{"-h"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, positional, help, err := parseServeArgs(tc.args)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) || !reflect.DeepEqual(positional, tc.positional) || help != tc.help {
				t.Errorf("parseServeArgs(%q) = %+v, %q, help %v; want %+v, %q, help %v", tc.args, got, positional, help, tc.want, tc.positional, tc.help)
			}
		})
	}
}

// mustServeArgs is serveArgs that fails the test on error or help.
func mustServeArgs(t *testing.T, args ...string) *config.EngineArgs {
	t.Helper()
	a, help, err := serveArgs(args)
	if err != nil || help {
		t.Fatalf("serve %q: help %v, %v", args, help, err)
	}
	return a
}

func want[T any](t *testing.T, what string, got, exp T) {
	t.Helper()
	if !reflect.DeepEqual(got, exp) {
		t.Errorf("%s = %#v, want %#v", what, got, exp)
	}
}

// TestFlagForms covers the spellings vLLM accepts, through to EngineArgs.
func TestFlagForms(t *testing.T) {
	cases := []struct {
		name  string
		args  []string
		check func(t *testing.T, a *config.EngineArgs)
	}{
		{"space and equals", []string{"m", "--port", "9000", "--host=127.0.0.1"}, func(t *testing.T, a *config.EngineArgs) {
			want(t, "Port", a.Port, 9000)
			want(t, "Host", a.Host, "127.0.0.1")
		}},
		{"flags before the model", []string{"--port=9001", "--tensor-parallel-size", "2", "--enforce-eager", "m"}, func(t *testing.T, a *config.EngineArgs) {
			want(t, "Model", a.Model, "m")
			want(t, "Port", a.Port, 9001)
			want(t, "TP", a.TensorParallelSize, 2)
			want(t, "EnforceEager", a.EnforceEager, true)
		}},
		{"short aliases", []string{"-tp", "4", "-dp=2", "-ep", "-q", "fp8", "m"}, func(t *testing.T, a *config.EngineArgs) {
			want(t, "TP", a.TensorParallelSize, 4)
			want(t, "DP", a.DataParallelSize, 2)
			want(t, "EP", a.EnableExpertParallel, true)
			want(t, "Quantization", a.Quantization, "fp8")
		}},
		{"short aliases after the model", []string{"m", "-tp", "4", "-dpl", "1", "-dpa", "10.0.0.1"}, func(t *testing.T, a *config.EngineArgs) {
			want(t, "TP", a.TensorParallelSize, 4)
			want(t, "DPLocal", a.DataParallelSizeLocal, 1)
			want(t, "DPAddress", a.DataParallelAddress, "10.0.0.1")
		}},
		{"no-enable-prefix-caching", []string{"m", "--no-enable-prefix-caching"}, func(t *testing.T, a *config.EngineArgs) {
			want(t, "EnablePrefixCaching", a.EnablePrefixCaching, false)
			want(t, "Given", a.Given("enable-prefix-caching"), true)
		}},
		{"no- before the model", []string{"--enable-expert-parallel", "--no-enable-expert-parallel", "m"}, func(t *testing.T, a *config.EngineArgs) {
			want(t, "EP", a.EnableExpertParallel, false)
		}},
		{"later wins", []string{"m", "--enable-prefix-caching", "--no-enable-prefix-caching", "--port", "1", "--port", "2"}, func(t *testing.T, a *config.EngineArgs) {
			want(t, "EnablePrefixCaching", a.EnablePrefixCaching, false)
			want(t, "Port", a.Port, 2)
		}},
		{"bool with value", []string{"m", "--enforce-eager=false", "--trust-remote-code=true"}, func(t *testing.T, a *config.EngineArgs) {
			want(t, "EnforceEager", a.EnforceEager, false)
			want(t, "TrustRemoteCode", a.TrustRemoteCode, true)
		}},
		{"underscores", []string{"m", "--max_model_len", "128K", "--gpu_memory_utilization=0.5"}, func(t *testing.T, a *config.EngineArgs) {
			want(t, "MaxModelLen", a.MaxModelLen, 131072)
			want(t, "GPUMemoryUtilization", a.GPUMemoryUtilization, 0.5)
		}},
		{"served names nargs+", []string{"m", "--served-model-name", "glm", "glm-5.3-flash", "--port", "8001"}, func(t *testing.T, a *config.EngineArgs) {
			want(t, "ServedModelName", a.ServedModelName, []string{"glm", "glm-5.3-flash"})
			want(t, "Port", a.Port, 8001)
		}},
		{"served names nargs+ before the model", []string{"--served-model-name", "a", "b,c", "--port", "1", "m"}, func(t *testing.T, a *config.EngineArgs) {
			want(t, "ServedModelName", a.ServedModelName, []string{"a", "b,c"})
			want(t, "Model", a.Model, "m")
		}},
		{"served names repeated: the later wins", []string{"--served-model-name", "a", "--served-model-name", "b,c", "--", "m"}, func(t *testing.T, a *config.EngineArgs) {
			want(t, "ServedModelName", a.ServedModelName, []string{"b,c"})
			want(t, "Model", a.Model, "m")
		}},
		{"--model flag", []string{"--model", "/m", "--port", "1"}, func(t *testing.T, a *config.EngineArgs) {
			want(t, "Model", a.Model, "/m")
		}},
		{"double dash", []string{"--port", "5", "--", "m"}, func(t *testing.T, a *config.EngineArgs) {
			want(t, "Model", a.Model, "m")
			want(t, "Port", a.Port, 5)
		}},
		{"max-model-len -1", []string{"m", "--max-model-len", "-1"}, func(t *testing.T, a *config.EngineArgs) {
			want(t, "MaxModelLen", a.MaxModelLen, -1)
		}},
		{"--config file, flags override it", []string{"m", "--config", filepath.Join(configsDir, "settings", "settings.json"), "--max-model-len", "4k"}, func(t *testing.T, a *config.EngineArgs) {
			want(t, "Model", a.Model, "m")
			want(t, "MaxModelLen", a.MaxModelLen, 4000)
			want(t, "EnableExpertParallel", a.EnableExpertParallel, true)
			want(t, "Source(dtype)", strings.HasPrefix(a.Source("dtype"), "settings "), true)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, mustServeArgs(t, tc.args...))
		})
	}
}

// TestServeArgErrors: the parser's errors, and the builder's through it,
// name the flag as written.
func TestServeArgErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"m", "--served-model-name"}, "--served-model-name: expected at least one value"},
		{[]string{"m", "--served-model-name", "--port", "1"}, "--served-model-name: expected at least one value"},
		{[]string{"m", "--port"}, "--port: expected a value"},
		{[]string{"m", "--frobnicate"}, "unknown flag --frobnicate"},
		{[]string{"--frobnicate=1", "m"}, "unknown flag --frobnicate"},
		{[]string{"m", "--no-port"}, "unknown flag --no-port"},
		{[]string{"m", "--help=yes"}, "unknown flag --help"},
		{[]string{"m", "--enforce-eager=maybe"}, `--enforce-eager: want true or false, got "maybe"`},
		{[]string{"m", "--no-enforce-eager=maybe"}, `--no-enforce-eager: want true or false, got "maybe"`},
		{[]string{"--gpu-memory-utilization", "abc", "m"}, `--gpu-memory-utilization: want a number, got "abc"`},
		{[]string{"m", "-tp", "x"}, `-tp: want an integer, got "x"`},
		{[]string{"m", "--max_model_len", "0"}, "--max_model_len: must be positive (or -1/auto), got 0"},
		{[]string{"m", "extra"}, `unexpected argument "extra"`},
		{[]string{"m", "--", "--port"}, `unexpected argument "--port"`},
		{[]string{"--model", "a", "b"}, `unexpected argument "b": the model is already given by --model`},
		{[]string{"--port", "8000"}, "no model"},
		{[]string{"m", "--config", "/no/such/settings.json"}, "--config: open /no/such/settings.json"},
	}
	for _, tc := range cases {
		_, _, err := serveArgs(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("serve %q: error %v, want it to contain %q", tc.args, err, tc.want)
		}
	}
}

// TestServeHelp: `npuserve serve --help` (and -h, after MODEL too, and
// `npuserve help serve`) lists every engine flag with its aliases, --no-
// form and default, and exits 0.
func TestServeHelp(t *testing.T) {
	var b bytes.Buffer
	if err := writeEngineFlagsHelp(&b, "serve", serveUsage, serveArgsUsage); err != nil {
		t.Fatal(err)
	}
	checkHelp := func(t *testing.T, text string) {
		t.Helper()
		for _, f := range config.FlagTable() {
			names := []string{"\n   --" + f.Name}
			for _, al := range f.Aliases {
				names = append(names, ", -"+al)
			}
			if f.Negatable {
				names = append(names, ", --no-"+f.Name)
			}
			for _, n := range names {
				if !containsName(text, n) {
					t.Errorf("help lacks %s", strings.TrimLeft(n, "\n ,"))
				}
			}
			if !strings.Contains(text, f.Usage) {
				t.Errorf("help lacks the usage of --%s", f.Name)
			}
			if f.Default != "" && !strings.Contains(text, f.Usage+" (default: "+f.Default+")") {
				t.Errorf("help lacks the default of --%s", f.Name)
			}
		}
	}
	checkHelp(t, b.String())
	for _, args := range [][]string{{"serve", "--help"}, {"serve", "-h"}, {"serve", "/models/x", "--port", "1", "--help"}, {"help", "serve"}} {
		out, errOut, code := run(t, args...)
		if code != 0 {
			t.Errorf("%q: exit %d: %s", args, code, errOut)
			continue
		}
		if out != b.String() {
			t.Errorf("%q prints other help than writeEngineFlagsHelp:\n%s", args, out)
		}
	}
	if _, errOut, code := run(t, "serve", "/models/x", "--frobnicate"); code != 2 || !strings.Contains(errOut, "serve: unknown flag --frobnicate") {
		t.Errorf("serve --frobnicate: exit %d, %q; want 2 and the flag named", code, errOut)
	}
}

// containsName reports whether name occurs in text followed by a space or
// a comma (not as the prefix of a longer flag name).
func containsName(text, name string) bool {
	for i := 0; ; {
		j := strings.Index(text[i:], name)
		if j < 0 {
			return false
		}
		if end := i + j + len(name); end < len(text) && (text[end] == ' ' || text[end] == ',') {
			return true
		}
		i += j + 1
	}
}

// configsDir holds the launch scripts and settings skeletons.
var configsDir = filepath.Join("..", "..", "configs")

// scriptCommand runs argv (a launch script) with stand-ins for vllm,
// python and npuserve (on PATH, and as $NPUSERVE) that print their
// arguments, and returns the program's name and arguments as the shell
// passed them.
func scriptCommand(t *testing.T, argv []string, env ...string) []string {
	t.Helper()
	bin := t.TempDir()
	for _, prog := range []string{"vllm", "python", "npuserve"} {
		stub := fmt.Sprintf("#!/bin/sh\nprintf '%%s\\n' %s \"$@\"\n", prog)
		if err := os.WriteFile(filepath.Join(bin, prog), []byte(stub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "NPUSERVE="+filepath.Join(bin, "npuserve")), env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%q: %v", argv, err)
	}
	return strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
}

// seedScriptArgs runs a seed vLLM launch script (engine/config's
// testdata/serve, `source` made a no-op) and returns the arguments of its
// `vllm serve` or `python -m vllm.entrypoints.openai.api_server`: only
// the binary name changes.
func seedScriptArgs(t *testing.T, file string) []string {
	t.Helper()
	path := filepath.Join("..", "..", "engine", "config", "testdata", "serve", file)
	words := scriptCommand(t, []string{"bash", "-c", `source() { :; }; . "$1"`, "bash", path})
	switch {
	case len(words) >= 2 && words[0] == "vllm" && words[1] == "serve":
		return words[2:]
	case len(words) >= 3 && words[0] == "python" && words[1] == "-m":
		return words[3:]
	}
	t.Fatalf("%s runs %q, want vllm serve", file, words)
	return nil
}

// TestSeedScripts parses every vllm command of the seed launch scripts,
// only the binary name changed.
func TestSeedScripts(t *testing.T) {
	cases := []struct {
		file  string
		check func(t *testing.T, a *config.EngineArgs)
	}{
		{"950dt-tp8-mxfp8.sh", func(t *testing.T, a *config.EngineArgs) {
			want(t, "Model", a.Model, "Eco-Tech/GLM-5.3-Flash-w8a8-mxfp8")
			want(t, "Host", a.Host, "0.0.0.0")
			want(t, "Port", a.Port, 8000)
			want(t, "DP", a.DataParallelSize, 1)
			want(t, "TP", a.TensorParallelSize, 8)
			want(t, "EP", a.EnableExpertParallel, true)
			want(t, "Seed", a.Seed, int64(1024))
			want(t, "Quantization", a.Quantization, "ascend")
			want(t, "Device", a.Device, "ascend")
			want(t, "ServedModelName", a.ServedModelName, []string{"glm"})
			want(t, "MaxNumSeqs", a.MaxNumSeqs, 32)
			want(t, "MaxModelLen", a.MaxModelLen, 132096)
			want(t, "MaxNumBatchedTokens", a.MaxNumBatchedTokens, 8192)
			want(t, "TrustRemoteCode", a.TrustRemoteCode, true)
			want(t, "GPUMemoryUtilization", a.GPUMemoryUtilization, 0.9)
			want(t, "LimitMMPerPrompt", string(a.LimitMMPerPrompt), `{"image":1,"video":0}`)
			want(t, "CompilationConfig", string(a.CompilationConfig), `{"cudagraph_mode":"FULL_DECODE_ONLY","cudagraph_capture_sizes":[1,2,4,8,16,32,64,96,128]}`)
			want(t, "SpeculativeConfig", string(a.SpeculativeConfig), `{"num_speculative_tokens":3,"method":"deepseek_mtp","enforce_eager":true}`)
		}},
		{"a3-tp16.sh", func(t *testing.T, a *config.EngineArgs) {
			want(t, "Model", a.Model, "Eco-Tech/GLM-5.3-Flash-w8a8")
			want(t, "TP", a.TensorParallelSize, 16)
			want(t, "MaxModelLen", a.MaxModelLen, 133120)
			want(t, "SafetensorsLoadStrategy", a.SafetensorsLoadStrategy, "prefetch")
			want(t, "GPUMemoryUtilization", a.GPUMemoryUtilization, 0.85)
			want(t, "APIServerCount", a.APIServerCount, 1)
			want(t, "Source(api-server-count)", a.Source("api-server-count"), "flag")
		}},
		{"a2-dp2-tp8-node0.sh", func(t *testing.T, a *config.EngineArgs) {
			want(t, "Model", a.Model, "/path/to/GLM-5.3-Flash-w8a8")
			want(t, "DP", a.DataParallelSize, 2)
			want(t, "DPLocal", a.DataParallelSizeLocal, 1)
			want(t, "DPStart", a.DataParallelStartRank, 0)
			want(t, "DPAddress", a.DataParallelAddress, "xx.xx.xx.1")
			want(t, "DPRPCPort", a.DataParallelRPCPort, 12321)
			want(t, "TP", a.TensorParallelSize, 8)
			want(t, "Headless", a.Headless, false)
			want(t, "LimitMMPerPrompt", string(a.LimitMMPerPrompt), `{"image":1,"video":0}`)
		}},
		{"a2-dp2-tp8-node1.sh", func(t *testing.T, a *config.EngineArgs) {
			want(t, "Headless", a.Headless, true)
			want(t, "DPStart", a.DataParallelStartRank, 1)
			want(t, "DPAddress", a.DataParallelAddress, "xx.xx.xx.1")
			want(t, "APIServerCount given", a.Given("api-server-count"), false)
		}},
		{"blog-vllm-style.sh", func(t *testing.T, a *config.EngineArgs) {
			want(t, "Model", a.Model, "/models/GLM-5.3-Flash")
			want(t, "ServedModelName", a.ServedModelName, []string{"glm-5.3-flash"})
			want(t, "TP", a.TensorParallelSize, 8)
			want(t, "MaxModelLen", a.MaxModelLen, 1048576)
			want(t, "KVCacheDtype", a.KVCacheDtype, "auto")
		}},
		{"faq-tools.sh", func(t *testing.T, a *config.EngineArgs) {
			want(t, "ToolCallParser", a.ToolCallParser, "glm47")
			want(t, "ReasoningParser", a.ReasoningParser, "glm45")
			want(t, "EnableAutoToolChoice", a.EnableAutoToolChoice, true)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			tc.check(t, mustServeArgs(t, seedScriptArgs(t, tc.file)...))
		})
	}
}

// TestLaunchScripts: every launch script under configs passes flags
// npuserve accepts, with the layout its header promises.
func TestLaunchScripts(t *testing.T) {
	tests := []struct {
		script             string
		dp, tp, start      int
		ep, headless       bool
		device, address    string
		quantization       string
		maxModelLen, local int
	}{
		{"ascend/a2-node0.sh", 2, 8, 0, true, false, "ascend", "10.0.0.1", "ascend", 133120, 1},
		{"ascend/a2-node1.sh", 2, 8, 1, true, true, "ascend", "10.0.0.1", "ascend", 133120, 1},
		{"ascend/a3.sh", 1, 16, 0, true, false, "ascend", "", "ascend", 133120, -1},
		{"ascend/950dt.sh", 1, 8, 0, true, false, "ascend", "", "ascend", 132096, -1},
		{"cpu/a2-node0.sh", 2, 2, 0, true, false, "cpu", "10.0.0.1", "", 512, 1},
		{"cpu/a2-node1.sh", 2, 2, 1, true, true, "cpu", "10.0.0.1", "", 512, 1},
		{"cpu/a3.sh", 1, 4, 0, true, false, "cpu", "", "", 512, -1},
		{"cpu/950dt.sh", 1, 2, 0, true, false, "cpu", "", "", 512, -1},
	}
	for _, tc := range tests {
		t.Run(tc.script, func(t *testing.T) {
			words := scriptCommand(t, []string{filepath.Join(configsDir, tc.script)}, "LOCAL_IP=10.0.0.2", "NODE0_IP=10.0.0.1", "NIC_NAME=eth0")
			if len(words) < 2 || words[0] != "npuserve" || words[1] != "serve" {
				t.Fatalf("%s runs %q, want npuserve serve", tc.script, words)
			}
			a := mustServeArgs(t, words[2:]...)
			got := []any{a.DataParallelSize, a.TensorParallelSize, a.DataParallelStartRank, a.EnableExpertParallel, a.Headless,
				a.Device, a.DataParallelAddress, a.Quantization, a.MaxModelLen, a.DataParallelSizeLocal}
			want := []any{tc.dp, tc.tp, tc.start, tc.ep, tc.headless, tc.device, tc.address, tc.quantization, tc.maxModelLen, tc.local}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("[dp tp start ep headless device address quantization max-model-len local] = %v, want %v", got, want)
			}
		})
	}
}

// FuzzParseServeArgs feeds arbitrary command lines (one argument a line)
// to the parser. It must never panic; every assignment it returns names a
// flag config.LookupFlag knows, with a value of its kind; written back in
// canonical form (--flag=value, --flag=true, --flag v1 v2 ..., then --
// and the positional arguments) the assignments parse to themselves; and
// config.Build takes them without panicking.
func FuzzParseServeArgs(f *testing.F) {
	for _, s := range []string{
		"m\n--port\n9000\n--host=127.0.0.1",
		"-tp\n4\n-dp=2\n-ep\n-q\nfp8\nm",
		"m\n--served-model-name\na\nb\n-1\n--no-enable-prefix-caching",
		"--served-model-name=a\n--max_model_len\n-1\n--\nm\n--port",
		"m\n--enforce-eager=false\n--trust-remote-code=maybe",
		"--limit-mm-per-prompt\n{\"image\": 1}\nm\n--help",
		"m\n--port",
		"-\n--\n-h",
		"--frobnicate=1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		args := strings.Split(s, "\n")
		as, positional, help, err := parseServeArgs(args)
		if err != nil {
			if as != nil || positional != nil || help {
				t.Fatalf("results with an error: %v", err)
			}
			return
		}
		var canon []string
		for _, a := range as {
			info, _, ok := config.LookupFlag(a.Flag)
			if !ok || !looksLikeFlag(a.Flag) {
				t.Fatalf("assignment of an unknown flag %q", a.Flag)
			}
			switch info.Kind {
			case config.FlagBool:
				if a.Value != "" || a.List != nil {
					t.Fatalf("bool %s with a value: %+v", a.Flag, a)
				}
				canon = append(canon, fmt.Sprintf("%s=%v", a.Flag, a.Bool))
			case config.FlagList:
				if len(a.List) == 0 || a.Value != "" {
					t.Fatalf("list %s without values: %+v", a.Flag, a)
				}
				if len(a.List) == 1 {
					canon = append(canon, a.Flag+"="+a.List[0])
				} else {
					canon = append(append(canon, a.Flag), a.List...)
				}
			default:
				if a.List != nil || a.Bool {
					t.Fatalf("value flag %s with a list or bool: %+v", a.Flag, a)
				}
				canon = append(canon, a.Flag+"="+a.Value)
			}
		}
		canon = append(append(canon, "--"), positional...)
		as2, positional2, help2, err := parseServeArgs(canon)
		if err != nil || help2 || !reflect.DeepEqual(as, as2) || !slicesEqual(positional, positional2) {
			t.Fatalf("%q parses to %+v %q; written back as %q it parses to %+v %q, %v, help %v", args, as, positional, canon, as2, positional2, err, help2)
		}
		if !help {
			if a, err := config.Build(as, positional); (a == nil) == (err == nil) {
				t.Fatalf("Build = %v, %v", a, err)
			}
		}
	})
}

// slicesEqual compares string slices, nil and empty alike.
func slicesEqual(a, b []string) bool {
	return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b))
}
