package redislock

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit/lock/provider"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/redis/go-redis/v9"
)

// Option configures [New].
type Option func(*config)

type config struct {
	prefix      string
	cleanup     bool
	index       bool
	logger      *slog.Logger
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

// WithKeyPrefix sets the prefix of every Redis key the locker writes: 1 to
// 64 bytes of printable ASCII without spaces or braces. Lockers with
// different prefixes never see each other's locks. Default: "idemkit".
func WithKeyPrefix(prefix string) Option { return func(c *config) { c.prefix = prefix } }

// WithCleanupInIsLocked makes IsLocked end a lock record that expired more
// than [lock.CleanupGrace] ago, as a release would (a fence the server's
// clock has not passed yet stays behind as a tombstone). Redis removes
// every record itself once it has run out, so this only matters for a
// record whose expiry an operator removed. Default: off (IsLocked is a
// pure read).
func WithCleanupInIsLocked(on bool) Option { return func(c *config) { c.cleanup = on } }

// WithIDIndex makes every successful acquire also write an index hint
// from the lease's lock id to its lock record (on a single node in the
// acquire's own script; on a cluster, where the hint lives on the id's
// slot, with a second command), so that Release, Extend and LookupID by
// lock id work in every process that uses the same Redis and key prefix,
// not only in the Locker that issued the lease. Use it when lock ids
// travel between processes (one acquires, another releases by id). It
// costs a write per acquire, and a delete per release by this Locker.
// Default: off: a Locker resolves the ids of the leases it issued itself
// from memory, and any other id through its hint, if the Locker that
// issued it wrote one. [lock.Do] and [lock.Handle] release and extend by
// key and never need it.
func WithIDIndex(on bool) Option { return func(c *config) { c.index = on } }

// WithLogger sets the logger for fence-limit warnings, which name the key
// only by its hash. Default: slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithWaitForReplicas makes every successful acquire wait, before the
// lease is handed out, until n replicas of the lock's master acknowledged
// the write (Redis WAIT), for at most timeout. When fewer acknowledge in
// time, the lease is released and the acquire fails with
// ServiceUnavailable: a lease that a failover could lose is never handed
// out. Each successful acquire costs a round trip more (the wait) plus the
// replication delay. n must be positive, and timeout at least one
// millisecond and below the caller's ctx deadline and the client's
// ReadTimeout. Default: off (a lease is as durable as the server's
// persistence makes it; see the package documentation).
func WithWaitForReplicas(n int, timeout time.Duration) Option {
	return func(c *config) { c.wait, c.waitLocal, c.waitN, c.waitTimeout = waitReplicas, 0, n, timeout }
}

// WithWaitForAOF is [WithWaitForReplicas] with Redis WAITAOF (Redis 7.2 or
// later): the acquire waits until the write is fsynced to the master's
// append-only file (local = true) and to those of n replicas. It makes a
// lease durable on a server with appendfsync everysec. Default: off.
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
	names   names
	cleanup bool
	index   bool // WithIDIndex
	own     ownLeases
	logger  *slog.Logger
	wait    waitMode
	local   int
	waitN   int
	waitFor time.Duration
	cluster *redis.ClusterClient // client, when it is a cluster client
	scripts *scriptSet           // sharded notifications on a cluster client, plain otherwise
	watch   hub                  // the listeners of Watch

	// crossSlot is set once a plain client met a cluster-mode endpoint
	// (CROSSSLOT): from then on every script touches one key.
	crossSlot atomic.Bool
}

var (
	_ lock.Locker      = (*Locker)(nil)
	_ lock.KeyedLocker = (*Locker)(nil)
	_ lock.Watcher     = (*Locker)(nil)
)

