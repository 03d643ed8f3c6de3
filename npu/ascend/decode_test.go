//go:build cgo

package ascend

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/npu"
	"github.com/npuserve/npuserve/npu/cpu"
)

// decodeDims are the shapes of the decode-step test.
const (
	dcC, dcW           = 12, 4 // conv channels, taps
	dcH, dcK           = 2, 8  // KDA heads, head dim
	dcHi, dcD, dcKP    = 2, 8, 4
	dcTop, dcBS, dcMB  = 2, 8, 4 // top pools, block size, block-table width
	dcHA, dcDk, dcR    = 2, 8, 12
	dcSel              = 6 // SparseMLA selection width
	dcWidth            = dcTop*dcKP + dcKP - 1
	dcExtraBlocks      = 2
	dcExtraSlots       = 2
	dcLatentTolerance  = 1e-4
	dcRecurrenceTolera = 1e-4
)

// decodeLayout draws a decode batch of B sequences: positions (odd ones,
// one at a block's last token, one past a block boundary), distinct state
// slots and shuffled distinct blocks, the block table covering each
// position (-1 beyond, as the engine's tables).
func decodeLayout(r *rand.Rand, B int) *npu.BatchLayout {
	nblocks, nslots := B*dcMB+dcExtraBlocks, B+dcExtraSlots
	l := &npu.BatchLayout{QueryStart: []int{0}, BlockSize: dcBS}
	perm := r.Perm(nblocks)
	for b, s := range r.Perm(nslots)[:B] {
		var p int
		switch b {
		case 0:
			p = dcBS - 1 // the block's last token (completes a pool)
		case 1:
			p = 2*dcBS + 3 // past a block boundary
		default:
			p = 2*r.IntN(dcMB*dcBS/2) + 1 // odd
		}
		l.QueryStart = append(l.QueryStart, b+1)
		l.Pos = append(l.Pos, p)
		l.StateSlot = append(l.StateSlot, s)
		nb := p/dcBS + 1
		bt := make([]int32, nb)
		for i := range bt {
			bt[i] = int32(perm[i])
		}
		perm = perm[nb:]
		l.BlockTables = append(l.BlockTables, bt)
	}
	return l
}

// fixedMeta is l's layout words in the fixed form a decode graph
// replays: QueryStart | Pos | StateSlot | BlockTable [B, dcMB].
func fixedMeta(l *npu.BatchLayout) []int32 {
	B := l.NumSeqs()
	w := make([]int32, 0, 3*B+1+B*dcMB)
	for _, v := range l.QueryStart {
		w = append(w, int32(v))
	}
	for _, v := range l.Pos {
		w = append(w, int32(v))
	}
	for _, v := range l.StateSlot {
		w = append(w, int32(v))
	}
	for _, bt := range l.BlockTables {
		row := make([]int32, dcMB)
		for i := range row {
			row[i] = -1
		}
		copy(row, bt)
		w = append(w, row...)
	}
	return w
}

// decodeCase holds the operands of one decode step on both backends.
type decodeCase struct {
	x, conv, cw, convOut          pair
	qkv, g, beta, state, kdaOut   pair
	qi, wi, pooled, dsaOut        pair
	qa, lat, kvB, sel, mlaOut     pair
	convState, kdaState, kvStates int
}

func newDecodeCase(t *testing.T, b *Backend, c *cpu.Backend, r *rand.Rand, B int) *decodeCase {
	nblocks, nslots := B*dcMB+dcExtraBlocks, B+dcExtraSlots
	HK := dcH * dcK
	return &decodeCase{
		x: zeros(t, b, c, npu.F32, B, dcC), conv: zeros(t, b, c, npu.F32, nslots, dcW-1, dcC),
		cw: put(t, b, c, npu.BF16, randF32(r, dcC*dcW), dcC, dcW), convOut: zeros(t, b, c, npu.F32, B, dcC),
		qkv: zeros(t, b, c, npu.F32, B, 3*HK), g: zeros(t, b, c, npu.F32, B, HK), beta: zeros(t, b, c, npu.F32, B, dcH),
		state: zeros(t, b, c, npu.F32, nslots, dcH, dcK, dcK), kdaOut: zeros(t, b, c, npu.F32, B, HK),
		qi: zeros(t, b, c, npu.F32, B, dcHi*dcD), wi: zeros(t, b, c, npu.F32, B, dcHi),
		pooled: put(t, b, c, npu.F32, randF32(r, nblocks*dcBS/dcKP*dcD), nblocks*dcBS/dcKP, dcD), dsaOut: zeros(t, b, c, npu.I32, B, dcWidth),
		qa: zeros(t, b, c, npu.F32, B, dcHA*dcDk), lat: put(t, b, c, npu.BF16, randF32(r, nblocks*dcBS*dcR), nblocks*dcBS, dcR),
		kvB: put(t, b, c, npu.F32, randF32(r, dcHA*2*dcDk*dcR), dcHA*2*dcDk, dcR), sel: zeros(t, b, c, npu.I32, B, dcSel),
		mlaOut: zeros(t, b, c, npu.F32, B, dcHA*dcDk),
	}
}

