package worker

import (
	"fmt"
	"math"
	"slices"

	"github.com/npuserve/npuserve/engine/model"
	"github.com/npuserve/npuserve/engine/model/glm5next"
	"github.com/npuserve/npuserve/engine/sampling"
	"github.com/npuserve/npuserve/hccl"
	"github.com/npuserve/npuserve/npu"
)

// Vocabulary-parallel sampling. A TP group whose lm_head is split by
// vocabulary keeps each rank's columns of the logits where they were
// computed (glm5next.Model.ShardLogits) instead of all-gathering whole
// rows to every rank: for a step whose rows can be sampled from a
// reduction (greedy, top-k and min-p rows without logprobs;
// sampling.Sampler.Reducible), every rank reduces its own columns on its
// device (npu.SampleReducer) and sends only the reduced values to the
// leader, which merges them into the whole row's reduction exactly (the
// first k of npu.TopK's order over all ranks' candidates: a rank's k
// best hold every entry of the row's k best in its columns); a step with
// a row that needs its whole row gathers the rows as before
// (GatherLogits), and so does the engine after a reduction that turned
// out short (sampling.ErrNotReducible) for the rows concerned.
// Per greedy decode step the bytes between ranks fall from
// (TP-1)·R·V·4 to every rank to (TP-1)·R·(8k+8) to the leader.

var _ model.ShardedLogits = (*Leader)(nil)

// shardLogits keeps m's logits sharded when m is vocabulary-parallel and
// its backend can reduce them; the leader and its followers decide alike
// (the same model split, the same backend).
func shardLogits(m *glm5next.Model) {
	if _, ok := m.Backend().(npu.SampleReducer); ok {
		m.ShardLogits(true)
	}
}

// VocabSharded implements model.ShardedLogits.
func (l *Leader) VocabSharded() (int, bool) {
	_, _, sharded := l.m.VocabShard()
	return l.m.Config().VocabSize, sharded && l.tp != nil
}

// GatherLogits implements model.ShardedLogits: the followers join the
// all-gather of their last Forward's columns.
func (l *Leader) GatherLogits(shard *npu.Tensor) (*npu.Tensor, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.send(cmdGather, 0, 0, 0); err != nil {
		return nil, err
	}
	full, err := l.m.GatherShards(shard)
	if err != nil {
		return nil, collectiveFailed("gathering the logits", err)
	}
	return full, nil
}

// ReduceLogits implements model.ShardedLogits: every rank reduces its
// columns of each row to the k best and the touched ids it holds; the
// followers send theirs to the leader, which merges them.
func (l *Leader) ReduceLogits(shard *npu.Tensor, k int, touched [][]int32) ([]model.RowReduction, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	be := l.m.Backend()
	R := shard.Dim(0)
	if len(touched) != R {
		return nil, fmt.Errorf("worker: ReduceLogits: touched ids for %d rows, logits of %d", len(touched), R)
	}
	V, tp := l.m.Config().VocabSize, l.tp.Size()
	words := encodeTouched(nil, touched)
	if err := l.sendPayload(cmdReduce, k, words, R, "a logits reduction"); err != nil {
		return nil, err
	}
	var err error
	parts := make([]shardParts, tp)
	defer func() {
		for i := range parts {
			parts[i].free(be)
		}
	}()
	lo, hi, _ := l.m.VocabShard()
	if parts[0], err = reduceShard(be, shard, lo, hi, k, touched); err != nil {
		return nil, err
	}
	for t := 1; t < tp; t++ {
		tlo, thi := V/tp*t, V/tp*(t+1)
		if parts[t], err = allocShard(be, R, min(k, thi-tlo), countTouched(touched, tlo, thi)); err != nil {
			return nil, err
		}
	}
	if err := l.recvParts(func(t int) []*npu.Tensor { return parts[t].tensors() }, "the reduced logits"); err != nil {
		return nil, err
	}
	host := make([]hostShard, tp)
	for t := range parts {
		if host[t], err = parts[t].download(be); err != nil {
			return nil, err
		}
		host[t].lo = V / tp * t
	}
	return mergeShards(host, R, k, V, tp, touched), nil
}

