package tokenizer

import (
	"slices"
	"sort"
)

// addedToken is an entry of tokenizer.json's added_tokens after HF's id
// assignment.
type addedToken struct {
	id         int
	content    string
	singleWord bool
	lstrip     bool
	rstrip     bool
	normalized bool
	special    bool
}

// literalMatcher finds non-overlapping occurrences of a set of strings,
// leftmost first and, among those starting at the same byte, longest first
// (aho-corasick's LeftmostLongest, which HF uses). It is a byte trie.
type literalMatcher struct {
	root  [256]int32 // child of the root per byte; 0 means none
	nodes []trieNode
	edges []trieEdge
}

type trieNode struct {
	term       int32 // index of the pattern ending here, or -1
	start, end int32 // children: edges[start:end], sorted by byte
}

type trieEdge struct {
	b  byte
	to int32
}

// newLiteralMatcher builds a matcher; patterns[i] reports index i. Empty
// patterns are ignored; for duplicates the first index wins.
func newLiteralMatcher(patterns []string) *literalMatcher {
	type buildNode struct {
		term     int32
		children map[byte]int32
	}
	bn := []buildNode{{term: -1}} // node 0 is the root
	for i, p := range patterns {
		if p == "" {
			continue
		}
		n := int32(0)
		for k := 0; k < len(p); k++ {
			if bn[n].children == nil {
				bn[n].children = map[byte]int32{}
			}
			next, ok := bn[n].children[p[k]]
			if !ok {
				next = int32(len(bn))
				bn = append(bn, buildNode{term: -1})
				bn[n].children[p[k]] = next
			}
			n = next
		}
		if bn[n].term < 0 {
			bn[n].term = int32(i)
		}
	}
	m := &literalMatcher{nodes: make([]trieNode, len(bn))}
	for i, b := range bn {
		keys := make([]int, 0, len(b.children))
		for c := range b.children {
			keys = append(keys, int(c))
		}
		sort.Ints(keys)
		m.nodes[i] = trieNode{term: b.term, start: int32(len(m.edges))}
		for _, c := range keys {
			m.edges = append(m.edges, trieEdge{byte(c), b.children[byte(c)]})
		}
		m.nodes[i].end = int32(len(m.edges))
	}
	for _, e := range m.edges[m.nodes[0].start:m.nodes[0].end] {
		m.root[e.b] = e.to
	}
	return m
}

func (m *literalMatcher) child(n int32, c byte) int32 {
	for _, e := range m.edges[m.nodes[n].start:m.nodes[n].end] {
		if e.b == c {
			return e.to
		}
		if e.b > c {
			break
		}
	}
	return -1
}

// literalMatch is one occurrence found by a literalMatcher.
type literalMatch struct {
	start, end int
	pattern    int
}

// findAll returns the leftmost-longest non-overlapping matches in s.
func (m *literalMatcher) findAll(s string) []literalMatch {
	var out []literalMatch
	for i := 0; i < len(s); {
		n := m.root[s[i]]
		if n == 0 {
			i++
			continue
		}
		best, bestEnd := int32(-1), 0
		for j := i + 1; ; j++ {
			if t := m.nodes[n].term; t >= 0 {
				best, bestEnd = t, j
			}
			if j == len(s) {
				break
			}
			if n = m.child(n, s[j]); n < 0 {
				break
			}
		}
		if best < 0 {
			i++
			continue
		}
		out = append(out, literalMatch{i, bestEnd, int(best)})
		i = bestEnd
	}
	return out
}

// addedSet is one of the two added-token matchers: tokens matched on the
// raw text (normalized false) or on the normalized text (normalized true).
type addedSet struct {
	matcher *literalMatcher
	tokens  []*addedToken // by pattern index
}

// segment is a piece of input: either plain text or one added token.
type segment struct {
	text string
	id   int // -1 for plain text
}

// split cuts s into plain-text segments and added-token segments following
// HF's AddedVocabulary::find_matches, including single_word, lstrip and
// rstrip. Empty text segments are dropped.
func (a *addedSet) split(dst []segment, s string) []segment {
	if a == nil || len(a.tokens) == 0 || s == "" {
		if s != "" {
			dst = append(dst, segment{s, -1})
		}
		return dst
	}
	startOffset := 0
	for _, mt := range a.matcher.findAll(s) {
		tok := a.tokens[mt.pattern]
		start, stop := mt.start, mt.end
		if tok.singleWord {
			startSpace := start == 0 || !endsWithWord(s[:start])
			stopSpace := stop == len(s) || !startsWithWord(s[stop:])
			if !startSpace || !stopSpace {
				continue
			}
		}
		if tok.lstrip {
			start = max(spaceLeftmostAtEnd(s[:start]), startOffset)
		}
		if tok.rstrip {
			stop += spaceRightmostAtStart(s[stop:])
		}
		// A previous rstrip may have consumed bytes this match starts
		// with; HF would then emit overlapping pieces. Clamp instead.
		start = max(start, startOffset)
		if stop < start {
			stop = start
		}
		if startOffset < start {
			dst = append(dst, segment{s[startOffset:start], -1})
		}
		dst = append(dst, segment{s[start:stop], tok.id})
		startOffset = stop
	}
	if startOffset < len(s) {
		dst = append(dst, segment{s[startOffset:], -1})
	}
	return dst
}

