package redislock

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/redis/go-redis/v9"
)

// Option configures [New].
type Option func(*config)

type config struct {
	prefix      string
	cleanup     bool
	logger      *slog.Logger
	hasher      lock.Hasher
	wait        waitMode
	waitLocal   int
	waitN       int
	waitTimeout time.Duration
}

type waitMode uint8

const (
	waitNone waitMode = iota
	waitReplicas
	waitAOF
)

// WithKeyPrefix sets the prefix of every Redis key the locker uses. It must
// have 1 to [MaxKeyPrefixBytes] bytes of printable ASCII without spaces or
// braces. Default: [DefaultKeyPrefix] ("idemkit").
func WithKeyPrefix(prefix string) Option { return func(c *config) { c.prefix = prefix } }

// WithCleanupInIsLocked makes IsLocked delete a lock record that expired
// more than [lock.CleanupGrace] ago (never the fence counter). Redis
// deletes lock records itself at their expiry, so this matters only for
// records that somehow lost their TTL. Default: off.
func WithCleanupInIsLocked(on bool) Option { return func(c *config) { c.cleanup = on } }

// WithLogger sets the logger for fence-limit warnings, which name the key
// only by its hash. Default: slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithHasher sets how keys are hashed in log lines. Default:
// lock.DefaultHasher() (HMAC-SHA-256 under a per-process secret).
func WithHasher(h lock.Hasher) Option { return func(c *config) { c.hasher = h } }

// WithWaitForReplicas makes every successful acquire wait, after the fence
// was issued and before the lease is handed out, until n replicas of the
// lock's master acknowledged the write (Redis WAIT), for at most timeout.
// When fewer acknowledge in time, the lease is released and the acquire
// fails with ServiceUnavailable: a fence that a failover could lose is
// never handed out. Each successful acquire costs two more round trips
// (the wait, and the index hint written separately) plus the replication
// delay. n must be positive and timeout at least one millisecond and below
// the client's ReadTimeout. Default: off (the fence is as durable as the
// server's persistence makes it; see the package documentation).
func WithWaitForReplicas(n int, timeout time.Duration) Option {
	return func(c *config) { c.wait, c.waitLocal, c.waitN, c.waitTimeout = waitReplicas, 0, n, timeout }
}

// WithWaitForAOF is [WithWaitForReplicas] with Redis WAITAOF (Redis 7.2 or
// later): the acquire waits until the write is fsynced to the master's
// append-only file (local = true) and to those of n replicas. It makes a
// fence durable on a server with appendfsync everysec. Default: off.
func WithWaitForAOF(local bool, n int, timeout time.Duration) Option {
	return func(c *config) {
		c.wait, c.waitLocal, c.waitN, c.waitTimeout = waitAOF, 0, n, timeout
		if local {
			c.waitLocal = 1
		}
	}
}

// Locker is a [lock.Locker] and [lock.KeyedLocker] on Redis: single node,
// Sentinel (a failover client) or Redis Cluster. Its time authority is the
// Redis server's clock. It is safe for concurrent use.
//
// The zero value is not usable; call [New].
type Locker struct {
	client  redis.UniversalClient
	layout  Layout
	cleanup bool
	logger  *slog.Logger
	hasher  lock.Hasher
	wait    waitMode
	local   int
	waitN   int
	waitFor time.Duration
	cluster *redis.ClusterClient // client, when it is a cluster client

	// crossSlot is set once a plain client met a cluster-mode endpoint
	// (CROSSSLOT): from then on every script stays on one slot.
	crossSlot atomic.Bool
}

var (
	_ lock.Locker      = (*Locker)(nil)
	_ lock.KeyedLocker = (*Locker)(nil)
)

// New returns a locker on client. It validates its options and returns an
// InvalidArgument error for a bad one; it does no I/O.
func New(client redis.UniversalClient, opts ...Option) (*Locker, error) {
	if client == nil {
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "new", "a Redis client is required", nil)
	}
	cfg := config{prefix: DefaultKeyPrefix}
	for _, o := range opts {
		o(&cfg)
	}
	layout, err := NewLayout(cfg.prefix)
	if err != nil {
		return nil, err
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	if cfg.hasher == nil {
		cfg.hasher = lock.DefaultHasher()
	}
	l := &Locker{
		client: client, layout: layout, cleanup: cfg.cleanup, logger: cfg.logger, hasher: cfg.hasher,
		wait: cfg.wait, local: cfg.waitLocal, waitN: cfg.waitN, waitFor: cfg.waitTimeout,
	}
	l.cluster, _ = client.(*redis.ClusterClient)
	if l.wait != waitNone {
		_, single := client.(*redis.Client)
		switch {
		case l.waitN < 0 || l.waitN == 0 && l.local == 0:
			return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "new", "wait-for-replicas needs a positive number of replicas", nil)
		case l.waitFor < time.Millisecond:
			return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "new", "wait-for-replicas needs a timeout of at least 1ms", nil)
		case !single && l.cluster == nil:
			return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "new", fmt.Sprintf("wait-for-replicas needs a *redis.Client or *redis.ClusterClient (got %T)", client), nil)
		}
	}
	return l, nil
}

