package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/npuserve/npuserve/engine/core"
)

// serveLimited runs s.Serve (the production path: connection tracking and
// timeouts) on a loopback listener, wrapped by wrap when given.
func serveLimited(t *testing.T, eng Engine, opt Options, wrap func(net.Listener) net.Listener) (string, *Server) {
	t.Helper()
	tok, tm := loadTiny(t)
	if opt.ServedModelNames == nil {
		opt.ServedModelNames = []string{"tiny"}
	}
	opt.Templates, opt.Log, opt.DisableLogStats = tm, quietLog(), true
	s, err := New(eng, tok, opt)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if wrap != nil {
		ln = wrap(ln)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln, time.Second) }()
	t.Cleanup(func() {
		cancel()
		s.ForceClose()
		<-done
	})
	return addr, s
}

// rawRequest writes req on a new connection and returns the connection
// and a reader of its answers.
func rawRequest(t *testing.T, addr, req string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if req != "" {
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
	}
	return c, bufio.NewReader(c)
}

// readResponse reads one response (10 s at most).
func readResponse(t *testing.T, c net.Conn, br *bufio.Reader) (*http.Response, []byte) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no response: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, b
}

// closedWithin reports whether the server closes c within d (reads see
// EOF or a reset), draining anything it sends first.
func closedWithin(c net.Conn, br *bufio.Reader, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, br)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return true
}

const healthReq = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"

