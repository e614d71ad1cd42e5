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

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store"
)

// timeoutErr is a net.Error that timed out, as a read past a deadline is.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// TestMapError checks the mapping table, by type and SQLSTATE: the native
// errors are the values pgx and the standard library return.
func TestMapError(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return &pgconn.PgError{Code: code, Message: "secret-key in a message"} }
	for _, c := range []struct {
		err  error
		code idemkit.Code
	}{
		{pg("40001"), idemkit.CodeServiceUnavailable},
		{pg("40P01"), idemkit.CodeServiceUnavailable},
		{pg("08006"), idemkit.CodeServiceUnavailable},
		{pg("57P01"), idemkit.CodeServiceUnavailable},
		{pg("57P03"), idemkit.CodeServiceUnavailable},
		{pg("25006"), idemkit.CodeServiceUnavailable},
		{pg("57014"), idemkit.CodeNetworkTimeout},
		{pg("55P03"), idemkit.CodeNetworkTimeout},
		{pg("53300"), idemkit.CodeRateLimited},
		{pg("53100"), idemkit.CodeRateLimited},
		{pg("53200"), idemkit.CodeRateLimited},
		{pg("28P01"), idemkit.CodeAuthFailed},
		{pg("42501"), idemkit.CodeAuthFailed},
		{pg("42P01"), idemkit.CodeMisconfigured},
		{pg("3F000"), idemkit.CodeMisconfigured},
		{pg("42703"), idemkit.CodeMisconfigured},
		{pg("42883"), idemkit.CodeMisconfigured},
		{pg("54000"), idemkit.CodeInvalidArgument},
		{pg("23514"), idemkit.CodeInternal},
		{pg("23505"), idemkit.CodeInternal},
		{pg("XX000"), idemkit.CodeInternal},
		{fmt.Errorf("wrapped: %w", pg("53300")), idemkit.CodeRateLimited},
		{puddle.ErrClosedPool, idemkit.CodeServiceUnavailable},
		{net.ErrClosed, idemkit.CodeServiceUnavailable},
		{io.EOF, idemkit.CodeServiceUnavailable},
		{io.ErrUnexpectedEOF, idemkit.CodeServiceUnavailable},
		{syscall.ECONNREFUSED, idemkit.CodeServiceUnavailable},
		{&net.OpError{Op: "read", Err: syscall.ECONNRESET}, idemkit.CodeServiceUnavailable},
		{&net.OpError{Op: "read", Err: timeoutErr{}}, idemkit.CodeNetworkTimeout},
		{errors.New("something else"), idemkit.CodeInternal},
		{context.Canceled, idemkit.CodeAborted},
		{context.DeadlineExceeded, idemkit.CodeNetworkTimeout},
	} {
		got := mapError(context.Background(), "get", c.err)
		var le *idemkit.Error
		if !errors.As(got, &le) || le.Code != c.code || le.Op != "get" || !errors.Is(got, c.code.Sentinel()) || !errors.Is(got, c.err) {
			t.Errorf("mapError(%v) = %v; want code %v, op get, unwrapping to the sentinel and the cause", c.err, got, c.code)
		}
		if le != nil && strings.Contains(le.Detail, "secret-key") {
			t.Errorf("mapError(%v): the detail repeats the server's message: %q", c.err, le.Detail)
		}
	}
	if mapError(context.Background(), "get", nil) != nil {
		t.Error("mapError(nil) is not nil")
	}
	same := idemkit.NewError(idemkit.CodeInternal, "x", "y", nil)
	if mapError(context.Background(), "get", same) != same {
		t.Error("mapError changed an *idemkit.Error")
	}
	// An ended ctx wins over what pgx made of the interruption.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := mapError(ctx, "get", io.EOF); idemkit.CodeOf(err) != idemkit.CodeAborted || !errors.Is(err, context.Canceled) || !errors.Is(err, io.EOF) {
		t.Errorf("mapError on a cancelled ctx = %v; want Aborted unwrapping to both", err)
	}
	dctx, dcancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer dcancel()
	if err := mapError(dctx, "get", pg("08006")); idemkit.CodeOf(err) != idemkit.CodeNetworkTimeout || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("mapError past the deadline = %v; want NetworkTimeout", err)
	}
}

