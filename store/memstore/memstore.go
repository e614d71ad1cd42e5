package memstore

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/memlock"
	"github.com/idemkit/idemkit/store"
)

// ErrClosed is the cause of the ServiceUnavailable error every operation
// returns after [Store.Close].
var ErrClosed = errors.New("memstore: store closed")

// Option configures [New].
type Option func(*Store)

// WithClock sets the clock that judges expiry and stamps records. Default:
// time.Now.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// WithLocker lets the store combine its operations with l's ([store.Combiner]):
// a guard built on this store and l then reads the record in the same call
// that takes the lock, and releases the lock in the same call that writes
// the record. In memory this saves nothing but exercises the guard's
// combined path exactly as a network store does. Default: none.
func WithLocker(l *memlock.Locker) Option { return func(s *Store) { s.locker = l } }

// WithMaxResponseBytes refuses responses larger than n bytes with an error
// matching [store.ErrTooLarge], as a network store with a size limit
// would. Default: 0, no limit.
func WithMaxResponseBytes(n int) Option { return func(s *Store) { s.maxResponse = n } }

// Store is an in-process [store.Store] for tests and single-node services.
// Records are copied in and out, so callers never share memory with it.
// Expired records are invisible at once and swept as the store works.
//
// The zero value is not usable; call [New].
type Store struct {
	now         func() time.Time
	maxResponse int
	locker      *memlock.Locker

	mu      sync.RWMutex
	closed  bool
	records map[string]*store.Record
	untilGC int
}

var (
	_ store.Store    = (*Store)(nil)
	_ store.Combiner = (*Store)(nil)
)

// New returns an empty in-memory store.
func New(opts ...Option) *Store {
	s := &Store{now: time.Now, records: make(map[string]*store.Record), untilGC: minSweep}
	for _, o := range opts {
		o(s)
	}
	return s
}

// minSweep is the fewest puts between two sweeps of expired records; sweeps
// are otherwise spaced by the number of records (amortised O(1) per put).
const minSweep = 256

// Get implements [store.Store].
func (s *Store) Get(ctx context.Context, key string) (store.Record, bool, error) {
	const op = "get"
	if err := store.ValidateKey(key); err != nil {
		return store.Record{}, false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return store.Record{}, false, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return store.Record{}, false, closedErr(op)
	}
	r := s.records[key]
	if r == nil || !lock.Live(r.ExpiresAt, s.now()) {
		return store.Record{}, false, nil
	}
	return clone(r), true, nil
}

// Put implements [store.Store].
func (s *Store) Put(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	const op = "put"
	if err := store.ValidatePut(rec, ttl); err != nil {
		return false, err
	}
	if s.maxResponse > 0 && len(rec.Response) > s.maxResponse {
		return false, store.TooLarge(op, len(rec.Response), s.maxResponse)
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, closedErr(op)
	}
	now := s.now()
	if old := s.records[rec.Key]; old != nil && lock.Live(old.ExpiresAt, now) && old.Fence > rec.Fence {
		return false, nil
	}
	c := clone(&rec)
	c.CreatedAt, c.ExpiresAt = now, now.Add(ttl)
	s.records[rec.Key] = &c
	s.maybeSweep(now)
	return true, nil
}

// Delete implements [store.Store].
func (s *Store) Delete(ctx context.Context, key string) (bool, error) {
	const op = "delete"
	if err := store.ValidateKey(key); err != nil {
		return false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, closedErr(op)
	}
	r := s.records[key]
	delete(s.records, key)
	return r != nil && lock.Live(r.ExpiresAt, s.now()), nil
}

// Combines implements [store.Combiner]: true for the locker given to
// [WithLocker].
func (s *Store) Combines(l lock.Locker) bool { return s.locker != nil && l == lock.Locker(s.locker) }

// AcquireGet implements [store.Combiner].
func (s *Store) AcquireGet(ctx context.Context, lockKey string, ttl time.Duration, recordKey string) (lock.Lease, bool, store.Record, bool, error) {
	if s.locker == nil {
		return lock.Lease{}, false, store.Record{}, false, idemkit.NewError(idemkit.CodeInvalidArgument, "acquire-get", "the store has no locker", nil)
	}
	if err := store.ValidateKey(recordKey); err != nil {
		return lock.Lease{}, false, store.Record{}, false, err
	}
	lease, ok, err := s.locker.Acquire(ctx, lockKey, ttl)
	if err != nil || !ok {
		return lease, ok, store.Record{}, false, err
	}
	rec, found, err := s.Get(context.WithoutCancel(ctx), recordKey)
	if err != nil {
		_, _ = s.locker.ReleaseKey(context.WithoutCancel(ctx), lease.Key, lease.ID)
		return lock.Lease{}, false, store.Record{}, false, err
	}
	return lease, true, rec, found, nil
}

// PutRelease implements [store.Combiner].
func (s *Store) PutRelease(ctx context.Context, rec store.Record, ttl time.Duration, lease lock.Lease) (bool, lock.Outcome, error) {
	if s.locker == nil {
		return false, lock.Outcome{}, idemkit.NewError(idemkit.CodeInvalidArgument, "put-release", "the store has no locker", nil)
	}
	stored, err := s.Put(ctx, rec, ttl)
	if err != nil {
		return false, lock.Outcome{}, err
	}
	out, err := s.locker.ReleaseKey(context.WithoutCancel(ctx), lease.Key, lease.ID)
	return stored, out, err
}

// Close makes every later operation fail with ServiceUnavailable (wrapping
// [ErrClosed]). It is safe to call more than once.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// Len returns the number of records kept, live or expired but not yet
// swept. It is a diagnostic.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.records)
}

// maybeSweep drops expired records every len(records) puts or so. The
// caller holds s.mu.
func (s *Store) maybeSweep(now time.Time) {
	s.untilGC--
	if s.untilGC > 0 {
		return
	}
	for k, r := range s.records {
		if !lock.Live(r.ExpiresAt, now) {
			delete(s.records, k)
		}
	}
	s.untilGC = max(minSweep, len(s.records))
}

func clone(r *store.Record) store.Record {
	c := *r
	if r.Response != nil {
		c.Response = append([]byte(nil), r.Response...)
	}
	return c
}

func closedErr(op string) error {
	return idemkit.NewError(idemkit.CodeServiceUnavailable, op, "store closed", ErrClosed)
}
