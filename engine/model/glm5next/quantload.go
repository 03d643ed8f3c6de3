package glm5next

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/model/loader"
	"github.com/npuserve/npuserve/engine/safetensors"
	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/quant"
)

// Loading msmodelslim checkpoints (--quantization ascend): every linear
// takes its scheme from quant_model_description.json and brings the
// tensors serving-compat.md §4 lists (weight, weight_scale, weight_offset,
// input_scale, input_offset, quant_bias, deq_scale; MX E8M0 scales
// [out, in/32]); routed experts are per expert in the checkpoint and are
// stacked for the grouped MoE op. Everything else loads as in a float
// checkpoint.

// weightKind says how the model consumes a weight.
type weightKind int

const (
	kindOther   weightKind = iota // norms, biases, mHC, conv, gates' parameters: FLOAT only
	kindMatMul                    // a linear computed with MatMul / MatMulQ / MoEQ
	kindDequant                   // a 2-D weight another op consumes: dequantised on load
)

// matmulSuffixes are the canonical name suffixes of the model's linears.
var matmulSuffixes = []string{
	".q_proj.weight", ".k_proj.weight", ".v_proj.weight", ".f_a_proj.weight", ".f_b_proj.weight",
	".b_proj.weight", ".g_a_proj.weight", ".g_b_proj.weight", ".o_proj.weight",
	".q_a_proj.weight", ".q_b_proj.weight", ".kv_a_proj_with_mqa.weight",
	".indexer.wq_b.weight", ".indexer.wk.weight", ".indexer.weights_proj.weight",
	".gate_proj.weight", ".up_proj.weight", ".down_proj.weight",
}

// kindOf classifies a canonical tensor name.
func kindOf(name string) weightKind {
	switch {
	case name == "lm_head.weight":
		return kindMatMul
	case name == "model.embed_tokens.weight",
		strings.HasSuffix(name, ".self_attn.kv_b_proj.weight"),
		strings.HasSuffix(name, ".mlp.gate.weight"):
		return kindDequant
	}
	for _, s := range matmulSuffixes {
		if strings.HasSuffix(name, s) {
			return kindMatMul
		}
	}
	return kindOther
}

// isExpert reports whether a canonical name is a routed expert's weight.
func isExpert(name string) bool { return strings.Contains(name, ".mlp.experts.") }

// hostQuant is a quantized linear on the host, in checkpoint form: one
// linear [n, k], or after stacking E experts.
type hostQuant struct {
	scheme   quant.Scheme
	module   string // checkpoint module, for messages
	n, k     int    // per expert
	experts  int    // 0 for a linear
	weight   []byte // [E][n][k] int8 or E4M3
	scale    []float32
	mx       []byte // [E][n][nb] E8M0
	group    int
	inScale  float32
	inOffset int32
	qbias    []int32
	deq      []float32
}

// concatQuant concatenates linears along their output rows (fused
// q|k|v, gate|up). Static parts share one activation quantization, which
// the loader checked.
func concatQuant(parts []*hostQuant) *hostQuant {
	if len(parts) == 1 {
		return parts[0]
	}
	out := *parts[0]
	out.weight, out.scale, out.mx, out.qbias, out.deq = nil, nil, nil, nil, nil
	out.n = 0
	for i, p := range parts {
		if p.scheme != out.scheme || p.k != out.k {
			panic(fmt.Sprintf("glm5next: cannot fuse %s (%s [%d,%d]) with %s (%s)", p.module, p.scheme, p.n, p.k, out.module, out.scheme))
		}
		if p.scheme == quant.FP8Block128 && i < len(parts)-1 && p.n%npu.FP8Block != 0 {
			// The scale rows of 128-row blocks would straddle two parts
			// (decideFP8 dequantises such groups).
			panic(fmt.Sprintf("glm5next: cannot fuse %s [%d,%d] (%s): %d rows is not a multiple of the %d-row block", p.module, p.n, p.k, p.scheme, p.n, npu.FP8Block))
		}
		out.n += p.n
		out.weight = append(out.weight, p.weight...)
		out.scale = append(out.scale, p.scale...)
		out.mx = append(out.mx, p.mx...)
		out.qbias = append(out.qbias, p.qbias...)
		out.deq = append(out.deq, p.deq...)
	}
	return &out
}

