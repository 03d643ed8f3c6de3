package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// A settings file (--config FILE) holds engine arguments as JSON or TOML
// (chosen by the .json/.toml extension, else by content). Explicit flags
// override it; it overrides the defaults.
//
// Keys are flag names in dash or underscore form at the top level
// ("tensor_parallel_size": 8, "max-model-len": "128K"); JSON-valued flags
// take an object or a JSON string, --served-model-name a string or a list.
//
// The file also accepts the sectioned skeletons published for
// GLM-5.3-Flash (an SGLang-style settings.json and a vLLM/TokenSpeed-style
// config.toml). Their keys fall in three kinds:
//   - aliases of flags (model_path, context_length, [model] path/name,
//     [context] max_length, [kv_cache] dtype, [quant] weight_act, ...);
//   - statements about the model (moe.num_experts, attention.sparse_layers,
//     sparse.kpool_topk, ...): config.json decides these, and BuildPlan
//     fails when the file disagrees with it;
//   - tuning npuserve does not have (EPD pools, mixed-precision cache
//     layers, reasoning defaults): accepted and reported by WithoutEffect.
//
// Any other key is an error naming it.

// settingCheck is a settings-file statement about the model, checked
// against config.json by BuildPlan.
type settingCheck struct {
	key   string // settings key, e.g. "moe.num_experts"
	field string // what config.json calls it, e.g. "n_routed_experts"
	want  string // the file's value, normalised
	got   func(c *ModelConfig) string
}

// settingEntry is one flag value from the file.
type settingEntry struct {
	key   string
	spec  *flagSpec
	value any
}

// settings is a loaded settings file.
type settings struct {
	path    string
	entries []settingEntry
	checks  []settingCheck
	ignored []Ignored
	epKey   string
	epSize  int
	// speculative.mtp / draft_tokens, turned into --speculative-config.
	mtpKey    string
	mtp       *bool
	draftKey  string
	draft     int
	specGiven bool
}

// settingRule says what one settings key means.
type settingRule struct {
	flag     string                                      // the value sets this flag
	check    *modelFact                                  // the value must match config.json
	noEffect string                                      // accepted without effect, for this reason
	custom   func(st *settings, key string, v any) error // anything else
}

// modelFact is a config.json value a settings key may restate.
type modelFact struct {
	field string
	kind  string // "int", "bool" or "pattern"
	get   func(c *ModelConfig) string
}

var (
	factExperts = &modelFact{"n_routed_experts", "int", func(c *ModelConfig) string { return strconv.Itoa(c.NRoutedExperts) }}
	factShared  = &modelFact{"n_shared_experts", "int", func(c *ModelConfig) string { return strconv.Itoa(c.NSharedExperts) }}
	factTopK    = &modelFact{"num_experts_per_tok", "int", func(c *ModelConfig) string { return strconv.Itoa(c.NumExpertsPerTok) }}
	factDense   = &modelFact{"mlp_layer_types (dense layers)", "int", func(c *ModelConfig) string {
		n := 0
		for _, t := range c.MLPLayerTypes {
			if t == MLPDense {
				n++
			}
		}
		return strconv.Itoa(n)
	}}
	factKDA     = &modelFact{"layer_types (linear_attention layers)", "int", func(c *ModelConfig) string { return strconv.Itoa(c.NumKDALayers()) }}
	factDSA     = &modelFact{"layer_types (deepseek_sparse_attention layers)", "int", func(c *ModelConfig) string { return strconv.Itoa(c.NumDSALayers()) }}
	factKPool   = &modelFact{"index_kpool", "int", func(c *ModelConfig) string { return strconv.Itoa(c.IndexKPool) }}
	factTopkSel = &modelFact{"index_topk", "int", func(c *ModelConfig) string { return strconv.Itoa(c.IndexTopk) }}
	// glm5_next always pools indexer keys (index_kpool_compress).
	factPooling = &modelFact{"index_kpool_compress", "bool", func(*ModelConfig) string { return "true" }}
	factPattern = &modelFact{"layer_types", "pattern", layerPattern}
)

