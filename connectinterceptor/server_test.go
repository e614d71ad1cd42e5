package connectinterceptor_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/connectinterceptor"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/memstore"
)

// eachProtocol runs f over the Connect, gRPC (h2c) and gRPC-Web
// protocols, each with a service and guard of its own behind the
// interceptor built with opts.
func eachProtocol(t *testing.T, opts []connectinterceptor.Option, f func(t *testing.T, c caller, svc *service, guard *middleware.Guard)) {
	for _, p := range protocols() {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			guard, err := middleware.New(memstore.New())
			if err != nil {
				t.Fatal(err)
			}
			svc := &service{}
			f(t, newCaller(t, serve(t, svc, newIdem(t, guard, opts...)), p), svc, guard)
		})
	}
}

// TestReplayRestoresMessageHeadersAndTrailers: a retry with the same key
// and request gets the recorded message, headers and trailers, marked
// Idempotent-Replayed, without running the handler again.
func TestReplayRestoresMessageHeadersAndTrailers(t *testing.T) {
	eachProtocol(t, nil, func(t *testing.T, c caller, svc *service, _ *middleware.Guard) {
		first, err := c.call(t, "book", "Idempotency-Key", "k1")
		if err != nil {
			t.Fatal(err)
		}
		again, err := c.call(t, "book", "Idempotency-Key", "k1")
		if err != nil {
			t.Fatal(err)
		}
		if first.Msg.GetValue() != "order 1 of book" || first.Header().Get("Idempotent-Replayed") != "" {
			t.Fatalf("first: %q replayed=%q", first.Msg.GetValue(), first.Header().Get("Idempotent-Replayed"))
		}
		if again.Msg.GetValue() != first.Msg.GetValue() || again.Header().Get("Idempotent-Replayed") != "true" ||
			again.Header().Get("X-Order") != "1" || again.Trailer().Get("X-Total") != "10" {
			t.Fatalf("retry: %q, header %v, trailer %v; want the first answer, replayed", again.Msg.GetValue(), again.Header(), again.Trailer())
		}
		if n := svc.runs.Load(); n != 1 {
			t.Fatalf("the handler ran %d times; want 1", n)
		}
		// Another key runs again.
		if other, err := c.call(t, "book", "Idempotency-Key", "k2"); err != nil || other.Msg.GetValue() != "order 2 of book" {
			t.Fatalf("another key: %v %v", other, err)
		}
	})
}

// TestMismatchIsFailedPrecondition: the same key with another request is
// refused, never answered with the first call's response.
func TestMismatchIsFailedPrecondition(t *testing.T) {
	eachProtocol(t, nil, func(t *testing.T, c caller, svc *service, _ *middleware.Guard) {
		if _, err := c.call(t, "book", "Idempotency-Key", "k"); err != nil {
			t.Fatal(err)
		}
		_, err := c.call(t, "pen", "Idempotency-Key", "k")
		wantRefusal(t, err, connect.CodeFailedPrecondition, "IDEMPOTENCY_KEY_REUSED", false)
		if n := svc.runs.Load(); n != 1 {
			t.Fatalf("the handler ran %d times; want 1", n)
		}
	})
}

// TestInProgressIsAborted: without waiting, a duplicate of a running call
// is Aborted with a RetryInfo; with waiting (the default) it gets the
// replay once the first call is done.
func TestInProgressIsAborted(t *testing.T) {
	for _, wait := range []bool{false, true} {
		t.Run(map[bool]string{false: "no-wait", true: "wait"}[wait], func(t *testing.T) {
			eachProtocol(t, []connectinterceptor.Option{connectinterceptor.WithWaitForResult(wait)}, func(t *testing.T, c caller, svc *service, _ *middleware.Guard) {
				var wg sync.WaitGroup
				wg.Go(func() {
					if _, err := c.call(t, "book", "Idempotency-Key", "slow", "X-Test", "sleep"); err != nil {
						t.Error(err)
					}
				})
				for deadline := time.Now().Add(10 * time.Second); svc.runs.Load() < 1; time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatal("the slow call did not start")
					}
				}
				res, err := c.call(t, "book", "Idempotency-Key", "slow", "X-Test", "sleep")
				wg.Wait()
				if wait {
					if err != nil || res.Header().Get("Idempotent-Replayed") != "true" {
						t.Fatalf("the waiting duplicate: %v %v; want the replay", res, err)
					}
				} else {
					wantRefusal(t, err, connect.CodeAborted, "IDEMPOTENCY_KEY_IN_PROGRESS", true)
				}
				if n := svc.runs.Load(); n != 1 {
					t.Fatalf("the handler ran %d times; want 1", n)
				}
			})
		})
	}
}