// TestErrorsFromServer provokes real failures: a missing table, a ctx that
// ends while a claim waits for a row lock, a terminated backend, a closed
// pool.
func TestErrorsFromServer(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 4)
	ctx := t.Context()

	missing, _ := New(admin, WithTable("no_such_schema_y.records"))
	_, _, err := missing.Claim(ctx, "secret-key", fp, time.Minute)
	if idemkit.CodeOf(err) != idemkit.CodeMisconfigured || !strings.Contains(err.Error(), "pgstore.SetupSchema") || strings.Contains(err.Error(), "secret-key") {
		t.Fatalf("Claim on a missing table: %v; want Misconfigured saying to run pgstore.SetupSchema, without the key", err)
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "3F000" && pe.Code != "42P01" {
		t.Fatalf("the native error is not reachable: %v", err)
	}

	opt := table(t, admin)
	s, _ := New(admin, opt)
	// runOut leaves a claim of k that ran out: the next claim takes it
	// over, and needs its row lock for that.
	runOut := func(k string) store.Record {
		t.Helper()
		c, _, err := s.Claim(ctx, k, fp, time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
		return c
	}
	for _, tc := range []struct {
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
		t.Run("ctx "+tc.name+" mid-statement", func(t *testing.T) {
			// A key of the subtest's own: the interrupted claim is still
			// sent, and runs once the lock is released.
			k := "k-" + tc.name
			runOut(k)
			pool := newPool(t, srv.URL, 2)
			ms, _ := New(pool, opt)
			tx, err := admin.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "SELECT 1 FROM "+tableOf(ms)+" WHERE key = $1 FOR UPDATE", k); err != nil {
				t.Fatal(err)
			}
			qctx, cancel := tc.ctx()
			defer cancel()
			t0 := time.Now()
			_, _, err = ms.Claim(qctx, k, fp, time.Minute) // waits for the row lock
			took := time.Since(t0)
			_ = tx.Rollback(ctx)
			if idemkit.CodeOf(err) != tc.want || !errors.Is(err, tc.is) {
				t.Fatalf("Claim interrupted by its ctx: %v; want %v", err, tc.want)
			}
			if took > 5*time.Second {
				t.Fatalf("Claim took %v to give up", took)
			}
			if _, _, err := ms.Get(ctx, k); err != nil {
				t.Fatalf("the pool did not recover: %v", err)
			}
		})
	}
	t.Run("terminated backend", func(t *testing.T) {
		c := runOut("terminated")
		conn := connect(t, srv.URL)
		cs, _ := New(conn, opt)
		var pid int
		if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.Release(ctx, c.Key, c.Fence); idemkit.CodeOf(err) != idemkit.CodeServiceUnavailable {
			t.Fatalf("Release on a terminated connection: %v; want ServiceUnavailable", err)
		}
	})
	t.Run("closed pool", func(t *testing.T) {
		pool := newPool(t, srv.URL, 1)
		ps, _ := New(pool, opt)
		pool.Close()
		_, _, err := ps.Claim(ctx, "k", fp, time.Minute)
		if idemkit.CodeOf(err) != idemkit.CodeServiceUnavailable || !errors.Is(err, puddle.ErrClosedPool) {
			t.Fatalf("Claim on a closed pool: %v; want ServiceUnavailable", err)
		}
	})
	t.Run("unreachable server", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close() // nothing listens there now
		pool := newPool(t, "postgres://idemkit@"+addr+"/postgres?sslmode=disable", 1)
		us, _ := New(pool, opt)
		_, _, err = us.Get(ctx, "k")
		if idemkit.CodeOf(err) != idemkit.CodeServiceUnavailable {
			t.Fatalf("Get on an unreachable server: %v; want ServiceUnavailable", err)
		}
	})
}

// TestValidationBeforeIO checks that malformed arguments fail with
// InvalidArgument before any I/O: the store's pool is closed, so any I/O
// would fail with ServiceUnavailable instead.
func TestValidationBeforeIO(t *testing.T) {
	t.Parallel()
	pool := newPool(t, testenv.Postgres(t).URL, 1)
	pool.Close()
	s, err := New(pool)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	over := store.Record{Key: "k", State: store.StateCompleted, Fence: 1 << 62}
	for name, err := range map[string]error{
		"extend above FenceMax":   func() error { _, _, err := s.Extend(ctx, "k", 1<<62, time.Minute); return err }(),
		"release above FenceMax":  func() error { _, err := s.Release(ctx, "k", 1<<62); return err }(),
		"complete above FenceMax": func() error { _, err := s.Complete(ctx, over, time.Minute); return err }(),
		"put above FenceMax":      func() error { _, err := s.Put(ctx, over, time.Minute); return err }(),
		"put of a claim": func() error {
			_, err := s.Put(ctx, store.Record{Key: "k", State: store.StateClaimed, Fence: 1}, time.Minute)
			return err
		}(),
		"put too large": func() error {
			_, err := s.Put(ctx, store.Record{Key: "k", State: store.StateCompleted, Response: make([]byte, defaultMaxResponseBytes+1)}, time.Minute)
			return err
		}(),
	} {
		if idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Errorf("%s: %v; want InvalidArgument", name, err)
		}
	}
}
