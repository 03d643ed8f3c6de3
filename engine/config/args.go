package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// EngineArgs is the `npuserve serve` command line: the `vllm serve` flags
// that GLM-5.3-Flash launch scripts use, with vLLM's names, spellings and
// meanings, plus npuserve's own (--config, --dry-run, --device-memory,
// --device, --threads). Build makes it from flag assignments (the command
// line parser is cmd/npuserve's; FlagTable and LookupFlag describe the
// flags to it): defaults < settings file (--config) < explicit flags,
// every value validated.
//
// Zero values of the "unset" fields are resolved against config.json by
// BuildPlan (see the field comments).
type EngineArgs struct {
	// Model is the checkpoint: the positional MODEL of `serve MODEL` or
	// --model (a local directory or a repository id).
	Model string

	// Frontend.
	Host                      string   // --host ("" = all interfaces)
	Port                      int      // --port (default 8000)
	ServedModelName           []string // --served-model-name (nil = [Model])
	APIKey                    string   // --api-key
	APIServerCount            int      // --api-server-count (0 = unset: vLLM's default, see Plan)
	ReasoningParser           string   // --reasoning-parser (glm45 | glm47)
	ToolCallParser            string   // --tool-call-parser (glm45 | glm47)
	EnableAutoToolChoice      bool     // --enable-auto-tool-choice
	ChatTemplate              string   // --chat-template (a file or an inline template)
	ChatTemplateContentFormat string   // --chat-template-content-format (auto | string | openai)
	EnableLogRequests         bool     // --enable-log-requests (--disable-log-requests clears it)
	DisableLogStats           bool     // --disable-log-stats
	MaxLogprobs               int      // --max-logprobs (default 20)
	TrustRequestChatTemplate  bool     // --trust-request-chat-template
	EnablePromptTokensDetails bool     // --enable-prompt-tokens-details
	EnableForceIncludeUsage   bool     // --enable-force-include-usage
	ReturnTokensAsTokenIDs    bool     // --return-tokens-as-token-ids
	UvicornLogLevel           string   // --uvicorn-log-level

	// CORS (vLLM's defaults: every origin, method and header, no
	// credentials; nil lists mean ["*"]).
	AllowedOrigins   []string // --allowed-origins (a JSON list)
	AllowedMethods   []string // --allowed-methods (a JSON list)
	AllowedHeaders   []string // --allowed-headers (a JSON list)
	AllowCredentials bool     // --allow-credentials

	// HTTP limits and timeouts (docs/deployment.md, "Limits and timeouts").
	TimeoutKeepAlive          float64 // --timeout-keep-alive seconds (default 5, uvicorn's; VLLM_HTTP_TIMEOUT_KEEP_ALIVE when not given)
	TimeoutRead               float64 // --timeout-read seconds (default 60): a request's headers, then its body
	TimeoutWrite              float64 // --timeout-write seconds (default 60): one response write
	LimitConcurrency          int     // --limit-concurrency (default 4096): open HTTP connections
	MaxRequestBodyBytes       int     // --max-request-body-bytes (default 64 MiB)
	MaxPromptChars            int     // --max-prompt-chars (0 = auto: what max-model-len tokens can hold)
	MaxNumQueuedReqs          int     // --max-num-queued-reqs (-1 = unset: no limit, vLLM's default)
	H11MaxIncompleteEventSize int     // --h11-max-incomplete-event-size (default 4194304): request header bytes
	H11MaxHeaderCount         int     // --h11-max-header-count (default 256)

	// Parallelism and multi-node DP.
	TensorParallelSize    int    // --tensor-parallel-size, -tp (default 1)
	DataParallelSize      int    // --data-parallel-size, -dp (default 1)
	DataParallelSizeLocal int    // --data-parallel-size-local, -dpl (-1 = unset: the DP ranks from the start rank on)
	DataParallelStartRank int    // --data-parallel-start-rank, -dpr (default 0)
	DataParallelAddress   string // --data-parallel-address, -dpa (the head node)
	DataParallelRPCPort   int    // --data-parallel-rpc-port, -dpp (default 29550)
	EnableExpertParallel  bool   // --enable-expert-parallel, -ep
	Headless              bool   // --headless: engine ranks only, no API server

	// Model loading.
	Seed                    int64  // --seed (default 0)
	Quantization            string // --quantization, -q ("" = as config.json says)
	Dtype                   string // --dtype (default auto)
	MaxModelLen             int    // --max-model-len (0 = unset: max_position_embeddings; -1 = auto: the longest that fits)
	TrustRemoteCode         bool   // --trust-remote-code
	LoadFormat              string // --load-format (auto | safetensors | dummy)
	SafetensorsLoadStrategy string // --safetensors-load-strategy
	GenerationConfig        string // --generation-config (auto | vllm | a directory)
	SkipTokenizerInit       bool   // --skip-tokenizer-init

	// Scheduler and cache.
	MaxNumSeqs           int     // --max-num-seqs (0 = unset: vLLM's default for the device)
	MaxNumBatchedTokens  int     // --max-num-batched-tokens (0 = unset: vLLM's default for the device)
	BlockSize            int     // --block-size (0 = unset: 64 rounded up to a multiple of index_kpool)
	GPUMemoryUtilization float64 // --gpu-memory-utilization (default 0.9)
	EnablePrefixCaching  bool    // --enable-prefix-caching / --no-enable-prefix-caching
	KVCacheDtype         string  // --kv-cache-dtype (default auto)
	EnforceEager         bool    // --enforce-eager
	AsyncScheduling      bool    // --async-scheduling
	EnableChunkedPrefill bool    // --enable-chunked-prefill (default true)

	// JSON-valued flags, kept compact; nil when not given.
	LimitMMPerPrompt  json.RawMessage // --limit-mm-per-prompt {"image": N, "video": N}
	CompilationConfig json.RawMessage // --compilation-config
	SpeculativeConfig json.RawMessage // --speculative-config
	AdditionalConfig  json.RawMessage // --additional-config (vllm-ascend tuning keys)
	KVTransferConfig  json.RawMessage // --kv-transfer-config
	HFOverrides       json.RawMessage // --hf-overrides
	ProfilerConfig    json.RawMessage // --profiler-config

	// npuserve's own.
	Config           string // --config: the settings file (JSON or TOML)
	DryRun           bool   // --dry-run: print the resolved Plan and exit
	DeviceMemory     int64  // --device-memory in bytes (0 = unknown)
	DeviceMemoryName string // the preset --device-memory named, if any
	Device           string // --device: auto | cpu | cpu-async | cuda | ascend (default: ascend for an Ascend preset or weight format, else cpu)
	Threads          int    // --threads: CPU backend threads (0 = all cores)

	// given maps each flag that was set to where: "flag" or
	// "settings <key>".
	given map[string]string
	// Settings-file entries that assert the model's structure, checked by
	// BuildPlan, and entries accepted without effect.
	checks          []settingCheck
	ignoredSettings []Ignored
	// epSizeKey/epSize: a settings file's expert-parallel size, checked
	// against DP×TP by BuildPlan.
	epSizeKey string
	epSize    int
	// deviceFallback is why RunImpliedAscendOnCPU moved the deployment
	// to the cpu backend ("" when it did not).
	deviceFallback string
}

