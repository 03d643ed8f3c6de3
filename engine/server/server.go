package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/npuserve/npuserve/engine/chattemplate"
	"github.com/npuserve/npuserve/engine/core"
	"github.com/npuserve/npuserve/engine/parser"
	"github.com/npuserve/npuserve/engine/sampling"
	"github.com/npuserve/npuserve/engine/tokenizer"
	"github.com/sirupsen/logrus"
)

// Engine is what the server needs of an engine; *core.Engine implements
// it (and a scripted fake does in tests).
type Engine interface {
	Add(r *core.Request) (<-chan core.Output, error)
	Abort(id string) bool
	Stats() core.Stats
}

// Defaults of Options.
const (
	// DefaultMaxBodyBytes bounds a request body: a 1M-token prompt as
	// token ids is about 7 MB of JSON.
	DefaultMaxBodyBytes = 64 << 20
	// DefaultStatsInterval is vLLM's stats log interval.
	DefaultStatsInterval = 10 * time.Second
)

// Options configure a Server. ServedModelNames is required; the rest
// have defaults.
type Options struct {
	// ServedModelNames are the names requests may use (--served-model-name;
	// vLLM's default is the model path). The first is reported in
	// responses.
	ServedModelNames []string
	// ModelPath is ModelCard.root (the model directory or repository).
	ModelPath string
	// APIKeys, when any is set, guard /v1/* with "Authorization: Bearer".
	APIKeys []string
	// CORS is --allowed-origins, --allowed-methods, --allowed-headers and
	// --allow-credentials (zero value: vLLM's defaults, everything allowed
	// without credentials).
	CORS CORS

	// Templates are the model's chat templates (nil: the model has none,
	// and chat requests need ChatTemplate or a request chat_template).
	Templates *chattemplate.ModelTemplates
	// ChatTemplate overrides the model's template (--chat-template).
	ChatTemplate *chattemplate.Template
	// ContentFormat is --chat-template-content-format: "string" joins a
	// message's text parts with "\n", "openai" passes the parts list to
	// the template; "auto" (default) picks "string".
	ContentFormat string
	// TrustRequestChatTemplate allows chat_template in requests
	// (--trust-request-chat-template).
	TrustRequestChatTemplate bool

	// ReasoningParser and ToolCallParser are --reasoning-parser and
	// --tool-call-parser ("" for none); EnableAutoToolChoice is
	// --enable-auto-tool-choice.
	ReasoningParser      string
	ToolCallParser       string
	EnableAutoToolChoice bool

	// Generation are the sampling defaults from generation_config.json.
	Generation sampling.GenerationDefaults
	// MaxLogprobs is --max-logprobs (default 20).
	MaxLogprobs int
	// EnableForceIncludeUsage sends usage in every stream
	// (--enable-force-include-usage).
	EnableForceIncludeUsage bool
	// ReturnTokensAsTokenIDs is the server-wide default of
	// return_tokens_as_token_ids (--return-tokens-as-token-ids).
	ReturnTokensAsTokenIDs bool

	// MaxBodyBytes bounds request bodies (413 beyond it); default
	// DefaultMaxBodyBytes (--max-request-body-bytes).
	MaxBodyBytes int64
	// Limits are the connection, time and size limits (zero fields: the
	// defaults).
	Limits Limits
	// StatsInterval is the period of the stats log line (default 10 s);
	// DisableLogStats turns the line off (--disable-log-stats).
	StatsInterval   time.Duration
	DisableLogStats bool
	// LogRequests logs every request's prompt and parameters
	// (--enable-log-requests).
	LogRequests bool
	// VocabSize is the model's vocabulary (token ids are checked against
	// it; 0: the tokenizer's size, or unchecked before the engine).
	VocabSize int
	// Version is reported by /version.
	Version string
	// Log receives the server's log lines (default logrus's standard
	// logger).
	Log logrus.FieldLogger
}

