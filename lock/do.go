package lock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// WithBackoff sets the delays between [Do]'s attempts on a held key (see
// [idemkit.Backoff]); none runs past the timeout, and a [store.Watcher]
// locker wakes the waiter at a release. Default: {Base: 100 ms, Max: 2 s}.
func WithBackoff(b idemkit.Backoff) Option { return func(c *config) { c.backoff = b } }

// WithTimeout bounds [Do]'s whole wait for the lock (not fn's running
// time), the one bound: there is no retry count; a last attempt comes at
// the deadline. Default: 5 s. Zero means a single attempt.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithRetryTransient makes [Do] retry ServiceUnavailable, NetworkTimeout
// and RateLimited errors like contention, within the timeout, after which
// the error is AcquisitionTimeout wrapping the last cause. Default: off.
func WithRetryTransient(on bool) Option { return func(c *config) { c.retryTransient = on } }

// WithRenewInterval sets how often [Do] extends the lease while fn runs;
// it must be shorter than the TTL, and a negative one turns renewal off.
// Default: TTL/3.
func WithRenewInterval(d time.Duration) Option { return func(c *config) { c.renewEvery = d } }

// WithReleaseTimeout bounds the release after the caller is done (the end
// of [Do], [Handle.Close]), made on a context detached from the caller's;
// past it the call is cancelled, the callback gets a NetworkTimeout, and
// the lease runs out at its expiry. Default: 5 s.
func WithReleaseTimeout(d time.Duration) Option { return func(c *config) { c.releaseTimeout = d } }

// WithOnReleaseError sets the callback, run synchronously with any panic
// recovered, for a failed release after the caller is done; it never
// changes what Do returns. Default: a warning on the logger, by hashes.
func WithOnReleaseError(f func(ReleaseFailure)) Option {
	return func(c *config) { c.onReleaseError = f }
}

// WithLogger sets the logger of [New]'s fence-limit warning and of the
// default release-error callback. Default: slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithHasher sets the hasher of [WithTelemetry]'s hashes. Default:
// [idemkit.DefaultHasher], under a per-process secret; an
// [idemkit.NewHMACHasher] with a shared secret correlates processes.
func WithHasher(h idemkit.Hasher) Option { return func(c *config) { c.hasher = h } }

// WithRawIdentifiers sets the predicate of [WithTelemetry] that allows, per
// report (which it sees without them), the raw key and lock id. Default:
// never; a predicate that panics refuses.
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
	if c.logger == nil {
		c.logger = slog.Default()
	}
	if c.hasher == nil {
		return c, invalid("options", "the hasher must not be nil; leave WithHasher out for the default")
	}
	return c, nil
}

// validate checks the options of the release after the caller is done,
// and, for Do, all of them.
func (c *config) validate(op string) error {
	switch {
	case c.releaseTimeout <= 0:
		return invalid(op, "release timeout must be positive")
	case op != "do":
		return nil
	case c.ttl < time.Millisecond:
		return invalid("do", "ttl must be at least 1ms")
	case !c.backoff.Valid():
		return invalid("do", "backoff needs 0 < Base <= Max")
	case c.timeout < 0:
		return invalid("do", "timeout must not be negative")
	}
	if c.renewEvery == 0 {
		c.renewEvery = c.ttl / 3
	}
	if c.renewEvery >= c.ttl {
		return invalid("do", "renew interval must be shorter than the ttl")
	}
	return nil
}

