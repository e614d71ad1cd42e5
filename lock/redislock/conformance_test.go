package redislock_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit/lock/provider"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock/locktest"
	"github.com/idemkit/idemkit/lock/redislock"
	"github.com/redis/go-redis/v9"
)

// TestConformance runs the lock conformance suite on a single node and on
// a 3-master cluster, with and without the id index. On the cluster, the
// fence-survives-restart case does not run: the test environment restarts
// single servers only, and the single-node run covers it on a dedicated
// server with AOF.
func TestConformance(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) { locktest.Run(t, factory(b)) })
		t.Run(b.name+"/id-index", func(t *testing.T) { locktest.Run(t, factory(b, redislock.WithIDIndex(true))) })
	}
}

// factory builds a fresh locker with a unique prefix and opts on a new
// client of b. The test that restarts the server gets a dedicated one
// (single node only).
func factory(b backend, opts ...redislock.Option) locktest.Factory {
	return func(t *testing.T, cfg locktest.Config) *locktest.Env {
		newClient := b.newClient
		var restart func(t *testing.T)
		if b.name == "single" && cfg.Restart {
			srv := testenv.NewRedis(t)
			newClient = func(t testing.TB) redis.UniversalClient { return clientFor(t, srv.Addr) }
			restart = func(t *testing.T) { srv.Restart(t) }
		}
		c := newClient(t)
		l, err := redislock.New(c, append([]redislock.Option{redislock.WithKeyPrefix(testenv.Name(t)),
			redislock.WithCleanupInIsLocked(cfg.CleanupInIsLocked), redislock.WithLogger(cfg.Logger)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		e := &locktest.Env{Locker: l, Break: func() { _ = c.Close() }, Restart: restart,
			ExpiresNatively: true, Margin: 50 * time.Millisecond}
		// The probes have a client of their own: Break closes the locker's.
		probes(e, l, newClient(t))
		return e
	}
}

// probes fills e's probes with direct commands on l's keys, through c.
func probes(e *locktest.Env, l *redislock.Locker, c redis.UniversalClient) {
	e.Keys = func(ctx context.Context) ([]string, error) {
		return persistentKeys(ctx, c, redislock.Prefix(l))
	}
	e.RaiseFence = func(ctx context.Context, key string, f idemkit.Fence) error {
		keep := provider.KeepUntil(f, time.Time{})
		return c.Do(ctx, "set", redislock.LockName(l, key), rawTombstone(f), "pxat", keep.UnixMilli()).Err()
	}
	e.Fence = func(ctx context.Context, key string) (idemkit.Fence, error) {
		r, _, err := readRecord(ctx, c, redislock.LockName(l, key))
		return r.fence, err
	}
	e.Stored = func(ctx context.Context, key string) (bool, error) {
		r, found, err := readRecord(ctx, c, redislock.LockName(l, key))
		return found && r.id != redislock.TombstoneID, err
	}
}
