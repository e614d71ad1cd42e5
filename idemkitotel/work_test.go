package idemkitotel_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
)

// txStore is a memory store that is a store.Transactor: its work has no
// transaction of its own (its commit is a Complete), which is enough to
// see the guard commit through the measured store.
type txStore struct{ *memstore.Store }

type memWorkKey struct{}

type memWork struct {
	s     *memstore.Store
	begun atomic.Bool
}

func (s txStore) Work(ctx context.Context, _ string, _ idemkit.Fence) (context.Context, store.Work) {
	w := &memWork{s: s.Store}
	return context.WithValue(ctx, memWorkKey{}, w), w
}

func (w *memWork) Begun() bool { return w.begun.Load() }

func (w *memWork) Commit(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	return w.s.Complete(ctx, rec, ttl)
}

func (w *memWork) Rollback(context.Context) {}

// TestStoreKeepsTransactions: through the measured store, work that began
// its transaction commits with its outcome (counted as the backend
// operation "commit"), and a store that has no transactions gives none.
func TestStoreKeepsTransactions(t *testing.T) {
	tm := newTelemetry(t)
	s := memstore.New()
	t.Cleanup(func() { _ = s.Close() })
	g, err := middleware.New(tm.hook.Store(txStore{s}), middleware.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = middleware.Do(t.Context(), g, "k1", "payload", func(ctx context.Context) (string, error) {
		w, ok := ctx.Value(memWorkKey{}).(*memWork)
		if !ok {
			t.Fatal("the work's context does not carry the store's work")
		}
		w.begun.Store(true)
		return "v", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	m := tm.metrics(t)
	if m.count("idemkit.backend.operations", backendOp("commit"), result("ok")) != 1 ||
		m.count("idemkit.backend.operations", backendOp("complete"), result("ok")) != 0 {
		t.Errorf("backend operations: %+v; want one commit and no complete", m.points("idemkit.backend.operations"))
	}
	plain := tm.hook.Store(s)
	tr, ok := plain.(store.Transactor)
	if !ok {
		t.Fatal("the measured store is not a Transactor")
	}
	if _, w := tr.Work(t.Context(), "k", 1); w != nil {
		t.Fatal("the measured memory store gives work with a transaction")
	}
}
