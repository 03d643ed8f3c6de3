package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
)

// configError marks an error in tokenizer_config.json, so Load can name
// the right file.
type configError struct{ err error }

func (e configError) Error() string { return e.err.Error() }

// fileJSON is the top level of tokenizer.json.
type fileJSON struct {
	Truncation    json.RawMessage  `json:"truncation"`
	Padding       json.RawMessage  `json:"padding"`
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
	Model         json.RawMessage  `json:"model"`
}

type addedTokenJSON struct {
	ID         *int   `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized *bool  `json:"normalized"`
	Special    bool   `json:"special"`
}

func (a addedTokenJSON) token() addedToken {
	t := addedToken{
		content:    a.Content,
		singleWord: a.SingleWord,
		lstrip:     a.LStrip,
		rstrip:     a.RStrip,
		normalized: !a.Special, // HF's default for a missing field
		special:    a.Special,
	}
	if a.Normalized != nil {
		t.normalized = *a.Normalized
	}
	return t
}

type bpeJSON struct {
	Type                    string          `json:"type"`
	Dropout                 *float64        `json:"dropout"`
	UnkToken                *string         `json:"unk_token"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	FuseUnk                 bool            `json:"fuse_unk"`
	ByteFallback            bool            `json:"byte_fallback"`
	IgnoreMerges            bool            `json:"ignore_merges"`
	Vocab                   map[string]int  `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
}

// typed is the "type" tag every component carries.
type typed struct {
	Type string `json:"type"`
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

func componentType(raw json.RawMessage) (string, error) {
	var t typed
	if err := json.Unmarshal(raw, &t); err != nil {
		return "", err
	}
	return t.Type, nil
}

// build assembles a Tokenizer from tokenizer.json and optional
// tokenizer_config.json contents.
func build(data, cfg []byte) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	t := &Tokenizer{}
	if !isNull(f.Truncation) {
		t.warnings = append(t.warnings, "truncation settings in tokenizer.json are ignored")
	}
	if !isNull(f.Padding) {
		t.warnings = append(t.warnings, "padding settings in tokenizer.json are ignored")
	}
	if isNull(f.Model) {
		return nil, errors.New("model: missing")
	}
	model, vocab, err := parseBPE(f.Model)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	t.model = model
	if t.norm, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	if t.pre, err = parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	if t.joinWithSpace, err = parseDecoder(f.Decoder); err != nil {
		return nil, fmt.Errorf("decoder: %w", err)
	}

	av := newAddedVocab(vocab, model.size)
	for i, a := range f.AddedTokens {
		tok := a.token()
		id := av.add(tok)
		if a.ID != nil && id >= 0 && *a.ID != id {
			t.warnings = append(t.warnings, fmt.Sprintf(
				"added_tokens[%d] %q has id %d in the file but HF assigns %d; using %d", i, a.Content, *a.ID, id, id))
		}
	}
	if cfg != nil {
		if err := t.applyConfig(cfg, av); err != nil {
			return nil, configError{err}
		}
	}

	// The post-processor's special tokens are resolved by the template
	// itself (HF stores their ids in the template).
	if t.post, err = parsePostProcessor(f.PostProcessor); err != nil {
		return nil, fmt.Errorf("post_processor: %w", err)
	}

	t.finishAdded(av)
	if err := t.buildVocabTables(vocab, av); err != nil {
		return nil, err
	}
	t.resolveNamedTokens()
	return t, nil
}

// parseBPE reads the model section. It returns the model and the original
// (byte-level) vocabulary.
func parseBPE(raw json.RawMessage) (*bpeModel, map[string]int, error) {
	var b bpeJSON
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, nil, err
	}
	if b.Type == "" && b.Merges == nil {
		return nil, nil, errors.New("model has no type and no merges")
	}
	if b.Type != "" && b.Type != "BPE" {
		return nil, nil, fmt.Errorf("unsupported model type %q (only byte-level BPE is implemented)", b.Type)
	}
	switch {
	case b.ByteFallback:
		return nil, nil, errors.New("byte_fallback BPE is not supported (only byte-level BPE is implemented)")
	case b.Dropout != nil && *b.Dropout != 0:
		return nil, nil, fmt.Errorf("BPE dropout %v is not supported", *b.Dropout)
	case b.ContinuingSubwordPrefix != nil && *b.ContinuingSubwordPrefix != "":
		return nil, nil, fmt.Errorf("continuing_subword_prefix %q is not supported", *b.ContinuingSubwordPrefix)
	case b.EndOfWordSuffix != nil && *b.EndOfWordSuffix != "":
		return nil, nil, fmt.Errorf("end_of_word_suffix %q is not supported", *b.EndOfWordSuffix)
	case b.Vocab == nil:
		return nil, nil, errors.New("BPE vocab is missing")
	}
	m := &bpeModel{
		size:         len(b.Vocab),
		ignoreMerges: b.IgnoreMerges,
		fuseUnk:      b.FuseUnk,
		unkID:        -1,
		merges:       make(map[uint64]uint64),
	}
	for tok, id := range b.Vocab {
		if id < 0 || id > math.MaxInt32 {
			return nil, nil, fmt.Errorf("vocab entry %q has id %d out of range", tok, id)
		}
	}
	for i := range m.byteID {
		m.byteID[i] = -1
		if id, ok := b.Vocab[string(byteToRune[i])]; ok {
			m.byteID[i] = int32(id)
		}
	}
	if b.UnkToken != nil {
		id, ok := b.Vocab[*b.UnkToken]
		if !ok {
			return nil, nil, fmt.Errorf("unk_token %q is not in the vocab", *b.UnkToken)
		}
		m.unkID = int32(id)
	}
	if m.ignoreMerges {
		m.words = make(map[string]int32, len(b.Vocab))
		for tok, id := range b.Vocab {
			if raw, ok := byteLevelDecode(tok); ok {
				m.words[string(raw)] = int32(id)
			}
		}
	}
	merges, err := parseMerges(b.Merges)
	if err != nil {
		return nil, nil, err
	}
	if len(merges) > math.MaxUint32 {
		return nil, nil, errors.New("too many merges")
	}
	for rank, mg := range merges {
		a, okA := b.Vocab[mg[0]]
		c, okB := b.Vocab[mg[1]]
		if !okA || !okB {
			return nil, nil, fmt.Errorf("merge %d (%q %q) uses a token that is not in the vocab", rank, mg[0], mg[1])
		}
		n, ok := b.Vocab[mg[0]+mg[1]]
		if !ok {
			return nil, nil, fmt.Errorf("merge %d (%q %q) produces %q, which is not in the vocab", rank, mg[0], mg[1], mg[0]+mg[1])
		}
		// Later duplicates win, as in HF's HashMap collect.
		m.merges[pairKey(int32(a), int32(c))] = uint64(rank)<<32 | uint64(uint32(n))
	}
	return m, b.Vocab, nil
}

// parseMerges accepts both serializations: ["a b", ...] and [["a","b"], ...].
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	// Look at the first element to pick the format instead of trying both.
	rest := bytes.TrimSpace(bytes.TrimPrefix(bytes.TrimSpace(raw), []byte("[")))
	if len(rest) > 0 && rest[0] == '"' {
		var strs []string
		if err := json.Unmarshal(raw, &strs); err != nil {
			return nil, fmt.Errorf("merges: %w", err)
		}
		out := make([][2]string, len(strs))
		for i, s := range strs {
			a, b, ok := strings.Cut(s, " ")
			if !ok {
				return nil, fmt.Errorf("merge %d %q is not two space-separated tokens", i, s)
			}
			out[i] = [2]string{a, b}
		}
		return out, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, fmt.Errorf("merges must be a list of \"a b\" strings or of [a, b] pairs: %w", err)
	}
	out := make([][2]string, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 {
			return nil, fmt.Errorf("merge %d has %d elements, want 2", i, len(p))
		}
		out[i] = [2]string{p[0], p[1]}
	}
	return out, nil
}

func parseNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var n struct {
		Type        string            `json:"type"`
		Normalizers []json.RawMessage `json:"normalizers"`
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return nil, err
	}
	if n.Type == "Sequence" {
		var out normalizer
		for i, sub := range n.Normalizers {
			s, err := parseNormalizer(sub)
			if err != nil {
				return nil, fmt.Errorf("normalizers[%d]: %w", i, err)
			}
			out = append(out, s...)
		}
		return out, nil
	}
	if f, ok := normalizerForms[n.Type]; ok {
		return normalizer{f}, nil
	}
	return nil, fmt.Errorf("unsupported normalizer type %q", n.Type)
}

type preTokenizerJSON struct {
	Type             string            `json:"type"`
	PreTokenizers    []json.RawMessage `json:"pretokenizers"`
	Pattern          map[string]string `json:"pattern"`
	Behavior         string            `json:"behavior"`
	Invert           bool              `json:"invert"`
	IndividualDigits bool              `json:"individual_digits"`
	AddPrefixSpace   bool              `json:"add_prefix_space"`
	UseRegex         *bool             `json:"use_regex"`
}

// parsePreTokenizer reads the pre_tokenizer section. Because the BPE model
// works on bytes, the pipeline must end with ByteLevel.
func parsePreTokenizer(raw json.RawMessage) (preTokenizer, error) {
	if isNull(raw) {
		return nil, errors.New("missing; byte-level BPE needs a ByteLevel pre-tokenizer")
	}
	var steps []preTokenizer
	if err := flattenPreTokenizer(raw, &steps, ""); err != nil {
		return nil, err
	}
	for i, s := range steps {
		if _, ok := s.(byteLevelPT); ok && i != len(steps)-1 {
			return nil, errors.New("ByteLevel must be the last pre-tokenizer")
		}
	}
	if len(steps) == 0 {
		return nil, errors.New("byte-level BPE needs a ByteLevel pre-tokenizer")
	}
	if _, ok := steps[len(steps)-1].(byteLevelPT); !ok {
		return nil, errors.New("the pre-tokenizer does not end with ByteLevel; only byte-level BPE is implemented")
	}
	if len(steps) == 1 {
		return steps[0], nil
	}
	return sequencePT(steps), nil
}

func flattenPreTokenizer(raw json.RawMessage, out *[]preTokenizer, where string) error {
	var p preTokenizerJSON
	if err := json.Unmarshal(raw, &p); err != nil {
		return fmt.Errorf("%s%w", where, err)
	}
	switch p.Type {
	case "Sequence":
		for i, sub := range p.PreTokenizers {
			if err := flattenPreTokenizer(sub, out, fmt.Sprintf("%spretokenizers[%d]: ", where, i)); err != nil {
				return err
			}
		}
		return nil
	case "Split":
		b, ok := splitBehaviors[p.Behavior]
		if !ok {
			return fmt.Errorf("%sSplit: unknown behavior %q", where, p.Behavior)
		}
		sp := &splitPT{behavior: b, invert: p.Invert}
		if re, ok := p.Pattern["Regex"]; ok {
			sc, known := lookupScanner(re)
			if !known {
				return fmt.Errorf("%sSplit: unsupported regex %q (only the GPT-2, cl100k/Llama-3, Qwen2, o200k and DeepSeek-V3 patterns are implemented)", where, re)
			}
			sp.scan = sc
		} else if lit, ok := p.Pattern["String"]; ok {
			sp.literal = lit
		} else {
			return fmt.Errorf("%sSplit: pattern must be {\"Regex\": ...} or {\"String\": ...}", where)
		}
		*out = append(*out, sp)
		return nil
	case "Digits":
		*out = append(*out, digitsPT{individual: p.IndividualDigits})
		return nil
	case "ByteLevel":
		bl := byteLevelPT{addPrefixSpace: p.AddPrefixSpace}
		if p.UseRegex == nil || *p.UseRegex { // HF's default is true
			sc, _ := lookupScanner(PatternGPT2)
			bl.gpt2 = &splitPT{scan: sc, behavior: behaviorIsolated}
		}
		*out = append(*out, bl)
		return nil
	}
	return fmt.Errorf("%sunsupported pre-tokenizer type %q", where, p.Type)
}

// parseDecoder accepts ByteLevel (possibly inside a Sequence) or null, and
// reports whether tokens are joined with spaces (the null decoder).
func parseDecoder(raw json.RawMessage) (joinWithSpace bool, err error) {
	if isNull(raw) {
		return true, nil
	}
	var d struct {
		Type     string            `json:"type"`
		Decoders []json.RawMessage `json:"decoders"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return false, err
	}
	switch d.Type {
	case "ByteLevel":
		return false, nil
	case "Sequence":
		if len(d.Decoders) == 0 {
			return false, errors.New("empty Sequence decoder is not supported")
		}
		for i, sub := range d.Decoders {
			typ, err := componentType(sub)
			if err != nil {
				return false, fmt.Errorf("decoders[%d]: %w", i, err)
			}
			if typ != "ByteLevel" {
				return false, fmt.Errorf("decoders[%d]: unsupported decoder type %q", i, typ)
			}
		}
		return false, nil
	}
	return false, fmt.Errorf("unsupported decoder type %q (only ByteLevel is implemented)", d.Type)
}

