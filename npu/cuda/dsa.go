package cuda

import (
	"fmt"

	"github.com/npuserve/npuserve/npu"
)

// defaultShared is the dynamic shared memory a kernel may use without
// opting in.
const defaultShared = 48 << 10

// launchShared is launchChecked for a kernel that may need more dynamic
// shared memory than the default: it raises the kernel's limit first (once
// per size). shmem beyond what the GPU allows a block is a programming
// error of the op's limits.
func (b *Backend) launchShared(name string, grid, block dim3, shmem int, args ...uint64) {
	if shmem > defaultShared {
		fn := b.kern.fn(name)
		if b.sharedOptIn == nil {
			b.sharedOptIn = map[uintptr]int{}
		}
		if b.sharedOptIn[fn] < shmem {
			if err := drvFuncMaxShared(b.ctx, fn, shmem); err != nil {
				b.fail(fmt.Errorf("cuda: %s needs %d bytes of shared memory: %w", name, shmem, err))
				return
			}
			b.sharedOptIn[fn] = shmem
		}
	}
	b.launchChecked(name, grid, block, shmem, args...)
}

// sharedLimit is the most dynamic shared memory one block may have.
func (b *Backend) sharedLimit() int {
	if n, err := drvDeviceAttr(b.dev, attrMaxSharedOptin); err == nil && n > 0 {
		return n - 4096 // room for the kernels' static shared memory
	}
	return defaultShared
}

// KPool compresses complete pools (see npu.Ops.KPool): one thread per pool
// and channel, the softmax and weighted sum in fp64 as on the CPU backend.
// keys and gates are F32 [P*kp, d], ape [kp, d] F32, BF16 or F16.
func (b *Backend) KPool(out, keys, gates, ape *npu.Tensor) {
	if ape.Rank() != 2 {
		panic(fmt.Sprintf("cuda: KPool ape %v, want [kp, d]", ape))
	}
	kp, d := ape.Dim(0), ape.Dim(1)
	if kp <= 0 || d <= 0 || keys.Numel()%(kp*d) != 0 || keys.Dim(-1) != d {
		panic(fmt.Sprintf("cuda: KPool keys %v with ape %v", keys, ape))
	}
	P := keys.Numel() / (kp * d)
	if !npu.SameShape(gates.Shape(), keys.Shape()) || out.Numel() != P*d || (P > 0 && out.Dim(-1) != d) {
		panic(fmt.Sprintf("cuda: KPool out %v, keys %v, gates %v", out, keys, gates))
	}
	wantF32("KPool", out, keys, gates)
	wantFloat("KPool", ape)
	if P == 0 {
		return
	}
	n := int64(P) * int64(d)
	b.launch("k_kpool", b.gridFor(n, elemThreads), d1(elemThreads), 0,
		b.ptr(out), b.ptr(keys), b.ptr(gates), b.ptr(ape), pI32(dtypeCode(ape.DType())), pI64(P), pI32(kp), pI32(d))
}

// DSAIndex limits and work sizes (kernels/dsa.cu).
const (
	dsaPoolTile = 32 // pools per scoring block
	// dsaMaxTopK bounds TopKPools: the selected keys are sorted in shared
	// memory (8 bytes each, a power of two of them).
	dsaMaxTopK = 8192
	// dsaWaveBytes bounds the scores scratch; rows beyond it run in
	// further waves.
	dsaWaveBytes = 256 << 20
)

// dsaSortMax is the most visible pools a row sorts whole; rows with more
// use the radix selection (a variable so that tests reach both paths).
var dsaSortMax = 4096