// stackQuant stacks equally shaped linears as experts.
func stackQuant(parts []*hostQuant) *hostQuant {
	out := concatQuant(parts)
	if len(parts) == 1 {
		c := *out
		out = &c
	}
	out.n = parts[0].n
	out.experts = len(parts)
	return out
}

// uploadQuant makes the device weight of hq (E experts, 0 for a linear).
func (a *assembler) uploadQuant(hq *hostQuant, E int) *npu.QuantWeight {
	lead := []int{hq.n}
	if E > 0 {
		lead = []int{E, hq.n}
	}
	own := a.own
	w := &npu.QuantWeight{Scheme: hq.scheme.QScheme(), GroupSize: hq.group, ScaleAlg: a.mxAlg}
	switch hq.scheme {
	case quant.W8A8Dynamic:
		w.Weight = own(a.be.FromHost(npu.I8, hq.weight, append(lead, hq.k)...))
		w.Scale = own(a.be.FromHost(npu.F32, npu.EncodeFloats(hq.scale, npu.F32), lead...))
	case quant.W8A8:
		w.Weight = own(a.be.FromHost(npu.I8, hq.weight, hq.n, hq.k))
		w.InputScale, w.InputOffset = hq.inScale, hq.inOffset
		w.QuantBias = own(a.be.FromHost(npu.I32, npu.EncodeInt32s(hq.qbias), hq.n))
		w.DeqScale = own(a.be.FromHost(npu.F32, npu.EncodeFloats(hq.deq, npu.F32), hq.n))
	case quant.W8A8MXFP8:
		w.Weight = own(a.be.FromHost(npu.F8E4M3, hq.weight, append(lead, hq.k)...))
		w.Scale = own(a.be.FromHost(npu.U8, hq.mx, append(lead, (hq.k+hq.group-1)/hq.group)...))
	case quant.FP8Block128:
		w.Weight = own(a.be.FromHost(npu.F8E4M3, hq.weight, append(lead, hq.k)...))
		blocks := []int{(hq.n + hq.group - 1) / hq.group, (hq.k + hq.group - 1) / hq.group}
		if E > 0 {
			blocks = append([]int{E}, blocks...)
		}
		w.Scale = own(a.be.FromHost(npu.F32, npu.EncodeFloats(hq.scale, npu.F32), blocks...))
	default:
		panic(fmt.Sprintf("glm5next: %s: cannot upload scheme %s", hq.module, hq.scheme))
	}
	if err := w.Check(); err != nil {
		panic(fmt.Sprintf("glm5next: %s: %v", hq.module, err))
	}
	return w
}

// qloader resolves a checkpoint against the model's specs and the
// description.
type qloader struct {
	ck     *safetensors.Checkpoint
	layout loader.Layout
	desc   *quant.Description
	cfg    *config.ModelConfig
	mode   string // dtype policy of float matrices
	log    func(string, ...any)
	// par is the rank's placement (nil: a single rank); biasRank says
	// whether this rank adds the folded quant_bias of a row-parallel
	// static W8A8 linear (TP rank 0 only, as vllm-ascend does).
	par      *parallel
	biasRank bool

	claimed map[string]bool
	errs    []error
}

func (q *qloader) errf(format string, args ...any) {
	q.errs = append(q.errs, fmt.Errorf(format, args...))
}

