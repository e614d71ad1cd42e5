package pgstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock/pglock/pgtest"
	"github.com/idemkit/idemkit/store"
)

// TestErrorsFromServer provokes real failures and checks that the store's
// operations return them mapped by pglock.MapError (whose own table test
// lives in pglock): a missing table, a ctx that ends while Put waits for a
// row lock, a terminated backend.
func TestErrorsFromServer(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := pgtest.NewPool(t, srv.URL, 4)
	ctx := t.Context()
	rec := store.Record{Key: "k", Fingerprint: "fp", State: store.StateCompleted, Response: []byte("r"), Fence: 1}

	missing, _ := New(admin, WithTable("no_such_schema_y.records"))
	_, _, err := missing.Get(ctx, "k")
	if idemkit.CodeOf(err) != idemkit.CodeInvalidArgument || !errors.Is(err, idemkit.ErrInvalidArgument) || !strings.Contains(err.Error(), "pgstore.SetupSchema") {
		t.Fatalf("Get on a missing table: %v; want InvalidArgument saying to run pgstore.SetupSchema", err)
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "3F000" && pe.Code != "42P01" {
		t.Fatalf("the native error is not reachable: %v", err)
	}
	var le *idemkit.Error
	if !errors.As(err, &le) || le.Op != "get" {
		t.Fatalf("Get on a missing table: %v; want op get", err)
	}

	opt := table(t, admin)
	s, _ := New(admin, opt)
	if ok, err := s.Put(ctx, rec, time.Minute); err != nil || !ok {
		t.Fatalf("Put: %v, %v", ok, err)
	}
	for _, c := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want idemkit.Code
		is   error
	}{
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, 100*time.Millisecond)
		}, idemkit.CodeNetworkTimeout, context.DeadlineExceeded},
		{"cancel", func() (context.Context, context.CancelFunc) {
			c, cancel := context.WithCancel(ctx)
			time.AfterFunc(100*time.Millisecond, cancel)
			return c, cancel
		}, idemkit.CodeAborted, context.Canceled},
	} {
		t.Run("ctx "+c.name+" mid-query", func(t *testing.T) {
			pool := pgtest.NewPool(t, srv.URL, 2)
			ms, _ := New(pool, opt)
			tx, err := admin.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "SELECT 1 FROM "+ms.cfg.table.Sanitize()+" FOR UPDATE"); err != nil {
				t.Fatal(err)
			}
			qctx, cancel := c.ctx()
			defer cancel()
			next := rec
			next.Fence = 2
			_, err = ms.Put(qctx, next, time.Minute) // waits for the row lock
			_ = tx.Rollback(ctx)
			if idemkit.CodeOf(err) != c.want || !errors.Is(err, c.is) {
				t.Fatalf("Put interrupted by its ctx: %v; want %v", err, c.want)
			}
			if _, ok, err := ms.Get(ctx, "k"); err != nil || !ok {
				t.Fatalf("the pool did not recover: %v, %v", ok, err)
			}
		})
	}
	t.Run("terminated backend", func(t *testing.T) {
		conn := pgtest.Connect(t, srv.URL)
		cs, _ := New(conn, opt)
		var pid int
		if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.Delete(ctx, "k"); idemkit.CodeOf(err) != idemkit.CodeServiceUnavailable {
			t.Fatalf("Delete on a terminated connection: %v; want ServiceUnavailable", err)
		}
	})
}
