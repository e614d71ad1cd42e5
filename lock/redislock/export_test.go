package redislock

import (
	"context"
	"time"

	"github.com/idemkit/idemkit/lock"
)

// Test-only access to the locker's internals.

// LockName returns the Redis key of the lock record of key.
func LockName(l *Locker, key string) string {
	n, err := lock.NormalizeKey(key)
	if err != nil {
		panic(err)
	}
	return l.names.lock(n)
}

// IndexName returns the Redis key of the index hint of the lock id id.
func IndexName(l *Locker, id string) string { return l.names.index(id) }

// Prefix returns the locker's key prefix.
func Prefix(l *Locker) string { return l.names.prefix }

// TombstoneID is what a tombstone holds in place of a lock id.
const TombstoneID = tombstoneID

// AcquireAs is Acquire with a lock id chosen by the test, as go-redis
// retrying a script whose reply was lost runs it again with the same id.
func AcquireAs(ctx context.Context, l *Locker, key, id string, ttl time.Duration) (lock.Lease, bool, error) {
	n, err := lock.NormalizeKey(key)
	if err != nil {
		return lock.Lease{}, false, err
	}
	return l.acquire(ctx, n, l.names.lock(n), id, ttl, false)
}

// MapError is the locker's mapping of go-redis errors.
func MapError(op string, err error) error { return mapError(op, err) }

// Inflight returns how many round trips of l's batched commands are in
// flight, and how many calls wait for the next one.
func Inflight(l *Locker) (sending, queued int) {
	l.batch.mu.Lock()
	defer l.batch.mu.Unlock()
	return l.batch.sending, len(l.batch.queue)
}
