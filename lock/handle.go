package lock

import (
	"context"
	"sync"
	"time"

	"github.com/idemkit/idemkit"
)

// ReleaseFailure is what [WithOnReleaseError]'s callback receives when the
// release after the caller was done failed ([Handle.Close], the end of [Do]).
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
	once   sync.Once     // the one release
	done   chan struct{} // closed when it has finished
}

// Acquire makes one attempt to take the lock on key for ttl and returns a
// [Handle] for it (nil, ok = false and no error when the key is held). Of
// the options it uses [WithReleaseTimeout], [WithOnReleaseError] and
// [WithLogger], for [Handle.Close].
func Acquire(ctx context.Context, l Locker, key string, ttl time.Duration, opts ...Option) (*Handle, bool, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, false, err
	}
	if err := cfg.validate("acquire"); err != nil {
		return nil, false, err
	}
	lease, ok, err := l.Acquire(ctx, key, ttl)
	if err != nil || !ok {
		return nil, false, err
	}
	return &Handle{locker: l, lease: lease, cfg: cfg, done: make(chan struct{})}, true, nil
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
// Close) reaches the backend; later calls report OK = false and do no I/O.
// Errors are returned to the caller, not to the release-error callback.
func (h *Handle) Release(ctx context.Context) (Status, error) {
	if h == nil || !h.starts() {
		return Status{}, nil
	}
	defer close(h.done)
	return releaseLease(ctx, h.locker, h.lease)
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
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.releaseTimeout)
	defer cancel() // also aborts a backend call still running at the timeout
	if !h.starts() {
		select {
		case <-h.done:
		case <-ctx.Done():
		}
		return
	}
	defer close(h.done)
	result := make(chan error, 1)
	go func() {
		_, err := releaseLease(ctx, h.locker, h.lease)
		result <- err
	}()
	var err error
	select {
	case err = <-result:
	case <-ctx.Done(): // the lease runs out at its expiry
		err = idemkit.NewError(idemkit.CodeNetworkTimeout, "close", "release did not finish within the release timeout", ctx.Err())
	}
	if err != nil {
		reportRelease(&h.cfg, ReleaseFailure{Lease: h.lease, Source: "close", Err: err})
	}
}

// starts reports whether the caller makes the handle's one release.
func (h *Handle) starts() (first bool) {
	h.once.Do(func() { first = true })
	return first
}

// reportRelease hands f to the callback, or logs it when there is none. A
// panicking callback is recovered.
func reportRelease(cfg *config, f ReleaseFailure) {
	if cfg.onReleaseError == nil {
		info := f.Lease.info()
		cfg.logger.Warn("lock: release failed; the lease will run out at its expiry", "source", f.Source,
			"key_hash", info.KeyHash, "id_hash", info.IDHash, "code", idemkit.CodeOf(f.Err).String(), "error", f.Err.Error())
		return
	}
	defer func() { _ = recover() }()
	cfg.onReleaseError(f)
}
