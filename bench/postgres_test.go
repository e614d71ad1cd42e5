package bench

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/store/pgstore"
)

// postgresScenarios runs acquire+release cycles of the lock library over
// pgstore side by side with a pg_try_advisory_lock / pg_advisory_unlock
// cycle, at 1 and 16 connections, on distinct keys.
func postgresScenarios(t *testing.T, d time.Duration) []Result {
	srv := testenv.NewPostgres(t)
	ctx := t.Context()
	newPool := func(conns int32) *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns, cfg.MinConns = conns, conns
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	var results []Result
	for _, conns := range []int{1, 16} {
		pool := newPool(int32(conns))
		name := testenv.Name(t)
		opt := pgstore.WithTable(name + "_locks")
		if err := pgstore.SetupSchema(ctx, pool, opt); err != nil {
			t.Fatal(err)
		}
		s, err := pgstore.New(pool, opt)
		if err != nil {
			t.Fatal(err)
		}
		locker, err := lock.New(s)
		if err != nil {
			t.Fatal(err)
		}
		r := Run(ctx, conns, d, func(ctx context.Context, w, i int) error {
			lease, ok, err := locker.Acquire(ctx, fmt.Sprintf("k:%d:%d", w, i), lockTTL)
			if err != nil || !ok {
				return errors.Join(err, errNotAcquired(ok))
			}
			_, err = locker.ReleaseKey(ctx, lease.Key, lease.ID)
			return err
		})
		r.Group, r.Subject, r.Mode = "PostgreSQL locks: acquire + release", "idemkit lock over pgstore (row lock, fence)", "distinct keys"
		results = append(results, r)

		r = Run(ctx, conns, d, func(ctx context.Context, w, i int) error {
			conn, err := pool.Acquire(ctx) // advisory locks belong to a session
			if err != nil {
				return err
			}
			defer conn.Release()
			k := int64(w)<<40 | int64(i)
			var ok bool
			if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", k).Scan(&ok); err != nil || !ok {
				return errors.Join(err, errNotAcquired(ok))
			}
			return conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", k).Scan(&ok)
		})
		r.Group, r.Subject, r.Mode = "PostgreSQL locks: acquire + release", "pg_try_advisory_lock / unlock (no fence, no TTL)", "distinct keys"
		results = append(results, r)
	}
	return results
}
