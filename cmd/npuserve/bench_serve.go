package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/mattn/go-isatty"
	"github.com/npuserve/npuserve/engine/tokenizer"
	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v2"
)

// benchServeCommand is `npuserve bench serve`: vLLM's `vllm bench serve`
// protocol (random dataset, streaming /v1/completions requests, optional
// Poisson arrivals and a concurrency cap) and its report and result-file
// field names, so numbers are comparable with vLLM's.
func benchServeCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "online serving benchmark against a running server (vllm bench serve's protocol and report)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "base-url", Usage: "server URL, e.g. http://127.0.0.1:8000 (default: http://--host:--port)"},
			&cli.StringFlag{Name: "host", Value: "127.0.0.1", Usage: "server host when --base-url is not given"},
			&cli.IntFlag{Name: "port", Value: 8000, Usage: "server port when --base-url is not given"},
			&cli.StringFlag{Name: "endpoint", Value: "/v1/completions", Usage: "/v1/completions or /v1/chat/completions"},
			&cli.StringFlag{Name: "model", Usage: "model name sent in requests (default: the server's first model); also the tokenizer dir when it is one"},
			&cli.StringFlag{Name: "tokenizer", Usage: "tokenizer dir for the random prompts (default: --model)"},
			&cli.StringFlag{Name: "dataset", Aliases: []string{"dataset-name"}, Value: "random", Usage: "dataset: random"},
			&cli.IntFlag{Name: "random-input-len", Value: 1024, Usage: "prompt tokens per request"},
			&cli.IntFlag{Name: "random-output-len", Value: 128, Usage: "max_tokens per request"},
			&cli.Float64Flag{Name: "random-range-ratio", Value: 0, Usage: "lengths drawn from [len*(1-r), len*(1+r)]"},
			&cli.IntFlag{Name: "num-prompts", Value: 1000, Usage: "requests to send"},
			&cli.IntFlag{Name: "max-concurrency", Value: 0, Usage: "requests in flight at most (0: no limit)"},
			&cli.Float64Flag{Name: "request-rate", Value: math.Inf(1), Usage: "requests per second (Poisson arrivals; inf: all at once)"},
			&cli.Float64Flag{Name: "burstiness", Value: 1, Usage: "gamma shape of the arrival intervals (1: Poisson)"},
			&cli.BoolFlag{Name: "ignore-eos", Usage: "send ignore_eos so every request generates --random-output-len tokens"},
			&cli.StringFlag{Name: "result-file", Usage: "write the JSON result here (vLLM's field names)"},
			&cli.BoolFlag{Name: "save-result", Usage: "write the JSON result to --result-dir/--result-filename (vLLM's naming)"},
			&cli.StringFlag{Name: "result-dir", Value: ".", Usage: "directory for --save-result"},
			&cli.StringFlag{Name: "result-filename", Usage: "file name for --save-result"},
			&cli.Int64Flag{Name: "seed", Value: 0, Usage: "random seed for prompts and arrivals"},
			&cli.StringFlag{Name: "percentile-metrics", Value: "ttft,tpot,itl,e2el", Usage: "metrics to report percentiles of"},
			&cli.StringFlag{Name: "metric-percentiles", Value: "99", Usage: "percentiles to report, comma-separated"},
			&cli.BoolFlag{Name: "disable-tqdm", Usage: "no progress bar"},
		},
		Action: runBenchServe,
	}
}

// benchRequest is one prompt of the dataset.
type benchRequest struct {
	prompt    string
	promptLen int
	outputLen int
}

// benchOutput is one request's measurements (vLLM RequestFuncOutput).
type benchOutput struct {
	success       bool
	ttft          float64   // seconds
	itl           []float64 // seconds
	latency       float64   // seconds
	outputTokens  int
	generatedText string
	err           string
	start, end    time.Time
	tokenTimes    []time.Time
	promptLen     int
}

