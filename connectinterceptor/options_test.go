package connectinterceptor_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/connectinterceptor"
	"github.com/idemkit/idemkit/middleware"
)

// badRequestOf returns the field violations of err's BadRequest detail.
func badRequestOf(err error) []*errdetails.BadRequest_FieldViolation {
	ce := new(connect.Error)
	if !errors.As(err, &ce) {
		return nil
	}
	for _, d := range ce.Details() {
		if v, _ := d.Value(); v != nil {
			if br, ok := v.(*errdetails.BadRequest); ok {
				return br.GetFieldViolations()
			}
		}
	}
	return nil
}

// TestKeyFieldMalformedNamesTheField: a malformed key in the key field is
// InvalidArgument (IDEMPOTENCY_KEY_MALFORMED) with a google.rpc.BadRequest
// whose violation names the field; a malformed header key has no
// BadRequest, as it names no field of the request.
func TestKeyFieldMalformedNamesTheField(t *testing.T) {
	eachProtocol(t, []connectinterceptor.Option{connectinterceptor.WithKeyField("value")}, func(t *testing.T, c caller, svc *service, _ *middleware.Guard) {
		_, err := c.call(t, "a,b")
		wantRefusal(t, err, connect.CodeInvalidArgument, "IDEMPOTENCY_KEY_MALFORMED", false)
		v := badRequestOf(err)
		if len(v) != 1 || v[0].GetField() != "value" || v[0].GetReason() != "IDEMPOTENCY_KEY_MALFORMED" || !strings.Contains(v[0].GetDescription(), "position 1") {
			t.Fatalf("the field violations %v; want one naming value", v)
		}
		_, err = c.call(t, "", "Idempotency-Key", "a,b")
		wantRefusal(t, err, connect.CodeInvalidArgument, "IDEMPOTENCY_KEY_MALFORMED", false)
		if v := badRequestOf(err); v != nil {
			t.Fatalf("a malformed header key: field violations %v; want none", v)
		}
		if n := svc.runs.Load(); n != 0 {
			t.Fatalf("the handler ran %d times; want 0", n)
		}
	})
}

// TestClientFillsKeyField: with WithKeyField on both ends, the client
// fills an empty key field with a fresh key in place, so a resend of the
// same message is a replay and a new message runs again; a key field the
// caller set, or an Idempotency-Key header, is left as it is.
func TestClientFillsKeyField(t *testing.T) {
	field := connectinterceptor.WithKeyField("value")
	keys, err := connectinterceptor.NewClient(field)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range protocols() {
		t.Run(p.name, func(t *testing.T) {
			guard := newGuard(t)
			svc := &service{}
			c := newCaller(t, serve(t, svc, newIdem(t, guard, field, connectinterceptor.WithKeyRequired(true))), p, connect.WithInterceptors(keys))
			msg := wrapperspb.String("")
			first, err := c.create.CallUnary(t.Context(), connect.NewRequest(msg))
			if err != nil || msg.GetValue() == "" || first.Header().Get("Idempotent-Replayed") != "" {
				t.Fatalf("first: %v %v, key field %q; want it filled and run", first, err, msg.GetValue())
			}
			filled := msg.GetValue()
			again, err := c.create.CallUnary(t.Context(), connect.NewRequest(msg))
			if err != nil || msg.GetValue() != filled || again.Header().Get("Idempotent-Replayed") != "true" {
				t.Fatalf("the resend: %v %v, key field %q; want the replay under %q", again, err, msg.GetValue(), filled)
			}
			other, err := c.create.CallUnary(t.Context(), connect.NewRequest(wrapperspb.String("")))
			if err != nil || other.Header().Get("Idempotent-Replayed") != "" {
				t.Fatalf("a new message: %v %v; want it run", other, err)
			}
			mine := wrapperspb.String("mine")
			if _, err := c.create.CallUnary(t.Context(), connect.NewRequest(mine)); err != nil || mine.GetValue() != "mine" {
				t.Fatalf("a key field the caller set: %v, %q; want it kept", err, mine.GetValue())
			}
			withHeader := connect.NewRequest(wrapperspb.String(""))
			withHeader.Header().Set("Idempotency-Key", "h")
			if _, err := c.create.CallUnary(t.Context(), withHeader); err != nil || withHeader.Msg.GetValue() != "" {
				t.Fatalf("a header key the caller set: %v, key field %q; want the field left empty", err, withHeader.Msg.GetValue())
			}
			if n := svc.runs.Load(); n != 4 {
				t.Fatalf("the handler ran %d times; want 4", n)
			}
		})
	}
}

