package tokenizer

import (
	"sync"
	"sync/atomic"
)

// Limits of the per-model word cache.
const (
	maxCachedWordLen = 256     // bytes; longer words are always merged afresh
	maxCachedWords   = 1 << 16 // entries; the cache stops growing here
)

// bpeModel is HF's BPE model working directly on bytes. Because the
// ByteLevel pre-tokenizer maps every byte to exactly one character, running
// BPE over those characters is the same as running it over the bytes, with
// the vocabulary translated back to raw bytes.
type bpeModel struct {
	// size is the number of vocabulary entries (HF's get_vocab_size), which
	// decides the ids of added tokens missing from the vocabulary.
	size int
	// byteID is the id of each single-byte token, or -1.
	byteID [256]int32
	// merges maps a pair of ids to rank<<32 | merged id.
	merges map[uint64]uint64
	// words maps raw-byte tokens to ids; used only with ignoreMerges.
	words        map[string]int32
	ignoreMerges bool
	unkID        int32 // -1 without an unk_token
	fuseUnk      bool

	cache    sync.Map // string -> []int32
	cacheLen atomic.Int64
	scratch  sync.Pool // *bpeScratch
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// bpeSymbol is one symbol of a word being merged; removed symbols stay in
// place with alive false, as in HF's Word.
type bpeSymbol struct {
	id         int32
	prev, next int32
	alive      bool
}

// mergeCand is a queued merge of the symbol at pos with its right
// neighbour. The queue pops the lowest rank first, then the leftmost.
type mergeCand struct {
	rank  uint32
	pos   int32
	newID int32
}

func (a mergeCand) less(b mergeCand) bool {
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	return a.pos < b.pos
}

type mergeHeap []mergeCand

func (h *mergeHeap) push(c mergeCand) {
	*h = append(*h, c)
	q := *h
	for i := len(q) - 1; i > 0; {
		p := (i - 1) / 2
		if !q[i].less(q[p]) {
			break
		}
		q[i], q[p] = q[p], q[i]
		i = p
	}
}

func (h *mergeHeap) pop() mergeCand {
	q := *h
	top := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q = q[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && q[l].less(q[m]) {
			m = l
		}
		if r := l + 1; r < n && q[r].less(q[m]) {
			m = r
		}
		if m == i {
			break
		}
		q[i], q[m] = q[m], q[i]
		i = m
	}
	*h = q
	return top
}

type bpeScratch struct {
	syms []bpeSymbol
	heap mergeHeap
	out  []int32
}

// encodeWord appends the ids of one pre-tokenized word (raw bytes).
func (m *bpeModel) encodeWord(dst []int, w string) []int {
	if w == "" {
		return dst
	}
	if m.ignoreMerges {
		if id, ok := m.words[w]; ok {
			return append(dst, int(id))
		}
	}
	cacheable := len(w) <= maxCachedWordLen
	if cacheable {
		if v, ok := m.cache.Load(w); ok {
			for _, id := range v.([]int32) {
				dst = append(dst, int(id))
			}
			return dst
		}
	}
	sc, _ := m.scratch.Get().(*bpeScratch)
	if sc == nil {
		sc = new(bpeScratch)
	}
	ids := m.merge(sc, w)
	for _, id := range ids {
		dst = append(dst, int(id))
	}
	if cacheable && m.cacheLen.Load() < maxCachedWords {
		if _, loaded := m.cache.LoadOrStore(w, append([]int32(nil), ids...)); !loaded {
			m.cacheLen.Add(1)
		}
	}
	m.scratch.Put(sc)
	return dst
}

// merge runs HF's Word::merge_all on w and returns the resulting ids in
// sc.out.
func (m *bpeModel) merge(sc *bpeScratch, w string) []int32 {
	syms := sc.syms[:0]
	add := func(id int32) {
		n := int32(len(syms))
		syms = append(syms, bpeSymbol{id: id, prev: n - 1, next: n + 1, alive: true})
	}
	// Characters (bytes) missing from the vocabulary become unk_token,
	// fused if asked, or vanish when there is no unk_token, as in HF.
	pendingUnk := false
	for i := 0; i < len(w); i++ {
		if id := m.byteID[w[i]]; id >= 0 {
			if pendingUnk {
				add(m.unkID)
				pendingUnk = false
			}
			add(id)
			continue
		}
		if m.unkID >= 0 {
			if pendingUnk && !m.fuseUnk {
				add(m.unkID)
			}
			pendingUnk = true
		}
	}
	if pendingUnk {
		add(m.unkID)
	}
	if len(syms) > 0 {
		syms[len(syms)-1].next = -1
	}

	h := sc.heap[:0]
	for i := 0; i+1 < len(syms); i++ {
		if v, ok := m.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
			h.push(mergeCand{rank: uint32(v >> 32), pos: int32(i), newID: int32(uint32(v))})
		}
	}
	for len(h) > 0 {
		top := h.pop()
		s := &syms[top.pos]
		if !s.alive || s.next < 0 {
			continue
		}
		right := syms[s.next]
		// Skip stale entries: the pair at pos must still merge into the
		// same token.
		if v, ok := m.merges[pairKey(s.id, right.id)]; !ok || int32(uint32(v)) != top.newID {
			continue
		}
		syms[s.next].alive = false
		s.id = top.newID
		s.next = right.next
		if right.next >= 0 {
			syms[right.next].prev = top.pos
		}
		if s.prev >= 0 {
			if v, ok := m.merges[pairKey(syms[s.prev].id, s.id)]; ok {
				h.push(mergeCand{rank: uint32(v >> 32), pos: s.prev, newID: int32(uint32(v))})
			}
		}
		if s.next >= 0 {
			if v, ok := m.merges[pairKey(s.id, syms[s.next].id)]; ok {
				h.push(mergeCand{rank: uint32(v >> 32), pos: top.pos, newID: int32(uint32(v))})
			}
		}
	}

	out := sc.out[:0]
	for _, s := range syms {
		if s.alive {
			out = append(out, s.id)
		}
	}
	sc.syms, sc.heap, sc.out = syms, h, out
	return out
}
