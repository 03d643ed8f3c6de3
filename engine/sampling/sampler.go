package sampling

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"

	"github.com/npuserve/npuserve/npu"
)

// pcgStream is the second PCG seed word of every seeded generator.
const pcgStream = 0x9e3779b97f4a7c15

// Errors Sample returns; the row is left unchanged and no token is recorded.
var (
	// ErrBadLogits reports a NaN or +Inf logit (before or after the logits
	// processors), which no distribution can be built from.
	ErrBadLogits = errors.New("sampling: logits contain NaN or +Inf")
	// ErrAllMasked reports a row where every token's logit is -Inf after
	// min_tokens masking, logit bias and penalties.
	ErrAllMasked = errors.New("sampling: every token is masked (-Inf)")
	// ErrEmptyLogits reports an empty row.
	ErrEmptyLogits = errors.New("sampling: empty logits row")
)

// TokenLogprob is one token's log-probability.
type TokenLogprob struct {
	ID      int32
	Logprob float32
}

// Token is a sampled token.
//
// Logprob, Rank and TopLogprobs are filled only when Params.Logprobs is set.
// They are vLLM v1's default logprobs_mode "raw_logprobs": log_softmax of
// the model's raw logits, before logit bias, min_tokens masking, penalties,
// temperature, min-p, top-k and top-p (vllm/v1/sample/sampler.py). So a
// greedy or top-k-truncated token reports its probability under the raw
// distribution, not the one it was drawn from.
type Token struct {
	// ID is the sampled token.
	ID int32
	// Logprob is ID's raw log-probability (-Inf for a -Inf raw logit).
	Logprob float32
	// Rank is ID's 1-based rank among the raw logprobs, counting every
	// token whose logprob is >= ID's (vLLM's batched_count_greater_than).
	Rank int
	// TopLogprobs are the Params.Logprobs most likely tokens under the raw
	// distribution, most likely first, ties by lower id; for Logprobs -1,
	// every token in id order (vLLM returns that case unsorted). Empty
	// (non-nil) for Logprobs 0.
	TopLogprobs []TokenLogprob
}

// FinishReason says why a sequence ended.
type FinishReason int

// Finish reasons, named as OpenAI's finish_reason.
const (
	// NotFinished: the sequence goes on.
	NotFinished FinishReason = iota
	// FinishStop: EOS or a stop token was generated.
	FinishStop
	// FinishLength: max_tokens or the context window was reached.
	FinishLength
)

// String returns the OpenAI finish_reason: "stop", "length", or "".
func (r FinishReason) String() string {
	switch r {
	case FinishStop:
		return "stop"
	case FinishLength:
		return "length"
	}
	return ""
}

// Sampler samples one sequence's tokens with vLLM v1's semantics. It keeps
// the sequence's generator and token history (for penalties, min_tokens and
// stop checks). A Sampler is not safe for concurrent use; distinct Samplers
// are independent (see SampleBatch).
type Sampler struct {
	// Resolved parameters.
	greedy    bool
	temp      float64
	topP      float64 // 1: off
	topK      int     // <= 0: off
	minP      float64 // 0: off
	rep       float32 // 1: off
	pres      float32
	freq      float32
	minTokens int
	maxTokens int // -1: none
	logprobs  int // number of top logprobs; -1 all; ignored unless wantLP
	wantLP    bool
	stopIDs   []int32 // stop the sequence (stop_reason = id)
	eos       int32
	hasEOS    bool
	allStop   []int32 // masked while fewer than minTokens generated
	bias      []biasEntry

	rng *rand.Rand
	pcg *rand.PCG // rng's source, saved and restored around SampleRounds

	promptLen int
	prompt    []uint64 // bitset of prompt ids, when rep != 1
	out       []int32
	counts    map[int32]int32
	outUnique []int32 // output ids in first-seen order

	// Scratch reused across calls.
	saved []savedLogit
	heap  []cand
	ties  []cand
	cands []cand
	qhist *[histBins]uint64  // allocated on the first random draw
	hist  *[histBins]float64 // qhist's bins as weights
}