const (
	whyDecodeTokens = "npuserve has no separate decode token budget; requests set max_tokens"
	whyMixedCache   = "mixed-precision cache layers are not implemented; the cache uses the planned dtype"
	whyIndexerDtype = "indexer keys are cached in the cache dtype"
	whyEPD          = "encode/prefill/decode disaggregation is not implemented"
	whyFallback     = "unquantized weights use --dtype"
	whyReasoning    = "GLM-5.3-Flash always thinks; requests set reasoning_effort"
)

// topRules are the top-level keys that are not flag names.
var topRules = map[string]settingRule{
	"model_path":         {flag: "model"},
	"context_length":     {flag: "max-model-len"},
	"max_prefill_tokens": {flag: "max-num-batched-tokens"},
	"max_decode_tokens":  {noEffect: whyDecodeTokens},
	"attention_backend":  {custom: checkBackend},
}

// sectionRules are the keys of the skeletons' sections (JSON objects or
// TOML tables), by section.
var sectionRules = map[string]map[string]settingRule{
	"model": {
		"path": {flag: "model"}, "name": {flag: "served-model-name"}, "served_model_name": {flag: "served-model-name"},
		"dtype": {flag: "dtype"}, "trust_remote_code": {flag: "trust-remote-code"},
	},
	"attention": {
		"backend": {custom: checkBackend}, "linear_layers": {check: factKDA}, "sparse_layers": {check: factDSA},
		"interleave_pattern": {check: factPattern},
	},
	"context": {
		"max_length": {flag: "max-model-len"}, "max_prefill_tokens": {flag: "max-num-batched-tokens"},
		"max_decode_tokens": {noEffect: whyDecodeTokens},
	},
	"kv_cache": {
		"dtype": {flag: "kv-cache-dtype"}, "mixed_precision": {noEffect: whyMixedCache},
		"int8_layers": {noEffect: whyMixedCache}, "fp8_layers": {noEffect: whyMixedCache}, "bf16_layers": {noEffect: whyMixedCache},
	},
	"kv_cache_mixed_precision": {
		"enabled": {noEffect: whyMixedCache}, "layers_int8": {noEffect: whyMixedCache},
		"layers_fp8": {noEffect: whyMixedCache}, "layers_bf16": {noEffect: whyMixedCache},
	},
	"sparse": {
		"index_pool": {check: factPooling}, "index_pool_group": {check: factKPool}, "kpool_topk": {check: factTopkSel},
		"indexer_dtype": {noEffect: whyIndexerDtype},
	},
	"sparse_attention": {
		"index_pool_enabled": {check: factPooling}, "index_pool_group_size": {check: factKPool},
		"kpool_dsa_topk": {check: factTopkSel}, "indexer_dtype": {noEffect: whyIndexerDtype},
	},
	"moe": {
		"num_experts": {check: factExperts}, "shared_experts": {check: factShared}, "top_k": {check: factTopK},
		"expert_parallel": {custom: expertParallel}, "expert_parallel_size": {custom: expertParallel},
		"dense_layers": {check: factDense}, "dense_ffn_layers": {check: factDense},
	},
	"speculative": {
		"mtp": {custom: speculativeMTP}, "mtp_enabled": {custom: speculativeMTP}, "draft_tokens": {custom: speculativeDraft},
	},
	"epd": {
		"enabled": {noEffect: whyEPD}, "encode_pool": {noEffect: whyEPD}, "prefill_pool": {noEffect: whyEPD}, "decode_pool": {noEffect: whyEPD},
	},
	"epd_disaggregation": {
		"enabled": {noEffect: whyEPD}, "encode_pool_size": {noEffect: whyEPD},
		"prefill_pool_size": {noEffect: whyEPD}, "decode_pool_size": {noEffect: whyEPD},
	},
	"quant": {"weight_act": {flag: "quantization"}, "fallback": {noEffect: whyFallback}},
	"quantization": {
		"weight_activation": {flag: "quantization"}, "fallback_dtype": {noEffect: whyFallback},
	},
	"reasoning": {
		"thinking": {noEffect: whyReasoning}, "thinking_default": {noEffect: whyReasoning},
		"effort": {noEffect: whyReasoning}, "reasoning_effort": {noEffect: whyReasoning},
	},
}

