// Package runner is a minimal offline generation loop over the glm5next
// model: it admits requests into a paged cache, prefills their prompts in
// chunks and decodes them step by step, batching every active sequence into
// one forward per step. It is deliberately simpler than engine/core (no
// preemption, budgets or streaming) so tests can use it as an independent
// reference for the engine and the parity checks; `npuserve generate` runs
// through engine/core like the server.
package runner

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/npuserve/npuserve/engine/kvcache"
	"github.com/npuserve/npuserve/engine/model/glm5next"
)

// Request is one prompt to continue.
type Request struct {
	Prompt       []int32
	MaxNewTokens int
	// Temperature 0 is greedy decoding (ties to the lower token id);
	// otherwise tokens are sampled from softmax(logits/Temperature) with a
	// PCG generator seeded by Seed alone, so a request's output does not
	// depend on what it is batched with.
	Temperature float64
	Seed        uint64
}

// Options configure the loop.
type Options struct {
	// ChunkSize is the most prompt tokens a sequence feeds per step
	// (0: the whole prompt at once).
	ChunkSize int
	// StopTokens end a sequence when generated (the stop token is kept in
	// the output).
	StopTokens []int32
	// BlockSize is the cache block size in tokens (0: 64 rounded up to a
	// multiple of index_kpool).
	BlockSize int
	// NumBlocks bounds the cache (0: enough for every request at once).
	// Requests wait until their whole reservation fits.
	NumBlocks int
	// MaxSeqs bounds the concurrently running sequences (0: all).
	MaxSeqs int
}

// pcgStream is the second PCG seed word of every request's generator.
const pcgStream = 0x9e3779b97f4a7c15

// seqState is one request's progress.
type seqState struct {
	req    Request
	index  int
	seq    *kvcache.Seq
	fed    int // prompt tokens fed so far
	out    []int32
	rng    *rand.Rand
	done   bool
	blocks int // blocks reserved for the whole request
}

// Generate runs every request to completion and returns the generated
// token ids per request.
func Generate(m *glm5next.Model, reqs []Request, opt Options) ([][]int32, error) {
	cfg := m.Config()
	kp := cfg.IndexKPool
	bs := opt.BlockSize
	if bs == 0 {
		bs = (64 + kp - 1) / kp * kp
	}
	states := make([]*seqState, len(reqs))
	need := 0
	for i, r := range reqs {
		if len(r.Prompt) == 0 {
			return nil, fmt.Errorf("runner: request %d has an empty prompt", i)
		}
		if r.MaxNewTokens < 0 || r.Temperature < 0 || math.IsNaN(r.Temperature) {
			return nil, fmt.Errorf("runner: request %d: invalid max_new_tokens %d or temperature %g", i, r.MaxNewTokens, r.Temperature)
		}
		for _, id := range r.Prompt {
			if id < 0 || int(id) >= cfg.VocabSize {
				return nil, fmt.Errorf("runner: request %d: token %d outside the vocabulary of %d", i, id, cfg.VocabSize)
			}
		}
		positions := len(r.Prompt) + max(r.MaxNewTokens-1, 0)
		st := &seqState{req: r, index: i, blocks: (positions + bs - 1) / bs}
		st.rng = rand.New(rand.NewPCG(r.Seed, pcgStream))
		st.done = r.MaxNewTokens == 0
		states[i] = st
		need += st.blocks
	}
	numBlocks := opt.NumBlocks
	if numBlocks == 0 {
		numBlocks = need
	}
	slots := len(reqs)
	if opt.MaxSeqs > 0 {
		slots = min(slots, opt.MaxSeqs)
	}
	slots = max(slots, 1)
	for i, st := range states {
		if st.blocks > numBlocks {
			return nil, fmt.Errorf("runner: request %d needs %d cache blocks of %d tokens, the cache has %d", i, st.blocks, bs, numBlocks)
		}
	}
	mgr, err := kvcache.New(kvcache.Config{BlockSize: bs, NumBlocks: numBlocks, NumStateSlots: slots, KPool: kp})
	if err != nil {
		return nil, err
	}
	cache, err := m.NewCache(numBlocks, bs, slots)
	if err != nil {
		return nil, err
	}
	defer cache.Free(m.Backend())

	stop := map[int32]bool{}
	for _, t := range opt.StopTokens {
		stop[t] = true
	}
	reserved := 0
	var running []*seqState
	next := 0 // next request to admit
	for {
		// Admit waiting requests in order while their reservation fits.
		for next < len(states) {
			st := states[next]
			if st.done {
				next++
				continue
			}
			if reserved+st.blocks > numBlocks || mgr.FreeStateSlots() == 0 {
				break
			}
			if st.seq, err = mgr.Allocate(); err != nil {
				return nil, err
			}
			reserved += st.blocks
			running = append(running, st)
			next++
		}
		if len(running) == 0 {
			break
		}
		if err := step(m, mgr, cache, running, opt.ChunkSize); err != nil {
			return nil, err
		}
		kept := running[:0]
		for _, st := range running {
			if n := len(st.out); n > 0 && (n >= st.req.MaxNewTokens || stop[st.out[n-1]]) {
				st.done = true
				mgr.Free(st.seq)
				reserved -= st.blocks
				continue
			}
			kept = append(kept, st)
		}
		running = kept
	}
	out := make([][]int32, len(states))
	for i, st := range states {
		out[i] = st.out
	}
	return out, nil
}

