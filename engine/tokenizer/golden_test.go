package tokenizer

import (
	"bufio"
	"compress/bzip2"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The golden data under testdata/ comes from Hugging Face's Rust tokenizers
// (tools/tokgolden). Every case must match exactly.

// goldenCase is one line of a cases.jsonl.gz file.
type goldenCase struct {
	Kind        string `json:"kind"` // "encode" or "decode"
	Cat         string `json:"cat"`
	Text        string `json:"text"`
	IDs         []int  `json:"ids"`
	AddSpecial  bool   `json:"add_special"`
	SkipSpecial bool   `json:"skip_special"`
}

// goldenNames are the reference tokenizers under testdata/.
var goldenNames = []string{"qwen3", "llama3_1", "gpt_oss", "deepseek_v3", "glm_mini"}

var testTmp string // removed by TestMain

// goldenDir is where the golden data lives. TOKENIZER_GOLDEN_DIR points the
// tests at data generated elsewhere (for example a larger corpus from
// gen.js --random 20000 --out DIR).
func goldenDir() string {
	if d := os.Getenv("TOKENIZER_GOLDEN_DIR"); d != "" {
		return d
	}
	return "testdata"
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tokenizer-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testTmp = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	goldenMu   sync.Mutex
	goldenJSON = map[string][]byte{}     // tokenizer.json contents by name
	goldenToks = map[string]*Tokenizer{} // loaded tokenizers by name or variant
)

// readGoldenJSON returns testdata/<name>/tokenizer.json, decompressing the
// .bz2 the large reference files are stored as.
func readGoldenJSON(tb testing.TB, name string) []byte {
	tb.Helper()
	goldenMu.Lock()
	defer goldenMu.Unlock()
	if b, ok := goldenJSON[name]; ok {
		return b
	}
	dir := filepath.Join(goldenDir(), name)
	b, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if os.IsNotExist(err) {
		var f *os.File
		if f, err = os.Open(filepath.Join(dir, "tokenizer.json.bz2")); err == nil {
			b, err = io.ReadAll(bzip2.NewReader(bufio.NewReader(f)))
			f.Close()
		}
	}
	if err != nil {
		tb.Fatalf("reading %s tokenizer.json: %v", name, err)
	}
	goldenJSON[name] = b
	return b
}

// loadGolden loads a reference tokenizer through Load, from a directory
// holding its (decompressed) tokenizer.json and its tokenizer_config.json.
func loadGolden(tb testing.TB, name string) *Tokenizer {
	tb.Helper()
	data := readGoldenJSON(tb, name)
	goldenMu.Lock()
	defer goldenMu.Unlock()
	if tok, ok := goldenToks[name]; ok {
		return tok
	}
	dir := filepath.Join(testTmp, name)
	cfg, err := os.ReadFile(filepath.Join(goldenDir(), name, "tokenizer_config.json"))
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "tokenizer.json"), data, 0o644)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), cfg, 0o644)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tok, err := Load(dir)
	if err != nil {
		tb.Fatalf("Load(%s): %v", name, err)
	}
	goldenToks[name] = tok
	return tok
}

func readCases(tb testing.TB, path string) []goldenCase {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	var cases []goldenCase
	dec := json.NewDecoder(zr)
	for dec.More() {
		var c goldenCase
		if err := dec.Decode(&c); err != nil {
			tb.Fatalf("%s: %v", path, err)
		}
		cases = append(cases, c)
	}
	if len(cases) == 0 {
		tb.Fatalf("%s: no cases", path)
	}
	return cases
}

// checkCases runs golden cases against tok, reports the first mismatches
// in detail, and returns the number that matched.
func checkCases(t *testing.T, tok *Tokenizer, cases []goldenCase) int {
	t.Helper()
	passed, reported := 0, 0
	for i, c := range cases {
		var ok bool
		var detail string
		switch c.Kind {
		case "encode":
			got := tok.Encode(c.Text, c.AddSpecial)
			ok = slices.Equal(got, c.IDs) || (len(got) == 0 && len(c.IDs) == 0)
			if !ok {
				detail = fmt.Sprintf("Encode(%q, %v) [%s]\n got  %v\n      %s\n want %v\n      %s",
					c.Text, c.AddSpecial, c.Cat, got, tokenStrings(tok, got), c.IDs, tokenStrings(tok, c.IDs))
			}
		case "decode":
			got := tok.Decode(c.IDs, c.SkipSpecial)
			ok = got == c.Text
			if !ok {
				detail = fmt.Sprintf("Decode(%v, %v)\n got  %q\n want %q", c.IDs, c.SkipSpecial, got, c.Text)
			}
		default:
			t.Fatalf("case %d: unknown kind %q", i, c.Kind)
		}
		if ok {
			passed++
		} else if reported++; reported <= 8 {
			t.Errorf("case %d: %s", i, detail)
		}
	}
	return passed
}