// Defaults of the HTTP limits (vLLM's or uvicorn's where they have one).
const (
	// DefaultTimeoutKeepAlive is vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE
	// (uvicorn's timeout_keep_alive), in seconds.
	DefaultTimeoutKeepAlive = 5
	// DefaultTimeoutRead bounds, in seconds, the arrival of a request's
	// headers and then of its body (npuserve's; uvicorn has none).
	DefaultTimeoutRead = 60
	// DefaultTimeoutWrite bounds, in seconds, one response write, e.g. one
	// streamed event, to a client that does not read (npuserve's).
	DefaultTimeoutWrite = 60
	// DefaultLimitConcurrency caps the open HTTP connections (uvicorn's
	// --limit-concurrency has no default; npuserve's keeps the server
	// within its file limit).
	DefaultLimitConcurrency = 4096
	// DefaultMaxRequestBodyBytes bounds a request body: a 1M-token prompt
	// as token ids is about 7 MB of JSON.
	DefaultMaxRequestBodyBytes = 64 << 20
	// DefaultH11MaxIncompleteEventSize is vLLM's
	// --h11-max-incomplete-event-size (bytes of request headers).
	DefaultH11MaxIncompleteEventSize = 4 << 20
	// DefaultH11MaxHeaderCount is vLLM's --h11-max-header-count.
	DefaultH11MaxHeaderCount = 256
)

// Defaults returns EngineArgs with vLLM's defaults (and npuserve's for its
// own flags).
func Defaults() *EngineArgs {
	return &EngineArgs{
		Port:                      8000,
		ChatTemplateContentFormat: "auto",
		UvicornLogLevel:           "info",
		TimeoutKeepAlive:          DefaultTimeoutKeepAlive,
		TimeoutRead:               DefaultTimeoutRead,
		TimeoutWrite:              DefaultTimeoutWrite,
		LimitConcurrency:          DefaultLimitConcurrency,
		MaxRequestBodyBytes:       DefaultMaxRequestBodyBytes,
		MaxNumQueuedReqs:          -1,
		H11MaxIncompleteEventSize: DefaultH11MaxIncompleteEventSize,
		H11MaxHeaderCount:         DefaultH11MaxHeaderCount,
		TensorParallelSize:        1,
		DataParallelSize:          1,
		DataParallelSizeLocal:     -1,
		DataParallelRPCPort:       29550,
		Dtype:                     "auto",
		LoadFormat:                "auto",
		SafetensorsLoadStrategy:   "lazy",
		GenerationConfig:          "auto",
		GPUMemoryUtilization:      0.9,
		KVCacheDtype:              "auto",
		EnableChunkedPrefill:      true,
		given:                     map[string]string{},
	}
}

// Given reports whether flag (its long name, without dashes) was set on
// the command line or in the settings file.
func (a *EngineArgs) Given(flag string) bool {
	_, ok := a.given[flag]
	return ok
}

// Source says where flag's value came from: "flag", "settings <key>" or
// "default".
func (a *EngineArgs) Source(flag string) string {
	if s, ok := a.given[flag]; ok {
		return s
	}
	return "default"
}

// ServedModelNames is --served-model-name, or the model path when unset
// (vLLM's default).
func (a *EngineArgs) ServedModelNames() []string {
	if len(a.ServedModelName) > 0 {
		return a.ServedModelName
	}
	return []string{a.Model}
}

// flagKind is how a flag takes its value.
type flagKind uint8

const (
	kindString flagKind = iota // one value, parsed by set
	kindBool                   // no value; --no-NAME when negate
	kindList                   // one or more values (vLLM nargs="+"); repeatable
	kindJSON                   // one JSON value, parsed by set
)

// flagSpec is one flag: its names, help and how it sets EngineArgs.
type flagSpec struct {
	name    string
	aliases []string
	kind    flagKind
	negate  bool // a bool with vLLM's --no-NAME form (argparse BooleanOptionalAction)
	usage   string
	defText string
	set     func(a *EngineArgs, v string) error   // kindString, kindJSON
	setBool func(a *EngineArgs, v bool)           // kindBool
	setList func(a *EngineArgs, v []string) error // kindList
}

// Choices of the enumerated flags.
var (
	quantizationChoices = []string{"ascend", "fp8", "mxfp8", "modelopt_mxfp8", "w8a8", "w8a8_dynamic", "w8a8_mxfp8"}
	dtypeChoices        = []string{"auto", "half", "float16", "bfloat16", "float", "float32"}
	kvCacheDtypeChoices = []string{"auto", "bfloat16", "float16", "float32", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "int8"}
	loadFormatChoices   = []string{"auto", "safetensors", "dummy"}
	loadStrategyChoices = []string{"lazy", "eager", "prefetch", "torchao"}
	parserChoices       = []string{"glm45", "glm47"}
	deviceChoices       = []string{"auto", "cpu", "cpu-async", "cuda", "ascend"}
	contentFormats      = []string{"auto", "string", "openai"}
	uvicornLevels       = []string{"critical", "error", "warning", "info", "debug", "trace"}
)

