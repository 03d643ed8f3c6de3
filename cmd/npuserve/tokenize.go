package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/npuserve/npuserve/engine/tokenizer"
	"github.com/urfave/cli/v2"
)

func tokenizeCommand() *cli.Command {
	return &cli.Command{
		Name:      "tokenize",
		Usage:     "encode text with a model's tokenizer (the dir needs only tokenizer files)",
		ArgsUsage: "[TEXT]",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Usage: "model or tokenizer dir (tokenizer.json)", Required: true},
			&cli.BoolFlag{Name: "json", Usage: "print a JSON array of ids"},
			&cli.StringFlag{Name: "jsonl", Usage: "encode every line of FILE (each a JSON string); prints one JSON array per line"},
			&cli.BoolFlag{Name: "add-special-tokens", Usage: "apply the tokenizer's post-processor (e.g. BOS)"},
		},
		Action: runTokenize,
	}
}

func runTokenize(c *cli.Context) error {
	jsonl := c.String("jsonl")
	if jsonl == "" && c.NArg() != 1 {
		return usageError("tokenize: give exactly one TEXT argument or --jsonl FILE")
	}
	if jsonl != "" && c.NArg() != 0 {
		return usageError("tokenize: TEXT and --jsonl are exclusive")
	}
	tok, err := tokenizer.Load(c.String("model"))
	if err != nil {
		return runError("--model: %v", err)
	}
	add := c.Bool("add-special-tokens")
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	if jsonl == "" {
		ids := tok.Encode(c.Args().First(), add)
		if c.Bool("json") {
			return writeJSONLine(out, ids)
		}
		parts := make([]string, len(ids))
		for i, id := range ids {
			parts[i] = fmt.Sprint(id)
		}
		fmt.Fprintln(out, strings.Join(parts, " "))
		return nil
	}
	f, err := os.Open(jsonl)
	if err != nil {
		return runError("--jsonl: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	line := 0
	for sc.Scan() {
		line++
		raw := strings.TrimSpace(sc.Text())
		if raw == "" {
			continue
		}
		var text string
		if err := json.Unmarshal([]byte(raw), &text); err != nil {
			return runError("--jsonl: %s line %d: want a JSON string: %v", jsonl, line, err)
		}
		if err := writeJSONLine(out, tok.Encode(text, add)); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return runError("--jsonl: %s: %v", jsonl, err)
	}
	return nil
}

func writeJSONLine(w *bufio.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	w.Write(b)
	return w.WriteByte('\n')
}
