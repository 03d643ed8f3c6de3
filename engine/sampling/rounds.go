package sampling

import (
	"errors"
	"fmt"
	"iter"
	"math"
	"slices"

	"github.com/npuserve/npuserve/npu"
)

// MaxBinMembers is how many members of a histogram bin a device returns
// per query (the C of npu.SampleHistogrammer's SampleBinMembers): a draw
// inside a bin with more is sampled from the whole row.
const MaxBinMembers = 4096

// QueryKind says what a Query asks of a row.
type QueryKind int

const (
	// QueryHist asks for the row's histogram: per bin the sum of
	// npu.SampleBin's fractions (npu.SampleHistogrammer's SampleHist).
	QueryHist QueryKind = iota + 1
	// QueryBin asks for the members of one bin in id order and the count
	// of entries in the bins before it (SampleBinMembers).
	QueryBin
)

// A Query is one question SampleRounds asks about the raw row of logits
// it samples: at row maximum M and inverse temperature InvT, its
// histogram (QueryHist) or the members of bin Bin (QueryBin).
type Query struct {
	Kind QueryKind
	M    float32
	InvT float64
	Bin  int
}

// An Answer answers one Query: Hist (npu.SampleHistBins sums) for
// QueryHist; for QueryBin the first members in id order (IDs, Vals; at
// most MaxBinMembers), Count the bin's members in all and Below the
// row's entries in lower bins.
type Answer struct {
	Hist         []int64
	IDs          []int32
	Vals         []float32
	Count, Below int
}

// An Asker answers one round of queries, in order: a device round trip.
type Asker func([]Query) ([]Answer, error)

// rounds is one SampleRounds call's conversation with its Asker: the raw
// row's histogram for logprobs rides along with the first question.
type rounds struct {
	ask     Asker
	wantRaw bool    // logprobs want the raw histogram at rawMax
	rawMax  float32 // the raw row's maximum (its best candidate)
	rawHist []int64
	buf     []cand
}

// query asks qs (and the raw histogram, once, when logprobs want it).
func (rc *rounds) query(qs ...Query) ([]Answer, error) {
	if rc.ask == nil {
		return nil, fmt.Errorf("%w: the row needs a device to ask", ErrNotReducible)
	}
	extra := rc.wantRaw && rc.rawHist == nil
	if extra {
		qs = append(qs, Query{Kind: QueryHist, M: rc.rawMax, InvT: 1})
	}
	ans, err := rc.ask(qs)
	if err != nil {
		return nil, err
	}
	if len(ans) != len(qs) {
		return nil, fmt.Errorf("%w: %d answers to %d queries", ErrNotReducible, len(ans), len(qs))
	}
	for i, q := range qs {
		if err := ans[i].check(q); err != nil {
			return nil, err
		}
	}
	if extra {
		rc.rawHist = ans[len(ans)-1].Hist
		ans = ans[:len(ans)-1]
	}
	return ans, nil
}

// check validates a's shape for q.
func (a *Answer) check(q Query) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrNotReducible}, args...)...)
	}
	switch q.Kind {
	case QueryHist:
		if len(a.Hist) != histBins {
			return bad("a histogram of %d bins, want %d", len(a.Hist), histBins)
		}
		if slices.ContainsFunc(a.Hist, func(x int64) bool { return x < 0 }) {
			return bad("a histogram with negative sums")
		}
	case QueryBin:
		if len(a.IDs) != len(a.Vals) || a.Count < len(a.IDs) || a.Below < 0 {
			return bad("%d member ids for %d values, %d members counted", len(a.IDs), len(a.Vals), a.Count)
		}
		for i, id := range a.IDs {
			if id < 0 || (i > 0 && id <= a.IDs[i-1]) {
				return bad("member ids %v are not ascending ids", a.IDs)
			}
		}
	}
	return nil
}

