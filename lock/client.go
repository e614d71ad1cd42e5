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
// the lock key whose fingerprint is the holder's lock id, so leases,
// fences, expiry and wake-ups are the store's. It is a [Locker], a
// [KeyedLocker] and a [store.Watcher].
//
// A Client resolves the lock ids it issued from a table in memory, and
// other processes' ids only through the store's [Finder]: without one,
// Release, Extend and LookupID of such an id answer not found (ReleaseKey
// and ExtendKey, given the key, still work).
type Client struct {
	s       store.Store
	finder  Finder        // nil when the store cannot find claims by lock id
	watcher store.Watcher // nil when the store cannot notify
	logger  *slog.Logger

	mu     sync.Mutex
	leases map[string]issued // the leases this Client issued, by lock id
	sweep  int               // additions to leases until the next sweep
	warned map[string]bool   // the keys whose fence warning was logged
}

// issued is a lease of this Client: by the local clock, it may have run
// out from from (the send time of its last acquire or extend plus the TTL;
// a refusal after it is Expired), and certainly has by until (swept then).
type issued struct {
	key         string
	fence       idemkit.Fence
	from, until time.Time
}

// New returns a Client over s. Of the options it uses [WithLogger]; the
// others are ignored here.
func New(s store.Store, opts ...Option) (*Client, error) {
	if s == nil {
		return nil, invalid("new", "the store must not be nil; pass an engine such as memstore.New()")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	c := &Client{s: s, logger: cfg.logger, leases: make(map[string]issued), sweep: minSweep}
	c.finder, _ = s.(Finder)
	c.watcher, _ = s.(store.Watcher)
	return c, nil
}

// minSweep is the fewest additions between two sweeps of the lease table;
// sweeps are otherwise spaced by its size (amortised O(1)).
const minSweep = 64

// Acquire implements [Locker]: one [store.Store.Claim] of the normalised
// key with a fresh lock id as fingerprint. Any live record under the key
// (a lease, or a guard's record) refuses it.
func (c *Client) Acquire(ctx context.Context, key string, ttl time.Duration) (Lease, bool, error) {
	key, err := normalizeKey("acquire", key)
	if err := first(ctx, "acquire", err, checkTTL("acquire", ttl)); err != nil {
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
	c.remember(id, issued{key: key, fence: rec.Fence}, sent, ttl)
	return leaseOf(rec), true, nil
}

// Release implements [Locker]: [store.Store.Release] of the lease.
func (c *Client) Release(ctx context.Context, id string) (Status, error) {
	return c.change(ctx, "release", "", id, 0)
}

// Extend implements [Locker]: [store.Store.Extend] of the lease.
func (c *Client) Extend(ctx context.Context, id string, ttl time.Duration) (Status, error) {
	return c.change(ctx, "extend", "", id, ttl)
}

// ReleaseKey implements [KeyedLocker].
func (c *Client) ReleaseKey(ctx context.Context, key, id string) (Status, error) {
	return c.changeKey(ctx, "release", key, id, 0)
}

// ExtendKey implements [KeyedLocker].
func (c *Client) ExtendKey(ctx context.Context, key, id string, ttl time.Duration) (Status, error) {
	return c.changeKey(ctx, "extend", key, id, ttl)
}

// changeKey is change of the lease on key, which must be a valid key.
func (c *Client) changeKey(ctx context.Context, op, key, id string, ttl time.Duration) (Status, error) {
	key, err := normalizeKey(op, key)
	if err != nil {
		return Status{}, err
	}
	return c.change(ctx, op, key, id, ttl)
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

// Watch implements [store.Watcher] with the store's watch of the key. The
// channel also closes at once when nothing holds the key once the watch is
// in place, so a release between a refused acquire and the watch is not
// missed. It never closes on a store that cannot notify ([Do] polls).
func (c *Client) Watch(ctx context.Context, key string) (<-chan struct{}, func()) {
	n, err := normalizeKey("watch", key)
	if err != nil || c.watcher == nil {
		return nil, func() {}
	}
	ch, stop := c.watcher.Watch(ctx, n)
	if _, held, err := c.s.Get(ctx, n); err == nil && !held {
		stop()
		free := make(chan struct{})
		close(free)
		return free, func() {}
	}
	return ch, stop
}

// lookupKey returns the live lease on key: a live claim whose fingerprint
// is a lock id. A guard's record under the key is no lease.
func (c *Client) lookupKey(ctx context.Context, key string) (Lease, bool, error) {
	key, err := normalizeKey("lookup-key", key)
	if err := first(ctx, "lookup-key", err); err != nil {
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
	if err := first(ctx, "lookup-id", checkID("lookup-id", id)); err != nil {
		return Lease{}, false, err
	}
	e, _ := c.entry(id)
	rec, ok, err := c.read(ctx, e.key, id)
	return leaseOf(rec), ok, err
}

// read returns the live claim that carries id: the one under key, or,
// without a key, the one the store's Finder finds.
func (c *Client) read(ctx context.Context, key, id string) (store.Record, bool, error) {
	var rec store.Record
	var ok bool
	var err error
	switch {
	case key != "":
		rec, ok, err = c.s.Get(ctx, key)
	case c.finder != nil:
		rec, ok, err = c.finder.FindClaim(ctx, id)
	}
	if err != nil || !ok || rec.State != store.StateClaimed || rec.Fingerprint != id {
		return store.Record{}, false, err
	}
	return rec, true, nil
}

// change releases (ttl 0) or extends the lease whose id is id, on the
// normalised key when key is not empty: one of this Client's at once, with
// the key and fence of its table, another once read (under key, or through
// the Finder). The store's answer decides; a released or refused lease
// then leaves the table, an extended one gets its new lease time.
func (c *Client) change(ctx context.Context, op, key, id string, ttl time.Duration) (Status, error) {
	var ttlErr error
	if op == "extend" {
		ttlErr = checkTTL(op, ttl)
	}
	if err := first(ctx, op, checkID(op, id), ttlErr); err != nil {
		return Status{}, err
	}
	e, mine := c.entry(id)
	if !mine {
		rec, ok, err := c.read(ctx, key, id)
		if err != nil || !ok {
			return Status{}, err
		}
		e = issued{key: rec.Key, fence: rec.Fence}
	} else if key != "" && key != e.key {
		return Status{}, nil
	}
	sent := time.Now()
	var st Status
	var err error
	if ttl == 0 {
		st.OK, err = c.s.Release(ctx, e.key, e.fence)
	} else {
		st.ExpiresAt, st.OK, err = c.s.Extend(ctx, e.key, e.fence, ttl)
	}
	if err != nil {
		return Status{}, err
	}
	if !mine {
		return st, nil
	}
	st.Expired = !st.OK && !sent.Before(e.from)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.leases[id]; ok && st.OK && ttl > 0 {
		e.from, e.until = sent.Add(ttl), time.Now().Add(ttl+ttl/500)
		c.leases[id] = e
	} else {
		delete(c.leases, id)
	}
	return st, nil
}

// entry returns this Client's lease with id, if it issued one.
func (c *Client) entry(id string) (issued, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.leases[id]
	return e, ok
}

// remember records a lease granted for ttl by a call sent at sent, and
// sweeps the leases certainly run out every so many additions.
func (c *Client) remember(id string, e issued, sent time.Time, ttl time.Duration) {
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

// warn logs, once per key (of the last 1024), that a fence above
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

// first returns the first failed argument check, else an ended ctx's error.
func first(ctx context.Context, op string, checks ...error) error {
	for _, err := range checks {
		if err != nil {
			return err
		}
	}
	return idemkit.CheckContext(ctx, op)
}

// leaseOf returns the lease a live lock's record describes.
func leaseOf(rec store.Record) Lease {
	return Lease{Key: rec.Key, ID: rec.Fingerprint, Fence: rec.Fence, AcquiredAt: rec.CreatedAt, ExpiresAt: rec.ExpiresAt}
}