// TestBackendDownIsUnavailable: a backend that cannot answer is
// Unavailable with a RetryInfo, and nothing runs.
func TestBackendDownIsUnavailable(t *testing.T) {
	for _, p := range protocols() {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			s := memstore.New()
			guard, err := middleware.New(s)
			if err != nil {
				t.Fatal(err)
			}
			svc := &service{}
			c := newCaller(t, serve(t, svc, newIdem(t, guard)), p)
			_ = s.Close()
			_, err = c.call(t, "book", "Idempotency-Key", "k")
			wantRefusal(t, err, connect.CodeUnavailable, "IDEMPOTENCY_UNAVAILABLE", true)
			if n := svc.runs.Load(); n != 0 {
				t.Fatalf("the handler ran %d times; want 0", n)
			}
		})
	}
}

// TestErrorsReplayedOrForgotten: a handler's FailedPrecondition is
// recorded and replayed with its code, message, details and metadata; an
// Internal error and a panic are delivered and forgotten, so a retry runs
// again.
func TestErrorsReplayedOrForgotten(t *testing.T) {
	eachProtocol(t, nil, func(t *testing.T, c caller, svc *service, _ *middleware.Guard) {
		_, first := c.call(t, "book", "Idempotency-Key", "d", "X-Test", "declined")
		_, again := c.call(t, "book", "Idempotency-Key", "d", "X-Test", "declined")
		f, a := new(connect.Error), new(connect.Error)
		if !errors.As(first, &f) || !errors.As(again, &a) {
			t.Fatalf("declined: %v, then %v", first, again)
		}
		if a.Code() != connect.CodeFailedPrecondition || a.Message() != f.Message() || a.Message() != "card declined (1)" ||
			a.Meta().Get("X-Decline") != "1" || a.Meta().Get("Idempotent-Replayed") != "true" || f.Meta().Get("Idempotent-Replayed") != "" {
			t.Fatalf("replayed error %v (meta %v); want the first one's %v, replayed", a, a.Meta(), f)
		}
		if ds := a.Details(); len(ds) != 1 {
			t.Fatalf("replayed details %v; want the handler's one", ds)
		} else if v, err := ds[0].Value(); err != nil || v.(*errdetails.ErrorInfo).GetReason() != "CARD_DECLINED" {
			t.Fatalf("replayed detail %v %v", v, err)
		}
		for _, how := range []string{"internal", "panic"} {
			_, e1 := c.call(t, "book", "Idempotency-Key", how, "X-Test", how)
			_, e2 := c.call(t, "book", "Idempotency-Key", how, "X-Test", how)
			if connect.CodeOf(e1) != connect.CodeInternal || connect.CodeOf(e2) != connect.CodeInternal {
				t.Fatalf("%s: %v, then %v; want Internal twice", how, e1, e2)
			}
		}
		if n := svc.runs.Load(); n != 5 {
			t.Fatalf("the handler ran %d times; want 5 (once declined, twice each forgotten)", n)
		}
	})
}

// TestStorePolicy: by default an error whose code the policy forgets, or
// with a RetryInfo, is delivered and forgotten; a policy that records
// everything (as Stripe does) replays Internal, Unknown (an error that is
// no *connect.Error), RetryInfo errors and panics with their code and
// message.
func TestStorePolicy(t *testing.T) {
	cases := []string{"internal", "plain", "try-again", "panic"}
	for _, recordAll := range []bool{false, true} {
		var opts []connectinterceptor.Option
		if recordAll {
			opts = append(opts, connectinterceptor.WithStorePolicy(connectinterceptor.StorePolicy{TryAgain: true, Panic: true}))
		}
		t.Run(map[bool]string{false: "default", true: "record-all"}[recordAll], func(t *testing.T) {
			eachProtocol(t, opts, func(t *testing.T, c caller, svc *service, _ *middleware.Guard) {
				for _, how := range cases {
					_, first := c.call(t, "book", "Idempotency-Key", how, "X-Test", how)
					_, again := c.call(t, "book", "Idempotency-Key", how, "X-Test", how)
					f, a := new(connect.Error), new(connect.Error)
					if !errors.As(first, &f) || !errors.As(again, &a) || a.Code() != f.Code() {
						t.Fatalf("%s: %v, then %v; want the same code twice", how, first, again)
					}
					if replayed := a.Meta().Get("Idempotent-Replayed") == "true"; replayed != recordAll || (recordAll && a.Message() != f.Message()) {
						t.Fatalf("%s: %v, then %v (replayed %v); want a replay %v", how, first, again, replayed, recordAll)
					}
				}
				want := int32(2 * len(cases))
				if recordAll {
					want = int32(len(cases))
				}
				if n := svc.runs.Load(); n != want {
					t.Fatalf("the handler ran %d times; want %d", n, want)
				}
			})
		})
	}
}