func endsWithWord(s string) bool {
	if s == "" {
		return false
	}
	r, _ := lastRune(s)
	return isWordChar(r)
}

func startsWithWord(s string) bool {
	if s == "" {
		return false
	}
	r, _ := decode(s, 0)
	return isWordChar(r)
}

// spaceLeftmostAtEnd returns where the trailing whitespace of s starts.
func spaceLeftmostAtEnd(s string) int {
	i := len(s)
	for i > 0 {
		r, w := lastRune(s[:i])
		if !isSpace(r) {
			break
		}
		i -= w
	}
	return i
}

// spaceRightmostAtStart returns the length of the leading whitespace of s.
func spaceRightmostAtStart(s string) int {
	return runWhile(s, 0, isSpace)
}

// addedVocab reproduces HF's AddedVocabulary::add_tokens id assignment.
type addedVocab struct {
	vocab      map[string]int
	modelSize  int
	byContent  map[string]int         // added_tokens_map
	byID       map[int]*addedToken    // added_tokens_map_r
	specials   []string               // special_tokens, in order
	specialSet map[string]bool        // special_tokens_set
	classic    []string               // added_tokens (non-special), in order
	listFlags  map[string]*addedToken // flags of the list entry, by content
	maxID      int                    // largest value in byContent
}

func newAddedVocab(vocab map[string]int, modelSize int) *addedVocab {
	return &addedVocab{
		vocab:      vocab,
		modelSize:  modelSize,
		byContent:  map[string]int{},
		byID:       map[int]*addedToken{},
		specialSet: map[string]bool{},
		listFlags:  map[string]*addedToken{},
	}
}

// add registers tok and returns its id, or -1 when HF ignores it.
func (av *addedVocab) add(tok addedToken) int {
	if tok.content == "" {
		return -1
	}
	if tok.special && !av.specialSet[tok.content] {
		av.specials = append(av.specials, tok.content)
		av.specialSet[tok.content] = true
		av.listFlags[tok.content] = &tok
	}
	id, ok := av.byContent[tok.content]
	if ok && sameToken(av.byID[id], &tok) {
		return id // HF ignores an identical token
	}
	if !ok {
		id, ok = av.vocab[tok.content]
	}
	if !ok {
		// A new id: the model's vocabulary size, or one past the largest
		// added id once that reaches the vocabulary size.
		id = av.modelSize
		if len(av.byContent) > 0 && (av.maxID >= av.modelSize || av.modelSize == 0) {
			id = av.maxID + 1
		}
	}
	tok.id = id
	if len(av.byContent) == 0 || id > av.maxID {
		av.maxID = id
	}
	av.byContent[tok.content] = id
	stored := tok
	av.byID[id] = &stored
	if !av.specialSet[tok.content] {
		av.classic = append(av.classic, tok.content)
		av.listFlags[tok.content] = &stored
	}
	return id
}

func sameToken(a, b *addedToken) bool {
	return a.content == b.content && a.singleWord == b.singleWord && a.lstrip == b.lstrip &&
		a.rstrip == b.rstrip && a.normalized == b.normalized && a.special == b.special
}

// finishAdded builds the two added-token matchers and the id-ordered list
// of added tokens.
func (t *Tokenizer) finishAdded(av *addedVocab) {
	var rawPats, normPats []string
	var rawToks, normToks []*addedToken
	seen := map[string]bool{}
	for _, content := range slices.Concat(av.specials, av.classic) {
		if seen[content] {
			continue
		}
		seen[content] = true
		tok := av.byID[av.byContent[content]]
		if av.listFlags[content].normalized {
			normPats = append(normPats, t.norm.apply(content))
			normToks = append(normToks, tok)
		} else {
			rawPats = append(rawPats, content)
			rawToks = append(rawToks, tok)
		}
	}
	if len(rawPats) > 0 {
		t.rawAdded = &addedSet{matcher: newLiteralMatcher(rawPats), tokens: rawToks}
	}
	if len(normPats) > 0 {
		t.normAdded = &addedSet{matcher: newLiteralMatcher(normPats), tokens: normToks}
	}
	for _, tok := range av.byID {
		t.added = append(t.added, tok)
	}
	sort.Slice(t.added, func(i, j int) bool { return t.added[i].id < t.added[j].id })
}
