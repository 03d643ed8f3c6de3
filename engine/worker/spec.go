package worker

import (
	"errors"
	"fmt"

	"github.com/npuserve/npuserve/engine/model"
	"github.com/npuserve/npuserve/engine/model/glm5next"
	"github.com/npuserve/npuserve/npu"
)

// MTP speculative decoding in a TP group: the leader broadcasts each
// SpecForward (the batch and the sequences to back up), SpecCommit (what
// every sequence keeps and the tokens after them) and SpecDummyStep, and
// the followers run them on their shards. Every rank then reaches the
// same collectives (the trunk's, then the MTP layer's, whose logits are
// gathered whole on every rank so that every rank drafts the same ids);
// only the leader's drafts are used.

var _ model.SpecCollective = (*Leader)(nil)

// CanDraft implements model.Speculative.
func (l *Leader) CanDraft() bool { return l.m.HasMTP() }

// spec is the leader's own model as a speculative one.
func (l *Leader) spec() (model.SpecCollective, error) {
	sm, ok := l.m.Engine().(model.SpecCollective)
	if !ok || !l.m.HasMTP() {
		return nil, errors.New("worker: speculative decoding needs a model with an MTP layer")
	}
	return sm, nil
}

// SpecForward implements model.Speculative. The logits come back as
// whole rows: the speculative step samples from them on the host.
func (l *Leader) SpecForward(c model.Cache, b *model.Batch, backup []int) (*npu.Tensor, error) {
	sm, err := l.spec()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	err = l.sendSpec(cmdSpecForward, len(backup), "a speculative batch", func(dst []int32) []int32 {
		dst = encodeBatch(dst, b)
		for _, i := range backup {
			dst = append(dst, int32(i))
		}
		return dst
	})
	if err != nil {
		return nil, err
	}
	logits, err := sm.SpecForward(c, b, backup)
	if err != nil || l.tp == nil {
		return logits, err
	}
	if _, _, sharded := l.m.VocabShard(); !sharded {
		return logits, nil
	}
	defer l.m.Backend().Free(logits)
	if err := l.send(cmdGather, 0, 0, 0); err != nil {
		return nil, err
	}
	full, err := l.m.GatherShards(logits)
	if err != nil {
		return nil, collectiveFailed("gathering the logits", err)
	}
	return full, nil
}

// SpecCommit implements model.Speculative.
func (l *Leader) SpecCommit(c model.Cache, sc *model.SpecCommit) ([][]int32, error) {
	sm, err := l.spec()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.sendSpec(cmdSpecCommit, 0, "a speculative commit", func(dst []int32) []int32 { return encodeCommit(dst, sc) }); err != nil {
		return nil, err
	}
	return sm.SpecCommit(c, sc)
}

// sendSpec broadcasts a speculative command to the followers with the
// payload enc appends (l.mu held; nothing with TP 1).
func (l *Leader) sendSpec(cmd, a int, what string, enc func([]int32) []int32) error {
	if l.tp == nil {
		return nil
	}
	l.enc = enc(l.enc[:0])
	return l.sendPayload(cmd, a, l.enc, 0, what)
}

// SpecDummyStep implements model.SpecCollective.
func (l *Leader) SpecDummyStep(c model.Cache, k int) error {
	sm, err := l.spec()
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.send(cmdSpecDummy, k, 0, 0); err != nil {
		return err
	}
	return sm.SpecDummyStep(c, k)
}

// follower is the state of Follow's loop that the speculative commands
// share with the others.
type follower struct {
	m       *glm5next.Model
	payload *npu.Tensor // I32 scratch
	last    *npu.Tensor // the last forward's sharded logits
	cache   *glm5next.Cache
}

// specModel is the follower's model as a speculative one.
func (f *follower) specModel() (model.SpecCollective, error) {
	sm, ok := f.m.Engine().(model.SpecCollective)
	if !ok || !f.m.HasMTP() {
		return nil, errors.New("a speculative step on a model without an MTP layer")
	}
	if f.cache == nil {
		return nil, errors.New("a speculative step before any cache")
	}
	return sm, nil
}