// TestKeys: no key passes through (or is InvalidArgument when required); a
// malformed key is InvalidArgument; a key in a request field is read
// before the header.
func TestKeys(t *testing.T) {
	eachProtocol(t, nil, func(t *testing.T, c caller, svc *service, _ *middleware.Guard) {
		for range 2 {
			if res, err := c.call(t, "book"); err != nil || res.Header().Get("Idempotent-Replayed") != "" {
				t.Fatalf("no key: %v %v; want it run, unguarded", res, err)
			}
		}
		for _, header := range [][]string{
			{"Idempotency-Key", "a,b"},
			{"Idempotency-Key", "a", "Idempotency-Key", "b"},
			{"Idempotency-Key", strings.Repeat("k", 256)},
		} {
			_, err := c.call(t, "book", header...)
			wantRefusal(t, err, connect.CodeInvalidArgument, "IDEMPOTENCY_KEY_MALFORMED", false)
		}
		if n := svc.runs.Load(); n != 2 {
			t.Fatalf("the handler ran %d times; want 2", n)
		}
	})
	eachProtocol(t, []connectinterceptor.Option{connectinterceptor.WithKeyRequired(true)}, func(t *testing.T, c caller, svc *service, _ *middleware.Guard) {
		_, err := c.call(t, "book")
		wantRefusal(t, err, connect.CodeInvalidArgument, "IDEMPOTENCY_KEY_MISSING", false)
		if n := svc.runs.Load(); n != 0 {
			t.Fatalf("the handler ran %d times; want 0", n)
		}
	})
	eachProtocol(t, []connectinterceptor.Option{connectinterceptor.WithKeyField("value"), connectinterceptor.WithKeyRequired(true)}, func(t *testing.T, c caller, svc *service, _ *middleware.Guard) {
		// The field is the key, whatever the header says.
		first, err := c.call(t, "book-1", "Idempotency-Key", "h1")
		if err != nil {
			t.Fatal(err)
		}
		again, err := c.call(t, "book-1", "Idempotency-Key", "h2")
		if err != nil || again.Header().Get("Idempotent-Replayed") != "true" || again.Msg.GetValue() != first.Msg.GetValue() {
			t.Fatalf("the same key field under another header: %v %v; want a replay", again, err)
		}
	})
}

// TestCredentialsBound: without a scope hook, a key used with other
// credentials is refused and the handler never runs for it; the
// Authorization a handler sets is never recorded.
func TestCredentialsBound(t *testing.T) {
	eachProtocol(t, nil, func(t *testing.T, c caller, svc *service, _ *middleware.Guard) {
		first, err := c.call(t, "book", "Idempotency-Key", "k", "Authorization", "Bearer alice", "X-Test", "echo-auth")
		if err != nil || first.Header().Get("Authorization") != "Bearer alice" {
			t.Fatalf("first: %v %v", first, err)
		}
		_, err = c.call(t, "book", "Idempotency-Key", "k", "Authorization", "Bearer bob", "X-Test", "echo-auth")
		wantRefusal(t, err, connect.CodeFailedPrecondition, "IDEMPOTENCY_KEY_CREDENTIALS_MISMATCH", false)
		again, err := c.call(t, "book", "Idempotency-Key", "k", "Authorization", "Bearer alice", "X-Test", "echo-auth")
		if err != nil || again.Header().Get("Idempotent-Replayed") != "true" || again.Header().Get("Authorization") != "" {
			t.Fatalf("Alice's retry: %v %v, header %v; want a replay without the Authorization", again, err, again.Header())
		}
		if n := svc.runs.Load(); n != 1 {
			t.Fatalf("the handler ran %d times; want 1", n)
		}
	})
	// A scope hook replaces the binding: the principal, not the token.
	scope := connectinterceptor.WithScope(func(_ context.Context, req connect.AnyRequest) string {
		return strings.TrimRight(req.Header().Get("Authorization"), "0123456789")
	})
	eachProtocol(t, []connectinterceptor.Option{scope}, func(t *testing.T, c caller, svc *service, _ *middleware.Guard) {
		if _, err := c.call(t, "book", "Idempotency-Key", "k", "Authorization", "Bearer alice-1"); err != nil {
			t.Fatal(err)
		}
		refreshed, err := c.call(t, "book", "Idempotency-Key", "k", "Authorization", "Bearer alice-2")
		if err != nil || refreshed.Header().Get("Idempotent-Replayed") != "true" {
			t.Fatalf("Alice's refreshed retry: %v %v; want a replay", refreshed, err)
		}
		bob, err := c.call(t, "book", "Idempotency-Key", "k", "Authorization", "Bearer bob-1")
		if err != nil || bob.Header().Get("Idempotent-Replayed") != "" || bob.Msg.GetValue() != "order 2 of book" {
			t.Fatalf("Bob with Alice's key: %v %v; want his own call", bob, err)
		}
	})
}

