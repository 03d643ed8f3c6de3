package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/npuserve/npuserve/npu/opcheck"
)

// TestSelftestTable: on the cpu backends the whole table passes, the
// generation matches, the exit code is 0 and the last line is the PASS
// summary with the table's op and case counts.
func TestSelftestTable(t *testing.T) {
	ops := map[string]bool{}
	for _, c := range opcheck.Cases() {
		ops[c.Op] = true
	}
	for _, device := range []string{"cpu", "cpu-async"} {
		t.Run(device, func(t *testing.T) {
			stdout, stderr, code := run(t, "selftest", "--device", device, "--threads", "2", "--reps", "1", "--max-tokens", "6")
			if code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			for _, want := range []string{"device: " + device, "cpu_model:", "simd:", "OP  ", "MAX REL ERR", "match"} {
				if !strings.Contains(stdout, want) {
					t.Errorf("stdout has no %q:\n%s", want, stdout)
				}
			}
			for _, c := range opcheck.Cases() {
				row := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(c.Op) + ` +` + regexp.QuoteMeta(c.Name) + ` +\S+ +\S+ +\S+ +[0-9.]+ ms +PASS$`)
				if !row.MatchString(stdout) {
					t.Errorf("no PASS row for %s", c.Key())
				}
			}
			lines := strings.Split(strings.TrimSpace(stdout), "\n")
			want := "selftest: PASS (" + itoa(len(ops)) + " ops, " + itoa(len(opcheck.Cases())) + " cases)"
			if last := lines[len(lines)-1]; last != want {
				t.Errorf("last line %q, want %q", last, want)
			}
		})
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestSelftestJSON: --json prints one object with the device, the cases
// (each with its fields), the generation and pass; --ops filters; a
// MODEL_DIR (given before or after the flags) is what generates.
func TestSelftestJSON(t *testing.T) {
	tiny := filepath.Join(fixtures, "tiny")
	for _, args := range [][]string{
		{"selftest", "--json", "--ops", "^(MatMul|TopK)/", "--max-tokens", "4", "--device", "cpu-async"},
		{"selftest", tiny, "--json", "--ops", "^(MatMul|TopK)/", "--max-tokens", "4", "--device", "cpu-async"},
	} {
		t.Run(strings.Join(args[1:2], ""), func(t *testing.T) {
			stdout, stderr, code := run(t, args...)
			if code != 0 {
				t.Fatalf("exit %d, stderr %s", code, stderr)
			}
			var rep struct {
				Device struct {
					Backend  string            `json:"backend"`
					Name     string            `json:"name"`
					Describe map[string]string `json:"describe"`
				} `json:"device"`
				Cases      []map[string]any `json:"cases"`
				Generation struct {
					Model        string  `json:"model"`
					TokensDevice []int32 `json:"tokens_device"`
					TokensCPU    []int32 `json:"tokens_cpu"`
					Match        bool    `json:"match"`
				} `json:"generation"`
				Pass *bool `json:"pass"`
			}
			var raw map[string]json.RawMessage
			if err := json.Unmarshal([]byte(stdout), &raw); err != nil {
				t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout)
			}
			if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
				t.Fatal(err)
			}
			if rep.Device.Backend != "cpu-async" || rep.Device.Describe["cpu_model"] == "" {
				t.Errorf("device %+v", rep.Device)
			}
			nMatMul := 0
			for _, c := range opcheck.Cases() {
				if c.Op == "MatMul" || c.Op == "TopK" {
					nMatMul++
				}
			}
			if len(rep.Cases) != nMatMul {
				t.Errorf("%d cases, want the %d MatMul and TopK cases", len(rep.Cases), nMatMul)
			}
			for _, c := range rep.Cases {
				for _, k := range []string{"op", "case", "max_rel_err", "max_abs_err", "tol", "ms", "pass"} {
					if _, ok := c[k]; !ok {
						t.Errorf("case %v has no %q", c, k)
					}
				}
				if c["pass"] != true || (c["op"] != "MatMul" && c["op"] != "TopK") {
					t.Errorf("case %v", c)
				}
			}
			g := rep.Generation
			if len(g.TokensDevice) != 4 || !g.Match || len(g.TokensCPU) != 4 {
				t.Errorf("generation %+v", g)
			}
			if (len(args) > 1 && args[1] == tiny) != (g.Model == tiny) {
				t.Errorf("generation model %q", g.Model)
			}
			if rep.Pass == nil || !*rep.Pass {
				t.Errorf("pass %v", rep.Pass)
			}
			if !strings.Contains(stderr, "selftest: PASS (2 ops, ") {
				t.Errorf("stderr has no PASS line: %s", stderr)
			}
		})
	}
}

