package glm5next

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/npuserve/npuserve/npu"
)

// SpecSeq is one sequence under MTP speculative decoding
// (glm5next-features.md §2.2): the trunk and MTP caches hold positions
// < Pos, Next is the last emitted token (position Pos, not yet in the
// cache) and Drafts the MTP's guesses for positions Pos+1.. (empty: the
// sequence decodes one token this step, as without speculation).
type SpecSeq struct {
	Slot   int     // state slot
	Blocks []int32 // block table covering every position the step writes (Pos+k)
	Pos    int
	Next   int32
	Drafts []int32
}

// Acceptor decides what a sequence emits from its verify logits: rows[j]
// are the target logits after [Next, d_1..d_j] (len(drafts)+1 rows); it
// returns the emitted tokens (the accepted drafts then one corrected or
// bonus token, 1..len(drafts)+1 of them; their count minus one is the
// accepted draft count).
type Acceptor func(seq int, rows [][]float32, drafts []int32) []int32

// SpecStep runs one speculative step for seqs: one target forward over
// [Next, d_1..d_k] of every sequence (k+1 rows, all logits), acceptance,
// rollback of the KDA conv window and recurrent state of sequences that
// rejected a draft, and the next drafts (k of them; k = 0 drafts nothing).
// Rollback is "backup and replay": before the verify forward each drafted
// sequence's KDA state is copied to its backup slot and the forward keeps
// every KDA layer's per-row inputs; a sequence that accepts a <
// len(Drafts) drafts gets the backup back and its a+1 accepted rows'
// inputs replayed through the KDA layers' convs and recurrences only
// (replayKDA, all such sequences together), so the state equals a+1 plain
// decode steps to fp32 rounding. DSA latents and pooled keys need no rollback: rows at positions
// >= Pos are rewritten before any valid query reads them, and a pool is
// recomputed by the batch that writes its last position.
// It returns the emitted tokens per sequence and updates Pos, Next and
// Drafts. The sync points are the verify logits' download and the drafts'
// download.
func (m *Model) SpecStep(c *Cache, seqs []*SpecSeq, k int, accept Acceptor) ([][]int32, error) {
	if m.mtp == nil && k > 0 {
		return nil, fmt.Errorf("glm5next: speculative decoding needs an MTP layer")
	}
	be := m.be
	var b Batch
	b.Layout = npu.BatchLayout{QueryStart: []int{0}, BlockSize: c.BlockSize}
	for _, s := range seqs {
		b.Tokens = append(b.Tokens, s.Next)
		b.Tokens = append(b.Tokens, s.Drafts...)
		m.addSeq(&b.Layout, s, 1+len(s.Drafts))
	}
	b.LogitRows = make([]int, len(b.Tokens))
	for i := range b.LogitRows {
		b.LogitRows[i] = i
	}
	var cp *kdaCapture
	for _, s := range seqs {
		if len(s.Drafts) > 0 {
			m.copyState(c, c.StateSlots+s.Slot, s.Slot)
			cp = newKDACapture(len(m.layers))
		}
	}
	m.kdaCap = cp
	logits, hidden, err := m.ForwardHidden(c, &b)
	m.kdaCap = nil
	if err != nil {
		return nil, err
	}
	defer be.Free(hidden)
	rows, err := DownloadRows(be, logits)
	be.Free(logits)
	if err != nil {
		return nil, err
	}
	out := make([][]int32, len(seqs))
	var replay Batch
	replay.Layout = npu.BatchLayout{QueryStart: []int{0}, BlockSize: c.BlockSize}
	replay.LogitRows = []int{}
	var replayRows []int32
	for i, s := range seqs {
		r0 := b.Layout.QueryStart[i]
		toks := accept(i, rows[r0:r0+1+len(s.Drafts)], s.Drafts)
		if len(toks) < 1 || len(toks) > len(s.Drafts)+1 {
			return nil, fmt.Errorf("glm5next: acceptor emitted %d tokens for %d drafts", len(toks), len(s.Drafts))
		}
		a := len(toks) - 1
		if a < len(s.Drafts) {
			m.copyState(c, s.Slot, c.StateSlots+s.Slot)
			replay.Tokens = append(replay.Tokens, s.Next)
			replay.Tokens = append(replay.Tokens, s.Drafts[:a]...)
			m.addSeq(&replay.Layout, s, a+1)
			for j := range a + 1 {
				replayRows = append(replayRows, int32(r0+j))
			}
		}
		out[i] = toks
	}
	if len(replay.Tokens) > 0 {
		if err := func() (err error) {
			defer func() {
				if e := stepFailure(recover()); e != nil {
					err = e
				}
			}()
			m.replayKDA(c, &replay, replayRows, cp)
			return nil
		}(); err != nil {
			return nil, err
		}
	}
	if k == 0 {
		for i, s := range seqs {
			s.Pos += len(out[i])
			s.Next, s.Drafts = out[i][len(out[i])-1], nil
		}
		return out, nil
	}
	// Draft-extend: the MTP over (h of the accepted verify rows, the token
	// after each), then the chain.
	var ext Batch
	ext.Layout = npu.BatchLayout{QueryStart: []int{0}, BlockSize: c.BlockSize}
	var hrows []int32
	for i, s := range seqs {
		r0 := b.Layout.QueryStart[i]
		for j := range out[i] {
			hrows = append(hrows, int32(r0+j))
		}
		ext.Tokens = append(ext.Tokens, out[i]...)
		m.addSeq(&ext.Layout, s, len(out[i]))
	}
	h := m.ws.get("spec.h", npu.F32, len(hrows), m.d.D)
	be.Gather(h, hidden, m.ws.upload("spec.hrows", hrows))
	for i, s := range seqs {
		s.Pos += len(out[i])
		s.Next = out[i][len(out[i])-1]
	}
	drafts, err := m.draft(c, &ext, h, seqs, k)
	if err != nil {
		return nil, err
	}
	for i, s := range seqs {
		s.Drafts = drafts[i]
	}
	return out, nil
}

