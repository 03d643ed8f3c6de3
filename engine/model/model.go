// Package model is what the engine knows of a model: a batch description,
// an opaque device cache and a forward pass, behind the Model interface,
// plus a registry of model implementations keyed by the checkpoint's
// model_type (as ollama and vLLM keep theirs). The engine core
// (engine/core) talks to models only through this package; glm5next is
// the one implementation today.
package model

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/engine/sampling"
	"github.com/npuserve/npuserve/npu"
)

// Batch is one forward step: several sequences, each contributing a run of
// consecutive new positions (a prefill chunk, or one decode token).
type Batch struct {
	// Tokens are the input ids of every row, sequences back to back in
	// Layout order.
	Tokens []int32
	// Layout splits the rows into sequences and addresses their cache
	// through block tables (kvcache.Manager.Layout builds it); the model
	// uploads it once.
	Layout npu.BatchLayout
	// LogitRows are the rows whose logits Forward returns, in this order.
	// Nil means the last row of every sequence that has rows; an empty
	// non-nil slice computes no logits (a prefill chunk that samples
	// nothing).
	LogitRows []int

	// Hooks for tests, debugging and calibration (nil when serving); a
	// model documents which it calls.
	//
	// Observe is called after every decoder layer l with the layer's
	// output (a device tensor valid during the call), and once more with
	// l = the number of layers and the final normed hidden states that
	// feed the output head.
	Observe func(l int, t *npu.Tensor)
	// ObserveIndex is called with a sparse-attention layer's selection.
	ObserveIndex func(l int, sel *npu.Tensor)
	// ObserveLinear is called before every linear with the checkpoint
	// modules it computes and its input (static quantization's
	// calibration).
	ObserveLinear func(modules []string, x *npu.Tensor)
}

// Cache is a model's device cache for a kvcache.Manager of the same block
// count, block size and state slots; opaque to the engine.
type Cache interface {
	// Release frees the cache's device memory.
	Release()
}

// Model is what the engine needs of a model.
type Model interface {
	Config() *config.ModelConfig
	Backend() npu.Backend
	// NewCache allocates the cache for numBlocks blocks of blockSize
	// tokens and stateSlots concurrent sequences.
	NewCache(numBlocks, blockSize, stateSlots int) (Cache, error)
	// Forward runs the batch, writing its cache entries, and returns the
	// logits [len(LogitRows), vocab] (F32, on the device; the caller frees
	// them with the backend's Free), or the step's failure.
	Forward(c Cache, b *Batch) (*npu.Tensor, error)
	// BytesPerToken and BytesPerSequenceState size the cache
	// (config.CacheBlocks).
	BytesPerToken() int64
	BytesPerSequenceState() int64
}

// Collective is a Model whose forward passes run collectives with other
// ranks (tensor or expert parallelism): every rank must run a forward in
// every step, DummyStep when it has no tokens.
type Collective interface {
	Model
	// DummyStep runs one forward with no tokens but the collectives.
	DummyStep(c Cache) error
	// Collective reports whether Forward and DummyStep run collectives. A
	// failure of a collective model's step is fatal to its engine.
	Collective() bool
}

// ShardedLogits is implemented by models whose Forward returns this
// rank's vocabulary columns of the logits instead of whole rows (a
// vocabulary-parallel TP leader): sampling then asks the model for a
// reduction of every rank's columns, so only the reduced values cross
// between ranks, to the leader only, or gathers whole rows for the rows
// that need them.
type ShardedLogits interface {
	// VocabSharded reports whether Forward's logits are sharded, and the
	// full vocabulary size V.
	VocabSharded() (vocab int, sharded bool)
	// ReduceLogits reduces the rows of the last Forward's sharded logits
	// (shard, as Forward returned it) across the ranks: per row, the k
	// best entries of the whole row (npu.SampleReducer's order and
	// counts; ids in the whole vocabulary) and the raw values of the ids
	// in touched[row] (ascending). It is the step's sync point.
	ReduceLogits(shard *npu.Tensor, k int, touched [][]int32) ([]RowReduction, error)
	// GatherLogits gathers the last Forward's sharded logits into whole
	// rows [R, V] (a new device tensor the caller frees).
	GatherLogits(shard *npu.Tensor) (*npu.Tensor, error)
	// QueryLogits answers sampling queries on the last Forward's sharded
	// logits (query i on row rows[i]; sampling.SampleRounds): every rank
	// answers for its columns, the leader merges (MergeAnswers). It is a
	// sync point.
	QueryLogits(shard *npu.Tensor, rows []int, qs []sampling.Query) ([]sampling.Answer, error)
}

// RowReduction is one row of ShardedLogits.ReduceLogits: host values.
type RowReduction struct {
	IDs         []int32   // the best ids, value descending, ties to the lower id, NaN last
	Vals        []float32 // their values
	TouchedVals []float32 // the values of the row's touched ids, in order
	NaN, PosInf int       // the row's NaN and +Inf entries
}

// DownloadRows copies an F32 tensor [rows, n] (logits) to the host: the
// synchronisation point between device and host.
func DownloadRows(be npu.Backend, t *npu.Tensor) ([][]float32, error) {
	if t.DType() != npu.F32 || t.Rank() != 2 {
		panic(fmt.Sprintf("model: DownloadRows of %v, want F32 [rows, n]", t))
	}
	host, err := npu.DownloadF32(be, t)
	if err != nil {
		return nil, err
	}
	rows, n := t.Dim(0), t.Dim(1)
	out := make([][]float32, rows)
	for i := range out {
		out[i] = host[i*n : (i+1)*n : (i+1)*n]
	}
	return out, nil
}

