package middleware

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/fingerprint"
	"github.com/idemkit/idemkit/store"
)

// The defaults of [New], documented on the options.
const (
	defaultRecordTTL          = 24 * time.Hour
	defaultLeaseTTL           = 10 * time.Second
	defaultWaitBudget         = 2 * time.Second
	defaultRecordWriteTimeout = 30 * time.Second
	defaultOpTimeout          = 5 * time.Second
	defaultNamespace          = "idempotency"
)

// eventHashLabel keys the hashes of keys and scopes in events when the
// guard has no secret (see WithSecret).
const eventHashLabel = "idemkit event hash v1"

// defaultBackoff is documented on WithBackoff.
var defaultBackoff = idemkit.Backoff{Base: 25 * time.Millisecond, Max: 250 * time.Millisecond}

// Option configures [New].
type Option func(*config)

type config struct {
	recordTTL          time.Duration
	leaseTTL           time.Duration
	backoff            idemkit.Backoff
	waitBudget         time.Duration
	recordWriteTimeout time.Duration
	opTimeout          time.Duration
	namespace          string
	logger             *slog.Logger
	failureLogInterval time.Duration
	hooks              []Hook
	secret             []byte // nil: none given
	secretSet          bool
	hasher             idemkit.Hasher // of the keys in events
	bindingKey         []byte         // of the hashes of bound credentials
	valueFingerprint   func(input any) (fingerprint.Fingerprint, error)
}

// WithRecordTTL sets how long an outcome is kept for replay. Default: 24 h.
func WithRecordTTL(d time.Duration) Option { return func(c *config) { c.recordTTL = d } }

// WithLeaseTTL sets the lease of the claim held while fn runs, extended
// every third of it: it bounds how long a crashed node blocks its key.
// Default: 10 s.
func WithLeaseTTL(d time.Duration) Option { return func(c *config) { c.leaseTTL = d } }

// WithBackoff sets the back-off between a waiting duplicate's claims and
// between retries of a failed completion. Default: idemkit.Backoff{Base:
// 25 ms, Max: 250 ms}.
func WithBackoff(b idemkit.Backoff) Option { return func(c *config) { c.backoff = b } }

// WithWaitBudget sets how long a duplicate waits for the first request to
// finish before it is told "in progress": the real bound, not a retry
// count. Zero refuses duplicates at once. Default: 2 s.
func WithWaitBudget(d time.Duration) Option { return func(c *config) { c.waitBudget = d } }

// WithRecordWriteTimeout bounds how long a failed completion is retried
// (while the lease is extended); then the outcome is reported not
// recorded and the claim left to run out. Default: 30 s.
func WithRecordWriteTimeout(d time.Duration) Option {
	return func(c *config) { c.recordWriteTimeout = d }
}

// WithOpTimeout bounds each backend call the guard makes: a stalled backend
// is an [ErrUnavailable] within it, never a hang. Default: 5 s.
func WithOpTimeout(d time.Duration) Option { return func(c *config) { c.opTimeout = d } }

// WithNamespace sets the prefix of the record keys
// ("<namespace>:<scope>:<key>"): guards with different namespaces never
// share a record. 1 to 64 bytes without ':'. Default: "idempotency".
func WithNamespace(ns string) Option { return func(c *config) { c.namespace = ns } }

// WithLogger sets the logger for why the backend cannot serve
// (rate-limited, see [WithFailureLogInterval]), a work's transaction that
// failed at its commit, and failures with no caller to return to (an
// unrecorded outcome, a failed release); it gets the call's ctx. Default:
// slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithFailureLogInterval sets how often a backend failure is logged: each
// cause at once, then at most once per interval with a count. Zero logs
// every one. Default: 1 min.
func WithFailureLogInterval(d time.Duration) Option {
	return func(c *config) { c.failureLogInterval = d }
}

// WithHook adds a hook that observes every call (see [Hook]); hooks are
// called in the order given. A nil hook is ignored. Default: none.
func WithHook(h Hook) Option {
	return func(c *config) {
		if h != nil {
			c.hooks = append(c.hooks, h)
		}
	}
}

// WithSecret sets a secret, at least 16 bytes, that every node shares: it
// keys the hashes of bound credentials ([Credentials]) and of keys and
// scopes in events (idemkit.NewHMACHasher(secret).Hash(key)). Nodes with
// different secrets refuse each other's retries as credentials mismatches.
// Default: none: fixed labels instead (see docs/guard.md for what that
// exposes).
func WithSecret(secret []byte) Option {
	return func(c *config) { c.secret, c.secretSet = append([]byte(nil), secret...), true }
}

// WithValueFingerprint sets how [Do] fingerprints its input. Default:
// fingerprint.Value.
func WithValueFingerprint(f func(input any) (fingerprint.Fingerprint, error)) Option {
	return func(c *config) { c.valueFingerprint = f }
}

// Guard runs work at most once per key across every process that shares its
// backend. See [Guard.Execute].
type Guard struct {
	store    store.Store
	cfg      config
	failures failureLog
	renewals renewals  // of the leases of the calls under way
	binders  sync.Pool // of *binder, for bound calls

	flightsMu sync.Mutex
	flights   map[flightKey]*flight // the reclaims on their way (reclaim)
}

