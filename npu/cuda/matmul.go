package cuda

import (
	"fmt"

	"github.com/npuserve/npuserve/npu"
)

// MatMul numerics. The CPU backend widens 16-bit weights to fp32 and
// multiplies in fp32; the paths here keep to that within fp32 rounding
// (about 1e-6 of sum |x||w|) except where noted:
//
//   - F32 weights: cuBLASLt fp32 GEMM with CUBLAS_COMPUTE_32F (plain fp32
//     FMA, TF32 off).
//   - BF16 weights, M <= gemvMaxM (decode; one row only below gemvWideN
//     columns), K % 8 == 0 and x and w 16-byte aligned: k_gemv_tc (k_gemv_tc16 above 8 rows;
//     kernels/moe.cu) splits x into three
//     bf16 parts (24 bits: all of fp32's mantissa) and multiplies them
//     with the weights on the tensor cores, fp32 accumulation, reading
//     each weight once; fp32 rounding, in another summation order.
//   - BF16 (otherwise) or F16 weights, M <= gemmSmallM: k_gemm_small
//     widens the weights in registers and accumulates in fp32, reading
//     them once at memory speed.
//   - BF16 weights, larger M (prefill): the activations are split into two
//     bf16 terms, x = hi + lo with |x - hi - lo| <= 2^-18 |x|, and two bf16
//     tensor-core GEMMs with fp32 accumulation add w·hi + w·lo. The error
//     is about 4e-6 of sum |x||w| (against 2^-9 for rounding x to bf16
//     once), at twice the cost of one bf16 GEMM; SplitBF16 = false widens
//     the weights to an fp32 scratch and runs the fp32 GEMM instead.
//   - F16 weights, larger M: widened to an fp32 scratch, fp32 GEMM.
//
// So a row's result may differ in the last bits between a batch of
// gemvMaxM (gemmSmallM) rows and a larger one, and, at gemvWideN columns
// or more, between one row and several; within k_gemv_tc and k_gemv_tc16
// it depends only on N and K, not on M.

// gemmSmallM is the largest M that k_gemm_small serves.
const gemmSmallM = 4

// gemvMaxM is the largest M that k_gemv_tc (up to gemvPass rows) and
// k_gemv_tc16 (up to twice that) serve for BF16 weights. Up to it the
// weights are read once at memory speed; above it the split bf16 GEMM
// reads them twice, through cuBLASLt.
const gemvMaxM = 2 * gemvPass

// SplitBF16 selects the split-activation bf16 tensor-core GEMM for BF16
// weights above k_gemv_tc's and k_gemm_small's M (see the numerics
// above); false uses widened weights and the fp32 GEMM. For tests and
// measurements; set before use.
var SplitBF16 = true

// planKey identifies a cuBLASLt plan.
type planKey struct {
	m, n, k, abType, align int
	dType                  int  // D's cudaDataType when not fp32 (0: fp32)
	scaled                 bool // FP8 block scaling (fp8.go)
}

// maxPlans bounds the plan cache (M varies per step); when full it is
// emptied.
const maxPlans = 256

// MatMul computes out[M,N] = x[M,K] · w[N,K]^T (PyTorch Linear layout).
// x and out are F32; w is F32, BF16 or F16. Leading dimensions are
// flattened: K is w's last dimension, N = w.Numel()/K, M = x.Numel()/K.
func (b *Backend) MatMul(out, x, w *npu.Tensor) {
	M, N, K, err := npu.MatMulDims(out, x, w)
	if err != nil {
		panic("cuda: " + err.Error())
	}
	wantF32("MatMul", out, x)
	if M == 0 || N == 0 {
		return
	}
	if K == 0 {
		b.Fill(out, 0)
		return
	}
	po, px, pw := b.ptr(out), b.ptr(x), b.ptr(w)
	switch {
	case w.DType() == npu.F32:
		b.gemmOrFail(cudaR32F, M, N, K, pw, px, po)
	case useGemvTC(w.DType(), M, N, K, px, pw):
		b.gemvTC(po, px, 0, pw, nil, M, N, K, gemvEarly && b.dbuf(w).weight)
	case M <= gemmSmallM:
		b.gemmSmall(po, px, pw, w.DType(), M, N, K)
	case w.DType() == npu.BF16 && SplitBF16 && b.splitGemm(M, N, K, pw, px, po):
	default:
		n := N * K
		s := b.temp(4 * n)
		b.convert(s.ptr, npu.F32, pw, w.DType(), n)
		b.gemmOrFail(cudaR32F, M, N, K, s.ptr, px, po)
		b.freeBuf(s)
	}
}

// gemvWideN is the output width from which a one-row BF16 MatMul takes
// k_gemm_small instead of k_gemv_tc: with that many columns its warp per
// column, each streaming a whole weight row, reads faster than
// k_gemv_tc's 64-byte pieces of 16 rows, and one row leaves seven eighths
// of each MMA idle (TestGPUDecodeGEMV on the H200, GB/s of weights:
// 24576x4096 3,187 against 2,690, 16384x1536 2,261 against 2,055, the
// 154880-row lm_head 3,654 against 2,957; at 4096 columns k_gemv_tc
// leads, 2,209 against 1,704).
const gemvWideN = 16384

// useGemvTC says whether MatMul of M rows of K into N columns with weights
// of dtype dt (x and w at these device addresses) takes k_gemv_tc: BF16,
// M <= gemvMaxM, K % 8 == 0 and 16-byte aligned operands (its vector
// loads), and not one row of gemvWideN columns or more.
func useGemvTC(dt npu.DType, M, N, K int, x, w uint64) bool {
	return gemvTC && dt == npu.BF16 && M <= gemvMaxM && K%8 == 0 && x%16 == 0 && w%16 == 0 && (M > 1 || N < gemvWideN)
}