// flagTable lists every flag, in help order.
var flagTable = []flagSpec{
	{name: "model", kind: kindString, usage: "model directory or repository id (same as the positional MODEL)",
		set: func(a *EngineArgs, v string) error { return nonEmpty(&a.Model, v) }},
	{name: "config", kind: kindString, usage: "settings file (JSON or TOML); explicit flags override it",
		set: func(a *EngineArgs, v string) error { return nonEmpty(&a.Config, v) }},

	// Frontend.
	{name: "host", kind: kindString, usage: "host name or address to listen on (default: all interfaces)",
		set: func(a *EngineArgs, v string) error { a.Host = v; return nil }},
	{name: "port", kind: kindString, usage: "port to listen on", defText: "8000",
		set: func(a *EngineArgs, v string) error { return intIn(&a.Port, v, 0, 65535) }},
	{name: "served-model-name", kind: kindList, usage: "model name(s) the API answers to; the first is reported (default: MODEL)",
		setList: func(a *EngineArgs, v []string) error {
			for _, s := range v {
				if s == "" {
					return errors.New("a name must not be empty")
				}
			}
			a.ServedModelName = append([]string(nil), v...)
			return nil
		}},
	{name: "api-key", kind: kindString, usage: "require this key as a Bearer token",
		set: func(a *EngineArgs, v string) error { a.APIKey = v; return nil }},
	{name: "api-server-count", kind: kindString, usage: "API server processes (default: vLLM's, see --dry-run)",
		set: func(a *EngineArgs, v string) error { return intIn(&a.APIServerCount, v, 1, 1024) }},
	{name: "reasoning-parser", kind: kindString, usage: "reasoning parser: glm45 or glm47",
		set: func(a *EngineArgs, v string) error { return choice(&a.ReasoningParser, v, parserChoices) }},
	{name: "tool-call-parser", kind: kindString, usage: "tool-call parser: glm47 or glm45",
		set: func(a *EngineArgs, v string) error { return choice(&a.ToolCallParser, v, parserChoices) }},
	{name: "enable-auto-tool-choice", kind: kindBool, negate: true, usage: "let the model decide to call tools (needs --tool-call-parser)",
		setBool: func(a *EngineArgs, v bool) { a.EnableAutoToolChoice = v }},
	{name: "chat-template", kind: kindString, usage: "chat template file or inline Jinja (default: the tokenizer's)",
		set: func(a *EngineArgs, v string) error { return nonEmpty(&a.ChatTemplate, v) }},
	{name: "chat-template-content-format", kind: kindString, usage: "message content format: auto, string or openai", defText: "auto",
		set: func(a *EngineArgs, v string) error { return choice(&a.ChatTemplateContentFormat, v, contentFormats) }},
	{name: "enable-log-requests", kind: kindBool, negate: true, usage: "log every request",
		setBool: func(a *EngineArgs, v bool) { a.EnableLogRequests = v }},
	{name: "disable-log-requests", kind: kindBool, usage: "[deprecated in vLLM] do not log requests",
		setBool: func(a *EngineArgs, v bool) { a.EnableLogRequests = !v }},
	{name: "disable-log-stats", kind: kindBool, negate: true, usage: "do not log engine statistics",
		setBool: func(a *EngineArgs, v bool) { a.DisableLogStats = v }},
	{name: "max-logprobs", kind: kindString, usage: "largest logprobs / top_logprobs a request may ask for", defText: "20",
		set: func(a *EngineArgs, v string) error { return intIn(&a.MaxLogprobs, v, -1, 1<<20) }},
	{name: "trust-request-chat-template", kind: kindBool, negate: true, usage: "allow a chat_template in requests",
		setBool: func(a *EngineArgs, v bool) { a.TrustRequestChatTemplate = v }},
	{name: "enable-prompt-tokens-details", kind: kindBool, negate: true, usage: "report usage.prompt_tokens_details",
		setBool: func(a *EngineArgs, v bool) { a.EnablePromptTokensDetails = v }},
	{name: "enable-force-include-usage", kind: kindBool, negate: true, usage: "send usage in every stream",
		setBool: func(a *EngineArgs, v bool) { a.EnableForceIncludeUsage = v }},
	{name: "return-tokens-as-token-ids", kind: kindBool, negate: true, usage: "logprob tokens as token:ID strings",
		setBool: func(a *EngineArgs, v bool) { a.ReturnTokensAsTokenIDs = v }},
	{name: "uvicorn-log-level", kind: kindString, usage: "HTTP server log level", defText: "info",
		set: func(a *EngineArgs, v string) error { return choice(&a.UvicornLogLevel, v, uvicornLevels) }},
	{name: "allowed-origins", kind: kindString, usage: `CORS origins allowed, a JSON list, e.g. '["https://app.example"]'`, defText: `["*"]`,
		set: func(a *EngineArgs, v string) error { return jsonStrings(&a.AllowedOrigins, v) }},
	{name: "allowed-methods", kind: kindString, usage: `CORS methods allowed, a JSON list`, defText: `["*"]`,
		set: func(a *EngineArgs, v string) error { return jsonStrings(&a.AllowedMethods, v) }},
	{name: "allowed-headers", kind: kindString, usage: `CORS request headers allowed, a JSON list`, defText: `["*"]`,
		set: func(a *EngineArgs, v string) error { return jsonStrings(&a.AllowedHeaders, v) }},
	{name: "allow-credentials", kind: kindBool, negate: true, usage: "CORS: allow credentials",
		setBool: func(a *EngineArgs, v bool) { a.AllowCredentials = v }},
	{name: "timeout-keep-alive", kind: kindString, usage: "seconds an idle keep-alive connection stays open (when not given: VLLM_HTTP_TIMEOUT_KEEP_ALIVE, else 5)", defText: "5",
		set: func(a *EngineArgs, v string) error { return secondsIn(&a.TimeoutKeepAlive, v) }},
	{name: "timeout-read", kind: kindString, usage: "seconds a client has to send a request's headers, and then its body; a slower one is cut", defText: "60",
		set: func(a *EngineArgs, v string) error { return secondsIn(&a.TimeoutRead, v) }},
	{name: "timeout-write", kind: kindString, usage: "seconds one response write (a streamed event) may wait for a client that does not read; then the connection is cut and its requests aborted", defText: "60",
		set: func(a *EngineArgs, v string) error { return secondsIn(&a.TimeoutWrite, v) }},
	{name: "limit-concurrency", kind: kindString, usage: "most open HTTP connections; beyond it the oldest idle one is closed, else the new one gets a 503 (/health is still answered)", defText: "4096",
		set: func(a *EngineArgs, v string) error { return intIn(&a.LimitConcurrency, v, 1, 1<<20) }},
	{name: "max-request-body-bytes", kind: kindString, usage: "largest request body (413 beyond), e.g. 67108864 or 64M", defText: "64M",
		set: func(a *EngineArgs, v string) error {
			n, err := humanInt(v)
			if err != nil {
				return err
			}
			if n < 1024 {
				return fmt.Errorf("must be at least 1024 bytes, got %s", v)
			}
			a.MaxRequestBodyBytes = n
			return nil
		}},
	{name: "max-prompt-chars", kind: kindString, usage: "longest text prompt, in characters, that is tokenized; a longer one is refused before tokenization (0: auto, what --max-model-len tokens can hold)", defText: "auto",
		set: func(a *EngineArgs, v string) error {
			if strings.EqualFold(strings.TrimSpace(v), "auto") {
				a.MaxPromptChars = 0
				return nil
			}
			n, err := humanInt(v)
			if err != nil {
				return err
			}
			if n < 0 {
				return fmt.Errorf("must not be negative (0 or auto: automatic), got %s", v)
			}
			a.MaxPromptChars = n
			return nil
		}},
	{name: "max-num-queued-reqs", kind: kindString, usage: "most generation requests in flight (waiting or running; n counts n times); more get a 503 (default: no limit)",
		set: func(a *EngineArgs, v string) error {
			if strings.TrimSpace(v) == "None" {
				a.MaxNumQueuedReqs = -1
				return nil
			}
			n, err := humanInt(v)
			if err != nil {
				return err
			}
			if n < 0 {
				return fmt.Errorf("must not be negative, got %s", v)
			}
			a.MaxNumQueuedReqs = n
			return nil
		}},
	{name: "h11-max-incomplete-event-size", kind: kindString, usage: "most bytes of request headers (431 beyond)", defText: "4194304",
		set: func(a *EngineArgs, v string) error { return intIn(&a.H11MaxIncompleteEventSize, v, 1024, 1<<30) }},
	{name: "h11-max-header-count", kind: kindString, usage: "most request header fields (431 beyond)", defText: "256",
		set: func(a *EngineArgs, v string) error { return intIn(&a.H11MaxHeaderCount, v, 1, 1<<16) }},

	// Parallelism.
	{name: "tensor-parallel-size", aliases: []string{"tp"}, kind: kindString, usage: "tensor-parallel ranks per DP rank", defText: "1",
		set: func(a *EngineArgs, v string) error { return intIn(&a.TensorParallelSize, v, 1, 4096) }},
	{name: "data-parallel-size", aliases: []string{"dp"}, kind: kindString, usage: "data-parallel ranks (engines) in the whole deployment", defText: "1",
		set: func(a *EngineArgs, v string) error { return intIn(&a.DataParallelSize, v, 1, 4096) }},
	{name: "data-parallel-size-local", aliases: []string{"dpl"}, kind: kindString, usage: "data-parallel ranks on this node",
		set: func(a *EngineArgs, v string) error { return intIn(&a.DataParallelSizeLocal, v, 0, 4096) }},
	{name: "data-parallel-start-rank", aliases: []string{"dpr"}, kind: kindString, usage: "first data-parallel rank on this node", defText: "0",
		set: func(a *EngineArgs, v string) error { return intIn(&a.DataParallelStartRank, v, 0, 4095) }},
	{name: "data-parallel-address", aliases: []string{"dpa"}, kind: kindString, usage: "address of the head node",
		set: func(a *EngineArgs, v string) error { return nonEmpty(&a.DataParallelAddress, v) }},
	{name: "data-parallel-rpc-port", aliases: []string{"dpp"}, kind: kindString, usage: "head node port for the DP handshake", defText: "29550",
		set: func(a *EngineArgs, v string) error { return intIn(&a.DataParallelRPCPort, v, 1, 65535) }},
	{name: "enable-expert-parallel", aliases: []string{"ep"}, kind: kindBool, negate: true, usage: "partition the routed experts over all DP×TP ranks",
		setBool: func(a *EngineArgs, v bool) { a.EnableExpertParallel = v }},
	{name: "headless", kind: kindBool, usage: "run engine ranks only (no API server) and join the head node",
		setBool: func(a *EngineArgs, v bool) { a.Headless = v }},

	// Model loading.
	{name: "seed", kind: kindString, usage: "random seed", defText: "0",
		set: func(a *EngineArgs, v string) error {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return fmt.Errorf("want an integer, got %q", v)
			}
			if n < 0 {
				return fmt.Errorf("must not be negative, got %d", n)
			}
			a.Seed = n
			return nil
		}},
	{name: "quantization", aliases: []string{"q"}, kind: kindString,
		usage: "weight format: ascend (msmodelslim), fp8, mxfp8/modelopt_mxfp8, or w8a8, w8a8_dynamic, w8a8_mxfp8 (default: as config.json says)",
		set: func(a *EngineArgs, v string) error {
			if v == "None" || v == "" { // vLLM's optional_type
				a.Quantization = ""
				return nil
			}
			return choice(&a.Quantization, v, quantizationChoices)
		}},
	{name: "dtype", kind: kindString, usage: "dtype of unquantized weights and activations", defText: "auto",
		set: func(a *EngineArgs, v string) error { return choice(&a.Dtype, v, dtypeChoices) }},
	{name: "max-model-len", kind: kindString, usage: "context length (e.g. 131072, 128k = 128000, 128K = 131072, 1M = 1048576; -1 or auto: the longest that fits)",
		set: func(a *EngineArgs, v string) error {
			if t := strings.TrimSpace(v); t == "-1" || strings.EqualFold(t, "auto") {
				a.MaxModelLen = -1
				return nil
			}
			n, err := humanInt(v)
			if err != nil {
				return err
			}
			if n < 1 {
				return fmt.Errorf("must be positive (or -1/auto), got %s", v)
			}
			a.MaxModelLen = n
			return nil
		}},
	{name: "trust-remote-code", kind: kindBool, negate: true, usage: "accepted for vLLM compatibility (glm5_next is built in)",
		setBool: func(a *EngineArgs, v bool) { a.TrustRemoteCode = v }},
	{name: "load-format", kind: kindString, usage: "auto, safetensors or dummy (random weights)", defText: "auto",
		set: func(a *EngineArgs, v string) error { return choice(&a.LoadFormat, v, loadFormatChoices) }},
	{name: "safetensors-load-strategy", kind: kindString, usage: "lazy, eager, prefetch or torchao (accepted; weights are memory-mapped)", defText: "lazy",
		set: func(a *EngineArgs, v string) error { return choice(&a.SafetensorsLoadStrategy, v, loadStrategyChoices) }},
	{name: "generation-config", kind: kindString, usage: "sampling defaults: auto (the model's generation_config.json), vllm (none) or a directory", defText: "auto",
		set: func(a *EngineArgs, v string) error { return nonEmpty(&a.GenerationConfig, v) }},
	{name: "skip-tokenizer-init", kind: kindBool, negate: true, usage: "take and return token ids only",
		setBool: func(a *EngineArgs, v bool) { a.SkipTokenizerInit = v }},

	// Scheduler and cache.
	{name: "max-num-seqs", kind: kindString, usage: "most sequences running at once per DP rank",
		set: func(a *EngineArgs, v string) error { return intIn(&a.MaxNumSeqs, v, 1, 1<<20) }},
	{name: "max-num-batched-tokens", kind: kindString, usage: "most tokens per step per DP rank (e.g. 8192, 8k, 8K)",
		set: func(a *EngineArgs, v string) error {
			n, err := humanInt(v)
			if err != nil {
				return err
			}
			if n < 1 || n > 1<<26 {
				return fmt.Errorf("must be in [1, %d], got %s", 1<<26, v)
			}
			a.MaxNumBatchedTokens = n
			return nil
		}},
	{name: "block-size", kind: kindString, usage: "cache block size in tokens (a multiple of index_kpool)",
		set: func(a *EngineArgs, v string) error { return intIn(&a.BlockSize, v, 1, 1<<16) }},
	{name: "gpu-memory-utilization", kind: kindString, usage: "fraction of device memory the engine may use", defText: "0.9",
		set: func(a *EngineArgs, v string) error {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return fmt.Errorf("want a number, got %q", v)
			}
			if !(f > 0 && f <= 1) {
				return fmt.Errorf("must be in (0, 1], got %s", strings.TrimSpace(v))
			}
			a.GPUMemoryUtilization = f
			return nil
		}},
	{name: "enable-prefix-caching", kind: kindBool, negate: true, usage: "reuse cached prompt prefixes",
		setBool: func(a *EngineArgs, v bool) { a.EnablePrefixCaching = v }},
	{name: "kv-cache-dtype", kind: kindString, usage: "cache dtype (auto: the planned one)", defText: "auto",
		set: func(a *EngineArgs, v string) error { return choice(&a.KVCacheDtype, v, kvCacheDtypeChoices) }},
	{name: "enforce-eager", kind: kindBool, negate: true, usage: "never capture graphs",
		setBool: func(a *EngineArgs, v bool) { a.EnforceEager = v }},
	{name: "async-scheduling", kind: kindBool, negate: true, usage: "overlap scheduling with the forward pass",
		setBool: func(a *EngineArgs, v bool) { a.AsyncScheduling = v }},
	{name: "enable-chunked-prefill", kind: kindBool, negate: true, usage: "split long prompts over steps (always on in npuserve)",
		setBool: func(a *EngineArgs, v bool) { a.EnableChunkedPrefill = v }},

	// JSON-valued.
	{name: "limit-mm-per-prompt", kind: kindJSON, usage: `most images/videos per prompt, e.g. '{"image": 1, "video": 0}'`,
		set: func(a *EngineArgs, v string) error { return jsonFlag(&a.LimitMMPerPrompt, v, validateLimitMM) }},
	{name: "compilation-config", kind: kindJSON, usage: `graph capture settings, e.g. '{"cudagraph_mode": "FULL_DECODE_ONLY"}'`,
		set: func(a *EngineArgs, v string) error { return jsonFlag(&a.CompilationConfig, v, validateCompilation) }},
	{name: "speculative-config", kind: kindJSON, usage: `speculative decoding, e.g. '{"method": "mtp", "num_speculative_tokens": 3}'`,
		set: func(a *EngineArgs, v string) error { return jsonFlag(&a.SpeculativeConfig, v, validateSpeculative) }},
	{name: "additional-config", kind: kindJSON, usage: "platform-specific settings (vllm-ascend keys; a JSON object)",
		set: func(a *EngineArgs, v string) error { return jsonFlag(&a.AdditionalConfig, v, nil) }},
	{name: "kv-transfer-config", kind: kindJSON, usage: "KV connector for prefill/decode disaggregation (a JSON object)",
		set: func(a *EngineArgs, v string) error { return jsonFlag(&a.KVTransferConfig, v, nil) }},
	{name: "hf-overrides", kind: kindJSON, usage: "overrides of config.json (a JSON object)",
		set: func(a *EngineArgs, v string) error { return jsonFlag(&a.HFOverrides, v, nil) }},
	{name: "profiler-config", kind: kindJSON, usage: "profiler settings (a JSON object)",
		set: func(a *EngineArgs, v string) error { return jsonFlag(&a.ProfilerConfig, v, nil) }},

	// npuserve's own.
	{name: "dry-run", kind: kindBool, usage: "print the resolved plan (ranks, memory, cache) as JSON and exit",
		setBool: func(a *EngineArgs, v bool) { a.DryRun = v }},
	{name: "device-memory", kind: kindString,
		usage: "memory of one device rank: bytes with a suffix (64GiB, 65536MiB, 64e9) or a preset: atlas-800-a2 (64 GiB), atlas-800-a3 (64 GiB per die), 950dt (96 GiB)",
		set: func(a *EngineArgs, v string) error {
			n, name, err := ParseDeviceMemory(v)
			if err != nil {
				return err
			}
			a.DeviceMemory, a.DeviceMemoryName = n, name
			return nil
		}},
	{name: "device", kind: kindString, usage: "backend: auto (the first accelerator whose runtime loads, else cpu), cpu, cpu-async (the checking asynchronous cpu backend), cuda or ascend (default: ascend with an Ascend --device-memory preset or weight format, else cpu)",
		set: func(a *EngineArgs, v string) error { return choice(&a.Device, v, deviceChoices) }},
	{name: "threads", kind: kindString, usage: "CPU backend threads (0: all cores)", defText: "0",
		set: func(a *EngineArgs, v string) error { return intIn(&a.Threads, v, 0, 1<<16) }},
}

