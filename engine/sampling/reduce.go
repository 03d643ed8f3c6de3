package sampling

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/npuserve/npuserve/npu"
)

// Sampling from a reduced row.
//
// A greedy request's token is the argmax of the processed row, and its
// logits processors (min_tokens masking, logit bias, the repetition,
// frequency and presence penalties) change only a known set T of ids: the
// stop and EOS ids while min_tokens holds, the biased ids, the prompt ids
// (repetition penalty) and the output ids (any penalty). Every other id
// keeps its raw value. So the processed argmax is either an id of T, at its
// processed value, or the best untouched id at its raw value, and the best
// untouched id is the first id outside T among the raw row's top |T|+1
// (under the TopK order of npu: larger value first, ties to the lower id,
// NaN last, the order argmax breaks ties in; -0 and +0 are equal in both).
// With the raw values of T the host replays the processors exactly (same
// float32 operations in the same order, so the same bits and the same
// first error), and with the row's counts of NaN and +Inf it keeps Sample's
// errors: a NaN or +Inf anywhere in the processed row is ErrBadLogits, a
// row left all -Inf is ErrAllMasked. A device implements the reduction as
// npu.SampleReducer; what crosses to the host per row is k values and ids,
// two counts and |T| values instead of the vocabulary row.
//
// Random sampling with top-k (1 <= top_k <= MaxReducedTopK, top_k < V),
// with or without min-p and top-p, reduces the same way: Sample's
// arithmetic after the top-k selection reads only the kept candidates
// (the k best processed logits and every tie at the k-th value), most
// likely first; the untouched ids the reduction did not hold all rank
// after its last candidate, at or below that candidate's raw value b, so
// when the k-th best value held is above b, the held values are the whole
// kept set and the host replays the selection's sums and the draw on them
// exactly. Min-p without top-k reduces too: Sample's histogram, top-p cut
// and draw skip every token below min_p times the most likely one's
// probability, so when b itself is below that bound (by a margin that
// covers the weights' rounding), the survivors held, in id order, give the
// same histogram sums in the same order and the same draw. A reduction
// that misses a piece (ties at the k-th value running past the held
// candidates, more min-p survivors than were held) is ErrNotReducible
// before anything is drawn or recorded: the caller samples that row
// whole, which gives the same token, since nothing of the request moved.
//
// With a device that answers queries (npu.SampleHistogrammer, through
// SampleRounds' Asker) more reduces, in rounds of a few kilobytes each.
// Random sampling without top-k and without min-p (plain temperature,
// top-p) takes the processed row's histogram from the device: the raw
// row's integer bin sums at the processed maximum, corrected exactly for
// the touched ids (their raw fractions out, their processed ones in); the
// top-p cut and the draw then ask for the members of the one or two bins
// they look inside (the device's raw entries of the bin, touched ids
// replaced by their processed values). Logprobs take the raw row's
// histogram at temperature 1 (its mass is the log-sum-exp's sum, the same
// integers in the same order as Sample's) and the members of the sampled
// token's raw bin with the count of entries in the bins before it (its
// rank); the top logprobs are the raw row's first candidates. Rows asking
// for every logprob (logprobs -1 or the vocabulary) and bins with more
// members than a device returns (MaxBinMembers) are sampled whole.

// MaxReducedTopK is the largest top_k with which a random request reduces
// (Reducible).
const MaxReducedTopK = 1024

// ReducedMinPCandidates is how many candidates (beyond the touched ids)
// Reducible asks for a min-p request without top-k: rows whose min-p
// survivors outnumber them are sampled whole.
const ReducedMinPCandidates = 1024

// reducedTieSlack is how many candidates beyond top_k + |T| Reducible
// asks for a top-k request, so that ties at the k-th value rarely run
// past the reduction.
const reducedTieSlack = 32

// minPMargin is the relative margin by which the reduction's last
// candidate must fall below min-p for every smaller logit to fall below
// it too: the weight is monotone to within ~6e-11 relative (the
// fixed-point fraction's 34 bits, the Taylor polynomial's truncation at
// bin edges and the table's rounding; npu.SampleBin).
const minPMargin = 1e-9

// MaxReducedTouched is the largest touched set T for which Reducible
// accepts a request: beyond it the top-(|T|+1) selection and the gather of
// T cost more than they save, and the host's replay touches as many ids as
// the full row's would.
const MaxReducedTouched = 256