// TestSelftestExitCodes: bad flags are usage errors (2); a device that
// cannot open fails fast (1) with the open error naming the library.
func TestSelftestExitCodes(t *testing.T) {
	cases := []struct {
		name string
		args []string
		code int
		last string // in the last stderr line
	}{
		{"bad regexp", []string{"--ops", "("}, 2, "--ops"},
		{"no case matches", []string{"--ops", "NoSuchOp"}, 2, "matches no case"},
		{"two models", []string{"a", "b"}, 2, "at most one MODEL_DIR"},
		{"missing model", []string{"/nonexistent/model"}, 1, "/nonexistent/model"},
		{"unknown device", []string{"--device", "tpu"}, 1, `unknown device "tpu"`},
		{"cuda without a GPU", []string{"--device", "cuda"}, 1, "libcuda.so.1"},
		{"ascend without CANN", []string{"--device", "ascend"}, 1, "libascendcl.so"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "cuda without a GPU" {
				for _, p := range []string{"/usr/local/nvidia/lib64/libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/lib/x86_64-linux-gnu/libcuda.so.1"} {
					if _, err := os.Stat(p); err == nil {
						t.Skipf("%s exists: the CUDA runtime may be installed here", p)
					}
				}
			}
			if _, err := os.Stat("/usr/local/Ascend"); err == nil && tc.name == "ascend without CANN" {
				t.Skip("/usr/local/Ascend exists")
			}
			start := time.Now()
			stdout, stderr, code := run(t, append([]string{"selftest"}, tc.args...)...)
			if code != tc.code || strings.Contains(stderr, "panic") {
				t.Fatalf("exit %d (want %d)\nstdout %s\nstderr %s", code, tc.code, stdout, stderr)
			}
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			if last := lines[len(lines)-1]; !strings.Contains(last, tc.last) {
				t.Errorf("last stderr line %q does not contain %q", last, tc.last)
			}
			if strings.Contains(stdout, "selftest: PASS") {
				t.Errorf("stdout says PASS: %s", stdout)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("took %v to fail", took)
			}
		})
	}
}

// TestSelftestTinyConfig: the built-in model's config is the tiny
// fixture's.
func TestSelftestTinyConfig(t *testing.T) {
	want, err := os.ReadFile(filepath.Join(fixtures, "tiny", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(tinyConfig, want) {
		t.Error("selftest_tiny_config.json differs from testdata/glm5next/tiny/config.json: copy it again")
	}
}

// TestSelftestVerdict: the summary line and pass for failed cases, a
// generation that differs and one that failed.
func TestSelftestVerdict(t *testing.T) {
	pass := []opcheck.Result{{Op: "A", Pass: true}, {Op: "A", Pass: true}, {Op: "B", Pass: true}}
	fail := []opcheck.Result{{Op: "A", Pass: true}, {Op: "B"}}
	cases := []struct {
		name  string
		cases []opcheck.Result
		gen   *selftestGen
		line  string
		pass  bool
	}{
		{"all pass", pass, &selftestGen{Match: true}, "selftest: PASS (2 ops, 3 cases)", true},
		{"no generation", pass, nil, "selftest: PASS (2 ops, 3 cases)", true},
		{"a case fails", fail, &selftestGen{Match: true}, "selftest: FAIL (1 of 2 cases failed)", false},
		{"tokens differ", pass, &selftestGen{}, "selftest: FAIL (generated tokens differ from the cpu backend's)", false},
		{"both", fail, &selftestGen{Error: "on cuda: boom"}, "selftest: FAIL (1 of 2 cases failed, generation failed)", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := selftestReport{Cases: tc.cases, Generation: tc.gen}
			line := rep.verdict()
			if line != tc.line || rep.Pass != tc.pass {
				t.Errorf("verdict %q pass %v, want %q %v", line, rep.Pass, tc.line, tc.pass)
			}
		})
	}
}
