package config

import (
	"fmt"

	"github.com/npuserve/npuserve/npu"
)

// CacheDType is the element type of the paged cache (DSA latents, raw
// indexer keys and gates, pooled keys) on a backend: --kv-cache-dtype
// bfloat16, float16 or float32 as given (float32 is npuserve's addition
// to vLLM's choices: the reference precision, e.g. to compare an
// accelerator with the fp32 goldens); auto, and the fp8/int8 choices (not
// implemented: WithoutEffect reports them), keep float32 on the host
// backends (the numerical reference) and the activation dtype (bfloat16
// unless --dtype says otherwise) on accelerators. The KDA conv window and
// recurrent state are float32 everywhere. Plan, serve, the DP ranks and
// the model all take the cache dtype from here.
func CacheDType(kvCacheDtype, backend, activation string) string {
	switch kvCacheDtype {
	case fmtBF16, fmtF16, fmtF32:
		return kvCacheDtype
	}
	if HostBackend(backend) {
		return fmtF32
	}
	switch activation {
	case fmtF16, fmtF32:
		return activation
	}
	return fmtBF16
}

// CacheNPUDType maps a CacheDType name to the tensor dtype.
func CacheNPUDType(name string) npu.DType {
	switch name {
	case fmtBF16:
		return npu.BF16
	case fmtF16:
		return npu.F16
	}
	return npu.F32
}

// cacheHonored reports whether --kv-cache-dtype v is implemented.
func cacheHonored(v string) bool { return v == "auto" || v == fmtBF16 || v == fmtF16 || v == fmtF32 }

// CacheFootprint fills the per-token and per-sequence byte counts of one
// rank's cache for model c with elem-byte cache elements and TP ranks
// splitting the KDA heads, from the cache table (CacheTensors): the one
// formula glm5next.NewCache allocates by, the planner plans by and the
// engine sizes the cache by.
func CacheFootprint(c *ModelConfig, elem int64, tp int) PlanCache {
	return CacheFootprintMTP(c, elem, tp, 0)
}

// CacheFootprintMTP is CacheFootprint for a model that runs mtp of its
// MTP layers (speculative decoding): their DSA caches per token and, when
// mtp > 0, a rollback backup of every sequence's KDA state.
func CacheFootprintMTP(c *ModelConfig, elem int64, tp, mtp int) PlanCache {
	var pc PlanCache
	for _, t := range c.CacheTensors(tp, mtp) {
		e := elem
		if t.F32 {
			e = 4
		}
		b := t.RowElems() * e / int64(max(t.Pool, 1))
		switch t.Name {
		case CacheLatent:
			pc.DSALayersCached++
			pc.LatentBytesPerToken += b
		case CacheIndexKeys, CacheIndexGates:
			pc.IndexerBytesPerToken += b
		case CachePooled:
			pc.FullIndexerLayers++
			pc.PooledBytesPerToken += b
		case CacheConv:
			pc.KDALayersCached++
			pc.ConvBytesPerSequence += b
		case CacheState:
			pc.StateBytesPerSequence += b
		}
	}
	if mtp > 0 {
		// The rollback backup of every state slot.
		pc.ConvBytesPerSequence *= 2
		pc.StateBytesPerSequence *= 2
	}
	pc.BytesPerToken = pc.LatentBytesPerToken + pc.IndexerBytesPerToken + pc.PooledBytesPerToken
	pc.BytesPerSequenceState = pc.ConvBytesPerSequence + pc.StateBytesPerSequence
	return pc
}

// CacheBlocks sizes a cache from a memory budget: the state slots
// (stateSlots × perState bytes) first, then as many blocks of blockSize
// tokens (perToken bytes each) as the rest holds, at most what int32
// token rows address. It is the engine's and the planner's one sizing
// rule.
func CacheBlocks(budget int64, blockSize, stateSlots int, perToken, perState int64) (int, error) {
	state := int64(stateSlots) * perState
	perBlock := perToken * int64(blockSize)
	if perBlock <= 0 || budget-state < perBlock {
		return 0, fmt.Errorf("a cache of %d bytes holds no block of %d tokens (%d bytes) after %d state slots of %d bytes; lower max_num_seqs or give the cache more memory",
			budget, blockSize, perBlock, stateSlots, perState)
	}
	return int(min((budget-state)/perBlock, int64(1<<31-1)/int64(blockSize))), nil
}
