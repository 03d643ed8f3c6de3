package glm5next

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/npu"
)

// NewRandom builds a model with deterministic random weights for cfg (for
// --load-format dummy and benchmarks): every tensor draws from its own
// PCG stream seeded by (seed, tensor name), initialised like transformers'
// Glm5NextPreTrainedModel._init_weights so activations stay in a sane
// range (normal(0, 0.02) projections, unit norms, zero mHC bases with unit
// scales, FLA's forget-gate A_log/dt_bias, indexer gate ones and ape
// zeros). dtype is the matmul weights' dtype: "float32", "bfloat16",
// "float16", or "auto"/"" for config.json's dtype (float32 if unset). It
// panics on a configuration the model cannot run (a programming error for
// hand-built configs; configs from config.ParseModel are validated).
func NewRandom(be npu.Backend, cfg *config.ModelConfig, dtype string, seed int64) *Model {
	m, err := NewRandomParallel(be, cfg, dtype, seed, nil)
	if err != nil {
		panic(err)
	}
	return m
}

// NewRandomParallel is NewRandom for one rank of a tensor/expert-parallel
// deployment: the rank's slices of the weights NewRandom would draw for a
// single rank (the same values), so a parallel deployment of random
// weights computes what one rank does.
func NewRandomParallel(be npu.Backend, cfg *config.ModelConfig, dtype string, seed int64, par *Parallel) (*Model, error) {
	m, err := newModel(be, cfg)
	if err != nil {
		return nil, err
	}
	mdt, err := matrixDType(dtype, cfg.Dtype)
	if err != nil {
		return nil, err
	}
	if err := m.setParallel(par); err != nil {
		return nil, err
	}
	form := weightForm{fusedConv: true, fusedExperts: true, lmHead: !cfg.TieWordEmbeddings}
	sp := specs(cfg, form)
	if m.par != nil {
		sp = m.par.shard(sp, cfg)
	}
	std := 0.02 // HF initializer_range default (not part of config.json for glm5_next)
	t := make(map[string]*npu.Tensor, len(sp))
	var mu sync.Mutex
	var ferr error // the first failed upload
	var wg sync.WaitGroup
	work := make(chan spec)
	for range max(1, min(runtime.GOMAXPROCS(0), 8)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range work {
				vals := randomInit(s, cfg, std, seed)
				dt := npu.F32
				if s.matrix {
					dt = mdt
				}
				data, shape := npu.EncodeFloats(vals, dt), s.shape
				if s.slice != nil {
					data = s.slice.Cut(data, s.shape, dt.Size())
					shape, _ = s.slice.Shape(s.shape)
				}
				tensor, err := be.FromHost(dt, data, shape...)
				mu.Lock()
				if err != nil && ferr == nil {
					ferr = fmt.Errorf("glm5next: %s: %w", s.name, err)
				}
				if err == nil {
					t[s.name] = tensor
				}
				mu.Unlock()
			}
		}()
	}
	for _, s := range sp {
		if !s.skip {
			work <- s
		}
	}
	close(work)
	wg.Wait()
	if ferr != nil {
		for _, x := range t {
			be.Free(x)
		}
		return nil, ferr
	}
	if m.par != nil {
		m.par.renameExperts(t)
	}
	a := newAssembler(be, t)
	if err := a.assemble(m, form); err != nil {
		return nil, err
	}
	return m, nil
}

// matrixDType maps a dtype option to the matmul weights' device dtype.
func matrixDType(opt, configDType string) (npu.DType, error) {
	if opt == "" || opt == "auto" {
		opt = configDType
	}
	switch opt {
	case "", "float32":
		return npu.F32, nil
	case "bfloat16":
		return npu.BF16, nil
	case "float16":
		return npu.F16, nil
	}
	return npu.Invalid, fmt.Errorf("glm5next: unsupported weight dtype %q (want auto, float32, bfloat16 or float16)", opt)
}

// randomInit draws tensor s's initial values.
func randomInit(s spec, cfg *config.ModelConfig, std float64, seed int64) []float32 {
	n := 1
	for _, d := range s.shape {
		n *= d
	}
	h := fnv.New64a()
	h.Write([]byte(s.name))
	r := rand.New(rand.NewPCG(uint64(seed), h.Sum64()))
	v := make([]float32, n)
	fill := func(x float32) {
		for i := range v {
			v[i] = x
		}
	}
	name := s.name
	switch {
	case strings.HasSuffix(name, "norm.weight"): // all RMSNorms, o_norm, k_norm
		fill(1)
	case strings.HasSuffix(name, "k_norm.bias"),
		strings.HasSuffix(name, "_base"),
		strings.HasSuffix(name, "e_score_correction_bias"),
		strings.HasSuffix(name, "index_kpool_compress_ape"):
		fill(0)
	case strings.HasSuffix(name, "_scale"):
		fill(1)
	case strings.HasSuffix(name, "index_kpool_compress_gate"):
		fill(1)
	case strings.HasSuffix(name, "A_log"):
		if cfg.LinearLowerBound != nil {
			fill(0)
		} else {
			for i := range v {
				v[i] = float32(math.Log(1 + 15*r.Float64()))
			}
		}
	case strings.HasSuffix(name, "dt_bias"):
		// dt = exp(U(log 1e-3, log 1e-1)) clamped >= 1e-4, stored as the
		// inverse softplus dt + log(-expm1(-dt)).
		lo, hi := math.Log(1e-3), math.Log(1e-1)
		for i := range v {
			dt := math.Max(math.Exp(lo+(hi-lo)*r.Float64()), 1e-4)
			v[i] = float32(dt + math.Log(-math.Expm1(-dt)))
		}
	default: // projections, conv taps, experts, router, embedding, head, mHC fn
		for i := range v {
			v[i] = float32(r.NormFloat64() * std)
		}
		if name == "model.embed_tokens.weight" && cfg.PadTokenID != nil {
			if p := *cfg.PadTokenID; p >= 0 && p < cfg.VocabSize {
				clear(v[p*cfg.HiddenSize : (p+1)*cfg.HiddenSize])
			}
		}
	}
	return v
}
