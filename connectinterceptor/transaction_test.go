package connectinterceptor_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/connectinterceptor"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
)

// txStore is a store.Transactor over a memory store, as pgstore is over
// PostgreSQL: the work's transaction begins when its handler calls
// beginTx, and its commit completes the record, or is refused while
// refuse is set (as the commit of a holder whose claim was taken over
// is), or fails with fail when that is set (the transaction's own
// failure).
type txStore struct {
	store.Store
	refuse atomic.Bool
	fail   atomic.Pointer[error]
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

// txService begins its work's transaction and then sets the header
// X-H (through the call's info) and X-R (on its response) and the
// trailer X-T, each "<execution>", and answers "<execution>" with the
// number of padding bytes the request's value asks for.
type txService struct{ executions atomic.Int64 }

func (s *txService) create(ctx context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
	n := fmt.Sprint(s.executions.Add(1))
	beginTx(ctx)
	info, _ := connect.CallInfoForHandlerContext(ctx)
	info.ResponseHeader().Set("X-H", n)
	info.ResponseTrailer().Set("X-T", n)
	var pad int
	fmt.Sscan(req.Msg.GetValue(), &pad)
	res := connect.NewResponse(wrapperspb.String(n + strings.Repeat(" ", pad)))
	res.Header().Set("X-R", n)
	return res, nil
}

// eachTxProtocol runs f over the three protocols, each with a txStore,
// a txService and the interceptor (built with opts) of its own.
func eachTxProtocol(t *testing.T, opts []connectinterceptor.Option, f func(t *testing.T, c caller, s *txStore, svc *txService)) {
	for _, p := range protocols() {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			s := &txStore{Store: memstore.New()}
			guard, err := middleware.New(s, middleware.WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				t.Fatal(err)
			}
			svc := &txService{}
			mux := http.NewServeMux()
			mux.Handle(createOrder, connect.NewUnaryHandler(createOrder, svc.create, connect.WithInterceptors(newIdem(t, guard, opts...))))
			f(t, newCaller(t, listen(t, mux), p), s, svc)
		})
	}
}

// handlerHeaders returns the handler's headers and trailer in an answer
// (from the response, or from the error's metadata).
func handlerHeaders(res *connect.Response[wrapperspb.StringValue], err error) string {
	var h, tr http.Header
	if res != nil {
		h, tr = res.Header(), res.Trailer()
	} else if ce := new(connect.Error); errors.As(err, &ce) {
		h, tr = ce.Meta(), ce.Meta()
	}
	return fmt.Sprintf("X-H=%q X-R=%q X-T=%q", h.Values("X-H"), h.Values("X-R"), tr.Values("X-T"))
}

// TestTransactionalHeadersHeldUntilCommit: in the transactional mode
// (the store commits the work's transaction with its outcome), the
// headers and trailers a handler sets once its work began the transaction
// (through the call's info or its response) reach the client only with a
// commit that landed, and are replayed; when the commit is refused (the
// claim was taken over), the client gets Unavailable and none of them.
func TestTransactionalHeadersHeldUntilCommit(t *testing.T) {
	eachTxProtocol(t, nil, func(t *testing.T, c caller, s *txStore, svc *txService) {
		s.refuse.Store(true)
		res, err := c.call(t, "0", "Idempotency-Key", "refused")
		s.refuse.Store(false)
		wantRefusal(t, err, connect.CodeUnavailable, "IDEMPOTENCY_UNAVAILABLE", true)
		if got, want := handlerHeaders(res, err), `X-H=[] X-R=[] X-T=[]`; got != want {
			t.Fatalf("a refused commit: %s; want none of the handler's", got)
		}
		for i, replayed := range []string{"", "true"} {
			res, err := c.call(t, "0", "Idempotency-Key", "committed")
			if err != nil || res.Msg.GetValue() != "2" || res.Header().Get("Idempotent-Replayed") != replayed {
				t.Fatalf("call %d: %v %v; want execution 2, replayed %q", i, res, err, replayed)
			}
			if got, want := handlerHeaders(res, err), `X-H=["2"] X-R=["2"] X-T=["2"]`; got != want {
				t.Fatalf("call %d: %s; want %s", i, got, want)
			}
		}
		if n := svc.executions.Load(); n != 2 {
			t.Fatalf("%d executions; want 2", n)
		}
	})
}

