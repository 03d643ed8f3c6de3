package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// hostileSettings are the seconds and idle connections of the hostile-
// client test (make soak raises them with NPUSERVE_HOSTILE_SECONDS and
// NPUSERVE_HOSTILE_IDLE).
func hostileSettings() (dur time.Duration, idle int) {
	secs, idle := 4.0, 300
	if v, err := strconv.ParseFloat(os.Getenv("NPUSERVE_HOSTILE_SECONDS"), 64); err == nil && v > 0 {
		secs = v
	}
	if v, err := strconv.Atoi(os.Getenv("NPUSERVE_HOSTILE_IDLE")); err == nil && v > 0 {
		idle = v
	}
	return time.Duration(secs * float64(time.Second)), idle
}

// Bounds of TestServeHostile.
const (
	// hostileHealthLimit is the most a /health check may take (the
	// issue's assertion; generous against a loaded 2-core machine, as the
	// checks run every 200 ms while everything else goes on).
	hostileHealthLimit = time.Second
	// hostileRSSGrowth bounds the server's resident memory after the abuse
	// over its resident memory before it, once the engine is idle.
	hostileRSSGrowth = 64 << 20
	// hostileRSSPeak bounds its resident memory during the abuse, over the
	// same baseline.
	hostileRSSPeak = 768 << 20
)

