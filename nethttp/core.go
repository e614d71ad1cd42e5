package nethttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
)

// core is the HTTP behaviour of the middleware: key parsing, scoping, body
// limits, fingerprinting, capture, replay and problem answers.
type core struct {
	guard *middleware.Guard
	cfg   config
	keep  func(name string) bool // keepHeader, made once
}

func newCore(guard *middleware.Guard, opts ...Option) (*core, error) {
	bad := func(detail string) (*core, error) {
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "nethttp", detail, nil)
	}
	if why, ok := validGuard(guard); !ok {
		return bad(why)
	}
	cfg := defaults()
	for _, o := range opts {
		if o == nil {
			return bad("an option is nil; remove it, or pass the option it was meant to be")
		}
		o(&cfg)
	}
	if why, ok := cfg.validate(); !ok {
		return bad(why)
	}
	if why, ok := cfg.key.valid(); !ok {
		return bad(why)
	}
	switch {
	case cfg.maxKeyLen < 1:
		return bad("the maximum key length must be positive")
	case cfg.maxBody < 1:
		return bad("the request body limit must be positive")
	case cfg.maxResponse < 1:
		return bad("the response capture limit must be positive")
	case cfg.retryAfter < 0:
		return bad("Retry-After must not be negative")
	case cfg.recordTTL != 0 && cfg.recordTTL < time.Millisecond:
		return bad("the record TTL must be at least 1ms (or 0 for the guard's)")
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	if cfg.problemWriter == nil {
		cfg.problemWriter = WriteProblem
	}
	c := &core{guard: guard, cfg: cfg}
	c.keep = c.keepHeader
	return c, nil
}

// New validates the options and returns net/http middleware that makes the
// handlers it wraps idempotent with guard. A bad or nil option, or a guard
// not made by middleware.New, is an InvalidArgument error here.
//
// The middleware hands unguarded requests to the next handler unchanged
// (the very writer and request it got); guarded ones reach it at most once
// per key, with a capturing writer and a new request whose body was read.
func New(guard *middleware.Guard, opts ...Option) (func(http.Handler) http.Handler, error) {
	c, err := newCore(guard, opts...)
	if err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c.serve(w, r, next.ServeHTTP)
		})
	}, nil
}

