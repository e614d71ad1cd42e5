package grpcinterceptor_test

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // the clients advertise gzip
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/grpcinterceptor"
	"github.com/idemkit/idemkit/middleware"
)

func TestReplayMessageAndMetadata(t *testing.T) {
	svc := newService()
	c := dial(t, serve(t, newBackend().guard(t), svc))
	ctx := withKey(t.Context(), "order-1")
	req := &testgrpc.SimpleRequest{ResponseSize: 64, Payload: &testgrpc.Payload{Body: []byte("hello")}}

	first := unary(ctx, c, req)
	if first.err != nil {
		t.Fatal(first.err)
	}
	if first.replayed() {
		t.Fatal("the first execution is marked replayed")
	}
	for i := range 3 {
		again := unary(ctx, c, req)
		if again.err != nil {
			t.Fatalf("replay %d: %v", i, again.err)
		}
		if !again.replayed() {
			t.Fatalf("replay %d: header %v lacks idempotent-replayed: true", i, again.header)
		}
		if !proto.Equal(again.resp, first.resp) {
			t.Fatalf("replay %d: %v, want %v", i, again.resp, first.resp)
		}
		for _, k := range []string{"x-execution", "x-data-bin"} {
			if got, want := again.header.Get(k), first.header.Get(k); len(want) == 0 || strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("replay %d: header %s = %q, want %q", i, k, got, want)
			}
		}
		if got, want := again.trailer.Get("x-trailer"), first.trailer.Get("x-trailer"); len(want) == 0 || got[0] != want[0] {
			t.Fatalf("replay %d: trailer x-trailer = %q, want %q", i, got, want)
		}
	}
	if n := svc.executions.Load(); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
}

func TestReplayErrors(t *testing.T) {
	for _, c := range []struct {
		code   codes.Code
		stored bool
	}{
		{codes.NotFound, true},
		{codes.InvalidArgument, true},
		{codes.FailedPrecondition, true},
		{codes.PermissionDenied, true},
		{codes.AlreadyExists, true},
		{codes.Aborted, false},
		{codes.Unauthenticated, false},
		{codes.Unavailable, false},
		{codes.Internal, false},
		{codes.Unknown, false},
		{codes.DeadlineExceeded, false},
		{codes.ResourceExhausted, false},
		{codes.Canceled, false},
	} {
		t.Run(c.code.String(), func(t *testing.T) {
			svc := newService()
			client := dial(t, serve(t, newBackend().guard(t), svc))
			ctx := withKey(t.Context(), "k")
			req := &testgrpc.SimpleRequest{ResponseStatus: &testgrpc.EchoStatus{Code: int32(c.code), Message: "no " + c.code.String()}}
			first := unary(ctx, client, req)
			second := unary(ctx, client, req)
			for i, a := range []answer{first, second} {
				st := status.Convert(a.err)
				if st.Code() != c.code || st.Message() != "no "+c.code.String() {
					t.Fatalf("call %d: %v, want %v", i, a.err, c.code)
				}
				details := st.Details()
				if len(details) != 2 {
					t.Fatalf("call %d: details %v", i, details)
				}
				ei, ok := details[0].(*errdetails.ErrorInfo)
				if !ok || ei.GetReason() != "OUT_OF_STOCK" || ei.GetMetadata()["execution"] != "1" && c.stored {
					t.Fatalf("call %d: detail %v", i, details[0])
				}
				if br, ok := details[1].(*errdetails.BadRequest); !ok || br.GetFieldViolations()[0].GetField() != "payload" {
					t.Fatalf("call %d: detail %v", i, details[1])
				}
			}
			want := int64(2)
			if c.stored {
				want = 1
				if !second.replayed() || second.header.Get("x-execution")[0] != "1" || second.trailer.Get("x-trailer")[0] != "t1" {
					t.Fatalf("replayed error: header %v trailer %v", second.header, second.trailer)
				}
			} else if second.replayed() {
				t.Fatal("a transient error was replayed")
			}
			if n := svc.executions.Load(); n != want {
				t.Fatalf("executions = %d, want %d", n, want)
			}
		})
	}
}

func TestRecordAllStorePolicy(t *testing.T) {
	svc := newService()
	c := dial(t, serve(t, newBackend().guard(t), svc, grpcinterceptor.WithStorePolicy(grpcinterceptor.StorePolicy{Panic: true})))
	ctx := withKey(t.Context(), "k")
	req := &testgrpc.SimpleRequest{ResponseStatus: &testgrpc.EchoStatus{Code: int32(codes.Unavailable), Message: "down"}}
	_ = unary(ctx, c, req)
	if a := unary(ctx, c, req); status.Code(a.err) != codes.Unavailable || !a.replayed() {
		t.Fatalf("%v replayed=%v", a.err, a.replayed())
	}
	if n := svc.executions.Load(); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
}

