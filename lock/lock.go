package lock

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idemkit"
)

// Lease is a held lock: what a successful [Locker.Acquire] returns.
type Lease struct {
	Key        string        // the normalised key
	ID         string        // the lock id; the only handle for release and extend
	Fence      idemkit.Fence // the fencing token issued with this lease
	AcquiredAt time.Time     // when the backend granted the lease, by its time authority
	ExpiresAt  time.Time     // when the lease runs out unless extended, by the same clock
}

// String describes the lease without its raw key or lock id.
func (l Lease) String() string {
	return fmt.Sprintf("lock.Lease{key_hash:%s id_hash:%s fence:%s expires_at:%s}",
		idemkit.DefaultHasher().Hash(l.Key), idemkit.DefaultHasher().Hash(l.ID), l.Fence, l.ExpiresAt.Format(time.RFC3339Nano))
}

// GoString is [Lease.String], so %#v does not print raw identifiers either.
func (l Lease) GoString() string { return l.String() }

// Info describes a live lock found by a lookup. It names the key and lock id
// only by their hashes; the raw values travel with it but are reachable only
// through [LookupKeyRaw] and [LookupIDRaw].
type Info struct {
	KeyHash    string        // the key hashed by the default hasher (see [idemkit.DefaultHasher])
	IDHash     string        // the lock id hashed the same way
	Fence      idemkit.Fence // the lease's fence
	AcquiredAt time.Time     // when the lease was granted
	ExpiresAt  time.Time     // when it runs out

	key, id string
}

// NewInfo builds the Info a backend's lookup returns for a live lock. It
// hashes key and id with the default hasher and keeps the raw values for the
// explicit raw lookups.
func NewInfo(key, id string, fence idemkit.Fence, acquiredAt, expiresAt time.Time) Info {
	return Info{
		KeyHash:    idemkit.DefaultHasher().Hash(key),
		IDHash:     idemkit.DefaultHasher().Hash(id),
		Fence:      fence,
		AcquiredAt: acquiredAt,
		ExpiresAt:  expiresAt,
		key:        key,
		id:         id,
	}
}

// String describes the lock by hashes only.
func (i Info) String() string {
	return fmt.Sprintf("lock.Info{key_hash:%s id_hash:%s fence:%s acquired_at:%s expires_at:%s}",
		i.KeyHash, i.IDHash, i.Fence, i.AcquiredAt.Format(time.RFC3339Nano), i.ExpiresAt.Format(time.RFC3339Nano))
}

// GoString is [Info.String], so %#v does not print raw identifiers either.
func (i Info) GoString() string { return i.String() }

// RawInfo is an [Info] together with the raw key and lock id. Only the
// explicit raw lookups return it.
type RawInfo struct {
	Info
	Key string
	ID  string
}

// Capabilities describe a backend.
//
// Every idemkit backend judges expiry by its own clock (Redis TIME,
// PostgreSQL clock_timestamp(), Firestore's read and write times, the
// process clock in memory); clients' clocks are never trusted.
type Capabilities struct {
	Backend string // a short name: "memory", "redis", "postgres", "firestore"
	Fencing bool   // whether leases carry fences
}

// Reason says why a release, extend or acquire did not take effect.
type Reason uint8

const (
	// ReasonNone: the operation took effect.
	ReasonNone Reason = iota
	// ReasonLocked: acquire found the key held by a live lease.
	ReasonLocked
	// ReasonNotFound: no live lock has this id (it never existed, was
	// released, was cleaned up, or the key now belongs to another holder).
	ReasonNotFound
	// ReasonExpired: the lock with this id is still recorded but its lease
	// has run out.
	ReasonExpired
)

// String returns "", "locked", "not-found" or "expired".
func (r Reason) String() string {
	switch r {
	case ReasonLocked:
		return "locked"
	case ReasonNotFound:
		return "not-found"
	case ReasonExpired:
		return "expired"
	}
	return ""
}

// Outcome is the result of a release or extend. OK reports whether the call
// took effect; otherwise Reason says why not. A release or extend that does
// not take effect is a result, not an error.
type Outcome struct {
	OK        bool
	Reason    Reason
	ExpiresAt time.Time // extend: the new expiry, by the backend's clock
}

