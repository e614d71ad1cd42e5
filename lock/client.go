package lock

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/engine"
)

// Client is the lock library over a [store.Store]: a lock is a claim of
// the lock key whose record's fingerprint is the holder's lock id, so
// leases, fences, expiry and wake-ups are the store's (the rules are stated
// once, in [store]'s package doc). It is a [Locker], a [KeyedLocker] and,
// when its store is one, a [store.Watcher].
//
// A Client resolves the lock ids it issued itself from a table in memory;
// other ids (another process's) only through the store's [Finder], when it
// has one: without it, Release, Extend and LookupID of a foreign id answer
// not found (ReleaseKey and ExtendKey, given the key, still work).
type Client struct {
	s       store.Store
	finder  Finder        // nil when the store cannot find claims by lock id
	watcher store.Watcher // nil when the store cannot notify
	logger  *slog.Logger

	mu     sync.Mutex
	leases map[string]*issued // the leases this Client issued, by lock id
	sweep  int                // additions to leases until the next sweep
	warned map[string]bool    // the keys whose fence warning was logged
}

// issued is a lease of this Client, with its lease time by the local clock.
type issued struct {
	key   string
	fence idemkit.Fence
	// from is the earliest local instant the lease may have run out (the
	// send time of its last acquire or extend plus the TTL): a refused
	// release or extend after it reports Expired. until is the instant by
	// which it has certainly run out: the entry is swept after it.
	from, until time.Time
}

var (
	_ Locker        = (*Client)(nil)
	_ KeyedLocker   = (*Client)(nil)
	_ store.Watcher = (*Client)(nil)
)

