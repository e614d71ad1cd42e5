package echo5adapter_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/labstack/echo/v5"

	"github.com/idemkit/idemkit/echo5adapter"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/store/memstore"
)

// A retried POST with the same Idempotency-Key gets the first response
// back, an *echo.HTTPError included; the handler runs once. The memory
// backend serves one process; Redis, PostgreSQL or Firestore share the
// guarantee between processes.
func Example() {
	guard, err := middleware.New(memstore.New())
	if err != nil {
		panic(err)
	}
	idem, err := echo5adapter.New(guard, echo5adapter.WithHTTPOptions(nethttp.WithKeyRequired(true)))
	if err != nil {
		panic(err)
	}

	orders := 0
	e := echo.New()
	e.POST("/orders", func(c *echo.Context) error {
		orders++
		if strings.Contains(c.QueryString(), "declined") {
			return echo.NewHTTPError(http.StatusPaymentRequired, "card declined")
		}
		return c.JSON(http.StatusCreated, map[string]int{"order": orders})
	}, idem)

	send := func(path, key string) {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(`{"item":"book"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		fmt.Printf("%d replayed=%q %s", w.Code, w.Header().Get("Idempotent-Replayed"), w.Body)
	}
	send("/orders", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`)
	send("/orders", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`)
	send("/orders?declined", `"c0ffee00-0000-4000-8000-000000000001"`)
	send("/orders?declined", `"c0ffee00-0000-4000-8000-000000000001"`)
	fmt.Println("executions:", orders)
	// Output:
	// 201 replayed="" {"order":1}
	// 201 replayed="true" {"order":1}
	// 402 replayed="" {"message":"card declined"}
	// 402 replayed="true" {"message":"card declined"}
	// executions: 2
}

// With WithErrorHandler, the middleware's refusals go through echo's error
// handler, like a handler's errors: here echo's own RFC 9457 handler, and
// one that answers in the application's own format, with the problem's
// kind as the error code.
func ExampleWithErrorHandler() {
	guard, err := middleware.New(memstore.New())
	if err != nil {
		panic(err)
	}
	idem, err := echo5adapter.New(guard, echo5adapter.WithErrorHandler(true))
	if err != nil {
		panic(err)
	}
	e := echo.New()
	e.POST("/orders", func(c *echo.Context) error { return c.String(http.StatusCreated, "created") }, idem)

	send := func(body string) {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", "k1")
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		fmt.Printf("%d %s %s\n", w.Code, w.Header().Get("Content-Type"), strings.TrimSpace(w.Body.String()))
	}
	e.HTTPErrorHandler = echo.ProblemDetailsHTTPErrorHandler(false)
	send(`{"item":"book"}`)
	send(`{"item":"pen"}`)

	e.HTTPErrorHandler = func(c *echo.Context, err error) {
		var p nethttp.Problem
		if errors.As(err, &p) {
			_ = c.JSON(p.Status, map[string]string{"code": p.Kind})
			return
		}
		echo.DefaultHTTPErrorHandler(false)(c, err)
	}
	send(`{"item":"pen"}`)
	// Output:
	// 201 text/plain; charset=UTF-8 created
	// 422 application/problem+json {"type":"urn:idemkit:problem:idempotency-key-reused","title":"Idempotency-Key is already used for another request","status":422,"detail":"this key was used with a different request (method, route, query or body); use a new key for a new request"}
	// 422 application/json {"code":"idempotency-key-reused"}
}
