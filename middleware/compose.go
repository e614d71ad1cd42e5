package middleware

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/store"
)

// ComposeOption configures [Compose].
type ComposeOption func(*composeConfig)

type composeConfig struct {
	maxClaims int
}

// defaultMaxClaims is WithMaxClaims's default.
const defaultMaxClaims = 1 << 16

// WithMaxClaims bounds the claims a composed store holds at once in this
// process (it keeps each claim's lock lease in memory). A Claim beyond it
// fails with RateLimited and holds nothing. Default: 65536.
func WithMaxClaims(n int) ComposeOption { return func(c *composeConfig) { c.maxClaims = n } }

// Compose builds a [store.Store] from a plain record store and a lock provider:
// the claim is a lock on the record's key, the outcome a fenced [store.Records.Put]
// under the lock. It lets the guard run on any pair, for example PostgreSQL
// records with Redis locks.
//
// It is slower and weaker than a store whose records carry their own lease:
//
//   - Slower: a first execution costs six round trips instead of two (Claim:
//     read the record, take the lock, read again; Complete: extend the lock,
//     write the record, release the lock); a replay still costs one, a busy
//     answer two.
//   - Weaker: the fence is the lock's, and it is checked by the lock, not by
//     the record's own write. Complete extends the lock before it writes, so
//     a stale holder is refused; but a write that stalls past the extended
//     lease can still land after another claim took the key (the record's
//     Put then refuses it only if the new holder's outcome, with its higher
//     fence, is already there).
//
// Claims: a busy key is answered with a record whose State is
// [store.StateClaimed] and that carries only its Key: the lock knows no
// fingerprint, and its fence and lease are not read. [store.Store.Get] of a
// claimed key reads the lock and returns its fence and lease, still without
// a fingerprint. Lock keys are derived from record keys (verbatim behind
// "k:" when the key is valid UTF-8 in NFC and fits a lock key, otherwise
// "h:" and its SHA-256), so no two record keys share a lock.
//
// The lock leases of this process's claims are kept in memory, keyed by
// record key and fence: Extend, Complete and Release work only in the
// process that made the claim (as the guard uses them), and at most
// [WithMaxClaims] claims are held at once. A claim whose lease ran out
// still completes as long as nobody holds the lock: Complete then takes the
// lock again before it writes (another claim that took and released the
// lock in between goes unnoticed unless it stored an outcome, whose higher
// fence refuses the write).
//
// Delete removes the record and releases a live lock on its key. A claim of
// this process that is deleted can no longer be extended, completed or
// released. Another process's claim loses its lock, but its holder may
// still complete it while nobody else takes the lock (the lock cannot tell
// a released lease from one that ran out); with a locker that is no
// [lock.Client], which alone reveals the lock id of a key (see
// [lock.LookupKeyRaw]), Delete releases only this process's claim.
//
// When locker is a [store.Watcher] (it can tell waiters when a lock is
// released), the store is a [store.Watcher]: the duplicates waiting for a claim
// are all woken when the claim's lock is released, through one watch of
// the lock per key.
func Compose(records store.Records, locker lock.Locker, opts ...ComposeOption) (store.Store, error) {
	cfg := composeConfig{maxClaims: defaultMaxClaims}
	for _, o := range opts {
		if o == nil {
			return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "compose", "an option is nil; remove it, or pass the option it was meant to be", nil)
		}
		o(&cfg)
	}
	switch {
	case records == nil:
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "compose", "records must not be nil", nil)
	case locker == nil:
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "compose", "locker must not be nil", nil)
	case cfg.maxClaims < 1:
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "compose", fmt.Sprintf("max claims must be at least 1 (got %d)", cfg.maxClaims), nil)
	}
	c := &composed{records: records, locker: locker, maxClaims: cfg.maxClaims, claims: make(map[claimKey]*held)}
	if w, ok := locker.(store.Watcher); ok && watches(locker) {
		return &watchingComposed{composed: c, watcher: w}, nil
	}
	return c, nil
}

// watches reports whether l can really tell waiters when a lock is
// released: a decorator (lock.WithTelemetry) is a Watcher whatever it
// wraps, so the locker it unwraps to must be one too.
func watches(l lock.Locker) bool {
	for range 16 {
		if _, ok := l.(store.Watcher); !ok {
			return false
		}
		u, ok := l.(interface{ Unwrap() lock.Locker })
		if !ok {
			return true
		}
		l = u.Unwrap()
	}
	return false
}

