package redisstore

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/engine"
	"github.com/redis/go-redis/v9"
)

// maxResponseBytes is the default and the largest [WithMaxResponseBytes]:
// 512 MiB, the largest string Redis accepts by default
// (proto-max-bulk-len).
const maxResponseBytes = 512 << 20

// maxPrefixBytes bounds [WithKeyPrefix].
const maxPrefixBytes = 64

// Option configures [New].
type Option func(*config)

type config struct {
	prefix      string
	maxResponse int
	step        time.Duration
	wait        durability
	// listenerIdle and healthInterval, which tests shorten.
	listenerIdle, healthInterval time.Duration
}

// durability is what WithWaitForReplicas or WithWaitForAOF asks for.
type durability struct {
	aof      bool          // WAITAOF rather than WAIT
	local    int           // WAITAOF: 1 when the master's own fsync counts too
	replicas int           // replicas that must acknowledge
	timeout  time.Duration // how long to wait for them; 0: no wait
	set      int           // how many of the two options were given
}

// defaultMaxClockStep is WithMaxClockStep's default.
const defaultMaxClockStep = time.Minute

// WithKeyPrefix sets a prefix written before every Redis key of the store,
// as it is (end it with a separator, e.g. "shop:"): up to 64 bytes of
// printable ASCII without spaces. Default: none; the guard's record keys
// already read "<namespace>:<scope>:<key>" (namespace "idempotency").
func WithKeyPrefix(prefix string) Option { return func(c *config) { c.prefix = prefix } }

// WithMaxResponseBytes refuses responses larger than n bytes with an error
// matching [store.ErrTooLarge], before any I/O (the guard then records the
// execution as not replayable). n must be between 1 and 512 MiB
// (536,870,912), the largest string Redis accepts by default
// (proto-max-bulk-len); lower it when the server's proto-max-bulk-len is
// lower. A write holds the server for as long as copying the response
// takes, so a modest limit also bounds that pause. Default: 512 MiB.
func WithMaxResponseBytes(n int) Option { return func(c *config) { c.maxResponse = n } }

// WithMaxClockStep sets the largest step back of the servers' clock (or
// of a failover to a replica whose clock is behind) that fences survive:
// records and tombstones are kept until the server's clock passes their
// fence plus d (the fence rule of [store.Store]): a deleted record's
// tombstone (about 100 bytes) for d, a released claim for its lease plus
// [store.ClaimRetention], or d if longer. d must not be negative.
// Default: one minute.
func WithMaxClockStep(d time.Duration) Option { return func(c *config) { c.step = d } }

// WithWaitForReplicas makes a claim, an extension, a step and an outcome
// count only once n replicas of the key's master have acknowledged them (Redis
// WAIT, for at most timeout), so that a failover cannot lose them (Redis
// replicates asynchronously): when fewer acknowledge in time, the
// operation fails closed with ServiceUnavailable, and a new claim is
// released first. The wait runs on a connection of its own to the master,
// in the same round trip as the script, but for a claim, which waits only
// once it claimed (a round trip more; a replay waits for nothing). n must
// be positive; timeout at least 1 ms and below the callers' op timeout.
// The client must be a [*redis.Client] (also a failover one) or a
// [*redis.ClusterClient]; with go-redis v9.23 and a server older than
// Redis 8, build it with maintenance notifications off (docs/backends.md
// says why). Default: off.
func WithWaitForReplicas(n int, timeout time.Duration) Option {
	return func(c *config) { c.wait = durability{replicas: n, timeout: timeout, set: c.wait.set + 1} }
}

// WithWaitForAOF is [WithWaitForReplicas] with Redis WAITAOF (Redis 7.2
// or later): the write counts once fsynced to the master's append-only
// file (local) and to those of n replicas (n ≥ 0, and local or n > 0). It
// and WithWaitForReplicas exclude each other. Default: off.
func WithWaitForAOF(local bool, n int, timeout time.Duration) Option {
	return func(c *config) {
		c.wait = durability{aof: true, replicas: n, timeout: timeout, set: c.wait.set + 1}
		if local {
			c.wait.local = 1
		}
	}
}

