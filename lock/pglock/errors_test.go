package pglock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/puddle/v2"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
)

// timeoutErr is a net.Error that timed out.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func pgErr(code string) error { return &pgconn.PgError{Severity: "ERROR", Code: code, Message: "m"} }

func TestMapError(t *testing.T) {
	opErr := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	cases := []struct {
		name string
		err  error
		want idemkit.Code
	}{
		{"serialization failure after retries", pgErr("40001"), idemkit.CodeServiceUnavailable},
		{"deadlock after retries", pgErr("40P01"), idemkit.CodeServiceUnavailable},
		{"connection exception", pgErr("08006"), idemkit.CodeServiceUnavailable},
		{"connection does not exist", pgErr("08003"), idemkit.CodeServiceUnavailable},
		{"admin shutdown (pg_terminate_backend)", pgErr("57P01"), idemkit.CodeServiceUnavailable},
		{"crash shutdown", pgErr("57P02"), idemkit.CodeServiceUnavailable},
		{"cannot connect now", pgErr("57P03"), idemkit.CodeServiceUnavailable},
		{"read-only standby", pgErr("25006"), idemkit.CodeServiceUnavailable},
		{"query canceled", pgErr("57014"), idemkit.CodeNetworkTimeout},
		{"lock timeout", pgErr("55P03"), idemkit.CodeNetworkTimeout},
		{"too many connections", pgErr("53300"), idemkit.CodeRateLimited},
		{"out of memory", pgErr("53200"), idemkit.CodeRateLimited},
		{"disk full", pgErr("53100"), idemkit.CodeRateLimited},
		{"invalid password", pgErr("28P01"), idemkit.CodeAuthFailed},
		{"invalid authorization", pgErr("28000"), idemkit.CodeAuthFailed},
		{"permission denied", pgErr("42501"), idemkit.CodeAuthFailed},
		{"undefined table", pgErr("42P01"), idemkit.CodeInvalidArgument},
		{"undefined schema", pgErr("3F000"), idemkit.CodeInvalidArgument},
		{"undefined column", pgErr("42703"), idemkit.CodeInvalidArgument},
		{"unique violation", pgErr("23505"), idemkit.CodeInternal},
		{"check violation", pgErr("23514"), idemkit.CodeInternal},
		{"syntax error", pgErr("42601"), idemkit.CodeInternal},
		{"program limit exceeded", pgErr("54000"), idemkit.CodeInternal},
		{"wrapped PgError", fmt.Errorf("exec: %w", pgErr("57P01")), idemkit.CodeServiceUnavailable},
		{"connect error wrapping auth failure", &pgconn.ConnectError{Config: &pgconn.Config{}}, idemkit.CodeServiceUnavailable},
		{"refused connection", opErr, idemkit.CodeServiceUnavailable},
		{"refused dial, bare errno", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, idemkit.CodeServiceUnavailable},
		{"reset connection", fmt.Errorf("read: %w", syscall.ECONNRESET), idemkit.CodeServiceUnavailable},
		{"net timeout", timeoutErr{}, idemkit.CodeNetworkTimeout},
		{"EOF", io.EOF, idemkit.CodeServiceUnavailable},
		{"unexpected EOF", fmt.Errorf("receive: %w", io.ErrUnexpectedEOF), idemkit.CodeServiceUnavailable},
		{"bare unexpected EOF", io.ErrUnexpectedEOF, idemkit.CodeServiceUnavailable},
		{"closed pool", puddle.ErrClosedPool, idemkit.CodeServiceUnavailable},
		{"closed conn", pgconn.ErrConnClosed, idemkit.CodeServiceUnavailable},
		{"closed network connection", net.ErrClosed, idemkit.CodeServiceUnavailable},
		{"context canceled", context.Canceled, idemkit.CodeAborted},
		{"context deadline", fmt.Errorf("timeout: %w", context.DeadlineExceeded), idemkit.CodeNetworkTimeout},
		{"anything else", errors.New("something odd"), idemkit.CodeInternal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := mapError(context.Background(), "op", c.err)
			var le *idemkit.Error
			if !errors.As(err, &le) || le.Code != c.want {
				t.Fatalf("mapError(%v) = %v; want code %v", c.err, err, c.want)
			}
			if !errors.Is(err, c.want.Sentinel()) || !errors.Is(err, c.err) {
				t.Fatalf("%v does not match both its sentinel and its cause", err)
			}
			if le.Op != "op" {
				t.Fatalf("op %q", le.Op)
			}
		})
	}
	t.Run("lock errors pass through", func(t *testing.T) {
		in := idemkit.NewError(idemkit.CodeInternal, "acquire", "fence overflow", nil)
		if err := mapError(context.Background(), "op", in); err != error(in) {
			t.Fatalf("MapError changed a *idemkit.Error: %v", err)
		}
	})
	t.Run("an ended ctx wins", func(t *testing.T) {
		canceled, cancel := context.WithCancel(context.Background())
		cancel()
		expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel2()
		for _, c := range []struct {
			ctx  context.Context
			want idemkit.Code
		}{{canceled, idemkit.CodeAborted}, {expired, idemkit.CodeNetworkTimeout}} {
			err := mapError(c.ctx, "op", pgErr("57014"))
			if idemkit.CodeOf(err) != c.want || !errors.Is(err, c.ctx.Err()) || !errors.Is(err, c.want.Sentinel()) {
				t.Fatalf("MapError under an ended ctx = %v; want %v wrapping the ctx error", err, c.want)
			}
			var pe *pgconn.PgError
			if !errors.As(err, &pe) {
				t.Fatal("the native error is not reachable")
			}
		}
	})
	t.Run("missing table names the fix", func(t *testing.T) {
		err := mapError(context.Background(), "op", pgErr("42P01"))
		if !strings.Contains(err.Error(), "pglock.SetupSchema") {
			t.Fatalf("%v does not say to run pglock.SetupSchema", err)
		}
	})
	t.Run("nil stays nil", func(t *testing.T) {
		if err := mapError(context.Background(), "op", nil); err != nil {
			t.Fatalf("mapError(nil) = %v", err)
		}
	})
}

