package connectinterceptor_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/connectinterceptor"
)

// flaky is a server that answers the first fails calls with err and
// records the Idempotency-Key of every call.
type flaky struct {
	mu    sync.Mutex
	keys  []string
	fails int
	err   func() error
}

func (f *flaky) handle(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys = append(f.keys, req.Header().Get("Idempotency-Key"))
	if len(f.keys) <= f.fails {
		return nil, f.err()
	}
	return connect.NewResponse(wrapperspb.String("ok")), nil
}

func (f *flaky) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.keys)
}

// serveFlaky serves f at createOrder and getOrder (NO_SIDE_EFFECTS) and
// returns a client of each through the client interceptor built with opts.
func serveFlaky(t *testing.T, f *flaky, opts ...connectinterceptor.Option) caller {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(createOrder, connect.NewUnaryHandler(createOrder, f.handle))
	mux.Handle(getOrder, connect.NewUnaryHandler(getOrder, f.handle, connect.WithIdempotency(connect.IdempotencyNoSideEffects)))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	keys, err := connectinterceptor.NewClient(append([]connectinterceptor.Option{
		connectinterceptor.WithBackoff(idemkit.Backoff{Base: time.Millisecond, Max: 50 * time.Millisecond}),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return newCaller(t, srv.URL, protocols()[0], connect.WithInterceptors(keys))
}

func unavailable() error { return connect.NewError(connect.CodeUnavailable, errors.New("try later")) }

// TestClientKeyAcrossRetries: every attempt of one call carries the same
// fresh key; another call gets another.
func TestClientKeyAcrossRetries(t *testing.T) {
	f := &flaky{fails: 2, err: unavailable}
	c := serveFlaky(t, f, connectinterceptor.WithMaxAttempts(3))
	if _, err := c.call(t, "book"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.call(t, "book"); err != nil {
		t.Fatal(err)
	}
	keys := f.seen()
	if len(keys) != 4 || keys[0] == "" || keys[1] != keys[0] || keys[2] != keys[0] || keys[3] == keys[0] || keys[3] == "" {
		t.Fatalf("keys seen %q; want three attempts with one key, then a call with another", keys)
	}
}

// TestClientKeepsCallersKey: a key the caller set is sent as it is; and
// without WithMaxAttempts there is one attempt.
func TestClientKeepsCallersKey(t *testing.T) {
	f := &flaky{fails: 1, err: unavailable}
	c := serveFlaky(t, f)
	if _, err := c.call(t, "book", "Idempotency-Key", "mine"); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("%v; want the Unavailable of the only attempt", err)
	}
	if keys := f.seen(); len(keys) != 1 || keys[0] != "mine" {
		t.Fatalf("keys seen %q; want [mine]", keys)
	}
}

// TestClientSkipsNoSideEffects: a procedure declared NO_SIDE_EFFECTS gets
// no key and no retries.
func TestClientSkipsNoSideEffects(t *testing.T) {
	f := &flaky{fails: 1, err: unavailable}
	c := serveFlaky(t, f, connectinterceptor.WithMaxAttempts(3))
	if _, err := c.get.CallUnary(t.Context(), connect.NewRequest(wrapperspb.String("1"))); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("%v; want the Unavailable of the only attempt", err)
	}
	if keys := f.seen(); len(keys) != 1 || keys[0] != "" {
		t.Fatalf("keys seen %q; want one call without a key", keys)
	}
}

// TestClientRetriesWhatMayPass: in-progress Aborted is retried; another
// Aborted, FailedPrecondition and a RetryInfo past the back-off's Max are
// not.
func TestClientRetriesWhatMayPass(t *testing.T) {
	withDetails := func(code connect.Code, details ...*connect.ErrorDetail) func() error {
		return func() error {
			e := connect.NewError(code, errors.New("refused"))
			for _, d := range details {
				e.AddDetail(d)
			}
			return e
		}
	}
	detail := func(m *errdetails.ErrorInfo) *connect.ErrorDetail {
		d, err := connect.NewErrorDetail(m)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	longRetry, err := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	inProgress := detail(&errdetails.ErrorInfo{Reason: "IDEMPOTENCY_KEY_IN_PROGRESS", Domain: "idemkit.dev"})
	for _, c := range []struct {
		name     string
		err      func() error
		attempts int
	}{
		{"in progress", withDetails(connect.CodeAborted, inProgress), 2},
		{"other aborted", withDetails(connect.CodeAborted), 1},
		{"failed precondition", withDetails(connect.CodeFailedPrecondition, inProgress), 1},
		{"resource exhausted", withDetails(connect.CodeResourceExhausted), 2},
		{"retry info past the back-off", withDetails(connect.CodeUnavailable, longRetry), 1},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "-"), func(t *testing.T) {
			f := &flaky{fails: 1, err: c.err}
			cl := serveFlaky(t, f, connectinterceptor.WithMaxAttempts(5))
			_, err := cl.call(t, "book")
			if n := len(f.seen()); n != c.attempts || (c.attempts == 2) != (err == nil) {
				t.Fatalf("%d attempts, %v; want %d", n, err, c.attempts)
			}
		})
	}
}

func TestClientOptionsValidated(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []connectinterceptor.Option
		fix  string
	}{
		{"nil option", []connectinterceptor.Option{nil}, "an option is nil; remove it"},
		{"nil key function", []connectinterceptor.Option{connectinterceptor.WithNewKey(nil)}, "must not be nil"},
		{"no attempts", []connectinterceptor.Option{connectinterceptor.WithMaxAttempts(0)}, "at least 1"},
		{"bad back-off", []connectinterceptor.Option{connectinterceptor.WithBackoff(idemkit.Backoff{Base: time.Second})}, "0 < Base <= Max"},
	} {
		i, err := connectinterceptor.NewClient(c.opts...)
		if i != nil || !errors.Is(err, idemkit.ErrInvalidArgument) || !strings.Contains(err.Error(), c.fix) {
			t.Errorf("%s: %v; want an InvalidArgument error that says %q", c.name, err, c.fix)
		}
	}
}
