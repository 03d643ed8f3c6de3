package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzReadSequences feeds arbitrary prompts files (--prompts-file of eval,
// --calib-prompts of quantize: JSON lines, each a string or an array of
// token ids) to readSequences, with the tiny fixture's tokenizer for the
// strings. It must never panic; an error names the file; an accepted file
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
	tok := filepath.Join(fixtures, "tiny")
	p := filepath.Join(f.TempDir(), "prompts.jsonl")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		seqs, err := readSequences(p, tok)
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
