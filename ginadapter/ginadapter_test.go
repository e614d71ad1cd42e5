package ginadapter_test

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idemkit/ginadapter"
	"github.com/idemkit/idemkit/internal/httpsuite"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	os.Exit(m.Run())
}

// ginStack serves the suite's app for every path and method behind the
// adapter (after gin.Recovery, as the package doc advises).
func ginStack(t *testing.T, g *middleware.Guard, opts []nethttp.Option, app http.Handler) http.Handler {
	idem := newIdem(t, g, opts...)
	r := gin.New()
	r.Use(gin.Recovery(), idem)
	r.Any("/*path", gin.WrapH(app))
	return r
}

// TestBehaviourTable runs the HTTP behaviour suite (every row of the HTTP table)
// through gin, on the memory backend, and on memory records composed with
// memory locks.
func TestBehaviourTable(t *testing.T) {
	t.Run("memory", func(t *testing.T) { httpsuite.Run(t, ginStack) })
	t.Run("composed", func(t *testing.T) {
		httpsuite.RunWith(t, ginStack, httpsuite.Composed)
	})
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
	}, newIdem(t, httpsuite.NewGuard(t), nethttp.WithKeyRequired(true)), func(c *gin.Context) { after.Add(1) })
	r.POST("/orders", func(c *gin.Context) {
		n := handler.Add(1)
		c.JSON(http.StatusCreated, gin.H{"order": n})
	})
	r.POST("/forbidden", func(c *gin.Context) {
		handler.Add(1)
		c.AbortWithStatusJSON(http.StatusForbidden, gin.H{"error": "not yours"})
	}, func(c *gin.Context) { never.Add(1) })
	url := httpsuite.Serve(t, r)

	check := func(name string, got httpsuite.Reply, status int, replayed, aborted bool) {
		t.Helper()
		o := <-obs
		if got.Status != status || got.Replayed() != replayed {
			t.Fatalf("%s: %d replayed=%v %q; want %d replayed=%v", name, got.Status, got.Replayed(), got.Body, status, replayed)
		}
		if o.aborted != aborted || o.status != status || o.size != len(got.Body) || !o.written {
			t.Fatalf("%s: the middleware in front saw %+v; want aborted=%v, status %d, size %d, written", name, o, aborted, status, len(got.Body))
		}
	}
	first := httpsuite.Post(t, url+"/orders", "k", `{"a":1}`)
	check("first", first, http.StatusCreated, false, false)
	again := httpsuite.Post(t, url+"/orders", "k", `{"a":1}`)
	check("replay", again, http.StatusCreated, true, true)
	if again.Body != first.Body {
		t.Fatalf("replay body %q; want %q", again.Body, first.Body)
	}
	check("mismatch", httpsuite.Post(t, url+"/orders", "k", `{"a":2}`), http.StatusUnprocessableEntity, false, true)
	check("no key", httpsuite.Post(t, url+"/orders", "", `{"a":1}`), http.StatusBadRequest, false, true)
	check("malformed key", httpsuite.Post(t, url+"/orders", `"a", "b"`, `{}`), http.StatusBadRequest, false, true)
	if n := after.Load(); n != 1 {
		t.Fatalf("the handler after the adapter ran %d times; want 1 (refusals and replays abort the chain)", n)
	}

	// A handler that aborts with a status has answered: a 4xx is recorded
	// and replayed, and the chain after it never runs.
	f := httpsuite.Post(t, url+"/forbidden", "f", `{}`)
	check("abort 403", f, http.StatusForbidden, false, true)
	check("abort 403 replay", httpsuite.Post(t, url+"/forbidden", "f", `{}`), http.StatusForbidden, true, true)
	if never.Load() != 0 || handler.Load() != 2 {
		t.Fatalf("handlers: %d executions, %d after an abort; want 2 and 0", handler.Load(), never.Load())
	}
}