// TestStorePolicyForget: the codes a policy lists are forgotten (the retry
// runs again) and the others recorded; the policy is read at construction,
// so changing its slice afterwards changes nothing.
func TestStorePolicyForget(t *testing.T) {
	svc := newService()
	forget := []codes.Code{codes.NotFound}
	c := dial(t, serve(t, newBackend().guard(t), svc, grpcinterceptor.WithStorePolicy(grpcinterceptor.StorePolicy{Forget: forget})))
	forget[0] = codes.Unavailable
	call := func(key string, code codes.Code) answer {
		req := &testgrpc.SimpleRequest{ResponseStatus: &testgrpc.EchoStatus{Code: int32(code), Message: "no"}}
		return unary(withKey(t.Context(), key), c, req)
	}
	call("notfound", codes.NotFound)
	if a := call("notfound", codes.NotFound); status.Code(a.err) != codes.NotFound || a.replayed() {
		t.Fatalf("NotFound, listed: %v replayed=%v; want a second execution", a.err, a.replayed())
	}
	call("unavailable", codes.Unavailable)
	if a := call("unavailable", codes.Unavailable); status.Code(a.err) != codes.Unavailable || !a.replayed() {
		t.Fatalf("Unavailable, not listed: %v replayed=%v; want a replay", a.err, a.replayed())
	}
	if n := svc.executions.Load(); n != 3 {
		t.Fatalf("executions = %d, want 3", n)
	}
}

func TestRefusals(t *testing.T) {
	long := strings.Repeat("k", 256)
	for _, c := range []struct {
		name   string
		md     []string // key metadata values
		code   codes.Code
		reason string
	}{
		{"empty", []string{""}, codes.InvalidArgument, "IDEMPOTENCY_KEY_MALFORMED"},
		{"too long", []string{long}, codes.InvalidArgument, "IDEMPOTENCY_KEY_MALFORMED"},
		{"two values", []string{"a", "b"}, codes.InvalidArgument, "IDEMPOTENCY_KEY_MALFORMED"},
		{"space", []string{"a b"}, codes.InvalidArgument, "IDEMPOTENCY_KEY_MALFORMED"},
		{"a list", []string{"a,b"}, codes.InvalidArgument, "IDEMPOTENCY_KEY_MALFORMED"},
	} {
		t.Run(c.name, func(t *testing.T) {
			svc := newService()
			client := dial(t, serve(t, newBackend().guard(t), svc))
			ctx := t.Context()
			for _, v := range c.md {
				ctx = metadata.AppendToOutgoingContext(ctx, keyMD, v)
			}
			a := unary(ctx, client, &testgrpc.SimpleRequest{})
			checkRefusal(t, a.err, c.code, c.reason, false)
			if ei := grpcinterceptor.ErrorInfoOf(a.err); ei.GetMetadata()["metadata_key"] != keyMD {
				t.Fatalf("ErrorInfo metadata = %v", ei.GetMetadata())
			}
			if strings.Contains(status.Convert(a.err).Message(), long) {
				t.Fatal("the message repeats the key")
			}
			if n := svc.executions.Load(); n != 0 {
				t.Fatalf("executions = %d, want 0", n)
			}
		})
	}
	t.Run("the longest key", func(t *testing.T) {
		client := dial(t, serve(t, newBackend().guard(t), newService()))
		if a := unary(withKey(t.Context(), long[:255]), client, &testgrpc.SimpleRequest{}); a.err != nil {
			t.Fatal(a.err)
		}
	})
}

// TestKeyOptionalByDefault: by default a call to a guarded method without
// a key is served unguarded, as over HTTP: it runs every time, and nothing
// is claimed or recorded for it; the same method with a key is guarded.
func TestKeyOptionalByDefault(t *testing.T) {
	b := newBackend()
	svc := newService()
	c := dial(t, serve(t, b.guard(t), svc))
	for i := range 2 {
		a := unary(t.Context(), c, &testgrpc.SimpleRequest{})
		if a.err != nil || a.replayed() || a.resp.GetServerId() != strconv.Itoa(i+1) {
			t.Fatalf("call %d without a key: %v %v replayed=%v; want served", i+1, a.resp, a.err, a.replayed())
		}
	}
	if n := b.store.claims.Load(); n != 0 {
		t.Fatalf("claims = %d; want none for calls without a key", n)
	}
	ctx := withKey(t.Context(), "k")
	first, again := unary(ctx, c, &testgrpc.SimpleRequest{}), unary(ctx, c, &testgrpc.SimpleRequest{})
	if first.err != nil || again.err != nil || !again.replayed() || again.resp.GetServerId() != first.resp.GetServerId() {
		t.Fatalf("with a key: %v, %v replayed=%v; want the second a replay", first.err, again.err, again.replayed())
	}
	if n := svc.executions.Load(); n != 3 {
		t.Fatalf("executions = %d, want 3", n)
	}
}