// New returns a guard that keeps claims and outcomes in s, or an
// InvalidArgument error for a bad or nil option. The adapters refuse a
// Guard not made by New.
func New(s store.Store, opts ...Option) (*Guard, error) {
	if s == nil {
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "new", "a store is required", nil)
	}
	cfg := config{
		recordTTL: defaultRecordTTL, leaseTTL: defaultLeaseTTL, backoff: defaultBackoff,
		waitBudget: defaultWaitBudget, recordWriteTimeout: defaultRecordWriteTimeout, opTimeout: defaultOpTimeout,
		namespace: defaultNamespace, valueFingerprint: fingerprint.Value, failureLogInterval: defaultFailureLogInterval,
	}
	bad := func(detail string) error { return idemkit.NewError(idemkit.CodeInvalidArgument, "new", detail, nil) }
	for _, o := range opts {
		if o == nil {
			return nil, bad("an option is nil; remove it, or pass the option it was meant to be")
		}
		o(&cfg)
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	switch {
	case cfg.secretSet && len(cfg.secret) < 16:
		return nil, bad("the secret must have at least 16 bytes")
	case cfg.recordTTL < time.Millisecond:
		return nil, bad("record TTL must be at least 1ms")
	case cfg.leaseTTL < 3*time.Millisecond:
		return nil, bad("lease TTL must be at least 3ms")
	case !cfg.backoff.Valid():
		return nil, bad("back-off delays must be positive, the maximum at least the base")
	case cfg.waitBudget < 0:
		return nil, bad("wait budget must not be negative")
	case cfg.recordWriteTimeout <= 0 || cfg.opTimeout <= 0:
		return nil, bad("timeouts must be positive")
	case cfg.failureLogInterval < 0:
		return nil, bad("the failure log interval must not be negative")
	case cfg.namespace == "" || len(cfg.namespace) > 64:
		return nil, bad("namespace must have 1 to 64 bytes")
	case strings.Contains(cfg.namespace, ":"):
		// "a" with key "b:x" and "a:b" with key "x" would share a record.
		return nil, bad("namespace must not contain ':', the separator before the key")
	case cfg.valueFingerprint == nil:
		return nil, bad("value fingerprint must not be nil")
	}
	if cfg.secretSet {
		cfg.hasher = idemkit.NewHMACHasher(cfg.secret)
	} else {
		cfg.secret = nil
		cfg.hasher = idemkit.NewHMACHasher([]byte(eventHashLabel))
	}
	cfg.bindingKey = bindingKey(cfg.secret)
	g := &Guard{store: s, cfg: cfg}
	g.failures = failureLog{logger: cfg.logger, every: cfg.failureLogInterval, now: time.Now}
	return g, nil
}

// Result is what fn returns: its response, encoded by the caller. To
// store nothing (a retry runs fn again), fn calls [DoNotRecord].
type Result struct {
	Value []byte
	// NotReplayable records that fn ran without its response (too large,
	// streamed, hijacked): retries get [ErrNotReplayable], never a rerun.
	NotReplayable bool
}

// Func is the work the guard runs at most once per key. Its ctx is
// cancelled when the caller's is, or when the claim's lease is lost (cause
// idemkit.ErrLeaseLost).
type Func func(ctx context.Context) (Result, error)

// Outcome is the answer of [Guard.Execute].
type Outcome struct {
	// Replayed is true when the response came from the record and fn did
	// not run in this call.
	Replayed bool
	// Value is fn's response (executed) or the stored one (replayed).
	Value []byte
	// Recorded, for an execution, reports whether the outcome was stored:
	// false after [DoNotRecord], or when it could not be (see
	// [EventNotRecorded]).
	Recorded bool
	// Fence is the fence of the claim fn ran under, or of the claim that
	// wrote the replayed record.
	Fence idemkit.Fence
	// CreatedAt, for a replay, is when the outcome was first recorded.
	CreatedAt time.Time
}

// CallOption adjusts one call to Execute or Do; passing one allocates
// nothing. The zero CallOption does nothing.
type CallOption struct {
	set  func(*callConfig, CallOption) // a function without captures: the data is in the option
	text string
	list []string
	d    time.Duration
}

type callConfig struct {
	waitBudget   time.Duration
	credentials  []string // with bound: the values given to Credentials
	bound        bool
	scope        string
	operation    string
	recordTTL    time.Duration // with recordTTLSet
	recordTTLSet bool
	failOpen     bool
}

// WaitBudget overrides the guard's wait budget for one call; zero refuses
// a duplicate at once.
func WaitBudget(d time.Duration) CallOption { return CallOption{set: setWaitBudget, d: d} }

func setWaitBudget(c *callConfig, o CallOption) { c.waitBudget = max(o.d, 0) }

