package pglock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"
)

// maxRetries is how many times an operation is tried again after a
// serialization failure, a deadlock or a connection loss that provably left
// nothing behind.
const maxRetries = 3

// retryBackoff spaces the tries: from 2ms, doubling, jittered, at most 20ms.
func retryBackoff() idemkit.Backoff {
	return idemkit.Backoff{Base: 2 * time.Millisecond, Max: 20 * time.Millisecond}
}

// retry runs one statement of an operation: it calls f until f succeeds,
// fails with an error that is not worth a retry, or has been tried four
// times (one try and three retries), with a jittered back-off from 2ms that
// doubles each time and stops when ctx ends. It returns nil on success,
// else the last error mapped by [mapError] for op.
//
// f reports, with its error, whether its try is repeatable: whether running
// it again after a connection loss that may have happened after the
// statement committed leaves the same state (a read, or a write whose
// repetition changes nothing, such as an extend or a sweep).
// Serialization failures (40001), deadlocks (40P01) and failures that pgx
// guarantees happened before anything was sent are retried whatever f
// reports; a lost connection (class 08, 57P01..57P05, a network error,
// io.EOF) only when the try is repeatable; a closed pool or connection, or
// a [*idemkit.Error] that f returns, never.
//
// inTx says that f runs in a caller's transaction (a pgx.Tx), which any
// failure aborts: f is then tried once.
func retry(ctx context.Context, op string, inTx bool, f func(ctx context.Context) (repeatable bool, err error)) error {
	for try := 1; ; try++ {
		repeatable, err := f(ctx)
		if err == nil {
			return nil
		}
		if inTx || try > maxRetries || ctx.Err() != nil || !retryable(err, repeatable) {
			return mapError(ctx, op, err)
		}
		t := time.NewTimer(retryBackoff().Delay(try))
		select {
		case <-ctx.Done():
			t.Stop()
			return mapError(ctx, op, err)
		case <-t.C:
		}
	}
}

// retryable reports whether a failed try is worth repeating: the server
// rolled it back for a serialization failure or a deadlock; pgx guarantees
// it failed before anything was sent; or the connection was lost and the try
// is repeatable. A closed pool or connection stays closed and is never
// retried.
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
	if errors.Is(err, puddle.ErrClosedPool) || errors.Is(err, pgconn.ErrConnClosed) {
		return false
	}
	if pgconn.SafeToRetry(err) {
		return true
	}
	return repeatable && transport(err)
}

// connectionLost reports whether a SQLSTATE says the session is gone: class
// 08 (connection exception) and the shutdown and termination codes of class
// 57 (57P01 admin_shutdown, which pg_terminate_backend sends, 57P02
// crash_shutdown, 57P03 cannot_connect_now, 57P04 database_dropped, 57P05
// idle_session_timeout).
func connectionLost(code string) bool {
	return strings.HasPrefix(code, "08") || (strings.HasPrefix(code, "57P") && code != "57P00")
}

// transport reports whether err is a failure of the connection rather than
// of the statement: a network error, an end of stream, a refused or reset
// connection, a failed connect.
func transport(err error) bool {
	var ne net.Error
	var ce *pgconn.ConnectError
	return errors.As(err, &ne) || errors.As(err, &ce) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, puddle.ErrClosedPool)
}

// undefinedHint is the detail of the error for a missing table, schema or
// column.
const undefinedHint = "the lock table is missing or out of date: run pglock.SetupSchema, or apply its schema.sql, with the same table name, on a table this package created"

// classify returns the code and a detail for a native error (never nil),
// by type and SQLSTATE, never by message text (the table is in
// [mapError]'s documentation).
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
		return idemkit.CodeAuthFailed, "permission denied"
	case "42P01", "3F000", "42703":
		return idemkit.CodeInvalidArgument, undefinedHint
	}
	switch {
	case connectionLost(code):
		return idemkit.CodeServiceUnavailable, "the connection to PostgreSQL was lost"
	case strings.HasPrefix(code, "53"):
		return idemkit.CodeRateLimited, "the server is out of resources (connections, memory, disk)"
	case strings.HasPrefix(code, "28"):
		return idemkit.CodeAuthFailed, "authentication failed"
	}
	return idemkit.CodeInternal, "unexpected SQLSTATE " + code
}

// mapError turns an error from pgx into a [*idemkit.Error] for op that
// unwraps to both its code's sentinel and err; it returns nil for nil and a
// *idemkit.Error unchanged. When ctx has ended, the error is Aborted
// (cancelled) or NetworkTimeout (deadline) whatever pgx made of the
// interruption, and unwraps to ctx's error as well. Otherwise the code
// comes from the error's type and SQLSTATE (class), never from its message
// text:
//
//	context.Canceled / DeadlineExceeded in err           Aborted / NetworkTimeout
//	40001 serialization_failure, 40P01 deadlock_detected (after retries)  ServiceUnavailable
//	class 08 connection_exception, 57P01..57P05 shutdown/termination      ServiceUnavailable
//	25006 read_only_sql_transaction (a standby)         ServiceUnavailable
//	57014 query_canceled, 55P03 lock_not_available      NetworkTimeout
//	class 53 insufficient_resources (53300 too many connections, ...)  RateLimited
//	class 28 invalid_authorization, 42501 insufficient_privilege  AuthFailed
//	42P01 undefined_table, 3F000 invalid_schema_name, 42703 undefined_column  InvalidArgument (run SetupSchema)
//	any other SQLSTATE                                   Internal
//	pgconn timeouts, net.Error with Timeout()            NetworkTimeout
//	connect errors, net errors, io.EOF, closed conn or pool, SafeToRetry errors  ServiceUnavailable
//	anything else                                        Internal
//
// The detail never holds a key or a statement's arguments.
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