func runBenchServe(c *cli.Context) error {
	if d := c.String("dataset"); d != "random" {
		return usageError("--dataset: only random is supported, got %q", d)
	}
	inLen, outLen, n := c.Int("random-input-len"), c.Int("random-output-len"), c.Int("num-prompts")
	ratio := c.Float64("random-range-ratio")
	switch {
	case inLen < 1:
		return usageError("--random-input-len: must be >= 1, got %d", inLen)
	case outLen < 1:
		return usageError("--random-output-len: must be >= 1, got %d", outLen)
	case n < 1:
		return usageError("--num-prompts: must be >= 1, got %d", n)
	case ratio < 0 || ratio >= 1:
		return usageError("--random-range-ratio: must be in [0, 1), got %v", ratio)
	case c.Int("max-concurrency") < 0:
		return usageError("--max-concurrency: must be >= 0, got %d", c.Int("max-concurrency"))
	case !(c.Float64("request-rate") > 0):
		return usageError("--request-rate: must be > 0 (or inf), got %v", c.Float64("request-rate"))
	case !(c.Float64("burstiness") > 0):
		return usageError("--burstiness: must be > 0, got %v", c.Float64("burstiness"))
	}
	endpoint := c.String("endpoint")
	if endpoint != "/v1/completions" && endpoint != "/v1/chat/completions" {
		return usageError("--endpoint: want /v1/completions or /v1/chat/completions, got %q", endpoint)
	}
	percentiles, err := parsePercentiles(c.String("metric-percentiles"))
	if err != nil {
		return usageError("--metric-percentiles: %v", err)
	}
	metricsSel := strings.Split(c.String("percentile-metrics"), ",")
	for _, m := range metricsSel {
		if !slices.Contains([]string{"ttft", "tpot", "itl", "e2el"}, m) {
			return usageError("--percentile-metrics: unknown metric %q (ttft, tpot, itl, e2el)", m)
		}
	}
	base := strings.TrimRight(c.String("base-url"), "/")
	if base == "" {
		base = fmt.Sprintf("http://%s:%d", c.String("host"), c.Int("port"))
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: 90 * time.Second}}
	model := c.String("model")
	if model == "" {
		if model, err = firstModel(client, base); err != nil {
			return runError("--base-url: %v", err)
		}
	}
	tokDir := c.String("tokenizer")
	if tokDir == "" {
		tokDir = model
	}
	tok, err := tokenizer.Load(tokDir)
	if err != nil {
		return usageError("--tokenizer: the random dataset needs the model's tokenizer: %v", err)
	}
	rng := rand.New(rand.NewPCG(uint64(c.Int64("seed")), 0x6e7075))
	reqs := randomDataset(tok, rng, n, inLen, outLen, ratio)

	fmt.Printf("Starting initial single prompt test run...\n")
	test := sendBenchRequest(context.Background(), client, base, endpoint, model, reqs[0], c.Bool("ignore-eos"))
	if !test.success {
		return runError("initial test run failed: %s (check --base-url, --model and the server log)", test.err)
	}
	fmt.Printf("Initial test run completed. Starting main benchmark run...\n")
	rate, burst, maxConc := c.Float64("request-rate"), c.Float64("burstiness"), c.Int("max-concurrency")
	fmt.Printf("Traffic request rate: %s\n", rateString(rate))
	fmt.Printf("Burstiness factor: %v (%s)\n", burst, map[bool]string{true: "Poisson process", false: "Gamma distribution"}[burst == 1])
	fmt.Printf("Maximum request concurrency: %s\n", concString(maxConc))

	var bar *progressbar.ProgressBar
	if !c.Bool("disable-tqdm") && isatty.IsTerminal(os.Stderr.Fd()) {
		bar = progressbar.NewOptions(n, progressbar.OptionSetWriter(os.Stderr), progressbar.OptionShowCount(),
			progressbar.OptionSetElapsedTime(true), progressbar.OptionSetPredictTime(true), progressbar.OptionClearOnFinish())
	}
	outputs := make([]benchOutput, n)
	var sem chan struct{}
	if maxConc > 0 {
		sem = make(chan struct{}, maxConc)
	}
	var wg sync.WaitGroup
	var barMu sync.Mutex
	start := time.Now()
	for i := range reqs {
		if i > 0 && !math.IsInf(rate, 1) {
			time.Sleep(time.Duration(gammaInterval(rng, rate, burst) * float64(time.Second)))
		}
		if sem != nil {
			sem <- struct{}{}
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			outputs[i] = sendBenchRequest(context.Background(), client, base, endpoint, model, reqs[i], c.Bool("ignore-eos"))
			if sem != nil {
				<-sem
			}
			if bar != nil {
				barMu.Lock()
				bar.Add(1)
				barMu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	dur := time.Since(start).Seconds()
	if bar != nil {
		bar.Finish()
	}
	res := benchMetrics(outputs, dur, metricsSel, percentiles)
	printBenchResult(os.Stdout, res, maxConc, metricsSel, percentiles)

	path := c.String("result-file")
	if path == "" && c.Bool("save-result") {
		name := c.String("result-filename")
		if name == "" {
			cs := ""
			if maxConc > 0 {
				cs = fmt.Sprintf("-concurrency%d", maxConc)
			}
			name = fmt.Sprintf("vllm-%sqps%s-%s-%s.json", rateString(rate), cs, lastPathPart(model), time.Now().Format("20060102-150405"))
		}
		path = strings.TrimRight(c.String("result-dir"), "/") + "/" + name
	}
	if path != "" {
		res["date"] = time.Now().Format("20060102-150405")
		res["backend"] = "vllm"
		res["endpoint_type"] = "vllm"
		res["model_id"] = model
		res["tokenizer_id"] = tokDir
		res["num_prompts"] = n
		if math.IsInf(rate, 1) {
			res["request_rate"] = "inf"
		} else {
			res["request_rate"] = rate
		}
		res["burstiness"] = burst
		if maxConc > 0 {
			res["max_concurrency"] = maxConc
		} else {
			res["max_concurrency"] = nil
		}
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return runError("--result-file: %v", err)
		}
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			return runError("--result-file: %v", err)
		}
	}
	if res["failed"].(int) == n {
		return runError("bench serve: every request failed (first error: %s)", outputs[0].err)
	}
	return nil
}