// Do runs fn while holding the lock on key. It acquires with retries on
// contention ([WithBackoff], [WithTimeout]), woken at a release when the
// locker is a [store.Watcher], and returns at once when ctx ends. While fn
// runs it renews the lease ([WithRenewInterval]); a lease found lost, or
// not renewed before it runs out, cancels fn's ctx with a cause matching
// [idemkit.ErrLeaseLost], as Do's error does. When fn returns, panics (the
// panic goes on) or is cancelled, the lease is released on a detached
// context ([WithReleaseTimeout]); a failure goes to [WithOnReleaseError]
// and never changes Do's result.
//
// Errors: InvalidArgument for a bad key or option; AcquisitionTimeout when
// the timeout runs out (also when ctx's deadline passes while waiting);
// Aborted when ctx is cancelled; a backend's own error (unless
// [WithRetryTransient]); otherwise whatever fn returned.
func Do(ctx context.Context, l Locker, key string, fn func(ctx context.Context, lease Lease) error, opts ...Option) (err error) {
	cfg, err := newConfig(opts)
	if err == nil {
		err = cfg.validate("do")
	}
	if err == nil {
		key, err = normalizeKey("do", key)
	}
	if err != nil {
		return err
	}
	lease, sent, err := acquireWithRetry(ctx, l, key, &cfg)
	if err != nil {
		return err
	}
	work, cancel := context.WithCancelCause(ctx)
	detached := context.WithoutCancel(ctx) // for renewals and the release
	stop := renew(detached, l, lease, &cfg, sent, cancel)
	defer func() {
		lost := stop()
		rctx, rcancel := context.WithTimeout(detached, cfg.releaseTimeout)
		if _, rerr := releaseLease(rctx, l, lease); rerr != nil {
			reportRelease(&cfg, ReleaseFailure{Lease: lease, Source: "do", Err: rerr})
		}
		rcancel()
		cancel(context.Canceled)
		if lost != nil {
			err = errors.Join(err, lost)
		}
	}()
	return fn(work, lease)
}

// renew extends lease every renew interval from a goroutine until stop,
// which waits for a renewal in flight and returns the loss, if any: when
// renewal finds the lease lost, or cannot renew it before it certainly
// runs out (the send time of the last acquire or extend, plus the TTL), it
// cancels fn's ctx with a loss matching [idemkit.ErrLeaseLost].
func renew(ctx context.Context, l Locker, lease Lease, cfg *config, sent time.Time, cancel context.CancelCauseFunc) (stop func() error) {
	if cfg.renewEvery <= 0 {
		return func() error { return nil }
	}
	quit, done := make(chan struct{}), make(chan struct{})
	var lost error
	go func() {
		defer close(done)
		validUntil, wait := sent.Add(cfg.ttl), cfg.renewEvery
		for {
			t := time.NewTimer(wait)
			select {
			case <-quit:
				t.Stop()
				return
			case <-t.C:
			}
			sent := time.Now()
			rctx, rcancel := context.WithDeadline(ctx, validUntil)
			st, err := extendLease(rctx, l, lease, cfg.ttl)
			rcancel()
			switch {
			case err == nil && st.OK:
				validUntil, wait = sent.Add(cfg.ttl), cfg.renewEvery
				continue
			case err == nil && st.Expired:
				lost = fmt.Errorf("%w: renewal found the lease expired", idemkit.ErrLeaseLost)
			case err == nil:
				lost = fmt.Errorf("%w: renewal found the lease gone (released, deleted or taken over)", idemkit.ErrLeaseLost)
			case time.Now().Before(validUntil): // a transient failure with time left: try again soon
				wait = max(min(cfg.renewEvery/4, time.Until(validUntil)/2), time.Millisecond)
				continue
			default:
				lost = fmt.Errorf("%w: the lease could not be renewed before it ran out: %w", idemkit.ErrLeaseLost, err)
			}
			cancel(lost)
			return
		}
	}()
	return func() error {
		close(quit)
		<-done
		return lost
	}
}

// acquireWithRetry runs Do's acquire loop. It returns the lease and the
// send time of the attempt that took it: the lease has certainly not run
// out before that time plus the TTL, whatever the backend's clock says.
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
		case <-watch: // woken by a release: the back-off does not grow
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

func invalid(op, detail string) error {
	return idemkit.NewError(idemkit.CodeInvalidArgument, op, detail, nil)
}