// shardParts are one rank's reduction of its columns: stats I32 [R, 2]
// (NaN and +Inf counts), the kt best values and ids (local ids) [R, kt],
// and the raw values of the touched ids in its columns, row by row.
type shardParts struct {
	stats, vals, ids, touched *npu.Tensor
}

// tensors lists the parts in the order they travel.
func (s shardParts) tensors() []*npu.Tensor {
	var out []*npu.Tensor
	for _, t := range []*npu.Tensor{s.stats, s.vals, s.ids, s.touched} {
		if t != nil {
			out = append(out, t)
		}
	}
	return out
}

func (s *shardParts) free(be npu.Backend) {
	for _, t := range s.tensors() {
		be.Free(t)
	}
	*s = shardParts{}
}

// allocShard allocates the parts of a reduction of R rows to kt best and
// n touched values.
func allocShard(be npu.Backend, R, kt, n int) (s shardParts, err error) {
	defer func() {
		if err != nil {
			s.free(be)
		}
	}()
	if s.stats, err = be.Alloc(npu.I32, R, 2); err != nil {
		return s, err
	}
	if kt > 0 {
		if s.vals, err = be.Alloc(npu.F32, R, kt); err != nil {
			return s, err
		}
		if s.ids, err = be.Alloc(npu.I32, R, kt); err != nil {
			return s, err
		}
	}
	if n > 0 {
		if s.touched, err = be.Alloc(npu.F32, n, 1); err != nil {
			return s, err
		}
	}
	return s, nil
}

// reduceShard enqueues this rank's reduction of shard [R, hi-lo], the
// columns [lo, hi) of the logits.
func reduceShard(be npu.Backend, shard *npu.Tensor, lo, hi, k int, touched [][]int32) (shardParts, error) {
	red, ok := be.(npu.SampleReducer)
	if !ok {
		return shardParts{}, fmt.Errorf("worker: backend %s cannot reduce logits", be.Name())
	}
	R, vl := shard.Dim(0), hi-lo
	var idx []int32
	for r, ids := range touched {
		for _, id := range ids {
			if int(id) >= lo && int(id) < hi {
				idx = append(idx, int32(r*vl+int(id)-lo))
			}
		}
	}
	s, err := allocShard(be, R, min(k, vl), len(idx))
	if err != nil {
		return s, err
	}
	red.SampleReduce(s.vals, s.ids, s.stats, shard, min(k, vl))
	if len(idx) > 0 {
		it, err := be.Alloc(npu.I32, len(idx))
		if err != nil {
			s.free(be)
			return s, err
		}
		defer be.Free(it) // after the Gather on the stream
		if err := be.Upload(it, npu.EncodeInt32s(idx)); err != nil {
			s.free(be)
			return s, err
		}
		be.Gather(s.touched, shard.Reshape(R*vl, 1), it)
	}
	return s, nil
}

// hostShard is one rank's reduction on the host.
type hostShard struct {
	lo      int
	stats   []int32
	vals    []float32
	ids     []int32
	touched []float32
	kt      int
}

// download is the sync point of a reduction.
func (s shardParts) download(be npu.Backend) (h hostShard, err error) {
	if h.stats, err = npu.DownloadI32(be, s.stats); err != nil {
		return h, err
	}
	if s.vals != nil {
		h.kt = s.vals.Dim(1)
		if h.vals, err = npu.DownloadF32(be, s.vals); err != nil {
			return h, err
		}
		if h.ids, err = npu.DownloadI32(be, s.ids); err != nil {
			return h, err
		}
	}
	if s.touched != nil {
		if h.touched, err = npu.DownloadF32(be, s.touched); err != nil {
			return h, err
		}
	}
	return h, nil
}

