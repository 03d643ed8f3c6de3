package cuda

import (
	"fmt"
	"math"
	"os"
	"strconv"

	"github.com/npuserve/npuserve/npu"
)

// MoE on the device (kernels/moe.cu; npu/cpu/moe.go is the reference).
// Nothing is read back to the host, so the op never waits for the GPU:
//
//  1. k_moe_route (one block) counts each expert's assignments, gives
//     every assignment a row of its expert's contiguous range, records
//     each row's token and writes the table of 64-row tiles (expert,
//     first row) that the grouped GEMMs walk.
//  2. The gate/up grouped GEMM reads each row's token of x directly (no
//     gathered copy), the clamped SwiGLU follows (k_swiglu), then the
//     down grouped GEMM.
//  3. k_moe_combine adds, per token, its experts' outputs times their
//     routing weights in ascending expert order, as the CPU does, then
//     adds the sum to out: no atomics, so results do not depend on timing.
//
// The grouped GEMMs accumulate in fp32 in a fixed order along k,
// widening 16-bit weights in registers, so a row's result depends only on
// its input and its expert. Two forms: a tiled kernel (64x64 tiles,
// 64x128 on the tensor cores) for prefill, and, when the experts average few rows (decode), one that
// reads each weight once per 8 rows at memory speed: k_gemv_tc for
// BF16 experts (tensor-core MMAs on the activations split in three bf16
// parts, fp32 accumulation), the warp-per-column k_moe_gemv_f (fp32
// FMA) for the other dtypes. Both agree with the CPU's fp32 arithmetic
// up to summation order.

// Limits of the MoE kernels (MOE_* in kernels/moe.cu).
const (
	moeBM    = 64   // rows per tile of the tiled grouped GEMMs
	moeMaxK  = 64   // experts per token (k_moe_combine's order array)
	moeMaxE  = 4096 // experts (k_moe_route's shared counters: 2*E ints)
	moeChunk = 1024 // tokens whose intermediates are held at once
	// moeSmallRows is the average number of rows per expert up to which
	// the warp-per-column kernels serve (their weights are read once per
	// 8 rows); above it the tiled ones, which read them once per 64-row
	// tile (on the H200 at 16 rows per expert the warp-per-column form
	// took 8.4 ms for 64 experts of 4096x2048, twice its 8-row time).
	moeSmallRows = 8
)

// Op codes of the MoE ops' device reports (an expert id out of range),
// registered in opNames by init.
const (
	opMoE  = 40
	opMoEQ = 41
)

func init() {
	opNames[opMoE] = "MoE"
	opNames[opMoEQ] = "MoEQ"
}

// moeRoute is the device routing of one chunk of tokens.
type moeRoute struct {
	buf      *buffer
	rows     uint64 // I32 [n]: GEMM row of each assignment (-1: bad id)
	tok      uint64 // I32 [n]: chunk token of each GEMM row
	off      uint64 // I32 [E+1]: expert e's rows are off[e] .. off[e+1]
	tiles    uint64 // I32 [maxTiles, 2]: (expert, first row)
	ntiles   uint64 // I32 [1]
	n, E     int
	maxTiles int
	small    bool // the experts average few rows: warp-per-column kernels
}

// route enqueues k_moe_route for n assignments (ids, k per token) of E
// experts.
func (b *Backend) route(op int, ids uint64, n, k, E int) *moeRoute {
	maxTiles := n/moeBM + E + 1
	words := 2*n + E + 1 + 2*maxTiles + 1
	buf := b.temp(4 * words)
	rt := &moeRoute{buf: buf, n: n, E: E, maxTiles: maxTiles, small: n <= moeSmallRows*E}
	rt.rows = buf.ptr
	rt.tok = rt.rows + uint64(4*n)
	rt.off = rt.tok + uint64(4*n)
	rt.tiles = rt.off + uint64(4*(E+1))
	rt.ntiles = rt.tiles + uint64(8*maxTiles)
	b.launchChecked("k_moe_route", d1(1), d1(1024), 8*E,
		rt.rows, rt.tok, rt.off, rt.tiles, rt.ntiles, ids, pI32(n), pI32(k), pI32(E), pI32(moeBM), b.errWord, pI32(op))
	return rt
}

