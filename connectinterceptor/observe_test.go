package connectinterceptor_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idemkit/connectinterceptor"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/memstore"
)

// TestOutcomesUnderTheProcedure: the guard's hooks see every outcome
// with the procedure as the operation, and the handler reads its key
// from middleware.CallInfoFrom.
func TestOutcomesUnderTheProcedure(t *testing.T) {
	var mu sync.Mutex
	var events []middleware.Event
	guard, err := middleware.New(memstore.New(), middleware.WithHook(middleware.HookFunc(func(_ context.Context, e middleware.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	})))
	if err != nil {
		t.Fatal(err)
	}
	var handlerKey atomic.Value
	mux := http.NewServeMux()
	mux.Handle(createOrder, connect.NewUnaryHandler(createOrder, func(ctx context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
		if info, ok := middleware.CallInfoFrom(ctx); ok {
			handlerKey.Store(info.Key)
		}
		return connect.NewResponse(wrapperspb.String(req.Msg.GetValue())), nil
	}, connect.WithInterceptors(newIdem(t, guard))))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c := newCaller(t, srv.URL, protocols()[0])
	for _, call := range [][]string{{"a", "k"}, {"a", "k"}, {"b", "k"}, {"a", ""}, {"a", "x,y"}} {
		header := []string{}
		if call[1] != "" {
			header = []string{"Idempotency-Key", call[1]}
		}
		_, _ = c.call(t, call[0], header...)
	}
	if k, _ := handlerKey.Load().(string); k != "k" {
		t.Fatalf("the handler read the key %q; want k", k)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []middleware.EventKind{middleware.EventExecuted, middleware.EventReplayed, middleware.EventMismatch, middleware.EventPassedThrough, middleware.EventRejected}
	var got []middleware.EventKind
	for _, e := range events {
		if e.Operation != createOrder {
			t.Fatalf("an event %s under the operation %q; want %s", e.Kind, e.Operation, createOrder)
		}
		got = append(got, e.Kind)
	}
	if len(got) != len(want) {
		t.Fatalf("outcomes %v; want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("outcomes %v; want %v", got, want)
		}
	}
}

// TestNotReplayable: an answer larger than the capture limit is delivered
// and recorded as executed but not replayable: a retry is
// FailedPrecondition, never a second execution.
func TestNotReplayable(t *testing.T) {
	eachProtocol(t, []connectinterceptor.Option{connectinterceptor.WithMaxResponseBytes(16)}, func(t *testing.T, c caller, svc *service, _ *middleware.Guard) {
		if res, err := c.call(t, "a long order for many books", "Idempotency-Key", "big"); err != nil || res.Msg.GetValue() == "" {
			t.Fatalf("first: %v %v", res, err)
		}
		_, err := c.call(t, "a long order for many books", "Idempotency-Key", "big")
		wantRefusal(t, err, connect.CodeFailedPrecondition, "IDEMPOTENCY_NOT_REPLAYABLE", false)
		if n := svc.runs.Load(); n != 1 {
			t.Fatalf("the handler ran %d times; want 1", n)
		}
	})
}

// TestConcurrentDuplicates: duplicates racing on one key run the handler
// once; every one gets its answer (the guard's wait budget outlasts the
// handler).
func TestConcurrentDuplicates(t *testing.T) {
	eachProtocol(t, nil, func(t *testing.T, c caller, svc *service, _ *middleware.Guard) {
		var wg sync.WaitGroup
		answers := make(chan string, 16)
		for range 16 {
			wg.Go(func() {
				res, err := c.call(t, "book", "Idempotency-Key", "race", "X-Test", "sleep")
				if err != nil {
					t.Error(err)
					return
				}
				answers <- res.Msg.GetValue()
			})
		}
		wg.Wait()
		close(answers)
		for a := range answers {
			if a != "order 1 of book" {
				t.Fatalf("a duplicate got %q; want the one execution's answer", a)
			}
		}
		if n := svc.runs.Load(); n != 1 {
			t.Fatalf("the handler ran %d times; want 1", n)
		}
	})
}
