package redisstore

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisKey returns the Redis key of the record key k in s.
func RedisKey(s *Store, k string) string { return s.redisKey(k) }

// LoadScript loads the store's script on every master c reaches, so that
// the first call of each operation is one EVALSHA (tests that count round
// trips start from there).
func LoadScript(ctx context.Context, c redis.UniversalClient) error {
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			return script.Load(ctx, n).Err()
		})
	}
	return script.Load(ctx, c).Err()
}

// WithListenerTimings sets how long the store's listeners keep an idle
// connection (default a minute) and how long they wait for a message
// before a health-check ping, and then for its answer (default 3 s).
func WithListenerTimings(idle, health time.Duration) Option {
	return func(c *config) { c.listenerIdle, c.healthInterval = idle, health }
}

// Listeners returns how many listeners s runs.
func Listeners(s *Store) int {
	s.watch.mu.Lock()
	defer s.watch.mu.Unlock()
	return len(s.watch.listeners)
}

// Refused reports whether ch is the channel of a watch that could not be
// set up, which never fires.
func Refused(ch <-chan struct{}) bool { return ch == neverFires }

// Inflight returns how many round trips of s's calls are in flight and
// how many calls wait to share the next one.
func Inflight(s *Store) (sending, queued int) {
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	return s.batch.sending, len(s.batch.queue)
}

// MaxInflight is how many round trips a store's calls have in flight
// before further calls queue.
const MaxInflight = maxInflight

// Waiting returns how many watches and claims of s wait in key's line.
func Waiting(s *Store, key string) int {
	n := 0
	s.entry(key, func(_ *listener, e *entry) {
		for _, sl := range e.queue {
			if sl.ghost.IsZero() && !sl.fired {
				n++
			}
		}
	})
	return n
}
