package echoadapter_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/labstack/echo/v4"
	echomw "github.com/labstack/echo/v4/middleware"

	"github.com/idemkit/idemkit/echoadapter"
	"github.com/idemkit/idemkit/lock/memlock"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/nethttp/httpsuite"
	"github.com/idemkit/idemkit/store/memstore"
)

// echoStack serves the suite's app for every path and method behind the
// adapter (after echo's Recover), on a real loopback listener.
func echoStack(t *testing.T, g *middleware.Guard, opts []nethttp.Option, app http.Handler) string {
	e := newEcho()
	e.Use(echomw.Recover(), newIdem(t, g, echoadapter.Config{Options: opts}))
	e.Any("/*", echo.WrapHandler(app))
	return serve(t, e)
}

// TestBehaviour runs the HTTP behaviour suite (every row of the HTTP table)
// through echo, on memory backends that combine their round trips and on
// plain ones.
func TestBehaviour(t *testing.T) {
	t.Run("combined", func(t *testing.T) { httpsuite.Run(t, echoStack) })
	t.Run("plain", func(t *testing.T) {
		httpsuite.RunWith(t, echoStack, func(t *testing.T) httpsuite.Backends {
			s := memstore.New()
			return httpsuite.Backends{Store: s, Locker: memlock.New(), Break: func() { _ = s.Close() }}
		})
	})
}

func newEcho() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Logger.SetOutput(io.Discard)
	return e
}

func newGuard(t *testing.T) *middleware.Guard {
	t.Helper()
	l := memlock.New()
	g, err := middleware.New(memstore.New(memstore.WithLocker(l)), l)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func newIdem(t *testing.T, g *middleware.Guard, config echoadapter.Config) echo.MiddlewareFunc {
	t.Helper()
	config.Options = append([]nethttp.Option{nethttp.WithLogger(slog.New(slog.DiscardHandler))}, config.Options...)
	mw, err := echoadapter.Middleware(g, config)
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

type reply struct {
	status int
	header http.Header
	body   string
}

func (r reply) replayed() bool { return r.header.Get("Idempotent-Replayed") == "true" }

func post(t *testing.T, url, key, body string, header ...string) reply {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, string(b)}
}

func TestSkipper(t *testing.T) {
	var runs atomic.Int32
	e := newEcho()
	e.Use(newIdem(t, newGuard(t), echoadapter.Config{
		Skipper: func(c echo.Context) bool { return strings.HasPrefix(c.Request().URL.Path, "/internal/") },
		Options: []nethttp.Option{nethttp.WithKeyRequired(true)},
	}))
	h := func(c echo.Context) error { return c.String(http.StatusCreated, fmt.Sprint("order ", runs.Add(1))) }
	e.POST("/orders", h)
	e.POST("/internal/orders", h)
	url := serve(t, e)
	for i := range 2 {
		// Skipped: no key needed, nothing recorded, every request runs.
		if got := post(t, url+"/internal/orders", "k", `{}`); got.status != http.StatusCreated || got.replayed() || got.body != fmt.Sprint("order ", i+1) {
			t.Fatalf("skipped request %d: %d %q replayed=%v", i, got.status, got.body, got.replayed())
		}
	}
	if got := post(t, url+"/internal/orders", "", `{}`); got.status != http.StatusCreated {
		t.Fatalf("skipped request without a key: %d", got.status)
	}
	if got := post(t, url+"/orders", "", `{}`); got.status != http.StatusBadRequest {
		t.Fatalf("guarded request without a key: %d; want 400", got.status)
	}
	first := post(t, url+"/orders", "k", `{}`)
	if again := post(t, url+"/orders", "k", `{}`); !again.replayed() || again.body != first.body {
		t.Fatalf("guarded retry: %d %q; want a replay of %q", again.status, again.body, first.body)
	}
	if runs.Load() != 4 {
		t.Fatalf("ran %d times; want 4", runs.Load())
	}
}

// A handler's error is rendered by echo's error handler inside the guard:
// what the client got is what the store policy records or forgets, and the
// error leaves neither twice nor at all.
func TestHandlerErrorsRenderedInsideTheCapture(t *testing.T) {
	for _, c := range []struct {
		name     string
		err      error
		policy   nethttp.StorePolicy
		status   int
		body     string
		replayed bool // the retry replays (else: runs again)
	}{
		{"HTTPError 4xx is recorded", echo.NewHTTPError(http.StatusPaymentRequired, "card declined"), nethttp.DefaultStorePolicy, 402, `{"message":"card declined"}`, true},
		{"HTTPError 409 is recorded", echo.NewHTTPError(http.StatusConflict, "already shipped"), nethttp.DefaultStorePolicy, 409, `{"message":"already shipped"}`, true},
		{"HTTPError 5xx is forgotten", echo.NewHTTPError(http.StatusServiceUnavailable, "try later"), nethttp.DefaultStorePolicy, 503, `{"message":"try later"}`, false},
		{"plain error renders 500, forgotten", errors.New("boom"), nethttp.DefaultStorePolicy, 500, `{"message":"Internal Server Error"}`, false},
		{"plain error, Stripe policy records it", errors.New("boom"), nethttp.StripeStorePolicy, 500, `{"message":"Internal Server Error"}`, true},
		{"wrapped HTTPError", fmt.Errorf("charge: %w", echo.NewHTTPError(http.StatusBadRequest, "no amount")), nethttp.DefaultStorePolicy, 500, `{"message":"Internal Server Error"}`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var runs, rendered, escaped atomic.Int32
			e := newEcho()
			e.HTTPErrorHandler = func(err error, ctx echo.Context) {
				rendered.Add(1)
				e.DefaultHTTPErrorHandler(err, ctx)
			}
			e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
				return func(ctx echo.Context) error {
					err := next(ctx)
					if err != nil {
						escaped.Add(1)
					}
					return err
				}
			}, newIdem(t, newGuard(t), echoadapter.Config{Options: []nethttp.Option{nethttp.WithStorePolicy(c.policy)}}))
			e.POST("/orders", func(echo.Context) error { runs.Add(1); return c.err })
			url := serve(t, e)

			first := post(t, url+"/orders", "k", `{}`)
			again := post(t, url+"/orders", "k", `{}`)
			for i, got := range []reply{first, again} {
				if got.status != c.status || strings.TrimSpace(got.body) != c.body {
					t.Fatalf("request %d: %d %q; want %d %s", i, got.status, got.body, c.status, c.body)
				}
			}
			wantRuns, wantRendered := int32(2), int32(2)
			if c.replayed {
				wantRuns, wantRendered = 1, 1
			}
			if again.replayed() != c.replayed || runs.Load() != wantRuns {
				t.Fatalf("retry replayed=%v after %d runs; want replayed=%v, %d runs", again.replayed(), runs.Load(), c.replayed, wantRuns)
			}
			if rendered.Load() != wantRendered || escaped.Load() != 0 {
				t.Fatalf("the error handler ran %d times and %d errors left the middleware; want %d and 0", rendered.Load(), escaped.Load(), wantRendered)
			}
		})
	}
}