func TestRetryable(t *testing.T) {
	cases := []struct {
		name       string
		err        error
		repeatable bool
		want       bool
	}{
		{"serialization failure", pgErr("40001"), false, true},
		{"deadlock", pgErr("40P01"), false, true},
		{"terminated backend, repeatable", pgErr("57P01"), true, true},
		{"terminated backend, not repeatable", pgErr("57P01"), false, false},
		{"connection exception, repeatable", pgErr("08006"), true, true},
		{"unique violation", pgErr("23505"), true, false},
		{"query canceled", pgErr("57014"), true, false},
		{"EOF, repeatable", io.ErrUnexpectedEOF, true, true},
		{"EOF, not repeatable", io.ErrUnexpectedEOF, false, false},
		{"bare EOF, repeatable", io.EOF, true, true},
		{"bare EOF, not repeatable", io.EOF, false, false},
		{"closed pool", puddle.ErrClosedPool, true, false},
		{"closed conn", fmt.Errorf("x: %w", pgconn.ErrConnClosed), true, false},
		{"lock error", idemkit.NewError(idemkit.CodeInternal, "acquire", "overflow", nil), true, false},
		{"unknown", errors.New("odd"), true, false},
		{"a sentinel", idemkit.ErrInternal, true, false},
	}
	for _, c := range cases {
		if got := retryable(c.err, c.repeatable); got != c.want {
			t.Errorf("%s: retryable = %v; want %v", c.name, got, c.want)
		}
	}
}

// TestRetry checks how often Retry tries a statement: until it succeeds, up
// to four times for a failure worth repeating, once for any other failure
// and once inside a caller's transaction, mapping the last error.
func TestRetry(t *testing.T) {
	lockErr := idemkit.NewError(idemkit.CodeInternal, "acquire", "overflow", nil)
	cases := []struct {
		name       string
		fails      int // tries that fail before one succeeds
		err        error
		repeatable bool
		inTx       bool
		wantTries  int
		want       idemkit.Code // of the error; 0 for success
	}{
		{"success at once", 0, nil, false, false, 1, 0},
		{"serialization failures, then success", 2, pgErr("40001"), false, false, 3, 0},
		{"deadlocks until the tries run out", 100, pgErr("40P01"), false, false, 1 + maxRetries, idemkit.CodeServiceUnavailable},
		{"lost connection, repeatable", 1, io.ErrUnexpectedEOF, true, false, 2, 0},
		{"lost connection, not repeatable", 1, io.ErrUnexpectedEOF, false, false, 1, idemkit.CodeServiceUnavailable},
		{"in a caller's transaction", 1, pgErr("40001"), true, true, 1, idemkit.CodeServiceUnavailable},
		{"not worth a retry", 100, pgErr("23505"), true, false, 1, idemkit.CodeInternal},
		{"a lock error", 100, lockErr, true, false, 1, idemkit.CodeInternal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tries := 0
			err := retry(t.Context(), "op", c.inTx, func(context.Context) (bool, error) {
				tries++
				if tries <= c.fails {
					return c.repeatable, c.err
				}
				return c.repeatable, nil
			})
			if tries != c.wantTries {
				t.Fatalf("%d tries; want %d", tries, c.wantTries)
			}
			if c.want == 0 {
				if err != nil {
					t.Fatalf("Retry = %v; want success", err)
				}
				return
			}
			if c.err == error(lockErr) {
				if err != c.err {
					t.Fatalf("Retry changed a *idemkit.Error: %v", err)
				}
				return
			}
			var le *idemkit.Error
			if !errors.As(err, &le) || le.Code != c.want || le.Op != "op" || !errors.Is(err, c.err) {
				t.Fatalf("Retry = %v; want code %v for op wrapping %v", err, c.want, c.err)
			}
		})
	}
	t.Run("an ended ctx stops the retries", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		tries := 0
		err := retry(ctx, "op", false, func(context.Context) (bool, error) {
			tries++
			cancel()
			return true, pgErr("40001")
		})
		if tries != 1 || idemkit.CodeOf(err) != idemkit.CodeAborted || !errors.Is(err, context.Canceled) {
			t.Fatalf("Retry under a cancelled ctx: %d tries, %v; want 1, Aborted", tries, err)
		}
	})
}

