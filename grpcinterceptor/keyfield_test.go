package grpcinterceptor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/grpcinterceptor"
	"github.com/idemkit/idemkit/middleware"
)

// ordersServer serves svc behind a server interceptor for g that reads the
// key from request_id (and knows the Orders types), with opts, and
// returns a connection to it.
func ordersServer(t *testing.T, g *middleware.Guard, svc *ordersService, dialOpts []grpc.DialOption, opts ...grpcinterceptor.Option) *grpc.ClientConn {
	t.Helper()
	opts = append([]grpcinterceptor.Option{grpcinterceptor.WithKeyField("request_id"), grpcinterceptor.WithMessageTypes(ordersProto().types)}, opts...)
	return dialConn(t, serveOrders(t, svc, serverInterceptor(t, g, opts...)), dialOpts...)
}

// recorded reports whether g holds a record of key (no scope).
func recorded(t *testing.T, g *middleware.Guard, key string) bool {
	t.Helper()
	_, ok, err := g.Inspect(t.Context(), "", key, false)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestKeyField: the request's request_id is the key: a second call with
// the same request_id (and no metadata) is a replay, and the record is
// kept under that key.
func TestKeyField(t *testing.T) {
	schema := ordersProto()
	g := newBackend().guard(t)
	svc := &ordersService{}
	conn := ordersServer(t, g, svc, nil)
	first := call(t.Context(), conn, createOrder, schema.request(createOrder, "req-1", "book"))
	if first.err != nil || grpcinterceptor.Replayed(first.header) || first.id() != "order-1" {
		t.Fatalf("first: %v %v replayed=%v", first.id(), first.err, grpcinterceptor.Replayed(first.header))
	}
	again := call(t.Context(), conn, createOrder, schema.request(createOrder, "req-1", "book"))
	if again.err != nil || !grpcinterceptor.Replayed(again.header) || again.id() != "order-1" || stringField(again.resp, "request_id") != "req-1" {
		t.Fatalf("retry: %v %v replayed=%v; want order-1 replayed", again.id(), again.err, grpcinterceptor.Replayed(again.header))
	}
	if !recorded(t, g, "req-1") {
		t.Fatal("no record under the request_id")
	}
	// The request_id is part of the request: another item under it is a
	// reused key.
	other := call(t.Context(), conn, createOrder, schema.request(createOrder, "req-1", "pen"))
	checkRefusal(t, other.err, codes.FailedPrecondition, "IDEMPOTENCY_KEY_REUSED", false)
	if n := svc.executions.Load(); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
}

// TestKeyFieldPrecedence: a set request_id is the key and the metadata is
// not read at all; an empty one leaves the key to the metadata.
func TestKeyFieldPrecedence(t *testing.T) {
	schema := ordersProto()
	g := newBackend().guard(t)
	svc := &ordersService{}
	conn := ordersServer(t, g, svc, nil)

	a := call(withKey(t.Context(), "md-1"), conn, createOrder, schema.request(createOrder, "field-1", "book"))
	if a.err != nil {
		t.Fatal(a.err)
	}
	if !recorded(t, g, "field-1") || recorded(t, g, "md-1") {
		t.Fatal("with both set, the key is not the field's")
	}
	// The same request_id with another metadata key is the same call.
	if b := call(withKey(t.Context(), "md-other"), conn, createOrder, schema.request(createOrder, "field-1", "book")); b.err != nil ||
		!grpcinterceptor.Replayed(b.header) || b.id() != a.id() {
		t.Fatalf("another metadata key: %v %v; want %s replayed", b.id(), b.err, a.id())
	}
	// A malformed metadata key is not read when the field is set.
	if b := call(withKey(t.Context(), "a b"), conn, createOrder, schema.request(createOrder, "field-2", "book")); b.err != nil {
		t.Fatalf("a malformed metadata key beside a set request_id: %v", b.err)
	}
	// An empty request_id: the metadata key.
	if b := call(withKey(t.Context(), "md-3"), conn, createOrder, schema.request(createOrder, "", "book")); b.err != nil {
		t.Fatal(b.err)
	}
	if !recorded(t, g, "md-3") {
		t.Fatal("with request_id empty, the key is not the metadata's")
	}
	if n := svc.executions.Load(); n != 3 {
		t.Fatalf("executions = %d, want 3", n)
	}
}

// TestKeyFieldMalformed: a request_id that would be refused as a metadata
// key is InvalidArgument IDEMPOTENCY_KEY_MALFORMED with a BadRequest
// naming the field, and the handler does not run.
func TestKeyFieldMalformed(t *testing.T) {
	schema := ordersProto()
	long := strings.Repeat("k", 256)
	for name, id := range map[string]string{"space": "a b", "too long": long, "non-ASCII": "clé", "a list": "a,b", "control": "a\x01"} {
		t.Run(name, func(t *testing.T) {
			svc := &ordersService{}
			conn := ordersServer(t, newBackend().guard(t), svc, nil)
			// A valid metadata key does not rescue it: the field is read
			// first.
			a := call(withKey(t.Context(), "fine"), conn, createOrder, schema.request(createOrder, id, "book"))
			checkRefusal(t, a.err, codes.InvalidArgument, "IDEMPOTENCY_KEY_MALFORMED", false)
			if md := grpcinterceptor.ErrorInfoOf(a.err).GetMetadata(); md["key_field"] != "request_id" || md["metadata_key"] != keyMD {
				t.Fatalf("ErrorInfo metadata = %v", md)
			}
			var violations []*errdetails.BadRequest_FieldViolation
			for _, d := range status.Convert(a.err).Details() {
				if br, ok := d.(*errdetails.BadRequest); ok {
					violations = br.GetFieldViolations()
				}
			}
			if len(violations) != 1 || violations[0].GetField() != "request_id" || violations[0].GetReason() != "IDEMPOTENCY_KEY_MALFORMED" {
				t.Fatalf("BadRequest violations = %v", violations)
			}
			if msg := status.Convert(a.err).Message(); !strings.Contains(msg, "request_id") || strings.Contains(msg, id) {
				t.Fatalf("message %q: want the field named and the key not repeated", msg)
			}
			if n := svc.executions.Load(); n != 0 {
				t.Fatalf("executions = %d, want 0", n)
			}
		})
	}
	t.Run("the longest key", func(t *testing.T) {
		conn := ordersServer(t, newBackend().guard(t), &ordersService{}, nil)
		if a := call(t.Context(), conn, createOrder, schema.request(createOrder, long[:255], "book")); a.err != nil {
			t.Fatal(a.err)
		}
	})
}

// TestKeyFieldNotAKeySource: a method whose request has no request_id, or
// one that is not a singular string, takes its key from the metadata only
// (with keys required, a call without one is refused as without the
// option, and its refusal does not name the field); request_id's own
// method names it.
func TestKeyFieldNotAKeySource(t *testing.T) {
	schema := ordersProto()
	svc := &ordersService{}
	conn := ordersServer(t, newBackend().guard(t), svc, nil, grpcinterceptor.WithKeyRequired(true))
	for _, c := range []struct {
		method string
		id     any
	}{
		{createNumbered, int64(7)},
		{createTagged, []string{"tag-1"}},
		{createPlain, nil},
	} {
		req := schema.request(c.method, c.id, "book")
		a := call(t.Context(), conn, c.method, req)
		checkRefusal(t, a.err, codes.InvalidArgument, "IDEMPOTENCY_KEY_MISSING", false)
		if md := grpcinterceptor.ErrorInfoOf(a.err).GetMetadata(); md["key_field"] != "" || md["metadata_key"] != keyMD {
			t.Fatalf("%s: ErrorInfo metadata = %v; want the metadata key only", c.method, md)
		}
		if msg := status.Convert(a.err).Message(); strings.Contains(msg, "request_id") {
			t.Fatalf("%s: message %q names a field the method does not have", c.method, msg)
		}
		ctx := withKey(t.Context(), "md-"+c.method)
		first := call(ctx, conn, c.method, req)
		again := call(ctx, conn, c.method, req)
		if first.err != nil || again.err != nil || !grpcinterceptor.Replayed(again.header) || again.id() != first.id() {
			t.Fatalf("%s with a metadata key: %v, %v replayed=%v", c.method, first.err, again.err, grpcinterceptor.Replayed(again.header))
		}
	}
	a := call(t.Context(), conn, createOrder, schema.request(createOrder, "", "book"))
	checkRefusal(t, a.err, codes.InvalidArgument, "IDEMPOTENCY_KEY_MISSING", false)
	if md := grpcinterceptor.ErrorInfoOf(a.err).GetMetadata(); md["key_field"] != "request_id" {
		t.Fatalf("ErrorInfo metadata = %v; want key_field request_id", md)
	}
	if msg := status.Convert(a.err).Message(); !strings.Contains(msg, "request_id") || !strings.Contains(msg, keyMD) {
		t.Fatalf("message %q: want both the field and the metadata key named", msg)
	}
	if n := svc.executions.Load(); n != 3 {
		t.Fatalf("executions = %d, want 3", n)
	}
}

// TestKeyFieldOptional: by default (keys not required), a request with
// neither a request_id nor a metadata key passes through, every time.
func TestKeyFieldOptional(t *testing.T) {
	svc := &ordersService{}
	conn := ordersServer(t, newBackend().guard(t), svc, nil)
	for range 2 {
		if a := call(t.Context(), conn, createOrder, ordersProto().request(createOrder, "", "book")); a.err != nil || grpcinterceptor.Replayed(a.header) {
			t.Fatalf("%v replayed=%v", a.err, grpcinterceptor.Replayed(a.header))
		}
	}
	if n := svc.executions.Load(); n != 2 {
		t.Fatalf("executions = %d, want 2", n)
	}
}

// TestKeyFieldOptionValidated: a key field must be a field name, on either
// interceptor; "" is none.
func TestKeyFieldOptionValidated(t *testing.T) {
	g := newBackend().guard(t)
	for _, name := range []string{"request-id", "1id", "a.b", "request id"} {
		if si, err := grpcinterceptor.New(g, grpcinterceptor.WithKeyField(name)); err == nil || si != nil || idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Errorf("server: WithKeyField(%q) accepted (%v)", name, err)
		}
		if ci, err := grpcinterceptor.NewClientInterceptor(grpcinterceptor.WithKeyField(name)); err == nil || ci != nil {
			t.Errorf("client: WithKeyField(%q) accepted", name)
		}
	}
	for _, name := range []string{"", "request_id", "requestId"} {
		if _, err := grpcinterceptor.New(g, grpcinterceptor.WithKeyField(name)); err != nil {
			t.Errorf("server: WithKeyField(%q): %v", name, err)
		}
		if _, err := grpcinterceptor.NewClientInterceptor(grpcinterceptor.WithKeyField(name)); err != nil {
			t.Errorf("client: WithKeyField(%q): %v", name, err)
		}
	}
}

