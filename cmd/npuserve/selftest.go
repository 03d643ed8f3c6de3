package main

import (
	_ "embed"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/core"
	"github.com/npuserve/npuserve/engine/model/glm5next"
	"github.com/npuserve/npuserve/engine/sampling"
	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/cpu"
	"github.com/npuserve/npuserve/npu/opcheck"
	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"
)

// tinyConfig is testdata/glm5next/tiny's config.json (a test keeps the two
// equal): the built-in model selftest generates with when no MODEL is
// given, so that the binary alone can check a device.
//
//go:embed selftest_tiny_config.json
var tinyConfig []byte

// selftestPrompt is the greedy generation's prompt (ids modulo the
// vocabulary of a given MODEL).
var selftestPrompt = []int32{1, 17, 42, 99, 3, 250, 7, 128, 64, 300, 11}

func selftestCommand() *cli.Command {
	return &cli.Command{
		Name:  "selftest",
		Usage: "check a device: every op on random inputs against the CPU backend, then a greedy generation compared with the CPU's",
		Description: "Opens --device, prints its description, runs the op conformance table (npu/opcheck: each op on random\n" +
			"inputs of odd sizes on the device and on the CPU reference, with its max relative error, tolerance and time),\n" +
			"then generates greedily with MODEL (default: a built-in tiny model with random weights) on the device and on\n" +
			"the CPU backend and compares the token ids. The last line is `selftest: PASS (...)` or `selftest: FAIL (...)`,\n" +
			"exit code 0 or 1. This is what to run first on a new accelerator, and what to attach to a bug report.",
		ArgsUsage: "[MODEL_DIR]",
		Flags: []cli.Flag{
			deviceFlag(),
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object (device, cases, generation, pass) instead of the table"},
			&cli.StringFlag{Name: "ops", Usage: "run only the cases whose op/case matches this regular expression, e.g. 'MatMul|MoE'"},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "seed of the random inputs (and of the built-in model's weights)"},
			&cli.IntFlag{Name: "reps", Value: 3, Usage: "timed calls per case"},
			&cli.IntFlag{Name: "max-tokens", Value: 16, Usage: "greedy tokens to generate and compare (0: no generation)"},
			&cli.IntFlag{Name: "threads", Value: 0, Usage: "CPU threads of the CPU backends (0 = all)"},
		},
		Action: runSelftest,
	}
}

// selftestReport is what --json prints.
type selftestReport struct {
	Device     selftestDevice   `json:"device"`
	Cases      []opcheck.Result `json:"cases"`
	Generation *selftestGen     `json:"generation,omitempty"`
	Ops        int              `json:"ops"`
	Failed     int              `json:"failed"`
	Pass       bool             `json:"pass"`
}

type selftestDevice struct {
	Backend     string            `json:"backend"`
	Name        string            `json:"name"`
	MemoryBytes int64             `json:"memory_bytes"`
	FreeBytes   int64             `json:"free_bytes"`
	Accelerator bool              `json:"accelerator"`
	Describe    map[string]string `json:"describe,omitempty"`
}

type selftestGen struct {
	Model        string  `json:"model"`
	Prompt       []int32 `json:"prompt"`
	TokensDevice []int32 `json:"tokens_device"`
	TokensCPU    []int32 `json:"tokens_cpu"`
	Match        bool    `json:"match"`
	Error        string  `json:"error,omitempty"`
}