type postProcessorJSON struct {
	Type       string            `json:"type"`
	Processors []json.RawMessage `json:"processors"`
	Single     []struct {
		SpecialToken *struct {
			ID string `json:"id"`
		} `json:"SpecialToken"`
		Sequence *struct {
			ID string `json:"id"`
		} `json:"Sequence"`
	} `json:"single"`
	SpecialTokens map[string]struct {
		IDs []int `json:"ids"`
	} `json:"special_tokens"`
}

func parsePostProcessor(raw json.RawMessage) (postProcessor, error) {
	if isNull(raw) {
		return nil, nil
	}
	var p postProcessorJSON
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, err
	}
	switch p.Type {
	case "ByteLevel":
		return nil, nil
	case "Sequence":
		var out postProcessor
		for i, sub := range p.Processors {
			s, err := parsePostProcessor(sub)
			if err != nil {
				return nil, fmt.Errorf("processors[%d]: %w", i, err)
			}
			out = append(out, s...)
		}
		return out, nil
	case "TemplateProcessing":
		var tmpl template
		for i, piece := range p.Single {
			switch {
			case piece.Sequence != nil:
				if piece.Sequence.ID != "A" {
					return nil, fmt.Errorf("single[%d]: sequence %q in a single template", i, piece.Sequence.ID)
				}
				tmpl = append(tmpl, templatePiece{seq: true})
			case piece.SpecialToken != nil:
				st, ok := p.SpecialTokens[piece.SpecialToken.ID]
				if !ok {
					return nil, fmt.Errorf("single[%d]: special token %q is missing from special_tokens", i, piece.SpecialToken.ID)
				}
				tmpl = append(tmpl, templatePiece{ids: st.IDs})
			default:
				return nil, fmt.Errorf("single[%d]: want SpecialToken or Sequence", i)
			}
		}
		return postProcessor{tmpl}, nil
	}
	return nil, fmt.Errorf("unsupported post-processor type %q", p.Type)
}

