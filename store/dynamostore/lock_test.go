package dynamostore_test

import (
	"context"
	"testing"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock/locktest"
	"github.com/idemkit/idemkit/store/dynamostore"
)

// TestLockConformance runs the lock suite through the lock library over
// the store on dynalite, each case on a table of its own; the restart case
// on a dynalite of its own, which keeps its tables on disk across the
// restart. The skew margin is 0: every client here reads one clock, and
// the suite checks expiry a Margin past the lease end.
func TestLockConformance(t *testing.T) {
	locktest.Run(t, func(t *testing.T, cfg locktest.Config) *locktest.Env {
		var srv *testenv.DynamoServer
		if cfg.Restart {
			srv = testenv.NewDynamo(t)
		} else {
			srv = testenv.Dynamo(t)
		}
		client, c := newClient(t, srv.URL)
		opt, table := newTable(t, client)
		s := newStore(t, client, opt, dynamostore.WithMaxClockSkew(0))
		e := &locktest.Env{
			Store:  s,
			Margin: margin,
			RaiseFence: func(ctx context.Context, key string, f idemkit.Fence) error {
				return dynamostore.RaiseFence(ctx, s, key, f)
			},
			Fence: func(ctx context.Context, key string) (idemkit.Fence, error) {
				f, _, err := dynamostore.Stored(ctx, s, key)
				return f, err
			},
			Stored: func(ctx context.Context, key string) (bool, error) {
				_, stored, err := dynamostore.Stored(ctx, s, key)
				return stored, err
			},
			Keys:  immortal(client, table),
			Break: c.Break,
		}
		if cfg.Restart {
			e.Restart = func(t *testing.T) { srv.Restart(t) }
		}
		return e
	})
}
