package grpcinterceptor_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/grpcinterceptor"
	"github.com/idemkit/idemkit/middleware"
)

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// retryServiceConfig makes grpc-go retry UnaryCall on Unavailable by
// itself.
const retryServiceConfig = `{"methodConfig": [{
	"name": [{"service": "grpc.testing.TestService", "method": "UnaryCall"}],
	"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.05s",
		"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}
}]}`

// TestClientKeyAcrossRetries: the server fails each key's first attempt
// with Unavailable; the retry (the interceptor's own, or grpc-go's retry
// policy) carries the same key, so the server sees one key twice and the
// call succeeds.
func TestClientKeyAcrossRetries(t *testing.T) {
	for _, c := range []struct {
		name string
		dial []grpc.DialOption
		opts []grpcinterceptor.Option
	}{
		{"interceptor retries", nil, []grpcinterceptor.Option{
			grpcinterceptor.WithMaxAttempts(3), grpcinterceptor.WithBackoff(idemkit.Backoff{Base: time.Millisecond, Max: 10 * time.Millisecond})}},
		{"grpc retry policy", []grpc.DialOption{grpc.WithDefaultServiceConfig(retryServiceConfig)}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			svc := newService()
			svc.failFirst = true
			opts := append([]grpc.DialOption{grpc.WithChainUnaryInterceptor(clientInterceptor(t, c.opts...))}, c.dial...)
			client := dial(t, serve(t, newBackend().guard(t), svc), opts...)
			for range 3 {
				if a := unary(t.Context(), client, &testgrpc.SimpleRequest{}); a.err != nil || a.replayed() {
					t.Fatalf("%v replayed=%v", a.err, a.replayed())
				}
			}
			seen := svc.keysSeen()
			if len(seen) != 3 {
				t.Fatalf("keys seen: %v, want 3 (one per call)", seen)
			}
			for k, n := range seen {
				if !uuidV4.MatchString(k) {
					t.Errorf("key %q is not a UUIDv4", k)
				}
				if n != 2 {
					t.Errorf("key %q seen %d times, want 2 (the forced failure and the retry)", k, n)
				}
			}
			if n := svc.executions.Load(); n != 6 {
				t.Fatalf("executions = %d, want 6", n)
			}
		})
	}
}

func TestClientWithoutRetries(t *testing.T) {
	svc := newService()
	svc.failFirst = true
	client := dial(t, serve(t, newBackend().guard(t), svc),
		grpc.WithChainUnaryInterceptor(clientInterceptor(t)))
	if a := unary(t.Context(), client, &testgrpc.SimpleRequest{}); status.Code(a.err) != codes.Unavailable {
		t.Fatalf("%v", a.err)
	}
}

func TestClientKeepsCallersKey(t *testing.T) {
	svc := newService()
	client := dial(t, serve(t, newBackend().guard(t), svc),
		grpc.WithChainUnaryInterceptor(clientInterceptor(t)))
	ctx := withKey(t.Context(), "mine")
	_ = unary(ctx, client, &testgrpc.SimpleRequest{})
	if a := unary(ctx, client, &testgrpc.SimpleRequest{}); a.err != nil || !a.replayed() {
		t.Fatalf("%v replayed=%v", a.err, a.replayed())
	}
	if seen := svc.keysSeen(); len(seen) != 1 || seen["mine"] != 1 {
		t.Fatalf("keys seen: %v", seen)
	}
}

func TestClientSelector(t *testing.T) {
	svc := newService()
	client := dial(t, serve(t, newBackend().guard(t), svc),
		grpc.WithChainUnaryInterceptor(clientInterceptor(t,
			grpcinterceptor.WithSelector(grpcinterceptor.SelectMethods(cacheableCall)))))
	if _, err := client.UnaryCall(t.Context(), &testgrpc.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CacheableUnaryCall(t.Context(), &testgrpc.SimpleRequest{}); err != nil {
		t.Fatal(err)
	}
	seen := svc.keysSeen()
	if seen[""] != 1 || len(seen) != 2 {
		t.Fatalf("keys seen: %v, want one call without a key and one with", seen)
	}
}

// TestClientRetriesInProgress: a duplicate told "in progress" (Aborted with
// RetryInfo) retries with the same key and gets the first call's answer,
// replayed.
func TestClientRetriesInProgress(t *testing.T) {
	svc := newService()
	svc.started, svc.release = make(chan struct{}, 1), make(chan struct{})
	addr := serve(t, newBackend().guard(t), svc,
		grpcinterceptor.WithWaitForResult(false), grpcinterceptor.WithRetryDelay(5*time.Millisecond))
	plain := dial(t, addr)
	refusals := make(chan struct{}, 1000)
	countRefusals := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if status.Code(err) == codes.Aborted {
			refusals <- struct{}{}
		}
		return err
	}
	retrying := dial(t, addr, grpc.WithChainUnaryInterceptor(
		clientInterceptor(t, grpcinterceptor.WithMaxAttempts(1000), grpcinterceptor.WithBackoff(idemkit.Backoff{Base: time.Millisecond, Max: 20 * time.Millisecond})),
		countRefusals))
	ctx := withKey(t.Context(), "k")
	first := make(chan answer, 1)
	go func() { first <- unary(ctx, plain, &testgrpc.SimpleRequest{}) }()
	waitFor(t, svc.started, "the first execution")
	dup := make(chan answer, 1)
	go func() { dup <- unary(ctx, retrying, &testgrpc.SimpleRequest{}) }()
	waitFor(t, refusals, "an in-progress refusal")
	close(svc.release)
	if a := waitFor(t, first, "the first call"); a.err != nil {
		t.Fatal(a.err)
	}
	a := waitFor(t, dup, "the duplicate")
	if a.err != nil || !a.replayed() || a.resp.GetServerId() != "1" {
		t.Fatalf("%v replayed=%v", a.err, a.replayed())
	}
	if n := svc.executions.Load(); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
}

