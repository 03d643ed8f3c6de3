package dp

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/npuserve/npuserve/engine/config"
)

// Settings are the settings every DP rank must share because they shape
// the collectives (tensor sizes, group sizes, expert placement) or the
// requests that may move between ranks.
type Settings struct {
	// ModelConfigHash is the SHA-256 of the model's parsed config.json.
	ModelConfigHash      string `json:"model_config_hash"`
	TensorParallelSize   int    `json:"tensor_parallel_size"`
	DataParallelSize     int    `json:"data_parallel_size"`
	EnableExpertParallel bool   `json:"enable_expert_parallel"`
	MaxModelLen          int    `json:"max_model_len"`
	BlockSize            int    `json:"block_size"`
	MaxNumSeqs           int    `json:"max_num_seqs"`
	MaxNumBatchedTokens  int    `json:"max_num_batched_tokens"`
	Dtype                string `json:"dtype"`
	Quantization         string `json:"quantization"`
	KVCacheDtype         string `json:"kv_cache_dtype"`
	LoadFormat           string `json:"load_format"`
	Device               string `json:"device"`
	// DummySeed is --seed under --load-format dummy: it draws the random
	// weights, so every rank needs the same one (0 otherwise).
	DummySeed int64 `json:"dummy_seed"`
	// NumSpeculativeTokens is --speculative-config's num_speculative_tokens
	// (0: off): under expert parallelism every rank's step runs the MTP
	// layer that many times.
	NumSpeculativeTokens int `json:"num_speculative_tokens"`
}

// SettingsFrom collects the settings of a node from its engine args, its
// model config and its plan (the resolved scheduler limits).
func SettingsFrom(a *config.EngineArgs, mc *config.ModelConfig, p *config.Plan) (Settings, error) {
	b, err := json.Marshal(mc)
	if err != nil {
		return Settings{}, fmt.Errorf("dp: hashing the model config: %w", err)
	}
	h := sha256.Sum256(b)
	s := Settings{
		ModelConfigHash:      hex.EncodeToString(h[:]),
		TensorParallelSize:   a.TensorParallelSize,
		DataParallelSize:     a.DataParallelSize,
		EnableExpertParallel: a.EnableExpertParallel,
		MaxModelLen:          a.MaxModelLen,
		BlockSize:            a.BlockSize,
		Dtype:                a.Dtype,
		Quantization:         a.Quantization,
		KVCacheDtype:         a.KVCacheDtype,
		LoadFormat:           a.LoadFormat,
	}
	if a.LoadFormat == "dummy" {
		s.DummySeed = a.Seed
	}
	sp, err := config.ParseSpeculative(a.SpeculativeConfig)
	if err != nil {
		return Settings{}, err
	}
	if sp != nil {
		s.NumSpeculativeTokens = sp.NumSpeculativeTokens
	}
	if p != nil {
		s.MaxModelLen = p.Scheduler.MaxModelLen
		s.BlockSize = p.Scheduler.BlockSize
		s.MaxNumSeqs = p.Scheduler.MaxNumSeqs
		s.MaxNumBatchedTokens = p.Scheduler.MaxNumBatchedTokens
		s.Device = p.Device.Backend
	}
	return s, nil
}

// setting is one named setting: its flag and its value as text.
type setting struct{ flag, value string }

// list is every setting, named by the flag that sets it.
func (s Settings) list() []setting {
	short := s.ModelConfigHash
	if len(short) > 12 {
		short = short[:12]
	}
	return []setting{
		{"--model (config.json sha256)", short},
		{"--tensor-parallel-size", strconv.Itoa(s.TensorParallelSize)},
		{"--data-parallel-size", strconv.Itoa(s.DataParallelSize)},
		{"--enable-expert-parallel", strconv.FormatBool(s.EnableExpertParallel)},
		{"--max-model-len", strconv.Itoa(s.MaxModelLen)},
		{"--block-size", strconv.Itoa(s.BlockSize)},
		{"--max-num-seqs", strconv.Itoa(s.MaxNumSeqs)},
		{"--max-num-batched-tokens", strconv.Itoa(s.MaxNumBatchedTokens)},
		{"--dtype", s.Dtype},
		{"--quantization", orNone(s.Quantization)},
		{"--kv-cache-dtype", s.KVCacheDtype},
		{"--load-format", s.LoadFormat},
		{"--device", s.Device},
		{"--seed (with --load-format dummy)", strconv.FormatInt(s.DummySeed, 10)},
		{"--speculative-config (num_speculative_tokens)", strconv.Itoa(s.NumSpeculativeTokens)},
	}
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// Hash is the SHA-256 of every setting (with the full model config hash).
func (s Settings) Hash() string {
	h := sha256.New()
	fmt.Fprintf(h, "model=%s\n", s.ModelConfigHash)
	for _, x := range s.list() {
		fmt.Fprintf(h, "%s=%s\n", x.flag, x.value)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Diff compares a rank's settings (s) with the head's and describes the
// first difference for rank dpRank of node, e.g.
//
//	headless rank 1 (node 10.0.0.2): --max-model-len 8192 differs from the head's 16384
//
// It returns "" when they are equal.
func (s Settings) Diff(head Settings, dpRank int, node string) string {
	if s.Hash() == head.Hash() {
		return ""
	}
	mine, theirs := s.list(), head.list()
	for i := range mine {
		if mine[i].value != theirs[i].value {
			return fmt.Sprintf("headless rank %d (node %s): %s %s differs from the head's %s", dpRank, node, mine[i].flag, mine[i].value, theirs[i].value)
		}
	}
	return fmt.Sprintf("headless rank %d (node %s): settings hash %s differs from the head's %s", dpRank, node, s.Hash(), head.Hash())
}
