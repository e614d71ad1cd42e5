package nethttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/middleware"
)

// Core is the HTTP behaviour of the middleware, independent of the router:
// key parsing, scoping, body limits, fingerprinting, capture, replay and
// problem answers. The gin and echo adapters are built on it.
type Core struct {
	guard *middleware.Guard
	cfg   config
}

// NewCore validates the options and returns the HTTP core for guard.
func NewCore(guard *middleware.Guard, opts ...Option) (*Core, error) {
	if guard == nil {
		return nil, lock.NewError(lock.CodeInvalidArgument, "nethttp", "a guard is required", nil)
	}
	cfg := defaults()
	for _, o := range opts {
		o(&cfg)
	}
	bad := func(detail string) (*Core, error) {
		return nil, lock.NewError(lock.CodeInvalidArgument, "nethttp", detail, nil)
	}
	switch {
	case cfg.header == "" || !validHeaderName(cfg.header):
		return bad("the key header name is not a valid field name")
	case cfg.maxKeyLen < 1:
		return bad("the maximum key length must be positive")
	case cfg.maxBody < 1:
		return bad("the request body limit must be positive")
	case cfg.maxResponse < 1:
		return bad("the response capture limit must be positive")
	case cfg.retryAfter < 0:
		return bad("Retry-After must not be negative")
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	return &Core{guard: guard, cfg: cfg}, nil
}

// Middleware returns net/http middleware that makes the handlers it wraps
// idempotent with guard. It panics if an option is invalid (at
// construction, never on the request path); use [NewCore] and
// [Core.Middleware] to get the error instead.
func Middleware(guard *middleware.Guard, opts ...Option) func(http.Handler) http.Handler {
	c, err := NewCore(guard, opts...)
	if err != nil {
		panic(err)
	}
	return c.Middleware()
}

// Middleware returns the core as net/http middleware.
func (c *Core) Middleware() func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c.Serve(w, r, next.ServeHTTP)
		})
	}
}

// Serve handles one request: it passes unguarded requests to next
// unchanged, and runs guarded ones through the guard, calling next at most
// once per key with a capturing writer and a request whose body has been
// read (and restored). Adapters call it with their framework's writer and
// a next that resumes the framework's chain.
func (c *Core) Serve(w http.ResponseWriter, r *http.Request, next func(http.ResponseWriter, *http.Request)) {
	if !c.cfg.methods[r.Method] {
		next(w, r)
		return
	}
	values := r.Header.Values(c.cfg.header)
	if len(values) == 0 {
		if c.cfg.required {
			c.writeProblem(w, http.StatusBadRequest, ProblemKeyMissing, "send an "+c.cfg.header+" header with a unique key, such as a UUID", 0)
			return
		}
		next(w, r)
		return
	}
	key, err := ParseKey(values, c.cfg.strict, c.cfg.maxKeyLen)
	if err != nil {
		var ke *KeyError
		errors.As(err, &ke)
		c.writeProblem(w, http.StatusBadRequest, ProblemKeyMalformed, ke.Reason, 0)
		return
	}

	body, ok := c.readBody(w, r)
	if !ok {
		return
	}
	route := c.route(r)
	var fp fingerprint.Fingerprint
	if c.cfg.fingerprint != nil {
		fp = c.cfg.fingerprint(r, route, body)
	} else {
		fp = fingerprint.HTTP(fingerprint.HTTPRequest{
			Method: r.Method, Route: route, RawQuery: r.URL.RawQuery, ContentType: r.Header.Get("Content-Type"), Body: body,
		})
	}
	scope := ""
	if c.cfg.scope != nil {
		scope = c.cfg.scope(r)
	}

	var opts []middleware.CallOption
	if !c.cfg.wait {
		opts = append(opts, middleware.WaitBudget(0))
	}
	out, err := c.guard.Execute(r.Context(), scopedKey(scope, key), fp, func(ctx context.Context) (middleware.Result, error) {
		return c.run(ctx, w, r, body, next), nil
	}, opts...)
	if err == nil {
		if out.Replayed {
			c.replay(w, out.Value)
		}
		return
	}
	c.refuse(w, r, body, next, err)
}

// readBody reads the request body within the limit and restores it for the
// handler. It answers 413 (or 400 for an unreadable body) and reports false
// when the request cannot go on.
func (c *Core) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.ContentLength > c.cfg.maxBody {
		c.writeProblem(w, http.StatusRequestEntityTooLarge, ProblemBodyTooLarge,
			fmt.Sprintf("the body has %d bytes; at most %d are accepted", r.ContentLength, c.cfg.maxBody), 0)
		return nil, false
	}
	var body []byte
	if r.Body != nil && r.Body != http.NoBody {
		var err error
		if r.ContentLength > 0 {
			// The length is known and within the limit: one allocation.
			body = make([]byte, r.ContentLength)
			_, err = io.ReadFull(r.Body, body)
		} else {
			body, err = fingerprint.ReadBody(r.Body, c.cfg.maxBody)
		}
		_ = r.Body.Close()
		if errors.Is(err, fingerprint.ErrBodyTooLarge) {
			c.writeProblem(w, http.StatusRequestEntityTooLarge, ProblemBodyTooLarge,
				fmt.Sprintf("the body exceeds %d bytes", c.cfg.maxBody), 0)
			return nil, false
		}
		if err != nil {
			// The client went away or sent a broken body: nothing ran.
			c.writeProblem(w, http.StatusBadRequest, ProblemKeyMalformed, "the request body could not be read", 0)
			return nil, false
		}
	}
	return body, true
}

