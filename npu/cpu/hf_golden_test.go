package cpu

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

// Golden outputs of the transformers glm5_next reference code (forget gate,
// chunk_kimi_delta_attention, recurrent_kimi_delta_attention,
// Glm5NextTextIndexer, build_attention_mask_from_topk +
// eager_attention_forward), made by testdata/glm5next_attn/make_golden.py.

const hfGoldenDir = "testdata/glm5next_attn"

type hfGolden struct {
	t       *testing.T
	Tensors map[string]struct {
		Shape []int
		Dtype string
	}
	IdxScale float64 `json:"idx_scale"`
}

func loadHFGolden(t *testing.T) *hfGolden {
	b, err := os.ReadFile(filepath.Join(hfGoldenDir, "manifest.json"))
	if err != nil {
		t.Fatalf("golden manifest: %v", err)
	}
	g := &hfGolden{t: t}
	if err := json.Unmarshal(b, g); err != nil {
		t.Fatalf("golden manifest: %v", err)
	}
	return g
}

func (g *hfGolden) raw(name, dtype string) ([]byte, []int) {
	m, ok := g.Tensors[name]
	if !ok || m.Dtype != dtype {
		g.t.Fatalf("golden tensor %s (%s) missing", name, dtype)
	}
	b, err := os.ReadFile(filepath.Join(hfGoldenDir, name+"."+dtype))
	if err != nil {
		g.t.Fatal(err)
	}
	n := 1
	for _, d := range m.Shape {
		n *= d
	}
	if len(b) != 4*n {
		g.t.Fatalf("golden tensor %s: %d bytes for shape %v", name, len(b), m.Shape)
	}
	return b, m.Shape
}