// ordersRetryServiceConfig makes grpc-go retry CreateOrder on Unavailable
// by itself.
const ordersRetryServiceConfig = `{"methodConfig": [{
	"name": [{"service": "idemkit.test.Orders", "method": "CreateOrder"}],
	"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.05s",
		"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}
}]}`

// TestClientFillsKeyField: the client interceptor with the key field fills
// an empty request_id with a fresh UUID, in the caller's message, and adds
// no metadata key: the retry after a forced Unavailable (the
// interceptor's own, or grpc-go's retry policy) carries it, and sending
// the same message again is a replay.
func TestClientFillsKeyField(t *testing.T) {
	for _, c := range []struct {
		name string
		dial []grpc.DialOption
		opts []grpcinterceptor.Option
	}{
		{"interceptor retries", nil, []grpcinterceptor.Option{
			grpcinterceptor.WithMaxAttempts(3), grpcinterceptor.WithBackoff(idemkit.Backoff{Base: time.Millisecond, Max: 10 * time.Millisecond})}},
		{"grpc retry policy", []grpc.DialOption{grpc.WithDefaultServiceConfig(ordersRetryServiceConfig)}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			svc := &ordersService{failFirst: true}
			opts := append([]grpcinterceptor.Option{grpcinterceptor.WithKeyField("request_id")}, c.opts...)
			dialOpts := append([]grpc.DialOption{grpc.WithChainUnaryInterceptor(clientInterceptor(t, opts...))}, c.dial...)
			conn := ordersServer(t, newBackend().guard(t), svc, dialOpts)
			req := ordersProto().request(createOrder, nil, "book")
			first := call(t.Context(), conn, createOrder, req)
			if first.err != nil || grpcinterceptor.Replayed(first.header) {
				t.Fatalf("%v replayed=%v", first.err, grpcinterceptor.Replayed(first.header))
			}
			id := stringField(req, "request_id")
			if !uuidV4.MatchString(id) {
				t.Fatalf("request_id %q in the caller's message: want a UUIDv4", id)
			}
			seen := svc.seen()
			if len(seen) != 2 {
				t.Fatalf("attempts seen: %v, want 2 (the forced failure and the retry)", seen)
			}
			for _, a := range seen {
				if a.requestID != id || len(a.keyMD) != 0 {
					t.Fatalf("attempt %+v: want request_id %s and no metadata key", a, id)
				}
			}
			again := call(t.Context(), conn, createOrder, req)
			if again.err != nil || !grpcinterceptor.Replayed(again.header) || again.id() != first.id() || stringField(req, "request_id") != id {
				t.Fatalf("the same message again: %v %v replayed=%v; want %s replayed", again.id(), again.err, grpcinterceptor.Replayed(again.header), first.id())
			}
			if n := svc.executions.Load(); n != 2 {
				t.Fatalf("executions = %d, want 2", n)
			}
		})
	}
}

