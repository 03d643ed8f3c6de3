package config

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// SpeculativeMethods are the --speculative-config methods npuserve runs:
// GLM's MTP layer, under vLLM's two names for it.
var SpeculativeMethods = []string{"mtp", "deepseek_mtp"}

// MaxSpeculativeTokens bounds num_speculative_tokens.
const MaxSpeculativeTokens = 5

// Speculative is a parsed --speculative-config.
type Speculative struct {
	Method               string
	NumSpeculativeTokens int
	// EnforceEager is vllm-ascend's drafter setting; the drafter always
	// runs eagerly here.
	EnforceEager bool
}

// ParseSpeculative parses a --speculative-config value (nil when raw is
// empty: speculation off). Errors name the key.
func ParseSpeculative(raw json.RawMessage) (*Speculative, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("--speculative-config: %v", err)
	}
	if err := validateSpeculative(m); err != nil {
		return nil, fmt.Errorf("--speculative-config: %w", err)
	}
	s := &Speculative{Method: m["method"].(string)}
	s.NumSpeculativeTokens, _ = jsonInt("num_speculative_tokens", m["num_speculative_tokens"])
	s.EnforceEager, _ = m["enforce_eager"].(bool)
	return s, nil
}
