package glm5next

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/npuserve/npuserve/engine/model"
	"github.com/npuserve/npuserve/npu/nputest"
)

// trainedMTPDir is the trained fixture with a trained MTP layer
// (python3 tools/golden/train_fixture.py --mtp on the accelerator host).
const trainedMTPDir = mtpFixtureRoot + "/trained-mtp"

// trainedMTPMeta is the part of trained-mtp/mtp.json this test reads.
type trainedMTPMeta struct {
	Chain struct {
		K        int       `json:"k"`
		Windows  int       `json:"windows"`
		Prompt   int       `json:"prompt_len"`
		Gen      int       `json:"generated"`
		Accepted []float64 `json:"per_position_acceptance"`
	} `json:"chain"`
}

// TestSpecTrainedAcceptance decodes held-out prompts greedily with k = 3
// MTP drafts per step using the trained fixture's trained MTP layer and
// reports the acceptance per position. It checks the output equals plain
// greedy decoding, the rates are non-increasing, and the first position's
// rate (a trained layer: tools/golden asserts >= 0.2; a wiring bug gives
// about 1/vocab) is within 0.15 of the reference's greedy-chain rate in
// mtp.json, which counts every start position rather than the ones a
// decode visits.
func TestSpecTrainedAcceptance(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(trainedMTPDir, "mtp.json"))
	if os.IsNotExist(err) {
		t.Skip("testdata/glm5next/trained-mtp is absent: the trained fixture has no trained MTP layer yet; make it with python3 tools/golden/train_fixture.py --mtp --out testdata/glm5next on the accelerator host")
	}
	if err != nil {
		t.Fatal(err)
	}
	var meta trainedMTPMeta
	if err := json.Unmarshal(b, &meta); err != nil {
		t.Fatal(err)
	}
	if meta.Chain.K != 3 || len(meta.Chain.Accepted) != 3 {
		t.Fatalf("mtp.json chain %+v", meta.Chain)
	}
	be := nputest.Open(0)
	m, err := Load(be, trainedMTPDir, LoadOptions{MTP: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	f, err := os.Open(filepath.Join(trainedMTPDir, "eval_prompts.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var prompts [][]int32
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() && len(prompts) < meta.Chain.Windows {
		var w []int32
		if err := json.Unmarshal(sc.Bytes(), &w); err != nil {
			t.Fatal(err)
		}
		prompts = append(prompts, w[:meta.Chain.Prompt])
	}
	const k = 3
	n := meta.Chain.Gen
	want := plainGreedy(t, m, prompts, n)
	c, bt := specCache(t, m, len(prompts), meta.Chain.Prompt+n+2*k+specBlock)
	seqs, got := greedyPrefill(t, m, c, bt, prompts, k)
	var st model.SpecStats
	for {
		var live []*SpecSeq
		var at []int
		for i, s := range seqs {
			if len(got[i]) < n {
				live, at = append(live, s), append(at, i)
			}
		}
		if len(live) == 0 {
			break
		}
		nd := make([]int, len(live))
		for j, s := range live {
			nd[j] = len(s.Drafts)
		}
		toks, err := m.SpecStep(c, live, k, func(_ int, rows [][]float32, d []int32) []int32 { return GreedyAccept(rows, d) })
		if err != nil {
			t.Fatal(err)
		}
		for j, i := range at {
			st.Observe(nd[j], len(toks[j])-1)
			got[i] = append(got[i], toks[j]...)
		}
	}
	for i := range prompts {
		for j := range n {
			if got[i][j] != want[i][j] {
				t.Fatalf("prompt %d token %d: spec %d, plain %d", i, j, got[i][j], want[i][j])
			}
		}
	}
	rates := make([]float64, k)
	for p := range k {
		if p < len(st.PerPos) {
			rates[p] = float64(st.PerPos[p]) / float64(st.Drafts)
		}
		if p > 0 && rates[p] > rates[p-1] {
			t.Errorf("per-position acceptance not monotone: %v", rates)
		}
	}
	t.Logf("held-out greedy decode, k=%d: %d drafts, per-position acceptance %s, mean acceptance length %.2f (reference chain %v)",
		k, st.Drafts, fmtRates(rates), st.MeanAcceptanceLength(), meta.Chain.Accepted)
	if d := math.Abs(rates[0] - meta.Chain.Accepted[0]); d > 0.15 {
		t.Errorf("first-position acceptance %.3f, the reference's %.3f", rates[0], meta.Chain.Accepted[0])
	}
}

func fmtRates(r []float64) string {
	s := ""
	for i, v := range r {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%.3f", v)
	}
	return s
}
