package redisstore

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/store"
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
	// listenerIdle and healthInterval, which tests shorten.
	listenerIdle, healthInterval time.Duration
}

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

// Store is the guard's backend on Redis: a [store.Store] whose records
// carry their own lease, a [store.Watcher] that wakes waiting duplicates
// by pub/sub, and the fenced [store.Records] for a composition with a
// lock. It works on a single node, through Sentinel (a failover client)
// and on Redis Cluster. It is safe for concurrent use.
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
	watch  watching
}

var (
	_ store.Store   = (*Store)(nil)
	_ store.Records = (*Store)(nil)
	_ store.Watcher = (*Store)(nil)
)

// New returns a store on client. It does no I/O.
//
// The client must bound its commands by the caller's ctx: a
// [*redis.Client] (also from redis.NewFailoverClient), [*redis.ClusterClient]
// (also from redis.NewFailoverClusterClient) or [*redis.Ring] must be built
// with ContextTimeoutEnabled: true in its options, or New refuses it
// (InvalidArgument). Without it go-redis ignores ctx deadlines, and a
// stalled server holds every call for ReadTimeout × (MaxRetries + 1)
// instead of the guard's op timeout. Other [redis.UniversalClient]
// implementations are taken as they are: they must honour ctx themselves.
//
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
	cfg := config{maxResponse: maxResponseBytes, listenerIdle: listenerIdle, healthInterval: healthInterval}
	for _, o := range opts {
		o(&cfg)
	}
	if !validPrefix(cfg.prefix) {
		return nil, bad(fmt.Sprintf("the key prefix must have at most %d bytes of printable ASCII without spaces", maxPrefixBytes))
	}
	if cfg.maxResponse < 1 || cfg.maxResponse > maxResponseBytes {
		return nil, bad(fmt.Sprintf("max response bytes must be between 1 and %d", maxResponseBytes))
	}
	return &Store{
		client: client, prefix: cfg.prefix, maxResponse: cfg.maxResponse, notify: notifyCommand(client),
		watch: watching{idle: cfg.listenerIdle, health: cfg.healthInterval},
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

// Claim implements [store.Store]: one script, which judges the record by
// the server's clock (TIME). A new claim's fence is max(previous fence + 1,
// TIME in Unix ms), and its key is kept for the lease plus
// [store.ClaimRetention], so that a holder whose lease ran out still
// completes as long as nobody claimed the key since. A Claim the client
// retries after a lost reply gets its own claim back, not "busy".
func (s *Store) Claim(ctx context.Context, key, fp string, ttl time.Duration) (store.Record, bool, error) {
	const op = "claim"
	if err := store.ValidateKey(key); err != nil {
		return store.Record{}, false, err
	}
	if err := store.ValidateTTL(op, ttl); err != nil {
		return store.Record{}, false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return store.Record{}, false, err
	}
	v, err := s.run(ctx, key, op, fp, ttl.Milliseconds(), claimToken())
	if err != nil {
		return store.Record{}, false, mapError(op, err)
	}
	r, ok := v.([]any)
	if !ok || len(r) != 2 {
		return store.Record{}, false, replyError(op)
	}
	claimed, ok := r[0].(int64)
	if !ok {
		return store.Record{}, false, replyError(op)
	}
	rec, found, err := decodeRecord(op, key, r[1])
	if err != nil || !found {
		return store.Record{}, false, replyError(op)
	}
	return rec, claimed == 1, nil
}

// Extend implements [store.Store]: one script.
func (s *Store) Extend(ctx context.Context, key string, fence lock.Fence, ttl time.Duration) (bool, error) {
	const op = "extend"
	if err := store.ValidateFenced(op, key, fence); err != nil {
		return false, err
	}
	if err := store.ValidateTTL(op, ttl); err != nil {
		return false, err
	}
	return s.flag(ctx, op, key, fenceArg(fence), ttl.Milliseconds())
}

// Complete implements [store.Store]: one script, which writes the outcome
// only while the record is the claim rec.Fence (even after its lease ran
// out), and notifies the key's watchers (see [Store.Watch]). The record is
// kept for ttl (and never removed before the server's clock passes its
// fence). A Complete retried after a lost reply, which finds this very
// outcome already written, reports ok.
func (s *Store) Complete(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	const op = "complete"
	if err := store.ValidateComplete(rec, ttl); err != nil {
		return false, err
	}
	if len(rec.Response) > s.maxResponse {
		return false, store.TooLarge(op, len(rec.Response), s.maxResponse)
	}
	return s.flag(ctx, op, rec.Key, fenceArg(rec.Fence), ttl.Milliseconds(), stateName(rec.State), rec.Fingerprint, rec.Response, s.notify)
}

// Release implements [store.Store]: one script, which notifies the key's
// watchers. The claim becomes a tombstone (its fence only, invisible,
// claimable at once) until the server's clock passes its fence, or is
// deleted at once when it already has.
func (s *Store) Release(ctx context.Context, key string, fence lock.Fence) (bool, error) {
	const op = "release"
	if err := store.ValidateFenced(op, key, fence); err != nil {
		return false, err
	}
	return s.flag(ctx, op, key, fenceArg(fence), s.notify)
}

// Get implements [store.Store] and [store.Records]: one script, which
// judges expiry by the server's clock.
func (s *Store) Get(ctx context.Context, key string) (store.Record, bool, error) {
	const op = "get"
	if err := store.ValidateKey(key); err != nil {
		return store.Record{}, false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return store.Record{}, false, err
	}
	v, err := s.run(ctx, key, op)
	if err != nil {
		return store.Record{}, false, mapError(op, err)
	}
	return decodeRecord(op, key, v)
}

// Delete implements [store.Store] and [store.Records]: one script, which
// notifies the key's watchers when it ends a record. The record becomes a
// tombstone like a released claim; a claim whose lease ran out is ended
// too (it can no longer complete), though only a live record is reported
// deleted.
func (s *Store) Delete(ctx context.Context, key string) (bool, error) {
	const op = "delete"
	if err := store.ValidateKey(key); err != nil {
		return false, err
	}
	return s.flag(ctx, op, key, s.notify)
}

// Put implements [store.Records]: one script that compares fences and
// writes (or refuses) atomically.
func (s *Store) Put(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	const op = "put"
	if err := store.ValidateKey(rec.Key); err != nil {
		return false, err
	}
	if !rec.State.Done() {
		return false, idemkit.NewError(idemkit.CodeInvalidArgument, op, fmt.Sprintf("a put needs an outcome state (got %v)", rec.State), nil)
	}
	if rec.Fence > lock.FenceMax {
		return false, idemkit.NewError(idemkit.CodeInvalidArgument, op, "the fence exceeds lock.FenceMax", nil)
	}
	if err := store.ValidateTTL(op, ttl); err != nil {
		return false, err
	}
	if len(rec.Response) > s.maxResponse {
		return false, store.TooLarge(op, len(rec.Response), s.maxResponse)
	}
	return s.flag(ctx, op, rec.Key, fenceArg(rec.Fence), ttl.Milliseconds(), stateName(rec.State), rec.Fingerprint, rec.Response)
}

// flag runs an operation whose reply is 1 or 0.
func (s *Store) flag(ctx context.Context, op, key string, args ...any) (bool, error) {
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return false, err
	}
	v, err := s.run(ctx, key, op, args...)
	if err != nil {
		return false, mapError(op, err)
	}
	n, ok := v.(int64)
	if !ok || n < 0 || n > 1 {
		return false, replyError(op)
	}
	return n == 1, nil
}

