package glm5next

import (
	"fmt"
	"math"

	"github.com/npuserve/npuserve/engine/kvcache"
	"github.com/npuserve/npuserve/npu"
)

// SequenceLogits runs tokens through the model as one prefill from an
// empty cache (teacher forcing) and returns the logits of every position
// [len(tokens)][vocab]. observe, when set, is the forward's ObserveLinear
// hook.
func (m *Model) SequenceLogits(tokens []int32, observe func(modules []string, x *npu.Tensor)) ([][]float32, error) {
	if len(tokens) == 0 {
		return nil, fmt.Errorf("glm5next: empty sequence")
	}
	for i, id := range tokens {
		if id < 0 || int(id) >= m.d.V {
			return nil, fmt.Errorf("glm5next: token %d at position %d outside the vocabulary of %d", id, i, m.d.V)
		}
	}
	kp := m.d.KPool
	bs := (64 + kp - 1) / kp * kp
	blocks := (len(tokens) + bs - 1) / bs
	mgr, err := kvcache.New(kvcache.Config{BlockSize: bs, NumBlocks: blocks, NumStateSlots: 1, KPool: kp})
	if err != nil {
		return nil, err
	}
	cache, err := m.NewCache(blocks, bs, 1)
	if err != nil {
		return nil, err
	}
	defer cache.Free(m.be)
	seq, err := mgr.Allocate()
	if err != nil {
		return nil, err
	}
	if err := mgr.Append(seq, len(tokens)); err != nil {
		return nil, err
	}
	rows := make([]int, len(tokens))
	for i := range rows {
		rows[i] = i
	}
	logits, err := m.Forward(cache, &Batch{
		Tokens: tokens, Layout: mgr.Layout([]*kvcache.Seq{seq}, []int{len(tokens)}),
		LogitRows: rows, ObserveLinear: observe,
	})
	if err != nil {
		return nil, err
	}
	defer m.be.Free(logits)
	return DownloadRows(m.be, logits)
}

// EvalResult summarises a teacher-forced comparison of a model with a
// reference.
type EvalResult struct {
	// Top1Agreement is the fraction of positions where both models'
	// next-token argmax (ties to the lower id) agree.
	Top1Agreement float64 `json:"top1_agreement"`
	// MeanKL is the mean over positions of KL(reference ‖ model) of the
	// next-token distributions, in nats.
	MeanKL float64 `json:"mean_kl"`
	// Tokens is the number of positions compared.
	Tokens int `json:"tokens"`
}

// Compare runs every sequence through the model and the reference
// (teacher forcing: both see the same tokens) and compares their
// next-token predictions at every position.
func Compare(model, ref *Model, seqs [][]int32) (EvalResult, error) {
	if model.d.V != ref.d.V {
		return EvalResult{}, fmt.Errorf("glm5next: vocabularies differ (%d and %d)", model.d.V, ref.d.V)
	}
	var agree, n int
	var kl float64
	for i, s := range seqs {
		a, err := model.SequenceLogits(s, nil)
		if err != nil {
			return EvalResult{}, fmt.Errorf("sequence %d: %w", i, err)
		}
		b, err := ref.SequenceLogits(s, nil)
		if err != nil {
			return EvalResult{}, fmt.Errorf("sequence %d: %w", i, err)
		}
		for p := range a {
			if argmax(a[p]) == argmax(b[p]) {
				agree++
			}
			kl += KL(b[p], a[p])
			n++
		}
	}
	if n == 0 {
		return EvalResult{}, fmt.Errorf("glm5next: no tokens to compare")
	}
	return EvalResult{Top1Agreement: float64(agree) / float64(n), MeanKL: kl / float64(n), Tokens: n}, nil
}

// argmax is the index of the largest logit, ties to the lower index.
func argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}

// KL is KL(softmax(p) ‖ softmax(q)) of two logit vectors, in float64
// nats: sum_i P_i (log P_i - log Q_i).
func KL(p, q []float32) float64 {
	lp, lq := logSoftmax(p), logSoftmax(q)
	var s float64
	for i := range lp {
		if pi := math.Exp(lp[i]); pi > 0 {
			s += pi * (lp[i] - lq[i])
		}
	}
	return max(s, 0)
}

// logSoftmax returns log softmax(v) in float64.
func logSoftmax(v []float32) []float64 {
	mx := math.Inf(-1)
	for _, x := range v {
		mx = math.Max(mx, float64(x))
	}
	var z float64
	for _, x := range v {
		z += math.Exp(float64(x) - mx)
	}
	lz := mx + math.Log(z)
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x) - lz
	}
	return out
}