// Store is the Redis engine: a [store.Store], a [store.Watcher] and a
// [store.Records], for the guard and for locks. It is safe for concurrent
// use.
//
// The zero value is not usable; call [New].
type Store struct {
	client      redis.UniversalClient
	prefix      string
	maxResponse int
	// notify is the command the scripts publish with when a record's claim
	// ends: "publish" on a single node, "spublish" on a cluster, "" when
	// the store does not notify (see Watch).
	notify string
	step   any   // WithMaxClockStep in ms, the scripts' ARGV[1] (boxed once)
	stepMs int64 // the same, as a number
	// direct: the client is one server's (see tx).
	direct   bool
	watch    watching
	wait     durability
	batch    batcher
	releases releases
}

// releases remembers the keys this store released lately, so that its
// next claim of one goes straight to the claim script: the key holds the
// release's tombstone, which the transaction's SET NX would only find (a
// lock taken again and again by one process, a request retried after its
// handler failed). It is a hint: a key it forgot, or whose tombstone
// expired since, is claimed all the same, a round trip apart.
type releases struct {
	n    atomic.Int32 // len(keys), read without the lock
	mu   sync.Mutex
	keys map[string]struct{}
}

// maxReleases bounds the keys a store remembers: past it, it forgets them
// all and starts again.
const maxReleases = 1024

func (r *releases) add(key string) {
	r.mu.Lock()
	if r.keys == nil || len(r.keys) >= maxReleases {
		r.keys = make(map[string]struct{})
	}
	r.keys[key] = struct{}{}
	r.n.Store(int32(len(r.keys)))
	r.mu.Unlock()
}

// take reports whether key was released lately, and forgets it.
func (r *releases) take(key string) bool {
	if r.n.Load() == 0 {
		return false
	}
	r.mu.Lock()
	_, ok := r.keys[key]
	if ok {
		delete(r.keys, key)
		r.n.Store(int32(len(r.keys)))
	}
	r.mu.Unlock()
	return ok
}

var (
	_ store.Store   = (*Store)(nil)
	_ store.Records = (*Store)(nil)
	_ store.Watcher = (*Store)(nil)
	_ store.Stepper = (*Store)(nil)
)

// New returns a store on client. It does no I/O.
//
// The client must bound its commands by the caller's ctx: a
// [*redis.Client], [*redis.ClusterClient] or [*redis.Ring] (failover ones
// included) built without ContextTimeoutEnabled: true is refused, since
// go-redis would then hold every call on a stalled server for ReadTimeout
// × (MaxRetries + 1). Other implementations must honour ctx themselves.
// A bad option is an InvalidArgument error.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	bad := func(detail string) error { return idemkit.NewError(idemkit.CodeInvalidArgument, "new", detail, nil) }
	if client == nil {
		return nil, bad("a Redis client is required")
	}
	if !contextTimeouts(client) {
		return nil, bad(fmt.Sprintf("the %T does not honour ctx deadlines, so a stalled Redis would hang every call: "+
			"build it with ContextTimeoutEnabled: true in its options (redis.Options, redis.FailoverOptions, "+
			"redis.ClusterOptions, redis.RingOptions or redis.UniversalOptions)", client))
	}
	cfg := config{maxResponse: maxResponseBytes, step: defaultMaxClockStep, listenerIdle: listenerIdle, healthInterval: healthInterval}
	for _, o := range opts {
		o(&cfg)
	}
	if !validPrefix(cfg.prefix) {
		return nil, bad(fmt.Sprintf("the key prefix must have at most %d bytes of printable ASCII without spaces", maxPrefixBytes))
	}
	if cfg.maxResponse < 1 || cfg.maxResponse > maxResponseBytes {
		return nil, bad(fmt.Sprintf("max response bytes must be between 1 and %d", maxResponseBytes))
	}
	if cfg.step < 0 {
		return nil, bad("the max clock step must not be negative")
	}
	if w := cfg.wait; w.set > 0 {
		switch {
		case w.set > 1:
			return nil, bad("WithWaitForReplicas and WithWaitForAOF exclude each other: give one (WAITAOF with n replicas also waits for them)")
		case w.replicas < 0 || w.replicas == 0 && (!w.aof || w.local == 0):
			return nil, bad("the wait for replicas needs a positive number of replicas (or, for WAITAOF, local = true)")
		case w.timeout < time.Millisecond:
			return nil, bad("the wait for replicas needs a timeout of at least 1ms")
		}
		switch client.(type) {
		case *redis.Client, *redis.ClusterClient:
		default:
			return nil, bad(fmt.Sprintf("the wait for replicas needs a *redis.Client or *redis.ClusterClient (got %T)", client))
		}
	}
	return &Store{
		client: client, prefix: cfg.prefix, maxResponse: cfg.maxResponse, notify: notifyCommand(client),
		step: any(strconv.FormatInt(cfg.step.Milliseconds(), 10)), stepMs: cfg.step.Milliseconds(), direct: isDirect(client),
		watch: watching{idle: cfg.listenerIdle, health: cfg.healthInterval},
		wait:  cfg.wait, batch: batcher{client: client, limit: maxInflight},
	}, nil
}

