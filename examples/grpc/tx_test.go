package main

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit/examples/internal/demotest"
	"github.com/idemkit/idemkit/grpcinterceptor"
	"github.com/idemkit/idemkit/middleware"
)

// txService is a TestService whose UnaryCall inserts an order row in
// pgstore.Tx (demotest.TxBackend.Insert) and answers the key it ran
// under, with a payload of txBigPayload bytes while big is set, or, once
// it inserted, the status code in fail when that is not OK. Once it
// inserted, inside its transaction, it sets the metadata that meta says.
type txService struct {
	testgrpc.UnimplementedTestServiceServer
	b    *demotest.TxBackend
	fail atomic.Uint32 // a codes.Code; OK answers the response
	big  atomic.Bool
	meta atomic.Uint32 // a txMetadata
}

// txMetadata is the metadata txService sets inside its transaction: the
// header x-order and the trailer x-order-trailer, both the call's key.
type txMetadata uint32

const (
	txNoMetadata  txMetadata = iota
	txSetMetadata            // grpc.SetHeader and grpc.SetTrailer
	txSendHeader             // grpc.SendHeader and grpc.SetTrailer
)

// txBigPayload is the size of a big answer's payload: more than the
// interceptor of TestTxGRPCTooLargeNotReplayable keeps.
const txBigPayload = 8 << 10

func (s *txService) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	if err := s.b.Insert(ctx); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if c := codes.Code(s.fail.Load()); c != codes.OK {
		return nil, status.Error(c, "declined")
	}
	info, _ := middleware.CallInfoFrom(ctx)
	header, trailer := metadata.Pairs("x-order", info.Key), metadata.Pairs("x-order-trailer", info.Key)
	switch txMetadata(s.meta.Load()) {
	case txSetMetadata:
		if err := grpc.SetHeader(ctx, header); err != nil {
			return nil, err
		}
	case txSendHeader:
		if err := grpc.SendHeader(ctx, header); err != nil {
			return nil, err
		}
	}
	if txMetadata(s.meta.Load()) != txNoMetadata {
		if err := grpc.SetTrailer(ctx, trailer); err != nil {
			return nil, err
		}
	}
	resp := &testgrpc.SimpleResponse{ServerId: info.Key}
	if s.big.Load() {
		resp.Payload = &testgrpc.Payload{Body: make([]byte, txBigPayload)}
	}
	return resp, nil
}

// txAnswer is what one call got.
type txAnswer struct {
	resp            *testgrpc.SimpleResponse
	replayed        bool
	header, trailer metadata.MD
	err             error
}