// Execute runs fn at most once for key, across every guard that shares this
// guard's backend, and answers every later call with the same key and
// fingerprint with fn's recorded response. It claims the key (one round
// trip): a recorded outcome replays, or is refused ([ErrCredentialsMismatch],
// [ErrMismatch], [ErrNotReplayable]); a live claim of the same request is
// waited for up to the wait budget ([ErrInProgress]). Otherwise fn runs
// while the lease is extended (its ctx ends with cause idemkit.ErrLeaseLost
// if the lease is lost), and its outcome is completed on a detached
// context, fenced by the claim (see [store.Store]) and retried up to the
// record write timeout. fn's error, panic or [DoNotRecord] releases the
// claim and stores nothing; the error (or panic) goes on.
//
// A fingerprint of another version of the same algorithm ("http-v1",
// "http-v2") replays; one of another family ("http", "grpc") is a
// mismatch.
//
// On a [store.Transactor], fn may begin a transaction with its ctx: the
// outcome then commits with fn's writes. A commit that does not land
// returns an [*UnavailableError] and no value; a transaction that failed
// by itself (store.ErrWorkFailed, store.ErrWorkConflict) is fn's failure:
// the claim is released and that error returned.
//
// Backend failures give [ErrUnavailable]: the guard never runs fn when it
// cannot tell whether fn already ran, unless the call asks to [FailOpen].
// docs/guard.md walks through the algorithm.
func (g *Guard) Execute(ctx context.Context, key string, fp fingerprint.Fingerprint, fn Func, opts ...CallOption) (Outcome, error) {
	c := g.newCall(ctx, key, opts)
	recordKey, err := c.validate()
	if err != nil {
		c.end(Event{Kind: EventRejected, Err: err})
		return Outcome{}, err
	}
	c.started()
	ctx = c.ctx
	var fps string
	if c.bound {
		// The fingerprint and the binding, in one allocation.
		var buf [128]byte
		b := appendFingerprint(buf[:0], fp)
		b = g.appendBinding(b, recordKey, c.credentials)
		fps = string(b)
		c.binding = fps[len(fps)-bindingLen:]
	} else {
		fps = fp.String()
	}

	// 1. The claim, and the wait for a running duplicate.
	var claim store.Record
	deadline := c.start.Add(c.waitBudget)
	var sent time.Time // when the claim that won was sent: its lease runs from no earlier
	var w waiter
	defer w.stop()
	for {
		c.attempts++
		var op *opContext
		if c.attempts == 1 {
			// The first claim is sent now: the call's start serves as its
			// time, and its op context is part of the call.
			sent, op = c.start, &c.claimOp
			op.init(ctx, sent, g.cfg.opTimeout, false)
		} else {
			sent = time.Now()
			op = newOpContext(ctx, sent, g.cfg.opTimeout, false)
		}
		var (
			rec     store.Record
			claimed bool
		)
		if c.attempts == 1 {
			rec, claimed, err = g.claim(op, recordKey, fps)
		} else {
			rec, claimed, err = g.reclaim(op, recordKey, fps, w.since)
		}
		if err != nil {
			return c.claimFailed(err, fn)
		}
		if claimed {
			claim = rec
			break
		}
		if rec.State.Done() {
			return c.answer(rec, fp)
		}
		// A claim whose request is unknown (no fingerprint) is waited
		// for; its outcome is compared once it is there.
		if rec.Fingerprint != "" {
			if err := c.refusal(rec, fp); err != nil {
				return Outcome{}, err
			}
		}
		left := deadline.Sub(time.Now())
		if left <= 0 {
			c.waited = time.Now().Sub(c.start)
			e := &inProgressError{Attempts: c.attempts, Waited: c.waited}
			c.end(Event{Kind: EventInProgress, Fence: rec.Fence, Err: e})
			return Outcome{}, e
		}
		if c.attempts == 1 {
			c.emit(Event{Kind: EventWaiting, Fence: rec.Fence})
		}
		if w.watch(ctx, g, recordKey) {
			// The watch is in place: claim again at once, so that an
			// outcome written between the last claim and the watch is
			// not missed.
			continue
		}
		if err := w.wait(ctx, g.cfg.backoff, left); err != nil {
			c.waited = time.Now().Sub(c.start)
			c.end(Event{Kind: EventCanceled, Err: err})
			return Outcome{}, err
		}
		c.waited = time.Now().Sub(c.start)
	}

	// 2. fn, under the claim's lease (and in the claim's transaction,
	// when the store has them and fn begins one).
	fence := claim.Fence
	c.fence = fence
	fnParent := ctx
	if t, ok := g.store.(store.Transactor); ok {
		if wctx, work := t.Work(ctx, recordKey, fence); work != nil {
			fnParent, c.work = wctx, work
		}
	}
	l := g.hold(fnParent, recordKey, fence, c, sent)
	c.lease, c.recordKey, c.steps.recorded = l, recordKey, claim.Steps
	res, err := g.run(l, fn)
	if err != nil {
		l.stop()
		g.abandon(ctx, recordKey, fence, c)
		c.end(Event{Kind: EventExecuted, Fence: fence, Err: err})
		return Outcome{Value: res.Value, Fence: fence}, err
	}
	out := Outcome{Value: res.Value, Fence: fence}
	if c.noRecord.Load() {
		l.stop()
		g.abandon(ctx, recordKey, fence, c)
		c.end(Event{Kind: EventExecuted, Fence: fence})
		return out, nil
	}

	// 3. The outcome.
	rec := store.Record{Key: recordKey, Fingerprint: fps, State: store.StateCompleted, Response: res.Value, Fence: fence}
	if res.NotReplayable {
		rec.State, rec.Response = store.StateNotReplayable, nil
	}
	if c.work != nil && c.work.Begun() {
		// The outcome commits with fn's writes, or neither lands.
		err := g.commit(ctx, &rec, c, l)
		l.stop()
		if err != nil {
			kind := EventUnavailable
			if errors.Is(err, store.ErrWorkFailed) || errors.Is(err, store.ErrWorkConflict) {
				kind = EventExecuted // fn's failure, reported as an error fn returned is
			}
			c.end(Event{Kind: kind, Fence: fence, Err: err})
			return Outcome{Fence: fence}, err
		}
		out.Recorded = true
		c.end(Event{Kind: EventExecuted, Fence: fence, Recorded: true, Size: len(rec.Response)})
		return out, nil
	}
	if c.steps.lost.Load() {
		// A step's recording was refused: the claim is no longer this
		// call's (the loss was reported when fn's ctx ended), and its
		// outcome is not written.
		l.stop()
		cause := l.fn.leaseLost()
		if cause == nil {
			cause = errStepRefused
		}
		c.notRecorded(ctx, rec, cause)
		return out, nil
	}
	var cause error
	out.Recorded, cause = g.complete(ctx, &rec, c, l)
	l.stop()
	if !out.Recorded {
		c.notRecorded(ctx, rec, cause)
		return out, nil
	}
	c.end(Event{Kind: EventExecuted, Fence: fence, Recorded: true, Size: len(rec.Response)})
	return out, nil
}

