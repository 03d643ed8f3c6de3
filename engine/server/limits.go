package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/gin-gonic/gin"
)

// Limits bound what clients can hold of the server: connections, time,
// bytes and requests in flight. Zero fields take the defaults below
// (docs/deployment.md, "Limits and timeouts", lists them with their flags
// and vLLM's equivalents).
type Limits struct {
	// KeepAlive closes a keep-alive connection idle that long
	// (--timeout-keep-alive; vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE, 5 s).
	KeepAlive time.Duration
	// ReadTimeout is the time a client has to send a request's headers,
	// and then again its body (--timeout-read); a slower one is cut.
	ReadTimeout time.Duration
	// WriteTimeout is the time one response write (one streamed event) may
	// wait for a client that does not read (--timeout-write); then the
	// connection is cut and the request aborted.
	WriteTimeout time.Duration
	// MaxConnections caps the open connections (--limit-concurrency): a
	// connection beyond it closes the oldest idle keep-alive connection,
	// or, when none is idle, gets a quick 503 (GET /health and /ping are
	// still answered).
	MaxConnections int
	// MaxHeaderBytes and MaxHeaderCount bound a request's headers
	// (--h11-max-incomplete-event-size, --h11-max-header-count).
	MaxHeaderBytes int
	MaxHeaderCount int
	// MaxPromptChars is the longest text prompt (or rendered chat) that is
	// tokenized, in characters (--max-prompt-chars). 0: what max_model_len
	// tokens can hold (max_model_len × tokenizer.MaxBytesPerToken); -1: no
	// limit but the body's.
	MaxPromptChars int
	// MaxQueuedRequests, when set, caps the sequences in flight (waiting or
	// running; a request with n counts n): more are answered 503
	// (--max-num-queued-reqs; vLLM's default is no limit).
	MaxQueuedRequests *int
}

// Defaults of Limits.
const (
	DefaultKeepAlive      = 5 * time.Second
	DefaultReadTimeout    = 60 * time.Second
	DefaultWriteTimeout   = 60 * time.Second
	DefaultMaxConnections = 4096
	DefaultMaxHeaderBytes = 4 << 20
	DefaultMaxHeaderCount = 256
)

// connReserve is how many file descriptors the server keeps out of
// MaxConnections' reach (model files, logs, the engine's own sockets, the
// connections being refused).
const connReserve = 512

// refuseSlots bounds the connections being refused at once; refuseWait is
// how long one may take to send its request line.
const (
	refuseSlots = 256
	refuseWait  = 500 * time.Millisecond
)

func (l *Limits) fill() {
	if l.KeepAlive <= 0 {
		l.KeepAlive = DefaultKeepAlive
	}
	if l.ReadTimeout <= 0 {
		l.ReadTimeout = DefaultReadTimeout
	}
	if l.WriteTimeout <= 0 {
		l.WriteTimeout = DefaultWriteTimeout
	}
	if l.MaxConnections <= 0 {
		l.MaxConnections = DefaultMaxConnections
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.MaxHeaderCount <= 0 {
		l.MaxHeaderCount = DefaultMaxHeaderCount
	}
}

// fileLimit is the process's soft RLIMIT_NOFILE (0 if unknown). Go raises
// the soft limit to the hard one at start-up.
func fileLimit() int {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur > 1<<30 {
		return 0
	}
	return int(r.Cur)
}

// connTracker follows every accepted connection's state (http.Server's
// ConnState hook) and enforces MaxConnections in Accept.
type connTracker struct {
	net.Listener
	s   *Server
	max int

	mu    sync.Mutex
	conns map[net.Conn]*connEntry
	slots chan struct{} // connections being refused
}

type connEntry struct {
	idle  bool
	since time.Time
}

func newConnTracker(ln net.Listener, s *Server, max int) *connTracker {
	return &connTracker{Listener: ln, s: s, max: max, conns: map[net.Conn]*connEntry{}, slots: make(chan struct{}, refuseSlots)}
}

// Accept returns the next connection within the cap. A connection beyond
// it closes the oldest idle one to make room; when every connection is
// busy it is refused (503, or its health check answered) on a goroutine of
// its own, and Accept waits for the next.
func (t *connTracker) Accept() (net.Conn, error) {
	for {
		c, err := t.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if t.admit(c) {
			return c, nil
		}
		select {
		case t.slots <- struct{}{}:
			go func() {
				defer func() { <-t.slots }()
				t.s.refuse(c, t.max)
			}()
		default:
			c.Close() // refusals are themselves bounded
		}
	}
}

// admit tracks c if there is room, making room by closing the connection
// idle the longest.
func (t *connTracker) admit(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.conns) >= t.max {
		var oldest net.Conn
		var at time.Time
		for k, e := range t.conns {
			if e.idle && (oldest == nil || e.since.Before(at)) {
				oldest, at = k, e.since
			}
		}
		if oldest == nil {
			return false
		}
		delete(t.conns, oldest)
		oldest.Close() // its serving goroutine sees the read fail and ends
	}
	t.conns[c] = &connEntry{since: time.Now()}
	return true
}