// TestKeyRequired: WithKeyRequired(true) refuses a call to a guarded method
// without a key (InvalidArgument IDEMPOTENCY_KEY_MISSING, naming the
// metadata to send) before anything runs or is claimed; with a key the
// call is served.
func TestKeyRequired(t *testing.T) {
	b := newBackend()
	svc := newService()
	c := dial(t, serve(t, b.guard(t), svc, grpcinterceptor.WithKeyRequired(true)))
	a := unary(t.Context(), c, &testgrpc.SimpleRequest{})
	checkRefusal(t, a.err, codes.InvalidArgument, "IDEMPOTENCY_KEY_MISSING", false)
	if ei := grpcinterceptor.ErrorInfoOf(a.err); ei.GetMetadata()["metadata_key"] != keyMD {
		t.Fatalf("ErrorInfo metadata = %v", ei.GetMetadata())
	}
	if msg := status.Convert(a.err).Message(); !strings.Contains(msg, keyMD) {
		t.Fatalf("message %q does not name the metadata to send", msg)
	}
	if n, claims := svc.executions.Load(), b.store.claims.Load(); n != 0 || claims != 0 {
		t.Fatalf("executions = %d, claims = %d; want none", n, claims)
	}
	if a := unary(withKey(t.Context(), "k"), c, &testgrpc.SimpleRequest{}); a.err != nil {
		t.Fatalf("with a key: %v", a.err)
	}
}

func TestMismatch(t *testing.T) {
	for _, c := range []struct {
		name        string
		opts        []grpcinterceptor.Option
		second      func(ctx context.Context, c testgrpc.TestServiceClient) error
		wantRefused bool
	}{
		{"another request", nil, func(ctx context.Context, c testgrpc.TestServiceClient) error {
			_, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{ResponseSize: 2})
			return err
		}, true},
		{"another method", nil, func(ctx context.Context, c testgrpc.TestServiceClient) error {
			_, err := c.CacheableUnaryCall(ctx, &testgrpc.SimpleRequest{ResponseSize: 1})
			return err
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			svc := newService()
			client := dial(t, serve(t, newBackend().guard(t), svc, c.opts...))
			ctx := withKey(t.Context(), "k")
			if _, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{ResponseSize: 1}); err != nil {
				t.Fatal(err)
			}
			err := c.second(ctx, client)
			if !c.wantRefused {
				if err != nil || svc.executions.Load() != 2 {
					t.Fatalf("%v, executions %d", err, svc.executions.Load())
				}
				return
			}
			checkRefusal(t, err, codes.FailedPrecondition, "IDEMPOTENCY_KEY_REUSED", false)
			if n := svc.executions.Load(); n != 1 {
				t.Fatalf("executions = %d, want 1", n)
			}
		})
	}
}

func TestScope(t *testing.T) {
	svc := newService()
	tenant := func(ctx context.Context) string {
		v := metadata.ValueFromIncomingContext(ctx, "x-tenant")
		if len(v) == 0 {
			return ""
		}
		return v[0]
	}
	c := dial(t, serve(t, newBackend().guard(t), svc, grpcinterceptor.WithScope(tenant)))
	req := &testgrpc.SimpleRequest{}
	for _, tn := range []string{"a", "b", "a"} {
		ctx := metadata.AppendToOutgoingContext(withKey(t.Context(), "k"), "x-tenant", tn)
		if a := unary(ctx, c, req); a.err != nil {
			t.Fatal(a.err)
		}
	}
	if n := svc.executions.Load(); n != 2 {
		t.Fatalf("executions = %d, want 2 (one per tenant)", n)
	}
}

