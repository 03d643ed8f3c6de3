package npu

// Backend is one device (one rank) with its memory and its stream of work.
//
// Execution model: every op is enqueued on the backend's stream in call order
// and may run asynchronously; a backend may also run ops eagerly (the CPU
// backend does). Results are visible to later ops on the same stream. The
// host sees device data only through Download, which waits for all work
// enqueued before it: that is the explicit synchronisation point (sampled
// ids, logits). Host slices passed in op arguments (SeqLayout) are read at
// call time, so callers may reuse them afterwards.
//
// Shape and dtype errors in op arguments are programming errors and panic;
// bad input from outside is rejected before it reaches an op (loader,
// server).
type Backend interface {
	Memory
	Ops
	// Name identifies the backend ("cpu", "ascend").
	Name() string
	// Info describes the device (memory size for cache budgeting).
	Info() DeviceInfo
	// Sync waits until all enqueued work has finished.
	Sync() error
}

// DeviceInfo describes a device for capacity planning and logs.
type DeviceInfo struct {
	Name        string // human-readable device name
	MemoryBytes int64  // total device memory (host RAM on the CPU backend)
	FreeBytes   int64  // memory available to this process now
}

// Memory allocates device tensors and moves bytes between host and device.
type Memory interface {
	// Alloc returns a zero-filled tensor.
	Alloc(dt DType, shape ...int) *Tensor
	// FromHost makes a tensor holding data (little-endian elements of dt).
	// The CPU backend may alias data instead of copying, so the caller must
	// keep data alive and unchanged for the tensor's lifetime (weights from a
	// memory-mapped checkpoint).
	FromHost(dt DType, data []byte, shape ...int) *Tensor
	// Upload copies host bytes into dst (same byte size). src may be reused
	// as soon as Upload returns.
	Upload(dst *Tensor, src []byte)
	// Download waits for pending work and copies src's bytes to dst: the
	// synchronisation point between device and host.
	Download(dst []byte, src *Tensor)
	// Free releases a tensor allocated by Alloc or FromHost. Views must not
	// be freed.
	Free(t *Tensor)
}

// SeqLayout says how the rows of a flattened batch split into sequences and
// where each sequence's cached state lives. It is host metadata, read when
// an op is enqueued.
type SeqLayout struct {
	// QueryStart has len B+1: rows [QueryStart[b], QueryStart[b+1]) of the
	// batch belong to sequence b.
	QueryStart []int
	// Pos[b] is the absolute position of sequence b's first row in this batch
	// (the number of its tokens already in the cache).
	Pos []int
	// StateSlot[b] is the slot of sequence b's fixed-size state (KDA conv and
	// recurrent state) in the per-layer state tensors.
	StateSlot []int
	// TokenSlots[b][p] is the row of position p of sequence b in per-token
	// cache tensors (MLA latents, indexer keys), for every position up to and
	// including this batch's last row. Paged caches give block*blockSize+off.
	TokenSlots [][]int32
	// PoolSlots[b][i] is the row of complete pool i of sequence b in the
	// pooled indexer-key tensor, for every pool complete after this batch.
	PoolSlots [][]int32
}

// NumSeqs is the number of sequences in the layout.
func (s *SeqLayout) NumSeqs() int { return len(s.QueryStart) - 1 }

// Rows is the number of rows (tokens) in the batch.
func (s *SeqLayout) Rows() int { return s.QueryStart[len(s.QueryStart)-1] }

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
	// pooled [poolSlots, d] addressed through seqs.PoolSlots; out I32
	// [T, width] of sequence positions, unused entries -1.
	DSAIndex(out, q, w, pooled *Tensor, seqs *SeqLayout, p IndexParams)
	// SparseMLA is NoPE multi-head latent attention over selected positions:
	// q [T, H*Dk], latents [tokenSlots, R] addressed through seqs.TokenSlots,
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