// TestErrorsFromServer provokes real server errors and checks their codes:
// a missing table, statement_timeout (57014), a cancelled and a timed-out
// ctx while a statement waits for a row lock, and a terminated backend.
func TestErrorsFromServer(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 4)
	ctx := t.Context()

	t.Run("missing table", func(t *testing.T) {
		l, err := New(admin, WithTable("no_such_schema_x.locks"))
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = l.Acquire(ctx, "k", time.Second)
		if idemkit.CodeOf(err) != idemkit.CodeInvalidArgument || !strings.Contains(err.Error(), "SetupSchema") {
			t.Fatalf("Acquire on missing tables: %v; want InvalidArgument naming SetupSchema", err)
		}
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "3F000" && pe.Code != "42P01" {
			t.Fatalf("the native error is not reachable: %v", err)
		}
	})

	opts := tables(t, admin)
	l, err := New(admin, opts...)
	if err != nil {
		t.Fatal(err)
	}
	lease, ok, err := l.Acquire(ctx, "busy", time.Minute)
	if err != nil || !ok {
		t.Fatalf("Acquire: %v, %v", ok, err)
	}
	// hold keeps the lease's row locked in an open transaction until the
	// returned function is called.
	hold := func(t *testing.T) func() {
		tx, err := admin.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SELECT 1 FROM "+l.cfg.table.sanitize()+" WHERE lock_id = $1 FOR UPDATE", lease.ID); err != nil {
			t.Fatal(err)
		}
		return func() { _ = tx.Rollback(context.Background()) }
	}

	t.Run("statement timeout", func(t *testing.T) {
		cfg, err := pgxpool.ParseConfig(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.RuntimeParams["statement_timeout"] = "100"
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		slow, _ := New(pool, opts...)
		unhold := hold(t)
		defer unhold()
		_, err = slow.Extend(ctx, lease.ID, time.Minute)
		var pe *pgconn.PgError
		if idemkit.CodeOf(err) != idemkit.CodeNetworkTimeout || !errors.As(err, &pe) || pe.Code != "57014" {
			t.Fatalf("Extend past statement_timeout: %v; want NetworkTimeout wrapping 57014", err)
		}
	})

	for _, c := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want idemkit.Code
		is   error
	}{
		{"ctx deadline mid-query", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, 100*time.Millisecond)
		}, idemkit.CodeNetworkTimeout, context.DeadlineExceeded},
		{"ctx cancelled mid-query", func() (context.Context, context.CancelFunc) {
			c, cancel := context.WithCancel(ctx)
			time.AfterFunc(100*time.Millisecond, cancel)
			return c, cancel
		}, idemkit.CodeAborted, context.Canceled},
	} {
		t.Run(c.name, func(t *testing.T) {
			pool := newPool(t, srv.URL, 2)
			ml, _ := New(pool, opts...)
			unhold := hold(t)
			qctx, cancel := c.ctx()
			defer cancel()
			_, err := ml.Extend(qctx, lease.ID, time.Minute) // waits for the held row lock
			unhold()
			if idemkit.CodeOf(err) != c.want || !errors.Is(err, c.is) {
				t.Fatalf("Extend interrupted by its ctx: %v; want %v matching %v", err, c.want, c.is)
			}
			// The pool recovers: the next operation works.
			if _, _, err := ml.LookupID(ctx, lease.ID); err != nil {
				t.Fatalf("the pool did not recover: %v", err)
			}
			if _, _, err := ml.Acquire(ctx, "other-"+c.name, time.Second); err != nil {
				t.Fatalf("the pool did not recover: %v", err)
			}
		})
	}

	t.Run("terminated backend", func(t *testing.T) {
		conn := connect(t, srv.URL)
		tl, _ := New(conn, opts...)
		var pid int
		if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
			t.Fatal(err)
		}
		_, err := tl.Release(ctx, lease.ID)
		if code := idemkit.CodeOf(err); code != idemkit.CodeServiceUnavailable {
			t.Fatalf("Release on a terminated connection: %v; want ServiceUnavailable", err)
		}
	})
}
