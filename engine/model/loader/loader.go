// Package loader moves checkpoint weights onto a device. It is
// model-agnostic: the model builds a list of Specs (name, shape, whether the
// tensor is a matmul weight) and the loader checks the checkpoint against
// it both ways (every spec present with its shape, every checkpoint tensor
// claimed), dequantises block-FP8 weights (or, for specs marked KeepFP8,
// leaves them to the model, which reads them with ReadBlockFP8), applies
// the dtype policy and uploads. Names are canonical flat-layout names; the loader maps them to
// the checkpoint's layout.
package loader

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/sync/errgroup"
	"golang.org/x/term"

	"github.com/npuserve/npuserve/engine/safetensors"
	"github.com/npuserve/npuserve/npu"
)

// Spec is one tensor the model needs.
type Spec struct {
	// Name is the canonical (flat layout) name: "model.embed_tokens.weight",
	// "model.layers.N.<checkpoint suffix>", "model.norm.weight",
	// "lm_head.weight". The suffix is the checkpoint's own, e.g.
	// "model.layers.3.hc_attn_fn" or "model.layers.0.self_attn.q_conv1d.weight".
	Name  string
	Shape []int
	// Matrix marks a matmul weight, which may stay 16-bit; every other
	// tensor (norms, biases, mHC and gate parameters) is converted to F32.
	Matrix bool
	// Slice, when set, loads only that part of the tensor (Shape is still
	// the checkpoint's full shape, which is checked); the loaded tensor
	// has the slice's shape. Only the selected bytes are read.
	Slice *Slice
	// Skip claims the tensor without loading it: its presence and shape
	// are checked, but another rank holds it (the routed experts of other
	// expert-parallel ranks).
	Skip bool
	// KeepFP8 marks a block-FP8 (F8_E4M3) weight that the caller keeps in
	// its checkpoint form and reads itself with ReadBlockFP8 (to compute
	// with it as FP8_BLOCK128): Load checks it, its scales and that Slice
	// cuts whole 128x128 blocks, claims both tensors and uploads neither.
	// On a tensor of another dtype it has no effect.
	KeepFP8 bool
}

// Options control Load.
type Options struct {
	// DType is the storage type of Matrix weights: "auto" (or "") keeps the
	// checkpoint's F32/BF16/F16 and turns FP8 into BF16; "float32" and
	// "bfloat16" convert every Matrix weight to that type.
	DType string
	// Progress receives a progress bar when it is a terminal; nil or any
	// other writer gets none.
	Progress io.Writer
	// Log receives one line per skipped part and a summary; nil discards.
	Log func(format string, args ...any)
	// NumLayers is num_hidden_layers: unclaimed tensors of layers >= it (the
	// MTP layer) are skipped with one log line. 0 turns the layer-index
	// rule off (MTP-only names are still recognised).
	NumLayers int
}

// Layout is the naming scheme of a checkpoint.
type Layout int

const (
	// LayoutFlat is a text-only checkpoint: "model.layers.*",
	// "model.embed_tokens.*", "model.norm.*", "lm_head.*".
	LayoutFlat Layout = iota + 1
	// LayoutNested is the multimodal checkpoint save_pretrained writes for
	// glm5_next: "model.language_model.*", "model.visual.*", "lm_head.*".
	LayoutNested
)

const (
	nestedPrefix = "model.language_model."
	visionPrefix = "model.visual."
	// ScaleSuffix names the block-FP8 scale tensor of "<weight>": "<weight>_scale_inv"
	// (so "x.weight" has "x.weight_scale_inv").
	ScaleSuffix = "_scale_inv"
	// FP8Block is the block edge of the official FP8 checkpoint's scales.
	FP8Block = 128
)

// String names the layout.
func (l Layout) String() string {
	switch l {
	case LayoutFlat:
		return "flat"
	case LayoutNested:
		return "nested"
	}
	return fmt.Sprintf("Layout(%d)", int(l))
}

