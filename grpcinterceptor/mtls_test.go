package grpcinterceptor_test

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/grpcinterceptor"
	"github.com/idemkit/idemkit/internal/testenv"
)

// TestCredentialsBindClientCertificate: over mutual TLS, a call whose
// verified client certificate differs from the one that recorded the key
// (or that has none) is refused IDEMPOTENCY_KEY_CREDENTIALS_MISMATCH, also
// while the first call runs, and never gets its answer; the certificate's
// owner replays; the handler ran once.
func TestCredentialsBindClientCertificate(t *testing.T) {
	ca := testenv.NewCA(t)
	svc := newService()
	svc.started, svc.release = make(chan struct{}, 1), make(chan struct{})
	serverCreds := credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{ca.Server(t)},
		ClientAuth:   tls.VerifyClientCertIfGiven, ClientCAs: ca.Pool(),
	})
	addr := serveChainWith(t, []grpc.ServerOption{grpc.Creds(serverCreds)},
		func(s *grpc.Server) { testgrpc.RegisterTestServiceServer(s, svc) }, serverInterceptor(t, newBackend().guard(t)))
	client := func(name string) testgrpc.TestServiceClient {
		cfg := &tls.Config{RootCAs: ca.Pool()}
		if name != "" {
			cfg.Certificates = []tls.Certificate{ca.Client(t, name)}
		}
		return dial(t, addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	}
	alice, bob, nobody := client("alice"), client("bob"), client("")

	ctx := withKey(t.Context(), "pay-2024-0001")
	req := &testgrpc.SimpleRequest{ResponseSize: 10}
	first := make(chan answer, 1)
	go func() { first <- unary(ctx, alice, req) }()
	waitFor(t, svc.started, "Alice's call")
	refused := func(what string, c testgrpc.TestServiceClient) {
		t.Helper()
		a := unary(ctx, c, req)
		checkRefusal(t, a.err, codes.FailedPrecondition, "IDEMPOTENCY_KEY_CREDENTIALS_MISMATCH", false)
		if a.resp != nil || a.replayed() || len(a.header.Get("x-execution")) != 0 {
			t.Fatalf("%s: %v, header %v; Alice's answer leaked", what, a.resp, a.header)
		}
	}
	refused("Bob while Alice's call runs", bob)
	close(svc.release)
	a := waitFor(t, first, "Alice's call")
	if a.err != nil || a.replayed() {
		t.Fatalf("Alice: %v", a.err)
	}
	refused("Bob", bob)
	refused("no certificate", nobody)
	if again := unary(ctx, alice, req); again.err != nil || !again.replayed() || again.resp.GetServerId() != a.resp.GetServerId() {
		t.Fatalf("Alice's retry: %v replayed=%v; want her answer replayed", again.err, again.replayed())
	}
	if n := svc.executions.Load(); n != 1 {
		t.Fatalf("executions = %d, want 1", n)
	}
}

// apiKeyService answers with the call's x-api-key in its header metadata.
type apiKeyService struct {
	testgrpc.UnimplementedTestServiceServer
}

func (apiKeyService) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	key := metadata.ValueFromIncomingContext(ctx, "x-api-key")
	if err := grpc.SetHeader(ctx, metadata.MD{"x-api-key": key, "x-other": {"kept"}}); err != nil {
		return nil, err
	}
	return &testgrpc.SimpleResponse{ServerId: "1"}, nil
}

// TestCredentialMetadataBound: metadata named by WithCredentialMetadata
// binds the record as "authorization" does, and is never recorded nor
// replayed, even when WithReplayMetadata keeps everything.
func TestCredentialMetadataBound(t *testing.T) {
	b := newBackend()
	c := dial(t, serve(t, b.guard(t), apiKeyService{}, grpcinterceptor.WithCredentialMetadata("X-Api-Key"),
		grpcinterceptor.WithReplayMetadata(func(string) bool { return true })))
	call := func(apiKey string) answer {
		ctx := withKey(t.Context(), "k")
		if apiKey != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", apiKey)
		}
		return unary(ctx, c, &testgrpc.SimpleRequest{})
	}
	if a := call("alice-api-key"); a.err != nil || a.header.Get("x-api-key")[0] != "alice-api-key" {
		t.Fatalf("Alice: %v, header %v", a.err, a.header)
	}
	for _, bob := range []string{"bob-api-key", ""} {
		a := call(bob)
		checkRefusal(t, a.err, codes.FailedPrecondition, "IDEMPOTENCY_KEY_CREDENTIALS_MISMATCH", false)
	}
	rec, ok, err := b.store.Get(t.Context(), recordKey("k"))
	if err != nil || !ok || strings.Contains(string(rec.Response), "alice-api-key") || strings.Contains(rec.Fingerprint, "alice") {
		t.Fatalf("the record (%v, %v) holds the API key: %q", ok, err, rec.Response)
	}
	a := call("alice-api-key")
	if a.err != nil || !a.replayed() || len(a.header.Get("x-api-key")) != 0 || len(a.header.Get("x-other")) != 1 {
		t.Fatalf("Alice's retry: %v replayed=%v header %v; want a replay without x-api-key", a.err, a.replayed(), a.header)
	}
}

// TestCredentialMetadataOptionValidated: WithCredentialMetadata is refused
// with a scope hook (which replaces the binding), without keys, with a key
// that cannot name text metadata, and by the client interceptor.
func TestCredentialMetadataOptionValidated(t *testing.T) {
	g := newBackend().guard(t)
	for _, c := range []struct {
		name string
		opts []grpcinterceptor.Option
		fix  string
	}{
		{"with a scope", []grpcinterceptor.Option{grpcinterceptor.WithCredentialMetadata("x-api-key"),
			grpcinterceptor.WithScope(func(context.Context) string { return "" })}, "drop WithCredentialMetadata"},
		{"no key", []grpcinterceptor.Option{grpcinterceptor.WithCredentialMetadata()}, "at least one metadata key"},
		{"binary key", []grpcinterceptor.Option{grpcinterceptor.WithCredentialMetadata("x-cert-bin")}, "cannot name text metadata"},
		{"reserved key", []grpcinterceptor.Option{grpcinterceptor.WithCredentialMetadata("grpc-user")}, "cannot name text metadata"},
	} {
		si, err := grpcinterceptor.New(g, c.opts...)
		if si != nil || idemkit.CodeOf(err) != idemkit.CodeInvalidArgument || !strings.Contains(err.Error(), c.fix) {
			t.Errorf("%s: %v; want InvalidArgument saying %q", c.name, err, c.fix)
		}
	}
	if ci, err := grpcinterceptor.NewClientInterceptor(grpcinterceptor.WithCredentialMetadata("x-api-key")); ci != nil || err == nil {
		t.Error("the client interceptor accepted WithCredentialMetadata")
	}
	if _, err := grpcinterceptor.New(g, grpcinterceptor.WithCredentialMetadata("X-Api-Key", "authorization", "x-user")); err != nil {
		t.Errorf("valid keys: %v", err)
	}
}
