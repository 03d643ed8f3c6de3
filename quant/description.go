package quant

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/npuserve/npuserve/npu"
)

// DescriptionFile is the msmodelslim description file vllm-ascend reads
// with --quantization ascend (MODELSLIM_CONFIG_FILENAME).
const DescriptionFile = "quant_model_description.json"

// Scheme is a per-tensor quantization scheme string of msmodelslim.
type Scheme string

// The schemes npuserve computes with. FLOAT is an unquantized tensor.
const (
	Float       Scheme = "FLOAT"
	W8A8        Scheme = "W8A8"         // int8 per-channel weights, static per-tensor int8 activations
	W8A8Dynamic Scheme = "W8A8_DYNAMIC" // int8 per-channel weights, dynamic per-token int8 activations
	W8A8MXFP8   Scheme = "W8A8_MXFP8"   // E4M3 weights and activations, E8M0 scales per block of 32
	// FP8Block128 is not an msmodelslim scheme (ParseScheme refuses it):
	// it names the weights of an HF/DeepSeek block-FP8 checkpoint (E4M3
	// with weight_scale_inv per 128x128 block) kept as stored.
	FP8Block128 Scheme = "FP8_BLOCK128"
)

// knownUnsupported are schemes vllm-ascend registers that npuserve does
// not compute with (so that the error says "unsupported", not "unknown").
var knownUnsupported = []Scheme{
	"W8A8FP8_DYNAMIC", "W8A8_MIX", "W8A16", "W4A16", "W4A16_MXFP4", "W4A8_DYNAMIC", "W4A8_MXFP",
	"W4A4_MXFP4", "W4A4_DYNAMIC", "W4A4_FLATQUANT_DYNAMIC", "W4A4_MXFP4_FLATQUANT", "W8A8S",
	"FAKQuant", "FAQuant", "INT8_DYNAMIC", "C8",
}

// ParseScheme maps a description value to a Scheme, accepting the
// lower-case spellings used on command lines (w8a8_dynamic).
func ParseScheme(s string) (Scheme, error) {
	u := Scheme(strings.ToUpper(s))
	switch u {
	case Float, W8A8, W8A8Dynamic, W8A8MXFP8:
		return u, nil
	}
	if slices.Contains(knownUnsupported, Scheme(s)) || slices.Contains(knownUnsupported, u) {
		return "", fmt.Errorf("quantization scheme %q is not supported (npuserve computes W8A8, W8A8_DYNAMIC, W8A8_MXFP8 and FLOAT)", s)
	}
	return "", fmt.Errorf("unknown quantization scheme %q (want W8A8, W8A8_DYNAMIC, W8A8_MXFP8 or FLOAT)", s)
}

// Quantized reports whether s is an integer or fp8 scheme (not FLOAT).
func (s Scheme) Quantized() bool { return s != Float && s != "" }

// QScheme is the device arithmetic of s (npu.QNone for Float and
// unknown schemes): the one mapping from msmodelslim's scheme names to
// npu's.
func (s Scheme) QScheme() npu.QScheme {
	switch s {
	case W8A8Dynamic:
		return npu.QW8A8Dynamic
	case W8A8:
		return npu.QW8A8
	case W8A8MXFP8:
		return npu.QMXFP8
	case FP8Block128:
		return npu.QFP8Block
	}
	return npu.QNone
}

// Suffixes lists the tensors a linear of scheme s has in an msmodelslim
// checkpoint, as suffixes of its module prefix ("weight" first), per
// serving-compat.md §4.2-4.5.
func (s Scheme) Suffixes() []string {
	switch s {
	case W8A8:
		return []string{"weight", "weight_scale", "weight_offset", "input_scale", "input_offset", "quant_bias", "deq_scale"}
	case W8A8Dynamic:
		return []string{"weight", "weight_scale", "weight_offset"}
	case W8A8MXFP8:
		return []string{"weight", "weight_scale"}
	}
	return []string{"weight"}
}

// Description is a parsed quant_model_description.json: global settings
// and the scheme of every checkpoint tensor.
type Description struct {
	// Path is the file the description was read from (for messages;
	// DescriptionFile when parsed from bytes).
	Path string
	// Version is "version" ("1.0.0").
	Version string
	// ModelQuantType is "model_quant_type", the model's headline scheme.
	ModelQuantType string
	// GroupSize is "group_size" (MX block size; 32 when absent).
	GroupSize int
	// Tensors maps checkpoint tensor names to schemes.
	Tensors map[string]Scheme
	// Extra keeps other global keys verbatim ("kv_cache_type",
	// "fa_quant_type", "optional", ...).
	Extra map[string]json.RawMessage
}