// New returns a locker on client. It does no I/O.
//
// The client must bound its commands by the caller's ctx: a
// [*redis.Client] (also from redis.NewFailoverClient), [*redis.ClusterClient]
// (also from redis.NewFailoverClusterClient) or [*redis.Ring] must be built
// with ContextTimeoutEnabled: true in its options, or New refuses it.
// Without it go-redis ignores ctx deadlines, and a stalled server holds
// every call for ReadTimeout × (MaxRetries + 1) instead of the caller's
// deadline. Other [redis.UniversalClient] implementations are taken as
// they are: they must honour ctx themselves.
//
// A refused client or a bad option is an InvalidArgument error.
func New(client redis.UniversalClient, opts ...Option) (*Locker, error) {
	bad := func(detail string) error { return idemkit.NewError(idemkit.CodeInvalidArgument, "new", detail, nil) }
	if client == nil {
		return nil, bad("a Redis client is required")
	}
	if !contextTimeouts(client) {
		return nil, bad(fmt.Sprintf("the %T does not honour ctx deadlines, so a stalled Redis would hang every call: "+
			"build it with ContextTimeoutEnabled: true in its options (redis.Options, redis.FailoverOptions, "+
			"redis.ClusterOptions, redis.RingOptions or redis.UniversalOptions)", client))
	}
	cfg := config{prefix: defaultKeyPrefix}
	for _, o := range opts {
		o(&cfg)
	}
	n, err := newNames(cfg.prefix)
	if err != nil {
		return nil, err
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	l := &Locker{
		client: client, names: n, cleanup: cfg.cleanup, index: cfg.index, logger: cfg.logger,
		wait: cfg.wait, local: cfg.waitLocal, waitN: cfg.waitN, waitFor: cfg.waitTimeout,
	}
	l.cluster, _ = client.(*redis.ClusterClient)
	l.scripts = scriptsPlain
	if l.cluster != nil {
		l.scripts = scriptsSharded
	}
	l.watch.l = l
	if l.wait != waitNone {
		_, single := client.(*redis.Client)
		switch {
		case l.waitN < 0 || l.waitN == 0 && l.local == 0:
			return nil, bad("the durability wait needs a positive number of replicas (or the local AOF)")
		case l.waitFor < time.Millisecond:
			return nil, bad("the durability wait needs a timeout of at least 1ms")
		case !single && l.cluster == nil:
			return nil, bad(fmt.Sprintf("the durability wait needs a *redis.Client or *redis.ClusterClient (got %T)", client))
		}
	}
	return l, nil
}

// contextTimeouts reports whether client honours ctx deadlines, as far as
// New can tell.
func contextTimeouts(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return true
}

// Capabilities reports fencing with the Redis server's clock as the time
// authority.
func (l *Locker) Capabilities() lock.Capabilities {
	return lock.Capabilities{Backend: "redis", Fencing: true}
}

// Acquire implements [lock.Locker]: one script. With [WithIDIndex] the
// script also writes the id's index hint on a single node (or Sentinel);
// on a cluster the hint lives on another slot, and a successful acquire
// writes it with a second command (a refused one writes nothing).
//
// While watches of this Locker wait for the key (see [Locker.Watch]) and
// the key is being handed to the oldest of them, or released or held
// through this Locker, Acquire first takes its place in their line: it
// waits for its turn, at most 50 ms and never past ctx, so that a
// goroutine that has just released the key does not take it again ahead
// of the waiters. Then it makes its attempt as usual.
func (l *Locker) Acquire(ctx context.Context, key string, ttl time.Duration) (lock.Lease, bool, error) {
	const op = "acquire"
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return lock.Lease{}, false, err
	}
	if err := lock.ValidateTTL(ttl); err != nil {
		return lock.Lease{}, false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return lock.Lease{}, false, err
	}
	id := lock.NewID()
	name := l.names.lock(key)
	// A key that a woken watch of this locker is about to try waits for
	// that try (see Watch).
	s, ho := l.watch.beforeAcquire(ctx, name)
	var sent time.Time
	if s != nil {
		sent = time.Now()
	}
	lease, ok, err := l.acquire(ctx, key, name, id, ttl)
	if err != nil && l.crossSlotMet(err) {
		lease, ok, err = l.acquire(ctx, key, name, id, ttl)
	}
	if s != nil {
		l.watch.afterAcquire(s, ho, ok, err, sent.Add(ttl))
	}
	return lease, ok, err
}

