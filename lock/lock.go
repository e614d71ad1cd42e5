package lock

import (
	"context"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
)

// Lease is a held lock: what a successful [Locker.Acquire] returns, and
// what the raw lookups find.
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

// info returns the sanitised description of l (none for no lease).
func (l Lease) info() Info {
	if l.ID == "" {
		return Info{}
	}
	h := idemkit.DefaultHasher()
	return Info{KeyHash: h.Hash(l.Key), IDHash: h.Hash(l.ID), Fence: l.Fence, AcquiredAt: l.AcquiredAt, ExpiresAt: l.ExpiresAt}
}

// Status is what a release or extend did: OK when it took effect. When it
// did not, Expired tells a lease that ran out (whether or not the key has
// another holder since) from one that ended otherwise or is unknown. A
// [Client] judges Expired by its own clock, for the leases it issued: it
// explains the refusal, which the store decided.
type Status struct {
	OK        bool
	Expired   bool
	ExpiresAt time.Time // extend: the new expiry, by the backend's clock
}

// Locker is the contract of a lock provider: [Client], or a third party's.
// Its methods are safe for concurrent use, check their arguments
// (InvalidArgument) and then ctx (Aborted, NetworkTimeout) before any I/O,
// and fail with [*idemkit.Error] values; contention and absence are
// results. A lease is live while now < ExpiresAt by the backend's clock.
type Locker interface {
	// Acquire makes one attempt to take the lock on key for ttl; ok =
	// false, changing nothing, when the key is held.
	Acquire(ctx context.Context, key string, ttl time.Duration) (lease Lease, ok bool, err error)
	// Release ends the live lock whose id is id.
	Release(ctx context.Context, id string) (Status, error)
	// Extend sets the expiry of the live lock whose id is id to now + ttl
	// (a shorter ttl shortens it), keeping AcquiredAt and Fence.
	Extend(ctx context.Context, id string, ttl time.Duration) (Status, error)
	// IsLocked reports whether a live lease holds key.
	IsLocked(ctx context.Context, key string) (bool, error)
	// LookupKey returns the live lock on key. Lookups are diagnostics:
	// never gate a mutation on one; use fences.
	LookupKey(ctx context.Context, key string) (info Info, ok bool, err error)
	// LookupID returns the live lock whose id is id (not found once its
	// key has passed to another holder).
	LookupID(ctx context.Context, id string) (info Info, ok bool, err error)
}

// KeyedLocker is an optional interface of a [Locker] that releases and
// extends given the lease's key too, for a provider that would otherwise
// have to find the key first. Ownership is still checked by the id.
// [Handle] and [Do] use it when the locker has it.
type KeyedLocker interface {
	ReleaseKey(ctx context.Context, key, id string) (Status, error)
	ExtendKey(ctx context.Context, key, id string, ttl time.Duration) (Status, error)
}

// Finder is an optional capability of a [store.Store] (engines implement
// the method without importing this package): with it a [Client] resolves
// any lock id, another process's too. An engine may index only the claims
// whose fingerprint is a lock id
// ([github.com/idemkit/idemkit/store/engine.LockID]), so the index costs
// the guard's writes nothing.
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

// extendLease extends lease through l, with its key when l is a
// [KeyedLocker].
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

// LookupKeyRaw is [Locker.LookupKey] returning the lease, raw key and lock
// id included: use it only where printing them is acceptable. l must be a
// [*Client] or wrap one (an Unwrap() Locker method, as [WithTelemetry]'s
// has); other providers do not reveal lock ids, and get InvalidArgument.
func LookupKeyRaw(ctx context.Context, l Locker, key string) (Lease, bool, error) {
	return raw(l, "lookup-key", func(c *Client) (Lease, bool, error) { return c.lookupKey(ctx, key) })
}

// LookupIDRaw is [Locker.LookupID] returning the lease, on the terms of
// [LookupKeyRaw].
func LookupIDRaw(ctx context.Context, l Locker, id string) (Lease, bool, error) {
	return raw(l, "lookup-id", func(c *Client) (Lease, bool, error) { return c.lookupID(ctx, id) })
}

// raw runs lookup on the Client l is or wraps.
func raw(l Locker, op string, lookup func(*Client) (Lease, bool, error)) (Lease, bool, error) {
	for range 16 {
		if c, ok := l.(*Client); ok {
			return lookup(c)
		}
		u, ok := l.(interface{ Unwrap() Locker })
		if !ok {
			break
		}
		l = u.Unwrap()
	}
	return Lease{}, false, invalid(op, "raw lookups need a lock.Client, or a locker that wraps one")
}
