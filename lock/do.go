package lock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/idemkit/idemkit"
)

// ErrLeaseLost is matched (errors.Is) by the error [Do] returns when the
// lease ran out or passed to another holder while fn was running, and by
// context.Cause of fn's ctx, which Do cancels at that moment.
var ErrLeaseLost = errors.New("lock: lease lost")

// Backoff is how [Do] grows its delay between attempts.
type Backoff uint8

const (
	// BackoffExponential: the n-th delay is base·2^(n−1).
	BackoffExponential Backoff = iota
	// BackoffFixed: every delay is base.
	BackoffFixed
)

// Jitter is how [Do] randomises a delay d.
type Jitter uint8

const (
	// JitterEqual: a delay in [d/2, d).
	JitterEqual Jitter = iota
	// JitterFull: a delay in [0, d).
	JitterFull
	// JitterNone: exactly d.
	JitterNone
	// JitterAdd: d plus a random extra in [0, base), where base is the
	// retry delay: base·2^(n−1) + random(0, base).
	JitterAdd
)

// Defaults of [Do].
const (
	DefaultTTL        = 30 * time.Second
	DefaultRetryDelay = 100 * time.Millisecond
	DefaultMaxDelay   = 2 * time.Second
	DefaultTimeout    = 5 * time.Second
	DefaultMaxRetries = 10
)

// Option configures [Do].
type Option func(*doConfig)

type doConfig struct {
	ttl            time.Duration
	retryDelay     time.Duration
	maxDelay       time.Duration
	backoff        Backoff
	jitter         Jitter
	timeout        time.Duration
	maxRetries     int
	retryTransient bool
	renewEvery     time.Duration // 0: ttl/3; < 0: never
	releaseTimeout time.Duration
	onReleaseError ReleaseErrorFunc
	onLeaseLost    func(Lease, error)
	logger         *slog.Logger
	random         func() float64
	stats          *Stats
	acquire        func(ctx context.Context, key string, ttl time.Duration) (Lease, bool, error)
}

// WithAcquireFunc makes Do and Hold take the lock with f instead of the
// locker's Acquire, for a backend that does more in the same round trip (a
// record store that reads a record under the new lease, say). f must behave
// exactly like [Locker.Acquire] on the same locker; renewal and release
// still go through the locker. Default: the locker's Acquire.
func WithAcquireFunc(f func(ctx context.Context, key string, ttl time.Duration) (Lease, bool, error)) Option {
	return func(c *doConfig) { c.acquire = f }
}

// Stats reports how an acquisition went; see [WithStats].
type Stats struct {
	Attempts int           // acquire attempts made
	Waited   time.Duration // time from the first attempt to the last answer
}

// WithStats makes Do and Hold fill s with the number of acquire attempts
// and the time spent acquiring, whether or not the lock was acquired.
// Default: none.
func WithStats(s *Stats) Option { return func(c *doConfig) { c.stats = s } }

// WithTTL sets the lease's TTL. Default: 30 s ([DefaultTTL]).
func WithTTL(d time.Duration) Option { return func(c *doConfig) { c.ttl = d } }

// WithRetryDelay sets the base delay between attempts. Default: 100 ms.
func WithRetryDelay(d time.Duration) Option { return func(c *doConfig) { c.retryDelay = d } }

// WithMaxDelay caps any single delay between attempts (before jitter).
// Default: 2 s.
func WithMaxDelay(d time.Duration) Option { return func(c *doConfig) { c.maxDelay = d } }

// WithBackoff sets how delays grow. Default: [BackoffExponential].
func WithBackoff(b Backoff) Option { return func(c *doConfig) { c.backoff = b } }

// WithJitter sets how delays are randomised. Default: [JitterEqual].
func WithJitter(j Jitter) Option { return func(c *doConfig) { c.jitter = j } }

// WithTimeout bounds the whole wait for the lock, from the first attempt to
// the last; fn's running time is not counted. Do makes one last attempt at
// the deadline and never sleeps past it. Default: 5 s. Zero means a single
// attempt.
func WithTimeout(d time.Duration) Option { return func(c *doConfig) { c.timeout = d } }

// WithMaxRetries bounds the attempts after the first that Do makes when a
// back-off delay runs out. Default: 10. Attempts made at once because a
// [Watcher] reported the lock released do not count: their rate follows the
// holders' releases, and WithTimeout still bounds the whole wait.
func WithMaxRetries(n int) Option { return func(c *doConfig) { c.maxRetries = n } }

