package main

import (
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit/examples/internal/cli"
	"github.com/idemkit/idemkit/grpcinterceptor"
	"github.com/idemkit/idemkit/internal/guardtest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/pgstore"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestMisconfiguredBackendIsInternal: the demo's gRPC server on a
// PostgreSQL database without the record table answers every guarded
// call Internal IDEMPOTENCY_MISCONFIGURED, without RetryInfo (retrying
// cannot help), and its guard logs the fix once.
func TestMisconfiguredBackendIsInternal(t *testing.T) {
	pool, err := pgxpool.New(t.Context(), testenv.Postgres(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := pgstore.New(pool, pgstore.WithTable(testenv.Name(t)+"_missing.records"))
	if err != nil {
		t.Fatal(err)
	}
	var log guardtest.Log
	guard, err := middleware.New(s, middleware.WithLogger(log.Logger()), middleware.WithFailureLogInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	srv, _, err := build(cli.Deps{Guard: guard, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown(t.Context()) })

	client := testgrpc.NewTestServiceClient(mustConn(t, ln.Addr().String()))
	for i := range 10 {
		ctx := metadata.AppendToOutgoingContext(t.Context(), "idempotency-key", fmt.Sprint("key-", i), "authorization", "Bearer alice-1")
		_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		if status.Code(err) != codes.Internal || grpcinterceptor.ErrorInfoOf(err).GetReason() != "IDEMPOTENCY_MISCONFIGURED" || hasRetryInfo(err) {
			t.Fatalf("call %d: %v; want Internal %s without RetryInfo", i, err, "IDEMPOTENCY_MISCONFIGURED")
		}
	}
	lines := log.Lines(t, guardtest.BackendFailureMessage)
	if len(lines) != 1 || lines[0]["code"] != "Misconfigured" {
		t.Fatalf("10 failing calls logged %d lines; want 1 naming Misconfigured: %v", len(lines), lines)
	}
}

// hasRetryInfo reports whether err's status carries a RetryInfo detail.
func hasRetryInfo(err error) bool {
	st, _ := status.FromError(err)
	for _, d := range st.Proto().GetDetails() {
		if strings.HasSuffix(d.GetTypeUrl(), "/google.rpc.RetryInfo") {
			return true
		}
	}
	return false
}