// claimFailed answers a claim that failed with err: the call's ctx ended
// (Aborted, returned as it is), the call fails open (a transient failure
// and [FailOpen]: fn runs unguarded), or the backend is unavailable.
func (c *call) claimFailed(err error, fn Func) (Outcome, error) {
	code := idemkit.CodeOf(err)
	if code == idemkit.CodeAborted || c.ctx.Err() != nil {
		// The caller's ctx ended (cancelled, or past its deadline, which
		// a backend reports as a timeout): the caller's doing.
		c.end(Event{Kind: EventCanceled, Err: err})
		return Outcome{}, err
	}
	e := &UnavailableError{Op: "claim", Err: err}
	if !errors.Is(err, store.ErrUnsealable) { // an unreadable record is its adapter's to log, with what it means
		c.g.failures.report(c.ctx, "claim", err)
	}
	if !c.failOpen || !code.Transient() || errors.Is(err, store.ErrUnsealable) {
		c.end(Event{Kind: EventUnavailable, Err: e})
		return Outcome{}, e
	}
	// Fail open: fn runs without a claim, and nothing is recorded. Its
	// ctx is the caller's, with the call's information for CallInfoFrom.
	ranFrom := time.Now()
	defer func() {
		c.ran = time.Since(ranFrom)
		c.end(Event{Kind: EventFailedOpen, Err: e})
	}()
	res, ferr := fn(context.WithValue(c.ctx, callKey{}, c))
	return Outcome{Value: res.Value}, ferr
}

// claim makes one Claim under op, an unused op context, and releases it.
func (g *Guard) claim(op *opContext, key, fp string) (store.Record, bool, error) {
	defer op.release()
	return g.store.Claim(op, key, fp, g.cfg.leaseTTL)
}

// reclaim is the claim of a waiting duplicate. The waiters of one key and
// fingerprint in this process share it, so that a notification that wakes
// hundreds of duplicates costs one claim per process: those that come
// while one is on its way take its answer, unless it won the claim (a
// claim is its maker's). A waiter takes only the answer of a claim sent no
// earlier than since, when its watch was in place: an earlier answer could
// predate an outcome the watch will never report.
func (g *Guard) reclaim(op *opContext, key, fp string, since time.Time) (store.Record, bool, error) {
	fk := flightKey{key: key, fp: fp}
	g.flightsMu.Lock()
	if f, ok := g.flights[fk]; ok && !f.sent.Before(since) {
		g.flightsMu.Unlock()
		select {
		case <-f.done:
			if f.err == nil && !f.claimed {
				op.release()
				rec := f.rec
				rec.Response = bytes.Clone(rec.Response) // each caller owns its value
				return rec, false, nil
			}
		case <-op.Done():
		}
		return g.claim(op, key, fp)
	}
	// This claim leads a flight of its own (replacing, for those who come
	// next, one sent too early for it).
	f := &flight{done: make(chan struct{}), sent: time.Now()}
	if g.flights == nil {
		g.flights = make(map[flightKey]*flight)
	}
	g.flights[fk] = f
	g.flightsMu.Unlock()

	rec, claimed, err := g.claim(op, key, fp)
	f.claimed, f.err = claimed, err
	if err == nil && !claimed {
		f.rec = rec
		f.rec.Response = bytes.Clone(rec.Response)
	}
	g.flightsMu.Lock()
	if g.flights[fk] == f {
		delete(g.flights, fk)
	}
	g.flightsMu.Unlock()
	close(f.done)
	return rec, claimed, err
}

// flightKey names the claims that one reclaim answers: the same record
// key and the same stored fingerprint (credentials included).
type flightKey struct{ key, fp string }

// flight is a reclaim on its way; done is closed once its answer is set.
type flight struct {
	sent    time.Time // when its claim was sent (no earlier)
	done    chan struct{}
	rec     store.Record
	claimed bool
	err     error
}

// waiter is a duplicate's wait: woken by a [store.Watcher]'s notification,
// and polling with back-off too (a notification may be lost).
type waiter struct {
	ch       <-chan struct{} // the current watch's (nil: it never fires)
	stopFn   func()
	watching bool      // a watch is in place
	since    time.Time // when the latest watch was in place: a shared claim must be sent no earlier (see reclaim)
	polls    int       // the poll delays slept, which grow the back-off; wake-ups do not
}

// watch sets up a watch on key when the store can notify and none is in
// place, and reports whether it did.
func (w *waiter) watch(ctx context.Context, g *Guard, key string) bool {
	if w.watching {
		return false
	}
	wt, ok := g.store.(store.Watcher)
	if !ok {
		return false
	}
	wctx, cancel := context.WithTimeout(ctx, g.cfg.opTimeout)
	w.ch, w.stopFn = wt.Watch(wctx, key)
	w.watching, w.since = true, time.Now()
	cancel()
	return true
}

// wait sleeps until the watch fires, the next poll is due (at most left
// from now) or ctx ends.
func (w *waiter) wait(ctx context.Context, b idemkit.Backoff, left time.Duration) error {
	t := time.NewTimer(min(b.Delay(w.polls+1), left))
	defer t.Stop()
	select {
	case <-t.C:
		w.polls++
		return nil
	case <-w.ch: // nil without a watch: never
		// Woken by the outcome (or the claim's end): the next wait needs
		// a new watch.
		w.stop()
		return nil
	case <-ctx.Done():
		return idemkit.CheckContext(ctx, "wait")
	}
}

// stop ends the current watch, if any.
func (w *waiter) stop() {
	if w.stopFn != nil {
		w.stopFn()
	}
	w.ch, w.stopFn, w.watching = nil, nil, false
}

// run calls fn with the lease's context. A panic releases the claim and
// goes on.
func (g *Guard) run(l *lease, fn Func) (res Result, err error) {
	panicked := true
	start := time.Now()
	defer func() {
		l.call.ran = time.Since(start)
		if panicked {
			l.stop()
			g.abandon(l.fn.parent, l.key, l.fence, l.call)
			l.call.end(Event{Kind: EventExecuted, Fence: l.fence, Err: errWorkPanicked})
		}
	}()
	res, err = fn(&l.fn)
	panicked = false
	return res, err
}

// errWorkPanicked is the Err of the outcome of a call whose work panicked
// (the panic goes on to the caller).
var errWorkPanicked = errors.New("idempotency: the work panicked")

// abandon ends a claim whose outcome is not stored: fn's transaction, if
// it began one, is rolled back, then the claim released.
func (g *Guard) abandon(ctx context.Context, key string, fence idemkit.Fence, c *call) {
	if c.work != nil {
		rctx := newOpContext(ctx, time.Now(), g.cfg.opTimeout, true)
		c.work.Rollback(rctx)
		rctx.release()
	}
	g.release(ctx, key, fence, c)
}

