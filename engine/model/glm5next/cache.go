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
	alloc := func(what string, l int, dt npu.DType, shape ...int) *npu.Tensor {
		if err != nil {
			return nil
		}
		var t *npu.Tensor
		if t, err = m.be.Alloc(dt, shape...); err != nil {
			err = fmt.Errorf("glm5next: cache of layer %d (%s): %w", l, what, err)
		}
		return t
	}
	kdaSlots := stateSlots
	if m.mtp != nil {
		kdaSlots = 2 * stateSlots
		c.MTP.Latent = alloc("MLA latents", len(m.layers), m.cacheDT, c.TokenSlots, d.R)
		c.MTP.IndexKeys = alloc("indexer keys", len(m.layers), m.cacheDT, c.TokenSlots, d.Di)
		c.MTP.IndexGates = alloc("indexer gates", len(m.layers), m.cacheDT, c.TokenSlots, d.Di)
		c.MTP.Pooled = alloc("pooled indexer keys", len(m.layers), m.cacheDT, c.PoolSlots, d.Di)
	}
	for l, ly := range m.layers {
		lc := &c.Layers[l]
		if ly.mla != nil {
			lc.Latent = alloc("MLA latents", l, m.cacheDT, c.TokenSlots, d.R)
			if ly.mla.idx != nil {
				lc.IndexKeys = alloc("indexer keys", l, m.cacheDT, c.TokenSlots, d.Di)
				lc.IndexGates = alloc("indexer gates", l, m.cacheDT, c.TokenSlots, d.Di)
				lc.Pooled = alloc("pooled indexer keys", l, m.cacheDT, c.PoolSlots, d.Di)
			}
		} else {
			lc.Conv = alloc("KDA conv window", l, npu.F32, kdaSlots, d.W-1, 3*d.H*d.K)
			lc.State = alloc("KDA state", l, npu.F32, kdaSlots, d.H, d.K, d.K)
		}
	}
	if err != nil {
		c.Free(m.be)
		return nil, err
	}
	return c, nil
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
// layer (latent, raw indexer key and gate, and its share of a pooled key)
// at the model's cache dtype, for capacity planning (config.CacheFootprint,
// the planner's formula).
func (m *Model) BytesPerToken() int64 {
	b := config.CacheFootprint(m.cfg, int64(m.cacheDT.Size()), m.tpSize()).BytesPerToken
	if m.mtp != nil {
		// The MTP layer's latent, raw indexer key and gate, and pooled-key share.
		d := m.d
		b += int64(m.cacheDT.Size()) * int64(d.R+2*d.Di+(d.Di+d.KPool-1)/d.KPool)
	}
	return b
}

// BytesPerSequenceState is the fixed cache memory of one sequence (KDA conv
// window and recurrent state of this rank's KDA heads, fp32), i.e. of one
// state slot.
func (m *Model) BytesPerSequenceState() int64 {
	b := config.CacheFootprint(m.cfg, int64(m.cacheDT.Size()), m.tpSize()).BytesPerSequenceState
	if m.mtp != nil {
		b *= 2 // the rollback backup of every slot
	}
	return b
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
