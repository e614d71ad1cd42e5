package echo5adapter_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v5"
	echomw "github.com/labstack/echo/v5/middleware"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/echo5adapter"
	"github.com/idemkit/idemkit/internal/httpsuite"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
)

// echoStack serves the suite's app for every path and method behind the
// adapter (after echo's Recover).
func echoStack(t *testing.T, g *middleware.Guard, opts []nethttp.Option, app http.Handler) http.Handler {
	e := newEcho()
	e.Use(echomw.Recover(), newIdem(t, g, echo5adapter.WithHTTPOptions(opts...)))
	e.Any("/*", echo.WrapHandler(app))
	return e
}

// TestBehaviourTable runs the HTTP behaviour suite (every row of the HTTP
// table) through echo v5, on the memory backend, and on memory records
// composed with memory locks.
func TestBehaviourTable(t *testing.T) {
	t.Run("memory", func(t *testing.T) { httpsuite.Run(t, echoStack) })
	t.Run("composed", func(t *testing.T) {
		httpsuite.RunWith(t, echoStack, httpsuite.Composed)
	})
}

func newEcho() *echo.Echo {
	e := echo.New()
	e.Logger = slog.New(slog.DiscardHandler)
	return e
}

func newIdem(t *testing.T, g *middleware.Guard, opts ...echo5adapter.Option) echo.MiddlewareFunc {
	t.Helper()
	opts = append([]echo5adapter.Option{echo5adapter.WithHTTPOptions(nethttp.WithLogger(slog.New(slog.DiscardHandler)))}, opts...)
	mw, err := echo5adapter.New(g, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

// passedThrough collects the operations of the passed-through outcomes.
type passedThrough struct {
	mu  sync.Mutex
	ops []string
}

func (p *passedThrough) hook() middleware.Option {
	return middleware.WithHook(middleware.HookFunc(func(_ context.Context, e middleware.Event) {
		if e.Kind == middleware.EventPassedThrough {
			p.mu.Lock()
			p.ops = append(p.ops, e.Operation)
			p.mu.Unlock()
		}
	}))
}

func (p *passedThrough) list() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.ops...)
}

// TestSkippedRequestsRunUnguarded: a skipped request needs no key, is
// never recorded and is reported as passed through under echo's route.
func TestSkippedRequestsRunUnguarded(t *testing.T) {
	var runs atomic.Int32
	var passed passedThrough
	e := newEcho()
	e.Use(newIdem(t, httpsuite.NewGuard(t, passed.hook()),
		echo5adapter.WithSkipper(func(c *echo.Context) bool { return strings.HasPrefix(c.Request().URL.Path, "/internal/") }),
		echo5adapter.WithHTTPOptions(nethttp.WithKeyRequired(true)),
	))
	h := func(c *echo.Context) error { return c.String(http.StatusCreated, fmt.Sprint("order ", runs.Add(1))) }
	e.POST("/orders", h)
	e.POST("/internal/:what", h)
	url := httpsuite.Serve(t, e)
	for i := range 2 {
		if got := httpsuite.Post(t, url+"/internal/orders", "k", `{}`); got.Status != http.StatusCreated || got.Replayed() || got.Body != fmt.Sprint("order ", i+1) {
			t.Fatalf("skipped request %d: %d %q replayed=%v", i, got.Status, got.Body, got.Replayed())
		}
	}
	if got := httpsuite.Post(t, url+"/internal/orders", "", `{}`); got.Status != http.StatusCreated {
		t.Fatalf("skipped request without a key: %d", got.Status)
	}
	if got := httpsuite.Post(t, url+"/orders", "", `{}`); got.Status != http.StatusBadRequest {
		t.Fatalf("guarded request without a key: %d; want 400", got.Status)
	}
	first := httpsuite.Post(t, url+"/orders", "k", `{}`)
	if again := httpsuite.Post(t, url+"/orders", "k", `{}`); !again.Replayed() || again.Body != first.Body {
		t.Fatalf("guarded retry: %d %q; want a replay of %q", again.Status, again.Body, first.Body)
	}
	if runs.Load() != 4 {
		t.Fatalf("ran %d times; want 4", runs.Load())
	}
	if ops := passed.list(); len(ops) != 3 || ops[0] != "POST /internal/:what" || ops[2] != "POST /internal/:what" {
		t.Fatalf("passed-through outcomes %q; want the 3 skipped requests, under echo's route", ops)
	}
}