// notifyCommand returns the command the scripts publish with on client:
// PUBLISH through a client of one server (also a failover one, whose
// listener follows the master), SPUBLISH on a cluster (the key's shard
// only), and none through other clients (a ring), whose watches never fire.
func notifyCommand(client redis.UniversalClient) string {
	switch client.(type) {
	case *redis.Client:
		return "publish"
	case *redis.ClusterClient:
		return "spublish"
	}
	return ""
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

func validPrefix(p string) bool {
	if len(p) > maxPrefixBytes {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] <= ' ' || p[i] > '~' {
			return false
		}
	}
	return true
}

// isDirect reports whether client talks to one server, so that a MULTI
// and an EXEC sent in its pipelines reach the same one.
func isDirect(client redis.UniversalClient) bool {
	_, ok := client.(*redis.Client)
	return ok
}

// Claim implements [store.Store]. A claim of a free key, a replay and a
// busy answer are one transaction of plain commands (SET … NX PX … GET,
// PEXPIRETIME, PTTL) judged by the server's clock; a key whose record is
// not live (a tombstone, a claim whose lease ran out, an outcome past its
// expiry) is taken over by a script, in a second round trip. Either way
// the key is kept for the lease plus [store.ClaimRetention], so that a
// holder whose lease ran out still completes as long as nobody claimed the
// key since. A Claim the client retries after a lost reply gets its own
// claim back, not "busy". A take-over of a claim with steps that ended
// without an outcome (its lease ran out, or it was released), of the same
// fingerprint, carries its steps ([store.Stepper]) in the same script.
func (s *Store) Claim(ctx context.Context, key, fp string, ttl time.Duration) (store.Record, bool, error) {
	const op = "claim"
	if err := engine.ValidateKey(key); err != nil {
		return store.Record{}, false, err
	}
	if err := engine.ValidateTTL(op, ttl); err != nil {
		return store.Record{}, false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return store.Record{}, false, err
	}
	done, released := s.turn(ctx, key, ttl)
	released = s.releases.take(key) || released
	rec, claimed, err := s.claim(ctx, key, fp, ttl, released)
	done(claimed, err)
	return rec, claimed, err
}

