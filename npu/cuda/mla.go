package cuda

import (
	"fmt"

	"github.com/npuserve/npuserve/npu"
)

// SparseMLA limits and work sizes (kernels/mla.cu).
const (
	mlaQT      = 8    // rows per block of the projections
	mlaPS      = 32   // latents per attention tile
	mlaHG      = 16   // heads per attention block
	mlaMaxR    = 1024 // latent rank: 256 threads × MLA_RC columns
	mlaWaveBuf = 256 << 20
	// mlaSplitBlocks is the attention grid below which a wave's latents
	// are split across blocks (flash-decoding): about two blocks per SM
	// of an H200 (132 SMs).
	mlaSplitBlocks = 264
	// mlaBitmapWords bounds k_mla_select_bm's bitmap (32-bit words of
	// shared memory: 32 KB, positions up to 262,144); a block table
	// addressing more sorts (k_mla_select).
	mlaBitmapWords = 8192
)

// mlaSelectBitmap selects k_mla_select_bm where it applies; false keeps
// the sort (tests run both).
var mlaSelectBitmap = true

// mlaAttnTC selects k_mla_attn_tc (the attention step on the tensor
// cores) where it applies (mlaAttnTCFits); false keeps k_mla_attn (tests
// run both).
var mlaAttnTC = true

// mlaOutTC selects the tensor-core output projection (k_gemm_tc_strided,
// one GEMM per head, the latents split in three bf16 parts: fp32
// rounding) for BF16 kvB in waves of at least mlaOutTCRows rows; false
// keeps k_mla_out (tests run both).
var mlaOutTC = true

// mlaOutTCRows is the fewest rows of a wave whose output projection runs
// as GEMMs (one 64-row tile per head and 128 columns); fewer rows
// (decode) take k_mla_out, which reads each weight once per 8 rows.
const mlaOutTCRows = 64

// mlaOut1Cols is the output columns per warp of k_mla_out's one-row form
// (MLA_OUT1_COLS): their weight loads are issued together.
const mlaOut1Cols = 4

// Limits of k_mla_attn_tc (MLA_TC_* in kernels/mla.cu): 16 heads per
// block, latent ranks that are multiples of 128 up to 512 (8 warps, each
// whole m16n8k16 tiles of R/8 columns).
const (
	mlaTCHeads = 16
	mlaTCPad   = 8
	mlaTCMaxR  = 512
)

// mlaTCShared is k_mla_attn_tc's dynamic shared memory for rank R: q̃'s
// three bf16 parts [3][16][R+8], two latent tiles [2][32][R+8], the
// warps' partial scores [8][16][32], the probabilities [16][33], three
// per-head values and three tiles' row indices.
func mlaTCShared(R int) int {
	rp := R + mlaTCPad
	return 2*3*mlaTCHeads*rp + 2*2*mlaPS*rp + 4*8*mlaTCHeads*mlaPS + 4*mlaTCHeads*(mlaPS+1) + 4*3*mlaTCHeads + 4*3*mlaPS
}

// mlaAttnTCFits says whether k_mla_attn_tc serves latents of dtype dt and
// rank R at address lat (z at address zp): BF16, R % 128 == 0, R <=
// mlaTCMaxR, both 16-byte aligned, and its shared memory within lim.
func mlaAttnTCFits(dt npu.DType, R int, lat, zp uint64, lim int) bool {
	return mlaAttnTC && dt == npu.BF16 && R%128 == 0 && R <= mlaTCMaxR && lat%16 == 0 && zp%16 == 0 && mlaTCShared(R) <= lim
}