// TestHandlerErrorsRenderedInsideTheCapture: a handler's error is
// rendered by echo's error handler inside the guard: what the client got
// is what the store policy records or forgets, and the error leaves
// neither twice nor at all. echo v5 finds the status through wrapping
// (echo.StatusCode), and its predefined errors are not *echo.HTTPError.
func TestHandlerErrorsRenderedInsideTheCapture(t *testing.T) {
	// nethttp's default store policy (2xx–4xx recorded), and one that
	// records every outcome, as Stripe's API does.
	defaultPolicy := nethttp.StorePolicy{Success: true, Redirection: true, ClientError: true}
	recordAll := nethttp.StorePolicy{Success: true, Redirection: true, ClientError: true, ServerError: true, Panic: true}
	for _, c := range []struct {
		name     string
		err      error
		policy   nethttp.StorePolicy
		status   int
		body     string
		replayed bool // the retry replays (else: runs again)
	}{
		{"HTTPError 4xx is recorded", echo.NewHTTPError(http.StatusPaymentRequired, "card declined"), defaultPolicy, 402, `{"message":"card declined"}`, true},
		{"HTTPError 409 is recorded", echo.NewHTTPError(http.StatusConflict, "already shipped"), defaultPolicy, 409, `{"message":"already shipped"}`, true},
		{"HTTPError 5xx is forgotten", echo.NewHTTPError(http.StatusServiceUnavailable, "try later"), defaultPolicy, 503, `{"message":"try later"}`, false},
		{"predefined 403 is recorded", echo.ErrForbidden, defaultPolicy, 403, `{"message":"Forbidden"}`, true},
		{"plain error renders 500, forgotten", errors.New("boom"), defaultPolicy, 500, `{"message":"Internal Server Error"}`, false},
		{"plain error, Stripe policy records it", errors.New("boom"), recordAll, 500, `{"message":"Internal Server Error"}`, true},
		{"wrapped HTTPError keeps its status", fmt.Errorf("charge: %w", echo.NewHTTPError(http.StatusBadRequest, "no amount")), defaultPolicy, 400, `{"message":"no amount"}`, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var runs, rendered, escaped atomic.Int32
			e := newEcho()
			e.HTTPErrorHandler = func(ctx *echo.Context, err error) {
				rendered.Add(1)
				echo.DefaultHTTPErrorHandler(false)(ctx, err)
			}
			e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
				return func(ctx *echo.Context) error {
					err := next(ctx)
					if err != nil {
						escaped.Add(1)
					}
					return err
				}
			}, newIdem(t, httpsuite.NewGuard(t), echo5adapter.WithHTTPOptions(nethttp.WithStorePolicy(c.policy))))
			e.POST("/orders", func(*echo.Context) error { runs.Add(1); return c.err })
			url := httpsuite.Serve(t, e)

			first := httpsuite.Post(t, url+"/orders", "k", `{}`)
			again := httpsuite.Post(t, url+"/orders", "k", `{}`)
			for i, got := range []httpsuite.Reply{first, again} {
				if got.Status != c.status || strings.TrimSpace(got.Body) != c.body {
					t.Fatalf("request %d: %d %q; want %d %s", i, got.Status, got.Body, c.status, c.body)
				}
			}
			wantRuns := int32(2)
			if c.replayed {
				wantRuns = 1
			}
			if again.Replayed() != c.replayed || runs.Load() != wantRuns {
				t.Fatalf("retry replayed=%v after %d runs; want replayed=%v, %d runs", again.Replayed(), runs.Load(), c.replayed, wantRuns)
			}
			if rendered.Load() != wantRuns || escaped.Load() != 0 {
				t.Fatalf("the error handler ran %d times and %d errors left the middleware; want %d and 0", rendered.Load(), escaped.Load(), wantRuns)
			}
		})
	}
}