// SpecPrefill runs the trunk over a new sequence's prompt (s.Pos = 0,
// s.Next unused), picks its first token with first (from the last row's
// logits), runs the MTP over the prompt and drafts k tokens. s then holds
// Pos = len(prompt), Next = the first token and the drafts.
func (m *Model) SpecPrefill(c *Cache, s *SpecSeq, prompt []int32, k int, first func(logits []float32) int32) error {
	var b Batch
	b.Layout = npu.BatchLayout{QueryStart: []int{0}, BlockSize: c.BlockSize}
	b.Tokens = prompt
	m.addSeq(&b.Layout, s, len(prompt))
	b.LogitRows = make([]int, len(prompt))
	for i := range b.LogitRows {
		b.LogitRows[i] = i
	}
	logits, hidden, err := m.ForwardHidden(c, &b)
	if err != nil {
		return err
	}
	defer m.be.Free(hidden)
	rows, err := DownloadRows(m.be, logits)
	m.be.Free(logits)
	if err != nil {
		return err
	}
	next := first(rows[len(rows)-1])
	if k == 0 {
		s.Pos, s.Next, s.Drafts = len(prompt), next, nil
		return nil
	}
	var ext Batch
	ext.Layout = b.Layout
	ext.Tokens = append(append([]int32{}, prompt[1:]...), next)
	s.Pos, s.Next = len(prompt), next
	d, err := m.draft(c, &ext, hidden, []*SpecSeq{s}, k)
	if err != nil {
		return err
	}
	s.Drafts = d[0]
	return nil
}