func TestInProgress(t *testing.T) {
	svc := newService()
	svc.started, svc.release = make(chan struct{}, 1), make(chan struct{})
	c := dial(t, serve(t, newBackend().guard(t), svc, grpcinterceptor.WithWaitForResult(false)))
	ctx := withKey(t.Context(), "k")
	req := &testgrpc.SimpleRequest{}
	firstDone := make(chan answer, 1)
	go func() { firstDone <- unary(ctx, c, req) }()
	waitFor(t, svc.started, "the first execution")

	a := unary(ctx, c, req)
	checkRefusal(t, a.err, codes.Aborted, "IDEMPOTENCY_KEY_IN_PROGRESS", true)
	if d, _ := grpcinterceptor.RetryDelayOf(a.err); d != time.Second {
		t.Fatalf("RetryInfo delay = %v", d)
	}
	close(svc.release)
	if first := waitFor(t, firstDone, "the first call"); first.err != nil {
		t.Fatal(first.err)
	}
	if a := unary(ctx, c, req); a.err != nil || !a.replayed() {
		t.Fatalf("after the first finished: %v", a.err)
	}
	if n := svc.executions.Load(); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
}

func TestBackendOutage(t *testing.T) {
	t.Run("fail closed", func(t *testing.T) {
		b := newBackend()
		svc := newService()
		client := dial(t, serve(t, b.guard(t), svc, grpcinterceptor.WithRetryDelay(3*time.Second)))
		b.store.fail.Store(true)
		a := unary(withKey(t.Context(), "k"), client, &testgrpc.SimpleRequest{})
		checkRefusal(t, a.err, codes.Unavailable, "IDEMPOTENCY_UNAVAILABLE", true)
		if d, _ := grpcinterceptor.RetryDelayOf(a.err); d != 3*time.Second {
			t.Fatalf("RetryInfo delay = %v", d)
		}
		if n := svc.executions.Load(); n != 0 {
			t.Fatalf("executions = %d during the outage", n)
		}
		b.store.fail.Store(false)
		if a := unary(withKey(t.Context(), "k"), client, &testgrpc.SimpleRequest{}); a.err != nil {
			t.Fatalf("after the outage: %v", a.err)
		}
		if n := svc.executions.Load(); n != 1 {
			t.Fatalf("executions = %d, want 1", n)
		}
	})
	t.Run("fail open", func(t *testing.T) {
		b := newBackend()
		svc := newService()
		client := dial(t, serve(t, b.guard(t), svc, grpcinterceptor.WithFailOpen(true)))
		b.store.fail.Store(true)
		if a := unary(withKey(t.Context(), "k"), client, &testgrpc.SimpleRequest{}); a.err != nil {
			t.Fatal(a.err)
		}
		if n := svc.executions.Load(); n != 1 {
			t.Fatalf("executions = %d, want 1", n)
		}
	})
}

func TestPanic(t *testing.T) {
	svc := newService()
	svc.panicky = true
	c := dial(t, serve(t, newBackend().guard(t), svc))
	ctx := withKey(t.Context(), "k")
	for range 2 {
		if a := unary(ctx, c, &testgrpc.SimpleRequest{}); status.Code(a.err) != codes.Internal || a.replayed() {
			t.Fatalf("%v", a.err)
		}
	}
	if n := svc.executions.Load(); n != 2 {
		t.Fatalf("executions = %d, want 2 (a panic is not recorded)", n)
	}
}

func TestNotReplayable(t *testing.T) {
	svc := newService()
	c := dial(t, serve(t, newBackend().guard(t), svc, grpcinterceptor.WithMaxResponseBytes(512)))
	ctx := withKey(t.Context(), "k")
	req := &testgrpc.SimpleRequest{ResponseSize: 4096}
	first := unary(ctx, c, req)
	if first.err != nil || len(first.resp.GetPayload().GetBody()) != 4096 {
		t.Fatalf("the first call: %v", first.err)
	}
	a := unary(ctx, c, req)
	checkRefusal(t, a.err, codes.FailedPrecondition, "IDEMPOTENCY_NOT_REPLAYABLE", false)
	if n := svc.executions.Load(); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
}

func TestUnreadableRecord(t *testing.T) {
	// A server that cannot rebuild the recorded message (its type is not
	// in the registry) answers Unavailable and runs nothing.
	b := newBackend()
	svc := newService()
	writer := dial(t, serve(t, b.guard(t), svc))
	reader := dial(t, serve(t, b.guard(t), svc, grpcinterceptor.WithMessageTypes(new(protoregistry.Types))))
	ctx := withKey(t.Context(), "k")
	if a := unary(ctx, writer, &testgrpc.SimpleRequest{}); a.err != nil {
		t.Fatal(a.err)
	}
	a := unary(ctx, reader, &testgrpc.SimpleRequest{})
	checkRefusal(t, a.err, codes.Unavailable, "IDEMPOTENCY_RECORD_UNREADABLE", true)
	if n := svc.executions.Load(); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
}