// specByName finds a flag by long name or alias; underscores count as
// dashes (vLLM's FlexibleArgumentParser accepts --max_model_len).
func specByName(name string) (*flagSpec, bool) {
	name = strings.ReplaceAll(name, "_", "-")
	for i := range flagTable {
		s := &flagTable[i]
		if s.name == name {
			return s, true
		}
		for _, al := range s.aliases {
			if al == name {
				return s, true
			}
		}
	}
	return nil, false
}

// Assignment is one flag occurrence on a command line, as a parser saw it.
type Assignment struct {
	// Flag is the flag as written, with its dashes: "--port", "-tp",
	// "--max_model_len" (underscores count as dashes), "--no-enforce-eager".
	Flag string
	// Value is a value flag's value (a string or JSON flag).
	Value string
	// List is a list flag's values (vLLM's nargs="+").
	List []string
	// Bool is a bool flag's value as written: true for --enforce-eager and
	// for --no-enforce-eager alike (which turns enforce-eager off);
	// false for --enforce-eager=false.
	Bool bool
}

// resolve finds the assignment's flag in the table.
func (x Assignment) resolve() (assignment, error) {
	info, negated, ok := LookupFlag(x.Flag)
	if !ok {
		return assignment{}, fmt.Errorf("unknown flag %s", x.Flag)
	}
	spec, _ := specByName(info.Name)
	return assignment{spec: spec, name: x.Flag, value: x.Value, list: x.List, on: x.Bool != negated, source: "flag"}, nil
}