// state is http.Server.ConnState.
func (t *connTracker) state(c net.Conn, st http.ConnState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch st {
	case http.StateClosed, http.StateHijacked:
		delete(t.conns, c)
		t.s.freed(connMemory)
	case http.StateIdle, http.StateActive:
		if e, ok := t.conns[c]; ok {
			e.idle, e.since = st == http.StateIdle, time.Now()
		}
	}
}

// open is the number of tracked connections.
func (t *connTracker) open() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.conns)
}

// refuse answers a connection over the cap and closes it: a health check
// (GET /health, /ping) gets its usual answer, anything else a 503 in the
// error envelope. It reads at most the request head, for at most
// refuseWait.
func (s *Server) refuse(c net.Conn, max int) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(refuseWait))
	status, body := http.StatusServiceUnavailable, []byte(nil)
	req, err := http.ReadRequest(bufio.NewReaderSize(io.LimitReader(c, 16<<10), 4096))
	if err == nil && (req.URL.Path == "/health" || req.URL.Path == "/ping") && (req.Method == http.MethodGet || req.Method == http.MethodHead || (req.Method == http.MethodPost && req.URL.Path == "/ping")) {
		if s.healthy() {
			status = http.StatusOK
		}
	} else {
		body, _ = httpError(http.StatusServiceUnavailable, fmt.Sprintf(
			"Too many connections: the server holds its limit of %d open connections (--limit-concurrency). Please try again later.", max)).MarshalJSON()
	}
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n", status, http.StatusText(status), len(body))
	if status != http.StatusOK {
		io.WriteString(c, "Retry-After: 1\r\n")
	}
	io.WriteString(c, "\r\n")
	c.Write(body)
	// Half-close and drain what the client still sends, so that closing
	// does not reset the connection before it reads the answer.
	if tc, ok := c.(interface{ CloseWrite() error }); ok {
		tc.CloseWrite()
		io.Copy(io.Discard, io.LimitReader(c, 64<<10))
	}
}

// headerCount answers 431 to a request with more header fields than
// MaxHeaderCount (vLLM's --h11-max-header-count).
func (s *Server) headerCount(c *gin.Context) {
	n := 0
	for _, v := range c.Request.Header {
		n += len(v)
	}
	if n > s.limits.MaxHeaderCount {
		c.Header("Connection", "close")
		s.writeError(c, httpError(http.StatusRequestHeaderFieldsTooLarge,
			fmt.Sprintf("Too many request header fields: %d, the limit is %d (--h11-max-header-count).", n, s.limits.MaxHeaderCount)))
		c.Abort()
	}
}

// writeDeadline gives the response's next write WriteTimeout to reach the
// client; every handler starts with it, and streams and final answers
// renew it before they write.
func (s *Server) writeDeadline(c *gin.Context) {
	http.NewResponseController(c.Writer).SetWriteDeadline(time.Now().Add(s.limits.WriteTimeout))
}

// writeDeadlineMiddleware sets the first write deadline of every request.
func (s *Server) writeDeadlineMiddleware(c *gin.Context) { s.writeDeadline(c) }

