package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/redislock"
	"github.com/idemkit/idemkit/store"
	"github.com/redis/go-redis/v9"
)

// DefaultMaxResponseBytes is the default limit on a stored response: 512
// MiB, the largest string Redis accepts by default (proto-max-bulk-len).
const DefaultMaxResponseBytes = 512 << 20

// Option configures [New].
type Option func(*config)

type config struct {
	prefix      string
	maxResponse int
	locker      *redislock.Locker
}

// WithKeyPrefix sets the prefix of every Redis key the store uses; it must
// be the prefix of the locker the store combines with. It follows
// redislock's rules (1 to 64 bytes of printable ASCII without spaces or
// braces). Default: [redislock.DefaultKeyPrefix] ("idemkit").
func WithKeyPrefix(prefix string) Option { return func(c *config) { c.prefix = prefix } }

// WithMaxResponseBytes refuses responses larger than n bytes with an error
// matching [store.ErrTooLarge] (the guard then records the execution as not
// replayable). n must be between 1 and [DefaultMaxResponseBytes]; lower it
// when the server's proto-max-bulk-len is lower. A write holds the server
// for as long as copying the response takes, so a modest limit also bounds
// that pause. Default: [DefaultMaxResponseBytes].
func WithMaxResponseBytes(n int) Option { return func(c *config) { c.maxResponse = n } }

// WithLocker sets the locker whose locks the store takes and releases in
// its combined operations ([store.Combiner]). It must be built on the
// store's client with the store's key prefix. Default: a locker on the
// store's client and prefix with redislock's default options; a guard's
// locker combines with the store when it takes the same locks the same way
// ([redislock.Locker.SameLocks]).
func WithLocker(l *redislock.Locker) Option { return func(c *config) { c.locker = l } }

// Store is a [store.Store] and [store.Combiner] on Redis: single node,
// Sentinel (a failover client) or Redis Cluster. Records expire by the
// Redis server's clock. It is safe for concurrent use.
//
// The zero value is not usable; call [New].
type Store struct {
	client      redis.UniversalClient
	layout      redislock.Layout
	maxResponse int
	locker      *redislock.Locker
}

var (
	_ store.Store    = (*Store)(nil)
	_ store.Combiner = (*Store)(nil)
)

// New returns a store on client. It validates its options and returns an
// InvalidArgument error for a bad one; it does no I/O.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "new", "a Redis client is required", nil)
	}
	cfg := config{prefix: redislock.DefaultKeyPrefix, maxResponse: DefaultMaxResponseBytes}
	for _, o := range opts {
		o(&cfg)
	}
	layout, err := redislock.NewLayout(cfg.prefix)
	if err != nil {
		return nil, err
	}
	if cfg.maxResponse < 1 || cfg.maxResponse > DefaultMaxResponseBytes {
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "new", fmt.Sprintf("max response bytes must be between 1 and %d", DefaultMaxResponseBytes), nil)
	}
	l := cfg.locker
	switch {
	case l == nil:
		if l, err = redislock.New(client, redislock.WithKeyPrefix(cfg.prefix)); err != nil {
			return nil, err
		}
	case l.Client() != client || l.Layout() != layout:
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "new", "the locker must use the store's client and key prefix", nil)
	}
	return &Store{client: client, layout: layout, maxResponse: cfg.maxResponse, locker: l}, nil
}

// Get implements [store.Store]: one script, which judges expiry by the
// server's clock.
func (s *Store) Get(ctx context.Context, key string) (store.Record, bool, error) {
	const op = "get"
	if err := store.ValidateKey(key); err != nil {
		return store.Record{}, false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return store.Record{}, false, err
	}
	v, err := getScript.Run(ctx, s.client, []string{s.layout.Record(key)}).Result()
	if err != nil {
		return store.Record{}, false, redislock.MapError(op, err)
	}
	return decodeRecord(op, key, v)
}