// CheckpointName maps a canonical name to this layout: in a nested
// checkpoint the text model's "model." becomes "model.language_model.";
// "lm_head.*" and "model.visual.*" are the same in both.
func (l Layout) CheckpointName(canonical string) string {
	if l == LayoutNested && strings.HasPrefix(canonical, "model.") && !strings.HasPrefix(canonical, visionPrefix) {
		return nestedPrefix + strings.TrimPrefix(canonical, "model.")
	}
	return canonical
}

// layerPrefix is where the decoder layers live in this layout.
func (l Layout) layerPrefix() string {
	if l == LayoutNested {
		return nestedPrefix + "layers."
	}
	return "model.layers."
}

// DetectLayout tells a nested checkpoint (text model under
// "model.language_model.") from a flat one ("model.layers.*",
// "model.embed_tokens.*", "model.norm.*").
func DetectLayout(ck *safetensors.Checkpoint) (Layout, error) {
	var nested, flat string
	for _, n := range ck.Names() {
		switch {
		case strings.HasPrefix(n, nestedPrefix):
			if nested == "" {
				nested = n
			}
		case strings.HasPrefix(n, "model.layers.") || strings.HasPrefix(n, "model.embed_tokens.") || strings.HasPrefix(n, "model.norm."):
			if flat == "" {
				flat = n
			}
		}
	}
	switch {
	case nested != "" && flat != "":
		return 0, fmt.Errorf("%s: mixed layouts: %q is nested (model.language_model.*) but %q is flat", ck.Path(), nested, flat)
	case nested != "":
		return LayoutNested, nil
	case flat != "":
		return LayoutFlat, nil
	}
	return 0, fmt.Errorf("%s: unknown layout: no model.language_model.* (nested) or model.layers.*, model.embed_tokens.*, model.norm.* (flat) tensors", ck.Path())
}

// job is one spec resolved against the checkpoint.
type job struct {
	spec  Spec
	name  string // checkpoint name
	info  safetensors.TensorInfo
	scale *safetensors.TensorInfo // FP8 block scales
	out   npu.DType
	shape []int // the loaded shape (the slice's when sliced)
}

// maxErrors bounds how many problems one error lists.
const maxErrors = 10

// Load checks the checkpoint against specs and returns the tensors on be,
// keyed by canonical spec name. Everything is checked before anything is
// uploaded: missing tensors, shape mismatches, unsupported dtypes, FP8
// weights without valid scales and checkpoint tensors no spec claims
// (except the vision tower and MTP layers, skipped with one log line each)
// are all reported together. On the CPU backend tensors that need no
// conversion alias the mapped file, so ck must stay open while they are
// in use.
func Load(be npu.Backend, ck *safetensors.Checkpoint, specs []Spec, opt Options) (map[string]*npu.Tensor, error) {
	start := time.Now()
	logf := opt.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	mode := opt.DType
	switch mode {
	case "":
		mode = "auto"
	case "auto", "float32", "bfloat16":
	default:
		return nil, fmt.Errorf("loader: unknown dtype %q (want auto, float32 or bfloat16)", opt.DType)
	}
	layout, err := DetectLayout(ck)
	if err != nil {
		return nil, err
	}

	jobs, claimed, errs := plan(ck, layout, specs, mode)
	var vision, mtp int
	for _, n := range ck.Names() {
		if claimed[n] {
			continue
		}
		switch {
		case strings.HasPrefix(n, visionPrefix):
			vision++
		case isMTP(n, layout, opt.NumLayers):
			mtp++
		default:
			errs = append(errs, fmt.Errorf("%s: unexpected tensor %q: no spec claims it", fileOf(ck, n), n))
		}
	}
	if len(errs) > 0 {
		return nil, joinErrors(errs)
	}
	if vision > 0 {
		logf("skipping %d vision tower tensors (%s*): not implemented yet", vision, visionPrefix)
	}
	if mtp > 0 && opt.NumLayers > 0 {
		logf("skipping %d MTP layer tensors (%sN.* with N >= %d): not loaded", mtp, layout.layerPrefix(), opt.NumLayers)
	} else if mtp > 0 {
		logf("skipping %d MTP layer tensors (enorm, hnorm, eh_proj, shared_head): not loaded", mtp)
	}

	out, bytes, err := upload(be, ck, jobs, opt.Progress)
	if err != nil {
		return nil, err
	}
	logf("loaded %d tensors (%.2f GiB of checkpoint data) from %s in %v (%s layout, dtype %s)",
		len(out), float64(bytes)/(1<<30), ck.Path(), time.Since(start).Round(time.Millisecond), layout, mode)
	return out, nil
}