// ErrNotReducible reports a SampleReduced call that cannot be decided from
// its Reduced row: the request wants logprobs, or the row lacks what the
// request needs (too few candidates, ties at top-k's k-th value or min-p
// survivors running past them, a touched id missing, inconsistent
// lengths). Nothing is recorded and the generator is untouched: the row
// can still be sampled whole with Sample, with the same result.
var ErrNotReducible = errors.New("sampling: request cannot be sampled from a reduced row")

// Reduced is one row of logits reduced for SampleReduced: what
// npu.SampleReducer's SampleReduce writes for the row, plus the raw values
// of the ids Reducible listed (a Gather on the device).
type Reduced struct {
	// Vocab is the length V of the full row.
	Vocab int
	// IDs and Vals are the row's best entries in npu's TopK order (value
	// descending, ties to the lower id, NaN last) with their raw values:
	// at least the k Reducible asked for; more (a batch's larger k) is fine.
	IDs  []int32
	Vals []float32
	// Touched are the ids Reducible returned (ascending, distinct, within
	// the row) and TouchedVals their raw values.
	Touched     []int32
	TouchedVals []float32
	// NaN and PosInf count the row's NaN and +Inf entries (stats[r][0] and
	// stats[r][1] of SampleReduce).
	NaN, PosInf int
}

// Reducible reports whether the next token can be sampled from a reduced
// row of vocab logits (see SampleReduced, and SampleRounds when rounds: the
// caller can answer a device's queries), and if so what the reduction
// must hold: the top k candidates and the raw values of touched, the ids
// the logits processors read this step (ascending; a fresh slice the
// caller may keep). k is min(|T|+1, vocab) for a greedy request,
// min(top_k+|T|+32, vocab) for top-k sampling,
// min(ReducedMinPCandidates+|T|, vocab) for min-p sampling without top-k
// and min(|T|+1, vocab) for other random sampling (rounds only); at least
// the number of top logprobs asked for. It is false for an empty row,
// when |T| > MaxReducedTouched, and without rounds for requests wanting
// logprobs and random sampling with neither top-k (up to MaxReducedTopK)
// nor min-p; with rounds, for requests wanting every logprob and top_k
// above MaxReducedTopK. Sample those from the whole row. The answer holds
// until the next token is recorded. A reduction may still turn out short
// (ErrNotReducible from SampleReduced or SampleRounds).
func (s *Sampler) Reducible(vocab int, rounds bool) (k int, touched []int32, ok bool) {
	if vocab <= 0 || (s.wantLP && (!rounds || s.logprobs < 0 || s.logprobs >= vocab)) {
		return 0, nil, false
	}
	extra := 0 // candidates beyond |T|
	switch {
	case s.greedy:
		extra = 1
	case s.topK > 0 && s.topK < vocab:
		if s.topK > MaxReducedTopK {
			return 0, nil, false
		}
		extra = s.topK + reducedTieSlack
	case s.minP > 0:
		extra = ReducedMinPCandidates
	case rounds:
		extra = 1
	default:
		return 0, nil, false
	}
	// Cheap lower bounds first: a long prompt under the repetition
	// penalty, or a long output under any penalty, is declined without
	// building T.
	outPenalised := s.rep != 1 || s.freq != 0 || s.pres != 0
	if outPenalised && len(s.outUnique) > MaxReducedTouched {
		return 0, nil, false
	}
	if s.rep != 1 && promptCount(s.prompt, vocab) > MaxReducedTouched {
		return 0, nil, false
	}
	inRow := func(id int32) bool { return id >= 0 && int(id) < vocab }
	if len(s.out) < s.minTokens {
		for _, id := range s.allStop {
			if inRow(id) {
				touched = append(touched, id)
			}
		}
	}
	for _, b := range s.bias {
		if inRow(b.id) {
			touched = append(touched, b.id)
		}
	}
	if s.rep != 1 {
		for w, word := range s.prompt {
			for word != 0 {
				id := int32(w*64 + bits.TrailingZeros64(word))
				word &= word - 1
				if inRow(id) {
					touched = append(touched, id)
				}
			}
		}
	}
	if outPenalised {
		for _, id := range s.outUnique {
			if inRow(id) {
				touched = append(touched, id)
			}
		}
	}
	slices.Sort(touched)
	touched = slices.Compact(touched)
	if len(touched) > MaxReducedTouched {
		return 0, nil, false
	}
	if touched == nil {
		touched = []int32{}
	}
	k = min(len(touched)+extra, vocab)
	if s.wantLP {
		k = max(k, s.logprobs)
	}
	return k, touched, true
}