// FlagKind is how a flag takes its value.
type FlagKind uint8

// The flag kinds.
const (
	FlagValue FlagKind = iota // one value: --flag value or --flag=value
	FlagBool                  // no value (or =true/=false); --no-NAME when Negatable
	FlagList                  // one or more values (vLLM's nargs="+")
)

// FlagInfo describes one engine flag, for command line parsers and help.
type FlagInfo struct {
	Name      string   // long name without dashes: "tensor-parallel-size"
	Aliases   []string // other names without dashes: "tp" (written -tp)
	Kind      FlagKind
	Negatable bool   // a bool flag with a --no-NAME form
	Usage     string // help text
	Default   string // the default as help shows it ("" for none)
}

// FlagTable lists every engine flag, in help order.
func FlagTable() []FlagInfo {
	out := make([]FlagInfo, len(flagTable))
	for i := range flagTable {
		out[i] = flagTable[i].info()
	}
	return out
}

func (s *flagSpec) info() FlagInfo {
	kind := FlagValue
	switch s.kind {
	case kindBool:
		kind = FlagBool
	case kindList:
		kind = FlagList
	}
	return FlagInfo{Name: s.name, Aliases: s.aliases, Kind: kind, Negatable: s.negate, Usage: s.usage, Default: s.defText}
}

// LookupFlag finds a flag as written on a command line ("--port",
// "-tp", "--max_model_len", "--no-enforce-eager"): leading dashes are
// dropped, underscores count as dashes, aliases count, and "no-NAME"
// finds a negatable NAME with negated set.
func LookupFlag(written string) (info FlagInfo, negated, ok bool) {
	norm := strings.ReplaceAll(strings.TrimLeft(written, "-"), "_", "-")
	if s, found := specByName(norm); found {
		return s.info(), false, true
	}
	if n, isNo := strings.CutPrefix(norm, "no-"); isNo {
		if s, found := specByName(n); found && s.negate {
			return s.info(), true, true
		}
	}
	return FlagInfo{}, false, false
}

