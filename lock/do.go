package lock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
)

// Option configures [New], [Do], [Acquire] and [WithTelemetry]; each uses
// the options its doc names and ignores the others.
type Option func(*config)

type config struct {
	ttl            time.Duration
	backoff        idemkit.Backoff
	timeout        time.Duration
	retryTransient bool
	renewEvery     time.Duration // 0: ttl/3; < 0: never
	releaseTimeout time.Duration
	onReleaseError func(ReleaseFailure)
	logger         *slog.Logger
	hasher         idemkit.Hasher
	allowRaw       func(Report) bool
}

// WithTTL sets the lease's TTL in [Do]. Default: 30 s.
func WithTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// WithBackoff sets the delays between [Do]'s attempts on a held key: the
// n-th delay is drawn from [d/2, d] for d = min(Base·2^(n−1), Max) (see
// [idemkit.Backoff]). Default: idemkit.Backoff{Base: 100 ms, Max: 2 s}.
// A delay never runs past the timeout (see [WithTimeout]), and a locker
// that is a [store.Watcher] wakes a waiter before its delay ends when the
// lock is released.
func WithBackoff(b idemkit.Backoff) Option { return func(c *config) { c.backoff = b } }

// WithTimeout bounds the whole wait for the lock in [Do], from the first
// attempt to the last; fn's running time is not counted. Do makes one last
// attempt at the deadline and never sleeps past it. It is the one bound of
// the wait: there is no retry count. Default: 5 s. Zero means a single
// attempt.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithRetryTransient makes [Do] retry transient backend errors
// (ServiceUnavailable, NetworkTimeout, RateLimited) like contention, within
// the same timeout. When it runs out the error is AcquisitionTimeout
// wrapping the last cause. Default: off (a backend error ends Do at once).
func WithRetryTransient(on bool) Option { return func(c *config) { c.retryTransient = on } }

// WithRenewInterval sets how often [Do] extends the lease (to now + TTL)
// while fn runs; it must be shorter than the TTL. Default: TTL/3. A
// negative interval turns renewal off.
func WithRenewInterval(d time.Duration) Option { return func(c *config) { c.renewEvery = d } }

// WithReleaseTimeout bounds the release made after the caller is done: at
// the end of [Do], and in [Handle.Close]. It runs on a context detached
// from the caller's. Default: 5 s. When it passes, the in-flight request is
// cancelled through its ctx and the release-error callback receives a
// NetworkTimeout failure; the lease runs out at its expiry.
func WithReleaseTimeout(d time.Duration) Option { return func(c *config) { c.releaseTimeout = d } }

// WithOnReleaseError sets the callback for a failed release after the
// caller is done (the end of [Do], [Handle.Close]). It runs synchronously;
// a panic in it is recovered and ignored. A release failure never changes
// what Do returns. Default: a warning on the logger naming the lease by
// hashes only.
func WithOnReleaseError(f func(ReleaseFailure)) Option {
	return func(c *config) { c.onReleaseError = f }
}

// WithLogger sets the logger of [New]'s Client (the warning when a fence
// passes [idemkit.FenceWarn]) and of the default release-error callback.
// Default: slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithHasher sets the hasher of [WithTelemetry]'s KeyHash and IDHash.
// Default: [idemkit.DefaultHasher] (HMAC-SHA-256 under a per-process
// secret); use [idemkit.NewHMACHasher] with a shared secret to correlate
// reports across processes.
func WithHasher(h idemkit.Hasher) Option { return func(c *config) { c.hasher = h } }

// WithRawIdentifiers sets the predicate of [WithTelemetry] that decides,
// per report, whether the raw key and lock id may be included; it sees the
// report without them. Default: never. A predicate that panics counts as a
// refusal.
func WithRawIdentifiers(allow func(Report) bool) Option {
	return func(c *config) { c.allowRaw = allow }
}