// An error handler that does not check Committed would render twice if the
// error escaped; it does not.
func TestErrorRenderedOnce(t *testing.T) {
	e := newEcho()
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		_ = c.JSON(http.StatusTeapot, map[string]string{"error": err.Error()})
	}
	e.Use(newIdem(t, newGuard(t), echoadapter.Config{}))
	e.POST("/orders", func(echo.Context) error { return errors.New("no tea") })
	url := serve(t, e)
	first := post(t, url+"/orders", "k", `{}`)
	again := post(t, url+"/orders", "k", `{}`)
	if first.status != http.StatusTeapot || strings.TrimSpace(first.body) != `{"error":"no tea"}` || !again.replayed() || again.body != first.body {
		t.Fatalf("first %d %q; retry %d %q replayed=%v", first.status, first.body, again.status, again.body, again.replayed())
	}
	// Unguarded (no key), the error takes echo's own path.
	if got := post(t, url+"/orders", "", `{}`); got.status != http.StatusTeapot || strings.TrimSpace(got.body) != `{"error":"no tea"}` {
		t.Fatalf("no key: %d %q", got.status, got.body)
	}
}

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
		return func(c echo.Context) error {
			before := 0
			c.Response().Before(func() { before++ })
			err := next(c)
			obs <- seen{c.Response().Status, c.Response().Size, c.Response().Committed, err, before}
			return err
		}
	}, newIdem(t, newGuard(t), echoadapter.Config{Options: []nethttp.Option{nethttp.WithKeyRequired(true)}}))
	e.POST("/orders", func(c echo.Context) error {
		return c.JSON(http.StatusCreated, map[string]int32{"order": runs.Add(1)})
	}, func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { after.Add(1); return next(c) }
	})
	url := serve(t, e)
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
		got := post(t, url+"/orders", c.key, c.body)
		o := <-obs
		if got.status != c.status || got.replayed() != c.replayed {
			t.Fatalf("%s: %d replayed=%v; want %d replayed=%v", c.name, got.status, got.replayed(), c.status, c.replayed)
		}
		if o.status != c.status || o.size != int64(len(got.body)) || !o.committed || o.err != nil || o.before != 1 {
			t.Fatalf("%s: the middleware in front saw %+v; want status %d, size %d, committed, no error, its Before hook run once", c.name, o, c.status, len(got.body))
		}
	}
	if runs.Load() != 1 || after.Load() != 1 {
		t.Fatalf("handler ran %d times, route middleware %d; want 1 and 1", runs.Load(), after.Load())
	}
}