// Client returns the client the locker was built on.
func (l *Locker) Client() redis.UniversalClient { return l.client }

// Layout returns the locker's key layout.
func (l *Locker) Layout() Layout { return l.layout }

// SameLocks reports whether o takes the same locks as l in the same way:
// the same client, the same key layout and the same durability wait. A
// store co-located with o may then take l's locks itself.
func (l *Locker) SameLocks(o *Locker) bool {
	return l != nil && o != nil && l.client == o.client && l.layout == o.layout &&
		l.wait == o.wait && l.local == o.local && l.waitN == o.waitN && l.waitFor == o.waitFor
}

// Capabilities reports fencing with the Redis server's clock as the time
// authority.
func (l *Locker) Capabilities() lock.Capabilities {
	return lock.Capabilities{Backend: "redis", Fencing: true, TimeAuthority: lock.TimeServer}
}

// Acquire implements [lock.Locker]: one script, which on a single node (or
// Sentinel) also writes the id's index hint. On a cluster the hint lives on
// another slot and a successful acquire writes it with a second command (a
// refused one writes nothing).
func (l *Locker) Acquire(ctx context.Context, key string, ttl time.Duration) (lock.Lease, bool, error) {
	lease, ok, _, err := l.AcquireWith(ctx, acquireScript, key, ttl, nil)
	return lease, ok, err
}

// Release implements [lock.Locker]: two round trips (the id's index hint,
// then the release script on the lock's slot, which checks the id and the
// lease's liveness atomically).
func (l *Locker) Release(ctx context.Context, id string) (lock.Outcome, error) {
	const op = "release"
	if err := lock.ValidateID(id); err != nil {
		return lock.Outcome{}, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return lock.Outcome{}, err
	}
	name, found, err := l.resolve(ctx, op, id)
	if err != nil || !found {
		return lock.Outcome{Reason: lock.ReasonNotFound}, err
	}
	out, _, err := l.releaseName(ctx, op, releaseScript, name, id, nil, nil)
	return out, err
}

// ReleaseKey implements [lock.KeyedLocker]: one script on the lock's slot.
func (l *Locker) ReleaseKey(ctx context.Context, key, id string) (lock.Outcome, error) {
	out, _, err := l.ReleaseWith(ctx, releaseScript, key, id, nil)
	return out, err
}

// Extend implements [lock.Locker]: two round trips (the id's index hint,
// then the extend script, pipelined with a refresh of the hint's TTL).
func (l *Locker) Extend(ctx context.Context, id string, ttl time.Duration) (lock.Outcome, error) {
	const op = "extend"
	if err := lock.ValidateID(id); err != nil {
		return lock.Outcome{}, err
	}
	if err := lock.ValidateTTL(ttl); err != nil {
		return lock.Outcome{}, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return lock.Outcome{}, err
	}
	name, found, err := l.resolve(ctx, op, id)
	if err != nil || !found {
		return lock.Outcome{Reason: lock.ReasonNotFound}, err
	}
	return l.extendName(ctx, name, id, ttl)
}

// ExtendKey implements [lock.KeyedLocker]: one round trip (the extend
// script on the lock's slot, pipelined with a refresh of the id's index
// hint).
func (l *Locker) ExtendKey(ctx context.Context, key, id string, ttl time.Duration) (lock.Outcome, error) {
	const op = "extend"
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return lock.Outcome{}, err
	}
	if err := lock.ValidateID(id); err != nil {
		return lock.Outcome{}, err
	}
	if err := lock.ValidateTTL(ttl); err != nil {
		return lock.Outcome{}, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return lock.Outcome{}, err
	}
	return l.extendName(ctx, l.layout.Lock(key), id, ttl)
}

