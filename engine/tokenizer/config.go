package tokenizer

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
)

// configJSON is the part of tokenizer_config.json this package reads.
type configJSON struct {
	AddedTokensDecoder      map[string]addedTokenJSON `json:"added_tokens_decoder"`
	BOSToken                json.RawMessage           `json:"bos_token"`
	EOSToken                json.RawMessage           `json:"eos_token"`
	PADToken                json.RawMessage           `json:"pad_token"`
	UNKToken                json.RawMessage           `json:"unk_token"`
	AdditionalSpecialTokens []json.RawMessage         `json:"additional_special_tokens"`
	AddBOSToken             *bool                     `json:"add_bos_token"`
	AddEOSToken             *bool                     `json:"add_eos_token"`
	TokenizerClass          string                    `json:"tokenizer_class"`
}

// tokenContent reads a special-token field: a string, an AddedToken
// object, or null.
func tokenContent(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", fmt.Errorf("want a string or an object with content: %s", raw)
	}
	return obj.Content, nil
}

// applyConfig follows what transformers' PreTrainedTokenizerFast does with
// tokenizer_config.json: entries of added_tokens_decoder that tokenizer.json
// lacks (or declares with other flags) are added, then named special tokens
// missing from the vocabulary are added as special tokens.
func (t *Tokenizer) applyConfig(data []byte, av *addedVocab) error {
	var c configJSON
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("invalid JSON: %w", err)
	}
	var err error
	fields := []struct {
		name string
		raw  json.RawMessage
		dst  *string
	}{
		{"bos_token", c.BOSToken, &t.config.BOS},
		{"eos_token", c.EOSToken, &t.config.EOS},
		{"pad_token", c.PADToken, &t.config.PAD},
		{"unk_token", c.UNKToken, &t.config.UNK},
	}
	var named []string
	for _, f := range fields {
		if *f.dst, err = tokenContent(f.raw); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		if *f.dst != "" {
			named = append(named, *f.dst)
		}
	}
	for i, raw := range c.AdditionalSpecialTokens {
		s, err := tokenContent(raw)
		if err != nil {
			return fmt.Errorf("additional_special_tokens[%d]: %w", i, err)
		}
		if s != "" {
			named = append(named, s)
		}
	}
	t.config.AddBOS, t.config.AddEOS = c.AddBOSToken, c.AddEOSToken
	t.config.TokenizerClass = c.TokenizerClass

	type entry struct {
		id  int
		tok addedTokenJSON
	}
	var entries []entry
	for k, v := range c.AddedTokensDecoder {
		id, err := strconv.Atoi(k)
		if err != nil {
			return fmt.Errorf("added_tokens_decoder: key %q is not an id", k)
		}
		entries = append(entries, entry{id, v})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].id < entries[j].id })
	isNamed := func(s string) bool { return slices.Contains(named, s) }
	for _, e := range entries {
		tok := e.tok.token()
		tok.special = tok.special || isNamed(tok.content)
		if id, ok := av.byContent[tok.content]; ok && sameToken(av.byID[id], &tok) {
			continue
		}
		id := av.add(tok)
		if id >= 0 && id != e.id {
			t.warnings = append(t.warnings, fmt.Sprintf(
				"tokenizer_config.json: added token %q is declared with id %d but HF assigns %d", tok.content, e.id, id))
		}
	}
	for _, s := range named {
		if _, ok := av.byContent[s]; ok {
			continue
		}
		if _, ok := av.vocab[s]; ok {
			// transformers adds it as a special added token with the
			// vocabulary's id.
			av.add(addedToken{content: s, special: true})
			continue
		}
		t.warnings = append(t.warnings, fmt.Sprintf("tokenizer_config.json: special token %q is not in the vocabulary; adding it", s))
		av.add(addedToken{content: s, special: true})
	}
	return nil
}

// resolveNamedTokens sets BOS and EOS.
func (t *Tokenizer) resolveNamedTokens() {
	if t.config.BOS != "" {
		if id, ok := t.tokenIDs[t.config.BOS]; ok {
			t.bos, t.hasBOS = SpecialToken{id, t.config.BOS}, true
		}
	}
	if !t.hasBOS {
		// Fall back to the template's first special token.
		for _, tmpl := range t.post {
			if len(tmpl) > 0 && !tmpl[0].seq && len(tmpl[0].ids) == 1 {
				id := tmpl[0].ids[0]
				if tok, ok := t.IDToken(id); ok {
					t.bos, t.hasBOS = SpecialToken{id, tok}, true
				}
			}
			break
		}
	}
	if t.config.EOS != "" {
		if id, ok := t.tokenIDs[t.config.EOS]; ok {
			t.eos, t.hasEOS = SpecialToken{id, t.config.EOS}, true
		}
	}
}
