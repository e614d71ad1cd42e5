package main

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v5"

	"github.com/idemkit/idemkit/echo5adapter"
	"github.com/idemkit/idemkit/examples/internal/demotest"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
)

// txEcho5Server serves POST /orders with an echo v5 handler behind
// echo5adapter that writes in pgstore.Tx (from c.Request().Context(), the
// guarded work's context), as demotest.RunTxHTTP describes (its 500 is
// an error, which echo's error handler answers), and returns its URL.
func txEcho5Server(t *testing.T, b *demotest.TxBackend) string {
	t.Helper()
	idem, err := echo5adapter.New(b.Guard, echo5adapter.WithHTTPOptions(nethttp.WithKeyRequired(true)))
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.POST("/orders", func(c *echo.Context) error {
		ctx := c.Request().Context()
		if err := b.Insert(ctx); err != nil {
			return err
		}
		if b.Fail.Load() {
			return errors.New("declined")
		}
		info, _ := middleware.CallInfoFrom(ctx)
		c.Response().Header().Set("Location", "/orders/"+info.Fence.String())
		if err := c.JSON(http.StatusCreated, map[string]string{"key": info.Key, "fence": info.Fence.String(), "pad": strings.Repeat("x", int(b.Pad.Load()))}); err != nil {
			return err
		}
		if b.Stream.Load() {
			return http.NewResponseController(c.Response()).Flush()
		}
		return nil
	}, idem)
	ts := httptest.NewServer(e)
	t.Cleanup(ts.Close)
	return ts.URL
}

// TestTxEcho5: echo v5 handlers that write in pgstore.Tx commit their rows
// with the record exactly once, an error (which echo's error handler
// answers 500) rolls them back, a streamed response commits as not
// replayable, a transaction that cannot commit is answered 500
// transaction-failed, and a response too large to hold until the commit
// is rolled back (demotest.RunTxHTTP).
func TestTxEcho5(t *testing.T) { demotest.RunTxHTTP(t, txEcho5Server) }