// schemeOf looks up the scheme of a canonical weight name: under its
// checkpoint name, its flat name or vLLM's nested module name
// ("language_model.model.layers..."). A weight the description does not
// list is FLOAT (vllm-ascend's lookup returns None for it).
func (q *qloader) schemeOf(canonical string) (quant.Scheme, string) {
	for _, k := range []string{q.layout.CheckpointName(canonical), canonical, "language_model." + canonical} {
		if s, ok := q.desc.Tensors[k]; ok {
			return s, k
		}
	}
	return quant.Float, ""
}

// resolveKey maps a description key to the checkpoint tensor it names.
func (q *qloader) resolveKey(key string) (string, bool) {
	cands := []string{key, q.layout.CheckpointName(key)}
	if rest, ok := strings.CutPrefix(key, "language_model."); ok {
		cands = append(cands, rest, q.layout.CheckpointName(rest))
	}
	for _, c := range cands {
		if _, ok := q.ck.Info(c); ok {
			return c, true
		}
	}
	return "", false
}

// tensor fetches checkpoint tensor name with the dtypes and one of the
// shapes allowed, claiming it.
func (q *qloader) tensor(name string, dts []npu.DType, shapes ...[]int) (safetensors.TensorInfo, []byte, bool) {
	info, ok := q.ck.Info(name)
	if !ok {
		q.errf("%s: missing tensor %q (want %v %v)", q.ck.Path(), name, dts, shapes[0])
		return info, nil, false
	}
	q.claimed[name] = true
	if !slices.Contains(dts, info.DType) {
		q.errf("%s: tensor %q has dtype %s, want one of %v", info.File, name, info.DTypeName, dts)
		return info, nil, false
	}
	okShape := false
	for _, s := range shapes {
		okShape = okShape || npu.SameShape(info.Shape, s)
	}
	if !okShape {
		q.errf("%s: tensor %q has shape %v, want %v", info.File, name, info.Shape, shapes[0])
		return info, nil, false
	}
	b, err := q.ck.Data(name)
	if err != nil {
		q.errs = append(q.errs, err)
		return info, nil, false
	}
	return info, b, true
}

var floatDTypes = []npu.DType{npu.F32, npu.BF16, npu.F16}

// tensorCut is tensor, then only the part cut selects (nil: all of it;
// the shape check is on the whole tensor).
func (q *qloader) tensorCut(name string, cut *loader.Slice, dts []npu.DType, shapes ...[]int) (safetensors.TensorInfo, []byte, bool) {
	info, b, ok := q.tensor(name, dts, shapes...)
	if ok && cut != nil {
		b = cut.Cut(b, info.Shape, info.DType.Size())
	}
	return info, b, ok
}

// floats reads a float tensor, or the rows of it that rows selects (nil:
// all), as float32 (see tensor).
func (q *qloader) floats(name string, rows *loader.Slice, dts []npu.DType, shapes ...[]int) ([]float32, bool) {
	info, b, ok := q.tensorCut(name, rows, dts, shapes...)
	if !ok {
		return nil, false
	}
	f, err := quant.DecodeFloats(b, info.DType)
	if err != nil {
		q.errf("%s: tensor %q: %v", info.File, name, err)
		return nil, false
	}
	return f, true
}

