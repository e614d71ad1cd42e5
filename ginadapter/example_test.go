package ginadapter_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idemkit/ginadapter"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/store/memstore"
)

// A retried POST with the same Idempotency-Key gets the first response
// back; the handler runs once. The memory backend serves one process; Redis,
// PostgreSQL or Firestore share the guarantee between processes.
func Example() {
	gin.SetMode(gin.ReleaseMode)
	guard, err := middleware.New(memstore.New())
	if err != nil {
		panic(err)
	}
	idem, err := ginadapter.New(guard, nethttp.WithKeyRequired(true))
	if err != nil {
		panic(err)
	}

	orders := 0
	r := gin.New()
	r.Use(gin.Recovery())
	r.POST("/orders", idem, func(c *gin.Context) {
		orders++
		c.JSON(http.StatusCreated, gin.H{"order": orders})
	})

	for range 2 {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"item":"book"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`)
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Printf("%d replayed=%q %s\n", w.Code, w.Header().Get("Idempotent-Replayed"), w.Body)
	}
	fmt.Println("executions:", orders)
	// Output:
	// 201 replayed="" {"order":1}
	// 201 replayed="true" {"order":1}
	// executions: 1
}