// mergeShards merges the ranks' reductions into whole-row reductions: the
// k best of every rank's candidates in npu.TopK's order (value
// descending, ties to the lower id, NaN last), the counts summed, each
// touched id's value from the rank that holds it.
func mergeShards(host []hostShard, R, k, V, tp int, touched [][]int32) []model.RowReduction {
	out := make([]model.RowReduction, R)
	cursor := make([]int, tp)
	per := V / tp
	type cand struct {
		v  float32
		id int32
	}
	var cs []cand
	for r := range R {
		cs = cs[:0]
		var red model.RowReduction
		for _, h := range host {
			red.NaN += int(h.stats[2*r])
			red.PosInf += int(h.stats[2*r+1])
			for j := range h.kt {
				cs = append(cs, cand{h.vals[r*h.kt+j], h.ids[r*h.kt+j] + int32(h.lo)})
			}
		}
		slices.SortFunc(cs, func(a, b cand) int { return npu.CompareTopK(a.v, a.id, b.v, b.id) })
		n := min(k, len(cs))
		red.IDs, red.Vals = make([]int32, n), make([]float32, n)
		for j := range n {
			red.IDs[j], red.Vals[j] = cs[j].id, cs[j].v
		}
		red.TouchedVals = make([]float32, len(touched[r]))
		for j, id := range touched[r] {
			t := min(int(id)/per, tp-1)
			red.TouchedVals[j] = host[t].touched[cursor[t]]
			cursor[t]++
		}
		out[r] = red
	}
	return out
}

// countTouched counts the touched ids in [lo, hi).
func countTouched(touched [][]int32, lo, hi int) int {
	n := 0
	for _, ids := range touched {
		for _, id := range ids {
			if int(id) >= lo && int(id) < hi {
				n++
			}
		}
	}
	return n
}

// encodeTouched appends the touched ids of each row: the rows' counts,
// then their ids.
func encodeTouched(dst []int32, touched [][]int32) []int32 {
	for _, ids := range touched {
		dst = append(dst, int32(len(ids)))
	}
	for _, ids := range touched {
		dst = append(dst, ids...)
	}
	return dst
}

// decodeTouched reads encodeTouched's words for rows rows.
func decodeTouched(w []int32, rows int) ([][]int32, error) {
	if len(w) < rows {
		return nil, fmt.Errorf("worker: a touched-id list of %d words for %d rows", len(w), rows)
	}
	out := make([][]int32, rows)
	off := rows
	for r := range rows {
		n := int(w[r])
		if n < 0 || off+n > len(w) {
			return nil, fmt.Errorf("worker: a touched-id list that does not add up (row %d: %d ids)", r, n)
		}
		out[r] = w[off : off+n]
		off += n
	}
	if off != len(w) {
		return nil, fmt.Errorf("worker: a touched-id list with %d extra words", len(w)-off)
	}
	return out, nil
}

// QueryLogits implements model.ShardedLogits: the followers answer the
// queries for their columns and send the answers to the leader, which
// answers for its own and merges them (model.MergeAnswers).
func (l *Leader) QueryLogits(shard *npu.Tensor, rows []int, qs []sampling.Query) ([]sampling.Answer, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	be := l.m.Backend()
	words := encodeQueries(nil, rows, qs)
	if err := l.sendPayload(cmdQuery, len(qs), words, 0, "sampling queries"); err != nil {
		return nil, err
	}
	var err error
	tp, V := l.tp.Size(), l.m.Config().VocabSize
	parts := make([]*model.QueryParts, tp)
	defer func() {
		for _, x := range parts {
			if x != nil {
				x.Free(be)
			}
		}
	}()
	if parts[0], err = model.EnqueueQueries(be, shard, rows, qs); err != nil {
		return nil, err
	}
	for t := 1; t < tp; t++ {
		if parts[t], err = model.AllocQueries(be, qs); err != nil {
			return nil, err
		}
	}
	if err := l.recvParts(func(t int) []*npu.Tensor { return parts[t].Tensors() }, "sampling answers"); err != nil {
		return nil, err
	}
	ans := make([][]sampling.Answer, tp)
	for t, x := range parts {
		if ans[t], err = x.Answers(be, V/tp*t); err != nil {
			return nil, err
		}
	}
	return model.MergeAnswers(ans), nil
}

