package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/mattn/go-isatty"
	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/core"
	"github.com/npuserve/npuserve/engine/model/glm5next"
	"github.com/npuserve/npuserve/engine/sampling"
	"github.com/npuserve/npuserve/engine/tokenizer"
	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"
)

func generateCommand() *cli.Command {
	return &cli.Command{
		Name:  "generate",
		Usage: "offline generation for one prompt through the serving model path",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Usage: "model dir (config.json, *.safetensors, tokenizer.json)", Required: true},
			&cli.StringFlag{Name: "prompt", Usage: "prompt text (encoded with the model's tokenizer)"},
			&cli.StringFlag{Name: "prompt-ids", Usage: "prompt as comma-separated token ids, e.g. 1,2,3"},
			&cli.IntFlag{Name: "max-tokens", Value: 16, Usage: "tokens to generate"},
			&cli.Float64Flag{Name: "temperature", Value: 0, Usage: "0 = greedy; > 0 samples from softmax(logits/T)"},
			&cli.Uint64Flag{Name: "seed", Value: 0, Usage: "sampling seed"},
			&cli.BoolFlag{Name: "ignore-eos", Usage: "do not stop at the model's end-of-sequence ids"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object with token_ids and text"},
			&cli.StringFlag{Name: "dtype", Value: "auto", Usage: "weight dtype: auto (the checkpoint's), float32 or bfloat16"},
			quantizationFlag("the model"),
			&cli.StringFlag{Name: "speculative-config", Usage: `MTP speculative decoding, e.g. '{"method": "mtp", "num_speculative_tokens": 3}' (needs the checkpoint's MTP layer)`},
			&cli.IntFlag{Name: "chunk-size", Value: 512, Usage: "prompt tokens per prefill step (chunked prefill)"},
			&cli.IntFlag{Name: "threads", Value: 0, Usage: "CPU threads (0 = all)"},
			deviceFlag(),
		},
		Action: runGenerate,
	}
}

// generateResult is what --json prints.
type generateResult struct {
	PromptTokenIDs []int32 `json:"prompt_token_ids"`
	TokenIDs       []int32 `json:"token_ids"`
	Text           string  `json:"text"`
	FinishReason   string  `json:"finish_reason"`
}

func runGenerate(c *cli.Context) error {
	dir := c.String("model")
	prompt, promptIDs := c.String("prompt"), c.String("prompt-ids")
	if (prompt == "") == (promptIDs == "") {
		return usageError("generate: give exactly one of --prompt and --prompt-ids")
	}
	if c.Int("max-tokens") < 0 {
		return usageError("--max-tokens: must be >= 0, got %d", c.Int("max-tokens"))
	}
	if t := c.Float64("temperature"); t < 0 || t != t {
		return usageError("--temperature: must be >= 0, got %v", t)
	}
	if c.Int("chunk-size") < 1 {
		return usageError("--chunk-size: must be >= 1, got %d", c.Int("chunk-size"))
	}
	switch c.String("dtype") {
	case "auto", "float32", "bfloat16":
	default:
		return usageError("--dtype: want auto, float32 or bfloat16, got %q", c.String("dtype"))
	}

	var tok *tokenizer.Tokenizer
	if _, err := os.Stat(dir + "/tokenizer.json"); err == nil || prompt != "" {
		t, err := tokenizer.Load(dir)
		if err != nil {
			return runError("--model: %v", err)
		}
		tok = t
	}
	var ids []int32
	if prompt != "" {
		for _, id := range tok.Encode(prompt, true) {
			ids = append(ids, int32(id))
		}
	} else {
		var err error
		if ids, err = parseIDs(promptIDs); err != nil {
			return usageError("--prompt-ids: %v", err)
		}
	}

	spec, err := config.ParseSpeculative(json.RawMessage(c.String("speculative-config")))
	if err != nil {
		return usageError("%v", err)
	}
	quantization, err := config.CPULoadQuantization(c.String("quantization"), dir)
	if err != nil {
		return usageError("generate: %v", err)
	}
	be, err := openDeviceFlag(c)
	if err != nil {
		return err
	}
	opt := glm5next.LoadOptions{DType: c.String("dtype"), Quantization: quantization, Log: logrus.Infof, MTP: spec != nil}
	if isatty.IsTerminal(os.Stderr.Fd()) {
		opt.Progress = os.Stderr
	}
	m, err := glm5next.Load(be, dir, opt)
	if err != nil {
		return runError("%v", err)
	}
	gen, _, err := config.LoadGeneration(dir)
	if err != nil {
		return runError("%v", err)
	}
	eos := gen.EOSTokenID
	if len(eos) == 0 {
		eos = m.Config().EOSTokenID
	}
	k := 0
	if spec != nil {
		k = spec.NumSpeculativeTokens
		logSpeculative(spec)
	}
	out, finish, err := generateOne(m, ids, eos, k, c)
	if err != nil {
		return runError("%v", err)
	}
	res := generateResult{PromptTokenIDs: ids, TokenIDs: out, FinishReason: finish}
	if res.TokenIDs == nil {
		res.TokenIDs = []int32{}
	}
	if tok != nil {
		gen := make([]int, 0, len(res.TokenIDs))
		for i, id := range res.TokenIDs {
			if res.FinishReason == "stop" && i == len(res.TokenIDs)-1 {
				break // the stop token is not part of the text, as in vLLM
			}
			gen = append(gen, int(id))
		}
		res.Text = tok.Decode(gen, true)
	} else {
		logrus.Warnf("%s has no tokenizer.json: printing token ids only", dir)
	}
	if c.Bool("json") {
		b, _ := json.Marshal(res)
		fmt.Println(string(b))
		return nil
	}
	if tok != nil {
		fmt.Println(res.Text)
	} else {
		fmt.Println(joinIDs(res.TokenIDs))
	}
	return nil
}

