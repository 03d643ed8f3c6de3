package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestAccessors(t *testing.T) {
	tests := []struct {
		name      string
		vocabSize int
		nSpecial  int
		bos, eos  SpecialToken // ID -1: none
		token     string
		tokenID   int
	}{
		{"qwen3", 151669, 14, SpecialToken{-1, ""}, SpecialToken{151645, "<|im_end|>"}, "Ġworld", 1879},
		{"llama3_1", 128256, 256, SpecialToken{128000, "<|begin_of_text|>"}, SpecialToken{128009, "<|eot_id|>"}, "Ġworld", 1917},
		{"gpt_oss", 200019, 21, SpecialToken{199998, "<|startoftext|>"}, SpecialToken{200002, "<|return|>"}, "Ġworld", 2375},
		{"deepseek_v3", 128815, 804, SpecialToken{0, "<｜begin▁of▁sentence｜>"}, SpecialToken{1, "<｜end▁of▁sentence｜>"}, "Ġworld", 2058},
		{"glm_mini", 500, 10, SpecialToken{2, "[gMASK]"}, SpecialToken{0, "<|endoftext|>"}, "<|user|>", 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tok := loadGolden(t, tc.name)
			if got := tok.VocabSize(); got != tc.vocabSize {
				t.Errorf("VocabSize = %d, want %d", got, tc.vocabSize)
			}
			if got := len(tok.SpecialIDs()); got != tc.nSpecial {
				t.Errorf("len(SpecialIDs) = %d, want %d", got, tc.nSpecial)
			}
			if !slices.IsSorted(tok.SpecialIDs()) {
				t.Error("SpecialIDs not sorted")
			}
			for _, id := range tok.SpecialIDs() {
				if !tok.IsSpecial(id) {
					t.Errorf("IsSpecial(%d) = false for a special id", id)
				}
			}
			checkNamed := func(what string, got SpecialToken, ok bool, want SpecialToken) {
				if want.ID < 0 {
					if ok {
						t.Errorf("%s = %v, want none", what, got)
					}
				} else if !ok || got != want {
					t.Errorf("%s = %v, %v; want %v", what, got, ok, want)
				}
			}
			bos, ok := tok.BOS()
			checkNamed("BOS", bos, ok, tc.bos)
			eos, ok := tok.EOS()
			checkNamed("EOS", eos, ok, tc.eos)
			if id, ok := tok.TokenID(tc.token); !ok || id != tc.tokenID {
				t.Errorf("TokenID(%q) = %d, %v; want %d", tc.token, id, ok, tc.tokenID)
			}
			if s, ok := tok.IDToken(tc.tokenID); !ok || s != tc.token {
				t.Errorf("IDToken(%d) = %q, %v; want %q", tc.tokenID, s, ok, tc.token)
			}
			if _, ok := tok.IDToken(tc.vocabSize); ok {
				t.Error("IDToken(VocabSize) exists")
			}
			if _, ok := tok.IDToken(-1); ok {
				t.Error("IDToken(-1) exists")
			}
			if w := tok.Warnings(); len(w) != 0 {
				t.Errorf("unexpected warnings: %q", w)
			}
		})
	}
}

func TestTokenBytes(t *testing.T) {
	tok := loadGolden(t, "llama3_1")
	tests := []struct {
		token string
		want  string
	}{
		{"Ġworld", " world"},
		{"Ċ", "\n"},
		{"<|eot_id|>", "<|eot_id|>"},
		{"ä½ł", "\xe4\xbd\xa0"}, // 你 as byte-level characters
	}
	for _, tc := range tests {
		id, ok := tok.TokenID(tc.token)
		if !ok {
			t.Fatalf("TokenID(%q) missing", tc.token)
		}
		if got, ok := tok.TokenBytes(id); !ok || string(got) != tc.want {
			t.Errorf("TokenBytes(%q) = %q, %v; want %q", tc.token, got, ok, tc.want)
		}
	}
}