type biasEntry struct {
	id   int32
	bias float32
}

type savedLogit struct {
	id int32
	v  float32
}

// cand is a candidate token with its (processed) logit.
type cand struct {
	v  float32
	id int32
}

// NewSampler validates p (see Params.Validate) and returns a Sampler for one
// sequence whose prompt is prompt (kept for the repetition penalty, which
// vLLM applies to prompt and output tokens alike, and for the context-window
// stop check). Call Params.ApplyEOS beforehand so EOS stops the sequence
// and is masked by min_tokens.
func NewSampler(p Params, prompt []int32) (*Sampler, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	s := &Sampler{
		greedy:    p.greedy(),
		temp:      valueOr(p.Temperature, DefaultTemperature),
		topP:      valueOr(p.TopP, DefaultTopP),
		topK:      valueOr(p.TopK, DefaultTopK),
		minP:      valueOr(p.MinP, DefaultMinP),
		rep:       float32(valueOr(p.RepetitionPenalty, DefaultRepetitionPenalty)),
		pres:      float32(p.PresencePenalty),
		freq:      float32(p.FrequencyPenalty),
		minTokens: p.MinTokens,
		maxTokens: -1,
		stopIDs:   slices.Clone(p.StopTokenIDs),
		eos:       p.eos,
		hasEOS:    p.hasEOS,
		promptLen: len(prompt),
		counts:    make(map[int32]int32),
	}
	if p.MaxTokens != nil {
		s.maxTokens = *p.MaxTokens
	}
	if p.Logprobs != nil {
		s.wantLP, s.logprobs = true, *p.Logprobs
	}
	if p.eosSet {
		s.allStop = slices.Clone(p.allStop)
	} else {
		s.allStop = slices.Clone(p.StopTokenIDs)
		slices.Sort(s.allStop)
		s.allStop = slices.Compact(s.allStop)
	}
	for id, b := range p.LogitBias {
		s.bias = append(s.bias, biasEntry{id, float32(b)})
	}
	slices.SortFunc(s.bias, func(a, b biasEntry) int { return int(a.id) - int(b.id) })
	if s.rep != 1 {
		for _, id := range prompt {
			if id < 0 {
				return nil, fmt.Errorf("sampling: negative prompt token id %d", id)
			}
			w := int(id) / 64
			if w >= len(s.prompt) {
				s.prompt = append(s.prompt, make([]uint64, w+1-len(s.prompt))...)
			}
			s.prompt[w] |= 1 << (id % 64)
		}
	}
	if p.Seed != nil {
		s.pcg = rand.NewPCG(*p.Seed, pcgStream)
	} else {
		s.pcg = rand.NewPCG(unseeded())
	}
	s.rng = rand.New(s.pcg)
	return s, nil
}

func valueOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// Output returns the tokens generated so far (owned by the Sampler; do not
// modify).
func (s *Sampler) Output() []int32 { return s.out }

// Greedy reports whether the sequence is decoded by argmax.
func (s *Sampler) Greedy() bool { return s.greedy }

// Sample picks the next token from one row of logits (the model's vocab
// row, float32) and records it in the sequence's history.
//
// The order is vLLM v1's (vllm/v1/sample/sampler.py): raw logprobs are
// taken from the untouched row; then min_tokens masking (EOS and stop ids
// to -Inf while fewer than MinTokens tokens are generated) and logit bias;
// then the repetition penalty (prompt and output tokens), frequency and
// presence penalties (output tokens); then, for temperature < 1e-5, argmax
// (ties to the lower id); otherwise temperature, min-p, top-k, top-p and a
// draw from the request's generator.
//
// Sample writes the processed values into logits while it works and
// restores the raw values before returning, so the row is unchanged
// afterwards but must not be read concurrently. A NaN or +Inf logit, or a
// row left with every token at -Inf, is an error; nothing is recorded then.
func (s *Sampler) Sample(logits []float32) (Token, error) {
	var tok Token
	if len(logits) == 0 {
		return tok, ErrEmptyLogits
	}
	s.saved = s.saved[:0]
	err := s.process(logits)
	var id int32
	if err == nil {
		if s.greedy {
			id, err = argmax(logits)
		} else {
			id, err = s.sampleRandom(logits)
		}
	}
	for i := len(s.saved) - 1; i >= 0; i-- {
		logits[s.saved[i].id] = s.saved[i].v
	}
	if err != nil {
		return tok, err
	}
	tok.ID = id
	if s.wantLP {
		s.rawLogprobs(logits, &tok)
	}
	s.record(id)
	return tok, nil
}