// TestNoSideEffectsNotGuarded: a procedure declared NO_SIDE_EFFECTS runs
// every time, key or not, and is reported passed through.
func TestNoSideEffectsNotGuarded(t *testing.T) {
	eachProtocol(t, nil, func(t *testing.T, c caller, svc *service, _ *middleware.Guard) {
		for i := range 2 {
			req := connect.NewRequest(wrapperspb.String("1"))
			req.Header().Set("Idempotency-Key", "k")
			res, err := c.get.CallUnary(t.Context(), req)
			if err != nil || res.Header().Get("Idempotent-Replayed") != "" || res.Msg.GetValue() != "read "+string(rune('1'+i)) {
				t.Fatalf("read %d: %v %v; want it run", i, res, err)
			}
		}
	})
}

func TestNewRefusesMisconfigurationNamingTheFix(t *testing.T) {
	guard, err := middleware.New(memstore.New())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		guard *middleware.Guard
		opts  []connectinterceptor.Option
		fix   string
	}{
		{"nil guard", nil, nil, "make one with middleware.New"},
		{"zero guard", &middleware.Guard{}, nil, "make one with middleware.New"},
		{"nil option", guard, []connectinterceptor.Option{nil}, "an option is nil; remove it"},
		{"bad key field", guard, []connectinterceptor.Option{connectinterceptor.WithKeyField("request id")}, "such as request_id"},
		{"no response room", guard, []connectinterceptor.Option{connectinterceptor.WithMaxResponseBytes(0)}, "must be positive"},
		{"negative retry delay", guard, []connectinterceptor.Option{connectinterceptor.WithRetryDelay(-time.Second)}, "must not be negative"},
		{"no key length", guard, []connectinterceptor.Option{connectinterceptor.WithMaxKeyLength(0)}, "maximum key length must be positive"},
		{"record TTL under 1ms", guard, []connectinterceptor.Option{connectinterceptor.WithRecordTTL(time.Microsecond)}, "at least 1ms"},
		{"zero record TTL", guard, []connectinterceptor.Option{connectinterceptor.WithRecordTTL(0)}, "at least 1ms"},
		{"empty error domain", guard, []connectinterceptor.Option{connectinterceptor.WithErrorDomain("")}, `the default is "idemkit.dev"`},
		{"nil message types", guard, []connectinterceptor.Option{connectinterceptor.WithMessageTypes(nil)}, "protoregistry.GlobalTypes"},
		{"credential headers with a scope", guard, []connectinterceptor.Option{connectinterceptor.WithCredentialHeaders("X-Api-Key"),
			connectinterceptor.WithScope(func(context.Context, connect.AnyRequest) string { return "" })}, "drop WithCredentialHeaders"},
		{"no credential header", guard, []connectinterceptor.Option{connectinterceptor.WithCredentialHeaders()}, "at least one header name"},
		{"bad credential header", guard, []connectinterceptor.Option{connectinterceptor.WithCredentialHeaders("X Api Key")}, `such as "X-Api-Key"`},
		{"protocol header as credentials", guard, []connectinterceptor.Option{connectinterceptor.WithCredentialHeaders("grpc-timeout")}, `such as "X-Api-Key"`},
		{"key header as credentials", guard, []connectinterceptor.Option{connectinterceptor.WithCredentialHeaders("idempotency-key")}, `such as "X-Api-Key"`},
	} {
		idem, err := connectinterceptor.New(c.guard, c.opts...)
		if idem != nil || !errors.Is(err, idemkit.ErrInvalidArgument) || !strings.Contains(err.Error(), c.fix) {
			t.Errorf("%s: %v; want an InvalidArgument error that says %q", c.name, err, c.fix)
		}
	}
}