// assignment is one resolved flag occurrence, in command-line order.
type assignment struct {
	spec   *flagSpec
	name   string // as written, for messages: "--port", "-tp", "--no-enforce-eager"
	value  string
	list   []string
	on     bool // kindBool
	source string
}

// Build makes EngineArgs from flag assignments, in command-line order,
// and the positional arguments (at most one: MODEL): defaults < the
// --config settings file < the assignments (later ones win). It is the
// data-level way in for any command line parser, and for tests. Every
// error names the flag (as written in the assignment) or settings key.
func Build(assignments []Assignment, positional []string) (*EngineArgs, error) {
	as := make([]assignment, len(assignments))
	for i, x := range assignments {
		r, err := x.resolve()
		if err != nil {
			return nil, err
		}
		as[i] = r
	}
	a := Defaults()
	// The settings file is named by the last --config.
	for _, x := range as {
		if x.spec.name == "config" {
			if err := x.spec.set(a, x.value); err != nil {
				return nil, fmt.Errorf("%s: %v", x.name, err)
			}
		}
	}
	if a.Config != "" {
		st, err := loadSettings(a.Config)
		if err != nil {
			return nil, err
		}
		if err := st.apply(a); err != nil {
			return nil, err
		}
	}
	for _, x := range as {
		if err := x.apply(a); err != nil {
			return nil, err
		}
	}
	if len(positional) > 0 {
		if a.Source("model") == "flag" {
			return nil, fmt.Errorf("unexpected argument %q: the model is already given by --model", positional[0])
		}
		a.Model = positional[0]
		a.given["model"] = "flag"
		positional = positional[1:]
	}
	if len(positional) > 0 {
		return nil, fmt.Errorf("unexpected argument %q (one MODEL only; flags start with --)", positional[0])
	}
	if err := a.validate(); err != nil {
		return nil, err
	}
	return a, nil
}

// apply sets one flag occurrence.
func (x assignment) apply(a *EngineArgs) error {
	s := x.spec
	var err error
	switch s.kind {
	case kindBool:
		s.setBool(a, x.on)
	case kindList:
		err = s.setList(a, x.list)
	default:
		err = s.set(a, x.value)
	}
	if err != nil {
		return fmt.Errorf("%s: %v", x.name, err)
	}
	a.given[s.name] = x.source
	return nil
}

// validate checks combinations of flags; single values were checked when
// set.
func (a *EngineArgs) validate() error {
	if a.Model == "" {
		return errors.New("no model: give it as `serve MODEL`, --model or model_path in --config")
	}
	if a.DataParallelStartRank >= a.DataParallelSize {
		return fmt.Errorf("--data-parallel-start-rank: must be below --data-parallel-size (%d), got %d", a.DataParallelSize, a.DataParallelStartRank)
	}
	if a.DataParallelSizeLocal > a.DataParallelSize-a.DataParallelStartRank {
		return fmt.Errorf("--data-parallel-size-local: %d ranks from --data-parallel-start-rank %d exceed --data-parallel-size %d",
			a.DataParallelSizeLocal, a.DataParallelStartRank, a.DataParallelSize)
	}
	if a.Headless {
		if a.Given("api-server-count") {
			return fmt.Errorf("--api-server-count: cannot be used with --headless (a headless node runs no API server), got %d", a.APIServerCount)
		}
		if a.DataParallelSizeLocal == 0 {
			return errors.New("--data-parallel-size-local: must be > 0 with --headless, got 0")
		}
		if a.DataParallelAddress == "" {
			return errors.New("--headless: needs --data-parallel-address (the head node's address)")
		}
	}
	if a.EnableAutoToolChoice && a.ToolCallParser == "" {
		return errors.New("--enable-auto-tool-choice: needs --tool-call-parser (glm47 for GLM-5.3-Flash)")
	}
	if a.MaxNumSeqs > 0 && a.MaxNumBatchedTokens > 0 && a.MaxNumBatchedTokens < a.MaxNumSeqs {
		return fmt.Errorf("--max-num-batched-tokens: must be at least --max-num-seqs (%d), got %d", a.MaxNumSeqs, a.MaxNumBatchedTokens)
	}
	ascendPreset := a.DeviceMemoryName != ""
	if a.Device == "" {
		// Like vllm-ascend, an Ascend-only weight format or an Ascend
		// device preset means the Ascend backend. (The cpu backend runs
		// these formats too, from an msmodelslim checkpoint, when asked
		// with --device cpu, or when CANN does not load; see
		// RunImpliedAscendOnCPU.)
		a.Device = "cpu"
		if ascendPreset || a.ascendQuant() {
			a.Device = "ascend"
		}
	} else if HostBackend(a.Device) && ascendPreset {
		return fmt.Errorf("--device-memory: %s is an Ascend device but --device is cpu (give a byte size for the cpu)", a.DeviceMemoryName)
	}
	return nil
}

// ascendQuant reports whether --quantization names an Ascend weight
// format (msmodelslim's, or MXFP8): everything but fp8.
func (a *EngineArgs) ascendQuant() bool {
	return a.Quantization != "" && a.Quantization != "fp8"
}

// RunImpliedAscendOnCPU moves a deployment whose Ascend backend only
// --quantization implied (no --device, no Ascend --device-memory preset)
// to the cpu backend when the Ascend runtime does not load here
// (unavailable, npu.Available's error: a vllm-ascend launch line run on a
// machine without CANN), and returns the one-line warning to log; the cpu
// backend runs msmodelslim checkpoints with its int8 and MXFP8 kernels.
// Where CANN loads (unavailable nil), or the device was given, it returns
// "" and changes nothing: the script starts the real backend. --dry-run
// plans keep the implied device.
func (a *EngineArgs) RunImpliedAscendOnCPU(unavailable error) string {
	if unavailable == nil || a.Device != "ascend" || a.Given("device") || a.DeviceMemoryName != "" || !a.ascendQuant() {
		return ""
	}
	a.Device = "cpu"
	a.deviceFallback = "--quantization " + a.Quantization + " implies the Ascend backend, which does not load here: the cpu backend"
	return fmt.Sprintf("--quantization %s implies the Ascend backend, which does not load here (%v); running the msmodelslim checkpoint on the cpu backend", a.Quantization, unavailable)
}

// deviceSource says why the backend was chosen.
func (a *EngineArgs) deviceSource() string {
	switch {
	case a.Given("device"):
		return a.Source("device")
	case a.deviceFallback != "":
		return a.deviceFallback
	case a.DeviceMemoryName != "":
		return "--device-memory " + a.DeviceMemoryName
	case a.ascendQuant():
		return "--quantization " + a.Quantization + " (an Ascend weight format)"
	}
	return "default"
}

// Ignored is a flag (or settings key) that was given but does nothing on
// the running backend, with the reason.
type Ignored struct {
	Flag   string `json:"flag"`
	Reason string `json:"reason"`
}