// TestCredentialHeadersBound: WithCredentialHeaders binds calls to those
// headers as to Authorization: a key used with another X-Api-Key is
// refused, the same one replays, and the header is never recorded.
func TestCredentialHeadersBound(t *testing.T) {
	eachProtocol(t, []connectinterceptor.Option{connectinterceptor.WithCredentialHeaders("x-api-key")}, func(t *testing.T, c caller, svc *service, _ *middleware.Guard) {
		first, err := c.call(t, "book", "Idempotency-Key", "k", "X-Api-Key", "alice", "X-Test", "echo-auth")
		if err != nil || first.Header().Get("X-Api-Key") != "alice" {
			t.Fatalf("first: %v %v", first, err)
		}
		_, err = c.call(t, "book", "Idempotency-Key", "k", "X-Api-Key", "bob", "X-Test", "echo-auth")
		wantRefusal(t, err, connect.CodeFailedPrecondition, "IDEMPOTENCY_KEY_CREDENTIALS_MISMATCH", false)
		_, err = c.call(t, "book", "Idempotency-Key", "k", "X-Test", "echo-auth")
		wantRefusal(t, err, connect.CodeFailedPrecondition, "IDEMPOTENCY_KEY_CREDENTIALS_MISMATCH", false)
		again, err := c.call(t, "book", "Idempotency-Key", "k", "X-Api-Key", "alice", "X-Test", "echo-auth")
		if err != nil || again.Header().Get("Idempotent-Replayed") != "true" || again.Header().Get("X-Api-Key") != "" {
			t.Fatalf("Alice's retry: %v %v, header %v; want a replay without X-Api-Key", again, err, again.Header())
		}
		if n := svc.runs.Load(); n != 1 {
			t.Fatalf("the handler ran %d times; want 1", n)
		}
	})
}

// TestRecordTTL: WithRecordTTL sets how long this interceptor's outcomes
// are kept, as Guard.Inspect shows; another interceptor on the same guard
// keeps the guard's.
func TestRecordTTL(t *testing.T) {
	guard := newGuard(t)
	for _, c := range []struct {
		key  string
		opts []connectinterceptor.Option
		ttl  time.Duration
	}{
		{"short", []connectinterceptor.Option{connectinterceptor.WithRecordTTL(90 * time.Minute)}, 90 * time.Minute},
		{"plain", nil, 24 * time.Hour},
	} {
		cl := newCaller(t, serve(t, &service{}, newIdem(t, guard, c.opts...)), protocols()[0])
		before := time.Now()
		if _, err := cl.call(t, "book", "Idempotency-Key", c.key); err != nil {
			t.Fatal(err)
		}
		after := time.Now()
		in, ok, err := guard.Inspect(t.Context(), "", c.key, false)
		if err != nil || !ok {
			t.Fatalf("%s: %v %v", c.key, ok, err)
		}
		if in.ExpiresAt.Before(before.Add(c.ttl)) || in.ExpiresAt.After(after.Add(c.ttl)) {
			t.Fatalf("%s: expires at %v; want %v after the call (%v to %v)", c.key, in.ExpiresAt, c.ttl, before, after)
		}
	}
}

