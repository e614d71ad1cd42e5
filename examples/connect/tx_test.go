package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	"github.com/idemkit/idemkit/connectinterceptor"
	"github.com/idemkit/idemkit/examples/internal/demotest"
	"github.com/idemkit/idemkit/middleware"
)

// txService is a TestService whose UnaryCall inserts an order row in
// pgstore.Tx (demotest.TxBackend.Insert) and answers the key it ran
// under, with a payload of txBigPayload bytes while big is set, or, once
// it inserted, the code in fail when that is not zero. With meta set,
// once it inserted, inside its transaction, it sets the header X-Order
// and the trailer X-Order-Trailer, both the call's key, through the
// call's info.
type txService struct {
	b    *demotest.TxBackend
	fail atomic.Uint32 // a connect.Code; 0 answers the response
	big  atomic.Bool
	meta atomic.Bool
}

// txBigPayload is the size of a big answer's payload: more than the
// interceptor of TestTxConnectTooLargeRolledBack keeps.
const txBigPayload = 8 << 10

func (s *txService) unaryCall(ctx context.Context, _ *connect.Request[testgrpc.SimpleRequest]) (*connect.Response[testgrpc.SimpleResponse], error) {
	if err := s.b.Insert(ctx); err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	if c := connect.Code(s.fail.Load()); c != 0 {
		return nil, connect.NewError(c, errors.New("declined"))
	}
	key, _ := middleware.CallInfoFrom(ctx)
	if s.meta.Load() {
		info, _ := connect.CallInfoForHandlerContext(ctx)
		info.ResponseHeader().Set("X-Order", key.Key)
		info.ResponseTrailer().Set("X-Order-Trailer", key.Key)
	}
	resp := &testgrpc.SimpleResponse{ServerId: key.Key}
	if s.big.Load() {
		resp.Payload = &testgrpc.Payload{Body: make([]byte, txBigPayload)}
	}
	return connect.NewResponse(resp), nil
}

// txAnswer is what one call got.
type txAnswer struct {
	resp            *testgrpc.SimpleResponse
	replayed        bool
	header, trailer http.Header
	err             error
}

// txServe serves svc's UnaryCall behind the interceptor (on svc's guard,
// with opts) on a real listener that speaks the three protocols, closed
// when the test ends, and returns a function that calls it with an
// idempotency key through a real client of protocol p (an index of
// protocolOptions).
func txServe(t *testing.T, svc *txService, p int, opts ...connectinterceptor.Option) func(key string) txAnswer {
	t.Helper()
	idem, err := connectinterceptor.New(svc.b.Guard, append([]connectinterceptor.Option{
		connectinterceptor.WithLogger(slog.New(slog.DiscardHandler)),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(unaryCallProcedure, connect.NewUnaryHandler(unaryCallProcedure, svc.unaryCall, connect.WithInterceptors(idem)))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	client := newClients(t, srv.Listener.Addr().String(), p).unary
	return func(key string) txAnswer {
		req := connect.NewRequest(&testgrpc.SimpleRequest{})
		req.Header().Set("Idempotency-Key", key)
		res, err := client.CallUnary(t.Context(), req)
		if err != nil {
			ce := new(connect.Error)
			if errors.As(err, &ce) {
				return txAnswer{header: ce.Meta(), trailer: ce.Meta(), err: err}
			}
			return txAnswer{err: err}
		}
		return txAnswer{res.Msg, res.Header().Get("Idempotent-Replayed") == "true", res.Header(), res.Trailer(), nil}
	}
}

// TestTxConnect: a Connect handler behind the interceptor that writes in
// pgstore.Tx, on a real listener with a real client: 8 duplicate calls
// sent at once run it once and commit one row with the record, every
// other call gets the replay, and so does a later retry. An error the
// interceptor does not record (Internal, Unavailable: transient, see its
// store policy) rolls the row back, and the retry runs again and commits.
// An error it records (FailedPrecondition) commits the handler's row with
// the record, as a response does: the retry replays the error and adds
// no row.
func TestTxConnect(t *testing.T) {
	b := demotest.NewTxBackend(t)
	svc := &txService{b: b}
	call := txServe(t, svc, 0)

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
	for _, c := range []connect.Code{connect.CodeInternal, connect.CodeUnavailable} {
		key := "forgotten-" + c.String()
		svc.fail.Store(uint32(c))
		if a := call(key); connect.CodeOf(a.err) != c || a.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("a handler answering %v: %v", c, a.err)
		}
		if n := b.Rows(t, key); n != 0 {
			t.Fatalf("rows of %s after %v: %d; want none", key, c, n)
		}
		svc.fail.Store(0)
		if a := call(key); a.err != nil || a.replayed || a.resp.GetServerId() != key {
			t.Fatalf("the retry of %v: %v replayed=%v %v; want a new execution", c, a.resp, a.replayed, a.err)
		}
		if n := b.Rows(t, key); n != 1 {
			t.Fatalf("rows of %s after the retry: %d; want 1", key, n)
		}
		runs += 2
	}

	svc.fail.Store(uint32(connect.CodeFailedPrecondition))
	if a := call("recorded"); connect.CodeOf(a.err) != connect.CodeFailedPrecondition || a.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("a handler answering FailedPrecondition: %v", a.err)
	}
	svc.fail.Store(0)
	if a := call("recorded"); connect.CodeOf(a.err) != connect.CodeFailedPrecondition || a.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("its retry: %v, header %v; want the error replayed", a.err, a.header)
	}
	if n := b.Rows(t, "recorded"); n != 1 {
		t.Fatalf("rows of a recorded error: %d; want the one committed with it", n)
	}
	if got := b.Runs.Load(); got != runs+1 {
		t.Fatalf("%d runs; want %d", got, runs+1)
	}
}

