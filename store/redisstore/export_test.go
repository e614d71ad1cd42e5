package redisstore

import (
	"context"

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
