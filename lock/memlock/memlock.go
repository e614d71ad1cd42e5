package memlock

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/idemkit/idemkit/lock/provider"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
)

// errClosed is the cause of the ServiceUnavailable error every operation
// returns after Close.
var errClosed = errors.New("memlock: locker closed")

// Option configures [New].
type Option func(*Locker)

// WithClock sets the clock that judges expiry. Default: time.Now. Tests
// inject a fake clock to step across expiry boundaries exactly.
func WithClock(now func() time.Time) Option {
	return func(l *Locker) { l.now = now }
}

// WithCleanupInIsLocked makes IsLocked remove a lock record that expired
// more than [lock.CleanupGrace] ago (leaving a tombstone until the clock
// passes its fence). Default: off (IsLocked is a pure read; expired records
// are still swept as the locker works).
func WithCleanupInIsLocked(on bool) Option {
	return func(l *Locker) { l.cleanup = on }
}

// WithLogger sets the logger for fence-limit warnings. Default:
// slog.Default().
func WithLogger(logger *slog.Logger) Option {
	return func(l *Locker) { l.logger = logger }
}

// Locker is an in-process [lock.Locker] with the full semantics of the
// distributed backends: lock ids, per-key fences that only grow, one
// liveness rule, atomic ownership checks. It is also a [lock.Watcher], so
// [lock.Do] waiters wake as soon as a lock is released and leave as soon as
// their ctx ends. Its time authority is the process clock (or the injected
// one).
//
// The zero value is not usable; call [New].
type Locker struct {
	now     func() time.Time
	cleanup bool
	logger  *slog.Logger

	mu       sync.Mutex
	closed   bool
	locks    map[string]*entry                   // normalised key → lock record or tombstone
	ids      map[string]string                   // lock id → key, for records only
	watchers map[string]map[chan struct{}]func() // key → waiting channels
	untilGC  int                                 // acquires until the next sweep

	// floor is the highest fence of any record or tombstone deleted so
	// far. Deletion waits for the clock to pass the fence, so floor is
	// below the clock and changes nothing, unless the wall clock steps
	// back: then new fences still continue above every deleted one.
	floor idemkit.Fence
}

// entry is a lock record (live or expired), or a tombstone (id == ""): the
// fence of a record removed before the clock passed it, kept until then so
// that the key's next fence is still greater.
type entry struct {
	id       string
	fence    idemkit.Fence
	acquired time.Time
	expires  time.Time // a record: the lease's expiry; a tombstone: when it goes
}

func (e *entry) tombstone() bool { return e.id == "" }

// live reports whether e is a record whose lease is live at now.
func (e *entry) live(now time.Time) bool { return !e.tombstone() && lock.Live(e.expires, now) }

var (
	_ lock.Locker      = (*Locker)(nil)
	_ lock.Watcher     = (*Locker)(nil)
	_ lock.KeyedLocker = (*Locker)(nil)
)

// New returns an empty in-memory locker.
func New(opts ...Option) *Locker {
	l := &Locker{
		now:      time.Now,
		locks:    make(map[string]*entry),
		ids:      make(map[string]string),
		watchers: make(map[string]map[chan struct{}]func()),
		untilGC:  minSweep,
	}
	for _, o := range opts {
		o(l)
	}
	if l.logger == nil {
		l.logger = slog.Default()
	}
	return l
}

// minSweep is the fewest acquires between two sweeps of expired records;
// sweeps are otherwise spaced by the number of records, so their cost is
// amortised O(1) per acquire.
const minSweep = 256

// Capabilities reports fencing with the server (process) clock as the time
// authority.
func (l *Locker) Capabilities() lock.Capabilities {
	return lock.Capabilities{Backend: "memory", Fencing: true}
}

// Acquire implements [lock.Locker].
func (l *Locker) Acquire(ctx context.Context, key string, ttl time.Duration) (lock.Lease, bool, error) {
	const op = "acquire"
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return lock.Lease{}, false, err
	}
	if err := lock.ValidateTTL(ttl); err != nil {
		return lock.Lease{}, false, err
	}
	if err := l.enter(ctx, op); err != nil {
		return lock.Lease{}, false, err
	}
	defer l.mu.Unlock()
	now := l.now()
	old := l.locks[key]
	var prev idemkit.Fence
	if old != nil {
		if old.live(now) {
			return lock.Lease{}, false, nil
		}
		prev = old.fence
	}
	next := provider.NextFence(max(prev, l.floor), now)
	if err := provider.CheckFence(ctx, l.logger, nil, key, next); err != nil {
		return lock.Lease{}, false, err
	}
	if old != nil && !old.tombstone() {
		delete(l.ids, old.id)
	}
	e := &entry{id: lock.NewID(), fence: next, acquired: now, expires: now.Add(ttl)}
	l.locks[key] = e
	l.ids[e.id] = key
	l.maybeSweep(now)
	return lock.Lease{Key: key, ID: e.id, Fence: e.fence, AcquiredAt: e.acquired, ExpiresAt: e.expires}, true, nil
}

