package glm5next

import (
	"fmt"
	"slices"
	"time"

	"github.com/npuserve/npuserve/engine/model"
	"github.com/npuserve/npuserve/npu"
)

// Decode graphs (vLLM's cudagraph_mode FULL_DECODE_ONLY): a decode step
// of B sequences runs as one captured graph of the smallest capture size
// S >= B, its metadata uploaded into a fixed buffer before the launch and
// its S-B padding rows pointing at a block and state slots reserved for
// them, which no sequence owns (one slot per padding row: the KDA ops
// reject sequences sharing a slot). The graphs use scratch
// buffers of their own (never grown or freed by eager steps, so the
// addresses they baked in stay valid), captured largest size first after
// an eager warm-up of each size (which allocates the scratch, prepares
// quantized weights and lets the backend plan its GEMMs). Every other
// step (prefill, mixed, hooks, a block table wider than captured, a
// different cache) runs eagerly.
//
// A fixed step differs from the eager decode of the same batch in what it
// computes for rows that complete no indexer pool: every row pools kp
// token rows into a pooled row, the padding block's for those rows, so
// that the pool count is the same at every replay. The real pools, and so
// the tokens, are the eager step's.

// GraphOptions, GraphReport and ErrNoGraphs are the engine's (see
// model.DecodeGraphs).
type (
	GraphOptions = model.GraphOptions
	GraphReport  = model.GraphReport
)

// ErrNoGraphs is model.ErrNoGraphs.
var ErrNoGraphs = model.ErrNoGraphs

// GraphPadSlots is model.GraphPadSlots.
func GraphPadSlots(sizes []int) int { return model.GraphPadSlots(sizes) }

// decodeGraph is the captured decode step of one padded size.
type decodeGraph struct {
	size  int
	graph npu.Graph
	meta  *npu.Tensor // I32: layout | row slots | pool tokens | pool slots | ids
	step  fixedStep
	words []int32 // host form of meta, rebuilt per replay
}

// graphRunner holds a model's decode graphs for one cache.
type graphRunner struct {
	opt     GraphOptions
	cache   *Cache
	ws      scratch // the graphs' fixed buffers
	graphs  []*decodeGraph
	replays int // steps that ran a graph
}

// CaptureDecodeGraphs captures the decode step of cache c at each size of
// opt (replacing graphs captured before) and makes Forward replay them for
// the decode steps they cover. Call it before any sequence runs on c: the
// warm-up step of size S writes the state of slots 0..S-1 (which every
// sequence clears at its first step) and the padding block. It fails with
// an error wrapping ErrNoGraphs when the backend has no npu.GraphCapturer
// or the model runs
// collectives (tensor or expert parallelism); any other failure (a
// capture the backend refused) leaves the model without graphs.
func (m *Model) CaptureDecodeGraphs(c *Cache, opt GraphOptions) (GraphReport, error) {
	m.ReleaseGraphs()
	gc, ok := m.be.(npu.GraphCapturer)
	switch {
	case !ok:
		return GraphReport{}, fmt.Errorf("glm5next: %s backend: %w", m.be.Name(), ErrNoGraphs)
	case replayable(m.be) != nil:
		return GraphReport{}, fmt.Errorf("glm5next: %s backend: %v: %w", m.be.Name(), replayable(m.be), ErrNoGraphs)
	case m.par != nil:
		return GraphReport{}, fmt.Errorf("glm5next: a tensor- or expert-parallel model runs collectives: %w", ErrNoGraphs)
	case opt.MaxBlocks < 1:
		return GraphReport{}, fmt.Errorf("glm5next: graph block-table width %d", opt.MaxBlocks)
	}
	sizes := slices.Clone(opt.Sizes)
	slices.Sort(sizes)
	sizes = slices.Compact(sizes)
	if len(sizes) == 0 || sizes[0] < 1 {
		return GraphReport{}, fmt.Errorf("glm5next: graph capture sizes %v: want positive sizes", opt.Sizes)
	}
	if need := GraphPadSlots(sizes); opt.PadBlock < 0 || opt.PadBlock >= c.NumBlocks || opt.PadSlot < 0 || opt.PadSlots < need || opt.PadSlot+opt.PadSlots > c.StateSlots {
		return GraphReport{}, fmt.Errorf("glm5next: graph padding block %d and slots [%d, %d) (sizes %v need %d) outside the cache's %d blocks and %d slots",
			opt.PadBlock, opt.PadSlot, opt.PadSlot+opt.PadSlots, sizes, need, c.NumBlocks, c.StateSlots)
	}
	opt.PadSlots = GraphPadSlots(sizes) // the slots the padding rows use, cleared at every replay
	opt.Sizes = sizes
	start := time.Now()
	r := &graphRunner{opt: opt, cache: c, ws: scratch{be: m.be}}
	rep := GraphReport{Sizes: sizes}
	done := false
	defer func() {
		if !done {
			r.release()
		}
	}()
	// Largest first: the shared scratch reaches its final size in the
	// first warm-up, so no later step moves a buffer a graph uses.
	for i := len(sizes) - 1; i >= 0; i-- {
		g, err := m.captureSize(gc, r, sizes[i])
		if err != nil {
			return GraphReport{}, fmt.Errorf("glm5next: capturing the decode step of batch %d: %w", sizes[i], err)
		}
		r.graphs = append(r.graphs, g)
		rep.GraphBytes += g.graph.Bytes()
	}
	slices.Reverse(r.graphs)
	if err := m.be.Sync(); err != nil {
		return GraphReport{}, err
	}
	for _, t := range r.ws.bufs {
		rep.ScratchBytes += int64(t.Bytes())
	}
	rep.Duration = time.Since(start)
	m.graphs, done = r, true
	return rep, nil
}