// claim claims key: by the claim script alone when the store knows the
// key was just released (its tombstone is there to take over: a handoff,
// or a release through this store), else by a transaction first.
func (s *Store) claim(ctx context.Context, key, fp string, ttl time.Duration, released bool) (store.Record, bool, error) {
	const op = "claim"
	token := claimToken()
	if s.wait.timeout > 0 {
		return s.claimAcked(ctx, key, fp, ttl, token)
	}
	ms := ttl.Milliseconds()
	if released {
		return s.claimScript(ctx, key, fp, ms, token)
	}
	keep := max(ms+store.ClaimRetention.Milliseconds(), s.stepMs+1)
	rk := any(s.redisKey(key))
	set := redis.NewCmd(ctx, "set", rk, claimValue(ms, keep, token, fp), "nx", "px", keep, "get")
	pexpiretime, pttl := readCmds(ctx, rk)
	vals, err := s.tx(ctx, op, set, pexpiretime, pttl)
	if err != nil {
		if redis.HasErrorPrefix(err, "OOM") {
			return s.claimOutOfMemory(ctx, key, err)
		}
		return store.Record{}, false, mapError(op, err)
	}
	cur, now, found, err := decodeRead(op, key, vals)
	switch {
	case err != nil:
		return store.Record{}, false, err
	case !found:
		// Set: the key was free, and its expiry is the claim's fence plus keep.
		at, ok := vals[1].(int64)
		f := at - keep
		if !ok || f < 0 || uint64(f) > uint64(idemkit.FenceMax) {
			return store.Record{}, false, replyError(op)
		}
		return store.Record{
			Key: key, Fingerprint: fp, State: store.StateClaimed, Fence: idemkit.Fence(f),
			CreatedAt: time.UnixMilli(f), ExpiresAt: time.UnixMilli(f + ms),
		}, true, nil
	case cur.live(now):
		// A replay, a busy answer, or this very claim, found again by a
		// transaction go-redis sent again after a lost reply.
		return cur.rec, cur.claim() && cur.token == token, nil
	}
	return s.claimScript(ctx, key, fp, ms, token)
}

// claimScript claims key by the claim script.
func (s *Store) claimScript(ctx context.Context, key, fp string, ms int64, token string) (store.Record, bool, error) {
	v, err := s.run(ctx, key, scriptClaim, fp, ms, token)
	if err != nil {
		return store.Record{}, false, mapError("claim", err)
	}
	return decodeClaim(key, v)
}

// claimOutOfMemory answers a claim that a server over its maxmemory
// refused: a live record is answered as usual (a replay or busy), so that
// only new claims are refused (with err).
func (s *Store) claimOutOfMemory(ctx context.Context, key string, err error) (store.Record, bool, error) {
	const op = "claim"
	cur, now, found, rerr := s.readOutOfMemory(ctx, op, key)
	if rerr == nil && found && cur.live(now) {
		return cur.rec, false, nil
	}
	return store.Record{}, false, mapError(op, err)
}

// decodeClaim decodes the claim script's reply: claimed, the record's
// value and its key's expiry, and for a take-over of an outcome that held
// a response, what it replaced.
func decodeClaim(key string, v any) (store.Record, bool, error) {
	const op = "claim"
	r, ok := v.([]any)
	if !ok || len(r) != 3 && len(r) != 5 {
		return store.Record{}, false, replyError(op)
	}
	claimed, ok1 := r[0].(int64)
	val, ok2 := r[1].(string)
	keep, ok3 := r[2].(int64)
	if !ok1 || !ok2 || !ok3 {
		return store.Record{}, false, replyError(op)
	}
	cur, err := parseStored(op, key, val, keep)
	if err != nil {
		return store.Record{}, false, err
	}
	rec := cur.rec
	if len(r) == 5 {
		fp, ok1 := r[3].(string)
		body, ok2 := r[4].(string)
		if claimed != 1 || !ok1 || !ok2 || body == "" {
			return store.Record{}, false, replyError(op)
		}
		rec.Replaced = &store.Record{Fingerprint: fp, Response: []byte(body)}
	}
	return rec, claimed == 1, nil
}

// Extend implements [store.Store]: one script.
func (s *Store) Extend(ctx context.Context, key string, fence idemkit.Fence, ttl time.Duration) (time.Time, bool, error) {
	const op = "extend"
	if err := engine.ValidateFenced(op, key, fence); err != nil {
		return time.Time{}, false, err
	}
	if err := engine.ValidateTTL(op, ttl); err != nil {
		return time.Time{}, false, err
	}
	n, err := s.write(ctx, scriptExtend, key, fenceArg(fence), ttl.Milliseconds())
	if err != nil || n == 0 {
		return time.Time{}, false, err
	}
	return time.UnixMilli(n), true, nil
}

