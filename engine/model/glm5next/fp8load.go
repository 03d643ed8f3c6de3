package glm5next

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/npuserve/npuserve/engine/model/loader"
	"github.com/npuserve/npuserve/engine/safetensors"
	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/quant"
)

// Block-FP8 checkpoints (HF/DeepSeek "fp8": F8_E4M3 weights with F32
// weight_scale_inv per 128x128 block) keep their linears as FP8_BLOCK128
// QuantWeights when the backend runs that scheme and the quantization mode
// is "" or "fp8": the same linears an msmodelslim checkpoint may quantize
// (kindMatMul: attention, indexer and MLP projections, shared and routed
// experts, lm_head). The rest is dequantised by the loader as before:
// model.embed_tokens (a gather), self_attn.kv_b_proj (absorbed into the
// MLA q and output products, not a linear), mlp.gate (the router, F32),
// index_kpool_compress_gate and the MTP eh_proj (split into halves), and
// any weight the model cannot keep whole-block:
//
//   - a tensor-parallel slice that does not start and end on 128-element
//     block boundaries (the scale blocks cannot be cut with it);
//   - a row-concatenated linear (KDA q|k|v, gate|up of an MLP, a shared
//     expert or a routed expert) whose parts are not all kept or whose
//     parts but the last have output widths that are not multiples of 128
//     (the concatenated scale rows would straddle two parts);
//   - a MoE layer's routed experts unless every local expert is kept (they
//     are stacked into one grouped weight).

// fp8Decision is which block-FP8 weights load kept.
type fp8Decision struct {
	keep map[string]bool // canonical names
	// dequant counts the weights dequantised per reason, with an example.
	dequant map[string][]string
}

// decideFP8 chooses, among sp (this rank's specs), the block-FP8 weights
// that stay FP8_BLOCK128, logging once why block-FP8 weights are
// dequantised (the mode, the backend, or per reason with a count).
func decideFP8(be npu.Backend, ck *safetensors.Checkpoint, layout loader.Layout, sp []spec, quantization string, logf func(string, ...any)) map[string]bool {
	var cands []spec
	nfp8 := 0
	for _, s := range sp {
		info, ok := ck.Info(layout.CheckpointName(s.name))
		if !ok || info.DType != npu.F8E4M3 || s.skip {
			continue
		}
		nfp8++
		if kindOf(s.name) == kindMatMul && len(s.shape) == 2 {
			if _, ok := ck.Info(info.Name + loader.ScaleSuffix); ok { // else the loader reports it
				cands = append(cands, s)
			}
		}
	}
	if nfp8 == 0 {
		return nil
	}
	if quantization == "none" {
		logf("dequantising %d block-FP8 weights (quantization none)", nfp8)
		return nil
	}
	if err := npu.SupportsQuant(be, npu.QFP8Block); err != nil {
		logf("dequantising %d block-FP8 weights: this backend cannot keep them as %v: %v", nfp8, npu.QFP8Block, err)
		return nil
	}
	d := &fp8Decision{keep: map[string]bool{}, dequant: map[string][]string{}}
	rows := map[string]int{} // the rank's output rows of each candidate
	for _, s := range cands {
		n := s.shape[0]
		if s.slice != nil {
			if _, err := s.slice.Blocks(npu.FP8Block, s.shape[s.slice.Dim]); s.slice.Dim > 1 || err != nil {
				d.drop(s.name, "their tensor-parallel slices do not cut whole 128x128 blocks")
				continue
			}
			shape, _ := s.slice.Shape(s.shape)
			n = shape[0]
		}
		d.keep[s.name] = true
		rows[s.name] = n
	}
	// Row-concatenated linears: all parts kept, whole blocks per part.
	for _, s := range cands {
		var group []string
		switch p, ok := strings.CutSuffix(s.name, ".self_attn.q_proj.weight"); {
		case ok:
			p += ".self_attn."
			group = []string{p + "q_proj.weight", p + "k_proj.weight", p + "v_proj.weight"}
		default:
			if p, ok := strings.CutSuffix(s.name, "gate_proj.weight"); ok {
				group = []string{p + "gate_proj.weight", p + "up_proj.weight"}
			}
		}
		if group == nil {
			continue
		}
		ok := true
		for i, n := range group {
			ok = ok && d.keep[n] && (i == len(group)-1 || rows[n]%npu.FP8Block == 0)
		}
		if !ok {
			for _, n := range group {
				if d.keep[n] {
					d.drop(n, "they are fused with a part that is not kept or whose width is not a multiple of 128")
				}
			}
		}
	}
	// Routed experts: every local expert of a layer kept, or none.
	experts := map[string][]string{}
	for _, s := range sp {
		if isExpert(s.name) && !s.skip {
			l := s.name[:strings.Index(s.name, ".mlp.experts.")]
			experts[l] = append(experts[l], s.name)
		}
	}
	for _, l := range slices.Sorted(maps.Keys(experts)) {
		names := experts[l]
		if !slices.ContainsFunc(names, func(n string) bool { return !d.keep[n] }) {
			continue
		}
		for _, n := range names {
			if d.keep[n] {
				d.drop(n, "not every routed expert of their layer can be kept (the experts are stacked)")
			}
		}
	}
	for _, why := range slices.Sorted(maps.Keys(d.dequant)) {
		names := d.dequant[why]
		logf("dequantising %d block-FP8 weights (%s, ...): %s", len(names), layout.CheckpointName(names[0]), why)
	}
	logf("keeping %d of %d block-FP8 weights as %v (dequantised: the embedding, kv_b_proj, the router and other weights not computed as linears, and the ones above)",
		len(d.keep), nfp8, npu.QFP8Block)
	return d.keep
}

// drop dequantises name for reason why.
func (d *fp8Decision) drop(name, why string) {
	delete(d.keep, name)
	d.dequant[why] = append(d.dequant[why], name)
}

// readFP8 reads the kept block-FP8 weights (this rank's parts) as host
// quantized linears, by canonical name.
func readFP8(ck *safetensors.Checkpoint, layout loader.Layout, sp []spec, keep map[string]bool) (map[string]*hostQuant, error) {
	out := map[string]*hostQuant{}
	for _, s := range sp {
		if !keep[s.name] {
			continue
		}
		ckName := layout.CheckpointName(s.name)
		w, err := loader.ReadBlockFP8(ck, ckName, s.slice)
		if err != nil {
			return nil, fmt.Errorf("glm5next: %w", err)
		}
		out[s.name] = &hostQuant{scheme: quant.FP8Block128, module: module(ckName), n: w.N, k: w.K,
			weight: w.Weight, scale: w.Scale, group: npu.FP8Block}
	}
	return out, nil
}