// run calls the script for op on key's record: EVALSHA, and EVAL when the
// server does not have the script yet.
func (s *Store) run(ctx context.Context, key, op string, args ...any) (any, error) {
	argv := make([]any, 0, 1+len(args))
	argv = append(append(argv, op), args...)
	return script.Run(ctx, s.client, []string{s.redisKey(key)}, argv...).Result()
}

// claimToken returns a new claim's token: 64 random bits (from the
// runtime's ChaCha8 generator), enough to tell a client's retry of a Claim
// from another request's claim of the same key.
func claimToken() string {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], rand.Uint64())
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// The states as the hash spells them.
var stateNames = [...]string{
	store.StateClaimed:       "claimed",
	store.StateCompleted:     "completed",
	store.StateNotReplayable: "not-replayable",
}

func stateName(st store.State) string { return stateNames[st] }

func parseState(s string) store.State {
	for st, name := range stateNames {
		if name != "" && name == s {
			return store.State(st)
		}
	}
	return 0
}

// decodeRecord decodes a record reply: an empty array when there is none,
// else state, fence, created, expires, fingerprint, response.
func decodeRecord(op, key string, v any) (store.Record, bool, error) {
	r, ok := v.([]any)
	if !ok {
		return store.Record{}, false, replyError(op)
	}
	if len(r) == 0 {
		return store.Record{}, false, nil
	}
	if len(r) != 6 {
		return store.Record{}, false, replyError(op)
	}
	st, ok1 := r[0].(string)
	fence, ok2 := r[1].(int64)
	created, ok3 := r[2].(int64)
	expires, ok4 := r[3].(int64)
	fp, ok5 := r[4].(string)
	body, ok6 := r[5].(string)
	state := parseState(st)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || !state.Valid() || fence < 0 {
		return store.Record{}, false, idemkit.NewError(idemkit.CodeInternal, op, "a malformed record in Redis", nil)
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

// fenceArg is a fence as the hash spells it: decimal, no leading zeros.
func fenceArg(f lock.Fence) string { return strconv.FormatUint(uint64(f), 10) }