// TestMaxKeyLength: WithMaxKeyLength bounds the key; a longer one is
// refused, one at the bound runs.
func TestMaxKeyLength(t *testing.T) {
	eachProtocol(t, []connectinterceptor.Option{connectinterceptor.WithMaxKeyLength(8)}, func(t *testing.T, c caller, svc *service, _ *middleware.Guard) {
		_, err := c.call(t, "book", "Idempotency-Key", strings.Repeat("k", 9))
		wantRefusal(t, err, connect.CodeInvalidArgument, "IDEMPOTENCY_KEY_MALFORMED", false)
		if _, err := c.call(t, "book", "Idempotency-Key", strings.Repeat("k", 8)); err != nil {
			t.Fatal(err)
		}
		if n := svc.runs.Load(); n != 1 {
			t.Fatalf("the handler ran %d times; want 1", n)
		}
	})
}

// TestErrorDomain: WithErrorDomain sets the domain of the server's
// ErrorInfo, and the client retries an in-progress Aborted of its own
// domain only.
func TestErrorDomain(t *testing.T) {
	eachProtocol(t, []connectinterceptor.Option{connectinterceptor.WithErrorDomain("shop.example"), connectinterceptor.WithKeyRequired(true)}, func(t *testing.T, c caller, _ *service, _ *middleware.Guard) {
		_, err := c.call(t, "book")
		ce := new(connect.Error)
		if !errors.As(err, &ce) || len(ce.Details()) == 0 {
			t.Fatalf("%v; want a refusal with details", err)
		}
		v, _ := ce.Details()[0].Value()
		if info, ok := v.(*errdetails.ErrorInfo); !ok || info.GetDomain() != "shop.example" || info.GetReason() != "IDEMPOTENCY_KEY_MISSING" {
			t.Fatalf("ErrorInfo %v; want IDEMPOTENCY_KEY_MISSING in shop.example", v)
		}
	})
	for _, c := range []struct {
		domain   string
		attempts int
	}{{"shop.example", 2}, {"idemkit.dev", 1}} {
		f := &flaky{fails: 1, err: func() error {
			e := connect.NewError(connect.CodeAborted, errors.New("busy"))
			d, _ := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: "IDEMPOTENCY_KEY_IN_PROGRESS", Domain: c.domain})
			e.AddDetail(d)
			return e
		}}
		cl := serveFlaky(t, f, connectinterceptor.WithErrorDomain("shop.example"), connectinterceptor.WithMaxAttempts(2))
		_, _ = cl.call(t, "book")
		if n := len(f.seen()); n != c.attempts {
			t.Errorf("in progress in domain %s: %d attempts, want %d", c.domain, n, c.attempts)
		}
	}
}

// TestSelector: WithSelector decides which procedures are guarded (by
// default every one not declared NO_SIDE_EFFECTS or IDEMPOTENT), then
// WithInclude, then WithExclude, which wins; the client follows the same
// selector.
func TestSelector(t *testing.T) {
	none := connectinterceptor.WithSelector(func(string) bool { return false })
	for _, c := range []struct {
		name           string
		opts           []connectinterceptor.Option
		create, getter bool // guarded
	}{
		{"default", nil, true, false},
		{"selector", []connectinterceptor.Option{connectinterceptor.WithSelector(func(p string) bool { return p == getOrder })}, false, true},
		{"include", []connectinterceptor.Option{none, connectinterceptor.WithInclude(createOrder)}, true, false},
		{"exclude wins", []connectinterceptor.Option{connectinterceptor.WithInclude(getOrder), connectinterceptor.WithExclude(createOrder, getOrder)}, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			eachProtocol(t, c.opts, func(t *testing.T, cl caller, _ *service, _ *middleware.Guard) {
				for _, pc := range []struct {
					name    string
					client  *connect.Client[wrapperspb.StringValue, wrapperspb.StringValue]
					guarded bool
				}{{createOrder, cl.create, c.create}, {getOrder, cl.get, c.getter}} {
					var replayed bool
					for range 2 {
						req := connect.NewRequest(wrapperspb.String("1"))
						req.Header().Set("Idempotency-Key", "k-"+pc.name)
						res, err := pc.client.CallUnary(t.Context(), req)
						if err != nil {
							t.Fatal(err)
						}
						replayed = res.Header().Get("Idempotent-Replayed") == "true"
					}
					if replayed != pc.guarded {
						t.Errorf("%s: replayed %v; want %v", pc.name, replayed, pc.guarded)
					}
				}
			})
		})
	}
	// The client gives keys to the procedures its selector selects.
	f := &flaky{}
	cl := serveFlaky(t, f, connectinterceptor.WithSelector(func(p string) bool { return p == getOrder }))
	if _, err := cl.call(t, "book"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.get.CallUnary(t.Context(), connect.NewRequest(wrapperspb.String("1"))); err != nil {
		t.Fatal(err)
	}
	if keys := f.seen(); len(keys) != 2 || keys[0] != "" || keys[1] == "" {
		t.Fatalf("keys seen %q; want none for CreateOrder and one for GetOrder", keys)
	}
}