// Clone returns an independent copy of s in its current state (history,
// generator), which samples as s would: for checking one sampling path
// against another on the same rows.
func (s *Sampler) Clone() *Sampler {
	c := *s
	pcg := *s.pcg
	c.pcg = &pcg
	c.rng = rand.New(c.pcg)
	c.stopIDs, c.allStop = slices.Clone(s.stopIDs), slices.Clone(s.allStop)
	c.bias, c.prompt = slices.Clone(s.bias), slices.Clone(s.prompt)
	c.out, c.outUnique = slices.Clone(s.out), slices.Clone(s.outUnique)
	c.counts = maps.Clone(s.counts)
	c.saved, c.heap, c.ties, c.cands, c.qhist, c.hist = nil, nil, nil, nil, nil, nil
	return &c
}

// record appends id to the output history.
func (s *Sampler) record(id int32) {
	s.out = append(s.out, id)
	if s.counts[id] == 0 {
		s.outUnique = append(s.outUnique, id)
	}
	s.counts[id]++
}

// CheckStop reports whether the sequence ends after its last token, as
// vLLM's check_stop (vllm/v1/core/sched/utils.py): nothing stops before
// MinTokens tokens; then EOS (unless IgnoreEOS) and stop ids give
// FinishStop (stopToken is the stop id, -1 for EOS, matching vLLM's
// stop_reason); then reaching MaxTokens or maxModelLen total tokens
// (prompt + output; maxModelLen <= 0: no bound) gives FinishLength. Stop
// strings are the detokenizer's business.
func (s *Sampler) CheckStop(maxModelLen int) (reason FinishReason, stopToken int32) {
	n := len(s.out)
	if n == 0 || n < s.minTokens {
		return NotFinished, -1
	}
	last := s.out[n-1]
	if s.hasEOS && last == s.eos {
		return FinishStop, -1
	}
	if slices.Contains(s.stopIDs, last) {
		return FinishStop, last
	}
	if (maxModelLen > 0 && s.promptLen+n >= maxModelLen) || (s.maxTokens >= 0 && n >= s.maxTokens) {
		return FinishLength, -1
	}
	return NotFinished, -1
}

// set overwrites logits[id], saving the old value for the restore.
func (s *Sampler) set(logits []float32, id int32, v float32) error {
	old := logits[id]
	if old != old || old > math.MaxFloat32 {
		return ErrBadLogits
	}
	s.saved = append(s.saved, savedLogit{id, old})
	logits[id] = v
	return nil
}

// process applies the argmax-variant logits processors and the penalties
// in place (sparse: only the touched ids change) to the full row.
func (s *Sampler) process(logits []float32) error {
	return processRow(s, fullRow{s, logits})
}

// logitRow is what the processors read and write of a row: the full
// vocabulary row (Sample) or the touched ids of a reduced one
// (SampleReduced). One implementation of the processors serves both, so
// the two paths compute the same float32 expressions in the same order.
type logitRow interface {
	// size is the vocabulary row's length.
	size() int32
	// get returns logits[id] for an in-range id.
	get(id int32) (float32, error)
	// set overwrites logits[id]: ErrBadLogits when the old value is NaN
	// or +Inf (Sampler.set).
	set(id int32, v float32) error
}

// fullRow is a whole vocabulary row, with the overwritten values saved
// for Sample's restore.
type fullRow struct {
	s      *Sampler
	logits []float32
}

