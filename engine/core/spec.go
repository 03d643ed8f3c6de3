package core

import (
	"errors"
	"fmt"
	"time"

	"github.com/npuserve/npuserve/engine/model"
	"github.com/npuserve/npuserve/engine/sampling"
	"github.com/npuserve/npuserve/engine/scheduler"
)

// MaxSpeculativeTokens bounds Options.NumSpeculativeTokens (vllm-ascend
// runs GLM-5 MTP with up to 5).
const MaxSpeculativeTokens = 5

// checkSpeculative validates Options.NumSpeculativeTokens against the
// model and the deployment.
func checkSpeculative(m Model, opt *Options) (model.Speculative, error) {
	k := opt.NumSpeculativeTokens
	if k == 0 {
		return nil, nil
	}
	if k < 0 || k > MaxSpeculativeTokens {
		return nil, fmt.Errorf("engine: num_speculative_tokens %d must be in [1, %d]", k, MaxSpeculativeTokens)
	}
	sm, ok := m.(model.Speculative)
	if !ok || !sm.CanDraft() {
		return nil, errors.New("engine: speculative decoding needs a model with an MTP draft layer (load it with the speculative config)")
	}
	if _, ok := m.(model.SpecCollective); opt.Lockstep != nil && !ok {
		return nil, errors.New("engine: speculative decoding in a DP lockstep group needs a model whose speculative steps keep the ranks' collectives in step (model.SpecCollective)")
	}
	return sm, nil
}

// specEntry is one scheduled sequence of a speculative step.
type specEntry struct {
	sc     scheduler.Scheduled
	rs     *reqState
	seq    int // index in the batch layout
	logit0 int // first logit row (sampling sequences)
}

