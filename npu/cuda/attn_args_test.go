package cuda

import (
	"strings"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

// TestAttnArgumentChecks checks, without a GPU, that KDA, KPool, DSAIndex
// and SparseMLA reject bad shapes, dtypes and limits on the host (with the
// CPU backend's kind of message) before they touch the device.
func TestAttnArgumentChecks(t *testing.T) {
	b := &Backend{}
	f32, bf, i32 := npu.F32, npu.BF16, npu.I32
	// A layout of one sequence with 2 rows, block size 8, 2 blocks.
	lay := func(bs int, table bool) *npu.SeqLayout {
		s := &npu.SeqLayout{NumSeqs: 1, NumRows: 2, MaxBlocks: 2, BlockSize: bs, QueryStart: ft(i32, 2), Pos: ft(i32, 1), StateSlot: ft(i32, 1)}
		if table {
			s.BlockTable = ft(i32, 1, 2)
		}
		return s
	}
	const H, K = 2, 4
	kda := func(out, qkv, g, beta, state *npu.Tensor, s *npu.SeqLayout, h, k, chunk int) func() {
		return func() { b.KDA(out, qkv, g, beta, state, s, h, k, chunk) }
	}
	good := func() (out, qkv, g, beta, state *npu.Tensor) {
		return ft(f32, 2, H*K), ft(f32, 2, 3*H*K), ft(f32, 2, H*K), ft(f32, 2, H), ft(f32, 3, H, K, K)
	}
	o, qkv, g, beta, st := good()
	ip := npu.IndexParams{TopKPools: 2, KPool: 4, Tail: true, Scale: 0.5}
	dsaOut := ft(i32, 2, 2*4+3)
	cases := []struct {
		name, want string
		call       func()
	}{
		{"KDA heads", "cuda: KDA heads 0", kda(o, qkv, g, beta, st, lay(8, false), 0, K, 0)},
		{"KDA chunk", "chunk -1", kda(o, qkv, g, beta, st, lay(8, false), H, K, -1)},
		{"KDA layout", "KDA needs a SeqLayout", kda(o, qkv, g, beta, st, nil, H, K, 0)},
		{"KDA qkv", "cuda: KDA qkv", kda(o, ft(f32, 2, 3*H*K+1), g, beta, st, lay(8, false), H, K, 0)},
		{"KDA g", "cuda: KDA g", kda(o, qkv, ft(f32, 3, H*K), beta, st, lay(8, false), H, K, 0)},
		{"KDA beta", "cuda: KDA beta", kda(o, qkv, g, ft(f32, 2, H+1), st, lay(8, false), H, K, 0)},
		{"KDA out", "cuda: KDA out", kda(ft(f32, 1, H*K), qkv, g, beta, st, lay(8, false), H, K, 0)},
		{"KDA state", "cuda: KDA state", kda(o, qkv, g, beta, ft(f32, 3, H, K, K+1), lay(8, false), H, K, 0)},
		{"KDA dtype", "KDA: want F32", kda(o, qkv, ft(bf, 2, H*K), beta, st, lay(8, false), H, K, 0)},
		{"KDA head dim", "head dims up to 1024", func() {
			const k = 1025
			b.KDA(ft(f32, 2, k), ft(f32, 2, 3*k), ft(f32, 2, k), ft(f32, 2, 1), ft(f32, 1, 1, k, k), lay(8, false), 1, k, 0)
		}},
		{"KPool ape rank", "cuda: KPool ape", func() { b.KPool(ft(f32, 2, 8), ft(f32, 8, 8), ft(f32, 8, 8), ft(f32, 32)) }},
		{"KPool keys", "cuda: KPool keys", func() { b.KPool(ft(f32, 2, 8), ft(f32, 8, 7), ft(f32, 8, 7), ft(f32, 4, 8)) }},
		{"KPool out", "cuda: KPool out", func() { b.KPool(ft(f32, 3, 8), ft(f32, 8, 8), ft(f32, 8, 8), ft(f32, 4, 8)) }},
		{"KPool dtype", "KPool: want F32", func() { b.KPool(ft(f32, 2, 8), ft(f32, 8, 8), ft(bf, 8, 8), ft(f32, 4, 8)) }},
		{"KPool ape dtype", "want an F32, BF16 or F16", func() { b.KPool(ft(f32, 2, 8), ft(f32, 8, 8), ft(f32, 8, 8), ft(i32, 4, 8)) }},
		{"DSAIndex pool", "DSAIndex KPool 0", func() {
			b.DSAIndex(dsaOut, ft(f32, 2, 3*16), ft(f32, 2, 3), ft(f32, 20, 16), lay(8, true), npu.IndexParams{TopKPools: 2})
		}},
		{"DSAIndex pooled dtype", "want an F32, BF16 or F16", func() {
			b.DSAIndex(dsaOut, ft(f32, 2, 3*16), ft(f32, 2, 3), ft(i32, 20, 16), lay(8, true), ip)
		}},
		{"DSAIndex pooled rank", "cuda: DSAIndex pooled", func() {
			b.DSAIndex(dsaOut, ft(f32, 2, 3*16), ft(f32, 2, 3), ft(f32, 20, 4, 4), lay(8, true), ip)
		}},
		{"DSAIndex q", "cuda: DSAIndex q", func() {
			b.DSAIndex(dsaOut, ft(f32, 2, 3*16+1), ft(f32, 2, 3), ft(f32, 20, 16), lay(8, true), ip)
		}},
		{"DSAIndex w", "cuda: DSAIndex w", func() {
			b.DSAIndex(dsaOut, ft(f32, 2, 3*16), ft(f32, 3, 3), ft(f32, 20, 16), lay(8, true), ip)
		}},
		{"DSAIndex width", "cuda: DSAIndex out", func() {
			b.DSAIndex(ft(i32, 2, 8), ft(f32, 2, 3*16), ft(f32, 2, 3), ft(f32, 20, 16), lay(8, true), ip)
		}},
		{"DSAIndex out dtype", "want I32", func() {
			b.DSAIndex(ft(f32, 2, 11), ft(f32, 2, 3*16), ft(f32, 2, 3), ft(f32, 20, 16), lay(8, true), ip)
		}},
		{"DSAIndex block table", "needs an I32 block table", func() {
			b.DSAIndex(dsaOut, ft(f32, 2, 3*16), ft(f32, 2, 3), ft(f32, 20, 16), lay(8, false), ip)
		}},
		{"DSAIndex block size", "not a multiple of the pool", func() {
			b.DSAIndex(dsaOut, ft(f32, 2, 3*16), ft(f32, 2, 3), ft(f32, 20, 16), lay(6, true), ip)
		}},
		{"DSAIndex top-k", "up to 8192 pools", func() {
			b.DSAIndex(ft(i32, 2, 8193), ft(f32, 2, 3*16), ft(f32, 2, 3), ft(f32, 20, 16), lay(8, true), npu.IndexParams{TopKPools: 8193, KPool: 1})
		}},
		{"SparseMLA heads", "cuda: SparseMLA 0 heads", func() {
			b.SparseMLA(ft(f32, 2, 8), ft(f32, 2, 8), ft(bf, 16, 12), ft(bf, 16, 12), ft(i32, 2, 5), lay(8, true), 0, 4, 4, 0.5)
		}},
		{"SparseMLA latents", "SparseMLA 2 heads", func() {
			b.SparseMLA(ft(f32, 2, 8), ft(f32, 2, 8), ft(bf, 16, 3, 4), ft(bf, 16, 12), ft(i32, 2, 5), lay(8, true), 2, 4, 4, 0.5)
		}},
		{"SparseMLA latent dtype", "want an F32, BF16 or F16", func() {
			b.SparseMLA(ft(f32, 2, 8), ft(f32, 2, 8), ft(i32, 16, 12), ft(bf, 16, 12), ft(i32, 2, 5), lay(8, true), 2, 4, 4, 0.5)
		}},
		{"SparseMLA kvB", "cuda: SparseMLA kvB", func() {
			b.SparseMLA(ft(f32, 2, 8), ft(f32, 2, 8), ft(bf, 16, 12), ft(bf, 15, 12), ft(i32, 2, 5), lay(8, true), 2, 4, 4, 0.5)
		}},
		{"SparseMLA q", "cuda: SparseMLA q", func() {
			b.SparseMLA(ft(f32, 2, 8), ft(f32, 2, 9), ft(bf, 16, 12), ft(bf, 16, 12), ft(i32, 2, 5), lay(8, true), 2, 4, 4, 0.5)
		}},
		{"SparseMLA out", "cuda: SparseMLA out", func() {
			b.SparseMLA(ft(f32, 3, 8), ft(f32, 2, 8), ft(bf, 16, 12), ft(bf, 16, 12), ft(i32, 2, 5), lay(8, true), 2, 4, 4, 0.5)
		}},
		{"SparseMLA sel", "cuda: SparseMLA sel", func() {
			b.SparseMLA(ft(f32, 2, 8), ft(f32, 2, 8), ft(bf, 16, 12), ft(bf, 16, 12), ft(i32, 3, 5), lay(8, true), 2, 4, 4, 0.5)
		}},
		{"SparseMLA sel dtype", "want I32", func() {
			b.SparseMLA(ft(f32, 2, 8), ft(f32, 2, 8), ft(bf, 16, 12), ft(bf, 16, 12), ft(f32, 2, 5), lay(8, true), 2, 4, 4, 0.5)
		}},
		{"SparseMLA rank", "latent ranks up to 1024", func() {
			b.SparseMLA(ft(f32, 2, 1), ft(f32, 2, 1), ft(bf, 16, 1025), ft(bf, 2, 1025), ft(i32, 2, 5), lay(8, true), 1, 1, 1, 0.5)
		}},
		{"SparseMLA block table", "needs an I32 block table", func() {
			b.SparseMLA(ft(f32, 2, 8), ft(f32, 2, 8), ft(bf, 16, 12), ft(bf, 16, 12), ft(i32, 2, 5), lay(8, false), 2, 4, 4, 0.5)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { wantPanic(t, c.want, c.call) })
	}
}

// TestAttnDeviceErrorMessages checks the messages of the device errors the
// attention ops report.
func TestAttnDeviceErrorMessages(t *testing.T) {
	for _, c := range []struct {
		code, op, value int32
		want            []string
	}{
		{devErrRows, opKDA, 3, []string{"KDA", "QueryStart", "sequence 3"}},
		{devErrSharedSlot, opKDA, 7, []string{"KDA", "share state slot 7"}},
		{devErrSlot, opKDA, -2, []string{"KDA", "state slot -2"}},
		{devErrPosition, opDSAIndex, 4099, []string{"DSAIndex", "position 4099"}},
		{devErrPosition, opSparseMLA, 12, []string{"SparseMLA", "position 12"}},
	} {
		msg := deviceError(c.code, c.op, c.value).Error()
		for _, w := range c.want {
			if !strings.Contains(msg, w) {
				t.Errorf("code %d op %d: %q does not contain %q", c.code, c.op, msg, w)
			}
		}
	}
}

// TestMLAAttnTCLimits: k_mla_attn_tc's Go-side limits match its #defines,
// its shared memory is what the kernel lays out, and it serves only the
// latents it can (BF16, rank a multiple of 128 up to 512, aligned).
func TestMLAAttnTCLimits(t *testing.T) {
	_, defs := kernelDefines(t, "kernels/mla.cu")
	for name, want := range map[string]int{"MLA_TC_HG": mlaTCHeads, "MLA_TC_PAD": mlaTCPad, "MLA_TC_NT": mlaTCMaxR / 64, "MLA_PS": mlaPS} {
		if got, ok := defs[name]; !ok || got != want {
			t.Errorf("mla.cu: %s = %d (defined %v), Go has %d", name, got, ok, want)
		}
	}
	// R = 512: 3*16*520*2 + 2*32*520*2 + 8*16*32*4 + 16*33*4 + 3*16*4 + 2*32*4.
	if got := mlaTCShared(512); got != 135552 {
		t.Errorf("mlaTCShared(512) = %d, want 135552", got)
	}
	defer func() { mlaAttnTC = true }()
	for _, c := range []struct {
		on   bool
		dt   npu.DType
		R    int
		lat  uint64
		lim  int
		want bool
	}{
		{true, npu.BF16, 512, 256, 227 << 10, true},
		{true, npu.BF16, 128, 256, 227 << 10, true},
		{true, npu.BF16, 384, 256, 227 << 10, true},
		{true, npu.BF16, 64, 256, 227 << 10, false},   // not whole MMA tiles per warp
		{true, npu.BF16, 1024, 256, 227 << 10, false}, // above MLA_TC_NT
		{true, npu.F32, 512, 256, 227 << 10, false},
		{true, npu.BF16, 512, 264, 227 << 10, false}, // 8-byte aligned latents
		{true, npu.BF16, 512, 256, 100 << 10, false}, // shared memory
		{false, npu.BF16, 512, 256, 227 << 10, false},
	} {
		mlaAttnTC = c.on
		if got := mlaAttnTCFits(c.dt, c.R, c.lat, 512, c.lim); got != c.want {
			t.Errorf("mlaAttnTCFits(%v, R=%d, lat %% 16 = %d, lim %d, on %v) = %v, want %v", c.dt, c.R, c.lat%16, c.lim, c.on, got, c.want)
		}
	}
}

// TestUseKDAWarp: k_kda_w takes prefill batches up to its head dim, every
// batch under "warp", none under "rows"; its row split matches the Go
// limit.
func TestUseKDAWarp(t *testing.T) {
	for _, c := range []struct {
		mode    string
		K, T, B int
		want    bool
	}{
		{"", 128, 8192, 1, true},  // one long prompt
		{"", 128, 9, 8, true},     // a sequence of two rows among decodes
		{"", 128, 8, 8, false},    // a decode step: k_kda
		{"", 160, 8192, 1, false}, // past kdaWarpMaxK
		{"warp", 128, 8, 8, true},
		{"warp", 129, 8, 1, false},
		{"rows", 128, 8192, 1, false},
		{"other", 33, 70, 2, true},
	} {
		if got := useKDAWarp(c.mode, c.K, c.T, c.B); got != c.want {
			t.Errorf("useKDAWarp(%q, K=%d, T=%d, B=%d) = %v, want %v", c.mode, c.K, c.T, c.B, got, c.want)
		}
	}
	_, defs := kernelDefines(t, "kernels/kda.cu")
	if got := 8 * defs["KDA_W_R"]; got != kdaWarpMaxK {
		t.Errorf("kda.cu: 8 * KDA_W_R = %d, kdaWarpMaxK = %d", got, kdaWarpMaxK)
	}
	if defs["KDA_STAGE"] != kdaStage {
		t.Errorf("kda.cu: KDA_STAGE = %d, kdaStage = %d", defs["KDA_STAGE"], kdaStage)
	}
}
