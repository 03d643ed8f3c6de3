package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServerFlags covers the OpenAI-server flags vLLM users pass through to
// the HTTP layer.
func TestServerFlags(t *testing.T) {
	a, err := runServe(t, "model", "--max-logprobs", "5", "--trust-request-chat-template",
		"--enable-prompt-tokens-details", "--enable-force-include-usage", "--return-tokens-as-token-ids")
	if err != nil {
		t.Fatal(err)
	}
	if a.MaxLogprobs != 5 || !a.TrustRequestChatTemplate || !a.EnablePromptTokensDetails ||
		!a.EnableForceIncludeUsage || !a.ReturnTokensAsTokenIDs || !a.Given("max-logprobs") {
		t.Fatalf("flags not applied: %+v", a)
	}
	reasons := map[string]string{}
	for _, x := range a.WithoutEffect("cpu") {
		reasons[x.Flag] = x.Reason
	}
	if r := reasons["--enable-prompt-tokens-details"]; !strings.Contains(r, "prefix caching is not implemented") {
		t.Errorf("--enable-prompt-tokens-details reason %q, want it to say prefix caching is not implemented", r)
	}
	if _, err := runServe(t, "model", "--max-logprobs", "x"); err == nil {
		t.Fatal("--max-logprobs x accepted")
	}
}

// TestHTTPLimitFlags covers the flags of issue 12: vLLM's CORS and h11
// flags, uvicorn's --timeout-keep-alive and --limit-concurrency, vLLM's
// --max-num-queued-reqs and npuserve's own read/write timeouts and size
// caps: defaults, values, bad values, the settings file, and that a
// headless node lists them as without effect.
func TestHTTPLimitFlags(t *testing.T) {
	d, err := runServe(t, "model")
	if err != nil {
		t.Fatal(err)
	}
	if d.AllowedOrigins != nil || d.AllowCredentials || d.TimeoutKeepAlive != 5 || d.TimeoutRead != 60 || d.TimeoutWrite != 60 ||
		d.LimitConcurrency != 4096 || d.MaxRequestBodyBytes != 64<<20 || d.MaxPromptChars != 0 || d.MaxNumQueuedReqs != -1 ||
		d.H11MaxIncompleteEventSize != 4194304 || d.H11MaxHeaderCount != 256 {
		t.Errorf("defaults %+v", d)
	}
	a, err := runServe(t, "model", "--allowed-origins", `["https://a.example", "https://b.example"]`, "--allowed-methods", `["GET","POST"]`,
		"--allowed-headers", `["Authorization"]`, "--allow-credentials", "--timeout-keep-alive", "2.5", "--timeout-read", "10",
		"--timeout-write", "7", "--limit-concurrency", "300", "--max-request-body-bytes", "1M", "--max-prompt-chars", "20k",
		"--max-num-queued-reqs", "8", "--h11-max-incomplete-event-size", "65536", "--h11-max-header-count", "32")
	if err != nil {
		t.Fatal(err)
	}
	if len(a.AllowedOrigins) != 2 || a.AllowedOrigins[1] != "https://b.example" || len(a.AllowedMethods) != 2 || a.AllowedHeaders[0] != "Authorization" ||
		!a.AllowCredentials || a.TimeoutKeepAlive != 2.5 || a.TimeoutRead != 10 || a.TimeoutWrite != 7 || a.LimitConcurrency != 300 ||
		a.MaxRequestBodyBytes != 1<<20 || a.MaxPromptChars != 20000 || a.MaxNumQueuedReqs != 8 || a.H11MaxIncompleteEventSize != 65536 ||
		a.H11MaxHeaderCount != 32 {
		t.Errorf("flags not applied: %+v", a)
	}
	if a, err := runServe(t, "model", "--max-num-queued-reqs", "None", "--max-prompt-chars", "auto"); err != nil || a.MaxNumQueuedReqs != -1 || a.MaxPromptChars != 0 {
		t.Errorf("None/auto: %v %+v", err, a)
	}
	for _, bad := range [][]string{
		{"--allowed-origins", "*"}, {"--allowed-methods", `"GET"`}, {"--timeout-keep-alive", "0"}, {"--timeout-read", "-1"},
		{"--timeout-write", "soon"}, {"--limit-concurrency", "0"}, {"--max-request-body-bytes", "10"}, {"--max-prompt-chars", "-5"},
		{"--max-num-queued-reqs", "-2"}, {"--h11-max-header-count", "0"},
	} {
		if _, err := runServe(t, append([]string{"model"}, bad...)...); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%q: error %v, want one naming the flag", bad, err)
		}
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "s.json")
	if err := os.WriteFile(cfg, []byte(`{"allowed_origins": ["https://c.example"], "limit_concurrency": 99, "timeout_keep_alive": 3}`), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := runServe(t, "model", "--config", cfg)
	if err != nil || len(s.AllowedOrigins) != 1 || s.AllowedOrigins[0] != "https://c.example" || s.LimitConcurrency != 99 || s.TimeoutKeepAlive != 3 {
		t.Errorf("settings file: %v %+v", err, s)
	}
	h, err := runServe(t, "model", "--headless", "--data-parallel-size", "2", "--data-parallel-start-rank", "1",
		"--data-parallel-address", "10.0.0.1", "--limit-concurrency", "10", "--allowed-origins", `["x"]`)
	if err != nil {
		t.Fatal(err)
	}
	got := withoutEffectFlags(h, "cpu")
	if strings.Join(got, " ") != "--allowed-origins --limit-concurrency" {
		t.Errorf("headless AcceptedWithoutEffect = %q", got)
	}
	if got := withoutEffectFlags(a, "cpu"); len(got) != 0 {
		t.Errorf("the HTTP limits have an effect on a head: %q", got)
	}
	k, _ := runServe(t, "model", "--skip-tokenizer-init", "--max-prompt-chars", "100")
	if got := withoutEffectFlags(k, "cpu"); strings.Join(got, " ") != "--max-prompt-chars" {
		t.Errorf("--skip-tokenizer-init AcceptedWithoutEffect = %q", got)
	}
}