// step enqueues the four layout ops of a decode step on be.
func (dc *decodeCase) step(be npu.Backend, on func(pair) *npu.Tensor, seqs *npu.SeqLayout) {
	be.Conv1d(on(dc.convOut), on(dc.x), on(dc.conv), on(dc.cw), seqs, true)
	be.KDA(on(dc.kdaOut), on(dc.qkv), on(dc.g), on(dc.beta), on(dc.state), seqs, dcH, dcK, 0)
	be.DSAIndex(on(dc.dsaOut), on(dc.qi), on(dc.wi), on(dc.pooled), seqs, npu.IndexParams{TopKPools: dcTop, KPool: dcKP, Tail: true, Scale: 0.5})
	be.SparseMLA(on(dc.mlaOut), on(dc.qa), on(dc.lat), on(dc.kvB), on(dc.sel), seqs, dcHA, dcDk, dcDk, 0.3)
}

// inputs uploads fresh per-step inputs (and states) to both backends.
func (dc *decodeCase) inputs(t *testing.T, b *Backend, c *cpu.Backend, r *rand.Rand, l *npu.BatchLayout) {
	t.Helper()
	B := l.Rows()
	sel := make([]int32, B*dcSel)
	for s := range l.NumSeqs() {
		for t := l.QueryStart[s]; t < l.QueryStart[s+1]; t++ {
			row := sel[t*dcSel : (t+1)*dcSel]
			for i := range row {
				row[i] = -1
			}
			if t == 2 {
				continue // a row with nothing selected
			}
			pos := l.Pos[s] + t - l.QueryStart[s]
			for i, p := range r.Perm(pos + 1)[:min(dcSel-1, pos+1)] {
				row[i] = int32(p)
			}
		}
	}
	g := randF32(r, B*dcH*dcK)
	for i := range g {
		g[i] = -float32(math.Abs(float64(g[i])))
	}
	beta := randF32(r, B*dcH)
	for i := range beta {
		beta[i] = float32(1 / (1 + math.Exp(-float64(beta[i]))))
	}
	w := randF32(r, B*dcHi)
	for i := range w {
		w[i] = float32(math.Abs(float64(w[i]))) + 0.1
	}
	up := func(p pair, data []byte) {
		for _, be := range []npu.Backend{b, c} {
			dst := p.a
			if be == npu.Backend(c) {
				dst = p.c
			}
			if err := be.Upload(dst, data); err != nil {
				t.Fatal(err)
			}
		}
	}
	f := func(p pair, v []float32) { up(p, npu.EncodeFloats(v, npu.F32)) }
	f(dc.x, randF32(r, dc.x.a.Numel()))
	f(dc.conv, randF32(r, dc.conv.a.Numel()))
	f(dc.qkv, randF32(r, dc.qkv.a.Numel()))
	f(dc.g, g)
	f(dc.beta, beta)
	st := randF32(r, dc.state.a.Numel())
	for i := range st {
		st[i] *= 0.3
	}
	f(dc.state, st)
	f(dc.qi, randF32(r, dc.qi.a.Numel()))
	f(dc.wi, w)
	f(dc.qa, randF32(r, dc.qa.a.Numel()))
	up(dc.sel, npu.EncodeInt32s(sel))
}