// rateString prints a rate as Python does (inf for no limit).
func rateString(r float64) string {
	if math.IsInf(r, 1) {
		return "inf"
	}
	return fmt.Sprint(r)
}

func concString(c int) string {
	if c == 0 {
		return "None"
	}
	return fmt.Sprint(c)
}

func lastPathPart(s string) string {
	s = strings.TrimRight(s, "/")
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func parsePercentiles(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		var v float64
		if _, err := fmt.Sscan(strings.TrimSpace(f), &v); err != nil || v <= 0 || v >= 100 {
			return nil, fmt.Errorf("%q is not a percentile in (0, 100)", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// firstModel asks the server for its first model name.
func firstModel(client *http.Client, base string) (string, error) {
	resp, err := client.Get(base + "/v1/models")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || len(list.Data) == 0 {
		return "", fmt.Errorf("GET /v1/models: no model (status %s)", resp.Status)
	}
	return list.Data[0].ID, nil
}

// randomDataset builds vLLM's random dataset: prompts of random
// non-special token ids, decoded to text and adjusted until the text
// re-encodes to the target length.
func randomDataset(tok *tokenizer.Tokenizer, rng *rand.Rand, n, inLen, outLen int, ratio float64) []benchRequest {
	// Model-vocabulary tokens that decode to whole characters (byte
	// pieces of a longer UTF-8 sequence would re-encode differently).
	added := map[int]bool{}
	for _, t := range tok.AddedTokens() {
		added[t.ID] = true
	}
	var allowed []int
	for id := 0; id < tok.VocabSize(); id++ {
		if _, ok := tok.IDToken(id); !ok || added[id] || tok.IsSpecial(id) {
			continue
		}
		if s := tok.Decode([]int{id}, false); s != "" && !strings.ContainsRune(s, utf8.RuneError) {
			allowed = append(allowed, id)
		}
	}
	draw := func(center int) int {
		lo, hi := int(float64(center)*(1-ratio)), int(float64(center)*(1+ratio))
		lo = max(lo, 1)
		return lo + rng.IntN(hi-lo+1)
	}
	out := make([]benchRequest, n)
	for i := range out {
		target := draw(inLen)
		ids := make([]int, target)
		for j := range ids {
			ids[j] = allowed[rng.IntN(len(allowed))]
		}
		text := tok.Decode(ids, false)
		for try := 0; try < 10; try++ {
			enc := tok.Encode(text, false)
			if len(enc) == target {
				break
			}
			if len(enc) > target {
				enc = enc[:target]
			} else {
				for len(enc) < target {
					enc = append(enc, allowed[rng.IntN(len(allowed))])
				}
			}
			text = tok.Decode(enc, false)
		}
		out[i] = benchRequest{prompt: text, promptLen: len(tok.Encode(text, false)), outputLen: draw(outLen)}
	}
	return out
}

// gammaInterval draws the gap before the next request: exponential for
// burstiness 1, else gamma(shape=burstiness, scale=1/(rate·burstiness)).
func gammaInterval(rng *rand.Rand, rate, burstiness float64) float64 {
	theta := 1 / (rate * burstiness)
	return gammaSample(rng, burstiness) * theta
}

// gammaSample draws from Gamma(k, 1) (Marsaglia–Tsang).
func gammaSample(rng *rand.Rand, k float64) float64 {
	if k < 1 {
		return gammaSample(rng, k+1) * math.Pow(rng.Float64(), 1/k)
	}
	d := k - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := rng.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := rng.Float64()
		if math.Log(u) < 0.5*x*x+d-d*v+d*math.Log(v) {
			return d * v
		}
	}
}

// sendBenchRequest sends one streaming request and times its chunks as
// vLLM's async_request_openai_completions does: TTFT at the first chunk
// with choices, ITL between later ones, output tokens from the final
// usage chunk.
func sendBenchRequest(ctx context.Context, client *http.Client, base, endpoint, model string, r benchRequest, ignoreEOS bool) benchOutput {
	out := benchOutput{promptLen: r.promptLen}
	payload := map[string]any{
		"model": model, "temperature": 0.0, "repetition_penalty": 1.0, "max_tokens": r.outputLen,
		"stream": true, "stream_options": map[string]any{"include_usage": true},
	}
	chat := endpoint == "/v1/chat/completions"
	if chat {
		payload["messages"] = []map[string]string{{"role": "user", "content": r.prompt}}
		delete(payload, "max_tokens")
		payload["max_completion_tokens"] = r.outputLen
	} else {
		payload["prompt"] = r.prompt
	}
	if ignoreEOS {
		payload["ignore_eos"] = true
	}
	body, _ := json.Marshal(payload)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+endpoint, bytes.NewReader(body))
	if err != nil {
		out.err = err.Error()
		return out
	}
	req.Header.Set("Content-Type", "application/json")
	if k := os.Getenv("OPENAI_API_KEY"); k != "" {
		req.Header.Set("Authorization", "Bearer "+k)
	}
	st := time.Now()
	out.start = st
	resp, err := client.Do(req)
	if err != nil {
		out.err = err.Error()
		out.end = time.Now()
		return out
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		out.err = fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
		out.end = time.Now()
		return out
	}
	last := st
	var text strings.Builder
	first := false
	done := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "data:") {
			continue
		}
		data := strings.TrimSpace(strings.TrimPrefix(line, "data:"))
		if data == "[DONE]" {
			done = true
			break
		}
		var chunk struct {
			Choices []struct {
				Text  string `json:"text"`
				Delta struct {
					Content   string `json:"content"`
					Reasoning string `json:"reasoning"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			out.err = "bad chunk: " + err.Error()
			break
		}
		if chunk.Error != nil {
			out.err = chunk.Error.Message
			break
		}
		now := time.Now()
		if len(chunk.Choices) > 0 {
			ch := chunk.Choices[0]
			piece := ch.Text
			if chat {
				piece = ch.Delta.Content + ch.Delta.Reasoning
				if piece == "" && !first {
					continue // the role chunk is not a token
				}
			}
			if !first {
				out.ttft = now.Sub(st).Seconds()
				first = true
			} else {
				out.itl = append(out.itl, now.Sub(last).Seconds())
			}
			out.tokenTimes = append(out.tokenTimes, now)
			last = now
			text.WriteString(piece)
		} else if chunk.Usage != nil {
			out.outputTokens = chunk.Usage.CompletionTokens
		}
	}
	out.end = time.Now()
	if err := sc.Err(); err != nil && out.err == "" {
		out.err = err.Error()
	}
	out.generatedText = text.String()
	out.latency = last.Sub(st).Seconds()
	switch {
	case out.err != "":
	case !first:
		out.err = "Never received a valid chunk to calculate TTFT."
	case !done:
		out.err = "the stream ended without data: [DONE]"
	default:
		out.success = true
	}
	return out
}

// benchMetrics computes vLLM's calculate_metrics and result fields.
func benchMetrics(outputs []benchOutput, dur float64, sel []string, percentiles []float64) map[string]any {
	var ttfts, tpots, itls, e2els []float64
	completed, failed, totalIn, totalOut := 0, 0, 0, 0
	inputLens, outputLens := []int{}, []int{}
	ttftList, itlList, texts, errs := []float64{}, [][]float64{}, []string{}, []string{}
	var tokenTimes []time.Time
	var spans [][2]time.Time
	for _, o := range outputs {
		inputLens = append(inputLens, o.promptLen)
		ttftList = append(ttftList, o.ttft)
		itlList = append(itlList, append([]float64{}, o.itl...))
		texts = append(texts, o.generatedText)
		errs = append(errs, o.err)
		if !o.success {
			failed++
			outputLens = append(outputLens, 0)
			continue
		}
		outLen := o.outputTokens
		if outLen == 0 {
			outLen = 1 + len(o.itl)
		}
		outputLens = append(outputLens, outLen)
		totalIn += o.promptLen
		totalOut += outLen
		if outLen > 1 {
			tpots = append(tpots, (o.latency-o.ttft)/float64(outLen-1))
		}
		itls = append(itls, o.itl...)
		ttfts = append(ttfts, o.ttft)
		e2els = append(e2els, o.latency)
		completed++
		tokenTimes = append(tokenTimes, o.tokenTimes...)
		spans = append(spans, [2]time.Time{o.start, o.end})
	}
	res := map[string]any{
		"duration": dur, "completed": completed, "failed": failed,
		"total_input_tokens": totalIn, "total_output_tokens": totalOut,
		"request_throughput": float64(completed) / dur, "request_goodput": nil,
		"output_throughput":      float64(totalOut) / dur,
		"total_token_throughput": float64(totalIn+totalOut) / dur,
		"input_lens":             inputLens, "output_lens": outputLens, "ttfts": ttftList, "itls": itlList,
		"generated_texts": texts, "errors": errs,
		"max_output_tokens_per_s": peakPerSecond(tokenTimes), "max_concurrent_requests": peakConcurrency(spans),
	}
	series := map[string][]float64{"ttft": ttfts, "tpot": tpots, "itl": itls, "e2el": e2els}
	for _, m := range sel {
		v := series[m]
		res["mean_"+m+"_ms"] = mean(v) * 1000
		res["median_"+m+"_ms"] = percentile(v, 50) * 1000
		res["std_"+m+"_ms"] = stddev(v) * 1000
		for _, p := range percentiles {
			res["p"+pWord(p)+"_"+m+"_ms"] = percentile(v, p) * 1000
		}
	}
	return res
}

func pWord(p float64) string {
	if p == math.Trunc(p) {
		return fmt.Sprint(int(p))
	}
	return fmt.Sprint(p)
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

func stddev(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	m := mean(v)
	s := 0.0
	for _, x := range v {
		s += (x - m) * (x - m)
	}
	return math.Sqrt(s / float64(len(v)))
}

// percentile is numpy's default (linear interpolation) percentile.
func percentile(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	pos := p / 100 * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(s)-1)
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}

// peakPerSecond is the most tokens that arrived within one second.
func peakPerSecond(times []time.Time) float64 {
	if len(times) == 0 {
		return 0
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	best, j := 0, 0
	for i := range times {
		for times[i].Sub(times[j]) >= time.Second {
			j++
		}
		best = max(best, i-j+1)
	}
	return float64(best)
}

// peakConcurrency is the most requests in flight at once.
func peakConcurrency(spans [][2]time.Time) int {
	type ev struct {
		t time.Time
		d int
	}
	var evs []ev
	for _, s := range spans {
		evs = append(evs, ev{s[0], 1}, ev{s[1], -1})
	}
	slices.SortFunc(evs, func(a, b ev) int {
		if c := a.t.Compare(b.t); c != 0 {
			return c
		}
		return a.d - b.d
	})
	cur, best := 0, 0
	for _, e := range evs {
		cur += e.d
		best = max(best, cur)
	}
	return best
}

// printBenchResult prints vLLM's result table.
func printBenchResult(w io.Writer, res map[string]any, maxConc int, sel []string, percentiles []float64) {
	line := func(label string, v any) {
		switch x := v.(type) {
		case float64:
			fmt.Fprintf(w, "%-40s %-10.2f\n", label, x)
		default:
			fmt.Fprintf(w, "%-40s %-10v\n", label, x)
		}
	}
	center := func(s string, c byte) {
		pad := 50 - len(s)
		left := pad / 2
		fmt.Fprintf(w, "%s%s%s\n", strings.Repeat(string(c), max(left, 0)), s, strings.Repeat(string(c), max(pad-left, 0)))
	}
	center(" Serving Benchmark Result ", '=')
	line("Successful requests:", res["completed"])
	line("Failed requests:", res["failed"])
	if maxConc > 0 {
		line("Maximum request concurrency:", maxConc)
	}
	line("Benchmark duration (s):", res["duration"])
	line("Total input tokens:", res["total_input_tokens"])
	line("Total generated tokens:", res["total_output_tokens"])
	line("Request throughput (req/s):", res["request_throughput"])
	line("Output token throughput (tok/s):", res["output_throughput"])
	line("Peak output token throughput (tok/s):", res["max_output_tokens_per_s"])
	line("Peak concurrent requests:", res["max_concurrent_requests"])
	line("Total Token throughput (tok/s):", res["total_token_throughput"])
	titles := map[string][2]string{
		"ttft": {"Time to First Token", "TTFT"},
		"tpot": {"Time per Output Token (excl. 1st token)", "TPOT"},
		"itl":  {"Inter-token Latency", "ITL"},
		"e2el": {"End-to-end Latency", "E2EL"},
	}
	for _, m := range sel {
		t := titles[m]
		center(t[0], '-')
		line(fmt.Sprintf("Mean %s (ms):", t[1]), res["mean_"+m+"_ms"])
		line(fmt.Sprintf("Median %s (ms):", t[1]), res["median_"+m+"_ms"])
		for _, p := range percentiles {
			line(fmt.Sprintf("P%s %s (ms):", pWord(p), t[1]), res["p"+pWord(p)+"_"+m+"_ms"])
		}
	}
	fmt.Fprintln(w, strings.Repeat("=", 50))
}