// crossSlotMet reports whether err is the CROSSSLOT of a plain client on a
// cluster-mode endpoint (a proxy, a one-shard cluster), whose script ran
// nothing; the locker then keeps every script on one key for good.
func (l *Locker) crossSlotMet(err error) bool {
	if l.cluster != nil || l.crossSlot.Load() || !redis.HasErrorPrefix(err, "CROSSSLOT") {
		return false
	}
	l.crossSlot.Store(true)
	return true
}

// oneKey reports whether scripts must touch the lock record alone: on a
// cluster the index hint lives on another slot.
func (l *Locker) oneKey() bool { return l.cluster != nil || l.crossSlot.Load() }

// acquire takes the lock on the normalised key, whose lock record is name,
// for the lock id id. Run again with the same id while the lease is live
// (a retry after a lost reply), it returns the same lease.
func (l *Locker) acquire(ctx context.Context, key, name, id string, ttl time.Duration) (lock.Lease, bool, error) {
	const op = "acquire"
	// With WithIDIndex, the index hint is written by the script when the
	// lease is granted, unless scripts touch one key (a cluster): then by
	// a command of its own once the lease is granted, so that a refused
	// attempt writes nothing.
	var index string
	keys := []string{name}
	if l.index {
		index = l.names.index(id)
		if !l.oneKey() {
			keys = append(keys, index)
		}
	}
	args := []any{id, ttl.Milliseconds(), key}

	var (
		cmd  *redis.Cmd
		conn *redis.Conn
		err  error
	)
	if l.wait != waitNone {
		// WAIT counts the writes of one connection: the script runs on a
		// dedicated connection to the lock's master, and the wait follows
		// on it.
		conn, err = l.lockConn(ctx, name)
		if err != nil {
			return lock.Lease{}, false, mapError(op, err)
		}
		defer conn.Close()
		cmd = l.scripts.acquire.Run(ctx, conn, keys, args...)
	} else {
		cmd = l.scripts.acquire.Run(ctx, l.client, keys, args...)
	}
	if err := cmd.Err(); err != nil {
		return lock.Lease{}, false, mapError(op, err)
	}
	lease, ok, err := l.acquired(ctx, key, id, ttl, cmd.Val())
	if err != nil || !ok {
		return lock.Lease{}, false, err
	}
	if index != "" && len(keys) == 1 {
		// The hint goes through the client, which routes it to its own
		// slot; it need not be durable (it is only a hint).
		err = mapError(op, l.client.Set(ctx, index, name, ttl+hintSlack).Err())
	}
	if err == nil && conn != nil {
		err = l.durable(ctx, conn)
	}
	if err != nil {
		// The lease cannot be handed out: give it back.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		_, _ = l.releaseName(rctx, name, id, index != "")
		cancel()
		return lock.Lease{}, false, err
	}
	l.own.add(id, key, name, lease.ExpiresAt.Sub(lease.AcquiredAt))
	return lease, true, nil
}

// cleanupTimeout bounds the release of a lease that an acquire could not
// hand out (its write was not acknowledged, or its index hint not written).
const cleanupTimeout = 5 * time.Second