// TestConcurrentDuplicates races 32 duplicate calls over 4 servers, each
// with its own guard and client connection, on one shared backend: the
// handler runs once and every call gets its answer.
func TestConcurrentDuplicates(t *testing.T) {
	const servers, calls = 4, 32
	b := newBackend()
	svc := newService()
	svc.started, svc.release = make(chan struct{}, calls), make(chan struct{})
	clients := make([]testgrpc.TestServiceClient, servers)
	for i := range clients {
		g := b.guard(t, middleware.WithWaitBudget(time.Minute), middleware.WithBackoff(idemkit.Backoff{Base: time.Millisecond, Max: 20 * time.Millisecond}))
		clients[i] = dial(t, serve(t, g, svc))
	}
	req := &testgrpc.SimpleRequest{ResponseSize: 16}
	ctx := withKey(t.Context(), "the-one-key")
	start := make(chan struct{})
	answers := make(chan answer, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			<-start
			answers <- unary(ctx, clients[i%servers], req)
		})
	}
	// The execution is held a moment, so the duplicates meet it running.
	close(start)
	waitFor(t, svc.started, "the execution")
	time.Sleep(50 * time.Millisecond) // let the duplicates arrive; correctness does not depend on it
	close(svc.release)
	wg.Wait()
	close(answers)
	replayed := 0
	for a := range answers {
		if a.err != nil {
			t.Fatal(a.err)
		}
		if a.resp.GetServerId() != "1" {
			t.Fatalf("answer from execution %q", a.resp.GetServerId())
		}
		if a.replayed() {
			replayed++
		}
	}
	if n := svc.executions.Load(); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
	if replayed != calls-1 {
		t.Fatalf("replayed = %d, want %d", replayed, calls-1)
	}
}

func TestSelector(t *testing.T) {
	t.Run("exclude", func(t *testing.T) {
		svc := newService()
		c := dial(t, serve(t, newBackend().guard(t), svc, grpcinterceptor.WithExclude(emptyCall), grpcinterceptor.WithKeyRequired(true)))
		if _, err := c.EmptyCall(t.Context(), &testgrpc.Empty{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.UnaryCall(t.Context(), &testgrpc.SimpleRequest{}); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("UnaryCall without a key: %v", err)
		}
	})
	t.Run("declared idempotent", func(t *testing.T) {
		files := idempotentFiles(t)
		svc := newService()
		c := dial(t, serve(t, newBackend().guard(t), svc, grpcinterceptor.WithSelector(grpcinterceptor.DefaultSelector(files)), grpcinterceptor.WithKeyRequired(true)))
		if _, err := c.EmptyCall(t.Context(), &testgrpc.Empty{}); err != nil {
			t.Fatalf("EmptyCall (IDEMPOTENT): %v", err)
		}
		if _, err := c.CacheableUnaryCall(t.Context(), &testgrpc.SimpleRequest{}); err != nil {
			t.Fatalf("CacheableUnaryCall (NO_SIDE_EFFECTS): %v", err)
		}
		if _, err := c.UnaryCall(t.Context(), &testgrpc.SimpleRequest{}); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("UnaryCall without a key: %v", err)
		}
	})
	t.Run("include", func(t *testing.T) {
		files := idempotentFiles(t)
		c := dial(t, serve(t, newBackend().guard(t), newService(),
			grpcinterceptor.WithSelector(grpcinterceptor.DefaultSelector(files)), grpcinterceptor.WithInclude(cacheableCall),
			grpcinterceptor.WithKeyRequired(true)))
		if _, err := c.CacheableUnaryCall(t.Context(), &testgrpc.SimpleRequest{}); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("CacheableUnaryCall without a key: %v", err)
		}
	})
	for _, c := range []struct {
		method string
		want   bool
	}{
		{emptyCall, true},
		{cacheableCall, true},
		{unaryCall, false},
		{"/grpc.testing.TestService/Nope", false},
		{"/no.Such/Method", false},
		{"garbage", false},
		{"", false},
	} {
		if got := grpcinterceptor.DeclaredIdempotent(idempotentFiles(t), c.method); got != c.want {
			t.Errorf("DeclaredIdempotent(%q) = %v, want %v", c.method, got, c.want)
		}
	}
	if grpcinterceptor.DeclaredIdempotent(nil, unaryCall) {
		t.Error("the generated TestService declares no idempotency level")
	}
}