// Server is the OpenAI-compatible HTTP front end of one engine.
type Server struct {
	eng         Engine
	tok         *tokenizer.Tokenizer // nil with --skip-tokenizer-init
	opt         Options
	maxModelLen int
	vocabSize   int
	model       string
	names       map[string]bool
	created     int64
	keyHashes   [][32]byte
	render      *Renderer
	metrics     *metrics
	log         logrus.FieldLogger
	seq         atomic.Uint64
	tokenText   []string // decoded text of each token id (logprobs)
	handler     http.Handler
	closing     atomic.Bool
	inflight    sync.WaitGroup
	engineDead  func() error

	limits      Limits
	promptLimit promptLimit
	queued      atomic.Int64 // sequences in flight (MaxQueuedRequests)
	bodyBytes   atomic.Int64 // bytes of request bodies held by handlers
	bodyBudget  int64        // their limit: 4 × MaxBodyBytes
	scavengeMu  sync.Mutex
	scavenge    *time.Timer  // returns memory after large bodies
	released    int          // body bytes released since the last scavenge
	conns       *connTracker // set by Serve

	forceMu sync.Mutex
	force   context.CancelFunc // cuts the graceful shutdown short
	forced  bool
}

// New builds a server over eng. tok is nil when the tokenizer is not
// loaded (--skip-tokenizer-init): only token-id prompts work then.
func New(eng Engine, tok *tokenizer.Tokenizer, opt Options) (*Server, error) {
	if len(opt.ServedModelNames) == 0 || opt.ServedModelNames[0] == "" {
		return nil, errors.New("server: no served model name")
	}
	if opt.MaxLogprobs == 0 {
		opt.MaxLogprobs = sampling.DefaultMaxLogprobs
	}
	if opt.MaxBodyBytes <= 0 {
		opt.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opt.StatsInterval <= 0 {
		opt.StatsInterval = DefaultStatsInterval
	}
	if opt.Log == nil {
		opt.Log = logrus.StandardLogger()
	}
	if opt.Version == "" {
		opt.Version = "dev"
	}
	if opt.ContentFormat == "" {
		opt.ContentFormat = "auto"
	}
	switch opt.ContentFormat {
	case "auto", "string", "openai":
	default:
		return nil, fmt.Errorf("server: chat template content format %q: want auto, string or openai", opt.ContentFormat)
	}
	if opt.ReasoningParser != "" {
		if _, err := parser.NewReasoning(opt.ReasoningParser, false, true); err != nil {
			return nil, err
		}
	}
	if opt.ToolCallParser != "" {
		if _, err := parser.NewTools(opt.ToolCallParser, parser.ToolsConfig{}); err != nil {
			return nil, err
		}
	}
	if opt.EnableAutoToolChoice && opt.ToolCallParser == "" {
		return nil, errors.New("server: --enable-auto-tool-choice requires --tool-call-parser")
	}
	st := eng.Stats()
	if st.MaxModelLen < 1 {
		return nil, errors.New("server: the engine reports no max_model_len")
	}
	s := &Server{
		eng: eng, tok: tok, opt: opt, maxModelLen: st.MaxModelLen,
		model: opt.ServedModelNames[0], names: map[string]bool{},
		created: time.Now().Unix(), log: opt.Log, limits: opt.Limits,
	}
	s.limits.fill()
	s.bodyBudget = 4 * opt.MaxBodyBytes
	if n := fileLimit(); n > 0 && s.limits.MaxConnections > n-connReserve {
		c := max(16, n-connReserve)
		s.log.Warnf("--limit-concurrency %d does not fit the file limit (RLIMIT_NOFILE %d): serving at most %d connections", s.limits.MaxConnections, n, c)
		s.limits.MaxConnections = c
	}
	s.promptLimit = promptLimit{modelLen: st.MaxModelLen}
	switch {
	case s.limits.MaxPromptChars > 0:
		s.promptLimit.chars = s.limits.MaxPromptChars
	case s.limits.MaxPromptChars == 0 && tok != nil:
		if b := tok.MaxBytesPerToken(); b > 0 {
			s.promptLimit.chars = int(min(int64(st.MaxModelLen)*int64(b), math.MaxInt32))
		} else {
			s.log.Warnf("the tokenizer can map unbounded text to one token: text prompts are tokenized up to the body limit; set --max-prompt-chars to bound them")
		}
	}
	for _, n := range opt.ServedModelNames {
		s.names[n] = true
	}
	for _, k := range opt.APIKeys {
		if k != "" {
			s.keyHashes = append(s.keyHashes, sha256.Sum256([]byte(k)))
		}
	}
	s.render = &Renderer{Templates: opt.Templates, Override: opt.ChatTemplate, Tok: tok,
		ContentFormat: opt.ContentFormat, TrustRequestChatTemplate: opt.TrustRequestChatTemplate,
		MaxPromptChars: s.promptLimit.chars, MaxModelLen: st.MaxModelLen}
	s.vocabSize = opt.VocabSize
	if s.vocabSize == 0 && tok != nil {
		s.vocabSize = tok.VocabSize()
	}
	if tok != nil {
		s.tokenText = make([]string, tok.VocabSize())
		for id := range s.tokenText {
			s.tokenText[id] = tok.Decode([]int{id}, false)
		}
	}
	if d, ok := eng.(interface{ Err() error }); ok {
		s.engineDead = d.Err
	}
	s.metrics = newMetrics(s.model, s.maxModelLen, eng)
	s.handler = s.routes()
	return s, nil
}

// Handler is the HTTP handler with every route.
func (s *Server) Handler() http.Handler { return s.handler }

// OnStep is the engine's step hook (core.Options.OnStep): it feeds
// vllm:iteration_tokens_total.
func (s *Server) OnStep(st core.StepStats) { s.metrics.onStep(st) }

// MaxModelLen is the context window the server enforces.
func (s *Server) MaxModelLen() int { return s.maxModelLen }

// Serve serves HTTP on ln until ctx is cancelled, then shuts down
// gracefully: the listener closes, in-flight requests run to completion
// (streams included) for up to grace, and whatever still runs after that
// is aborted in the engine by its handler returning. It also runs the
// stats logger.
func (s *Server) Serve(ctx context.Context, ln net.Listener, grace time.Duration) error {
	s.conns = newConnTracker(ln, s, s.limits.MaxConnections)
	ln = s.conns
	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: s.limits.ReadTimeout, IdleTimeout: s.limits.KeepAlive,
		MaxHeaderBytes: s.limits.MaxHeaderBytes, ConnState: s.conns.state,
		ErrorLog: log.New(s.log.WithField("component", "http").WriterLevel(logrus.WarnLevel), "", 0)}
	statsCtx, stopStats := context.WithCancel(context.Background())
	defer stopStats()
	if !s.opt.DisableLogStats {
		go s.logStats(statsCtx)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.closing.Store(true)
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	s.forceMu.Lock()
	s.force = cancel
	if s.forced {
		cancel()
	}
	s.forceMu.Unlock()
	err := srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		// Streams still running: cut their connections; each handler
		// sees its context end and aborts its engine requests.
		srv.Close()
		err = nil
	}
	s.inflight.Wait()
	return err
}

