package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/npuserve/npuserve/engine/tokenizer"
)

// FuzzReadSequences feeds arbitrary prompts files (--prompts-file of eval,
// --calib-prompts of quantize: JSON lines, each a string or an array of
// token ids) to readSequences' parser, with the tiny fixture's tokenizer
// (loaded once) for the strings. It must never panic; an error names the file; an accepted file
// gives at least one sequence, every one non-empty with ids ≥ 0.
func FuzzReadSequences(f *testing.F) {
	for _, s := range []string{
		"[1, 2, 3]\n",
		"[1, 2, 3]\n\n  [4, 5]  \n\"Hello, world!\"\n",
		"\"The capital of France is\"\n\"<|user|>hi<|assistant|>\"\n",
		"[0]\r\n[2147483647]\r\n",
		"[1, 2]\n{\"a\": 1}\n",
		"[1, -2]\n",
		"[1.5]\n",
		"[]\n",
		"\"\"\n",
		"\n\n",
		"[1, 2",
	} {
		f.Add([]byte(s))
	}
	tk, err := tokenizer.Load(filepath.Join(fixtures, "tiny"))
	if err != nil {
		f.Fatal(err)
	}
	tok := func() (*tokenizer.Tokenizer, error) { return tk, nil }
	const p = "prompts.jsonl"
	f.Fuzz(func(t *testing.T, data []byte) {
		seqs, err := parseSequences(bytes.NewReader(data), p, tok)
		if err != nil {
			if seqs != nil {
				t.Fatal("sequences returned with an error")
			}
			if !strings.HasPrefix(err.Error(), p+":") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if len(seqs) == 0 {
			t.Fatal("no sequences and no error")
		}
		for i, s := range seqs {
			if len(s) == 0 {
				t.Fatalf("sequence %d is empty", i)
			}
			for _, id := range s {
				if id < 0 {
					t.Fatalf("sequence %d: id %d", i, id)
				}
			}
		}
	})
}
