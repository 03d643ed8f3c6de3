package core

import (
	"errors"
	"fmt"

	"github.com/npuserve/npuserve/engine/model"
)

// newCache allocates the engine's cache and, with Options.DecodeGraphs,
// captures the decode graphs on it (see DecodeGraphs); release frees
// both.
func (e *Engine) newCache() (cache model.Cache, release func(), err error) {
	o := &e.opt
	sizes := o.DecodeGraphs
	dg, ok := e.model.(model.DecodeGraphs)
	var why error
	switch {
	case len(sizes) == 0:
	case !ok:
		why = fmt.Errorf("the model cannot capture decode graphs: %w", model.ErrNoGraphs)
	case o.Lockstep != nil:
		why = fmt.Errorf("lockstep (expert-parallel) steps run collectives: %w", model.ErrNoGraphs)
	case e.spec != nil:
		why = fmt.Errorf("speculative decoding steps are not plain decode steps: %w", model.ErrNoGraphs)
	}
	if why != nil || len(sizes) == 0 {
		if why != nil && o.OnGraphs != nil {
			o.OnGraphs(model.GraphReport{}, why)
		}
		c, err := e.model.NewCache(o.NumBlocks, o.BlockSize, o.MaxNumSeqs)
		if err != nil {
			return nil, nil, err
		}
		return c, c.Release, nil
	}
	// One padding block past the manager's blocks, the padding slots past
	// its slots: no sequence is ever given them.
	pad := model.GraphPadSlots(sizes)
	c, err := e.model.NewCache(o.NumBlocks+1, o.BlockSize, o.MaxNumSeqs+pad)
	if err != nil {
		return nil, nil, err
	}
	rep, err := dg.CaptureDecodeGraphs(c, model.GraphOptions{
		Sizes: sizes, MaxBlocks: (o.MaxModelLen + o.BlockSize - 1) / o.BlockSize,
		PadBlock: o.NumBlocks, PadSlot: o.MaxNumSeqs, PadSlots: pad,
	})
	if o.OnGraphs != nil {
		o.OnGraphs(rep, err)
	}
	if err != nil && !errors.Is(err, model.ErrNoGraphs) {
		c.Release()
		return nil, nil, fmt.Errorf("engine: %w", err)
	}
	return c, func() { dg.ReleaseGraphs(); c.Release() }, nil
}
