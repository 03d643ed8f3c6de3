package npu

// Backend is one device (one rank) with its memory and its stream of work.
//
// Execution model (the device contract; docs/architecture.md has the whole
// page): every op is enqueued on the backend's one stream in call order and
// may run after the call returns; a backend may also run ops eagerly (the
// CPU backend does). Results are visible to later ops on the same stream.
// The host sees device data only through Download, which waits for all work
// enqueued before it: that is the explicit synchronisation point (sampled
// ids, routing counts). Ops take tensors and scalars only, never host
// slices: per-step host metadata reaches the device once, through Upload
// (see SeqLayout). Upload copies its source before it returns, so callers
// may reuse it at once; a scratch buffer may be reused by later ops
// immediately because the stream orders them after its last use; Free
// defers the release until the stream has passed every op enqueued before
// it.
//
// Errors: memory operations return errors (out of memory names the tensor
// and the bytes asked for; see AllocError). A failure inside an
// asynchronous op (an argument error too, on a backend that checks on the
// stream) surfaces at the next Sync, Download or RunOnStream, which
// reports it once and clears it, so the engine can fail that step and go
// on; ops enqueued between the failure and its report may be skipped
// (their outputs are undefined), memory management still happens. Shape and dtype
// errors in op arguments are programming errors and panic; bad input from
// outside is rejected before it reaches an op (loader, server), and the
// engine recovers such a panic into the failure of one step.
//
// A Backend is driven by one goroutine at a time (the engine's device
// loop); it is not safe for concurrent use unless it says so.
type Backend interface {
	Memory
	Ops
	// Name identifies the backend ("cpu", "cpu-async", "cuda", "ascend").
	Name() string
	// Info describes the device (memory size for cache budgeting).
	Info() DeviceInfo
	// Sync waits until all enqueued work has finished and returns the
	// first failure of that work, if any.
	Sync() error
}

// DeviceInfo describes a device for capacity planning and logs.
type DeviceInfo struct {
	Name        string // human-readable device name
	MemoryBytes int64  // total device memory (host RAM on the CPU backend)
	FreeBytes   int64  // memory available to this process now
	// Accelerator is true for a device with its own memory (not the host
	// CPU): caches default to bf16 there (see config.CacheDType).
	Accelerator bool
}

// Memory allocates device tensors and moves bytes between host and device.
type Memory interface {
	// Alloc returns a zero-filled tensor, or an *AllocError (wrapping
	// ErrOutOfMemory when the device is full).
	Alloc(dt DType, shape ...int) (*Tensor, error)
	// FromHost makes a tensor holding data (little-endian elements of dt).
	// The CPU backend may alias data instead of copying, so the caller must
	// keep data alive and unchanged for the tensor's lifetime (weights from a
	// memory-mapped checkpoint).
	FromHost(dt DType, data []byte, shape ...int) (*Tensor, error)
	// Upload enqueues a copy of host bytes into dst (same byte size). src
	// is copied before Upload returns: the caller may overwrite or drop it
	// at once but must not read it afterwards (the checking cpu-async
	// backend scribbles it; keep a copy to compare against).
	Upload(dst *Tensor, src []byte) error
	// Download waits for pending work and copies src's bytes to dst: the
	// synchronisation point between device and host. It returns the first
	// failure of the work it waited for.
	Download(dst []byte, src *Tensor) error
	// Free releases a tensor allocated by Alloc or FromHost once the work
	// enqueued before it has finished. Views must not be freed.
	Free(t *Tensor)
}

// StreamRunner is implemented by backends whose stream runs on a goroutine
// of their own while their memory is host memory (the checking cpu-async
// backend): host-memory transports (hccl's TCP transport) must touch
// tensors on that stream, after the ops enqueued before them.
type StreamRunner interface {
	// RunOnStream runs fn on the stream once all work enqueued before it
	// has finished and waits for it, returning fn's error (or the stream's
	// earlier failure, in which case fn does not run). fn must not wait on
	// its own backend (Sync, Download, RunOnStream): it runs on the stream.
	RunOnStream(fn func() error) error
}

// RunOnStream runs fn on be's stream when be has one of its own
// (StreamRunner), else directly: the way collectives over host memory are
// ordered against a backend's ops.
func RunOnStream(be Backend, fn func() error) error {
	if r, ok := be.(StreamRunner); ok {
		return r.RunOnStream(fn)
	}
	return fn()
}