// watchingComposed is the Store Compose returns for a locker that can tell
// waiters when a lock is released: it is a [store.Watcher] through the lock of
// each record key (a claim ends with the release of its lock).
//
// The store's watches of a key share one watch of its lock: a provider
// may wake its waiters one at a time (only one of them can take a lock),
// but every duplicate waiting for a claim wants to know that it ended.
type watchingComposed struct {
	*composed
	watcher store.Watcher

	mu   sync.Mutex
	fans map[string]*fan // by lock key: the lock watch in place, if any
}

// fan is one watch of a lock, shared by the store watches of its key.
type fan struct {
	ready chan struct{} // closed once the lock watch is set up
	fired chan struct{} // closed when the lock watch fires
	quit  chan struct{} // closed when the last store watch stops first
	n     int           // the store watches that have not stopped
}

// Watch implements [store.Watcher] with a watch of the key's lock, shared by
// the watches of the key in this store.
func (s *watchingComposed) Watch(ctx context.Context, key string) (<-chan struct{}, func()) {
	lk := lockKeyOf(key)
	s.mu.Lock()
	f, ok := s.fans[lk]
	if !ok {
		f = &fan{ready: make(chan struct{}), fired: make(chan struct{}), quit: make(chan struct{})}
		if s.fans == nil {
			s.fans = make(map[string]*fan)
		}
		s.fans[lk] = f
	}
	f.n++
	s.mu.Unlock()
	if !ok {
		ch, stop := s.watcher.Watch(ctx, lk)
		close(f.ready)
		go func() {
			select {
			case <-ch:
				s.mu.Lock()
				if s.fans[lk] == f {
					delete(s.fans, lk)
				}
				s.mu.Unlock()
				close(f.fired)
			case <-f.quit:
			}
			stop()
		}()
	}
	<-f.ready
	var once sync.Once
	return f.fired, func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			f.n--
			if f.n == 0 && s.fans[lk] == f {
				delete(s.fans, lk)
				close(f.quit)
			}
		})
	}
}

// composed is the Store Compose returns.
type composed struct {
	records   store.Records
	locker    lock.Locker
	maxClaims int

	mu     sync.Mutex
	claims map[claimKey]*held
}

// claimKey names a claim: its record key and fence.
type claimKey struct {
	key   string
	fence idemkit.Fence
}

// held is a claim of this process: the lock lease that backs it.
type held struct {
	sem     chan struct{} // one operation at a time on the claim
	lockKey string
	lease   lock.Lease // the lease that backs the claim now (its fence may be above the claim's)
	// ttl (the last lease TTL asked for) and touched (when the lease was
	// last taken or extended, by this process's clock) are written under
	// both sem and the store's mu: the holder reads them under sem,
	// register under mu.
	ttl     time.Duration
	touched time.Time
	over    bool // completed, released or lost; guarded by sem
}

// releaseTimeout bounds the detached lock releases the store makes after a
// caller's ctx may have ended.
const releaseTimeout = 5 * time.Second

// lockKeyOf returns the lock key of the record key k: "k:" and k where
// that is a lock key as it is (valid UTF-8 in NFC, short enough), "h:" and
// k's SHA-256 otherwise. The two forms never meet.
func lockKeyOf(k string) string {
	if len(k)+2 <= lock.MaxKeyBytes && utf8.ValidString(k) && norm.NFC.IsNormalString(k) {
		return "k:" + k
	}
	sum := sha256.Sum256([]byte(k))
	return "h:" + base64.RawURLEncoding.EncodeToString(sum[:])
}