// step feeds every running sequence its next prompt chunk or its last
// generated token and samples from the sequences whose prompt is complete.
func step(m *glm5next.Model, mgr *kvcache.Manager, cache *glm5next.Cache, running []*seqState, chunk int) error {
	seqs := make([]*kvcache.Seq, len(running))
	rows := make([]int, len(running))
	var tokens []int32
	var logitRows []int
	var sampled []*seqState
	for i, st := range running {
		var in []int32
		if st.fed < len(st.req.Prompt) {
			n := len(st.req.Prompt) - st.fed
			if chunk > 0 {
				n = min(n, chunk)
			}
			in = st.req.Prompt[st.fed : st.fed+n]
			st.fed += n
		} else {
			in = st.out[len(st.out)-1:]
		}
		if err := mgr.Append(st.seq, len(in)); err != nil {
			// Reservations make this unreachable; report it rather than
			// corrupt the batch.
			return fmt.Errorf("runner: request %d: %w", st.index, err)
		}
		seqs[i], rows[i] = st.seq, len(in)
		tokens = append(tokens, in...)
		if st.fed == len(st.req.Prompt) {
			logitRows = append(logitRows, len(tokens)-1)
			sampled = append(sampled, st)
		}
	}
	batch := &glm5next.Batch{Tokens: tokens, Layout: mgr.Layout(seqs, rows), LogitRows: logitRows}
	if logitRows == nil {
		batch.LogitRows = []int{}
	}
	be := m.Backend()
	logits, err := m.Forward(cache, batch)
	if err != nil {
		return err
	}
	defer be.Free(logits)
	if len(sampled) == 0 {
		return nil
	}
	host, err := glm5next.DownloadRows(be, logits) // the step's one synchronisation point
	if err != nil {
		return err
	}
	for i, st := range sampled {
		tok, err := sample(host[i], st.req.Temperature, st.rng)
		if err != nil {
			return fmt.Errorf("runner: request %d: %w", st.index, err)
		}
		st.out = append(st.out, tok)
	}
	return nil
}

// errNaN reports logits that cannot be sampled from.
var errNaN = errors.New("logits contain NaN")

// sample picks a token: argmax for temperature 0 (ties to the lower id),
// else a draw from softmax(logits/temperature).
func sample(logits []float32, temperature float64, r *rand.Rand) (int32, error) {
	best := 0
	for i, v := range logits {
		if v != v {
			return 0, errNaN
		}
		if v > logits[best] {
			best = i
		}
	}
	if temperature == 0 {
		return int32(best), nil
	}
	mx := float64(logits[best])
	var sum float64
	p := make([]float64, len(logits))
	for i, v := range logits {
		p[i] = math.Exp((float64(v) - mx) / temperature)
		sum += p[i]
	}
	u := r.Float64() * sum
	for i, v := range p {
		u -= v
		if u < 0 {
			return int32(i), nil
		}
	}
	return int32(best), nil
}