// ForceClose ends a graceful shutdown now: connections still streaming
// are cut and their requests aborted. Before shutdown it takes effect as
// soon as shutdown starts.
func (s *Server) ForceClose() {
	s.forceMu.Lock()
	defer s.forceMu.Unlock()
	s.forced = true
	if s.force != nil {
		s.force()
	}
}

// routes builds the gin engine.
func (s *Server) routes() http.Handler {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.HandleMethodNotAllowed = true
	// No 301 with an HTML body for /v1/models/: every answer is JSON.
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false
	// Authentication runs before routing, so that every /v1 path, unknown
	// ones included, answers 401 without the key (vLLM's
	// AuthenticationMiddleware wraps the whole app).
	r.Use(s.recoverMiddleware, s.writeDeadlineMiddleware, s.headerCount, s.requestIDMiddleware, s.accessLog, newCORS(s.opt.CORS).middleware(s), s.auth)
	r.NoRoute(func(c *gin.Context) { s.writeError(c, httpError(http.StatusNotFound, "Not Found")) })
	r.NoMethod(func(c *gin.Context) { s.writeError(c, httpError(http.StatusMethodNotAllowed, "Method Not Allowed")) })

	r.GET("/health", s.health)
	r.GET("/ping", s.health)
	r.POST("/ping", s.health)
	r.GET("/version", func(c *gin.Context) { s.writeJSON(c, http.StatusOK, map[string]string{"version": s.opt.Version}) })
	r.GET("/metrics", gin.WrapH(s.metrics.handler()))
	r.POST("/tokenize", s.limitBody, s.tokenize)
	r.POST("/detokenize", s.limitBody, s.detokenize)

	v1 := r.Group("/v1")
	v1.GET("/models", s.listModels)
	v1.POST("/completions", s.limitBody, s.completions)
	v1.POST("/chat/completions", s.limitBody, s.chatCompletions)
	return r
}