// setBody gives r a fresh reader over body (and GetBody, for handlers that
// replay it).
func setBody(r *http.Request, body []byte) {
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
}

func (c *Core) route(r *http.Request) string {
	if c.cfg.route != nil {
		return c.cfg.route(r)
	}
	return r.URL.Path
}

// scopedKey joins a scope and a key so that no pair can spell another.
func scopedKey(scope, key string) string {
	return strconv.Itoa(len(scope)) + ":" + scope + ":" + key
}

// run calls the handler with a capturing writer and returns what to record.
func (c *Core) run(ctx context.Context, w http.ResponseWriter, r *http.Request, body []byte, next func(http.ResponseWriter, *http.Request)) (res middleware.Result) {
	cw, capture := NewCapture(w, c.keepHeader, c.cfg.maxResponse)
	req := r.WithContext(ctx)
	setBody(req, body)
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		if p == http.ErrAbortHandler {
			panic(p) // the handler asked to abort the response: nothing is recorded
		}
		c.cfg.logger.Error("nethttp: the handler panicked", slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
		if !capture.Written() {
			c.writeProblem(cw, http.StatusInternalServerError, ProblemInternal, "", 0)
		}
		res = c.verdict(capture, c.cfg.policy.Panic, ctx)
	}()
	next(cw, req)
	if !capture.Written() && !capture.Hijacked() {
		if ctx.Err() != nil {
			// The client went away and the handler answered nothing:
			// assume it gave up, and let a retry run it.
			return middleware.Result{Verdict: middleware.Forget}
		}
		capture.WriteHeader(http.StatusOK)
	}
	return c.verdict(capture, c.cfg.policy.stores(capture.Status()), ctx)
}

// verdict decides what the guard records for a finished response.
func (c *Core) verdict(capture *Capture, store bool, _ context.Context) middleware.Result {
	switch {
	case capture.Hijacked():
		return middleware.Result{Verdict: middleware.RecordNotReplayable}
	case !store:
		return middleware.Result{Verdict: middleware.Forget}
	case !capture.Replayable():
		return middleware.Result{Verdict: middleware.RecordNotReplayable}
	}
	status, header, body := capture.Response()
	return middleware.Result{Value: EncodeResponse(Response{Status: status, Header: header, Body: body})}
}

func (c *Core) keepHeader(name string) bool { return c.cfg.replayHeaders[name] }

// replay writes a recorded response.
func (c *Core) replay(w http.ResponseWriter, value []byte) {
	h := w.Header()
	status, body, err := decodeInto(value, func(name string, values []string) {
		if c.keepHeader(name) {
			h[name] = values
		}
	})
	if err != nil {
		// Undo the headers set before the corruption was found.
		_, _, _ = decodeInto(value, func(name string, _ []string) { delete(h, name) })
		c.cfg.logger.Error("nethttp: a recorded response could not be decoded", slog.String("error", err.Error()))
		c.writeProblem(w, http.StatusServiceUnavailable, ProblemUnavailable, "the recorded response is unreadable", c.cfg.retryAfter)
		return
	}
	h["Idempotent-Replayed"] = []string{"true"}
	if h.Get("Access-Control-Allow-Origin") != "" {
		exposeHeader(h, "Idempotent-Replayed")
	}
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// exposeHeader adds name to Access-Control-Expose-Headers unless it is
// already listed.
func exposeHeader(h http.Header, name string) {
	for _, v := range h.Values("Access-Control-Expose-Headers") {
		for _, item := range strings.Split(v, ",") {
			if t := strings.TrimSpace(item); t == "*" || strings.EqualFold(t, name) {
				return
			}
		}
	}
	h.Add("Access-Control-Expose-Headers", name)
}

// refuse answers a request the guard did not run.
func (c *Core) refuse(w http.ResponseWriter, r *http.Request, body []byte, next func(http.ResponseWriter, *http.Request), err error) {
	switch {
	case errors.Is(err, middleware.ErrMismatch):
		c.writeProblem(w, http.StatusUnprocessableEntity, ProblemKeyReused,
			"this key was used with a different request (method, route, query or body); use a new key for a new request", 0)
	case errors.Is(err, middleware.ErrInProgress):
		c.writeProblem(w, http.StatusConflict, ProblemInProgress,
			"the first request with this key has not finished; retry later with the same key and request", c.cfg.retryAfter)
	case errors.Is(err, middleware.ErrNotReplayable):
		c.writeProblem(w, http.StatusConflict, ProblemNotReplayable,
			"the request with this key was executed, but its response was streamed or too large to keep; it will not be executed again", 0)
	case errors.Is(err, middleware.ErrUnavailable):
		if c.cfg.failOpen {
			setBody(r, body)
			next(w, r)
			return
		}
		c.writeProblem(w, http.StatusServiceUnavailable, ProblemUnavailable,
			"the idempotency backend cannot be reached, so the request was not executed; retry later with the same key", c.cfg.retryAfter)
	case r.Context().Err() != nil:
		// The client is gone; there is nobody to answer.
	default:
		c.cfg.logger.Error("nethttp: unexpected guard error", slog.String("error", err.Error()))
		c.writeProblem(w, http.StatusServiceUnavailable, ProblemUnavailable, "", c.cfg.retryAfter)
	}
}

func validHeaderName(s string) bool {
	for i := 0; i < len(s); i++ {
		if !tchar(s[i]) {
			return false
		}
	}
	return s != ""
}