func (r fullRow) size() int32                   { return int32(len(r.logits)) }
func (r fullRow) get(id int32) (float32, error) { return r.logits[id], nil }
func (r fullRow) set(id int32, v float32) error { return r.s.set(r.logits, id, v) }

// processRow is vLLM's processor order (see Sample) on row.
func processRow[R logitRow](s *Sampler, row R) error {
	v := row.size()
	inRange := func(id int32) error {
		if id < 0 || id >= v {
			return fmt.Errorf("sampling: token id %d outside the vocab row of %d logits", id, v)
		}
		return nil
	}
	// update sets logits[id] = f(logits[id]) for an id that must be in
	// the row.
	update := func(id int32, f func(x float32) float32) error {
		if err := inRange(id); err != nil {
			return err
		}
		x, err := row.get(id)
		if err != nil {
			return err
		}
		return row.set(id, f(x))
	}
	// min_tokens: mask EOS and stop ids.
	if len(s.out) < s.minTokens {
		for _, id := range s.allStop {
			if err := update(id, func(float32) float32 { return float32(math.Inf(-1)) }); err != nil {
				return err
			}
		}
	}
	// Logit bias.
	for _, b := range s.bias {
		if err := update(b.id, func(x float32) float32 { return x + b.bias }); err != nil {
			return err
		}
	}
	// Repetition penalty over prompt and output tokens (vLLM's
	// apply_repetition_penalties: scale by 1/p above zero, by p otherwise).
	if s.rep != 1 {
		inv := 1 / s.rep
		penalize := func(id int32) error {
			return update(id, func(x float32) float32 {
				if x > 0 {
					return x * inv
				}
				return x * s.rep
			})
		}
		for w, word := range s.prompt {
			for word != 0 {
				id := int32(w*64 + bits.TrailingZeros64(word))
				word &= word - 1
				if err := penalize(id); err != nil {
					return err
				}
			}
		}
		for _, id := range s.outUnique {
			if !s.inPrompt(id) {
				if err := penalize(id); err != nil {
					return err
				}
			}
		}
	}
	// Frequency and presence penalties over output tokens.
	if s.freq != 0 || s.pres != 0 {
		for _, id := range s.outUnique {
			if err := update(id, func(x float32) float32 {
				x -= s.freq * float32(s.counts[id])
				x -= s.pres
				return x
			}); err != nil {
				return err
			}
		}
	}
	return nil
}

// inPrompt reports whether id occurs in the prompt (rep != 1 only).
func (s *Sampler) inPrompt(id int32) bool {
	w := int(id) / 64
	return id >= 0 && w < len(s.prompt) && s.prompt[w]&(1<<(id%64)) != 0
}

// argmax returns the lowest id holding the largest logit, rejecting NaN
// and +Inf and a row that is all -Inf. Four independent lanes keep the
// comparisons pipelined; a NaN is caught by its lane group's sum (a NaN sum
// from +Inf + -Inf or overflow is re-checked element by element).
func argmax(logits []float32) (int32, error) {
	ninf := float32(math.Inf(-1))
	b0, b1, b2, b3 := ninf, ninf, ninf, ninf
	i0, i1, i2, i3 := -1, -1, -1, -1
	n := len(logits) &^ 3
	for i := 0; i < n; i += 4 {
		q := logits[i : i+4 : i+4]
		v0, v1, v2, v3 := q[0], q[1], q[2], q[3]
		if v0 > b0 {
			b0, i0 = v0, i
		}
		if v1 > b1 {
			b1, i1 = v1, i+1
		}
		if v2 > b2 {
			b2, i2 = v2, i+2
		}
		if v3 > b3 {
			b3, i3 = v3, i+3
		}
		if sum := (v0 + v1) + (v2 + v3); sum != sum {
			if v0 != v0 || v1 != v1 || v2 != v2 || v3 != v3 {
				return 0, ErrBadLogits
			}
		}
	}
	best, bv := -1, ninf
	for _, l := range [4]struct {
		v float32
		i int
	}{{b0, i0}, {b1, i1}, {b2, i2}, {b3, i3}} {
		if l.i >= 0 && (l.v > bv || (l.v == bv && l.i < best)) {
			best, bv = l.i, l.v
		}
	}
	for i := n; i < len(logits); i++ {
		if v := logits[i]; v > bv {
			best, bv = i, v
		} else if v != v {
			return 0, ErrBadLogits
		}
	}
	if best < 0 {
		return 0, ErrAllMasked
	}
	if bv > math.MaxFloat32 {
		return 0, ErrBadLogits
	}
	return int32(best), nil
}