// newConfig applies opts over the defaults, refusing a nil option.
func newConfig(opts []Option) (config, error) {
	c := config{
		ttl:            30 * time.Second,
		backoff:        idemkit.Backoff{Base: 100 * time.Millisecond, Max: 2 * time.Second},
		timeout:        5 * time.Second,
		releaseTimeout: 5 * time.Second,
		hasher:         idemkit.DefaultHasher(),
	}
	for _, o := range opts {
		if o == nil {
			return c, invalid("options", "an option is nil; remove it, or pass the option it was meant to be")
		}
		o(&c)
	}
	if c.hasher == nil {
		return c, invalid("options", "the hasher must not be nil; leave WithHasher out for the default")
	}
	return c, nil
}

// validateRelease checks the options that the release after the caller is
// done uses.
func (c *config) validateRelease(op string) error {
	if c.releaseTimeout <= 0 {
		return invalid(op, "release timeout must be positive")
	}
	return nil
}

func (c *config) validate() error {
	switch {
	case c.ttl < time.Millisecond:
		return invalid("do", "ttl must be at least 1ms")
	case !c.backoff.Valid():
		return invalid("do", "backoff needs 0 < Base <= Max")
	case c.timeout < 0:
		return invalid("do", "timeout must not be negative")
	}
	if err := c.validateRelease("do"); err != nil {
		return err
	}
	if c.renewEvery == 0 {
		c.renewEvery = c.ttl / 3
	}
	if c.renewEvery >= c.ttl {
		return invalid("do", "renew interval must be shorter than the ttl")
	}
	return nil
}

// Do runs fn while holding the lock on key: the auto-managed lock.
//
// It acquires with retries on contention (capped exponential back-off with
// jitter, [WithBackoff]), returning at once when ctx ends and never
// sleeping past its timeout ([WithTimeout]). When the locker is a
// [store.Watcher], a waiter retries as soon as the lock is released instead of
// sleeping out its delay.
//
// While fn runs, the lease is renewed every TTL/3 ([WithRenewInterval]).
// If renewal finds the lease lost (or cannot renew it before it runs out),
// fn's ctx is cancelled with a cause matching [idemkit.ErrLeaseLost], and Do's
// error matches idemkit.ErrLeaseLost too.
//
// The lease is released when fn returns, panics (the panic goes on after the
// release) or is cancelled, on a context detached from ctx with its own
// timeout ([WithReleaseTimeout]). A failed release goes to the
// release-error callback ([WithOnReleaseError]) and never changes Do's
// result.
//
// Errors: InvalidArgument for a bad key or option; AcquisitionTimeout when
// the timeout runs out (also when ctx's deadline passes while waiting);
// Aborted when ctx is cancelled; a backend's own error (unless
// [WithRetryTransient]); otherwise whatever fn returned.
func Do(ctx context.Context, l Locker, key string, fn func(ctx context.Context, lease Lease) error, opts ...Option) (err error) {
	h, err := hold(ctx, l, key, opts)
	if err != nil {
		return err
	}
	defer func() {
		h.release()
		if lost := h.lostErr(); lost != nil {
			err = errors.Join(err, lost)
		}
	}()
	return fn(h.work, h.lease)
}

// held is a lease that Do acquired and keeps renewing until it is
// released.
type held struct {
	locker Locker
	lease  Lease
	cfg    config
	ctx    context.Context // the caller's, detached: for renewals and the release
	work   context.Context // fn's: cancelled with the loss, and after the release
	cancel context.CancelCauseFunc

	// Renewal runs on a timer (no goroutine until it fires); tick holds
	// ticking while it talks to the backend, so stopping can wait for it.
	ticking    sync.Mutex
	timer      *time.Timer
	validUntil time.Time // only the tick (and hold, before it) touches it

	mu      sync.Mutex
	stopped bool
	lost    error
}