// serve handles one request (see [New]).
func (c *core) serve(w http.ResponseWriter, r *http.Request, next func(http.ResponseWriter, *http.Request)) {
	op := middleware.Operation(c.operation(r))
	if !c.cfg.methods[r.Method] {
		c.guard.Bypass(r.Context(), middleware.EventPassedThrough, nil, op)
		next(w, r)
		return
	}
	// The body is read first only for a key that is in it; otherwise a
	// request without a key passes through with its body untouched.
	var body []byte
	read := false
	if c.cfg.key.body {
		var ok bool
		if body, ok = c.readBody(w, r, op); !ok {
			return
		}
		read = true
	}
	key, err := c.cfg.key.find(r, body, c.cfg.strict, c.cfg.maxKeyLen)
	if err != nil {
		var ke *keyError
		errors.As(err, &ke)
		c.reject(w, r, op, http.StatusBadRequest, problemKeyMalformed, ke.reason)
		return
	}
	if key == "" {
		if c.cfg.required {
			c.reject(w, r, op, http.StatusBadRequest, problemKeyMissing, "send "+c.cfg.key.where+" with a unique key, such as a UUID")
			return
		}
		if read {
			restoreBody(r, body)
		}
		c.guard.Bypass(r.Context(), middleware.EventPassedThrough, nil, op)
		next(w, r)
		return
	}
	if !read {
		var ok bool
		if body, ok = c.readBody(w, r, op); !ok {
			return
		}
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

	var optBuf [6]middleware.CallOption
	opts := append(optBuf[:0], op, middleware.Scope(scope))
	if c.cfg.recordTTL != 0 {
		opts = append(opts, middleware.RecordTTL(c.cfg.recordTTL))
	}
	if !c.cfg.wait {
		opts = append(opts, middleware.WaitBudget(0))
	}
	if c.cfg.failOpen {
		opts = append(opts, middleware.FailOpen())
	}
	if c.cfg.scope == nil {
		// Without a principal, the request's credentials stand for it.
		opts = append(opts, c.credentials(r))
	}
	aborted := false
	var rec *capture
	out, err := c.guard.Execute(r.Context(), key, fp, func(ctx context.Context) (middleware.Result, error) {
		return c.run(ctx, w, r, body, next, &aborted, &rec), nil
	}, opts...)
	if rec != nil {
		// A response held until its work's transaction committed: sent
		// now that it did, dropped (and refused below) if it did not.
		switch {
		case err == nil && rec.heldOver:
			// Rolled back (see verdict): there is no answer to send.
			rec.drop()
			c.cfg.logger.ErrorContext(r.Context(), "nethttp: the handler's response outgrew the response limit while it was held until its transaction's commit; the transaction was rolled back",
				slog.Int("limit", c.cfg.maxResponse))
			c.writeProblem(w, r, http.StatusInternalServerError, problemResponseTooLarge,
				fmt.Sprintf("the response exceeds %d bytes, the most that is held until the request's database transaction commits; the transaction was rolled back, so nothing of the request was kept", c.cfg.maxResponse), 0)
			return
		case err == nil:
			rec.send()
		case !rec.drop():
			c.cfg.logger.ErrorContext(r.Context(), "nethttp: the work's transaction did not commit, but its response was written before the transaction began and went out",
				slog.String("error", err.Error()))
			return
		}
	}
	if aborted {
		// The handler aborted a response it had begun: it is recorded
		// as executed-not-replayable, and the abort goes on to the server.
		panic(http.ErrAbortHandler)
	}
	if err == nil {
		if out.Replayed {
			c.replay(w, r, out.Value)
		}
		return
	}
	c.refuse(w, r, err)
}

// reject answers a request refused before it reached the guard, and
// reports it.
func (c *core) reject(w http.ResponseWriter, r *http.Request, op middleware.CallOption, status int, problem, detail string) {
	c.guard.Bypass(r.Context(), middleware.EventRejected, errors.New("nethttp: "+problem+": "+detail), op)
	c.writeProblem(w, r, status, problem, detail, 0)
}

// operation names the request's operation for hooks and telemetry.
func (c *core) operation(r *http.Request) string {
	if c.cfg.operation != nil {
		return c.cfg.operation(r)
	}
	return patternOperation(r)
}

// patternOperation returns the ServeMux pattern that matched r, behind r's
// method when the pattern has none: "POST /orders/{id}"; "" before any
// ServeMux matched.
func patternOperation(r *http.Request) string {
	p := r.Pattern
	if p == "" {
		return ""
	}
	if before, _, ok := strings.Cut(p, " "); ok && !strings.Contains(before, "/") {
		return p
	}
	return r.Method + " " + p
}

// readBody reads the request body within the limit, or answers 413 (400
// for an unreadable body) and reports false. r.ContentLength only sizes
// the buffer: a decompressing middleware in front may have replaced r.Body
// and left ContentLength describing the old one.
func (c *core) readBody(w http.ResponseWriter, r *http.Request, op middleware.CallOption) ([]byte, bool) {
	if r.ContentLength > c.cfg.maxBody {
		c.reject(w, r, op, http.StatusRequestEntityTooLarge, problemBodyTooLarge,
			fmt.Sprintf("the body has %d bytes; at most %d are accepted", r.ContentLength, c.cfg.maxBody))
		return nil, false
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	body, err := readLimited(r.Body, c.cfg.maxBody, r.ContentLength)
	_ = r.Body.Close()
	var maxBytes *http.MaxBytesError
	switch {
	case errors.Is(err, errBodyTooLarge):
		c.reject(w, r, op, http.StatusRequestEntityTooLarge, problemBodyTooLarge,
			fmt.Sprintf("the body exceeds %d bytes", c.cfg.maxBody))
		return nil, false
	case errors.As(err, &maxBytes):
		// An http.MaxBytesReader in front of the middleware stopped it.
		c.reject(w, r, op, http.StatusRequestEntityTooLarge, problemBodyTooLarge,
			fmt.Sprintf("the body exceeds %d bytes", maxBytes.Limit))
		return nil, false
	case err != nil:
		// The client went away or sent a broken body (a bad gzip stream
		// behind a decompressing middleware, a torn chunked encoding):
		// nothing ran.
		c.reject(w, r, op, http.StatusBadRequest, problemBodyUnreadable, "the request body could not be read")
		return nil, false
	}
	return body, true
}

// restoreBody gives a request that passes through the body read from it.
func restoreBody(r *http.Request, body []byte) {
	if body == nil {
		return
	}
	useBody(r, new(bufferedBody), body)
}

// useBody makes b, unused, a reader over body and r's body (and GetBody).
func useBody(r *http.Request, b *bufferedBody, body []byte) {
	b.body = body
	b.r.Reset(body)
	r.Body = b
	r.ContentLength = int64(len(body))
	r.GetBody = b.again
}

// bufferedBody is io.NopCloser(bytes.NewReader(body)) in one allocation.
type bufferedBody struct {
	r    bytes.Reader
	body []byte
}

func (b *bufferedBody) Read(p []byte) (int, error) { return b.r.Read(p) }

func (b *bufferedBody) WriteTo(w io.Writer) (int64, error) { return b.r.WriteTo(w) }

func (*bufferedBody) Close() error { return nil }

// again returns a fresh reader over the same bytes, for GetBody.
func (b *bufferedBody) again() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(b.body)), nil
}

