package cuda

import (
	"fmt"
	"math"
	"os"

	"github.com/npuserve/npuserve/npu"
)

// KDA limits (kernels/kda.cu): K is split into slices of kdaRows state
// rows, one slice per thread row of a block, at most 32 slices.
const (
	kdaRows   = 32
	kdaMaxK   = 32 * kdaRows
	kdaStage  = 8        // tokens whose q̂, k̂, e one staging step holds (KDA_STAGE)
	kdaShared = 36 << 10 // the staging memory's bound (48 KiB, the default limit, less the static part)
)

// KDA runs Kimi Delta Attention over each sequence's rows (see npu.Ops.KDA),
// continuing from and updating the fp32 state [slots, H, K, V] (V = K) at
// each sequence's StateSlot.
//
// Both settings of chunk run the token recurrence (kernels/kda.cu): one
// block per (sequence, head, 32 state columns) keeps its part of the state
// in registers and steps through the sequence's rows. The chunked form is
// an exact rewrite of the same recurrence, so the results agree with the
// CPU backend's chunked ones to fp32 rounding (its tests hold both to 5e-6
// of a float64 reference). The cost of not chunking is prefill latency:
// the rows of a sequence are processed one after another (two block
// barriers each) and the O(T·K·V) work runs on the CUDA cores instead of
// the tensor cores a chunked kernel would use; decode (one row per
// sequence) loses nothing.
//
// Argument shapes are checked here as on the CPU backend; a layout whose
// QueryStart does not split the rows, a state slot outside state, or two
// sequences sharing a slot are found on the device (a DeviceError at the
// next Sync; the outputs are then undefined).
func (b *Backend) KDA(out, qkv, g, beta, state *npu.Tensor, seqs *npu.SeqLayout, heads, headDim, chunk int) {
	H, K := heads, headDim
	V := K
	checkLayout("KDA", seqs)
	T := seqs.NumRows
	if err := npu.KDADims(out, qkv, g, beta, state, T, heads, headDim, chunk); err != nil {
		panic("cuda: " + err.Error())
	}
	wantF32("KDA", out, qkv, g, beta, state)
	if K > kdaMaxK {
		panic(fmt.Sprintf("cuda: KDA supports head dims up to %d, got %d", kdaMaxK, K))
	}
	B := seqs.NumSeqs
	if B == 0 || T == 0 {
		return
	}
	tok := max(1, min(kdaStage, kdaShared/(3*4*K)))
	name, block, shmem := "k_kda", dim3{32, uint32((K + kdaRows - 1) / kdaRows), 1}, 3*4*K*tok
	if useKDAWarp(kdaKernel, K, T, B) {
		name, block, shmem = "k_kda_w", d1(256), 0
	}
	scale := float32(1 / math.Sqrt(float64(K)))
	b.launchChecked(name, d2(B*H, (V+31)/32), block, shmem,
		b.ptr(out), b.ptr(qkv), b.ptr(g), b.ptr(beta), b.ptr(state),
		b.ptr(seqs.QueryStart), b.ptr(seqs.StateSlot), pI32(B), pI32(T), pI32(H), pI32(K), pI32(V),
		pI32(state.Dim(0)), pF32(scale), pI32(tok), b.errWord, pI32(opKDA))
}

// kdaWarpMaxK is the largest head dim k_kda_w serves (8 lanes of
// KDA_W_R rows).
const kdaWarpMaxK = 128

// EnvKDAKernel picks the KDA kernel (kdaKernel): "rows" k_kda always,
// "warp" k_kda_w wherever the head dim allows; unset or anything else,
// k_kda_w for batches with a sequence of several rows (prefill) and
// k_kda for decode steps.
const EnvKDAKernel = "NPUSERVE_CUDA_KDA"

// kdaKernel is EnvKDAKernel's value at start-up.
var kdaKernel = os.Getenv(EnvKDAKernel)

// useKDAWarp says whether KDA of T rows in B sequences with head dim K
// takes k_kda_w under mode (kdaKernel). Its token step is a warp's
// dependent chain rather than two block barriers, which is what a long
// sequence waits on; a decode step has one token per sequence, where
// k_kda's graph-captured timings stand.
func useKDAWarp(mode string, K, T, B int) bool {
	if K > kdaWarpMaxK || mode == "rows" {
		return false
	}
	return mode == "warp" || T > B
}