// TestErrorRenderedOnce: an error handler that does not check Committed
// would render twice if the error escaped; it does not.
func TestErrorRenderedOnce(t *testing.T) {
	e := newEcho()
	e.HTTPErrorHandler = func(c *echo.Context, err error) {
		_ = c.JSON(http.StatusTeapot, map[string]string{"error": err.Error()})
	}
	e.Use(newIdem(t, httpsuite.NewGuard(t)))
	e.POST("/orders", func(*echo.Context) error { return errors.New("no tea") })
	url := httpsuite.Serve(t, e)
	first := httpsuite.Post(t, url+"/orders", "k", `{}`)
	again := httpsuite.Post(t, url+"/orders", "k", `{}`)
	if first.Status != http.StatusTeapot || strings.TrimSpace(first.Body) != `{"error":"no tea"}` || !again.Replayed() || again.Body != first.Body {
		t.Fatalf("first %d %q; retry %d %q replayed=%v", first.Status, first.Body, again.Status, again.Body, again.Replayed())
	}
	// Unguarded (no key), the error takes echo's own path.
	if got := httpsuite.Post(t, url+"/orders", "", `{}`); got.Status != http.StatusTeapot || strings.TrimSpace(got.Body) != `{"error":"no tea"}` {
		t.Fatalf("no key: %d %q", got.Status, got.Body)
	}
}

// TestOuterMiddlewareSeesTheResponse: a middleware in front of the adapter
// finds the *echo.Response (echo.UnwrapResponse) with the status, size and
// commit of what the client got, its Before hook run once, for executions,
// replays and refusals alike.
func TestOuterMiddlewareSeesTheResponse(t *testing.T) {
	type seen struct {
		status    int
		size      int64
		committed bool
		err       error
		before    int
	}
	obs := make(chan seen, 8)
	var runs, after atomic.Int32
	e := newEcho()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			resp, err := echo.UnwrapResponse(c.Response())
			if err != nil {
				return err
			}
			before := 0
			resp.Before(func() { before++ })
			err = next(c)
			obs <- seen{resp.Status, resp.Size, resp.Committed, err, before}
			return err
		}
	}, newIdem(t, httpsuite.NewGuard(t), echo5adapter.WithHTTPOptions(nethttp.WithKeyRequired(true))))
	e.POST("/orders", func(c *echo.Context) error {
		return c.JSON(http.StatusCreated, map[string]int32{"order": runs.Add(1)})
	}, func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error { after.Add(1); return next(c) }
	})
	url := httpsuite.Serve(t, e)
	for _, c := range []struct {
		name     string
		key      string
		body     string
		status   int
		replayed bool
	}{
		{"first", "k", `{"a":1}`, http.StatusCreated, false},
		{"replay", "k", `{"a":1}`, http.StatusCreated, true},
		{"mismatch", "k", `{"a":2}`, http.StatusUnprocessableEntity, false},
		{"no key", "", `{}`, http.StatusBadRequest, false},
	} {
		got := httpsuite.Post(t, url+"/orders", c.key, c.body)
		o := <-obs
		if got.Status != c.status || got.Replayed() != c.replayed {
			t.Fatalf("%s: %d replayed=%v; want %d replayed=%v", c.name, got.Status, got.Replayed(), c.status, c.replayed)
		}
		if o.status != c.status || o.size != int64(len(got.Body)) || !o.committed || o.err != nil || o.before != 1 {
			t.Fatalf("%s: the middleware in front saw %+v; want status %d, size %d, committed, no error, its Before hook run once", c.name, o, c.status, len(got.Body))
		}
	}
	if runs.Load() != 1 || after.Load() != 1 {
		t.Fatalf("handler ran %d times, route middleware %d; want 1 and 1", runs.Load(), after.Load())
	}
}

// payOrder binds the body after the guard read it, and answers with the
// route's parameter and echo's route.
func payOrder(runs *atomic.Int32) echo.HandlerFunc {
	return func(c *echo.Context) error {
		runs.Add(1)
		var in struct {
			Amount int `json:"amount"`
		}
		if err := c.Bind(&in); err != nil {
			return err
		}
		return c.JSON(http.StatusOK, map[string]any{"paid": c.Param("id"), "amount": in.Amount, "route": c.Path()})
	}
}