// Complete implements [store.Store]: one script, which writes the outcome
// only while the record is the claim rec.Fence (even after its lease ran
// out), and notifies the key's watchers (see [Store.Watch]). A Complete
// retried after a lost reply, which finds this very outcome already
// written, reports ok.
func (s *Store) Complete(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	const op = "complete"
	if err := engine.ValidateComplete(rec, ttl); err != nil {
		return false, err
	}
	if len(rec.Response) > s.maxResponse {
		return false, engine.TooLarge(op, len(rec.Response), s.maxResponse)
	}
	return s.flag(ctx, scriptComplete, rec.Key, fenceArg(rec.Fence), ttl.Milliseconds(), outcomeForm(rec.State), rec.Fingerprint, rec.Response, s.notify)
}

// RecordStep implements [store.Stepper]: one script, which appends step to
// the claim (key, fence) while it holds exactly index steps, even after
// its lease ran out as long as nobody claimed the key since, and keeps
// the key at least keep from now (by the server's clock). A RecordStep
// retried after a lost reply, which finds this very step (name and result)
// recorded last under the fence, reports ok, as Complete does. With
// [WithWaitForReplicas] or [WithWaitForAOF] the step counts only once
// acknowledged, as a completion does, in the same round trip.
func (s *Store) RecordStep(ctx context.Context, key string, fence idemkit.Fence, index int, step store.Step, keep time.Duration) (bool, error) {
	if err := engine.ValidateStep(key, fence, index, step, keep); err != nil {
		return false, err
	}
	return s.flag(ctx, scriptStep, key, fenceArg(fence), index, step.Name, step.Result, keep.Milliseconds())
}

// Release implements [store.Store]: one script, which notifies the key's
// watchers and leaves a tombstone.
func (s *Store) Release(ctx context.Context, key string, fence idemkit.Fence) (bool, error) {
	const op = "release"
	if err := engine.ValidateFenced(op, key, fence); err != nil {
		return false, err
	}
	f := fenceArg(fence)
	ok, err := s.flag(ctx, scriptRelease, key, f, s.notify)
	if ok {
		s.releases.add(key)
		s.released(key, f)
	}
	return ok, err
}

// Get implements [store.Store] and [store.Records]: one transaction of
// plain commands (GET, PEXPIRETIME, PTTL), judged by the server's clock.
func (s *Store) Get(ctx context.Context, key string) (store.Record, bool, error) {
	const op = "get"
	if err := engine.ValidateKey(key); err != nil {
		return store.Record{}, false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return store.Record{}, false, err
	}
	cur, now, found, err := s.read(ctx, op, key)
	if err != nil || !found || !cur.live(now) {
		return store.Record{}, false, err
	}
	return cur.rec, true, nil
}

// Delete implements [store.Store] and [store.Records]: one script, which
// notifies the key's watchers when it ends a record and leaves a
// tombstone. A claim whose lease ran out is ended too (it can no longer
// complete), though only a live record is reported deleted.
func (s *Store) Delete(ctx context.Context, key string) (bool, error) {
	const op = "delete"
	if err := engine.ValidateKey(key); err != nil {
		return false, err
	}
	return s.flag(ctx, scriptDelete, key, s.notify)
}

// Put implements [store.Records]: one script that compares fences and
// writes (or refuses) atomically.
func (s *Store) Put(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	const op = "put"
	if err := engine.ValidateKey(rec.Key); err != nil {
		return false, err
	}
	if !rec.State.Done() {
		return false, idemkit.NewError(idemkit.CodeInvalidArgument, op, fmt.Sprintf("a put needs an outcome state (got %v)", rec.State), nil)
	}
	if rec.Fence > idemkit.FenceMax {
		return false, idemkit.NewError(idemkit.CodeInvalidArgument, op, "the fence exceeds idemkit.FenceMax", nil)
	}
	if err := engine.ValidateTTL(op, ttl); err != nil {
		return false, err
	}
	if len(rec.Response) > s.maxResponse {
		return false, engine.TooLarge(op, len(rec.Response), s.maxResponse)
	}
	return s.flag(ctx, scriptPut, rec.Key, fenceArg(rec.Fence), ttl.Milliseconds(), outcomeForm(rec.State), rec.Fingerprint, rec.Response)
}

