package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Plan is what `npuserve serve MODEL --dry-run` prints: the deployment the
// flags and config.json resolve to, computed without reading weights or
// touching a device. Field names are stable (snake_case JSON); byte counts
// are per device rank unless a name says otherwise.
type Plan struct {
	Model     PlanModel     `json:"model"`
	Device    PlanDevice    `json:"device"`
	Parallel  PlanParallel  `json:"parallel"`
	Params    PlanParams    `json:"params"`
	Weights   PlanWeights   `json:"weights"`
	Nodes     []PlanNode    `json:"nodes"`
	Ranks     []PlanRank    `json:"ranks"`
	Scheduler PlanScheduler `json:"scheduler"`
	Cache     PlanCache     `json:"cache"`
	// Memory is nil when the device memory is unknown (no --device-memory).
	Memory                *PlanMemory    `json:"memory"`
	Generation            PlanGeneration `json:"generation"`
	Frontend              PlanFrontend   `json:"frontend"`
	AcceptedWithoutEffect []Ignored      `json:"accepted_without_effect"`
	Notes                 []string       `json:"notes"`
}

// PlanModel is what config.json says.
type PlanModel struct {
	Path                  string `json:"path"`
	ModelType             string `json:"model_type"`
	Dtype                 string `json:"dtype"`
	MaxPositionEmbeddings int    `json:"max_position_embeddings"`
	VocabSize             int    `json:"vocab_size"`
	HiddenSize            int    `json:"hidden_size"`
	Layers                int    `json:"layers"`
	KDALayers             int    `json:"kda_layers"`
	DSALayers             int    `json:"dsa_layers"`
	MTPLayers             int    `json:"mtp_layers"`
	RoutedExperts         int    `json:"routed_experts"`
	ExpertsPerToken       int    `json:"experts_per_token"`
	SharedExperts         int    `json:"shared_experts"`
	Vision                bool   `json:"vision"`
}

// PlanDevice is the backend and one rank's memory.
type PlanDevice struct {
	Backend            string `json:"backend"`
	BackendSource      string `json:"backend_source"`
	MemoryBytes        int64  `json:"memory_bytes"`
	MemoryPreset       string `json:"memory_preset"`
	MemorySource       string `json:"memory_source"`
	ActivationDtype    string `json:"activation_dtype"`
	ActivationDtypeSrc string `json:"activation_dtype_source"`
}

// PlanParallel is the DP×TP(×EP) layout.
type PlanParallel struct {
	TensorParallelSize    int    `json:"tensor_parallel_size"`
	DataParallelSize      int    `json:"data_parallel_size"`
	WorldSize             int    `json:"world_size"`
	ExpertParallel        bool   `json:"expert_parallel"`
	ExpertParallelSize    int    `json:"expert_parallel_size"`
	RoutedExpertsPerRank  int    `json:"routed_experts_per_rank"`
	DataParallelSizeLocal int    `json:"data_parallel_size_local"`
	DataParallelStartRank int    `json:"data_parallel_start_rank"`
	Nodes                 int    `json:"nodes"`
	ThisNode              int    `json:"this_node"`
	Headless              bool   `json:"headless"`
	LoadBalancing         string `json:"load_balancing"`
	HeadAddress           string `json:"head_address"`
	RPCPort               int    `json:"rpc_port"`
	DPCoordinator         bool   `json:"dp_coordinator"`
	// Lockstep: the DP ranks step together (dummy steps when idle)
	// because expert parallelism spans them (engine/worker).
	Lockstep bool   `json:"lockstep"`
	Sharding string `json:"sharding"`
}

// PlanParams counts parameters (elements) of the text model.
type PlanParams struct {
	Total         int64 `json:"total"`
	Active        int64 `json:"active"`
	MTP           int64 `json:"mtp"`
	MTPActive     int64 `json:"mtp_active"`
	TotalWithMTP  int64 `json:"total_with_mtp"`
	ActiveWithMTP int64 `json:"active_with_mtp"`
}

// PlanWeights is the weight format and what one rank holds.
type PlanWeights struct {
	CheckpointFormat string `json:"checkpoint_format"`
	FormatSource     string `json:"format_source"`
	DeviceFormat     string `json:"device_format"`
	// QuantizedBytes is the bytes per parameter of the tensors stored
	// quantized (the large projections; see Parts[].Quantized), "none"
	// for an unquantized format; MatrixBytes and OtherBytes are the
	// bytes per parameter of the other matmul weights and of the
	// remaining tensors (norms, biases, mHC, router, conv).
	QuantizedBytes string     `json:"quantized_bytes_per_param"`
	MatrixBytes    int        `json:"matrix_bytes_per_param"`
	OtherBytes     int        `json:"other_bytes_per_param"`
	Scales         string     `json:"scales"`
	Parts          []PlanPart `json:"parts"`
	// Per rank: the largest rank (the first ranks take the remainder of
	// an uneven expert split).
	ParamsPerRank int64 `json:"params_per_rank"`
	BytesPerRank  int64 `json:"bytes_per_rank"`
	// BytesAllRanks is the sum over the whole deployment.
	BytesAllRanks int64 `json:"bytes_all_ranks"`
	MTPLoaded     bool  `json:"mtp_loaded"`
	// MTP layers' share of one rank, were they loaded.
	MTPParamsPerRank int64 `json:"mtp_params_per_rank"`
	MTPBytesPerRank  int64 `json:"mtp_bytes_per_rank"`
}

// PlanPart is one part of the main model on the largest rank.
type PlanPart struct {
	Name          string `json:"name"`
	Sharding      string `json:"sharding"`
	Quantized     bool   `json:"quantized"`
	Params        int64  `json:"params"`
	ParamsPerRank int64  `json:"params_per_rank"`
	BytesPerRank  int64  `json:"bytes_per_rank"`
}

// PlanNode is one node of the deployment.
type PlanNode struct {
	Node         int    `json:"node"`
	Role         string `json:"role"` // head | headless | hybrid
	FirstDPRank  int    `json:"first_dp_rank"`
	DPRanks      int    `json:"dp_ranks"`
	Devices      int    `json:"devices"`
	APIServers   int    `json:"api_servers"`
	ThisNode     bool   `json:"this_node"`
	RunsDPCoord  bool   `json:"dp_coordinator"`
	Description  string `json:"description"`
	HeadAddress  string `json:"head_address,omitempty"`
	RPCPortInUse int    `json:"rpc_port,omitempty"`
}

// PlanRank is one device rank.
type PlanRank struct {
	Rank          int   `json:"rank"`
	DPRank        int   `json:"dp_rank"`
	TPRank        int   `json:"tp_rank"`
	EPRank        int   `json:"ep_rank"` // -1 without expert parallelism
	Node          int   `json:"node"`
	Device        int   `json:"device"` // device index on its node
	ThisNode      bool  `json:"this_node"`
	APIServer     bool  `json:"api_server"`
	DPCoordinator bool  `json:"dp_coordinator"`
	FirstExpert   int   `json:"first_expert"` // routed experts [first, first+count) per MoE layer
	Experts       int   `json:"experts"`
	Params        int64 `json:"params"`
	WeightBytes   int64 `json:"weight_bytes"`
}

// PlanScheduler is the scheduler's limits per DP rank.
type PlanScheduler struct {
	MaxModelLen               int    `json:"max_model_len"`
	MaxModelLenSource         string `json:"max_model_len_source"`
	MaxNumSeqs                int    `json:"max_num_seqs"`
	MaxNumSeqsSource          string `json:"max_num_seqs_source"`
	MaxNumBatchedTokens       int    `json:"max_num_batched_tokens"`
	MaxNumBatchedTokensSource string `json:"max_num_batched_tokens_source"`
	BlockSize                 int    `json:"block_size"`
	BlockSizeSource           string `json:"block_size_source"`
	ChunkedPrefill            bool   `json:"chunked_prefill"`
	PrefixCaching             bool   `json:"prefix_caching"`
	Seed                      int64  `json:"seed"`
}

