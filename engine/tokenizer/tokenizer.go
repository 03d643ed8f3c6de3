package tokenizer

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// Tokenizer is a loaded tokenizer.json (plus tokenizer_config.json). It is
// immutable after loading and safe for concurrent use.
type Tokenizer struct {
	model     *bpeModel
	norm      normalizer
	pre       preTokenizer
	rawAdded  *addedSet // added tokens matched on the raw text
	normAdded *addedSet // added tokens matched on the normalized text
	post      postProcessor

	// Vocabulary, indexed by id (len is VocabSize).
	tokens    []string // HF id_to_token: added token content, else vocab entry
	known     []bool   // whether tokens[id] exists
	pieces    []string // decoded bytes of each token
	skippable []bool   // token content is a special token's content

	tokenIDs      map[string]int // HF token_to_id
	added         []*addedToken  // in id order
	specialIDs    []int
	joinWithSpace bool // null decoder: HF joins tokens with " "

	config   Config
	bos, eos SpecialToken
	hasBOS   bool
	hasEOS   bool
	warnings []string
}

// SpecialToken names a token and its id.
type SpecialToken struct {
	ID      int
	Content string
}

// Config is what tokenizer_config.json declared; fields are zero when the
// file is absent or silent.
type Config struct {
	BOS, EOS, PAD, UNK string // token contents
	// AddBOS and AddEOS are add_bos_token / add_eos_token. transformers
	// honours them for some tokenizer classes (LlamaTokenizerFast) by
	// rewriting the post-processor; Encode does not, it follows
	// tokenizer.json like HF tokenizers. Callers that need transformers'
	// behaviour can prepend BOS themselves when AddBOS is true.
	AddBOS, AddEOS *bool
	// TokenizerClass is tokenizer_class, e.g. "PreTrainedTokenizerFast".
	TokenizerClass string
}