// specForward runs the leader's SpecForward (cmdSpecForward): words are
// the batch's encoding followed by nb backed-up sequence indices.
func (f *follower) specForward(words []int32, nb int) error {
	sm, err := f.specModel()
	if err != nil {
		return err
	}
	if nb < 0 || nb > len(words) {
		return fmt.Errorf("a speculative batch with %d backups in %d words", nb, len(words))
	}
	b, err := decodeBatch(words[:len(words)-nb])
	if err != nil {
		return err
	}
	backup := make([]int, nb)
	for i, v := range words[len(words)-nb:] {
		if v < 0 || int(v) >= b.Layout.NumSeqs() {
			return fmt.Errorf("backup of sequence %d in a batch of %d", v, b.Layout.NumSeqs())
		}
		backup[i] = int(v)
	}
	f.dropLast()
	logits, err := sm.SpecForward(f.cache, b, backup)
	if err != nil {
		return err
	}
	if _, _, sharded := f.m.VocabShard(); sharded {
		f.last = logits // the leader gathers it next
	} else {
		f.m.Backend().Free(logits)
	}
	return nil
}

// specCommit runs the leader's SpecCommit (cmdSpecCommit).
func (f *follower) specCommit(words []int32) error {
	sm, err := f.specModel()
	if err != nil {
		return err
	}
	sc, err := decodeCommit(words)
	if err != nil {
		return err
	}
	_, err = sm.SpecCommit(f.cache, sc)
	return err
}

// specDummy runs the leader's SpecDummyStep (cmdSpecDummy).
func (f *follower) specDummy(k int) error {
	sm, err := f.specModel()
	if err != nil {
		return err
	}
	return sm.SpecDummyStep(f.cache, k)
}

// dropLast frees the last forward's sharded logits.
func (f *follower) dropLast() {
	if f.last != nil {
		f.m.Backend().Free(f.last)
		f.last = nil
	}
}

// SpecCommit encoding: [K, seqs] then per sequence Seq, Kept, Draft (0 or
// 1), the block table's length, the block table and the Kept next tokens.

// encodeCommit appends sc's encoding to dst.
func encodeCommit(dst []int32, sc *model.SpecCommit) []int32 {
	dst = append(dst, int32(sc.K), int32(len(sc.Seqs)))
	for _, s := range sc.Seqs {
		d := int32(0)
		if s.Draft {
			d = 1
		}
		dst = append(dst, int32(s.Seq), int32(s.Kept), d, int32(len(s.BlockTable)))
		dst = append(dst, s.BlockTable...)
		dst = append(dst, s.Next...)
	}
	return dst
}

// decodeCommit rebuilds a SpecCommit from its encoding.
func decodeCommit(w []int32) (*model.SpecCommit, error) {
	r := reader{w: w}
	k, n := int(r.next()), int(r.next())
	if r.err != nil || k < 0 || n < 0 || n > len(w) {
		return nil, errors.New("malformed speculative commit header")
	}
	sc := &model.SpecCommit{K: k, Seqs: make([]model.SpecCommitSeq, n)}
	for i := range sc.Seqs {
		seq, kept, d, nb := int(r.next()), int(r.next()), r.next(), int(r.next())
		if r.err != nil || seq < 0 || kept < 0 || (d != 0 && d != 1) || nb < 0 {
			return nil, fmt.Errorf("malformed speculative commit entry %d", i)
		}
		sc.Seqs[i] = model.SpecCommitSeq{Seq: seq, Kept: kept, Draft: d == 1, BlockTable: r.take(nb), Next: r.take(kept)}
	}
	if r.err != nil {
		return nil, r.err
	}
	if len(r.w) != 0 {
		return nil, fmt.Errorf("%d trailing words after the speculative commit", len(r.w))
	}
	return sc, nil
}