// TestIdleAndSlowConnections: an idle keep-alive connection is closed
// after KeepAlive; a client that stalls in its headers or its body is cut
// after ReadTimeout (the body with a 408 in the envelope). Before issue 12
// only a 30 s header timeout existed.
func TestIdleAndSlowConnections(t *testing.T) {
	eng := newFakeEngine(textScript(t, "ok", true))
	addr, _ := serveLimited(t, eng, Options{Limits: Limits{KeepAlive: 200 * time.Millisecond, ReadTimeout: 400 * time.Millisecond}}, nil)

	c, br := rawRequest(t, addr, healthReq)
	if resp, _ := readResponse(t, c, br); resp.StatusCode != 200 {
		t.Fatalf("health %d", resp.StatusCode)
	}
	t0 := time.Now()
	if !closedWithin(c, br, 3*time.Second) {
		t.Fatal("idle keep-alive connection still open after 3 s (keep-alive 200 ms)")
	}
	if d := time.Since(t0); d < 150*time.Millisecond {
		t.Errorf("idle connection closed after %s, before the keep-alive timeout", d)
	}

	c, br = rawRequest(t, addr, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: appl")
	if !closedWithin(c, br, 3*time.Second) {
		t.Fatal("connection stalled in its headers still open after 3 s (read timeout 400 ms)")
	}

	c, br = rawRequest(t, addr, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"prompt\":")
	resp, b := readResponse(t, c, br)
	checkEnvelope(t, resp.StatusCode, b, errCase{status: 408, typ: "Request Timeout", inMsg: "--timeout-read"})
	if !closedWithin(c, br, 3*time.Second) {
		t.Error("connection of a timed-out body not closed")
	}
	// A body that arrives in pieces within the timeout is fine.
	body := `{"prompt":"hello","max_tokens":2}`
	c, br = rawRequest(t, addr, fmt.Sprintf("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body)))
	for i := 0; i < len(body); i += 8 {
		time.Sleep(20 * time.Millisecond)
		io.WriteString(c, body[i:min(i+8, len(body))])
	}
	if resp, b := readResponse(t, c, br); resp.StatusCode != 200 {
		t.Errorf("slow but timely body: %d %s", resp.StatusCode, b)
	}
	if eng.liveCount() != 0 {
		t.Errorf("%d requests left in the engine", eng.liveCount())
	}
}

// TestConnectionCap: at MaxConnections a new connection closes the oldest
// idle one; when every connection is busy, it is answered at once: 503 in
// the envelope, or its health check. Once the busy ones are cut, service
// resumes.
func TestConnectionCap(t *testing.T) {
	eng := newFakeEngine(textScript(t, "ok", true))
	const max = 8
	addr, s := serveLimited(t, eng, Options{Limits: Limits{MaxConnections: max, ReadTimeout: 1500 * time.Millisecond, KeepAlive: time.Minute}}, nil)

	var idle []net.Conn
	for i := 0; i < max; i++ {
		c, br := rawRequest(t, addr, healthReq)
		if resp, _ := readResponse(t, c, br); resp.StatusCode != 200 {
			t.Fatalf("health %d", resp.StatusCode)
		}
		idle = append(idle, c)
		// The server marks a connection idle after the client has its
		// answer: wait for it, so that the idle times follow the order
		// of idle (on a loaded machine the callbacks may lag).
		n := i + 1
		waitFor(t, func() bool { return s.idleCount() == n })
	}
	waitFor(t, func() bool { return s.conns.open() == max })
	// A new client gets through: the oldest idle connection makes room.
	if code, _, b := post(t, "http://"+addr+"/v1/completions", `{"prompt":"hi","max_tokens":2}`); code != 200 {
		t.Fatalf("new connection at the cap: %d %s", code, b)
	}
	if !closedWithin(idle[0], bufio.NewReader(idle[0]), 2*time.Second) {
		t.Error("the oldest idle connection was not closed")
	}

	// Every connection busy: stalled bodies.
	for i := 0; i < max; i++ {
		rawRequest(t, addr, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
	}
	waitFor(t, func() bool { return s.conns.open() == max && s.idleCount() == 0 })
	t0 := time.Now()
	c, br := rawRequest(t, addr, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
	resp, b := readResponse(t, c, br)
	checkEnvelope(t, resp.StatusCode, b, errCase{status: 503, typ: "Service Unavailable", inMsg: "--limit-concurrency"})
	if resp.Header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	for _, path := range []string{"/health", "/ping"} {
		c, br = rawRequest(t, addr, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp, b := readResponse(t, c, br); resp.StatusCode != 200 || len(b) != 0 {
			t.Errorf("%s at the cap: %d %q", path, resp.StatusCode, b)
		}
	}
	if d := time.Since(t0); d > time.Second {
		t.Errorf("refusals took %s", d)
	}
	// After the stalled bodies time out, requests are served again.
	time.Sleep(1600 * time.Millisecond)
	waitFor(t, func() bool { return s.conns.open() < max })
	if code, _, b := post(t, "http://"+addr+"/v1/completions", `{"prompt":"hi","max_tokens":2}`); code != 200 {
		t.Fatalf("after the stalled bodies: %d %s", code, b)
	}
}

// idleCount is the number of idle tracked connections.
func (s *Server) idleCount() int {
	s.conns.mu.Lock()
	defer s.conns.mu.Unlock()
	n := 0
	for _, e := range s.conns.conns {
		if e.idle {
			n++
		}
	}
	return n
}

// smallBuffers makes accepted connections' kernel send buffers small, so
// that a client that does not read blocks the server's writes quickly.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(4096)
	}
	return c, err
}

// TestWriteTimeout: a stream whose client stops reading is cut after
// WriteTimeout and its request aborted in the engine (before issue 12 it
// held the handler as long as the client held the connection).
func TestWriteTimeout(t *testing.T) {
	tok, _ := loadTiny(t)
	var ids []int32
	for _, id := range tok.Encode(strings.Repeat("stream filler words ", 3000), false) {
		ids = append(ids, int32(id))
	}
	eng := newFakeEngine(func(*core.Request) []int32 { return ids })
	eng.delay = time.Millisecond // still generating when the writes stall
	eng.maxLen = len(ids) + 64
	addr, _ := serveLimited(t, eng, Options{Limits: Limits{WriteTimeout: 300 * time.Millisecond}},
		func(ln net.Listener) net.Listener { return smallBuffers{ln} })
	d := net.Dialer{Control: nil}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetReadBuffer(4096)
	body := fmt.Sprintf(`{"prompt":"go","max_tokens":%d,"stream":true,"logprobs":5}`, len(ids))
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	// Read nothing: the engine request must be aborted.
	waitFor(t, func() bool { return len(eng.requests()) == 1 })
	deadline := time.Now().Add(10 * time.Second)
	for {
		eng.mu.Lock()
		aborted := len(eng.aborted)
		eng.mu.Unlock()
		if aborted == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream of a client that does not read was not cut (live %d)", eng.liveCount())
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitFor(t, func() bool { return eng.liveCount() == 0 })
	if !closedWithin(c, bufio.NewReader(c), 5*time.Second) {
		t.Error("the connection of the cut stream is still open")
	}
}

// TestQueueLimit: with MaxQueuedRequests, sequences beyond the budget are
// answered 503 at once (never queued without bound, never hung), and the
// budget comes back when requests end, whichever way they end.
func TestQueueLimit(t *testing.T) {
	eng := newFakeEngine(textScript(t, strings.Repeat("slow words ", 200), false))
	eng.delay = 5 * time.Millisecond
	limit := 2
	ts, s := startServer(t, eng, Options{Limits: Limits{MaxQueuedRequests: &limit}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for i := 0; i < limit; i++ {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/completions",
			strings.NewReader(`{"prompt":"q","max_tokens":400,"stream":true}`))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, err := http.DefaultClient.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	waitFor(t, func() bool { return eng.liveCount() == limit })
	for _, body := range []string{`{"prompt":"q","max_tokens":4}`, `{"prompt":"q","max_tokens":4,"stream":true}`} {
		t0 := time.Now()
		code, _, out := post(t, ts.URL+"/v1/completions", body)
		checkEnvelope(t, code, out, errCase{status: 503, typ: "Service Unavailable", inMsg: "--max-num-queued-reqs"})
		if d := time.Since(t0); d > time.Second {
			t.Errorf("503 took %s", d)
		}
	}
	code, _, out := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"q"}],"max_tokens":4}`)
	checkEnvelope(t, code, out, errCase{status: 503, typ: "Service Unavailable", inMsg: "2 sequences are in flight and the limit is 2"})
	cancel() // the streaming clients go away
	wg.Wait()
	waitFor(t, func() bool { return eng.liveCount() == 0 && s.queued.Load() == 0 })
	if code, _, out := post(t, ts.URL+"/v1/completions", `{"prompt":"q","max_tokens":4,"n":2,"temperature":1}`); code != 200 {
		t.Fatalf("after the budget came back: %d %s", code, out)
	}
	code, _, out = post(t, ts.URL+"/v1/completions", `{"prompt":"q","max_tokens":4,"n":3,"temperature":1}`)
	checkEnvelope(t, code, out, errCase{status: 503, typ: "Service Unavailable", inMsg: "--max-num-queued-reqs"})
	if s.queued.Load() != 0 {
		t.Errorf("%d sequences still counted", s.queued.Load())
	}
}

// TestPromptCharsLimit: a text prompt longer than what max_model_len
// tokens can hold is refused before it is tokenized, on completions, chat
// and /tokenize (before issue 12 a 50 MB prompt was tokenized in full); an
// explicit MaxPromptChars replaces the automatic limit.
func TestPromptCharsLimit(t *testing.T) {
	tok, _ := loadTiny(t)
	eng := newFakeEngine(textScript(t, "ok", true))
	eng.maxLen = 64
	ts, s := startServer(t, eng, Options{})
	auto := 64 * tok.MaxBytesPerToken()
	if s.promptLimit.chars != auto || auto <= 0 {
		t.Fatalf("automatic limit %d, want 64 × %d", s.promptLimit.chars, tok.MaxBytesPerToken())
	}
	long := strings.Repeat("é", auto+1) // characters, not bytes, count
	fits := strings.Repeat("é", auto/2)
	cases := []struct{ path, body string }{
		{"/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":1}`, long)},
		{"/v1/completions", fmt.Sprintf(`{"prompt":["a",%q],"max_tokens":1}`, long)},
		{"/v1/chat/completions", fmt.Sprintf(`{"messages":[{"role":"user","content":%q}],"max_tokens":1}`, long)},
		{"/tokenize", fmt.Sprintf(`{"prompt":%q}`, long)},
		{"/tokenize", fmt.Sprintf(`{"messages":[{"role":"user","content":%q}]}`, long)},
	}
	for _, c := range cases {
		code, _, out := post(t, ts.URL+c.path, c.body)
		want := fmt.Sprintf("This model's maximum context length is 64 tokens. However, your prompt has %d characters, more than the %d this server tokenizes (--max-prompt-chars).", auto+1, auto)
		if strings.Contains(c.body, "messages") { // the rendered chat is longer
			want = fmt.Sprintf("characters, more than the %d this server tokenizes (--max-prompt-chars).", auto)
		}
		checkEnvelope(t, code, out, errCase{status: 400, typ: "BadRequestError", param: "input_tokens", inMsg: want})
	}
	// Within the limit the prompt is tokenized and the usual token check
	// applies.
	code, _, out := post(t, ts.URL+"/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":1}`, fits))
	checkEnvelope(t, code, out, errCase{status: 400, typ: "BadRequestError", param: "input_tokens", inMsg: "input tokens. Please reduce the length"})
	if code, _, out := post(t, ts.URL+"/tokenize", fmt.Sprintf(`{"prompt":%q}`, fits)); code != 200 {
		t.Errorf("/tokenize within the limit: %d %.200s", code, out)
	}
	ts2, _ := startServer(t, eng, Options{Limits: Limits{MaxPromptChars: 10}})
	code, _, out = post(t, ts2.URL+"/v1/completions", `{"prompt":"hello world","max_tokens":1}`)
	checkEnvelope(t, code, out, errCase{status: 400, typ: "BadRequestError", param: "input_tokens", inMsg: "11 characters, more than the 10"})
	if code, _, out := post(t, ts2.URL+"/v1/completions", `{"prompt":"hello","max_tokens":1}`); code != 200 {
		t.Errorf("short prompt: %d %s", code, out)
	}
	if len(eng.requests()) != 1 {
		t.Errorf("%d requests reached the engine, want 1", len(eng.requests()))
	}
}

// TestBodyAndHeaderLimits: bodies over MaxBodyBytes, with or without a
// Content-Length, get 413 and the connection closed; too many header
// fields get 431; every answer is the envelope.
func TestBodyAndHeaderLimits(t *testing.T) {
	eng := newFakeEngine(textScript(t, "ok", true))
	addr, _ := serveLimited(t, eng, Options{MaxBodyBytes: 4096, Limits: Limits{MaxHeaderCount: 20}}, nil)
	big := `{"prompt":"` + strings.Repeat("x", 5000) + `"}`
	c, br := rawRequest(t, addr, fmt.Sprintf("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", len(big)))
	resp, b := readResponse(t, c, br)
	checkEnvelope(t, resp.StatusCode, b, errCase{status: 413, typ: "Request Entity Too Large", inMsg: "the limit is 4096 bytes"})
	c, br = rawRequest(t, addr, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
	fmt.Fprintf(c, "%x\r\n%s\r\n", len(big), big)
	resp, b = readResponse(t, c, br)
	checkEnvelope(t, resp.StatusCode, b, errCase{status: 413, typ: "Request Entity Too Large", inMsg: "the limit is 4096 bytes"})
	if !closedWithin(c, br, 3*time.Second) {
		t.Error("connection not closed after 413")
	}
	var hdr strings.Builder
	for i := 0; i < 25; i++ {
		fmt.Fprintf(&hdr, "X-H%d: v\r\n", i)
	}
	c, br = rawRequest(t, addr, "GET /health HTTP/1.1\r\nHost: x\r\n"+hdr.String()+"\r\n")
	resp, b = readResponse(t, c, br)
	checkEnvelope(t, resp.StatusCode, b, errCase{status: 431, typ: "Request Header Fields Too Large", inMsg: "--h11-max-header-count"})
	var e struct{ Error struct{ Code int } }
	if json.Unmarshal(b, &e) != nil || e.Error.Code != 431 {
		t.Errorf("431 body %s", b)
	}
}

// TestBodyBudget: the bodies held by running handlers are bounded as a
// whole (4 × MaxBodyBytes): beyond, a request gets a 503 at once; the
// budget comes back when the handlers end.
func TestBodyBudget(t *testing.T) {
	eng := newFakeEngine(textScript(t, strings.Repeat("slow words ", 200), false))
	eng.delay = 5 * time.Millisecond
	ts, s := startServer(t, eng, Options{MaxBodyBytes: 4096})
	pad := strings.Repeat("p", 3800)
	body := `{"prompt":"q","max_tokens":400,"stream":true,"pad":"` + pad + `"}`
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/completions", strings.NewReader(body))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, err := http.DefaultClient.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	waitFor(t, func() bool { return eng.liveCount() == 4 })
	code, _, out := post(t, ts.URL+"/v1/completions", `{"prompt":"q","max_tokens":2,"pad":"`+pad+`"}`)
	checkEnvelope(t, code, out, errCase{status: 503, typ: "Service Unavailable", inMsg: "4 × --max-request-body-bytes"})
	cancel()
	wg.Wait()
	waitFor(t, func() bool { return s.bodyBytes.Load() == 0 })
	if code, _, out := post(t, ts.URL+"/v1/completions", `{"prompt":"q","max_tokens":2,"pad":"`+pad+`"}`); code != 200 {
		t.Errorf("after the bodies were released: %d %s", code, out)
	}
}