// gemmF enqueues C = A · W^T with fp32 A rows (row r reads A row tok[r]
// when tok != 0) and float or MXFP8 weights W [E, N, K] (wdt a dtype
// code; MXFP8: E8M0 scales, one per group along K): grouped over rt, or
// dense over M rows (E = 1) when rt is nil.
func (b *Backend) gemmF(c, a, tok, w uint64, wdt int, scale uint64, group int, rt *moeRoute, M, N, K int) {
	var off, tiles, ntiles uint64
	small, ys, ysSmall := M <= moeSmallRows, (M+moeBM-1)/moeBM, (M+moeBM-1)/moeBM
	if rt != nil {
		off, tiles, ntiles = rt.off, rt.tiles, rt.ntiles
		small, ys, ysSmall = rt.small, rt.maxTiles, min(rt.maxTiles, rt.n) // every tile holds a row
	}
	if small && wdt == dtypeCode(npu.BF16) && group == 0 && gemvTC && K%8 == 0 && a%16 == 0 && w%16 == 0 {
		b.gemvTC(c, a, tok, w, rt, M, N, K, false)
		return
	}
	if small {
		align := uint64(16)
		if wdt == dtypeCode(npu.F8E4M3) {
			align = 8
		}
		vec := K%8 == 0 && a%16 == 0 && w%align == 0
		b.launch("k_moe_gemv_f", d2((N+7)/8, ysSmall), d1(256), 0,
			c, a, tok, w, pI32(wdt), scale, pI32(group), tiles, ntiles, off, pI32(M), pI32(N), pI32(K), pBool(vec))
		return
	}
	if wdt == dtypeCode(npu.BF16) && group == 0 && moeTensorCores {
		vec := K%8 == 0 && a%16 == 0 && w%16 == 0
		name := "k_moe_gemm_tc2"
		if moeTCParts == 3 {
			name = "k_moe_gemm_tc"
		}
		b.launch(name, d2((N+moeTCBN-1)/moeTCBN, ys), d1(256), 0,
			c, a, tok, w, tiles, ntiles, off, pI32(M), pI32(N), pI32(K), pBool(vec))
		return
	}
	b.launch("k_moe_gemm_f", d2((N+moeBN-1)/moeBN, ys), d1(256), 0,
		c, a, tok, w, pI32(wdt), scale, pI32(group), tiles, ntiles, off, pI32(M), pI32(N), pI32(K))
}

// gemvTC selects k_gemv_tc (tensor-core MMAs on three-part bf16
// activations, fp32 accumulation) for BF16 weights at few rows: the MoE
// decode GEMMs and the dense MatMul up to gemvMaxM rows (k_gemv_tc16
// above gemvPass). false keeps the
// fp32 CUDA-core kernels (k_moe_gemv_f, k_gemm_small and cuBLASLt): for
// tests and measurements.
var gemvTC = true

// EnvGemvEarly ("0" turns it off) is gemvEarly's switch.
const EnvGemvEarly = "NPUSERVE_CUDA_GEMV_EARLY"

// gemvEarly lets the dense k_gemv_tc of weights marked by MarkWeights
// issue its first group of weight loads before waiting on the previous
// kernel (programmatic dependent launch), so they overlap that kernel's
// tail. Only marked weights: a tensor an earlier op might still be
// writing must be read after the wait. Tests flip it.
var gemvEarly = os.Getenv(EnvGemvEarly) != "0"

// Shape of k_gemv_tc's work (GEMV_* in kernels/moe.cu): 16 output
// columns per block, its warps splitting K in 32-wide blocks, GEMV_U of
// them in flight per warp.
const (
	gemvPass = 8 // rows per pass of k_gemv_tc (GEMV_MT: the MMA's n8); k_gemv_tc16 twice that
	gemvCols = 16
	gemvU    = 4
	gemvMaxW = 16
	gemvSMs  = 132 // column tiles below which K is split 16 ways (the H200's SMs)
)