// Release implements [lock.Locker].
func (l *Locker) Release(ctx context.Context, id string) (lock.Outcome, error) {
	return l.byID(ctx, "release", id, l.release(id))
}

// release removes the live lock with id. The caller holds l.mu.
func (l *Locker) release(id string) func(key string, e *entry, now time.Time) lock.Outcome {
	return func(key string, e *entry, now time.Time) lock.Outcome {
		l.remove(key, e, time.Time{}, now)
		l.notify(key)
		return lock.Outcome{OK: true}
	}
}

// remove takes the record e of key out of service at now, as if its lease
// ended at ended (the zero time for a release): it is deleted once
// [provider.KeepUntil] has passed, and replaced by a tombstone until then. The
// caller holds l.mu.
func (l *Locker) remove(key string, e *entry, ended, now time.Time) {
	delete(l.ids, e.id)
	until := provider.KeepUntil(e.fence, ended)
	if !now.Before(until) {
		l.delete(key, e)
		return
	}
	l.locks[key] = &entry{fence: e.fence, expires: until}
}

// Extend implements [lock.Locker].
func (l *Locker) Extend(ctx context.Context, id string, ttl time.Duration) (lock.Outcome, error) {
	if err := lock.ValidateTTL(ttl); err != nil {
		return lock.Outcome{}, err
	}
	return l.byID(ctx, "extend", id, extendBy(ttl))
}

// extendBy replaces a live lock's expiry with now + ttl.
func extendBy(ttl time.Duration) func(key string, e *entry, now time.Time) lock.Outcome {
	return func(_ string, e *entry, now time.Time) lock.Outcome {
		e.expires = now.Add(ttl)
		return lock.Outcome{OK: true, ExpiresAt: e.expires}
	}
}

// ReleaseKey implements [lock.KeyedLocker]: Release, refusing (not found)
// when the lock with this id is not on key.
func (l *Locker) ReleaseKey(ctx context.Context, key, id string) (lock.Outcome, error) {
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return lock.Outcome{}, err
	}
	return l.byKeyAndID(ctx, "release", key, id, l.release(id))
}

// ExtendKey implements [lock.KeyedLocker]: Extend, refusing (not found)
// when the lock with this id is not on key.
func (l *Locker) ExtendKey(ctx context.Context, key, id string, ttl time.Duration) (lock.Outcome, error) {
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return lock.Outcome{}, err
	}
	if err := lock.ValidateTTL(ttl); err != nil {
		return lock.Outcome{}, err
	}
	return l.byKeyAndID(ctx, "extend", key, id, extendBy(ttl))
}

// byID resolves id to its live lock under the mutex and applies f to it.
func (l *Locker) byID(ctx context.Context, op, id string, f func(key string, e *entry, now time.Time) lock.Outcome) (lock.Outcome, error) {
	return l.byKeyAndID(ctx, op, "", id, f)
}

// byKeyAndID is byID that also requires the lock to be on key, unless key
// is empty.
func (l *Locker) byKeyAndID(ctx context.Context, op, want, id string, f func(key string, e *entry, now time.Time) lock.Outcome) (lock.Outcome, error) {
	if err := lock.ValidateID(id); err != nil {
		return lock.Outcome{}, err
	}
	if err := l.enter(ctx, op); err != nil {
		return lock.Outcome{}, err
	}
	defer l.mu.Unlock()
	key, ok := l.ids[id]
	if !ok || want != "" && key != want {
		return lock.Outcome{Reason: lock.ReasonNotFound}, nil
	}
	e := l.locks[key]
	if e == nil || e.tombstone() || e.id != id {
		return lock.Outcome{Reason: lock.ReasonNotFound}, nil
	}
	now := l.now()
	if !lock.Live(e.expires, now) {
		return lock.Outcome{Reason: lock.ReasonExpired}, nil
	}
	return f(key, e, now), nil
}

// IsLocked implements [lock.Locker].
func (l *Locker) IsLocked(ctx context.Context, key string) (bool, error) {
	const op = "is-locked"
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return false, err
	}
	if err := l.enter(ctx, op); err != nil {
		return false, err
	}
	defer l.mu.Unlock()
	e := l.locks[key]
	if e == nil {
		return false, nil
	}
	now := l.now()
	if e.live(now) {
		return true, nil
	}
	if l.cleanup && !e.tombstone() && now.Sub(e.expires) > lock.CleanupGrace {
		l.remove(key, e, e.expires, now)
	}
	return false, nil
}

// LookupKey implements [lock.Locker].
func (l *Locker) LookupKey(ctx context.Context, key string) (lock.Info, bool, error) {
	const op = "lookup"
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return lock.Info{}, false, err
	}
	if err := l.enter(ctx, op); err != nil {
		return lock.Info{}, false, err
	}
	defer l.mu.Unlock()
	return l.info(key)
}

