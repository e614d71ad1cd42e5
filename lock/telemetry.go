package lock

import (
	"context"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
)

// Report describes one completed lock operation, failures included, for
// the [Reporter] of [WithTelemetry].
type Report struct {
	// Op is "acquire", "release", "extend", "is-locked", "lookup-key" or
	// "lookup-id".
	Op string
	// OK: acquire took the lock; release or extend took effect; is-locked
	// found the key locked; a lookup found a live lock. False on error.
	OK bool
	// Reason, when OK is false without an error: "locked" (acquire),
	// "expired" or "not-found" (release, extend).
	Reason string
	// KeyHash names the key of acquire, is-locked and lookup-key.
	KeyHash string
	// IDHash names the lock id of release, extend, lookup-id, and of a
	// successful acquire.
	IDHash string
	// Key and ID are the raw values, set only when the raw-identifier
	// predicate ([WithRawIdentifiers]) allows them for this report.
	Key, ID string
	// Fence is the fence of a successful acquire, or of the lock a lookup
	// found.
	Fence idemkit.Fence
	// Err is the operation's error and Code its code; nil and
	// idemkit.CodeUnknown on success.
	Err  error
	Code idemkit.Code
	// Duration is how long the operation took.
	Duration time.Duration
}

// Reporter receives the reports of [WithTelemetry].
type Reporter interface {
	LockReport(Report)
}

// ReporterFunc adapts a function to [Reporter].
type ReporterFunc func(Report)

// LockReport calls f(r).
func (f ReporterFunc) LockReport(r Report) { f(r) }

// instrumented is the Locker that WithTelemetry returns.
type instrumented struct {
	inner    Locker
	to       Reporter
	hasher   idemkit.Hasher
	allowRaw func(Report) bool
}

var (
	_ Locker        = (*instrumented)(nil)
	_ store.Watcher = (*instrumented)(nil)
	_ KeyedLocker   = (*instrumented)(nil)
)

// WithTelemetry wraps l in a [Locker] that reports every operation to r:
// one report per call, successes, contention and errors alike, with its
// duration. Of the options it uses [WithHasher] and [WithRawIdentifiers].
// The reporter runs synchronously after the operation and cannot change
// its result: a panic in it is recovered. The locker it returns is also a
// [store.Watcher] and a [KeyedLocker], which delegate to l when it is one
// (otherwise its watches never fire, and keyed calls use the lock id
// alone), and has an Unwrap() Locker method that returns l.
func WithTelemetry(l Locker, r Reporter, opts ...Option) (Locker, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if l == nil || r == nil {
		return nil, invalid("telemetry", "the locker and the reporter must not be nil")
	}
	return &instrumented{inner: l, to: r, hasher: cfg.hasher, allowRaw: cfg.allowRaw}, nil
}

// Unwrap returns the wrapped locker.
func (t *instrumented) Unwrap() Locker { return t.inner }

func (t *instrumented) Acquire(ctx context.Context, key string, ttl time.Duration) (Lease, bool, error) {
	start := time.Now()
	lease, ok, err := t.inner.Acquire(ctx, key, ttl)
	r := Report{Op: "acquire", OK: ok, KeyHash: t.keyHash(key), Key: key}
	if ok {
		r.IDHash, r.ID, r.Fence = t.hasher.Hash(lease.ID), lease.ID, lease.Fence
	} else if err == nil {
		r.Reason = "locked"
	}
	t.emit(r, start, err)
	return lease, ok, err
}

func (t *instrumented) Release(ctx context.Context, id string) (Status, error) {
	start := time.Now()
	st, err := t.inner.Release(ctx, id)
	t.emitStatus("release", id, st, start, err)
	return st, err
}

func (t *instrumented) Extend(ctx context.Context, id string, ttl time.Duration) (Status, error) {
	start := time.Now()
	st, err := t.inner.Extend(ctx, id, ttl)
	t.emitStatus("extend", id, st, start, err)
	return st, err
}

// ReleaseKey releases through the wrapped locker (with the key when it is a
// [KeyedLocker]) and reports it as a release.
func (t *instrumented) ReleaseKey(ctx context.Context, key, id string) (Status, error) {
	start := time.Now()
	st, err := releaseLease(ctx, t.inner, Lease{Key: key, ID: id})
	t.emitStatus("release", id, st, start, err)
	return st, err
}

// ExtendKey extends through the wrapped locker (with the key when it is a
// [KeyedLocker]) and reports it as an extend.
func (t *instrumented) ExtendKey(ctx context.Context, key, id string, ttl time.Duration) (Status, error) {
	start := time.Now()
	st, err := extendLease(ctx, t.inner, Lease{Key: key, ID: id}, ttl)
	t.emitStatus("extend", id, st, start, err)
	return st, err
}

func (t *instrumented) IsLocked(ctx context.Context, key string) (bool, error) {
	start := time.Now()
	locked, err := t.inner.IsLocked(ctx, key)
	t.emit(Report{Op: "is-locked", OK: locked, KeyHash: t.keyHash(key), Key: key}, start, err)
	return locked, err
}

func (t *instrumented) LookupKey(ctx context.Context, key string) (Info, bool, error) {
	start := time.Now()
	info, ok, err := t.inner.LookupKey(ctx, key)
	t.emit(Report{Op: "lookup-key", OK: ok, KeyHash: t.keyHash(key), Key: key, Fence: info.Fence}, start, err)
	return info, ok, err
}

func (t *instrumented) LookupID(ctx context.Context, id string) (Info, bool, error) {
	start := time.Now()
	info, ok, err := t.inner.LookupID(ctx, id)
	t.emit(Report{Op: "lookup-id", OK: ok, IDHash: t.hasher.Hash(id), ID: id, Fence: info.Fence}, start, err)
	return info, ok, err
}

// Watch delegates to the wrapped locker when it is a [store.Watcher];
// otherwise it returns a channel that never fires.
func (t *instrumented) Watch(ctx context.Context, key string) (<-chan struct{}, func()) {
	if w, ok := t.inner.(store.Watcher); ok {
		return w.Watch(ctx, key)
	}
	return nil, func() {}
}

// emitStatus reports a release or extend.
func (t *instrumented) emitStatus(op, id string, st Status, start time.Time, err error) {
	r := Report{Op: op, OK: st.OK, IDHash: t.hasher.Hash(id), ID: id}
	switch {
	case st.OK:
	case st.Expired:
		r.Reason = "expired"
	default:
		r.Reason = "not-found"
	}
	t.emit(r, start, err)
}

// emit completes r and hands it to the reporter, redacting raw identifiers
// unless the predicate allows them and recovering from a panicking
// reporter.
func (t *instrumented) emit(r Report, start time.Time, err error) {
	r.Duration = time.Since(start)
	if err != nil {
		r.OK, r.Reason, r.Err, r.Code = false, "", err, idemkit.CodeOf(err)
	}
	if !t.rawAllowed(r) {
		r.Key, r.ID = "", ""
	}
	defer func() { _ = recover() }()
	t.to.LockReport(r)
}

// keyHash hashes the normalised key, so both spellings of a key share a hash.
func (t *instrumented) keyHash(key string) string {
	if n, err := normalizeKey("telemetry", key); err == nil {
		key = n
	}
	return t.hasher.Hash(key)
}

func (t *instrumented) rawAllowed(r Report) (ok bool) {
	if t.allowRaw == nil {
		return false
	}
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	redacted := r
	redacted.Key, redacted.ID = "", ""
	return t.allowRaw(redacted)
}