func (c *core) route(r *http.Request) string {
	if c.cfg.route != nil {
		return c.cfg.route(r)
	}
	return sentPath(r.URL)
}

// sentPath returns u's path as the client sent it, escapes kept (see
// WithRoute): u.RawPath whenever it spells u.Path, even where
// u.EscapedPath would not use it ("{", "|": echo and gin route on RawPath
// then too); else u.EscapedPath, also when a middleware in front rewrote
// Path without RawPath.
func sentPath(u *url.URL) string {
	if u.RawPath != "" {
		if p, err := url.PathUnescape(u.RawPath); err == nil && p == u.Path {
			return u.RawPath
		}
	}
	return u.EscapedPath()
}

// run calls the handler with a capturing writer and returns what to record.
// A panic with http.ErrAbortHandler after the response began sets
// *aborted, for the caller to re-panic once the record is written; before
// it, it re-panics at once and nothing is recorded.
func (c *core) run(ctx context.Context, w http.ResponseWriter, r *http.Request, body []byte, next func(http.ResponseWriter, *http.Request), aborted *bool, captured **capture) (res middleware.Result) {
	cw, rec := newCapture(w, c.keep, c.cfg.maxResponse)
	if _, can := middleware.TransactionBegun(ctx); can {
		// The store can commit the work's writes with its outcome: a
		// response written once the work began its transaction is held
		// until the commit.
		rec.began = func() bool {
			begun, _ := middleware.TransactionBegun(ctx)
			return begun
		}
		*captured = rec
	}
	req := r.WithContext(ctx)
	useBody(req, &rec.reqBody, body)
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		if p == http.ErrAbortHandler {
			if !rec.wrote && !rec.hijacked {
				panic(p) // aborted before answering anything: nothing is recorded
			}
			*aborted = true
			res = middleware.Result{NotReplayable: true}
			return
		}
		c.cfg.logger.ErrorContext(ctx, "nethttp: the handler panicked", slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
		if !rec.wrote {
			c.writeProblem(cw, req, http.StatusInternalServerError, problemInternal, "", 0)
		}
		res = c.verdict(rec, c.cfg.policy.Panic, ctx)
	}()
	next(cw, req)
	if !rec.wrote && !rec.hijacked {
		if ctx.Err() != nil {
			// The client went away and the handler answered nothing:
			// assume it gave up, and let a retry run it.
			return forget(ctx)
		}
		rec.WriteHeader(http.StatusOK)
	}
	return c.verdict(rec, c.cfg.policy.stores(rec.status, w.Header()), ctx)
}