// acquired decodes the acquire script's reply: a bare integer (the
// server's clock) for a key that had no record, else an array.
func (l *Locker) acquired(ctx context.Context, key, id string, ttl time.Duration, v any) (lock.Lease, bool, error) {
	const op = "acquire"
	if now, ok := v.(int64); ok {
		if now <= 0 {
			return lock.Lease{}, false, replyError(op, "acquire")
		}
		fence := lock.Fence(now)
		if err := provider.CheckFence(ctx, l.logger, nil, key, fence); err != nil {
			return lock.Lease{}, false, err
		}
		return lock.Lease{Key: key, ID: id, Fence: fence, AcquiredAt: time.UnixMilli(now), ExpiresAt: time.UnixMilli(now + ttl.Milliseconds())}, true, nil
	}
	r, _ := v.([]any)
	var nums [4]int64
	if len(r) > len(nums) {
		return lock.Lease{}, false, replyError(op, "acquire")
	}
	for i, x := range r {
		n, ok := x.(int64)
		if !ok {
			return lock.Lease{}, false, replyError(op, "acquire")
		}
		nums[i] = n
	}
	switch {
	case len(r) == 4 && nums[0] == 1 && nums[1] > 0:
		fence := lock.Fence(nums[1])
		if err := provider.CheckFence(ctx, l.logger, nil, key, fence); err != nil {
			return lock.Lease{}, false, err
		}
		return lock.Lease{Key: key, ID: id, Fence: fence, AcquiredAt: time.UnixMilli(nums[2]), ExpiresAt: time.UnixMilli(nums[3])}, true, nil
	case len(r) == 1 && nums[0] == 0:
		return lock.Lease{}, false, nil
	case len(r) == 2 && nums[0] == -1 && nums[1] > int64(lock.FenceMax):
		// The script refused before writing anything; CheckFence gives the
		// overflow error (and never a raw key).
		return lock.Lease{}, false, provider.CheckFence(ctx, l.logger, nil, key, lock.Fence(nums[1]))
	}
	return lock.Lease{}, false, replyError(op, "acquire")
}

// durable waits until the acquire's writes are acknowledged as the
// durability option asks. conn must be the connection the acquire script
// ran on: WAIT and WAITAOF count that connection's writes.
func (l *Locker) durable(ctx context.Context, conn *redis.Conn) error {
	const op = "acquire"
	switch l.wait {
	case waitReplicas:
		n, err := conn.Wait(ctx, l.waitN, l.waitFor).Result()
		if err != nil {
			return mapError(op, err)
		}
		if n < int64(l.waitN) {
			return idemkit.NewError(idemkit.CodeServiceUnavailable, op, fmt.Sprintf("the lease was acknowledged by %d of %d replicas in time; it was given back", n, l.waitN), nil)
		}
	case waitAOF:
		acks, err := conn.WaitAOF(ctx, l.local, l.waitN, l.waitFor).Result()
		if err != nil {
			return mapError(op, err)
		}
		if len(acks) != 2 || acks[0] < int64(l.local) || acks[1] < int64(l.waitN) {
			return idemkit.NewError(idemkit.CodeServiceUnavailable, op, fmt.Sprintf("the lease was not fsynced as asked in time (acknowledged %v); it was given back", acks), nil)
		}
	}
	return nil
}

// lockConn returns a dedicated connection to the master that holds name,
// for a script followed by WAIT or WAITAOF on the same connection.
func (l *Locker) lockConn(ctx context.Context, name string) (*redis.Conn, error) {
	if l.cluster != nil {
		node, err := l.cluster.MasterForKey(ctx, name)
		if err != nil {
			return nil, err
		}
		return node.Conn(), nil
	}
	return l.client.(*redis.Client).Conn(), nil // New accepts nothing else with a wait
}

// Release implements [lock.Locker]: the release script on the lock record,
// which checks the id and the lease's liveness atomically. For a lease this
// Locker issued that is one round trip; for another lock id, two: the id's
// index hint first (see [WithIDIndex]).
func (l *Locker) Release(ctx context.Context, id string) (lock.Outcome, error) {
	const op = "release"
	if err := lock.ValidateID(id); err != nil {
		return lock.Outcome{}, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return lock.Outcome{}, err
	}
	name, hinted, found, err := l.resolve(ctx, op, id)
	if err != nil || !found {
		return lock.Outcome{Reason: lock.ReasonNotFound}, err
	}
	return l.releaseName(ctx, name, id, hinted || l.index)
}