// loadSettings reads and interprets a settings file.
func loadSettings(path string) (*settings, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	var doc map[string]any
	if ext := strings.ToLower(filepath.Ext(path)); ext == ".yaml" || ext == ".yml" {
		return nil, fmt.Errorf("--config %s: YAML settings files are not supported; write the same keys as JSON or TOML", path)
	}
	isJSON := strings.EqualFold(filepath.Ext(path), ".json") ||
		!strings.EqualFold(filepath.Ext(path), ".toml") && bytes.HasPrefix(bytes.TrimSpace(data), []byte("{"))
	if isJSON {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var x any
		if err := dec.Decode(&x); err != nil {
			return nil, fmt.Errorf("--config %s: invalid JSON: %v", path, err)
		}
		if _, err := dec.Token(); err != io.EOF {
			return nil, fmt.Errorf("--config %s: invalid JSON: trailing data after the object", path)
		}
		m, ok := x.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("--config %s: want a JSON object at the top level", path)
		}
		doc = m
	} else {
		t, err := parseTOML(string(data))
		if err != nil {
			return nil, fmt.Errorf("--config %s: %v", path, err)
		}
		doc = numbersFromTOML(t).(map[string]any)
	}
	st := &settings{path: path}
	if err := st.walk(doc); err != nil {
		return nil, fmt.Errorf("--config %s: %v", path, err)
	}
	return st, nil
}

// numbersFromTOML turns TOML's int64/float64 into json.Number, the form
// JSON settings decode to.
func numbersFromTOML(v any) any {
	switch x := v.(type) {
	case int64:
		return json.Number(strconv.FormatInt(x, 10))
	case float64:
		return json.Number(strconv.FormatFloat(x, 'g', -1, 64))
	case []any:
		for i := range x {
			x[i] = numbersFromTOML(x[i])
		}
		return x
	case map[string]any:
		for k := range x {
			x[k] = numbersFromTOML(x[k])
		}
		return x
	}
	return v
}

// settingKey normalises a key for the alias tables.
func settingKey(k string) string { return strings.ReplaceAll(k, "-", "_") }

// walk interprets the document.
func (st *settings) walk(doc map[string]any) error {
	for _, k := range slices.Sorted(maps.Keys(doc)) {
		v := doc[k]
		nk := settingKey(k)
		_, isObj := v.(map[string]any)
		if spec, ok := specByName(k); ok && spec.name == strings.ReplaceAll(k, "_", "-") && (!isObj || spec.kind == kindJSON) {
			switch spec.name {
			case "config":
				return fmt.Errorf("%s: a settings file cannot name another settings file", k)
			case "speculative-config":
				st.specGiven = true
			}
			st.entries = append(st.entries, settingEntry{key: k, spec: spec, value: v})
			continue
		}
		if r, ok := topRules[nk]; ok {
			if err := st.rule(r, k, v); err != nil {
				return err
			}
			continue
		}
		sec, ok := sectionRules[nk]
		if !ok {
			return fmt.Errorf("unknown key %q (want a flag name such as max_model_len, or a section of the GLM-5.3-Flash skeletons)", k)
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: want a table/object of settings, got %s", k, jsonText(v))
		}
		for _, sk := range slices.Sorted(maps.Keys(obj)) {
			r, ok := sec[settingKey(sk)]
			if !ok {
				return fmt.Errorf("unknown key %q", k+"."+sk)
			}
			if err := st.rule(r, k+"."+sk, obj[sk]); err != nil {
				return err
			}
		}
	}
	return st.finish()
}