// Load reads dir/tokenizer.json and, if present, dir/tokenizer_config.json.
func Load(dir string) (*Tokenizer, error) {
	path := filepath.Join(dir, "tokenizer.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	cfg, err := os.ReadFile(cfgPath)
	if err != nil {
		if !os.IsNotExist(err) {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
		cfg = nil
	}
	t, err := build(data, cfg)
	if err != nil {
		if ce, ok := err.(configError); ok {
			return nil, fmt.Errorf("tokenizer: %s: %w", cfgPath, ce.err)
		}
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	return t, nil
}

// FromJSON builds a Tokenizer from the contents of a tokenizer.json file.
func FromJSON(tokenizerJSON []byte) (*Tokenizer, error) {
	t, err := build(tokenizerJSON, nil)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: tokenizer.json: %w", err)
	}
	return t, nil
}

// Encode tokenizes text. Added tokens (special or not) written in the text
// are recognised as such. With addSpecial the post-processor's template is
// applied (for example Llama 3 prepends <|begin_of_text|>), as HF's
// add_special_tokens does.
func (t *Tokenizer) Encode(text string, addSpecial bool) []int {
	ids := t.encode(make([]int, 0, len(text)/3+4), text)
	if addSpecial {
		ids = t.post.apply(ids)
	}
	return ids
}

// encode appends the ids of text without post-processing.
func (t *Tokenizer) encode(dst []int, text string) []int {
	var words []string
	var inner []segment
	for _, sg := range t.rawAdded.split(nil, text) {
		if sg.id >= 0 {
			dst = append(dst, sg.id)
			continue
		}
		inner = t.normAdded.split(inner[:0], t.norm.apply(sg.text))
		for _, s2 := range inner {
			if s2.id >= 0 {
				dst = append(dst, s2.id)
				continue
			}
			words = t.pre.split(words[:0], s2.text)
			for _, w := range words {
				dst = t.model.encodeWord(dst, w)
			}
		}
	}
	return dst
}

// TokenID returns the id of a token string as written in the vocabulary
// (byte-level form, e.g. "Ġworld") or of an added token's content.
func (t *Tokenizer) TokenID(s string) (int, bool) {
	id, ok := t.tokenIDs[s]
	return id, ok
}

// IDToken returns the vocabulary string of id (byte-level form for model
// tokens, content for added tokens).
func (t *Tokenizer) IDToken(id int) (string, bool) {
	if id < 0 || id >= len(t.tokens) || !t.known[id] {
		return "", false
	}
	return t.tokens[id], true
}

// TokenBytes returns the bytes id stands for in decoded text (what an
// OpenAI logprobs "bytes" field carries).
func (t *Tokenizer) TokenBytes(id int) ([]byte, bool) {
	p, ok := t.piece(id, false)
	if !ok {
		return nil, false
	}
	return []byte(p), true
}

// VocabSize is the largest id (model vocabulary or added token) plus one;
// an embedding table needs at least this many rows.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// SpecialIDs returns the ids of the special added tokens, ascending.
func (t *Tokenizer) SpecialIDs() []int { return slices.Clone(t.specialIDs) }

// IsSpecial reports whether Decode with skipSpecial drops id.
func (t *Tokenizer) IsSpecial(id int) bool {
	return id >= 0 && id < len(t.skippable) && t.known[id] && t.skippable[id]
}

// AddedTokens returns the added tokens (special and not) in id order.
func (t *Tokenizer) AddedTokens() []SpecialToken {
	out := make([]SpecialToken, len(t.added))
	for i, a := range t.added {
		out[i] = SpecialToken{ID: a.id, Content: a.content}
	}
	return out
}

// BOS returns the beginning-of-sequence token: tokenizer_config.json's
// bos_token, else the first special token of the post-processor template.
func (t *Tokenizer) BOS() (SpecialToken, bool) { return t.bos, t.hasBOS }

// EOS returns tokenizer_config.json's eos_token.
func (t *Tokenizer) EOS() (SpecialToken, bool) { return t.eos, t.hasEOS }

// Config returns what tokenizer_config.json declared.
func (t *Tokenizer) Config() Config { return t.config }

// Warnings lists things the loader accepted but that may surprise: ignored
// truncation/padding settings, added-token ids that differ from the ids HF
// assigns, configured special tokens that are not in the vocabulary.
func (t *Tokenizer) Warnings() []string { return slices.Clone(t.warnings) }

// MaxBytesPerToken bounds how much text one token of Encode's output
// stands for: a text longer than n*MaxBytesPerToken() bytes (or
// characters, which are at least a byte each) encodes to more than n
// tokens, so a caller can refuse such a text without encoding it. The
// bound is the longest vocabulary piece or added token, times 4 when a
// Unicode normalizer runs first (canonical composition turns at most 4
// bytes of input into one byte of output). It is 0 when there is no bound:
// a pre-tokenizer removes text, an added token strips the whitespace
// around it, or bytes missing from the vocabulary vanish or fuse into one
// unknown token.
func (t *Tokenizer) MaxBytesPerToken() int {
	if !preKeepsText(t.pre) {
		return 0
	}
	for _, id := range t.model.byteID {
		if id < 0 {
			return 0
		}
	}
	n := 0
	for _, p := range t.pieces {
		n = max(n, len(p))
	}
	for _, a := range t.added {
		if a.lstrip || a.rstrip {
			return 0
		}
		n = max(n, len(a.content))
	}
	if len(t.norm) > 0 {
		n *= 4
	}
	return n
}

// preKeepsText reports whether every byte of a pre-tokenizer's input ends
// up in one of its pieces (no Split with the Removed behavior).
func preKeepsText(p preTokenizer) bool {
	switch x := p.(type) {
	case sequencePT:
		for _, s := range x {
			if !preKeepsText(s) {
				return false
			}
		}
	case *splitPT:
		return x.behavior != behaviorRemoved
	case byteLevelPT:
		return x.gpt2 == nil || preKeepsText(x.gpt2)
	}
	return true
}