// compare checks every output of the step against the CPU backend's.
func (dc *decodeCase) compare(t *testing.T, b *Backend, c *cpu.Backend, what string) {
	t.Helper()
	for _, o := range []struct {
		name string
		p    pair
		tol  float64
	}{{"Conv1d out", dc.convOut, 1e-5}, {"Conv1d state", dc.conv, 0}, {"KDA out", dc.kdaOut, dcRecurrenceTolera},
		{"KDA state", dc.state, dcRecurrenceTolera}, {"SparseMLA out", dc.mlaOut, dcLatentTolerance}} {
		got, want := download(t, b, o.p.a), download(t, c, o.p.c)
		for i := range want {
			if d := math.Abs(float64(got[i] - want[i])); d > o.tol*math.Max(1, math.Abs(float64(want[i]))) || math.IsNaN(float64(got[i])) {
				t.Fatalf("%s: %s element %d: ascend %v, cpu %v", what, o.name, i, got[i], want[i])
			}
		}
	}
	got, want := downloadI32(t, b, dc.dsaOut.a), downloadI32(t, c, dc.dsaOut.c)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s: DSAIndex row %d: ascend %v, cpu %v", what, i/dcWidth, got[i/dcWidth*dcWidth:(i/dcWidth+1)*dcWidth], want[i/dcWidth*dcWidth:(i/dcWidth+1)*dcWidth])
		}
	}
}

// TestDecodeFormsReplay captures a decode step of the four layout ops
// (Conv1d, KDA, DSAIndex, SparseMLA: their decode forms) over a fixed
// layout buffer, then replays it after the batch layout changed (other
// positions, state slots and block tables uploaded into that buffer),
// for several batch sizes: every replay matches the CPU backend run on
// the new layout, as does an eager step of the decode forms.
func TestDecodeFormsReplay(t *testing.T) {
	b := newBackend(t)
	c := cpu.New(1)
	for _, B := range []int{1, 3, 5} {
		t.Run(fmt.Sprintf("B%d", B), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(B), 9))
			dc := newDecodeCase(t, b, c, r, B)
			meta := npu.Must(b.Alloc(npu.I32, 3*B+1+B*dcMB))
			defer b.Free(meta)
			take := func(o, n int) *npu.Tensor { return meta.Rows(o, o+n) }
			seqs := &npu.SeqLayout{NumSeqs: B, NumRows: B, MaxBlocks: dcMB, BlockSize: dcBS,
				QueryStart: take(0, B+1), Pos: take(B+1, B), StateSlot: take(2*B+1, B), BlockTable: take(3*B+1, B*dcMB)}
			onA := func(p pair) *npu.Tensor { return p.a }
			onC := func(p pair) *npu.Tensor { return p.c }
			run := func(l *npu.BatchLayout, replay func()) {
				if err := b.Upload(meta, npu.EncodeInt32s(fixedMeta(l))); err != nil {
					t.Fatal(err)
				}
				dc.inputs(t, b, c, r, l)
				cs, buf, err := l.Upload(c)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Free(buf)
				replay()
				dc.step(c, onC, cs)
			}
			// Eager (and the warm-up a capture needs).
			l := decodeLayout(r, B)
			run(l, func() { dc.step(b, onA, seqs) })
			dc.compare(t, b, c, "eager")
			if err := b.BeginCapture(); err != nil {
				t.Fatal(err)
			}
			dc.step(b, onA, seqs)
			g, err := b.EndCapture()
			if err != nil {
				t.Fatalf("capturing the decode forms: %v", err)
			}
			defer func() {
				if err := g.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			}()
			for rep := range 3 {
				run(decodeLayout(r, B), func() {
					if err := g.Launch(); err != nil {
						t.Fatal(err)
					}
				})
				dc.compare(t, b, c, fmt.Sprintf("replay %d", rep))
			}
		})
	}
}

