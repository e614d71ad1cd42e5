package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/store/memstore"
)

// Do makes a queue consumer idempotent: a redelivered message gets the
// first result back instead of charging twice.
func ExampleDo() {
	guard, err := middleware.New(memstore.New())
	if err != nil {
		panic(err)
	}
	type Charge struct {
		ID     string
		Amount int
	}
	msg := struct {
		OrderID string
		Amount  int
	}{"order-7", 1250}
	charges := 0
	chargeCard := func(ctx context.Context) (Charge, error) {
		charges++
		return Charge{ID: fmt.Sprintf("ch_%d", charges), Amount: msg.Amount}, nil
	}

	for delivery := 1; delivery <= 3; delivery++ {
		c, replayed, err := middleware.Do(context.Background(), guard, "msg:"+msg.OrderID, msg, chargeCard)
		fmt.Println(delivery, c.ID, c.Amount, replayed, err)
	}
	fmt.Println("charges:", charges)
	// Output:
	// 1 ch_1 1250 false <nil>
	// 2 ch_1 1250 true <nil>
	// 3 ch_1 1250 true <nil>
	// charges: 1
}

// A hook that logs the outcome of every request: what happened, to which
// operation, how many bytes were recorded or replayed. Keys arrive hashed
// (Event.KeyHash), so events can go to logs as they are.
func ExampleHookFunc() {
	logOutcomes := middleware.HookFunc(func(ctx context.Context, e middleware.Event) {
		if !e.Kind.Outcome() {
			return // waiting, lease-lost, backend-error
		}
		fmt.Printf("%s: %s recorded=%v size=%d err=%v\n", e.Operation, e.Kind, e.Recorded, e.Size, e.Err)
	})
	guard, err := middleware.New(memstore.New(), middleware.WithHook(logOutcomes))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	createOrder := func(ctx context.Context) (middleware.Result, error) {
		return middleware.Result{Value: []byte(`{"order":"ord_1"}`)}, nil
	}
	book := fingerprint.HTTP(fingerprint.HTTPRequest{Method: "POST", Route: "/orders", Body: []byte(`{"item":"book"}`)})
	pen := fingerprint.HTTP(fingerprint.HTTPRequest{Method: "POST", Route: "/orders", Body: []byte(`{"item":"pen"}`)})
	op := middleware.Operation("POST /orders")

	_, _ = guard.Execute(ctx, "key-1", book, createOrder, op) // the first request
	_, _ = guard.Execute(ctx, "key-1", book, createOrder, op) // its retry
	_, _ = guard.Execute(ctx, "key-1", pen, createOrder, op)  // the key reused for another order
	_, _ = guard.Execute(ctx, "", book, createOrder, op)      // no key
	// An adapter reports the requests it does not guard.
	guard.Bypass(ctx, middleware.EventPassedThrough, nil, middleware.Operation("GET /orders"))
	// Output:
	// POST /orders: executed recorded=true size=17 err=<nil>
	// POST /orders: replayed recorded=false size=17 err=<nil>
	// POST /orders: mismatch recorded=false size=0 err=idempotency: the key was used for a different request
	// POST /orders: rejected recorded=false size=0 err=idempotency: invalid key: the key is empty
	// GET /orders: passed-through recorded=false size=0 err=<nil>
}

// The work reads its key, scope, operation and fence from its ctx: the
// fence orders the claims of one key, so a downstream system that keeps
// the greatest fence it saw can refuse the writes of a holder whose claim
// was taken over.
func ExampleCallInfoFrom() {
	guard, err := middleware.New(memstore.New())
	if err != nil {
		panic(err)
	}
	var fence idemkit.Fence
	charge := func(ctx context.Context) (middleware.Result, error) {
		info, ok := middleware.CallInfoFrom(ctx)
		fmt.Println(ok, info.Operation, info.Scope, info.Key)
		fence = info.Fence // for example, written with the charge
		return middleware.Result{Value: []byte("charged")}, nil
	}
	fp := fingerprint.HTTP(fingerprint.HTTPRequest{Method: "POST", Route: "/payments", Body: []byte(`{"amount":1250}`)})
	out, err := guard.Execute(context.Background(), "pay-7", fp, charge,
		middleware.Scope("acme"), middleware.Operation("POST /payments"))
	fmt.Println(string(out.Value), err, out.Fence == fence)

	_, ok := middleware.CallInfoFrom(context.Background())
	fmt.Println("outside a call:", ok)
	// Output:
	// true POST /payments acme pay-7
	// charged <nil> true
	// outside a call: false
}

// A response that must not stick, such as a wrong one-time password, is
// not recorded: the client's retry with the right one runs the work again.
func ExampleDoNotRecord() {
	guard, err := middleware.New(memstore.New())
	if err != nil {
		panic(err)
	}
	confirm := func(code string) func(ctx context.Context) (string, error) {
		return func(ctx context.Context) (string, error) {
			if code != "314159" {
				middleware.DoNotRecord(ctx)
				return "wrong code", nil
			}
			return "confirmed", nil
		}
	}
	for _, code := range []string{"000000", "314159", "314159"} {
		v, replayed, err := middleware.Do(context.Background(), guard, "confirm-9", nil, confirm(code))
		fmt.Println(v, replayed, err)
	}
	// Output:
	// wrong code false <nil>
	// confirmed false <nil>
	// confirmed true <nil>
}

