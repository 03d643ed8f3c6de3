package main

import (
	"encoding/json"
	"fmt"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/model/glm5next"
	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"
)

func evalCommand() *cli.Command {
	return &cli.Command{
		Name:  "eval",
		Usage: "compare a model with a reference, teacher forced: top-1 agreement and mean KL(reference || model)",
		Description: "Runs every token sequence of --prompts-file through both models (each sees the same tokens) and compares\n" +
			"their next-token distributions at every position. Quantized (msmodelslim) dirs are detected and loaded as such.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Usage: "model dir to evaluate", Required: true},
			&cli.StringFlag{Name: "reference", Usage: "reference model dir (e.g. the unquantized model)", Required: true},
			&cli.StringFlag{Name: "prompts-file", Usage: "JSON lines: a string (encoded with --model's tokenizer) or an array of token ids", Required: true},
			&cli.BoolFlag{Name: "json", Usage: `print {"top1_agreement": …, "mean_kl": …, "tokens": …} as the last line`},
			&cli.StringFlag{Name: "dtype", Value: "auto", Usage: "float weight dtype of both models: auto, float32 or bfloat16"},
			quantizationFlag("--model (the reference's is detected)"),
			&cli.IntFlag{Name: "threads", Value: 0, Usage: "CPU threads (0 = all)"},
			deviceFlag(),
		},
		Action: runEval,
	}
}

func runEval(c *cli.Context) error {
	switch c.String("dtype") {
	case "auto", "float32", "bfloat16":
	default:
		return usageError("--dtype: want auto, float32 or bfloat16, got %q", c.String("dtype"))
	}
	seqs, err := readSequences(c.String("prompts-file"), c.String("model"))
	if err != nil {
		return usageError("--prompts-file: %v", err)
	}
	quantization, err := config.CPULoadQuantization(c.String("quantization"), c.String("model"))
	if err != nil {
		return usageError("eval: %v", err)
	}
	be, err := openDeviceFlag(c)
	if err != nil {
		return err
	}
	opt := glm5next.LoadOptions{DType: c.String("dtype"), Log: logrus.Debugf}
	mopt := opt
	mopt.Quantization = quantization
	m, err := glm5next.Load(be, c.String("model"), mopt)
	if err != nil {
		return runError("--model: %v", err)
	}
	defer m.Close()
	ref, err := glm5next.Load(be, c.String("reference"), opt)
	if err != nil {
		return runError("--reference: %v", err)
	}
	defer ref.Close()
	r, err := glm5next.Compare(m, ref, seqs)
	if err != nil {
		return runError("%v", err)
	}
	if c.Bool("json") {
		b, _ := json.Marshal(r)
		fmt.Println(string(b))
		return nil
	}
	fmt.Printf("top-1 agreement %.4f, mean KL(reference || model) %.4g nats, over %d tokens of %d sequences\n",
		r.Top1Agreement, r.MeanKL, r.Tokens, len(seqs))
	return nil
}

// quantizationFlag is --quantization of generate and eval, with serve's
// values and meaning on the cpu backend; what names the model it applies to.
func quantizationFlag(what string) cli.Flag {
	return &cli.StringFlag{Name: "quantization", Aliases: []string{"q"},
		Usage: "weight format of " + what + ": ascend (an msmodelslim checkpoint; its quant_model_description.json says which), " +
			"w8a8, w8a8_dynamic or w8a8_mxfp8 (= mxfp8, modelopt_mxfp8; the checkpoint's model_quant_type must match), or fp8 " +
			"(default: an msmodelslim checkpoint is detected)"}
}