// hold acquires the lock on key with Do's retries and starts renewing it.
func hold(ctx context.Context, l Locker, key string, opts []Option) (*held, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	key, err = normalizeKey("do", key)
	if err != nil {
		return nil, err
	}
	lease, granted, err := acquireWithRetry(ctx, l, key, &cfg)
	if err != nil {
		return nil, err
	}
	work, cancel := context.WithCancelCause(ctx)
	h := &held{locker: l, lease: lease, cfg: cfg, ctx: context.WithoutCancel(ctx), work: work, cancel: cancel}
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

// lostErr returns the loss (matching [idemkit.ErrLeaseLost]) once renewal has found
// the lease lost or unrenewable, and nil before that.
func (h *held) lostErr() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lost
}

// release stops renewal and releases the lease on a context detached from
// the caller's, bounded by the release timeout.
func (h *held) release() {
	h.stopRenewal()
	releaseAfter(h.ctx, h.locker, h.lease, &h.cfg, "do")
	h.cancel(context.Canceled)
}

// stopRenewal stops the timer and waits for a renewal in flight.
func (h *held) stopRenewal() {
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
func (h *held) tick() {
	h.ticking.Lock()
	defer h.ticking.Unlock()
	if h.isStopped() {
		return
	}
	cfg := &h.cfg
	sent := time.Now()
	rctx, rcancel := context.WithDeadline(h.ctx, h.validUntil)
	out, err := extendLease(rctx, h.locker, h.lease, cfg.ttl)
	rcancel()
	var lost error
	switch {
	case err == nil && out.OK:
		h.validUntil = sent.Add(cfg.ttl)
		h.rearm(cfg.renewEvery)
		return
	case err == nil:
		why := "gone (released, deleted or taken over)"
		if out.Expired {
			why = "expired"
		}
		lost = fmt.Errorf("%w: renewal found the lease %s", idemkit.ErrLeaseLost, why)
	case time.Now().Before(h.validUntil):
		// A transient failure with time left: try again soon.
		h.rearm(max(min(cfg.renewEvery/4, time.Until(h.validUntil)/2), time.Millisecond))
		return
	default:
		lost = fmt.Errorf("%w: the lease could not be renewed before it ran out: %w", idemkit.ErrLeaseLost, err)
	}
	h.mu.Lock()
	h.lost = lost
	h.mu.Unlock()
	h.cancel(lost)
}

func (h *held) isStopped() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stopped
}

// rearm schedules the next tick unless renewal was stopped meanwhile.
func (h *held) rearm(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.stopped {
		h.timer.Reset(d)
	}
}

// acquireWithRetry runs the acquire loop of Do. It returns the
// lease and the local time at which the successful attempt was sent: the
// lease runs out no earlier than that time plus the TTL, whatever the
// backend's clock says.
func acquireWithRetry(ctx context.Context, l Locker, key string, cfg *config) (lease Lease, sent time.Time, err error) {
	start := time.Now()
	deadline := start.Add(cfg.timeout)
	watcher, _ := l.(store.Watcher)
	var lastErr error
	attempts, delays := 0, 0 // delays: back-off delays that ran out
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
		lease, ok, err := l.Acquire(ctx, key, cfg.ttl)
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
		if remaining <= 0 {
			stop()
			return Lease{}, time.Time{}, idemkit.NewError(idemkit.CodeAcquisitionTimeout, "do",
				fmt.Sprintf("lock not acquired after %d attempts in %v", attempts, time.Since(start).Round(time.Millisecond)), lastErr)
		}
		t := time.NewTimer(min(cfg.backoff.Delay(delays+1), remaining))
		select {
		case <-ctx.Done():
		case <-t.C:
			delays++
		case <-watch:
			// Woken because the lock was released: the back-off does not
			// grow, since this attempt follows the holders' releases, not
			// the waiter's polling.
		}
		t.Stop()
		stop()
	}
}

// waitEnded is the error when ctx ends while Do waits for the lock.
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
func releaseAfter(ctx context.Context, l Locker, lease Lease, cfg *config, source string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.releaseTimeout)
	defer cancel()
	if _, err := releaseLease(rctx, l, lease); err != nil {
		reportRelease(cfg, ReleaseFailure{Lease: lease, Source: source, Err: err})
	}
}

func invalid(op, detail string) error {
	return idemkit.NewError(idemkit.CodeInvalidArgument, op, detail, nil)
}
