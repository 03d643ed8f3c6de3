package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/core"
	"github.com/npuserve/npuserve/engine/model/glm5next"
	"github.com/npuserve/npuserve/engine/sampling"
)

// benchSpecCommand is `npuserve bench spec`: batch-1 greedy decode
// through the serving engine with MTP speculative decoding at several k
// against k = 0 (issue 11's performance table).
func benchSpecCommand() *cli.Command {
	return &cli.Command{
		Name:  "spec",
		Usage: "batch-1 decode tokens/s with MTP speculative decoding (k drafts per step) against plain decoding, with the acceptance per position",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Usage: "checkpoint directory (its MTP layer, or a random one when it has none)"},
			&cli.StringFlag{Name: "config", Usage: "config.json of a model to build with random weights and a random MTP layer (instead of --model)"},
			&cli.StringFlag{Name: "speculative-tokens", Value: "0,1,3", Usage: "comma-separated k (0 = without speculation; the first value is the baseline)"},
			&cli.StringFlag{Name: "prompts", Usage: "JSON lines of prompt token ids (default: the model directory's eval_prompts.jsonl, else random tokens)"},
			&cli.IntFlag{Name: "num-prompts", Value: 4, Usage: "prompts to run (each its own request, one after another)"},
			&cli.IntFlag{Name: "prompt-len", Value: 32, Usage: "prompt tokens taken from each prompt"},
			&cli.IntFlag{Name: "max-tokens", Value: 48, Usage: "tokens generated per prompt (EOS ignored)"},
			&cli.StringFlag{Name: "dtype", Value: "auto", Usage: "weight dtype: auto (--model as stored; --config bfloat16), float32 or bfloat16"},
			&cli.StringFlag{Name: "reference-acceptance", Value: "0.94,0.77,0.57,0.45,0.35", Usage: "per-position acceptance rates for implied_speedup_at_reference (default: GLM-5 MTP3 on vllm-ascend #9803, extended)"},
			&cli.Int64Flag{Name: "mtp-seed", Value: 11, Usage: "seed of the random MTP layer when the model has none"},
			&cli.StringFlag{Name: "cpuprofile", Usage: "write a Go CPU profile of the whole run to this file (go tool pprof)"},
			deviceFlag(),
		},
		Action: runBenchSpec,
	}
}

// specResult is one line of `bench spec` output.
type specResult struct {
	K            int     `json:"k"`
	Prompts      int     `json:"prompts"`
	DecodeTokens int     `json:"decode_tokens"`
	DecodeSteps  int     `json:"decode_steps"`
	MsPerStep    float64 `json:"ms_per_step"`
	TokensPerS   float64 `json:"tokens_per_s"`
	// TokensPerStep is the mean tokens a decode step emitted.
	TokensPerStep float64 `json:"tokens_per_step"`
	// MeanAcceptanceLength and PerPos are vLLM's (1 + accepted/drafts,
	// per_pos[i]/drafts).
	MeanAcceptanceLength float64   `json:"mean_acceptance_length,omitempty"`
	PerPos               []float64 `json:"per_position_acceptance,omitempty"`
	// StepCost is ms_per_step over the baseline's; ImpliedSpeedup the
	// speed-up the acceptance and that cost imply (tokens per step over
	// cost, the baseline emitting one token per step); Speedup the
	// measured tokens/s over the baseline's.
	StepCost       float64 `json:"step_cost_vs_baseline,omitempty"`
	ImpliedSpeedup float64 `json:"implied_speedup,omitempty"`
	Speedup        float64 `json:"measured_speedup,omitempty"`
	// ImpliedAtReference is the speed-up this step cost gives with the
	// --reference-acceptance rates: (1 + sum of the first k rates) / cost.
	// At acceptance near 0 the cost includes the rejected rows' replay,
	// so it is an upper bound on the cost at that acceptance.
	ImpliedAtReference float64 `json:"implied_speedup_at_reference,omitempty"`
	// SameAsBaseline: every prompt's greedy output equals the baseline's.
	SameAsBaseline bool `json:"same_output_as_baseline"`
	// Phase costs per decode step (ms): the target forward, the sync and
	// acceptance, the rollback + MTP layer + draft download.
	ForwardMs float64 `json:"forward_ms_per_step"`
	SampleMs  float64 `json:"sample_ms_per_step"`
	DraftMs   float64 `json:"draft_ms_per_step"`
}