// WithRetryTransient makes Do retry transient backend errors
// (ServiceUnavailable, NetworkTimeout, RateLimited) like contention, within
// the same deadline and retry limit. When time or retries run out the error
// is AcquisitionTimeout wrapping the last cause. Default: off (a backend
// error ends Do at once).
func WithRetryTransient(on bool) Option { return func(c *doConfig) { c.retryTransient = on } }

// WithRenewInterval sets how often the lease is extended (to now + TTL)
// while fn runs; it must be shorter than the TTL. Default: TTL/3. A
// negative interval turns renewal off.
func WithRenewInterval(d time.Duration) Option { return func(c *doConfig) { c.renewEvery = d } }

// WithReleaseTimeout bounds the release after fn returns, which runs on a
// context detached from the caller's. Default: 5 s.
func WithReleaseTimeout(d time.Duration) Option { return func(c *doConfig) { c.releaseTimeout = d } }

// WithOnReleaseError sets the callback for a failed release after fn. A
// release failure never changes what Do returns. Default: a warning on the
// logger.
func WithOnReleaseError(f ReleaseErrorFunc) Option {
	return func(c *doConfig) { c.onReleaseError = f }
}

// WithOnLeaseLost sets a callback that runs when renewal finds the lease
// lost, at the moment fn's ctx is cancelled. Default: none (Do's error
// reports the loss in any case).
func WithOnLeaseLost(f func(lease Lease, cause error)) Option {
	return func(c *doConfig) { c.onLeaseLost = f }
}

// WithLogger sets the logger for release failures without a callback.
// Default: slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *doConfig) { c.logger = l } }

func defaultConfig() doConfig {
	return doConfig{
		ttl:            DefaultTTL,
		retryDelay:     DefaultRetryDelay,
		maxDelay:       DefaultMaxDelay,
		timeout:        DefaultTimeout,
		maxRetries:     DefaultMaxRetries,
		releaseTimeout: DefaultReleaseTimeout,
		random:         rand.Float64,
	}
}

func (c *doConfig) validate() error {
	switch {
	case c.ttl < time.Millisecond:
		return invalid("do", "ttl must be at least 1ms")
	case c.retryDelay <= 0:
		return invalid("do", "retry delay must be positive")
	case c.maxDelay <= 0:
		return invalid("do", "max delay must be positive")
	case c.timeout < 0:
		return invalid("do", "timeout must not be negative")
	case c.maxRetries < 0:
		return invalid("do", "max retries must not be negative")
	case c.releaseTimeout <= 0:
		return invalid("do", "release timeout must be positive")
	case c.backoff > BackoffFixed:
		return invalid("do", "unknown backoff")
	case c.jitter > JitterAdd:
		return invalid("do", "unknown jitter")
	}
	if c.renewEvery == 0 {
		c.renewEvery = c.ttl / 3
	}
	if c.renewEvery >= c.ttl {
		return invalid("do", "renew interval must be shorter than the ttl")
	}
	return nil
}

// delay returns the sleep before attempt n+1, after n failed attempts.
func (c *doConfig) delay(n int) time.Duration {
	d := c.retryDelay
	if c.backoff == BackoffExponential {
		for i := 1; i < n && d < c.maxDelay; i++ {
			d *= 2
		}
	}
	d = min(d, c.maxDelay)
	switch c.jitter {
	case JitterEqual:
		half := d / 2
		return half + time.Duration(c.random()*float64(d-half))
	case JitterFull:
		return time.Duration(c.random() * float64(d))
	case JitterAdd:
		return d + time.Duration(c.random()*float64(c.retryDelay))
	}
	return d
}

// Do runs fn while holding the lock on key: the auto-managed lock. It is
// [Hold], fn, then [Held.Release].
//
// It acquires with retries on contention (capped exponential back-off with
// jitter by default; see the options), returning at once when ctx ends and
// never sleeping past its timeout. When the locker is a [Watcher], a waiter
// retries as soon as the lock is released instead of sleeping out its
// delay.
//
// While fn runs, the lease is renewed every TTL/3. If renewal finds the
// lease lost (or cannot renew before it runs out), fn's ctx is cancelled
// with a cause matching [ErrLeaseLost], and Do's error matches
// ErrLeaseLost too.
//
// The lease is released when fn returns, panics (the panic goes on after the
// release) or is cancelled, on a context detached from ctx with its own
// timeout. A failed release goes to the release-error callback and never
// changes Do's result.
//
// Errors: InvalidArgument for a bad key or option; AcquisitionTimeout when
// time or retries run out (also when ctx's deadline passes while waiting);
// Aborted when ctx is cancelled; a backend's own error (unless
// [WithRetryTransient]); otherwise whatever fn returned.
func Do(ctx context.Context, l Locker, key string, fn func(ctx context.Context, lease Lease) error, opts ...Option) (err error) {
	h, err := Hold(ctx, l, key, opts...)
	if err != nil {
		return err
	}
	defer func() {
		h.Release()
		if lost := h.Lost(); lost != nil {
			err = errors.Join(err, lost)
		}
	}()
	return fn(h.Context(), h.Lease())
}