// plan resolves every spec: checkpoint name, shape, dtype, FP8 scales and
// output dtype. claimed holds the checkpoint tensors the specs consume.
func plan(ck *safetensors.Checkpoint, layout Layout, specs []Spec, mode string) ([]job, map[string]bool, []error) {
	var errs []error
	claimed := map[string]bool{}
	seen := map[string]bool{}
	var jobs []job
	for _, s := range specs {
		if s.Name == "" {
			errs = append(errs, errors.New("loader: spec with an empty name"))
			continue
		}
		if seen[s.Name] {
			errs = append(errs, fmt.Errorf("loader: spec %q given twice", s.Name))
			continue
		}
		seen[s.Name] = true
		name := layout.CheckpointName(s.Name)
		claimed[name] = true
		info, ok := ck.Info(name)
		if !ok {
			errs = append(errs, fmt.Errorf("%s: missing tensor %q (expected shape %v)", ck.Path(), name, fmtShape(s.Shape)))
			continue
		}
		if !npu.SameShape(info.Shape, s.Shape) {
			errs = append(errs, fmt.Errorf("%s: tensor %q has shape %v, expected %v", info.File, name, fmtShape(info.Shape), fmtShape(s.Shape)))
			continue
		}
		if s.Skip {
			if info.DType == npu.F8E4M3 {
				claimed[name+ScaleSuffix] = true
			}
			continue
		}
		j := job{spec: s, name: name, info: info, shape: s.Shape}
		if s.Slice != nil {
			shape, err := s.Slice.Shape(s.Shape)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: tensor %q: %v", info.File, name, err))
				continue
			}
			j.shape = shape
		}
		switch info.DType {
		case npu.F32, npu.BF16, npu.F16:
		case npu.F8E4M3:
			sc, err := fp8Scale(ck, info)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			claimed[sc.Name] = true
			j.scale = &sc
			if s.Slice != nil && s.Slice.Dim > 1 {
				errs = append(errs, fmt.Errorf("%s: F8_E4M3 tensor %q: slices of block-scaled weights must cut dimension 0 or 1, not %v", info.File, name, s.Slice))
				continue
			}
			if s.KeepFP8 {
				if s.Slice != nil {
					if _, err := s.Slice.Blocks(FP8Block, info.Shape[s.Slice.Dim]); err != nil {
						errs = append(errs, fmt.Errorf("%s: F8_E4M3 tensor %q kept block-scaled: %v", info.File, name, err))
					}
				}
				continue
			}
		default:
			errs = append(errs, fmt.Errorf("%s: tensor %q has unsupported dtype %s (want F32, BF16, F16 or F8_E4M3)", info.File, name, info.DTypeName))
			continue
		}
		j.out = outDType(info.DType, s.Matrix, mode)
		jobs = append(jobs, j)
	}
	return jobs, claimed, errs
}

// outDType is the dtype policy: non-matrix tensors are F32; matrices keep
// 16/32-bit floats under auto (FP8 becomes BF16) or take the forced type.
func outDType(src npu.DType, matrix bool, mode string) npu.DType {
	switch {
	case !matrix || mode == "float32":
		return npu.F32
	case mode == "bfloat16" || src == npu.F8E4M3:
		return npu.BF16
	}
	return src
}

