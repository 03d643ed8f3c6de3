package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/npuserve/npuserve/engine/server"
	"github.com/npuserve/npuserve/engine/tokenizer"
	"github.com/urfave/cli/v2"
)

func renderCommand() *cli.Command {
	return &cli.Command{
		Name:  "render",
		Usage: "print the prompt and token ids the server builds for a request body (chat template applied)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "model", Usage: "model dir (tokenizer.json, tokenizer_config.json / chat_template.jinja)", Required: true},
			&cli.StringFlag{Name: "request", Usage: "request body: a /v1/chat/completions or /v1/completions JSON file (- for stdin)", Required: true},
			&cli.StringFlag{Name: "chat-template", Usage: "chat template file (or template text) overriding the model's, as serve --chat-template"},
			&cli.StringFlag{Name: "chat-template-content-format", Value: "auto", Usage: "auto, string or openai, as serve's flag"},
		},
		Action: runRender,
	}
}

// renderResult is what render prints.
type renderResult struct {
	Prompt         string  `json:"prompt"`
	PromptTokenIDs []int32 `json:"prompt_token_ids"`
}

func runRender(c *cli.Context) error {
	dir := c.String("model")
	var data []byte
	var err error
	if p := c.String("request"); p == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(p)
	}
	if err != nil {
		return runError("--request: %v", err)
	}
	switch f := c.String("chat-template-content-format"); f {
	case "auto", "string", "openai":
	default:
		return usageError("--chat-template-content-format: want auto, string or openai, got %q", f)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return runError("--model: %v", err)
	}
	templates, override, err := loadTemplates(dir, c.String("chat-template"), true)
	if err != nil {
		return usageError("--chat-template: %v", err)
	}
	r := &server.Renderer{Templates: templates, Override: override, Tok: tok,
		ContentFormat: c.String("chat-template-content-format"), TrustRequestChatTemplate: true}
	prompt, ids, err := r.RenderRequestJSON(data)
	if err != nil {
		return runError("--request: %v", err)
	}
	if ids == nil {
		ids = []int32{}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(renderResult{Prompt: prompt, PromptTokenIDs: ids}); err != nil {
		return runError("render: %v", err)
	}
	fmt.Print(b.String())
	return nil
}