// PlanCache is the cache footprint, per rank (every TP rank of a DP rank
// holds the cache of that DP rank's sequences: the DSA latent and indexer
// keys are not split by heads; the KDA conv window and recurrent state
// are, so each TP rank holds 1/TP of them).
type PlanCache struct {
	Dtype      string `json:"dtype"`
	StateDtype string `json:"state_dtype"`
	// Per token position, summed over the DSA layers: kv_lora_rank latent,
	// raw indexer key and gate rows (full-indexer layers) and the token's
	// share of a pooled key.
	BytesPerToken         int64 `json:"bytes_per_token"`
	LatentBytesPerToken   int64 `json:"latent_bytes_per_token"`
	IndexerBytesPerToken  int64 `json:"indexer_bytes_per_token"`
	PooledBytesPerToken   int64 `json:"pooled_bytes_per_token"`
	DSALayersCached       int   `json:"dsa_layers_cached"`
	FullIndexerLayers     int   `json:"full_indexer_layers"`
	BytesPerSequenceState int64 `json:"bytes_per_sequence_state"`
	ConvBytesPerSequence  int64 `json:"conv_bytes_per_sequence"`
	StateBytesPerSequence int64 `json:"recurrent_state_bytes_per_sequence"`
	KDALayersCached       int   `json:"kda_layers_cached"`
	// A sequence of max_model_len tokens (rounded up to whole blocks).
	TokensPerMaxLenSequence int64 `json:"tokens_per_max_len_sequence"`
	BytesPerMaxLenSequence  int64 `json:"bytes_per_max_len_sequence"`
}

// PlanMemory is one rank's memory budget.
type PlanMemory struct {
	DeviceMemoryBytes    int64       `json:"device_memory_bytes"`
	GPUMemoryUtilization float64     `json:"gpu_memory_utilization"`
	UsableBytes          int64       `json:"usable_bytes"`
	WeightBytes          int64       `json:"weight_bytes"`
	Reserve              PlanReserve `json:"reserve"`
	CacheBudgetBytes     int64       `json:"cache_budget_bytes"`
	// Fixed per-sequence state slots (max_num_seqs) and the paged token
	// blocks that fit beside them.
	StateSlots    int   `json:"state_slots"`
	StateBytes    int64 `json:"state_bytes"`
	NumBlocks     int64 `json:"num_blocks"`
	TokenCapacity int64 `json:"token_capacity"`
	// How many sequences of max_model_len tokens fit in the cache budget
	// (each with its state), per DP rank and in the whole deployment.
	SequencesAtMaxLenPerDPRank int64 `json:"sequences_at_max_model_len_per_dp_rank"`
	SequencesAtMaxLen          int64 `json:"sequences_at_max_model_len"`
	// Running sequences max_num_seqs allows at max_model_len, per DP rank.
	ConcurrentAtMaxLenPerDPRank int64 `json:"concurrent_at_max_model_len_per_dp_rank"`
	Fits                        bool  `json:"fits"`
}

// PlanReserve is memory kept for activations and the runtime.
type PlanReserve struct {
	ActivationBytes int64  `json:"activation_bytes"`
	LogitsBytes     int64  `json:"logits_bytes"`
	RuntimeBytes    int64  `json:"runtime_bytes"`
	TotalBytes      int64  `json:"total_bytes"`
	Basis           string `json:"basis"`
}

// PlanGeneration is the sampling defaults requests start from.
type PlanGeneration struct {
	Source            string   `json:"source"`
	EOSTokenIDs       []int    `json:"eos_token_ids"`
	Temperature       *float64 `json:"temperature"`
	TopP              *float64 `json:"top_p"`
	TopK              *int     `json:"top_k"`
	MinP              *float64 `json:"min_p"`
	RepetitionPenalty *float64 `json:"repetition_penalty"`
	MaxNewTokens      *int     `json:"max_new_tokens"`
}

// PlanFrontend is the HTTP side.
type PlanFrontend struct {
	Host                 string   `json:"host"`
	Port                 int      `json:"port"`
	ServedModelNames     []string `json:"served_model_names"`
	APIServerCount       int      `json:"api_server_count"`
	APIServerCountSource string   `json:"api_server_count_source"`
	APIKey               bool     `json:"api_key"`
	ReasoningParser      string   `json:"reasoning_parser"`
	ToolCallParser       string   `json:"tool_call_parser"`
	AutoToolChoice       bool     `json:"auto_tool_choice"`
	ChatTemplate         string   `json:"chat_template"`
	LoadFormat           string   `json:"load_format"`
}

// JSON renders the plan, indented, with a final newline.
func (p *Plan) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Weight formats (PlanWeights.CheckpointFormat / DeviceFormat).
const (
	fmtBF16       = "bfloat16"
	fmtF16        = "float16"
	fmtF32        = "float32"
	fmtFP8Block   = "fp8_block128"
	fmtFP8Tensor  = "fp8_per_tensor"
	fmtW8A8       = "w8a8"
	fmtW8A8Dyn    = "w8a8_dynamic"
	fmtMXFP8      = "mxfp8"
	gib           = int64(1) << 30
	mib           = int64(1) << 20
	hcclBuffBytes = 200 * mib // HCCL_BUFFSIZE default, per communicator
)

// planner carries the resolved settings while a plan is built.
type planner struct {
	a       *EngineArgs
	c       *ModelConfig
	backend string
	tp      int
	dp      int
	ep      int // expert-parallel ranks (0: off)
	fmt     string
	// unquantized element sizes: matrices and the rest.
	matrixBytes, otherBytes int64
	actBytes                int64
}

// BuildPlan resolves args against config.json (model) and the generation
// defaults (gen, nil when there are none) into the deployment plan. It
// reads no weights; it may read MODEL/config.json's quantization_config
// and MODEL/quant_model_description.json when MODEL is a local directory.
//
// Errors name the flag (or settings key) at fault. When the plan is
// complete but the deployment does not fit in device memory, BuildPlan
// returns the plan and an error, so --dry-run can print both.
func BuildPlan(a *EngineArgs, model *ModelConfig, gen *GenerationConfig) (*Plan, error) {
	if a == nil || model == nil {
		return nil, errors.New("BuildPlan: nil arguments")
	}
	if a.given == nil {
		a.given = map[string]string{}
	}
	if err := a.checkSettings(model); err != nil {
		return nil, err
	}
	pl := &planner{a: a, c: model, tp: a.TensorParallelSize, dp: a.DataParallelSize}
	p := &Plan{Notes: []string{}}
	if err := pl.resolveDevice(p); err != nil {
		return nil, err
	}
	if err := pl.resolveWeights(p); err != nil {
		return nil, err
	}
	if err := pl.checkParallel(); err != nil {
		return nil, err
	}
	pl.describeModel(p)
	pl.layout(p)
	if err := pl.scheduler(p); err != nil {
		return nil, err
	}
	pl.cache(p)
	memErr := pl.memory(p)
	pl.generation(p, gen)
	pl.frontend(p)
	p.AcceptedWithoutEffect = a.WithoutEffect(p.Device.Backend)
	if p.AcceptedWithoutEffect == nil {
		p.AcceptedWithoutEffect = []Ignored{}
	}
	if memErr != nil {
		return p, memErr
	}
	return p, nil
}