// gemvWarpsOverride, when not 0, replaces gemvWarps (4, 8 or 16) for
// measurements (TestGPUDecodeGEMV).
var gemvWarpsOverride int

// gemvWarps is k_gemv_tc's warps per block for N columns of K: 16 when
// there are fewer column tiles than SMs and K is long enough to give each
// warp a full GEMV_U group (more loads in flight where blocks are few),
// 4 for short K, else 8 (at its ~96 registers two such blocks fit an SM,
// one of 16 warps). It depends only on the shape, so a row's result does
// too.
func gemvWarps(N, K int) int {
	tiles, kb := (N+gemvCols-1)/gemvCols, (K+31)/32
	switch {
	case tiles < gemvSMs && kb >= gemvMaxW*gemvU:
		return gemvMaxW
	case kb <= 4*gemvU:
		return 4
	}
	return 8
}

// gemvTC enqueues k_gemv_tc: C = A · W^T for BF16 W [E, N, K], grouped
// over rt (one block row per tile of the routing; a tile's rows go in
// passes of gemvPass, the experts averaging few rows at decode) or dense
// over M rows when rt is nil (k_gemv_tc16, passes of 2*gemvPass, above
// gemvPass rows). The caller checks K % 8 == 0 and 16-byte alignment of
// A and W. early (dense only: MatMul of marked weights, see gemvEarly)
// lets the kernel load its first weights before its PDL wait.
func (b *Backend) gemvTC(c, a, tok, w uint64, rt *moeRoute, M, N, K int, early bool) {
	var off, tiles, ntiles uint64
	ys := (M + moeBM - 1) / moeBM
	name := "k_gemv_tc"
	warps, ks := gemvWarps(N, K), 1
	if gemvWarpsOverride > 0 {
		warps = gemvWarpsOverride
	}
	if rt != nil {
		// Every tile holds a row, so there are at most n of them.
		off, tiles, ntiles, ys = rt.off, rt.tiles, rt.ntiles, min(rt.maxTiles, rt.n)
	} else {
		if M > gemvPass {
			name = "k_gemv_tc16"
		}
		if s := gemvSplitK(N, K); s > 1 {
			warps, ks = gemvSplitWarps, s
		}
	}
	grid := dim3{uint32((N + gemvCols - 1) / gemvCols), uint32(ys), uint32(ks)}
	pe := pBool(rt == nil && early)
	if ks == 1 {
		b.launch(name, grid, d1(32*warps), 0, c, a, tok, w, tiles, ntiles, off, pI32(M), pI32(N), pI32(K), 0, 0, pe)
		return
	}
	part := b.temp(4 * ks * M * N)
	b.launch(name, grid, d1(32*warps), 0, c, a, tok, w, tiles, ntiles, off, pI32(M), pI32(N), pI32(K), part.ptr, b.gemvCnt, pe)
	b.freeBuf(part)
}

// Split K of the dense k_gemv_tc (gemvSplitK): projections of few output
// columns (a KDA gate's 64, an indexer's 128) otherwise run on as many
// SMs as they have 16-column tiles, each warp walking K alone.
const (
	gemvSplitTiles  = 32  // column tiles below which K is split (gemvCnt's counters)
	gemvSplitWarps  = 4   // warps per block of a split launch
	gemvSplitBlocks = 264 // blocks wanted in all: two per SM of the H200
)

// gemvSplitK is the number of K slices of a dense k_gemv_tc launch for N
// columns of K (1: none): enough blocks to cover the GPU, each warp of a
// slice taking at least one group of GEMV_U k blocks. It depends only on
// the shape, so a row's result does too (the slices' partial sums are
// added in slice order).
func gemvSplitK(N, K int) int {
	tiles, kb := (N+gemvCols-1)/gemvCols, (K+31)/32
	if tiles >= gemvSplitTiles {
		return 1
	}
	return max(1, min(gemvSplitBlocks/tiles, kb/(gemvSplitWarps*gemvU)))
}