// readQuant reads the tensors of a quantized linear ckName ("<module>.weight")
// of shape [n, k] with scheme s, or this rank's part sl of it (nil: all of
// it), reading only that part:
//
//   - a column-parallel part (sl cuts dimension 0, the output channels)
//     takes those rows of the weight and of every per-output-channel
//     tensor (weight_scale, weight_offset, quant_bias, deq_scale, the MX
//     scale rows); static W8A8's per-tensor input_scale/input_offset are
//     whole.
//   - a row-parallel part (sl cuts dimension 1, the input) takes those
//     weight columns (for MXFP8 whole 32-element blocks and their scale
//     columns) and every per-output tensor whole, except that static
//     W8A8's quant_bias is added by TP rank 0 only: it folds the bias and
//     the zero-point correction -input_offset·Σ_k q[n,k] over the whole
//     input, and the TP all-reduce sums the ranks' partial outputs, so
//     Σ_r (Σ_{k∈r} xq·q)·deq + quant_bias·deq is the single-rank
//     (Σ_k xq·q + quant_bias)·deq exactly (per-tensor activation
//     quantization is elementwise, so each rank's xq is the same as in
//     the single-rank input).
func (q *qloader) readQuant(ckName string, s quant.Scheme, n, k int, sl *loader.Slice) *hostQuant {
	mod := module(ckName)
	hq := &hostQuant{scheme: s, module: mod, n: n, k: k, group: q.desc.GroupSize}
	nerr := len(q.errs)
	col := [][]int{{n, 1}, {n}}
	var rows *loader.Slice // the per-output-channel tensors' part
	if sl != nil {
		shape, err := sl.Shape([]int{n, k})
		if err != nil {
			q.errf("%s: tensor %q: cannot take part %v of a quantized linear [%d, %d]: %v", q.ck.Path(), ckName, sl, n, k, err)
			return nil
		}
		hq.n, hq.k = shape[0], shape[1]
		if sl.Dim == 0 {
			rows = sl
		}
	}
	switch s {
	case quant.W8A8, quant.W8A8Dynamic:
		_, hq.weight, _ = q.tensorCut(ckName, sl, []npu.DType{npu.I8}, []int{n, k})
		hq.scale, _ = q.floats(mod+".weight_scale", rows, floatDTypes, col...)
		if off, ok := q.floats(mod+".weight_offset", rows, floatDTypes, col...); ok {
			if slices.ContainsFunc(off, func(v float32) bool { return v != 0 }) {
				q.log("%s.weight_offset is non-zero: computing with symmetric weights as vllm-ascend's %s kernels do (offsets ignored)", mod, s)
			}
		}
		if s == quant.W8A8 {
			in, ok := q.floats(mod+".input_scale", nil, floatDTypes, []int{1}, []int{})
			if ok {
				hq.inScale = in[0]
				if !(hq.inScale > 0) || math.IsInf(float64(hq.inScale), 0) {
					q.errf("%s: tensor %q: input scale %v must be positive and finite", q.ck.Path(), mod+".input_scale", hq.inScale)
				}
			}
			if info, b, ok := q.tensor(mod+".input_offset", append([]npu.DType{npu.I8}, floatDTypes...), []int{1}, []int{}); ok {
				if info.DType == npu.I8 {
					hq.inOffset = int32(int8(b[0]))
				} else if f, err := quant.DecodeFloats(b, info.DType); err == nil {
					if f[0] != float32(math.Round(float64(f[0]))) || f[0] < -128 || f[0] > 127 {
						q.errf("%s: tensor %q: offset %v is not an int8 value", info.File, mod+".input_offset", f[0])
					}
					hq.inOffset = int32(f[0])
				}
			}
			if _, b, ok := q.tensorCut(mod+".quant_bias", rows, []npu.DType{npu.I32}, []int{n}); ok {
				hq.qbias = make([]int32, hq.n)
				if sl == nil || sl.Dim == 0 || q.biasRank {
					for i := range hq.qbias {
						hq.qbias[i] = int32(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24)
					}
				}
			}
			hq.deq, _ = q.floats(mod+".deq_scale", rows, []npu.DType{npu.F32, npu.I64}, []int{n}, []int{n, 1})
		}
	case quant.W8A8MXFP8:
		nb := (k + hq.group - 1) / hq.group
		scaleCut := rows
		if sl != nil && sl.Dim == 1 {
			var err error
			if scaleCut, err = mxBlocks(sl, k, hq.group); err != nil {
				tp := 1
				if q.par != nil {
					tp = q.par.TPSize
				}
				q.errf("%s: tensor %q (W8A8_MXFP8, input dimension %d): tensor parallel size %d cannot split it: %v; the row-parallel slices must keep whole MX blocks (choose a TP size whose slices of %d are multiples of %d, or keep this module FLOAT)",
					q.ck.Path(), ckName, k, tp, err, k, hq.group)
				return nil
			}
		}
		_, hq.weight, _ = q.tensorCut(ckName, sl, []npu.DType{npu.F8E4M3}, []int{n, k})
		_, hq.mx, _ = q.tensorCut(mod+".weight_scale", scaleCut, []npu.DType{npu.U8}, []int{n, nb})
	default:
		q.errf("%s: tensor %q: scheme %s cannot be loaded", q.ck.Path(), ckName, s)
	}
	if len(q.errs) > nerr {
		return nil
	}
	return hq
}