func TestStatusOnlyAndUnmatchedRoute(t *testing.T) {
	var runs atomic.Int32
	r := gin.New()
	r.Use(newIdem(t, httpsuite.NewGuard(t)))
	r.POST("/accepted", func(c *gin.Context) { runs.Add(1); c.Status(http.StatusNoContent) })
	url := httpsuite.Serve(t, r)
	for i := range 2 {
		got := httpsuite.Post(t, url+"/accepted", "k", `{}`)
		if got.Status != http.StatusNoContent || got.Replayed() != (i == 1) {
			t.Fatalf("c.Status(204), request %d: %d replayed=%v", i, got.Status, got.Replayed())
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("ran %d times", runs.Load())
	}
	// gin's 404 for an unmatched route goes through the global middleware:
	// it is recorded as a 404, never as a 200, and the replay is the same,
	// with gin's own body.
	httpsuite.CheckUnmatchedRouteRecorded(t, url)
	if got := httpsuite.Post(t, url+"/nowhere", "n", `{}`); got.Body != "404 page not found" || got.Header.Get("Content-Type") != gin.MIMEPlain {
		t.Fatalf("unmatched route: %q (%s); want gin's 404 page not found", got.Body, got.Header.Get("Content-Type"))
	}
}

// TestErrorsRenderedInFrontAreNotReplayed: with gin's central error
// handling, a handler records c.Error and writes nothing, and a middleware
// in front of the guard renders c.Errors after c.Next, outside the
// capture. The client gets that answer; the record cannot hold it, so a
// retry gets 409 response-not-replayable, and the handler never runs
// again.
func TestErrorsRenderedInFrontAreNotReplayed(t *testing.T) {
	var runs atomic.Int32
	r := gin.New()
	r.Use(func(c *gin.Context) {
		c.Next()
		if len(c.Errors) > 0 && !c.Writer.Written() {
			c.JSON(http.StatusConflict, gin.H{"error": c.Errors.Last().Error()})
		}
	}, newIdem(t, httpsuite.NewGuard(t)))
	r.POST("/orders", func(c *gin.Context) {
		runs.Add(1)
		_ = c.Error(errors.New("out of stock"))
	})
	r.POST("/teapot", func(c *gin.Context) {
		runs.Add(1)
		c.Status(http.StatusTeapot) // a status chosen, the body left to the error middleware
		_ = c.Error(errors.New("short and stout"))
	})
	url := httpsuite.Serve(t, r)
	for path, want := range map[string]string{"/orders": `{"error":"out of stock"}`, "/teapot": `{"error":"short and stout"}`} {
		first := httpsuite.Post(t, url+path, path, `{}`)
		if first.Status != http.StatusConflict || first.Body != want {
			t.Fatalf("%s, first: %d %q; want the error middleware's 409 %s", path, first.Status, first.Body, want)
		}
		httpsuite.WantProblem(t, httpsuite.Post(t, url+path, path, `{}`), http.StatusConflict, "response-not-replayable")
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("the handlers ran %d times; want once each", n)
	}
}

// TestRequestDecompressedInFront: a gin middleware in front of the guard
// that decompresses request bodies leaves ContentLength stale; the
// handler still gets the whole body.
func TestRequestDecompressedInFront(t *testing.T) {
	r := gin.New()
	r.Use(func(c *gin.Context) {
		if c.GetHeader("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(c.Request.Body)
			if err != nil {
				c.AbortWithStatus(http.StatusBadRequest)
				return
			}
			c.Request.Body = zr
			c.Request.Header.Del("Content-Encoding")
		}
	}, newIdem(t, httpsuite.NewGuard(t)))
	r.POST("/echo", func(c *gin.Context) {
		b, _ := io.ReadAll(c.Request.Body)
		c.Data(http.StatusOK, "application/json", b)
	})
	httpsuite.CheckRequestDecompressedInFront(t, httpsuite.Serve(t, r))
}

func TestRouteParams(t *testing.T) {
	var runs atomic.Int32
	r := gin.New()
	r.POST("/orders/:id/pay", newIdem(t, httpsuite.NewGuard(t)), func(c *gin.Context) {
		runs.Add(1)
		var in struct{ Amount int }
		if err := c.ShouldBindJSON(&in); err != nil {
			c.AbortWithStatus(http.StatusBadRequest)
			return
		}
		c.JSON(http.StatusOK, gin.H{"paid": c.Param("id"), "amount": in.Amount, "route": c.FullPath()})
	})
	httpsuite.CheckPathsUnderOnePattern(t, httpsuite.Serve(t, r), runs.Load)
}

func TestScopeFromGinContext(t *testing.T) {
	var runs atomic.Int32
	idem := newIdem(t, httpsuite.NewGuard(t), nethttp.WithScope(func(r *http.Request) string {
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
	httpsuite.CheckTenantScope(t, httpsuite.Serve(t, r))
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
	r.POST("/w", newIdem(t, httpsuite.NewGuard(t)), func(c *gin.Context) {
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
	url := httpsuite.Serve(t, r)
	first := httpsuite.Post(t, url+"/w", "k", `{}`)
	for p := range problems {
		t.Error(p)
	}
	again := httpsuite.Post(t, url+"/w", "k", `{}`)
	if first.Status != http.StatusAccepted || first.Body != "hello world" || !again.Replayed() || again.Status != http.StatusAccepted || again.Body != first.Body || again.Header.Get("Content-Type") != "text/plain" {
		t.Fatalf("first %d %q; replay %d %q %v", first.Status, first.Body, again.Status, again.Body, again.Header)
	}
}

func TestStreamedAndHijackedAreNotReplayable(t *testing.T) {
	var runs atomic.Int32
	r := gin.New()
	g := r.Group("/", newIdem(t, httpsuite.NewGuard(t)))
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
	url := httpsuite.Serve(t, r)
	for path, want := range map[string]string{"/stream": "chunk 1\nchunk 2\nchunk 3\n", "/sse": "event:order\ndata:1\n\n", "/hijack": "hijacked"} {
		first := httpsuite.Post(t, url+path, path, `{}`)
		if first.Status != http.StatusOK || first.Body != want {
			t.Fatalf("%s: %d %q; want 200 %q", path, first.Status, first.Body, want)
		}
		httpsuite.WantProblem(t, httpsuite.Post(t, url+path, path, `{}`), http.StatusConflict, "response-not-replayable")
	}
	if runs.Load() != 3 {
		t.Fatalf("ran %d times; want 3", runs.Load())
	}
}

func TestPanicAbortsChain(t *testing.T) {
	var after atomic.Int32
	r := gin.New()
	r.Use(gin.Recovery())
	r.POST("/p", newIdem(t, httpsuite.NewGuard(t)), func(c *gin.Context) { panic("on purpose") }, func(c *gin.Context) { after.Add(1) })
	url := httpsuite.Serve(t, r)
	for range 2 {
		got := httpsuite.Post(t, url+"/p", "k", `{}`)
		if got.Status != http.StatusInternalServerError || got.Header.Get("Content-Type") != "application/problem+json" || got.Replayed() {
			t.Fatalf("panic: %d %q %v; want a 500 problem, not stored", got.Status, got.Body, got.Header)
		}
	}
	if after.Load() != 0 {
		t.Fatal("a handler after the panicking one ran")
	}
}

func TestPassThroughKeepsGinsWriter(t *testing.T) {
	var runs atomic.Int32
	r := gin.New()
	r.Use(newIdem(t, httpsuite.NewGuard(t)))
	r.POST("/orders", func(c *gin.Context) { c.String(http.StatusCreated, "order %d", runs.Add(1)) })
	url := httpsuite.Serve(t, r)
	for i := range 2 {
		if got := httpsuite.Post(t, url+"/orders", "", `{}`); got.Status != http.StatusCreated || got.Body != fmt.Sprintf("order %d", i+1) {
			t.Fatalf("no key: %d %q", got.Status, got.Body)
		}
	}
}

func TestNewRefusesMisconfigurationNamingTheFix(t *testing.T) {
	httpsuite.CheckMisconfigurationsRefused(t, func(g *middleware.Guard, opts ...nethttp.Option) error {
		h, err := ginadapter.New(g, opts...)
		if (h == nil) != (err != nil) {
			t.Fatalf("New gave a handler %v with error %v", h != nil, err)
		}
		return err
	})
}

// The adapter's writer reaches the connection's deadlines through
// http.ResponseController (Unwrap).
func TestResponseControllerReachesConnection(t *testing.T) {
	r := gin.New()
	r.POST("/rc", newIdem(t, httpsuite.NewGuard(t)), func(c *gin.Context) {
		rc := http.NewResponseController(c.Writer)
		if err := rc.SetWriteDeadline(time.Now().Add(time.Minute)); err != nil {
			t.Errorf("SetWriteDeadline through the adapter: %v", err)
		}
		c.String(http.StatusOK, "ok")
	})
	url := httpsuite.Serve(t, r)
	if got := httpsuite.Post(t, url+"/rc", "k", `{}`); got.Status != http.StatusOK {
		t.Fatal(got.Status)
	}
}

// TestOperationIsGinsRoute: hooks, outcome watchers and the handler see
// the method and the route gin matched (c.FullPath()), not the path;
// nethttp.WithOperation overrides it.
func TestOperationIsGinsRoute(t *testing.T) {
	httpsuite.CheckOperations(t, func(t *testing.T, g *middleware.Guard, opts []nethttp.Option, h http.Handler) http.Handler {
		r := gin.New()
		r.POST("/orders/:id", newIdem(t, g, opts...), gin.WrapH(h))
		return r
	}, "POST /orders/:id")
}

// TestOutcomeWatchedByGinMiddleware: a gin middleware in front of the
// adapter that watches the outcome through the request's context (as an
// access log does) sees every request's, with gin's route as the
// operation ("" for a route gin did not match).
func TestOutcomeWatchedByGinMiddleware(t *testing.T) {
	outcomes := make(chan middleware.Event, 8)
	r := gin.New()
	r.Use(func(c *gin.Context) {
		ctx, outcome := middleware.WatchOutcome(c.Request.Context())
		c.Request = c.Request.WithContext(ctx)
		c.Next()
		e, _ := outcome()
		outcomes <- e
	}, newIdem(t, httpsuite.NewGuard(t), nethttp.WithKeyRequired(true)))
	r.POST("/orders/:id", func(c *gin.Context) { c.JSON(http.StatusCreated, gin.H{"order": c.Param("id")}) })
	httpsuite.CheckOutcomesWatched(t, httpsuite.Serve(t, r), outcomes, "POST /orders/:id")
}
