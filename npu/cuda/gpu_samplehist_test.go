package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/opcheck"
)

// TestGPUSampleHistTable runs npu/opcheck's sampling-histogram cases (what
// `npuserve selftest` runs) against the CPU backend: exact.
func TestGPUSampleHistTable(t *testing.T) {
	g := gpu(t)
	ran := 0
	for _, tc := range opcheck.Cases() {
		if (tc.Op != "SampleHist" && tc.Op != "SampleBinMembers") || !tc.Applies(g) {
			continue
		}
		ran++
		t.Run(tc.Key(), func(t *testing.T) {
			if r := opcheck.RunCase(tc, g, cpuBE, opcheck.Options{Seed: 5, Reps: 1}); !r.Pass {
				t.Fatalf("%+v", r)
			}
		})
	}
	if ran != 2 {
		t.Fatalf("%d sampling-histogram cases ran, want 2", ran)
	}
}

// TestGPUSampleHist compares SampleHist and SampleBinMembers with the CPU
// backend bit for bit at real vocabulary sizes and at the tile and chunk
// edges: ties, -Inf, NaN, +Inf, values above the query's maximum, several
// temperatures, bins past the member cap, empty and outside bins, no
// outputs but the counts.
func TestGPUSampleHist(t *testing.T) {
	h := newBoth(t, 31)
	for _, c := range []struct{ R, V, C int }{
		{2, 1, 4}, {3, 4095, 16}, {2, 4097, 0}, {2, 8193, 300}, {3, 154_880, 64}, {2, 151_936, 1024},
	} {
		name := fmt.Sprintf("R=%d V=%d C=%d", c.R, c.V, c.C)
		v := make([]float32, c.R*c.V)
		for i := range v {
			v[i] = float32(h.r.NormFloat64() * 3)
		}
		for r := range c.R {
			row := v[r*c.V : (r+1)*c.V]
			switch r % 3 {
			case 1: // ties: a few values, many entries each
				for i := range row {
					row[i] = float32(h.r.IntN(64)-32) / 4
				}
			case 2: // masked entries, NaN and +Inf
				for i := range row {
					if h.r.IntN(5) == 0 {
						row[i] = float32(math.Inf(-1))
					}
				}
				row[h.r.IntN(c.V)] = float32(math.NaN())
				row[h.r.IntN(c.V)] = float32(math.Inf(1))
			}
		}
		rowMax := func(r int) float32 {
			m := float32(math.Inf(-1))
			for _, x := range v[r*c.V : (r+1)*c.V] {
				if !math.IsInf(float64(x), 1) && x == x {
					m = max(m, x)
				}
			}
			return m
		}
		type query struct {
			row  int
			m    float32
			invT float64
		}
		var qs []query
		for r := range c.R {
			qs = append(qs, query{r, rowMax(r), 1}, query{r, rowMax(r) - 1.5, 1 / 0.7}, query{r, rowMax(r), 1 / 0.05})
		}
		qs = append(qs, query{0, rowMax(0), 1e-3}, query{c.R - 1, rowMax(c.R - 1), 7})
		Q := len(qs)
		rows, bins := make([]int32, Q), make([]int32, Q)
		params := make([]byte, 0, 16*Q)
		for j, q := range qs {
			rows[j] = int32(q.row)
			for _, w := range npu.SampleHistParams(q.m, q.invT) {
				params = binary.LittleEndian.AppendUint64(params, uint64(w))
			}
			// The fullest bin, an occupied one at random, then outside bins.
			n := make([]int, npu.SampleHistBins)
			var occupied []int
			for _, x := range v[q.row*c.V : (q.row+1)*c.V] {
				if b, _ := npu.SampleBin(x, q.m, q.invT); b >= 0 {
					if n[b] == 0 {
						occupied = append(occupied, b)
					}
					n[b]++
				}
			}
			switch {
			case j%4 == 0 || len(occupied) == 0:
				full := 0
				for b := range n {
					if n[b] > n[full] {
						full = b
					}
				}
				bins[j] = int32(full)
			case j%4 == 1:
				bins[j] = int32(occupied[h.r.IntN(len(occupied))])
			case j%4 == 2:
				bins[j] = int32(h.r.IntN(npu.SampleHistBins))
			default:
				bins[j] = []int32{-1, npu.SampleHistBins, npu.SampleHistBins - 1}[j%3]
			}
		}
		logits := h.from(npu.F32, v, c.R, c.V)
		rt, bt := h.ints(rows, Q), h.ints(bins, Q)
		pt := h.raw(npu.I64, params, Q, 2)
		hist := h.zeros(npu.I64, Q, npu.SampleHistBins)
		counts := h.zeros(npu.I32, Q, 2)
		var vals, ids pair
		if c.C > 0 {
			vals, ids = h.zeros(npu.F32, Q, c.C), h.zeros(npu.I32, Q, c.C)
		}
		h.g.SampleHist(hist.g, logits.g, rt.g, pt.g)
		cpuBE.SampleHist(hist.c, logits.c, rt.c, pt.c)
		h.g.SampleBinMembers(vals.g, ids.g, counts.g, logits.g, rt.g, pt.g, bt.g)
		cpuBE.SampleBinMembers(vals.c, ids.c, counts.c, logits.c, rt.c, pt.c, bt.c)
		h.sync()
		h.exact(name+" hist", hist)
		h.exact(name+" counts", counts)
		if c.C > 0 {
			h.exact(name+" vals", vals)
			h.exact(name+" ids", ids)
			h.free(vals, ids)
		}
		h.free(logits, rt, bt, pt, hist, counts)
	}
}

// TestGPUSampleHistBadRow: a row index outside the logits is a device
// error naming the op at the next Sync (the CPU backend panics).
func TestGPUSampleHistBadRow(t *testing.T) {
	h := newBoth(t, 32)
	logits := h.rand(npu.F32, 1, 2, 100)
	rows := h.ints([]int32{1, 2}, 2)
	params := make([]byte, 0, 32)
	for range 2 {
		for _, w := range npu.SampleHistParams(3, 1) {
			params = binary.LittleEndian.AppendUint64(params, uint64(w))
		}
	}
	pt := h.raw(npu.I64, params, 2, 2)
	hist, counts, bins := h.zeros(npu.I64, 2, npu.SampleHistBins), h.zeros(npu.I32, 2, 2), h.ints([]int32{5, 5}, 2)
	for _, c := range []struct {
		op  string
		run func()
	}{
		{"SampleHist", func() { h.g.SampleHist(hist.g, logits.g, rows.g, pt.g) }},
		{"SampleBinMembers", func() { h.g.SampleBinMembers(nil, nil, counts.g, logits.g, rows.g, pt.g, bins.g) }},
	} {
		c.run()
		err := h.g.Sync()
		var de *DeviceError
		if !errors.As(err, &de) || de.Op != c.op || de.Value != 2 || !strings.Contains(err.Error(), "index 2") {
			t.Errorf("%s with row 2 of 2: Sync %v, want a device index error", c.op, err)
		}
	}
	h.free(logits, rows, pt, hist, counts, bins)
}

// raw makes a pair holding the little-endian elements data of dt.
func (h *both) raw(dt npu.DType, data []byte, shape ...int) pair {
	h.t.Helper()
	g, err := h.g.FromHost(dt, data, shape...)
	if err != nil {
		h.t.Fatal(err)
	}
	c, err := cpuBE.FromHost(dt, append([]byte(nil), data...), shape...)
	if err != nil {
		h.t.Fatal(err)
	}
	return pair{g, c}
}
