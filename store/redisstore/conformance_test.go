package redisstore_test

import (
	"context"
	"testing"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store/redisstore"
	"github.com/idemkit/idemkit/store/storetest"
	"github.com/redis/go-redis/v9"
)

// conformanceLimit is the response limit of the conformance runs, so that
// the limit is checked too.
const conformanceLimit = 1 << 20

// TestConformance runs the leased-record conformance suite on a single node
// and on a 3-master cluster, counting round trips with a client hook and
// listing keys without expiry with SCAN and PTTL. On the single node each
// case has a server of its own, so that the suite can stall it (SIGSTOP);
// the cluster is shared, so the Env's client reaches its nodes through
// links that stall every connection instead.
func TestConformance(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) *storetest.Env {
			srv := testenv.NewRedis(t)
			e := conformanceEnv(t, nodeClient(t, srv.Addr), nodeClient(t, srv.Addr))
			e.Stall = func() func() { return srv.Stall(t) }
			return e
		})
	})
	t.Run("cluster", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) *storetest.Env {
			c, stall := stallableCluster(t)
			e := conformanceEnv(t, c, clusterClient(t))
			e.Stall = stall
			return e
		})
	})
}

// conformanceEnv is an Env on c, whose round trips it counts; admin is a
// client of the same deployment for listing keys (the suite closes c).
func conformanceEnv(t *testing.T, c, admin redis.UniversalClient) *storetest.Env {
	s := newStore(t, c, redisstore.WithMaxResponseBytes(conformanceLimit))
	var n counter
	c.AddHook(&n)
	return &storetest.Env{
		Store:            s,
		Break:            func() { _ = c.Close() },
		MaxResponseBytes: conformanceLimit,
		RoundTrips:       n.count,
		Keys:             func(ctx context.Context) ([]string, error) { return immortal(ctx, admin, prefix(t)) },
	}
}

// TestRecordsConformance runs the plain record store's conformance suite
// (the fenced Put, for a composition with a lock) on a single node and on a
// cluster.
func TestRecordsConformance(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			storetest.RunRecords(t, func(t *testing.T) *storetest.RecordsEnv {
				c := b.newClient(t)
				s := newStore(t, c, redisstore.WithMaxResponseBytes(conformanceLimit))
				return &storetest.RecordsEnv{Records: s, Break: func() { _ = c.Close() }, MaxResponseBytes: conformanceLimit}
			})
		})
	}
}
