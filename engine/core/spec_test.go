package core

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/npuserve/npuserve/engine/model"
	"github.com/npuserve/npuserve/engine/model/glm5next"
	"github.com/npuserve/npuserve/engine/sampling"
	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/nputest"
)

var (
	mtpOnce  sync.Once
	mtpModel *glm5next.Model
	mtpErr   error
)

// tinyMTP is the tiny golden model plus a random MTP layer (its own copy:
// the MTP layer changes the cache sizing of the shared tiny model).
func tinyMTP(t testing.TB) *glm5next.Model {
	t.Helper()
	mtpOnce.Do(func() {
		mtpModel, mtpErr = glm5next.Load(nputest.Open(0), tinyDir, glm5next.LoadOptions{})
		if mtpErr == nil {
			mtpErr = mtpModel.AddRandomMTP(11)
		}
	})
	if mtpErr != nil {
		t.Fatal(mtpErr)
	}
	return mtpModel
}

// oracle wraps a speculative model and replaces its drafts by the known
// continuation of the sequence (found by its tokens among seqs, the
// prompts followed by their reference outputs), corrupting one draft
// position on every other step, so that full, partial and zero
// acceptance, and stops inside accepted runs, all occur.
type oracle struct {
	model.Speculative
	seqs   [][]int32
	pos    []int
	starts []int
	toks   []int32
	calls  int
}

func (o *oracle) SpecForward(c model.Cache, b *model.Batch, backup []int) (*npu.Tensor, error) {
	o.pos = append(o.pos[:0], b.Layout.Pos...)
	o.starts = append(o.starts[:0], b.Layout.QueryStart...)
	o.toks = append(o.toks[:0], b.Tokens...)
	return o.Speculative.SpecForward(c, b, backup)
}

func (o *oracle) SpecCommit(c model.Cache, sc *model.SpecCommit) ([][]int32, error) {
	d, err := o.Speculative.SpecCommit(c, sc)
	if err != nil {
		return nil, err
	}
	o.calls++
	for i, s := range sc.Seqs {
		if d[i] == nil {
			continue
		}
		p, r0 := o.pos[s.Seq], o.starts[s.Seq]
		want := append(append([]int32{}, o.toks[r0:r0+s.Kept]...), s.Next...)[:s.Kept]
		want = append(want, s.Next[len(s.Next)-1])
		for _, full := range o.seqs {
			if p+s.Kept+1 > len(full) || !slices.Equal(full[p:p+s.Kept], want[:s.Kept]) || full[p+s.Kept] != want[s.Kept] {
				continue
			}
			for j := range d[i] {
				if q := p + s.Kept + 1 + j; q < len(full) {
					d[i][j] = full[q]
				}
			}
			if o.calls%2 == 1 {
				j := o.calls / 2 % len(d[i])
				d[i][j] = (d[i][j] + 1) % 480
			}
			break
		}
	}
	return d, nil
}

// specRun runs ps through an engine on mm with opt and returns the tokens,
// finals and stats.
func specRun(t *testing.T, mm Model, opt Options, ps [][]int32, params func(i int) sampling.Params) ([][]int32, []Output, Stats) {
	t.Helper()
	e := newEngine(t, mm, opt)
	got, finals := runAll(t, e, ps, params)
	return got, finals, waitIdle(t, e)
}

// checkSpecStats checks the counters' relations (glm5next-features.md §2.6).
func checkSpecStats(t *testing.T, s Stats, k int) {
	t.Helper()
	if s.SpecDrafts == 0 || s.SpecAcceptedTokens > s.SpecDraftTokens || s.SpecDraftTokens > int64(k)*s.SpecDrafts || len(s.SpecAcceptedPerPos) > k {
		t.Fatalf("spec counters: drafts %d, draft tokens %d, accepted %d, per position %v (k=%d)", s.SpecDrafts, s.SpecDraftTokens, s.SpecAcceptedTokens, s.SpecAcceptedPerPos, k)
	}
	sum := int64(0)
	for i, n := range s.SpecAcceptedPerPos {
		sum += n
		if i > 0 && n > s.SpecAcceptedPerPos[i-1] {
			t.Fatalf("per-position acceptance %v not non-increasing", s.SpecAcceptedPerPos)
		}
	}
	if sum != s.SpecAcceptedTokens {
		t.Fatalf("per-position acceptance %v sums to %d, accepted %d", s.SpecAcceptedPerPos, sum, s.SpecAcceptedTokens)
	}
}