// ReleaseKey implements [lock.KeyedLocker]: one script on the lock record.
func (l *Locker) ReleaseKey(ctx context.Context, key, id string) (lock.Outcome, error) {
	const op = "release"
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return lock.Outcome{}, err
	}
	if err := lock.ValidateID(id); err != nil {
		return lock.Outcome{}, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return lock.Outcome{}, err
	}
	name, ok := l.own.name(id, key)
	if !ok {
		name = l.names.lock(key)
	}
	return l.releaseName(ctx, name, id, l.index)
}

// releaseName runs the release script on the lock record name. When the id
// may have an index hint (hinted), the script also deletes it on a single
// node; on a cluster (where it lives on another slot) it expires on its
// own.
func (l *Locker) releaseName(ctx context.Context, name, id string, hinted bool) (lock.Outcome, error) {
	const op = "release"
	l.watch.releasing(name)
	keys := []string{name}
	if hinted && !l.oneKey() {
		keys = append(keys, l.names.index(id))
	}
	code, err := l.scripts.release.Run(ctx, l.client, keys, id).Int64()
	if err != nil {
		l.watch.unreleased(name)
		return lock.Outcome{}, mapError(op, err)
	}
	switch code {
	case 1:
		l.own.remove(id)
		l.watch.released(name, id)
		return lock.Outcome{OK: true}, nil
	case -1:
		l.own.remove(id)
		l.watch.released(name, id)
		return lock.Outcome{Reason: lock.ReasonExpired}, nil
	}
	l.watch.unreleased(name)
	if code == 0 {
		return lock.Outcome{Reason: lock.ReasonNotFound}, nil
	}
	return lock.Outcome{}, replyError(op, "release")
}

// Extend implements [lock.Locker]: the extend script, which also
// lengthens the id's index hint (if it has one) on a single node, or
// pipelined with a command that does on a cluster. For a lease this Locker
// issued that is one round trip; for another lock id, two: the hint first.
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
	name, hinted, found, err := l.resolve(ctx, op, id)
	if err != nil || !found {
		return lock.Outcome{Reason: lock.ReasonNotFound}, err
	}
	return l.extendName(ctx, name, id, ttl, hinted || l.index)
}

// ExtendKey implements [lock.KeyedLocker]: one round trip (the extend
// script on the lock record, which also lengthens the id's index hint on a
// single node; on a cluster a command pipelined with it does).
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
	return l.extendName(ctx, l.names.lock(key), id, ttl, l.index)
}

// extendName runs the extend script on the lock record name and, when the
// id may have an index hint (hinted), lengthens it to the new expiry (never
// shortening it, so a mismatched key cannot cut another lease's hint
// short).
func (l *Locker) extendName(ctx context.Context, name, id string, ttl time.Duration, hinted bool) (lock.Outcome, error) {
	const op = "extend"
	var (
		v   int64
		err error
	)
	sent := time.Now()
	switch {
	case !hinted:
		v, err = l.scripts.extend.Run(ctx, l.client, []string{name}, id, ttl.Milliseconds()).Int64()
	case l.oneKey():
		v, err = l.extendPipelined(ctx, name, l.names.index(id), id, ttl)
	default:
		v, err = l.scripts.extend.Run(ctx, l.client, []string{name, l.names.index(id)}, id, ttl.Milliseconds()).Int64()
	}
	if err != nil {
		return lock.Outcome{}, mapError(op, err)
	}
	l.watch.extended(name, v > 0, sent.Add(ttl))
	if v > 0 {
		l.own.extend(id, ttl)
	}
	switch {
	case v > 0:
		return lock.Outcome{OK: true, ExpiresAt: time.UnixMilli(v)}, nil
	case v == 0:
		return lock.Outcome{Reason: lock.ReasonNotFound}, nil
	case v == -1:
		return lock.Outcome{Reason: lock.ReasonExpired}, nil
	}
	return lock.Outcome{}, replyError(op, "extend")
}