// TestTxConnectTooLargeRolledBack: a Connect handler that writes in
// pgstore.Tx and answers a response larger than the interceptor keeps
// (WithMaxResponseBytes), which its commit could not record, is rolled
// back: the call gets Internal (IDEMPOTENCY_RESPONSE_TOO_LARGE) and no
// response, the key has no row, and the retry, with a response that
// fits, runs again and commits one.
func TestTxConnectTooLargeRolledBack(t *testing.T) {
	b := demotest.NewTxBackend(t)
	svc := &txService{b: b}
	svc.big.Store(true)
	call := txServe(t, svc, 0, connectinterceptor.WithMaxResponseBytes(txBigPayload/2))
	a := call("big")
	if connect.CodeOf(a.err) != connect.CodeInternal || reason(a.err) != "IDEMPOTENCY_RESPONSE_TOO_LARGE" || a.resp != nil {
		t.Fatalf("a response too large to record: response %v, %v; want Internal %s and no response", a.resp != nil, a.err, "IDEMPOTENCY_RESPONSE_TOO_LARGE")
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

// handlerMetadata returns txService's header and trailer entries in a.
func handlerMetadata(a txAnswer) (header, trailer []string) {
	return a.header.Values("X-Order"), a.trailer.Values("X-Order-Trailer")
}

// TestTxConnectCommitFailsSendsNoHandlerMetadata: over the three
// protocols, a Connect handler that sets a header and a trailer inside its
// transaction and whose transaction then cannot commit (a statement in it
// failed) gets Internal (IDEMPOTENCY_TRANSACTION_FAILED), and neither
// reaches the client; the retry runs again, commits, and delivers them,
// and a later retry gets them with the replay.
func TestTxConnectCommitFailsSendsNoHandlerMetadata(t *testing.T) {
	for p := range protocolOptions {
		t.Run(strconv.Itoa(p), func(t *testing.T) {
			b := demotest.NewTxBackend(t)
			svc := &txService{b: b}
			svc.meta.Store(true)
			call := txServe(t, svc, p)
			b.Break.Store(true)
			a := call("broken")
			b.Break.Store(false)
			if connect.CodeOf(a.err) != connect.CodeInternal || reason(a.err) != "IDEMPOTENCY_TRANSACTION_FAILED" || a.resp != nil {
				t.Fatalf("a transaction that cannot commit: %v, %v; want Internal %s and no response", a.resp, a.err, "IDEMPOTENCY_TRANSACTION_FAILED")
			}
			if h, tr := handlerMetadata(a); len(h) != 0 || len(tr) != 0 {
				t.Fatalf("a transaction that cannot commit: the handler's header %v and trailer %v reached the client; want none", h, tr)
			}
			if n := b.Rows(t, "broken"); n != 0 {
				t.Fatalf("rows after the failed commit: %d; want none", n)
			}
			for i, replayed := range []bool{false, true} {
				a = call("broken")
				if a.err != nil || a.replayed != replayed || a.resp.GetServerId() != "broken" {
					t.Fatalf("retry %d: %v replayed=%v %v; want replayed=%v", i, a.resp, a.replayed, a.err, replayed)
				}
				if h, tr := handlerMetadata(a); !slices.Equal(h, []string{"broken"}) || !slices.Equal(tr, []string{"broken"}) {
					t.Fatalf("retry %d: header %v and trailer %v; want the handler's", i, h, tr)
				}
			}
			if n := b.Rows(t, "broken"); n != 1 || b.Runs.Load() != 2 {
				t.Fatalf("rows after the retry: %d, runs %d; want 1 and 2", n, b.Runs.Load())
			}
		})
	}
}
