package lock

import (
	"context"
	"time"

	"github.com/idemkit/idemkit"
)

// Op names a lock operation in telemetry events.
type Op string

// The operations the telemetry decorator reports.
const (
	OpAcquire   Op = "acquire"
	OpRelease   Op = "release"
	OpExtend    Op = "extend"
	OpIsLocked  Op = "is-locked"
	OpLookupKey Op = "lookup-key"
	OpLookupID  Op = "lookup-id"
)

// Event describes one completed operation, failures included.
type Event struct {
	Op Op
	// OK: acquire took the lock; release or extend took effect; is-locked
	// found the key locked; a lookup found a live lock. False on error.
	OK bool
	// Reason, when OK is false without an error: locked, not-found or
	// expired.
	Reason Reason
	// KeyHash names the key of acquire, is-locked and lookup-key.
	KeyHash string
	// IDHash names the lock id of release, extend, lookup-id, and of a
	// successful acquire.
	IDHash string
	// Key and ID are the raw values, set only when the raw-identifier
	// predicate allows them for this event.
	Key, ID string
	// Fence is the fence of a successful acquire, or of the lock a lookup
	// found.
	Fence idemkit.Fence
	// Err is the operation's error and Code its code; nil and idemkit.CodeUnknown on
	// success.
	Err  error
	Code idemkit.Code
	// Duration is how long the operation took.
	Duration time.Duration
}

// Hook receives telemetry events.
type Hook interface {
	LockEvent(Event)
}

// HookFunc adapts a function to [Hook].
type HookFunc func(Event)

// LockEvent calls f(e).
func (f HookFunc) LockEvent(e Event) { f(e) }

// TelemetryOption configures [WithTelemetry].
type TelemetryOption func(*instrumented)

// WithHasher sets the hasher for KeyHash and IDHash. Default: [idemkit.DefaultHasher]
// (HMAC-SHA-256 under a per-process secret); use [idemkit.NewHMACHasher] with a
// shared secret to correlate events across processes.
func WithHasher(h idemkit.Hasher) TelemetryOption {
	return func(t *instrumented) { t.hasher = h }
}

// WithRawIdentifiers sets a predicate that decides, per event, whether the
// raw key and lock id may be included. Default: never. A predicate that
// panics counts as a refusal.
func WithRawIdentifiers(allow func(Event) bool) TelemetryOption {
	return func(t *instrumented) { t.allowRaw = allow }
}

// instrumented is the Locker that WithTelemetry returns.
type instrumented struct {
	inner    Locker
	hook     Hook
	hasher   idemkit.Hasher
	allowRaw func(Event) bool
}

var (
	_ Locker      = (*instrumented)(nil)
	_ Watcher     = (*instrumented)(nil)
	_ KeyedLocker = (*instrumented)(nil)
)

// WithTelemetry wraps l in a [Locker] that reports every operation to hook:
// one event per call, successes, contention and errors alike, with its
// duration. The hook runs synchronously after the operation and cannot
// change its result: a panic in it is recovered. The locker it returns is
// also a [Watcher] and a [KeyedLocker], which delegate to l when it is one
// (otherwise its watches never fire, and keyed calls use the lock id
// alone), and has an Unwrap() Locker method that returns l.
func WithTelemetry(l Locker, hook Hook, opts ...TelemetryOption) Locker {
	t := &instrumented{inner: l, hook: hook, hasher: idemkit.DefaultHasher()}
	for _, o := range opts {
		o(t)
	}
	if t.hasher == nil {
		t.hasher = idemkit.DefaultHasher()
	}
	return t
}

// Unwrap returns the wrapped locker.
func (t *instrumented) Unwrap() Locker { return t.inner }

// Capabilities returns the wrapped locker's capabilities.
func (t *instrumented) Capabilities() Capabilities { return t.inner.Capabilities() }

// Acquire calls the wrapped Acquire and reports it.
func (t *instrumented) Acquire(ctx context.Context, key string, ttl time.Duration) (Lease, bool, error) {
	start := time.Now()
	lease, ok, err := t.inner.Acquire(ctx, key, ttl)
	e := Event{Op: OpAcquire, OK: ok, KeyHash: t.keyHash(key), Key: key}
	if ok {
		e.IDHash, e.ID, e.Fence = t.hasher.Hash(lease.ID), lease.ID, lease.Fence
	} else if err == nil {
		e.Reason = ReasonLocked
	}
	t.emit(e, start, err)
	return lease, ok, err
}