// resolveDevice fills PlanDevice and the element sizes.
func (pl *planner) resolveDevice(p *Plan) error {
	a := pl.a
	d := &p.Device
	d.Backend = a.Device
	if d.Backend == "" {
		d.Backend = "cpu"
	}
	pl.backend = d.Backend
	d.BackendSource = a.deviceSource()
	d.MemoryBytes = a.DeviceMemory
	d.MemoryPreset = a.DeviceMemoryName
	d.MemorySource = a.Source("device-memory")
	if a.DeviceMemory == 0 {
		d.MemorySource = "unknown (pass --device-memory)"
	}
	cfgDtype := pl.c.Dtype
	if HostBackend(d.Backend) {
		// The CPU backend computes and caches in F32.
		d.ActivationDtype, d.ActivationDtypeSrc = fmtF32, "the cpu backend computes in float32"
		pl.actBytes, pl.otherBytes = 4, 4
		return nil
	}
	switch a.Dtype {
	case "auto":
		d.ActivationDtype = fmtBF16
		d.ActivationDtypeSrc = "--dtype auto: bfloat16"
		if cfgDtype == fmtF16 {
			d.ActivationDtype = fmtF16
			d.ActivationDtypeSrc = "--dtype auto: config.json dtype float16"
		} else if cfgDtype == fmtBF16 {
			d.ActivationDtypeSrc = "--dtype auto: config.json dtype bfloat16"
		}
	case "half", "float16":
		d.ActivationDtype, d.ActivationDtypeSrc = fmtF16, "--dtype "+a.Dtype
	case "float", "float32":
		d.ActivationDtype, d.ActivationDtypeSrc = fmtF32, "--dtype "+a.Dtype
	default:
		d.ActivationDtype, d.ActivationDtypeSrc = fmtBF16, "--dtype "+a.Dtype
	}
	pl.actBytes = dtypeBytes(d.ActivationDtype)
	pl.otherBytes = pl.actBytes
	pl.matrixBytes = pl.actBytes
	return nil
}

func dtypeBytes(dt string) int64 {
	if dt == fmtF32 {
		return 4
	}
	return 2
}

// resolveWeights decides the checkpoint format and the device format.
func (pl *planner) resolveWeights(p *Plan) error {
	a := pl.a
	w := &p.Weights
	format, source, err := pl.checkpointFormat()
	if err != nil {
		return err
	}
	w.CheckpointFormat, w.FormatSource = format, source
	w.DeviceFormat = format
	if HostBackend(p.Device.Backend) {
		// The CPU loader keeps matrices in --dtype (auto: as stored, FP8
		// dequantised to BF16) and everything else in F32; the quantized
		// linears of an msmodelslim checkpoint stay int8 / float8 and run
		// on the int8 and MXFP8 CPU kernels, and the linears of a
		// block-FP8 checkpoint stay FP8_BLOCK128 (its CPU kernels).
		m := format
		modelslim := false
		switch format {
		case fmtFP8Block:
			modelslim = true
			m = fmtBF16 // the dequantised FP8 matrices (kv_b_proj, eh_proj) and the float ones
		case fmtFP8Tensor:
			// Online FP8 quantization does not exist on the cpu backend:
			// the weights stay as stored.
			m = pl.c.Dtype
			if m != fmtBF16 && m != fmtF16 {
				m = fmtF32
			}
			p.Notes = append(p.Notes, "--quantization fp8 has no effect on the cpu backend: a checkpoint without FP8 weights loads as stored")
		case fmtW8A8, fmtW8A8Dyn, fmtMXFP8:
			modelslim = true
			m = pl.storedFloat() // the FLOAT matrices load as stored
		}
		switch a.Dtype {
		case "float", "float32":
			m = fmtF32
		case "bfloat16":
			m = fmtBF16
		case "half", "float16":
			return fmt.Errorf("--dtype: the cpu backend keeps weights in float32 or bfloat16, not %s", a.Dtype)
		}
		pl.matrixBytes = dtypeBytes(m)
		w.MatrixBytes, w.OtherBytes = int(pl.matrixBytes), int(pl.otherBytes)
		if !modelslim {
			w.DeviceFormat = m
			pl.fmt = m
			w.QuantizedBytes = "none"
			w.Scales = "none (matmul weights in " + m + ", other tensors float32)"
			return nil
		}
		pl.fmt = format
		w.QuantizedBytes = quantizedBytesText[format]
		switch format {
		case fmtFP8Block:
			w.Scales = "one fp32 weight_scale_inv per 128x128 block; activations quantized per token and 128 columns at run time"
			p.Notes = append(p.Notes, "block-FP8 checkpoint: "+fp8KeptNote(pl.backend, m))
		case fmtW8A8:
			w.Scales = "per output channel: deq_scale (fp32) + quant_bias (int32), per-tensor input scale and offset; routed experts W8A8_DYNAMIC (fp32 weight_scale per output channel)"
		case fmtW8A8Dyn:
			w.Scales = "per output channel: weight_scale (fp32); activations quantized per token at run time"
		case fmtMXFP8:
			w.Scales = "one e8m0 byte per 32 input elements of each row"
		}
		w.Scales += "; FLOAT matmul weights in " + m + ", other tensors float32"
		return nil
	}
	pl.fmt = format
	switch format {
	case fmtBF16, fmtF16, fmtF32:
		// Unquantized checkpoint: weights in the activation dtype.
		pl.fmt = p.Device.ActivationDtype
		w.DeviceFormat = pl.fmt
		w.QuantizedBytes = "none"
		w.Scales = "none"
	case fmtW8A8:
		w.QuantizedBytes = quantizedBytesText[format]
		w.Scales = "per output channel: weight_scale + weight_offset (bf16), deq_scale (fp32), quant_bias (int32); routed experts W8A8_DYNAMIC (weight_scale + weight_offset)"
	case fmtW8A8Dyn:
		w.QuantizedBytes = quantizedBytesText[format]
		w.Scales = "per output channel: weight_scale + weight_offset (bf16); activations quantized per token at run time"
	case fmtMXFP8:
		w.QuantizedBytes = quantizedBytesText[format]
		w.Scales = "one e8m0 byte per 32 input elements of each row"
	case fmtFP8Block:
		if !keepsFP8Block(pl.backend) {
			// The loader dequantises every block-FP8 weight.
			pl.fmt = p.Device.ActivationDtype
			w.DeviceFormat = pl.fmt
			w.QuantizedBytes = "none"
			w.Scales = "none (block-FP8 weights dequantised when loaded)"
			p.Notes = append(p.Notes, fmt.Sprintf("block-FP8 checkpoint: the %s backend has no FP8_BLOCK128 path, so the loader dequantises the F8_E4M3 weights to %s", pl.backend, pl.fmt))
			break
		}
		w.QuantizedBytes = quantizedBytesText[format]
		w.Scales = "one fp32 weight_scale_inv per 128x128 block; activations quantized per token and 128 columns at run time"
		p.Notes = append(p.Notes, "block-FP8 checkpoint: "+fp8KeptNote(pl.backend, p.Device.ActivationDtype))
	case fmtFP8Tensor:
		w.QuantizedBytes = "1 (float8_e4m3)"
		w.Scales = "one fp32 scale per tensor (quantized when loaded)"
	}
	w.MatrixBytes, w.OtherBytes = int(pl.matrixBytes), int(pl.otherBytes)
	return nil
}

// quantizedBytesText is the plan's bytes-per-weight text of each
// quantized format.
var quantizedBytesText = map[string]string{
	fmtW8A8:    "1 (int8)",
	fmtW8A8Dyn: "1 (int8)",
	fmtMXFP8:   "1 (float8_e4m3) + 1/32 (e8m0 scale per 32 along K)",
	// FP8_BLOCK128: 4 bytes per 128x128 block (1/4096 per weight).
	fmtFP8Block: "1 (float8_e4m3) + 4/16384 (fp32 scale per 128x128 block)",
}

// keepsFP8Block reports whether the loader keeps a block-FP8
// checkpoint's linears as FP8_BLOCK128 on backend: the plan's view of
// npu.SupportsQuant(be, npu.QFP8Block) == nil, by device name because the
// planner opens no device. The cpu backends run it; cuda is planned as
// keeping it (a build whose cuda backend still refuses the scheme
// dequantises at load and logs why); ascend has no CANN path and
// dequantises.
func keepsFP8Block(backend string) bool {
	switch backend {
	case "cpu", "cpu-async", "cuda":
		return true
	}
	return false
}

