package main

import (
	"context"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit/examples/internal/demotest"
	"github.com/idemkit/idemkit/grpcinterceptor"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/pgstore"
)

// txBackend is a guard on a pgstore.Store whose record table is the
// test's own, on the shared PostgreSQL server, with an orders table beside
// it that handlers write in the guarded work's transaction (pgstore.Tx).
type txBackend struct {
	guard  *middleware.Guard
	pool   *pgxpool.Pool
	orders string // one row per order, with the key it was made under; no unique constraint, so a second execution shows
}

func newTxBackend(t *testing.T) txBackend {
	t.Helper()
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, testenv.Postgres(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	name := testenv.Name(t)
	if err := pgstore.SetupSchema(ctx, pool, pgstore.WithTable(name)); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.New(pool, pgstore.WithTable(name), pgstore.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	orders := name + "_orders"
	if _, err := pool.Exec(ctx, `CREATE TABLE `+orders+` (id bigserial PRIMARY KEY, key text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	// A wait budget no duplicate outwaits on a slow machine: every
	// duplicate gets the replay.
	g, err := middleware.New(s, middleware.WithLogger(slog.New(slog.DiscardHandler)), middleware.WithWaitBudget(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	return txBackend{guard: g, pool: pool, orders: orders}
}

// insert writes an order row for the guarded call of ctx, in its
// transaction.
func (b txBackend) insert(ctx context.Context) error {
	tx, err := pgstore.Tx(ctx)
	if err != nil {
		return err
	}
	info, _ := middleware.CallInfoFrom(ctx)
	_, err = tx.Exec(ctx, `INSERT INTO `+b.orders+` (key) VALUES ($1)`, info.Key)
	return err
}

// rows counts the order rows of key.
func (b txBackend) rows(t *testing.T, key string) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(t.Context(), `SELECT count(*) FROM `+b.orders+` WHERE key = $1`, key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// txService is a TestService whose UnaryCall inserts an order row in
// pgstore.Tx and answers the key it ran under, or, once it inserted, the
// status code in fail when that is not OK.
type txService struct {
	testgrpc.UnimplementedTestServiceServer
	b    txBackend
	fail atomic.Uint32 // a codes.Code; OK answers the response
	runs atomic.Int64
}

func (s *txService) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	s.runs.Add(1)
	if err := s.b.insert(ctx); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if c := codes.Code(s.fail.Load()); c != codes.OK {
		return nil, status.Error(c, "declined")
	}
	info, _ := middleware.CallInfoFrom(ctx)
	return &testgrpc.SimpleResponse{ServerId: info.Key}, nil
}

// TestTxGRPC: a gRPC handler behind the interceptor that writes in
// pgstore.Tx, on a real listener with a real client: 8 duplicate calls
// sent at once run it once and commit one row with the record, every
// other call gets the replay, and so does a later retry. A status the
// interceptor does not record (Internal, Unavailable: transient, see its
// store policy) rolls the row back, and the retry runs again and commits.
// A status it records (FailedPrecondition) commits the handler's row with
// the record, as a response does: the retry replays the status and adds
// no row.
func TestTxGRPC(t *testing.T) {
	b := newTxBackend(t)
	idem, err := grpcinterceptor.New(b.guard,
		grpcinterceptor.WithSelector(grpcinterceptor.SelectMethods(testgrpc.TestService_UnaryCall_FullMethodName)),
		grpcinterceptor.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	svc := &txService{b: b}
	srv := grpc.NewServer(grpc.UnaryInterceptor(idem))
	testgrpc.RegisterTestServiceServer(srv, svc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		srv.GracefulStop()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)
	type answer struct {
		resp     *testgrpc.SimpleResponse
		replayed bool
		err      error
	}
	call := func(key string) answer {
		ctx := metadata.AppendToOutgoingContext(t.Context(), "idempotency-key", key)
		var header metadata.MD
		resp, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.Header(&header))
		return answer{resp, grpcinterceptor.Replayed(header), err}
	}

	answers := demotest.Burst(8, func(int) answer { return call("a") })
	firsts := 0
	for i, a := range answers {
		if a.err != nil || a.resp.GetServerId() != "a" {
			t.Fatalf("duplicate %d: %v %v; want the response", i, a.resp, a.err)
		}
		if !a.replayed {
			firsts++
		}
	}
	if firsts != 1 || svc.runs.Load() != 1 {
		t.Fatalf("8 duplicates: %d answers not replayed, %d runs; want 1 and 1", firsts, svc.runs.Load())
	}
	if n := b.rows(t, "a"); n != 1 {
		t.Fatalf("rows of a: %d; want 1", n)
	}
	if a := call("a"); a.err != nil || !a.replayed || a.resp.GetServerId() != "a" {
		t.Fatalf("a later retry: %v replayed=%v %v; want the replay", a.resp, a.replayed, a.err)
	}

	runs := svc.runs.Load()
	for _, c := range []codes.Code{codes.Internal, codes.Unavailable} {
		key := "forgotten-" + c.String()
		svc.fail.Store(uint32(c))
		if a := call(key); status.Code(a.err) != c || a.replayed {
			t.Fatalf("a handler answering %v: %v replayed=%v", c, a.err, a.replayed)
		}
		if n := b.rows(t, key); n != 0 {
			t.Fatalf("rows of %s after %v: %d; want none", key, c, n)
		}
		svc.fail.Store(uint32(codes.OK))
		if a := call(key); a.err != nil || a.replayed || a.resp.GetServerId() != key {
			t.Fatalf("the retry of %v: %v replayed=%v %v; want a new execution", c, a.resp, a.replayed, a.err)
		}
		if n := b.rows(t, key); n != 1 {
			t.Fatalf("rows of %s after the retry: %d; want 1", key, n)
		}
		runs += 2
	}

	svc.fail.Store(uint32(codes.FailedPrecondition))
	if a := call("recorded"); status.Code(a.err) != codes.FailedPrecondition || a.replayed {
		t.Fatalf("a handler answering FailedPrecondition: %v replayed=%v", a.err, a.replayed)
	}
	svc.fail.Store(uint32(codes.OK))
	if a := call("recorded"); status.Code(a.err) != codes.FailedPrecondition || !a.replayed {
		t.Fatalf("its retry: %v replayed=%v; want the status replayed", a.err, a.replayed)
	}
	if n := b.rows(t, "recorded"); n != 1 {
		t.Fatalf("rows of a recorded status: %d; want the one committed with it", n)
	}
	if got := svc.runs.Load(); got != runs+1 {
		t.Fatalf("%d runs; want %d", got, runs+1)
	}
}