// health answers 200 with an empty body while the engine runs, 503 once
// it has failed or the server is shutting down (so that load balancers
// stop sending requests).
func (s *Server) health(c *gin.Context) {
	if !s.healthy() {
		c.Status(http.StatusServiceUnavailable)
		return
	}
	c.Status(http.StatusOK)
}

// healthy reports whether the engine runs and the server is not shutting
// down.
func (s *Server) healthy() bool {
	if s.closing.Load() {
		return false
	}
	if s.engineDead != nil && s.engineDead() != nil {
		return false
	}
	return true
}

// auth checks the bearer token on every path under /v1 when API keys are
// set (vLLM's AuthenticationMiddleware: url_path.startswith("/v1"), scheme
// "Bearer", any of the keys). OPTIONS requests pass.
func (s *Server) auth(c *gin.Context) {
	if len(s.keyHashes) == 0 || c.Request.Method == http.MethodOptions || !strings.HasPrefix(c.Request.URL.Path, "/v1") {
		return
	}
	scheme, token, _ := strings.Cut(c.GetHeader("Authorization"), " ")
	ok := false
	if strings.EqualFold(scheme, "bearer") {
		h := sha256.Sum256([]byte(token))
		for _, k := range s.keyHashes {
			if subtle.ConstantTimeCompare(h[:], k[:]) == 1 {
				ok = true
			}
		}
	}
	if !ok {
		s.writeError(c, httpError(http.StatusUnauthorized, "Unauthorized"))
		c.Abort()
	}
}

// requestIDMiddleware echoes X-Request-Id, or sets a random one (vLLM's
// XRequestIdMiddleware).
func (s *Server) requestIDMiddleware(c *gin.Context) {
	id := c.GetHeader("X-Request-Id")
	if id == "" {
		id = randomHex()
	}
	c.Header("X-Request-Id", id)
	c.Next()
}

// limitBody reads the body, up to MaxBodyBytes (413 beyond) and within
// ReadTimeout (408 after), into the context, and holds it against the
// server's body budget (503 beyond) until the handler is done.
func (s *Server) limitBody(c *gin.Context) {
	data, aerr := s.readBody(c)
	if aerr != nil {
		s.writeError(c, aerr)
		c.Abort()
		return
	}
	defer s.releaseBody(len(data))
	c.Set(bodyKey, data)
	// gin pools its contexts: a stored body would stay referenced until
	// the context is reused.
	defer c.Delete(bodyKey)
	c.Next()
}

const bodyKey = "npuserve.body"

func tooLarge(limit int64) *APIError {
	return httpError(http.StatusRequestEntityTooLarge, fmt.Sprintf("Request body too large: the limit is %d bytes.", limit))
}

// recoverMiddleware answers 500 in the envelope if a handler panics,
// and keeps the server up.
func (s *Server) recoverMiddleware(c *gin.Context) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.log.Errorf("panic serving %s %s: %v", c.Request.Method, c.Request.URL.Path, p)
			if !c.Writer.Written() {
				s.writeError(c, &APIError{Status: http.StatusInternalServerError, Type: "InternalServerError", Message: fmt.Sprint(p)})
			}
			c.Abort()
		}
	}()
	c.Next()
}

// accessLog logs one line per request at debug level (uvicorn's access
// log; at info it would flood the log under load).
func (s *Server) accessLog(c *gin.Context) {
	t0 := time.Now()
	c.Next()
	s.log.Debugf("%s - \"%s %s %s\" %d %s (%.1f ms)", c.ClientIP(), c.Request.Method, c.Request.URL.Path,
		c.Request.Proto, c.Writer.Status(), http.StatusText(c.Writer.Status()), float64(time.Since(t0).Microseconds())/1e3)
}

