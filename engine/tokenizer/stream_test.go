package tokenizer

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestAppendLossy checks U+FFFD substitution of maximal subparts (Unicode
// §3.9, Table 3-8), which is what Rust's from_utf8_lossy does.
func TestAppendLossy(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{"\xe4\xb8", "\ufffd"},
		{"a\xc3", "a\ufffd"},
		{"\xf0\x80\x80", "\ufffd\ufffd\ufffd"},
		{"\xed\xa0\x80", "\ufffd\ufffd\ufffd"},
		{"\xf4\x90\x80\x80", "\ufffd\ufffd\ufffd\ufffd"},
		{"\xc0\xaf", "\ufffd\ufffd"},
		{"\xf0\x9f\x98", "\ufffd"},
		{"\xf0\x9f\x98x", "\ufffdx"},
		{"\xe0\xa0", "\ufffd"},
		{"\xe0\x9f\x80", "\ufffd\ufffd\ufffd"},
		{"\x80\xbf", "\ufffd\ufffd"},
		{"\xff", "\ufffd"},
		{"\ufffd", "\ufffd"},
		{"\xf0\x9f\x98\x80", "😀"},
	}
	for _, tc := range tests {
		if got := string(appendLossy(nil, []byte(tc.in))); got != tc.want {
			t.Errorf("appendLossy(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestIncompleteTail(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"", 0}, {"abc", 0}, {"a\xe4", 1}, {"a\xe4\xb8", 2}, {"\xf0\x9f\x98", 3}, {"\xf0\x9f\x98\x80", 0},
		{"\xe0\x80", 0}, // E0 80 can never become valid
		{"\xed\xa0", 0}, // a surrogate
		{"\x80", 0}, {"\xc3", 1}, {"\xc3\xa9", 0}, {"\xf5", 0}, {"x\xf4\x8f", 2}, {"x\xf4\x90", 0},
	}
	for _, tc := range tests {
		if got := incompleteTail([]byte(tc.in)); got != tc.want {
			t.Errorf("incompleteTail(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

// streamAll feeds ids one at a time and returns the chunks, Flush last.
func streamAll(tok *Tokenizer, ids []int, skip bool) []string {
	s := tok.NewStream(skip)
	var chunks []string
	for _, id := range ids {
		chunks = append(chunks, s.Add(id))
	}
	return append(chunks, s.Flush())
}

// TestStreamValidText streams texts whose characters are split across
// byte-level tokens: no chunk may carry U+FFFD or broken UTF-8, and the
// chunks must add up to the text.
func TestStreamValidText(t *testing.T) {
	texts := []string{
		"你好，世界！東京は日本の首都です。",
		"👨\u200d👩\u200d👧\u200d👦 family 🇯🇵🇺🇸 ❤\ufe0f👋🏽",
		"Привет, мир! Καλημέρα. नमस्ते दुनिया",
		"Cafe\u0301 na\u00efve \u1100\u1161\u11a8",
		"<|user|>写一首诗<|assistant|><think>嗯</think>好的🎉",
	}
	for _, name := range []string{"glm_mini", "qwen3", "llama3_1", "gpt_oss", "deepseek_v3"} {
		tok := loadGolden(t, name)
		held := false
		for _, text := range texts {
			ids := tok.Encode(text, false)
			s := tok.NewStream(false)
			var b strings.Builder
			for _, id := range ids {
				chunk := s.Add(id)
				if strings.ContainsRune(chunk, utf8.RuneError) || !utf8.ValidString(chunk) {
					t.Errorf("%s: chunk %q of %q is broken", name, chunk, text)
				}
				if chunk == "" && s.Pending() {
					held = true
				}
				b.WriteString(chunk)
			}
			if rest := s.Flush(); rest != "" {
				t.Errorf("%s: Flush returned %q after complete text", name, rest)
			}
			if want := tok.Decode(ids, false); b.String() != want {
				t.Errorf("%s: stream %q != Decode %q", name, b.String(), want)
			}
			if name != "qwen3" && b.String() != text { // qwen3 normalizes to NFC
				t.Errorf("%s: stream %q != text %q", name, b.String(), text)
			}
		}
		if name == "glm_mini" && !held {
			t.Errorf("%s: no character was split across tokens; the test does not exercise holding back", name)
		}
	}
}

// TestStreamMatchesDecode feeds random ids, many of them lone bytes of
// multi-byte characters: the chunks must always add up to Decode.
func TestStreamMatchesDecode(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, name := range []string{"glm_mini", "llama3_1"} {
		tok := loadGolden(t, name)
		special := tok.SpecialIDs()
		for iter := 0; iter < 2000; iter++ {
			ids := make([]int, 1+r.IntN(20))
			for i := range ids {
				switch x := r.IntN(10); {
				case x < 5:
					ids[i] = r.IntN(tok.VocabSize())
				case x < 7:
					ids[i] = int(tok.model.byteID[0x80+r.IntN(0x80)]) // lead/continuation bytes
				case x < 9:
					ids[i] = special[r.IntN(len(special))]
				default:
					ids[i] = tok.VocabSize() + r.IntN(3) // unknown id
				}
			}
			for _, skip := range []bool{false, true} {
				got := strings.Join(streamAll(tok, ids, skip), "")
				if want := tok.Decode(ids, skip); got != want {
					t.Fatalf("%s: ids %v skip %v: stream %q, Decode %q", name, ids, skip, got, want)
				}
			}
		}
	}
}

func TestStreamSkipSpecialAndReuse(t *testing.T) {
	tok := loadGolden(t, "glm_mini")
	ids := tok.Encode("[gMASK]<sop><|user|>hi<think>x</think>", false)
	if got := strings.Join(streamAll(tok, ids, true), ""); got != "hi<think>x</think>" {
		t.Errorf("skip special: %q", got)
	}
	s := tok.NewStream(false)
	half := tok.Encode("é", false) // two byte tokens in glm_mini
	if len(half) != 2 {
		t.Fatalf("é encodes to %v, want two byte tokens", half)
	}
	if got := s.Add(half[0]); got != "" || !s.Pending() {
		t.Errorf("first byte of é: %q, pending %v", got, s.Pending())
	}
	if got := s.Flush(); got != "\ufffd" {
		t.Errorf("Flush of a lone lead byte = %q, want U+FFFD", got)
	}
	if got := s.Add(half[0]) + s.Add(half[1]); got != "é" {
		t.Errorf("after Flush the stream decodes %q, want é", got)
	}
}

// TestNullDecoder checks a tokenizer without a decoder: HF joins token
// strings with spaces, and so does Stream.
func TestNullDecoder(t *testing.T) {
	tok, err := FromJSON(miniJSON(t, func(m map[string]any) { m["decoder"] = nil }))
	if err != nil {
		t.Fatal(err)
	}
	ids := tok.Encode("hi there 你", false)
	want := "h i Ġth ere Ġ ä ½ ł" // from HF tokenizers with "decoder": null
	if got := tok.Decode(ids, false); got != want {
		t.Errorf("Decode = %q, want %q", got, want)
	}
	if got := strings.Join(streamAll(tok, ids, false), ""); got != want {
		t.Errorf("stream = %q, want %q", got, want)
	}
}