// drawRounds draws from the processed row that r and cur describe, whose
// maximum mx is held, when min-p is off and the hidden tokens count: the
// device's histogram of the raw row at mx, corrected for the touched ids,
// then the members of the bins the draw looks inside.
func (s *Sampler) drawRounds(r Reduced, cur []float32, rc *rounds, mx float32, invT float64) (cand, error) {
	ans, err := rc.query(Query{Kind: QueryHist, M: mx, InvT: invT})
	if err != nil {
		return cand{}, err
	}
	q := s.qsums()
	for b, x := range ans[0].Hist {
		q[b] = uint64(x)
	}
	for i := range r.Touched {
		if b, f := npu.SampleBin(r.TouchedVals[i], mx, invT); b >= 0 {
			if q[b] < f {
				return cand{}, fmt.Errorf("%w: the device's bin %d lacks touched id %d", ErrNotReducible, b, r.Touched[i])
			}
			q[b] -= f
		}
		if b, f := npu.SampleBin(cur[i], mx, invT); b >= 0 {
			q[b] += f
		}
	}
	m := float64(mx)
	var seen []cand // every member asked for: the drawn token is one
	members := func(bin int) ([]cand, error) {
		ans, err := rc.query(Query{Kind: QueryBin, M: mx, InvT: invT, Bin: bin})
		if err != nil {
			return nil, err
		}
		a := ans[0]
		if a.Count > len(a.IDs) {
			return nil, fmt.Errorf("%w: bin %d holds %d tokens, more than the %d a device returns", ErrNotReducible, bin, a.Count, len(a.IDs))
		}
		out := rc.buf[:0]
		for i, id := range a.IDs {
			if int(id) >= r.Vocab {
				return nil, fmt.Errorf("%w: member id %d outside a row of %d", ErrNotReducible, id, r.Vocab)
			}
			if _, hit := slices.BinarySearch(r.Touched, id); !hit {
				out = append(out, cand{a.Vals[i], id})
			}
		}
		for i, id := range r.Touched {
			if binOf(cur[i], m, invT) == bin {
				out = append(out, cand{cur[i], id})
			}
		}
		slices.SortFunc(out, func(a, b cand) int { return int(a.id) - int(b.id) })
		rc.buf = out
		seen = append(seen, out...)
		return out, nil
	}
	id, err := s.drawFrom(members, m, invT)
	if err != nil {
		return cand{}, err
	}
	return valued(id, seen), nil
}

// logprobsRounds fills tok's logprob fields as rawLogprobs does on the
// whole raw row, for the token c (its processed value) chosen from r: the
// log-sum-exp from the raw row's histogram at temperature 1, the rank from
// the members of the token's raw bin and the count of entries before
// them, the top logprobs from r's first candidates (the raw row's best in
// byValueDesc's order, which is npu's TopK order on a row without NaN).
func (s *Sampler) logprobsRounds(r Reduced, c cand, rc *rounds, tok *Token) error {
	n := s.logprobs
	if len(r.Vals) < max(n, 1) {
		return fmt.Errorf("%w: %d candidates for %d top logprobs", ErrNotReducible, len(r.Vals), n)
	}
	raw := c.v
	if i, hit := slices.BinarySearch(r.Touched, c.id); hit {
		raw = r.TouchedVals[i]
	}
	mx := rc.rawMax
	bin := binOf(raw, float64(mx), 1)
	if bin < 0 {
		// The rank would count entries past histRange.
		return fmt.Errorf("%w: the token's raw logit %v is %v below the row's maximum", ErrNotReducible, raw, float64(mx)-float64(raw))
	}
	ans, err := rc.query(Query{Kind: QueryBin, M: mx, InvT: 1, Bin: bin})
	if err != nil {
		return err
	}
	a := ans[0]
	if a.Count > len(a.IDs) {
		return fmt.Errorf("%w: the token's raw bin %d holds %d tokens, more than the %d a device returns", ErrNotReducible, bin, a.Count, len(a.IDs))
	}
	rank := a.Below
	for _, v := range a.Vals {
		if v >= raw {
			rank++
		}
	}
	var q [histBins]uint64
	for b, x := range rc.rawHist {
		q[b] = uint64(x)
	}
	lse := float64(mx) + math.Log(histMass(&q))
	tok.Logprob = logprobOf(raw, lse)
	tok.Rank = rank
	tok.TopLogprobs = make([]TokenLogprob, n)
	for i := range n {
		tok.TopLogprobs[i] = TokenLogprob{r.IDs[i], logprobOf(r.Vals[i], lse)}
	}
	return nil
}

