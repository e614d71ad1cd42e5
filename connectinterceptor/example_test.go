package connectinterceptor_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idemkit/connectinterceptor"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/memstore"
)

// A retried call with the same Idempotency-Key gets the first answer back,
// marked Idempotent-Replayed; the handler runs once. The client
// interceptor gives each call a key; here the caller sets one, as a retry
// of its own would. The memory backend serves one process; Redis,
// PostgreSQL or Firestore share the guarantee between processes.
func Example() {
	guard, err := middleware.New(memstore.New())
	if err != nil {
		panic(err)
	}
	idem, err := connectinterceptor.New(guard, connectinterceptor.WithKeyRequired(true))
	if err != nil {
		panic(err)
	}
	const procedure = "/orders.v1.OrderService/CreateOrder"
	orders := 0
	mux := http.NewServeMux()
	mux.Handle(procedure, connect.NewUnaryHandler(procedure,
		func(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			orders++
			return connect.NewResponse(wrapperspb.String(fmt.Sprintf("order %d: %s", orders, req.Msg.GetValue()))), nil
		}, connect.WithInterceptors(idem)))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	keys, err := connectinterceptor.NewClient(connectinterceptor.WithMaxAttempts(3))
	if err != nil {
		panic(err)
	}
	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](srv.Client(), srv.URL+procedure, connect.WithInterceptors(keys))
	for range 2 {
		req := connect.NewRequest(wrapperspb.String("book"))
		req.Header().Set("Idempotency-Key", "8e03978e-40d5-43e8-bc93-6894a57f9324")
		res, err := client.CallUnary(context.Background(), req)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s replayed=%q\n", res.Msg.GetValue(), res.Header().Get("Idempotent-Replayed"))
	}
	fmt.Println("executions:", orders)
	// Output:
	// order 1: book replayed=""
	// order 1: book replayed="true"
	// executions: 1
}