// rule applies one rule to key = v.
func (st *settings) rule(r settingRule, key string, v any) error {
	switch {
	case r.flag != "":
		spec, _ := specByName(r.flag)
		st.entries = append(st.entries, settingEntry{key: key, spec: spec, value: v})
	case r.check != nil:
		want, err := factValue(r.check.kind, key, v)
		if err != nil {
			return err
		}
		st.checks = append(st.checks, settingCheck{key: key, field: r.check.field, want: want, got: r.check.get})
	case r.noEffect != "":
		if _, isObj := v.(map[string]any); isObj || v == nil {
			return fmt.Errorf("%s: want a value, got %s", key, jsonText(v))
		}
		st.ignored = append(st.ignored, Ignored{Flag: "settings " + key, Reason: r.noEffect})
	default:
		return r.custom(st, key, v)
	}
	return nil
}

// factValue normalises a restated model fact.
func factValue(kind, key string, v any) (string, error) {
	switch kind {
	case "int":
		n, err := jsonInt(key, v)
		if err != nil {
			return "", err
		}
		return strconv.Itoa(n), nil
	case "bool":
		b, ok := v.(bool)
		if !ok {
			return "", fmt.Errorf("%s: want true or false, got %s", key, jsonText(v))
		}
		return strconv.FormatBool(b), nil
	default: // pattern, e.g. "3linear_1sparse"
		s, ok := v.(string)
		if !ok || !patternRE.MatchString(s) {
			return "", fmt.Errorf("%s: want a pattern like \"3linear_1sparse\", got %s", key, jsonText(v))
		}
		m := patternRE.FindStringSubmatch(s)
		l, _ := strconv.Atoi(m[1])
		d, _ := strconv.Atoi(m[2])
		return fmt.Sprintf("%dlinear_%dsparse", l, d), nil
	}
}

var patternRE = regexp.MustCompile(`^(\d+)\s*linear[_ ,+]+(\d+)\s*sparse$`)

// layerPattern describes layer_types as "<n>linear_<m>sparse" when it
// repeats n KDA layers then m DSA layers (a shorter last period allowed);
// otherwise as the literal list.
func layerPattern(c *ModelConfig) string {
	t := c.LayerTypes
	l := 0
	for l < len(t) && t[l] == LayerKDA {
		l++
	}
	d := 0
	for l+d < len(t) && t[l+d] == LayerDSA {
		d++
	}
	if l == 0 || d == 0 {
		return strings.Join(t, ",")
	}
	for i, x := range t {
		want := LayerKDA
		if i%(l+d) >= l {
			want = LayerDSA
		}
		if x != want {
			return strings.Join(t, ",")
		}
	}
	return fmt.Sprintf("%dlinear_%dsparse", l, d)
}

func checkBackend(_ *settings, key string, v any) error {
	if s, ok := v.(string); !ok || s != "hybrid_kda_dsa" {
		return fmt.Errorf("%s: npuserve runs glm5_next's hybrid KDA + DSA attention (hybrid_kda_dsa), got %s", key, jsonText(v))
	}
	return nil
}

func expertParallel(st *settings, key string, v any) error {
	n, err := jsonInt(key, v)
	if err != nil {
		return err
	}
	if n < 1 {
		return fmt.Errorf("%s: must be at least 1, got %d", key, n)
	}
	spec, _ := specByName("enable-expert-parallel")
	st.entries = append(st.entries, settingEntry{key: key, spec: spec, value: n > 1})
	if n > 1 {
		st.epKey, st.epSize = key, n
	}
	return nil
}

func speculativeMTP(st *settings, key string, v any) error {
	b, ok := v.(bool)
	if !ok {
		return fmt.Errorf("%s: want true or false, got %s", key, jsonText(v))
	}
	st.mtpKey, st.mtp = key, &b
	return nil
}