func (g *hfGolden) f32(name string) []float64 {
	b, _ := g.raw(name, "f32")
	v := make([]float64, len(b)/4)
	for i := range v {
		v[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	}
	return v
}

func (g *hfGolden) i32(name string) ([]int32, []int) {
	b, shape := g.raw(name, "i32")
	v := make([]int32, len(b)/4)
	for i := range v {
		v[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v, shape
}

func TestHFGoldenKDA(t *testing.T) {
	g := loadHFGolden(t)
	be := New(2)
	const H, K, T = 2, 32, 100
	f := g.f32("kda_f")
	for _, form := range []string{"lb", "sp"} {
		t.Run("gate_"+form, func(t *testing.T) {
			out := npu.Must(be.Alloc(npu.F32, T, H*K))
			p := npu.KDAGateParams{HasLowerBound: form == "lb", LowerBound: -5, HeadDim: K}
			be.KDAGate(out, atF32(be, f, T, H*K), atF32(be, g.f32("kda_dt_bias"), H*K), atF32(be, g.f32("kda_a_log"), H), p)
			atCheck(t, "g", F32(out), g.f32("kda_g_"+form), 1e-6)
		})
		for _, chunk := range []int{64, 7, 0} {
			t.Run(fmt.Sprintf("kda_%s_chunk%d", form, chunk), func(t *testing.T) {
				state := atF32(be, g.f32("kda_s0"), 1, H, K, K)
				out := npu.Must(be.Alloc(npu.F32, T, H*K))
				seqs := upLayout(t, be, stateLayout([]int{0, T}, nil, []int{0}))
				be.KDA(out, atF32(be, g.f32("kda_qkv"), T, 3*H*K), atF32(be, g.f32("kda_g_"+form), T, H*K),
					atF32(be, g.f32("kda_beta"), T, H), state, seqs, H, K, chunk)
				for _, ref := range []string{"chunk", "rec"} {
					atCheck(t, ref+" out", F32(out), g.f32("kda_"+ref+"_out_"+form), 1e-5)
					atCheck(t, ref+" state", F32(state), g.f32("kda_"+ref+"_state_"+form), 1e-5)
				}
			})
		}
	}
}

func TestHFGoldenIndexer(t *testing.T) {
	g := loadHFGolden(t)
	be := New(2)
	const T, Hi, Di, kp = 45, 4, 16, 4
	P := T / kp
	ref := g.f32("idx_pooled")
	if len(ref) != P*Di {
		t.Fatalf("golden has %d pooled values, want %d", len(ref), P*Di)
	}
	pooled := npu.Must(be.Alloc(npu.F32, P, Di))
	be.KPool(pooled, atF32(be, g.f32("idx_keys")[:P*kp*Di], P*kp, Di), atF32(be, g.f32("idx_gates")[:P*kp*Di], P*kp, Di),
		atF32(be, g.f32("idx_ape"), kp, Di))
	atCheck(t, "pooled keys", F32(pooled), ref, 1e-6)

	hf, shape := g.i32("idx_sel")
	width := shape[1]
	// Blocks of one pool, in order: pool i at pooled row i (the last block
	// holds the incomplete tail pool only).
	blocks := make([]int32, (T+kp-1)/kp)
	for i := range blocks {
		blocks[i] = int32(i)
	}
	host := &npu.BatchLayout{QueryStart: []int{0, T}, Pos: []int{0}, StateSlot: []int{0}, BlockSize: kp, BlockTables: [][]int32{blocks}}
	seqs := upLayout(t, be, host)
	p := npu.IndexParams{TopKPools: 16 / kp, KPool: kp, Tail: true, Scale: float32(g.IdxScale)}
	out := npu.Must(be.Alloc(npu.I32, T, width))
	q, w := g.f32("idx_q"), g.f32("idx_w")
	be.DSAIndex(out, atF32(be, q, T, Hi*Di), atF32(be, w, T, Hi), atF32(be, ref, P, Di), seqs, p)
	got := I32(out)
	// Our rows must be exactly the float64 reference with its tie rule.
	want, scores := dsaRef(q, w, ref, host, Hi, Di, p, width)
	if !slices.Equal(got, want) {
		t.Errorf("selection differs from the float64 reference")
	}
	// HF's rows must select the same pools except among pools tied (ReLU
	// often zeroes every head) with the weakest selected one: torch.topk
	// breaks exact ties in no specified order.
	ties := 0
	for r := 0; r < T; r++ {
		// Ours: the k selected pools first, then the tail. HF: TopKPools
		// pool slots (−1 where fewer are visible), then the tail.
		k := min(p.TopKPools, (r+1)/kp)
		pools := func(row []int32) map[int]bool {
			m := map[int]bool{}
			for i := 0; i < len(row); i += kp {
				if row[i] >= 0 {
					m[int(row[i])/kp] = true
				}
			}
			return m
		}
		a, b := pools(got[r*width:r*width+k*kp]), pools(hf[r*width:r*width+p.TopKPools*kp])
		if len(a) != len(b) {
			t.Errorf("row %d selects %d pools, reference %d", r, len(a), len(b))
			continue
		}
		weakest := math.Inf(1)
		for i := range a {
			weakest = min(weakest, scores[r][i])
		}
		for i := range a {
			if !b[i] && scores[r][i] != weakest {
				t.Errorf("row %d: pool %d (score %g) selected here, not by the reference", r, i, scores[r][i])
			}
		}
		for i := range b {
			if !a[i] {
				ties++
				if scores[r][i] != weakest {
					t.Errorf("row %d: pool %d (score %g) selected by the reference, not here", r, i, scores[r][i])
				}
			}
		}
		tail := func(row []int32) []int32 {
			return slices.DeleteFunc(slices.Clone(row), func(x int32) bool { return x < 0 })
		}
		if x, y := tail(got[r*width+k*kp:(r+1)*width]), tail(hf[r*width+p.TopKPools*kp:(r+1)*width]); !slices.Equal(x, y) {
			t.Errorf("row %d tail %v, reference %v", r, x, y)
		}
	}
	t.Logf("%d pools chosen differently among exact ties", ties)
}

func TestHFGoldenMLA(t *testing.T) {
	g := loadHFGolden(t)
	be := New(2)
	const T, H, dk, dv, R = 45, 4, 16, 16, 32
	sel, shape := g.i32("idx_sel")
	// One position per block, in order: position p at latent row p.
	blocks := make([]int32, T)
	for i := range blocks {
		blocks[i] = int32(i)
	}
	seqs := upLayout(t, be, &npu.BatchLayout{QueryStart: []int{0, T}, Pos: []int{0}, StateSlot: []int{0}, BlockSize: 1, BlockTables: [][]int32{blocks}})
	for _, force := range []int{1, 2} {
		t.Run(fmt.Sprint("force", force), func(t *testing.T) {
			defer func(f int) { mlaForce = f }(mlaForce)
			mlaForce = force
			out := npu.Must(be.Alloc(npu.F32, T, H*dv))
			be.SparseMLA(out, atF32(be, g.f32("mla_q"), T, H*dk), atF32(be, g.f32("mla_latents"), T, R),
				atF32(be, g.f32("mla_kvb"), H*(dk+dv), R), atI32(be, sel, T, shape[1]), seqs, H, dk, dv, 0.25)
			atCheck(t, "out", F32(out), g.f32("mla_out"), 1e-5)
		})
	}
}