// Release calls the wrapped Release and reports it.
func (t *instrumented) Release(ctx context.Context, id string) (Outcome, error) {
	start := time.Now()
	out, err := t.inner.Release(ctx, id)
	t.emit(Event{Op: OpRelease, OK: out.OK, Reason: out.Reason, IDHash: t.hasher.Hash(id), ID: id}, start, err)
	return out, err
}

// Extend calls the wrapped Extend and reports it.
func (t *instrumented) Extend(ctx context.Context, id string, ttl time.Duration) (Outcome, error) {
	start := time.Now()
	out, err := t.inner.Extend(ctx, id, ttl)
	t.emit(Event{Op: OpExtend, OK: out.OK, Reason: out.Reason, IDHash: t.hasher.Hash(id), ID: id}, start, err)
	return out, err
}

// ReleaseKey releases through the wrapped locker (with the key when it is a
// [KeyedLocker]) and reports it as a release.
func (t *instrumented) ReleaseKey(ctx context.Context, key, id string) (Outcome, error) {
	start := time.Now()
	out, err := releaseLease(ctx, t.inner, Lease{Key: key, ID: id})
	t.emit(Event{Op: OpRelease, OK: out.OK, Reason: out.Reason, IDHash: t.hasher.Hash(id), ID: id}, start, err)
	return out, err
}

// ExtendKey extends through the wrapped locker (with the key when it is a
// [KeyedLocker]) and reports it as an extend.
func (t *instrumented) ExtendKey(ctx context.Context, key, id string, ttl time.Duration) (Outcome, error) {
	start := time.Now()
	out, err := extendLease(ctx, t.inner, Lease{Key: key, ID: id}, ttl)
	t.emit(Event{Op: OpExtend, OK: out.OK, Reason: out.Reason, IDHash: t.hasher.Hash(id), ID: id}, start, err)
	return out, err
}

// IsLocked calls the wrapped IsLocked and reports it.
func (t *instrumented) IsLocked(ctx context.Context, key string) (bool, error) {
	start := time.Now()
	locked, err := t.inner.IsLocked(ctx, key)
	t.emit(Event{Op: OpIsLocked, OK: locked, KeyHash: t.keyHash(key), Key: key}, start, err)
	return locked, err
}

// LookupKey calls the wrapped LookupKey and reports it.
func (t *instrumented) LookupKey(ctx context.Context, key string) (Info, bool, error) {
	start := time.Now()
	info, ok, err := t.inner.LookupKey(ctx, key)
	t.emit(Event{Op: OpLookupKey, OK: ok, KeyHash: t.keyHash(key), Key: key, Fence: info.Fence}, start, err)
	return info, ok, err
}

// LookupID calls the wrapped LookupID and reports it.
func (t *instrumented) LookupID(ctx context.Context, id string) (Info, bool, error) {
	start := time.Now()
	info, ok, err := t.inner.LookupID(ctx, id)
	t.emit(Event{Op: OpLookupID, OK: ok, IDHash: t.hasher.Hash(id), ID: id, Fence: info.Fence}, start, err)
	return info, ok, err
}

// Watch delegates to the wrapped locker when it is a [Watcher]; otherwise
// it returns a channel that never fires.
func (t *instrumented) Watch(ctx context.Context, key string) (<-chan struct{}, func()) {
	if w, ok := t.inner.(Watcher); ok {
		return w.Watch(ctx, key)
	}
	return nil, func() {}
}

// emit completes e and hands it to the hook, redacting raw identifiers
// unless the predicate allows them and recovering from a panicking hook.
func (t *instrumented) emit(e Event, start time.Time, err error) {
	e.Duration = time.Since(start)
	if err != nil {
		e.OK, e.Reason, e.Err, e.Code = false, ReasonNone, err, idemkit.CodeOf(err)
	}
	if !t.rawAllowed(e) {
		e.Key, e.ID = "", ""
	}
	defer func() { _ = recover() }()
	t.hook.LockEvent(e)
}

// keyHash hashes the normalised key, so both spellings of a key share a hash.
func (t *instrumented) keyHash(key string) string {
	if n, err := NormalizeKey(key); err == nil {
		key = n
	}
	return t.hasher.Hash(key)
}

func (t *instrumented) rawAllowed(e Event) (ok bool) {
	if t.allowRaw == nil {
		return false
	}
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	redacted := e
	redacted.Key, redacted.ID = "", ""
	return t.allowRaw(redacted)
}
