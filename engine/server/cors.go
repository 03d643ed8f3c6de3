package server

import (
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/gin-gonic/gin"
)

// CORS is vLLM's CORS configuration (--allowed-origins, --allowed-methods,
// --allowed-headers, --allow-credentials), applied the way Starlette's
// CORSMiddleware, which vLLM installs, applies it. A nil list means vLLM's
// default ["*"].
type CORS struct {
	AllowedOrigins   []string
	AllowedMethods   []string
	AllowedHeaders   []string
	AllowCredentials bool
}

// corsSafelisted are the request headers Starlette always allows.
var corsSafelisted = []string{"Accept", "Accept-Language", "Content-Language", "Content-Type"}

// corsMaxAge is Starlette's Access-Control-Max-Age default (seconds).
const corsMaxAge = "600"

// cors is the compiled configuration.
type cors struct {
	origins, methods, headers   []string // headers lower-cased
	allOrigins, allHeaders      bool
	credentials, explicitOrigin bool
	methodsHeader, headersValue string
}

func newCORS(c CORS) *cors {
	star := []string{"*"}
	origins, methods, headers := c.AllowedOrigins, c.AllowedMethods, c.AllowedHeaders
	if origins == nil {
		origins = star
	}
	if methods == nil {
		methods = star
	}
	if headers == nil {
		headers = star
	}
	if slices.Contains(methods, "*") {
		methods = []string{"DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"}
	}
	x := &cors{origins: origins, methods: methods, credentials: c.AllowCredentials,
		allOrigins: slices.Contains(origins, "*"), allHeaders: slices.Contains(headers, "*")}
	x.explicitOrigin = !x.allOrigins || x.credentials
	set := map[string]bool{}
	for _, h := range append(append([]string(nil), corsSafelisted...), headers...) {
		set[h] = true
	}
	var all []string
	for h := range set {
		all = append(all, h)
	}
	sort.Strings(all)
	x.headersValue = strings.Join(all, ", ")
	for _, h := range all {
		x.headers = append(x.headers, strings.ToLower(h))
	}
	x.methodsHeader = strings.Join(methods, ", ")
	return x
}

func (x *cors) allowedOrigin(origin string) bool {
	return x.allOrigins || slices.Contains(x.origins, origin)
}

// middleware answers preflight requests (OPTIONS with an Origin and an
// Access-Control-Request-Method) itself and adds the CORS headers to every
// other response to a request with an Origin. Requests without an Origin
// pass untouched.
func (x *cors) middleware(s *Server) gin.HandlerFunc {
	return func(c *gin.Context) {
		origin := c.GetHeader("Origin")
		if origin == "" {
			return
		}
		h := c.Writer.Header()
		if c.Request.Method == http.MethodOptions && c.GetHeader("Access-Control-Request-Method") != "" {
			x.preflight(s, c, origin)
			return
		}
		if x.allOrigins {
			h.Set("Access-Control-Allow-Origin", "*")
		}
		if x.credentials {
			h.Set("Access-Control-Allow-Credentials", "true")
		}
		// A request with cookies, or a list of origins, gets its own
		// origin back.
		if (x.allOrigins && c.GetHeader("Cookie") != "") || (!x.allOrigins && x.allowedOrigin(origin)) {
			h.Set("Access-Control-Allow-Origin", origin)
			h.Add("Vary", "Origin")
		}
	}
}

// preflight is Starlette's preflight_response (with the error envelope
// instead of a plain-text body on failure).
func (x *cors) preflight(s *Server, c *gin.Context, origin string) {
	h := c.Writer.Header()
	if x.explicitOrigin {
		h.Set("Vary", "Origin")
	} else {
		h.Set("Access-Control-Allow-Origin", "*")
	}
	h.Set("Access-Control-Allow-Methods", x.methodsHeader)
	h.Set("Access-Control-Max-Age", corsMaxAge)
	if !x.allHeaders {
		h.Set("Access-Control-Allow-Headers", x.headersValue)
	}
	if x.credentials {
		h.Set("Access-Control-Allow-Credentials", "true")
	}
	var failures []string
	if x.allowedOrigin(origin) {
		if x.explicitOrigin {
			h.Set("Access-Control-Allow-Origin", origin)
		}
	} else {
		failures = append(failures, "origin")
	}
	if !slices.Contains(x.methods, c.GetHeader("Access-Control-Request-Method")) {
		failures = append(failures, "method")
	}
	if req := c.GetHeader("Access-Control-Request-Headers"); req != "" {
		if x.allHeaders {
			h.Set("Access-Control-Allow-Headers", req)
		} else {
			for _, hd := range strings.Split(req, ",") {
				if !slices.Contains(x.headers, strings.ToLower(strings.TrimSpace(hd))) {
					failures = append(failures, "headers")
					break
				}
			}
		}
	}
	if len(failures) > 0 {
		s.writeError(c, httpError(http.StatusBadRequest, "Disallowed CORS "+strings.Join(failures, ", ")))
	} else {
		c.Status(http.StatusOK)
	}
	c.Abort()
}