// commit writes *rec in fn's transaction and commits both while l keeps
// the lease extended, and returns nil once both landed. Work whose lease
// was lost before it returned is rolled back, even if the fence would
// still pass, as fn's ctx told it. A commit cannot be retried: one whose
// answer was lost is settled by a release (it takes effect only if the
// commit did not land) and then a read. An error means fn's writes are not
// there (or, when the backend cannot tell, may not be); one matching
// store.ErrWorkFailed or store.ErrWorkConflict is the transaction's own
// failure (see workFailed).
func (g *Guard) commit(ctx context.Context, rec *store.Record, c *call, l *lease) error {
	if cause := l.fn.leaseLost(); cause != nil {
		// The loss was reported when fn's ctx ended (EventLeaseLost).
		l.stop() // as for any abandoned claim: no renewal after its release
		g.abandon(ctx, rec.Key, rec.Fence, c)
		return &UnavailableError{Op: "commit", Err: fmt.Errorf("%w; the work's transaction was rolled back", cause)}
	}
	ttl := g.cfg.recordTTL
	if c.recordTTLSet {
		ttl = c.recordTTL
	}
	for attempt := 1; ; attempt++ {
		var op *opContext
		if attempt == 1 {
			op = &l.op
			op.init(ctx, time.Now(), g.cfg.opTimeout, true)
		} else {
			op = newOpContext(ctx, time.Now(), g.cfg.opTimeout, true)
		}
		ok, err := l.commit(op, *rec, ttl)
		op.release()
		switch {
		case err == nil && ok:
			return nil
		case err == nil:
			lost := fmt.Errorf("%w: the record no longer carries this claim; the work's transaction was rolled back", idemkit.ErrLeaseLost)
			c.emit(Event{Kind: EventLeaseLost, Fence: rec.Fence, Err: lost})
			return &UnavailableError{Op: "commit", Err: lost}
		case errors.Is(err, store.ErrTooLarge) && rec.State == store.StateCompleted:
			// The response does not fit: record that fn ran instead.
			rec.State, rec.Response = store.StateNotReplayable, nil
			continue
		case errors.Is(err, store.ErrWorkFailed) || errors.Is(err, store.ErrWorkConflict):
			return g.workFailed(ctx, rec, c, l, err)
		}
		rctx := newOpContext(ctx, time.Now(), g.cfg.opTimeout, true)
		c.work.Rollback(rctx) // the transaction is over either way; this frees it
		rctx.release()
		g.failures.report(ctx, "commit", err)
		if idemkit.CodeOf(err) == idemkit.CodeInvalidArgument {
			g.release(ctx, rec.Key, rec.Fence, c)
			e := &UnavailableError{Op: "commit", Err: err}
			c.emit(Event{Kind: EventBackendError, Fence: rec.Fence, Err: e})
			return e
		}
		c.emit(Event{Kind: EventBackendError, Fence: rec.Fence, Err: &UnavailableError{Op: "commit", Err: err}})
		rctx = newOpContext(ctx, time.Now(), g.cfg.opTimeout, true)
		released, rerr := g.store.Release(rctx, rec.Key, rec.Fence)
		rctx.release()
		if rerr == nil && released {
			// The claim was still this one's, so the commit did not land:
			// nothing was done, and a retry runs the work again.
			return &UnavailableError{Op: "commit", Err: fmt.Errorf("the commit failed and was rolled back: %w", err)}
		}
		if g.landed(ctx, *rec) {
			return nil
		}
		return &UnavailableError{Op: "commit", Err: err}
	}
}

// workFailed ends a claim whose work's transaction failed at its commit:
// the backend rolled it back, so the claim, still this one's, is released
// for a retry, and the failure is logged and returned as fn's own.
func (g *Guard) workFailed(ctx context.Context, rec *store.Record, c *call, l *lease, err error) error {
	l.stop() // no renewal after the release
	rctx := newOpContext(ctx, time.Now(), g.cfg.opTimeout, true)
	c.work.Rollback(rctx) // frees its connection
	rctx.release()
	g.release(ctx, rec.Key, rec.Fence, c)
	level, msg := slog.LevelError, "idempotency: the work's transaction failed at its commit and was rolled back; the claim is released"
	if errors.Is(err, store.ErrWorkConflict) {
		level, msg = slog.LevelWarn, "idempotency: the work's transaction lost a conflict with a concurrent one at its commit and was rolled back; the claim is released for a retry"
	}
	g.cfg.logger.Log(ctx, level, msg,
		slog.String("key_hash", c.hash()), slog.String("fence", rec.Fence.String()), slog.String("error", err.Error()))
	return err
}

// release ends the claim on a detached context under the op timeout. A
// failed release is logged: the claim runs out at its lease's end.
func (g *Guard) release(ctx context.Context, key string, fence idemkit.Fence, c *call) {
	rctx := newOpContext(ctx, time.Now(), g.cfg.opTimeout, true)
	defer rctx.release()
	if _, err := g.store.Release(rctx, key, fence); err != nil {
		c.emit(Event{Kind: EventBackendError, Fence: fence, Err: &UnavailableError{Op: "release", Err: err}})
		g.cfg.logger.WarnContext(ctx, "idempotency: the claim could not be released; it runs out at the end of its lease",
			slog.String("key_hash", c.hash()), slog.String("fence", fence.String()), slog.String("error", err.Error()))
	}
}

