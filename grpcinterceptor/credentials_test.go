package grpcinterceptor_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/idemkit/idemkit/grpcinterceptor"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
)

// recordKey is the record of key k of UnaryCall, without a scope, under
// the guard's default namespace.
func recordKey(k string) string { return "idempotency::" + k }

// withToken returns ctx with the key and the authorization metadata token
// (none when token is empty).
func withToken(ctx context.Context, key, token string) context.Context {
	ctx = withKey(ctx, key)
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", token)
	}
	return ctx
}

// TestCredentialsBound: without a scope hook, Bob's call with Alice's key
// and request, and his own token (or none), is refused
// (IDEMPOTENCY_KEY_CREDENTIALS_MISMATCH), also while Alice's call runs,
// and never gets her answer; Alice's retry replays; the handler ran once;
// the record holds no token.
func TestCredentialsBound(t *testing.T) {
	b := newBackend()
	svc := newService()
	svc.started, svc.release = make(chan struct{}, 1), make(chan struct{})
	c := dial(t, serve(t, b.guard(t), svc))
	req := &testgrpc.SimpleRequest{ResponseSize: 100}
	alice := withToken(t.Context(), "pay-2024-0001", "Bearer alice-token")
	first := make(chan answer, 1)
	go func() { first <- unary(alice, c, req) }()
	waitFor(t, svc.started, "Alice's call")
	refused := func(ctx context.Context, what string, req *testgrpc.SimpleRequest) {
		t.Helper()
		a := unary(ctx, c, req)
		checkRefusal(t, a.err, codes.FailedPrecondition, "IDEMPOTENCY_KEY_CREDENTIALS_MISMATCH", false)
		if a.resp != nil || a.replayed() || len(a.header.Get("x-execution")) != 0 {
			t.Fatalf("%s: %v, header %v; Alice's answer leaked", what, a.resp, a.header)
		}
	}
	refused(withToken(t.Context(), "pay-2024-0001", "Bearer bob-token"), "Bob while Alice's call runs", req)
	close(svc.release)
	a := waitFor(t, first, "Alice's call")
	if a.err != nil || a.replayed() {
		t.Fatalf("Alice: %v", a.err)
	}
	refused(withToken(t.Context(), "pay-2024-0001", "Bearer bob-token"), "Bob", req)
	refused(withToken(t.Context(), "pay-2024-0001", "Bearer bob-token"), "Bob with another request", &testgrpc.SimpleRequest{ResponseSize: 1})
	refused(withToken(t.Context(), "pay-2024-0001", ""), "no token", req)
	if again := unary(alice, c, req); again.err != nil || !again.replayed() || again.resp.GetServerId() != a.resp.GetServerId() {
		t.Fatalf("Alice's retry: %v replayed=%v; want her answer replayed", again.err, again.replayed())
	}
	if n := svc.executions.Load(); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
	rec, ok, err := b.store.Get(t.Context(), recordKey("pay-2024-0001"))
	if err != nil || !ok {
		t.Fatalf("the record: %v, %v", ok, err)
	}
	if strings.Contains(rec.Fingerprint, "alice") || strings.Contains(string(rec.Response), "alice") || !strings.Contains(rec.Fingerprint, ";c=") {
		t.Fatalf("the record's fingerprint %q: want a binding and no token", rec.Fingerprint)
	}
}

// TestScopeReplacesCredentialBinding: with a scope hook that names the
// principal behind each token, Alice's retry under a refreshed token
// replays, and Bob's call with the same key runs in his own scope.
func TestScopeReplacesCredentialBinding(t *testing.T) {
	principals := map[string]string{"Bearer alice-token-1": "alice", "Bearer alice-token-2": "alice", "Bearer bob-token": "bob"}
	principal := func(ctx context.Context) string {
		v := metadata.ValueFromIncomingContext(ctx, "authorization")
		if len(v) != 1 {
			return ""
		}
		return principals[v[0]]
	}
	svc := newService()
	c := dial(t, serve(t, newBackend().guard(t), svc, grpcinterceptor.WithScope(principal)))
	req := &testgrpc.SimpleRequest{}
	alice := unary(withToken(t.Context(), "k", "Bearer alice-token-1"), c, req)
	if alice.err != nil {
		t.Fatal(alice.err)
	}
	if a := unary(withToken(t.Context(), "k", "Bearer alice-token-2"), c, req); a.err != nil || !a.replayed() || a.resp.GetServerId() != alice.resp.GetServerId() {
		t.Fatalf("Alice's retry with a refreshed token: %v replayed=%v; want her answer", a.err, a.replayed())
	}
	bob := unary(withToken(t.Context(), "k", "Bearer bob-token"), c, req)
	if bob.err != nil || bob.replayed() || bob.resp.GetServerId() == alice.resp.GetServerId() {
		t.Fatalf("Bob: %v replayed=%v; want his own execution", bob.err, bob.replayed())
	}
	if n := svc.executions.Load(); n != 2 {
		t.Fatalf("executions = %d, want 2", n)
	}
}