// mxBlocks is the part of an MX scale tensor [n, ceil(k/group)] that
// holds the scales of the input columns sl (dimension 1) selects: every
// range must start on a block boundary and end on one (or at k, the last
// range only), so that the slice is made of whole blocks.
func mxBlocks(sl *loader.Slice, k, group int) (*loader.Slice, error) {
	out := &loader.Slice{Dim: 1}
	for i, r := range sl.Ranges {
		last := i == len(sl.Ranges)-1
		if r.Lo%group != 0 || (r.Hi%group != 0 && !(last && r.Hi == k)) {
			return nil, fmt.Errorf("its slice [%d:%d] does not start and end on multiples of the %d-element MX block", r.Lo, r.Hi, group)
		}
		out.Ranges = append(out.Ranges, loader.Range{Lo: r.Lo / group, Hi: (r.Hi + group - 1) / group})
	}
	return out, nil
}

// claimSkipped claims, without reading them, the tensors of a linear
// another expert-parallel rank loads (its weight checked for presence and
// shape).
func (q *qloader) claimSkipped(ckName string, s quant.Scheme, shape []int) {
	info, ok := q.ck.Info(ckName)
	if !ok {
		q.errf("%s: missing tensor %q (want shape %v)", q.ck.Path(), ckName, shape)
		return
	}
	q.claimed[ckName] = true
	if !npu.SameShape(info.Shape, shape) {
		q.errf("%s: tensor %q has shape %v, want %v", info.File, ckName, info.Shape, shape)
	}
	if !s.Quantized() {
		return
	}
	mod := module(ckName)
	for _, suf := range []string{".weight_scale", ".weight_offset", ".input_scale", ".input_offset", ".quant_bias", ".deq_scale"} {
		if _, ok := q.ck.Info(mod + suf); ok {
			q.claimed[mod+suf] = true
		}
	}
}

// fusedGroups lists vllm-ascend's fused modules of glm5_next (its
// packed_modules_mapping): shards that must share one scheme, by
// canonical weight names, with the fused module's name for messages.
func fusedGroups(c *config.ModelConfig, f weightForm) (names []string, groups [][]string) {
	return fusedLayerGroups(c, f, false)
}

// fusedLayerGroups is fusedGroups, with the MTP layer's (a DSA + MoE
// block at index num_hidden_layers) when mtp.
func fusedLayerGroups(c *config.ModelConfig, f weightForm, mtp bool) (names []string, groups [][]string) {
	add := func(name string, g ...string) {
		names = append(names, name)
		groups = append(groups, g)
	}
	n := c.NumHiddenLayers
	if mtp {
		n++
	}
	for l := range n {
		p := layerPrefix(l)
		s := p + "self_attn."
		isMTP := l == c.NumHiddenLayers
		if isMTP || c.IsDSA(l) {
			add(s+"fused_qkv_a_proj", s+"q_a_proj.weight", s+"kv_a_proj_with_mqa.weight")
		} else {
			// KDA's q/k/v feed one short conv and run as one linear.
			add(s+"qkv_proj", s+"q_proj.weight", s+"k_proj.weight", s+"v_proj.weight")
		}
		mp := p + "mlp."
		if isMTP || c.IsMoE(l) {
			if !f.fusedExperts {
				var ex []string
				for e := range c.NRoutedExperts {
					ep := fmt.Sprintf("%sexperts.%d.", mp, e)
					ex = append(ex, ep+"gate_proj.weight", ep+"up_proj.weight", ep+"down_proj.weight")
				}
				add(mp+"experts", ex...)
			}
			if c.NSharedExperts > 0 {
				add(mp+"shared_experts.gate_up_proj", mp+"shared_experts.gate_proj.weight", mp+"shared_experts.up_proj.weight")
			}
		} else {
			add(mp+"gate_up_proj", mp+"gate_proj.weight", mp+"up_proj.weight")
		}
	}
	return names, groups
}