// extendName runs the extend script on the lock record name and, in the
// same pipeline, lengthens the id's index hint (PEXPIRE ... GT: never
// shortens it, so a mismatched key cannot cut another lease's hint short).
func (l *Locker) extendName(ctx context.Context, name, id string, ttl time.Duration) (lock.Outcome, error) {
	const op = "extend"
	cmd, err := l.pipelined(ctx, extendScript, []string{name}, []any{id, ttl.Milliseconds()}, func(p redis.Pipeliner) {
		p.Do(ctx, "pexpire", l.layout.Index(id), (ttl + hintSlack).Milliseconds(), "gt")
	})
	if err != nil {
		return lock.Outcome{}, MapError(op, err)
	}
	r, ok := cmd.Val().([]any)
	if !ok || len(r) == 0 {
		return lock.Outcome{}, replyError(op, "extend")
	}
	switch code, _ := r[0].(int64); code {
	case 1:
		if len(r) != 2 {
			return lock.Outcome{}, replyError(op, "extend")
		}
		exp, _ := r[1].(int64)
		return lock.Outcome{OK: true, ExpiresAt: time.UnixMilli(exp)}, nil
	case 0:
		return lock.Outcome{Reason: lock.ReasonNotFound}, nil
	case -2:
		return lock.Outcome{Reason: lock.ReasonExpired}, nil
	}
	return lock.Outcome{}, replyError(op, "extend")
}

// IsLocked implements [lock.Locker]: one script.
func (l *Locker) IsLocked(ctx context.Context, key string) (bool, error) {
	const op = "is-locked"
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return false, err
	}
	cleanup := "0"
	if l.cleanup {
		cleanup = "1"
	}
	v, err := isLockedScript.s.Run(ctx, l.client, []string{l.layout.Lock(key)}, cleanup, lock.CleanupGrace.Milliseconds()).Int64()
	if err != nil {
		return false, MapError(op, err)
	}
	return v == 1, nil
}

// LookupKey implements [lock.Locker]: one script.
func (l *Locker) LookupKey(ctx context.Context, key string) (lock.Info, bool, error) {
	const op = "lookup"
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return lock.Info{}, false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return lock.Info{}, false, err
	}
	return l.lookup(ctx, l.layout.Lock(key), "")
}

// LookupID implements [lock.Locker]: two round trips (the id's index hint,
// then a script that checks the id and liveness on the lock's slot).
func (l *Locker) LookupID(ctx context.Context, id string) (lock.Info, bool, error) {
	const op = "lookup"
	if err := lock.ValidateID(id); err != nil {
		return lock.Info{}, false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return lock.Info{}, false, err
	}
	name, found, err := l.resolve(ctx, op, id)
	if err != nil || !found {
		return lock.Info{}, false, err
	}
	return l.lookup(ctx, name, id)
}

func (l *Locker) lookup(ctx context.Context, name, id string) (lock.Info, bool, error) {
	const op = "lookup"
	v, err := lookupScript.s.Run(ctx, l.client, []string{name}, id).Text()
	if err != nil {
		return lock.Info{}, false, MapError(op, err)
	}
	if v == "" {
		return lock.Info{}, false, nil
	}
	rec, err := decodeRecord(v)
	if err != nil {
		return lock.Info{}, false, err
	}
	return lock.NewInfo(rec.key, rec.id, rec.fence, rec.acquired, rec.expires), true, nil
}

// resolve reads the index hint of id: the name of the lock record it was
// issued for. found is false when there is none (the id was never issued,
// or its lease ran out a while ago).
func (l *Locker) resolve(ctx context.Context, op, id string) (name string, found bool, err error) {
	name, err = l.client.Get(ctx, l.layout.Index(id)).Result()
	if err == redis.Nil {
		return "", false, nil
	}
	if err != nil {
		return "", false, MapError(op, err)
	}
	if !l.layout.isLock(name) {
		return "", false, replyError(op, "an index entry that names no lock record")
	}
	return name, true, nil
}

// hintSlack is how much longer than its lease an index hint lives, so that
// clock differences between cluster nodes never let a live lease's hint
// expire first. A hint that outlives its lease is harmless: every operation
// through it checks the id and liveness on the lock itself.
const hintSlack = time.Second

// record is a decoded lock record.
type record struct {
	id       string
	fence    lock.Fence
	acquired time.Time
	expires  time.Time
	key      string
}

func decodeRecord(v string) (record, error) {
	if len(v) <= lockHeader {
		return record{}, replyError("lookup", "a lock record too short")
	}
	fence, err1 := strconv.ParseUint(v[22:37], 10, 64)
	acq, err2 := strconv.ParseInt(v[37:52], 10, 64)
	exp, err3 := strconv.ParseInt(v[52:67], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return record{}, replyError("lookup", "a malformed lock record")
	}
	return record{id: v[:22], fence: lock.Fence(fence), acquired: time.UnixMilli(acq), expires: time.UnixMilli(exp), key: v[lockHeader:]}, nil
}
