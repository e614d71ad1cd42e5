package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/store"
)

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func pgErr(code string) error { return &pgconn.PgError{Severity: "ERROR", Code: code, Message: "m"} }

func TestMapError(t *testing.T) {
	cases := []struct {
		err  error
		want lock.Code
	}{
		{pgErr("40001"), lock.CodeServiceUnavailable},
		{pgErr("40P01"), lock.CodeServiceUnavailable},
		{pgErr("08006"), lock.CodeServiceUnavailable},
		{pgErr("57P01"), lock.CodeServiceUnavailable},
		{pgErr("25006"), lock.CodeServiceUnavailable},
		{pgErr("57014"), lock.CodeNetworkTimeout},
		{pgErr("55P03"), lock.CodeNetworkTimeout},
		{pgErr("53300"), lock.CodeRateLimited},
		{pgErr("28P01"), lock.CodeAuthFailed},
		{pgErr("42501"), lock.CodeAuthFailed},
		{pgErr("42P01"), lock.CodeInvalidArgument},
		{pgErr("3F000"), lock.CodeInvalidArgument},
		{pgErr("54000"), lock.CodeInternal},
		{pgErr("23505"), lock.CodeInternal},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, lock.CodeServiceUnavailable},
		{timeoutErr{}, lock.CodeNetworkTimeout},
		{io.ErrUnexpectedEOF, lock.CodeServiceUnavailable},
		{puddle.ErrClosedPool, lock.CodeServiceUnavailable},
		{pgconn.ErrConnClosed, lock.CodeServiceUnavailable},
		{context.Canceled, lock.CodeAborted},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), lock.CodeNetworkTimeout},
		{errors.New("odd"), lock.CodeInternal},
	}
	for _, c := range cases {
		err := mapError(context.Background(), "put", c.err)
		var le *lock.Error
		if !errors.As(err, &le) || le.Code != c.want || !errors.Is(err, c.want.Sentinel()) || !errors.Is(err, c.err) {
			t.Errorf("mapError(%v) = %v; want code %v wrapping the cause", c.err, err, c.want)
		}
	}
	if err := mapError(context.Background(), "put", pgErr("42P01")); !strings.Contains(err.Error(), "pgstore.SetupSchema") {
		t.Errorf("%v does not say to run SetupSchema", err)
	}
}

func TestRetryable(t *testing.T) {
	cases := []struct {
		err        error
		repeatable bool
		want       bool
	}{
		{pgErr("40001"), false, true},
		{pgErr("40P01"), false, true},
		{pgErr("57P01"), true, true},
		{pgErr("57P01"), false, false},
		{pgErr("23505"), true, false},
		{io.EOF, true, true},
		{io.EOF, false, false},
		{puddle.ErrClosedPool, true, false},
		{store.ErrTooLarge, true, false},
	}
	for _, c := range cases {
		if got := retryable(c.err, c.repeatable); got != c.want {
			t.Errorf("retryable(%v, %v) = %v; want %v", c.err, c.repeatable, got, c.want)
		}
	}
}

// TestErrorsFromServer provokes real failures: a missing table, a ctx that
// ends while Put waits for a row lock, a terminated backend.
func TestErrorsFromServer(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 4)
	ctx := t.Context()
	rec := store.Record{Key: "k", Fingerprint: "fp", State: store.StateCompleted, Response: []byte("r"), Fence: 1}

	missing, _ := New(admin, WithTable("no_such_schema_y.records"))
	if _, _, err := missing.Get(ctx, "k"); lock.CodeOf(err) != lock.CodeInvalidArgument {
		t.Fatalf("Get on a missing table: %v; want InvalidArgument", err)
	}

	opt := table(t, admin)
	s, _ := New(admin, opt)
	if ok, err := s.Put(ctx, rec, time.Minute); err != nil || !ok {
		t.Fatalf("Put: %v, %v", ok, err)
	}
	for _, c := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want lock.Code
		is   error
	}{
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, 100*time.Millisecond)
		}, lock.CodeNetworkTimeout, context.DeadlineExceeded},
		{"cancel", func() (context.Context, context.CancelFunc) {
			c, cancel := context.WithCancel(ctx)
			time.AfterFunc(100*time.Millisecond, cancel)
			return c, cancel
		}, lock.CodeAborted, context.Canceled},
	} {
		t.Run("ctx "+c.name+" mid-query", func(t *testing.T) {
			pool := newPool(t, srv.URL, 2)
			ms, _ := New(pool, opt)
			tx, err := admin.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "SELECT 1 FROM "+ms.cfg.table.sanitize()+" FOR UPDATE"); err != nil {
				t.Fatal(err)
			}
			qctx, cancel := c.ctx()
			defer cancel()
			next := rec
			next.Fence = 2
			_, err = ms.Put(qctx, next, time.Minute) // waits for the row lock
			_ = tx.Rollback(ctx)
			if lock.CodeOf(err) != c.want || !errors.Is(err, c.is) {
				t.Fatalf("Put interrupted by its ctx: %v; want %v", err, c.want)
			}
			if _, ok, err := ms.Get(ctx, "k"); err != nil || !ok {
				t.Fatalf("the pool did not recover: %v, %v", ok, err)
			}
		})
	}
	t.Run("terminated backend", func(t *testing.T) {
		conn := connect(t, srv.URL)
		cs, _ := New(conn, opt)
		var pid int
		if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.Delete(ctx, "k"); lock.CodeOf(err) != lock.CodeServiceUnavailable {
			t.Fatalf("Delete on a terminated connection: %v; want ServiceUnavailable", err)
		}
	})
}