// TestAddSpecial checks the post-processors: Llama 3 prepends BOS,
// glm_mini prepends [gMASK]<sop>, Qwen3 adds nothing.
func TestAddSpecial(t *testing.T) {
	tests := []struct {
		name   string
		prefix []int
	}{
		{"llama3_1", []int{128000}},
		{"glm_mini", []int{2, 4}},
		{"qwen3", nil},
	}
	for _, tc := range tests {
		tok := loadGolden(t, tc.name)
		plain := tok.Encode("hello there", false)
		with := tok.Encode("hello there", true)
		if want := slices.Concat(tc.prefix, plain); !slices.Equal(with, want) {
			t.Errorf("%s: Encode(add) = %v, want %v", tc.name, with, want)
		}
	}
}

// TestRoundTrip checks Decode(Encode(x)) == x where no normalizer changes
// the text, and == NFC(x) for Qwen3.
func TestRoundTrip(t *testing.T) {
	texts := []string{
		"", "Hello, world!", "\t\t}\n", "  many   spaces  \n\n\n", "日本語と中文と한국어", "👨\u200d👩\u200d👧\u200d👦🇯🇵",
		"Cafe\u0301 A\u030a", "<|im_start|>user\nhi<|im_end|>", "[gMASK]<sop><|user|>x<think>y</think>",
		"\x00\x01\x7f", "x'ſab I'M", "٣٤٥ ①②", "\u2028\u3000\u00a0", megabyte()[:5000],
	}
	for _, name := range goldenNames {
		tok := loadGolden(t, name)
		for _, text := range texts {
			want := text
			if name == "qwen3" {
				want = normalizer{normalizerForms["NFC"]}.apply(text)
			}
			if got := tok.Decode(tok.Encode(text, false), false); got != want {
				t.Errorf("%s: round trip of %q gave %q", name, text, got)
			}
		}
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok := loadGolden(t, "glm_mini")
	text := megabyte()[:20000]
	want := tok.Encode(text, false)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5; i++ {
				if got := tok.Encode(text, false); !slices.Equal(got, want) {
					t.Error("concurrent Encode differs")
					return
				}
			}
		}()
	}
	wg.Wait()
}

// miniJSON returns glm_mini's tokenizer.json with edit applied to its
// decoded top-level object.
func miniJSON(t *testing.T, edit func(m map[string]any)) []byte {
	t.Helper()
	return miniJSONFrom(t, readGoldenJSON(t, "glm_mini"), edit)
}

