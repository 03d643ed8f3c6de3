package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/npuserve/npuserve/npu/nputest"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// served is a running `npuserve serve` process.
type served struct {
	cmd  *exec.Cmd
	url  string
	log  *syncBuffer
	done chan error
}

// syncBuffer is a goroutine-safe buffer for a process's stderr.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

var (
	serversMu sync.Mutex
	servers   []*served
)

// startServe starts `npuserve serve` on the tiny fixture on a free port
// and waits until /health answers.
func startServe(t testing.TB, extra ...string) *served {
	t.Helper()
	return startServeDir(t, filepath.Join(fixtures, "tiny"), extra...)
}

// startServeDir is startServe on the model in dir.
func startServeDir(t testing.TB, dir string, extra ...string) *served {
	t.Helper()
	port := freePort(t)
	args := append([]string{"serve", dir, "--host", "127.0.0.1", "--port", port}, withTestDevice(extra)...)
	s := &served{cmd: exec.Command(binPath, args...), url: "http://127.0.0.1:" + port, log: &syncBuffer{}, done: make(chan error, 1)}
	s.cmd.Stderr = s.log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	serversMu.Lock()
	servers = append(servers, s)
	serversMu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-s.done:
			t.Fatalf("serve exited during start-up (%v):\n%s", err, s.log.String())
		default:
		}
		if resp, err := http.Get(s.url + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not become healthy:\n%s", s.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits for the exit.
func (s *served) stop() error {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		s.done <- err
		return err
	case <-time.After(40 * time.Second):
		s.cmd.Process.Kill()
		return errors.New("serve did not exit within 40 s of SIGTERM")
	}
}

// stopServers stops every server the tests started (TestMain calls it).
func stopServers() {
	serversMu.Lock()
	defer serversMu.Unlock()
	for _, s := range servers {
		if s.cmd.ProcessState == nil {
			s.stop()
		}
	}
	servers = nil
}

var (
	sharedOnce sync.Once
	sharedSrv  *served
)

// sharedServer is one server with the GLM parsers on, shared by the tests
// that do not stop or reconfigure it.
func sharedServer(t *testing.T) *served {
	t.Helper()
	sharedOnce.Do(func() {
		sharedSrv = startServe(t, "--reasoning-parser", "glm45", "--tool-call-parser", "glm47", "--enable-auto-tool-choice", "--max-num-seqs", "64")
	})
	if sharedSrv == nil {
		t.Fatal("shared server failed to start")
	}
	return sharedSrv
}

func (s *served) client() openai.Client {
	return openai.NewClient(option.WithBaseURL(s.url+"/v1"), option.WithAPIKey("none"), option.WithMaxRetries(0))
}

func httpPost(t *testing.T, url, body string) (int, []byte) { return httpPostKey(t, url, "", body) }