// TestClientStopsRetrying: an application's own Aborted is not retried, a
// RetryInfo longer than the maximum delay ends the retries, and an ended
// context stops them.
func TestClientStopsRetrying(t *testing.T) {
	calls := 0
	fail := func(err error) grpc.UnaryInvoker {
		return func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
			calls++
			return err
		}
	}
	ci, err := grpcinterceptor.NewClientInterceptor(grpcinterceptor.WithMaxAttempts(5), grpcinterceptor.WithBackoff(idemkit.Backoff{Base: time.Millisecond, Max: time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	longRetry, _ := status.New(codes.Unavailable, "later").WithDetails(retryInfo(time.Hour))
	ended, cancel := context.WithCancel(t.Context())
	cancel()
	for _, c := range []struct {
		name  string
		ctx   context.Context
		err   error
		calls int
	}{
		{"own Aborted", t.Context(), status.Error(codes.Aborted, "conflict"), 1},
		{"NotFound", t.Context(), status.Error(codes.NotFound, "no"), 1},
		{"long RetryInfo", t.Context(), longRetry.Err(), 1},
		{"Unavailable", t.Context(), status.Error(codes.Unavailable, "down"), 5},
		{"ResourceExhausted", t.Context(), status.Error(codes.ResourceExhausted, "slow down"), 5},
		{"ended context", ended, status.Error(codes.Unavailable, "down"), 1},
	} {
		calls = 0
		_ = ci(c.ctx, unaryCall, nil, nil, nil, fail(c.err))
		if calls != c.calls {
			t.Errorf("%s: %d attempts, want %d", c.name, calls, c.calls)
		}
	}
}

func TestClientOptionsValidated(t *testing.T) {
	for i, opts := range [][]grpcinterceptor.Option{
		{grpcinterceptor.WithMetadataKey("grpc-x")},
		{grpcinterceptor.WithNewKey(nil)},
		{grpcinterceptor.WithMaxAttempts(0)},
		{grpcinterceptor.WithBackoff(idemkit.Backoff{Base: 0, Max: time.Second})},
		{grpcinterceptor.WithBackoff(idemkit.Backoff{Base: time.Second, Max: time.Millisecond})},
	} {
		if _, err := grpcinterceptor.NewClientInterceptor(opts...); err == nil {
			t.Errorf("options %d accepted", i)
		}
	}
}

// TestConstructorsRefuseNilOptionsAndZeroGuard: a nil option (to either
// interceptor) and a guard not made by middleware.New are refused at
// construction with an InvalidArgument error that names the fix, rather
// than panicking there or on the first call.
func TestConstructorsRefuseNilOptionsAndZeroGuard(t *testing.T) {
	want := func(what string, made bool, err error, fix string) {
		t.Helper()
		if made || idemkit.CodeOf(err) != idemkit.CodeInvalidArgument || !strings.Contains(err.Error(), fix) {
			t.Errorf("%s: made=%v, %v; want InvalidArgument saying %q", what, made, err, fix)
		}
	}
	g := newBackend().guard(t)
	si, err := grpcinterceptor.New(g, grpcinterceptor.WithKeyRequired(true), nil)
	want("a nil server option", si != nil, err, "an option is nil; remove it")
	ci, err := grpcinterceptor.NewClientInterceptor(nil, grpcinterceptor.WithMaxAttempts(2))
	want("a nil client option", ci != nil, err, "an option is nil; remove it")
	si, err = grpcinterceptor.New(&middleware.Guard{})
	want("a zero guard", si != nil, err, "make it with middleware.New")
	si, err = grpcinterceptor.New(nil)
	want("a nil guard", si != nil, err, "middleware.New")
}

// TestOptionsAppliedToTheRightInterceptor: an option of one interceptor
// given to the other is refused at construction; the options of both
// (metadata key, selector, error domain) configure either, so one list
// serves both ends.
func TestOptionsAppliedToTheRightInterceptor(t *testing.T) {
	g := newBackend().guard(t)
	for _, o := range []grpcinterceptor.Option{
		grpcinterceptor.WithNewKey(func() string { return "k" }),
		grpcinterceptor.WithMaxAttempts(2),
		grpcinterceptor.WithBackoff(idemkit.Backoff{Base: time.Millisecond, Max: time.Second}),
	} {
		if si, err := grpcinterceptor.New(g, o); err == nil || si != nil || idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Errorf("the server interceptor accepted a client option: %v", err)
		}
	}
	for _, o := range []grpcinterceptor.Option{
		grpcinterceptor.WithExclude(emptyCall),
		grpcinterceptor.WithKeyRequired(true),
		grpcinterceptor.WithStorePolicy(grpcinterceptor.StorePolicy{}),
		grpcinterceptor.WithLogger(nil),
	} {
		if ci, err := grpcinterceptor.NewClientInterceptor(o); err == nil || ci != nil || idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Errorf("the client interceptor accepted a server option: %v", err)
		}
	}

	// One list for both ends: the key travels under x-order-key, and the
	// client retries the in-progress status of the shop's own domain.
	shared := []grpcinterceptor.Option{
		grpcinterceptor.WithMetadataKey("x-order-key"),
		grpcinterceptor.WithSelector(grpcinterceptor.SelectMethods(unaryCall)),
		grpcinterceptor.WithErrorDomain("shop.example"),
	}
	svc := newService()
	svc.failFirst = true
	addr := serve(t, g, svc, shared...)
	keys := clientInterceptor(t, append(shared, grpcinterceptor.WithMaxAttempts(2),
		grpcinterceptor.WithBackoff(idemkit.Backoff{Base: time.Millisecond, Max: 10 * time.Millisecond}))...)
	c := dial(t, addr, grpc.WithChainUnaryInterceptor(keys))
	// The server requires the key: the call succeeds only if the client
	// attached it under x-order-key.
	if a := unary(t.Context(), c, &testgrpc.SimpleRequest{}); a.err != nil {
		t.Fatalf("a call with the shared options: %v", a.err)
	}
	if n := svc.executions.Load(); n != 2 {
		t.Fatalf("executions = %d, want 2 (the forced failure and the retry)", n)
	}

	// The client retries Aborted IDEMPOTENCY_KEY_IN_PROGRESS of its domain
	// only.
	for _, c := range []struct {
		domain string
		calls  int
	}{{"shop.example", 2}, {"idemkit.dev", 1}} {
		ci := clientInterceptor(t, grpcinterceptor.WithErrorDomain("shop.example"), grpcinterceptor.WithMaxAttempts(2),
			grpcinterceptor.WithBackoff(idemkit.Backoff{Base: time.Millisecond, Max: 10 * time.Millisecond}))
		busy, _ := status.New(codes.Aborted, "busy").WithDetails(&errdetails.ErrorInfo{Reason: "IDEMPOTENCY_KEY_IN_PROGRESS", Domain: c.domain})
		calls := 0
		_ = ci(t.Context(), unaryCall, nil, nil, nil, func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
			calls++
			return busy.Err()
		})
		if calls != c.calls {
			t.Errorf("in progress in domain %s: %d attempts, want %d", c.domain, calls, c.calls)
		}
	}
}