func runBenchSpec(c *cli.Context) error {
	stop, err := startCPUProfile(c)
	if err != nil {
		return err
	}
	defer stop()
	var ks []int
	for _, f := range strings.Split(c.String("speculative-tokens"), ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 0 || k > core.MaxSpeculativeTokens {
			return usageError("--speculative-tokens: %q is not in [0, %d]", f, core.MaxSpeculativeTokens)
		}
		ks = append(ks, k)
	}
	var ref []float64
	for _, f := range strings.Split(c.String("reference-acceptance"), ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || r < 0 || r > 1 {
			return usageError("--reference-acceptance: %q is not a rate in [0, 1]", f)
		}
		ref = append(ref, r)
	}
	dir, cfgPath := c.String("model"), c.String("config")
	if (dir == "") == (cfgPath == "") {
		return usageError("bench spec: give exactly one of --model and --config")
	}
	plen, maxTok, np := c.Int("prompt-len"), c.Int("max-tokens"), c.Int("num-prompts")
	if plen < 1 || maxTok < 2 || np < 1 {
		return usageError("--prompt-len and --num-prompts must be >= 1, --max-tokens >= 2")
	}
	be, err := openDeviceFlag(c)
	if err != nil {
		return err
	}
	dt := c.String("dtype")
	var m *glm5next.Model
	if dir != "" {
		m, err = glm5next.Load(be, dir, glm5next.LoadOptions{DType: dt, MTP: true, Log: logrus.Infof})
		if err != nil {
			logrus.Warnf("bench spec: loading the MTP layer: %v; using a random MTP layer instead (acceptance will be near 0)", err)
			if m, err = glm5next.Load(be, dir, glm5next.LoadOptions{DType: dt, Log: logrus.Infof}); err != nil {
				return runError("%v", err)
			}
		}
	} else {
		data, err := os.ReadFile(cfgPath)
		if err != nil {
			return runError("--config: %v", err)
		}
		cfg, err := config.ParseModel(data)
		if err != nil {
			return runError("--config: %s: %v", cfgPath, err)
		}
		if dt == "auto" {
			dt = "bfloat16"
		}
		if m, err = glm5next.NewRandomParallel(be, cfg, dt, 1, nil); err != nil {
			return runError("%v", err)
		}
	}
	if !m.HasMTP() {
		logrus.Warnf("bench spec: the model has no MTP layer: adding a random one (seed %d); acceptance will be near 0", c.Int64("mtp-seed"))
		if err := m.AddRandomMTP(c.Int64("mtp-seed")); err != nil {
			return runError("%v", err)
		}
	}
	prompts, err := benchPrompts(c.String("prompts"), dir, np, plen, m.Config().VocabSize)
	if err != nil {
		return runError("%v", err)
	}
	var base *specResult
	var baseOut [][]int32
	for _, k := range ks {
		res, outs, err := benchSpecOnce(m, prompts, k, maxTok)
		if err != nil {
			return runError("k=%d: %v", k, err)
		}
		if base == nil {
			b := res
			base, baseOut = &b, outs
		}
		res.SameAsBaseline = true
		for i := range outs {
			res.SameAsBaseline = res.SameAsBaseline && slices.Equal(outs[i], baseOut[i])
		}
		if k != ks[0] {
			res.StepCost = res.MsPerStep / base.MsPerStep
			res.ImpliedSpeedup = res.TokensPerStep / base.TokensPerStep / res.StepCost
			res.Speedup = res.TokensPerS / base.TokensPerS
			want := 1.0
			for j := range min(k, len(ref)) {
				want += ref[j]
			}
			res.ImpliedAtReference = want / base.TokensPerStep / res.StepCost
		}
		b, _ := json.Marshal(res)
		fmt.Println(string(b))
	}
	return nil
}