func speculativeDraft(st *settings, key string, v any) error {
	n, err := jsonInt(key, v)
	if err != nil {
		return err
	}
	if n < 1 || n > 64 {
		return fmt.Errorf("%s: must be in [1, 64], got %d", key, n)
	}
	st.draftKey, st.draft = key, n
	return nil
}

// finish turns speculative.mtp/draft_tokens into --speculative-config.
func (st *settings) finish() error {
	if st.mtp == nil || !*st.mtp {
		if st.draftKey != "" {
			st.ignored = append(st.ignored, Ignored{Flag: "settings " + st.draftKey, Reason: "MTP is not enabled in the file"})
		}
		if st.mtp != nil {
			st.ignored = append(st.ignored, Ignored{Flag: "settings " + st.mtpKey, Reason: "MTP stays off"})
		}
		return nil
	}
	if st.specGiven {
		return fmt.Errorf("%s and speculative_config both configure speculative decoding; keep one", st.mtpKey)
	}
	n := st.draft
	if n == 0 {
		n = 1
	}
	spec, _ := specByName("speculative-config")
	st.entries = append(st.entries, settingEntry{key: st.mtpKey, spec: spec,
		value: map[string]any{"method": "mtp", "num_speculative_tokens": json.Number(strconv.Itoa(n))}})
	return nil
}

// apply sets the file's values on a (before explicit flags).
func (st *settings) apply(a *EngineArgs) error {
	for _, e := range st.entries {
		if err := e.apply(a); err != nil {
			return fmt.Errorf("--config %s: %s (--%s): %v", st.path, e.key, e.spec.name, err)
		}
		a.given[e.spec.name] = "settings " + e.key
	}
	a.checks = st.checks
	a.ignoredSettings = st.ignored
	a.epSizeKey, a.epSize = st.epKey, st.epSize
	return nil
}

// apply converts a settings value to the flag's input and sets it.
func (e settingEntry) apply(a *EngineArgs) error {
	s := e.spec
	switch s.kind {
	case kindBool:
		b, ok := e.value.(bool)
		if !ok {
			return fmt.Errorf("want true or false, got %s", jsonText(e.value))
		}
		s.setBool(a, b)
		return nil
	case kindList:
		switch x := e.value.(type) {
		case string:
			return s.setList(a, []string{x})
		case []any:
			var list []string
			for _, it := range x {
				str, ok := it.(string)
				if !ok {
					return fmt.Errorf("want a list of strings, got %s", jsonText(e.value))
				}
				list = append(list, str)
			}
			if len(list) == 0 {
				return errors.New("want at least one name")
			}
			return s.setList(a, list)
		}
		return fmt.Errorf("want a string or a list of strings, got %s", jsonText(e.value))
	case kindJSON:
		switch x := e.value.(type) {
		case string:
			return s.set(a, x)
		case map[string]any:
			b, err := json.Marshal(x)
			if err != nil {
				return err
			}
			return s.set(a, string(b))
		}
		return fmt.Errorf("want an object (or a JSON string), got %s", jsonText(e.value))
	default:
		switch x := e.value.(type) {
		case string:
			return s.set(a, x)
		case json.Number:
			return s.set(a, x.String())
		case []any: // a list-valued flag read as JSON (--allowed-origins)
			return s.set(a, jsonText(x))
		}
		return fmt.Errorf("want a string or a number, got %s", jsonText(e.value))
	}
}

// checkSettings verifies the settings file's statements about the model.
func (a *EngineArgs) checkSettings(c *ModelConfig) error {
	for _, ch := range a.checks {
		if got := ch.got(c); got != ch.want {
			return fmt.Errorf("--config %s: %s = %s, but config.json has %s = %s (the checkpoint decides it)",
				a.Config, ch.key, ch.want, ch.field, got)
		}
	}
	return nil
}
