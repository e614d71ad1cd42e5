package middleware

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/store"
)

// Defaults of [New].
const (
	DefaultRecordTTL          = 24 * time.Hour
	DefaultLockTTL            = 10 * time.Second
	DefaultLockRetries        = 3
	DefaultBaseDelay          = 100 * time.Millisecond
	DefaultMaxDelay           = time.Second
	DefaultWaitBudget         = 2 * time.Second
	DefaultRecordWriteTimeout = 30 * time.Second
	DefaultOpTimeout          = 5 * time.Second
	DefaultNamespace          = "idempotency"
)

// Option configures [New].
type Option func(*config)

type config struct {
	recordTTL          time.Duration
	lockTTL            time.Duration
	lockRetries        int
	baseDelay          time.Duration
	maxDelay           time.Duration
	waitBudget         time.Duration
	recordWriteTimeout time.Duration
	opTimeout          time.Duration
	namespace          string
	now                func() time.Time
	logger             *slog.Logger
	hook               Hook
	hasher             lock.Hasher
	valueFingerprint   func(input any) (fingerprint.Fingerprint, error)
}

// WithRecordTTL sets how long an outcome is kept for replay. Default: 24 h.
func WithRecordTTL(d time.Duration) Option { return func(c *config) { c.recordTTL = d } }

// WithLockTTL sets the lease of the lock held while fn runs; it is renewed
// every third of it, so it bounds how long a crashed node blocks its key.
// Default: 10 s.
func WithLockTTL(d time.Duration) Option { return func(c *config) { c.lockTTL = d } }

// WithLockRetries bounds the lock attempts after the first that a duplicate
// makes when a back-off delay runs out. Default: 3.
func WithLockRetries(n int) Option { return func(c *config) { c.lockRetries = n } }

// WithBaseDelay sets the base of the back-off between lock attempts: the
// n-th delay is base·2^(n−1) + random(0, base), capped by the max delay.
// Default: 100 ms.
func WithBaseDelay(d time.Duration) Option { return func(c *config) { c.baseDelay = d } }

// WithMaxDelay caps one back-off delay. Default: 1 s.
func WithMaxDelay(d time.Duration) Option { return func(c *config) { c.maxDelay = d } }

// WithWaitBudget sets how long a duplicate waits for the first request to
// finish (and then replays its response) before it is told "in progress".
// Zero means one attempt: duplicates are refused at once. Default: 2 s.
// The lock retries bound the wait too on backends that cannot notify
// waiters of a release.
func WithWaitBudget(d time.Duration) Option { return func(c *config) { c.waitBudget = d } }

// WithRecordWriteTimeout bounds how long the guard keeps retrying a failed
// record write after fn ran, while it keeps renewing the lease. When it runs
// out (or the lease is lost first), the outcome is reported not recorded and
// the lock is left to run out. Default: 30 s.
func WithRecordWriteTimeout(d time.Duration) Option {
	return func(c *config) { c.recordWriteTimeout = d }
}

// WithOpTimeout bounds each backend call the guard makes on a context
// detached from the caller's (record writes, lock release). Default: 5 s.
func WithOpTimeout(d time.Duration) Option { return func(c *config) { c.opTimeout = d } }

// WithNamespace sets the prefix of the guard's lock and record keys
// ("<ns>:lock:{...}" and "<ns>:record:{...}"). Default: "idempotency".
func WithNamespace(ns string) Option { return func(c *config) { c.namespace = ns } }

// WithClock sets the clock for durations in outcomes and events. Record and
// lock expiry are judged by the backends' own clocks. Default: time.Now.
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// WithLogger sets the logger for failures that have no caller to return to
// (an outcome that could not be recorded, a failed release). Default:
// slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithHook sets the event hook. Default: none.
func WithHook(h Hook) Option { return func(c *config) { c.hook = h } }

