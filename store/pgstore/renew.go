package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit"
)

// renewer renews the leases of claims whose work holds a transaction
// ([Tx]) on a connection outside the pool, which such works may fill: a
// renewal that waited for one of its connections could outwait the lease.
type renewer struct {
	config *pgx.ConnConfig

	sem  chan struct{} // of size one: held while the connection is used or opened
	conn *pgx.Conn     // guarded by sem; nil until opened, or after a failure

	mu   sync.Mutex
	open int         // works that hold a transaction
	idle *time.Timer // closes the connection once none has for renewIdle
}

// renewIdle is how long the renewer's connection outlives the last work
// that held a transaction.
const renewIdle = time.Minute

// hold counts a work's transaction in (+1) or out (-1): the first in
// opens the connection, off the request path; the last out closes it a
// minute later. Safe on a nil renewer.
func (r *renewer) hold(n int) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.open += n
	switch {
	case n > 0 && r.open == n:
		if r.idle != nil {
			r.idle.Stop()
			r.idle = nil
		}
		go r.warm()
	case r.open == 0:
		r.idle = time.AfterFunc(renewIdle, r.closeIdle)
	}
}

// closeIdle closes the connection if no work holds a transaction.
func (r *renewer) closeIdle() {
	r.sem <- struct{}{}
	defer func() { <-r.sem }()
	r.mu.Lock()
	idle := r.open == 0
	r.mu.Unlock()
	if idle && r.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		_ = r.conn.Close(ctx)
		cancel()
		r.conn = nil
	}
}

// warm opens the connection if it is not open and a work holds a
// transaction.
func (r *renewer) warm() {
	r.sem <- struct{}{}
	defer func() { <-r.sem }()
	r.mu.Lock()
	needed := r.open > 0
	r.mu.Unlock()
	if r.conn != nil || !needed {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), listenTimeout)
	defer cancel()
	if c, err := pgx.ConnectConfig(ctx, r.config); err == nil {
		r.conn = c
	} // else the first renewal tries again, and reports the failure
}

// extend runs the extend statement on the renewer's connection, opening it
// when needed; retried as the store retries its statements (see retry).
func (r *renewer) extend(ctx context.Context, until *time.Time, sql string, args ...any) (bool, error) {
	const op = "extend"
	select {
	case r.sem <- struct{}{}:
	case <-ctx.Done():
		return false, idemkit.CheckContext(ctx, op)
	}
	defer func() { <-r.sem }()
	var done bool
	err := retry(ctx, op, false, func(ctx context.Context, _ int) (bool, error) {
		if r.conn == nil {
			c, err := pgx.ConnectConfig(ctx, r.config)
			if err != nil {
				return true, err
			}
			r.conn = c
		}
		var err error
		done, err = scanOne(r.conn.QueryRow(ctx, sql, args...), until)
		if err != nil && r.conn.IsClosed() {
			r.conn = nil // pgx closed it (a lost connection, an ended ctx): open another
		}
		return true, err
	})
	return done && err == nil, err
}

// starvedPool returns a timeout while every connection of the store's pool
// is in use with a detail that says so and names the setting to raise,
// logged the first time; anything else as it is.
func (s *Store) starvedPool(ctx context.Context, err error) error {
	pool, ok := s.db.(*pgxpool.Pool)
	if err == nil || !ok {
		return err
	}
	var e *idemkit.Error
	if !errors.As(err, &e) || e.Code != idemkit.CodeNetworkTimeout {
		return err
	}
	st := pool.Stat()
	if st.AcquiredConns() < st.MaxConns() {
		return err
	}
	n := 0
	s.held.Range(func(any, any) bool { n++; return true })
	detail := fmt.Sprintf("the connection pool is too small: all %d of its connections (pgxpool.Config.MaxConns) were in use, %d of them by the transactions of guarded work (pgstore.Tx), each held until its work ends; "+
		"raise MaxConns above the number of transactional requests that run at once", st.MaxConns(), n)
	if s.starved.CompareAndSwap(false, true) {
		s.cfg.logger.ErrorContext(ctx, "pgstore: "+detail, slog.String("error", err.Error()))
	}
	if e.Detail != "" {
		detail = e.Detail + ": " + detail
	}
	return idemkit.NewError(e.Code, e.Op, detail, e.Err)
}
