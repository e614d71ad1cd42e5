package mysqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

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
// returns nil or the last error mapped by [mapError]. Deadlocks are
// retried (InnoDB rolled the statement back); a lost connection only when
// f reports its try repeatable (running it again after a commit leaves
// the same state and answer); nothing in a caller's transaction (inTx),
// which a deadlock rolls back whole. database/sql itself retries a
// statement the driver could not send on a pooled connection gone stale.
func retry(ctx context.Context, op string, inTx bool, f func(ctx context.Context, try int) (repeatable bool, err error)) error {
	return engine.Retry(ctx, retryBackoff, maxRetries, f,
		func(err error, repeatable bool) bool { return !inTx && retryable(err, repeatable) },
		func(err error) error { return mapError(ctx, op, err) })
}

// MySQL and MariaDB error numbers the store maps (ER_* in the servers'
// manuals).
const (
	erLockWaitTimeout      = 1205
	erLockDeadlock         = 1213
	erServerShutdown       = 1053
	erConnectionKilled     = 1927 // MariaDB
	erQueryInterrupted     = 1317
	erTooManyConnections   = 1040
	erOutOfMemory          = 1037
	erOutOfResources       = 1041
	erRecordFileFull       = 1114
	erDiskFull             = 1021
	erNoSuchTable          = 1146
	erBadDB                = 1049
	erBadField             = 1054
	erSPDoesNotExist       = 1305
	erSPWrongNoOfArgs      = 1318
	erTableAccessDenied    = 1142
	erColumnAccessDenied   = 1143
	erProcAccessDenied     = 1370
	erDBAccessDenied       = 1044
	erAccessDenied         = 1045
	erSpecificAccessDenied = 1227
	erOptionPrevents       = 1290 // --read-only
	erReadOnlyMode         = 1836
	erCheckViolated        = 3819 // MySQL 8
	erConstraintFailed     = 4025 // MariaDB
	erStatementTimeout     = 1969 // MariaDB max_statement_time
	erQueryTimeout         = 3024 // MySQL max_execution_time
	erNetPacketTooLarge    = 1153
	erDataTooLong          = 1406
)

// errDBClosed is database/sql's error for a call on a closed *sql.DB,
// which it does not export: taken from a closed DB once, and matched by
// identity.
var errDBClosed = func() error {
	db := sql.OpenDB(noConnector{})
	_ = db.Close()
	return db.PingContext(context.Background())
}()

// noConnector is a connector never asked for a connection (its DB is
// closed first).
type noConnector struct{}

func (noConnector) Connect(context.Context) (driver.Conn, error) { return nil, driver.ErrBadConn }
func (noConnector) Driver() driver.Driver                        { return nil }

// retryable reports whether a failed try is worth repeating.
func retryable(err error, repeatable bool) bool {
	var le *idemkit.Error
	if errors.As(err, &le) {
		return false
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		if me.Number == erLockDeadlock {
			return true
		}
		return repeatable && (me.Number == erServerShutdown || me.Number == erConnectionKilled)
	}
	if errors.Is(err, sql.ErrConnDone) || errors.Is(err, errDBClosed) {
		return false
	}
	return repeatable && transport(err)
}

// transport reports whether err is a failure of the connection rather
// than of the statement.
func transport(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// undefinedHint is the detail of the error for a missing table, column or
// claim procedure.
const undefinedHint = "the record table or its claim procedure is missing or has another layout: run mysqlstore.SetupSchema (or apply schema.sql) with the same table name, on a table this package created"

// deniedHint is the detail of the error for a user refused the record
// table.
const deniedHint = "permission denied on the record table: grant the store's user SELECT, INSERT, UPDATE and DELETE on it and EXECUTE on its claim procedure"

// classify returns the code and a detail for a native error (never nil),
// by type and error number, never by message text (docs/backends.md has
// the table).
func classify(err error) (idemkit.Code, string) {
	switch {
	case errors.Is(err, context.Canceled):
		return idemkit.CodeAborted, "context canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return idemkit.CodeNetworkTimeout, "context deadline exceeded"
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return classifyNumber(me.Number)
	}
	var ne net.Error
	switch {
	case errors.Is(err, errDBClosed):
		return idemkit.CodeServiceUnavailable, "the *sql.DB is closed"
	case errors.Is(err, sql.ErrConnDone), errors.Is(err, sql.ErrTxDone):
		return idemkit.CodeServiceUnavailable, "the connection or transaction was already closed"
	case errors.Is(err, mysql.ErrPktTooLarge):
		return idemkit.CodeInvalidArgument, "the statement exceeds the driver's maxAllowedPacket: raise it (and the server's max_allowed_packet), or lower WithMaxResponseBytes"
	case errors.As(err, &ne) && ne.Timeout():
		return idemkit.CodeNetworkTimeout, "timed out talking to MySQL"
	case transport(err):
		return idemkit.CodeServiceUnavailable, "MySQL is unreachable"
	}
	return idemkit.CodeInternal, "unexpected error from MySQL"
}

// classifyNumber maps a server error number (see [mapError]).
func classifyNumber(n uint16) (idemkit.Code, string) {
	switch n {
	case erLockDeadlock:
		return idemkit.CodeServiceUnavailable, "deadlock persisted after retries"
	case erLockWaitTimeout:
		return idemkit.CodeNetworkTimeout, "lock wait timed out (innodb_lock_wait_timeout)"
	case erStatementTimeout, erQueryTimeout, erQueryInterrupted:
		return idemkit.CodeNetworkTimeout, "statement interrupted (a statement timeout or KILL QUERY)"
	case erServerShutdown, erConnectionKilled:
		return idemkit.CodeServiceUnavailable, "the connection to MySQL was lost (server shutdown or KILL)"
	case erOptionPrevents, erReadOnlyMode:
		return idemkit.CodeServiceUnavailable, "the server is read-only (a replica?)"
	case erTooManyConnections, erOutOfMemory, erOutOfResources, erRecordFileFull, erDiskFull:
		return idemkit.CodeRateLimited, "the server is out of resources (connections, memory or disk)"
	case erNoSuchTable, erBadDB, erBadField, erSPDoesNotExist, erSPWrongNoOfArgs:
		return idemkit.CodeMisconfigured, undefinedHint
	case erTableAccessDenied, erColumnAccessDenied, erProcAccessDenied, erDBAccessDenied, erSpecificAccessDenied:
		return idemkit.CodeAuthFailed, deniedHint
	case erAccessDenied:
		return idemkit.CodeAuthFailed, "authentication failed"
	case erCheckViolated, erConstraintFailed: // the only check of the table: the fence's
		return idemkit.CodeInternal, "fence overflow: the key's next fence would exceed idemkit.FenceMax"
	case erNetPacketTooLarge:
		return idemkit.CodeInvalidArgument, "the statement exceeds the server's max_allowed_packet: raise it, or lower WithMaxResponseBytes"
	case erDataTooLong:
		return idemkit.CodeInvalidArgument, "a value exceeds its column (a fingerprint over 64 KiB?)"
	}
	return idemkit.CodeInternal, fmt.Sprintf("unexpected MySQL error %d", n)
}

// mapError turns an error from database/sql or the driver into a
// [*idemkit.Error] for op that unwraps to its code's sentinel and err: for
// an ended ctx Aborted or NetworkTimeout, else as [classify] says; never
// with a key in it (statements carry keys, but the driver's errors do not
// repeat them, and a server's message is kept only in the native error).
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