// WithHasher sets how keys are hashed in events and logs. Default:
// lock.DefaultHasher() (HMAC-SHA-256 under a per-process secret); use
// lock.NewHMACHasher with a shared secret to correlate across nodes.
func WithHasher(h lock.Hasher) Option { return func(c *config) { c.hasher = h } }

// WithValueFingerprint sets how [Do] fingerprints its input. Default:
// fingerprint.Value (the SHA-256 of the input's canonical JSON). Adapters
// fingerprint their requests themselves and pass the result to Execute.
func WithValueFingerprint(f func(input any) (fingerprint.Fingerprint, error)) Option {
	return func(c *config) { c.valueFingerprint = f }
}

// Guard runs work at most once per key across every process that shares its
// store and locker. See [Guard.Execute].
type Guard struct {
	store    store.Store
	locker   lock.Locker
	combiner store.Combiner // the store, when it can fold lock operations into its own round trips
	cfg      config
	lockOpts []lock.Option // the lock options every call shares
}

// New returns a guard that keeps outcomes in s and serialises work with l.
// It validates its options and returns an error (InvalidArgument) for a bad
// one; nothing panics on the request path.
func New(s store.Store, l lock.Locker, opts ...Option) (*Guard, error) {
	if s == nil || l == nil {
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "new", "a store and a locker are required", nil)
	}
	cfg := config{
		recordTTL: DefaultRecordTTL, lockTTL: DefaultLockTTL, lockRetries: DefaultLockRetries,
		baseDelay: DefaultBaseDelay, maxDelay: DefaultMaxDelay, waitBudget: DefaultWaitBudget,
		recordWriteTimeout: DefaultRecordWriteTimeout, opTimeout: DefaultOpTimeout,
		namespace: DefaultNamespace, now: time.Now, valueFingerprint: fingerprint.Value,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	if cfg.hasher == nil {
		cfg.hasher = lock.DefaultHasher()
	}
	bad := func(detail string) error { return idemkit.NewError(idemkit.CodeInvalidArgument, "new", detail, nil) }
	switch {
	case cfg.recordTTL < time.Millisecond:
		return nil, bad("record TTL must be at least 1ms")
	case cfg.lockTTL < 3*time.Millisecond:
		return nil, bad("lock TTL must be at least 3ms")
	case cfg.lockRetries < 0:
		return nil, bad("lock retries must not be negative")
	case cfg.baseDelay <= 0 || cfg.maxDelay <= 0:
		return nil, bad("delays must be positive")
	case cfg.waitBudget < 0:
		return nil, bad("wait budget must not be negative")
	case cfg.recordWriteTimeout <= 0 || cfg.opTimeout <= 0:
		return nil, bad("timeouts must be positive")
	case cfg.namespace == "" || len(cfg.namespace) > 64:
		return nil, bad("namespace must have 1 to 64 bytes")
	case cfg.now == nil || cfg.valueFingerprint == nil:
		return nil, bad("clock and value fingerprint must not be nil")
	}
	g := &Guard{store: s, locker: l, cfg: cfg}
	if c, ok := s.(store.Combiner); ok && c.Combines(l) {
		g.combiner = c
	}
	g.lockOpts = []lock.Option{
		lock.WithTTL(cfg.lockTTL),
		lock.WithRetryDelay(cfg.baseDelay),
		lock.WithMaxDelay(cfg.maxDelay),
		lock.WithBackoff(lock.BackoffExponential),
		lock.WithJitter(lock.JitterAdd),
		lock.WithMaxRetries(cfg.lockRetries),
		lock.WithReleaseTimeout(cfg.opTimeout),
		lock.WithLogger(cfg.logger),
	}
	return g, nil
}

// Verdict is what fn asks the guard to do with its result.
type Verdict uint8

