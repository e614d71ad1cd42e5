package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
)

// RedisKey returns the Redis key of the record key k in s.
func RedisKey(s *Store, k string) string { return s.redisKey(k) }

// LoadScript loads the store's scripts on every master c reaches, so that
// the first call of each operation is one EVALSHA (tests that count round
// trips start from there).
func LoadScript(ctx context.Context, c redis.UniversalClient) error {
	load := func(ctx context.Context, n redis.Cmdable) error {
		for _, sc := range scripts {
			if err := n.ScriptLoad(ctx, sc.src.(string)).Err(); err != nil {
				return err
			}
		}
		return nil
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return load(ctx, n) })
	}
	return load(ctx, c)
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

// ScriptSHA returns the SHA1 of the script of op (claim, extend, complete,
// release, delete, put), which its EVALSHA carries.
func ScriptSHA(op string) string {
	for _, sc := range scripts {
		if sc.name == op {
			return sc.sha.(string)
		}
	}
	panic("no script for " + op)
}

// Stored reads the record of k in s as Redis holds it, through c (a
// client of the same deployment): its form (c, o, n: a claim or an
// outcome; r, d: a tombstone) and fence; found false when there is none.
func Stored(ctx context.Context, c redis.UniversalClient, s *Store, k string) (form byte, fence idemkit.Fence, found bool, err error) {
	rk := s.redisKey(k)
	var get *redis.StringCmd
	var keep *redis.DurationCmd
	_, err = c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, rk)
		keep = p.PExpireTime(ctx, rk)
		return nil
	})
	if err == redis.Nil {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, err
	}
	st, err := parseStored("test", k, get.Val(), keep.Val().Milliseconds())
	return st.form, st.rec.Fence, err == nil, err
}

// Rewrite changes the record of k in s straight in Redis, through c (a
// client of the same deployment), as change changes its form (c, o, n, r,
// d) and fields, keeping its key's expiry and its response. It returns the
// value before the change, as Redis held it.
func Rewrite(ctx context.Context, c redis.UniversalClient, s *Store, k string, change func(form *byte, rec *store.Record)) (string, error) {
	rk := s.redisKey(k)
	var get *redis.StringCmd
	var keep *redis.DurationCmd
	if _, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, rk)
		keep = p.PExpireTime(ctx, rk)
		return nil
	}); err != nil {
		return "", err
	}
	old, ke := get.Val(), keep.Val().Milliseconds()
	st, err := parseStored("test", k, old, ke)
	if err != nil {
		return "", err
	}
	body := st.body
	form, rec := st.form, st.rec
	change(&form, &rec)
	f := int64(rec.Fence)
	var v string
	switch form {
	case 'c':
		v = fmt.Sprintf("c%d:%d:%d:tampered:%d:%s%s", rec.ExpiresAt.UnixMilli()-f, ke-f, rec.CreatedAt.UnixMilli()-f, len(rec.Fingerprint), rec.Fingerprint, body)
	default:
		v = fmt.Sprintf("%c%d:%d:%d:%d:%s%s", form, f, rec.CreatedAt.UnixMilli(), rec.ExpiresAt.UnixMilli(), len(rec.Fingerprint), rec.Fingerprint, body)
	}
	return old, c.SetArgs(ctx, rk, v, redis.SetArgs{KeepTTL: true}).Err()
}