// SeqLayout is the batch description the attention-like ops take: how the
// rows of a flattened batch split into sequences and where each sequence's
// cached state lives. It is the form vLLM's paged attention backends take
// (query start offsets, cached lengths, block tables); the per-token cache
// rows of the new tokens (the slot mapping) are used by the model's
// Scatter calls, not by the ops. Its tensors are uploaded once per step
// (see BatchLayout.Upload); only the sizes here are host values.
type SeqLayout struct {
	// NumSeqs sequences contribute NumRows rows; MaxBlocks is the width of
	// BlockTable; BlockSize the tokens per cache block.
	NumSeqs, NumRows, MaxBlocks, BlockSize int
	// QueryStart I32 [B+1]: rows [QueryStart[b], QueryStart[b+1]) of the
	// batch belong to sequence b.
	QueryStart *Tensor
	// Pos I32 [B]: the absolute position of sequence b's first row (the
	// number of its tokens already in the cache).
	Pos *Tensor
	// StateSlot I32 [B]: the slot of sequence b's fixed-size state (KDA
	// conv and recurrent state) in the per-layer state tensors.
	StateSlot *Tensor
	// BlockTable I32 [B, MaxBlocks]: the cache blocks of sequence b in
	// order, covering every position up to its last row (-1 beyond).
	// Position p lives in per-token cache row
	// BlockTable[b][p/BlockSize]*BlockSize + p%BlockSize; complete pool i
	// (kp tokens) in pooled row
	// BlockTable[b][i*kp/BlockSize]*(BlockSize/kp) + (i*kp%BlockSize)/kp.
	BlockTable *Tensor
}

// HCParams are the mHC (manifold-constrained hyper-connection) constants.
type HCParams struct {
	Streams       int     // hc_mult
	SinkhornIters int     // hc_sinkhorn_iters
	Eps           float32 // hc_eps
	RMSEps        float32 // rms_norm_eps of the unweighted input norm
}

// KDAGateParams select the KDA forget-gate form.
type KDAGateParams struct {
	// LowerBound set: g = LowerBound * sigmoid(exp(A_log[h]) * (f + dt_bias)).
	// Otherwise: g = -exp(A_log[h]) * softplus(f + dt_bias), with
	// softplus(x) = x for x > 20.
	HasLowerBound bool
	LowerBound    float32
	HeadDim       int // channels per head (A_log is per head)
}

// IndexParams configure the DSA k-pool indexer selection.
type IndexParams struct {
	TopKPools int     // index_topk / index_kpool
	KPool     int     // index_kpool: tokens per pool
	Tail      bool    // index_kpool_always_select_tail
	Scale     float32 // index_head_dim^-0.5, applied inside the ReLU
}

// RouterParams configure the MoE router (sigmoid scoring, noaux_tc).
type RouterParams struct {
	TopK      int     // num_experts_per_tok
	NGroup    int     // n_group
	TopKGroup int     // topk_group
	Normalize bool    // norm_topk_prob
	Scale     float32 // routed_scaling_factor
}