// TestClientKeyFieldLeavesCallersKeys: the client interceptor with the key
// field keeps a request_id the caller set (and adds no metadata key),
// leaves the field empty when the caller set a metadata key, and gives a
// request without a string request_id a metadata key.
func TestClientKeyFieldLeavesCallersKeys(t *testing.T) {
	schema := ordersProto()
	svc := &ordersService{}
	conn := ordersServer(t, newBackend().guard(t), svc,
		[]grpc.DialOption{grpc.WithChainUnaryInterceptor(clientInterceptor(t, grpcinterceptor.WithKeyField("request_id")))})

	mine := schema.request(createOrder, "mine", "book")
	byMetadata := schema.request(createOrder, "", "pen")
	for _, c := range []struct {
		ctx    context.Context
		method string
		req    *dynamicpb.Message
	}{
		{t.Context(), createOrder, mine},
		{withKey(t.Context(), "md-key"), createOrder, byMetadata},
		{t.Context(), createNumbered, schema.request(createNumbered, int64(7), "book")},
		{t.Context(), createPlain, schema.request(createPlain, nil, "book")},
	} {
		if a := call(c.ctx, conn, c.method, c.req); a.err != nil {
			t.Fatalf("%s: %v", c.method, a.err)
		}
	}
	if stringField(mine, "request_id") != "mine" || stringField(byMetadata, "request_id") != "" {
		t.Fatal("the client changed a request_id it should have left alone")
	}
	seen := svc.seen()
	if len(seen) != 4 {
		t.Fatalf("attempts seen: %v", seen)
	}
	if seen[0].requestID != "mine" || len(seen[0].keyMD) != 0 {
		t.Errorf("the caller's request_id: %+v; want it as it is and no metadata key", seen[0])
	}
	if seen[1].requestID != "" || len(seen[1].keyMD) != 1 || seen[1].keyMD[0] != "md-key" {
		t.Errorf("the caller's metadata key: %+v; want it alone", seen[1])
	}
	for _, a := range seen[2:] {
		if len(a.keyMD) != 1 || !uuidV4.MatchString(a.keyMD[0]) {
			t.Errorf("%s: %+v; want a fresh metadata key", a.method, a)
		}
	}
}

// TestKeyFieldWinsOverFreshMetadataKeys: a client interceptor that does
// not know the field gives each call a fresh metadata key; the
// application's two calls with one request_id are still one call on a
// server that reads the field, which is why the field wins.
func TestKeyFieldWinsOverFreshMetadataKeys(t *testing.T) {
	svc := &ordersService{}
	conn := ordersServer(t, newBackend().guard(t), svc,
		[]grpc.DialOption{grpc.WithChainUnaryInterceptor(clientInterceptor(t))})
	var answers []order
	for range 2 {
		answers = append(answers, call(t.Context(), conn, createOrder, ordersProto().request(createOrder, "app-1", "book")))
	}
	if answers[0].err != nil || answers[1].err != nil || !grpcinterceptor.Replayed(answers[1].header) || answers[1].id() != answers[0].id() {
		t.Fatalf("%v, %v replayed=%v; want the second replayed", answers[0].err, answers[1].err, grpcinterceptor.Replayed(answers[1].header))
	}
	if seen := svc.seen(); len(seen) != 1 || len(seen[0].keyMD) != 1 {
		t.Fatalf("attempts seen: %v; want one, with the client's metadata key", seen)
	}
}