const (
	// Record stores the result as completed: retries replay it.
	Record Verdict = iota
	// Forget stores nothing and releases the lock: a retry runs fn again.
	// For outcomes that provably changed nothing or that must not stick
	// (by default an HTTP 5xx).
	Forget
	// RecordNotReplayable stores that fn ran without its result (too large,
	// streamed, hijacked): retries are told so and fn never runs again
	// under this key.
	RecordNotReplayable
)

// Result is what fn returns: its response, encoded by the caller, and what
// to do with it.
type Result struct {
	Value   []byte
	Verdict Verdict
}

// Func is the work the guard runs at most once per key. Its ctx is
// cancelled when the caller's is, or when the lock's lease is lost.
type Func func(ctx context.Context) (Result, error)

// Outcome is the answer of [Guard.Execute].
type Outcome struct {
	// Replayed is true when the response came from the record and fn did
	// not run in this call.
	Replayed bool
	// Value is fn's response (executed) or the stored one (replayed).
	Value []byte
	// Recorded, for an execution, reports whether the outcome was stored.
	// False after a Forget verdict, or when the lease was lost or the store
	// kept failing (see [EventNotRecorded]).
	Recorded bool
	// Fence is the fence fn ran under, or that wrote the replayed record.
	Fence lock.Fence
	// CreatedAt, for a replay, is when the outcome was first recorded.
	CreatedAt time.Time
}

// CallOption adjusts one call to Execute.
type CallOption func(*callConfig)

type callConfig struct {
	waitBudget time.Duration
}

// WaitBudget overrides the guard's wait budget for one call; zero refuses
// a duplicate at once.
func WaitBudget(d time.Duration) CallOption {
	return func(c *callConfig) { c.waitBudget = max(d, 0) }
}