// txServe serves svc behind the interceptor (on svc's guard, with opts)
// on a real listener, stopped when the test ends, and returns a function
// that calls UnaryCall with an idempotency key through a real client.
func txServe(t *testing.T, svc *txService, opts ...grpcinterceptor.Option) func(key string) txAnswer {
	t.Helper()
	opts = append([]grpcinterceptor.Option{
		grpcinterceptor.WithSelector(grpcinterceptor.SelectMethods(testgrpc.TestService_UnaryCall_FullMethodName)),
		grpcinterceptor.WithLogger(slog.New(slog.DiscardHandler)),
	}, opts...)
	idem, err := grpcinterceptor.New(svc.b.Guard, opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(idem))
	testgrpc.RegisterTestServiceServer(srv, svc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		srv.GracefulStop()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	client := testgrpc.NewTestServiceClient(conn)
	return func(key string) txAnswer {
		ctx := metadata.AppendToOutgoingContext(t.Context(), "idempotency-key", key)
		var header, trailer metadata.MD
		resp, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.Header(&header), grpc.Trailer(&trailer))
		return txAnswer{resp, grpcinterceptor.Replayed(header), header, trailer, err}
	}
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
	b := demotest.NewTxBackend(t)
	svc := &txService{b: b}
	call := txServe(t, svc)

	answers := demotest.Burst(8, func(int) txAnswer { return call("a") })
	firsts := 0
	for i, a := range answers {
		if a.err != nil || a.resp.GetServerId() != "a" {
			t.Fatalf("duplicate %d: %v %v; want the response", i, a.resp, a.err)
		}
		if !a.replayed {
			firsts++
		}
	}
	if firsts != 1 || b.Runs.Load() != 1 {
		t.Fatalf("8 duplicates: %d answers not replayed, %d runs; want 1 and 1", firsts, b.Runs.Load())
	}
	if n := b.Rows(t, "a"); n != 1 {
		t.Fatalf("rows of a: %d; want 1", n)
	}
	if a := call("a"); a.err != nil || !a.replayed || a.resp.GetServerId() != "a" {
		t.Fatalf("a later retry: %v replayed=%v %v; want the replay", a.resp, a.replayed, a.err)
	}

	runs := b.Runs.Load()
	for _, c := range []codes.Code{codes.Internal, codes.Unavailable} {
		key := "forgotten-" + c.String()
		svc.fail.Store(uint32(c))
		if a := call(key); status.Code(a.err) != c || a.replayed {
			t.Fatalf("a handler answering %v: %v replayed=%v", c, a.err, a.replayed)
		}
		if n := b.Rows(t, key); n != 0 {
			t.Fatalf("rows of %s after %v: %d; want none", key, c, n)
		}
		svc.fail.Store(uint32(codes.OK))
		if a := call(key); a.err != nil || a.replayed || a.resp.GetServerId() != key {
			t.Fatalf("the retry of %v: %v replayed=%v %v; want a new execution", c, a.resp, a.replayed, a.err)
		}
		if n := b.Rows(t, key); n != 1 {
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
	if n := b.Rows(t, "recorded"); n != 1 {
		t.Fatalf("rows of a recorded status: %d; want the one committed with it", n)
	}
	if got := b.Runs.Load(); got != runs+1 {
		t.Fatalf("%d runs; want %d", got, runs+1)
	}
}

// TestTxGRPCTooLargeRolledBack: a gRPC handler that writes in pgstore.Tx
// and answers a response larger than the interceptor keeps
// (WithMaxResponseBytes), which its commit could not record, is rolled
// back: the call gets Internal (IDEMPOTENCY_RESPONSE_TOO_LARGE) and no
// response, the key has no row, and the retry, with a response that
// fits, runs again and commits one.
func TestTxGRPCTooLargeRolledBack(t *testing.T) {
	b := demotest.NewTxBackend(t)
	svc := &txService{b: b}
	svc.big.Store(true)
	call := txServe(t, svc, grpcinterceptor.WithMaxResponseBytes(txBigPayload/2))
	a := call("big")
	if status.Code(a.err) != codes.Internal || grpcinterceptor.ErrorInfoOf(a.err).GetReason() != "IDEMPOTENCY_RESPONSE_TOO_LARGE" || a.resp != nil {
		t.Fatalf("a response too large to record: %v, %v; want Internal %s and no response", a.resp, a.err, "IDEMPOTENCY_RESPONSE_TOO_LARGE")
	}
	if n := b.Rows(t, "big"); n != 0 || b.Runs.Load() != 1 {
		t.Fatalf("rows of big: %d, runs %d; want 0 and 1", n, b.Runs.Load())
	}
	svc.big.Store(false)
	if a := call("big"); a.err != nil || a.replayed || a.resp.GetServerId() != "big" {
		t.Fatalf("the retry: %v replayed=%v %v; want a new execution", a.resp, a.replayed, a.err)
	}
	if n := b.Rows(t, "big"); n != 1 || b.Runs.Load() != 2 {
		t.Fatalf("rows of big after the retry: %d, runs %d; want 1 and 2", n, b.Runs.Load())
	}
}

// TestTxGRPCCommitFails: a gRPC handler whose transaction cannot commit
// (a statement in it failed) has its response replaced by Internal
// (IDEMPOTENCY_TRANSACTION_FAILED), not Unavailable: the backend did not
// fail, the handler's transaction did. It leaves no row, and its retry
// runs again and commits one.
func TestTxGRPCCommitFails(t *testing.T) {
	b := demotest.NewTxBackend(t)
	call := txServe(t, &txService{b: b})
	b.Break.Store(true)
	a := call("broken")
	b.Break.Store(false)
	if status.Code(a.err) != codes.Internal || grpcinterceptor.ErrorInfoOf(a.err).GetReason() != "IDEMPOTENCY_TRANSACTION_FAILED" || a.resp != nil {
		t.Fatalf("a transaction that cannot commit: %v, %v; want Internal %s and no response", a.resp, a.err, "IDEMPOTENCY_TRANSACTION_FAILED")
	}
	if n := b.Rows(t, "broken"); n != 0 {
		t.Fatalf("rows after the failed commit: %d; want none", n)
	}
	if a := call("broken"); a.err != nil || a.replayed || a.resp.GetServerId() != "broken" {
		t.Fatalf("the retry: %v replayed=%v %v; want a new execution", a.resp, a.replayed, a.err)
	}
	if n := b.Rows(t, "broken"); n != 1 || b.Runs.Load() != 2 {
		t.Fatalf("rows after the retry: %d, runs %d; want 1 and 2", n, b.Runs.Load())
	}
}

// txMetadataModes names the ways txService sets its metadata, for
// subtests.
var txMetadataModes = []struct {
	name string
	meta txMetadata
}{
	{"SetHeader", txSetMetadata},
	{"SendHeader", txSendHeader},
}

// serveTxMetadata serves a txService on a TxBackend of its own that sets
// its metadata as meta says (see txServe).
func serveTxMetadata(t *testing.T, meta txMetadata) (*demotest.TxBackend, func(key string) txAnswer) {
	t.Helper()
	b := demotest.NewTxBackend(t)
	svc := &txService{b: b}
	svc.meta.Store(uint32(meta))
	return b, txServe(t, svc)
}

// handlerMetadata returns the entries of txService's metadata (x-order,
// x-order-trailer) in a's header and trailer.
func handlerMetadata(a txAnswer) (header, trailer []string) {
	get := func(md metadata.MD, k string) []string {
		var out []string
		for _, v := range md.Get(k) {
			out = append(out, k+"="+v)
		}
		return out
	}
	return get(a.header, "x-order"), get(a.trailer, "x-order-trailer")
}

// checkHandlerMetadata checks that a got txService's header and trailer
// for key.
func checkHandlerMetadata(t *testing.T, what string, a txAnswer, key string) {
	t.Helper()
	if h, tr := handlerMetadata(a); !slices.Equal(h, []string{"x-order=" + key}) || !slices.Equal(tr, []string{"x-order-trailer=" + key}) {
		t.Fatalf("%s: header %v and trailer %v; want the handler's x-order and x-order-trailer", what, h, tr)
	}
}

// TestTxGRPCCommitFailsSendsNoHandlerMetadata: a gRPC handler that sets
// header and trailer metadata inside its transaction (with grpc.SetHeader,
// or with grpc.SendHeader, which sends the header at once outside the
// transactional mode) and whose transaction then cannot commit (a
// statement in it failed) gets Internal with the interceptor's
// ErrorInfo (IDEMPOTENCY_TRANSACTION_FAILED), and none of its header nor trailer entries reaches the
// client; the retry runs again, commits, and delivers them.
func TestTxGRPCCommitFailsSendsNoHandlerMetadata(t *testing.T) {
	for _, m := range txMetadataModes {
		t.Run(m.name, func(t *testing.T) {
			b, call := serveTxMetadata(t, m.meta)
			b.Break.Store(true)
			a := call("broken")
			b.Break.Store(false)
			if status.Code(a.err) != codes.Internal || grpcinterceptor.ErrorInfoOf(a.err).GetReason() != "IDEMPOTENCY_TRANSACTION_FAILED" || a.resp != nil {
				t.Fatalf("a transaction that cannot commit: %v, %v; want Internal %s and no response", a.resp, a.err, "IDEMPOTENCY_TRANSACTION_FAILED")
			}
			if h, tr := handlerMetadata(a); len(h) != 0 || len(tr) != 0 {
				t.Fatalf("a transaction that cannot commit: the handler's header %v and trailer %v reached the client; want none", h, tr)
			}
			if n := b.Rows(t, "broken"); n != 0 {
				t.Fatalf("rows after the failed commit: %d; want none", n)
			}
			a = call("broken")
			if a.err != nil || a.replayed || a.resp.GetServerId() != "broken" {
				t.Fatalf("the retry: %v replayed=%v %v; want a new execution", a.resp, a.replayed, a.err)
			}
			checkHandlerMetadata(t, "the retry", a, "broken")
		})
	}
}

// TestTxGRPCCommittedMetadataReplays: the metadata a gRPC handler sets
// inside its transaction (with grpc.SetHeader or grpc.SendHeader, and
// grpc.SetTrailer) reaches the client once the transaction committed, and
// a retry gets it again with the replay.
func TestTxGRPCCommittedMetadataReplays(t *testing.T) {
	for _, m := range txMetadataModes {
		t.Run(m.name, func(t *testing.T) {
			b, call := serveTxMetadata(t, m.meta)
			for i, want := range []bool{false, true} {
				a := call("meta")
				if a.err != nil || a.replayed != want || a.resp.GetServerId() != "meta" {
					t.Fatalf("call %d: %v replayed=%v %v; want replayed=%v", i, a.resp, a.replayed, a.err, want)
				}
				checkHandlerMetadata(t, "call "+strconv.Itoa(i), a, "meta")
			}
			if n := b.Rows(t, "meta"); n != 1 || b.Runs.Load() != 1 {
				t.Fatalf("rows of meta: %d, runs %d; want 1 and 1", n, b.Runs.Load())
			}
		})
	}
}