// complete writes *rec, retrying failures with back-off for up to the
// record write timeout while l keeps the lease extended, and reports
// whether it landed, and if not, why. A response too large for the store
// turns *rec into a not-replayable record.
func (g *Guard) complete(ctx context.Context, rec *store.Record, c *call, l *lease) (bool, error) {
	ttl := g.cfg.recordTTL
	if c.recordTTLSet {
		ttl = c.recordTTL
	}
	var start time.Time // the first attempt's: the write timeout runs from it
	uncertain := false  // a failed attempt may have landed
	for attempt := 1; ; attempt++ {
		// Each attempt runs on a context detached from ctx: a client that
		// went away does not lose the record. The first attempt's op
		// context is part of the lease.
		now := time.Now()
		var op *opContext
		if attempt == 1 {
			start, op = now, &l.op
			op.init(ctx, now, g.cfg.opTimeout, true)
		} else {
			op = newOpContext(ctx, now, g.cfg.opTimeout, true)
		}
		ok, err := l.complete(op, *rec, ttl)
		op.release()
		switch {
		case err == nil && ok:
			return true, nil
		case err == nil && uncertain && g.landed(ctx, *rec):
			// An earlier attempt landed and its answer was lost: the
			// record holds this claim's outcome.
			return true, nil
		case err == nil:
			// Another claim, or nothing, is there: the key was taken over
			// (or deleted) after this claim's lease ran out.
			lost := fmt.Errorf("%w: the record no longer carries this claim", idemkit.ErrLeaseLost)
			c.emit(Event{Kind: EventLeaseLost, Fence: rec.Fence, Err: lost})
			return false, lost
		case errors.Is(err, store.ErrTooLarge) && rec.State == store.StateCompleted:
			// The response does not fit: record that fn ran instead.
			rec.State, rec.Response = store.StateNotReplayable, nil
			continue
		case idemkit.CodeOf(err) == idemkit.CodeInvalidArgument || idemkit.CodeOf(err) == idemkit.CodeMisconfigured:
			// Trying again cannot help.
			g.failures.report(ctx, "complete", err)
			e := &UnavailableError{Op: "complete", Err: err}
			c.emit(Event{Kind: EventBackendError, Fence: rec.Fence, Err: e})
			return false, e
		}
		uncertain = true
		g.failures.report(ctx, "complete", err)
		c.emit(Event{Kind: EventBackendError, Fence: rec.Fence, Err: &UnavailableError{Op: "complete", Err: err}})
		delay := g.cfg.backoff.Delay(attempt)
		if !time.Now().Add(delay).Before(start.Add(g.cfg.recordWriteTimeout)) {
			return false, fmt.Errorf("gave up after %d attempts: %w", attempt, err)
		}
		time.Sleep(delay)
	}
}

// landed reports whether the record of rec.Key holds an outcome of the
// claim rec.Fence: whether a completion whose answer was lost landed. Only
// that claim's completion writes an outcome with its fence.
func (g *Guard) landed(ctx context.Context, rec store.Record) bool {
	gctx := newOpContext(ctx, time.Now(), g.cfg.opTimeout, true)
	defer gctx.release()
	got, ok, err := g.store.Get(gctx, rec.Key)
	return err == nil && ok && got.State.Done() && got.Fence == rec.Fence
}

// lease keeps a claim's lease extended while fn runs and its outcome is
// being completed. Its renewals are scheduled by the guard's renewals, so
// a call that finishes within a third of the lease TTL starts no goroutine
// and arms no timer of its own.
type lease struct {
	g     *Guard
	fn    fnContext // fn's ctx, a child of the caller's (fn.parent): ends when the caller's does or the lease is lost
	op    opContext // the op context of the first completion attempt
	key   string
	fence idemkit.Fence
	call  *call

	mu         sync.Mutex // held by a renewal or a completion while it runs, so the two never overlap and stop waits for them
	stopped    bool
	completing bool // fn returned: its outcome is being completed

	// The lease's place in the guard's renewal queue, guarded by the
	// queue's mutex.
	prev, next *lease
	due        time.Time // when its next renewal falls due
	queued     bool

	// The lease's end as far as this process knows (monotonic clock), and
	// the timer that ends fn's ctx there, whatever a stalled renewal is
	// doing (armed by the first renewal). vmu is never held while waiting
	// for the backend.
	vmu    sync.Mutex
	valid  time.Time
	expiry *time.Timer
	ended  bool // stopped, or the outcome landed

	reported atomic.Bool // the lease's loss was reported
}

// hold starts extending the claim (key, fence), made by a Claim sent at
// sent, every third of the lease TTL. fn's ctx ends with idemkit.ErrLeaseLost
// once the backend says another claim replaced this one, or as soon as the
// lease has run out by this process's clock without a successful extension
// (the backend could not be reached: another node may take the key over).
// A lease is reckoned from when its claim or extension was sent, so this
// process never thinks it lasts longer than the backend does.
func (g *Guard) hold(ctx context.Context, key string, fence idemkit.Fence, c *call, sent time.Time) *lease {
	l := &lease{g: g, fn: fnContext{parent: ctx, call: c}, key: key, fence: fence, call: c, valid: sent.Add(g.cfg.leaseTTL)}
	if len(g.cfg.hooks) != 0 {
		c.hash() // before a renewal may emit events from its goroutine
	}
	g.renewals.add(l, sent)
	return l
}

// expire ends fn's ctx when the lease has run out by this process's clock,
// or waits again for a lease a renewal extended meanwhile.
func (l *lease) expire() {
	l.vmu.Lock()
	defer l.vmu.Unlock()
	if l.ended {
		return
	}
	if left := time.Until(l.valid); left > 0 {
		l.expiry.Reset(left)
		return
	}
	l.lost(fmt.Errorf("%w: the lease ran out before the backend confirmed an extension", idemkit.ErrLeaseLost))
}