// ReleaseGraphs closes the model's decode graphs (Forward runs eagerly
// afterwards); the cache they were captured for must be released after.
func (m *Model) ReleaseGraphs() {
	if m.graphs != nil {
		m.graphs.release()
		m.graphs = nil
	}
}

func (r *graphRunner) release() {
	for _, g := range r.graphs {
		_ = g.graph.Close()
	}
	r.graphs = nil
	r.ws.release()
}

// captureSize builds size S's fixed step, runs it once eagerly (on the
// padding rows only) and captures it.
func (m *Model) captureSize(gc npu.GraphCapturer, r *graphRunner, S int) (g *decodeGraph, err error) {
	d, c := m.d, r.cache
	kp, W := d.KPool, r.opt.MaxBlocks
	nLayout := (S + 1) + 2*S + S*W
	n := nLayout + S + S*kp + S + S*d.n
	if S > c.StateSlots {
		return nil, fmt.Errorf("the cache has %d state slots, fewer than the batch size", c.StateSlots)
	}
	g = &decodeGraph{size: S, words: make([]int32, n)}
	// Run the step with the graphs' scratch in place of the model's.
	m.ws, r.ws = r.ws, m.ws
	defer func() {
		m.ws, r.ws = r.ws, m.ws
		if e := stepFailure(recover()); e != nil {
			err = e
		}
	}()
	g.meta = m.ws.get("graph.meta", npu.I32, n) // shared: the largest size allocates it
	take := func(o, k int) *npu.Tensor { return g.meta.Rows(o, o+k) }
	o := nLayout
	p := &plan{
		rows: S, decode: true,
		seqs: &npu.SeqLayout{NumSeqs: S, NumRows: S, MaxBlocks: W, BlockSize: c.BlockSize,
			QueryStart: take(0, S+1), Pos: take(S+1, S), StateSlot: take(2*S+1, S), BlockTable: take(3*S+1, S*W)},
		rowSlots:   take(o, S),
		poolTokens: take(o+S, S*kp),
		poolSlots:  take(o+S+S*kp, S),
		pools:      S,
		nLogits:    S,
		// The padding state restarts at every replay.
		freshRange: [2]int{r.opt.PadSlot, r.opt.PadSlot + r.opt.PadSlots},
	}
	g.step = fixedStep{p: p, ids: take(o+2*S+S*kp, S*d.n), logits: m.ws.get("graph.logits", npu.F32, S, m.logitWidth())}
	if err := r.upload(m, g, nil); err != nil {
		return nil, err
	}
	empty := &Batch{}
	m.forwardStep(c, empty, hiddenNone, &g.step) // warm-up: allocates, plans, prepares
	if err := m.be.Sync(); err != nil {
		return nil, err
	}
	if err := gc.BeginCapture(); err != nil {
		return nil, err
	}
	func() {
		defer func() {
			if p := recover(); p != nil {
				_, _ = gc.EndCapture()
				panic(p)
			}
		}()
		m.forwardStep(c, empty, hiddenNone, &g.step)
	}()
	if g.graph, err = gc.EndCapture(); err != nil {
		return nil, err
	}
	return g, nil
}

// upload writes the metadata of batch b (nil: padding only) padded to
// g's size into g's fixed buffer.
func (r *graphRunner) upload(m *Model, g *decodeGraph, b *Batch) error {
	d, c := m.d, r.cache
	S, W, kp, bs := g.size, r.opt.MaxBlocks, d.KPool, c.BlockSize
	w := g.words
	B := 0
	if b != nil {
		B = b.Layout.NumSeqs()
	}
	qs, pos, slot, bt := w[0:S+1], w[S+1:2*S+1], w[2*S+1:3*S+1], w[3*S+1:3*S+1+S*W]
	o := 3*S + 1 + S*W
	rowSlots, poolTok, poolSlot, ids := w[o:o+S], w[o+S:o+S+S*kp], w[o+S+S*kp:o+2*S+S*kp], w[o+2*S+S*kp:]
	padRow := int32(r.opt.PadBlock * bs)
	padPool := int32(r.opt.PadBlock * (bs / kp))
	for s := range S {
		qs[s+1] = int32(s + 1)
		row := bt[s*W : (s+1)*W]
		for i := range row {
			row[i] = -1
		}
		tok := int32(0)
		poolSlot[s] = padPool
		for j := range kp {
			poolTok[s*kp+j] = padRow + int32(j)
		}
		switch {
		case b == nil:
			// Warm-up before any sequence runs: every slot is free (a
			// sequence clears its slot at its first step), and S rows
			// need S distinct slots.
			pos[s], slot[s] = 0, int32(s)
			row[0] = int32(r.opt.PadBlock)
			rowSlots[s] = padRow
		case s >= B:
			pos[s], slot[s] = 0, int32(r.opt.PadSlot+s-B)
			row[0] = int32(r.opt.PadBlock)
			rowSlots[s] = padRow
		default:
			L := &b.Layout
			p := L.Pos[s]
			pos[s], slot[s] = int32(p), int32(L.StateSlot[s])
			copy(row, L.BlockTables[s][:p/bs+1])
			rowSlots[s] = L.TokenRow(s, p)
			if (p+1)%kp == 0 { // this row completes pool p/kp
				i := p / kp
				for j := range kp {
					poolTok[s*kp+j] = L.TokenRow(s, i*kp+j)
				}
				poolSlot[s] = L.PoolRow(s, i, kp)
			}
			tok = b.Tokens[s]
		}
		for i := range d.n {
			ids[s*d.n+i] = tok
		}
	}
	qs[0] = 0
	if err := m.be.Upload(g.meta, npu.EncodeInt32s(w)); err != nil {
		return fmt.Errorf("glm5next: uploading the graph step's metadata: %w", err)
	}
	return nil
}