// Loaded is a model opened for serving: the engine's Model plus what the
// server manages around it.
type Loaded interface {
	Model
	// SetCacheDType chooses the per-token cache's element type
	// (config.CacheDType) for caches made afterwards.
	SetCacheDType(npu.DType) error
	// CacheDType is the per-token cache's element type.
	CacheDType() npu.DType
	// Close frees the weights (after the engine stopped).
	Close() error
}

// OpenOptions configure Open.
type OpenOptions struct {
	// DType is the matmul weights' dtype ("auto", "float32", "bfloat16").
	DType string
	// Quantization is the loader's quantization mode
	// (config.LoaderQuantization).
	Quantization string
	// Random builds random weights (--load-format dummy) from the config
	// with Seed instead of reading the checkpoint.
	Random bool
	Seed   int64
	// MTP loads the checkpoint's MTP draft layer (speculative decoding;
	// a random one with Random); a checkpoint without one is an error.
	MTP bool
	// Log receives loading messages; Progress, when set, a progress bar.
	Log      func(format string, args ...any)
	Progress io.Writer
}

// Opener opens a model of one model_type from dir (config.json parsed as
// cfg) on be.
type Opener func(be npu.Backend, dir string, cfg *config.ModelConfig, opt OpenOptions) (Loaded, error)

var (
	regMu   sync.Mutex
	openers = map[string]Opener{}
)

// Register makes an implementation available for checkpoints whose
// config.json says model_type; implementations register from their
// package's init, and a binary links those it serves by importing them.
func Register(modelType string, open Opener) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := openers[modelType]; dup || open == nil {
		panic(fmt.Sprintf("model: model_type %q registered twice or without an opener", modelType))
	}
	openers[modelType] = open
}

// Open opens the model in dir with the implementation its model_type
// names.
func Open(be npu.Backend, dir string, cfg *config.ModelConfig, opt OpenOptions) (Loaded, error) {
	regMu.Lock()
	open, ok := openers[cfg.ModelType]
	var known []string
	for k := range openers {
		known = append(known, k)
	}
	regMu.Unlock()
	if !ok {
		sort.Strings(known)
		return nil, fmt.Errorf("model_type %q is not supported (this binary serves: %s)", cfg.ModelType, strings.Join(known, ", "))
	}
	return open(be, dir, cfg, opt)
}

// Speculative is a Model with a draft layer (GLM's MTP) for speculative
// decoding (glm5next-features.md §2). A speculative step is SpecForward
// (the target forward over every sequence's rows: prefill chunks, plain
// decode tokens and verify rows [next, d_1..d_k]) then, after the host
// chose what each sequence keeps, SpecCommit (rollback of rejected rows,
// the draft layer over the kept rows, and the next drafts). Every
// SpecForward must be followed by one SpecCommit before the next forward.
type Speculative interface {
	Model
	// CanDraft reports whether the model has a draft layer loaded.
	CanDraft() bool
	// SpecForward is Forward that also keeps every row's final hidden
	// state for SpecCommit, after backing up the recurrent state of the
	// sequences listed in backup (indices into b.Layout's sequences: those
	// that verify drafts) so that SpecCommit can roll them back.
	SpecForward(c Cache, b *Batch, backup []int) (*npu.Tensor, error)
	// SpecCommit finishes the step SpecForward began and returns, for each
	// entry of sc.Seqs with Draft set, sc.K draft tokens (nil for the
	// others). Sequences of the forward not listed (finished requests)
	// get no draft-layer rows.
	SpecCommit(c Cache, sc *SpecCommit) ([][]int32, error)
}

// SpecCollective is a Speculative model whose speculative steps run
// collectives with other ranks' different batches (expert parallelism
// across DP ranks in lockstep): every rank's step must reach the same
// collectives, so SpecCommit runs the draft layer exactly K times whatever
// its batch (with no rows where nothing drafts), and a rank with nothing
// scheduled runs SpecDummyStep instead of DummyStep.
type SpecCollective interface {
	Speculative
	// SpecDummyStep is DummyStep followed by k draft-layer forwards with
	// no rows of this rank's own.
	SpecDummyStep(c Cache, k int) error
}

// SpecCommit says what every sequence of a SpecForward batch keeps.
type SpecCommit struct {
	// K is the number of tokens to draft per drafting sequence.
	K    int
	Seqs []SpecCommitSeq
}

// SpecCommitSeq is one sequence's outcome of a speculative step.
type SpecCommitSeq struct {
	// Seq indexes the sequence in the SpecForward batch's layout.
	Seq int
	// Kept is how many of its rows stay in the cache (the rest were
	// rejected drafts). A backed-up sequence that keeps fewer rows than it
	// fed gets its recurrent state restored and the kept rows replayed.
	Kept int
	// Next is the token after each kept row (len Kept): the draft layer's
	// input at that row (row t carries token t+1).
	Next []int32
	// Draft asks for sc.K drafts after the kept rows; BlockTable must then
	// cover the positions the drafter writes (up to Pos+Kept+K-2).
	Draft bool
	// BlockTable is the sequence's current block table (it may have grown
	// since SpecForward).
	BlockTable []int32
}
