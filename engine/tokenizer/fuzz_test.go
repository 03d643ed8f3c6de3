package tokenizer

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// fuzzTokenizers are glm_mini (committed, small, every byte in its
// vocabulary, no normalizer) under each supported split pattern, so the
// fuzzer exercises every scanner.
var (
	fuzzOnce sync.Once
	fuzzToks map[string]*Tokenizer
	fuzzErr  error
)

func fuzzSet(t testing.TB) map[string]*Tokenizer {
	t.Helper()
	fuzzOnce.Do(func() {
		split := func(p string) map[string]any {
			return map[string]any{"type": "Split", "pattern": map[string]any{"Regex": p}, "behavior": "Isolated", "invert": false}
		}
		byteLevel := func(prefix, regex bool) map[string]any {
			return map[string]any{"type": "ByteLevel", "add_prefix_space": prefix, "trim_offsets": true, "use_regex": regex}
		}
		seq := func(steps ...any) map[string]any { return map[string]any{"type": "Sequence", "pretokenizers": steps} }
		pres := map[string]any{
			"qwen2":    nil, // glm_mini as committed
			"gpt2":     byteLevel(false, true),
			"cl100k":   seq(split(PatternCL100K), byteLevel(false, false)),
			"o200k":    seq(split(PatternO200K), byteLevel(false, false)),
			"deepseek": seq(split(PatternDigits3), split(PatternDeepSeekCJK), split(PatternDeepSeek), byteLevel(false, false)),
			"digits":   seq(map[string]any{"type": "Digits", "individual_digits": true}, split(PatternGPT2), byteLevel(false, false)),
		}
		fuzzToks = map[string]*Tokenizer{}
		for name, pre := range pres {
			data := readGoldenJSON(t, "glm_mini")
			if pre != nil {
				data = miniJSONFrom(t, data, func(m map[string]any) { m["pre_tokenizer"] = pre })
			}
			tok, err := FromJSON(data)
			if err != nil {
				fuzzErr = err
				return
			}
			fuzzToks[name] = tok
		}
	})
	if fuzzErr != nil {
		t.Fatal(fuzzErr)
	}
	return fuzzToks
}

// FuzzEncode checks, for any input, that encoding does not panic, that the
// tokens decode back to the exact input bytes, that a Stream agrees with
// Decode, and that the pre-tokenizer pieces cover the input.
func FuzzEncode(f *testing.F) {
	for _, s := range []string{"", "Hello, world!", "\t\t}\n", "I'M x'ſab 12345", "日本語のテキスト", "👨\u200d👩\u200d👧",
		"<|user|>hi<think>x</think>", "a\u0301 \u00a0 \u3000\n\r\n", "\xff\xfe invalid \xe4\xb8", "HELLOworld's foo//\n"} {
		f.Add(s)
	}
	toks := fuzzSet(f)
	f.Fuzz(func(t *testing.T, text string) {
		for name, tok := range toks {
			ids := tok.Encode(text, false)
			if got := string(tok.decodeBytes(nil, ids, false)); got != text {
				t.Fatalf("%s: bytes of Encode(%q) decode to %q", name, text, got)
			}
			if utf8.ValidString(text) {
				if got := tok.Decode(ids, false); got != text {
					t.Fatalf("%s: Decode(Encode(%q)) = %q", name, text, got)
				}
			}
			if got := strings.Join(streamAll(tok, ids, false), ""); got != tok.Decode(ids, false) {
				t.Fatalf("%s: Stream(%q) = %q, Decode differs", name, text, got)
			}
			if pieces := tok.pre.split(nil, text); strings.Join(pieces, "") != text {
				t.Fatalf("%s: pieces %q do not cover %q", name, pieces, text)
			}
			if len(tok.Encode(text, true)) != len(ids)+2 { // [gMASK]<sop>
				t.Fatalf("%s: add_special did not add two tokens", name)
			}
		}
	})
}

// FuzzLoad feeds arbitrary tokenizer.json contents to FromJSON: it must
// return an error or a Tokenizer that can encode and decode, never panic.
// The seeds in testdata/fuzz/FuzzLoad are small tokenizers that use every
// supported component; a large seed makes the fuzzer spend its time
// minimizing.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "ByteLevel"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := FromJSON(data)
		if err != nil {
			return
		}
		for _, s := range []string{"", "hello world", "<|user|>ab\u00e9 123", "\xff"} {
			ids := tok.Encode(s, true)
			tok.Decode(ids, false)
			tok.Decode(ids, true)
			st := tok.NewStream(false)
			for _, id := range ids {
				st.Add(id)
			}
			st.Flush()
		}
		tok.Decode([]int{-1, 0, 1, 1 << 40}, false)
		for id := -1; id < min(tok.VocabSize()+1, 50); id++ {
			tok.IDToken(id)
			tok.TokenBytes(id)
			tok.IsSpecial(id)
		}
	})
}

// TestFuzzLoadSeedsLoad makes sure the committed FuzzLoad seeds are valid
// tokenizers, so fuzzing starts from inputs that reach the encoder.
func TestFuzzLoadSeedsLoad(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzLoad", "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no seeds: %v", err)
	}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitN(string(raw), "\n", 3)
		if len(lines) < 2 || lines[0] != "go test fuzz v1" || !strings.HasPrefix(lines[1], "[]byte(") {
			t.Fatalf("%s: not a []byte fuzz seed", file)
		}
		data, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if _, err := FromJSON([]byte(data)); err != nil {
			t.Errorf("%s: %v", file, err)
		}
	}
}