// globalKey reports whether a description key is a setting rather than a
// tensor name: tensor names are dotted paths.
func globalKey(k string) bool { return !strings.Contains(k, ".") }

// ParseDescription parses a description. Every tensor entry must carry a
// scheme npuserve computes with; an unknown or unsupported scheme is an
// error naming the tensor. Attention/KV-cache quantization settings
// (kv_cache_type, fa_quant_type, indexer_quant_type) are rejected: the
// CPU backend's caches are unquantized.
func ParseDescription(data []byte) (*Description, error) {
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%s: %w", DescriptionFile, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%s: trailing data after the JSON object", DescriptionFile)
	}
	if raw == nil {
		return nil, fmt.Errorf("%s: want a JSON object", DescriptionFile)
	}
	d := &Description{Path: DescriptionFile, GroupSize: MXBlock, Tensors: map[string]Scheme{}, Extra: map[string]json.RawMessage{}}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		v := raw[k]
		if globalKey(k) {
			var err error
			switch k {
			case "version":
				err = json.Unmarshal(v, &d.Version)
			case "model_quant_type":
				err = json.Unmarshal(v, &d.ModelQuantType)
			case "group_size":
				err = json.Unmarshal(v, &d.GroupSize)
				if err == nil && (d.GroupSize <= 0 || d.GroupSize%MXBlock != 0) {
					err = fmt.Errorf("must be a positive multiple of %d, got %d", MXBlock, d.GroupSize)
				}
			case "kv_cache_type", "fa_quant_type", "indexer_quant_type":
				var s string
				if json.Unmarshal(v, &s) == nil && s == "" {
					break
				}
				err = fmt.Errorf("KV-cache/attention quantization (%s) is not supported", strings.TrimSpace(string(v)))
			default:
				d.Extra[k] = v
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %q: %w", DescriptionFile, k, err))
			}
			continue
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			errs = append(errs, fmt.Errorf("%s: tensor %q: scheme must be a string, got %s", DescriptionFile, k, v))
			continue
		}
		sc, err := ParseScheme(s)
		if err != nil || Scheme(s) != sc {
			if err == nil {
				err = fmt.Errorf("scheme %q must be upper case (%s)", s, sc)
			}
			errs = append(errs, fmt.Errorf("%s: tensor %q: %w", DescriptionFile, k, err))
			continue
		}
		d.Tensors[k] = sc
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return d, nil
}

// ReadDescription reads dir/quant_model_description.json.
func ReadDescription(dir string) (*Description, error) {
	path := filepath.Join(dir, DescriptionFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	d, err := ParseDescription(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	d.Path = path
	return d, nil
}

// HasDescription reports whether dir holds a description file.
func HasDescription(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, DescriptionFile))
	return err == nil
}

// Marshal writes the description as msmodelslim does: one flat object,
// global keys first ("version", "model_quant_type", "group_size" for MX
// schemes, then the extras), then every tensor in name order, indented.
func (d *Description) Marshal() []byte {
	var b bytes.Buffer
	b.WriteString("{\n")
	first := true
	put := func(k string, v any) {
		if !first {
			b.WriteString(",\n")
		}
		first = false
		kb, _ := json.Marshal(k)
		vb, _ := json.Marshal(v)
		fmt.Fprintf(&b, "  %s: %s", kb, vb)
	}
	put("version", cmpOr(d.Version, "1.0.0"))
	put("model_quant_type", cmpOr(d.ModelQuantType, string(Float)))
	mx := d.ModelQuantType == string(W8A8MXFP8)
	for _, s := range d.Tensors {
		mx = mx || s == W8A8MXFP8
	}
	if mx {
		put("group_size", cmpOr(d.GroupSize, MXBlock))
	}
	for _, k := range slices.Sorted(maps.Keys(d.Extra)) {
		put(k, d.Extra[k])
	}
	for _, k := range slices.Sorted(maps.Keys(d.Tensors)) {
		put(k, string(d.Tensors[k]))
	}
	b.WriteString("\n}\n")
	return b.Bytes()
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
