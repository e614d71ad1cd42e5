package lock

import (
	"context"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
)

// Report describes one completed lock operation, failures included.
type Report struct {
	Op       string // "acquire", "release", "extend", "is-locked", "lookup-key" or "lookup-id"
	OK       bool   // taken, released, extended, locked or found; false on error
	Reason   string // when not OK without an error: "locked", "expired" or "not-found"
	KeyHash  string // the key of acquire, is-locked and lookup-key
	IDHash   string // the lock id of release, extend, lookup-id and a successful acquire
	Key, ID  string // the raw values, only where [WithRawIdentifiers] allows them
	Fence    idemkit.Fence
	Err      error        // the operation's error, if any
	Code     idemkit.Code // its code (CodeUnknown on success)
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

// WithTelemetry wraps l in a [Locker] that reports every call to r, with
// its duration, errors included, keys and ids hashed. Of the options it
// uses [WithHasher] and [WithRawIdentifiers]. r runs synchronously after
// the call and cannot change its result (a panic is recovered). The locker
// is also a [store.Watcher] and a [KeyedLocker], delegating to l where it
// is one, and has an Unwrap() Locker method.
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
	return t.change("release", id, func() (Status, error) { return t.inner.Release(ctx, id) })
}

func (t *instrumented) Extend(ctx context.Context, id string, ttl time.Duration) (Status, error) {
	return t.change("extend", id, func() (Status, error) { return t.inner.Extend(ctx, id, ttl) })
}

func (t *instrumented) ReleaseKey(ctx context.Context, key, id string) (Status, error) {
	return t.change("release", id, func() (Status, error) { return releaseLease(ctx, t.inner, Lease{Key: key, ID: id}) })
}

func (t *instrumented) ExtendKey(ctx context.Context, key, id string, ttl time.Duration) (Status, error) {
	return t.change("extend", id, func() (Status, error) { return extendLease(ctx, t.inner, Lease{Key: key, ID: id}, ttl) })
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

// Watch never fires unless the wrapped locker is a [store.Watcher].
func (t *instrumented) Watch(ctx context.Context, key string) (<-chan struct{}, func()) {
	if w, ok := t.inner.(store.Watcher); ok {
		return w.Watch(ctx, key)
	}
	return nil, func() {}
}

// change runs a release or extend and reports it.
func (t *instrumented) change(op, id string, call func() (Status, error)) (Status, error) {
	start := time.Now()
	st, err := call()
	r := Report{Op: op, OK: st.OK, IDHash: t.hasher.Hash(id), ID: id}
	switch {
	case st.OK:
	case st.Expired:
		r.Reason = "expired"
	default:
		r.Reason = "not-found"
	}
	t.emit(r, start, err)
	return st, err
}

// emit completes r, redacts it unless allowed, and reports it.
func (t *instrumented) emit(r Report, start time.Time, err error) {
	r.Duration = time.Since(start)
	if err != nil {
		r.OK, r.Reason, r.Err, r.Code = false, "", err, idemkit.CodeOf(err)
	}
	key, id := r.Key, r.ID
	r.Key, r.ID = "", ""
	if t.rawAllowed(r) {
		r.Key, r.ID = key, id
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

// rawAllowed asks the predicate about the redacted r; a panic refuses.
func (t *instrumented) rawAllowed(r Report) (ok bool) {
	defer func() { _ = recover() }()
	return t.allowRaw != nil && t.allowRaw(r)
}