func TestClientNewKey(t *testing.T) {
	ci, err := grpcinterceptor.NewClientInterceptor(grpcinterceptor.WithNewKey(func() string { return "fixed" }),
		grpcinterceptor.WithMetadataKey("X-Key"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	_ = ci(t.Context(), unaryCall, nil, nil, nil, func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		got = metadata.ValueFromOutgoingContext(ctx, "x-key")
		return nil
	})
	if len(got) != 1 || got[0] != "fixed" {
		t.Fatalf("key %v", got)
	}
}

// TestClientReturnsLastErrorBeforeDeadline: when the next attempt could
// only start after the call's deadline, the interceptor returns the last
// attempt's error at once instead of waiting for DeadlineExceeded.
func TestClientReturnsLastErrorBeforeDeadline(t *testing.T) {
	ci, err := grpcinterceptor.NewClientInterceptor(grpcinterceptor.WithMaxAttempts(5), grpcinterceptor.WithBackoff(idemkit.Backoff{Base: time.Millisecond, Max: time.Hour}))
	if err != nil {
		t.Fatal(err)
	}
	later, _ := status.New(codes.Unavailable, "later").WithDetails(retryInfo(30 * time.Minute))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	calls := 0
	err = ci(ctx, unaryCall, nil, nil, nil, func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		calls++
		return later.Err()
	})
	if calls != 1 || status.Code(err) != codes.Unavailable || status.Convert(err).Message() != "later" {
		t.Fatalf("%d attempts, error %v; want 1 and the attempt's Unavailable", calls, err)
	}
}
