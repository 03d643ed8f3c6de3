package config

import (
	"encoding/json"
	"fmt"
	"slices"
)

// GraphBackends are the backends that capture graphs (npu.GraphCapturer):
// --compilation-config and --enforce-eager have an effect there only.
// Ascend captures decode steps with aclmdlRICapture since its decode
// forms plan on the device (npu/ascend decode.go; run against the
// stand-in CANN only).
var GraphBackends = []string{"cuda", "ascend"}

// GraphsByDefault says whether decode graphs are captured when neither
// --compilation-config nor --enforce-eager is given. vLLM's default mode
// is FULL_AND_PIECEWISE (graphs on); npuserve keeps graphs opt-in until
// they have run in serving on the GPU host.
const GraphsByDefault = false

// DefaultCaptureSizes are vLLM's default cudagraph_capture_sizes (1, 2, 4,
// then multiples of 8 to 256, then of 16), of which those up to the
// largest batch are captured.
func DefaultCaptureSizes(maxBatch int) []int {
	var out []int
	for _, s := range []int{1, 2, 4} {
		if s <= maxBatch {
			out = append(out, s)
		}
	}
	for s := 8; s <= min(maxBatch, 256); s += 8 {
		out = append(out, s)
	}
	for s := 272; s <= maxBatch; s += 16 {
		out = append(out, s)
	}
	return out
}

// GraphPlan is what --compilation-config and --enforce-eager ask of the
// engine: whether decode steps run as captured graphs, and at which
// padded batch sizes.
type GraphPlan struct {
	// Mode is the cudagraph_mode in force ("NONE" when eager).
	Mode string
	// Decode is set when decode steps are captured (FULL_DECODE_ONLY,
	// FULL, FULL_AND_PIECEWISE).
	Decode bool
	// Sizes are the capture sizes, ascending, each at most the largest
	// batch (sizes above it can never be used and are dropped).
	Sizes []int
	// Notes say what of the request has no effect (piecewise graphs,
	// full graphs of mixed steps, dropped sizes), for the start-up log.
	Notes []string
}

// compilationConfig is the part of vLLM's CompilationConfig npuserve reads.
type compilationConfig struct {
	Mode         *string `json:"cudagraph_mode"`
	Sizes        []int   `json:"cudagraph_capture_sizes"`
	MaxSize      *int    `json:"max_cudagraph_capture_size"`
	DecodeLegacy *bool   `json:"full_cuda_graph"` // older vLLM: FULL graphs
}

// Graphs works out the graph plan for batches of at most maxBatch
// sequences (--max-num-seqs) with vLLM's semantics: --enforce-eager
// means NONE whatever the config; cudagraph_mode selects the mode
// (unknown values are an error: the parser rejects them already);
// cudagraph_capture_sizes the sizes (default DefaultCaptureSizes),
// capped by max_cudagraph_capture_size and maxBatch. npuserve captures
// full graphs of decode steps only, so FULL and FULL_AND_PIECEWISE capture
// what FULL_DECODE_ONLY does and PIECEWISE captures nothing (each said in
// Notes).
func (a *EngineArgs) Graphs(maxBatch int) (GraphPlan, error) {
	var c compilationConfig
	if len(a.CompilationConfig) > 0 {
		if err := json.Unmarshal(a.CompilationConfig, &c); err != nil {
			return GraphPlan{}, fmt.Errorf("--compilation-config: %w", err)
		}
	}
	p := GraphPlan{Mode: "NONE"}
	switch {
	case a.EnforceEager:
		return p, nil
	case c.Mode != nil:
		p.Mode = *c.Mode
	case c.DecodeLegacy != nil && *c.DecodeLegacy:
		p.Mode = "FULL"
	case len(a.CompilationConfig) > 0 || GraphsByDefault:
		p.Mode = "FULL_AND_PIECEWISE" // vLLM's default
	}
	switch p.Mode {
	case "NONE":
		return p, nil
	case "PIECEWISE":
		p.Notes = append(p.Notes, "cudagraph_mode PIECEWISE: piecewise graphs are not implemented; every step runs eagerly")
		return p, nil
	case "FULL_DECODE_ONLY":
	case "FULL":
		p.Notes = append(p.Notes, "cudagraph_mode FULL: only decode steps are captured; prefill and mixed steps run eagerly")
	case "FULL_AND_PIECEWISE":
		p.Notes = append(p.Notes, "cudagraph_mode FULL_AND_PIECEWISE: decode steps are captured; the piecewise graphs of other steps are not implemented (they run eagerly)")
	default:
		return GraphPlan{}, fmt.Errorf("--compilation-config: cudagraph_mode: must be one of %v; got %q", cudagraphModes, p.Mode)
	}
	p.Decode = true
	limit := maxBatch
	if c.MaxSize != nil {
		if *c.MaxSize < 1 {
			return GraphPlan{}, fmt.Errorf("--compilation-config: max_cudagraph_capture_size: want a positive integer, got %d", *c.MaxSize)
		}
		limit = min(limit, *c.MaxSize)
	}
	sizes := c.Sizes
	if sizes == nil {
		sizes = DefaultCaptureSizes(limit)
	}
	sizes = slices.Clone(sizes)
	slices.Sort(sizes)
	sizes = slices.Compact(sizes)
	var dropped []int
	for _, s := range sizes {
		if s < 1 {
			return GraphPlan{}, fmt.Errorf("--compilation-config: cudagraph_capture_sizes: want positive integers, got %d", s)
		}
		if s > limit {
			dropped = append(dropped, s)
			continue
		}
		p.Sizes = append(p.Sizes, s)
	}
	if len(dropped) > 0 {
		p.Notes = append(p.Notes, fmt.Sprintf("cudagraph_capture_sizes %v exceed the largest batch %d and are not captured", dropped, limit))
	}
	if len(p.Sizes) == 0 {
		p.Decode = false
		p.Notes = append(p.Notes, "no capture size fits the batch limit; every step runs eagerly")
	}
	return p, nil
}