func TestRouteParams(t *testing.T) {
	var runs atomic.Int32
	e := newEcho()
	e.POST("/orders/:id/pay", func(c echo.Context) error {
		runs.Add(1)
		var in struct {
			Amount int `json:"amount"`
		}
		if err := c.Bind(&in); err != nil {
			return err
		}
		return c.JSON(http.StatusOK, map[string]any{"paid": c.Param("id"), "amount": in.Amount, "route": c.Path()})
	}, newIdem(t, newGuard(t), echoadapter.Config{}))
	url := serve(t, e)
	first := post(t, url+"/orders/1/pay", "k", `{"amount":5}`, "Content-Type", "application/json")
	if first.status != http.StatusOK || !strings.Contains(first.body, `"paid":"1"`) || !strings.Contains(first.body, `"amount":5`) {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	if got := post(t, url+"/orders/2/pay", "k", `{"amount":5}`, "Content-Type", "application/json"); got.status != http.StatusUnprocessableEntity {
		t.Fatalf("/orders/2/pay with order 1's key: %d %s; want 422", got.status, got.body)
	}
	if got := post(t, url+"/orders/1/pay", "k", `{"amount":5}`, "Content-Type", "application/json"); !got.replayed() || got.body != first.body {
		t.Fatalf("the same path: %d %s; want a replay", got.status, got.body)
	}
	if runs.Load() != 1 {
		t.Fatalf("ran %d times", runs.Load())
	}
}

func TestUnmatchedRoute(t *testing.T) {
	e := newEcho()
	e.Use(newIdem(t, newGuard(t), echoadapter.Config{}))
	e.POST("/orders", func(c echo.Context) error { return c.NoContent(http.StatusCreated) })
	url := serve(t, e)
	first := post(t, url+"/nowhere", "n", `{}`)
	again := post(t, url+"/nowhere", "n", `{}`)
	if first.status != http.StatusNotFound || again.status != http.StatusNotFound || !again.replayed() || again.body != first.body {
		t.Fatalf("unmatched route: %d %q, then %d %q replayed=%v", first.status, first.body, again.status, again.body, again.replayed())
	}
}

func TestScopeFromEchoContext(t *testing.T) {
	var runs atomic.Int32
	e := newEcho()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { c.Set("tenant", c.Request().Header.Get("X-Tenant")); return next(c) }
	}, newIdem(t, newGuard(t), echoadapter.Config{Options: []nethttp.Option{nethttp.WithScope(func(r *http.Request) string {
		tenant, _ := echoadapter.ContextOf(r).Get("tenant").(string)
		return tenant
	})}}))
	e.POST("/orders", func(c echo.Context) error {
		if echoadapter.ContextOf(c.Request()) != c {
			t.Error("ContextOf in the handler is not the handler's echo.Context")
		}
		return c.JSON(http.StatusCreated, map[string]int32{"order": runs.Add(1)})
	})
	url := serve(t, e)
	a := post(t, url+"/orders", "k", `{}`, "X-Tenant", "acme")
	b := post(t, url+"/orders", "k", `{}`, "X-Tenant", "globex")
	if b.replayed() || a.body == b.body {
		t.Fatal("one tenant's key replayed another tenant's response")
	}
	if got := post(t, url+"/orders", "k", `{}`, "X-Tenant", "acme"); !got.replayed() || got.body != a.body {
		t.Fatal("a tenant's retry did not replay")
	}
	if echoadapter.ContextOf(httptest.NewRequest(http.MethodGet, "/", nil)) != nil {
		t.Fatal("ContextOf of a request the middleware never saw is not nil")
	}
}

func TestStreamedIsNotReplayable(t *testing.T) {
	var runs atomic.Int32
	e := newEcho()
	e.POST("/stream", func(c echo.Context) error {
		runs.Add(1)
		c.Response().Header().Set(echo.HeaderContentType, "text/event-stream")
		c.Response().WriteHeader(http.StatusOK)
		for i := range 3 {
			_, _ = fmt.Fprintf(c.Response(), "data: %d\n\n", i)
			c.Response().Flush()
		}
		return nil
	}, newIdem(t, newGuard(t), echoadapter.Config{}))
	url := serve(t, e)
	first := post(t, url+"/stream", "s", `{}`)
	if first.status != http.StatusOK || first.body != "data: 0\n\ndata: 1\n\ndata: 2\n\n" {
		t.Fatalf("stream: %d %q", first.status, first.body)
	}
	again := post(t, url+"/stream", "s", `{}`)
	var p nethttp.Problem
	if again.status != http.StatusConflict || json.Unmarshal([]byte(again.body), &p) != nil || p.Type != nethttp.DefaultProblemTypeBase+nethttp.ProblemNotReplayable {
		t.Fatalf("retry: %d %q; want 409 %s", again.status, again.body, nethttp.ProblemNotReplayable)
	}
	if runs.Load() != 1 {
		t.Fatalf("ran %d times", runs.Load())
	}
}

func TestConstruction(t *testing.T) {
	if _, err := echoadapter.Middleware(nil, echoadapter.Config{}); err == nil {
		t.Fatal("a nil guard was accepted")
	}
	g := newGuard(t)
	for _, o := range []nethttp.Option{nethttp.WithHeader("bad header"), nethttp.WithMaxBodyBytes(0), nethttp.WithRetryAfter(-1)} {
		if mw, err := echoadapter.Middleware(g, echoadapter.Config{Options: []nethttp.Option{o}}); err == nil || mw != nil {
			t.Fatal("an invalid option was accepted")
		}
	}
}
