package glm5next

import (
	"errors"
	"fmt"

	"github.com/npuserve/npuserve/engine/model"
	"github.com/npuserve/npuserve/npu"
)

var _ model.SpecCollective = engineModel{}

// specPending is a SpecForward batch awaiting its SpecCommit.
type specPending struct {
	tokens   []int32
	layout   npu.BatchLayout
	hidden   *npu.Tensor // [rows, D] final normed hidden of every row
	backedUp map[int]bool
	kda      *kdaCapture // the KDA inputs of every row (nil: nothing backed up)
}

// CanDraft reports whether the model has an MTP layer (model.Speculative).
func (e engineModel) CanDraft() bool { return e.mtp != nil }

// SpecForward backs up the KDA state of the sequences in backup and runs
// the trunk over b keeping every row's hidden state (model.Speculative).
func (e engineModel) SpecForward(mc model.Cache, b *model.Batch, backup []int) (*npu.Tensor, error) {
	m, c := e.Model, mc.(*Cache)
	if m.mtp == nil {
		return nil, errors.New("glm5next: speculative decoding needs an MTP layer")
	}
	m.dropPending()
	p := &specPending{tokens: append([]int32(nil), b.Tokens...), layout: cloneLayout(&b.Layout), backedUp: map[int]bool{}}
	for _, i := range backup {
		slot := b.Layout.StateSlot[i]
		m.copyState(c, c.StateSlots+slot, slot)
		p.backedUp[i] = true
	}
	if len(backup) > 0 {
		p.kda = newKDACapture(len(m.layers))
	}
	m.kdaCap = p.kda
	defer func() { m.kdaCap = nil }()
	logits, hidden, err := func() (logits, hidden *npu.Tensor, err error) {
		defer func() {
			if e := stepFailure(recover()); e != nil {
				logits, hidden, err = nil, nil, e
			}
		}()
		logits, hidden = m.forward(c, b, hiddenAllRows)
		return logits, hidden, nil
	}()
	if err != nil {
		return nil, err
	}
	p.hidden = hidden
	m.pending = p
	return logits, nil
}

// dropPending frees a speculative step that was never committed.
func (m *Model) dropPending() {
	if m.pending != nil {
		if m.pending.hidden != nil {
			m.be.Free(m.pending.hidden)
		}
		m.pending = nil
	}
}

// cloneLayout copies l's slices (block tables stay aliased).
func cloneLayout(l *npu.BatchLayout) npu.BatchLayout {
	return npu.BatchLayout{
		QueryStart: append([]int(nil), l.QueryStart...), Pos: append([]int(nil), l.Pos...),
		StateSlot: append([]int(nil), l.StateSlot...), BlockSize: l.BlockSize,
		BlockTables: append([][]int32(nil), l.BlockTables...),
	}
}

// SpecCommit rolls back and replays the sequences that rejected drafts,
// runs the MTP layer over every listed sequence's kept rows and drafts
// sc.K tokens for those that ask (model.Speculative). The drafts'
// download is its sync point.
func (e engineModel) SpecCommit(mc model.Cache, sc *model.SpecCommit) (drafts [][]int32, err error) {
	m, c := e.Model, mc.(*Cache)
	p := m.pending
	if p == nil {
		return nil, errors.New("glm5next: SpecCommit without SpecForward")
	}
	defer m.dropPending()
	defer func() {
		if e := stepFailure(recover()); e != nil {
			drafts, err = nil, e
		}
	}()
	be, L := m.be, &p.layout
	seqOf := func(s model.SpecCommitSeq) *SpecSeq {
		return &SpecSeq{Slot: L.StateSlot[s.Seq], Blocks: s.BlockTable, Pos: L.Pos[s.Seq]}
	}
	// Rollback: backup back, accepted rows replayed.
	var replay Batch
	replay.Layout = npu.BatchLayout{QueryStart: []int{0}, BlockSize: c.BlockSize}
	replay.LogitRows = []int{}
	var replayRows []int32
	for _, s := range sc.Seqs {
		n := L.SeqRows(s.Seq)
		if s.Kept < 0 || s.Kept > n || len(s.Next) != s.Kept {
			return nil, fmt.Errorf("glm5next: SpecCommit keeps %d of %d rows with %d next tokens", s.Kept, n, len(s.Next))
		}
		if s.Kept < n && p.backedUp[s.Seq] {
			ss := seqOf(s)
			m.copyState(c, ss.Slot, c.StateSlots+ss.Slot)
			r0 := L.QueryStart[s.Seq]
			replay.Tokens = append(replay.Tokens, p.tokens[r0:r0+s.Kept]...)
			m.addSeq(&replay.Layout, ss, s.Kept)
			for j := range s.Kept {
				replayRows = append(replayRows, int32(r0+j))
			}
		}
	}
	if len(replay.Tokens) > 0 {
		m.replayKDA(c, &replay, replayRows, p.kda)
	}
	// Draft-extend over the kept rows (row t carries token t+1).
	var ext Batch
	ext.Layout = npu.BatchLayout{QueryStart: []int{0}, BlockSize: c.BlockSize}
	ext.LogitRows = []int{}
	var hrows []int32
	var drafting []*SpecSeq
	var at []int
	for i, s := range sc.Seqs {
		if s.Kept == 0 {
			continue
		}
		r0 := L.QueryStart[s.Seq]
		for j := range s.Kept {
			hrows = append(hrows, int32(r0+j))
		}
		ext.Tokens = append(ext.Tokens, s.Next...)
		ss := seqOf(s)
		m.addSeq(&ext.Layout, ss, s.Kept)
		if s.Draft && sc.K > 0 {
			ext.LogitRows = append(ext.LogitRows, len(ext.Tokens)-1)
			ss.Pos += s.Kept
			drafting = append(drafting, ss)
			at = append(at, i)
		}
	}
	drafts = make([][]int32, len(sc.Seqs))
	// An expert-parallel rank runs the MTP layer sc.K times in every step
	// (model.SpecCollective): the forwards below, then idle ones.
	forwards := 0
	pad := func() {
		if m.par.ep() {
			for ; forwards < sc.K; forwards++ {
				m.idleMTP()
			}
		}
	}
	if len(hrows) == 0 {
		pad()
		return drafts, nil
	}
	h := m.ws.get("spec.h", npu.F32, len(hrows), m.d.D)
	be.Gather(h, p.hidden, m.ws.upload("spec.hrows", hrows))
	if len(drafting) == 0 {
		l, g := m.mtpForward(c, &ext, h, m.ws.upload("mtp.ids", ext.Tokens), nil)
		forwards++
		be.Free(l)
		be.Free(g)
		pad()
		return drafts, nil
	}
	d, err := m.draft(c, &ext, h, drafting, sc.K)
	if err != nil {
		return nil, err
	}
	forwards += sc.K
	pad()
	for j, i := range at {
		drafts[i] = d[j]
	}
	return drafts, nil
}

// SpecDummyStep runs DummyStep, then k MTP forwards without rows
// (model.SpecCollective): an expert-parallel rank with nothing scheduled
// still serves the other ranks' rows in every MoE of their speculative
// step.
func (e engineModel) SpecDummyStep(mc model.Cache, k int) (err error) {
	m := e.Model
	if m.mtp == nil {
		return errors.New("glm5next: speculative decoding needs an MTP layer")
	}
	if err := m.DummyStep(mc.(*Cache)); err != nil {
		return err
	}
	defer func() {
		if e := stepFailure(recover()); e != nil {
			err = e
		}
	}()
	for range k {
		m.idleMTP()
	}
	return nil
}