// SparseMLA is NoPE multi-head latent attention over the positions selected
// by DSAIndex (see npu.Ops.SparseMLA), in the absorbed form for every batch:
//
//  1. k_mla_select_bm (a bitmap of positions) or k_mla_select (a sort)
//     turns each row of sel into the cache rows of its distinct positions
//     (a position listed twice counts once, as on the CPU backend), in
//     ascending order of position;
//  2. k_mla_qlat projects q̃[t,h] = W_UK[h]ᵀ q[t,h] into the latent space;
//  3. k_mla_attn scores the row's latents against up to 16 heads at once
//     (each latent is read once per 16 heads), with an online softmax, and
//     accumulates z = Σ p c; k_mla_attn_tc does the same on the tensor
//     cores (q̃ and p split in three bf16 parts, fp32 accumulation) for
//     BF16 latents of rank 128, 256, 384 or 512 (mlaAttnTCFits);
//  4. k_mla_out projects out[t,h] = W_UV[h] z (at prefill, with BF16 kvB,
//     k_gemm_tc_strided: a tensor-core GEMM per head).
//
// Everything else is fp32 on the CUDA cores (latents and kvB may be F32,
// BF16 or F16, widened when loaded), so results agree with the CPU backend
// to fp32 rounding. Rows run in waves that bound the [rows, H, R] scratch. A
// selected position outside its sequence, or whose block is missing or
// outside the cache, is a DeviceError at the next Sync.
func (b *Backend) SparseMLA(out, q, latents, kvB, sel *npu.Tensor, seqs *npu.SeqLayout, heads, dk, dv int, scale float32) {
	H := heads
	wantFloat("SparseMLA latents", latents)
	wantFloat("SparseMLA kvB", kvB)
	checkLayout("SparseMLA", seqs)
	T := seqs.NumRows
	R, nslots, width, err := npu.SparseMLADims(out, q, latents, kvB, sel, T, heads, dk, dv)
	if err != nil {
		panic("cuda: " + err.Error())
	}
	wantF32("SparseMLA", out, q)
	if sel.DType() != npu.I32 {
		panic(fmt.Sprintf("cuda: SparseMLA sel %v: want I32", sel))
	}
	if R > mlaMaxR {
		panic(fmt.Sprintf("cuda: SparseMLA supports latent ranks up to %d, got %d", mlaMaxR, R))
	}
	if T == 0 {
		return
	}
	if R == 0 {
		b.Fill(out, 0)
		return
	}
	if width > 0 && (seqs.BlockTable == nil || seqs.BlockSize < 1 || seqs.BlockTable.DType() != npu.I32 || seqs.BlockTable.Numel() != seqs.NumSeqs*seqs.MaxBlocks) {
		panic(fmt.Sprintf("cuda: SparseMLA needs an I32 block table of %d sequences by %d blocks, got %v (block size %d)",
			seqs.NumSeqs, seqs.MaxBlocks, seqs.BlockTable, seqs.BlockSize))
	}
	hg := min(mlaHG, H)
	attnShared := 4*(hg*R+mlaPS*(R+1)+hg*(mlaPS+1)+3*hg) + 4*mlaPS
	n2 := 1
	for n2 < width {
		n2 <<= 1
	}
	lim := b.sharedLimit()
	if attnShared > lim || 4*mlaQT*max(dk, R) > lim || 4*n2 > lim {
		panic(fmt.Sprintf("cuda: SparseMLA with rank %d, dk %d and %d selections needs more shared memory than the GPU's %d bytes", R, dk, width, lim))
	}
	// Distinct cache rows of every row's selection: through a bitmap of the
	// positions the block table addresses where it fits, else a sort.
	rows := b.temp(4 * T * max(width, 1))
	counts := b.temp(4 * T)
	bt := uint64(0)
	if seqs.BlockTable != nil {
		bt = b.ptr(seqs.BlockTable)
	}
	words := (seqs.MaxBlocks*max(seqs.BlockSize, 1) + 31) / 32
	switch {
	case width > 0 && mlaSelectBitmap && words <= mlaBitmapWords:
		b.launchShared("k_mla_select_bm", d1(T), d1(256), 4*max(words, 1),
			rows.ptr, counts.ptr, b.ptr(sel), b.ptr(seqs.QueryStart), b.ptr(seqs.Pos), bt,
			pI32(seqs.NumSeqs), pI32(width), pI32(words), pI32(seqs.BlockSize), pI32(seqs.MaxBlocks), pI32(nslots),
			b.errWord, pI32(opSparseMLA))
	case width > 0:
		b.launchShared("k_mla_select", d1(T), d1(min(1024, max(32, n2/2))), 4*n2,
			rows.ptr, counts.ptr, b.ptr(sel), b.ptr(seqs.QueryStart), b.ptr(seqs.Pos), bt,
			pI32(seqs.NumSeqs), pI32(width), pI32(n2), pI32(seqs.BlockSize), pI32(seqs.MaxBlocks), pI32(nslots),
			b.errWord, pI32(opSparseMLA))
	default:
		if err := drvMemsetD8(b.ctx, counts.ptr, 0, counts.n, b.stream); err != nil {
			b.fail(fmt.Errorf("cuda: SparseMLA: %w", err))
		}
	}
	wave := max(1, min(T, mlaWaveBuf/(4*H*R)))
	z := b.temp(4 * wave * H * R)
	wdt, ldt := pI32(dtypeCode(kvB.DType())), pI32(dtypeCode(latents.DType()))
	// The attention kernel and its heads per block, the same for every wave.
	tc := mlaAttnTCFits(latents.DType(), R, b.ptr(latents), z.ptr, lim)
	hgw := hg
	if tc {
		hgw = mlaTCHeads
	}
	for t0 := 0; t0 < T; t0 += wave {
		n := min(wave, T-t0)
		tiles := (n + mlaQT - 1) / mlaQT
		// Decode waves (few row tiles) split the columns over more blocks.
		qz, oz := 1, 1
		if tiles*H < mlaSplitBlocks {
			qz, oz = (R+127)/128, (dv+31)/32
		}
		if useQlatTC(kvB.DType(), n, dk, R, b.ptr(q), b.ptr(kvB)) {
			// Prefill: one strided tensor-core GEMM per head, z[t, h, :] =
			// q[t0+t, h, :dk] · W_UK[h] (dk x R rows of kvB).
			b.launch("k_gemm_tc_strided_t", dim3{uint32((R + moeTCBN - 1) / moeTCBN), uint32((n + moeBM - 1) / moeBM), uint32(H)}, d1(256), 0,
				z.ptr, pI64(H*R), pI64(R), b.ptr(q)+uint64(4*t0*H*dk), pI64(H*dk), pI64(dk),
				b.ptr(kvB), pI64((dk+dv)*R), pI64(R), pI32(n), pI32(R), pI32(dk), pBool(true))
		} else if ks := qlatSlices(kvB.DType(), b.ptr(kvB), dk, R); qz > 1 && ks > 0 {
			b.launchShared("k_mla_qlat_bf16", d2(tiles, H), d1(R/8*ks), 4*(mlaQT*dk+ks*R),
				z.ptr, b.ptr(q), b.ptr(kvB), pI32(t0), pI32(n), pI32(H), pI32(dk), pI32(dv), pI32(R), pI32(ks))
		} else {
			b.launchShared("k_mla_qlat", dim3{uint32(tiles), uint32(H), uint32(qz)}, d1(128), 4*mlaQT*dk,
				z.ptr, b.ptr(q), b.ptr(kvB), wdt, pI32(t0), pI32(n), pI32(H), pI32(dk), pI32(dv), pI32(R))
		}
		groups := (H + hgw - 1) / hgw
		ptiles := (width + mlaPS - 1) / mlaPS // latent tiles of the widest row
		splits, tps := 1, max(ptiles, 1)
		if n*groups < mlaSplitBlocks && ptiles > 1 {
			splits = min(ptiles, mlaSplitBlocks/(n*groups))
			tps = (ptiles + splits - 1) / splits
			splits = (ptiles + tps - 1) / tps
		}
		avec := pBool(latents.DType() == npu.BF16 && R%8 == 0 && b.ptr(latents)%16 == 0 && z.ptr%16 == 0)
		attn := func(grid dim3, pm, pl, pacc uint64) {
			if tc {
				b.launchShared("k_mla_attn_tc", grid, d1(256), mlaTCShared(R),
					z.ptr, b.ptr(latents), rows.ptr, counts.ptr, pI32(t0), pI32(H), pI32(R), pI32(max(width, 1)),
					pF32(scale), pI32(tps), pm, pl, pacc)
				return
			}
			b.launchShared("k_mla_attn", grid, d1(256), attnShared,
				z.ptr, b.ptr(latents), ldt, rows.ptr, counts.ptr, pI32(t0), pI32(H), pI32(R), pI32(max(width, 1)),
				pI32(hg), pF32(scale), pI32(tps), pm, pl, pacc, avec)
		}
		if splits == 1 {
			attn(d2(n, groups), 0, 0, 0)
		} else {
			part := b.temp(4 * splits * n * H * (R + 2))
			pm, pl := part.ptr, part.ptr+uint64(4*splits*n*H)
			pacc := pl + uint64(4*splits*n*H)
			attn(dim3{uint32(n), uint32(groups), uint32(splits)}, pm, pl, pacc)
			b.launch("k_mla_combine", d2(n, H), d1(256), 0, z.ptr, pm, pl, pacc, pI32(splits), pI32(n), pI32(H), pI32(R))
			b.freeBuf(part)
		}
		vec := kvB.DType() == npu.BF16 && R%8 == 0 && b.ptr(kvB)%16 == 0
		if vec && n == 1 {
			// k_mla_out's one-row form: mlaOut1Cols columns per warp,
			// 8 warps per block, blocks enough for every column.
			oz = (dv + 8*mlaOut1Cols - 1) / (8 * mlaOut1Cols)
		}
		if mlaOutTC && kvB.DType() == npu.BF16 && n >= mlaOutTCRows {
			// Prefill: one strided tensor-core GEMM per head,
			// out[t, h*dv:] = z[t, h, :] · W_UV[h]ᵀ.
			o := b.ptr(out) + uint64(4*t0*H*dv)
			b.launch("k_gemm_tc_strided", dim3{uint32((dv + moeTCBN - 1) / moeTCBN), uint32((n + moeBM - 1) / moeBM), uint32(H)}, d1(256), 0,
				o, pI64(H*dv), pI64(dv), z.ptr, pI64(H*R), pI64(R),
				b.ptr(kvB)+uint64(2*dk*R), pI64((dk+dv)*R), pI32(n), pI32(dv), pI32(R), pBool(vec && z.ptr%16 == 0))
			continue
		}
		b.launchShared("k_mla_out", dim3{uint32(tiles), uint32(H), uint32(oz)}, d1(256), 4*mlaQT*R,
			b.ptr(out), z.ptr, b.ptr(kvB), wdt, pI32(t0), pI32(n), pI32(H), pI32(dk), pI32(dv), pI32(R), pBool(vec))
	}
	b.freeBuf(z)
	b.freeBuf(counts)
	b.freeBuf(rows)
}