// Put implements [store.Store]: one script that compares fences and writes
// (or refuses) atomically.
func (s *Store) Put(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	const op = "put"
	if err := s.validatePut(op, rec, ttl); err != nil {
		return false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return false, err
	}
	v, err := putScript.Run(ctx, s.client, []string{s.layout.Record(rec.Key)}, putArgs(rec, ttl)...).Int64()
	if err != nil {
		return false, redislock.MapError(op, err)
	}
	return v == 1, nil
}

// Delete implements [store.Store]: one script.
func (s *Store) Delete(ctx context.Context, key string) (bool, error) {
	const op = "delete"
	if err := store.ValidateKey(key); err != nil {
		return false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return false, err
	}
	v, err := deleteScript.Run(ctx, s.client, []string{s.layout.Record(key)}).Int64()
	if err != nil {
		return false, redislock.MapError(op, err)
	}
	return v == 1, nil
}

// Combines implements [store.Combiner]: true when l is a
// [*redislock.Locker] that takes the same locks the same way as the store's
// locker (the same client value, the same key prefix, the same durability
// wait; see [redislock.Locker.SameLocks]). A locker wrapped by a decorator
// (lock.WithTelemetry) does not combine, so that its events stay complete.
func (s *Store) Combines(l lock.Locker) bool {
	rl, ok := l.(*redislock.Locker)
	return ok && rl.SameLocks(s.locker)
}

// AcquireGet implements [store.Combiner]: one script that takes the lock
// (redislock's acquire, the same function) and reads the record under it.
// When the two keys do not share a hash tag (so could be on different
// cluster nodes), it falls back to an acquire and a read.
func (s *Store) AcquireGet(ctx context.Context, lockKey string, ttl time.Duration, recordKey string) (lock.Lease, bool, store.Record, bool, error) {
	const op = "acquire-get"
	if err := store.ValidateKey(recordKey); err != nil {
		return lock.Lease{}, false, store.Record{}, false, err
	}
	nk, err := lock.NormalizeKey(lockKey)
	if err != nil {
		return lock.Lease{}, false, store.Record{}, false, err
	}
	if redislock.Tag(nk) != redislock.Tag(recordKey) {
		lease, ok, err := s.locker.Acquire(ctx, nk, ttl)
		if err != nil || !ok {
			return lease, ok, store.Record{}, false, err
		}
		rec, found, err := s.Get(context.WithoutCancel(ctx), recordKey)
		if err != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
			_, _ = s.locker.ReleaseKey(rctx, lease.Key, lease.ID)
			cancel()
			return lock.Lease{}, false, store.Record{}, false, err
		}
		return lease, true, rec, found, nil
	}
	lease, ok, extra, err := s.locker.AcquireWith(ctx, acquireGetScript, nk, ttl, []string{s.layout.Record(recordKey)})
	if err != nil || !ok {
		return lease, ok, store.Record{}, false, err
	}
	if len(extra) != 1 {
		// The lease is ours but the read is unusable: give the lease back.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		_, _ = s.locker.ReleaseKey(rctx, lease.Key, lease.ID)
		cancel()
		return lock.Lease{}, false, store.Record{}, false, idemkit.NewError(idemkit.CodeInternal, op, "unexpected reply from Redis: acquire-get", nil)
	}
	rec, found, err := decodeRecord(op, recordKey, extra[0])
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		_, _ = s.locker.ReleaseKey(rctx, lease.Key, lease.ID)
		cancel()
		return lock.Lease{}, false, store.Record{}, false, err
	}
	return lease, true, rec, found, nil
}

