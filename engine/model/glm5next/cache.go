package glm5next

import (
	"fmt"

	"github.com/npuserve/npuserve/engine/config"
	"github.com/npuserve/npuserve/npu"
)

// Cache is the model's per-layer device cache, sized for a kvcache.Manager
// with the same block count, block size and state slots. Rows are addressed
// by the slots of an npu.SeqLayout (see package kvcache).
type Cache struct {
	NumBlocks  int // blocks of per-token storage
	BlockSize  int // tokens per block (a multiple of index_kpool)
	StateSlots int // per-sequence state slots
	TokenSlots int // NumBlocks*BlockSize rows of per-token tensors
	PoolSlots  int // TokenSlots/index_kpool rows of pooled-key tensors

	// Layers is indexed by decoder layer; unused fields are nil.
	Layers []LayerCache
	// MTP is the MTP draft layer's DSA cache (same token and pool rows as
	// the trunk's), allocated when the model has an MTP layer. Such a
	// cache also keeps a backup KDA state per state slot (rows
	// StateSlots..2*StateSlots-1 of Conv and State) for speculative
	// decoding's rollback.
	MTP LayerCache

	be npu.Backend // the backend holding the tensors
}

// Release frees the cache's device memory (model.Cache).
func (c *Cache) Release() { c.Free(c.be) }

// LayerCache is one layer's cache.
type LayerCache struct {
	// DSA layers.
	Latent *npu.Tensor // [TokenSlots, kv_lora_rank] normalised MLA latents
	// Full-indexer DSA layers: raw per-token indexer keys and pooling gate
	// logits (kept to pool completed pools and for the tail), and the
	// pooled keys of complete pools.
	IndexKeys  *npu.Tensor // [TokenSlots, index_head_dim]
	IndexGates *npu.Tensor // [TokenSlots, index_head_dim]
	Pooled     *npu.Tensor // [PoolSlots, index_head_dim]

	// KDA layers.
	Conv  *npu.Tensor // [StateSlots, W-1, 3*H*K] last W-1 pre-conv q|k|v inputs
	State *npu.Tensor // [StateSlots, H, K, K] fp32 recurrent state
}

// NewCache allocates the cache for numBlocks blocks of blockSize tokens and
// stateSlots concurrent sequences. blockSize must be a multiple of
// index_kpool so pools never straddle blocks.
func (m *Model) NewCache(numBlocks, blockSize, stateSlots int) (*Cache, error) {
	d := m.d
	if blockSize < 1 || blockSize%d.KPool != 0 {
		return nil, fmt.Errorf("glm5next: cache block size %d must be a positive multiple of index_kpool %d", blockSize, d.KPool)
	}
	if numBlocks < 0 || stateSlots < 1 {
		return nil, fmt.Errorf("glm5next: cache needs blocks >= 0 and state slots >= 1, got %d and %d", numBlocks, stateSlots)
	}
	c := &Cache{
		NumBlocks: numBlocks, BlockSize: blockSize, StateSlots: stateSlots,
		TokenSlots: numBlocks * blockSize, PoolSlots: numBlocks * blockSize / d.KPool,
		Layers: make([]LayerCache, len(m.layers)), be: m.be,
	}
	var err error
	kdaSlots, mtp := stateSlots, 0
	if m.mtp != nil {
		kdaSlots, mtp = 2*stateSlots, 1
	}
	// The spec table's cache tensors (config.CacheTensors), as
	// BytesPerToken and BytesPerSequenceState count them.
	for _, t := range m.cfg.CacheTensors(m.tpSize(), mtp) {
		lc := &c.MTP
		if t.Layer < len(m.layers) {
			lc = &c.Layers[t.Layer]
		}
		rows, dt := kdaSlots, m.cacheDT
		if t.PerToken {
			rows = c.TokenSlots / t.Pool
		}
		if t.F32 {
			dt = npu.F32
		}
		what, field := cacheField(lc, t.Name)
		if *field, err = m.be.Alloc(dt, append([]int{rows}, t.Row...)...); err != nil {
			err = fmt.Errorf("glm5next: cache of layer %d (%s): %w", t.Layer, what, err)
			break
		}
	}
	if err != nil {
		c.Free(m.be)
		return nil, err
	}
	return c, nil
}

// cacheField is the field of lc that holds the cache tensor called name
// (config.CacheLatent, …) and what it is, for messages.
func cacheField(lc *LayerCache, name string) (string, **npu.Tensor) {
	switch name {
	case config.CacheLatent:
		return "MLA latents", &lc.Latent
	case config.CacheIndexKeys:
		return "indexer keys", &lc.IndexKeys
	case config.CacheIndexGates:
		return "indexer gates", &lc.IndexGates
	case config.CachePooled:
		return "pooled indexer keys", &lc.Pooled
	case config.CacheConv:
		return "KDA conv window", &lc.Conv
	case config.CacheState:
		return "KDA state", &lc.State
	}
	panic("glm5next: unknown cache tensor " + name)
}

// Free releases the cache's device memory.
func (c *Cache) Free(be npu.Backend) {
	for i := range len(c.Layers) + 1 {
		lc := &c.MTP
		if i < len(c.Layers) {
			lc = &c.Layers[i]
		}
		for _, t := range []*npu.Tensor{lc.Latent, lc.IndexKeys, lc.IndexGates, lc.Pooled, lc.Conv, lc.State} {
			if t != nil {
				be.Free(t)
			}
		}
		*lc = LayerCache{}
	}
}

// BytesPerToken is the cache memory one token position takes in every DSA
// layer (latent, raw indexer key and gate, and its share of a pooled key;
// the MTP layer's too when it is loaded) at the model's cache dtype, for
// capacity planning (config.CacheFootprint, the planner's formula, from
// the spec table NewCache allocates by).
func (m *Model) BytesPerToken() int64 { return m.footprint().BytesPerToken }

// BytesPerSequenceState is the fixed cache memory of one sequence (KDA conv
// window and recurrent state of this rank's KDA heads, fp32, and their
// rollback backup when the MTP layer is loaded), i.e. of one state slot.
func (m *Model) BytesPerSequenceState() int64 { return m.footprint().BytesPerSequenceState }

// footprint is the cache table's byte counts for this rank.
func (m *Model) footprint() config.PlanCache {
	mtp := 0
	if m.mtp != nil {
		mtp = 1
	}
	return config.CacheFootprintMTP(m.cfg, int64(m.cacheDT.Size()), m.tpSize(), mtp)
}

// CacheDType is the element type of the per-token cache (F32 on the host
// backends, BF16 on accelerators, unless SetCacheDType chose).
func (m *Model) CacheDType() npu.DType { return m.cacheDT }

// SetCacheDType chooses the per-token cache's element type (F32, BF16 or
// F16: --kv-cache-dtype through config.CacheDType) for caches made after
// the call.
func (m *Model) SetCacheDType(dt npu.DType) error {
	switch dt {
	case npu.F32, npu.BF16, npu.F16:
		m.cacheDT = dt
		return nil
	}
	return fmt.Errorf("glm5next: cache dtype %v (want F32, BF16 or F16)", dt)
}

// tpSize is the number of TP ranks splitting the KDA heads.
func (m *Model) tpSize() int {
	if m.par.tp() {
		return m.par.TPSize
	}
	return 1
}
