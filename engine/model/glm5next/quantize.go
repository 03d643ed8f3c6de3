package glm5next

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/model/loader"
	"github.com/npuserve/npuserve/engine/safetensors"
	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/quant"
)

// Quantization of a float (or block-FP8) checkpoint into an msmodelslim
// checkpoint: quant_model_description.json, config.json, safetensors
// shards with msmodelslim's tensor names and dtypes, tokenizer files.

// QuantizeOptions configure Quantize.
type QuantizeOptions struct {
	// MTP also quantizes the MTP layer's linears like a trunk layer's
	// (its eh_proj stays FLOAT); the checkpoint must have the layer.
	// Without it the MTP tensors are copied through FLOAT.
	MTP bool
	// Scheme is W8A8_DYNAMIC, W8A8 (static: needs Calibration) or
	// W8A8_MXFP8. With W8A8 the routed experts are W8A8_DYNAMIC
	// (vllm-ascend has no static MoE method).
	Scheme quant.Scheme
	// Skip are regular expressions; linears whose module name (canonical,
	// e.g. "model.layers.3.mlp.experts.7.down_proj") matches one stay
	// FLOAT, with the rest of their fused module.
	Skip []string
	// AllLinears quantizes every linear computed by a matmul, also those
	// DefaultFloat keeps FLOAT (lm_head, the KDA gate projections, the
	// indexer's weights_proj); the router,
	// norms, mHC, conv, embeddings, kv_b_proj and the indexer's compress
	// gate stay FLOAT.
	AllLinears bool
	// Calibration are token sequences run through the float model to
	// record every linear's input range (static W8A8).
	Calibration [][]int32
	// Backend runs the calibration (nil: calibration needs none).
	Backend npu.Backend
	// MXScaleAlg is the MX scale algorithm for the weights: the zero
	// value ScaleAlgOCP, ScaleAlgRoundUp, or ScaleAlgMSE (per block, the
	// one with the smaller error; what the CLI uses).
	MXScaleAlg quant.ScaleAlg
	// ShardBytes bounds a safetensors shard (0: 4 GiB).
	ShardBytes int64
	// Progress receives a progress bar when it is a terminal.
	Progress io.Writer
	// Log receives one-line notes.
	Log func(format string, args ...any)
}

// QuantizeReport summarises a Quantize run.
type QuantizeReport struct {
	Quantized int   // linears quantized
	Float     int   // tensors written as they were
	Bytes     int64 // bytes of tensor data written
	BF16Bytes int64 // the same tensors at two bytes per element
}

// DefaultFloat reports whether a linear (canonical weight name) stays
// FLOAT under Quantize's defaults, and why: the router, norms, mHC, KDA
// gates (f_a/f_b, b, g_a/g_b) and conv, embeddings and lm_head stay
// FLOAT; KDA's q/k/v/o projections are quantized. kv_b_proj is absorbed
// into the sparse attention and the indexer's weights_proj and compress
// gate are gates.
func DefaultFloat(name string) (bool, string) {
	switch {
	case kindOf(name) != kindMatMul:
		return true, "not a linear computed by a matmul"
	case name == "lm_head.weight":
		return true, "lm_head"
	}
	for _, s := range []string{".f_a_proj.weight", ".f_b_proj.weight", ".b_proj.weight", ".g_a_proj.weight", ".g_b_proj.weight"} {
		if strings.HasSuffix(name, s) {
			return true, "KDA gate"
		}
	}
	if strings.HasSuffix(name, ".indexer.weights_proj.weight") {
		return true, "indexer head gate"
	}
	return false, ""
}