// DSAIndex selects the positions sparse attention may use (see
// npu.Ops.DSAIndex and the CPU backend's DSAIndex, whose output it matches
// exactly for scores that are not within fp32 rounding of each other:
// the dot products are summed in another order). Two kernels per wave of
// rows: k_dsa_score scores every visible pool of every row (one block per
// row and 32 pools; the pooled rows come through the block table), then
// k_dsa_select ranks each row's scores (a bitonic sort of 64-bit keys, or
// a radix selection for rows with more than dsaSortMax pools) and writes
// the positions. The host does not read positions, so the scores scratch
// has room for the most pools a block table can address; a row whose
// pools reach beyond its block table or the cache is a DeviceError at the
// next Sync.
func (b *Backend) DSAIndex(out, q, w, pooled *npu.Tensor, seqs *npu.SeqLayout, p npu.IndexParams) {
	wantFloat("DSAIndex pooled", pooled)
	checkLayout("DSAIndex", seqs)
	T := seqs.NumRows
	Hi, d, nslots, width, err := npu.DSAIndexDims(out, q, w, pooled, T, p)
	if err != nil {
		panic("cuda: " + err.Error())
	}
	kp, topk := p.KPool, p.TopKPools
	wantF32("DSAIndex", q, w)
	if out.DType() != npu.I32 {
		panic(fmt.Sprintf("cuda: DSAIndex out %v: want I32", out))
	}
	if topk > dsaMaxTopK {
		panic(fmt.Sprintf("cuda: DSAIndex supports up to %d pools per row, got %d", dsaMaxTopK, topk))
	}
	if T == 0 || width == 0 {
		return
	}
	if seqs.BlockTable == nil || seqs.BlockSize < 1 || seqs.BlockTable.DType() != npu.I32 || seqs.BlockTable.Numel() != seqs.NumSeqs*seqs.MaxBlocks {
		panic(fmt.Sprintf("cuda: DSAIndex needs an I32 block table of %d sequences by %d blocks, got %v (block size %d)",
			seqs.NumSeqs, seqs.MaxBlocks, seqs.BlockTable, seqs.BlockSize))
	}
	if seqs.BlockSize%kp != 0 {
		panic(fmt.Sprintf("cuda: DSAIndex block size %d is not a multiple of the pool %d", seqs.BlockSize, kp))
	}
	scoreShared := 4 * (Hi*d + dsaPoolTile*(d+1) + Hi*(dsaPoolTile+1) + Hi)
	if lim := b.sharedLimit(); scoreShared > lim {
		panic(fmt.Sprintf("cuda: DSAIndex supports %d heads of %d only with %d bytes of shared memory (the GPU has %d)", Hi, d, scoreShared, lim))
	}
	maxPools := seqs.MaxBlocks * seqs.BlockSize / kp
	if maxPools == 0 {
		// No complete pool can exist: every row is its tail, or empty.
		maxPools = 1
	}
	cap2 := 1
	for cap2 < max(min(maxPools, dsaSortMax), min(topk, maxPools)) {
		cap2 <<= 1
	}
	waveRows := max(1, min(T, dsaWaveBytes/(4*maxPools)))
	scores := b.temp(4 * waveRows * maxPools)
	tiles := (maxPools + dsaPoolTile - 1) / dsaPoolTile
	for t0 := 0; t0 < T; t0 += waveRows {
		rows := min(waveRows, T-t0)
		b.dsaWave(out, q, w, pooled, seqs, p, scores, t0, rows, Hi, d, kp, width, nslots, maxPools, tiles, scoreShared, cap2)
	}
	b.freeBuf(scores)
}

// dsaWave runs DSAIndex's kernels for rows [t0, t0+rows).
func (b *Backend) dsaWave(out, q, w, pooled *npu.Tensor, seqs *npu.SeqLayout, p npu.IndexParams, scores *buffer,
	t0, rows, Hi, d, kp, width, nslots, maxPools, tiles, scoreShared, cap2 int) {
	b.launchShared("k_dsa_score", d2(rows, tiles), d1(256), scoreShared,
		scores.ptr, b.ptr(q), b.ptr(w), b.ptr(pooled), pI32(dtypeCode(pooled.DType())),
		b.ptr(seqs.QueryStart), b.ptr(seqs.Pos), b.ptr(seqs.BlockTable), pI32(seqs.NumSeqs), pI32(t0),
		pI32(Hi), pI32(d), pI32(kp), pI32(seqs.BlockSize), pI32(seqs.MaxBlocks), pI32(nslots), pI32(maxPools),
		pF32(p.Scale), b.errWord, pI32(opDSAIndex))
	b.launchShared("k_dsa_select", d1(rows), d1(256), 8*cap2,
		b.ptr(out), scores.ptr, b.ptr(seqs.QueryStart), b.ptr(seqs.Pos), pI32(seqs.NumSeqs), pI32(t0), pI32(kp),
		pI32(p.TopKPools), pBool(p.Tail), pI32(width), pI32(maxPools), pI32(dsaSortMax), b.errWord, pI32(opDSAIndex))
}