// promptCount counts the prompt bitset's ids below vocab.
func promptCount(prompt []uint64, vocab int) int {
	n := 0
	for w, word := range prompt {
		if lo := w * 64; lo+64 > vocab {
			if lo < vocab {
				n += bits.OnesCount64(word & (1<<(vocab-lo) - 1))
			}
			break
		}
		n += bits.OnesCount64(word)
	}
	return n
}

// SampleReduced picks the next token of a reducible request (see
// Reducible) from its reduced row r and records it, exactly as Sample on
// the full row would: the same token (for a random request, the same draw
// from its generator), the same error (ErrBadLogits, ErrAllMasked,
// ErrEmptyLogits, an out-of-row id's message), the same history. When r
// does not hold what the request needs it returns ErrNotReducible
// (wrapped), records nothing and leaves the generator as it was. It is
// SampleRounds without a device to ask.
func (s *Sampler) SampleReduced(r Reduced) (Token, error) {
	return s.SampleRounds(r, nil)
}

// SampleRounds is SampleReduced with a device to ask (ask; nil: none) for
// what the reduced row lacks: sampling histograms and bin members of the
// row (see the comment at the top of the file and Query). It returns
// exactly what Sample on the full row would, logprobs included; on
// ErrNotReducible or an error from ask it records nothing and restores the
// generator.
func (s *Sampler) SampleRounds(r Reduced, ask Asker) (Token, error) {
	var tok Token
	if r.Vocab <= 0 {
		return tok, ErrEmptyLogits
	}
	if s.wantLP && (ask == nil || s.logprobs < 0 || s.logprobs >= r.Vocab) {
		return tok, fmt.Errorf("%w: requests wanting logprobs need a device to ask, and not every logprob", ErrNotReducible)
	}
	if err := r.check(); err != nil {
		return tok, err
	}
	cur := slices.Clone(r.TouchedVals)
	if err := s.processReduced(int32(r.Vocab), r.Touched, cur); err != nil {
		return tok, err
	}
	rc := &rounds{ask: ask}
	if s.wantLP && len(r.Vals) > 0 {
		rc.rawMax, rc.wantRaw = r.Vals[0], true
	}
	saved := *s.pcg
	var c cand
	var err error
	if s.greedy {
		c, err = argmaxReduced(r, cur)
	} else {
		c, err = s.sampleRandomReduced(r, cur, rc)
	}
	if err == nil && s.wantLP {
		err = s.logprobsRounds(r, c, rc, &tok)
	}
	if err != nil {
		*s.pcg = saved // nothing of the request moved
		return tok, err
	}
	tok.ID = c.id
	s.record(c.id)
	return tok, nil
}

// check validates r's shape (not its values: NaN and Inf are data).
func (r *Reduced) check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrNotReducible}, args...)...)
	}
	if len(r.IDs) != len(r.Vals) || len(r.Touched) != len(r.TouchedVals) {
		return bad("%d candidate ids for %d values, %d touched ids for %d values", len(r.IDs), len(r.Vals), len(r.Touched), len(r.TouchedVals))
	}
	if r.NaN < 0 || r.PosInf < 0 {
		return bad("negative counts %d NaN, %d +Inf", r.NaN, r.PosInf)
	}
	for i, id := range r.Touched {
		if id < 0 || int(id) >= r.Vocab || (i > 0 && id <= r.Touched[i-1]) {
			return bad("touched ids %v are not ascending ids of a row of %d", r.Touched, r.Vocab)
		}
	}
	for _, id := range r.IDs {
		if id < 0 || int(id) >= r.Vocab {
			return bad("candidate id %d outside a row of %d", id, r.Vocab)
		}
	}
	return nil
}

// processReduced is process on the touched values cur (raw on entry,
// processed on return; cur[i] is touched[i]'s) with v the row length: the
// same checks, float32 operations and order as process, so the same
// values and the same first error. Keep the two in step: the reduce tests
// compare them on random requests.
func (s *Sampler) processReduced(v int32, touched []int32, cur []float32) error {
	return processRow(s, reducedRow{v, touched, cur})
}