// withoutEffectFlags lists the flags WithoutEffect reports, in order.
func withoutEffectFlags(a *EngineArgs, backend string) []string {
	var out []string
	for _, x := range a.WithoutEffect(backend) {
		out = append(out, x.Flag)
	}
	return out
}

// TestBuild covers the data-level builder every command line parser goes
// through: flags as written (aliases, underscores, --no-NAME, =false),
// later assignments winning, the positional MODEL, and errors that name
// the flag as written.
func TestBuild(t *testing.T) {
	cases := []struct {
		name       string
		as         []Assignment
		positional []string
		check      func(a *EngineArgs) bool
		wantErr    string
	}{
		{"alias", []Assignment{{Flag: "-tp", Value: "4"}}, []string{"m"},
			func(a *EngineArgs) bool {
				return a.TensorParallelSize == 4 && a.Given("tensor-parallel-size") && a.Model == "m"
			}, ""},
		{"underscores", []Assignment{{Flag: "--max_model_len", Value: "2k"}}, []string{"m"},
			func(a *EngineArgs) bool { return a.MaxModelLen == 2000 }, ""},
		{"later wins", []Assignment{{Flag: "--port", Value: "1"}, {Flag: "--port", Value: "2"}}, []string{"m"},
			func(a *EngineArgs) bool { return a.Port == 2 }, ""},
		{"negated", []Assignment{{Flag: "--enforce-eager", Bool: true}, {Flag: "--no-enforce-eager", Bool: true}}, []string{"m"},
			func(a *EngineArgs) bool { return !a.EnforceEager && a.Given("enforce-eager") }, ""},
		{"negated false", []Assignment{{Flag: "--no-enable-chunked-prefill", Bool: false}}, []string{"m"},
			func(a *EngineArgs) bool { return a.EnableChunkedPrefill }, ""},
		{"list", []Assignment{{Flag: "--served-model-name", List: []string{"a", "b"}}}, []string{"m"},
			func(a *EngineArgs) bool { return strings.Join(a.ServedModelNames(), ",") == "a,b" }, ""},
		{"model flag", []Assignment{{Flag: "--model", Value: "x"}}, nil,
			func(a *EngineArgs) bool { return a.Model == "x" }, ""},
		{"unknown", []Assignment{{Flag: "--no-such-flag", Value: "1"}}, []string{"m"}, nil, "unknown flag --no-such-flag"},
		{"not negatable", []Assignment{{Flag: "--no-port", Bool: true}}, []string{"m"}, nil, "unknown flag --no-port"},
		{"bad value", []Assignment{{Flag: "-tp", Value: "zero"}}, []string{"m"}, nil, "-tp: "},
		{"two models", nil, []string{"m", "n"}, nil, `unexpected argument "n"`},
	}
	for _, tc := range cases {
		a, err := Build(tc.as, tc.positional)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case !tc.check(a):
			t.Errorf("%s: flags not applied: %+v", tc.name, a)
		}
	}
}

// TestFlagTable: the metadata lists every flag once, with its kind, and
// LookupFlag finds each by every name it can be written with.
func TestFlagTable(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range FlagTable() {
		if seen[f.Name] || f.Usage == "" {
			t.Errorf("flag %q listed twice or without usage", f.Name)
		}
		seen[f.Name] = true
		names := []string{"--" + f.Name, "--" + strings.ReplaceAll(f.Name, "-", "_")}
		for _, al := range f.Aliases {
			names = append(names, "-"+al)
		}
		for _, n := range names {
			if got, neg, ok := LookupFlag(n); !ok || neg || got.Name != f.Name {
				t.Errorf("LookupFlag(%q) = %q, %v, %v", n, got.Name, neg, ok)
			}
		}
		if got, neg, ok := LookupFlag("--no-" + f.Name); ok != f.Negatable || (ok && (!neg || got.Name != f.Name)) {
			t.Errorf("LookupFlag(--no-%s) = %q, %v, %v; negatable %v", f.Name, got.Name, neg, ok, f.Negatable)
		}
		if f.Negatable && f.Kind != FlagBool {
			t.Errorf("--%s is negatable but not a bool flag", f.Name)
		}
	}
	for _, n := range []string{"model", "port", "tensor-parallel-size", "served-model-name", "enforce-eager"} {
		if !seen[n] {
			t.Errorf("--%s missing from FlagTable", n)
		}
	}
	if _, _, ok := LookupFlag("--nope"); ok {
		t.Error("LookupFlag(--nope) found a flag")
	}
}
