package connectinterceptor_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/memstore"
)

// TestHandlerSteps: a Connect handler reads the step helper from its ctx.
// A call that fails after its first step (Unavailable, not recorded) is
// retried: the retry resumes at the second step with the first step's
// recorded result, and a later retry replays the answer.
func TestHandlerSteps(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { _ = s.Close() })
	guard, err := middleware.New(s)
	if err != nil {
		t.Fatal(err)
	}
	var runs [2]atomic.Int32
	var failed atomic.Bool
	mux := http.NewServeMux()
	mux.Handle(createOrder, connect.NewUnaryHandler(createOrder, func(ctx context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
		got := ""
		for i, name := range []string{"reserve", "charge"} {
			if i == 1 && failed.CompareAndSwap(false, true) {
				return nil, connect.NewError(connect.CodeUnavailable, errors.New("failing after the first step, as asked"))
			}
			res, err := middleware.Step(ctx, name, func(context.Context) ([]byte, error) {
				return []byte(strconv.Itoa(int(runs[i].Add(1)))), nil
			})
			if err != nil {
				return nil, connect.NewError(connect.CodeInternal, err)
			}
			got += name + "=" + string(res) + " "
		}
		return connect.NewResponse(wrapperspb.String(got)), nil
	}, connect.WithInterceptors(newIdem(t, guard))))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c := newCaller(t, srv.URL, protocols()[0])
	if _, err := c.call(t, "order", "Idempotency-Key", "steps-1"); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("first call: %v; want Unavailable after the first step", err)
	}
	first, err := c.call(t, "order", "Idempotency-Key", "steps-1")
	if err != nil || first.Msg.GetValue() != "reserve=1 charge=1 " {
		t.Fatalf("retry: %v %v; want reserve 1 (recorded) and charge 1", first, err)
	}
	again, err := c.call(t, "order", "Idempotency-Key", "steps-1")
	if err != nil || again.Msg.GetValue() != first.Msg.GetValue() || again.Header().Get("Idempotent-Replayed") != "true" {
		t.Fatalf("later retry: %v %v; want the replay", again, err)
	}
	if r0, r1 := runs[0].Load(), runs[1].Load(); r0 != 1 || r1 != 1 {
		t.Fatalf("the steps ran %d and %d times; want once each", r0, r1)
	}
}