// Ops is the op set. Unless stated, float inputs and outputs are F32 and
// computed with fp32 accumulation; "weight" arguments may be F32, BF16 or
// F16. Outputs must not alias inputs unless stated.
type Ops interface {
	// Copy copies src to dst (same element count), converting between F32,
	// BF16, F16 and I32.
	Copy(dst, src *Tensor)
	// Fill sets every element of dst (F32) to v.
	Fill(dst *Tensor, v float32)

	// MatMul computes out[M,N] = x[M,K] · w[N,K]^T (PyTorch Linear layout).
	MatMul(out, x, w *Tensor)
	// Add computes out = a + b; b has a's shape or is one row broadcast over
	// a's rows (b.Numel() == a's last dimension). out may alias a.
	Add(out, a, b *Tensor)
	// Mul computes out = a * b elementwise, with Add's broadcasting. out may
	// alias a.
	Mul(out, a, b *Tensor)
	// Scale computes out = s * x. out may alias x.
	Scale(out, x *Tensor, s float32)

	// RMSNorm normalises each group of n = w.Numel() consecutive elements
	// (the last dimension when w is nil, unweighted):
	// y = x * rsqrt(mean(x^2) + eps) * w.
	RMSNorm(out, x, w *Tensor, eps float32)
	// RMSNormGated is RMSNorm over groups of n = w.Numel() elements, times
	// sigmoid(gate) (gate has x's shape): KDA's output norm.
	RMSNormGated(out, x, gate, w *Tensor, eps float32)
	// LayerNorm normalises groups of n = w.Numel() elements:
	// y = (x - mean) * rsqrt(var + eps) * w + b (b may be nil).
	LayerNorm(out, x, w, b *Tensor, eps float32)
	// Softmax over the last dimension. out may alias x.
	Softmax(out, x *Tensor)
	// Sigmoid elementwise. out may alias x.
	Sigmoid(out, x *Tensor)
	// SiLU elementwise, x*sigmoid(x). out may alias x.
	SiLU(out, x *Tensor)
	// SwiGLU takes gateUp [M, 2I] (gate columns first, then up) and writes
	// out[M, I] = silu(min(gate, limit)) * clamp(up, -limit, limit).
	SwiGLU(out, gateUp *Tensor, limit float32)
	// L2Norm divides each group of n elements by sqrt(sum(x^2) + eps).
	// out may alias x.
	L2Norm(out, x *Tensor, n int, eps float32)

	// Conv1d is the depthwise causal convolution over the rows of each
	// sequence: x [T, C], w [C, W] (w[c][W-1] multiplies the current row),
	// state [slots, W-1, C] holding each sequence's previous W-1 inputs
	// (oldest first, zeros at sequence start), updated in place to the last
	// W-1 inputs. out[t,c] = act(sum_i w[c][i] * u[t-(W-1)+i][c]).
	Conv1d(out, x, state, w *Tensor, seqs *SeqLayout, silu bool)
	// Conv1dUpdate is Conv1d for exactly one new row per sequence (decode).
	Conv1dUpdate(out, x, state, w *Tensor, seqs *SeqLayout, silu bool)

	// TopK writes, for each row of x [M, N], the k largest values (vals F32
	// [M, k], descending) and their column indices (idx I32 [M, k]). Ties go
	// to the lower index; NaN ranks below every number.
	TopK(vals, idx, x *Tensor, k int)
	// Gather copies rows: out[i] = src[idx[i]] (idx I32 [M]; src [N, ...]),
	// converting src's dtype to out's.
	Gather(out, src, idx *Tensor)
	// Scatter writes rows: dst[idx[i]] = src[i], converting dtype.
	Scatter(dst, src, idx *Tensor)
	// Embedding looks up ids (I32 [M]) in table [V, D]: out [M, D].
	Embedding(out, table, ids *Tensor)

	// HCPre is the mHC input side for x [T, n, D] (streams): with
	// m = fn·(x̄ * rsqrt(mean(x̄²)+RMSEps)) over x̄ = flatten(x[t]),
	// pre = sigmoid(m[:n]*scale[0]+base[:n]) + eps,
	// post [T, n] = 2*sigmoid(m[n:2n]*scale[1]+base[n:2n]),
	// comb [T, n, n] = Sinkhorn(softmax_rows(m[2n:]*scale[2]+base[2n:]) + eps),
	// collapsed [T, D] = sum_i pre_i x_i.
	// fn [(2+n)n, nD], base [(2+n)n], scale [3].
	HCPre(collapsed, post, comb, x, fn, base, scale *Tensor, p HCParams)
	// HCPost writes out[t, j] = post[t, j]*y[t] + sum_i comb[t, i, j]*x[t, i]
	// for streams x [T, n, D] and sublayer output y [T, D].
	HCPost(out, y, post, comb, x *Tensor)
	// HCMean writes out [T, D] = mean over the n streams of x [T, n, D].
	HCMean(out, x *Tensor)

	// KDAGate turns the forget-gate projection f [T, H*K] into the log-decay
	// g [T, H*K] with dtBias [H*K] and aLog [H] (see KDAGateParams).
	KDAGate(g, f, dtBias, aLog *Tensor, p KDAGateParams)
	// KDA runs Kimi Delta Attention over each sequence's rows:
	// qkv [T, 3*H*K] (channel order q|k|v, after the short conv), g [T, H*K]
	// log-decay, beta [T, H], state [slots, H, K, V] (fp32, updated in place
	// at each sequence's StateSlot), out [T, H*V]. q and k are l2-normalised
	// (eps 1e-6) and q scaled by K^-0.5 inside the op. chunk > 0 selects the
	// chunked algorithm with that chunk size; chunk == 0 the token
	// recurrence. Both continue from the cached state.
	KDA(out, qkv, g, beta, state *Tensor, seqs *SeqLayout, heads, headDim, chunk int)

	// KPool compresses complete pools: keys and gates [P*kp, d] hold the kp
	// consecutive tokens of P pools, ape [kp, d]; out [P, d] =
	// sum_j softmax_j(gate[j]+ape[j]) * key[j], channel by channel.
	KPool(out, keys, gates, ape *Tensor)
	// DSAIndex selects, for each query row of each sequence, the token
	// positions sparse attention may use: score every complete pool visible
	// to the query (pool i is visible when its last position <= the query's
	// position) with sum_h w[t,h]*relu(Scale * q[t,h]·pooled[slot]), take
	// the TopKPools best (ties to the lower pool), expand each to its KPool
	// positions and, with Tail, append the positions of the query's
	// incomplete pool. q [T, Hi*d], w [T, Hi] (already scaled by Hi^-0.5),
	// pooled [poolSlots, d] addressed through seqs.BlockTable; out I32
	// [T, width] of sequence positions, unused entries -1.
	DSAIndex(out, q, w, pooled *Tensor, seqs *SeqLayout, p IndexParams)
	// SparseMLA is NoPE multi-head latent attention over selected positions:
	// q [T, H*Dk], latents [tokenSlots, R] addressed through seqs.BlockTable,
	// kvB [H*(Dk+Dv), R] (per head Dk key rows then Dv value rows), sel I32
	// [T, width] from DSAIndex (-1 = unused); out [T, H*Dv] with softmax
	// scale `scale`. A row with no selected position (DSAIndex without tail
	// selection, before the first complete pool) outputs zeros, as the
	// reference's SDPA attention does for a fully masked query.
	SparseMLA(out, q, latents, kvB, sel *Tensor, seqs *SeqLayout, heads, dk, dv int, scale float32)

	// Router computes MoE routing for x [T, D] with gate weight [E, D] and
	// correction bias [E] (fp32): sigmoid scores, selection on biased scores
	// (group-limited when NGroup > 1, ties to the lower expert), weights from
	// unbiased scores (normalised if Normalize) times Scale. weights F32
	// [T, k], ids I32 [T, k].
	Router(weights, ids, x, gate, bias *Tensor, p RouterParams)
	// MoE adds the routed experts to out [T, D]:
	// out[t] += sum_j weights[t,j] * down_e(SwiGLU(gateUp_e · x[t])) with
	// e = ids[t,j], gateUp [E, 2I, D] (gate rows first), down [E, D, I].
	MoE(out, x, gateUp, down, weights, ids *Tensor, limit float32)

	// PrepareQuant converts a loaded quantized weight (checkpoint form,
	// see QuantWeight) into the backend's compute layout, as vllm-ascend's
	// process_weights_after_loading does (transposes, NZ format; packed
	// int8 panels on the CPU). It is idempotent; MatMulQ and MoEQ prepare
	// a weight on first use when it was not prepared at load time.
	PrepareQuant(w *QuantWeight)
	// MatMulQ computes out[M,N] = x[M,K] · w^T for a quantized linear w
	// [N,K] with w.Scheme's arithmetic (see QScheme): x (F32) is quantized
	// on the device (per token for W8A8_DYNAMIC, with the static scale and
	// zero point for W8A8, per MX block for W8A8_MXFP8), multiplied in
	// int32 (int8 schemes) or fp32 (MXFP8) and dequantized to out (F32).
	MatMulQ(out, x *Tensor, w *QuantWeight)
	// MoEQ is MoE with quantized experts gateUp [E, 2I, D] and down
	// [E, D, I] (W8A8_DYNAMIC or W8A8_MXFP8): each expert's gate/up input
	// and SwiGLU output are quantized as MatMulQ does.
	MoEQ(out, x *Tensor, gateUp, down *QuantWeight, weights, ids *Tensor, limit float32)
}