// quantPlan decides every spec's scheme for Quantize: s for the linears
// neither the defaults nor skip keep FLOAT (W8A8_DYNAMIC for routed
// experts under W8A8), with fused modules made uniform.
func quantPlan(cfg *config.ModelConfig, f weightForm, s quant.Scheme, skip []*regexp.Regexp, all, mtp bool) map[string]quant.Scheme {
	plan := map[string]quant.Scheme{}
	sp0 := specs(cfg, f)
	if mtp {
		sp0 = append(sp0, mtpSpecs(cfg, f)...)
	}
	for _, sp := range sp0 {
		sc := s
		if fl, _ := DefaultFloat(sp.name); fl && (!all || kindOf(sp.name) != kindMatMul) || len(sp.shape) != 2 || strings.HasSuffix(sp.name, ".eh_proj.weight") {
			sc = quant.Float
		}
		for _, re := range skip {
			if re.MatchString(module(sp.name)) {
				sc = quant.Float
			}
		}
		if sc == quant.W8A8 && isExpert(sp.name) {
			sc = quant.W8A8Dynamic
		}
		plan[sp.name] = sc
	}
	// A fused module is quantized only if all its shards are.
	_, groups := fusedLayerGroups(cfg, f, mtp)
	for _, g := range groups {
		if slices.ContainsFunc(g, func(n string) bool { return plan[n] == quant.Float }) {
			for _, n := range g {
				plan[n] = quant.Float
			}
		}
	}
	return plan
}

// WeightBytes computes, from the configuration alone, the weight bytes
// of the text model quantized with scheme s under Quantize's defaults
// (float tensors at two bytes per element) and of the same model in
// bf16: the memory figure of a quantized deployment.
func WeightBytes(cfg *config.ModelConfig, s quant.Scheme, all bool) (quantized, bf16 int64) {
	form := weightForm{lmHead: !cfg.TieWordEmbeddings}
	plan := quantPlan(cfg, form, s, nil, all, false)
	for _, sp := range specs(cfg, form) {
		numel := int64(1)
		for _, d := range sp.shape {
			numel *= int64(d)
		}
		bf16 += 2 * numel
		switch plan[sp.name] {
		case quant.Float:
			quantized += 2 * numel
		default:
			n, k := int64(sp.shape[0]), int64(sp.shape[1])
			quantized += quantizedBytes(plan[sp.name], n, k, 2)
		}
	}
	return quantized, bf16
}

// quantizedBytes is the checkpoint size of a quantized [n, k] linear with
// params dtype of psize bytes.
func quantizedBytes(s quant.Scheme, n, k, psize int64) int64 {
	switch s {
	case quant.W8A8Dynamic:
		return n*k + 2*n*psize
	case quant.W8A8:
		return n*k + 2*n*psize + psize + 1 + 4*n + 4*n
	case quant.W8A8MXFP8:
		return n*k + n*((k+quant.MXBlock-1)/quant.MXBlock)
	}
	return n * k * psize
}

// outTensor is one tensor of the output checkpoint: either copied from
// the input (src) or a quantized linear's piece.
type outTensor struct {
	name   string // checkpoint name
	scheme quant.Scheme
	size   int64 // bytes written
	bf16   int64 // bytes of the tensor (the float weight) in bf16
	// Float tensors: the input tensor and how to read it.
	src     string
	dt      npu.DType
	shape   []int
	rows    [2]int // row range of src when splitting fused experts (0, 0: all)
	expert  int    // expert index within a fused experts tensor (-1: none)
	dequant bool   // block-FP8 input: written as BF16
	// Quantized linears: the canonical weight name whose tensors this
	// entry writes.
	canonical string
	n, k      int
}