// splitGemm is the split-activation bf16 GEMM; false (nothing enqueued)
// when cuBLASLt has no bf16 algorithm for this shape and alignment.
// With EnvBF16Activations on it is one pass on x rounded to bf16.
func (b *Backend) splitGemm(M, N, K int, w, x, out uint64) bool {
	n := M * K
	half := splitHalf(n)
	p1, err := b.ltPlan(cudaR16BF, M, N, K, w, 0, out)
	if err != nil {
		return false
	}
	var p2 uintptr // the lo pass, none on bf16 activations
	if !bf16Act {
		if p2, err = b.ltPlan(cudaR16BF, M, N, K, w, uint64(half), out); err != nil {
			return false
		}
	}
	s := b.temp(2 * half)
	hi, lo := s.ptr, s.ptr+uint64(half)
	if bf16Act {
		b.convert(hi, npu.BF16, x, npu.F32, n)
	} else {
		b.splitBF16(hi, lo, x, n)
	}
	b.ltRun(p1, M, N, K, w, hi, out, 0)
	if !bf16Act {
		b.ltRun(p2, M, N, K, w, lo, out, 1)
	}
	b.freeBuf(s)
	return true
}

// gemmSmall launches k_gemm_small: 8 warps (8 columns of out) per block.
func (b *Backend) gemmSmall(out, x, w uint64, dt npu.DType, M, N, K int) {
	const warps = 8
	vec := K%8 == 0 && x%16 == 0 && w%16 == 0 && dt != npu.F32
	b.launch("k_gemm_small", d2((N+warps-1)/warps, (M+gemmSmallM-1)/gemmSmallM), d1(32*warps), 0,
		out, x, w, pI32(dtypeCode(dt)), pI32(M), pI32(N), pI32(K), pBool(vec))
}

// alignment is the largest power of two, at most 256, dividing every
// address.
func alignment(ptrs ...uint64) int {
	a := uint64(256)
	for _, p := range ptrs {
		for a > 1 && p%a != 0 {
			a >>= 1
		}
	}
	return int(a)
}

// ltPlan returns the cuBLASLt plan of out[M,N] = x[M,K] · w[N,K]^T with
// w and x of cudaDataType abType and out fp32, for operands at these
// addresses (x's only matters modulo 256): in cuBLASLt's column-major
// terms D[N,M] = op(A)[N,K] · B[K,M] with A = w transposed.
func (b *Backend) ltPlan(abType, M, N, K int, w, x, out uint64) (uintptr, error) {
	key := planKey{m: M, n: N, k: K, abType: abType, align: alignment(w, x, out)}
	plan, err := b.cachedPlan(key, func() (uintptr, error) {
		return ltPlanCreate(b.ctx, b.lt, true, false, N, M, K, abType, cudaR32F, K, K, N, key.align, b.ltWSBytes, scaleNone, scaleNone, 0, 0)
	})
	if err != nil {
		return 0, fmt.Errorf("cuda: MatMul [%d,%d]x[%d,%d]^T: %w", M, K, N, K, err)
	}
	return plan, nil
}

// cachedPlan returns key's plan from the cache, or cuBLASLt's cached
// answer that it has none, else makes it with create and caches either
// (noPlan stops growing at maxPlans). A full plan cache is emptied first,
// except during a capture, which cannot wait for the stream.
func (b *Backend) cachedPlan(key planKey, create func() (uintptr, error)) (uintptr, error) {
	if plan, ok := b.plans[key]; ok {
		return plan, nil
	}
	if err, ok := b.noPlan[key]; ok {
		return 0, err
	}
	if len(b.plans) >= maxPlans && !b.capturing {
		b.dropPlans()
	}
	plan, err := create()
	if err != nil {
		if len(b.noPlan) < maxPlans {
			b.noPlan[key] = err
		}
		return 0, err
	}
	b.plans[key] = plan
	return plan, nil
}

// dropPlans empties the plan cache once the stream is idle (its GEMMs may
// still be queued with the plans' descriptors).
func (b *Backend) dropPlans() {
	if err := drvStreamSync(b.ctx, b.stream); err != nil {
		b.fail(fmt.Errorf("cuda: the stream failed: %w", err))
	}
	for k, p := range b.plans {
		ltPlanDestroy(p)
		delete(b.plans, k)
	}
}

// ltRun enqueues a plan's GEMM (+ beta * out).
func (b *Backend) ltRun(plan uintptr, M, N, K int, w, x, out uint64, beta float32) {
	if b.prof != nil {
		defer b.span("cublasLtMatmul")()
	}
	if err := ltPlanRun(b.ctx, b.lt, plan, 1, beta, w, x, out, 0, 0, b.ltWS, b.ltWSBytes, b.stream); err != nil {
		b.fail(fmt.Errorf("cuda: MatMul [%d,%d]x[%d,%d]^T: %w", M, K, N, K, err))
	}
}

// gemmOrFail enqueues an fp32-output GEMM, recording a failure to plan it.
func (b *Backend) gemmOrFail(abType, M, N, K int, w, x, out uint64) {
	plan, err := b.ltPlan(abType, M, N, K, w, x, out)
	if err != nil {
		b.fail(err)
		return
	}
	b.ltRun(plan, M, N, K, w, x, out, 0)
}