// mlaQlatTC selects the tensor-core absorbed query (k_gemm_tc_strided_t:
// three-part q, fp32 accumulation, within fp32 rounding of k_mla_qlat)
// for prefill waves; false keeps k_mla_qlat (tests compare them).
var mlaQlatTC = true

// useQlatTC says whether a wave of n rows forms q̃ on the tensor cores:
// BF16 kvB, at least mlaOutTCRows rows (k_mla_qlat reads each head's W_UK
// once per 8 rows: at prefill that is the bytes that bound it), and the
// kernel's vector loads (dk % 8 == 0, R % 8 == 0, q and kvB 16-byte
// aligned; q's rows, H*dk floats, then are too).
func useQlatTC(dt npu.DType, n, dk, R int, q, kvB uint64) bool {
	return mlaQlatTC && dt == npu.BF16 && n >= mlaOutTCRows && dk%8 == 0 && R%8 == 0 && q%16 == 0 && kvB%16 == 0
}

// qlatSlices is k_mla_qlat_bf16's number of dk slices for a decode wave
// (R/8 threads per slice, up to 512 threads, its shared memory within
// 48 KiB), or 0 when it does not apply: kvB not BF16, R not a multiple of
// 8, kvB (at address w) not 16-byte aligned, or R too wide.
func qlatSlices(dt npu.DType, w uint64, dk, R int) int {
	if dt != npu.BF16 || R%8 != 0 || w%16 != 0 || R/8 > 512 || dk < 1 {
		return 0
	}
	ks := min(dk, max(1, 512/(R/8)))
	for ks > 1 && 4*(mlaQT*dk+ks*R) > 48<<10 {
		ks--
	}
	if 4*(mlaQT*dk+ks*R) > 48<<10 {
		return 0
	}
	return ks
}