// reducedRow is the touched ids of a vocabulary row of v logits, their
// values in cur (raw on entry, processed in place).
type reducedRow struct {
	v       int32
	touched []int32
	cur     []float32
}

func (r reducedRow) size() int32 { return r.v }

// at finds an in-range id's slot in cur.
func (r reducedRow) at(id int32) (int, error) {
	if i, ok := slices.BinarySearch(r.touched, id); ok {
		return i, nil
	}
	return 0, fmt.Errorf("%w: touched ids lack %d", ErrNotReducible, id)
}

func (r reducedRow) get(id int32) (float32, error) {
	i, err := r.at(id)
	if err != nil {
		return 0, err
	}
	return r.cur[i], nil
}

// set is Sampler.set on the slot of id.
func (r reducedRow) set(id int32, x float32) error {
	i, err := r.at(id)
	if err != nil {
		return err
	}
	if old := r.cur[i]; old != old || old > math.MaxFloat32 {
		return ErrBadLogits
	}
	r.cur[i] = x
	return nil
}

// argmaxReduced is argmax of the processed row that r and the processed
// touched values cur describe: ErrBadLogits for a NaN or +Inf anywhere
// (touched: in cur; untouched: the row's counts less the touched ids' raw
// ones), ErrAllMasked when nothing is above -Inf, else the lowest id
// holding the largest value, with that value.
func argmaxReduced(r Reduced, cur []float32) (cand, error) {
	if badReduced(r, cur) {
		return cand{}, ErrBadLogits
	}
	// The best untouched id is the first candidate outside T: any better
	// one would rank before it.
	best, bv := int32(-1), float32(math.Inf(-1))
	for i, id := range r.IDs {
		if _, hit := slices.BinarySearch(r.Touched, id); !hit {
			best, bv = id, r.Vals[i]
			break
		}
	}
	if best < 0 && len(r.Touched) < r.Vocab {
		return cand{}, fmt.Errorf("%w: %d candidates hold no untouched id (%d touched)", ErrNotReducible, len(r.IDs), len(r.Touched))
	}
	if isBad(bv) { // only when the counts contradict the candidates
		return cand{}, ErrBadLogits
	}
	for i, id := range r.Touched {
		if x := cur[i]; x > bv || (x == bv && id < best) {
			best, bv = id, x
		}
	}
	if !(bv > float32(math.Inf(-1))) {
		return cand{}, ErrAllMasked
	}
	return cand{bv, best}, nil
}

// isBad reports a NaN or +Inf.
func isBad(x float32) bool { return x != x || x > math.MaxFloat32 }

// badReduced reports whether the processed row r and cur describe holds a
// NaN or +Inf: in cur (the touched ids), or untouched (the row's counts
// less the touched ids' raw ones).
func badReduced(r Reduced, cur []float32) bool {
	untouchedBad := r.NaN + r.PosInf
	for _, x := range r.TouchedVals {
		if isBad(x) {
			untouchedBad--
		}
	}
	return untouchedBad > 0 || slices.ContainsFunc(cur, isBad)
}

