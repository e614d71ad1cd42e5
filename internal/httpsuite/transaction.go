package httpsuite

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/store"
)

// txStore makes a case's store a [store.Transactor], as pgstore is on
// PostgreSQL: the work's transaction begins when the app is asked to
// (tx=1), its commit completes the record, or fails with fail when it is
// set (the transaction's own failure, as pgstore reports it), and
// rollbacks are counted.
type txStore struct {
	store.Store
	fail      atomic.Pointer[error]
	rollbacks atomic.Int32
}

type txWorkKey struct{}

// Work implements store.Transactor.
func (s *txStore) Work(ctx context.Context, _ string, _ idemkit.Fence) (context.Context, store.Work) {
	w := &txWork{s: s}
	return context.WithValue(ctx, txWorkKey{}, w), w
}

// beginTx begins the transaction of the guarded work of ctx, if it can
// have one.
func beginTx(ctx context.Context) {
	if w, ok := ctx.Value(txWorkKey{}).(*txWork); ok {
		w.begun.Store(true)
	}
}

type txWork struct {
	s     *txStore
	begun atomic.Bool
}

func (w *txWork) Begun() bool { return w.begun.Load() }

func (w *txWork) Commit(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	if err := w.s.fail.Load(); err != nil {
		w.s.rollbacks.Add(1)
		return false, *err
	}
	return w.s.Store.Complete(ctx, rec, ttl)
}

func (w *txWork) Rollback(context.Context) {
	if w.begun.Load() {
		w.s.rollbacks.Add(1)
	}
}

// serveTx builds a stack whose store is a txStore over fresh backends.
func (s *suite) serveTx(t *testing.T, opts ...nethttp.Option) (*server, *txStore) {
	t.Helper()
	b := s.backends(t)
	tx := &txStore{Store: b.Store}
	b.Store = tx
	return s.serveOn(t, b, &app{}, nil, opts...), tx
}

// testTransactionFailuresAnswered: a handler whose transaction (tx=1)
// fails by itself at its commit gets 500 transaction-failed (a permanent
// failure) or 409 transaction-conflict with Retry-After (a serialization
// failure), without any of its own headers; nothing was kept, and the
// retry runs the handler again and commits.
func testTransactionFailuresAnswered(t *testing.T, s *suite) {
	for _, c := range []struct {
		fail    error
		status  int
		problem string
	}{
		{idemkit.NewError(idemkit.CodeInternal, "commit", "aborted", store.ErrWorkFailed), http.StatusInternalServerError, "transaction-failed"},
		{idemkit.NewError(idemkit.CodeServiceUnavailable, "commit", "serialization failure", store.ErrWorkConflict), http.StatusConflict, "transaction-conflict"},
	} {
		srv, tx := s.serveTx(t, nethttp.WithRetryAfter(3*time.Second))
		req := request{path: "/orders?tx=1", key: []string{"k"}, body: "{}"}
		tx.fail.Store(&c.fail)
		r := srv.do(t, req)
		tx.fail.Store(nil)
		problem(t, r, c.status, c.problem)
		if r.header.Get("Location") != "" || r.header.Get("X-Custom") != "" {
			t.Fatalf("%s: the handler's headers went out: %v", c.problem, r.header)
		}
		if got, want := r.header.Get("Retry-After"), map[bool]string{true: "3"}[c.status == http.StatusConflict]; got != want {
			t.Fatalf("%s: Retry-After %q; want %q", c.problem, got, want)
		}
		if r := srv.do(t, req); r.status != http.StatusCreated || r.replayed() {
			t.Fatalf("%s: the retry: %d %q; want a new execution", c.problem, r.status, r.body)
		}
		wantExecutions(t, srv, 2)
	}
}

// testHeldResponseOverLimitRolledBack: a response held until its
// transaction commits (tx=1) that grows past the response limit is not
// sent, in part or whole: the transaction is rolled back and the client
// gets 500 transaction-response-too-large; a retry runs the handler again.
// The same response outside a transaction is delivered (and not
// replayable).
func testHeldResponseOverLimitRolledBack(t *testing.T, s *suite) {
	srv, tx := s.serveTx(t, nethttp.WithMaxResponseBytes(1024))
	req := request{path: "/orders?tx=1&bytes=4096", key: []string{"k"}, body: "{}"}
	for i := range 2 {
		r := srv.do(t, req)
		problem(t, r, http.StatusInternalServerError, "transaction-response-too-large")
		if strings.Contains(r.body, "xxxx") || r.header.Get("Location") != "" {
			t.Fatalf("the handler's answer went out: %v %q", r.header, r.body)
		}
		wantExecutions(t, srv, int32(i+1))
		if n := tx.rollbacks.Load(); n != int32(i+1) {
			t.Fatalf("%d rollbacks; want %d", n, i+1)
		}
	}
	r := srv.do(t, request{path: "/orders?bytes=4096", key: []string{"outside"}, body: "{}"})
	if r.status != http.StatusCreated || !strings.Contains(r.body, strings.Repeat("x", 4096)) {
		t.Fatalf("outside a transaction: %d, %d bytes; want the handler's 201 delivered", r.status, len(r.body))
	}
}