// loadQuantized builds the model from an msmodelslim checkpoint.
func loadQuantized(be npu.Backend, cfg *config.ModelConfig, ck *safetensors.Checkpoint, desc *quant.Description, opt LoadOptions) (*Model, error) {
	start := time.Now()
	if err := schemesSupported(be, desc); err != nil {
		return nil, err
	}
	m, err := newModel(be, cfg)
	if err != nil {
		return nil, err
	}
	if err := m.setParallel(opt.Parallel); err != nil {
		return nil, err
	}
	layout, err := loader.DetectLayout(ck)
	if err != nil {
		return nil, err
	}
	mode := opt.DType
	switch mode {
	case "", "auto":
		mode = "auto"
	case "float32", "bfloat16":
	default:
		return nil, fmt.Errorf("glm5next: unknown dtype %q (want auto, float32 or bfloat16)", opt.DType)
	}
	logf := opt.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	form := detectForm(ck.Names(), cfg)
	sp := specs(cfg, form)
	if opt.MTP {
		// The MTP layer's tensors load like a trunk layer's, each with its
		// own scheme (the block may be FLOAT inside a quantized checkpoint;
		// glm5next-features.md §2.1).
		if err := checkMTP(cfg, ck.Names()); err != nil {
			return nil, err
		}
		sp = append(sp, mtpSpecs(cfg, form)...)
	}
	if m.par != nil {
		sp = m.par.shard(sp, cfg)
	}
	q := &qloader{ck: ck, layout: layout, desc: desc, cfg: cfg, mode: mode, log: logf, claimed: map[string]bool{},
		par: m.par, biasRank: m.par == nil || m.par.TPRank == 0}

	// Schemes, checked against the fused groups and the MoE methods.
	scheme := map[string]quant.Scheme{}
	for _, s := range sp {
		sc, key := q.schemeOf(s.name)
		scheme[s.name] = sc
		if !sc.Quantized() {
			continue
		}
		switch kind := kindOf(s.name); {
		case strings.HasSuffix(s.name, ".eh_proj.weight"):
			q.errf("%s: tensor %q is described as %s, but the MTP layer's eh_proj must be FLOAT (npuserve splits it into its embedding and hidden halves)",
				desc.Path, key, sc)
		case kind == kindOther || len(s.shape) != 2:
			q.errf("%s: tensor %q is described as %s, but only linear weights can be quantized (norms, biases, mHC, conv, gate parameters and index_kpool_compress_gate stay FLOAT)",
				desc.Path, key, sc)
		case isExpert(s.name) && sc == quant.W8A8:
			q.errf("%s: tensor %q is described as W8A8 (static), which vllm-ascend has no MoE method for: routed experts must be W8A8_DYNAMIC, W8A8_MXFP8 or FLOAT",
				desc.Path, key)
		}
	}
	gnames, groups := fusedLayerGroups(cfg, form, opt.MTP)
	for i, g := range groups {
		first := scheme[g[0]]
		for _, n := range g[1:] {
			if scheme[n] != first {
				q.errf("%s: fused module %s: not all shards are quantized with the same scheme: %s is %s but %s is %s",
					desc.Path, gnames[i], module(g[0]), first, module(n), scheme[n])
				break
			}
		}
	}
	// Every tensor the description names must exist.
	for _, k := range slices.Sorted(maps.Keys(desc.Tensors)) {
		if _, ok := q.resolveKey(k); !ok {
			q.errf("%s: names tensor %q, which the checkpoint %s does not have", desc.Path, k, ck.Path())
		}
	}
	if len(q.errs) > 0 {
		return nil, fmt.Errorf("glm5next: %w", joinErrs(q.errs))
	}

	// Read every tensor.
	floats := map[string]*npu.Tensor{}
	hqs := map[string]*hostQuant{}
	var nq, nd int
	var bytes int64
	for _, s := range sp {
		ckName := layout.CheckpointName(s.name)
		sc := scheme[s.name]
		if s.skip {
			q.claimSkipped(ckName, sc, s.shape)
			continue
		}
		if sc.Quantized() {
			hq := q.readQuant(ckName, sc, s.shape[0], s.shape[1], s.slice)
			if hq == nil {
				continue
			}
			bytes += int64(len(hq.weight))
			if kindOf(s.name) == kindDequant {
				// Another op consumes the weight: dequantise it.
				w := dequantHost(hq)
				dt := npu.F32
				if s.matrix {
					dt = outDType(npu.BF16, mode)
				}
				t, err := be.FromHost(dt, npu.EncodeFloats(w, dt), hq.n, hq.k)
				if err != nil {
					q.errf("%s: %v", ckName, err)
					continue
				}
				floats[s.name] = t
				logf("%s is %s in the checkpoint: dequantised to %v (%s)", ckName, sc, dt, "its op takes float weights")
				nd++
				continue
			}
			hqs[s.name] = hq
			nq++
			continue
		}
		info, b, ok := q.tensor(ckName, floatDTypes, s.shape)
		if !ok {
			if info.DType == npu.F8E4M3 {
				q.errf("%s: tensor %q: block-FP8 weights cannot be mixed with an msmodelslim description", info.File, ckName)
			}
			continue
		}
		shape := s.shape
		if s.slice != nil {
			if shape, err = s.slice.Shape(s.shape); err != nil {
				q.errf("%s: tensor %q: %v", info.File, ckName, err)
				continue
			}
			b = s.slice.Cut(b, s.shape, info.DType.Size())
		}
		bytes += int64(len(b))
		dt := npu.F32
		if s.matrix {
			dt = outDType(info.DType, mode)
		}
		if dt != info.DType {
			f, _ := quant.DecodeFloats(b, info.DType)
			b = npu.EncodeFloats(f, dt)
		}
		t, err := be.FromHost(dt, b, shape...)
		if err != nil {
			q.errf("%s: %v", ckName, err)
			continue
		}
		floats[s.name] = t
	}
	// Static W8A8 shards of a fused module share one activation quantizer.
	for i, g := range groups {
		var ref *hostQuant
		for _, n := range g {
			hq := hqs[n]
			if hq == nil || hq.scheme != quant.W8A8 {
				continue
			}
			if ref == nil {
				ref = hq
			} else if hq.inScale != ref.inScale || hq.inOffset != ref.inOffset {
				q.errf("%s: fused module %s: %s.input_scale/input_offset (%v, %d) differ from %s's (%v, %d): fused shards share their input",
					ck.Path(), gnames[i], hq.module, hq.inScale, hq.inOffset, ref.module, ref.inScale, ref.inOffset)
			}
		}
	}
	// Unclaimed checkpoint tensors: the vision tower and MTP layers are
	// skipped, anything else is an error.
	var skipped int
	for _, n := range ck.Names() {
		if q.claimed[n] {
			continue
		}
		if strings.HasPrefix(n, "model.visual.") || isMTPName(n, layout, cfg.NumHiddenLayers) {
			skipped++
			continue
		}
		q.errf("%s: unexpected tensor %q: no linear or spec claims it", ck.Path(), n)
	}
	if len(q.errs) > 0 {
		for _, t := range floats {
			be.Free(t)
		}
		return nil, fmt.Errorf("glm5next: %w", joinErrs(q.errs))
	}
	if skipped > 0 {
		logf("skipping %d vision tower and MTP layer tensors", skipped)
	}
	if m.par != nil {
		m.par.renameExperts(floats)
		renameExperts(m.par, hqs)
	}
	a := newAssembler(be, floats)
	a.q = hqs
	a.mxAlg = opt.MXScaleAlg
	if err := a.assemble(m, form); err != nil {
		return nil, err
	}
	logf("loaded %s checkpoint %s in %v: %d quantized linears, %d dequantised, %.2f GiB (%s)",
		cmpOr(desc.ModelQuantType, "msmodelslim"), ck.Path(), time.Since(start).Round(time.Millisecond), nq, nd, float64(bytes)/(1<<30), layout)
	return m, nil
}