// writeError answers e in vLLM's envelope.
func (s *Server) writeError(c *gin.Context, e *APIError) {
	b, _ := e.MarshalJSON()
	s.writeDeadline(c)
	c.Data(e.Status, "application/json", b)
}

// writeJSON answers v as JSON without HTML escaping.
func (s *Server) writeJSON(c *gin.Context, status int, v any) {
	b, err := marshal(v)
	if err != nil {
		s.writeError(c, internalError(err))
		return
	}
	s.writeDeadline(c)
	c.Data(status, "application/json", b)
}

// checkModel is vLLM's _check_model: an absent model is fine, any served
// name is fine, anything else is 404.
func (s *Server) checkModel(model *string) *APIError {
	if model == nil || *model == "" || s.names[*model] {
		return nil
	}
	return notFoundModel(*model)
}

// listModels is GET /v1/models.
func (s *Server) listModels(c *gin.Context) {
	list := modelList{Object: "list", Data: []modelCard{}}
	root := s.opt.ModelPath
	for _, n := range s.opt.ServedModelNames {
		list.Data = append(list.Data, modelCard{
			ID: n, Object: "model", Created: s.created, OwnedBy: "vllm", Root: strPtr(root),
			MaxModelLen: s.maxModelLen,
			Permission: []modelPermission{{
				ID: "modelperm-" + randomHex(), Object: "model_permission", Created: s.created,
				AllowSampling: true, AllowLogprobs: true, AllowView: true, Organization: "*",
			}},
		})
	}
	s.writeJSON(c, http.StatusOK, list)
}

// randomHex is uuid4().hex.
func randomHex() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return hex.EncodeToString(b[:])
}

// logStats writes vLLM's periodic stats line every StatsInterval while
// the engine is busy (and once more when it becomes idle).
func (s *Server) logStats(ctx context.Context) {
	t := time.NewTicker(s.opt.StatsInterval)
	defer t.Stop()
	last := s.eng.Stats()
	lastT := time.Now()
	wasIdle := true
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			st := s.eng.Stats()
			dt := now.Sub(lastT).Seconds()
			dp, dg := st.PromptTokens-last.PromptTokens, st.GenerationTokens-last.GenerationTokens
			idle := dp == 0 && dg == 0 && st.Running == 0 && st.Waiting == 0
			if !idle || !wasIdle {
				s.log.Info(statsLine(st, float64(dp)/dt, float64(dg)/dt))
				if line := specLine(st, last); line != "" {
					s.log.Info(line)
				}
			}
			wasIdle = idle
			last, lastT = st, now
		}
	}
}

// specLine is vLLM's SpecDecodingLogging line over the interval from
// last to st ("" when nothing was drafted in it).
func specLine(st, last core.Stats) string {
	drafts := st.SpecDrafts - last.SpecDrafts
	if st.NumSpeculativeTokens == 0 || drafts <= 0 {
		return ""
	}
	draftToks, acc := st.SpecDraftTokens-last.SpecDraftTokens, st.SpecAcceptedTokens-last.SpecAcceptedTokens
	rates := make([]string, len(st.SpecAcceptedPerPos))
	for i, n := range st.SpecAcceptedPerPos {
		if i < len(last.SpecAcceptedPerPos) {
			n -= last.SpecAcceptedPerPos[i]
		}
		rates[i] = fmt.Sprintf("%.3f", float64(n)/float64(drafts))
	}
	rate := 0.0
	if draftToks > 0 {
		rate = 100 * float64(acc) / float64(draftToks)
	}
	return fmt.Sprintf("SpecDecoding metrics: Mean acceptance length: %.2f, Accepted: %d tokens, Drafted: %d tokens, Per-position acceptance rate: %s, Avg Draft acceptance rate: %.1f%%",
		1+float64(acc)/float64(drafts), acc, draftToks, strings.Join(rates, ", "), rate)
}

// statsLine is vLLM's LoggingStatLogger line.
func statsLine(st core.Stats, promptTPS, genTPS float64) string {
	return fmt.Sprintf("Engine 000: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, Running: %d reqs, Waiting: %d reqs, GPU KV cache usage: %.1f%%, Prefix cache hit rate: %.1f%%",
		promptTPS, genTPS, st.Running, st.Waiting, st.KVUsage*100, 0.0)
}