// TestServeHostile runs the clients of issue 12 against the real server
// (127.0.0.1 only), all at once, for a few seconds (make soak: a minute,
// thousands of idle connections): idle keep-alive connections beyond
// --limit-concurrency, bodies and headers sent a byte at a time, prompts
// too long to tokenize, bodies over --max-request-body-bytes, streams cut
// by their clients. Meanwhile a well-behaved client must get the same
// greedy completion every time and well-formed streams, and /health must
// answer within hostileHealthLimit. Afterwards nothing runs, the cache is
// empty and the resident memory is back within hostileRSSGrowth of where
// it started.
func TestServeHostile(t *testing.T) {
	dur, idleN := hostileSettings()
	limit := max(64, idleN*4/5) // the idle connections overflow the cap
	s := startServe(t, "--api-key", "K", "--reasoning-parser", "glm45", "--tool-call-parser", "glm47", "--enable-auto-tool-choice",
		"--max-model-len", "512", "--max-num-seqs", "32", "--limit-concurrency", strconv.Itoa(limit), "--timeout-read", "2",
		"--max-request-body-bytes", "4M")
	defer s.stop()
	addr := strings.TrimPrefix(s.url, "http://")
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	const greedy = `{"prompt":"The quick brown fox","max_tokens":12,"temperature":0,"ignore_eos":true}`
	post := func(c *http.Client, path, key, body string) (int, []byte, error) {
		req, _ := http.NewRequest(http.MethodPost, s.url+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, b, err
	}
	code, ref, err := post(fresh, "/v1/completions", "K", greedy)
	if err != nil || code != 200 {
		t.Fatalf("reference completion: %d %v %s", code, err, ref)
	}
	var refOut struct {
		Choices []struct {
			Text json.RawMessage `json:"text"`
		} `json:"choices"`
	}
	if json.Unmarshal(ref, &refOut) != nil || len(refOut.Choices) != 1 {
		t.Fatalf("reference completion %s", ref)
	}
	refText := string(refOut.Choices[0].Text)
	waitIdle(t, s)
	rss0 := rssOf(t, s)

	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(failures) < 20 {
			failures = append(failures, fmt.Sprintf(format, args...))
		}
	}
	var good, healthChecks, evicted, idleOpened, slowCut, oversized, cut atomic.Int64
	var healthMax atomic.Int64
	var rssPeak atomic.Int64
	loop := func(maxIter int, body func(i int)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < maxIter && ctx.Err() == nil; i++ {
				body(i)
			}
		}()
	}
	var conns sync.WaitGroup
	var held []net.Conn
	var heldMu sync.Mutex

	// Idle keep-alive connections, each after one unauthenticated GET
	// /health; closed ones (evicted at the cap, or idle past
	// --timeout-keep-alive) are replaced.
	var open atomic.Int64
	for k := 0; k < 4; k++ {
		loop(1<<20, func(int) {
			if open.Load() >= int64(idleN) {
				time.Sleep(20 * time.Millisecond)
				return
			}
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				time.Sleep(10 * time.Millisecond)
				return
			}
			br := bufio.NewReader(c)
			c.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				c.Close()
				return
			}
			resp.Body.Close()
			c.SetDeadline(time.Time{})
			idleOpened.Add(1)
			open.Add(1)
			heldMu.Lock()
			held = append(held, c)
			heldMu.Unlock()
			conns.Add(1)
			go func() { // notices the server closing it
				defer conns.Done()
				defer open.Add(-1)
				io.Copy(io.Discard, br)
				c.Close() // the server closed it: release the descriptor now, not at the end
				evicted.Add(1)
			}()
		})
	}
	// Bodies and headers sent a byte at a time: the server cuts them
	// after --timeout-read.
	for k := 0; k < 6; k++ {
		k := k
		loop(1000, func(int) {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				return
			}
			defer c.Close()
			head := "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer K\r\nContent-Length: 1000\r\n\r\n{\"prompt\":\""
			if k%2 == 1 {
				head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: "
			}
			io.WriteString(c, head)
			t0 := time.Now()
			for ctx.Err() == nil && time.Since(t0) < 10*time.Second {
				c.SetWriteDeadline(time.Now().Add(time.Second))
				if _, err := io.WriteString(c, "a"); err != nil {
					break
				}
				c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
				var b [512]byte
				if _, err := c.Read(b[:]); err != nil && !isTimeout(err) {
					break // cut
				}
			}
			if ctx.Err() == nil {
				if time.Since(t0) >= 10*time.Second {
					fail("a slow client was not cut within 10 s (--timeout-read 2)")
				}
				slowCut.Add(1)
			}
		})
	}
	// Oversized prompts and bodies.
	huge := strings.Repeat("lorem ipsum ", 200000) // 2.4 MB: beyond --max-prompt-chars, within the body limit
	tooBig := strings.Repeat("x", 5<<20)           // beyond --max-request-body-bytes 4M
	ids := make([]string, 20000)
	for i := range ids {
		ids[i] = "7"
	}
	loop(400, func(i int) {
		var code int
		var b []byte
		var err error
		want := 400
		switch i % 4 {
		case 0:
			code, b, err = post(fresh, "/v1/completions", "K", `{"prompt":"`+huge+`"}`)
		case 1:
			code, b, err = post(fresh, "/tokenize", "", `{"prompt":"`+huge+`"}`)
		case 2:
			code, b, err = post(fresh, "/v1/chat/completions", "K", `{"messages":[{"role":"user","content":"`+huge+`"}]}`)
		case 3:
			want = 413
			code, b, err = post(fresh, "/v1/completions", "K", `{"prompt":"`+tooBig+`"}`)
			if err != nil && code == 0 {
				oversized.Add(1) // the server may close before the client finished sending
				return
			}
		}
		if err != nil || code != want || !strings.Contains(string(b), `"code":`+strconv.Itoa(want)) {
			if ctx.Err() == nil {
				fail("oversized %d: %d %v %.200s", i%4, code, err, b)
			}
			return
		}
		if i%4 < 3 && !strings.Contains(string(b), "--max-prompt-chars") {
			fail("oversized %d: %.300s", i%4, b)
		}
		oversized.Add(1)
		if i%8 == 7 { // a token-id prompt beyond max_model_len
			code, b, err = post(fresh, "/v1/completions", "K", `{"prompt":[`+strings.Join(ids, ",")+`]}`)
			if err != nil || code != 400 || !strings.Contains(string(b), "maximum context length is 512 tokens") {
				fail("long token-id prompt: %d %v %.200s", code, err, b)
			}
		}
	})
	// Streams cut by their clients after a few events.
	for k := 0; k < 3; k++ {
		loop(1000, func(i int) {
			path, body := "/v1/completions", `{"prompt":"cut me","max_tokens":300,"ignore_eos":true,"stream":true}`
			if i%2 == 1 {
				path, body = "/v1/chat/completions", `{"messages":[{"role":"user","content":"cut me"}],"max_tokens":300,"ignore_eos":true,"stream":true}`
			}
			req, _ := http.NewRequest(http.MethodPost, s.url+path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer K")
			resp, err := fresh.Do(req)
			if err != nil {
				if ctx.Err() == nil {
					fail("disconnect: %v", err)
				}
				return
			}
			br := bufio.NewReader(resp.Body)
			for n := 0; n < 3; {
				line, err := br.ReadString('\n')
				if err != nil {
					break
				}
				if strings.HasPrefix(line, "data: ") {
					n++
				}
			}
			resp.Body.Close()
			cut.Add(1)
		})
	}
	// The well-behaved client.
	loop(100000, func(i int) {
		if i%2 == 0 {
			code, b, err := post(fresh, "/v1/completions", "K", greedy)
			if err != nil || code != 200 {
				fail("well-behaved completion: %d %v %s", code, err, b)
				return
			}
			var out struct {
				Choices []struct {
					Text json.RawMessage `json:"text"`
				} `json:"choices"`
			}
			if json.Unmarshal(b, &out) != nil || len(out.Choices) != 1 || string(out.Choices[0].Text) != refText {
				fail("well-behaved completion changed: %s, want text %s", b, refText)
				return
			}
		} else {
			req, _ := http.NewRequest(http.MethodPost, s.url+"/v1/chat/completions",
				strings.NewReader(`{"messages":[{"role":"user","content":"Hello"}],"max_tokens":16,"stream":true}`))
			req.Header.Set("Authorization", "Bearer K")
			req.Header.Set("Content-Type", "application/json")
			if err := streamOK(fresh, req); err != nil {
				fail("well-behaved stream: %v", err)
				return
			}
		}
		good.Add(1)
	})
	// /health, on a fresh connection every 200 ms.
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: hostileHealthLimit}
	loop(100000, func(int) {
		t0 := time.Now()
		resp, err := hc.Get(s.url + "/health")
		d := time.Since(t0)
		if err != nil || resp.StatusCode != 200 {
			fail("/health: %v %v after %s", err, resp, d)
		} else {
			resp.Body.Close()
		}
		healthChecks.Add(1)
		for {
			m := healthMax.Load()
			if int64(d) <= m || healthMax.CompareAndSwap(m, int64(d)) {
				break
			}
		}
		if r := rssOf(t, s); r > rssPeak.Load() {
			rssPeak.Store(r)
		}
		time.Sleep(200 * time.Millisecond)
	})
	wg.Wait()
	heldMu.Lock()
	for _, c := range held {
		c.Close()
	}
	heldMu.Unlock()
	conns.Wait()

	t.Logf("%s: %d well-behaved requests, %d health checks (slowest %s), %d idle connections opened (%d closed by the server or the test), %d slow clients cut, %d oversized requests refused, %d streams cut by their clients; RSS %d MiB before, peak %d MiB",
		dur, good.Load(), healthChecks.Load(), time.Duration(healthMax.Load()), idleOpened.Load(), evicted.Load(), slowCut.Load(), oversized.Load(), cut.Load(), rss0>>20, rssPeak.Load()>>20)
	if len(failures) > 0 {
		t.Fatalf("%d failures; the first: %s", len(failures), strings.Join(failures, "\n"))
	}
	if good.Load() < 4 || healthChecks.Load() < 3 || idleOpened.Load() <= int64(limit) || slowCut.Load() == 0 || oversized.Load() < 4 || cut.Load() == 0 {
		t.Fatalf("the abuse or the service did not happen as planned")
	}
	if peak := rssPeak.Load(); peak-rss0 > hostileRSSPeak {
		t.Errorf("RSS peaked at %d MiB, more than %d MiB over the %d MiB before", peak>>20, hostileRSSPeak>>20, rss0>>20)
	}
	waitIdle(t, s)
	deadline := time.Now().Add(15 * time.Second)
	for {
		r := rssOf(t, s)
		if r-rss0 <= hostileRSSGrowth {
			t.Logf("RSS after: %d MiB", r>>20)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("RSS %d MiB after the abuse, more than %d MiB over the %d MiB before", r>>20, hostileRSSGrowth>>20, rss0>>20)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if resp, err := http.Get(s.url + "/health"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("unhealthy after the abuse: %v", err)
	}
	if strings.Contains(s.log.String(), "panic") {
		t.Errorf("the server log mentions a panic:\n%s", tail(s.log.String(), 2000))
	}
}

// streamOK runs a stream to its end and checks it ends with [DONE].
func streamOK(c *http.Client, req *http.Request) error {
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	last := ""
	for sc.Scan() {
		if l := sc.Text(); l != "" {
			if !strings.HasPrefix(l, "data: ") || strings.HasPrefix(l, `data: {"error"`) {
				return fmt.Errorf("bad event %q", l)
			}
			last = l
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if last != "data: [DONE]" {
		return errors.New("stream ended without [DONE]")
	}
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// rssOf is the server process's resident memory in bytes.
func rssOf(t *testing.T, s *served) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}
