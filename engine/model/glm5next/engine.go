package glm5next

import (
	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/model"
	"github.com/npuserve/npuserve/npu"
)

func init() {
	model.Register(config.ModelTypeGlm5Next, open)
	model.Register(config.ModelTypeGlm5NextText, open)
}

// open is glm5next's model.Opener: a checkpoint, or random weights.
func open(be npu.Backend, dir string, cfg *config.ModelConfig, opt model.OpenOptions) (model.Loaded, error) {
	var m *Model
	var err error
	if opt.Random {
		m, err = NewRandomParallel(be, cfg, opt.DType, opt.Seed, nil)
		if err == nil && opt.MTP {
			if err = m.AddRandomMTP(opt.Seed + 1); err != nil {
				m.Close()
			}
		}
	} else {
		m, err = Load(be, dir, LoadOptions{DType: opt.DType, Quantization: opt.Quantization, Log: opt.Log, Progress: opt.Progress, MTP: opt.MTP})
	}
	if err != nil {
		return nil, err
	}
	return m.Engine(), nil
}

// Engine returns the model as the engine sees it (model.Loaded, and
// model.Collective when it is placed with Parallel).
func (m *Model) Engine() model.Loaded { return engineModel{m} }

// Of returns the glm5next model behind an engine model, if it is one.
func Of(mm model.Model) (*Model, bool) {
	e, ok := mm.(engineModel)
	return e.Model, ok
}

// engineModel adapts *Model to the engine's cache and batch types.
type engineModel struct{ *Model }

var _ model.Collective = engineModel{}

func (e engineModel) NewCache(numBlocks, blockSize, stateSlots int) (model.Cache, error) {
	c, err := e.Model.NewCache(numBlocks, blockSize, stateSlots)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (e engineModel) Forward(c model.Cache, b *model.Batch) (*npu.Tensor, error) {
	return e.Model.Forward(c.(*Cache), b)
}

var _ model.DecodeGraphs = engineModel{}

// CaptureDecodeGraphs implements model.DecodeGraphs.
func (e engineModel) CaptureDecodeGraphs(c model.Cache, opt model.GraphOptions) (model.GraphReport, error) {
	return e.Model.CaptureDecodeGraphs(c.(*Cache), opt)
}

func (e engineModel) DummyStep(c model.Cache) error { return e.Model.DummyStep(c.(*Cache)) }