// moeTensorCores selects the tensor-core form of the tiled grouped GEMM
// for BF16 experts (k_moe_gemm_tc: split-precision activations, fp32
// accumulation); the fp32 CUDA-core form serves the other dtypes.
const moeTensorCores = true

// EnvMoEParts is moeTCParts' variable ("3": k_moe_gemm_tc).
const EnvMoEParts = "NPUSERVE_CUDA_MOE_PARTS"

// moeTCParts is the number of bf16 parts the tiled tensor-core MoE GEMM
// splits its fp32 activations into: 2 (k_moe_gemm_tc2, hi and lo: 16
// bits, two thirds of the MMAs; the default) or 3 (k_moe_gemm_tc, all 24
// bits). Either is within the BF16 weights' rounding of fp32 arithmetic;
// the decode GEMVs keep three. 1 (EnvBF16Activations) rounds them to bf16
// where k_moe_gemm_pipe applies (k_moe_gemm_pipe1), two parts elsewhere.
var moeTCParts = moePartsFor(os.Getenv(EnvBF16Activations), envInt(EnvMoEParts, 2, 2, 3))

// EnvBF16Activations, set to 1, runs the prefill GEMMs on activations
// rounded to bf16, as a bf16 model in vLLM or transformers does: one pass
// instead of two (the dense cuBLASLt GEMMs, splitGemm) and one part
// instead of two (the MoE's k_moe_gemm_pipe1), about half their tensor
// work, at bf16's 2^-8 instead of about 2^-17 relative rounding of each
// activation. Off by default: the CPU backend's goldens hold the fp32
// activations' results. Info's device name says when it is on.
const EnvBF16Activations = "NPUSERVE_CUDA_BF16_ACTIVATIONS"

// bf16Act is EnvBF16Activations' setting.
var bf16Act = os.Getenv(EnvBF16Activations) == "1"

// moePartsFor is moeTCParts for EnvBF16Activations' value bf16 and
// EnvMoEParts' parts.
func moePartsFor(bf16 string, parts int) int {
	if bf16 == "1" {
		return 1
	}
	return parts
}

// envInt is the integer value of environment variable name in [lo, hi],
// def when it is unset or not such a number.
func envInt(name string, def, lo, hi int) int {
	v, err := strconv.Atoi(os.Getenv(name))
	if err != nil || v < lo || v > hi {
		return def
	}
	return v
}

// moeBN is the column tile of the tiled GEMMs (MOE_BN, QI8_BN).
const moeBN = 64

// moeTCBN is k_moe_gemm_tc's column tile (MOE_TBN).
const moeTCBN = 128

// moeArgs checks MoE's and MoEQ's routing operands as the CPU backend
// does and returns T, D and the experts per token (0: nothing to do).
func moeArgs(op string, out, x, weights, ids *npu.Tensor, E int) (T, D, k int) {
	T, D = x.Dim(0), x.Dim(1)
	if out.Numel() != T*D || x.DType() != npu.F32 || out.DType() != npu.F32 || weights.DType() != npu.F32 || ids.DType() != npu.I32 ||
		weights.Numel() != ids.Numel() || T > 0 && ids.Numel()%T != 0 {
		panic(fmt.Sprintf("cuda: %s out %v weights %v ids %v for x %v", op, out, weights, ids, x))
	}
	if T == 0 || ids.Numel() == 0 {
		return T, D, 0
	}
	k = ids.Numel() / T
	if k > moeMaxK || E > moeMaxE {
		panic(fmt.Sprintf("cuda: %s supports top-%d of up to %d experts, got top-%d of %d", op, moeMaxK, moeMaxE, k, E))
	}
	return T, D, k
}

