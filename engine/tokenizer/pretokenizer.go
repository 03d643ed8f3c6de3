package tokenizer

import "strings"

// A preTokenizer cuts a piece of normalized text into smaller pieces. It
// appends the non-empty pieces of s to dst and returns dst. Pieces are
// usually substrings of s; ByteLevel's add_prefix_space may prepend a space.
type preTokenizer interface {
	split(dst []string, s string) []string
}

// sequencePT applies its steps in order, each to every piece the previous
// steps produced (HF's Sequence pre-tokenizer).
type sequencePT []preTokenizer

func (q sequencePT) split(dst []string, s string) []string {
	pieces := []string{s}
	var next []string
	for _, step := range q {
		next = next[:0]
		for _, p := range pieces {
			next = step.split(next, p)
		}
		pieces, next = next, pieces
	}
	return append(dst, pieces...)
}

// splitBehavior is HF's SplitDelimiterBehavior.
type splitBehavior int

const (
	behaviorRemoved splitBehavior = iota
	behaviorIsolated
	behaviorMergedWithPrevious
	behaviorMergedWithNext
	behaviorContiguous
)

var splitBehaviors = map[string]splitBehavior{
	"Removed":            behaviorRemoved,
	"Isolated":           behaviorIsolated,
	"MergedWithPrevious": behaviorMergedWithPrevious,
	"MergedWithNext":     behaviorMergedWithNext,
	"Contiguous":         behaviorContiguous,
}

// span is a half-open byte range of a piece and whether it is a match of
// the split pattern (a delimiter) or the text between two matches.
type span struct {
	start, end int
	match      bool
}

// splitPT is HF's Split pre-tokenizer. Matches come from a scanner (a
// registered regex) or from a literal string.
type splitPT struct {
	scan     scanner
	literal  string
	behavior splitBehavior
	invert   bool
}

// spans lists the matches of the pattern in s and the gaps between them,
// in order, covering s.
func (p *splitPT) spans(s string) []span {
	var out []span
	prev := 0
	add := func(start, end int) {
		if prev < start {
			out = append(out, span{prev, start, p.invert})
		}
		out = append(out, span{start, end, !p.invert})
		prev = end
	}
	if p.scan != nil {
		for i := 0; i < len(s); {
			if e := p.scan(s, i); e > i {
				add(i, e)
				i = e
				continue
			}
			_, w := decode(s, i)
			i += w
		}
	} else if p.literal != "" {
		for i := 0; ; {
			k := strings.Index(s[i:], p.literal)
			if k < 0 {
				break
			}
			add(i+k, i+k+len(p.literal))
			i += k + len(p.literal)
		}
	}
	if prev < len(s) {
		out = append(out, span{prev, len(s), p.invert})
	}
	return out
}

func (p *splitPT) split(dst []string, s string) []string {
	if s == "" {
		return dst
	}
	return applyBehavior(dst, s, p.spans(s), p.behavior)
}

// applyBehavior turns spans into pieces the way HF's
// NormalizedString::split does for each delimiter behavior, dropping empty
// pieces.
func applyBehavior(dst []string, s string, spans []span, b splitBehavior) []string {
	emit := func(start, end int) {
		if start < end {
			dst = append(dst, s[start:end])
		}
	}
	switch b {
	case behaviorRemoved:
		for _, sp := range spans {
			if !sp.match {
				emit(sp.start, sp.end)
			}
		}
	case behaviorIsolated:
		for _, sp := range spans {
			emit(sp.start, sp.end)
		}
	case behaviorMergedWithPrevious:
		// A delimiter joins the piece before it unless that was a
		// delimiter too.
		var cur []span
		prevMatch := false
		for _, sp := range spans {
			if sp.match && !prevMatch && len(cur) > 0 {
				cur[len(cur)-1].end = sp.end
			} else {
				cur = append(cur, sp)
			}
			prevMatch = sp.match
		}
		for _, sp := range cur {
			emit(sp.start, sp.end)
		}
	case behaviorMergedWithNext:
		// Mirror image of MergedWithPrevious, walking backwards.
		var cur []span
		nextMatch := false
		for k := len(spans) - 1; k >= 0; k-- {
			sp := spans[k]
			if sp.match && !nextMatch && len(cur) > 0 {
				cur[len(cur)-1].start = sp.start
			} else {
				cur = append(cur, sp)
			}
			nextMatch = sp.match
		}
		for k := len(cur) - 1; k >= 0; k-- {
			emit(cur[k].start, cur[k].end)
		}
	case behaviorContiguous:
		// Consecutive spans of the same kind merge.
		var cur []span
		prevMatch := false
		for _, sp := range spans {
			if sp.match == prevMatch && len(cur) > 0 {
				cur[len(cur)-1].end = sp.end
			} else {
				cur = append(cur, sp)
			}
			prevMatch = sp.match
		}
		for _, sp := range cur {
			emit(sp.start, sp.end)
		}
	}
	return dst
}

// digitsPT is HF's Digits pre-tokenizer: numeric characters are isolated
// one by one (individual_digits) or in runs.
type digitsPT struct{ individual bool }

func (p digitsPT) split(dst []string, s string) []string {
	var spans []span
	prev := 0
	for i := 0; i < len(s); {
		r, w := decode(s, i)
		if isNumber(r) {
			if prev < i {
				spans = append(spans, span{prev, i, false})
			}
			spans = append(spans, span{i, i + w, true})
			prev = i + w
		}
		i += w
	}
	if prev < len(s) {
		spans = append(spans, span{prev, len(s), false})
	}
	b := behaviorContiguous
	if p.individual {
		b = behaviorIsolated
	}
	return applyBehavior(dst, s, spans, b)
}

// byteLevelPT is HF's ByteLevel pre-tokenizer. It must be the last step:
// the byte-to-character mapping it performs is folded into the BPE model,
// which works on raw bytes.
type byteLevelPT struct {
	addPrefixSpace bool
	gpt2           *splitPT // non-nil when use_regex is true
}

func (p byteLevelPT) split(dst []string, s string) []string {
	if s == "" {
		return dst
	}
	if p.addPrefixSpace && s[0] != ' ' {
		s = " " + s
	}
	if p.gpt2 != nil {
		return p.gpt2.split(dst, s)
	}
	return append(dst, s)
}