// LookupID implements [lock.Locker].
func (l *Locker) LookupID(ctx context.Context, id string) (lock.Info, bool, error) {
	const op = "lookup"
	if err := lock.ValidateID(id); err != nil {
		return lock.Info{}, false, err
	}
	if err := l.enter(ctx, op); err != nil {
		return lock.Info{}, false, err
	}
	defer l.mu.Unlock()
	key, ok := l.ids[id]
	if e := l.locks[key]; !ok || e == nil || e.id != id {
		return lock.Info{}, false, nil
	}
	return l.info(key)
}

// info returns the live lock on key. The caller holds l.mu.
func (l *Locker) info(key string) (lock.Info, bool, error) {
	e := l.locks[key]
	if e == nil || !e.live(l.now()) {
		return lock.Info{}, false, nil
	}
	return lock.NewInfo(key, e.id, e.fence, e.acquired, e.expires), true, nil
}

// Watch implements [lock.Watcher]: the channel closes when the lock on key
// is released (or the locker closed), or at once when key is not held by a
// live lease.
func (l *Locker) Watch(_ context.Context, key string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	key, err := lock.NormalizeKey(key)
	if err != nil {
		close(ch)
		return ch, func() {}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.locks[key]
	if l.closed || e == nil || !e.live(l.now()) {
		close(ch)
		return ch, func() {}
	}
	set := l.watchers[key]
	if set == nil {
		set = make(map[chan struct{}]func())
		l.watchers[key] = set
	}
	stop := func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if s := l.watchers[key]; s != nil {
			delete(s, ch)
			if len(s) == 0 {
				delete(l.watchers, key)
			}
		}
	}
	set[ch] = stop
	return ch, stop
}

// notify wakes every watcher of key. The caller holds l.mu.
func (l *Locker) notify(key string) {
	for ch := range l.watchers[key] {
		close(ch)
	}
	delete(l.watchers, key)
}

// delete drops key's record or tombstone e for good. The caller holds l.mu.
func (l *Locker) delete(key string, e *entry) {
	delete(l.locks, key)
	l.floor = max(l.floor, e.fence)
}

// maybeSweep removes lock records that expired more than
// lock.CleanupGrace ago (leaving tombstones where the clock has not passed
// their fences) and deletes tombstones whose time has come, so the locker
// holds little more than what is live. It runs after every len(locks)
// acquires or so: amortised O(1) per acquire. The caller holds l.mu.
func (l *Locker) maybeSweep(now time.Time) {
	l.untilGC--
	if l.untilGC > 0 {
		return
	}
	for key, e := range l.locks {
		switch {
		case e.tombstone():
			if !now.Before(e.expires) {
				l.delete(key, e)
			}
		case now.Sub(e.expires) > lock.CleanupGrace:
			l.remove(key, e, e.expires, now)
		}
	}
	l.untilGC = max(minSweep, len(l.locks))
}

// Close makes every later operation fail with ServiceUnavailable and wakes
// all watchers. It is safe to call more than once.
func (l *Locker) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	for key := range l.watchers {
		l.notify(key)
	}
	return nil
}

// stored reports whether a lock record for key is kept, live or expired;
// a tombstone does not count. It is a probe for the conformance suite.
func (l *Locker) stored(key string) bool {
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.locks[key]
	return e != nil && !e.tombstone()
}

// fenceOf returns the fence that key's lock record or tombstone carries, or
// 0 when there is neither. It is a probe for the conformance suite.
func (l *Locker) fenceOf(key string) idemkit.Fence {
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.locks[key]; e != nil {
		return e.fence
	}
	return 0
}

// raiseFence leaves a tombstone with fence f on the free key, so that the
// next lease for key gets a fence above f. It only raises, and only on a
// key no live lease holds. It exists for tests of the fence limits.
func (l *Locker) raiseFence(key string, f idemkit.Fence) error {
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	e := l.locks[key]
	switch {
	case e != nil && e.live(now):
		return idemkit.NewError(idemkit.CodeInvalidArgument, "raise-fence", "the key is held", nil)
	case e != nil && f <= e.fence:
		return idemkit.NewError(idemkit.CodeInvalidArgument, "raise-fence", "a fence can only be raised", nil)
	case e != nil:
		delete(l.ids, e.id)
	}
	l.locks[key] = &entry{fence: f, expires: provider.KeepUntil(f, time.Time{})}
	return nil
}

// unexpiring returns the keys of the records and tombstones that have no
// expiry: none, by construction. It is a probe for the conformance suite.
func (l *Locker) unexpiring() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var keys []string
	for key, e := range l.locks {
		if e.expires.IsZero() {
			keys = append(keys, key)
		}
	}
	return keys
}

// size returns the number of records and tombstones held, and the number
// of lock ids indexed.
func (l *Locker) size() (entries, ids int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.locks), len(l.ids)
}

// enter checks ctx and takes l.mu; on success the caller must unlock. It
// fails, without the mutex held, when ctx has ended or the locker is closed.
func (l *Locker) enter(ctx context.Context, op string) error {
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return err
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return idemkit.NewError(idemkit.CodeServiceUnavailable, op, "locker closed", errClosed)
	}
	return nil
}