// Execute runs fn at most once for key, across every guard that shares this
// guard's store and locker, and answers every later call with the same key
// and fingerprint with fn's recorded response.
//
// The algorithm:
//  1. Read the record. Completed with the same fingerprint: replay it,
//     without taking the lock. Another fingerprint: [ErrMismatch].
//     Executed-not-replayable: [ErrNotReplayable].
//  2. Take the lock, waiting up to the wait budget for a running duplicate
//     (with capped, jittered back-off, or woken by the release); past it:
//     [ErrInProgress] ([*LockAcquisitionError]).
//  3. Read the record again under the lock: a duplicate that just finished
//     is replayed.
//  4. Run fn, renewing the lease while it runs. An error, a panic or a
//     cancellation releases the lock and stores nothing; the error (or
//     panic) goes on to the caller.
//  5. Store the result, fenced by the lease's fence, on a context detached
//     from ctx: a client that went away does not lose the record. A failed
//     write is retried with back-off while the lease is renewed; if the
//     lease is lost first (or the write budget runs out), the outcome is
//     reported not recorded and the lock is left to run out.
//  6. Release the lock.
//
// A replay costs one store read; a first execution one acquire, two store
// reads, one store write and one release — three round trips in all when
// the store is a [store.Combiner] for the locker (the double check rides on
// the acquire, the release on the record write). The fingerprint's algorithm is
// part of it: a record written under another algorithm is never a mismatch.
//
// Backend failures give [ErrUnavailable] ([*UnavailableError]); the guard
// never runs fn when it cannot tell whether fn already ran.
func (g *Guard) Execute(ctx context.Context, key string, fp fingerprint.Fingerprint, fn Func, opts ...CallOption) (Outcome, error) {
	c := g.newCall(key, opts)
	if key == "" {
		return Outcome{}, fmt.Errorf("%w: the key is empty", ErrInvalidKey)
	}
	base := g.base(key)
	recordKey := g.cfg.namespace + ":record:{" + base + "}"

	// 1. Replays never take the lock.
	rec, found, err := g.store.Get(ctx, recordKey)
	if err != nil {
		return Outcome{}, c.backend("get", err)
	}
	if found {
		return c.answer(rec, fp)
	}

	// 2. The lock. A combining store reads the record in the same round
	// trip as the acquire. A duplicate that finds the lock held looks for
	// the record again before it waits on: once the first request has
	// recorded its outcome, the duplicate replays it without the lock.
	var stats lock.Stats
	var pre struct {
		rec   store.Record
		found bool
	}
	tries := 0
	acquire := func(ctx context.Context, lockKey string, ttl time.Duration) (lock.Lease, bool, error) {
		tries++
		var (
			lease lock.Lease
			ok    bool
			err   error
		)
		if g.combiner != nil {
			var rec store.Record
			var found bool
			lease, ok, rec, found, err = g.combiner.AcquireGet(ctx, lockKey, ttl, recordKey)
			if ok {
				pre.rec, pre.found = rec, found
			}
		} else {
			lease, ok, err = g.locker.Acquire(ctx, lockKey, ttl)
		}
		if err != nil || ok || tries == 1 {
			return lease, ok, err // step 1 has just read the record: no second look yet
		}
		if rec, found, gerr := g.store.Get(ctx, recordKey); gerr == nil && found {
			return lock.Lease{}, false, &recordAppeared{rec}
		}
		return lease, false, nil
	}
	opts2 := append(g.lockOptions(c, &stats), lock.WithAcquireFunc(acquire))
	held, err := lock.Hold(ctx, g.locker, g.cfg.namespace+":lock:{"+base+"}", opts2...)
	c.attempts, c.waited = stats.Attempts, stats.Waited
	var appeared *recordAppeared
	if errors.As(err, &appeared) {
		return c.answer(appeared.rec, fp)
	}
	if err != nil {
		switch idemkit.CodeOf(err) {
		case idemkit.CodeAcquisitionTimeout:
			e := &LockAcquisitionError{Attempts: stats.Attempts, Waited: stats.Waited, Err: err}
			c.emit(Event{Kind: EventInProgress, Err: e})
			return Outcome{}, e
		case idemkit.CodeAborted:
			return Outcome{}, err
		}
		return Outcome{}, c.backend("lock", err)
	}

	// 3. The double check, under the lock.
	if g.combiner != nil {
		rec, found = pre.rec, pre.found
	} else {
		rec, found, err = g.store.Get(ctx, recordKey)
	}
	if err != nil {
		held.Release()
		return Outcome{}, c.backend("get", err)
	}
	if found {
		held.Release()
		return c.answer(rec, fp)
	}

	// 4. fn.
	fence := held.Lease().Fence
	res, err := g.run(held, fn)
	if err != nil {
		held.Release()
		c.emit(Event{Kind: EventExecuted, Fence: fence, Err: err})
		return Outcome{Value: res.Value, Fence: fence}, err
	}
	out := Outcome{Value: res.Value, Fence: fence}
	if res.Verdict == Forget {
		held.Release()
		c.emit(Event{Kind: EventExecuted, Fence: fence})
		return out, nil
	}

	// 5. The record.
	rec = store.Record{Key: recordKey, Fingerprint: fp.String(), State: store.StateCompleted, Response: res.Value, Fence: fence}
	if res.Verdict == RecordNotReplayable {
		rec.State, rec.Response = store.StateNotReplayable, nil
	}
	if g.combiner != nil && held.Lost() == nil {
		// One round trip for the record and the release.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.opTimeout)
		stored, _, err := g.combiner.PutRelease(pctx, rec, g.cfg.recordTTL, held.Lease())
		cancel()
		if err == nil {
			held.Abandon() // released by the store: only stop renewing
			if !stored {
				lost := fmt.Errorf("%w: the record already carries a higher fence", lock.ErrLeaseLost)
				c.emit(Event{Kind: EventLeaseLost, Fence: fence, Err: lost})
				c.notRecorded(rec, lost)
			}
			out.Recorded = stored
			c.emit(Event{Kind: EventExecuted, Fence: fence, Recorded: stored})
			return out, nil
		}
		// Fall back to separate writes, retried while the lease holds.
	}
	out.Recorded = g.record(ctx, held, rec, c)
	// 6. The release, unless the outcome is unrecorded: then a retry must
	// not run fn again before the lease runs out.
	if out.Recorded {
		held.Release()
	} else {
		held.Abandon()
	}
	c.emit(Event{Kind: EventExecuted, Fence: fence, Recorded: out.Recorded})
	return out, nil
}