// MoE adds the routed experts to out [T, D]: out[t] += sum_j weights[t,j]
// * down_e(SwiGLU(gateUp_e · x[t])), e = ids[t,j], with gateUp [E, 2I, D]
// (gate rows first) and down [E, D, I] in F32, BF16 or F16. A limit <= 0
// disables the SwiGLU clamp. An expert id outside [0, E) is reported by
// the next Sync (the op's output is then undefined). See npu.Ops.MoE.
func (b *Backend) MoE(out, x, gateUp, down, weights, ids *npu.Tensor, limit float32) {
	if x.Rank() != 2 || gateUp.Rank() != 3 || down.Rank() != 3 {
		panic(fmt.Sprintf("cuda: MoE x %v gateUp %v down %v", x, gateUp, down))
	}
	D := x.Dim(1)
	E, I := gateUp.Dim(0), gateUp.Dim(1)/2
	if gateUp.Dim(1) != 2*I || gateUp.Dim(2) != D || down.Dim(0) != E || down.Dim(1) != D || down.Dim(2) != I {
		panic(fmt.Sprintf("cuda: MoE gateUp %v down %v for x %v", gateUp, down, x))
	}
	wantFloat("MoE", gateUp)
	wantFloat("MoE", down)
	_, _, k := moeArgs("MoE", out, x, weights, ids, E)
	if k == 0 {
		return
	}
	pg, pd := b.ptr(gateUp), b.ptr(down)
	cg, cd := dtypeCode(gateUp.DType()), dtypeCode(down.DType())
	b.moeRun(opMoE, out, x, weights, ids, k, E, I, limit, moeProj{
		up: func(rt *moeRoute, xc uint64, tc int, gu uint64) {
			if !usePipe(rt, cg, 2*I, D, pg) {
				b.gemmF(gu, xc, rt.tok, pg, cg, 0, 0, rt, rt.n, 2*I, D)
				return
			}
			half := splitHalf(tc * D)
			s := b.temp(2 * half)
			if moeTCParts == 1 {
				b.convert(s.ptr, npu.BF16, xc, npu.F32, tc*D)
			} else {
				b.splitBF16(s.ptr, s.ptr+uint64(half), xc, tc*D)
			}
			b.gemmPipe(gu, s.ptr, s.ptr+uint64(half), rt.tok, pg, rt, 2*I, D)
			b.freeBuf(s)
		},
		splitDown: func(rt *moeRoute) bool { return usePipe(rt, cd, D, I, pd) },
		down: func(rt *moeRoute, h, y uint64, split bool) {
			if split {
				b.gemmPipe(y, h, h+uint64(splitHalf(rt.n*I)), 0, pd, rt, D, I)
				return
			}
			b.gemmF(y, h, 0, pd, cd, 0, 0, rt, rt.n, D, I)
		},
	})
}

// EnvMoEPipe ("0" turns it off) is moePipe's switch.
const EnvMoEPipe = "NPUSERVE_CUDA_MOE_PIPE"

// moePipe selects k_moe_gemm_pipe for MoE's tiled BF16 grouped GEMMs at
// two parts (the activations split once, by k_split_bf16 and
// k_swiglu_split, rather than in every block's loop); false keeps
// k_moe_gemm_tc2, whose results are the same bits. At one part
// (EnvBF16Activations) it is the only kernel that takes bf16 activations.
var moePipe = os.Getenv(EnvMoEPipe) != "0"

// Geometry of k_moe_gemm_pipe (MOE_PBN, MOE_PSMEM in kernels/moe.cu).
const (
	moePipeBN     = 256
	moePipeShared = 3 * (2*moeBM + moePipeBN) * 40 * 2
)

// usePipe says whether the grouped GEMM of routing rt into N columns of
// K-long rows, weights w of dtype code wdt, takes k_moe_gemm_pipe: tiled
// (not rt.small), BF16, two parts, and the kernel's 16-byte copies (K %
// 8 == 0, w aligned) and paired stores (N even).
func usePipe(rt *moeRoute, wdt, N, K int, w uint64) bool {
	return moePipe && moeTensorCores && moeTCParts <= 2 && !rt.small && wdt == dtypeCode(npu.BF16) &&
		K%8 == 0 && N%2 == 0 && w%16 == 0
}

