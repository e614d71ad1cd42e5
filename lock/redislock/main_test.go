package redislock_test

import (
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock/locktest"
	"github.com/idemkit/idemkit/lock/redislock"
	"github.com/idemkit/idemkit/lock/redislock/redistest"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// factory builds a fresh locker with a unique prefix on a new client of b.
// The fence-survives-restart case gets a dedicated server it may restart.
func factory(b redistest.Backend) locktest.Factory {
	return func(t *testing.T, cfg locktest.Config) *locktest.Env {
		newClient := b.NewClient
		var restart func(t *testing.T)
		if b.Name == "single" && strings.HasPrefix(lastElem(t.Name()), "SG10_") {
			srv := testenv.NewRedis(t)
			newClient = func(t testing.TB) redis.UniversalClient { return redistest.ClientFor(t, srv.Addr) }
			restart = func(t *testing.T) { srv.Restart(t) }
		}
		c := newClient(t)
		l, err := redislock.New(c, redislock.WithKeyPrefix(testenv.Name(t)),
			redislock.WithCleanupInIsLocked(cfg.CleanupInIsLocked), redislock.WithLogger(cfg.Logger))
		if err != nil {
			t.Fatal(err)
		}
		e := &locktest.Env{Locker: l, Break: func() { _ = c.Close() }, Restart: restart,
			ExpiresNatively: true, Margin: 50 * time.Millisecond}
		// The probes have a client of their own: Break closes the locker's.
		redistest.Probes(t, e, l.Layout(), newClient(t))
		return e
	}
}

func lastElem(name string) string { return name[strings.LastIndexByte(name, '/')+1:] }