// verdict decides what the guard records for a finished response.
func (c *core) verdict(rec *capture, store bool, ctx context.Context) middleware.Result {
	switch {
	case rec.heldOver:
		// Held past the limit: the rest of it is lost, so the work must
		// not commit (see Write).
		return forget(ctx)
	case rec.hijacked:
		return middleware.Result{NotReplayable: true}
	case rec.marked && rec.began != nil && rec.began():
		// Answered outside the capture, with writes that can still be
		// undone: rolled back rather than recorded (see MarkNotReplayable).
		return forget(ctx)
	case !store:
		return forget(ctx)
	case !rec.replayable():
		return middleware.Result{NotReplayable: true}
	}
	return middleware.Result{Value: rec.record()}
}

// forget is the result of a response that is not recorded: the claim is
// released and a retry runs the handler again.
func forget(ctx context.Context) middleware.Result {
	middleware.DoNotRecord(ctx)
	return middleware.Result{}
}

// keepHeader reports whether a response header is recorded and replayed
// (see WithReplayHeaders): Content-Encoding and Vary describe the recorded
// bytes, Cache-Control says who may keep them.
func (c *core) keepHeader(name string) bool {
	return c.cfg.replayHeaders[name] || name == "Content-Encoding" || name == "Vary" || name == "Cache-Control"
}