// PutRelease implements [store.Combiner]: one script that writes the record
// (the fenced put) and releases the lease (redislock's release, by key and
// id). When the two keys do not share a hash tag, it falls back to a put
// and a release.
func (s *Store) PutRelease(ctx context.Context, rec store.Record, ttl time.Duration, lease lock.Lease) (bool, lock.Outcome, error) {
	const op = "put-release"
	if err := s.validatePut(op, rec, ttl); err != nil {
		return false, lock.Outcome{}, err
	}
	if err := lock.ValidateID(lease.ID); err != nil {
		return false, lock.Outcome{}, err
	}
	nk, err := lock.NormalizeKey(lease.Key)
	if err != nil {
		return false, lock.Outcome{}, err
	}
	if redislock.Tag(nk) != redislock.Tag(rec.Key) {
		stored, err := s.Put(ctx, rec, ttl)
		if err != nil {
			return false, lock.Outcome{}, err
		}
		out, err := s.locker.ReleaseKey(context.WithoutCancel(ctx), nk, lease.ID)
		return stored, out, err
	}
	out, extra, err := s.locker.ReleaseWith(ctx, putReleaseScript, nk, lease.ID, []string{s.layout.Record(rec.Key)}, putArgs(rec, ttl)...)
	if err != nil {
		return false, lock.Outcome{}, err
	}
	if len(extra) != 1 {
		return false, lock.Outcome{}, idemkit.NewError(idemkit.CodeInternal, op, "unexpected reply from Redis: put-release", nil)
	}
	stored, _ := extra[0].(int64)
	return stored == 1, out, nil
}

// releaseTimeout bounds the release of a lease the combined read could not
// complete.
const releaseTimeout = 5 * time.Second

func (s *Store) validatePut(op string, rec store.Record, ttl time.Duration) error {
	if err := store.ValidatePut(rec, ttl); err != nil {
		return err
	}
	if len(rec.Response) > s.maxResponse {
		return store.TooLarge(op, len(rec.Response), s.maxResponse)
	}
	return nil
}

// putArgs are the ARGV of record_put: fence, TTL in ms, state, fingerprint,
// response.
func putArgs(rec store.Record, ttl time.Duration) []any {
	return []any{uint64(rec.Fence), ttl.Milliseconds(), strconv.Itoa(int(rec.State)), rec.Fingerprint, rec.Response}
}

// metaLen is the size of a record's meta field: the state (one digit), the
// fence, the created-at and the expires-at times in Unix milliseconds (15
// zero-padded digits each).
const metaLen = 1 + 3*15

// decodeRecord decodes record_get's reply: an empty array when there is no
// live record, else the meta field, the fingerprint and the response.
func decodeRecord(op, key string, v any) (store.Record, bool, error) {
	r, ok := v.([]any)
	if !ok {
		return store.Record{}, false, idemkit.NewError(idemkit.CodeInternal, op, "unexpected reply from Redis: record", nil)
	}
	if len(r) == 0 {
		return store.Record{}, false, nil
	}
	if len(r) != 3 {
		return store.Record{}, false, idemkit.NewError(idemkit.CodeInternal, op, "unexpected reply from Redis: record", nil)
	}
	meta, ok1 := r[0].(string)
	fp, ok2 := r[1].(string)
	body, ok3 := r[2].(string)
	if !ok1 || !ok2 || !ok3 || len(meta) != metaLen {
		return store.Record{}, false, idemkit.NewError(idemkit.CodeInternal, op, "a malformed record", nil)
	}
	fence, err1 := strconv.ParseUint(meta[1:16], 10, 64)
	created, err2 := strconv.ParseInt(meta[16:31], 10, 64)
	expires, err3 := strconv.ParseInt(meta[31:46], 10, 64)
	state := store.State(meta[0] - '0')
	if err1 != nil || err2 != nil || err3 != nil || !state.Valid() {
		return store.Record{}, false, idemkit.NewError(idemkit.CodeInternal, op, "a malformed record", nil)
	}
	rec := store.Record{
		Key:         key,
		Fingerprint: fp,
		State:       state,
		Fence:       lock.Fence(fence),
		CreatedAt:   time.UnixMilli(created),
		ExpiresAt:   time.UnixMilli(expires),
	}
	if body != "" {
		rec.Response = []byte(body)
	}
	return rec, true, nil
}