// WithoutEffect lists the flags and settings keys that were given but have
// no effect on backend ("cpu", "cuda" or "ascend"), with reasons, in flag
// order. (What of --compilation-config has no effect on a backend that
// captures graphs is in Graphs' notes.)
func (a *EngineArgs) WithoutEffect(backend string) []Ignored {
	var out []Ignored
	add := func(flag, reason string) { out = append(out, Ignored{Flag: "--" + flag, Reason: reason}) }
	graphs := contains(GraphBackends, backend)
	if a.Given("compilation-config") && !graphs {
		add("compilation-config", fmt.Sprintf("graph capture needs a backend that captures graphs (%s); every step runs eagerly on %s", strings.Join(GraphBackends, ", "), backend))
	}
	if a.Given("enforce-eager") && a.EnforceEager && !graphs {
		add("enforce-eager", "every step already runs eagerly")
	}
	if a.Given("trust-remote-code") && a.TrustRemoteCode {
		add("trust-remote-code", "glm5_next is built in; no remote code runs")
	}
	if a.Given("safetensors-load-strategy") {
		add("safetensors-load-strategy", "checkpoints are memory-mapped whatever the strategy")
	}
	if a.Given("speculative-config") && strings.Contains(string(a.SpeculativeConfig), `"enforce_eager"`) {
		add("speculative-config", "enforce_eager: the MTP drafter always runs eagerly (no graph capture), whatever its value")
	}
	if a.Given("limit-mm-per-prompt") {
		add("limit-mm-per-prompt", "image and video inputs are not implemented yet (text only)")
	}
	if !cacheHonored(a.KVCacheDtype) {
		add("kv-cache-dtype", fmt.Sprintf("%s caches are not implemented; the cache is kept in %s on the %s backend", a.KVCacheDtype, CacheDType("auto", backend, fmtBF16), backend))
	}
	if a.EnablePrefixCaching {
		add("enable-prefix-caching", "prefix caching is not implemented yet")
	}
	if a.EnablePromptTokensDetails {
		add("enable-prompt-tokens-details", "prompt_tokens_details only reports prefix-cache hits, and prefix caching is not implemented")
	}
	if a.Given("async-scheduling") && a.AsyncScheduling {
		add("async-scheduling", "scheduling is synchronous")
	}
	if a.Given("enable-chunked-prefill") && !a.EnableChunkedPrefill {
		add("enable-chunked-prefill", "long prompts are always split at --max-num-batched-tokens")
	}
	if a.Given("additional-config") {
		add("additional-config", "vllm-ascend tuning keys have no npuserve equivalent")
	}
	if a.Given("kv-transfer-config") {
		add("kv-transfer-config", "prefill/decode disaggregation is not implemented")
	}
	if a.Given("hf-overrides") {
		add("hf-overrides", "config.json is used as is")
	}
	if a.Given("profiler-config") {
		add("profiler-config", "the profiler is not implemented")
	}
	if a.Given("api-server-count") && a.APIServerCount > 1 {
		add("api-server-count", "one HTTP server serves every request")
	}
	if a.Given("uvicorn-log-level") {
		add("uvicorn-log-level", "use npuserve's --log-level")
	}
	if !HostBackend(backend) && a.Given("threads") {
		add("threads", "only the cpu backend uses --threads")
	}
	if a.Headless {
		for _, f := range httpServerFlags {
			if a.Given(f) {
				add(f, "a --headless node runs no API server")
			}
		}
	} else if a.SkipTokenizerInit && a.Given("max-prompt-chars") {
		add("max-prompt-chars", "no text is tokenized with --skip-tokenizer-init")
	}
	out = append(out, a.ignoredSettings...)
	return out
}

// httpServerFlags are the flags that only shape the API server.
var httpServerFlags = []string{"allowed-origins", "allowed-methods", "allowed-headers", "allow-credentials",
	"timeout-keep-alive", "timeout-read", "timeout-write", "limit-concurrency", "max-request-body-bytes",
	"max-prompt-chars", "max-num-queued-reqs", "h11-max-incomplete-event-size", "h11-max-header-count"}

// HostBackend reports whether backend computes on the host CPU (the cpu
// reference backend and its checking asynchronous twin, cpu-async): such
// backends compute and cache in float32 and use --threads.
func HostBackend(backend string) bool { return backend == "cpu" || backend == "cpu-async" }

// ---- value parsers (errors without the flag name; the caller adds it) ----

func nonEmpty(dst *string, v string) error {
	if v == "" {
		return errors.New("must not be empty")
	}
	*dst = v
	return nil
}

func intIn(dst *int, v string, lo, hi int) error {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return fmt.Errorf("want an integer, got %q", v)
	}
	if n < lo || n > hi {
		return fmt.Errorf("must be in [%d, %d], got %d", lo, hi, n)
	}
	*dst = n
	return nil
}

// secondsIn parses a positive number of seconds (at most a day).
func secondsIn(dst *float64, v string) error {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil {
		return fmt.Errorf("want a number of seconds, got %q", v)
	}
	if !(f > 0 && f <= 86400) {
		return fmt.Errorf("must be in (0, 86400] seconds, got %s", strings.TrimSpace(v))
	}
	*dst = f
	return nil
}

// jsonStrings parses a JSON list of strings (vLLM reads --allowed-origins
// and its siblings with json.loads).
func jsonStrings(dst *[]string, v string) error {
	var list []string
	if err := json.Unmarshal([]byte(v), &list); err != nil || list == nil {
		return fmt.Errorf("want a JSON list of strings such as '[\"*\"]', got %s", abbrevString(v))
	}
	*dst = list
	return nil
}

func choice(dst *string, v string, choices []string) error {
	for _, c := range choices {
		if v == c {
			*dst = v
			return nil
		}
	}
	return fmt.Errorf("must be one of %s; got %q", strings.Join(choices, ", "), v)
}

var humanIntRE = regexp.MustCompile(`^(\d+(?:\.\d+)?)([kKmMgGtT])$`)