// benchPrompts reads up to n prompts of plen tokens: from path (JSON
// lines of token ids), else dir's eval_prompts.jsonl, else random tokens.
func benchPrompts(path, dir string, n, plen, vocab int) ([][]int32, error) {
	if path == "" && dir != "" {
		if p := filepath.Join(dir, "eval_prompts.jsonl"); fileExists(p) {
			path = p
		}
	}
	var out [][]int32
	if path == "" {
		r := rand.New(rand.NewPCG(5, 6))
		for range n {
			p := make([]int32, plen)
			for j := range p {
				p[j] = int32(r.IntN(vocab))
			}
			out = append(out, p)
		}
		return out, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--prompts: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() && len(out) < n {
		var ids []int32
		if err := json.Unmarshal(sc.Bytes(), &ids); err != nil {
			return nil, fmt.Errorf("%s: %v", path, err)
		}
		if len(ids) < plen {
			continue
		}
		out = append(out, ids[:plen])
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no prompt of %d tokens", path, plen)
	}
	return out, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// benchSpecOnce runs the prompts one after another, each through its own
// engine with k drafts per step (greedy, EOS ignored), and times the
// decode steps: every step after the request's first (its prefill, which
// fits one step).
func benchSpecOnce(m *glm5next.Model, prompts [][]int32, k, maxTok int) (specResult, [][]int32, error) {
	res := specResult{K: k, Prompts: len(prompts)}
	var outs [][]int32
	var decode, fwd, smp, drf time.Duration
	var drafts int64
	var perPos []int64
	for i, p := range prompts {
		const block = core.DefaultBlockSize
		total := len(p) + maxTok
		var steps []core.StepStats
		e, err := core.New(m.Engine(), core.Options{
			MaxNumSeqs:           1,
			MaxNumBatchedTokens:  max(len(p), 64),
			MaxModelLen:          total,
			NumBlocks:            (total+k+block-1)/block + 2,
			NumSpeculativeTokens: k,
			OnStep:               func(s core.StepStats) { steps = append(steps, s) },
		})
		if err != nil {
			return specResult{}, nil, err
		}
		params := sampling.DefaultParams()
		params.Temperature = sampling.Ptr(0.0)
		params.MaxTokens = sampling.Ptr(maxTok)
		params.IgnoreEOS = true
		ch, err := e.Add(&core.Request{ID: fmt.Sprintf("bench-%d", i), PromptTokens: p, Params: params})
		if err != nil {
			e.Close()
			return specResult{}, nil, err
		}
		var out []int32
		var ferr error
		for o := range ch {
			out = append(out, o.Tokens...)
			if o.Finished && o.Err != nil {
				ferr = o.Err
			}
		}
		st := e.Stats()
		e.Close() // the loop has exited: every OnStep has run
		if ferr != nil {
			return specResult{}, nil, ferr
		}
		outs = append(outs, out)
		for _, s := range steps[min(1, len(steps)):] {
			res.DecodeSteps++
			decode += s.Total
			fwd += s.Forward
			smp += s.Sample
			drf += s.Draft
		}
		res.DecodeTokens += len(out) - 1
		drafts += st.SpecDrafts
		for j, a := range st.SpecAcceptedPerPos {
			for len(perPos) <= j {
				perPos = append(perPos, 0)
			}
			perPos[j] += a
		}
	}
	if res.DecodeSteps == 0 {
		return specResult{}, nil, fmt.Errorf("no decode steps")
	}
	n := float64(res.DecodeSteps)
	res.MsPerStep = float64(decode.Microseconds()) / 1e3 / n
	res.ForwardMs = float64(fwd.Microseconds()) / 1e3 / n
	res.SampleMs = float64(smp.Microseconds()) / 1e3 / n
	res.DraftMs = float64(drf.Microseconds()) / 1e3 / n
	res.TokensPerS = float64(res.DecodeTokens) / decode.Seconds()
	res.TokensPerStep = float64(res.DecodeTokens) / n
	if drafts > 0 {
		acc := int64(0)
		for j := range k {
			a := int64(0)
			if j < len(perPos) {
				a = perPos[j]
			}
			acc += a
			res.PerPos = append(res.PerPos, float64(a)/float64(drafts))
		}
		res.MeanAcceptanceLength = 1 + float64(acc)/float64(drafts)
	}
	return res, outs, nil
}