// fp8KeptNote says which weights of a block-FP8 checkpoint a backend that
// keeps FP8_BLOCK128 keeps, and what the rest become (dt).
func fp8KeptNote(backend, dt string) string {
	return fmt.Sprintf("the %s backend keeps the F8_E4M3 linears and routed experts as FP8_BLOCK128 (1 byte per weight + fp32 block scales); "+
		"kv_b_proj (absorbed into MLA), the MTP eh_proj and any linear whose TP slice or fused q|k|v / gate|up part does not keep whole 128x128 blocks are dequantised to %s (the loader logs which)",
		backend, dt)
}

// fp8Kept reports whether the loader keeps a Quant tensor group of a
// block-FP8 checkpoint as FP8_BLOCK128 with rows x cols on a rank
// (decideFP8 in the glm5next loader): not kv_b_proj or eh_proj, and
// whole 128-element blocks where TP cuts a dimension and in the rows of a
// fused q|k|v or gate|up part.
func fp8Kept(g tensorGroup, rows, cols int64) bool {
	if strings.HasSuffix(g.Name, ".kv_b_proj.weight") || strings.HasSuffix(g.Name, ".eh_proj.weight") || len(g.Shape) != 2 {
		return false
	}
	if rows != int64(g.Shape[0]) && rows%128 != 0 || cols != int64(g.Shape[1]) && cols%128 != 0 {
		return false
	}
	for _, s := range []string{".q_proj.weight", ".k_proj.weight", ".gate_proj.weight"} {
		if strings.HasSuffix(g.Name, s) && rows%128 != 0 {
			return false
		}
	}
	return true
}

// checkpointFormat resolves --quantization (and config.json's
// quantization_config, or msmodelslim's description) to a format.
func (pl *planner) checkpointFormat() (format, source string, err error) {
	a := pl.a
	dir := localDir(a.Model)
	block, method, qerr := readQuantizationConfig(dir)
	if qerr != nil {
		return "", "", qerr
	}
	if HostBackend(pl.backend) {
		// The cpu loader reads an msmodelslim checkpoint whenever the
		// description is there (--quantization ascend or none), and the
		// Ascend weight formats only from one.
		switch a.Quantization {
		case "":
			if dir != "" {
				qt, found, err := readModelslimType(dir)
				if err != nil {
					return "", "", err
				}
				if found {
					return pl.modelslimFormat(qt, "quant_model_description.json model_quant_type "+qt+" (no --quantization: the cpu loader detects msmodelslim checkpoints)", "")
				}
			}
		case "fp8":
		default:
			qt, err := checkModelslim(a.Quantization, a.Model)
			if err != nil {
				return "", "", err
			}
			return pl.modelslimFormat(qt, "--quantization "+a.Quantization+": quant_model_description.json model_quant_type "+qt, a.Quantization)
		}
	}
	switch a.Quantization {
	case "":
		switch method {
		case "":
			return pl.storedFloat(), "config.json dtype " + pl.c.Dtype, nil
		case "fp8":
			if block {
				return fmtFP8Block, "config.json quantization_config (fp8, weight_block_size [128, 128])", nil
			}
			return fmtFP8Tensor, "config.json quantization_config (fp8)", nil
		}
		return "", "", fmt.Errorf("config.json: quantization_config.quant_method %q is not supported (npuserve runs fp8, msmodelslim W8A8/W8A8_DYNAMIC/W8A8_MXFP8 or unquantized checkpoints)", method)
	case "fp8":
		if block {
			return fmtFP8Block, "--quantization fp8 (config.json weight_block_size [128, 128])", nil
		}
		return fmtFP8Tensor, "--quantization fp8 (quantized when loaded, per-tensor scales)", nil
	case "mxfp8", "modelopt_mxfp8", "w8a8_mxfp8":
		return fmtMXFP8, "--quantization " + a.Quantization, nil
	case "w8a8":
		return fmtW8A8, "--quantization w8a8", nil
	case "w8a8_dynamic":
		return fmtW8A8Dyn, "--quantization w8a8_dynamic", nil
	}
	// ascend: msmodelslim's quant_model_description.json decides.
	if dir != "" {
		qt, found, err := readModelslimType(dir)
		if err != nil {
			return "", "", err
		}
		if found {
			return pl.modelslimFormat(qt, "--quantization ascend: quant_model_description.json model_quant_type "+qt, "ascend")
		}
	}
	name := strings.ToLower(filepath.Base(a.Model))
	switch {
	case strings.Contains(name, "mxfp8"):
		return fmtMXFP8, "--quantization ascend: W8A8_MXFP8 inferred from the model name (no quant_model_description.json read)", nil
	case strings.Contains(name, "w8a8"):
		return fmtW8A8Dyn, "--quantization ascend: W8A8_DYNAMIC inferred from the model name (no quant_model_description.json read)", nil
	}
	return "", "", fmt.Errorf("--quantization ascend: no quant_model_description.json in %q and the name does not say w8a8 or mxfp8; pass --quantization w8a8, w8a8_dynamic or w8a8_mxfp8", a.Model)
}

// storedFloat is the format of the checkpoint's float weights, as
// config.json's dtype says.
func (pl *planner) storedFloat() string {
	switch pl.c.Dtype {
	case fmtF32, "":
		return fmtF32
	case fmtF16:
		return fmtF16
	}
	return fmtBF16
}

// modelslimFormat is the format of an msmodelslim checkpoint whose
// description says model_quant_type qt; flag is the --quantization value
// that read it ("" for none), for the error.
func (pl *planner) modelslimFormat(qt, source, flag string) (string, string, error) {
	switch qt {
	case "W8A8":
		return fmtW8A8, source, nil
	case "W8A8_DYNAMIC":
		return fmtW8A8Dyn, source, nil
	case "W8A8_MXFP8":
		return fmtMXFP8, source, nil
	case "FLOAT":
		return pl.storedFloat(), source, nil
	}
	what := "--quantization " + flag
	if flag == "" {
		what = "--model"
	}
	return "", "", fmt.Errorf("%s: model_quant_type %q in quant_model_description.json is not supported (W8A8, W8A8_DYNAMIC, W8A8_MXFP8 or FLOAT)", what, qt)
}

// descriptionFile is msmodelslim's description of a quantized checkpoint.
const descriptionFile = "quant_model_description.json"

// modelslimType is the model_quant_type the description of a checkpoint
// must have for --quantization q ("" for ascend: the description says).
func modelslimType(q string) string {
	switch q {
	case "w8a8":
		return "W8A8"
	case "w8a8_dynamic":
		return "W8A8_DYNAMIC"
	case "w8a8_mxfp8", "mxfp8", "modelopt_mxfp8":
		return "W8A8_MXFP8"
	}
	return ""
}

// checkModelslim checks that model is the msmodelslim checkpoint that
// --quantization q (an Ascend weight format) asks the cpu backend for: a
// local directory with quant_model_description.json whose
// model_quant_type matches q. It returns the model_quant_type.
func checkModelslim(q, model string) (string, error) {
	dir := localDir(model)
	if dir == "" {
		return "", fmt.Errorf("--quantization %s: the cpu backend reads msmodelslim checkpoints from a local directory, and %q is not one", q, model)
	}
	qt, found, err := readModelslimType(dir)
	if err != nil {
		return "", fmt.Errorf("--quantization %s: %v", q, err)
	}
	if !found {
		return "", fmt.Errorf("--quantization %s: %s has no %s, so it is not an msmodelslim checkpoint, which the cpu backend needs for this format (`npuserve quantize` writes one; leave --quantization out to load the float weights)",
			q, dir, descriptionFile)
	}
	if want := modelslimType(q); want != "" && qt != want {
		return "", fmt.Errorf("--quantization %s: %s in %s says model_quant_type %s, but --quantization %s wants %s (pass --quantization ascend to run what the description says)",
			q, descriptionFile, dir, qt, q, want)
	}
	return qt, nil
}

