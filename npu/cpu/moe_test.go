package cpu

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/npuserve/npuserve/npu"
)

// routerRef is the float64 reference of noaux_tc routing: the selected
// experts in descending biased score (ties to the lower index) and their
// weights.
func routerRef(x, gate, bias []float64, T, D, E int, p npu.RouterParams) ([]int32, []float64) {
	k := p.TopK
	ids := make([]int32, 0, T*k)
	ws := make([]float64, 0, T*k)
	ng := max(p.NGroup, 1)
	per := E / ng
	for t := range T {
		s := make([]float64, E)
		sb := make([]float64, E)
		for e := range E {
			var l float64
			for d := range D {
				l += x[t*D+d] * gate[e*D+d]
			}
			s[e] = coreSig64(l)
			sb[e] = s[e] + bias[e]
		}
		if ng > 1 {
			gs := make([]float64, ng)
			for g := range ng {
				v := append([]float64(nil), sb[g*per:(g+1)*per]...)
				sort.Sort(sort.Reverse(sort.Float64Slice(v)))
				gs[g] = v[0]
				if per > 1 {
					gs[g] += v[1]
				}
			}
			gi := make([]int, ng)
			for i := range gi {
				gi[i] = i
			}
			sort.SliceStable(gi, func(a, b int) bool { return gs[gi[a]] > gs[gi[b]] })
			for _, g := range gi[p.TopKGroup:] {
				for e := g * per; e < (g+1)*per; e++ {
					sb[e] = math.Inf(-1)
				}
			}
		}
		ei := make([]int, E)
		for i := range ei {
			ei[i] = i
		}
		sort.SliceStable(ei, func(a, b int) bool { return sb[ei[a]] > sb[ei[b]] })
		var sum float64
		for _, e := range ei[:k] {
			sum += s[e]
		}
		for _, e := range ei[:k] {
			w := s[e]
			if p.Normalize {
				w /= sum + 1e-20
			}
			ids = append(ids, int32(e))
			ws = append(ws, w*float64(p.Scale))
		}
	}
	return ids, ws
}

func TestRouter(t *testing.T) {
	cases := []struct {
		name    string
		T, D, E int
		p       npu.RouterParams
		gate    npu.DType
		ties    bool
	}{
		{"ungrouped normalised", 7, 16, 8, npu.RouterParams{TopK: 2, NGroup: 1, TopKGroup: 1, Normalize: true, Scale: 2.5}, npu.F32, false},
		{"grouped 4x top-2", 9, 13, 8, npu.RouterParams{TopK: 3, NGroup: 4, TopKGroup: 2, Normalize: true, Scale: 2.5}, npu.F32, false},
		{"grouped 2x top-1 unnormalised", 5, 11, 8, npu.RouterParams{TopK: 2, NGroup: 2, TopKGroup: 1, Normalize: false, Scale: 1.5}, npu.BF16, false},
		{"groups of one", 4, 6, 6, npu.RouterParams{TopK: 2, NGroup: 6, TopKGroup: 3, Normalize: true, Scale: 1}, npu.F32, false},
		{"all experts", 3, 5, 5, npu.RouterParams{TopK: 5, NGroup: 1, TopKGroup: 1, Normalize: true, Scale: 1}, npu.F16, false},
		{"ties go to the lower expert", 3, 8, 8, npu.RouterParams{TopK: 3, NGroup: 1, TopKGroup: 1, Normalize: true, Scale: 2}, npu.F32, true},
		{"tied groups go to the lower group", 3, 8, 8, npu.RouterParams{TopK: 2, NGroup: 4, TopKGroup: 1, Normalize: true, Scale: 2}, npu.F32, true},
	}
	for ci, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			be := New(2)
			r := rand.New(rand.NewPCG(uint64(ci), 3))
			gv := mdlRand(r, c.E*c.D, 0.5)
			bv := mdlRand(r, c.E, 0.1)
			if c.ties {
				// Every expert has the same gate row as expert e%2, and
				// no bias: scores come in tied pairs/groups.
				for e := 2; e < c.E; e++ {
					copy(gv[e*c.D:(e+1)*c.D], gv[(e%2)*c.D:(e%2+1)*c.D])
				}
				clear(bv)
			}
			x, xv := mdlTensor(be, npu.F32, mdlRand(r, c.T*c.D, 1), c.T, c.D)
			gate, gw := mdlTensor(be, c.gate, gv, c.E, c.D)
			bias, bw := mdlTensor(be, npu.F32, bv, c.E)
			w := npu.Must(be.Alloc(npu.F32, c.T, c.p.TopK))
			ids := npu.Must(be.Alloc(npu.I32, c.T, c.p.TopK))
			be.Router(w, ids, x, gate, bias, c.p)
			wantIDs, wantW := routerRef(xv, gw, bw, c.T, c.D, c.E, c.p)
			got := I32(ids)
			for i := range got {
				if got[i] != wantIDs[i] {
					t.Fatalf("ids %v, want %v", got, wantIDs)
				}
			}
			mdlClose(t, "weights", F32(w), wantW, 1e-6, 1e-5)
			if c.ties && c.p.NGroup == 1 {
				// Experts 0, 2, 4 tie, as do 1, 3, 5: the selection is the
				// lower indices of the better pair class.
				for tt := range c.T {
					row := got[tt*c.p.TopK : (tt+1)*c.p.TopK]
					if row[0] > 1 || row[1] != row[0]+2 || row[2] != row[0]+4 {
						t.Fatalf("token %d tie-break %v", tt, row)
					}
				}
			}
		})
	}
}