func (s *composed) Claim(ctx context.Context, key, fp string, ttl time.Duration) (store.Record, bool, error) {
	const op = "claim"
	if err := store.ValidateKey(key); err != nil {
		return store.Record{}, false, err
	}
	if err := store.ValidateTTL(op, ttl); err != nil {
		return store.Record{}, false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return store.Record{}, false, err
	}
	if rec, ok, err := s.records.Get(ctx, key); err != nil || ok && rec.State.Done() {
		return rec, false, err
	}
	lk := lockKeyOf(key)
	lease, acquired, err := s.locker.Acquire(ctx, lk, ttl)
	if err != nil {
		return store.Record{}, false, err
	}
	if !acquired {
		return store.Record{Key: key, State: store.StateClaimed}, false, nil
	}
	// An outcome may have landed between the first read and the lock.
	rec, ok, err := s.records.Get(ctx, key)
	if err != nil || ok && rec.State.Done() {
		s.unlock(ctx, lease)
		return rec, false, err
	}
	h := &held{sem: make(chan struct{}, 1), lockKey: lk, lease: lease, ttl: ttl, touched: time.Now()}
	if !s.register(claimKey{key, lease.Fence}, h) {
		s.unlock(ctx, lease)
		return store.Record{}, false, idemkit.NewError(idemkit.CodeRateLimited, op, fmt.Sprintf("this process holds the most claims it may (%d)", s.maxClaims), nil)
	}
	return store.Record{
		Key:         key,
		Fingerprint: fp,
		State:       store.StateClaimed,
		Fence:       lease.Fence,
		CreatedAt:   lease.AcquiredAt,
		ExpiresAt:   lease.ExpiresAt,
	}, true, nil
}

func (s *composed) Extend(ctx context.Context, key string, fence idemkit.Fence, ttl time.Duration) (time.Time, bool, error) {
	const op = "extend"
	if err := store.ValidateFenced(op, key, fence); err != nil {
		return time.Time{}, false, err
	}
	if err := store.ValidateTTL(op, ttl); err != nil {
		return time.Time{}, false, err
	}
	h, done, err := s.take(ctx, op, claimKey{key, fence})
	if h == nil || err != nil {
		return time.Time{}, false, err
	}
	defer done()
	ok, err := s.keep(ctx, claimKey{key, fence}, h, ttl, false)
	if !ok {
		return time.Time{}, false, err
	}
	s.mu.Lock()
	h.ttl = ttl
	s.mu.Unlock()
	return h.lease.ExpiresAt, true, nil
}

func (s *composed) Complete(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	const op = "complete"
	if err := store.ValidateComplete(rec, ttl); err != nil {
		return false, err
	}
	ck := claimKey{rec.Key, rec.Fence}
	h, done, err := s.take(ctx, op, ck)
	if h == nil || err != nil {
		return false, err
	}
	defer done()
	// Hold the lock through the write.
	if ok, err := s.keep(ctx, ck, h, h.ttl, true); !ok || err != nil {
		return false, err
	}
	stored, err := s.records.Put(ctx, rec, ttl)
	if err != nil {
		// The claim stays: the caller may retry, or release it.
		return false, err
	}
	s.end(ck, h)
	s.unlock(ctx, h.lease)
	return stored, nil
}

func (s *composed) Release(ctx context.Context, key string, fence idemkit.Fence) (bool, error) {
	const op = "release"
	if err := store.ValidateFenced(op, key, fence); err != nil {
		return false, err
	}
	ck := claimKey{key, fence}
	h, done, err := s.take(ctx, op, ck)
	if h == nil || err != nil {
		return false, err
	}
	defer done()
	out, err := releaseLease(ctx, s.locker, h.lease)
	if err != nil {
		return false, err
	}
	s.end(ck, h)
	return out.OK, nil
}

func (s *composed) Get(ctx context.Context, key string) (store.Record, bool, error) {
	const op = "get"
	if err := store.ValidateKey(key); err != nil {
		return store.Record{}, false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return store.Record{}, false, err
	}
	rec, ok, err := s.records.Get(ctx, key)
	if err != nil || ok && rec.State.Done() {
		return rec, ok, err
	}
	info, ok, err := s.locker.LookupKey(ctx, lockKeyOf(key))
	if err != nil || !ok {
		return store.Record{}, false, err
	}
	return store.Record{Key: key, State: store.StateClaimed, Fence: info.Fence, CreatedAt: info.AcquiredAt, ExpiresAt: info.ExpiresAt}, true, nil
}

func (s *composed) Delete(ctx context.Context, key string) (bool, error) {
	const op = "delete"
	if err := store.ValidateKey(key); err != nil {
		return false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return false, err
	}
	deleted, err := s.records.Delete(ctx, key)
	if err != nil {
		return deleted, err
	}
	// This process's claim of the key ends here, with its lock.
	ck := s.claimOn(key)
	h, done, err := s.take(ctx, op, ck)
	if err != nil {
		return deleted, err
	}
	if h != nil {
		defer done()
		out, err := releaseLease(ctx, s.locker, h.lease)
		if err != nil {
			return deleted, err
		}
		s.end(ck, h)
		return deleted || out.OK, nil
	}
	lease, live, err := lock.LookupKeyRaw(ctx, s.locker, lockKeyOf(key))
	if idemkit.CodeOf(err) == idemkit.CodeInvalidArgument {
		err = nil // a locker that does not reveal lock ids
	}
	if err != nil || !live {
		return deleted, err
	}
	out, err := releaseLease(ctx, s.locker, lease)
	if err != nil {
		return deleted, err
	}
	return deleted || out.OK, nil
}