// stepSpec runs a scheduled step with speculative decoding: one target
// forward over every sequence's rows (prefill chunks, decodes, and the
// drafts of the decodes that verify), the host sync (all logit rows),
// acceptance by sampling the verify rows in order with the request's own
// sampler until a sample differs from the draft or the sequence stops, then
// SpecCommit: rollback of rejected rows, the MTP layer over the kept rows
// and the next drafts (their download is the second sync point).
//
// Acceptance this way is lossless for every sampling setting: each
// emitted token is drawn from the target's processed distribution given
// the true prefix, with the request's generator consumed one draw per
// emitted token exactly as without speculation, so a seeded request emits
// the same tokens with and without speculation (the Gumbel-style
// invariant of glm5next-features.md §2.5). A draft d is accepted with
// probability p(d), the rejection sampler's rate for point-mass drafts.
func (e *Engine) stepSpec(st *scheduler.Step, ss StepStats, start time.Time) (bool, error) {
	k := e.opt.NumSpeculativeTokens
	e.tokens, e.seqs, e.rows = e.tokens[:0], e.seqs[:0], e.rows[:0]
	e.logitRows = e.logitRows[:0]
	var backup []int
	entries := make([]specEntry, 0, len(st.Seqs))
	for i, sc := range st.Seqs {
		e.tokens = append(e.tokens, sc.Tokens()...)
		e.tokens = append(e.tokens, sc.Drafts...)
		e.seqs = append(e.seqs, sc.Req.Seq())
		e.rows = append(e.rows, sc.NumTokens+len(sc.Drafts))
		en := specEntry{sc: sc, rs: sc.Req.Data.(*reqState), seq: i, logit0: -1}
		if len(sc.Drafts) > 0 {
			backup = append(backup, i)
		}
		if sc.Sample {
			en.logit0 = len(e.logitRows)
			for j := len(sc.Drafts); j >= 0; j-- {
				e.logitRows = append(e.logitRows, len(e.tokens)-1-j)
			}
		}
		entries = append(entries, en)
	}
	batch := &model.Batch{Tokens: e.tokens, Layout: e.kv.Layout(e.seqs, e.rows), LogitRows: e.logitRows}
	tf := time.Now()
	ss.Schedule = tf.Sub(start)
	logits, err := e.spec.SpecForward(e.cache, batch, backup)
	if err != nil {
		return false, err
	}
	ts := time.Now()
	ss.Forward = ts.Sub(tf)
	rows, err := model.DownloadRows(e.be, logits)
	e.be.Free(logits)
	if err != nil {
		return false, err
	}

	now := time.Now()
	commit := &model.SpecCommit{K: k}
	var drafting []*reqState
	var maxDrafts []int
	for _, en := range entries {
		rs, sc := en.rs, en.sc
		if !sc.Sample {
			// A prefill chunk: the MTP rows take the prompt's next tokens.
			toks := rs.sr.Tokens()
			commit.Seqs = append(commit.Seqs, model.SpecCommitSeq{Seq: en.seq, Kept: sc.NumTokens,
				Next: toks[sc.Start+1 : sc.Start+sc.NumTokens+1], BlockTable: rs.sr.Seq().Blocks()})
			continue
		}
		ss.NumSampled++
		var toks []sampling.Token
		var serr error
		reason, stop := sampling.NotFinished, int32(-1)
		for j := 0; j <= len(sc.Drafts); j++ {
			tok, err := rs.sampler.Sample(rows[en.logit0+j])
			if err != nil {
				serr = err
				break
			}
			toks = append(toks, tok)
			reason, stop = e.checkStop(rs, len(toks))
			if reason != sampling.NotFinished || j == len(sc.Drafts) || tok.ID != sc.Drafts[j] {
				break
			}
		}
		accepted := 0
		for accepted < len(toks) && accepted < len(sc.Drafts) && toks[accepted].ID == sc.Drafts[accepted] {
			accepted++
		}
		e.specN.Observe(len(sc.Drafts), accepted)
		if serr != nil {
			e.finish(rs, "error", fmt.Errorf("engine: request %s: %w", rs.id, serr), now)
			continue
		}
		ids := make([]int32, len(toks))
		for j, t := range toks {
			ids[j] = t.ID
		}
		if len(sc.Drafts) > 0 {
			e.sched.AppendVerified(rs.sr, ids)
		} else {
			e.sched.AppendToken(rs.sr, ids[0])
		}
		e.counters.generation += int64(len(ids))
		if rs.m.FirstToken.IsZero() {
			rs.m.FirstToken = now
			e.counters.prompt += int64(rs.m.PromptTokens)
		}
		rs.m.LastToken = now
		out := Output{RequestID: rs.id, Tokens: ids, PromptTokens: rs.m.PromptTokens, Time: now}
		if rs.wantLP {
			out.Logprobs = toks
		}
		if reason != sampling.NotFinished {
			if reason == sampling.FinishStop {
				id := ids[len(ids)-1]
				out.StopToken, out.EOS = &id, stop < 0
			}
			e.complete(rs, out, reason.String(), nil, now)
			continue
		}
		rs.out.push(out)
		// The next drafts: as many as the request may still emit beyond
		// the next token and the context window holds, when the cache has
		// the lookahead (the chain writes up to k-1 positions ahead, the
		// verify k+1).
		d := min(k, e.opt.MaxModelLen-len(rs.sr.Tokens()))
		if mt := rs.sr.MaxTokens(); mt > 0 {
			d = min(d, mt-rs.sr.NumOutputTokens()-1)
		}
		want := d > 0 && e.kv.Reserve(rs.sr.Seq(), k+1) == nil
		kept := len(ids)
		next := ids
		if len(sc.Drafts) == 0 && sc.NumTokens > 1 {
			// The last prefill chunk: the prompt's next tokens, then the
			// sampled one.
			all := rs.sr.Tokens()
			kept, next = sc.NumTokens, all[sc.Start+1:sc.Start+sc.NumTokens+1]
		}
		commit.Seqs = append(commit.Seqs, model.SpecCommitSeq{Seq: en.seq, Kept: kept, Next: next, Draft: want, BlockTable: rs.sr.Seq().Blocks()})
		if want {
			drafting = append(drafting, rs)
			maxDrafts = append(maxDrafts, d)
		} else {
			drafting = append(drafting, nil)
			maxDrafts = append(maxDrafts, 0)
		}
	}
	ts2 := time.Now()
	ss.Sample = ts2.Sub(ts)
	drafts, err := e.spec.SpecCommit(e.cache, commit)
	if err != nil {
		return false, err
	}
	// drafting and maxDrafts are aligned with the sampling entries of
	// commit.Seqs, which come in entry order after the prefill chunks
	// interleaved; walk commit.Seqs to match them.
	di := 0
	for i, cs := range commit.Seqs {
		en := entries[cs.Seq]
		if !en.sc.Sample {
			continue
		}
		rs, d := drafting[di], maxDrafts[di]
		di++
		if rs != nil && len(drafts[i]) >= d {
			e.sched.SetDrafts(rs.sr, drafts[i][:d:d])
		}
	}
	ss.Draft = time.Since(ts2)
	e.cur = e.cur[:0]
	e.counters.steps++
	ss.Total = time.Since(start)
	if e.opt.OnStep != nil {
		e.opt.OnStep(ss)
	}
	return true, nil
}
