package config

import "testing"

// TestServerFlags covers the OpenAI-server flags vLLM users pass through to
// the HTTP layer.
func TestServerFlags(t *testing.T) {
	a, err := ParseArgs([]string{"model", "--max-logprobs", "5", "--trust-request-chat-template",
		"--enable-prompt-tokens-details", "--enable-force-include-usage", "--return-tokens-as-token-ids"})
	if err != nil {
		t.Fatal(err)
	}
	if a.MaxLogprobs != 5 || !a.TrustRequestChatTemplate || !a.EnablePromptTokensDetails ||
		!a.EnableForceIncludeUsage || !a.ReturnTokensAsTokenIDs || !a.Given("max-logprobs") {
		t.Fatalf("flags not applied: %+v", a)
	}
	if _, err := ParseArgs([]string{"model", "--max-logprobs", "x"}); err == nil {
		t.Fatal("--max-logprobs x accepted")
	}
}