// Locker is the contract every lock backend implements. All methods are safe
// for concurrent use. Every method checks its ctx before any I/O (an ended
// ctx gives Aborted or NetworkTimeout) and validates its arguments before
// any I/O (InvalidArgument). Failures are [*idemkit.Error] values with an
// [idemkit.Code]; contention and absence are results.
//
// Liveness is one rule on every backend: a lease is live while now <
// ExpiresAt by the backend's time authority, and expired from ExpiresAt on.
// There is no grace period (see [Live]).
type Locker interface {
	// Acquire makes one attempt to take the lock on key for ttl. On success
	// it returns the lease and ok = true. When a live lease holds the key it
	// returns ok = false and a nil error, and changes nothing: no fence is
	// consumed. Acquiring over an expired lease or a tombstone replaces it.
	// The fence is [NextFence] of the fence the key's record carries (0 if
	// none) at the backend's time; past [idemkit.FenceMax] the acquire fails with
	// Internal and writes nothing.
	Acquire(ctx context.Context, key string, ttl time.Duration) (lease Lease, ok bool, err error)

	// Release ends the live lock whose id is id. It reports OK only when
	// this call released it; a second release of the same id, a foreign
	// or unknown id and an expired lease all give OK = false with a Reason.
	// The record is removed, or left as a tombstone until [KeepUntil] when
	// the backend's clock has not yet passed its fence.
	Release(ctx context.Context, id string) (Outcome, error)

	// Extend replaces the expiry of the live lock whose id is id with now +
	// ttl (a shorter ttl shortens it) and returns the new expiry. It keeps
	// AcquiredAt and Fence. An expired lease cannot be extended.
	Extend(ctx context.Context, id string, ttl time.Duration) (Outcome, error)

	// IsLocked reports whether a live lease holds key. It is a pure read
	// unless the backend was built with cleanup enabled, in which case it
	// may also remove the key's lock record if it expired more than
	// [CleanupGrace] ago (leaving a tombstone until [KeepUntil]); the
	// answer is the same either way.
	IsLocked(ctx context.Context, key string) (bool, error)

	// LookupKey returns the live lock on key, or ok = false. It never
	// changes the lock.
	LookupKey(ctx context.Context, key string) (info Info, ok bool, err error)

	// LookupID returns the live lock whose id is id, or ok = false (also
	// when the key has since passed to another holder). It never changes
	// the lock. Lookups are diagnostics: never gate a mutation on one.
	LookupID(ctx context.Context, id string) (info Info, ok bool, err error)

	// Capabilities describes the backend.
	Capabilities() Capabilities
}

// Watcher is an optional interface of a [Locker] that can tell waiters when
// a key may have become free, so that [Do] retries at once instead of
// sleeping out its back-off.
type Watcher interface {
	// Watch returns a channel that is closed when the lock on key may
	// have become free (its lease released, or replaced), or at once if
	// key is not held now. A provider may wake a key's watches all at
	// once, or one at a time, the oldest first, since only one waiter can
	// take the lock (the next release wakes the next: redislock does
	// this); a lease that runs out without a release may wake nobody. The
	// channel may also close spuriously, and a notification may be lost:
	// callers retry their acquire after every wake-up and keep polling
	// with back-off, as [Do] does. Stop the watch with the returned
	// function (it is safe to call more than once) to free its resources
	// if it has not fired.
	//
	// ctx bounds the setup of the watch only; the channel outlives it.
	Watch(ctx context.Context, key string) (ch <-chan struct{}, stop func())
}

// KeyedLocker is an optional interface of a [Locker] that releases and
// extends faster when it is also given the lease's key: where the lock id
// alone would first have to be resolved to its key (an index read), the key
// lets the backend go straight to the lock, in one round trip. Ownership is
// still checked by the id, atomically: a key that does not hold the lock
// with this id gives OK = false, ReasonNotFound. [Handle] and [Do] use it
// when the locker has it.
type KeyedLocker interface {
	ReleaseKey(ctx context.Context, key, id string) (Outcome, error)
	ExtendKey(ctx context.Context, key, id string, ttl time.Duration) (Outcome, error)
}

// releaseLease releases lease through l, with its key when l is a
// [KeyedLocker].
func releaseLease(ctx context.Context, l Locker, lease Lease) (Outcome, error) {
	if k, ok := l.(KeyedLocker); ok {
		return k.ReleaseKey(ctx, lease.Key, lease.ID)
	}
	return l.Release(ctx, lease.ID)
}

// extendLease extends lease through l to now + ttl, with its key when l is
// a [KeyedLocker].
func extendLease(ctx context.Context, l Locker, lease Lease, ttl time.Duration) (Outcome, error) {
	if k, ok := l.(KeyedLocker); ok {
		return k.ExtendKey(ctx, lease.Key, lease.ID, ttl)
	}
	return l.Extend(ctx, lease.ID, ttl)
}

// CleanupGrace is how long after its expiry a lock record must stay before
// IsLocked's optional cleanup may delete it.
const CleanupGrace = 2 * time.Second

// Live reports whether a lease that expires at expiresAt is live at now:
// now < expiresAt. Every backend applies this one rule, with its own time
// authority, so behaviour at and around the expiry is the same everywhere.
func Live(expiresAt, now time.Time) bool {
	return now.Before(expiresAt)
}

// Owns reports whether id names a live lock, like [Locker.LookupID] != nil.
// It is a diagnostic: never gate a mutation on it; use fences.
func Owns(ctx context.Context, l Locker, id string) (bool, error) {
	_, ok, err := l.LookupID(ctx, id)
	return ok, err
}

// LookupKeyRaw is [Locker.LookupKey] with the raw key and lock id included.
// Use it only where printing raw identifiers is acceptable.
func LookupKeyRaw(ctx context.Context, l Locker, key string) (RawInfo, bool, error) {
	info, ok, err := l.LookupKey(ctx, key)
	if err != nil || !ok {
		return RawInfo{}, ok, err
	}
	return RawInfo{Info: info, Key: info.key, ID: info.id}, true, nil
}

// LookupIDRaw is [Locker.LookupID] with the raw key and lock id included.
// Use it only where printing raw identifiers is acceptable.
func LookupIDRaw(ctx context.Context, l Locker, id string) (RawInfo, bool, error) {
	info, ok, err := l.LookupID(ctx, id)
	if err != nil || !ok {
		return RawInfo{}, ok, err
	}
	return RawInfo{Info: info, Key: info.key, ID: info.id}, true, nil
}