// fp8Scale finds and checks the block scales of an F8_E4M3 weight.
func fp8Scale(ck *safetensors.Checkpoint, w safetensors.TensorInfo) (safetensors.TensorInfo, error) {
	name := w.Name + ScaleSuffix
	sc, ok := ck.Info(name)
	if !ok {
		return sc, fmt.Errorf("%s: F8_E4M3 tensor %q has no block scales %q", w.File, w.Name, name)
	}
	if len(w.Shape) != 2 {
		return sc, fmt.Errorf("%s: F8_E4M3 tensor %q has shape %v: block-scaled dequantisation needs a 2-D weight", w.File, w.Name, fmtShape(w.Shape))
	}
	want := []int{ceilDiv(w.Shape[0], FP8Block), ceilDiv(w.Shape[1], FP8Block)}
	if !npu.SameShape(sc.Shape, want) {
		return sc, fmt.Errorf("%s: scales %q of %v weight %q have shape %v, expected %v (%dx%d blocks)",
			sc.File, name, fmtShape(w.Shape), w.Name, fmtShape(sc.Shape), fmtShape(want), FP8Block, FP8Block)
	}
	switch sc.DType {
	case npu.F32, npu.BF16, npu.F16:
	default:
		return sc, fmt.Errorf("%s: scales %q have dtype %s (want F32, BF16 or F16)", sc.File, name, sc.DTypeName)
	}
	return sc, nil
}

// BlockFP8 is a block-FP8 weight as the checkpoint stores it (or a
// rank's part of it): E4M3 elements [N, K] and one F32 scale per 128x128
// block, [ceil(N/128), ceil(K/128)] row-major (DeepSeek's
// weight_scale_inv: w = e4m3 * scale).
type BlockFP8 struct {
	N, K   int
	Weight []byte
	Scale  []float32
}

// ReadBlockFP8 reads the block-FP8 weight called name (a checkpoint name)
// and its scales, or the part sl selects (nil: all of it; dimension 0 or
// 1, cutting whole blocks, see Slice.Blocks), reading only that part.
// Weight aliases the mapped checkpoint when the part is contiguous.
func ReadBlockFP8(ck *safetensors.Checkpoint, name string, sl *Slice) (*BlockFP8, error) {
	info, ok := ck.Info(name)
	if !ok {
		return nil, fmt.Errorf("%s: missing tensor %q", ck.Path(), name)
	}
	if info.DType != npu.F8E4M3 {
		return nil, fmt.Errorf("%s: tensor %q has dtype %s, want F8_E4M3", info.File, name, info.DTypeName)
	}
	sc, err := fp8Scale(ck, info)
	if err != nil {
		return nil, err
	}
	q, err := ck.Data(name)
	if err != nil {
		return nil, err
	}
	sb, err := ck.Data(sc.Name)
	if err != nil {
		return nil, err
	}
	scale := floats(sc.DType, sb)
	w := &BlockFP8{N: info.Shape[0], K: info.Shape[1], Weight: q, Scale: scale}
	if sl == nil {
		return w, nil
	}
	if sl.Dim > 1 {
		return nil, fmt.Errorf("%s: F8_E4M3 tensor %q: slices of block-scaled weights must cut dimension 0 or 1, not %v", info.File, name, sl)
	}
	shape, err := sl.Shape(info.Shape)
	if err != nil {
		return nil, fmt.Errorf("%s: tensor %q: %v", info.File, name, err)
	}
	blocks, err := sl.Blocks(FP8Block, info.Shape[sl.Dim])
	if err != nil {
		return nil, fmt.Errorf("%s: F8_E4M3 tensor %q: %v", info.File, name, err)
	}
	w.N, w.K = shape[0], shape[1]
	w.Weight = sl.Cut(q, info.Shape, 1)
	w.Scale = floats(npu.F32, blocks.Cut(npu.EncodeFloats(scale, npu.F32), sc.Shape, 4))
	return w, nil
}