// CPULoadQuantization resolves --quantization (as given, "" when not) to
// the cpu loader's mode (glm5next.LoadOptions.Quantization, see
// LoaderQuantization) for the checkpoint in dir, after checking that dir
// has quant_model_description.json and, for the named formats, that its
// model_quant_type is the one asked for (what BuildPlan checks for the cpu
// backend). Errors name --quantization, dir and both types.
func CPULoadQuantization(quantization, dir string) (string, error) {
	mode := LoaderQuantization(quantization)
	if mode == "" {
		return "", nil
	}
	var q string
	if err := choice(&q, quantization, quantizationChoices); err != nil {
		return "", fmt.Errorf("--quantization: %v", err)
	}
	if _, err := checkModelslim(quantization, dir); err != nil {
		return "", err
	}
	return mode, nil
}

// LoaderQuantization maps --quantization to the cpu loader's mode without
// reading the checkpoint (for callers whose Plan has checked it): "" (auto-
// detect an msmodelslim checkpoint) without the flag and for fp8, "ascend"
// (the description is required) for ascend, w8a8, w8a8_dynamic and
// w8a8_mxfp8 and its aliases.
func LoaderQuantization(quantization string) string {
	switch quantization {
	case "", "None", "fp8":
		return ""
	}
	return "ascend"
}

// localDir returns path when it is a local directory, else "".
func localDir(path string) string {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return path
	}
	return ""
}

// readQuantizationConfig reads config.json's quantization_config (top
// level or text_config): its method and whether weights are 128×128
// block-scaled.
func readQuantizationConfig(dir string) (block bool, method string, err error) {
	if dir == "" {
		return false, "", nil
	}
	path := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, "", nil
	}
	if err != nil {
		return false, "", err
	}
	var doc struct {
		Q    *quantConfig `json:"quantization_config"`
		Text *struct {
			Q *quantConfig `json:"quantization_config"`
		} `json:"text_config"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return false, "", fmt.Errorf("%s: quantization_config: %v", path, err)
	}
	q := doc.Q
	if q == nil && doc.Text != nil {
		q = doc.Text.Q
	}
	if q == nil {
		return false, "", nil
	}
	return len(q.Block) == 2 && q.Block[0] == 128 && q.Block[1] == 128, q.Method, nil
}

type quantConfig struct {
	Method string `json:"quant_method"`
	Block  []int  `json:"weight_block_size"`
}

// readModelslimType reads model_quant_type from msmodelslim's
// quant_model_description.json.
func readModelslimType(dir string) (string, bool, error) {
	path := filepath.Join(dir, descriptionFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	var d struct {
		Type string `json:"model_quant_type"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return "", false, fmt.Errorf("%s: %v", path, err)
	}
	if d.Type == "" {
		return "", false, fmt.Errorf("%s: no model_quant_type", path)
	}
	return d.Type, true, nil
}

// checkParallel validates TP/EP against the model's shapes.
func (pl *planner) checkParallel() error {
	c, a := pl.c, pl.a
	for _, d := range c.TPSizes(a.EnableExpertParallel) {
		if d.N > 0 && d.N%pl.tp != 0 {
			return fmt.Errorf("--tensor-parallel-size: %d does not divide %s (%d)", pl.tp, d.What, d.N)
		}
	}
	if a.EnableExpertParallel {
		pl.ep = pl.dp * pl.tp
		if pl.ep > c.NRoutedExperts {
			return fmt.Errorf("--enable-expert-parallel: %d expert-parallel ranks (--data-parallel-size %d × --tensor-parallel-size %d) exceed the %d routed experts",
				pl.ep, pl.dp, pl.tp, c.NRoutedExperts)
		}
	}
	if a.epSize > 0 {
		if pl.ep != a.epSize {
			return fmt.Errorf("--config %s: %s = %d, but the expert-parallel group is --data-parallel-size × --tensor-parallel-size = %d",
				a.Config, a.epSizeKey, a.epSize, pl.dp*pl.tp)
		}
	}
	return nil
}

// expertsOf is the routed experts per MoE layer of EP rank e: vLLM's
// split (E/EP each, the first E%EP ranks one more).
func (pl *planner) expertsOf(e int) (first, n int) {
	E := pl.c.NRoutedExperts
	if pl.ep == 0 {
		return 0, E
	}
	base, rem := E/pl.ep, E%pl.ep
	n = base
	if e < rem {
		n++
	}
	first = e*base + min(e, rem)
	return first, n
}

