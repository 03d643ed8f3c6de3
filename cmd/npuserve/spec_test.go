package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/npuserve/npuserve/npu/nputest"
)

// TestGenerateSpeculative: `npuserve generate --speculative-config` on the
// trained fixture with its trained MTP layer emits the reference's greedy
// tokens for k = 1, 3 and 5 (lossless), and reports its drafts.
func TestGenerateSpeculative(t *testing.T) {
	g := loadGolden(t, "trained-mtp")
	dir := filepath.Join(fixtures, "trained-mtp")
	for _, k := range []string{"1", "3", "5"} {
		for i, p := range g.Prompts {
			out, errOut, code := run(t, "generate", "--model", dir, "--prompt-ids", idsArg(p), "--max-tokens", "8", "--ignore-eos", "--json",
				"--speculative-config", `{"method": "deepseek_mtp", "num_speculative_tokens": `+k+`}`)
			var res generateResult
			if code != 0 || json.Unmarshal([]byte(out), &res) != nil {
				t.Fatalf("k=%s prompt %d: exit %d, %q: %s", k, i, code, out, errOut)
			}
			if !equalIDs(res.TokenIDs, g.Greedy[i]) {
				t.Errorf("k=%s prompt %d: token_ids %v, reference %v", k, i, res.TokenIDs, g.Greedy[i])
			}
		}
	}
}

// TestServeSpeculative: serve with --speculative-config (k = 3) on one
// rank, TP2 and DP2 with expert parallelism (rank processes in lockstep)
// serves the reference's greedy tokens of the trained fixture, and the
// spec-decode metrics count the accepted drafts.
func TestServeSpeculative(t *testing.T) {
	if testing.Short() {
		t.Skip("several serve processes")
	}
	g := loadGolden(t, "trained-mtp")
	dir := filepath.Join(fixtures, "trained-mtp")
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"one rank", nil},
		{"TP2", []string{"--tensor-parallel-size", "2"}},
		{"DP2 EP", []string{"--data-parallel-size", "2", "--enable-expert-parallel"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := nputest.Device(); tc.args != nil && d != "cpu" && d != "cpu-async" && os.Getenv("NPUSERVE_TEST_MULTI_DEVICE") == "" {
				t.Skipf("--device %s: TP/DP rank processes need one device each (set NPUSERVE_TEST_MULTI_DEVICE=1 where the machine has them)", d)
			}
			args := append([]string{"--speculative-config", `{"method": "mtp", "num_speculative_tokens": 3}`, "--max-num-seqs", "4", "--max-model-len", "256"}, tc.args...)
			s := startServeDir(t, dir, args...)
			defer s.stop()
			for i, p := range g.Prompts {
				if got := completionIDs(t, s, p, len(g.Greedy[i])); !equalIDs(got, g.Greedy[i]) {
					t.Errorf("prompt %d: served %v, reference %v", i, got, g.Greedy[i])
				}
			}
			waitIdle(t, s)
			// A DP head sums its ranks' counters as of their last
			// heartbeats: wait for one.
			var drafts, accepted float64
			for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
				drafts, accepted = metricValue(t, s, "vllm:spec_decode_num_drafts_total"), metricValue(t, s, "vllm:spec_decode_num_accepted_tokens_total")
				if drafts > 0 && accepted > 0 {
					break
				}
			}
			if drafts == 0 || accepted == 0 {
				t.Errorf("%v drafts, %v accepted tokens; want drafts accepted", drafts, accepted)
			}
		})
	}
}

// TestServeSpeculativeQuantized: a W8A8_DYNAMIC checkpoint with its MTP
// block quantized too (`npuserve quantize --mtp`) serves with MTP
// speculation on DP2 with expert parallelism, giving generate's
// single-rank tokens without speculation, and on TP2 (which quantizes
// activations per rank, so its tokens may differ) serving every token.
func TestServeSpeculativeQuantized(t *testing.T) {
	if testing.Short() {
		t.Skip("several serve processes")
	}
	if d := nputest.Device(); d != "cpu" && d != "cpu-async" && os.Getenv("NPUSERVE_TEST_MULTI_DEVICE") == "" {
		t.Skipf("--device %s: TP/DP rank processes need one device each", d)
	}
	serveQuantizedParallel(t, "trained-mtp", []string{"--mtp"}, []string{"--speculative-config", `{"method": "deepseek_mtp", "num_speculative_tokens": 3}`})
}