// take returns this process's claim ck, locked for one operation, and the
// function that unlocks it; nil when the process holds no such claim (it
// never did, or the claim is over).
func (s *composed) take(ctx context.Context, op string, ck claimKey) (*held, func(), error) {
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	h := s.claims[ck]
	s.mu.Unlock()
	if h == nil {
		return nil, nil, nil
	}
	select {
	case h.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, idemkit.CheckContext(ctx, op)
	}
	if h.over {
		<-h.sem
		return nil, nil, nil
	}
	return h, func() { <-h.sem }, nil
}

// keep makes the lock the claim's for ttl from now: it extends the lease,
// or, with retake, when that is refused (the lease ran out, or the lock was
// released), takes the lock again. Once someone else holds the lock, the
// claim is over. The caller holds h.sem.
func (s *composed) keep(ctx context.Context, ck claimKey, h *held, ttl time.Duration, retake bool) (bool, error) {
	out, err := extendLease(ctx, s.locker, h.lease, ttl)
	if err != nil {
		return false, err
	}
	if out.OK {
		h.lease.ExpiresAt = out.ExpiresAt
		s.touch(h)
		return true, nil
	}
	if !retake {
		return false, nil // kept: the claim still completes while nobody took the key
	}
	lease, acquired, err := s.locker.Acquire(ctx, h.lockKey, ttl)
	if err != nil {
		return false, err
	}
	if !acquired {
		s.end(ck, h)
		return false, nil
	}
	h.lease = lease
	s.touch(h)
	return true, nil
}

// claimOn names this process's claim of the record key, if it holds one
// (the zero claimKey, which names none, otherwise).
func (s *composed) claimOn(key string) claimKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ck := range s.claims {
		if ck.key == key {
			return ck
		}
	}
	return claimKey{}
}

// touch records that h's lease was just taken or extended. The caller
// holds h.sem.
func (s *composed) touch(h *held) {
	s.mu.Lock()
	h.touched = time.Now()
	s.mu.Unlock()
}

// register records a new claim, making room by dropping claims whose
// holders have not touched them for longer than their lease and
// [store.ClaimRetention]. It reports false when the process holds the most claims
// it may.
func (s *composed) register(ck claimKey, h *held) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.claims) >= s.maxClaims {
		now := time.Now()
		for k, c := range s.claims {
			if now.Sub(c.touched) > c.ttl+store.ClaimRetention {
				delete(s.claims, k)
			}
		}
		if len(s.claims) >= s.maxClaims {
			return false
		}
	}
	s.claims[ck] = h
	return true
}

// end marks the claim over and forgets it. The caller holds h.sem.
func (s *composed) end(ck claimKey, h *held) {
	h.over = true
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.claims[ck] == h {
		delete(s.claims, ck)
	}
}

// unlock releases lease on a context detached from ctx's end. A failed
// release is harmless: the lease runs out, and records are read before the
// lock is taken.
func (s *composed) unlock(ctx context.Context, lease lock.Lease) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	_, _ = releaseLease(rctx, s.locker, lease)
}

// releaseLease releases lease through l, with its key when l is a
// [lock.KeyedLocker] (one round trip where the id alone needs two).
func releaseLease(ctx context.Context, l lock.Locker, lease lock.Lease) (lock.Status, error) {
	if k, ok := l.(lock.KeyedLocker); ok {
		return k.ReleaseKey(ctx, lease.Key, lease.ID)
	}
	return l.Release(ctx, lease.ID)
}

// extendLease extends lease through l to now + ttl, with its key when l is
// a [lock.KeyedLocker].
func extendLease(ctx context.Context, l lock.Locker, lease lock.Lease, ttl time.Duration) (lock.Status, error) {
	if k, ok := l.(lock.KeyedLocker); ok {
		return k.ExtendKey(ctx, lease.Key, lease.ID, ttl)
	}
	return l.Extend(ctx, lease.ID, ttl)
}
