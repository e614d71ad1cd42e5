package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store/engine"
)

// maxRetries is how many times [retry] tries a statement again.
const maxRetries = 3

// retryBackoff is the back-off between tries: from 2 ms, doubling, with
// jitter.
var retryBackoff = idemkit.Backoff{Base: 2 * time.Millisecond, Max: time.Second}

// retry runs one statement of op: f(ctx, try), try from 0, up to four
// times with a jittered back-off from 2 ms, doubling, until ctx ends; it
// returns nil or the last error mapped by [mapError]. Serialization
// failures, deadlocks and failures before anything was sent are retried;
// a lost connection only when f reports its try repeatable (running it
// again after a commit leaves the same state and answer); nothing in a
// caller's transaction (inTx), which any failure aborts.
func retry(ctx context.Context, op string, inTx bool, f func(ctx context.Context, try int) (repeatable bool, err error)) error {
	return engine.Retry(ctx, retryBackoff, maxRetries, f,
		func(err error, repeatable bool) bool { return !inTx && retryable(err, repeatable) },
		func(err error) error { return mapError(ctx, op, err) })
}

// retryable reports whether a failed try is worth repeating.
func retryable(err error, repeatable bool) bool {
	var le *idemkit.Error
	if errors.As(err, &le) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "40001", "40P01":
			return true
		}
		return repeatable && connectionLost(pe.Code)
	}
	if errors.Is(err, puddle.ErrClosedPool) || errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, net.ErrClosed) {
		return false
	}
	if pgconn.SafeToRetry(err) {
		return true
	}
	return repeatable && transport(err)
}

// connectionLost reports whether a SQLSTATE says the session is gone:
// class 08, and 57P01 to 57P05 (pg_terminate_backend, shutdowns, a dropped
// database, idle_session_timeout).
func connectionLost(code string) bool {
	return strings.HasPrefix(code, "08") || (strings.HasPrefix(code, "57P") && code != "57P00")
}

// transport reports whether err is a failure of the connection rather than
// of the statement.
func transport(err error) bool {
	var ne net.Error
	var ce *pgconn.ConnectError
	return errors.As(err, &ne) || errors.As(err, &ce) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, puddle.ErrClosedPool)
}

// undefinedHint is the detail of the error for a missing table, schema,
// column or claim function.
const undefinedHint = "the record table is missing or has another layout: run pgstore.SetupSchema (or apply schema.sql) with the same table name, on a table this package created"

// deniedHint is the detail of the error for a role refused the record
// table.
const deniedHint = "permission denied on the record table: grant the store's role SELECT, INSERT, UPDATE and DELETE on it (and USAGE on its schema)"

// classify returns the code and a detail for a native error (never nil),
// by type and SQLSTATE, never by message text (docs/backends.md has the
// table).
func classify(err error) (idemkit.Code, string) {
	switch {
	case errors.Is(err, context.Canceled):
		return idemkit.CodeAborted, "context canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return idemkit.CodeNetworkTimeout, "context deadline exceeded"
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return classifySQLState(pe.Code)
	}
	var ne net.Error
	switch {
	case errors.Is(err, puddle.ErrClosedPool):
		return idemkit.CodeServiceUnavailable, "the connection pool is closed"
	case pgconn.Timeout(err), errors.As(err, &ne) && ne.Timeout():
		return idemkit.CodeNetworkTimeout, "timed out talking to PostgreSQL"
	case transport(err), pgconn.SafeToRetry(err):
		return idemkit.CodeServiceUnavailable, "PostgreSQL is unreachable"
	}
	return idemkit.CodeInternal, "unexpected error from PostgreSQL"
}

// classifySQLState maps a SQLSTATE (see [mapError]).
func classifySQLState(code string) (idemkit.Code, string) {
	switch code {
	case "40001", "40P01":
		return idemkit.CodeServiceUnavailable, "transaction conflict persisted after retries"
	case "25006":
		return idemkit.CodeServiceUnavailable, "the server is read-only (a standby?)"
	case "57014":
		return idemkit.CodeNetworkTimeout, "statement cancelled (statement_timeout or a cancel request)"
	case "55P03":
		return idemkit.CodeNetworkTimeout, "lock wait timed out (lock_timeout)"
	case "42501":
		return idemkit.CodeAuthFailed, deniedHint
	case "42P01", "3F000", "42703", "42883":
		return idemkit.CodeMisconfigured, undefinedHint
	case "23514": // the only check of the table: the fence's
		return idemkit.CodeInternal, "fence overflow: the key's next fence would exceed idemkit.FenceMax"
	case "54000":
		return idemkit.CodeInvalidArgument, "a value exceeds a server limit (program_limit_exceeded)"
	}
	switch {
	case connectionLost(code):
		return idemkit.CodeServiceUnavailable, "the connection to PostgreSQL was lost"
	case strings.HasPrefix(code, "53"):
		return idemkit.CodeRateLimited, "the server is out of resources (connections, memory or disk)"
	case strings.HasPrefix(code, "28"):
		return idemkit.CodeAuthFailed, "authentication failed"
	}
	return idemkit.CodeInternal, "unexpected SQLSTATE " + code
}

// mapError turns an error from pgx into a [*idemkit.Error] for op that
// unwraps to its code's sentinel and err: for an ended ctx Aborted or
// NetworkTimeout, else as [classify] says; never with a key in it.
func mapError(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	var le *idemkit.Error
	if errors.As(err, &le) {
		return err
	}
	if cerr := ctx.Err(); cerr != nil {
		if !errors.Is(err, cerr) {
			err = fmt.Errorf("%w: %w", cerr, err)
		}
		return idemkit.NewError(idemkit.CodeOf(cerr), op, cerr.Error(), err)
	}
	code, detail := classify(err)
	return idemkit.NewError(code, op, detail, err)
}