// Held is a lease that [Hold] acquired and keeps renewing until it is
// released or abandoned. Its methods are safe for concurrent use.
type Held struct {
	locker Locker
	lease  Lease
	cfg    doConfig
	ctx    context.Context // the caller's, detached: for renewals and the release
	work   context.Context
	cancel context.CancelCauseFunc
	once   sync.Once // guards the end (release or abandon)

	// Renewal runs on a timer (no goroutine until it fires); tick holds
	// ticking while it talks to the backend, so stopping can wait for it.
	ticking    sync.Mutex
	timer      *time.Timer
	validUntil time.Time // only the tick (and Hold, before it) touches it

	mu      sync.Mutex
	stopped bool
	lost    error
}

// Hold acquires the lock on key with the retry behaviour of [Do] and keeps
// renewing the lease (every TTL/3 by default) until [Held.Release] or
// [Held.Abandon]. It takes the same options as Do. Use it where the work
// does not fit one function call, or where the lease must sometimes be left
// to run out instead of released.
func Hold(ctx context.Context, l Locker, key string, opts ...Option) (*Held, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	key, err := NormalizeKey(key)
	if err != nil {
		return nil, err
	}
	lease, granted, err := acquireWithRetry(ctx, l, key, &cfg)
	if err != nil {
		return nil, err
	}
	work, cancel := context.WithCancelCause(ctx)
	h := &Held{locker: l, lease: lease, cfg: cfg, ctx: context.WithoutCancel(ctx), work: work, cancel: cancel}
	if cfg.renewEvery > 0 {
		// validUntil is the local instant before which the lease is
		// certainly still ours: the send time of the last successful
		// acquire or extend, plus the TTL.
		h.validUntil = granted.Add(cfg.ttl)
		h.mu.Lock()
		h.timer = time.AfterFunc(cfg.renewEvery, h.tick)
		h.mu.Unlock()
	}
	return h, nil
}

// Lease returns the held lease as acquired (renewals do not update its
// ExpiresAt).
func (h *Held) Lease() Lease { return h.lease }

// Context returns a context derived from the one given to Hold that is
// cancelled, with a cause matching [ErrLeaseLost], when the lease is found
// lost, and after Release or Abandon.
func (h *Held) Context() context.Context { return h.work }

// Lost returns the loss (matching [ErrLeaseLost]) once renewal has found
// the lease lost or unrenewable, and nil before that. After Release or
// Abandon its answer is final.
func (h *Held) Lost() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lost
}

// Release stops renewal and releases the lease on a context detached from
// Hold's, bounded by the release timeout. A failure goes to the
// release-error callback. Only the first Release or Abandon has an effect.
func (h *Held) Release() {
	h.once.Do(func() {
		h.stopRenewal()
		releaseAfter(h.ctx, h.locker, h.lease, &h.cfg)
		h.cancel(context.Canceled)
	})
}

// Abandon stops renewal without releasing: the lease runs out at its
// expiry and, until then, the key stays locked. Use it when releasing would
// let another holder redo work whose outcome could not be recorded. Only the
// first Release or Abandon has an effect.
func (h *Held) Abandon() {
	h.once.Do(func() {
		h.stopRenewal()
		h.cancel(context.Canceled)
	})
}

// stopRenewal stops the timer and waits for a renewal in flight.
func (h *Held) stopRenewal() {
	h.mu.Lock()
	h.stopped = true
	timer := h.timer
	h.mu.Unlock()
	if timer != nil && !timer.Stop() {
		h.ticking.Lock() // a tick is running or has run: wait for it
		h.ticking.Unlock()
	}
}