// replay writes a recorded response, unless it is content-coded in a way
// the retry does not accept.
func (c *core) replay(w http.ResponseWriter, r *http.Request, value []byte) {
	h := w.Header()
	status, body, err := decodeInto(value, func(name string, values []string) {
		if c.keepHeader(name) {
			h[name] = values
		}
	})
	undo := func() {
		// Remove the recorded headers already set.
		_, _, _ = decodeInto(value, func(name string, _ []string) { delete(h, name) })
	}
	if err != nil {
		undo()
		c.cfg.logger.ErrorContext(r.Context(), "nethttp: a recorded response could not be decoded", slog.String("error", err.Error()))
		c.writeProblem(w, r, http.StatusServiceUnavailable, problemUnavailable, "the recorded response is unreadable", c.cfg.retryAfter)
		return
	}
	if coding, ok := acceptsEncoding(r.Header.Values("Accept-Encoding"), h.Values("Content-Encoding")); !ok {
		undo()
		c.writeProblem(w, r, http.StatusConflict, problemNotReplayable,
			"the request with this key was executed, but its recorded response is encoded with "+strconv.Quote(coding)+
				", which this request's Accept-Encoding does not accept; retry with the first request's Accept-Encoding. It will not be executed again", 0)
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
func (c *core) refuse(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, middleware.ErrInvalidKey):
		// The key, with its namespace and scope, is too long for a
		// record key.
		c.writeProblem(w, r, http.StatusBadRequest, problemKeyMalformed, "the key is too long for its scope; use a shorter key", 0)
	case errors.Is(err, middleware.ErrCredentialsMismatch):
		c.writeProblem(w, r, http.StatusUnprocessableEntity, problemCredentialsMismatch,
			"this key was used by a request with other credentials; use a new key for a new request", 0)
	case errors.Is(err, middleware.ErrMismatch):
		c.writeProblem(w, r, http.StatusUnprocessableEntity, problemKeyReused,
			"this key was used with a different request (method, route, query or body); use a new key for a new request", 0)
	case errors.Is(err, middleware.ErrInProgress):
		c.writeProblem(w, r, http.StatusConflict, problemInProgress,
			"the first request with this key has not finished; retry later with the same key and request", c.cfg.retryAfter)
	case errors.Is(err, middleware.ErrNotReplayable):
		c.writeProblem(w, r, http.StatusConflict, problemNotReplayable,
			"the request with this key was executed, but its response could not be kept for replay (it was streamed, hijacked, aborted, "+
				"larger than the capture limit, or written outside the middleware); it will not be executed again", 0)
	case errors.Is(err, store.ErrWorkConflict):
		c.writeProblem(w, r, http.StatusConflict, problemTransactionConflict,
			"the request's database transaction conflicted with a concurrent one and was rolled back, so nothing of it was kept; retry with the same key and request", c.cfg.retryAfter)
	case errors.Is(err, store.ErrWorkFailed):
		c.writeProblem(w, r, http.StatusInternalServerError, problemTransactionFailed,
			"the request's database transaction failed at its commit and was rolled back, so nothing of it was kept", 0)
	case errors.Is(err, store.ErrUnsealable):
		// The request ran, and its record is there but cannot be opened:
		// running it again is never right, fail-open or not.
		c.cfg.logger.ErrorContext(r.Context(), "nethttp: a recorded response cannot be opened", slog.String("error", err.Error()))
		c.writeProblem(w, r, http.StatusServiceUnavailable, problemUnavailable,
			"the request with this key was executed, but its recorded response is unreadable; it will not be executed again", c.cfg.retryAfter)
	case errors.Is(err, middleware.ErrUnavailable) && idemkit.CodeOf(err).Permanent():
		// Retrying cannot help; the guard logged why.
		c.writeProblem(w, r, http.StatusInternalServerError, problemMisconfigured,
			"the idempotency backend refuses this service until its setup is fixed, so the request was not executed", 0)
	case errors.Is(err, middleware.ErrUnavailable):
		transient := idemkit.CodeOf(err).Transient()
		detail := "the idempotency backend cannot be reached, so the request was not executed; retry later with the same key"
		if !transient {
			detail = "the idempotency backend failed, so the request was not executed; retry later with the same key"
		}
		c.writeProblem(w, r, http.StatusServiceUnavailable, problemUnavailable, detail, c.cfg.retryAfter)
	case r.Context().Err() != nil:
		// The client is gone; there is nobody to answer.
	default:
		c.cfg.logger.ErrorContext(r.Context(), "nethttp: unexpected guard error", slog.String("error", err.Error()))
		c.writeProblem(w, r, http.StatusServiceUnavailable, problemUnavailable, "", c.cfg.retryAfter)
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

// acceptsEncoding reports whether the Accept-Encoding lines accept takes
// the Content-Encoding lines encodings, or returns the first coding
// refused. Identity always passes; no Accept-Encoding accepts no coding
// (RFC 9110 lets a server send one anyway, but not every client copes).
func acceptsEncoding(accept, encodings []string) (string, bool) {
	for _, line := range encodings {
		for coding := range strings.SplitSeq(line, ",") {
			coding = normalCoding(coding)
			if coding == "" || coding == "identity" {
				continue
			}
			if !accepted(accept, coding) {
				return coding, false
			}
		}
	}
	return "", true
}

// accepted reports whether the Accept-Encoding lines accept coding (a
// normalised, non-identity content coding).
func accepted(accept []string, coding string) bool {
	star, named := false, false
	for _, line := range accept {
		for item := range strings.SplitSeq(line, ",") {
			name, params, _ := strings.Cut(item, ";")
			name = normalCoding(name)
			if name != coding && name != "*" {
				continue
			}
			ok := qualityAbove0(params)
			if name == coding {
				if !ok {
					return false // an explicit exclusion wins
				}
				named = true
			} else {
				star = ok
			}
		}
	}
	return named || star
}

// normalCoding lower-cases and trims a content coding, and maps the x-
// aliases RFC 9110 §8.4.1 keeps to their names.
func normalCoding(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	switch s {
	case "x-gzip":
		return "gzip"
	case "x-compress":
		return "compress"
	}
	return s
}

// qualityAbove0 reports whether an Accept-Encoding item's q is above 0
// (absent: 1; unparsable: no).
func qualityAbove0(params string) bool {
	for p := range strings.SplitSeq(params, ";") {
		k, v, _ := strings.Cut(strings.TrimSpace(p), "=")
		if !strings.EqualFold(strings.TrimSpace(k), "q") {
			continue
		}
		q, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		return err == nil && q > 0
	}
	return true
}