// sampleRandomReduced is sampleRandom on the processed row that r and the
// processed touched values cur describe (see the comment at the top of
// the file): the same errors, then ErrNotReducible when r and the device
// (rc) do not decide the draw, else the same draw. It returns the token
// with its processed value.
func (s *Sampler) sampleRandomReduced(r Reduced, cur []float32, rc *rounds) (cand, error) {
	if badReduced(r, cur) {
		return cand{}, ErrBadLogits
	}
	// vis: every value the reduction shows of the processed row, the held
	// untouched candidates and the touched ids; the hidden rest are
	// untouched, ranked after the last candidate, at or below its raw
	// value bound.
	vis := s.cands[:0]
	for i, id := range r.IDs {
		if _, hit := slices.BinarySearch(r.Touched, id); !hit {
			vis = append(vis, cand{r.Vals[i], id})
		}
	}
	for i, id := range r.Touched {
		vis = append(vis, cand{cur[i], id})
	}
	s.cands = vis
	ninf := float32(math.Inf(-1))
	bound := ninf // no hidden value above -Inf
	if len(vis) < r.Vocab {
		if len(r.IDs) == 0 {
			return cand{}, fmt.Errorf("%w: no candidates for a row of %d with %d touched ids", ErrNotReducible, r.Vocab, len(r.Touched))
		}
		bound = r.Vals[len(r.Vals)-1]
	}
	slices.SortFunc(vis, byValueDesc)
	invT := 1 / s.temp
	if k := s.topK; k > 0 && k < r.Vocab {
		// The kept set is every value at or above the k-th largest; the
		// hidden values stay out of it when the k-th held is above bound.
		kth := ninf
		if len(vis) >= k {
			kth = vis[k-1].v
		}
		if bound > ninf && !(kth > bound) {
			return cand{}, fmt.Errorf("%w: top-%d's k-th value %v is not above the reduction's last candidate %v", ErrNotReducible, k, kth, bound)
		}
		n := 0
		for n < len(vis) && vis[n].v >= kth && vis[n].v > ninf {
			n++
		}
		kept, m, z, err := s.topKKept(vis[:n], invT)
		if err != nil {
			return cand{}, err
		}
		id, err := s.draw(nil, m, invT, 0, 0, kept, z)
		return valued(id, kept), err
	}
	mx := ninf
	if len(vis) > 0 {
		mx = vis[0].v
	}
	if bound > ninf && !(mx >= bound) {
		return cand{}, fmt.Errorf("%w: the row's maximum is not among the candidates", ErrNotReducible)
	}
	if mx == ninf {
		return cand{}, ErrAllMasked
	}
	m := float64(mx)
	if bound > ninf && s.minP == 0 {
		// Every token within histRange counts: the device's histogram.
		return s.drawRounds(r, cur, rc, mx, invT)
	}
	if bound > ninf {
		// Every hidden value is at or below bound: it must miss
		// histRange, or min-p with a margin.
		if b, w := weight(bound, m, invT); b >= 0 && !(w*(1+minPMargin) < s.minP) {
			return cand{}, fmt.Errorf("%w: min-p survivors may run past the reduction's %d candidates", ErrNotReducible, len(r.IDs))
		}
	}
	// The survivors in id order, as the whole row's scans meet them.
	surv := vis[:0]
	for _, c := range vis {
		if b, _ := s.wbin(c.v, m, invT); b >= 0 {
			surv = append(surv, c)
		}
	}
	slices.SortFunc(surv, func(a, b cand) int { return int(a.id) - int(b.id) })
	surv = slices.Clone(surv) // s.cands is the draw's scratch
	q := s.qsums()
	for _, c := range surv {
		b, f := npu.SampleBin(c.v, mx, invT)
		q[b] += f // survivors are in a bin
	}
	id, err := s.drawFrom(candMembers(surv, m, invT), m, invT)
	return valued(id, surv), err
}

// valued pairs a drawn id with its value among c.
func valued(id int32, c []cand) cand {
	for _, x := range c {
		if x.id == id {
			return x
		}
	}
	return cand{id: id}
}

// candMembers is binMembers over candidates in id order (min-p applied)
// for the row maximum m at inverse temperature invT.
func candMembers(c []cand, m, invT float64) binMembers {
	var buf []cand
	return func(bin int) ([]cand, error) {
		buf = buf[:0]
		for _, x := range c {
			if binOf(x.v, m, invT) == bin {
				buf = append(buf, x)
			}
		}
		return buf, nil
	}
}

// SampleReducedBatch is SampleBatch for reduced rows: rows[i] is sampled
// with samplers[i].SampleReduced, errs[i] is its error, and when the shapes
// do not pair up (different lengths, a nil or repeated sampler) every
// errs entry is ErrBatchShape and nothing is sampled. It runs on the
// caller's goroutine: a reduced row costs O(k + |T|), less than handing it
// to another goroutine.
func SampleReducedBatch(rows []Reduced, samplers []*Sampler) (toks []Token, errs []error) {
	n := max(len(rows), len(samplers))
	toks, errs = make([]Token, n), make([]error, n)
	if len(rows) != len(samplers) || !distinctSamplers(samplers) {
		for i := range errs {
			errs[i] = ErrBatchShape
		}
		return toks, errs
	}
	for i := range rows {
		toks[i], errs[i] = samplers[i].SampleReduced(rows[i])
	}
	return toks, errs
}

// distinctSamplers reports whether samplers holds no nil and no repeat.
func distinctSamplers(samplers []*Sampler) bool {
	seen := make(map[*Sampler]bool, len(samplers))
	for _, s := range samplers {
		if s == nil || seen[s] {
			return false
		}
		seen[s] = true
	}
	return true
}