// draft runs the MTP extend batch ext (hidden h, one row per accepted
// position) and the k-1 chained steps (post-norm hidden recycled, greedy
// drafts chosen on the device), then downloads the k drafts per sequence.
// seqs already hold their new Pos (the chain writes positions Pos..Pos+k-2).
func (m *Model) draft(c *Cache, ext *Batch, h *npu.Tensor, seqs []*SpecSeq, k int) (drafts [][]int32, err error) {
	defer func() {
		if e := stepFailure(recover()); e != nil {
			drafts, err = nil, e
		}
	}()
	be, B := m.be, len(seqs)
	var keep *mtpShare
	if m.shareMTPIndex(k) {
		// Step 0's query rows are its logit rows: one per drafting sequence.
		rows := ext.LogitRows
		if rows == nil {
			L := &ext.Layout
			for s := range L.NumSeqs() {
				if L.SeqRows(s) > 0 {
					rows = append(rows, L.QueryStart[s+1]-1)
				}
			}
		}
		r32 := make([]int32, len(rows))
		for i, r := range rows {
			r32[i] = int32(r)
		}
		keep = &mtpShare{keep: m.ws.get("spec.sel0", npu.I32, B, m.d.SelW), keepRows: m.ws.upload("spec.sel0rows", r32)}
	}
	logits, g := m.mtpForward(c, ext, h, m.ws.upload("mtp.ids", ext.Tokens), keep)
	all := m.ws.get("spec.drafts", npu.I32, k, B)
	vals := m.ws.get("spec.topv", npu.F32, B, 1)
	be.TopK(vals, all.Rows(0, 1).Reshape(B, 1), logits, 1)
	be.Free(logits)
	var step Batch
	step.Tokens = make([]int32, B)
	for j := 1; j < k; j++ {
		step.Layout = npu.BatchLayout{QueryStart: []int{0}, BlockSize: c.BlockSize}
		for _, s := range seqs {
			sj := *s
			sj.Pos = s.Pos + j - 1
			m.addSeq(&step.Layout, &sj, 1)
		}
		gh := m.ws.get("spec.g", npu.F32, B, m.d.D)
		be.Copy(gh, g)
		be.Free(g)
		var l *npu.Tensor
		var use *mtpShare
		if keep != nil {
			use = &mtpShare{use: m.sharedSelection(keep.keep, seqs, j, k)}
		}
		l, g = m.mtpForward(c, &step, gh, all.Rows(j-1, j).Reshape(B), use)
		be.TopK(vals, all.Rows(j, j+1).Reshape(B, 1), l, 1)
		be.Free(l)
	}
	be.Free(g)
	host, err := npu.DownloadI32(be, all)
	if err != nil {
		return nil, err
	}
	drafts = make([][]int32, B)
	for i := range B {
		for j := range k {
			drafts[i] = append(drafts[i], host[j*B+i])
		}
	}
	return drafts, nil
}

// shareMTPIndex reports whether a k-token draft chain shares step 0's
// indexer selection (index_share_for_mtp_iteration, an MTP layer with its
// own indexer, more than one step).
func (m *Model) shareMTPIndex(k int) bool {
	return k > 1 && m.cfg.IndexShareForMTPIteration && !m.noMTPIndexShare && m.mtp.block.mla.idx != nil
}