// flag runs a script whose reply is 1 or 0.
func (s *Store) flag(ctx context.Context, sc *luaScript, key string, args ...any) (bool, error) {
	n, err := s.write(ctx, sc, key, args...)
	if err == nil && n > 1 {
		return false, replyError(sc.name)
	}
	return n == 1, err
}

// write runs a script whose reply is a number (0: refused). With a
// durability wait, an extension, a completion, a step and a put that
// wrote count only once acknowledged.
func (s *Store) write(ctx context.Context, sc *luaScript, key string, args ...any) (int64, error) {
	op := sc.name
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return 0, err
	}
	var (
		v   any
		err error
		ack *redis.Cmd
	)
	if s.wait.timeout > 0 && sc.acked {
		v, ack, err = s.runAcked(ctx, key, sc, args...)
	} else {
		v, err = s.run(ctx, key, sc, args...)
	}
	if err != nil {
		return 0, mapError(op, err)
	}
	n, ok := v.(int64)
	if !ok || n < 0 {
		return 0, replyError(op)
	}
	if n > 0 && ack != nil {
		if err := s.acked(op, ack); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// args returns the EVALSHA of sc on key's record with args.
func (s *Store) args(key string, sc *luaScript, args []any) []any {
	argv := make([]any, 0, 5+len(args))
	argv = append(argv, "evalsha", sc.sha, 1, s.redisKey(key), s.step)
	return append(argv, args...)
}

// run calls sc on key's record in one round trip, shared under load with
// other calls (see batcher): EVALSHA, and EVAL when the server does not
// have the script yet.
func (s *Store) run(ctx context.Context, key string, sc *luaScript, args ...any) (any, error) {
	argv := s.args(key, sc, args)
	cmd := redis.NewCmd(ctx, argv...)
	err := s.batch.do(ctx, cmd)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") { // nil first: HasErrorPrefix allocates
		argv[0], argv[1] = "eval", sc.src
		cmd = redis.NewCmd(ctx, argv...)
		err = s.batch.do(ctx, cmd)
	}
	if err != nil {
		return nil, err
	}
	return cmd.Val(), nil
}

// claimAcked is Claim with a durability wait: the claim script on a
// connection of its own to the key's master and, when it claimed, the
// wait on that connection. A claim not acknowledged in time is released.
func (s *Store) claimAcked(ctx context.Context, key, fp string, ttl time.Duration, token string) (store.Record, bool, error) {
	const op = "claim"
	conn, err := s.masterConn(ctx, key)
	if err != nil {
		return store.Record{}, false, mapError(op, err)
	}
	defer conn.Close()
	v, _, err := s.runOn(ctx, conn, key, scriptClaim, false, fp, ttl.Milliseconds(), token)
	if err != nil {
		s.stale(ctx, err)
		return store.Record{}, false, mapError(op, err)
	}
	rec, claimed, err := decodeClaim(key, v)
	if err != nil || !claimed {
		return rec, claimed, err
	}
	ack := s.waitCmd(ctx)
	err = conn.Process(ctx, ack)
	if err == nil {
		if err = s.acked(op, ack); err == nil {
			return rec, true, nil
		}
	} else {
		err = mapError(op, err)
	}
	// Not acknowledged: the work must not run on this claim. Give it back
	// on the same connection (the release needs no acknowledgement: one
	// lost in a failover leaves the claim to run out).
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	_, _, _ = s.runOn(rctx, conn, key, scriptRelease, false, fenceArg(rec.Fence), s.notify)
	cancel()
	return store.Record{}, false, err
}

// cleanupTimeout bounds the release of a claim that was not acknowledged.
const cleanupTimeout = 5 * time.Second