func runSelftest(c *cli.Context) error {
	if err := flagsAfterArg(c); err != nil {
		return usageError("selftest: %v", err)
	}
	var filter *regexp.Regexp
	if s := c.String("ops"); s != "" {
		re, err := regexp.Compile(s)
		if err != nil {
			return usageError("--ops: %v", err)
		}
		filter = re
		matched := false
		for _, cs := range opcheck.Cases() {
			matched = matched || re.MatchString(cs.Key())
		}
		if !matched {
			return usageError("--ops %q matches no case (cases are named op/case, e.g. MatMul/7x45x67 F32 weight)", s)
		}
	}
	if c.Int("reps") < 1 || c.Int("max-tokens") < 0 {
		return usageError("selftest: --reps must be >= 1 and --max-tokens >= 0")
	}
	dir := c.Args().First()
	var modelCfg *config.ModelConfig
	if dir != "" {
		cfg, err := config.LoadModel(dir)
		if err != nil {
			return runError("selftest: %v", err)
		}
		modelCfg = cfg
	}
	be, err := openDeviceFlag(c)
	if err != nil {
		return err
	}
	ref := cpu.New(c.Int("threads"))
	info := be.Info()
	rep := selftestReport{Device: selftestDevice{Backend: be.Name(), Name: info.Name, MemoryBytes: info.MemoryBytes,
		FreeBytes: info.FreeBytes, Accelerator: info.Accelerator, Describe: npu.Describe(be)}}
	text := !c.Bool("json")
	out := os.Stdout
	if text {
		printDevice(out, rep.Device)
		fmt.Fprintf(out, "\nops on %s against the cpu reference (seed %d):\n", be.Name(), c.Uint64("seed"))
	}
	rep.Cases = opcheck.Run(be, ref, opcheck.Options{Seed: c.Uint64("seed"), Filter: filter, Reps: c.Int("reps")})
	if rep.Cases == nil {
		rep.Cases = []opcheck.Result{}
	}
	if text {
		printCases(out, rep.Cases)
	}
	if len(rep.Cases) == 0 {
		return usageError("--ops %q matches no case that %s runs", c.String("ops"), be.Name())
	}
	if n := c.Int("max-tokens"); n > 0 {
		g := selftestGenerate(be, ref, dir, modelCfg, c.Uint64("seed"), n)
		rep.Generation = &g
		if text {
			printGeneration(out, g)
		}
	}
	line := rep.verdict()
	if text {
		fmt.Fprintln(out, "\n"+line)
	} else {
		b, err := json.Marshal(rep)
		if err != nil {
			return runError("selftest: %v", err)
		}
		fmt.Fprintln(out, string(b))
		fmt.Fprintln(os.Stderr, line)
	}
	if !rep.Pass {
		return cli.Exit("", 1)
	}
	return nil
}

// flagsAfterArg applies the flags given after MODEL_DIR (urfave/cli stops
// parsing at the first argument), so that `selftest MODEL --device cuda`
// works as `selftest --device cuda MODEL` does.
func flagsAfterArg(c *cli.Context) error {
	if c.NArg() <= 1 {
		return nil
	}
	fs := flag.NewFlagSet("selftest", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for _, f := range c.Command.Flags {
		if err := f.Apply(fs); err != nil {
			return err
		}
	}
	if err := fs.Parse(c.Args().Tail()); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("at most one MODEL_DIR, got %q and %q", c.Args().First(), fs.Args())
	}
	var err error
	fs.Visit(func(f *flag.Flag) {
		if e := c.Set(f.Name, f.Value.String()); e != nil && err == nil {
			err = e
		}
	})
	return err
}

// verdict fills in the counts and pass and returns the summary line.
func (rep *selftestReport) verdict() string {
	nops, ncases, failed := opcheck.Summary(rep.Cases)
	rep.Ops, rep.Failed = nops, failed
	rep.Pass = failed == 0 && (rep.Generation == nil || rep.Generation.Match)
	if rep.Pass {
		return fmt.Sprintf("selftest: PASS (%d ops, %d cases)", nops, ncases)
	}
	var why []string
	if failed > 0 {
		why = append(why, fmt.Sprintf("%d of %d cases failed", failed, ncases))
	}
	if g := rep.Generation; g != nil && !g.Match {
		if g.Error != "" {
			why = append(why, "generation failed")
		} else {
			why = append(why, "generated tokens differ from the cpu backend's")
		}
	}
	return fmt.Sprintf("selftest: FAIL (%s)", strings.Join(why, ", "))
}

func printDevice(w io.Writer, d selftestDevice) {
	kind := "host"
	if d.Accelerator {
		kind = "accelerator"
	}
	fmt.Fprintf(w, "device: %s (%s, %s, %.1f GiB, %.1f GiB free)\n", d.Backend, d.Name, kind,
		float64(d.MemoryBytes)/(1<<30), float64(d.FreeBytes)/(1<<30))
	keys := make([]string, 0, len(d.Describe))
	for k := range d.Describe {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "  %s: %s\n", k, d.Describe[k])
	}
}