// TestDecodeFormsRefusedOffDecode: a batch that is not one row per
// sequence takes the host-planned paths, which a capture refuses
// (ErrCapturing, for each of the four ops), and which run eagerly and
// match the CPU backend afterwards.
func TestDecodeFormsRefusedOffDecode(t *testing.T) {
	b := newBackend(t)
	c := cpu.New(1)
	r := rand.New(rand.NewPCG(5, 6))
	// Two sequences, three rows (two and one).
	l := &npu.BatchLayout{QueryStart: []int{0, 2, 3}, Pos: []int{5, 17}, StateSlot: []int{3, 0}, BlockSize: dcBS,
		BlockTables: [][]int32{{4, 1}, {0, 6, 2}}}
	T := l.Rows()
	prefill := newDecodeCase(t, b, c, r, T)
	as, abuf, err := l.Upload(b)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(abuf)
	cs, cbuf, err := l.Upload(c)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Free(cbuf)
	onA := func(p pair) *npu.Tensor { return p.a }
	ops := []struct {
		name string
		run  func()
	}{
		{"Conv1d", func() { b.Conv1d(prefill.convOut.a, prefill.x.a, prefill.conv.a, prefill.cw.a, as, true) }},
		{"KDA", func() {
			b.KDA(prefill.kdaOut.a, prefill.qkv.a, prefill.g.a, prefill.beta.a, prefill.state.a, as, dcH, dcK, 0)
		}},
		{"DSAIndex", func() {
			b.DSAIndex(prefill.dsaOut.a, prefill.qi.a, prefill.wi.a, prefill.pooled.a, as, npu.IndexParams{TopKPools: dcTop, KPool: dcKP, Tail: true, Scale: 0.5})
		}},
		{"SparseMLA", func() {
			b.SparseMLA(prefill.mlaOut.a, prefill.qa.a, prefill.lat.a, prefill.kvB.a, prefill.sel.a, as, dcHA, dcDk, dcDk, 0.3)
		}},
	}
	prefill.inputs(t, b, c, r, l)
	for _, op := range ops {
		if err := b.BeginCapture(); err != nil {
			t.Fatal(err)
		}
		op.run()
		g, err := b.EndCapture()
		if err == nil || !errors.Is(err, npu.ErrCapturing) {
			if g != nil {
				_ = g.Close()
			}
			t.Fatalf("%s of a prefill batch captured: %v, want an error wrapping ErrCapturing", op.name, err)
		}
	}
	// Eagerly the host plans run (the layout's shadows are there) and
	// match the CPU backend.
	prefill.step(b, onA, as)
	prefill.step(c, func(p pair) *npu.Tensor { return p.c }, cs)
	prefill.compare(t, b, c, "prefill batch, eager")
}

// TestDecodeFormsCheckRows: a batch with as many rows as sequences but
// not one each (rows 2 and 0) is not taken for a decode batch silently:
// the decode forms check QueryStart's upload shadow and panic.
func TestDecodeFormsCheckRows(t *testing.T) {
	b := newBackend(t)
	c := cpu.New(1)
	r := rand.New(rand.NewPCG(7, 8))
	l := &npu.BatchLayout{QueryStart: []int{0, 2, 2}, Pos: []int{3, 9}, StateSlot: []int{1, 0}, BlockSize: dcBS,
		BlockTables: [][]int32{{2}, {0, 3}}}
	dc := newDecodeCase(t, b, c, r, 2)
	as, buf, err := l.Upload(b)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(buf)
	for _, op := range []struct {
		name string
		run  func()
	}{
		{"Conv1d", func() { b.Conv1d(dc.convOut.a, dc.x.a, dc.conv.a, dc.cw.a, as, true) }},
		{"KDA", func() { b.KDA(dc.kdaOut.a, dc.qkv.a, dc.g.a, dc.beta.a, dc.state.a, as, dcH, dcK, 0) }},
		{"DSAIndex", func() {
			b.DSAIndex(dc.dsaOut.a, dc.qi.a, dc.wi.a, dc.pooled.a, as, npu.IndexParams{TopKPools: dcTop, KPool: dcKP, Tail: true, Scale: 0.5})
		}},
		{"SparseMLA", func() { b.SparseMLA(dc.mlaOut.a, dc.qa.a, dc.lat.a, dc.kvB.a, dc.sel.a, as, dcHA, dcDk, dcDk, 0.3) }},
	} {
		msg := func() (msg string) {
			defer func() { msg = fmt.Sprint(recover()) }()
			op.run()
			return ""
		}()
		if !strings.Contains(msg, "one row per sequence") {
			t.Errorf("%s of rows 2 and 0: %q, want a panic naming one row per sequence", op.name, msg)
		}
	}
}