func parseIDs(s string) ([]int32, error) {
	var ids []int32
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.ParseInt(f, 10, 32)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%q is not a token id", f)
		}
		ids = append(ids, int32(v))
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("no token ids in %q", s)
	}
	return ids, nil
}

func joinIDs(ids []int32) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(int(id))
	}
	return strings.Join(parts, ",")
}

// generateOne runs one request through the serving engine (scheduler,
// chunked prefill, samplers, stop rules): the path `npuserve serve` uses.
// k > 0 turns on MTP speculative decoding with k drafts per step.
func generateOne(m *glm5next.Model, prompt []int32, eos []int, k int, c *cli.Context) ([]int32, string, error) {
	maxTokens := c.Int("max-tokens")
	if maxTokens == 0 {
		return []int32{}, "length", nil
	}
	p := sampling.DefaultParams()
	p.Temperature = sampling.Ptr(c.Float64("temperature"))
	p.Seed = sampling.Ptr(c.Uint64("seed"))
	p.MaxTokens = sampling.Ptr(maxTokens)
	p.IgnoreEOS = c.Bool("ignore-eos")
	ids := make([]int32, len(eos))
	for i, id := range eos {
		ids[i] = int32(id)
	}
	const block = core.DefaultBlockSize
	total := len(prompt) + maxTokens
	e, err := core.New(m.Engine(), core.Options{
		MaxNumSeqs:           1,
		MaxNumBatchedTokens:  c.Int("chunk-size"),
		MaxModelLen:          total,
		NumBlocks:            (total+k+block-1)/block + 2, // + the drafts' lookahead
		EOSTokenIDs:          ids,
		NumSpeculativeTokens: k,
	})
	if err != nil {
		return nil, "", err
	}
	defer e.Close()
	ch, err := e.Add(&core.Request{ID: "generate", PromptTokens: prompt, Params: p})
	if err != nil {
		return nil, "", err
	}
	out := []int32{}
	finish := "length"
	for o := range ch {
		out = append(out, o.Tokens...)
		if o.Finished {
			if o.Err != nil {
				return nil, "", o.Err
			}
			finish = o.FinishReason
		}
	}
	return out, finish, nil
}

// logSpeculative reports the speculative decoding a run uses.
func logSpeculative(s *config.Speculative) {
	logrus.Infof("Speculative decoding: method %s, %d speculative tokens per step (the MTP layer drafts; the drafter runs eagerly%s)",
		s.Method, s.NumSpeculativeTokens, map[bool]string{true: ", as enforce_eager asks", false: " whatever enforce_eager says"}[s.EnforceEager])
}