func TestMoE(t *testing.T) {
	cases := []struct {
		name       string
		T, D, E, I int
		k          int
		limit      float32
		wt         npu.DType
	}{
		{"small", 4, 8, 4, 6, 2, 10, npu.F32},
		{"odd sizes tight clamp", 5, 9, 5, 7, 3, 0.3, npu.F32},
		{"bf16 weights", 6, 16, 6, 8, 2, 10, npu.BF16},
		{"f16 weights no clamp", 3, 7, 3, 5, 1, 0, npu.F16},
		{"more tokens than a chunk", moeChunk + 37, 12, 8, 4, 2, 1, npu.F32},
	}
	for ci, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			be := New(2)
			r := rand.New(rand.NewPCG(uint64(ci), 5))
			x, xv := mdlTensor(be, npu.F32, mdlRand(r, c.T*c.D, 1), c.T, c.D)
			gu, guv := mdlTensor(be, c.wt, mdlRand(r, c.E*2*c.I*c.D, 0.5), c.E, 2*c.I, c.D)
			dn, dnv := mdlTensor(be, c.wt, mdlRand(r, c.E*c.D*c.I, 0.5), c.E, c.D, c.I)
			out, ov := mdlTensor(be, npu.F32, mdlRand(r, c.T*c.D, 1), c.T, c.D)
			idv := make([]int32, c.T*c.k)
			for tt := range c.T {
				perm := r.Perm(c.E)
				for j := range c.k {
					idv[tt*c.k+j] = int32(perm[j])
				}
			}
			ids := npu.Must(be.Alloc(npu.I32, c.T, c.k))
			copy(I32(ids), idv)
			w, wv := mdlTensor(be, npu.F32, mdlRand(r, c.T*c.k, 1), c.T, c.k)
			be.MoE(out, x, gu, dn, w, ids, c.limit)

			lim := math.Inf(1)
			if c.limit > 0 {
				lim = float64(c.limit)
			}
			want := append([]float64(nil), ov...)
			for tt := range c.T {
				for j := range c.k {
					e := int(idv[tt*c.k+j])
					h := make([]float64, c.I)
					for i := range c.I {
						var g, u float64
						for d := range c.D {
							g += guv[(e*2*c.I+i)*c.D+d] * xv[tt*c.D+d]
							u += guv[(e*2*c.I+c.I+i)*c.D+d] * xv[tt*c.D+d]
						}
						g = math.Min(g, lim)
						u = math.Max(math.Min(u, lim), -lim)
						h[i] = g * coreSig64(g) * u
					}
					for d := range c.D {
						var y float64
						for i := range c.I {
							y += dnv[(e*c.D+d)*c.I+i] * h[i]
						}
						want[tt*c.D+d] += wv[tt*c.k+j] * y
					}
				}
			}
			mdlClose(t, "MoE", F32(out), want, 1e-4, 1e-4)
		})
	}
}
