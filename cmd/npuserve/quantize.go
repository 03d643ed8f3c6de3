package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/mattn/go-isatty"
	"github.com/npuserve/npuserve/engine/model/glm5next"
	"github.com/npuserve/npuserve/engine/tokenizer"
	"github.com/npuserve/npuserve/quant"
	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"
)

func quantizeCommand() *cli.Command {
	return &cli.Command{
		Name:  "quantize",
		Usage: "write an msmodelslim (--quantization ascend) checkpoint: W8A8_DYNAMIC, W8A8 or W8A8_MXFP8",
		Description: "Quantizes the linears of a float (or block-FP8) glm5_next checkpoint and writes a directory laid out as\n" +
			"msmodelslim writes it: quant_model_description.json, config.json, safetensors with msmodelslim's tensor names\n" +
			"and dtypes, and the tokenizer files. The router, norms, mHC, KDA gates and conv, embeddings and lm_head stay\n" +
			"FLOAT (and KDA q/k/v, which vllm-ascend fuses with the gate projections). w8a8 (static) calibrates every\n" +
			"linear's input range by running the model on --calib-prompts; its routed experts are w8a8_dynamic.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Usage: "input model dir (config.json, *.safetensors)", Required: true},
			&cli.StringFlag{Name: "out", Usage: "output dir", Required: true},
			&cli.StringFlag{Name: "scheme", Usage: "w8a8_dynamic, w8a8 or w8a8_mxfp8", Required: true},
			&cli.StringFlag{Name: "calib-prompts", Usage: "calibration prompts, JSON lines: a string or an array of token ids (required for w8a8)"},
			&cli.StringSliceFlag{Name: "skip", Usage: "keep linears whose module name matches this regular expression FLOAT (repeatable), e.g. 'layers\\.0\\.' or 'shared_experts'"},
			&cli.BoolFlag{Name: "all-linears", Usage: "also quantize lm_head, the KDA gate projections and the indexer weights_proj"},
			&cli.BoolFlag{Name: "mtp", Usage: "also quantize the MTP layer's linears like a trunk layer's (eh_proj stays FLOAT; default: the MTP layer is copied through FLOAT)"},
			&cli.StringFlag{Name: "mx-scale-alg", Value: "mse", Usage: "MXFP8 weight scales: mse (per block the better of ocp and roundup), ocp or roundup"},
			&cli.IntFlag{Name: "threads", Value: 0, Usage: "CPU threads for calibration (0 = all)"},
			deviceFlag(),
		},
		Action: runQuantize,
	}
}

func runQuantize(c *cli.Context) error {
	s, err := quant.ParseScheme(c.String("scheme"))
	if err != nil || !s.Quantized() {
		return usageError("--scheme: want w8a8_dynamic, w8a8 or w8a8_mxfp8, got %q", c.String("scheme"))
	}
	var alg quant.ScaleAlg
	switch c.String("mx-scale-alg") {
	case "mse":
		alg = quant.ScaleAlgMSE
	case "ocp":
		alg = quant.ScaleAlgOCP
	case "roundup":
		alg = quant.ScaleAlgRoundUp
	default:
		return usageError("--mx-scale-alg: want mse, ocp or roundup, got %q", c.String("mx-scale-alg"))
	}
	in, out := c.String("model"), c.String("out")
	opt := glm5next.QuantizeOptions{
		Scheme: s, Skip: c.StringSlice("skip"), AllLinears: c.Bool("all-linears"), MTP: c.Bool("mtp"), MXScaleAlg: alg,
		Log: logrus.Infof,
	}
	if isatty.IsTerminal(os.Stderr.Fd()) {
		opt.Progress = os.Stderr
	}
	if p := c.String("calib-prompts"); p != "" {
		seqs, err := readSequences(p, in)
		if err != nil {
			return usageError("--calib-prompts: %v", err)
		}
		opt.Calibration = seqs
		if opt.Backend, err = openDeviceFlag(c); err != nil {
			return err
		}
	} else if s == quant.W8A8 {
		return usageError("--scheme w8a8 (static) needs --calib-prompts to calibrate the activation ranges")
	}
	rep, err := glm5next.Quantize(in, out, opt)
	if err != nil {
		return runError("%v", err)
	}
	fmt.Printf("wrote %s: %d linears %s, %d tensors FLOAT, %.1f MiB of weights (%.3f of bf16)\n",
		out, rep.Quantized, s, rep.Float, float64(rep.Bytes)/(1<<20), float64(rep.Bytes)/float64(max(rep.BF16Bytes, 1)))
	return nil
}

// readSequences reads a prompts file: JSON lines, each a string (encoded
// with the tokenizer of dir, special tokens added as generate does) or an
// array of token ids. Blank lines are skipped.
func readSequences(path, dir string) ([][]int32, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var tok *tokenizer.Tokenizer
	return parseSequences(f, path, func() (*tokenizer.Tokenizer, error) {
		if tok != nil {
			return tok, nil
		}
		t, err := tokenizer.Load(dir)
		if err != nil {
			return nil, fmt.Errorf("a text prompt needs the tokenizer of %s: %v", filepath.Clean(dir), err)
		}
		tok = t
		return tok, nil
	})
}

// parseSequences is readSequences on r (named path in errors); tok gives
// the tokenizer the first text prompt needs.
func parseSequences(r io.Reader, path string, tok func() (*tokenizer.Tokenizer, error)) ([][]int32, error) {
	var seqs [][]int32
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var v any
		if err := json.Unmarshal([]byte(text), &v); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, line, err)
		}
		switch x := v.(type) {
		case string:
			t, err := tok()
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %v", path, line, err)
			}
			var ids []int32
			for _, id := range t.Encode(x, true) {
				ids = append(ids, int32(id))
			}
			if len(ids) == 0 {
				return nil, fmt.Errorf("%s:%d: the prompt encodes to no tokens", path, line)
			}
			seqs = append(seqs, ids)
		case []any:
			if len(x) == 0 {
				return nil, fmt.Errorf("%s:%d: empty token array", path, line)
			}
			ids := make([]int32, len(x))
			for i, e := range x {
				n, ok := e.(float64)
				if !ok || n != float64(int32(n)) || n < 0 {
					return nil, fmt.Errorf("%s:%d: element %d (%v) is not a token id", path, line, i, e)
				}
				ids[i] = int32(n)
			}
			seqs = append(seqs, ids)
		default:
			return nil, fmt.Errorf("%s:%d: want a string or an array of token ids, got %s", path, line, text)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if len(seqs) == 0 {
		return nil, fmt.Errorf("%s: no prompts", path)
	}
	return seqs, nil
}