// idempotentFiles returns a registry holding a copy of test.proto whose
// EmptyCall is declared IDEMPOTENT and CacheableUnaryCall NO_SIDE_EFFECTS.
func idempotentFiles(t *testing.T) *protoregistry.Files {
	t.Helper()
	fdp := protodesc.ToFileDescriptorProto(testgrpc.File_grpc_testing_test_proto)
	for _, svc := range fdp.GetService() {
		for _, m := range svc.GetMethod() {
			switch m.GetName() {
			case "EmptyCall":
				m.Options = &descriptorpb.MethodOptions{IdempotencyLevel: descriptorpb.MethodOptions_IDEMPOTENT.Enum()}
			case "CacheableUnaryCall":
				m.Options = &descriptorpb.MethodOptions{IdempotencyLevel: descriptorpb.MethodOptions_NO_SIDE_EFFECTS.Enum()}
			}
		}
	}
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	files := new(protoregistry.Files)
	if err := files.RegisterFile(fd); err != nil {
		t.Fatal(err)
	}
	return files
}

func TestFingerprint(t *testing.T) {
	a := &testgrpc.SimpleRequest{ResponseSize: 1, Payload: &testgrpc.Payload{Body: []byte("x")}}
	same := &testgrpc.SimpleRequest{Payload: &testgrpc.Payload{Body: []byte("x")}, ResponseSize: 1}
	other := &testgrpc.SimpleRequest{ResponseSize: 2, Payload: &testgrpc.Payload{Body: []byte("x")}}
	fp := func(method string, m any) string {
		f, err := grpcinterceptor.Fingerprint(method, m)
		if err != nil {
			t.Fatal(err)
		}
		if f.Alg() != grpcinterceptor.AlgProto {
			t.Fatalf("alg %q", f.Alg())
		}
		return f.String()
	}
	if fp(unaryCall, a) != fp(unaryCall, same) {
		t.Error("equal requests differ")
	}
	if fp(unaryCall, a) == fp(unaryCall, other) {
		t.Error("different requests match")
	}
	if fp(unaryCall, a) == fp(cacheableCall, a) {
		t.Error("different methods match")
	}
	if _, err := grpcinterceptor.Fingerprint(unaryCall, "not a message"); err == nil {
		t.Error("a string was fingerprinted")
	}
}

func TestOptionsValidated(t *testing.T) {
	g := newBackend().guard(t)
	for i, opts := range [][]grpcinterceptor.Option{
		{grpcinterceptor.WithMetadataKey("grpc-key")},
		{grpcinterceptor.WithMetadataKey("key-bin")},
		{grpcinterceptor.WithMetadataKey("a key")},
		{grpcinterceptor.WithMetadataKey("")},
		{grpcinterceptor.WithMaxKeyLength(0)},
		{grpcinterceptor.WithMaxResponseBytes(0)},
		{grpcinterceptor.WithRetryDelay(-time.Second)},
		{grpcinterceptor.WithErrorDomain("")},
		{grpcinterceptor.WithMessageTypes(nil)},
		{grpcinterceptor.WithFingerprint(nil)},
	} {
		if si, err := grpcinterceptor.New(g, opts...); err == nil || si != nil {
			t.Errorf("options %d accepted", i)
		}
	}
	if _, err := grpcinterceptor.New(nil); err == nil {
		t.Error("a nil guard was accepted")
	}
	if _, err := grpcinterceptor.New(g, grpcinterceptor.WithMetadataKey("X-Request-Key")); err != nil {
		t.Errorf("an upper-case key name: %v", err)
	}
}