// sharedSelection builds the selection of draft step j >= 1 from step 0's
// sel0 [B, SelW] (glm5next-features.md §2.1, "step 0 computes top-k,
// steps 1+ reuse"): for sequence i, whose step 0 query sat at position
// q0 = seqs[i].Pos-1, the positions of the pools step 0 chose (its first
// min(TopKPools, (q0+1)/kpool)*kpool entries, DSAIndex's order), then,
// with the tail rule, every position from step 0's tail start
// ((q0+1)/kpool*kpool) through the step's own position q0+j, so each step
// still sees itself and the drafts before it; -1 pads the row. The width
// is SelW + k - 1 (the tail grows by one per step). The pool entries are
// copied on the device (gather then scatter); the rest is host data.
// The chain rows' index keys and pools are not written: every chain
// position is rewritten by the next draft-extend before an indexer reads
// it.
func (m *Model) sharedSelection(sel0 *npu.Tensor, seqs []*SpecSeq, j, k int) *npu.Tensor {
	B, sw := len(seqs), m.d.SelW
	W := sw + k - 1
	kp, topk := m.index.KPool, m.index.TopKPools
	words := make([]int32, B*W)
	for i := range words {
		words[i] = -1
	}
	var src, dst []int32
	for i, s := range seqs {
		q0 := s.Pos - 1
		vis := (q0 + 1) / kp
		n := min(topk, vis) * kp
		for c := range n {
			src = append(src, int32(i*sw+c))
			dst = append(dst, int32(i*W+c))
		}
		if m.index.Tail {
			for pos := vis * kp; pos <= q0+j; pos++ {
				words[i*W+n] = int32(pos)
				n++
			}
		}
	}
	use := m.ws.upload("spec.selj", words).Reshape(B, W)
	if len(src) > 0 {
		vals := m.ws.get("spec.selvals", npu.I32, len(src), 1)
		m.be.Gather(vals, sel0.Reshape(B*sw, 1), m.ws.upload("spec.selsrc", src))
		m.be.Scatter(use.Reshape(B*W, 1), vals, m.ws.upload("spec.seldst", dst))
	}
	return use
}

// addSeq appends sequence s with n rows at s.Pos to layout l.
func (m *Model) addSeq(l *npu.BatchLayout, s *SpecSeq, n int) {
	l.QueryStart = append(l.QueryStart, l.QueryStart[len(l.QueryStart)-1]+n)
	l.Pos = append(l.Pos, s.Pos)
	l.StateSlot = append(l.StateSlot, s.Slot)
	l.BlockTables = append(l.BlockTables, s.Blocks)
}

// copyState copies the KDA conv window and recurrent state of slot src to
// slot dst (rows of the cache's doubled KDA tensors).
func (m *Model) copyState(c *Cache, dst, src int) {
	for l := range c.Layers {
		lc := &c.Layers[l]
		if lc.State == nil {
			continue
		}
		if lc.Conv.Numel() > 0 {
			m.be.Copy(lc.Conv.Rows(dst, dst+1), lc.Conv.Rows(src, src+1))
		}
		m.be.Copy(lc.State.Rows(dst, dst+1), lc.State.Rows(src, src+1))
	}
}

// GreedyAccept is the greedy acceptance rule (vLLM
// rejection_greedy_sample): accept drafts while each equals the argmax of
// the row before it; emit the argmax at the first mismatch, or the bonus
// argmax of the last row when all match.
func GreedyAccept(rows [][]float32, drafts []int32) []int32 {
	var out []int32
	for j, r := range rows {
		t := int32(argmax(r))
		out = append(out, t)
		if j == len(drafts) || t != drafts[j] {
			break
		}
	}
	return out
}

// RejectionAccept is the rejection sampler for greedy (point-mass) drafts
// at temperature > 0 (vLLM rejection_random_sample with NO_DRAFT_PROBS):
// draft d_j is accepted with probability p_{j-1}(d_j); on rejection a token
// is drawn from p_{j-1} with d_j removed (normalize(max(p - q, 0)) for a
// one-hot q); after k acceptances the bonus token is drawn from p_k. p are
// softmax(logits / temperature). The emitted tokens are distributed
// exactly as temperature sampling without speculation; r is the
// request's seeded generator.
func RejectionAccept(rows [][]float32, drafts []int32, temperature float64, r *rand.Rand) []int32 {
	var out []int32
	for j, row := range rows {
		p := softmaxT(row, temperature)
		if j == len(drafts) {
			return append(out, sampleFrom(p, r))
		}
		d := drafts[j]
		if r.Float64() < p[d] {
			out = append(out, d)
			continue
		}
		p[d] = 0
		return append(out, sampleFrom(p, r))
	}
	return out
}