// tick extends the lease once and schedules the next tick, or records and
// signals a loss.
func (h *Held) tick() {
	h.ticking.Lock()
	defer h.ticking.Unlock()
	if h.isStopped() {
		return
	}
	cfg := &h.cfg
	sent := time.Now()
	rctx, rcancel := context.WithDeadline(h.ctx, h.validUntil)
	out, err := ExtendLease(rctx, h.locker, h.lease, cfg.ttl)
	rcancel()
	var lost error
	switch {
	case err == nil && out.OK:
		h.validUntil = sent.Add(cfg.ttl)
		h.rearm(cfg.renewEvery)
		return
	case err == nil:
		lost = fmt.Errorf("%w: renewal found the lease %s", ErrLeaseLost, out.Reason)
	case time.Now().Before(h.validUntil):
		// A transient failure with time left: try again soon.
		h.rearm(max(min(cfg.renewEvery/4, time.Until(h.validUntil)/2), time.Millisecond))
		return
	default:
		lost = fmt.Errorf("%w: the lease could not be renewed before it ran out: %w", ErrLeaseLost, err)
	}
	h.mu.Lock()
	h.lost = lost
	h.mu.Unlock()
	h.cancel(lost)
	if cfg.onLeaseLost != nil {
		func() {
			defer func() { _ = recover() }()
			cfg.onLeaseLost(h.lease, lost)
		}()
	}
}

func (h *Held) isStopped() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stopped
}

// rearm schedules the next tick unless renewal was stopped meanwhile.
func (h *Held) rearm(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.stopped {
		h.timer.Reset(d)
	}
}

// acquireWithRetry runs the acquire loop of Do and Hold. It returns the
// lease and the local time at which the successful attempt was sent: the
// lease runs out no earlier than that time plus the TTL, whatever the
// backend's clock says.
func acquireWithRetry(ctx context.Context, l Locker, key string, cfg *doConfig) (lease Lease, sent time.Time, err error) {
	start := time.Now()
	deadline := start.Add(cfg.timeout)
	watcher, _ := l.(Watcher)
	acquire := l.Acquire
	if cfg.acquire != nil {
		acquire = cfg.acquire
	}
	var lastErr error
	attempts, retries := 0, 0 // retries: attempts after a back-off delay ran out
	if cfg.stats != nil {
		defer func() { *cfg.stats = Stats{Attempts: attempts, Waited: time.Since(start)} }()
	}
	for {
		if err := ctx.Err(); err != nil {
			return Lease{}, time.Time{}, waitEnded(ctx, attempts, lastErr)
		}
		var (
			watch <-chan struct{}
			stop  = func() {}
		)
		attempts++
		sent = time.Now()
		lease, ok, err := acquire(ctx, key, cfg.ttl)
		switch {
		case err == nil && ok:
			return lease, sent, nil
		case err != nil && !(cfg.retryTransient && idemkit.CodeOf(err).Transient()):
			if ctx.Err() != nil {
				return Lease{}, time.Time{}, waitEnded(ctx, attempts, lastErr)
			}
			return Lease{}, time.Time{}, err
		case err != nil:
			lastErr = err
		case watcher != nil:
			watch, stop = watcher.Watch(ctx, key)
		}
		remaining := time.Until(deadline)
		if retries >= cfg.maxRetries || remaining <= 0 {
			stop()
			return Lease{}, time.Time{}, idemkit.NewError(idemkit.CodeAcquisitionTimeout, "do",
				fmt.Sprintf("lock not acquired after %d attempts in %v", attempts, time.Since(start).Round(time.Millisecond)), lastErr)
		}
		t := time.NewTimer(min(cfg.delay(retries+1), remaining))
		select {
		case <-ctx.Done():
		case <-t.C:
			retries++
		case <-watch:
			// Woken because the lock was released: this attempt is not a
			// retry, since its load on the backend follows the holders'
			// releases, not the waiter's polling.
		}
		t.Stop()
		stop()
	}
}

// waitEnded is the error when ctx ends while Do or Hold waits for the lock.
func waitEnded(ctx context.Context, attempts int, lastErr error) error {
	cause := context.Cause(ctx)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return idemkit.NewError(idemkit.CodeAcquisitionTimeout, "do",
			fmt.Sprintf("context deadline passed after %d attempts", attempts), errors.Join(cause, lastErr))
	}
	return idemkit.CheckContext(ctx, "do")
}

// releaseAfter releases the lease on a context detached from ctx and
// reports a failure to the callback.
func releaseAfter(ctx context.Context, l Locker, lease Lease, cfg *doConfig) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.releaseTimeout)
	defer cancel()
	if _, err := ReleaseLease(rctx, l, lease); err != nil {
		reportRelease(cfg.onReleaseError, cfg.logger, ReleaseFailure{Lease: lease, Source: "do", Err: err})
	}
}
