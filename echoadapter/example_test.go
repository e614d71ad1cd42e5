package echoadapter_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/idemkit/idemkit/echoadapter"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/store/memstore"
)

// A retried POST with the same Idempotency-Key gets the first response
// back, an *echo.HTTPError included; the handler runs once. The memory backend
// serves one process; Redis, PostgreSQL or Firestore share the guarantee
// between processes.
func Example() {
	guard, err := middleware.New(memstore.New())
	if err != nil {
		panic(err)
	}
	idem, err := echoadapter.New(guard, echoadapter.WithHTTPOptions(nethttp.WithKeyRequired(true)))
	if err != nil {
		panic(err)
	}

	orders := 0
	e := echo.New()
	e.POST("/orders", func(c echo.Context) error {
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
// handler, like a handler's errors: here one that answers in the
// application's own format, with the problem's kind as the error code.
func ExampleWithErrorHandler() {
	guard, err := middleware.New(memstore.New())
	if err != nil {
		panic(err)
	}
	idem, err := echoadapter.New(guard, echoadapter.WithErrorHandler(true))
	if err != nil {
		panic(err)
	}
	e := echo.New()
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		var p nethttp.Problem
		if errors.As(err, &p) {
			_ = c.JSON(p.Status, map[string]string{"code": p.Kind})
			return
		}
		e.DefaultHTTPErrorHandler(err, c)
	}
	e.POST("/orders", func(c echo.Context) error { return c.String(http.StatusCreated, "created") }, idem)

	for _, body := range []string{`{"item":"book"}`, `{"item":"pen"}`} {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", "k1")
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		fmt.Printf("%d %s\n", w.Code, strings.TrimSpace(w.Body.String()))
	}
	// Output:
	// 201 created
	// 422 {"code":"idempotency-key-reused"}
}