// An access log in front of the idempotency middleware reads each
// request's outcome from its context: guarded requests, and those the
// middleware let through or refused.
func ExampleWatchOutcome() {
	guard, err := middleware.New(memstore.New())
	if err != nil {
		panic(err)
	}
	idem, err := nethttp.New(guard)
	if err != nil {
		panic(err)
	}
	accessLog := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, outcome := middleware.WatchOutcome(r.Context())
			next.ServeHTTP(w, r.WithContext(ctx))
			kind := "none"
			if e, ok := outcome(); ok {
				kind = e.Kind.String()
			}
			fmt.Println(r.Method, r.URL.Path, "idempotency:", kind)
		})
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/orders", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})
	handler := accessLog(idem(mux))

	for _, req := range []struct{ method, key string }{{"POST", "k-1"}, {"POST", "k-1"}, {"GET", ""}, {"POST", ""}} {
		r := httptest.NewRequest(req.method, "/orders", strings.NewReader(`{}`))
		if req.key != "" {
			r.Header.Set("Idempotency-Key", req.key)
		}
		handler.ServeHTTP(httptest.NewRecorder(), r)
	}
	// Output:
	// POST /orders idempotency: executed
	// POST /orders idempotency: replayed
	// GET /orders idempotency: passed-through
	// POST /orders idempotency: passed-through
}

// An operator looks at one key's record, then forgets it so that the
// next request with the key runs again.
func ExampleGuard_Inspect() {
	guard, err := middleware.New(memstore.New(), middleware.WithRecordTTL(time.Hour))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	runs := 0
	work := func(ctx context.Context) (middleware.Result, error) {
		runs++
		return middleware.Result{Value: []byte(`{"refund":"rf_1"}`)}, nil
	}
	fp := fingerprint.HTTP(fingerprint.HTTPRequest{Method: "POST", Route: "/refunds", Body: []byte(`{"amount":500}`)})
	if _, err := guard.Execute(ctx, "refund-3", fp, work, middleware.Scope("acme"), middleware.Credentials("Bearer t0k3n")); err != nil {
		panic(err)
	}

	in, ok, err := guard.Inspect(ctx, "acme", "refund-3", false)
	fmt.Println(ok, err)
	fmt.Println(in.RecordKey, in.State, in.Algorithm, in.Bound, in.Size, in.ExpiresAt.Sub(in.CreatedAt), in.Response == nil)
	in, _, _ = guard.Inspect(ctx, "acme", "refund-3", true)
	fmt.Println(string(in.Response))

	forgotten, err := guard.Forget(ctx, "acme", "refund-3")
	fmt.Println("forgotten:", forgotten, err)
	_, ok, _ = guard.Inspect(ctx, "acme", "refund-3", false)
	fmt.Println("still there:", ok)
	out, _ := guard.Execute(ctx, "refund-3", fp, work, middleware.Scope("acme"), middleware.Credentials("Bearer t0k3n"))
	fmt.Println("replayed:", out.Replayed, "runs:", runs)
	// Output:
	// true <nil>
	// idempotency:acme:refund-3 completed http-v2 true 17 1h0m0s true
	// {"refund":"rf_1"}
	// forgotten: true <nil>
	// still there: false
	// replayed: false runs: 2
}

// Step marks the recovery points of work of several steps: a run that
// failed after charging the card is resumed by the retry, which gets the
// recorded charge back instead of charging again, and sends the mail.
func ExampleStep() {
	guard, err := middleware.New(memstore.New())
	if err != nil {
		panic(err)
	}
	charges, mails := 0, 0
	work := func(ctx context.Context) (middleware.Result, error) {
		charge, err := middleware.Step(ctx, "charge", func(ctx context.Context) ([]byte, error) {
			charges++
			return fmt.Appendf(nil, "ch_%d", charges), nil // the charge's id: all the rest needs of it
		})
		if err != nil {
			return middleware.Result{}, err
		}
		if mails++; mails == 1 {
			return middleware.Result{}, errors.New("the mail server is down") // releases the claim; the step stays
		}
		return middleware.Result{Value: append([]byte("paid "), charge...)}, nil
	}
	fp := fingerprint.HTTP(fingerprint.HTTPRequest{Method: "POST", Route: "/orders/7/pay"})
	for attempt := 1; attempt <= 3; attempt++ {
		out, err := guard.Execute(context.Background(), "order-7", fp, work)
		fmt.Printf("%d %q replayed=%v err=%v\n", attempt, out.Value, out.Replayed, err)
	}
	fmt.Println("charges:", charges)
	// Output:
	// 1 "" replayed=false err=the mail server is down
	// 2 "paid ch_1" replayed=false err=<nil>
	// 3 "paid ch_1" replayed=true err=<nil>
	// charges: 1
}

// StepOf records a typed result as JSON: a redelivered message resumes
// after its reservation, whose recorded value comes back decoded.
func ExampleStepOf() {
	guard, err := middleware.New(memstore.New())
	if err != nil {
		panic(err)
	}
	type Reservation struct {
		ID    string
		Units int
	}
	reserved := 0
	consume := func(ctx context.Context, fail bool) (string, error) {
		r, err := middleware.StepOf(ctx, "reserve", func(ctx context.Context) (Reservation, error) {
			reserved++
			return Reservation{ID: "res_1", Units: 3}, nil
		})
		if err != nil {
			return "", err
		}
		if fail {
			return "", errors.New("the shipping service timed out")
		}
		return fmt.Sprintf("shipped %d units of %s", r.Units, r.ID), nil
	}
	for delivery, fail := range []bool{true, false} {
		v, _, err := middleware.Do(context.Background(), guard, "msg-9", "order-9", func(ctx context.Context) (string, error) {
			return consume(ctx, fail)
		})
		fmt.Printf("%d %q %v\n", delivery+1, v, err)
	}
	fmt.Println("reserved:", reserved)
	// Output:
	// 1 "" the shipping service timed out
	// 2 "shipped 3 units of res_1" <nil>
	// reserved: 1
}