// echoService answers with the call's credentials in its header and
// trailer metadata, next to an ordinary entry.
type echoService struct {
	testgrpc.UnimplementedTestServiceServer
}

func (echoService) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	token := metadata.ValueFromIncomingContext(ctx, "authorization")[0]
	if err := grpc.SetHeader(ctx, metadata.Pairs("authorization", token, "proxy-authorization", token, "x-other", "kept")); err != nil {
		return nil, err
	}
	if err := grpc.SetTrailer(ctx, metadata.Pairs("set-cookie", "session="+token, "cookie", token)); err != nil {
		return nil, err
	}
	return &testgrpc.SimpleResponse{ServerId: "1"}, nil
}

// TestCredentialMetadataNeverRecorded: whatever WithReplayMetadata says,
// credential metadata is neither recorded nor replayed.
func TestCredentialMetadataNeverRecorded(t *testing.T) {
	b := newBackend()
	c := dial(t, serve(t, b.guard(t), echoService{}, grpcinterceptor.WithReplayMetadata(func(string) bool { return true })))
	ctx := withToken(t.Context(), "k", "Bearer alice-token")
	if a := unary(ctx, c, &testgrpc.SimpleRequest{}); a.err != nil || len(a.header.Get("authorization")) != 1 {
		t.Fatalf("first: %v, header %v", a.err, a.header)
	}
	rec, ok, err := b.store.Get(t.Context(), recordKey("k"))
	if err != nil || !ok {
		t.Fatalf("the record: %v, %v", ok, err)
	}
	if strings.Contains(string(rec.Response), "alice") || strings.Contains(rec.Fingerprint, "alice") {
		t.Fatalf("the record holds the token: %q", rec.Response)
	}
	a := unary(ctx, c, &testgrpc.SimpleRequest{})
	if a.err != nil || !a.replayed() || len(a.header.Get("x-other")) != 1 {
		t.Fatalf("replay: %v, header %v", a.err, a.header)
	}
	for _, k := range []string{"authorization", "proxy-authorization", "cookie", "set-cookie"} {
		if len(a.header.Get(k)) != 0 || len(a.trailer.Get(k)) != 0 {
			t.Fatalf("the replay carries %s: header %v, trailer %v", k, a.header, a.trailer)
		}
	}
}

// TestUnsealableRecordNeverFailsOpen: a record that exists but cannot be
// opened (sealed with a key this server lacks) is answered Unavailable
// IDEMPOTENCY_RECORD_UNREADABLE with fail-open on, and the handler does
// not run again.
func TestUnsealableRecordNeverFailsOpen(t *testing.T) {
	shared := memstore.New()
	guard := func(id string) *middleware.Guard {
		sealed, err := store.Seal(shared, store.SealKey{ID: id, Secret: []byte(strings.Repeat(id, 16))})
		if err != nil {
			t.Fatal(err)
		}
		g, err := middleware.New(sealed, middleware.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	svc := newService()
	writer := dial(t, serve(t, guard("a"), svc))
	reader := dial(t, serve(t, guard("b"), svc, grpcinterceptor.WithFailOpen(true)))
	ctx := withKey(t.Context(), "k")
	if a := unary(ctx, writer, &testgrpc.SimpleRequest{}); a.err != nil {
		t.Fatal(a.err)
	}
	a := unary(ctx, reader, &testgrpc.SimpleRequest{})
	checkRefusal(t, a.err, codes.Unavailable, "IDEMPOTENCY_RECORD_UNREADABLE", true)
	if strings.Contains(a.err.Error(), "reached") || !strings.Contains(a.err.Error(), "unreadable") {
		t.Fatalf("%v; want the recorded answer unreadable", a.err)
	}
	if n := svc.executions.Load(); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
}