// renew extends the lease once and schedules the next renewal.
func (l *lease) renew() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return
	}
	ttl := l.g.cfg.leaseTTL
	// From the first renewal on, a stalled extension must not keep fn's
	// ctx alive past the lease: the expiry timer ends it on time. (Before
	// it, the lease cannot have run out, so short calls need no timer.)
	l.vmu.Lock()
	if l.expiry == nil && !l.ended {
		l.expiry = time.AfterFunc(time.Until(l.valid), l.expire)
	}
	l.vmu.Unlock()
	sent := time.Now()
	ectx := newOpContext(l.fn.parent, sent, min(l.g.cfg.opTimeout, ttl/3), true)
	_, ok, err := l.g.store.Extend(ectx, l.key, l.fence, ttl)
	ectx.release()
	switch {
	case err == nil && ok:
		l.vmu.Lock()
		l.valid = sent.Add(ttl)
		l.vmu.Unlock()
	case err == nil:
		// Nothing left to extend. Once fn returned, the completion
		// tells what happened (a completion whose answer was lost also
		// leaves no claim to extend).
		l.stopped = true
		if !l.completing {
			l.lost(fmt.Errorf("%w: another claim replaced this one", idemkit.ErrLeaseLost))
		}
		return
	default:
		// The expiry timer ends fn's ctx if no extension lands in time.
		l.g.failures.report(l.fn.parent, "extend", err)
		l.call.emit(Event{Kind: EventBackendError, Fence: l.fence, Err: &UnavailableError{Op: "extend", Err: err}})
	}
	l.g.renewals.add(l, time.Now())
}

// complete makes one Complete of rec, never while a renewal runs; once it
// lands, renewals end.
func (l *lease) complete(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.completing = true
	ok, err := l.g.store.Complete(ctx, rec, ttl)
	if err == nil && ok {
		l.stopped = true
		l.g.renewals.remove(l)
		l.end()
	}
	return ok, err
}

// commit is complete for a claim whose fn began a transaction: the
// outcome commits with it (see Guard.commit).
func (l *lease) commit(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.completing = true
	ok, err := l.call.work.Commit(ctx, rec, ttl)
	if err == nil && ok {
		l.stopped = true
		l.g.renewals.remove(l)
		l.end()
	}
	return ok, err
}

// lost ends fn's ctx with cause, once.
func (l *lease) lost(cause error) {
	if l.fn.Err() == nil && l.reported.CompareAndSwap(false, true) {
		l.call.emit(Event{Kind: EventLeaseLost, Fence: l.fence, Err: cause})
	}
	l.fn.end(cause, true)
}

// end stops the expiry timer, waiting for it if it is under way.
func (l *lease) end() {
	l.vmu.Lock()
	l.ended = true
	if l.expiry != nil {
		l.expiry.Stop()
	}
	l.vmu.Unlock()
}

// stop ends the renewals and the expiry timer (waiting for one under way)
// and fn's ctx; it is safe to call more than once.
func (l *lease) stop() {
	l.end()
	l.mu.Lock()
	if !l.stopped { // else a completion or a renewal stopped it, and it is not queued
		l.stopped = true
		l.g.renewals.remove(l)
	}
	l.mu.Unlock()
	l.fn.end(context.Canceled, false)
}

// fnContext is fn's ctx: it ends when the caller's does, when the lease is
// lost (cause idemkit.ErrLeaseLost) and when the call is over, exactly as
// a context.WithCancelCause of the caller's would, but creates that
// context only when something waits on Done or the lease is lost, so a
// handler that never waits on its ctx costs no context.
type fnContext struct {
	parent context.Context
	call   *call                        // answers CallInfoFrom, DoNotRecord and TransactionBegun
	mu     sync.Mutex                   // held while inner is created or the context ends
	inner  atomic.Pointer[causeContext] // once created, it answers everything
	ended  atomic.Uint32                // how it ended without inner: endedOwn or endedParent
}

// How an fnContext without inner ended.
const (
	endedOwn    = 1 // the call ended it while the caller's ctx was live: Canceled
	endedParent = 2 // the caller's ctx had ended first: it answers for both
)

type causeContext struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// create makes inner. The caller holds c.mu; inner is nil and c has not
// ended.
func (c *fnContext) create() *causeContext {
	ctx, cancel := context.WithCancelCause(c.parent)
	in := &causeContext{ctx: ctx, cancel: cancel}
	c.inner.Store(in)
	return in
}

// end ends the context with cause, unless it has ended already. A stop
// (lost false) that finds no inner records how it ended instead of
// creating one.
func (c *fnContext) end(cause error, lost bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if in := c.inner.Load(); in != nil {
		in.cancel(cause)
		return
	}
	if c.ended.Load() != 0 {
		return
	}
	if lost {
		c.create().cancel(cause)
		return
	}
	if c.parent.Err() != nil {
		c.ended.Store(endedParent)
	} else {
		c.ended.Store(endedOwn)
	}
}

// leaseLost returns the cause the context ended with when the lease was
// lost (it wraps idemkit.ErrLeaseLost), or nil. A lost lease always creates
// inner, so a context without it was not ended that way.
func (c *fnContext) leaseLost() error {
	in := c.inner.Load()
	if in == nil {
		return nil
	}
	if cause := context.Cause(in.ctx); errors.Is(cause, idemkit.ErrLeaseLost) {
		return cause
	}
	return nil
}

func (c *fnContext) Deadline() (time.Time, bool) { return c.parent.Deadline() }

