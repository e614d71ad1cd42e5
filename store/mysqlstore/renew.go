package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemkit/idemkit"
)

// renewer renews leases on one connection of the pool kept for them while
// guarded work holds transactions ([Tx]): such works may fill the pool
// (each holds a connection until it ends), and a renewal that waited for
// one of them could outwait its lease. The connection is taken before the
// first transaction begins and given back a minute after the last ends.
type renewer struct {
	db *sql.DB

	sem  chan struct{} // of size one: held while the connection is used or taken
	conn *sql.Conn     // guarded by sem; nil until taken, or after a failure

	mu   sync.Mutex
	open int         // works that hold (or are beginning) a transaction
	idle *time.Timer // gives the connection back once none has for renewIdle
}

// renewIdle is how long the renewer's connection outlives the last work
// that held a transaction.
const renewIdle = time.Minute

func newRenewer(db *sql.DB) *renewer {
	return &renewer{db: db, sem: make(chan struct{}, 1)}
}

// hold counts a work's transaction in, taking the connection first if it
// is not taken: called before the transaction takes its own.
func (r *renewer) hold(ctx context.Context) error {
	r.mu.Lock()
	r.open++
	if r.idle != nil {
		r.idle.Stop()
		r.idle = nil
	}
	r.mu.Unlock()
	select {
	case r.sem <- struct{}{}:
	case <-ctx.Done():
		r.release()
		return ctx.Err()
	}
	defer func() { <-r.sem }()
	if r.conn == nil {
		c, err := r.db.Conn(ctx)
		if err != nil {
			r.release()
			return err
		}
		r.conn = c
	}
	return nil
}

// release counts a work's transaction out; the last out gives the
// connection back a minute later.
func (r *renewer) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.open--; r.open == 0 {
		r.idle = time.AfterFunc(renewIdle, r.closeIdle)
	}
}

// closeIdle gives the connection back if no work holds a transaction.
func (r *renewer) closeIdle() {
	r.sem <- struct{}{}
	defer func() { <-r.sem }()
	r.mu.Lock()
	idle := r.open == 0
	r.mu.Unlock()
	if idle && r.conn != nil {
		_ = r.conn.Close()
		r.conn = nil
	}
}

// active reports whether the renewer serves renewals now: while works
// hold transactions, every renewal goes through it, also those of claims
// whose work waits for a connection to begin its own.
func (r *renewer) active() bool {
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.open > 0
}

// exec runs the fenced statement query(try) of op (an Extend, a
// RecordStep) on the renewer's connection, taking one when it has none,
// and returns the value it set with LAST_INSERT_ID(expr); retried as the
// store retries its statements.
func (r *renewer) exec(ctx context.Context, op string, query func(try int) string) (int64, error) {
	select {
	case r.sem <- struct{}{}:
	case <-ctx.Done():
		return 0, idemkit.CheckContext(ctx, op)
	}
	defer func() { <-r.sem }()
	var n int64
	err := retry(ctx, op, false, func(ctx context.Context, try int) (bool, error) {
		if r.conn == nil {
			c, err := r.db.Conn(ctx)
			if err != nil {
				return true, err
			}
			r.conn = c
		}
		var err error
		n, err = lastID(r.conn.ExecContext(ctx, query(try)))
		var me *mysql.MySQLError
		if err != nil && !errors.As(err, &me) {
			// A lost connection, or one the driver closed on an ended
			// ctx: take another next time.
			_ = r.conn.Close()
			r.conn = nil
		}
		return true, err
	})
	return n, err
}