// recordAppeared stops the wait for the lock: the record it was waiting for
// is there.
type recordAppeared struct{ rec store.Record }

func (*recordAppeared) Error() string {
	return "idempotency: the record appeared while waiting for the lock"
}

// run calls fn with the held lease's context. A panic releases the lock and
// goes on.
func (g *Guard) run(held *lock.Held, fn Func) (res Result, err error) {
	panicked := true
	defer func() {
		if panicked {
			held.Release()
		}
	}()
	res, err = fn(held.Context())
	panicked = false
	return res, err
}

// record writes rec, retrying failures with back-off while the lease holds.
// It reports whether the record landed.
func (g *Guard) record(ctx context.Context, held *lock.Held, rec store.Record, c *call) bool {
	detached := context.WithoutCancel(ctx)
	deadline := g.cfg.now().Add(g.cfg.recordWriteTimeout)
	delay := g.cfg.baseDelay
	for attempt := 1; ; attempt++ {
		if lost := held.Lost(); lost != nil {
			c.emit(Event{Kind: EventLeaseLost, Fence: rec.Fence, Err: lost})
			c.notRecorded(rec, lost)
			return false
		}
		pctx, cancel := context.WithTimeout(detached, g.cfg.opTimeout)
		ok, err := g.store.Put(pctx, rec, g.cfg.recordTTL)
		cancel()
		switch {
		case err == nil && ok:
			return true
		case err == nil:
			// A record with a higher fence is there: a newer holder took
			// over after this lease ran out.
			lost := fmt.Errorf("%w: the record already carries a higher fence", lock.ErrLeaseLost)
			c.emit(Event{Kind: EventLeaseLost, Fence: rec.Fence, Err: lost})
			c.notRecorded(rec, lost)
			return false
		case errors.Is(err, store.ErrTooLarge) && rec.State == store.StateCompleted:
			// The response does not fit: record that fn ran instead.
			rec.State, rec.Response = store.StateNotReplayable, nil
			continue
		case idemkit.CodeOf(err) == idemkit.CodeInvalidArgument:
			c.backend("put", err)
			c.notRecorded(rec, err)
			return false
		}
		c.emit(Event{Kind: EventBackendError, Fence: rec.Fence, Err: &UnavailableError{Op: "put", Err: err}})
		if !g.cfg.now().Add(delay).Before(deadline) {
			c.notRecorded(rec, fmt.Errorf("gave up after %d attempts: %w", attempt, err))
			return false
		}
		time.Sleep(delay)
		delay = min(2*delay, g.cfg.maxDelay)
	}
}

// lockOptions are the lock.Hold options of one call: the shared ones, the
// call's wait budget and its stats.
func (g *Guard) lockOptions(c *call, stats *lock.Stats) []lock.Option {
	opts := make([]lock.Option, len(g.lockOpts), len(g.lockOpts)+3)
	copy(opts, g.lockOpts)
	return append(opts, lock.WithTimeout(c.waitBudget), lock.WithStats(stats))
}

// base derives the part of the record and lock keys ("<ns>:record:{<base>}",
// "<ns>:lock:{<base>}") that stands for a caller's (scoped) key. Keys that
// are long, not printable ASCII or hold braces are hashed, so that every
// backend can store them, the lock key stays within the lock layer's limit,
// and the braces form a Redis hash tag that puts a key's lock and record on
// one cluster node.
func (g *Guard) base(key string) string {
	return lock.StorageKey(key, 400, plainASCII)
}

