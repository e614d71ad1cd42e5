package main

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idemkit/examples/internal/demotest"
	"github.com/idemkit/idemkit/ginadapter"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
)

// txGinServer serves POST /orders with a gin handler behind ginadapter
// that writes in pgstore.Tx (from c.Request.Context(), the guarded work's
// context), as demotest.RunTxHTTP describes, and returns its URL.
func txGinServer(t *testing.T, b *demotest.TxBackend) string {
	t.Helper()
	idem, err := ginadapter.New(b.Guard, nethttp.WithKeyRequired(true))
	if err != nil {
		t.Fatal(err)
	}
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.POST("/orders", idem, func(c *gin.Context) {
		ctx := c.Request.Context()
		if err := b.Insert(ctx); err != nil {
			c.AbortWithStatusJSON(http.StatusInternalServerError, gin.H{"error": err.Error()})
			return
		}
		if b.Fail.Load() {
			c.JSON(http.StatusInternalServerError, gin.H{"error": "declined"})
			return
		}
		info, _ := middleware.CallInfoFrom(ctx)
		c.Header("Location", "/orders/"+info.Fence.String())
		c.JSON(http.StatusCreated, gin.H{"key": info.Key, "fence": info.Fence.String(), "pad": strings.Repeat("x", int(b.Pad.Load()))})
		if b.Stream.Load() {
			c.Writer.Flush()
		}
	})
	ts := httptest.NewServer(r)
	t.Cleanup(ts.Close)
	return ts.URL
}

// TestTxGin: gin handlers that write in pgstore.Tx commit their rows with
// the record exactly once, a 500 rolls them back, a streamed response
// commits as not replayable, a transaction that cannot commit is answered
// 500 transaction-failed, and a response too large to hold until the
// commit is rolled back (demotest.RunTxHTTP).
func TestTxGin(t *testing.T) { demotest.RunTxHTTP(t, txGinServer) }

// TestTxGinCentralErrors: a handler that writes in pgstore.Tx and leaves
// an error in c.Errors, which a middleware in front renders as 500 after
// the guarded chain returns, is rolled back (what the client was told and
// what the database holds agree), and its retry runs again.
func TestTxGinCentralErrors(t *testing.T) {
	b := demotest.NewTxBackend(t)
	idem, err := ginadapter.New(b.Guard, nethttp.WithKeyRequired(true))
	if err != nil {
		t.Fatal(err)
	}
	renderErrors := func(c *gin.Context) {
		c.Next()
		if len(c.Errors) > 0 {
			c.JSON(http.StatusInternalServerError, gin.H{"error": c.Errors.Last().Error()})
		}
	}
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.POST("/orders", renderErrors, idem, func(c *gin.Context) {
		if err := b.Insert(c.Request.Context()); err != nil {
			_ = c.Error(err)
			return
		}
		if b.Fail.Load() {
			_ = c.Error(errors.New("declined"))
			return
		}
		c.JSON(http.StatusCreated, gin.H{"ok": true})
	})
	ts := httptest.NewServer(r)
	defer ts.Close()
	ctx := t.Context()
	b.Fail.Store(true)
	if a := demotest.TxPost(ctx, ts.URL, "c"); a.Err != nil || a.Status != http.StatusInternalServerError {
		t.Fatalf("the failing handler: %+v; want the 500 its error middleware renders", a)
	}
	if n := b.Rows(t, "c"); n != 0 {
		t.Fatalf("rows of c after the error: %d; want none (rolled back)", n)
	}
	b.Fail.Store(false)
	if a := demotest.TxPost(ctx, ts.URL, "c"); a.Err != nil || a.Status != http.StatusCreated || a.Replayed {
		t.Fatalf("the retry: %+v; want a new execution", a)
	}
	if n := b.Rows(t, "c"); n != 1 || b.Runs.Load() != 2 {
		t.Fatalf("rows of c: %d, runs %d; want 1 and 2", n, b.Runs.Load())
	}
}