// outDType is the loader's dtype policy for float matrices.
func outDType(src npu.DType, mode string) npu.DType {
	switch mode {
	case "float32":
		return npu.F32
	case "bfloat16":
		return npu.BF16
	}
	return src
}

// dequantHost expands a quantized linear to float32.
func dequantHost(hq *hostQuant) []float32 {
	t := map[string]quant.Tensor{"weight": {Data: hq.weight}}
	switch hq.scheme {
	case quant.W8A8, quant.W8A8Dynamic:
		t["weight_scale"] = quant.Tensor{DType: npu.F32, Data: npu.EncodeFloats(hq.scale, npu.F32)}
	case quant.W8A8MXFP8:
		t["weight_scale"] = quant.Tensor{DType: npu.U8, Data: hq.mx}
	}
	w, err := quant.DequantizeLinear(hq.scheme, t, hq.n, hq.k, hq.group)
	if err != nil {
		panic(fmt.Sprintf("glm5next: %s: %v", hq.module, err)) // shapes were checked
	}
	return w
}

// isMTPName reports whether a checkpoint tensor belongs to an MTP layer: a
// layer index >= numLayers or an MTP-only module.
func isMTPName(name string, layout loader.Layout, numLayers int) bool {
	prefix := layout.CheckpointName("model.layers.")
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return false
	}
	idx, sub, _ := strings.Cut(rest, ".")
	l, err := strconv.Atoi(idx)
	if err != nil {
		return false
	}
	if l >= numLayers {
		return true
	}
	for _, p := range []string{"shared_head.", "enorm.", "hnorm.", "eh_proj."} {
		if strings.HasPrefix(sub, p) {
			return true
		}
	}
	return false
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// joinErrs reports up to 10 problems and counts the rest.
func joinErrs(errs []error) error {
	if len(errs) <= 10 {
		return errors.Join(errs...)
	}
	return errors.Join(append(errs[:10:10], fmt.Errorf("... and %d more problems", len(errs)-10))...)
}

// schemesSupported refuses, at load time, a checkpoint with a scheme the
// device cannot run (npu.SupportsQuant: W8A8_MXFP8 needs an Ascend 950),
// naming the scheme, a tensor that uses it and the device's reason,
// instead of failing at the first forward.
func schemesSupported(be npu.Backend, desc *quant.Description) error {
	names := make([]string, 0, len(desc.Tensors))
	for n := range desc.Tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	seen := map[quant.Scheme]bool{}
	for _, n := range names {
		sch := desc.Tensors[n]
		if seen[sch] || !sch.Quantized() {
			continue
		}
		seen[sch] = true
		if err := npu.SupportsQuant(be, sch.QScheme()); err != nil {
			return fmt.Errorf("glm5next: %s (%s in %s) cannot run on this device: %w", sch, n, desc.Path, err)
		}
	}
	return nil
}