func TestRouteParams(t *testing.T) {
	var runs atomic.Int32
	e := newEcho()
	e.POST("/orders/:id/pay", payOrder(&runs), newIdem(t, httpsuite.NewGuard(t)))
	httpsuite.CheckPathsUnderOnePattern(t, httpsuite.Serve(t, e), runs.Load)
}

// TestGroupMiddleware: the adapter on a group guards the group's routes,
// named by their whole route, and leaves the others alone.
func TestGroupMiddleware(t *testing.T) {
	var runs atomic.Int32
	var passed passedThrough
	g := httpsuite.NewGuard(t, passed.hook())
	e := newEcho()
	api := e.Group("/api", newIdem(t, g, echo5adapter.WithHTTPOptions(nethttp.WithKeyRequired(true))))
	api.POST("/orders/:id/pay", payOrder(&runs))
	e.POST("/orders/:id/pay", payOrder(&runs))
	url := httpsuite.Serve(t, e)

	post := func(path, key string) httpsuite.Reply {
		return httpsuite.Post(t, url+path, key, `{"amount":5}`, "Content-Type", "application/json")
	}
	first := post("/api/orders/1/pay", "k")
	again := post("/api/orders/1/pay", "k")
	if first.Status != http.StatusOK || !strings.Contains(first.Body, `"route":"/api/orders/:id/pay"`) || !again.Replayed() || again.Body != first.Body {
		t.Fatalf("in the group: %d %q, then %d %q replayed=%v", first.Status, first.Body, again.Status, again.Body, again.Replayed())
	}
	if got := post("/api/orders/1/pay", ""); got.Status != http.StatusBadRequest {
		t.Fatalf("in the group without a key: %d; want 400", got.Status)
	}
	for range 2 {
		if got := post("/orders/1/pay", "k"); got.Status != http.StatusOK || got.Replayed() {
			t.Fatalf("outside the group: %d replayed=%v; want every request run", got.Status, got.Replayed())
		}
	}
	if runs.Load() != 3 {
		t.Fatalf("ran %d times; want 3", runs.Load())
	}
	if ops := passed.list(); len(ops) != 0 {
		t.Fatalf("passed-through outcomes %q; the routes outside the group never reach the adapter", ops)
	}
}

func TestUnmatchedRoute(t *testing.T) {
	e := newEcho()
	e.Use(newIdem(t, httpsuite.NewGuard(t)))
	e.POST("/orders", func(c *echo.Context) error { return c.NoContent(http.StatusCreated) })
	httpsuite.CheckUnmatchedRouteRecorded(t, httpsuite.Serve(t, e))
}

func TestScopeFromEchoContext(t *testing.T) {
	var runs atomic.Int32
	e := newEcho()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error { c.Set("tenant", c.Request().Header.Get("X-Tenant")); return next(c) }
	}, newIdem(t, httpsuite.NewGuard(t), echo5adapter.WithHTTPOptions(nethttp.WithScope(func(r *http.Request) string {
		tenant, _ := echo5adapter.ContextOf(r).Get("tenant").(string)
		return tenant
	}))))
	e.POST("/orders", func(c *echo.Context) error {
		if echo5adapter.ContextOf(c.Request()) != c {
			t.Error("ContextOf in the handler is not the handler's *echo.Context")
		}
		return c.JSON(http.StatusCreated, map[string]int32{"order": runs.Add(1)})
	})
	httpsuite.CheckTenantScope(t, httpsuite.Serve(t, e))
	if echo5adapter.ContextOf(httptest.NewRequest(http.MethodGet, "/", nil)) != nil {
		t.Fatal("ContextOf of a request the middleware never saw is not nil")
	}
}