func TestCustomMetadataKey(t *testing.T) {
	svc := newService()
	c := dial(t, serve(t, newBackend().guard(t), svc, grpcinterceptor.WithMetadataKey("x-request-id")))
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-request-id", "r1")
	for range 2 {
		if _, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := svc.executions.Load(); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
}

func TestReplayMetadataFilter(t *testing.T) {
	c := dial(t, serve(t, newBackend().guard(t), newService(),
		grpcinterceptor.WithReplayMetadata(func(k string) bool { return k != "x-data-bin" })))
	ctx := withKey(t.Context(), "k")
	_ = unary(ctx, c, &testgrpc.SimpleRequest{})
	a := unary(ctx, c, &testgrpc.SimpleRequest{})
	if !a.replayed() || len(a.header.Get("x-execution")) != 1 || len(a.header.Get("x-data-bin")) != 0 {
		t.Fatalf("header %v", a.header)
	}
}

// TestCanceledClient: a client that gives up while its call runs does not
// lose the outcome: the retry replays it.
func TestCanceledClient(t *testing.T) {
	svc := newService()
	svc.started, svc.release, svc.finished = make(chan struct{}, 1), make(chan struct{}), make(chan error, 2)
	c := dial(t, serve(t, newBackend().guard(t), svc))
	req := &testgrpc.SimpleRequest{}
	ctx, cancel := context.WithCancel(withKey(t.Context(), "k"))
	done := make(chan error, 1)
	go func() {
		_, err := c.UnaryCall(ctx, req)
		done <- err
	}()
	waitFor(t, svc.started, "the execution")
	cancel()
	if err := waitFor(t, done, "the canceled call"); status.Code(err) != codes.Canceled {
		t.Fatalf("%v", err)
	}
	// The handler sees its ctx end and answers Canceled: not recorded, so
	// the retry runs it again.
	if err := waitFor(t, svc.finished, "the handler"); status.Code(err) != codes.Canceled {
		t.Fatalf("the handler answered %v", err)
	}
	close(svc.release)
	a := unary(withKey(t.Context(), "k"), c, req)
	if a.err != nil {
		t.Fatal(a.err)
	}
	if n := svc.executions.Load(); n != 2 {
		t.Fatalf("executions = %d, want 2", n)
	}
}

// compressingService picks its response compressor, as a handler may:
// grpc.SetSendCompressor and grpc.ClientSupportedCompressors need
// grpc-go's own stream in the handler's context. It sets header and
// trailer metadata too, which a replay must restore.
type compressingService struct {
	testgrpc.UnimplementedTestServiceServer
	executions atomic.Int64
}

func (s *compressingService) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	n := s.executions.Add(1)
	supported, err := grpc.ClientSupportedCompressors(ctx)
	if err != nil || !slices.Contains(supported, "gzip") {
		return nil, status.Errorf(codes.Internal, "ClientSupportedCompressors: %v %v", supported, err)
	}
	if err := grpc.SetSendCompressor(ctx, "gzip"); err != nil {
		return nil, status.Error(codes.Internal, "SetSendCompressor: "+err.Error())
	}
	if err := grpc.SetHeader(ctx, metadata.Pairs("x-h", "h"+strconv.FormatInt(n, 10))); err != nil {
		return nil, err
	}
	if err := grpc.SetTrailer(ctx, metadata.Pairs("x-t", "t"+strconv.FormatInt(n, 10))); err != nil {
		return nil, err
	}
	return &testgrpc.SimpleResponse{ServerId: strconv.FormatInt(n, 10)}, nil
}

// TestHandlerPicksCompressor: a guarded handler can call
// grpc.SetSendCompressor and grpc.ClientSupportedCompressors (the
// interceptor leaves grpc-go's stream in the context), and the header and
// trailer metadata it sets are still recorded and replayed.
func TestHandlerPicksCompressor(t *testing.T) {
	svc := &compressingService{}
	c := dial(t, serve(t, newBackend().guard(t), svc))
	ctx := withKey(t.Context(), "gz")
	first := unary(ctx, c, &testgrpc.SimpleRequest{})
	if first.err != nil {
		t.Fatalf("guarded call: %v", first.err)
	}
	again := unary(ctx, c, &testgrpc.SimpleRequest{})
	if again.err != nil || !again.replayed() || again.resp.GetServerId() != "1" {
		t.Fatalf("retry: %v replayed=%v %v; want the first answer replayed", again.err, again.replayed(), again.resp)
	}
	if !slices.Equal(again.header.Get("x-h"), []string{"h1"}) || !slices.Equal(again.trailer.Get("x-t"), []string{"t1"}) {
		t.Fatalf("replayed metadata: header %v trailer %v; want x-h h1 and x-t t1", again.header, again.trailer)
	}
	if n := svc.executions.Load(); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
}

// sendHeaderService sends its header early (grpc.SendHeader), sets a
// trailer, and fails with a status that has details.
type sendHeaderService struct {
	testgrpc.UnimplementedTestServiceServer
	executions atomic.Int64
}

func (s *sendHeaderService) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	s.executions.Add(1)
	if err := grpc.SendHeader(ctx, metadata.Pairs("x-h", "v")); err != nil {
		return nil, err
	}
	if err := grpc.SetTrailer(ctx, metadata.Pairs("x-t", "t")); err != nil {
		return nil, err
	}
	st, err := status.New(codes.NotFound, "nope").WithDetails(&errdetails.ErrorInfo{Reason: "R", Domain: "d"})
	if err != nil {
		return nil, err
	}
	return nil, st.Err()
}

