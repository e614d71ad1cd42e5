package redislock

import (
	"context"
	"errors"
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
	inflight    int
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

// WithMaxInflight sets how many round trips of the Locker's acquires and
// releases may be in flight on the client at once. While n are, the
// commands of further calls queue, and the next round trip that comes
// back takes all of them along in one pipeline: under load the server
// reads, runs and answers many calls per round trip, which is what its
// time goes to (a lone call still sends its commands at once). n = 0
// sends every call's commands in a round trip of its own. With a
// durability wait ([WithWaitForReplicas], [WithWaitForAOF]) acquires use
// a dedicated connection each and are never queued. n must not be
// negative. Default: 4.
func WithMaxInflight(n int) Option { return func(c *config) { c.inflight = n } }

// WithWaitForReplicas makes every successful acquire and extend count only
// once n replicas of the lock's master acknowledged its write (Redis
// WAIT), waiting for them at most timeout:
//
//   - An acquire runs its script on a dedicated connection to the lock's
//     master, then WAIT on it, before the lease is handed out. When fewer
//     replicas acknowledge in time, the lease is released and the acquire
//     fails with ServiceUnavailable: a lease that a failover could lose is
//     never handed out. It costs a round trip more (the wait) plus the
//     replication delay.
//   - An extend (Extend, ExtendKey, and so [lock.Do]'s renewals) sends its
//     script and WAIT pipelined on such a connection: one round trip, plus
//     the replication delay. When fewer replicas acknowledge in time, the
//     extend fails with ServiceUnavailable: the lease stays as the master
//     has it (extended there, but a failover may bring back the earlier
//     expiry), and the holder must not count on the new expiry; lock.Do
//     retries the renewal as it retries any renewal error, and cancels fn
//     if none succeeds before the lease's last acknowledged expiry.
//
// So a failover (to a replica that acknowledged) never shortens a lease
// below what its holder was told. On a cluster client, an error on the
// dedicated connection (a dead master, MOVED after a failover) makes the
// client reload its slot map, so that the next call reaches the new
// master. n must be positive, and timeout at least one millisecond and
// below the caller's ctx deadline and the client's ReadTimeout. Default:
// off (a lease is as durable as the server's persistence makes it; see the
// package documentation).
//
// With go-redis v9.23, build the client with maintenance notifications
// off (MaintNotificationsConfig: &maintnotifications.Config{Mode:
// maintnotifications.ModeDisabled}) when the server is not Redis 8 or
// later: in their default auto mode go-redis rewrites its options when the
// server refuses them, unguarded against the connections that Client.Conn
// gives, which this option uses (a data race of go-redis's own, which the
// race detector reports).
func WithWaitForReplicas(n int, timeout time.Duration) Option {
	return func(c *config) { c.wait, c.waitLocal, c.waitN, c.waitTimeout = waitReplicas, 0, n, timeout }
}

// WithWaitForAOF is [WithWaitForReplicas] with Redis WAITAOF (Redis 7.2 or
// later): an acquire or extend counts only once its write is fsynced to
// the master's append-only file (local = true) and to those of n replicas.
// It makes a lease durable on a server with appendfsync everysec. Default:
// off.
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
	batch   batcher              // acquires' and releases' commands, sent together under load

	// crossSlot is set once a plain client met a cluster-mode endpoint
	// (CROSSSLOT): from then on every script touches one key.
	crossSlot atomic.Bool
	// tombstone is the last record this Locker left as a tombstone: an
	// acquire of it soon after goes to the acquire script at once.
	tombstone atomic.Pointer[tombstoneHint]
	// scriptOnly is set once the server refused the pipelined acquire
	// that the acquire script then got through (a proxy that lacks
	// PEXPIRETIME): from then on every acquire runs the script.
	scriptOnly atomic.Bool
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
	cfg := config{prefix: defaultKeyPrefix, inflight: defaultInflight}
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
	if cfg.inflight < 0 {
		return nil, bad("the number of round trips in flight must not be negative")
	}
	l.batch = batcher{client: client, limit: cfg.inflight}
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
	lease, ok, err := l.acquire(ctx, key, name, id, ttl, s != nil)
	if err != nil && l.crossSlotMet(err) {
		lease, ok, err = l.acquire(ctx, key, name, id, ttl, s != nil)
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
func (l *Locker) acquire(ctx context.Context, key, name, id string, ttl time.Duration, watched bool) (lock.Lease, bool, error) {
	const op = "acquire"
	// With WithIDIndex, the index hint is written by the script when the
	// lease is granted, unless scripts touch one key (a cluster): then by
	// a command of its own once the lease is granted, so that a refused
	// attempt writes nothing.
	var index string
	inScript := false // the script writes the index hint
	if l.index {
		index = l.names.index(id)
		inScript = !l.oneKey()
	}
	ttlMS := ttl.Milliseconds()
	record := l.compact(id, key, ttlMS, watched)

	var (
		conn *redis.Conn
		err  error
	)
	if l.wait != waitNone {
		// WAIT counts the writes of one connection: the writes go on a
		// dedicated connection to the lock's master, and the wait follows
		// on it.
		conn, err = l.lockConn(ctx, name)
		if err != nil {
			return lock.Lease{}, false, mapError(op, l.reroute(err))
		}
		defer conn.Close()
	}
	// failed maps an error of the acquire's commands; on a dedicated
	// connection it first makes a cluster client reload its slot map.
	failed := func(err error) (lock.Lease, bool, error) {
		if conn != nil {
			err = l.reroute(err)
		}
		return lock.Lease{}, false, mapError(op, err)
	}
	var reply any
	refused := false // the server refused the pipelined acquire
	if !inScript && !watched && !l.scriptOnly.Load() && !l.tombstoned(name) {
		reply, err = l.acquireFresh(ctx, conn, name, record, ttlMS)
		if err != nil {
			var re redis.Error
			if !errors.As(err, &re) {
				return failed(err)
			}
			refused, reply = true, nil
		}
	}
	if reply == nil {
		script := l.scripts.acquire
		var args []any
		if inScript {
			args = append(script.args(2, 5), name, index, record, ttlMS, ttlMS+hintSlack.Milliseconds())
		} else {
			args = append(script.args(1, 3), name, record, ttlMS)
		}
		cmd := l.runScript(ctx, conn, script, args)
		if err := cmd.Err(); err != nil {
			return failed(err)
		}
		if refused {
			// The script went through where the pipeline did not: this
			// server (or a proxy in front of it) refuses its commands.
			l.scriptOnly.Store(true)
		}
		reply = cmd.Val()
	}
	_, fresh := reply.(int64) // a compact lease, written by the pipelined acquire or the script
	lease, ok, err := l.acquired(ctx, key, id, ttl, reply)
	if err != nil && fresh {
		// The lease was written, and cannot be handed out (its fence is
		// past idemkit.FenceMax): give it back.
		l.giveBack(ctx, name, id, false)
	}
	if err != nil || !ok {
		return lock.Lease{}, false, err
	}
	if index != "" && !inScript {
		// The hint goes through the client, which routes it to its own
		// slot; it need not be durable (it is only a hint).
		err = mapError(op, l.client.Set(ctx, index, name, ttl+hintSlack).Err())
	}
	if err == nil && conn != nil {
		err = l.durable(ctx, conn)
	}
	if err != nil {
		// The lease cannot be handed out: give it back.
		l.giveBack(ctx, name, id, index != "")
		return lock.Lease{}, false, err
	}
	written := "" // the compact lease, as written, when unwatched
	if fresh && !watched {
		written = record
	}
	l.own.add(id, key, name, written, lease.ExpiresAt.Sub(lease.AcquiredAt))
	return lease, true, nil
}

// tombstoneHint is a record a release left as a tombstone, and when.
type tombstoneHint struct {
	name string
	at   time.Time
}

// tombstoned reports whether this Locker left the record name as a
// tombstone within the last fenceBehind: an acquire of it would find the
// tombstone, so the pipelined SET ... NX would only add a round trip.
func (l *Locker) tombstoned(name string) bool {
	h := l.tombstone.Load()
	return h != nil && h.name == name && time.Since(h.at) < fenceBehind
}

// fenceBehind is how long after a lease was granted (its acquire's reply
// came, by the local monotonic clock) the server's clock has certainly
// passed the lease's fence, which is the millisecond in which the server
// granted it: 1 ms of real time would do; the second is a margin for
// clock rates (the fences rely on the server's clock not stepping back
// anyway).
const fenceBehind = 2 * time.Millisecond

// acquireFresh tries the common acquire, of a key without a record, in
// one round trip and no script (a fraction of the server's work of the
// acquire script): SET ... NX PX writes the compact lease value for ttl ms,
// and PEXPIRETIME, pipelined after it, reads the lease's expiry, which is
// returned. When the key has a record (a lease, a tombstone), nothing is
// written and it returns nil: the acquire script decides. An error reply of
// the server is returned as it is (a redis.Error). The commands go as exec
// sends them.
//
// The two commands are not one atomic step, but nothing else can change
// the expiry in between: only the holder's id releases or extends the
// lease, and other acquires are refused while it is live. It could only run
// out and be taken over in between if the round trip took as long as the
// lease: when the answer takes half the TTL or more, it returns nil too, and
// the acquire script (run with the same lock id) reads the lease back
// atomically, or finds it gone.
func (l *Locker) acquireFresh(ctx context.Context, conn *redis.Conn, name, value string, ttl int64) (any, error) {
	n := any(name) // boxed once for both
	args := []any{"set", n, value, "nx", "px", ttl, "pexpiretime", n}
	set := redis.NewCmd(ctx, args[:6:6]...)
	exp := redis.NewCmd(ctx, args[6:]...)
	sent := time.Now()
	if err := l.exec(ctx, conn, set, exp); err != nil && err != redis.Nil {
		return nil, err
	}
	if set.Err() == redis.Nil {
		return nil, nil
	}
	e, err := exp.Int64()
	if err != nil || e <= ttl || time.Since(sent) >= time.Duration(ttl)*time.Millisecond/2 {
		return nil, err
	}
	return e, nil
}

// cleanupTimeout bounds the release of a lease that an acquire could not
// hand out (its write was not acknowledged, or its index hint not written).
const cleanupTimeout = 5 * time.Second

// giveBack releases the lease id of the lock record name that an acquire
// wrote and cannot hand out, on a ctx of its own (the caller's may have
// ended), within cleanupTimeout; hinted as for releaseName. Its outcome
// does not matter: a lease it cannot release runs out.
func (l *Locker) giveBack(ctx context.Context, name, id string, hinted bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_, _ = l.releaseName(ctx, ownLease{name: name}, id, hinted)
}

// acquired decodes the acquire script's reply: a bare integer (the
// lease's expiry, its TTL after its fence) for a key that had no record,
// else an array.
func (l *Locker) acquired(ctx context.Context, key, id string, ttl time.Duration, v any) (lock.Lease, bool, error) {
	const op = "acquire"
	if exp, ok := v.(int64); ok {
		now := exp - ttl.Milliseconds()
		if now <= 0 {
			return lock.Lease{}, false, replyError(op, "acquire")
		}
		fence := idemkit.Fence(now)
		if err := provider.CheckFence(ctx, l.logger, nil, key, fence); err != nil {
			return lock.Lease{}, false, err
		}
		return lock.Lease{Key: key, ID: id, Fence: fence, AcquiredAt: time.UnixMilli(now), ExpiresAt: time.UnixMilli(exp)}, true, nil
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
		fence := idemkit.Fence(nums[1])
		if err := provider.CheckFence(ctx, l.logger, nil, key, fence); err != nil {
			return lock.Lease{}, false, err
		}
		return lock.Lease{Key: key, ID: id, Fence: fence, AcquiredAt: time.UnixMilli(nums[2]), ExpiresAt: time.UnixMilli(nums[3])}, true, nil
	case len(r) == 1 && nums[0] == 0:
		return lock.Lease{}, false, nil
	case len(r) == 2 && nums[0] == -1 && nums[1] > int64(idemkit.FenceMax):
		// The script refused before writing anything; CheckFence gives the
		// overflow error (and never a raw key).
		return lock.Lease{}, false, provider.CheckFence(ctx, l.logger, nil, key, idemkit.Fence(nums[1]))
	}
	return lock.Lease{}, false, replyError(op, "acquire")
}

// durable waits until the acquire's writes are acknowledged as the
// durability option asks. conn must be the connection the acquire script
// ran on: WAIT and WAITAOF count that connection's writes.
func (l *Locker) durable(ctx context.Context, conn *redis.Conn) error {
	const op = "acquire"
	const lost = "; it was given back"
	switch l.wait {
	case waitReplicas:
		n, err := conn.Wait(ctx, l.waitN, l.waitFor).Result()
		if err != nil {
			return mapError(op, l.reroute(err))
		}
		return l.replicasAcked(op, "the lease", n, lost)
	case waitAOF:
		acks, err := conn.WaitAOF(ctx, l.local, l.waitN, l.waitFor).Result()
		if err != nil {
			return mapError(op, l.reroute(err))
		}
		return l.aofAcked(op, "the lease", acks, lost)
	}
	return nil
}

// replicasAcked checks WAIT's reply n: what (the write) was acknowledged
// by enough replicas, else ServiceUnavailable, its detail ending with
// outcome.
func (l *Locker) replicasAcked(op, what string, n int64, outcome string) error {
	if n < int64(l.waitN) {
		return idemkit.NewError(idemkit.CodeServiceUnavailable, op, fmt.Sprintf("%s was acknowledged by %d of %d replicas in time%s", what, n, l.waitN, outcome), nil)
	}
	return nil
}

// aofAcked checks WAITAOF's reply acks (local fsyncs, replica fsyncs) as
// replicasAcked checks WAIT's.
func (l *Locker) aofAcked(op, what string, acks []int64, outcome string) error {
	if len(acks) != 2 || acks[0] < int64(l.local) || acks[1] < int64(l.waitN) {
		return idemkit.NewError(idemkit.CodeServiceUnavailable, op, fmt.Sprintf("%s was not fsynced as asked in time (acknowledged %v)%s", what, acks, outcome), nil)
	}
	return nil
}

// reroute returns err, first making a cluster client reload its slot map
// when err is an error met on a dedicated connection to a master (or in
// finding that master): after a failover the client's map still names the
// old master (dead, or a replica that answers MOVED), and a dedicated
// connection follows no redirection; the reload (in the background, at
// most one at a time) lets the next call reach the new master.
func (l *Locker) reroute(err error) error {
	if err != nil && err != redis.Nil && l.cluster != nil {
		l.cluster.ReloadState(context.Background())
	}
	return err
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
	own, hinted, found, err := l.resolve(ctx, op, id)
	if err != nil || !found {
		return lock.Outcome{Reason: lock.ReasonNotFound}, err
	}
	return l.releaseName(ctx, own, id, hinted || l.index)
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
	own, ok := l.own.forKey(id, key)
	if !ok {
		own = ownLease{name: l.names.lock(key)}
	}
	return l.releaseName(ctx, own, id, l.index)
}

// releaseName runs the release script on the lock record own.name. When
// the id may have an index hint (hinted), the script also deletes it on a
// single node; on a cluster (where it lives on another slot) it expires on
// its own. own.granted is when this Locker was granted the lease (zero when
// it does not know): from fenceBehind after it, the server's clock has
// passed the lease's fence; before, it may not have, and a compact lease
// becomes a light tombstone. Either way the script need not read the clock
// or the record's expiry. When own.record is set and no hint is to go,
// the script first compares the record with it whole, which spares it
// decoding the record.
func (l *Locker) releaseName(ctx context.Context, own ownLease, id string, hinted bool) (lock.Outcome, error) {
	const op = "release"
	name := own.name
	l.watch.releasing(name)
	script := l.scripts.release
	hint := hinted && !l.oneKey() // the script deletes the hint
	var args []any
	if hint {
		args = append(script.args(2, 4), name, l.names.index(id), id)
	} else {
		args = append(script.args(1, 4), name, id)
	}
	if !own.granted.IsZero() {
		if time.Since(own.granted) >= fenceBehind {
			args = append(args, "1")
		} else {
			args = append(args, "0")
		}
		if own.record != "" && !hint {
			args = append(args, own.record)
		}
	}
	code, err := l.runScript(ctx, nil, script, args).Int64()
	if err != nil {
		l.watch.unreleased(name)
		return lock.Outcome{}, mapError(op, err)
	}
	switch code {
	case 1, 2:
		l.own.remove(id)
		if code == 2 {
			l.tombstone.Store(&tombstoneHint{name: name, at: time.Now()})
		}
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
// With a durability wait ([WithWaitForReplicas], [WithWaitForAOF]) the
// script is pipelined with the wait instead (on a cluster, the hint's
// command follows), and an extension not acknowledged in time is a
// ServiceUnavailable error.
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
	own, hinted, found, err := l.resolve(ctx, op, id)
	if err != nil || !found {
		return lock.Outcome{Reason: lock.ReasonNotFound}, err
	}
	return l.extendName(ctx, own.name, id, ttl, hinted || l.index)
}

// ExtendKey implements [lock.KeyedLocker]: one round trip (the extend
// script on the lock record, which also lengthens the id's index hint on a
// single node; on a cluster a command pipelined with it does). With a
// durability wait ([WithWaitForReplicas], [WithWaitForAOF]) the script is
// pipelined with the wait, on a dedicated connection to the lock's master,
// and an extension not acknowledged in time is a ServiceUnavailable error
// (the master keeps it; a failover may lose it).
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
	var unacked error // with a durability wait: the master extended, unacknowledged
	switch {
	case l.wait != waitNone:
		v, unacked, err = l.extendDurably(ctx, name, id, ttl, hinted)
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
	case unacked != nil:
		return lock.Outcome{}, unacked
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
	cmd, _ := scriptPipelined(ctx, l.client, l.scripts.extend, []string{name}, []any{id, ttl.Milliseconds()},
		func(pipe redis.Pipeliner) *redis.Cmd {
			return pipe.Do(ctx, "pexpire", index, (ttl + hintSlack).Milliseconds(), "gt")
		})
	v, err := cmd.Int64()
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		return 0, replyError("extend", "NOSCRIPT after sending the script")
	}
	return v, err
}

// scriptPipelined runs script with keys and args on c, pipelined with the
// command also adds (one round trip), by SHA and, when the server does
// not have the script cached (NOSCRIPT: nothing ran, as after a restart or
// a failover), once more with its source. Each command carries its own
// error.
func scriptPipelined(ctx context.Context, c redis.Cmdable, script *redis.Script, keys []string, args []any,
	also func(redis.Pipeliner) *redis.Cmd) (cmd, other *redis.Cmd) {
	for _, bySHA := range [...]bool{true, false} {
		pipe := c.Pipeline()
		if bySHA {
			cmd = script.EvalSha(ctx, pipe, keys, args...)
		} else {
			cmd = script.Eval(ctx, pipe, keys, args...)
		}
		other = also(pipe)
		_, _ = pipe.Exec(ctx)
		if !bySHA || !redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			break
		}
	}
	return cmd, other
}

// extendDurably runs the extend script on the lock record name, pipelined
// with WAIT (or WAITAOF) on a dedicated connection to its master: one
// round trip. It returns the script's reply v and, when v is a new expiry
// (the master extended the lease) that was not acknowledged as the
// durability option asks, a ServiceUnavailable error in unacked. When the
// server does not have the script cached (NOSCRIPT: nothing ran, as after
// a failover), it sends the pipeline again with the script's source. An
// index hint on another slot (hinted, on a cluster) is lengthened after,
// through the client, and not waited for: it is only a hint.
func (l *Locker) extendDurably(ctx context.Context, name, id string, ttl time.Duration, hinted bool) (v int64, unacked, err error) {
	const op = "extend"
	keys, args := []string{name}, []any{id, ttl.Milliseconds()}
	if hinted && !l.oneKey() {
		keys = append(keys, l.names.index(id))
	}
	conn, err := l.lockConn(ctx, name)
	if err != nil {
		return 0, nil, l.reroute(err)
	}
	defer conn.Close()
	cmd, wait := scriptPipelined(ctx, conn, l.scripts.extend, keys, args, func(pipe redis.Pipeliner) *redis.Cmd {
		if l.wait == waitAOF {
			return pipe.Do(ctx, "waitaof", l.local, l.waitN, l.waitFor.Milliseconds())
		}
		return pipe.Do(ctx, "wait", l.waitN, l.waitFor.Milliseconds())
	})
	if v, err = cmd.Int64(); err != nil {
		if redis.HasErrorPrefix(err, "NOSCRIPT") {
			return 0, nil, replyError(op, "NOSCRIPT after sending the script")
		}
		return 0, nil, l.reroute(err)
	}
	if v <= 0 {
		// Not extended: the outcome does not depend on the wait.
		return v, nil, nil
	}
	const outcome = "; the lease stays as the master has it"
	switch l.wait {
	case waitAOF:
		acks, err := wait.Int64Slice()
		if err != nil {
			return v, mapError(op, l.reroute(err)), nil
		}
		unacked = l.aofAcked(op, "the extension", acks, outcome)
	default:
		n, err := wait.Int64()
		if err != nil {
			return v, mapError(op, l.reroute(err)), nil
		}
		unacked = l.replicasAcked(op, "the extension", n, outcome)
	}
	if unacked == nil && hinted && l.oneKey() {
		// As in extendPipelined, the hint's own error is ignored: the
		// lease is extended, and a hint is only a hint.
		_ = l.client.Do(ctx, "pexpire", l.names.index(id), (ttl + hintSlack).Milliseconds(), "gt").Err()
	}
	return v, unacked, nil
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
	v, err := l.scripts.isLocked.Run(ctx, l.client, []string{l.names.lock(key)}, cleanup, "0").Int64()
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
	own, _, found, err := l.resolve(ctx, op, id)
	if err != nil || !found {
		return lock.Info{}, false, err
	}
	return l.lookup(ctx, own.name, id)
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
	if len(v) < fullHeader {
		return lock.Info{}, false, replyError(op, "a lock record too short")
	}
	const d = idemkit.FenceDigits
	fence, err1 := strconv.ParseUint(v[idLen+1:idLen+1+d], 10, 64)
	acq, err2 := strconv.ParseInt(v[idLen+1+d:idLen+1+2*d], 10, 64)
	exp, err3 := strconv.ParseInt(v[idLen+1+2*d:fullHeader], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return lock.Info{}, false, replyError(op, "a malformed lock record")
	}
	key := v[fullHeader:]
	if key == "" {
		var ok bool
		if key, ok = l.names.keyOf(name); !ok {
			return lock.Info{}, false, replyError(op, "a lock record without its key")
		}
	}
	return lock.NewInfo(key, v[:idLen], idemkit.Fence(fence), time.UnixMilli(acq), time.UnixMilli(exp)), true, nil
}

// resolve finds the lock record that the lock id id was issued for: from
// memory for a lease this Locker issued (own is its entry), else from the
// id's index hint (hinted; own then has the record's name alone). found is
// false when there is neither (the id was never issued, was issued by a
// Locker without WithIDIndex, or its lease ran out a while ago).
func (l *Locker) resolve(ctx context.Context, op, id string) (own ownLease, hinted, found bool, err error) {
	if own, ok := l.own.get(id); ok {
		return own, false, true, nil
	}
	name, err := l.client.Get(ctx, l.names.index(id)).Result()
	if err == redis.Nil {
		return ownLease{}, false, false, nil
	}
	if err != nil {
		return ownLease{}, false, false, mapError(op, err)
	}
	if !l.names.isLock(name) {
		return ownLease{}, false, false, replyError(op, "an index hint that names no lock record")
	}
	return ownLease{name: name}, true, true, nil
}

// compact returns the compact lease record of id on the normalised key
// for ttl ms: watched when the acquiring Locker watches the key. The key
// is left out when the record's name spells it (see names.keyOf).
func (l *Locker) compact(id, key string, ttl int64, watched bool) string {
	var b [compactHeader]byte
	copy(b[:], id)
	b[idLen] = kindCompact
	if watched {
		b[idLen] = kindCompactWatched
	}
	for i := len(b) - 1; i > idLen; i-- {
		b[i] = byte('0' + ttl%10)
		ttl /= 10
	}
	if verbatim(key) {
		return string(b[:])
	}
	return string(b[:]) + key
}