// TestTransactionalCommitFailuresAnswered: a work's transaction that
// failed at its commit, as the store reports it (store.ErrWorkFailed: a
// statement it let fail, a deferred constraint), is answered Internal
// (IDEMPOTENCY_TRANSACTION_FAILED) without RetryInfo, and one that lost a
// conflict (store.ErrWorkConflict) Aborted
// (IDEMPOTENCY_TRANSACTION_CONFLICT) with RetryInfo; never Unavailable,
// and without the headers set in the transaction. The claim is released:
// the retry runs the handler again, and commits.
func TestTransactionalCommitFailuresAnswered(t *testing.T) {
	for _, tc := range []struct {
		fail      error
		code      connect.Code
		reason    string
		retryInfo bool
	}{
		{store.ErrWorkFailed, connect.CodeInternal, "IDEMPOTENCY_TRANSACTION_FAILED", false},
		{store.ErrWorkConflict, connect.CodeAborted, "IDEMPOTENCY_TRANSACTION_CONFLICT", true},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			eachTxProtocol(t, nil, func(t *testing.T, c caller, s *txStore, svc *txService) {
				s.fail.Store(&tc.fail)
				res, err := c.call(t, "0", "Idempotency-Key", "k")
				s.fail.Store(nil)
				wantRefusal(t, err, tc.code, tc.reason, tc.retryInfo)
				if got, want := handlerHeaders(res, err), `X-H=[] X-R=[] X-T=[]`; got != want {
					t.Fatalf("a failed commit: %s; want none of the handler's", got)
				}
				res, err = c.call(t, "0", "Idempotency-Key", "k")
				if err != nil || res.Msg.GetValue() != "2" || res.Header().Get("Idempotent-Replayed") != "" {
					t.Fatalf("the retry: %v %v; want execution 2", res, err)
				}
			})
		})
	}
}

// TestTransactionalResponseOverLimit: a handler that began its
// transaction and answers a message larger than the response limit is
// rolled back and answered Internal (IDEMPOTENCY_RESPONSE_TOO_LARGE),
// without its headers: the client is never told of work that a commit
// could not record. Nothing is kept: the retry runs the handler again,
// and a response within the limit commits and replays.
func TestTransactionalResponseOverLimit(t *testing.T) {
	const limit = 1 << 10
	eachTxProtocol(t, []connectinterceptor.Option{connectinterceptor.WithMaxResponseBytes(limit)}, func(t *testing.T, c caller, s *txStore, svc *txService) {
		for i := range 2 {
			res, err := c.call(t, fmt.Sprint(4*limit), "Idempotency-Key", "big")
			wantRefusal(t, err, connect.CodeInternal, "IDEMPOTENCY_RESPONSE_TOO_LARGE", false)
			if got, want := handlerHeaders(res, err), `X-H=[] X-R=[] X-T=[]`; got != want {
				t.Fatalf("call %d: %s; want none of the handler's", i, got)
			}
			if n := svc.executions.Load(); n != int64(i+1) {
				t.Fatalf("call %d: %d executions; want %d (nothing kept)", i, n, i+1)
			}
		}
		for i, replayed := range []string{"", "true"} {
			res, err := c.call(t, "16", "Idempotency-Key", "small")
			if err != nil || res.Msg.GetValue() != "3"+strings.Repeat(" ", 16) || res.Header().Get("Idempotent-Replayed") != replayed {
				t.Fatalf("call %d: %v %v; want execution 3 with 16 bytes of padding, replayed %q", i, res, err, replayed)
			}
		}
	})
}
