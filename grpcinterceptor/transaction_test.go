package grpcinterceptor_test

import (
	"context"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/grpcinterceptor"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
)

// txStore is a store.Transactor over a memory store, as pgstore is over
// PostgreSQL: the work's transaction begins when its handler calls
// beginTx, and its commit completes the record, or is refused while
// refuse is set, as the commit of a holder whose claim was taken over is.
type txStore struct {
	store.Store
	refuse atomic.Bool
	fail   atomic.Pointer[error] // the error of the commit, when set: the transaction's own failure
}

type txWorkKey struct{}

func (s *txStore) Work(ctx context.Context, _ string, _ idemkit.Fence) (context.Context, store.Work) {
	w := &txWork{s: s}
	return context.WithValue(ctx, txWorkKey{}, w), w
}

// beginTx begins the transaction of the guarded work of ctx.
func beginTx(ctx context.Context) { ctx.Value(txWorkKey{}).(*txWork).begun.Store(true) }

type txWork struct {
	s     *txStore
	begun atomic.Bool
}

func (w *txWork) Begun() bool { return w.begun.Load() }

func (w *txWork) Commit(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	if w.s.refuse.Load() {
		return false, nil
	}
	if err := w.s.fail.Load(); err != nil {
		return false, *err
	}
	return w.s.Store.Complete(ctx, rec, ttl)
}

func (w *txWork) Rollback(context.Context) {}

func txGuard(t testing.TB, s *txStore) *middleware.Guard {
	t.Helper()
	g, err := middleware.New(s, middleware.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// txMetadataService begins its work's transaction (beginTx) and sets the
// header x-h and the trailer x-t, both "<execution>", inside it, or
// before it with before set; the header with grpc.SendHeader when
// sendHeader is set, grpc.SetHeader otherwise. Before anything else, it
// picks its compressor (grpc.ClientSupportedCompressors and
// grpc.SetSendCompressor, which need grpc-go's own stream).
type txMetadataService struct {
	testgrpc.UnimplementedTestServiceServer
	sendHeader, before bool
	executions         atomic.Int64
}

func (s *txMetadataService) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	n := strconv.FormatInt(s.executions.Add(1), 10)
	if supported, err := grpc.ClientSupportedCompressors(ctx); err != nil || !slices.Contains(supported, "gzip") {
		return nil, status.Errorf(codes.Internal, "ClientSupportedCompressors: %v %v", supported, err)
	}
	if err := grpc.SetSendCompressor(ctx, "gzip"); err != nil {
		return nil, status.Error(codes.Internal, "SetSendCompressor: "+err.Error())
	}
	if !s.before {
		beginTx(ctx)
	}
	set := grpc.SetHeader
	if s.sendHeader {
		set = grpc.SendHeader
	}
	if err := set(ctx, metadata.Pairs("x-h", n)); err != nil {
		return nil, err
	}
	if err := grpc.SetTrailer(ctx, metadata.Pairs("x-t", n)); err != nil {
		return nil, err
	}
	if s.before {
		beginTx(ctx)
	}
	return &testgrpc.SimpleResponse{ServerId: n}, nil
}

// TestTransactionalMetadataHeldUntilCommit: in the transactional mode
// (the store commits the work's transaction with its outcome), the
// metadata a handler sets once its work began the transaction, with
// grpc.SetHeader or grpc.SendHeader and grpc.SetTrailer, reaches the
// client only once the commit landed, and is replayed; when the commit is
// refused (the claim was taken over), the client gets Unavailable and none
// of it.
func TestTransactionalMetadataHeldUntilCommit(t *testing.T) {
	for _, sendHeader := range []bool{false, true} {
		t.Run("SendHeader="+strconv.FormatBool(sendHeader), func(t *testing.T) {
			s := &txStore{Store: memstore.New()}
			svc := &txMetadataService{sendHeader: sendHeader}
			c := dial(t, serve(t, txGuard(t, s), svc))

			s.refuse.Store(true)
			a := unary(withKey(t.Context(), "refused"), c, &testgrpc.SimpleRequest{})
			s.refuse.Store(false)
			checkRefusal(t, a.err, codes.Unavailable, "IDEMPOTENCY_UNAVAILABLE", true)
			if len(a.header.Get("x-h")) != 0 || len(a.trailer.Get("x-t")) != 0 {
				t.Fatalf("a refused commit: header x-h %v, trailer x-t %v; want none of the handler's", a.header.Get("x-h"), a.trailer.Get("x-t"))
			}

			ctx := withKey(t.Context(), "committed")
			for i, replayed := range []bool{false, true} {
				a := unary(ctx, c, &testgrpc.SimpleRequest{})
				if a.err != nil || a.replayed() != replayed || a.resp.GetServerId() != "2" {
					t.Fatalf("call %d: %v %v replayed=%v; want execution 2, replayed=%v", i, a.resp, a.err, a.replayed(), replayed)
				}
				if !slices.Equal(a.header.Get("x-h"), []string{"2"}) || !slices.Equal(a.trailer.Get("x-t"), []string{"2"}) {
					t.Fatalf("call %d: header x-h %v, trailer x-t %v; want 2 and 2", i, a.header.Get("x-h"), a.trailer.Get("x-t"))
				}
			}
		})
	}
}

// TestTransactionalMetadataBeforeTheTransaction: metadata a handler sets
// before its work begins the transaction goes to grpc-go's stream at
// once, as outside the transactional mode (grpc.SetSendCompressor works
// then too), so it reaches the client even when the commit is refused.
func TestTransactionalMetadataBeforeTheTransaction(t *testing.T) {
	for _, sendHeader := range []bool{false, true} {
		t.Run("SendHeader="+strconv.FormatBool(sendHeader), func(t *testing.T) {
			s := &txStore{Store: memstore.New()}
			c := dial(t, serve(t, txGuard(t, s), &txMetadataService{sendHeader: sendHeader, before: true}))
			s.refuse.Store(true)
			a := unary(withKey(t.Context(), "k"), c, &testgrpc.SimpleRequest{})
			checkRefusal(t, a.err, codes.Unavailable, "IDEMPOTENCY_UNAVAILABLE", true)
			if !slices.Equal(a.header.Get("x-h"), []string{"1"}) || !slices.Equal(a.trailer.Get("x-t"), []string{"1"}) {
				t.Fatalf("header x-h %v, trailer x-t %v; want the handler's 1 and 1, set before the transaction", a.header.Get("x-h"), a.trailer.Get("x-t"))
			}
		})
	}
}

// recordingStream is a transport stream that cannot report its metadata
// (so the interceptor puts a stream of its own in front of it) and
// records the calls that reach it.
type recordingStream struct {
	mu    sync.Mutex
	calls []string
}

func (r *recordingStream) Method() string                  { return unaryCall }
func (r *recordingStream) SetHeader(md metadata.MD) error  { return r.record("SetHeader", md) }
func (r *recordingStream) SendHeader(md metadata.MD) error { return r.record("SendHeader", md) }
func (r *recordingStream) SetTrailer(md metadata.MD) error { return r.record("SetTrailer", md) }
func (r *recordingStream) record(call string, md metadata.MD) error {
	keys := make([]string, 0, len(md))
	for k, vs := range md {
		keys = append(keys, k+"="+strings.Join(vs, ","))
	}
	sort.Strings(keys)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, call+" "+strings.Join(keys, " "))
	return nil
}