// WeightMarker is implemented by backends that may read weights ahead
// of the ops before them: MarkWeights is the caller's promise that no op
// writes these tensors (or views of their buffers) until they are freed,
// as a model's weights after loading, except for a write that a Sync
// follows before any other op runs (a test rescaling its weights). The
// CUDA backend then lets its decode GEMVs load their first weights
// before waiting on the previous kernel. Backends without it read every
// operand in stream order; a caller that cannot promise it does not call
// it.
type WeightMarker interface {
	MarkWeights(ts ...*Tensor)
}

// SampleReducer is implemented by backends that reduce rows of logits on
// the device to what a greedy sampler needs (engine/sampling's
// Sampler.Reducible and SampleReduced): the top candidates and two counts
// cross to the host instead of the whole vocabulary row, a few dozen
// bytes instead of 4*V.
//
// It is not part of Ops yet, so that a backend without it (today's
// Ascend backend) keeps working: the engine asks with a type assertion
// and falls back to downloading whole rows, which gives the same tokens.
// Ops will embed it once every backend implements it. SampleHistogrammer
// takes the rows a top-k reduction cannot decide (plain temperature,
// top-p, logprobs).
type SampleReducer interface {
	// SampleReduce writes, for each row r of logits [R, V] (F32), the k
	// best entries in TopK's order (vals F32 [R, k] descending, ids I32
	// [R, k]; ties to the lower id, NaN below every number) and the row's
	// number of NaN and of +Inf entries (stats I32 [R, 2]: stats[r][0]
	// NaNs, stats[r][1] +Infs), for 0 <= k <= V (vals and ids may be nil
	// when k is 0). The counts let the host keep the sampler's error
	// semantics (a NaN or +Inf anywhere in the row fails the row) without
	// seeing it; -Inf needs no count (an all -Inf row shows as a -Inf best
	// candidate). Exact: values are compared and copied, never computed
	// on. One call serves a batch whose rows need different k: it takes
	// the largest, and the first k' entries of a row are its top k'.
	SampleReduce(vals, ids, stats, logits *Tensor, k int)
}

