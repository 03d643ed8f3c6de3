package tokenizer

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// megabyte builds about 1 MB of mixed text: prose, Go code with tabs, CJK,
// emoji, digits and whitespace runs.
func megabyte() string {
	parts := []string{
		"The quick brown fox jumps over the lazy dog. It's the fox's 3rd jump in 2024!\n",
		"func (s *Server) Serve(l net.Listener) error {\n\tfor {\n\t\trw, err := l.Accept()\n\t\tif err != nil {\n\t\t\treturn err\n\t\t}\n\t}\n}\n",
		"机器学习模型需要大量的训练数据。東京は日本の首都です。서울은 대한민국의 수도입니다.\n",
		"Emoji 👨\u200d👩\u200d👧\u200d👦 and 🇯🇵 flags, numbers 1234567890 and    spaces\t\t\n\n",
		"    def encode(self, o):\n        if isinstance(o, str):\n            return o  # comment\n",
	}
	var b strings.Builder
	for i := 0; b.Len() < 1<<20; i++ {
		b.WriteString(parts[i%len(parts)])
	}
	return b.String()
}

// pathological returns 512 KB inputs that could make a careless
// implementation quadratic (a quadratic scan of 512 KB takes minutes).
func pathological() map[string]string {
	const n = 1 << 19
	r := rand.New(rand.NewPCG(1, 2))
	rnd := make([]byte, n)
	for i := range rnd {
		rnd[i] = byte(r.Uint32())
	}
	return map[string]string{
		"one word":          strings.Repeat("a", n),
		"spaces":            strings.Repeat(" ", n),
		"spaces then x":     strings.Repeat(" ", n-1) + "x",
		"newline spaces":    strings.Repeat("\n ", n/2),
		"digits":            strings.Repeat("7", n),
		"apostrophes":       strings.Repeat("'s", n/2),
		"apostrophes only":  strings.Repeat("'", n),
		"punctuation":       strings.Repeat("=-", n/2),
		"cjk":               strings.Repeat("漢", n/3),
		"combining marks":   "a" + strings.Repeat("\u0301", n/2),
		"uppercase":         strings.Repeat("A", n),
		"special prefixes":  strings.Repeat("<|im_start", n/10),
		"random bytes":      string(rnd),
		"tabs before brace": strings.Repeat("\t", n-2) + "}\n",
	}
}

// TestEncodeLinearTime encodes 1 MB inputs with a generous time bound: a
// quadratic algorithm takes minutes on them.
func TestEncodeLinearTime(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	const limit = 10 * time.Second // the budget is "well under a few seconds"; shared CI machines are slow
	inputs := pathological()
	inputs["mixed text"] = megabyte()
	for _, name := range []string{"llama3_1", "qwen3", "gpt_oss", "deepseek_v3"} {
		tok := loadGolden(t, name)
		for what, text := range inputs {
			if name == "qwen3" && what != "mixed text" && what != "combining marks" {
				continue // same scanner family as llama3_1
			}
			start := time.Now()
			ids := tok.Encode(text, false)
			d := time.Since(start)
			if d > limit {
				t.Errorf("%s: encoding %d bytes of %s took %v", name, len(text), what, d)
			}
			if len(ids) == 0 {
				t.Errorf("%s: %s encoded to nothing", name, what)
			}
			if testing.Verbose() && d > 300*time.Millisecond {
				t.Logf("%s: %s: %v", name, what, d)
			}
			if what == "mixed text" {
				t.Logf("%s: 1 MB mixed text: %d tokens in %v (%.1f MB/s)", name, len(ids), d, float64(len(text))/d.Seconds()/1e6)
			}
			if name != "qwen3" && utf8.ValidString(text) { // qwen3 normalizes
				if got := tok.Decode(ids, false); got != text {
					t.Errorf("%s: %s does not round-trip", name, what)
				}
			}
		}
	}
}

func benchmarkEncode(b *testing.B, name string) {
	tok := loadGolden(b, name)
	text := megabyte()
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for b.Loop() {
		tok.Encode(text, false)
	}
}

func BenchmarkEncodeLlama3(b *testing.B) { benchmarkEncode(b, "llama3_1") }
func BenchmarkEncodeQwen3(b *testing.B)  { benchmarkEncode(b, "qwen3") }
func BenchmarkEncodeGPTOSS(b *testing.B) { benchmarkEncode(b, "gpt_oss") }

func BenchmarkDecodeStream(b *testing.B) {
	tok := loadGolden(b, "qwen3")
	ids := tok.Encode(megabyte(), false)
	b.ResetTimer()
	for b.Loop() {
		s := tok.NewStream(true)
		for _, id := range ids {
			s.Add(id)
		}
		s.Flush()
	}
}

func BenchmarkLoadGPTOSS(b *testing.B) {
	data := readGoldenJSON(b, "gpt_oss")
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for b.Loop() {
		if _, err := FromJSON(data); err != nil {
			b.Fatal(err)
		}
	}
}