// TestReplaySentHeaderWithError: a header sent early with grpc.SendHeader
// and a trailer are replayed with the recorded error and its details.
func TestReplaySentHeaderWithError(t *testing.T) {
	svc := &sendHeaderService{}
	c := dial(t, serve(t, newBackend().guard(t), svc))
	ctx := withKey(t.Context(), "sh")
	first := unary(ctx, c, &testgrpc.SimpleRequest{})
	again := unary(ctx, c, &testgrpc.SimpleRequest{})
	if status.Code(first.err) != codes.NotFound || !again.replayed() || status.Code(again.err) != codes.NotFound ||
		len(status.Convert(again.err).Details()) != 1 {
		t.Fatalf("first %v, retry %v replayed=%v; want NotFound with its detail replayed", first.err, again.err, again.replayed())
	}
	if !slices.Equal(again.header.Get("x-h"), []string{"v"}) || !slices.Equal(again.trailer.Get("x-t"), []string{"t"}) {
		t.Fatalf("replayed metadata: header %v trailer %v", again.header, again.trailer)
	}
	if n := svc.executions.Load(); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
}

// nilService answers a nil message and no error, which gRPC sends as an
// empty message.
type nilService struct {
	testgrpc.UnimplementedTestServiceServer
	executions atomic.Int64
}

func (s *nilService) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	s.executions.Add(1)
	return nil, nil
}

// TestNilResponseReplays: a handler's nil message is replayed as what the
// client first got, an empty message.
func TestNilResponseReplays(t *testing.T) {
	svc := &nilService{}
	c := dial(t, serve(t, newBackend().guard(t), svc))
	ctx := withKey(t.Context(), "nil")
	first := unary(ctx, c, &testgrpc.SimpleRequest{})
	again := unary(ctx, c, &testgrpc.SimpleRequest{})
	if first.err != nil || again.err != nil || !again.replayed() || !proto.Equal(first.resp, again.resp) {
		t.Fatalf("first %v %v, retry %v %v replayed=%v", first.resp, first.err, again.resp, again.err, again.replayed())
	}
	if n := svc.executions.Load(); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
}

// TestUnknownResponseTypeIsNotReplayable: a response whose type is not in
// the server's message types could never be rebuilt, so it is recorded as
// executed-not-replayable when the call ends, rather than as a record that
// stays unreadable: a retry gets FailedPrecondition
// IDEMPOTENCY_NOT_REPLAYABLE, with a message that does not blame the size,
// and the handler never runs again.
func TestUnknownResponseTypeIsNotReplayable(t *testing.T) {
	svc := newService()
	c := dial(t, serve(t, newBackend().guard(t), svc, grpcinterceptor.WithMessageTypes(new(protoregistry.Types))))
	ctx := withKey(t.Context(), "k")
	if a := unary(ctx, c, &testgrpc.SimpleRequest{}); a.err != nil {
		t.Fatal(a.err)
	}
	a := unary(ctx, c, &testgrpc.SimpleRequest{})
	checkRefusal(t, a.err, codes.FailedPrecondition, "IDEMPOTENCY_NOT_REPLAYABLE", false)
	if msg := status.Convert(a.err).Message(); strings.Contains(msg, "too large") {
		t.Fatalf("the refusal blames the size: %q", msg)
	}
	if n := svc.executions.Load(); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
}

// TestHealthCheckNeedsNoKey: with keys required and the default selector,
// gRPC's health service answers probes without a key, and reflection and
// channelz are left alone too.
func TestHealthCheckNeedsNoKey(t *testing.T) {
	idem, err := grpcinterceptor.New(newBackend().guard(t), grpcinterceptor.WithKeyRequired(true))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(idem))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	testgrpc.RegisterTestServiceServer(srv, newService())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	resp, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health check without a key: %v %v", resp, err)
	}
	if _, err := testgrpc.NewTestServiceClient(conn).UnaryCall(t.Context(), &testgrpc.SimpleRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("UnaryCall without a key on the same server: %v; want InvalidArgument", err)
	}
	selected := grpcinterceptor.DefaultSelector(nil)
	for _, m := range []string{
		"/grpc.health.v1.Health/Check",
		"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
		"/grpc.channelz.v1.Channelz/GetTopChannels",
	} {
		if selected(m) {
			t.Errorf("%s is guarded by default", m)
		}
	}
	if !selected(unaryCall) {
		t.Errorf("%s is not guarded", unaryCall)
	}
}