// TestSpeculativeLossless: with MTP speculation (k = 1, 3; the model's
// random drafts, and oracle drafts that are accepted in full, in part and
// not at all) every request emits exactly the tokens and logprobs of the
// engine without speculation: greedy and seeded sampling, in busy mixed
// batches with chunked prefill, max_tokens and stop tokens landing inside
// accepted runs, and preemption.
func TestSpeculativeLossless(t *testing.T) {
	m := tinyMTP(t)
	ps := prompts(6, 21) // lengths 3..38
	maxTk := func(i int) int { return []int{1, 2, 9, 14, 7, 20}[i] }
	stopTok := int32(-1)
	params := map[string]func(i int) sampling.Params{
		"greedy": func(i int) sampling.Params {
			p := greedy(maxTk(i))
			p.Logprobs = sampling.Ptr(2)
			if i == 3 && stopTok >= 0 {
				p.StopTokenIDs = []int32{stopTok}
			}
			return p
		},
		"seeded": func(i int) sampling.Params { return seeded(maxTk(i), uint64(40+i)) },
	}
	variants := []struct {
		name string
		opt  Options
	}{
		{"defaults", Options{NumBlocks: 64}},
		{"budget 16 forces chunking", Options{MaxNumSeqs: 4, MaxNumBatchedTokens: 16, BlockSize: 8, NumBlocks: 64}},
		{"budget 6 and block 4", Options{MaxNumSeqs: 6, MaxNumBatchedTokens: 6, BlockSize: 4, NumBlocks: 128}},
		{"tiny cache preempts", Options{MaxNumSeqs: 5, MaxNumBatchedTokens: 24, BlockSize: 4, NumBlocks: 14, MaxModelLen: 44}},
	}
	// The reference outputs, and a stop token inside request 3's run.
	ref, _, _ := specRun(t, m.Engine(), Options{NumBlocks: 64}, ps, params["greedy"])
	stopTok = ref[3][6]
	for _, pname := range []string{"greedy", "seeded"} {
		for _, v := range variants {
			want, wantF, base := specRun(t, m.Engine(), v.opt, ps, params[pname])
			var full [][]int32
			for i := range ps {
				full = append(full, append(append([]int32{}, ps[i]...), want[i]...))
			}
			for _, k := range []int{1, 3} {
				for _, drafter := range []string{"mtp", "oracle"} {
					t.Run(fmt.Sprintf("%s/%s/k=%d/%s", pname, v.name, k, drafter), func(t *testing.T) {
						var mm Model = m.Engine()
						if drafter == "oracle" {
							mm = &oracle{Speculative: m.Engine().(model.Speculative), seqs: full}
						}
						opt := v.opt
						opt.NumSpeculativeTokens = k
						got, finals, st := specRun(t, mm, opt, ps, params[pname])
						for i := range ps {
							if !slices.Equal(got[i], want[i]) {
								t.Fatalf("request %d: %v, without speculation %v", i, got[i], want[i])
							}
							f, w := finals[i], wantF[i]
							if f.FinishReason != w.FinishReason || (f.StopToken == nil) != (w.StopToken == nil) || f.Metrics.GenerationTokens != len(want[i]) {
								t.Fatalf("request %d final %+v, without speculation %+v", i, f, w)
							}
						}
						if st.GenerationTokens != base.GenerationTokens {
							t.Fatalf("generation tokens %d, without speculation %d", st.GenerationTokens, base.GenerationTokens)
						}
						checkSpecStats(t, st, k)
						if drafter == "oracle" && st.SpecAcceptedTokens == 0 {
							t.Fatalf("oracle drafts never accepted: %+v", st)
						}
					})
				}
			}
		}
	}
}

// TestSpeculativeSavesSteps: with drafts that are often right the engine
// needs fewer steps than without speculation, and the mean acceptance
// length says so.
func TestSpeculativeSavesSteps(t *testing.T) {
	m := tinyMTP(t)
	ps := prompts(6, 21)
	ref, _, plain := specRun(t, m.Engine(), Options{NumBlocks: 64}, ps, func(i int) sampling.Params { return greedy(20) })
	var full [][]int32
	for i := range ps {
		full = append(full, append(append([]int32{}, ps[i]...), ref[i]...))
	}
	for _, k := range []int{1, 3} {
		_, _, st := specRun(t, &oracle{Speculative: m.Engine().(model.Speculative), seqs: full}, Options{NumBlocks: 64, NumSpeculativeTokens: k}, ps, func(i int) sampling.Params { return greedy(20) })
		checkSpecStats(t, st, k)
		if st.Steps >= plain.Steps || st.SpecMeanAcceptanceLength() <= 1 {
			t.Fatalf("k=%d: %d steps (without speculation %d), mean acceptance length %.2f, per position %v",
				k, st.Steps, plain.Steps, st.SpecMeanAcceptanceLength(), st.SpecAcceptedPerPos)
		}
	}
}

// TestSpeculativeOptions: the engine refuses speculation it cannot run.
func TestSpeculativeOptions(t *testing.T) {
	cases := []struct {
		name string
		m    Model
		k    int
		want string
	}{
		{"no MTP layer", tiny(t).Engine(), 3, "needs a model with an MTP draft layer"},
		{"k too large", tinyMTP(t).Engine(), 6, "num_speculative_tokens 6 must be in [1, 5]"},
		{"negative k", tinyMTP(t).Engine(), -1, "must be in [1, 5]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(c.m, Options{NumBlocks: 16, NumSpeculativeTokens: c.k})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}