// waitCmd returns the wait the durability option asks for.
func (s *Store) waitCmd(ctx context.Context) *redis.Cmd {
	w := s.wait
	if w.aof {
		return redis.NewCmd(ctx, "waitaof", w.local, w.replicas, w.timeout.Milliseconds())
	}
	return redis.NewCmd(ctx, "wait", w.replicas, w.timeout.Milliseconds())
}

// acked checks the reply of waitCmd: ServiceUnavailable when the write
// was not acknowledged as asked in time.
func (s *Store) acked(op string, ack *redis.Cmd) error {
	w := s.wait
	var got string
	if w.aof {
		a, err := ack.Int64Slice()
		if err == nil && len(a) == 2 && a[0] >= int64(w.local) && a[1] >= int64(w.replicas) {
			return nil
		}
		got = fmt.Sprintf("fsyncs acknowledged %v of [%d %d]", a, w.local, w.replicas)
	} else {
		n, err := ack.Int64()
		if err == nil && n >= int64(w.replicas) {
			return nil
		}
		got = fmt.Sprintf("%d of %d replicas acknowledged", n, w.replicas)
	}
	detail := got + " the write within " + w.timeout.String()
	if op == "claim" {
		detail += "; the claim was released"
	}
	return idemkit.NewError(idemkit.CodeServiceUnavailable, op, detail, nil)
}

// runAcked runs the script for op on key's record on a connection of its
// own to the key's master, followed in the same round trip by the wait.
func (s *Store) runAcked(ctx context.Context, key string, sc *luaScript, args ...any) (any, *redis.Cmd, error) {
	conn, err := s.masterConn(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	v, ack, err := s.runOn(ctx, conn, key, sc, true, args...)
	if err != nil {
		s.stale(ctx, err)
	}
	return v, ack, err
}

// runOn runs the script for op on key's record on conn, followed in the
// same pipeline by the wait when wait is set: EVALSHA, and EVAL when the
// server does not have the script yet.
func (s *Store) runOn(ctx context.Context, conn *redis.Conn, key string, sc *luaScript, wait bool, args ...any) (any, *redis.Cmd, error) {
	argv := s.args(key, sc, args)
	var cmd, ack *redis.Cmd
	pipe := func() error {
		_, err := conn.Pipelined(ctx, func(p redis.Pipeliner) error {
			cmd = redis.NewCmd(ctx, argv...)
			_ = p.Process(ctx, cmd)
			if wait {
				ack = s.waitCmd(ctx)
				_ = p.Process(ctx, ack)
			}
			return nil
		})
		return err
	}
	err := pipe()
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		argv[0], argv[1] = "eval", sc.src
		err = pipe()
	}
	if cerr := cmd.Err(); cerr != nil {
		err = cerr // the script's error says more than the pipeline's
	}
	if err != nil {
		return nil, nil, err
	}
	return cmd.Val(), ack, nil
}

// masterConn returns a connection of its own to the master of key's
// record: WAIT and WAITAOF count the writes of one connection.
func (s *Store) masterConn(ctx context.Context, key string) (*redis.Conn, error) {
	if c, ok := s.client.(*redis.ClusterClient); ok {
		node, err := c.MasterForKey(ctx, s.redisKey(key))
		if err != nil {
			return nil, err
		}
		return node.Conn(), nil
	}
	return s.client.(*redis.Client).Conn(), nil // New accepts nothing else with the wait
}

// stale makes a cluster client reload its view of the cluster after an
// error on a connection of its own (a dead master, MOVED after a
// failover): those connections bypass the client's own redirections.
func (s *Store) stale(ctx context.Context, err error) {
	if c, ok := s.client.(*redis.ClusterClient); ok && err != nil && !errors.Is(err, context.Canceled) {
		c.ReloadState(ctx)
	}
}

// claimToken returns a new claim's token: 64 random bits (from the
// runtime's ChaCha8 generator), enough to tell a client's retry of a Claim
// from another request's claim of the same key.
func claimToken() string {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], rand.Uint64())
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// fenceArg is a fence as the records spell it: decimal, no leading zeros.
func fenceArg(f idemkit.Fence) string { return strconv.FormatUint(uint64(f), 10) }
