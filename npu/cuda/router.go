package cuda

import (
	"fmt"

	"github.com/npuserve/npuserve/npu"
)

// KDAGate turns the forget-gate projection f [T, H*K] into the log-decay
// g [T, H*K] with dtBias [H*K] and aLog [H] (see npu.KDAGateParams).
func (b *Backend) KDAGate(g, f, dtBias, aLog *npu.Tensor, p npu.KDAGateParams) {
	K := p.HeadDim
	H := aLog.Numel()
	if K <= 0 || H <= 0 {
		panic(fmt.Sprintf("cuda: KDAGate head dim %d, %d heads", K, H))
	}
	HK := H * K
	if f.Numel()%HK != 0 || g.Numel() != f.Numel() || f.RowSize() != HK {
		panic(fmt.Sprintf("cuda: KDAGate f %v, g %v for %d heads of %d", f, g, H, K))
	}
	if dtBias.Numel() != HK {
		panic(fmt.Sprintf("cuda: KDAGate dtBias has %d elements, want %d (%v)", dtBias.Numel(), HK, dtBias))
	}
	wantF32("KDAGate", g, f)
	wantFloat("KDAGate", dtBias)
	wantFloat("KDAGate", aLog)
	n := f.Numel()
	if n == 0 {
		return
	}
	b.launch("k_kda_gate", b.gridFor(int64(n), elemThreads), d1(elemThreads), 0,
		b.ptr(g), b.ptr(f), b.ptr(dtBias), pI32(dtypeCode(dtBias.DType())), b.ptr(aLog), pI32(dtypeCode(aLog.DType())),
		pI64(n), pI32(HK), pI32(K), pBool(p.HasLowerBound), pF32(p.LowerBound))
}

// Router limits (ROUTER_MAX_* in kernels/router.cu).
const (
	routerMaxGroups = 64
	routerMaxK      = 64
)

// routerFused selects k_router_fused (k_router_scores and k_router in one
// launch) for up to routerFusedMaxT tokens, a decode step's; false keeps
// the two launches (tests compare them).
var routerFused = true

// routerFusedMaxT is the most tokens k_router_fused serves (its counters
// in gemvCnt); more tokens take the two launches.
const routerFusedMaxT = 16

// Router computes MoE routing for x [T, D] with gate [E, D] and bias [E]
// (see npu.Ops.Router): one block per token, dot products in fp64.
func (b *Backend) Router(weights, ids, x, gate, bias *npu.Tensor, p npu.RouterParams) {
	if x.Rank() != 2 || gate.Rank() != 2 || gate.Dim(1) != x.Dim(1) {
		panic(fmt.Sprintf("cuda: Router x %v gate %v", x, gate))
	}
	T, D, E, k := x.Dim(0), x.Dim(1), gate.Dim(0), p.TopK
	ng := max(p.NGroup, 1)
	if k < 1 || k > E || bias.Numel() != E || E%ng != 0 || (ng > 1 && (p.TopKGroup < 1 || p.TopKGroup > ng)) {
		panic(fmt.Sprintf("cuda: Router %d experts, bias %v, params %+v", E, bias, p))
	}
	if weights.DType() != npu.F32 || ids.DType() != npu.I32 || weights.Numel() != T*k || ids.Numel() != T*k {
		panic(fmt.Sprintf("cuda: Router outputs weights %v ids %v for %d tokens top-%d", weights, ids, T, k))
	}
	if k > routerMaxK || ng > routerMaxGroups {
		panic(fmt.Sprintf("cuda: Router supports top-%d of up to %d groups, got top-%d of %d", routerMaxK, routerMaxGroups, k, ng))
	}
	wantF32("Router", x)
	wantFloat("Router", gate)
	wantFloat("Router", bias)
	if T == 0 {
		return
	}
	shmem := 8 * E
	if shmem > 48<<10 {
		panic(fmt.Sprintf("cuda: Router supports up to %d experts, got %d", (48<<10)/8, E))
	}
	scores := b.temp(4 * T * E)
	if routerFused && T <= routerFusedMaxT {
		// One launch: each token's last score block selects its experts.
		b.launch("k_router_fused", d2(T, E), d1(256), shmem,
			b.ptr(weights), b.ptr(ids), scores.ptr, b.ptr(x), b.ptr(gate), pI32(dtypeCode(gate.DType())), pI32(D),
			b.ptr(bias), pI32(dtypeCode(bias.DType())), pI32(k), pI32(ng), pI32(p.TopKGroup), pBool(p.Normalize), pF32(p.Scale),
			b.gemvCnt+4*routerCntOff)
		b.freeBuf(scores)
		return
	}
	b.launch("k_router_scores", d2(T, E), d1(256), 0, scores.ptr, b.ptr(x), b.ptr(gate), pI32(dtypeCode(gate.DType())), pI32(D))
	b.launch("k_router", d1(T), d1(256), shmem,
		b.ptr(weights), b.ptr(ids), scores.ptr, b.ptr(bias), pI32(dtypeCode(bias.DType())),
		pI32(E), pI32(k), pI32(ng), pI32(p.TopKGroup), pBool(p.Normalize), pF32(p.Scale))
	b.freeBuf(scores)
}