// mtpNames are tensors that only the MTP layer has, whatever its index.
var mtpNames = []string{"shared_head.", "enorm.", "hnorm.", "eh_proj."}

// isMTP reports whether a checkpoint tensor belongs to an MTP layer: a
// layer index >= numLayers (when numLayers > 0) or an MTP-only name.
func isMTP(name string, layout Layout, numLayers int) bool {
	rest, ok := strings.CutPrefix(name, layout.layerPrefix())
	if !ok {
		return false
	}
	idx, sub, ok := strings.Cut(rest, ".")
	if !ok {
		return false
	}
	l, err := strconv.Atoi(idx)
	if err != nil {
		return false
	}
	if numLayers > 0 && l >= numLayers {
		return true
	}
	for _, p := range mtpNames {
		if strings.HasPrefix(sub, p) {
			return true
		}
	}
	return false
}

// upload converts and uploads the jobs in parallel (FromHost calls are
// serialised: a device stream takes one caller at a time). On error every
// tensor made so far is freed.
func upload(be npu.Backend, ck *safetensors.Checkpoint, jobs []job, progress io.Writer) (map[string]*npu.Tensor, int64, error) {
	// Read in file order so the page cache sees sequential access.
	slices.SortFunc(jobs, func(a, b job) int {
		if c := strings.Compare(a.info.File, b.info.File); c != 0 {
			return c
		}
		return cmp.Compare(a.info.Offset, b.info.Offset)
	})
	var total int64
	for _, j := range jobs {
		total += j.readBytes()
	}
	bar := NewBar(progress, total, "loading weights")

	out := make(map[string]*npu.Tensor, len(jobs))
	var mu sync.Mutex
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for _, j := range jobs {
		g.Go(func() error {
			data, err := convert(ck, j)
			if err != nil {
				return err
			}
			t, err := be.FromHost(j.out, data, j.shape...)
			if err != nil {
				return fmt.Errorf("loading %s: %w", j.spec.Name, err)
			}
			mu.Lock()
			defer mu.Unlock()
			out[j.spec.Name] = t
			if bar != nil {
				bar.Add64(j.readBytes())
			}
			return nil
		})
	}
	err := g.Wait()
	if bar != nil {
		bar.Finish()
		fmt.Fprintln(progress)
	}
	if err != nil {
		for _, t := range out {
			be.Free(t)
		}
		return nil, 0, err
	}
	return out, total, nil
}

// readBytes is the checkpoint data a job reads: its slice's share of the
// tensor, plus the FP8 scales.
func (j job) readBytes() int64 {
	n := j.info.Size
	if j.spec.Slice != nil {
		full, part := 1, 1
		for i := range j.shape {
			full *= j.spec.Shape[i]
			part *= j.shape[i]
		}
		if full > 0 {
			n = n * int64(part) / int64(full)
		}
	}
	if j.scale != nil {
		n += j.scale.Size
	}
	return n
}

// NewBar returns a byte progress bar described by desc when w is a
// terminal, else nil (loading and quantizing show the same bar).
func NewBar(w io.Writer, total int64, desc string) *progressbar.ProgressBar {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowBytes(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetPredictTime(true),
	)
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// fmtShape prints a shape as [a b c] ([] for a scalar).
func fmtShape(s []int) string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = strconv.Itoa(d)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func fileOf(ck *safetensors.Checkpoint, name string) string {
	if info, ok := ck.Info(name); ok {
		return info.File
	}
	return ck.Path()
}

// joinErrors reports up to maxErrors problems and counts the rest.
func joinErrors(errs []error) error {
	if len(errs) <= maxErrors {
		return errors.Join(errs...)
	}
	shown := append(errs[:maxErrors:maxErrors], fmt.Errorf("... and %d more problems", len(errs)-maxErrors))
	return errors.Join(shown...)
}
