package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// GenerationConfig is a model dir's generation_config.json: the sampling
// defaults and end-of-sequence ids that vLLM applies to every request unless
// the request overrides them.
type GenerationConfig struct {
	EOSTokenID        IntList  `json:"eos_token_id"`
	PadTokenID        *int     `json:"pad_token_id"`
	BOSTokenID        *int     `json:"bos_token_id"`
	DoSample          *bool    `json:"do_sample"`
	Temperature       *float64 `json:"temperature"`
	TopP              *float64 `json:"top_p"`
	TopK              *int     `json:"top_k"`
	MinP              *float64 `json:"min_p"`
	RepetitionPenalty *float64 `json:"repetition_penalty"`
	MaxNewTokens      *int     `json:"max_new_tokens"`
}

// LoadGeneration reads DIR/generation_config.json. A missing file is not an
// error: it returns an empty config and found=false.
func LoadGeneration(dir string) (g *GenerationConfig, found bool, err error) {
	path := filepath.Join(dir, "generation_config.json")
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return &GenerationConfig{}, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	g = &GenerationConfig{}
	if err := json.Unmarshal(data, g); err != nil {
		return nil, false, fmt.Errorf("%s: %v", path, err)
	}
	return g, true, nil
}
