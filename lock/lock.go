package lock

import (
	"context"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
)

// Lease is a held lock: what a successful [Locker.Acquire] returns, and
// what the raw lookups ([LookupKeyRaw], [LookupIDRaw]) find.
type Lease struct {
	Key        string        // the normalised key
	ID         string        // the lock id; the only handle for release and extend
	Fence      idemkit.Fence // the fencing token issued with this lease
	AcquiredAt time.Time     // when the backend granted the lease, by its clock
	ExpiresAt  time.Time     // when the lease runs out unless extended, by the same clock
}

// Info describes a live lock found by a lookup. It names the key and lock id
// only by their hashes (under [idemkit.DefaultHasher]), so it can be logged
// and printed as it is; the raw lookups return the [Lease] instead.
type Info struct {
	KeyHash    string
	IDHash     string
	Fence      idemkit.Fence
	AcquiredAt time.Time
	ExpiresAt  time.Time
}

// info returns the sanitised description of l.
func (l Lease) info() Info {
	h := idemkit.DefaultHasher()
	return Info{KeyHash: h.Hash(l.Key), IDHash: h.Hash(l.ID), Fence: l.Fence, AcquiredAt: l.AcquiredAt, ExpiresAt: l.ExpiresAt}
}

// Status is what a release or extend did. OK reports whether the call took
// effect. When it did not, Expired tells a lease that ran out (whether or
// not another holder has taken the key since) from one that ended
// otherwise or that the locker does not know (never issued, released,
// deleted). A [Client] judges Expired by its own clock, for the leases it
// issued: it only explains the refusal, which the store decided. A release
// or extend that does not take effect is a result, not an error.
type Status struct {
	OK        bool
	Expired   bool
	ExpiresAt time.Time // extend: the new expiry, by the backend's clock
}

// Locker is the contract of a lock provider: [Client] over any
// [store.Store], or a third party's. All methods are safe for concurrent
// use, check their arguments (InvalidArgument) and then their ctx (an ended
// ctx gives Aborted or NetworkTimeout) before any I/O, and fail with
// [*idemkit.Error] values; contention and absence are results.
//
// A lease is live while now < ExpiresAt by the backend's clock; there is
// no grace period.
type Locker interface {
	// Acquire makes one attempt to take the lock on key for ttl. When a
	// live lease (or any live record of the store) holds the key it
	// returns ok = false and a nil error and changes nothing.
	Acquire(ctx context.Context, key string, ttl time.Duration) (lease Lease, ok bool, err error)

	// Release ends the live lock whose id is id, and reports whether this
	// call did. An expired lease cannot be released.
	Release(ctx context.Context, id string) (Status, error)

	// Extend sets the expiry of the live lock whose id is id to now + ttl
	// (a shorter ttl shortens it) and returns it. It keeps AcquiredAt and
	// Fence. An expired lease cannot be extended.
	Extend(ctx context.Context, id string, ttl time.Duration) (Status, error)

	// IsLocked reports whether a live lease holds key. It changes nothing.
	IsLocked(ctx context.Context, key string) (bool, error)

	// LookupKey returns the live lock on key, or ok = false. Lookups are
	// diagnostics: never gate a mutation on one; use fences.
	LookupKey(ctx context.Context, key string) (info Info, ok bool, err error)

	// LookupID returns the live lock whose id is id, or ok = false (also
	// when its key has since passed to another holder).
	LookupID(ctx context.Context, id string) (info Info, ok bool, err error)
}

// KeyedLocker is an optional interface of a [Locker] that releases and
// extends given the lease's key as well as its id, for a provider that
// would otherwise first have to find the key. Ownership is still checked by
// the id: a key that does not hold the lock with this id gives OK = false.
// [Handle] and [Do] use it when the locker has it.
type KeyedLocker interface {
	ReleaseKey(ctx context.Context, key, id string) (Status, error)
	ExtendKey(ctx context.Context, key, id string, ttl time.Duration) (Status, error)
}

// Finder is an optional capability of a [store.Store] (engines implement
// the method without importing this package). With it a [Client] resolves
// any lock id, not only those it issued itself: another process's lease
// can be released, extended and looked up by id. An engine may index only
// the claims whose fingerprint has the form of a lock id (22 characters of
// the base64url alphabet), so the index costs the guard's writes nothing.
type Finder interface {
	// FindClaim returns the live claim whose Fingerprint is fp, or ok =
	// false.
	FindClaim(ctx context.Context, fp string) (rec store.Record, ok bool, err error)
}

// releaseLease releases lease through l, with its key when l is a
// [KeyedLocker].
func releaseLease(ctx context.Context, l Locker, lease Lease) (Status, error) {
	if k, ok := l.(KeyedLocker); ok {
		return k.ReleaseKey(ctx, lease.Key, lease.ID)
	}
	return l.Release(ctx, lease.ID)
}

// extendLease extends lease through l to now + ttl, with its key when l is
// a [KeyedLocker].
func extendLease(ctx context.Context, l Locker, lease Lease, ttl time.Duration) (Status, error) {
	if k, ok := l.(KeyedLocker); ok {
		return k.ExtendKey(ctx, lease.Key, lease.ID, ttl)
	}
	return l.Extend(ctx, lease.ID, ttl)
}

// Owns reports whether id names a live lock, like [Locker.LookupID]. It is
// a diagnostic: never gate a mutation on it; use fences.
func Owns(ctx context.Context, l Locker, id string) (bool, error) {
	_, ok, err := l.LookupID(ctx, id)
	return ok, err
}

// LookupKeyRaw is [Locker.LookupKey] returning the lease with its raw key
// and lock id. Use it only where printing raw identifiers is acceptable. l
// must be a [*Client], or wrap one (an Unwrap() Locker method, as
// [WithTelemetry]'s locker has): other providers do not reveal raw ids,
// and get InvalidArgument.
func LookupKeyRaw(ctx context.Context, l Locker, key string) (Lease, bool, error) {
	c, err := clientOf(l, "lookup-key")
	if err != nil {
		return Lease{}, false, err
	}
	return c.lookupKey(ctx, key)
}

// LookupIDRaw is [Locker.LookupID] returning the lease with its raw key and
// lock id, on the same terms as [LookupKeyRaw].
func LookupIDRaw(ctx context.Context, l Locker, id string) (Lease, bool, error) {
	c, err := clientOf(l, "lookup-id")
	if err != nil {
		return Lease{}, false, err
	}
	return c.lookupID(ctx, id)
}

// clientOf returns the Client l is or wraps.
func clientOf(l Locker, op string) (*Client, error) {
	for range 16 {
		switch v := l.(type) {
		case *Client:
			return v, nil
		case interface{ Unwrap() Locker }:
			l = v.Unwrap()
		default:
			return nil, invalid(op, "raw lookups need a lock.Client (or a locker that wraps one)")
		}
	}
	return nil, invalid(op, "raw lookups need a lock.Client (or a locker that wraps one)")
}