// humanInt is vLLM's human_readable_int: lower-case k/m/g/t are decimal
// (25.6k = 25600), upper-case K/M/G/T binary (1K = 1024, decimals not
// allowed), anything else a plain integer.
func humanInt(v string) (int, error) {
	s := strings.TrimSpace(v)
	if m := humanIntRE.FindStringSubmatch(s); m != nil {
		num, suf := m[1], m[2][0]
		var n float64
		switch suf {
		case 'k', 'm', 'g', 't':
			f, _ := strconv.ParseFloat(num, 64)
			n = math.Trunc(f * map[byte]float64{'k': 1e3, 'm': 1e6, 'g': 1e9, 't': 1e12}[suf])
		default:
			i, err := strconv.Atoi(num)
			if err != nil {
				return 0, fmt.Errorf("decimals are not allowed with binary suffixes like %c; did you mean %s%c? got %q", suf, num, suf+'a'-'A', v)
			}
			n = float64(i) * map[byte]float64{'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30, 'T': 1 << 40}[suf]
		}
		if n > math.MaxInt32 {
			return 0, fmt.Errorf("%q is too large", v)
		}
		return int(n), nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("want an integer such as 131072, 128k or 128K, got %q", v)
	}
	return n, nil
}

// Device memory presets: memory of one device rank.
var deviceMemoryPresets = map[string]int64{
	"atlas-800-a2": 64 << 30, // 910B: 65536 MB HBM per NPU (npu-smi)
	"atlas-800-a3": 64 << 30, // 910C: 65536 MB HBM per die; a die is one rank (16 per node)
	"950dt":        96 << 30, // Ascend 950DT: "96GB × 8" per node (vllm-ascend GLM-5.3-Flash guide)
}

// DeviceMemoryPresets returns the --device-memory preset names, sorted.
func DeviceMemoryPresets() []string {
	var out []string
	for k := range deviceMemoryPresets {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

var byteSizeRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?(?:[eE][0-9]+)?)\s*([A-Za-z]*)$`)

// ParseDeviceMemory parses --device-memory: a preset name (returned as
// name) or a byte count with an optional unit: B, K/KiB/Ki, M/MiB/Mi,
// G/GiB/Gi, T/TiB/Ti (binary) or kB/KB, MB, GB, TB (decimal).
func ParseDeviceMemory(v string) (bytes int64, name string, err error) {
	s := strings.TrimSpace(v)
	if n, ok := deviceMemoryPresets[strings.ToLower(s)]; ok {
		return n, strings.ToLower(s), nil
	}
	m := byteSizeRE.FindStringSubmatch(s)
	if m == nil {
		return 0, "", fmt.Errorf("want a byte size (64GiB, 65536MiB) or a preset (%s), got %q", strings.Join(DeviceMemoryPresets(), ", "), v)
	}
	units := map[string]float64{
		"": 1, "b": 1,
		"k": 1 << 10, "ki": 1 << 10, "kib": 1 << 10, "kb": 1e3,
		"m": 1 << 20, "mi": 1 << 20, "mib": 1 << 20, "mb": 1e6,
		"g": 1 << 30, "gi": 1 << 30, "gib": 1 << 30, "gb": 1e9,
		"t": 1 << 40, "ti": 1 << 40, "tib": 1 << 40, "tb": 1e12,
	}
	mult, ok := units[strings.ToLower(m[2])]
	if !ok {
		return 0, "", fmt.Errorf("unknown unit %q in %q (want B, KiB, MiB, GiB, TiB, kB, MB, GB or TB)", m[2], v)
	}
	f, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, "", fmt.Errorf("want a byte size, got %q", v)
	}
	b := f * mult
	if !(b >= 1) || b > 1<<50 {
		return 0, "", fmt.Errorf("must be between 1 byte and 1 PiB, got %q", v)
	}
	return int64(b), "", nil
}

// ---- JSON-valued flags ----

// jsonFlag parses v as a JSON object, validates it and stores it compact.
func jsonFlag(dst *json.RawMessage, v string, check func(map[string]any) error) error {
	dec := json.NewDecoder(strings.NewReader(v))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		return fmt.Errorf("invalid JSON %s: %v", abbrevString(v), err)
	}
	if dec.More() {
		return fmt.Errorf("invalid JSON %s: trailing data", abbrevString(v))
	}
	obj, ok := x.(map[string]any)
	if !ok {
		return fmt.Errorf("want a JSON object, got %s", abbrevString(v))
	}
	if check != nil {
		if err := check(obj); err != nil {
			return err
		}
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(v)); err != nil {
		return fmt.Errorf("invalid JSON %s: %v", abbrevString(v), err)
	}
	*dst = buf.Bytes()
	return nil
}

func abbrevString(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return strconv.Quote(s)
}

// jsonInt reads a non-negative integer JSON number.
func jsonInt(key string, v any) (int, error) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("%s: want an integer, got %v", key, jsonText(v))
	}
	i, err := strconv.Atoi(n.String())
	if err != nil || i < 0 {
		return 0, fmt.Errorf("%s: want a non-negative integer, got %s", key, n)
	}
	return i, nil
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// validateLimitMM checks {"image": N, "video": N} (a count may also be an
// object with a "count", as newer vLLM allows).
func validateLimitMM(m map[string]any) error {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if k != "image" && k != "video" {
			return fmt.Errorf("modality %q: glm5_next takes image and video inputs", k)
		}
		v := m[k]
		if obj, ok := v.(map[string]any); ok {
			c, ok := obj["count"]
			if !ok {
				return fmt.Errorf("%s: want a count or an object with \"count\", got %s", k, jsonText(v))
			}
			v = c
		}
		if _, err := jsonInt(k, v); err != nil {
			return err
		}
	}
	return nil
}

var cudagraphModes = []string{"NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"}

// validateCompilation checks the compilation-config keys npuserve reads.
func validateCompilation(m map[string]any) error {
	if v, ok := m["cudagraph_mode"]; ok {
		s, isStr := v.(string)
		if !isStr || !contains(cudagraphModes, s) {
			return fmt.Errorf("cudagraph_mode: must be one of %s; got %s", strings.Join(cudagraphModes, ", "), jsonText(v))
		}
	}
	if v, ok := m["cudagraph_capture_sizes"]; ok {
		list, isList := v.([]any)
		if !isList {
			return fmt.Errorf("cudagraph_capture_sizes: want a list of batch sizes, got %s", jsonText(v))
		}
		for _, x := range list {
			n, err := jsonInt("cudagraph_capture_sizes", x)
			if err != nil || n < 1 {
				return fmt.Errorf("cudagraph_capture_sizes: want positive integers, got %s", jsonText(x))
			}
		}
	}
	return nil
}

// validateSpeculative checks method (MTP only: SpeculativeMethods),
// num_speculative_tokens (1..MaxSpeculativeTokens) and enforce_eager (a
// vllm-ascend key).
func validateSpeculative(m map[string]any) error {
	v, ok := m["method"]
	if !ok {
		return fmt.Errorf("method: required (%s)", strings.Join(SpeculativeMethods, " or "))
	}
	if s, isStr := v.(string); !isStr || !contains(SpeculativeMethods, s) {
		return fmt.Errorf("method: %s is not supported; npuserve runs the model's MTP layer (method %s)", jsonText(v), strings.Join(SpeculativeMethods, " or "))
	}
	v, ok = m["num_speculative_tokens"]
	if !ok {
		return errors.New("num_speculative_tokens: required")
	}
	if n, err := jsonInt("num_speculative_tokens", v); err != nil || n < 1 || n > MaxSpeculativeTokens {
		return fmt.Errorf("num_speculative_tokens: must be in [1, %d], got %s", MaxSpeculativeTokens, jsonText(v))
	}
	if v, ok := m["enforce_eager"]; ok {
		if _, isBool := v.(bool); !isBool {
			return fmt.Errorf("enforce_eager: want true or false, got %s", jsonText(v))
		}
	}
	return nil
}