// extendPipelined runs the extend script on name and, in the same pipeline
// (one round trip; on a cluster the two commands go to their nodes at
// once), lengthens the hint index (PEXPIRE ... GT). When the server does
// not have the script cached (NOSCRIPT: nothing ran), it sends the
// pipeline again with the script's source.
func (l *Locker) extendPipelined(ctx context.Context, name, index, id string, ttl time.Duration) (int64, error) {
	keys, args := []string{name}, []any{id, ttl.Milliseconds()}
	for _, bySHA := range [...]bool{true, false} {
		pipe := l.client.Pipeline()
		var cmd *redis.Cmd
		if bySHA {
			cmd = l.scripts.extend.EvalSha(ctx, pipe, keys, args...)
		} else {
			cmd = l.scripts.extend.Eval(ctx, pipe, keys, args...)
		}
		pipe.Do(ctx, "pexpire", index, (ttl + hintSlack).Milliseconds(), "gt")
		_, _ = pipe.Exec(ctx) // each command carries its own error
		if bySHA && redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			continue
		}
		return cmd.Int64()
	}
	return 0, replyError("extend", "NOSCRIPT after sending the script")
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
	v, err := l.scripts.isLocked.Run(ctx, l.client, []string{l.names.lock(key)}, cleanup).Int64()
	if err != nil {
		return false, mapError(op, err)
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
	return l.lookup(ctx, l.names.lock(key), "")
}

// LookupID implements [lock.Locker]: a script that checks the id and
// liveness on the lock record. For a lease this Locker issued that is one
// round trip; for another lock id, two: the id's index hint first (see
// [WithIDIndex]).
func (l *Locker) LookupID(ctx context.Context, id string) (lock.Info, bool, error) {
	const op = "lookup"
	if err := lock.ValidateID(id); err != nil {
		return lock.Info{}, false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return lock.Info{}, false, err
	}
	name, _, found, err := l.resolve(ctx, op, id)
	if err != nil || !found {
		return lock.Info{}, false, err
	}
	return l.lookup(ctx, name, id)
}

func (l *Locker) lookup(ctx context.Context, name, id string) (lock.Info, bool, error) {
	const op = "lookup"
	v, err := l.scripts.lookup.Run(ctx, l.client, []string{name}, id).Text()
	if err != nil {
		return lock.Info{}, false, mapError(op, err)
	}
	if v == "" {
		return lock.Info{}, false, nil
	}
	if len(v) <= recordHeader {
		return lock.Info{}, false, replyError(op, "a lock record too short")
	}
	fence, err1 := strconv.ParseUint(v[22:37], 10, 64)
	acq, err2 := strconv.ParseInt(v[37:52], 10, 64)
	exp, err3 := strconv.ParseInt(v[52:67], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return lock.Info{}, false, replyError(op, "a malformed lock record")
	}
	return lock.NewInfo(v[recordHeader:], v[:22], lock.Fence(fence), time.UnixMilli(acq), time.UnixMilli(exp)), true, nil
}

// resolve finds the name of the lock record that the lock id id was issued
// for: from memory for a lease this Locker issued, else from the id's index
// hint (hinted). found is false when there is neither (the id was never
// issued, was issued by a Locker without WithIDIndex, or its lease ran out
// a while ago).
func (l *Locker) resolve(ctx context.Context, op, id string) (name string, hinted, found bool, err error) {
	if name, ok := l.own.get(id); ok {
		return name, false, true, nil
	}
	name, err = l.client.Get(ctx, l.names.index(id)).Result()
	if err == redis.Nil {
		return "", false, false, nil
	}
	if err != nil {
		return "", false, false, mapError(op, err)
	}
	if !l.names.isLock(name) {
		return "", false, false, replyError(op, "an index hint that names no lock record")
	}
	return name, true, true, nil
}
