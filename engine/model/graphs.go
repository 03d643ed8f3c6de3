package model

import (
	"errors"
	"slices"
	"time"
)

// DecodeGraphs is implemented by models that can run decode steps as
// captured device graphs (vLLM's cudagraph_mode FULL_DECODE_ONLY; see
// npu.GraphCapturer): after CaptureDecodeGraphs, Forward replays a graph
// for every plain decode step of at most the largest size, padded up to
// the next captured size, and runs other steps eagerly.
type DecodeGraphs interface {
	// CaptureDecodeGraphs captures the decode step of cache c at each
	// size, before any sequence runs on c. An error wrapping
	// ErrNoGraphs means graphs are not available here at all (backend,
	// placement): the model keeps running eagerly.
	CaptureDecodeGraphs(c Cache, opt GraphOptions) (GraphReport, error)
	// ReleaseGraphs closes the graphs (before the cache is released).
	ReleaseGraphs()
}

// ErrNoGraphs is wrapped by CaptureDecodeGraphs' error when the backend or
// the model's placement cannot use graphs at all (the caller reports the
// option as without effect).
var ErrNoGraphs = errors.New("graphs are not available")

// GraphOptions configure DecodeGraphs.CaptureDecodeGraphs.
type GraphOptions struct {
	// Sizes are the padded batch sizes to capture (any order, positive).
	Sizes []int
	// MaxBlocks is the block-table width of the captured steps: a decode
	// step with a sequence needing more blocks runs eagerly
	// (max_model_len / block size, rounded up).
	MaxBlocks int
	// PadBlock is a cache block no sequence uses and PadSlot the first
	// of PadSlots consecutive state slots no sequence uses (at least
	// GraphPadSlots(Sizes)): the padding rows read and write only them.
	// (Each padding row needs a state slot of its own: the KDA ops reject
	// sequences sharing one.)
	PadBlock, PadSlot, PadSlots int
}

// GraphReport describes captured graphs, for the start-up log.
type GraphReport struct {
	Sizes    []int         // the captured sizes, ascending
	Duration time.Duration // warm-up and capture of every size
	// GraphBytes is the memory the graphs hold (their ops' scratch),
	// ScratchBytes the fixed buffers they share (activations, metadata,
	// logits).
	GraphBytes, ScratchBytes int64
}

// GraphPadSlots is the number of padding state slots the capture sizes
// need: the most padding rows a step gets, S-1 minus the next smaller
// size (a batch larger than that size pads up to S).
func GraphPadSlots(sizes []int) int {
	s := slices.Clone(sizes)
	slices.Sort(s)
	s = slices.Compact(s)
	n, prev := 0, 0
	for _, x := range s {
		n = max(n, x-prev-1)
		prev = x
	}
	return n
}