func TestStreamedIsNotReplayable(t *testing.T) {
	var runs atomic.Int32
	e := newEcho()
	e.POST("/stream", func(c *echo.Context) error {
		runs.Add(1)
		c.Response().Header().Set(echo.HeaderContentType, "text/event-stream")
		c.Response().WriteHeader(http.StatusOK)
		for i := range 3 {
			_, _ = fmt.Fprintf(c.Response(), "data: %d\n\n", i)
			if err := http.NewResponseController(c.Response()).Flush(); err != nil {
				return err
			}
		}
		return nil
	}, newIdem(t, httpsuite.NewGuard(t)))
	url := httpsuite.Serve(t, e)
	first := httpsuite.Post(t, url+"/stream", "s", `{}`)
	if first.Status != http.StatusOK || first.Body != "data: 0\n\ndata: 1\n\ndata: 2\n\n" {
		t.Fatalf("stream: %d %q", first.Status, first.Body)
	}
	httpsuite.WantProblem(t, httpsuite.Post(t, url+"/stream", "s", `{}`), http.StatusConflict, "response-not-replayable")
	if runs.Load() != 1 {
		t.Fatalf("ran %d times", runs.Load())
	}
}

func TestNewRefusesNilGuardAndInvalidOptions(t *testing.T) {
	if _, err := echo5adapter.New(nil); err == nil {
		t.Fatal("a nil guard was accepted")
	}
	g := httpsuite.NewGuard(t)
	for _, o := range httpsuite.InvalidOptions() {
		if mw, err := echo5adapter.New(g, echo5adapter.WithHTTPOptions(o)); err == nil || mw != nil {
			t.Fatal("an invalid option was accepted")
		}
	}
}

func TestNewRefusesMisconfigurationNamingTheFix(t *testing.T) {
	httpsuite.CheckMisconfigurationsRefused(t, func(g *middleware.Guard, opts ...nethttp.Option) error {
		mw, err := echo5adapter.New(g, echo5adapter.WithHTTPOptions(opts...))
		if (mw == nil) != (err != nil) {
			t.Fatalf("New gave middleware %v with error %v", mw != nil, err)
		}
		return err
	})
	// A nil option of the adapter's own.
	mw, err := echo5adapter.New(httpsuite.NewGuard(t), echo5adapter.WithErrorHandler(true), nil)
	if mw != nil || !errors.Is(err, idemkit.ErrInvalidArgument) || !strings.Contains(err.Error(), "an option is nil; remove it") {
		t.Fatalf("a nil echo5adapter.Option: %v", err)
	}
}

// TestGzipInsideTheGuard: echo's Gzip after the idempotency middleware
// compresses inside the capture, so the record holds gzip bytes; the
// replay carries their Content-Encoding (and Vary), and a retry that does
// not accept gzip gets 409 response-not-replayable, never the raw bytes.
func TestGzipInsideTheGuard(t *testing.T) {
	var runs atomic.Int32
	e := newEcho()
	e.Use(newIdem(t, httpsuite.NewGuard(t)), echomw.Gzip())
	e.POST("/orders", func(c *echo.Context) error {
		runs.Add(1)
		return c.JSON(http.StatusCreated, map[string]string{"order": "42"})
	})
	url := httpsuite.Serve(t, e)
	// http.DefaultClient asks for gzip and decompresses transparently.
	first := httpsuite.Post(t, url+"/orders", "gz-1", `{}`)
	second := httpsuite.Post(t, url+"/orders", "gz-1", `{}`)
	if first.Status != http.StatusCreated || !strings.Contains(first.Body, `"order":"42"`) {
		t.Fatalf("first: %d %q", first.Status, first.Body)
	}
	if !second.Replayed() || second.Status != first.Status || second.Body != first.Body || second.Header.Get("Vary") != "Accept-Encoding" {
		t.Fatalf("replay: %d %q replayed=%v Vary %q; want the first answer", second.Status, second.Body, second.Replayed(), second.Header.Get("Vary"))
	}
	identity := httpsuite.Post(t, url+"/orders", "gz-1", `{}`, "Accept-Encoding", "identity")
	httpsuite.WantProblem(t, identity, http.StatusConflict, "response-not-replayable")
	if n := runs.Load(); n != 1 {
		t.Fatalf("the handler ran %d times", n)
	}
}

// TestDecompressInFront: echo's Decompress before the idempotency
// middleware swaps the body for a gzip reader and leaves ContentLength at
// the compressed size; the handler still gets the whole body.
func TestDecompressInFront(t *testing.T) {
	e := newEcho()
	e.Use(echomw.Decompress(), newIdem(t, httpsuite.NewGuard(t)))
	e.POST("/echo", func(c *echo.Context) error {
		b, err := io.ReadAll(c.Request().Body)
		if err != nil {
			return err
		}
		return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, b)
	})
	httpsuite.CheckRequestDecompressedInFront(t, httpsuite.Serve(t, e))
}