func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e || s[i] == '{' || s[i] == '}' {
			return false
		}
	}
	return true
}

// call carries one Execute call's state for its events.
type call struct {
	g          *Guard
	keyHash    string
	key        string
	start      time.Time
	waitBudget time.Duration
	attempts   int
	waited     time.Duration
}

func (g *Guard) newCall(key string, opts []CallOption) *call {
	c := &call{g: g, key: key, start: g.cfg.now(), waitBudget: g.cfg.waitBudget}
	for _, o := range opts {
		cc := callConfig{waitBudget: c.waitBudget} // per option, so no call without options allocates it
		o(&cc)
		c.waitBudget = cc.waitBudget
	}
	return c
}

// answer turns a found record into the call's result.
func (c *call) answer(rec store.Record, fp fingerprint.Fingerprint) (Outcome, error) {
	if same, comparable := compareStored(rec.Fingerprint, fp); comparable && !same {
		e := &MismatchError{Stored: rec.Fingerprint, Got: fp.String()}
		c.emit(Event{Kind: EventMismatch, Fence: rec.Fence, Err: e})
		return Outcome{}, e
	}
	if rec.State == store.StateNotReplayable {
		e := &NotReplayableError{CreatedAt: rec.CreatedAt, Fence: rec.Fence}
		c.emit(Event{Kind: EventNotReplayable, Fence: rec.Fence, Err: e})
		return Outcome{}, e
	}
	c.emit(Event{Kind: EventReplayed, Fence: rec.Fence})
	return Outcome{Replayed: true, Value: rec.Response, Fence: rec.Fence, CreatedAt: rec.CreatedAt}, nil
}

// compareStored compares a stored fingerprint (in its string form) with
// fp, like fingerprint.Fingerprint.Compare, without allocating in the
// common case of equal algorithms.
func compareStored(stored string, fp fingerprint.Fingerprint) (same, comparable bool) {
	alg := fp.Alg()
	if alg == "" || len(stored) != len(alg)+1+64 || stored[:len(alg)] != alg || stored[len(alg)] != ':' {
		s, err := fingerprint.Parse(stored)
		if err != nil {
			return false, false // unreadable: never a mismatch
		}
		return s.Compare(fp)
	}
	var hexSum [64]byte
	sum := fp.Sum()
	hex.Encode(hexSum[:], sum[:])
	return stored[len(alg)+1:] == string(hexSum[:]), true
}

// backend wraps a backend failure, reports it and returns it. An ended
// caller ctx is returned as it is: it is the caller's doing, not the
// backend's.
func (c *call) backend(op string, err error) error {
	switch idemkit.CodeOf(err) {
	case idemkit.CodeAborted:
		return err
	}
	e := &UnavailableError{Op: op, Err: err}
	c.emit(Event{Kind: EventBackendError, Err: e})
	return e
}

// notRecorded reports an outcome that could not be recorded.
func (c *call) notRecorded(rec store.Record, cause error) {
	c.emit(Event{Kind: EventNotRecorded, Fence: rec.Fence, Err: cause})
	c.g.cfg.logger.Error("idempotency: the outcome could not be recorded; the lock is left to run out, and a retry after that may run the work again",
		slog.String("key_hash", c.hash()), slog.String("fence", rec.Fence.String()), slog.String("error", cause.Error()))
}

func (c *call) hash() string {
	if c.keyHash == "" {
		c.keyHash = c.g.cfg.hasher.Hash(c.key)
	}
	return c.keyHash
}

// emit completes e and hands it to the hook.
func (c *call) emit(e Event) {
	h := c.g.cfg.hook
	if h == nil {
		return
	}
	e.KeyHash = c.hash()
	e.Attempts, e.Waited = c.attempts, c.waited
	e.Duration = c.g.cfg.now().Sub(c.start)
	defer func() { _ = recover() }()
	h.IdempotencyEvent(e)
}
