package glm5next

import (
	"fmt"
	"io"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/model/loader"
	"github.com/npuserve/npuserve/engine/safetensors"
	"github.com/npuserve/npuserve/npu"
)

// LoadOptions configure Load.
type LoadOptions struct {
	// DType of matmul weights on the device: "auto" (as stored; FP8 is
	// dequantised), "float32" or "bfloat16". Everything else is F32.
	DType string
	// Progress receives a progress bar while tensors load (nil: none).
	Progress io.Writer
	// Log receives one-line notes (skipped tensors, dtype conversions).
	Log func(format string, args ...any)
}

// Load reads dir/config.json and the safetensors checkpoint in dir and
// builds the model on be. A checkpoint that contradicts the config (missing,
// unexpected or mis-shaped tensors) is an error naming the tensor and
// shapes.
func Load(be npu.Backend, dir string, opt LoadOptions) (*Model, error) {
	cfg, err := config.LoadModel(dir)
	if err != nil {
		return nil, err
	}
	ck, err := safetensors.Open(dir)
	if err != nil {
		return nil, err
	}
	m, err := loadCheckpoint(be, cfg, ck, opt)
	if err != nil {
		ck.Close()
		return nil, err
	}
	// Weights that needed no conversion alias the mapped checkpoint on the
	// CPU backend: it stays open until Close.
	m.ck = ck
	return m, nil
}

// Close releases the model's weights and scratch buffers and closes its
// checkpoint; the model must not be used afterwards.
func (m *Model) Close() error {
	m.ws.release()
	for _, t := range m.owned {
		m.be.Free(t)
	}
	m.owned, m.layers = nil, nil
	if m.ck != nil {
		err := m.ck.Close()
		m.ck = nil
		return err
	}
	return nil
}

// loadCheckpoint builds the model from an opened checkpoint.
func loadCheckpoint(be npu.Backend, cfg *config.ModelConfig, ck *safetensors.Checkpoint, opt LoadOptions) (*Model, error) {
	m, err := newModel(be, cfg)
	if err != nil {
		return nil, err
	}
	form := detectForm(ck.Names(), cfg)
	sp := specs(cfg, form)
	ls := make([]loader.Spec, len(sp))
	for i, s := range sp {
		ls[i] = loader.Spec{Name: s.name, Shape: s.shape, Matrix: s.matrix}
	}
	dtype := opt.DType
	if dtype == "" {
		dtype = "auto"
	}
	t, err := loader.Load(be, ck, ls, loader.Options{
		DType: dtype, Progress: opt.Progress, Log: opt.Log, NumLayers: cfg.NumHiddenLayers,
	})
	if err != nil {
		return nil, fmt.Errorf("glm5next: %w", err)
	}
	a := newAssembler(be, t)
	a.build(m, form)
	return m, nil
}