// buildVocabTables fills the id-indexed tables used by Decode and lookups.
func (t *Tokenizer) buildVocabTables(vocab map[string]int, av *addedVocab) error {
	size := 0
	for _, id := range vocab {
		size = max(size, id+1)
	}
	for id := range av.byID {
		size = max(size, id+1)
	}
	// The tables are dense; refuse ids so sparse that they would waste
	// memory (real vocabularies number their tokens 0..n-1).
	if n := len(vocab) + len(av.byID); size > 2*n+1024 {
		return fmt.Errorf("token ids are too sparse: the largest id is %d for %d tokens", size-1, n)
	}
	t.tokens = make([]string, size)
	t.known = make([]bool, size)
	t.pieces = make([]string, size)
	t.skippable = make([]bool, size)
	t.tokenIDs = make(map[string]int, len(vocab)+len(av.byContent))
	for tok, id := range vocab {
		t.tokens[id], t.known[id] = tok, true
		t.tokenIDs[tok] = id
	}
	for id, a := range av.byID {
		t.tokens[id], t.known[id] = a.content, true
	}
	for content, id := range av.byContent {
		t.tokenIDs[content] = id
	}
	for id, tok := range t.tokens {
		if !t.known[id] {
			continue
		}
		if t.joinWithSpace {
			t.pieces[id] = tok
		} else if b, ok := byteLevelDecode(tok); ok {
			t.pieces[id] = string(b)
		} else {
			t.pieces[id] = tok
		}
		t.skippable[id] = av.specialSet[tok]
	}
	for _, a := range t.added {
		if a.special {
			t.specialIDs = append(t.specialIDs, a.id)
		}
	}
	return nil
}
