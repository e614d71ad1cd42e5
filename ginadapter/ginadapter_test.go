package ginadapter_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idemkit/ginadapter"
	"github.com/idemkit/idemkit/lock/memlock"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/nethttp/httpsuite"
	"github.com/idemkit/idemkit/store/memstore"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	os.Exit(m.Run())
}

// ginStack serves the suite's app for every path and method behind the
// adapter (after gin.Recovery, as the package doc advises), on a real
// loopback listener.
func ginStack(t *testing.T, g *middleware.Guard, opts []nethttp.Option, app http.Handler) string {
	idem := newIdem(t, g, opts...)
	r := gin.New()
	r.Use(gin.Recovery(), idem)
	r.Any("/*path", gin.WrapH(app))
	return serve(t, r)
}

// TestBehaviour runs the HTTP behaviour suite (every row of the HTTP table)
// through gin, on memory backends that combine their round trips and on
// plain ones.
func TestBehaviour(t *testing.T) {
	t.Run("combined", func(t *testing.T) { httpsuite.Run(t, ginStack) })
	t.Run("plain", func(t *testing.T) {
		httpsuite.RunWith(t, ginStack, func(t *testing.T) httpsuite.Backends {
			s := memstore.New()
			return httpsuite.Backends{Store: s, Locker: memlock.New(), Break: func() { _ = s.Close() }}
		})
	})
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

func newIdem(t *testing.T, g *middleware.Guard, opts ...nethttp.Option) gin.HandlerFunc {
	t.Helper()
	opts = append([]nethttp.Option{nethttp.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	h, err := ginadapter.New(g, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return h
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

func (r reply) replayed() bool { return r.header.Get("Idempotent-Replayed") == "true" }

// seen is what the middleware in front of the adapter observes once the
// chain returns.
type seen struct {
	aborted bool
	status  int
	size    int
	written bool
}

func TestAbortChain(t *testing.T) {
	obs := make(chan seen, 16)
	var after, handler, never atomic.Int32
	r := gin.New()
	r.Use(func(c *gin.Context) {
		c.Next()
		obs <- seen{c.IsAborted(), c.Writer.Status(), c.Writer.Size(), c.Writer.Written()}
	}, newIdem(t, newGuard(t), nethttp.WithKeyRequired(true)), func(c *gin.Context) { after.Add(1) })
	r.POST("/orders", func(c *gin.Context) {
		n := handler.Add(1)
		c.JSON(http.StatusCreated, gin.H{"order": n})
	})
	r.POST("/forbidden", func(c *gin.Context) {
		handler.Add(1)
		c.AbortWithStatusJSON(http.StatusForbidden, gin.H{"error": "not yours"})
	}, func(c *gin.Context) { never.Add(1) })
	url := serve(t, r)

	check := func(name string, got reply, status int, replayed, aborted bool) {
		t.Helper()
		o := <-obs
		if got.status != status || got.replayed() != replayed {
			t.Fatalf("%s: %d replayed=%v %q; want %d replayed=%v", name, got.status, got.replayed(), got.body, status, replayed)
		}
		if o.aborted != aborted || o.status != status || o.size != len(got.body) || !o.written {
			t.Fatalf("%s: the middleware in front saw %+v; want aborted=%v, status %d, size %d, written", name, o, aborted, status, len(got.body))
		}
	}
	first := post(t, url+"/orders", "k", `{"a":1}`)
	check("first", first, http.StatusCreated, false, false)
	again := post(t, url+"/orders", "k", `{"a":1}`)
	check("replay", again, http.StatusCreated, true, true)
	if again.body != first.body {
		t.Fatalf("replay body %q; want %q", again.body, first.body)
	}
	check("mismatch", post(t, url+"/orders", "k", `{"a":2}`), http.StatusUnprocessableEntity, false, true)
	check("no key", post(t, url+"/orders", "", `{"a":1}`), http.StatusBadRequest, false, true)
	check("malformed key", post(t, url+"/orders", `"a", "b"`, `{}`), http.StatusBadRequest, false, true)
	if n := after.Load(); n != 1 {
		t.Fatalf("the handler after the adapter ran %d times; want 1 (refusals and replays abort the chain)", n)
	}

	// A handler that aborts with a status has answered: a 4xx is recorded
	// and replayed, and the chain after it never runs.
	f := post(t, url+"/forbidden", "f", `{}`)
	check("abort 403", f, http.StatusForbidden, false, true)
	check("abort 403 replay", post(t, url+"/forbidden", "f", `{}`), http.StatusForbidden, true, true)
	if never.Load() != 0 || handler.Load() != 2 {
		t.Fatalf("handlers: %d executions, %d after an abort; want 2 and 0", handler.Load(), never.Load())
	}
}

func TestStatusOnlyAndUnmatchedRoute(t *testing.T) {
	var runs atomic.Int32
	r := gin.New()
	r.Use(newIdem(t, newGuard(t)))
	r.POST("/accepted", func(c *gin.Context) { runs.Add(1); c.Status(http.StatusNoContent) })
	url := serve(t, r)
	for i := range 2 {
		got := post(t, url+"/accepted", "k", `{}`)
		if got.status != http.StatusNoContent || got.replayed() != (i == 1) {
			t.Fatalf("c.Status(204), request %d: %d replayed=%v", i, got.status, got.replayed())
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("ran %d times", runs.Load())
	}
	// gin's 404 for an unmatched route goes through the global middleware:
	// it is recorded as a 404, never as a 200, and the replay is the same.
	first := post(t, url+"/nowhere", "n", `{}`)
	again := post(t, url+"/nowhere", "n", `{}`)
	if first.status != http.StatusNotFound || again.status != http.StatusNotFound || !again.replayed() || again.body != first.body {
		t.Fatalf("unmatched route: %d %q, then %d %q replayed=%v", first.status, first.body, again.status, again.body, again.replayed())
	}
}

func TestRouteParams(t *testing.T) {
	var runs atomic.Int32
	r := gin.New()
	r.POST("/orders/:id/pay", newIdem(t, newGuard(t)), func(c *gin.Context) {
		runs.Add(1)
		var in struct{ Amount int }
		if err := c.ShouldBindJSON(&in); err != nil {
			c.AbortWithStatus(http.StatusBadRequest)
			return
		}
		c.JSON(http.StatusOK, gin.H{"paid": c.Param("id"), "amount": in.Amount, "route": c.FullPath()})
	})
	url := serve(t, r)
	first := post(t, url+"/orders/1/pay", "k", `{"amount":5}`, "Content-Type", "application/json")
	if first.status != http.StatusOK || !strings.Contains(first.body, `"paid":"1"`) || !strings.Contains(first.body, `"amount":5`) {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	// Another path under the same pattern is another route: 422, never
	// order 1's receipt.
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

func TestScopeFromGinContext(t *testing.T) {
	var runs atomic.Int32
	idem := newIdem(t, newGuard(t), nethttp.WithScope(func(r *http.Request) string {
		return ginadapter.ContextOf(r).GetString("tenant")
	}))
	r := gin.New()
	r.Use(func(c *gin.Context) { c.Set("tenant", c.GetHeader("X-Tenant")) }, idem)
	r.POST("/orders", func(c *gin.Context) {
		if ginadapter.ContextOf(c.Request) != c {
			t.Error("ContextOf in the handler is not the handler's gin.Context")
		}
		c.JSON(http.StatusCreated, gin.H{"order": runs.Add(1)})
	})
	url := serve(t, r)
	a := post(t, url+"/orders", "k", `{}`, "X-Tenant", "acme")
	b := post(t, url+"/orders", "k", `{}`, "X-Tenant", "globex")
	if b.replayed() || a.body == b.body {
		t.Fatal("one tenant's key replayed another tenant's response")
	}
	if got := post(t, url+"/orders", "k", `{}`, "X-Tenant", "acme"); !got.replayed() || got.body != a.body {
		t.Fatal("a tenant's retry did not replay")
	}
	if ginadapter.ContextOf(httptest.NewRequest(http.MethodGet, "/", nil)) != nil {
		t.Fatal("ContextOf of a request the middleware never saw is not nil")
	}
}

func TestWriterBehavesLikeGins(t *testing.T) {
	problems := make(chan string, 16)
	expect := func(ok bool, format string, args ...any) {
		if !ok {
			problems <- fmt.Sprintf(format, args...)
		}
	}
	r := gin.New()
	r.POST("/w", newIdem(t, newGuard(t)), func(c *gin.Context) {
		w := c.Writer
		expect(w.Status() == http.StatusOK && w.Size() == -1 && !w.Written(), "fresh: status %d size %d written %v", w.Status(), w.Size(), w.Written())
		w.WriteHeader(http.StatusAccepted)
		expect(w.Status() == http.StatusAccepted && !w.Written(), "after WriteHeader: status %d written %v", w.Status(), w.Written())
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeaderNow()
		expect(w.Written() && w.Size() == 0, "after WriteHeaderNow: written %v size %d", w.Written(), w.Size())
		w.WriteHeader(http.StatusTeapot) // too late: ignored, as in gin
		n, err := w.WriteString("hello ")
		expect(n == 6 && err == nil, "WriteString: %d %v", n, err)
		_, _ = w.Write([]byte("world"))
		expect(w.Size() == 11 && w.Status() == http.StatusAccepted, "after writes: size %d status %d", w.Size(), w.Status())
		expect(w.Pusher() == nil, "Pusher on HTTP/1.1 is not nil")
		expect(w.CloseNotify() != nil, "CloseNotify is nil")
		_, _, err = w.Hijack()
		expect(err != nil, "Hijack after body bytes succeeded")
		close(problems)
	})
	url := serve(t, r)
	first := post(t, url+"/w", "k", `{}`)
	for p := range problems {
		t.Error(p)
	}
	again := post(t, url+"/w", "k", `{}`)
	if first.status != http.StatusAccepted || first.body != "hello world" || !again.replayed() || again.status != http.StatusAccepted || again.body != first.body || again.header.Get("Content-Type") != "text/plain" {
		t.Fatalf("first %d %q; replay %d %q %v", first.status, first.body, again.status, again.body, again.header)
	}
}

func TestStreamedAndHijackedAreNotReplayable(t *testing.T) {
	var runs atomic.Int32
	r := gin.New()
	g := r.Group("/", newIdem(t, newGuard(t)))
	g.POST("/stream", func(c *gin.Context) {
		runs.Add(1)
		i := 0
		c.Stream(func(w io.Writer) bool {
			i++
			_, _ = fmt.Fprintf(w, "chunk %d\n", i)
			return i < 3
		})
	})
	g.POST("/sse", func(c *gin.Context) {
		runs.Add(1)
		c.SSEvent("order", "1")
		c.Writer.Flush()
	})
	g.POST("/hijack", func(c *gin.Context) {
		runs.Add(1)
		conn, rw, err := c.Writer.Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer conn.Close()
		_, _ = rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nhijacked")
		_ = rw.Flush()
	})
	url := serve(t, r)
	for path, want := range map[string]string{"/stream": "chunk 1\nchunk 2\nchunk 3\n", "/sse": "event:order\ndata:1\n\n", "/hijack": "hijacked"} {
		first := post(t, url+path, path, `{}`)
		if first.status != http.StatusOK || first.body != want {
			t.Fatalf("%s: %d %q; want 200 %q", path, first.status, first.body, want)
		}
		again := post(t, url+path, path, `{}`)
		var p nethttp.Problem
		if again.status != http.StatusConflict || json.Unmarshal([]byte(again.body), &p) != nil || p.Type != nethttp.DefaultProblemTypeBase+nethttp.ProblemNotReplayable {
			t.Fatalf("%s retry: %d %q; want 409 %s", path, again.status, again.body, nethttp.ProblemNotReplayable)
		}
	}
	if runs.Load() != 3 {
		t.Fatalf("ran %d times; want 3", runs.Load())
	}
}

func TestPanicAbortsChain(t *testing.T) {
	var after atomic.Int32
	r := gin.New()
	r.Use(gin.Recovery())
	r.POST("/p", newIdem(t, newGuard(t)), func(c *gin.Context) { panic("on purpose") }, func(c *gin.Context) { after.Add(1) })
	url := serve(t, r)
	for range 2 {
		got := post(t, url+"/p", "k", `{}`)
		if got.status != http.StatusInternalServerError || got.header.Get("Content-Type") != "application/problem+json" || got.replayed() {
			t.Fatalf("panic: %d %q %v; want a 500 problem, not stored", got.status, got.body, got.header)
		}
	}
	if after.Load() != 0 {
		t.Fatal("a handler after the panicking one ran")
	}
}

func TestPassThroughKeepsGinsWriter(t *testing.T) {
	var runs atomic.Int32
	r := gin.New()
	r.Use(newIdem(t, newGuard(t)))
	r.POST("/orders", func(c *gin.Context) { c.String(http.StatusCreated, "order %d", runs.Add(1)) })
	url := serve(t, r)
	for i := range 2 {
		if got := post(t, url+"/orders", "", `{}`); got.status != http.StatusCreated || got.body != fmt.Sprintf("order %d", i+1) {
			t.Fatalf("no key: %d %q", got.status, got.body)
		}
	}
}

func TestConstruction(t *testing.T) {
	if _, err := ginadapter.New(nil); err == nil {
		t.Fatal("a nil guard was accepted")
	}
	g := newGuard(t)
	for _, o := range []nethttp.Option{nethttp.WithHeader("bad header"), nethttp.WithMaxBodyBytes(0), nethttp.WithRetryAfter(-1)} {
		if h, err := ginadapter.New(g, o); err == nil || h != nil {
			t.Fatal("an invalid option was accepted")
		}
	}
}

// The adapter's writer reaches the connection's deadlines through
// http.ResponseController (Unwrap).
func TestResponseControllerReachesConnection(t *testing.T) {
	r := gin.New()
	r.POST("/rc", newIdem(t, newGuard(t)), func(c *gin.Context) {
		rc := http.NewResponseController(c.Writer)
		if err := rc.SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
			t.Errorf("SetWriteDeadline through the adapter: %v", err)
		}
		c.String(http.StatusOK, "ok")
	})
	url := serve(t, r)
	if got := post(t, url+"/rc", "k", `{}`); got.status != http.StatusOK {
		t.Fatal(got.status)
	}
}