// pick returns the graph that runs batch b on cache c, or nil when b must
// run eagerly: not a plain decode step (one row per sequence, every row's
// logits in order, no hooks), more sequences than the largest size, or a
// block table wider than captured.
func (r *graphRunner) pick(c *Cache, b *Batch) *decodeGraph {
	L := &b.Layout
	B := L.NumSeqs()
	if c != r.cache || B < 1 || B > r.opt.Sizes[len(r.opt.Sizes)-1] || L.Rows() != B || len(b.Tokens) != B ||
		b.Observe != nil || b.ObserveIndex != nil || b.ObserveLinear != nil || L.BlockSize != c.BlockSize {
		return nil
	}
	if b.LogitRows != nil {
		if len(b.LogitRows) != B {
			return nil
		}
		for i, row := range b.LogitRows {
			if row != i {
				return nil
			}
		}
	}
	for s := range B {
		if L.SeqRows(s) != 1 || L.Pos[s]/c.BlockSize >= r.opt.MaxBlocks {
			return nil
		}
	}
	i, _ := slices.BinarySearch(r.opt.Sizes, B)
	return r.graphs[i]
}

// replay runs decode batch b through graph g and returns its logits
// [B, vocab] (a new tensor the caller frees), after the checks prepare
// makes of an eager step.
func (m *Model) replay(g *decodeGraph, c *Cache, b *Batch) *npu.Tensor {
	r, d, L := m.graphs, m.d, &b.Layout
	if err := L.Check(); err != nil {
		panic(fmt.Sprintf("glm5next: %v", err))
	}
	B := L.NumSeqs()
	seen := map[int]bool{}
	for s := range B {
		slot, blk := L.StateSlot[s], L.BlockTables[s][L.Pos[s]/c.BlockSize]
		if slot < 0 || slot >= c.StateSlots || seen[slot] || (slot >= r.opt.PadSlot && slot < r.opt.PadSlot+r.opt.PadSlots) {
			panic(fmt.Sprintf("glm5next: sequence %d state slot %d out of range [0, %d), shared or the graphs' padding slots", s, slot, c.StateSlots))
		}
		seen[slot] = true
		if blk < 0 || int(blk) >= c.NumBlocks || int(blk) == r.opt.PadBlock {
			panic(fmt.Sprintf("glm5next: sequence %d block %d outside the cache's %d or the graphs' padding block", s, blk, c.NumBlocks))
		}
		if id := b.Tokens[s]; id < 0 || int(id) >= d.V {
			panic(fmt.Sprintf("glm5next: token %d at row %d outside the vocabulary of %d", id, s, d.V))
		}
	}
	if err := r.upload(m, g, b); err != nil {
		fail(err)
	}
	// A one-token sequence at position 0 restarts its state, as prepare's
	// fresh slots do in an eager step (enqueued before the launch).
	for s := range B {
		if L.Pos[s] == 0 {
			slot := L.StateSlot[s]
			for l := range m.layers {
				if lc := &c.Layers[l]; lc.Conv != nil {
					if lc.Conv.Numel() > 0 {
						m.be.Fill(lc.Conv.Rows(slot, slot+1), 0)
					}
					m.be.Fill(lc.State.Rows(slot, slot+1), 0)
				}
			}
		}
	}
	if err := g.graph.Launch(); err != nil {
		fail(err)
	}
	r.replays++
	logits, err := m.be.Alloc(npu.F32, B, m.logitWidth())
	if err != nil {
		fail(err)
	}
	m.be.Copy(logits, g.step.logits.Rows(0, B))
	return logits
}

// replayable is the backend's npu.GraphLimiter verdict (nil without one).
func replayable(be npu.Backend) error {
	if l, ok := be.(npu.GraphLimiter); ok {
		return l.ReplayableOps()
	}
	return nil
}