// httpPostKey posts a JSON body with the API key as a bearer token ("":
// none) and returns the status and body.
func httpPostKey(t *testing.T, url, key, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// metricValue reads one unlabelled-by-reason vllm:* gauge or counter.
func metricValue(t *testing.T, s *served, name string) float64 {
	t.Helper()
	resp, err := http.Get(s.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, name+"{") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			return v
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}

// waitIdle waits until the engine runs nothing and the cache is empty.
func waitIdle(t *testing.T, s *served) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		kv := metricValue(t, s, "vllm:kv_cache_usage_perc")
		run := metricValue(t, s, "vllm:num_requests_running")
		wait := metricValue(t, s, "vllm:num_requests_waiting")
		if kv == 0 && run == 0 && wait == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("engine not idle: kv %v running %v waiting %v", kv, run, wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestServeSDK(t *testing.T) {
	s := sharedServer(t)
	client := s.client()
	ctx := context.Background()
	model := filepath.Join(fixtures, "tiny")

	cmpl, err := client.Completions.New(ctx, openai.CompletionNewParams{
		Model: openai.CompletionNewParamsModel(model), Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Hello, world!")},
		MaxTokens: openai.Int(6), Temperature: openai.Float(0), Logprobs: openai.Int(3),
	})
	if err != nil {
		t.Fatal(err)
	}
	c := cmpl.Choices[0]
	if cmpl.Object != "text_completion" || !strings.HasPrefix(cmpl.ID, "cmpl-") || cmpl.Usage.CompletionTokens != 6 || c.FinishReason != "length" {
		t.Errorf("completion %s", cmpl.RawJSON())
	}
	if len(c.Logprobs.Tokens) != 6 || len(c.Logprobs.TopLogprobs) != 6 || len(c.Logprobs.TextOffset) != 6 {
		t.Errorf("logprobs %s", c.Logprobs.RawJSON())
	}

	// Streaming completions with usage.
	stream := client.Completions.NewStreaming(ctx, openai.CompletionNewParams{
		Model: openai.CompletionNewParamsModel(model), Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Hello, world!")},
		MaxTokens: openai.Int(6), Temperature: openai.Float(0), StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var text strings.Builder
	var usage int64
	for stream.Next() {
		ch := stream.Current()
		for _, x := range ch.Choices {
			text.WriteString(x.Text)
		}
		if ch.Usage.CompletionTokens > 0 {
			usage = ch.Usage.CompletionTokens
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if text.String() != c.Text || usage != 6 {
		t.Errorf("streamed %q (usage %d), non-streamed %q", text.String(), usage, c.Text)
	}

	// Chat, plain and streamed; n > 1 with a seed is reproducible.
	params := openai.ChatCompletionNewParams{
		Model:               model,
		Messages:            []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say something")},
		MaxCompletionTokens: openai.Int(8), N: openai.Int(2), Seed: openai.Int(42), Temperature: openai.Float(1),
		Logprobs: openai.Bool(true), TopLogprobs: openai.Int(2),
	}
	a, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	b, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Choices) != 2 || len(b.Choices) != 2 {
		t.Fatalf("choices %d %d", len(a.Choices), len(b.Choices))
	}
	for i := range a.Choices {
		if chatText(a.Choices[i].Message) != chatText(b.Choices[i].Message) {
			t.Errorf("seeded choice %d differs: %q vs %q", i, chatText(a.Choices[i].Message), chatText(b.Choices[i].Message))
		}
		if n := len(a.Choices[i].Logprobs.Content); n == 0 || len(a.Choices[i].Logprobs.Content[0].TopLogprobs) != 2 {
			t.Errorf("chat logprobs %s", a.Choices[i].Logprobs.RawJSON())
		}
	}
	cs := client.Chat.Completions.NewStreaming(ctx, params)
	acc := openai.ChatCompletionAccumulator{}
	reasoning := map[int64]string{}
	for cs.Next() {
		chunk := cs.Current()
		acc.AddChunk(chunk)
		for _, ch := range chunk.Choices {
			var d struct {
				Reasoning string `json:"reasoning"`
			}
			json.Unmarshal([]byte(ch.Delta.RawJSON()), &d)
			reasoning[ch.Index] += d.Reasoning
		}
	}
	if err := cs.Err(); err != nil {
		t.Fatal(err)
	}
	for i := range a.Choices {
		got := reasoning[int64(i)] + "|" + acc.Choices[i].Message.Content
		if want := chatText(a.Choices[i].Message); got != want {
			t.Errorf("streamed choice %d %q, non-streamed %q", i, got, want)
		}
	}

	// Tools, streamed and not: the random model rarely calls one, but the
	// request must go through the parsers and come back well-formed.
	tparams := openai.ChatCompletionNewParams{
		Model:    model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in Paris?")},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: "get_weather", Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}})},
		MaxCompletionTokens: openai.Int(12),
	}
	tr, err := client.Chat.Completions.New(ctx, tparams)
	if err != nil {
		t.Fatal(err)
	}
	if fr := tr.Choices[0].FinishReason; fr != "stop" && fr != "length" && fr != "tool_calls" {
		t.Errorf("tools finish_reason %q", fr)
	}
	ts := client.Chat.Completions.NewStreaming(ctx, tparams)
	for ts.Next() {
	}
	if err := ts.Err(); err != nil {
		t.Fatal(err)
	}

	_, err = client.Completions.New(ctx, openai.CompletionNewParams{Model: "nope", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("x")}})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Message != "The model `nope` does not exist." {
		t.Errorf("unknown model: %v", err)
	}
	waitIdle(t, s)
}

// chatText is a message's content plus its reasoning (the tiny model's
// random output can fall on either side of a </think>).
func chatText(m openai.ChatCompletionMessage) string {
	var x struct {
		Reasoning string `json:"reasoning"`
	}
	json.Unmarshal([]byte(m.RawJSON()), &x)
	return x.Reasoning + "|" + m.Content
}

// completionIDs posts a greedy token-id completion and returns its
// generated token ids.
func completionIDs(t *testing.T, s *served, prompt []int32, n int) []int32 {
	body := fmt.Sprintf(`{"prompt":%s,"max_tokens":%d,"temperature":0,"ignore_eos":true,"return_token_ids":true}`, mustJSON(prompt), n)
	code, out := httpPost(t, s.url+"/v1/completions", body)
	if code != 200 {
		t.Errorf("status %d: %s", code, out)
		return nil
	}
	var resp struct {
		Choices []struct {
			TokenIDs       []int32 `json:"token_ids"`
			PromptTokenIDs []int32 `json:"prompt_token_ids"`
		} `json:"choices"`
	}
	json.Unmarshal(out, &resp)
	if !equalIDs(resp.Choices[0].PromptTokenIDs, prompt) {
		t.Errorf("prompt_token_ids %v, want %v", resp.Choices[0].PromptTokenIDs, prompt)
	}
	return resp.Choices[0].TokenIDs
}

// TestServeGolden: greedy outputs through the server equal transformers'
// (the golden tokens `npuserve generate` reproduces), alone and while the
// engine is busy with other requests.
func TestServeGolden(t *testing.T) {
	s := sharedServer(t)
	g := loadGolden(t, "tiny")
	for i, p := range g.Prompts {
		if got := completionIDs(t, s, p, 8); !equalIDs(got, g.Greedy[i]) {
			t.Errorf("alone: prompt %d: %v, want %v", i, got, g.Greedy[i])
		}
	}
	// Busy batch: background streams of sampled text plus every golden
	// prompt at once.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var bg sync.WaitGroup
	for k := 0; k < 12; k++ {
		bg.Add(1)
		go func(k int) {
			defer bg.Done()
			body := fmt.Sprintf(`{"prompt":"background %d","max_tokens":60,"ignore_eos":true,"stream":true,"seed":%d}`, k, k)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v1/completions", strings.NewReader(body))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}(k)
	}
	time.Sleep(100 * time.Millisecond)
	var wg sync.WaitGroup
	got := make([][]int32, len(g.Prompts))
	for rep := 0; rep < 2; rep++ {
		for i, p := range g.Prompts {
			wg.Add(1)
			go func(i int, p []int32) {
				defer wg.Done()
				got[i] = completionIDs(t, s, p, 8)
			}(i, p)
		}
		wg.Wait()
		for i := range g.Prompts {
			if !equalIDs(got[i], g.Greedy[i]) {
				t.Errorf("busy: prompt %d: %v, want %v", i, got[i], g.Greedy[i])
			}
		}
	}
	bg.Wait()
	waitIdle(t, s)
}

// TestServeBadInputs: every bad request gets the envelope, the server
// stays up and nothing is left in the cache.
func TestServeBadInputs(t *testing.T) {
	s := sharedServer(t)
	long := make([]int32, 4100)
	for i := range long {
		long[i] = 7
	}
	cases := []struct {
		name, path, body string
		status           int
		inMsg            string
	}{
		{"malformed JSON", "/v1/chat/completions", `{"messages": [`, 400, "JSON decode error"},
		{"wrong type", "/v1/completions", `{"prompt":"a","max_tokens":"many"}`, 400, "Input should be a valid integer"},
		{"unknown model", "/v1/chat/completions", `{"model":"x","messages":[{"role":"user","content":"a"}]}`, 404, "The model `x` does not exist."},
		{"prompt too long", "/v1/completions", `{"prompt":` + mustJSON(long) + `}`, 400, "This model's maximum context length is 4096 tokens. However, your request has 4100 input tokens. Please reduce the length of the input messages."},
		{"max_tokens too large", "/v1/completions", `{"prompt":[1,2,3],"max_tokens":5000}`, 400, "'max_tokens' or 'max_completion_tokens' is too large: 5000. This model's maximum context length is 4096 tokens and your request has 3 input tokens (5000 > 4096 - 3)."},
		{"temperature", "/v1/completions", `{"prompt":"a","temperature":-0.5}`, 400, "temperature must be non-negative, got -0.5."},
		{"top_p", "/v1/completions", `{"prompt":"a","top_p":1.01}`, 400, "top_p must be in (0, 1], got 1.01."},
		{"n", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"n":0}`, 400, "n must be at least 1, got 0."},
		{"logprobs", "/v1/completions", `{"prompt":"a","logprobs":25}`, 400, "Requested sample logprobs of 25, which is greater than max allowed: 20"},
		{"empty messages", "/v1/chat/completions", `{"messages":[]}`, 400, "[] is too short - 'messages'"},
		{"unknown role", "/v1/chat/completions", `{"messages":[{"role":"robot","content":"a"}]}`, 400, "Invalid value: 'robot'."},
		{"stop id out of vocab", "/v1/completions", `{"prompt":"a","stop_token_ids":[100000]}`, 400, "stop_token_ids contain out-of-vocab token ids"},
		{"suffix", "/v1/completions", `{"prompt":"a","suffix":"z"}`, 400, "suffix is not currently supported"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out := httpPost(t, s.url+c.path, c.body)
			var e struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    int     `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(out, &e); err != nil || code != c.status || e.Error.Code != c.status || e.Error.Type == "" {
				t.Fatalf("status %d: %s", code, out)
			}
			if !strings.Contains(e.Error.Message, c.inMsg) {
				t.Errorf("message %q lacks %q", e.Error.Message, c.inMsg)
			}
		})
	}
	if resp, err := http.Get(s.url + "/health"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("server unhealthy after bad inputs: %v", err)
	}
	waitIdle(t, s)
}

// soakSettings are the streams and seconds of the soak test (make soak
// raises them with NPUSERVE_SOAK_STREAMS / NPUSERVE_SOAK_SECONDS).
func soakSettings() (streams int, dur time.Duration) {
	streams, secs := 32, 3.0
	if v, err := strconv.Atoi(os.Getenv("NPUSERVE_SOAK_STREAMS")); err == nil && v > 0 {
		streams = v
	}
	if v, err := strconv.ParseFloat(os.Getenv("NPUSERVE_SOAK_SECONDS"), 64); err == nil && v > 0 {
		secs = v
	}
	return streams, time.Duration(secs * float64(time.Second))
}

// TestServeSoak: many concurrent streaming requests (completions and
// chat) for a while: no failure, every stream ends with [DONE], and the
// cache is empty afterwards. `make soak` runs it with 256 streams for 60 s.
func TestServeSoak(t *testing.T) {
	streams, dur := soakSettings()
	var s *served
	if streams > 64 {
		s = startServe(t, "--max-num-seqs", strconv.Itoa(streams))
		defer s.stop()
	} else {
		s = sharedServer(t)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: streams}}
	stopAt := time.Now().Add(dur)
	var mu sync.Mutex
	var failures []string
	completed := 0
	var wg sync.WaitGroup
	for k := 0; k < streams; k++ {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			for n := 0; time.Now().Before(stopAt); n++ {
				path, body := "/v1/completions", fmt.Sprintf(`{"prompt":"soak %d %d","max_tokens":%d,"stream":true,"stream_options":{"include_usage":true}}`, k, n, 8+(k+n)%24)
				if (k+n)%2 == 1 {
					path, body = "/v1/chat/completions", fmt.Sprintf(`{"messages":[{"role":"user","content":"soak %d %d"}],"max_tokens":%d,"stream":true}`, k, n, 8+(k+n)%24)
				}
				err := soakOne(client, s.url+path, body)
				mu.Lock()
				if err != nil {
					failures = append(failures, err.Error())
				} else {
					completed++
				}
				mu.Unlock()
			}
		}(k)
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d of %d streams failed; first: %s", len(failures), len(failures)+completed, failures[0])
	}
	if completed < streams {
		t.Fatalf("only %d streams completed", completed)
	}
	t.Logf("%d streams completed by %d clients in %s", completed, streams, dur)
	waitIdle(t, s)
}

// soakOne runs one stream to its end and checks its framing.
func soakOne(client *http.Client, url, body string) error {
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<22)
	last, n := "", 0
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		if !strings.HasPrefix(line, "data: ") {
			return fmt.Errorf("bad SSE line %q", line)
		}
		last = strings.TrimPrefix(line, "data: ")
		n++
		if last != "[DONE]" && !json.Valid([]byte(last)) {
			return fmt.Errorf("bad chunk %q", last)
		}
		if strings.HasPrefix(last, `{"error"`) {
			return fmt.Errorf("error event %s", last)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if last != "[DONE]" {
		return fmt.Errorf("stream of %d events ended without [DONE]", n)
	}
	return nil
}

// TestServeShutdown: SIGTERM lets a running stream finish, then the
// process exits 0.
func TestServeShutdown(t *testing.T) {
	s := startServe(t, "--max-num-seqs", "8")
	resp, err := http.Post(s.url+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt":"long","max_tokens":300,"ignore_eos":true,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	rest, _ := io.ReadAll(br)
	if !strings.HasSuffix(strings.TrimSpace(string(rest)), "data: [DONE]") {
		t.Errorf("stream cut by shutdown: ends %q", tail(string(rest), 200))
	}
	if err := <-s.done; err != nil {
		t.Errorf("exit: %v\n%s", err, s.log.String())
	}
	s.done <- nil
	if !strings.Contains(s.log.String(), "shutting down") {
		t.Errorf("log lacks the shutdown line:\n%s", s.log.String())
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// TestServeOptions: --api-key, --served-model-name, --skip-tokenizer-init
// and --load-format dummy on a real process.
func TestServeOptions(t *testing.T) {
	s := startServe(t, "--api-key", "secret", "--served-model-name", "glm", "--skip-tokenizer-init", "--load-format", "dummy", "--max-num-seqs", "4")
	defer s.stop()
	code, b := httpPostKey(t, s.url+"/v1/completions", "", `{"model":"glm","prompt":[1,2,3],"max_tokens":4}`)
	if code != 401 || !strings.Contains(string(b), `"code":401`) {
		t.Errorf("no key: %d %s", code, b)
	}
	code, b = httpPostKey(t, s.url+"/v1/completions", "secret", `{"model":"glm","prompt":[1,2,3],"max_tokens":4,"ignore_eos":true}`)
	var out struct {
		Model   string `json:"model"`
		Choices []struct {
			Text     string  `json:"text"`
			TokenIDs []int32 `json:"token_ids"`
		} `json:"choices"`
	}
	json.Unmarshal(b, &out)
	if code != 200 || out.Model != "glm" || out.Choices[0].Text != "" || len(out.Choices[0].TokenIDs) != 4 {
		t.Errorf("token-id prompt without tokenizer: %d %s", code, b)
	}
	code, b = httpPostKey(t, s.url+"/v1/completions", "secret", `{"prompt":"text","max_tokens":4}`)
	if code != 400 || !strings.Contains(string(b), "skip_tokenizer_init") {
		t.Errorf("text prompt without tokenizer: %d %s", code, b)
	}
}

// TestServeStartupErrors: bad flags and unsupported layouts fail at
// start-up, naming the flag; --dry-run prints the plan.
func TestServeStartupErrors(t *testing.T) {
	tiny := filepath.Join(fixtures, "tiny")
	out, errOut, code := run(t, "serve", tiny, "--dry-run")
	var plan map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &plan) != nil || plan["scheduler"] == nil {
		t.Errorf("--dry-run: exit %d, %q %s", code, tail(out, 200), errOut)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--port", "notaport"}, "--port"},
		{[]string{"--max-model-len", "99999"}, "--max-model-len"},
		// Multi-rank layouts run through engine/dp (its tests serve them).
		{[]string{"--data-parallel-size", "2", "--data-parallel-start-rank", "1"}, "--data-parallel-start-rank 1 without --headless"},
		{[]string{"--headless", "--data-parallel-size", "2", "--data-parallel-start-rank", "1"}, "--data-parallel-address"},
		{[]string{"--data-parallel-size", "2", "--data-parallel-size-local", "1"}, "--data-parallel-address: DP ranks 1..1 run on other nodes"},
		{[]string{"--chat-template", "/no/such/template.jinja"}, "--chat-template"},
		{[]string{"--tool-call-parser", "nope"}, "tool-call-parser"},
	}
	for _, c := range cases {
		args := append([]string{"serve", tiny, "--port", freePort(t)}, c.args...)
		_, errOut, code := run(t, args...)
		if code == 0 || !strings.Contains(errOut, c.want) || strings.Contains(errOut, "panic") {
			t.Errorf("%v: exit %d, stderr %q, want %q", c.args, code, errOut, c.want)
		}
	}
}

// TestServeQuantized: `npuserve serve` runs an msmodelslim checkpoint
// (made by `npuserve quantize`) on the cpu backend: with --quantization
// alone, which implies the Ascend backend, it warns once and runs on the
// cpu; with --device cpu it runs without a warning. Either way greedy
// tokens equal `npuserve generate`'s on the same dir. A dir without the
// description, a description of another type and an explicit --device
// ascend fail at start, naming the flag; --dry-run keeps the implied
// Ascend plan.
func TestServeQuantized(t *testing.T) {
	tiny := filepath.Join(fixtures, "tiny")
	dir := filepath.Join(t.TempDir(), "w8a8_dynamic")
	if _, stderr, code := run(t, "quantize", "--model", tiny, "--out", dir, "--scheme", "w8a8_dynamic"); code != 0 {
		t.Fatalf("quantize: exit %d: %s", code, stderr)
	}
	prompt := []int32{1, 2, 3, 4, 5}
	stdout, stderr, code := run(t, "generate", "--model", dir, "--quantization", "ascend", "--prompt-ids", idsArg(prompt), "--max-tokens", "6", "--ignore-eos", "--json")
	var gen generateResult
	if code != 0 || json.Unmarshal([]byte(stdout), &gen) != nil || len(gen.TokenIDs) != 6 {
		t.Fatalf("generate --quantization ascend: exit %d, %q, %s", code, stdout, stderr)
	}
	// Where CANN does not load (here: no ASCEND_HOME_PATH, no
	// /usr/local/Ascend), the implied Ascend backend falls back to the cpu
	// with the loader's reason in the warning.
	const warning = "--quantization ascend implies the Ascend backend, which does not load here (device ascend: "
	for _, tc := range []struct {
		name    string
		args    []string
		warning bool
	}{
		{"implied ascend device", []string{"--quantization", "ascend"}, true},
		{"--device cpu, w8a8_dynamic", []string{"--device", "cpu", "--quantization", "w8a8_dynamic"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServeDir(t, dir, append(tc.args, "--max-num-seqs", "4", "--max-model-len", "256")...)
			defer s.stop()
			got := completionIDs(t, s, prompt, 6)
			if !equalIDs(got, gen.TokenIDs) {
				t.Errorf("served tokens %v, generate's %v", got, gen.TokenIDs)
			}
			log := s.log.String()
			if n := strings.Count(log, warning); n != map[bool]int{true: 1, false: 0}[tc.warning] || (tc.warning && !strings.Contains(log, "running the msmodelslim checkpoint on the cpu backend")) {
				t.Errorf("warning %q logged %d times:\n%s", warning, n, log)
			}
			if !strings.Contains(log, "loaded W8A8_DYNAMIC checkpoint") {
				t.Errorf("the quantized loader did not run:\n%s", log)
			}
		})
	}
	for _, tc := range []struct {
		name string
		dir  string
		args []string
		want []string
	}{
		{"no description", tiny, []string{"--quantization", "ascend"},
			[]string{"--quantization ascend: " + tiny + " has no quant_model_description.json"}},
		{"no description, --device cpu w8a8", tiny, []string{"--device", "cpu", "--quantization", "w8a8"},
			[]string{"--quantization w8a8: " + tiny + " has no quant_model_description.json"}},
		{"another type", dir, []string{"--device", "cpu", "--quantization", "w8a8"},
			[]string{"--quantization w8a8: ", "model_quant_type W8A8_DYNAMIC", "wants W8A8 "}},
		{"implied device, another type", dir, []string{"--quantization", "mxfp8"},
			[]string{"--quantization mxfp8: ", "model_quant_type W8A8_DYNAMIC", "wants W8A8_MXFP8"}},
		{"explicit --device ascend", dir, []string{"--device", "ascend", "--quantization", "ascend"},
			[]string{"--device ascend: device ascend: libascendcl.so not found", "/usr/local/Ascend/cann/lib64"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr, code := run(t, append([]string{"serve", tc.dir, "--port", freePort(t)}, tc.args...)...)
			if code == 0 || strings.Contains(stderr, "panic") || strings.Contains(stderr, "implies the Ascend backend") {
				t.Errorf("exit %d, stderr %q", code, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q, want %q", stderr, w)
				}
			}
		})
	}
	// --dry-run plans what vllm-ascend would run, unless --device cpu.
	for _, tc := range []struct {
		args    []string
		backend string
	}{
		{[]string{"--quantization", "ascend"}, "ascend"},
		{[]string{"--quantization", "ascend", "--device", "cpu"}, "cpu"},
	} {
		stdout, stderr, code := run(t, append([]string{"serve", dir, "--dry-run"}, tc.args...)...)
		var plan struct {
			Device  struct{ Backend string }
			Weights struct {
				DeviceFormat string `json:"device_format"`
			}
		}
		if code != 0 || json.Unmarshal([]byte(stdout), &plan) != nil {
			t.Fatalf("--dry-run %v: exit %d: %s", tc.args, code, stderr)
		}
		if plan.Device.Backend != tc.backend || plan.Weights.DeviceFormat != "w8a8_dynamic" || strings.Contains(stderr, "implies") {
			t.Errorf("--dry-run %v: backend %q, device format %q, stderr %q", tc.args, plan.Device.Backend, plan.Weights.DeviceFormat, stderr)
		}
	}
}

// TestServeQuantizedParallel: an msmodelslim checkpoint (the trained
// fixture quantized w8a8_dynamic) served by several rank processes. DP2
// with expert parallelism computes exactly the single rank's logits, so
// its greedy tokens are generate's; TP2 quantizes activations per rank
// (as on Ascend), so it must serve, with tokens, but may differ in them.
func TestServeQuantizedParallel(t *testing.T) {
	serveQuantizedParallel(t, "trained", nil, nil)
}

// serveQuantizedParallel quantizes a fixture to W8A8_DYNAMIC (with
// quantize's extra flags), takes generate's single-rank tokens for two
// prompts, and serves the checkpoint (with serve's extra flags) on DP2 with
// expert parallelism, which must give those tokens exactly, and on TP2
// (activations quantized per rank), which must serve every token.
func serveQuantizedParallel(t *testing.T, fixture string, quantizeFlags, serveFlags []string) {
	dir := filepath.Join(t.TempDir(), "w8a8_dynamic")
	if _, stderr, code := run(t, append([]string{"quantize", "--model", filepath.Join(fixtures, fixture), "--out", dir, "--scheme", "w8a8_dynamic"}, quantizeFlags...)...); code != 0 {
		t.Fatalf("quantize: exit %d: %s", code, stderr)
	}
	g := loadGolden(t, fixture)
	var want [][]int32
	for _, p := range g.Prompts[:2] {
		stdout, stderr, code := run(t, "generate", "--model", dir, "--prompt-ids", idsArg(p), "--max-tokens", "8", "--ignore-eos", "--json")
		var gen generateResult
		if code != 0 || json.Unmarshal([]byte(stdout), &gen) != nil || len(gen.TokenIDs) != 8 {
			t.Fatalf("generate: exit %d, %q, %s", code, stdout, stderr)
		}
		want = append(want, gen.TokenIDs)
	}
	for _, tc := range []struct {
		name  string
		args  []string
		exact bool
	}{
		{"DP2 EP", []string{"--data-parallel-size", "2", "--enable-expert-parallel"}, true},
		{"TP2", []string{"--tensor-parallel-size", "2"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append(tc.args, "--quantization", "ascend", "--device", "cpu", "--max-num-seqs", "4", "--max-model-len", "256"), serveFlags...)
			s := startServeDir(t, dir, args...)
			defer s.stop()
			for i, p := range g.Prompts[:2] {
				got := completionIDs(t, s, p, 8)
				if len(got) != 8 || tc.exact && !equalIDs(got, want[i]) {
					t.Errorf("prompt %d: served %v, single rank %v", i, got, want[i])
				}
			}
		})
	}
}

// TestServeHandMadeMsmodelslim: the hand-made msmodelslim checkpoint
// (testdata/msmodelslim/handmade: names, dtypes and every scheme as
// serving-compat.md §4 lists them, written without npuserve quantize)
// serves with --quantization ascend, token-id prompts and no tokenizer,
// and the server's greedy tokens are generate's.
func TestServeHandMadeMsmodelslim(t *testing.T) {
	dir := filepath.Join(fixtures, "..", "msmodelslim", "handmade")
	prompt := []int32{1, 2, 3, 4, 5}
	stdout, stderr, code := run(t, "generate", "--model", dir, "--quantization", "ascend", "--prompt-ids", idsArg(prompt), "--max-tokens", "6", "--ignore-eos", "--json")
	var gen generateResult
	if code != 0 || json.Unmarshal([]byte(stdout), &gen) != nil || len(gen.TokenIDs) != 6 {
		t.Fatalf("generate: exit %d, %q, %s", code, stdout, stderr)
	}
	s := startServeDir(t, dir, "--quantization", "ascend", "--device", "cpu", "--skip-tokenizer-init", "--max-model-len", "128", "--max-num-seqs", "4")
	defer s.stop()
	if got := completionIDs(t, s, prompt, 6); !equalIDs(got, gen.TokenIDs) {
		t.Errorf("served tokens %v, generate's %v", got, gen.TokenIDs)
	}
	if log := s.log.String(); !strings.Contains(log, "loaded W8A8_DYNAMIC checkpoint") {
		t.Errorf("the quantized loader did not run:\n%s", log)
	}
}

// TestRenderMatchesServer: `npuserve render` prints exactly the prompt
// the server tokenizes for the same chat request.
func TestRenderMatchesServer(t *testing.T) {
	s := sharedServer(t)
	reqBody := `{"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Weather?"},` +
		`{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},` +
		`{"role":"tool","tool_call_id":"c1","content":"sunny"}],` +
		`"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],` +
		`"chat_template_kwargs":{"enable_thinking":false}}`
	path := filepath.Join(t.TempDir(), "req.json")
	os.WriteFile(path, []byte(reqBody), 0o644)
	out, errOut, code := run(t, "render", "--model", filepath.Join(fixtures, "tiny"), "--request", path)
	if code != 0 {
		t.Fatalf("render: exit %d: %s", code, errOut)
	}
	var r struct {
		Prompt         string  `json:"prompt"`
		PromptTokenIDs []int32 `json:"prompt_token_ids"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("render output %q: %v", out, err)
	}
	for _, want := range []string{"<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>", "<tool_response>\nsunny\n</tool_response>", "<|assistant|>\n<think></think>"} {
		if !strings.Contains(r.Prompt, want) {
			t.Errorf("prompt lacks %q:\n%s", want, r.Prompt)
		}
	}
	codeT, tokOut := httpPost(t, s.url+"/tokenize", reqBody)
	var tr struct {
		Tokens []int32 `json:"tokens"`
	}
	json.Unmarshal(tokOut, &tr)
	if codeT != 200 || !equalIDs(tr.Tokens, r.PromptTokenIDs) {
		t.Errorf("server tokens %v (%d), render %v", tr.Tokens, codeT, r.PromptTokenIDs)
	}
}

// TestBenchServe runs `npuserve bench serve` against the shared server.
func TestBenchServe(t *testing.T) {
	s := sharedServer(t)
	res := filepath.Join(t.TempDir(), "result.json")
	out, errOut, code := run(t, "bench", "serve", "--base-url", s.url, "--model", filepath.Join(fixtures, "tiny"),
		"--dataset", "random", "--random-input-len", "32", "--random-output-len", "8", "--num-prompts", "12",
		"--max-concurrency", "4", "--ignore-eos", "--seed", "1", "--result-file", res)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, out, errOut)
	}
	for _, want := range []string{"Serving Benchmark Result", "Successful requests:                     12", "Mean TTFT (ms):", "P99 ITL (ms):", "Median E2EL (ms):"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	b, err := os.ReadFile(res)
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]any
	json.Unmarshal(b, &r)
	for _, k := range []string{"duration", "completed", "total_input_tokens", "total_output_tokens", "request_throughput", "output_throughput",
		"total_token_throughput", "mean_ttft_ms", "median_tpot_ms", "p99_itl_ms", "mean_e2el_ms", "input_lens", "output_lens", "ttfts", "itls", "max_concurrency"} {
		if _, ok := r[k]; !ok {
			t.Errorf("result lacks %q", k)
		}
	}
	if r["completed"] != 12.0 || r["total_output_tokens"] != 96.0 {
		t.Errorf("completed %v output tokens %v", r["completed"], r["total_output_tokens"])
	}
	waitIdle(t, s)
}

// withTestDevice adds --device $NPUSERVE_TEST_DEVICE (npu/nputest) to a
// serve command's flags unless they choose a device, so that the serving
// tests also run on the checking cpu-async backend. A --quantization
// without --device is left alone: those tests check the device it implies.
//
// On an accelerator (a device other than the two CPU backends) it also
// asks for an fp32 cache unless the flags choose one: the goldens the
// serving tests compare with are fp32 references, and accelerators
// default to a bf16 cache.
func withTestDevice(flags []string) []string {
	d := nputest.Device()
	if d == "cpu" || slices.Contains(flags, "--device") || slices.Contains(flags, "--quantization") {
		return flags
	}
	flags = append(flags[:len(flags):len(flags)], "--device", d)
	if d != "cpu-async" && !slices.Contains(flags, "--kv-cache-dtype") {
		flags = append(flags, "--kv-cache-dtype", "float32")
	}
	return flags
}

// TestServePresencePenalty: presence_penalty reaches the sampler (before
// issue 12 the server never read it): greedy decoding that repeats a token
// takes another path once a repeat is penalized, and a penalty out of
// [-2, 2] or of the wrong type is refused.
func TestServePresencePenalty(t *testing.T) {
	s := sharedServer(t)
	ids := func(pp string) []int32 {
		code, b := httpPost(t, s.url+"/v1/completions",
			`{"prompt":"hello","max_tokens":24,"temperature":0,"ignore_eos":true,"return_token_ids":true,"presence_penalty":`+pp+`}`)
		var out struct {
			Choices []struct {
				TokenIDs []int32 `json:"token_ids"`
			} `json:"choices"`
		}
		if code != 200 || json.Unmarshal(b, &out) != nil || len(out.Choices) != 1 {
			t.Fatalf("presence_penalty %s: %d %s", pp, code, b)
		}
		return out.Choices[0].TokenIDs
	}
	plain, penalized := ids("0"), ids("2")
	seen, repeats := map[int32]bool{}, false
	for _, id := range plain {
		repeats = repeats || seen[id]
		seen[id] = true
	}
	if !repeats {
		t.Fatalf("the unpenalized output %v repeats no token: the check would prove nothing", plain)
	}
	if fmt.Sprint(plain) == fmt.Sprint(penalized) {
		t.Errorf("presence_penalty 2 changed nothing: %v", plain)
	}
	for _, bad := range []string{`-5`, `"NaN"`, `[1]`} {
		code, b := httpPost(t, s.url+"/v1/completions", `{"prompt":"hello","presence_penalty":`+bad+`}`)
		if code != 400 || !strings.Contains(string(b), "presence_penalty") {
			t.Errorf("presence_penalty %s: %d %s", bad, code, b)
		}
	}
}