// TestUnreadableRecord: a server that cannot rebuild the recorded message
// (its type is not in WithMessageTypes' registry) answers Unavailable
// (IDEMPOTENCY_RECORD_UNREADABLE) and runs nothing; such a server records
// an answer of a type it cannot rebuild as not replayable.
func TestUnreadableRecord(t *testing.T) {
	for _, p := range protocols() {
		t.Run(p.name, func(t *testing.T) {
			guard := newGuard(t)
			svc := &service{}
			writer := newCaller(t, serve(t, svc, newIdem(t, guard)), p)
			reader := newCaller(t, serve(t, svc, newIdem(t, guard, connectinterceptor.WithMessageTypes(new(protoregistry.Types)))), p)
			if _, err := writer.call(t, "book", "Idempotency-Key", "k"); err != nil {
				t.Fatal(err)
			}
			_, err := reader.call(t, "book", "Idempotency-Key", "k")
			wantRefusal(t, err, connect.CodeUnavailable, "IDEMPOTENCY_RECORD_UNREADABLE", true)
			if n := svc.runs.Load(); n != 1 {
				t.Fatalf("the handler ran %d times; want 1", n)
			}
			if _, err := reader.call(t, "book", "Idempotency-Key", "fresh"); err != nil {
				t.Fatal(err)
			}
			_, err = reader.call(t, "book", "Idempotency-Key", "fresh")
			wantRefusal(t, err, connect.CodeFailedPrecondition, "IDEMPOTENCY_NOT_REPLAYABLE", false)
		})
	}
}

// TestOptionsAppliedToTheRightInterceptor: an option of one interceptor
// given to the other is refused, naming it; the options of both serve
// both.
func TestOptionsAppliedToTheRightInterceptor(t *testing.T) {
	guard := newGuard(t)
	if _, err := connectinterceptor.New(guard, connectinterceptor.WithMaxAttempts(2)); !errors.Is(err, idemkit.ErrInvalidArgument) || !strings.Contains(err.Error(), "WithMaxAttempts applies to the client interceptor only") {
		t.Errorf("New with WithMaxAttempts: %v", err)
	}
	if _, err := connectinterceptor.NewClient(connectinterceptor.WithRecordTTL(time.Hour)); !errors.Is(err, idemkit.ErrInvalidArgument) || !strings.Contains(err.Error(), "WithRecordTTL applies to the server interceptor only") {
		t.Errorf("NewClient with WithRecordTTL: %v", err)
	}
	both := []connectinterceptor.Option{connectinterceptor.WithKeyField("value"), connectinterceptor.WithErrorDomain("shop.example"),
		connectinterceptor.WithSelector(func(string) bool { return true })}
	if _, err := connectinterceptor.New(guard, both...); err != nil {
		t.Errorf("New with the options of both: %v", err)
	}
	if _, err := connectinterceptor.NewClient(both...); err != nil {
		t.Errorf("NewClient with the options of both: %v", err)
	}
}