// GraphCapturer is implemented by backends that can record a run of ops
// once and replay it with one launch (CUDA graphs; Ascend's
// aclmdlRICapture fits the same shape): the way decode steps, a few
// hundred small kernels each, stop being bound by launch overhead. The
// engine asks with a type assertion; a backend without it runs every
// step eagerly.
//
// Capture contract. Between BeginCapture and EndCapture the ops (Ops and
// SampleReducer calls) are recorded, not run, and read and write the
// tensors they are given: a replay uses the same device addresses, so
// every tensor a captured op touches must be allocated before
// BeginCapture and stay allocated, unchanged in size, until the Graph is
// closed. What a replay sees differently is the contents of those
// tensors: per-step metadata (token ids, the SeqLayout tensors, slot
// mappings) is Uploaded into the same fixed buffers before Launch, and
// the stream orders that Upload after the previous replay's reads.
// During a capture the backend refuses what it cannot record: Alloc,
// FromHost, Upload, Download, Sync and RunOnStream return an error
// wrapping ErrCapturing (and Free panics: freeing memory a graph may
// use is a programming error); an op that needs scratch of its own may
// take it from memory the graph owns (CUDA's stream-ordered allocations
// become graph allocations; Graph.Bytes reports them), never from a
// host-synchronising allocation. A failed op or refused call makes the
// capture fail: EndCapture then returns the first error and no graph,
// and the backend is back in eager mode either way.
type GraphCapturer interface {
	// BeginCapture starts recording the ops enqueued after it. Captures
	// do not nest.
	BeginCapture() error
	// EndCapture stops recording and returns the recorded ops as a
	// Graph ready to Launch, or the capture's first failure.
	EndCapture() (Graph, error)
}

// GraphLimiter is implemented by capturing backends some of whose ops
// may not replay with new inputs (an op planned on the host from the
// batch layout would replay its capture's layout; the Ascend backend
// plans its layout ops on the device for decode batches and says nil):
// ReplayableOps says why a model step must not be captured, or returns
// nil. Engines fall back to eager steps when it returns an error.
type GraphLimiter interface {
	ReplayableOps() error
}

// Graph is a captured run of ops (see GraphCapturer).
type Graph interface {
	// Launch enqueues the recorded ops on the stream, in their order,
	// asynchronously like an op: a failure of the work surfaces at the
	// next Sync or Download.
	Launch() error
	// Bytes is the device memory the graph itself holds (its ops'
	// scratch), 0 when it holds none.
	Bytes() int64
	// Close releases the graph once the work enqueued before it is done.
	// It must not be launched afterwards.
	Close() error
}