// splitHalf is the byte offset of the lo half of n split bf16 values
// (hi first; lo 256-byte aligned).
func splitHalf(n int) int { return (2*n + 255) &^ 255 }

// gemmPipe enqueues k_moe_gemm_pipe: C [rt.n, N] = (hi + lo) · W_eᵀ over
// rt's tiles, GEMM row r reading split row tok[r] (r when tok == 0);
// k_moe_gemm_pipe1, hi · W_eᵀ, at moeTCParts 1.
func (b *Backend) gemmPipe(c, hi, lo, tok, w uint64, rt *moeRoute, N, K int) {
	name := "k_moe_gemm_pipe"
	if moeTCParts == 1 {
		name = "k_moe_gemm_pipe1" // lo unused
	}
	b.launchShared(name, d2((N+moePipeBN-1)/moePipeBN, rt.maxTiles), d1(256), moePipeShared,
		c, hi, lo, tok, w, rt.tiles, rt.ntiles, rt.off, pI32(rt.n), pI32(N), pI32(K))
}

// moeProj are the two expert projections of one chunk: up writes the
// gate|up rows gu [n, 2I] from the chunk's tokens xc [tc, D] (row r of
// the GEMM is token rt.tok[r]); down writes y [n, D] from the SwiGLU rows
// h [n, I] (h may be overwritten), fp32, or split into bf16 hi at h and
// lo at h + splitHalf(n*I) when splitDown (nil: never) says so.
type moeProj struct {
	up        func(rt *moeRoute, xc uint64, tc int, gu uint64)
	splitDown func(rt *moeRoute) bool
	down      func(rt *moeRoute, h, y uint64, split bool)
}

// moeRun is the chunked dispatch MoE and MoEQ share (see the top of the
// file).
func (b *Backend) moeRun(op int, out, x, weights, ids *npu.Tensor, k, E, I int, limit float32, p moeProj) {
	T, D := x.Dim(0), x.Dim(1)
	rows := min(T, moeChunk) * k
	gu := b.temp(4 * rows * 2 * I)
	h := b.temp(4*rows*I + 512) // fp32, or the split halves with lo aligned
	y := b.temp(4 * rows * D)
	po, px, pw, pi := b.ptr(out), b.ptr(x), b.ptr(weights), b.ptr(ids)
	clamp := limit > 0 && !math.IsInf(float64(limit), 1)
	for c0 := 0; c0 < T; c0 += moeChunk {
		tc := min(moeChunk, T-c0)
		n := tc * k
		rt := b.route(op, pi+uint64(4*c0*k), n, k, E)
		p.up(rt, px+uint64(4*c0*D), tc, gu.ptr)
		split := p.splitDown != nil && p.splitDown(rt)
		if split {
			lo := h.ptr + uint64(splitHalf(n*I))
			if moeTCParts == 1 {
				lo = 0 // k_moe_gemm_pipe1 reads hi alone
			}
			b.launch("k_swiglu_split", b.gridFor(int64(n*I), elemThreads), d1(elemThreads), 0,
				h.ptr, lo, gu.ptr, pI64(n), pI32(I), pF32(limit), pBool(clamp))
		} else {
			b.launch("k_swiglu", b.gridFor(int64(n*I), elemThreads), d1(elemThreads), 0,
				h.ptr, gu.ptr, pI64(n), pI32(I), pF32(limit), pBool(clamp))
		}
		p.down(rt, h.ptr, y.ptr, split)
		b.launch("k_moe_combine", d2(tc, (D+255)/256), d1(256), 0,
			po+uint64(4*c0*D), y.ptr, pw+uint64(4*c0*k), pi+uint64(4*c0*k), rt.rows, pI32(k), pI32(D))
		b.freeBuf(rt.buf)
	}
	b.freeBuf(gu)
	b.freeBuf(h)
	b.freeBuf(y)
}