// miniJSONFrom applies edit to the decoded top-level object of a
// tokenizer.json.
func miniJSONFrom(t testing.TB, data []byte, edit func(m map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFromJSONErrors(t *testing.T) {
	model := func(m map[string]any) map[string]any { return m["model"].(map[string]any) }
	tests := []struct {
		name string
		edit func(m map[string]any)
		want string
	}{
		{"wordpiece", func(m map[string]any) { model(m)["type"] = "WordPiece" }, `unsupported model type "WordPiece"`},
		{"no model", func(m map[string]any) { delete(m, "model") }, "model: missing"},
		{"byte fallback", func(m map[string]any) { model(m)["byte_fallback"] = true }, "byte_fallback"},
		{"dropout", func(m map[string]any) { model(m)["dropout"] = 0.1 }, "dropout"},
		{"subword prefix", func(m map[string]any) { model(m)["continuing_subword_prefix"] = "##" }, "continuing_subword_prefix"},
		{"unk missing", func(m map[string]any) { model(m)["unk_token"] = "<nope>" }, `unk_token "<nope>" is not in the vocab`},
		{"merge missing", func(m map[string]any) {
			model(m)["merges"] = []any{[]any{"Ġ", "zzz"}}
		}, `merge 0 ("Ġ" "zzz") uses a token that is not in the vocab`},
		{"merge result missing", func(m map[string]any) {
			model(m)["merges"] = []any{[]any{"x", "q"}}
		}, `produces "xq"`},
		{"bad merge string", func(m map[string]any) { model(m)["merges"] = []any{"abc"} }, "not two space-separated tokens"},
		{"bad merge pair", func(m map[string]any) { model(m)["merges"] = []any{[]any{"a", "b", "c"}} }, "has 3 elements"},
		{"unknown regex", func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `\w+`}, "behavior": "Isolated", "invert": false},
				map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}}}
		}, `unsupported regex "\\w+"`},
		{"bad behavior", func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "Split", "pattern": map[string]any{"String": " "}, "behavior": "Sideways"},
				map[string]any{"type": "ByteLevel"}}}
		}, `unknown behavior "Sideways"`},
		{"metaspace", func(m map[string]any) { m["pre_tokenizer"] = map[string]any{"type": "Metaspace"} }, `unsupported pre-tokenizer type "Metaspace"`},
		{"no pre-tokenizer", func(m map[string]any) { m["pre_tokenizer"] = nil }, "needs a ByteLevel pre-tokenizer"},
		{"no byte level", func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Digits", "individual_digits": true}
		}, "does not end with ByteLevel"},
		{"byte level first", func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "ByteLevel"}, map[string]any{"type": "Digits"}}}
		}, "ByteLevel must be the last"},
		{"lowercase", func(m map[string]any) { m["normalizer"] = map[string]any{"type": "Lowercase"} }, `unsupported normalizer type "Lowercase"`},
		{"nested normalizer", func(m map[string]any) {
			m["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "NFC"}, map[string]any{"type": "Strip"}}}
		}, `normalizers[1]: unsupported normalizer type "Strip"`},
		{"decoder", func(m map[string]any) { m["decoder"] = map[string]any{"type": "Metaspace"} }, `unsupported decoder type "Metaspace"`},
		{"decoder sequence", func(m map[string]any) {
			m["decoder"] = map[string]any{"type": "Sequence", "decoders": []any{map[string]any{"type": "ByteFallback"}}}
		}, `decoders[0]: unsupported decoder type "ByteFallback"`},
		{"roberta", func(m map[string]any) { m["post_processor"] = map[string]any{"type": "RobertaProcessing"} }, `unsupported post-processor type "RobertaProcessing"`},
		{"template token", func(m map[string]any) {
			m["post_processor"] = map[string]any{"type": "TemplateProcessing",
				"single":         []any{map[string]any{"SpecialToken": map[string]any{"id": "<s>", "type_id": 0}}},
				"special_tokens": map[string]any{}}
		}, `special token "<s>" is missing`},
		{"vocab type", func(m map[string]any) { model(m)["vocab"] = []any{1, 2} }, "model:"},
		{"negative id", func(m map[string]any) { model(m)["vocab"].(map[string]any)["zz"] = -5 }, `"zz" has id -5`},
		{"sparse ids", func(m map[string]any) { model(m)["vocab"].(map[string]any)["zz"] = 1 << 30 }, "too sparse"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FromJSON(miniJSON(t, tc.edit))
			if err == nil {
				t.Fatalf("FromJSON succeeded, want error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "tokenizer.json") {
				t.Errorf("error %q does not name tokenizer.json and contain %q", err, tc.want)
			}
		})
	}
	if _, err := FromJSON([]byte("{not json")); err == nil || !strings.Contains(err.Error(), "invalid JSON") {
		t.Errorf("bad JSON: err = %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Errorf("missing file: err = %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), readGoldenJSON(t, "glm_mini"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err != nil {
		t.Fatalf("Load without tokenizer_config.json: %v", err)
	}
	cfg := filepath.Join(dir, "tokenizer_config.json")
	if err := os.WriteFile(cfg, []byte(`{"bos_token": 7}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), cfg) || !strings.Contains(err.Error(), "bos_token") {
		t.Errorf("bad config: err = %v", err)
	}
	bad := filepath.Join(dir, "tokenizer.json")
	if err := os.WriteFile(bad, []byte(`{"model": {"type": "Unigram"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "Unigram") {
		t.Errorf("bad tokenizer.json: err = %v", err)
	}
}

// TestConfigTokens checks what tokenizer_config.json contributes: named
// tokens, flags, and added tokens that tokenizer.json lacks.
func TestConfigTokens(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), readGoldenJSON(t, "glm_mini"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := `{
		"added_tokens_decoder": {"500": {"content": "<|new|>", "lstrip": false, "normalized": false, "rstrip": false, "single_word": false, "special": true}},
		"bos_token": {"__type": "AddedToken", "content": "[gMASK]"},
		"eos_token": "<|user|>",
		"pad_token": "<|pad|>",
		"add_bos_token": true,
		"tokenizer_class": "PreTrainedTokenizerFast"
	}`
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := tok.TokenID("<|new|>"); !ok || id != 500 {
		t.Errorf("config token <|new|> = %d, %v; want 500", id, ok)
	}
	if id, ok := tok.TokenID("<|pad|>"); !ok || id != 501 {
		t.Errorf("pad token = %d, %v; want 501", id, ok)
	}
	if got := tok.Encode("a<|new|>b<|pad|>", false); len(got) != 4 || got[1] != 500 || got[3] != 501 {
		t.Errorf("Encode with config tokens = %v", got)
	}
	if got := tok.Decode([]int{500, 501, 7}, true); got != "" {
		t.Errorf("config tokens not special: %q", got)
	}
	if bos, ok := tok.BOS(); !ok || bos != (SpecialToken{2, "[gMASK]"}) {
		t.Errorf("BOS = %v, %v", bos, ok)
	}
	if eos, ok := tok.EOS(); !ok || eos != (SpecialToken{7, "<|user|>"}) {
		t.Errorf("EOS = %v, %v", eos, ok)
	}
	c := tok.Config()
	if c.PAD != "<|pad|>" || c.AddBOS == nil || !*c.AddBOS || c.AddEOS != nil || c.TokenizerClass != "PreTrainedTokenizerFast" {
		t.Errorf("Config = %+v", c)
	}
	if tok.VocabSize() != 502 {
		t.Errorf("VocabSize = %d, want 502", tok.VocabSize())
	}
	if w := tok.Warnings(); len(w) != 1 || !strings.Contains(w[0], "<|pad|>") {
		t.Errorf("Warnings = %q, want one about <|pad|>", w)
	}
}

// TestMaxBytesPerToken: the bound holds on texts built to be few tokens
// (long runs of one character, the longest token repeated, added tokens,
// mixed scripts), and is 0 where text can vanish.
func TestMaxBytesPerToken(t *testing.T) {
	for _, name := range []string{"qwen3", "llama3_1", "gpt_oss", "deepseek_v3", "glm_mini"} {
		t.Run(name, func(t *testing.T) {
			tok := loadGolden(t, name)
			n := tok.MaxBytesPerToken()
			t.Logf("MaxBytesPerToken = %d", n)
			if n <= 0 {
				t.Fatalf("MaxBytesPerToken = %d", n)
			}
			longest := ""
			for _, p := range tok.pieces {
				if len(p) > len(longest) {
					longest = p
				}
			}
			var special string
			for _, a := range tok.added {
				special += a.content
			}
			for _, text := range []string{
				strings.Repeat(" ", 5000), strings.Repeat("=", 5000), strings.Repeat("\n", 3000), strings.Repeat("a", 4000),
				strings.Repeat(longest, 50), strings.Repeat(special, 3), strings.Repeat("日本語のテキスト", 200),
				strings.Repeat("Hello, world! ", 300), strings.Repeat("1234567890", 300),
			} {
				got := len(tok.Encode(text, false))
				if got*n < len(text) {
					t.Errorf("%d bytes (%.20q...) encode to %d tokens, fewer than %d bytes / %d", len(text), text, got, len(text), n)
				}
			}
		})
	}
	// Text that vanishes: a Split that removes its matches, an added token
	// that strips the spaces around it.
	base := readGoldenJSON(t, "glm_mini")
	var doc map[string]any
	if err := json.Unmarshal(base, &doc); err != nil {
		t.Fatal(err)
	}
	pre := doc["pre_tokenizer"]
	doc["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
		map[string]any{"type": "Split", "pattern": map[string]any{"String": " "}, "behavior": "Removed", "invert": false}, pre}}
	b, _ := json.Marshal(doc)
	removed, err := FromJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	if n := removed.MaxBytesPerToken(); n != 0 {
		t.Errorf("Split Removed: MaxBytesPerToken = %d, want 0", n)
	}
	doc["pre_tokenizer"] = pre
	added := doc["added_tokens"].([]any)
	added[0].(map[string]any)["lstrip"] = true
	b, _ = json.Marshal(doc)
	lstrip, err := FromJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	if n := lstrip.MaxBytesPerToken(); n != 0 {
		t.Errorf("lstrip added token: MaxBytesPerToken = %d, want 0", n)
	}
}