// TestOperationIsEchosRoute: hooks, outcome watchers and the handler see
// the method and the route echo matched (c.Path()), not the path;
// nethttp.WithOperation overrides it.
func TestOperationIsEchosRoute(t *testing.T) {
	httpsuite.CheckOperations(t, func(t *testing.T, g *middleware.Guard, opts []nethttp.Option, h http.Handler) http.Handler {
		e := newEcho()
		e.POST("/orders/:id", echo.WrapHandler(h), newIdem(t, g, echo5adapter.WithHTTPOptions(opts...)))
		return e
	}, "POST /orders/:id")
}

// TestOutcomeWatchedByEchoMiddleware: an echo middleware in front of the
// adapter that watches the outcome through the request's context (as an
// access log does) sees every request's, with echo's route as the
// operation.
func TestOutcomeWatchedByEchoMiddleware(t *testing.T) {
	outcomes := make(chan middleware.Event, 8)
	e := newEcho()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			ctx, outcome := middleware.WatchOutcome(c.Request().Context())
			c.SetRequest(c.Request().WithContext(ctx))
			err := next(c)
			ev, _ := outcome()
			outcomes <- ev
			return err
		}
	}, newIdem(t, httpsuite.NewGuard(t), echo5adapter.WithHTTPOptions(nethttp.WithKeyRequired(true))))
	e.POST("/orders/:id", func(c *echo.Context) error {
		return c.JSON(http.StatusCreated, map[string]string{"order": c.Param("id")})
	})
	url := httpsuite.Serve(t, e)
	for _, c := range []struct {
		key, body string
		kind      middleware.EventKind
	}{
		{"k", `{"a":1}`, middleware.EventExecuted},
		{"k", `{"a":1}`, middleware.EventReplayed},
		{"k", `{"a":2}`, middleware.EventMismatch},
		{"", `{}`, middleware.EventRejected},
	} {
		httpsuite.Post(t, url+"/orders/1", c.key, c.body)
		select {
		case ev := <-outcomes:
			if ev.Kind != c.kind || ev.Operation != "POST /orders/:id" {
				t.Fatalf("%s: the middleware in front saw %s %q; want %s POST /orders/:id", c.body, ev.Kind, ev.Operation, c.kind)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the middleware in front saw no request")
		}
	}
}