// logprobOf is logit v's logprob in a row with log-sum-exp lse.
func logprobOf(v float32, lse float64) float32 {
	if math.IsInf(float64(v), -1) {
		return float32(math.Inf(-1))
	}
	return float32(float64(v) - lse)
}

// asks reports whether SampleRounds on a row of vocab logits may ask its
// Asker: for logprobs, or for random sampling with neither top-k nor
// min-p (sampleRandomReduced's histogram path). Other rows are decided
// from their candidates (without an Asker, a row that did ask would get
// ErrNotReducible and be sampled whole: slower, never wrong).
func (s *Sampler) asks(vocab int) bool {
	return s.wantLP || (!s.greedy && !(s.topK > 0 && s.topK < vocab) && s.minP == 0)
}

// errRoundsStopped ends a row's SampleRounds when its batch stops early.
var errRoundsStopped = errors.New("sampling: the batch's rounds stopped")

// SampleRoundsBatch is SampleReducedBatch with a device to ask: rows[i]
// is sampled with samplers[i].SampleRounds, every row's queries of a
// round go to serve at once (qs[i] is row i's, nil when it asks nothing;
// serve returns the answers alike), so a batch costs as many device round
// trips as its most demanding row, not one per question. A serve error
// ends every row still asking and is returned (the step's error); the
// rows keep their generators and record nothing then. errs[i] is row i's
// own error (ErrNotReducible: sample it whole).
func SampleRoundsBatch(rows []Reduced, samplers []*Sampler, serve func(qs [][]Query) ([][]Answer, error)) (toks []Token, errs []error, err error) {
	n := max(len(rows), len(samplers))
	toks, errs = make([]Token, n), make([]error, n)
	if len(rows) != len(samplers) || !distinctSamplers(samplers) {
		for i := range errs {
			errs[i] = ErrBatchShape
		}
		return toks, errs, nil
	}
	type row struct {
		next func() ([]Query, bool)
		stop func()
		ans  []Answer
		err  error
	}
	rs := make([]*row, n)
	defer func() {
		for _, r := range rs {
			if r != nil {
				r.stop()
			}
		}
	}()
	qs := make([][]Query, n)
	live := 0
	for i := range rows {
		if !samplers[i].asks(rows[i].Vocab) {
			// Decided from the candidates alone: no coroutine.
			toks[i], errs[i] = samplers[i].SampleRounds(rows[i], nil)
			continue
		}
		r := &row{}
		r.next, r.stop = iter.Pull(func(yield func([]Query) bool) {
			toks[i], errs[i] = samplers[i].SampleRounds(rows[i], func(q []Query) ([]Answer, error) {
				if !yield(q) {
					return nil, errRoundsStopped
				}
				return r.ans, r.err
			})
		})
		rs[i] = r
		if q, ok := r.next(); ok {
			qs[i] = q
			live++
		}
	}
	for live > 0 {
		ans, err := serve(qs)
		if err == nil && len(ans) != n {
			err = fmt.Errorf("sampling: %d rows of answers for %d rows", len(ans), n)
		}
		if err != nil {
			return nil, nil, err // the deferred stops end the rows still asking
		}
		live = 0
		for i, r := range rs {
			if qs[i] == nil {
				continue
			}
			r.ans, r.err = ans[i], nil
			if q, ok := r.next(); ok {
				qs[i] = q
				live++
			} else {
				qs[i] = nil
			}
		}
	}
	return toks, errs, nil
}

// AnswerRow answers q on a host row of raw logits as
// npu.SampleHistogrammer does on a device, with at most members members
// of a bin: the reference the device answers are checked against.
func AnswerRow(row []float32, q Query, members int) Answer {
	var a Answer
	if q.Kind == QueryHist {
		a.Hist = make([]int64, histBins)
		for _, v := range row {
			if b, f := npu.SampleBin(v, q.M, q.InvT); b >= 0 {
				a.Hist[b] += int64(f)
			}
		}
		return a
	}
	a.IDs, a.Vals = []int32{}, []float32{}
	for i, v := range row {
		switch b, _ := npu.SampleBin(v, q.M, q.InvT); {
		case b < 0 || b > q.Bin:
		case b < q.Bin:
			a.Below++
		default:
			if a.Count < members {
				a.IDs, a.Vals = append(a.IDs, int32(i)), append(a.Vals, v)
			}
			a.Count++
		}
	}
	return a
}