// readBody reads the request body within ReadTimeout and MaxBodyBytes.
// After a body read in full the connection's read deadline is cleared: the
// server keeps reading the connection in the background to notice a client
// that goes away, which a stale deadline would take for a disconnect. After
// a refused body the deadline is set in the past, so that the server does
// not wait for the rest of the body before closing the connection.
func (s *Server) readBody(c *gin.Context) (data []byte, aerr *APIError) {
	rc := http.NewResponseController(c.Writer)
	defer func() {
		if aerr != nil {
			c.Header("Connection", "close")
			rc.SetReadDeadline(time.Now())
		} else {
			rc.SetReadDeadline(time.Time{})
		}
	}()
	limit := s.opt.MaxBodyBytes
	if c.Request.ContentLength > limit {
		return nil, tooLarge(limit)
	}
	rc.SetReadDeadline(time.Now().Add(s.limits.ReadTimeout))
	// The buffer grows with what arrives, not with what Content-Length
	// claims: a client that announces 64 MiB and sends nothing costs
	// nothing. A declared length only avoids the last growth.
	buf := make([]byte, 0, min(max(c.Request.ContentLength, 0)+1, 64<<10))
	defer func() {
		if aerr != nil {
			s.bodyBytes.Add(-int64(len(buf)))
		}
	}()
	for {
		if len(buf) == cap(buf) {
			next := 2 * cap(buf)
			if n := c.Request.ContentLength; n > int64(len(buf)) && n < int64(next) {
				next = int(n) + 1
			}
			buf = append(make([]byte, 0, next), buf...)
		}
		n, err := c.Request.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		v := s.bodyBytes.Add(int64(n)) // the budget always holds len(buf)
		if int64(len(buf)) > limit {
			return buf, tooLarge(limit)
		}
		if v > s.bodyBudget {
			return buf, httpError(http.StatusServiceUnavailable, fmt.Sprintf(
				"The server is busy: request bodies of %d bytes are held, the limit is %d (4 × --max-request-body-bytes). Please try again later.", v-int64(n), s.bodyBudget))
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil, httpError(http.StatusRequestTimeout, fmt.Sprintf(
					"The request body did not arrive within %s (--timeout-read).", s.limits.ReadTimeout))
			}
			return nil, httpError(http.StatusBadRequest, "could not read the request body: "+err.Error())
		}
	}
}

// releaseBody gives a finished request's body back to the budget and
// counts its bytes as freed.
func (s *Server) releaseBody(n int) {
	s.bodyBytes.Add(-int64(n))
	s.freed(n)
}

// freed counts memory that handlers or connections no longer hold. After
// scavengeAfter bytes, the return of free memory to the system is
// scheduled for a second after the last such release: the heap would
// otherwise keep it until the next collection, which an idle server may
// not run for minutes, and the resident size after a burst of large bodies
// or of connections would stay at its peak.
func (s *Server) freed(n int) {
	s.scavengeMu.Lock()
	defer s.scavengeMu.Unlock()
	s.released += n
	if s.released < scavengeAfter {
		return
	}
	s.released = 0
	if s.scavenge == nil {
		s.scavenge = time.AfterFunc(time.Second, debug.FreeOSMemory)
	} else {
		s.scavenge.Reset(time.Second)
	}
}

// scavengeAfter is how many freed bytes schedule a return of memory;
// connMemory estimates what one closed connection held (its goroutine's
// stack and its buffers).
const (
	scavengeAfter = 8 << 20
	connMemory    = 16 << 10
)

// admitQueued reserves n sequences of the in-flight budget
// (MaxQueuedRequests); release gives them back.
func (s *Server) admitQueued(n int) *APIError {
	if s.limits.MaxQueuedRequests == nil {
		return nil
	}
	limit := int64(*s.limits.MaxQueuedRequests)
	if v := s.queued.Add(int64(n)); v > limit {
		s.queued.Add(-int64(n))
		return httpError(http.StatusServiceUnavailable, fmt.Sprintf(
			"The server is busy: %d sequences are in flight and the limit is %d (--max-num-queued-reqs). Please try again later.", v-int64(n), limit))
	}
	return nil
}

func (s *Server) releaseQueued(n int) {
	if s.limits.MaxQueuedRequests != nil {
		s.queued.Add(-int64(n))
	}
}