func tokenStrings(tok *Tokenizer, ids []int) string {
	var parts []string
	for _, id := range ids {
		s, _ := tok.IDToken(id)
		parts = append(parts, fmt.Sprintf("%q", s))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func TestGolden(t *testing.T) {
	for _, name := range goldenNames {
		t.Run(name, func(t *testing.T) {
			tok := loadGolden(t, name)
			cases := readCases(t, filepath.Join(goldenDir(), name, "cases.jsonl.gz"))
			passed := checkCases(t, tok, cases)
			t.Logf("%s: %d/%d cases exact", name, passed, len(cases))
		})
	}
}

// variantSpec is testdata/variants/<name>/variant.json: a reference
// tokenizer with parts of its JSON replaced (see applyOps in gen.js).
type variantSpec struct {
	Base string `json:"base"`
	Ops  []struct {
		Set         map[string]json.RawMessage `json:"set"`
		ModelSet    map[string]json.RawMessage `json:"model_set"`
		DeleteBytes []int                      `json:"delete_bytes"`
		AddTokens   []json.RawMessage          `json:"add_tokens"`
	} `json:"ops"`
}

// applyVariant performs the operations of spec on a tokenizer.json.
func applyVariant(base []byte, spec variantSpec) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(base, &top); err != nil {
		return nil, err
	}
	var model map[string]json.RawMessage
	if err := json.Unmarshal(top["model"], &model); err != nil {
		return nil, err
	}
	for _, op := range spec.Ops {
		for k, v := range op.Set {
			top[k] = v
		}
		for k, v := range op.ModelSet {
			model[k] = v
		}
		if len(op.DeleteBytes) > 0 {
			var chars []string
			for _, b := range op.DeleteBytes {
				chars = append(chars, string(byteToRune[b]))
			}
			gone := func(s string) bool {
				return slices.ContainsFunc(chars, func(c string) bool { return strings.Contains(s, c) })
			}
			var vocab map[string]int
			if err := json.Unmarshal(model["vocab"], &vocab); err != nil {
				return nil, err
			}
			for k := range vocab {
				if gone(k) {
					delete(vocab, k)
				}
			}
			merges, err := parseMerges(model["merges"])
			if err != nil {
				return nil, err
			}
			var kept [][2]string
			for _, m := range merges {
				if !gone(m[0]) && !gone(m[1]) && !gone(m[0]+m[1]) {
					kept = append(kept, m)
				}
			}
			if model["vocab"], err = json.Marshal(vocab); err != nil {
				return nil, err
			}
			if model["merges"], err = json.Marshal(kept); err != nil {
				return nil, err
			}
		}
		if len(op.AddTokens) > 0 {
			var list []json.RawMessage
			if err := json.Unmarshal(top["added_tokens"], &list); err != nil {
				return nil, err
			}
			top["added_tokens"], _ = json.Marshal(append(list, op.AddTokens...))
		}
	}
	var err error
	if top["model"], err = json.Marshal(model); err != nil {
		return nil, err
	}
	return json.Marshal(top)
}

func TestGoldenVariants(t *testing.T) {
	if testing.Short() {
		t.Skip("variants reload the large reference files")
	}
	dirs, err := filepath.Glob(filepath.Join(goldenDir(), "variants", "*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no variants: %v", err)
	}
	for _, dir := range dirs {
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join(dir, "variant.json"))
			if err != nil {
				t.Fatal(err)
			}
			var spec variantSpec
			if err := json.Unmarshal(raw, &spec); err != nil {
				t.Fatal(err)
			}
			data, err := applyVariant(readGoldenJSON(t, spec.Base), spec)
			if err != nil {
				t.Fatal(err)
			}
			tok, err := FromJSON(data)
			if err != nil {
				t.Fatal(err)
			}
			cases := readCases(t, filepath.Join(dir, "cases.jsonl.gz"))
			passed := checkCases(t, tok, cases)
			t.Logf("variant %s: %d/%d cases exact", name, passed, len(cases))
		})
	}
}