// rawLogprobs fills tok's logprob fields from the raw (restored) row.
func (s *Sampler) rawLogprobs(logits []float32, tok *Token) {
	// Pass 1: max and the top-n heap.
	n := s.logprobs
	all := n < 0 || n >= len(logits)
	if all {
		n = 0
	}
	s.heap = s.heap[:0]
	mx := float32(math.Inf(-1))
	for i, v := range logits {
		if v > mx {
			mx = v
		}
		if n > 0 && (len(s.heap) < n || v >= s.heap[0].v) {
			s.heapOffer(cand{v, int32(i)}, n)
		}
	}
	// Pass 2: log-sum-exp and the sampled token's rank.
	target := logits[tok.ID]
	var q [histBins]uint64
	rank := 0
	m := float64(mx)
	if !math.IsInf(m, -1) {
		for _, v := range logits {
			if v >= target {
				rank++
			}
			if b, f := npu.SampleBin(v, mx, 1); b >= 0 { // smaller terms vanish in float32
				q[b] += f
			}
		}
	}
	lse := m + math.Log(histMass(&q))
	lp := func(v float32) float32 {
		if math.IsInf(float64(v), -1) {
			return float32(math.Inf(-1))
		}
		return float32(float64(v) - lse)
	}
	tok.Logprob = lp(target)
	tok.Rank = rank
	if all && s.logprobs != 0 {
		tok.TopLogprobs = make([]TokenLogprob, len(logits))
		for i, v := range logits {
			tok.TopLogprobs[i] = TokenLogprob{int32(i), lp(v)}
		}
		return
	}
	top := slices.Clone(s.heap)
	slices.SortFunc(top, byValueDesc)
	tok.TopLogprobs = make([]TokenLogprob, len(top))
	for i, c := range top {
		tok.TopLogprobs[i] = TokenLogprob{c.id, lp(c.v)}
	}
}

// histMass is the total weight of an integer histogram, summed in bin
// order: the log-sum-exp of logprobs is m + log(histMass) of the raw row's
// histogram at temperature 1, whether the row is on the host or the
// histogram came from a device.
func histMass(q *[histBins]uint64) float64 {
	var sum float64
	for b, x := range q {
		if x != 0 {
			sum += binWeight(b, x)
		}
	}
	return sum
}

// byValueDesc orders candidates most likely first, ties by lower id.
func byValueDesc(a, b cand) int {
	switch {
	case a.v > b.v:
		return -1
	case a.v < b.v:
		return 1
	}
	return int(a.id) - int(b.id)
}

// less orders the top-k min-heap: the root is the candidate to evict
// first, the smallest value, and among equal values the higher id.
func less(a, b cand) bool {
	if a.v != b.v {
		return a.v < b.v
	}
	return a.id > b.id
}

// heapOffer keeps in s.heap the k largest candidates seen (by byValueDesc).
func (s *Sampler) heapOffer(c cand, k int) {
	h := s.heap
	if len(h) < k {
		h = append(h, c)
		for i := len(h) - 1; i > 0; {
			p := (i - 1) / 2
			if !less(h[i], h[p]) {
				break
			}
			h[i], h[p] = h[p], h[i]
			i = p
		}
		s.heap = h
		return
	}
	if !less(h[0], c) {
		return
	}
	h[0] = c
	siftDownFrom(h, 0)
}

// siftDownFrom restores the heap property below index i.
func siftDownFrom(h []cand, i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && less(h[r], h[l]) {
			m = r
		}
		if !less(h[m], h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}