// Quantize reads the checkpoint in dir `in`, quantizes its linears with
// opt.Scheme and writes an msmodelslim checkpoint to `out`.
func Quantize(in, out string, opt QuantizeOptions) (*QuantizeReport, error) {
	start := time.Now()
	logf := opt.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	switch opt.Scheme {
	case quant.W8A8Dynamic, quant.W8A8MXFP8:
	case quant.W8A8:
		if len(opt.Calibration) == 0 || opt.Backend == nil {
			return nil, fmt.Errorf("glm5next: static W8A8 needs calibration sequences and a backend to run them")
		}
	default:
		return nil, fmt.Errorf("glm5next: cannot quantize to %q (want W8A8_DYNAMIC, W8A8 or W8A8_MXFP8)", opt.Scheme)
	}
	var skip []*regexp.Regexp
	for _, p := range opt.Skip {
		re, err := regexp.Compile(p)
		if err != nil {
			return nil, fmt.Errorf("glm5next: skip pattern %q: %w", p, err)
		}
		skip = append(skip, re)
	}
	if quant.HasDescription(in) {
		return nil, fmt.Errorf("glm5next: %s is already an msmodelslim checkpoint (%s)", in, quant.DescriptionFile)
	}
	if abs, _ := filepath.Abs(in); abs != "" {
		if o, _ := filepath.Abs(out); o == abs {
			return nil, fmt.Errorf("glm5next: the output dir must differ from the input dir")
		}
	}
	cfg, err := config.LoadModel(in)
	if err != nil {
		return nil, err
	}
	ck, err := safetensors.Open(in)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	layout, err := loader.DetectLayout(ck)
	if err != nil {
		return nil, err
	}
	form := detectForm(ck.Names(), cfg)
	pdt, err := paramsDType(cfg, ck)
	if err != nil {
		return nil, err
	}

	// Plan every output tensor. Fused experts are written per expert.
	splitForm := form
	splitForm.fusedExperts = false
	allSpecs := specs(cfg, splitForm)
	if opt.MTP {
		if err := checkMTP(cfg, ck.Names()); err != nil {
			return nil, err
		}
		allSpecs = append(allSpecs, mtpSpecs(cfg, splitForm)...)
	}
	plan := quantPlan(cfg, splitForm, opt.Scheme, skip, opt.AllLinears, opt.MTP)
	var outs []outTensor
	used := map[string]bool{}
	addFloat := func(o outTensor) error {
		info, ok := ck.Info(o.src)
		if !ok {
			return fmt.Errorf("%s: missing tensor %q", ck.Path(), o.src)
		}
		used[o.src] = true
		o.dt = info.DType
		if o.shape == nil {
			o.shape = info.Shape
		}
		if info.DType == npu.F8E4M3 {
			if _, ok := ck.Info(o.src + loader.ScaleSuffix); !ok {
				return fmt.Errorf("%s: F8_E4M3 tensor %q has no block scales", ck.Path(), o.src)
			}
			used[o.src+loader.ScaleSuffix] = true
			o.dt, o.dequant = npu.BF16, true
		}
		numel := int64(1)
		for _, d := range o.shape {
			numel *= int64(d)
		}
		o.size = numel * int64(o.dt.Size())
		o.bf16 = 2 * numel
		o.scheme = quant.Float
		outs = append(outs, o)
		return nil
	}
	for _, sp := range allSpecs {
		src := layout.CheckpointName(sp.name)
		o := outTensor{name: src, src: src, expert: -1}
		if form.fusedExperts && isExpert(sp.name) {
			// experts.E.{gate,up,down}_proj.weight from the fused tensors.
			rest := sp.name[strings.Index(sp.name, ".mlp.experts.")+len(".mlp.experts."):]
			var e int
			var proj string
			fmt.Sscanf(strings.Replace(rest, ".", " ", 1), "%d %s", &e, &proj)
			prefix := strings.TrimSuffix(sp.name, rest)
			o.expert = e
			I := cfg.MoEIntermediateSize
			switch proj {
			case "gate_proj.weight":
				o.src, o.rows = layout.CheckpointName(prefix+"gate_up_proj"), [2]int{0, I}
			case "up_proj.weight":
				o.src, o.rows = layout.CheckpointName(prefix+"gate_up_proj"), [2]int{I, 2 * I}
			default:
				o.src = layout.CheckpointName(prefix + "down_proj")
			}
			o.shape = sp.shape
		}
		if sc := plan[sp.name]; sc.Quantized() {
			if info, ok := ck.Info(o.src); ok {
				used[o.src] = true
				if info.DType == npu.F8E4M3 {
					used[o.src+loader.ScaleSuffix] = true
				}
			}
			o.scheme, o.canonical, o.n, o.k = sc, sp.name, sp.shape[0], sp.shape[1]
			o.size = quantizedBytes(sc, int64(o.n), int64(o.k), int64(pdt.Size()))
			o.bf16 = 2 * int64(o.n) * int64(o.k)
			outs = append(outs, o)
			continue
		}
		if err := addFloat(o); err != nil {
			return nil, err
		}
	}
	// Vision tower and MTP tensors are copied through unquantized.
	for _, n := range ck.Names() {
		if used[n] || strings.HasSuffix(n, loader.ScaleSuffix) && used[strings.TrimSuffix(n, loader.ScaleSuffix)] {
			continue
		}
		if strings.HasPrefix(n, "model.visual.") || isMTPName(n, layout, cfg.NumHiddenLayers) {
			if err := addFloat(outTensor{name: n, src: n, expert: -1}); err != nil {
				return nil, err
			}
			continue
		}
		if strings.HasSuffix(n, loader.ScaleSuffix) {
			continue
		}
		return nil, fmt.Errorf("%s: unexpected tensor %q: no spec claims it", ck.Path(), n)
	}

	// Static W8A8: calibrate the activation ranges.
	var ranges map[string][2]float32
	if opt.Scheme == quant.W8A8 {
		if ranges, err = calibrate(in, opt, logf); err != nil {
			return nil, err
		}
	}

	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	rep := &QuantizeReport{}
	desc := &quant.Description{Version: "1.0.0", ModelQuantType: string(opt.Scheme), GroupSize: quant.MXBlock,
		Tensors: map[string]quant.Scheme{}}
	var total int64
	for _, o := range outs {
		total += o.size
	}
	bar := loader.NewBar(opt.Progress, total, "quantizing")
	shardBytes := opt.ShardBytes
	if shardBytes <= 0 {
		shardBytes = 4 << 30
	}
	shards := splitShards(outs, shardBytes)
	weightMap := map[string]string{}
	for si, sh := range shards {
		file := "model.safetensors"
		if len(shards) > 1 {
			file = fmt.Sprintf("model-%05d-of-%05d.safetensors", si+1, len(shards))
		}
		var mu sync.Mutex
		var wts []safetensors.WriteTensor
		var g errgroup.Group
		g.SetLimit(runtime.GOMAXPROCS(0))
		for _, o := range sh {
			g.Go(func() error {
				ts, err := produce(ck, o, pdt, ranges, opt)
				if err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				wts = append(wts, ts...)
				for _, t := range ts {
					desc.Tensors[t.Name] = o.scheme
					weightMap[t.Name] = file
					rep.Bytes += int64(len(t.Data))
				}
				rep.BF16Bytes += o.bf16
				if o.scheme.Quantized() {
					rep.Quantized++
				} else {
					rep.Float++
				}
				if bar != nil {
					bar.Add64(o.size)
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return nil, err
		}
		if err := safetensors.Write(filepath.Join(out, file), wts, map[string]string{"format": "pt"}); err != nil {
			return nil, err
		}
	}
	if bar != nil {
		bar.Finish()
		fmt.Fprintln(opt.Progress)
	}
	if len(shards) > 1 {
		idx, _ := json.MarshalIndent(map[string]any{"metadata": map[string]any{"total_size": rep.Bytes}, "weight_map": weightMap}, "", "  ")
		if err := os.WriteFile(filepath.Join(out, safetensors.IndexFile), append(idx, '\n'), 0o644); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(out, quant.DescriptionFile), desc.Marshal(), 0o644); err != nil {
		return nil, err
	}
	if err := writeQuantConfig(in, out, opt.Scheme); err != nil {
		return nil, err
	}
	if err := copyAuxFiles(in, out); err != nil {
		return nil, err
	}
	logf("quantized %d linears to %s (%d tensors kept float) in %v: %.1f MiB of weights, %.3f of bf16",
		rep.Quantized, opt.Scheme, rep.Float, time.Since(start).Round(time.Millisecond),
		float64(rep.Bytes)/(1<<20), float64(rep.Bytes)/float64(max(rep.BF16Bytes, 1)))
	return rep, nil
}

// paramsDType is vllm-ascend's params_dtype for the model: config.json's
// dtype, else the dtype of the first float matrix.
func paramsDType(cfg *config.ModelConfig, ck *safetensors.Checkpoint) (npu.DType, error) {
	switch cfg.Dtype {
	case "bfloat16":
		return npu.BF16, nil
	case "float16":
		return npu.F16, nil
	case "float32":
		return npu.F32, nil
	}
	for _, n := range ck.Names() {
		if info, _ := ck.Info(n); info.DType == npu.BF16 || info.DType == npu.F16 {
			return info.DType, nil
		}
	}
	return npu.BF16, nil
}

// splitShards groups outputs into shards of at most limit bytes (a
// bigger tensor gets a shard of its own), in order.
func splitShards(outs []outTensor, limit int64) [][]outTensor {
	var shards [][]outTensor
	var cur []outTensor
	var size int64
	for _, o := range outs {
		if len(cur) > 0 && size+o.size > limit {
			shards = append(shards, cur)
			cur, size = nil, 0
		}
		cur = append(cur, o)
		size += o.size
	}
	if len(cur) > 0 {
		shards = append(shards, cur)
	}
	return shards
}

// produce reads and, for a linear, quantizes one output entry.
func produce(ck *safetensors.Checkpoint, o outTensor, pdt npu.DType, ranges map[string][2]float32, opt QuantizeOptions) ([]safetensors.WriteTensor, error) {
	if !o.scheme.Quantized() {
		data, err := ck.Data(o.src)
		if err != nil {
			return nil, err
		}
		if o.dequant || o.expert >= 0 {
			f, err := readFloats(ck, o)
			if err != nil {
				return nil, err
			}
			data = npu.EncodeFloats(f, o.dt)
		}
		return []safetensors.WriteTensor{{Name: o.name, DType: o.dt, Shape: o.shape, Data: data}}, nil
	}
	w, err := readFloats(ck, o)
	if err != nil {
		return nil, err
	}
	lo := quant.LinearOptions{ParamsDType: pdt, GroupSize: quant.MXBlock, ScaleAlg: opt.MXScaleAlg}
	if o.scheme == quant.W8A8 {
		r, ok := ranges[module(o.canonical)]
		if !ok {
			return nil, fmt.Errorf("glm5next: no calibration data reached %s", module(o.canonical))
		}
		lo.ActMin, lo.ActMax = r[0], r[1]
	}
	ts, err := quant.QuantizeLinear(w, o.n, o.k, o.scheme, lo)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.name, err)
	}
	mod := module(o.name)
	out := make([]safetensors.WriteTensor, len(ts))
	for i, t := range ts {
		out[i] = safetensors.WriteTensor{Name: mod + "." + t.Suffix, DType: t.DType, Shape: t.Shape, Data: t.Data}
	}
	return out, nil
}

// readFloats reads the float32 values of an output entry's source: F32,
// BF16 or F16 data, or block-FP8 data dequantised with its scales; one
// expert's rows of a fused experts tensor when o.expert >= 0.
func readFloats(ck *safetensors.Checkpoint, o outTensor) ([]float32, error) {
	info, ok := ck.Info(o.src)
	if !ok {
		return nil, fmt.Errorf("%s: missing tensor %q", ck.Path(), o.src)
	}
	data, err := ck.Data(o.src)
	if err != nil {
		return nil, err
	}
	rowLen := info.Shape[len(info.Shape)-1]
	sz := info.DType.Size()
	if o.expert >= 0 { // [E, R, C] -> expert e, rows o.rows (or all)
		R := info.Shape[1]
		r0, r1 := 0, R
		if o.rows != [2]int{} {
			r0, r1 = o.rows[0], o.rows[1]
		}
		if info.DType == npu.F8E4M3 {
			return nil, fmt.Errorf("%s: block-FP8 fused expert tensor %q is not supported", ck.Path(), o.src)
		}
		base := (o.expert*R + r0) * rowLen * sz
		data = data[base : base+(r1-r0)*rowLen*sz]
	}
	if info.DType == npu.F8E4M3 {
		sc, err := ck.Data(o.src + loader.ScaleSuffix)
		if err != nil {
			return nil, err
		}
		si, _ := ck.Info(o.src + loader.ScaleSuffix)
		scales, err := quant.DecodeFloats(sc, si.DType)
		if err != nil {
			return nil, err
		}
		rows := len(data) / rowLen
		sCols := (rowLen + loader.FP8Block - 1) / loader.FP8Block
		out := make([]float32, len(data))
		for r := range rows {
			for c := range rowLen {
				out[r*rowLen+c] = quant.E4M3ToF32(data[r*rowLen+c]) * scales[(r/loader.FP8Block)*sCols+c/loader.FP8Block]
			}
		}
		return out, nil
	}
	return quant.DecodeFloats(data, info.DType)
}

// calibrate runs the calibration sequences through the float model and
// returns every linear module's input range.
func calibrate(in string, opt QuantizeOptions, logf func(string, ...any)) (map[string][2]float32, error) {
	// The float model (a block-FP8 input dequantised): what the quantized
	// weights are made from.
	m, err := Load(opt.Backend, in, LoadOptions{Log: logf, Quantization: "none"})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	ranges := map[string][2]float32{}
	var host []byte
	observe := func(modules []string, x *npu.Tensor) {
		if cap(host) < x.Bytes() {
			host = make([]byte, x.Bytes())
		}
		host = host[:x.Bytes()]
		m.be.Download(host, x)
		lo, hi := float32(math.Inf(1)), float32(math.Inf(-1))
		for i := 0; i < len(host); i += 4 {
			v := math.Float32frombits(binary.LittleEndian.Uint32(host[i:]))
			lo, hi = min(lo, v), max(hi, v)
		}
		for _, mod := range modules {
			r, ok := ranges[mod]
			if !ok {
				r = [2]float32{lo, hi}
			}
			ranges[mod] = [2]float32{min(r[0], lo), max(r[1], hi)}
		}
	}
	tokens := 0
	for i, s := range opt.Calibration {
		if _, err := m.SequenceLogits(s, observe); err != nil {
			return nil, fmt.Errorf("calibration sequence %d: %w", i, err)
		}
		tokens += len(s)
	}
	logf("calibrated %d linear inputs on %d sequences (%d tokens)", len(ranges), len(opt.Calibration), tokens)
	return ranges, nil
}

// writeQuantConfig writes out/config.json: the input's config.json
// without its quantization_config (which would describe the input's
// block-FP8 format, and which vLLM would take as the quantization
// description) and with msmodelslim's "quantize" key naming the scheme.
func writeQuantConfig(in, out string, s quant.Scheme) error {
	b, err := os.ReadFile(filepath.Join(in, "config.json"))
	if err != nil {
		return err
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("%s/config.json: %w", in, err)
	}
	delete(raw, "quantization_config")
	if tc, ok := raw["text_config"]; ok {
		var t map[string]json.RawMessage
		if json.Unmarshal(tc, &t) == nil {
			delete(t, "quantization_config")
			raw["text_config"], _ = json.Marshal(t)
		}
	}
	raw["quantize"], _ = json.Marshal(strings.ToLower(string(s)))
	outb, err := json.MarshalIndent(raw, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "config.json"), append(outb, '\n'), 0o644)
}

// copyAuxFiles copies every regular file of in except the weights,
// their index, config.json and any description (tokenizer, generation
// config, chat template, processor configs).
func copyAuxFiles(in, out string) error {
	ents, err := os.ReadDir(in)
	if err != nil {
		return err
	}
	for _, e := range ents {
		n := e.Name()
		if !e.Type().IsRegular() || strings.HasSuffix(n, ".safetensors") || n == safetensors.IndexFile ||
			n == "config.json" || n == quant.DescriptionFile {
			continue
		}
		b, err := os.ReadFile(filepath.Join(in, n))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, n), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