func printCases(w io.Writer, rs []opcheck.Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "OP\tCASE\tMAX REL ERR\tMAX ABS ERR\tTOL\tTIME\tRESULT")
	for _, r := range rs {
		res := "PASS"
		if !r.Pass {
			res = "FAIL"
			if r.Err != "" {
				res += "  " + r.Err
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%.3g\t%.3g\t%g\t%.3f ms\t%s\n", r.Op, r.Case, float64(r.MaxRelErr), float64(r.MaxAbsErr), r.Tol, r.Ms, res)
	}
	tw.Flush()
}

func printGeneration(w io.Writer, g selftestGen) {
	fmt.Fprintf(w, "\ngreedy generation, %s, %d prompt tokens:\n", g.Model, len(g.Prompt))
	if g.Error != "" {
		fmt.Fprintf(w, "  error: %s\n", g.Error)
	}
	fmt.Fprintf(w, "  device: %s\n  cpu:    %s\n", joinIDs(g.TokensDevice), joinIDs(g.TokensCPU))
	if g.Match {
		fmt.Fprintln(w, "  match")
	} else if g.Error == "" {
		i := 0
		for i < len(g.TokensDevice) && i < len(g.TokensCPU) && g.TokensDevice[i] == g.TokensCPU[i] {
			i++
		}
		fmt.Fprintf(w, "  differ from token %d\n", i)
	}
}

// selftestGenerate generates n greedy tokens with the model on dev and on
// ref and compares them. Both use fp32 caches, so that the comparison is
// of the ops, not of an accelerator's default bf16 cache.
func selftestGenerate(dev, ref npu.Backend, dir string, cfg *config.ModelConfig, seed uint64, n int) selftestGen {
	g := selftestGen{Model: "built-in tiny model (testdata/glm5next/tiny's config, random weights, seed " + fmt.Sprint(seed) + ")",
		TokensDevice: []int32{}, TokensCPU: []int32{}}
	if dir != "" {
		g.Model = dir
	}
	if cfg == nil {
		c, err := config.ParseModel(tinyConfig)
		if err != nil {
			g.Error = fmt.Sprintf("built-in tiny config: %v", err)
			return g
		}
		cfg = c
	}
	for _, id := range selftestPrompt {
		g.Prompt = append(g.Prompt, id%int32(cfg.VocabSize))
	}
	run := func(be npu.Backend) (toks []int32, err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panic: %v", p)
			}
		}()
		t0 := time.Now()
		var m *glm5next.Model
		if dir != "" {
			m, err = glm5next.Load(be, dir, glm5next.LoadOptions{DType: "auto", Log: logrus.Debugf})
		} else {
			m, err = glm5next.NewRandomParallel(be, cfg, "float32", int64(seed), nil)
		}
		if err != nil {
			return nil, err
		}
		if err := m.SetCacheDType(npu.F32); err != nil {
			return nil, err
		}
		toks, err = greedyTokens(m, g.Prompt, n)
		logrus.Debugf("selftest: %d tokens on %s in %.2f s", len(toks), be.Name(), time.Since(t0).Seconds())
		return toks, err
	}
	dt, err := run(dev)
	if err != nil {
		g.Error = fmt.Sprintf("on %s: %v", dev.Name(), err)
		return g
	}
	g.TokensDevice = dt
	ct, err := run(ref)
	if err != nil {
		g.Error = fmt.Sprintf("on the cpu backend: %v", err)
		return g
	}
	g.TokensCPU = ct
	g.Match = slices.Equal(dt, ct)
	return g
}

// greedyTokens generates n tokens greedily (no stop ids) through the
// serving engine, as generate does.
func greedyTokens(m *glm5next.Model, prompt []int32, n int) ([]int32, error) {
	p := sampling.DefaultParams()
	p.Temperature = sampling.Ptr(0.0)
	p.MaxTokens = sampling.Ptr(n)
	p.IgnoreEOS = true
	const block = core.DefaultBlockSize
	total := len(prompt) + n
	e, err := core.New(m.Engine(), core.Options{
		MaxNumSeqs: 1, MaxNumBatchedTokens: 512, MaxModelLen: total,
		NumBlocks: (total+block-1)/block + 1,
	})
	if err != nil {
		return nil, err
	}
	defer e.Close()
	ch, err := e.Add(&core.Request{ID: "selftest", PromptTokens: prompt, Params: p})
	if err != nil {
		return nil, err
	}
	out := []int32{}
	for o := range ch {
		out = append(out, o.Tokens...)
		if o.Finished && o.Err != nil {
			return out, o.Err
		}
	}
	return out, nil
}