// softmaxT is softmax(logits / t) in float64.
func softmaxT(logits []float32, t float64) []float64 {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, float64(v))
	}
	p := make([]float64, len(logits))
	sum := 0.0
	for i, v := range logits {
		p[i] = math.Exp((float64(v) - mx) / t)
		sum += p[i]
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}

// sampleFrom draws an index from the unnormalised weights p.
func sampleFrom(p []float64, r *rand.Rand) int32 {
	sum := 0.0
	for _, v := range p {
		sum += v
	}
	u := r.Float64() * sum
	last := int32(0)
	for i, v := range p {
		if v > 0 {
			last = int32(i)
		}
		if u < v {
			return int32(i)
		}
		u -= v
	}
	return last
}

// kdaCapture keeps a verify forward's KDA inputs per layer and row: the
// pre-conv q|k|v projection, the log-decay g and beta (after the
// sigmoid), in scratch buffers that live until the next capture.
// Rollback then replays only the KDA layers' conv windows and recurrences
// over the accepted rows (replayKDA) instead of the whole trunk: the KDA
// state depends on nothing else.
type kdaCapture struct {
	qkv, g, beta []*npu.Tensor // by layer index; nil for DSA layers
}

func newKDACapture(layers int) *kdaCapture {
	return &kdaCapture{qkv: make([]*npu.Tensor, layers), g: make([]*npu.Tensor, layers), beta: make([]*npu.Tensor, layers)}
}

// keep copies layer l's inputs.
func (cp *kdaCapture) keep(m *Model, l int, qkv, g, beta *npu.Tensor) {
	get := func(what string, x *npu.Tensor) *npu.Tensor {
		t := m.ws.get(fmt.Sprintf("spec.cap.%s.%d", what, l), npu.F32, x.Dim(0), x.Dim(1))
		m.be.Copy(t, x)
		return t
	}
	cp.qkv[l], cp.g[l], cp.beta[l] = get("qkv", qkv), get("g", g), get("beta", beta)
}

// replayKDA advances the KDA conv windows and recurrent states of the
// sequences of batch b (their accepted rows, states restored from the
// backup) through the captured inputs of the verify rows rows (one per row
// of b, in order): the same Conv1d/Conv1dUpdate and KDA ops a forward of
// b runs, on inputs computed by the verify forward's (k+1)-row linears, so
// the states equal a replay forward's to fp32 rounding. No other layer
// runs and nothing is written to the DSA caches.
func (m *Model) replayKDA(c *Cache, b *Batch, rows []int32, cp *kdaCapture) {
	be, d := m.be, m.d
	p := m.prepare(c, b)
	T := p.rows
	if T == 0 {
		return
	}
	hk := d.H * d.K
	idx := m.ws.upload("spec.replay.rows", rows)
	for l, ly := range m.layers {
		if ly.kda == nil {
			continue
		}
		if cp.qkv[l] == nil {
			panic(fmt.Sprintf("glm5next: KDA layer %d has no captured inputs to replay", l))
		}
		lc := &c.Layers[l]
		qkv := m.ws.get("kda.qkv", npu.F32, T, 3*hk)
		g := m.ws.get("kda.g", npu.F32, T, hk)
		beta := m.ws.get("kda.beta", npu.F32, T, d.H)
		be.Gather(qkv, cp.qkv[l], idx)
		be.Gather(g, cp.g[l], idx)
		be.Gather(beta, cp.beta[l], idx)
		u := m.ws.get("kda.conv", npu.F32, T, 3*hk)
		chunk := kdaChunk
		if p.decode {
			be.Conv1dUpdate(u, qkv, lc.Conv, ly.kda.conv, p.seqs, true)
			chunk = 0
		} else {
			be.Conv1d(u, qkv, lc.Conv, ly.kda.conv, p.seqs, true)
		}
		o := m.ws.get("kda.o", npu.F32, T, hk)
		be.KDA(o, u, g, beta, lc.State, p.seqs, d.H, d.K, chunk)
	}
}
