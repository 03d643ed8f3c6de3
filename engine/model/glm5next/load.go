package glm5next

import (
	"errors"
	"fmt"
	"io"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/model/loader"
	"github.com/npuserve/npuserve/engine/safetensors"
	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/quant"
)

// LoadOptions configure Load.
type LoadOptions struct {
	// DType of float matmul weights on the device: "auto" (as stored;
	// dequantised FP8 becomes BF16), "float32" or "bfloat16". Everything
	// else is F32; kept FP8_BLOCK128 linears stay FP8.
	DType string
	// Progress receives a progress bar while tensors load (nil: none).
	Progress io.Writer
	// Log receives one-line notes (skipped tensors, dtype conversions).
	Log func(format string, args ...any)
	// Quantization selects how weights are read: "" (auto: an msmodelslim
	// checkpoint when the dir has quant_model_description.json, else
	// float or block-FP8 weights), "ascend" (require the description, as
	// vLLM's --quantization ascend does), "fp8" (ignore any description)
	// or "none" (ignore any description and dequantise block-FP8 weights).
	// Under "" and "fp8" the linears of a block-FP8 checkpoint stay
	// FP8_BLOCK128 when the backend runs that scheme (see decideFP8),
	// whatever DType says; otherwise they are dequantised.
	Quantization string
	// MXScaleAlg is the MX activation scale algorithm of W8A8_MXFP8
	// weights: 0 (OCP, vllm-ascend's default) or 1 (round up).
	MXScaleAlg int
	// Parallel places the model in a tensor/expert-parallel deployment:
	// the rank reads only its slices of the weights (nil: a single rank).
	Parallel *Parallel
	// MTP also loads the MTP draft layer (layer num_hidden_layers), for
	// speculative decoding; a checkpoint without it is an error.
	MTP bool
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
	var desc *quant.Description
	switch opt.Quantization {
	case "", "ascend":
		if quant.HasDescription(dir) {
			if desc, err = quant.ReadDescription(dir); err != nil {
				return nil, fmt.Errorf("glm5next: %w", err)
			}
		} else if opt.Quantization == "ascend" {
			return nil, fmt.Errorf("glm5next: --quantization ascend: %s has no %s (not an msmodelslim checkpoint)", dir, quant.DescriptionFile)
		}
	case "fp8", "none":
	default:
		return nil, fmt.Errorf("glm5next: unknown quantization %q (want ascend, fp8 or none)", opt.Quantization)
	}
	if opt.MXScaleAlg != 0 && opt.MXScaleAlg != 1 {
		return nil, fmt.Errorf("glm5next: MX scale algorithm %d (want 0 or 1)", opt.MXScaleAlg)
	}
	ck, err := safetensors.Open(dir)
	if err != nil {
		return nil, err
	}
	var m *Model
	if desc != nil {
		m, err = loadQuantized(be, cfg, ck, desc, opt)
	} else {
		m, err = loadCheckpoint(be, cfg, ck, opt)
	}
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
	m.ReleaseGraphs()
	m.ws.release()
	for _, t := range m.owned {
		m.be.Free(t)
	}
	m.owned, m.layers = nil, nil
	// Work still queued may read weights that alias the mapped checkpoint
	// (PrepareQuant packing them, a last step): wait before unmapping.
	serr := m.be.Sync()
	if m.ck != nil {
		err := errors.Join(serr, m.ck.Close())
		m.ck = nil
		return err
	}
	return serr
}

// loadCheckpoint builds the model from an opened checkpoint.
func loadCheckpoint(be npu.Backend, cfg *config.ModelConfig, ck *safetensors.Checkpoint, opt LoadOptions) (*Model, error) {
	m, err := newModel(be, cfg)
	if err != nil {
		return nil, err
	}
	if err := m.setParallel(opt.Parallel); err != nil {
		return nil, err
	}
	form := detectForm(ck.Names(), cfg)
	sp := specs(cfg, form)
	if opt.MTP {
		if err := checkMTP(cfg, ck.Names()); err != nil {
			return nil, err
		}
		sp = append(sp, mtpSpecs(cfg, form)...)
	}
	if m.par != nil {
		sp = m.par.shard(sp, cfg)
	}
	layout, err := loader.DetectLayout(ck)
	if err != nil {
		return nil, fmt.Errorf("glm5next: %w", err)
	}
	logf := opt.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	keep := decideFP8(be, ck, layout, sp, opt.Quantization, logf)
	ls := make([]loader.Spec, len(sp))
	for i, s := range sp {
		ls[i] = loader.Spec{Name: s.name, Shape: s.shape, Matrix: s.matrix, Slice: s.slice, Skip: s.skip, KeepFP8: keep[s.name]}
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
	hqs, err := readFP8(ck, layout, sp, keep)
	if err != nil {
		for _, x := range t {
			be.Free(x)
		}
		return nil, err
	}
	if m.par != nil {
		m.par.renameExperts(t)
		renameExperts(m.par, hqs)
	}
	a := newAssembler(be, t)
	a.q = hqs
	if err := a.assemble(m, form); err != nil {
		return nil, err
	}
	return m, nil
}
