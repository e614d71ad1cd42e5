package lock

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/idemkit/idemkit"
)

// ReleaseFailure is what the release-error callback ([WithOnReleaseError])
// receives when releasing a lease failed after the caller was done with it
// (a [Handle]'s Close, or the release at the end of [Do]).
type ReleaseFailure struct {
	Lease  Lease  // the lease that could not be released; it runs out at Lease.ExpiresAt
	Source string // "close" or "do"
	Err    error  // the failure: a backend error, or a timeout (NetworkTimeout)
}

// Handle is a held lease together with the [Locker] that granted it, with
// at-most-once release. Its methods are safe for concurrent use, and safe on
// a nil *Handle, which stands for a lock that was not acquired: they do
// nothing and report OK = false, so
//
//	h, ok, err := lock.Acquire(ctx, locker, key, ttl)
//	defer h.Close()
//
// is correct whatever the status.
type Handle struct {
	locker Locker
	lease  Lease
	cfg    config

	mu       sync.Mutex
	released bool          // a release has been started
	done     chan struct{} // closed when that release has finished
	status   Status
	err      error
}

// Acquire makes one attempt to take the lock on key for ttl and returns a
// [Handle] for it. When the key is held it returns a nil handle, ok = false
// and a nil error. Of the options it uses those of the release that
// [Handle.Close] makes: [WithReleaseTimeout], [WithOnReleaseError] and
// [WithLogger].
func Acquire(ctx context.Context, l Locker, key string, ttl time.Duration, opts ...Option) (*Handle, bool, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, false, err
	}
	if err := cfg.validateRelease("acquire"); err != nil {
		return nil, false, err
	}
	lease, ok, err := l.Acquire(ctx, key, ttl)
	if err != nil || !ok {
		return nil, false, err
	}
	return &Handle{locker: l, lease: lease, cfg: cfg}, true, nil
}

// Lease returns the held lease (the zero Lease for a nil handle). Its
// ExpiresAt is the one granted at acquire time; extends do not update it.
func (h *Handle) Lease() Lease {
	if h == nil {
		return Lease{}
	}
	return h.lease
}

// Release releases the lease. Only the first call on a handle (Release or
// Close) reaches the backend; later calls report OK = false with
// Expired = false and do no I/O. Errors are returned to the caller, not to
// the release-error callback.
func (h *Handle) Release(ctx context.Context) (Status, error) {
	if h == nil || !h.start() {
		return Status{}, nil
	}
	out, err := releaseLease(ctx, h.locker, h.lease)
	h.finish(out, err)
	return out, err
}

// Extend extends the lease to now + ttl through the locker. It is not gated
// on the handle's state: after a release the backend answers OK = false.
func (h *Handle) Extend(ctx context.Context, ttl time.Duration) (Status, error) {
	if h == nil {
		return Status{}, nil
	}
	return extendLease(ctx, h.locker, h.lease, ttl)
}

// Close releases the lease if nothing has released it yet, on a context of
// its own bounded by the release timeout ([WithReleaseTimeout]), and waits
// (as long) for a release already in flight. It never returns an error:
// failures go to the release-error callback ([WithOnReleaseError]).
// Concurrent and repeated calls share one backend call.
func (h *Handle) Close() {
	if h == nil {
		return
	}
	if !h.start() {
		h.wait(h.cfg.releaseTimeout)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.releaseTimeout)
	defer cancel()
	result := make(chan struct{})
	var out Status
	var err error
	go func() {
		out, err = releaseLease(ctx, h.locker, h.lease)
		close(result)
	}()
	select {
	case <-result:
		h.finish(out, err)
		if err != nil {
			h.report(err)
		}
	case <-ctx.Done():
		// The backend did not answer in time. The cancelled ctx aborts
		// its I/O; the lease runs out at its expiry.
		terr := idemkit.NewError(idemkit.CodeNetworkTimeout, "close", "release did not finish within the release timeout", ctx.Err())
		h.finish(Status{}, terr)
		h.report(terr)
	}
}

// start marks the handle released and reports whether the caller is the
// one that must call the backend.
func (h *Handle) start() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released {
		return false
	}
	h.released = true
	h.done = make(chan struct{})
	return true
}

func (h *Handle) finish(out Status, err error) {
	h.mu.Lock()
	h.status, h.err = out, err
	close(h.done)
	h.mu.Unlock()
}

func (h *Handle) wait(limit time.Duration) {
	h.mu.Lock()
	done := h.done
	h.mu.Unlock()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

func (h *Handle) report(err error) {
	reportRelease(&h.cfg, ReleaseFailure{Lease: h.lease, Source: "close", Err: err})
}

// reportRelease hands f to the callback, or logs it when there is none. A
// panicking callback is recovered.
func reportRelease(cfg *config, f ReleaseFailure) {
	if cfg.onReleaseError == nil {
		logger := cfg.logger
		if logger == nil {
			logger = slog.Default()
		}
		logger.Warn("lock: release failed; the lease will run out at its expiry",
			slog.String("source", f.Source),
			slog.String("key_hash", idemkit.DefaultHasher().Hash(f.Lease.Key)),
			slog.String("id_hash", idemkit.DefaultHasher().Hash(f.Lease.ID)),
			slog.String("code", idemkit.CodeOf(f.Err).String()),
			slog.String("error", f.Err.Error()))
		return
	}
	defer func() { _ = recover() }()
	cfg.onReleaseError(f)
}