// New returns a Client over s. Of the options it uses [WithLogger] (where
// the fence-limit warning goes); the others configure [Do] and [Acquire]
// and are ignored here.
func New(s store.Store, opts ...Option) (*Client, error) {
	if s == nil {
		return nil, invalid("new", "the store must not be nil; pass an engine such as memstore.New()")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	c := &Client{s: s, logger: cfg.logger, leases: make(map[string]*issued), sweep: minSweep}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	c.finder, _ = s.(Finder)
	c.watcher, _ = s.(store.Watcher)
	return c, nil
}

// minSweep is the fewest additions to a Client's lease table between two
// sweeps of it; sweeps are otherwise spaced by its size (amortised O(1)).
const minSweep = 64

// Acquire implements [Locker]: one [store.Store.Claim] of the normalised
// key, carrying a fresh lock id as its fingerprint. Any live record under
// the key (a lease, or a guard's record) refuses it.
func (c *Client) Acquire(ctx context.Context, key string, ttl time.Duration) (Lease, bool, error) {
	const op = "acquire"
	key, err := normalizeKey(op, key)
	if err != nil {
		return Lease{}, false, err
	}
	if err := checkTTL(op, ttl); err != nil {
		return Lease{}, false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return Lease{}, false, err
	}
	id := newID()
	sent := time.Now()
	rec, claimed, err := c.s.Claim(ctx, key, id, ttl)
	if err != nil || !claimed {
		return Lease{}, false, err
	}
	if rec.Fence > idemkit.FenceWarn {
		c.warn(ctx, key, rec.Fence)
	}
	c.remember(id, &issued{key: key, fence: rec.Fence}, sent, ttl)
	return Lease{Key: key, ID: id, Fence: rec.Fence, AcquiredAt: rec.CreatedAt, ExpiresAt: rec.ExpiresAt}, true, nil
}

// Release implements [Locker]: [store.Store.Release] of the lease's key
// and fence, found in this Client's table or through the store's [Finder].
func (c *Client) Release(ctx context.Context, id string) (Status, error) {
	return c.byID(ctx, "release", id, 0, func(key string, fence idemkit.Fence) (Status, error) {
		ok, err := c.s.Release(ctx, key, fence)
		return Status{OK: ok}, err
	})
}

// Extend implements [Locker]: [store.Store.Extend] of the lease's key and
// fence, found as for Release.
func (c *Client) Extend(ctx context.Context, id string, ttl time.Duration) (Status, error) {
	const op = "extend"
	if err := checkTTL(op, ttl); err != nil {
		return Status{}, err
	}
	return c.byID(ctx, op, id, ttl, c.extend(ctx, ttl))
}

// ReleaseKey implements [KeyedLocker]: Release, with the key given.
func (c *Client) ReleaseKey(ctx context.Context, key, id string) (Status, error) {
	return c.byKey(ctx, "release", key, id, 0, func(key string, fence idemkit.Fence) (Status, error) {
		ok, err := c.s.Release(ctx, key, fence)
		return Status{OK: ok}, err
	})
}

// ExtendKey implements [KeyedLocker]: Extend, with the key given.
func (c *Client) ExtendKey(ctx context.Context, key, id string, ttl time.Duration) (Status, error) {
	const op = "extend"
	if err := checkTTL(op, ttl); err != nil {
		return Status{}, err
	}
	return c.byKey(ctx, op, key, id, ttl, c.extend(ctx, ttl))
}

// extend returns the write of an Extend.
func (c *Client) extend(ctx context.Context, ttl time.Duration) func(string, idemkit.Fence) (Status, error) {
	return func(key string, fence idemkit.Fence) (Status, error) {
		at, ok, err := c.s.Extend(ctx, key, fence, ttl)
		return Status{OK: ok, ExpiresAt: at}, err
	}
}

// IsLocked implements [Locker].
func (c *Client) IsLocked(ctx context.Context, key string) (bool, error) {
	_, ok, err := c.lookupKey(ctx, key)
	return ok, err
}

// LookupKey implements [Locker].
func (c *Client) LookupKey(ctx context.Context, key string) (Info, bool, error) {
	l, ok, err := c.lookupKey(ctx, key)
	return l.info(), ok, err
}

// LookupID implements [Locker].
func (c *Client) LookupID(ctx context.Context, id string) (Info, bool, error) {
	l, ok, err := c.lookupID(ctx, id)
	return l.info(), ok, err
}

// Watch implements [store.Watcher] through the store's own watch of the
// normalised key: the channel closes when the key's lease (or record) may
// have ended, or at once when nothing holds the key once the watch is in
// place (so a release between a refused acquire and the watch is not
// missed). When the store cannot notify it never closes, and [Do] polls.
func (c *Client) Watch(ctx context.Context, key string) (<-chan struct{}, func()) {
	n, err := normalizeKey("watch", key)
	if err != nil || c.watcher == nil {
		return nil, func() {}
	}
	ch, stop := c.watcher.Watch(ctx, n)
	if _, held, err := c.s.Get(ctx, n); err == nil && !held {
		stop()
		return closed, func() {}
	}
	return ch, stop
}

// closed is a channel that is closed.
var closed = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// lookupKey returns the live lease on key: a live claim whose fingerprint
// is a lock id. A guard's record under the key is no lease.
func (c *Client) lookupKey(ctx context.Context, key string) (Lease, bool, error) {
	const op = "lookup-key"
	key, err := normalizeKey(op, key)
	if err != nil {
		return Lease{}, false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return Lease{}, false, err
	}
	rec, ok, err := c.s.Get(ctx, key)
	if err != nil || !ok || rec.State != store.StateClaimed || !engine.LockID(rec.Fingerprint) {
		return Lease{}, false, err
	}
	return leaseOf(rec), true, nil
}

// lookupID returns the live lease whose id is id.
func (c *Client) lookupID(ctx context.Context, id string) (Lease, bool, error) {
	const op = "lookup-id"
	if err := checkID(op, id); err != nil {
		return Lease{}, false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return Lease{}, false, err
	}
	rec, ok, err := c.find(ctx, id)
	if err != nil || !ok {
		return Lease{}, false, err
	}
	return leaseOf(rec), true, nil
}

// find returns the live claim that carries id: read by its key when this
// Client issued it, otherwise through the store's Finder.
func (c *Client) find(ctx context.Context, id string) (store.Record, bool, error) {
	var rec store.Record
	var ok bool
	var err error
	if e := c.entry(id); e != nil {
		rec, ok, err = c.s.Get(ctx, e.key)
	} else if c.finder != nil {
		rec, ok, err = c.finder.FindClaim(ctx, id)
	}
	if err != nil || !ok || rec.State != store.StateClaimed || rec.Fingerprint != id {
		return store.Record{}, false, err
	}
	return rec, true, nil
}

// byID runs write on the lease whose id is id: this Client's own, whose
// key and fence it knows, or one the store's Finder finds.
func (c *Client) byID(ctx context.Context, op, id string, ttl time.Duration, write func(string, idemkit.Fence) (Status, error)) (Status, error) {
	if err := checkID(op, id); err != nil {
		return Status{}, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return Status{}, err
	}
	if e := c.entry(id); e != nil {
		return c.settle(id, e, ttl, write)
	}
	if c.finder == nil {
		return Status{}, nil
	}
	rec, ok, err := c.finder.FindClaim(ctx, id)
	if err != nil || !ok || rec.State != store.StateClaimed || rec.Fingerprint != id {
		return Status{}, err
	}
	return write(rec.Key, rec.Fence)
}

// byKey runs write on the lease on key whose id is id: this Client's own,
// or the live claim under key if its fingerprint is id.
func (c *Client) byKey(ctx context.Context, op, key, id string, ttl time.Duration, write func(string, idemkit.Fence) (Status, error)) (Status, error) {
	key, err := normalizeKey(op, key)
	if err != nil {
		return Status{}, err
	}
	if err := checkID(op, id); err != nil {
		return Status{}, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return Status{}, err
	}
	if e := c.entry(id); e != nil {
		if e.key != key {
			return Status{}, nil
		}
		return c.settle(id, e, ttl, write)
	}
	rec, ok, err := c.s.Get(ctx, key)
	if err != nil || !ok || rec.State != store.StateClaimed || rec.Fingerprint != id {
		return Status{}, err
	}
	return write(key, rec.Fence)
}

// settle runs write on this Client's lease e and updates its table: a
// released or refused lease leaves it, an extended one gets its new lease
// time. The store's answer decides whether the write took effect; the
// local lease time only tells an expired lease from a lost one.
func (c *Client) settle(id string, e *issued, ttl time.Duration, write func(string, idemkit.Fence) (Status, error)) (Status, error) {
	sent := time.Now()
	st, err := write(e.key, e.fence)
	if err != nil {
		return Status{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !st.OK:
		st.Expired = !sent.Before(e.from)
		delete(c.leases, id)
	case ttl == 0: // released
		delete(c.leases, id)
	default: // extended
		if cur := c.leases[id]; cur != nil {
			cur.from, cur.until = sent.Add(ttl), time.Now().Add(ttl+ttl/500)
		}
	}
	return st, nil
}

// entry returns this Client's lease with id, or nil.
func (c *Client) entry(id string) *issued {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.leases[id]
	if e == nil {
		return nil
	}
	cp := *e
	return &cp
}

// remember records a lease this Client issued, granted for ttl by a call
// sent at sent, and sweeps the table of leases certainly run out, every
// so many additions.
func (c *Client) remember(id string, e *issued, sent time.Time, ttl time.Duration) {
	now := time.Now()
	e.from, e.until = sent.Add(ttl), now.Add(ttl+ttl/500)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leases[id] = e
	if c.sweep--; c.sweep > 0 {
		return
	}
	for k, v := range c.leases {
		if now.After(v.until) {
			delete(c.leases, k)
		}
	}
	c.sweep = max(minSweep, len(c.leases))
}

// warn logs, once per key and Client, that a fence above
// [idemkit.FenceWarn] was issued, naming the key by its hash only.
func (c *Client) warn(ctx context.Context, key string, f idemkit.Fence) {
	hash := idemkit.DefaultHasher().Hash(key)
	c.mu.Lock()
	if c.warned == nil || len(c.warned) >= 1024 {
		c.warned = make(map[string]bool)
	}
	seen := c.warned[hash]
	c.warned[hash] = true
	c.mu.Unlock()
	if !seen {
		c.logger.WarnContext(ctx, "lock: fence approaching its limit",
			slog.String("key_hash", hash), slog.String("fence", f.String()), slog.String("max", idemkit.FenceMax.String()))
	}
}

// leaseOf returns the lease a live lock's record describes.
func leaseOf(rec store.Record) Lease {
	return Lease{Key: rec.Key, ID: rec.Fingerprint, Fence: rec.Fence, AcquiredAt: rec.CreatedAt, ExpiresAt: rec.ExpiresAt}
}