// encodeQueries appends sampling queries as words, six per query: the
// row, the kind, M's float32 bits, InvT's float64 bits (low word first)
// and the bin.
func encodeQueries(dst []int32, rows []int, qs []sampling.Query) []int32 {
	for i, q := range qs {
		b := math.Float64bits(q.InvT)
		dst = append(dst, int32(rows[i]), int32(q.Kind), int32(math.Float32bits(q.M)), int32(uint32(b)), int32(uint32(b>>32)), int32(q.Bin))
	}
	return dst
}

// decodeQueries reads encodeQueries' words for n queries.
func decodeQueries(w []int32, n int) (rows []int, qs []sampling.Query, err error) {
	if n < 0 || len(w) != 6*n {
		return nil, nil, fmt.Errorf("worker: %d words for %d sampling queries", len(w), n)
	}
	for i := range n {
		x := w[6*i : 6*i+6]
		rows = append(rows, int(x[0]))
		qs = append(qs, sampling.Query{
			Kind: sampling.QueryKind(x[1]),
			M:    math.Float32frombits(uint32(x[2])),
			InvT: math.Float64frombits(uint64(uint32(x[3])) | uint64(uint32(x[4]))<<32),
			Bin:  int(x[5]),
		})
	}
	return rows, qs, nil
}

// sendPayload sends the followers a command whose header's second word
// counts words, then the words themselves (what names them in errors).
func (l *Leader) sendPayload(cmd, a int, words []int32, c int, what string) error {
	if err := l.send(cmd, a, len(words), c); err != nil {
		return err
	}
	be := l.m.Backend()
	var err error
	if l.payload, err = growI32(be, l.payload, len(words)); err != nil {
		return err
	}
	p := l.payload.Rows(0, len(words))
	if err := be.Upload(p, npu.EncodeInt32s(words)); err != nil {
		return err
	}
	if err := npu.RunOnStream(be, func() error { return l.tp.Broadcast(p, 0) }); err != nil {
		return collectiveFailed("broadcasting "+what, err)
	}
	return nil
}

// recvParts receives every follower t's tensors parts(t), in order.
func (l *Leader) recvParts(parts func(t int) []*npu.Tensor, what string) error {
	err := npu.RunOnStream(l.m.Backend(), func() error {
		for t := 1; t < l.tp.Size(); t++ {
			for _, x := range parts(t) {
				if err := l.tp.Recv(x, t); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return collectiveFailed("receiving "+what, err)
	}
	return nil
}

// recvPayload receives a command's n payload words (a follower).
func recvPayload(be npu.Backend, tp hccl.Comm, payload **npu.Tensor, n int, what string) ([]int32, error) {
	var err error
	if *payload, err = growI32(be, *payload, n); err != nil {
		return nil, err
	}
	p := (*payload).Rows(0, n)
	if err := npu.RunOnStream(be, func() error { return tp.Broadcast(p, 0) }); err != nil {
		return nil, fmt.Errorf("receiving %s: %w", what, err)
	}
	return npu.DownloadI32(be, p)
}

// sendParts sends a follower's tensors to the leader, in order.
func sendParts(be npu.Backend, tp hccl.Comm, parts []*npu.Tensor, what string) error {
	err := npu.RunOnStream(be, func() error {
		for _, t := range parts {
			if err := tp.Send(t, 0); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return collectiveFailed("sending "+what, err)
	}
	return nil
}