// TestErrorHandlerRendersRefusals: with WithErrorHandler(true), refusals
// are returned as errors: the middleware in front sees them (with the
// status through echo.StatusCode, wrapping the nethttp.Problem); echo's
// default error handler answers with the status and the problem's fields,
// echo's RFC 9457 handler with the same fields as application/problem+json,
// and a custom one can write the application's own format; the 500 of a
// panic is rendered by the error handler inside the guard, so a store
// policy that records panics replays what the client got.
func TestErrorHandlerRendersRefusals(t *testing.T) {
	type seen struct {
		status     int
		kind       string
		retry      string
		sameStatus bool // the Problem's status is the error's
	}
	for _, handler := range []string{"default", "rfc9457", "custom"} {
		t.Run(handler, func(t *testing.T) {
			front := make(chan seen, 16)
			var runs atomic.Int32
			e := newEcho()
			switch handler {
			case "rfc9457":
				e.HTTPErrorHandler = echo.ProblemDetailsHTTPErrorHandler(false)
			case "custom":
				e.HTTPErrorHandler = func(c *echo.Context, err error) {
					var p nethttp.Problem
					if !errors.As(err, &p) {
						echo.DefaultHTTPErrorHandler(false)(c, err)
						return
					}
					_ = c.JSON(p.Status, map[string]any{"error": map[string]string{"code": p.Kind, "message": p.Detail}})
				}
			}
			e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
				return func(c *echo.Context) error {
					err := next(c)
					s := seen{status: echo.StatusCode(err), retry: c.Response().Header().Get("Retry-After")}
					var p nethttp.Problem
					if errors.As(err, &p) {
						s.kind, s.sameStatus = p.Kind, p.Status == s.status
					}
					front <- s
					return err
				}
			}, newIdem(t, httpsuite.NewGuard(t), echo5adapter.WithErrorHandler(true), echo5adapter.WithHTTPOptions(
				nethttp.WithKeyRequired(true), nethttp.WithWaitForResult(false), nethttp.WithRetryAfter(2*time.Second),
				nethttp.WithStorePolicy(nethttp.StorePolicy{Success: true, ClientError: true, ServerError: true, Panic: true}))))
			e.POST("/orders", func(c *echo.Context) error {
				n := runs.Add(1)
				if c.QueryParam("sleep") != "" {
					time.Sleep(300 * time.Millisecond)
				}
				if c.QueryParam("panic") != "" {
					panic("on purpose")
				}
				return c.JSON(http.StatusCreated, map[string]int32{"order": n})
			})
			url := httpsuite.Serve(t, e)
			check := func(name string, got httpsuite.Reply, status int, kind, retry string) {
				t.Helper()
				s := <-front
				if s.status != status || s.kind != kind || !s.sameStatus || s.retry != retry {
					t.Fatalf("%s: the middleware in front saw %+v; want an error with status %d, problem %s, Retry-After %q", name, s, status, kind, retry)
				}
				if got.Status != status || got.Header.Get("Cache-Control") != "no-store" || got.Header.Get("Retry-After") != retry {
					t.Fatalf("%s: %d %v; want %d, no-store, Retry-After %q", name, got.Status, got.Header, status, retry)
				}
				var body map[string]any
				if err := json.Unmarshal([]byte(got.Body), &body); err != nil {
					t.Fatalf("%s: %q: %v", name, got.Body, err)
				}
				if handler == "custom" {
					if e, _ := body["error"].(map[string]any); e["code"] != kind {
						t.Fatalf("%s: %q; want the custom error handler's format", name, got.Body)
					}
					return
				}
				if body["type"] != "urn:idemkit:problem:"+kind || body["status"] != float64(status) || body["title"] == "" || body["detail"] == "" {
					t.Fatalf("%s: %q; want the problem's fields", name, got.Body)
				}
				if ct := got.Header.Get("Content-Type"); (handler == "rfc9457") != strings.HasPrefix(ct, "application/problem+json") {
					t.Fatalf("%s: Content-Type %q from the %s error handler", name, ct, handler)
				}
			}
			check("no key", httpsuite.Post(t, url+"/orders", "", `{}`), http.StatusBadRequest, "idempotency-key-missing", "")
			httpsuite.Post(t, url+"/orders", "k", `{"a":1}`)
			if s := <-front; s.status != 0 {
				t.Fatalf("an execution reached the middleware in front as an error: %+v", s)
			}
			check("mismatch", httpsuite.Post(t, url+"/orders", "k", `{"a":2}`), http.StatusUnprocessableEntity, "idempotency-key-reused", "")
			done := make(chan struct{})
			go func() {
				defer close(done)
				httpsuite.Post(t, url+"/orders?sleep=1", "slow", `{}`)
			}()
			for deadline := time.Now().Add(10 * time.Second); runs.Load() < 2; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the slow request did not start")
				}
			}
			check("in progress", httpsuite.Post(t, url+"/orders?sleep=1", "slow", `{}`), http.StatusConflict, "idempotency-key-in-progress", "2")
			<-done
			<-front

			// The panic's 500: rendered inside the guard, recorded, replayed.
			first := httpsuite.Post(t, url+"/orders?panic=1", "p", `{}`)
			<-front
			again := httpsuite.Post(t, url+"/orders?panic=1", "p", `{}`)
			<-front
			if first.Status != http.StatusInternalServerError || !again.Replayed() || again.Body != first.Body || !strings.Contains(first.Body, "internal-error") {
				t.Fatalf("panic: %d %q, then %d %q replayed=%v", first.Status, first.Body, again.Status, again.Body, again.Replayed())
			}
			if runs.Load() != 3 {
				t.Fatalf("the handler ran %d times; want 3", runs.Load())
			}
		})
	}
}