func (c *fnContext) Done() <-chan struct{} {
	if in := c.inner.Load(); in != nil {
		return in.ctx.Done()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if in := c.inner.Load(); in != nil {
		return in.ctx.Done()
	}
	switch c.ended.Load() {
	case endedOwn:
		return cancelled.Done()
	case endedParent:
		return c.parent.Done()
	}
	return c.create().ctx.Done()
}

func (c *fnContext) Err() error {
	if in := c.inner.Load(); in != nil {
		return in.ctx.Err()
	}
	if c.ended.Load() == endedOwn {
		return context.Canceled
	}
	return c.parent.Err()
}

func (c *fnContext) Value(key any) any {
	if key == (callKey{}) {
		return c.call
	}
	if in := c.inner.Load(); in != nil {
		return in.ctx.Value(key)
	}
	if c.ended.Load() == endedOwn {
		// What a cancelled context answers (its cancellation, for
		// context.Cause: Canceled), and the caller's values.
		if v := cancelled.Value(key); v != nil {
			return v
		}
	}
	return c.parent.Value(key)
}

// call carries one Execute call's state for its events.
type call struct {
	g          *Guard
	ctx        context.Context // the caller's, then the one the hooks' starts returned
	keyHash    string
	key        string
	callConfig        // the options of the call; they set it in place
	binding    string // what the record keeps of the credentials: "" when not bound
	start      time.Time
	attempts   int
	waited     time.Duration
	ran        time.Duration
	fence      idemkit.Fence // the claim's, once fn runs
	work       store.Work    // the claim's transaction, when the store is a Transactor (nil otherwise)
	noRecord   atomic.Bool   // DoNotRecord was called
	lease      *lease        // the claim's lease, once fn runs under it (nil when the call failed open)
	recordKey  string        // with lease
	steps      steps         // the work's steps (see Step)
	claimOp    opContext     // the op context of the first claim
}

func (g *Guard) newCall(ctx context.Context, key string, opts []CallOption) *call {
	c := &call{g: g, ctx: ctx, key: key, start: time.Now(), callConfig: callConfig{waitBudget: g.cfg.waitBudget}}
	for _, o := range opts {
		if o.set != nil {
			o.set(&c.callConfig, o) // in the call itself, which is allocated anyway
		}
	}
	return c
}

// validate checks the call's key and options and returns its record key:
// "<namespace>:<scope>:<key>".
func (c *call) validate() (string, error) {
	if c.recordTTLSet && c.recordTTL < time.Millisecond {
		return "", idemkit.NewError(idemkit.CodeInvalidArgument, "execute", "record TTL must be at least 1ms", nil)
	}
	return c.g.recordKey(c.scope, c.key)
}

// started hands the start of the call to the hooks; c.ctx becomes the ctx
// the last of them returned.
func (c *call) started() {
	if len(c.g.cfg.hooks) == 0 {
		return
	}
	e := c.event(Event{Kind: EventStart})
	for _, h := range c.g.cfg.hooks {
		c.ctx = startTo(h, c.ctx, e)
	}
}

// answer turns a record with an outcome into the call's result.
func (c *call) answer(rec store.Record, fp fingerprint.Fingerprint) (Outcome, error) {
	if err := c.refusal(rec, fp); err != nil {
		return Outcome{}, err
	}
	if rec.State == store.StateNotReplayable {
		e := &notReplayableError{CreatedAt: rec.CreatedAt, Fence: rec.Fence}
		c.end(Event{Kind: EventNotReplayable, Fence: rec.Fence, Err: e})
		return Outcome{}, e
	}
	c.end(Event{Kind: EventReplayed, Fence: rec.Fence, Size: len(rec.Response)})
	return Outcome{Replayed: true, Value: rec.Response, Fence: rec.Fence, CreatedAt: rec.CreatedAt}, nil
}

// refusal compares rec with the call, credentials first (a caller with
// other credentials learns nothing of the request), and returns the error
// that ends the call, or nil.
func (c *call) refusal(rec store.Record, fp fingerprint.Fingerprint) error {
	stored, binding := splitStored(rec.Fingerprint)
	if binding != c.binding {
		c.end(Event{Kind: EventCredentialsMismatch, Fence: rec.Fence, Err: ErrCredentialsMismatch})
		return ErrCredentialsMismatch
	}
	if same, comparable := compareStored(stored, fp); comparable && !same {
		e := &mismatchError{Stored: stored, Got: fp.String()}
		c.end(Event{Kind: EventMismatch, Fence: rec.Fence, Err: e})
		return e
	}
	return nil
}

// compareStored is fingerprint.Fingerprint.Compare of a stored string
// form, without allocating when the algorithms are equal. An empty stored
// fingerprint (a claim whose request is unknown) is never a mismatch.
func compareStored(stored string, fp fingerprint.Fingerprint) (same, comparable bool) {
	if stored == "" {
		return false, false
	}
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

// notRecorded ends a call whose outcome could not be recorded.
func (c *call) notRecorded(ctx context.Context, rec store.Record, cause error) {
	c.end(Event{Kind: EventNotRecorded, Fence: rec.Fence, Err: cause})
	c.g.cfg.logger.ErrorContext(ctx, "idempotency: the outcome could not be recorded; the claim is left to run out, and a retry after that may run the work again",
		slog.String("key_hash", c.hash()), slog.String("fence", rec.Fence.String()), slog.String("error", cause.Error()))
}

func (c *call) hash() string {
	if c.keyHash == "" {
		c.keyHash = c.g.cfg.hasher.Hash(c.key)
	}
	return c.keyHash
}

// event completes e with what the call knows.
func (c *call) event(e Event) Event {
	e.Operation = c.operation
	if c.key != "" {
		e.KeyHash = c.hash()
	}
	if c.scope != "" {
		e.ScopeHash = c.g.cfg.hasher.Hash(c.scope)
	}
	e.Attempts, e.Waited = c.attempts, c.waited
	if e.Kind == EventExecuted || e.Kind == EventNotRecorded || e.Kind == EventFailedOpen {
		e.Ran = c.ran
	}
	e.Duration = time.Since(c.start)
	return e
}

// emit completes e and hands it to the hooks.
func (c *call) emit(e Event) {
	if len(c.g.cfg.hooks) == 0 {
		return
	}
	e = c.event(e)
	for _, h := range c.g.cfg.hooks {
		emitTo(h, c.ctx, e)
	}
}

// end reports the call's outcome e to the hooks and to the watch of its
// ctx, if any.
func (c *call) end(e Event) {
	w, _ := c.ctx.Value(watchKey{}).(*outcomeWatch)
	if len(c.g.cfg.hooks) == 0 && w == nil {
		return
	}
	c.g.outcome(c.ctx, w, c.event(e))
}