func (r *recordingStream) recorded() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// TestTransactionalMetadataOnAStreamThatCannotReport: under a transport
// stream that cannot report its metadata, the stream the handler gets
// holds what it sets once its work began the transaction: nothing reaches
// the transport while the handler runs, nor after a refused commit; once
// committed, the header is sent (as the handler asked) and the trailer
// set. A held header, once sent, cannot be set or sent again, as on
// grpc-go's stream.
func TestTransactionalMetadataOnAStreamThatCannotReport(t *testing.T) {
	s := &txStore{Store: memstore.New()}
	idem, err := grpcinterceptor.New(txGuard(t, s), grpcinterceptor.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	info := &grpc.UnaryServerInfo{FullMethod: unaryCall}
	var during []string // what reached the transport while the handler ran
	handler := func(ctx context.Context, _ any) (any, error) {
		beginTx(ctx)
		if err := grpc.SetHeader(ctx, metadata.Pairs("x-a", "1")); err != nil {
			return nil, err
		}
		if err := grpc.SendHeader(ctx, metadata.Pairs("x-b", "2")); err != nil {
			return nil, err
		}
		if grpc.SendHeader(ctx, metadata.Pairs("x-c", "3")) == nil || grpc.SetHeader(ctx, metadata.Pairs("x-c", "3")) == nil {
			return nil, status.Error(codes.Internal, "a header set or sent after the header was sent was accepted")
		}
		if err := grpc.SetTrailer(ctx, metadata.Pairs("x-t", "t")); err != nil {
			return nil, err
		}
		return &testgrpc.SimpleResponse{ServerId: "1"}, nil
	}
	call := func(key string) (*recordingStream, error) {
		rec := &recordingStream{}
		ctx := metadata.NewIncomingContext(t.Context(), metadata.Pairs(keyMD, key))
		ctx = grpc.NewContextWithServerTransportStream(ctx, rec)
		_, err := idem(ctx, &testgrpc.SimpleRequest{}, info, func(ctx context.Context, req any) (any, error) {
			resp, err := handler(ctx, req)
			during = rec.recorded()
			return resp, err
		})
		return rec, err
	}

	s.refuse.Store(true)
	rec, err := call("refused")
	s.refuse.Store(false)
	if status.Code(err) != codes.Unavailable || len(during) != 0 || len(rec.recorded()) != 0 {
		t.Fatalf("a refused commit: %v; the transport got %v while the handler ran and %v in all; want Unavailable and nothing", err, during, rec.recorded())
	}

	rec, err = call("committed")
	want := []string{"SendHeader x-a=1 x-b=2", "SetTrailer x-t=t"}
	if err != nil || len(during) != 0 || !slices.Equal(rec.recorded(), want) {
		t.Fatalf("a commit: %v; the transport got %v while the handler ran and %v in all; want %v after it", err, during, rec.recorded(), want)
	}
	rec, err = call("committed")
	if err != nil || !slices.Contains(rec.recorded(), "SetHeader idempotent-replayed=true x-a=1 x-b=2") {
		t.Fatalf("the replay: %v, the transport got %v; want the held header replayed", err, rec.recorded())
	}
}

// TestTransactionalCommitFailuresAnswered: a work's transaction that
// failed at its commit, as the store reports it (store.ErrWorkFailed:
// a statement it let fail, a deferred constraint), is answered Internal
// (IDEMPOTENCY_TRANSACTION_FAILED) without RetryInfo, and one that lost a
// conflict (store.ErrWorkConflict) Aborted
// (IDEMPOTENCY_TRANSACTION_CONFLICT) with RetryInfo; never Unavailable,
// and without the metadata set in the transaction. The claim is released:
// the retry runs the handler again, and commits.
func TestTransactionalCommitFailuresAnswered(t *testing.T) {
	for _, c := range []struct {
		fail      error
		code      codes.Code
		reason    string
		retryInfo bool
	}{
		{store.ErrWorkFailed, codes.Internal, "IDEMPOTENCY_TRANSACTION_FAILED", false},
		{store.ErrWorkConflict, codes.Aborted, "IDEMPOTENCY_TRANSACTION_CONFLICT", true},
	} {
		t.Run(c.reason, func(t *testing.T) {
			s := &txStore{Store: memstore.New()}
			svc := &txMetadataService{}
			conn := dial(t, serve(t, txGuard(t, s), svc))
			ctx := withKey(t.Context(), "k")
			s.fail.Store(&c.fail)
			a := unary(ctx, conn, &testgrpc.SimpleRequest{})
			s.fail.Store(nil)
			checkRefusal(t, a.err, c.code, c.reason, c.retryInfo)
			if len(a.header.Get("x-h")) != 0 || len(a.trailer.Get("x-t")) != 0 {
				t.Fatalf("header x-h %v, trailer x-t %v; want none of the handler's", a.header.Get("x-h"), a.trailer.Get("x-t"))
			}
			a = unary(ctx, conn, &testgrpc.SimpleRequest{})
			if a.err != nil || a.replayed() || a.resp.GetServerId() != "2" {
				t.Fatalf("the retry: %v %v replayed=%v; want execution 2", a.resp, a.err, a.replayed())
			}
		})
	}
}

// txPayloadService begins its work's transaction and answers a payload
// of the size the request asks for.
type txPayloadService struct {
	testgrpc.UnimplementedTestServiceServer
	executions atomic.Int64
}

func (s *txPayloadService) UnaryCall(ctx context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	n := strconv.FormatInt(s.executions.Add(1), 10)
	beginTx(ctx)
	return &testgrpc.SimpleResponse{ServerId: n, Payload: &testgrpc.Payload{Body: make([]byte, req.GetResponseSize())}}, nil
}

// TestTransactionalResponseOverLimit: a handler that began its
// transaction and answers a message larger than the response limit is
// rolled back and answered Internal (IDEMPOTENCY_RESPONSE_TOO_LARGE), as
// an HTTP response too large to hold until the commit is: the client is
// never told of work that a commit could not record. Nothing is kept: the
// retry runs the handler again, and a response within the limit commits
// and replays.
func TestTransactionalResponseOverLimit(t *testing.T) {
	const limit = 1 << 10
	s := &txStore{Store: memstore.New()}
	svc := &txPayloadService{}
	conn := dial(t, serve(t, txGuard(t, s), svc, grpcinterceptor.WithMaxResponseBytes(limit)))
	ctx := withKey(t.Context(), "big")
	for i := range 2 {
		a := unary(ctx, conn, &testgrpc.SimpleRequest{ResponseSize: 4 * limit})
		checkRefusal(t, a.err, codes.Internal, "IDEMPOTENCY_RESPONSE_TOO_LARGE", false)
		if n := svc.executions.Load(); n != int64(i+1) {
			t.Fatalf("call %d: %d executions; want %d (nothing kept)", i, n, i+1)
		}
	}
	ctx = withKey(t.Context(), "small")
	for i, replayed := range []bool{false, true} {
		a := unary(ctx, conn, &testgrpc.SimpleRequest{ResponseSize: 16})
		if a.err != nil || a.replayed() != replayed || a.resp.GetServerId() != "3" || len(a.resp.GetPayload().GetBody()) != 16 {
			t.Fatalf("call %d: %v %v replayed=%v; want execution 3 with 16 bytes, replayed=%v", i, a.resp, a.err, a.replayed(), replayed)
		}
	}
}