// tensorBytes is the memory of count tensors of rows×cols on a rank.
func (pl *planner) tensorBytes(g tensorGroup, count, rows, cols int64) int64 {
	if !g.Quant || (HostBackend(pl.backend) && !isModelslimFormat(pl.fmt) && pl.fmt != fmtFP8Block) ||
		(pl.fmt == fmtFP8Block && !fp8Kept(g, rows, cols)) {
		elem := pl.otherBytes
		if g.Matrix {
			elem = pl.matrixBytes
		}
		return count * rows * cols * elem
	}
	w := rows * cols
	var per int64
	switch pl.fmt {
	case fmtW8A8:
		switch {
		case g.Routed: // routed experts are W8A8_DYNAMIC
			per = w + rows*4
		case HostBackend(pl.backend): // deq_scale (fp32) + quant_bias (int32)
			per = w + rows*(4+4)
		default:
			per = w + rows*(2+2+4+4) + 3
		}
	case fmtW8A8Dyn:
		per = w + rows*4
	case fmtMXFP8:
		per = w + rows*ceilDiv(cols, 32)
	case fmtFP8Block:
		per = w + 4*ceilDiv(rows, 128)*ceilDiv(cols, 128)
	case fmtFP8Tensor:
		per = w + 4
	default: // unquantized
		per = w * pl.actBytes
	}
	return count * per
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// groupOnRank is what rank (tp rank t, EP rank e) holds of g: under
// expert parallelism a routed expert's tensors whole on its owner, else
// the table's TP share.
func (pl *planner) groupOnRank(g tensorGroup, t, e int) (params, bytes int64) {
	shape := g.Shape
	if g.Routed && pl.ep > 0 {
		if first, n := pl.expertsOf(e); g.Expert < first || g.Expert >= first+n {
			return 0, 0
		}
	} else {
		shape = g.TP.LocalShape(shape, pl.tp)
	}
	rows, cols := int64(shape[0]), numel(shape[1:])
	return g.layers * rows * cols, pl.tensorBytes(g, g.layers, rows, cols)
}

// partSharding describes a part's split.
func (pl *planner) partSharding(part string) string {
	switch part {
	case partEmbed, partLMHead:
		if pl.c.VocabSize%pl.tp != 0 {
			return fmt.Sprintf("replicated (TP %d does not divide the vocabulary of %d)", pl.tp, pl.c.VocabSize)
		}
		return "vocab-parallel over TP (vocab/TP rows per rank; embedding all-reduce, logits all-gather)"
	case partKDA:
		return "heads over TP: q/k/v_proj, conv channels, f_b/g_b_proj, dt_bias, A_log, b_proj by head, o_proj rowwise; f_a/g_a_proj, o_norm replicated"
	case partMLA:
		return "heads over TP: q_b_proj, kv_b_proj colwise, o_proj rowwise; q_a_proj, kv_a_proj_with_mqa, norms replicated"
	case partIndexer, partRouter, partMHC, partNorms:
		return "replicated"
	case partDenseMLP, partSharedExperts:
		return "TP: gate/up colwise, down rowwise"
	case partRoutedExperts:
		if pl.ep > 0 {
			return fmt.Sprintf("expert parallel over %d ranks (DP×TP): whole experts, E/EP per rank", pl.ep)
		}
		return "each expert over TP (moe_tp_experts: gate/up colwise, down rowwise), replicated over DP"
	}
	return ""
}

// describeModel fills model, params and the parallel summary.
func (pl *planner) describeModel(p *Plan) {
	c, a := pl.c, pl.a
	p.Model = PlanModel{
		Path: a.Model, ModelType: c.ModelType, Dtype: c.Dtype, MaxPositionEmbeddings: c.MaxPositionEmbeddings,
		VocabSize: c.VocabSize, HiddenSize: c.HiddenSize, Layers: c.NumHiddenLayers,
		KDALayers: c.NumKDALayers(), DSALayers: c.NumDSALayers(), MTPLayers: c.NumNextnPredictLayers,
		RoutedExperts: c.NRoutedExperts, ExpertsPerToken: c.NumExpertsPerTok, SharedExperts: c.NSharedExperts,
		Vision: len(c.Vision) > 0,
	}
	pc := c.ParamCount()
	p.Params = PlanParams{Total: pc.Total, Active: pc.Active, MTP: pc.MTP, MTPActive: pc.MTPActive,
		TotalWithMTP: pc.TotalWithMTP, ActiveWithMTP: pc.ActiveWithMTP}
	if p.Model.Vision {
		p.Notes = append(p.Notes, "the vision tower (vision_config) is not loaded: text only")
	}
}

// layout fills nodes, ranks and per-rank weights.
func (pl *planner) layout(p *Plan) {
	a, c := pl.a, pl.c
	tp, dp := pl.tp, pl.dp
	local := a.DataParallelSizeLocal
	if local < 0 {
		local = dp - a.DataParallelStartRank
	}
	hybrid := !a.Headless && a.DataParallelStartRank > 0
	par := &p.Parallel
	*par = PlanParallel{
		TensorParallelSize: tp, DataParallelSize: dp, WorldSize: tp * dp,
		ExpertParallel: pl.ep > 0, ExpertParallelSize: pl.ep,
		DataParallelSizeLocal: local, DataParallelStartRank: a.DataParallelStartRank,
		Headless: a.Headless, HeadAddress: a.DataParallelAddress, RPCPort: a.DataParallelRPCPort,
		// DP ranks step in lockstep only when expert parallelism joins
		// them in the MoE layers; without it each DP rank holds every
		// expert (TP-split) and runs no collective with the others.
		DPCoordinator: dp > 1, Lockstep: dp > 1 && pl.ep > 0,
		Sharding: "TP follows glm5_next's base_model_tp_plan (DSA heads, dense MLP and shared experts split) plus KDA heads; indexer, router, mHC replicated; embed_tokens and lm_head vocab-parallel when TP divides the vocabulary; routed experts expert-parallel over DP×TP with --enable-expert-parallel, else split over TP",
	}
	_, par.RoutedExpertsPerRank = pl.expertsOf(0)
	if !par.ExpertParallel && tp > 1 {
		par.RoutedExpertsPerRank = c.NRoutedExperts // each a 1/TP slice
	}
	par.LoadBalancing = "internal (the head node's API servers route to every DP rank)"
	if hybrid {
		par.LoadBalancing = "hybrid (each node's API servers route to its local DP ranks)"
	}
	if par.HeadAddress == "" {
		par.HeadAddress = "this host"
	}
	// Nodes: DP ranks are laid out local per node from rank 0 on.
	perNode := local
	if perNode <= 0 {
		perNode = dp
	}
	nNodes := (dp + perNode - 1) / perNode
	thisNode := a.DataParallelStartRank / perNode
	if local == 0 { // an API-only head: the engines are elsewhere
		nNodes++
		thisNode = 0
	}
	par.Nodes, par.ThisNode = nNodes, thisNode
	nodeOf := func(d int) int {
		if local == 0 {
			return 1 + d/perNode
		}
		return d / perNode
	}
	apiCount, _ := pl.apiServerCount(local)
	for n := range nNodes {
		node := PlanNode{Node: n, ThisNode: n == thisNode}
		first := n * perNode
		if local == 0 {
			first = (n - 1) * perNode
		}
		if local == 0 && n == 0 {
			node.FirstDPRank, node.DPRanks = 0, 0
		} else {
			node.FirstDPRank = first
			node.DPRanks = min(perNode, dp-first)
		}
		node.Devices = node.DPRanks * tp
		switch {
		case n == 0:
			node.Role = "head"
			node.RunsDPCoord = dp > 1
			node.Description = "API server(s), DP coordinator and its DP ranks"
			if dp == 1 {
				node.Description = "API server(s) and the engine"
			}
			node.APIServers = apiCount
			if a.Headless {
				// Seen from a headless node, the head runs vLLM's default.
				node.APIServers = dp
			}
			if n == thisNode && a.Headless {
				node.Role = "headless"
				node.Description = "engine ranks only; joins the head node"
				node.APIServers = 0
			}
		case hybrid:
			node.Role = "hybrid"
			node.Description = "API server(s) for its DP ranks and the ranks; joins the head node"
			node.APIServers = node.DPRanks
		default:
			node.Role = "headless"
			node.Description = "engine ranks only (--headless); joins the head node"
		}
		if n > 0 || a.Headless {
			node.HeadAddress, node.RPCPortInUse = par.HeadAddress, a.DataParallelRPCPort
		}
		p.Nodes = append(p.Nodes, node)
	}

	// Ranks and their weights.
	groups := inventory(c)
	partParams := map[string]int64{}
	for _, g := range groups {
		if !g.MTP {
			partParams[g.Part] += g.params()
		}
	}
	type partSum struct{ params, bytes int64 }
	var maxRank int
	var maxBytes int64
	perRank := make([]map[string]partSum, 0, dp*tp)
	mtpPerRank := make([][2]int64, 0, dp*tp)
	for d := range dp {
		for t := range tp {
			r := d*tp + t
			e := -1
			if pl.ep > 0 {
				e = r
			}
			first, n := pl.expertsOf(max(e, 0))
			if pl.ep == 0 {
				first, n = 0, c.NRoutedExperts
			}
			sums := map[string]partSum{}
			rank := PlanRank{Rank: r, DPRank: d, TPRank: t, EPRank: e, FirstExpert: first, Experts: n}
			var mtpP, mtpB int64
			for _, g := range groups {
				gp, gb := pl.groupOnRank(g, t, max(e, 0))
				if g.MTP {
					mtpP += gp
					mtpB += gb
					continue
				}
				s := sums[g.Part]
				s.params += gp
				s.bytes += gb
				sums[g.Part] = s
				rank.Params += gp
				rank.WeightBytes += gb
			}
			nd := nodeOf(d)
			firstDP := p.Nodes[nd].FirstDPRank
			rank.Node, rank.Device = nd, (d-firstDP)*tp+t
			rank.ThisNode = nd == thisNode
			rank.APIServer = t == 0 && d == firstDP && p.Nodes[nd].APIServers > 0
			rank.DPCoordinator = dp > 1 && r == 0
			p.Ranks = append(p.Ranks, rank)
			perRank = append(perRank, sums)
			mtpPerRank = append(mtpPerRank, [2]int64{mtpP, mtpB})
			p.Weights.BytesAllRanks += rank.WeightBytes
			if rank.WeightBytes > maxBytes {
				maxBytes, maxRank = rank.WeightBytes, r
			}
		}
	}
	w := &p.Weights
	w.ParamsPerRank = p.Ranks[maxRank].Params
	w.BytesPerRank = p.Ranks[maxRank].WeightBytes
	w.MTPParamsPerRank, w.MTPBytesPerRank = mtpPerRank[maxRank][0], mtpPerRank[maxRank][1]
	for _, part := range partOrder {
		s, ok := perRank[maxRank][part]
		if !ok && partParams[part] == 0 {
			continue
		}
		quant := false
		for _, g := range groups {
			if g.Part == part && g.Quant && !g.MTP {
				quant = true
			}
		}
		w.Parts = append(w.Parts, PlanPart{Name: part, Sharding: pl.partSharding(part),
			Quantized: quant && isQuantFormat(pl.fmt), Params: partParams[part], ParamsPerRank: s.params, BytesPerRank: s.bytes})
	}
	if c.NumNextnPredictLayers > 0 {
		p.Notes = append(p.Notes, fmt.Sprintf("the %d MTP layer(s) (%d params) are not loaded until MTP speculative decoding exists; weights.mtp_bytes_per_rank is what they would add",
			c.NumNextnPredictLayers, p.Params.MTP))
	}
	if pl.ep > 0 && c.NRoutedExperts%pl.ep != 0 {
		p.Notes = append(p.Notes, fmt.Sprintf("%d routed experts over %d EP ranks: the first %d ranks hold one more", c.NRoutedExperts, pl.ep, c.NRoutedExperts%pl.ep))
	}
}

// isModelslimFormat reports whether f is a format of msmodelslim
// checkpoints, which the cpu backend also runs quantized.
func isModelslimFormat(f string) bool {
	return f == fmtW8A8 || f == fmtW8A8Dyn || f == fmtMXFP8
}

func isQuantFormat(f string) bool {
	switch f {
	case fmtW8A8, fmtW8A8Dyn, fmtMXFP8, fmtFP8Block, fmtFP8Tensor:
		return true
	}
	return false
}

// apiServerCount is vLLM's default: none when headless, one per local DP
// rank in hybrid load balancing, else one per DP rank.
func (pl *planner) apiServerCount(local int) (int, string) {
	a := pl.a
	switch {
	case a.Given("api-server-count"):
		return a.APIServerCount, a.Source("api-server-count")
	case a.Headless:
		return 0, "--headless"
	case a.DataParallelStartRank > 0:
		return max(local, 1), "vLLM default: --data-parallel-size-local (hybrid load balancing)"
	}
	return pl.dp, "vLLM default: --data-parallel-size"
}

// scheduler resolves the scheduler limits.
func (pl *planner) scheduler(p *Plan) error {
	a, c := pl.a, pl.c
	s := &p.Scheduler
	s.ChunkedPrefill, s.PrefixCaching, s.Seed = true, false, a.Seed

	switch {
	case a.MaxModelLen > 0:
		if a.MaxModelLen > c.MaxPositionEmbeddings {
			return fmt.Errorf("--max-model-len: %d exceeds the model's max_position_embeddings (%d)", a.MaxModelLen, c.MaxPositionEmbeddings)
		}
		s.MaxModelLen, s.MaxModelLenSource = a.MaxModelLen, a.Source("max-model-len")
	case a.MaxModelLen < 0:
		s.MaxModelLen, s.MaxModelLenSource = c.MaxPositionEmbeddings, "auto: the longest that fits (see memory)"
	default:
		s.MaxModelLen, s.MaxModelLenSource = c.MaxPositionEmbeddings, "config.json max_position_embeddings"
	}

	// vLLM's defaults for the OpenAI server: larger on devices with at
	// least 70 GiB.
	defTokens, defSeqs, why := 2048, 256, "vLLM default for a device below 70 GiB"
	if a.DeviceMemory >= 70*gib {
		defTokens, defSeqs, why = 8192, 1024, "vLLM default for a device of 70 GiB or more"
	} else if a.DeviceMemory == 0 {
		why = "vLLM default (device memory unknown)"
	}
	s.MaxNumBatchedTokens, s.MaxNumBatchedTokensSource = a.MaxNumBatchedTokens, a.Source("max-num-batched-tokens")
	if a.MaxNumBatchedTokens == 0 {
		s.MaxNumBatchedTokens, s.MaxNumBatchedTokensSource = defTokens, why
	}
	s.MaxNumSeqs, s.MaxNumSeqsSource = a.MaxNumSeqs, a.Source("max-num-seqs")
	if a.MaxNumSeqs == 0 {
		s.MaxNumSeqs, s.MaxNumSeqsSource = min(defSeqs, s.MaxNumBatchedTokens), why
	}
	if s.MaxNumBatchedTokens < s.MaxNumSeqs {
		return fmt.Errorf("--max-num-batched-tokens: must be at least max-num-seqs (%d), got %d", s.MaxNumSeqs, s.MaxNumBatchedTokens)
	}

	kp := c.IndexKPool
	s.BlockSize, s.BlockSizeSource = a.BlockSize, a.Source("block-size")
	if a.BlockSize == 0 {
		s.BlockSize = (64 + kp - 1) / kp * kp
		s.BlockSizeSource = "default: 64 rounded up to a multiple of index_kpool"
	} else if a.BlockSize%kp != 0 {
		return fmt.Errorf("--block-size: must be a multiple of index_kpool (%d) so pooled indexer keys never straddle blocks, got %d", kp, a.BlockSize)
	}
	return nil
}

// cache computes the per-rank cache footprint; the formulas are those of
// glm5next's NewCache (per token in DSA layers, per sequence in KDA
// layers).
func (pl *planner) cache(p *Plan) {
	dt := CacheDType(pl.a.KVCacheDtype, p.Device.Backend, p.Device.ActivationDtype)
	// Each TP rank caches its KDA heads.
	p.Cache = CacheFootprint(pl.c, dtypeBytes(dt), pl.tp)
	p.Cache.Dtype, p.Cache.StateDtype = dt, fmtF32
	pl.maxLenCost(p)
}

// maxLenCost fills the cost of one max_model_len sequence.
func (pl *planner) maxLenCost(p *Plan) {
	bs := int64(p.Scheduler.BlockSize)
	tokens := ceilDiv(int64(p.Scheduler.MaxModelLen), bs) * bs
	p.Cache.TokensPerMaxLenSequence = tokens
	p.Cache.BytesPerMaxLenSequence = tokens*p.Cache.BytesPerToken + p.Cache.BytesPerSequenceState
}

// memory computes the budget of one rank; an error (with the plan still
// filled) when the deployment does not fit.
func (pl *planner) memory(p *Plan) error {
	a, c := pl.a, pl.c
	if a.DeviceMemory == 0 {
		p.Notes = append(p.Notes, "device memory unknown: pass --device-memory (e.g. atlas-800-a2, atlas-800-a3, 950dt or 64GiB) for the memory budget")
		return nil
	}
	s := &p.Scheduler
	m := &PlanMemory{DeviceMemoryBytes: a.DeviceMemory, GPUMemoryUtilization: a.GPUMemoryUtilization}
	p.Memory = m
	m.UsableBytes = int64(float64(a.DeviceMemory) * a.GPUMemoryUtilization)
	m.WeightBytes = p.Weights.BytesPerRank

	// Reserve: activations of one step of max_num_batched_tokens, fp32
	// logits of one position per running sequence, runtime buffers.
	tp := int64(pl.tp)
	d, n := int64(c.HiddenSize), int64(c.HCMult)
	hk := int64(c.LinearNumHeads * c.LinearHeadDim)
	ha := int64(c.NumAttentionHeads)
	widest := max(
		8*hk/tp, // KDA (heads over TP): q/k/v before and after the conv, gate, output
		ha/tp*int64(c.QKNopeHeadDim+c.QKRopeHeadDim+c.QKNopeHeadDim+2*c.VHeadDim)+int64(c.QLoraRank+c.KVLoraRank+c.IndexNHeads*c.IndexHeadDim), // DSA
		3*int64(c.IntermediateSize)/tp, // dense MLP
		int64(c.NumExpertsPerTok)*3*int64(c.MoEIntermediateSize)/tp+3*int64(c.MoEIntermediateSize*c.NSharedExperts)/tp+int64(c.NRoutedExperts), // MoE
	)
	perToken := (2*n+4)*d + widest
	m.Reserve.ActivationBytes = int64(s.MaxNumBatchedTokens) * perToken * pl.actBytes
	m.Reserve.LogitsBytes = int64(s.MaxNumSeqs) * int64(c.VocabSize) * 4
	basis := fmt.Sprintf("activations: max_num_batched_tokens (%d) × %d values × %d B (mHC streams in/out, 4 hidden-size buffers, widest layer intermediates); logits: max_num_seqs (%d) × vocab (%d) × 4 B",
		s.MaxNumBatchedTokens, perToken, pl.actBytes, s.MaxNumSeqs, c.VocabSize)
	if !HostBackend(p.Device.Backend) {
		groups := int64(0)
		if pl.tp > 1 {
			groups++
		}
		if pl.dp*pl.tp > 1 && (pl.ep > 0 || pl.dp > 1) {
			groups++
		}
		m.Reserve.RuntimeBytes = gib + groups*2*hcclBuffBytes
		basis += fmt.Sprintf("; runtime: 1 GiB (CANN context, op workspaces) + %d HCCL communicator(s) × 2 × 200 MiB (HCCL_BUFFSIZE default; raise the reserve if you set it higher)", groups)
	}
	m.Reserve.TotalBytes = m.Reserve.ActivationBytes + m.Reserve.LogitsBytes + m.Reserve.RuntimeBytes
	m.Reserve.Basis = basis
	m.CacheBudgetBytes = m.UsableBytes - m.WeightBytes - m.Reserve.TotalBytes

	memFlags := "--device-memory, --gpu-memory-utilization, --tensor-parallel-size or --quantization"
	if m.CacheBudgetBytes <= 0 {
		return fmt.Errorf("%s: the weights (%s per rank) and the reserve (%s) exceed %s × %g = %s of device memory; change %s",
			flagOrDefault(a), fmtBytes(m.WeightBytes), fmtBytes(m.Reserve.TotalBytes), fmtBytes(a.DeviceMemory), a.GPUMemoryUtilization, fmtBytes(m.UsableBytes), memFlags)
	}
	bpt := p.Cache.BytesPerToken
	bs := int64(s.BlockSize)
	m.StateSlots = s.MaxNumSeqs
	m.StateBytes = int64(m.StateSlots) * p.Cache.BytesPerSequenceState
	if m.StateBytes >= m.CacheBudgetBytes {
		return fmt.Errorf("--max-num-seqs: %d state slots × %s of KDA state = %s exceed the cache budget of %s per rank",
			m.StateSlots, fmtBytes(p.Cache.BytesPerSequenceState), fmtBytes(m.StateBytes), fmtBytes(m.CacheBudgetBytes))
	}
	if bpt > 0 {
		// No block fitting is reported below, with the max-model-len it fails.
		nb, _ := CacheBlocks(m.CacheBudgetBytes, s.BlockSize, m.StateSlots, bpt, p.Cache.BytesPerSequenceState)
		m.NumBlocks = int64(nb)
	}
	m.TokenCapacity = m.NumBlocks * bs

	if a.MaxModelLen < 0 { // auto: the longest one sequence that fits
		fit := min(m.TokenCapacity, int64(c.MaxPositionEmbeddings))
		if fit < bs {
			return fmt.Errorf("--max-model-len auto: not even one block of %d tokens fits beside the weights and %d state slots", bs, m.StateSlots)
		}
		s.MaxModelLen = int(fit)
		s.MaxModelLenSource = "auto: the longest that fits"
		pl.maxLenCost(p)
	}
	per := p.Cache.BytesPerMaxLenSequence
	m.SequencesAtMaxLenPerDPRank = m.CacheBudgetBytes / per
	m.SequencesAtMaxLen = m.SequencesAtMaxLenPerDPRank * int64(pl.dp)
	if p.Cache.TokensPerMaxLenSequence > 0 {
		m.ConcurrentAtMaxLenPerDPRank = min(int64(s.MaxNumSeqs), m.TokenCapacity/p.Cache.TokensPerMaxLenSequence)
	}
	m.Fits = m.ConcurrentAtMaxLenPerDPRank >= 1
	if !m.Fits {
		return fmt.Errorf("--max-model-len: one sequence of %d tokens needs %s of cache, but only %s fits beside the weights and %d state slots per rank; lower --max-model-len or --max-num-seqs, or change %s",
			s.MaxModelLen, fmtBytes(p.Cache.TokensPerMaxLenSequence*bpt), fmtBytes(m.TokenCapacity*bpt), m.StateSlots, memFlags)
	}
	if int64(s.MaxNumSeqs) > m.ConcurrentAtMaxLenPerDPRank {
		p.Notes = append(p.Notes, fmt.Sprintf("max_num_seqs (%d) sequences of max_model_len do not fit at once (%d do per DP rank); the scheduler preempts when the cache runs out",
			s.MaxNumSeqs, m.ConcurrentAtMaxLenPerDPRank))
	}
	return nil
}

// flagOrDefault names the memory flag most likely at fault.
func flagOrDefault(a *EngineArgs) string {
	if a.Given("gpu-memory-utilization") {
		return "--gpu-memory-utilization"
	}
	return "--device-memory"
}

// fmtBytes renders a byte count in GiB/MiB for messages.
func fmtBytes(b int64) string {
	switch {
	case b >= gib:
		return fmt.Sprintf("%.2f GiB", float64(b)/float64(gib))
	case b >= mib:
		return fmt.Sprintf("%.1f MiB", float64(b)/float64(mib))
	}
	return fmt.Sprintf("%d B", b)
}

// generation fills the sampling defaults.
func (pl *planner) generation(p *Plan, gen *GenerationConfig) {
	g := &p.Generation
	g.EOSTokenIDs = []int{}
	switch a := pl.a; {
	case a.GenerationConfig == "vllm":
		g.Source = "vllm: built-in defaults (generation_config.json ignored)"
		return
	case gen == nil:
		g.Source = "none: no generation_config.json"
		return
	case a.GenerationConfig == "auto":
		g.Source = "generation_config.json of the model"
	default:
		g.Source = "generation_config.json in " + a.GenerationConfig
	}
	g.EOSTokenIDs = append(g.EOSTokenIDs, gen.EOSTokenID...)
	g.Temperature, g.TopP, g.TopK, g.MinP = gen.Temperature, gen.TopP, gen.TopK, gen.MinP
	g.RepetitionPenalty, g.MaxNewTokens = gen.RepetitionPenalty, gen.MaxNewTokens
}

// frontend fills the HTTP side.
func (pl *planner) frontend(p *Plan) {
	a := pl.a
	n, src := pl.apiServerCount(p.Parallel.DataParallelSizeLocal)
	p.Frontend = PlanFrontend{
		Host: a.Host, Port: a.Port, ServedModelNames: a.ServedModelNames(),
		APIServerCount: n, APIServerCountSource: src, APIKey: a.APIKey != "",
		ReasoningParser: a.ReasoningParser, ToolCallParser: a.ToolCallParser, AutoToolChoice: a.EnableAutoToolChoice,
		ChatTemplate: a.ChatTemplate, LoadFormat: a.LoadFormat,
	}
	if p.Frontend.Host == "" {
		p.Frontend.Host = "0.0.0.0"
	}
}

// GenerationDir returns the directory whose generation_config.json
// --generation-config selects for a model in modelDir ("" for vllm: none).
func (a *EngineArgs) GenerationDir(modelDir string) string {
	switch a.GenerationConfig {
	case "vllm":
		return ""
	case "auto", "":
		return modelDir
	}
	return a.GenerationConfig
}

// LoadGenerationConfig loads the sampling defaults --generation-config
// selects (nil when none: --generation-config vllm, or no file under
// auto). A directory given explicitly must hold the file.
func (a *EngineArgs) LoadGenerationConfig(modelDir string) (*GenerationConfig, error) {
	dir := a.GenerationDir(modelDir)
	if dir == "" {
		return nil, nil
	}
	g, found, err := LoadGeneration(dir)
	if err != nil {
		return nil, fmt.Errorf("--generation-config: %w", err)
	}
	if !found {
		if a.GenerationConfig != "auto" && a.GenerationConfig != "" {
			return nil, fmt.Errorf("--generation-config: no generation_config.json in %s", dir)
		}
		return nil, nil
	}
	return g, nil
}
