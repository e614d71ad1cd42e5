package memlock

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
)

// ErrClosed is the cause of the ServiceUnavailable error every operation
// returns after [Locker.Close].
var ErrClosed = errors.New("memlock: locker closed")

// Option configures [New].
type Option func(*Locker)

// WithClock sets the clock that judges expiry. Default: time.Now. Tests
// inject a fake clock to step across expiry boundaries exactly.
func WithClock(now func() time.Time) Option {
	return func(l *Locker) { l.now = now }
}

// WithCleanupInIsLocked makes IsLocked delete a lock record that expired
// more than [lock.CleanupGrace] ago. Default: off (IsLocked is a pure read;
// expired records are still swept as the locker works).
func WithCleanupInIsLocked(on bool) Option {
	return func(l *Locker) { l.cleanup = on }
}

// WithLogger sets the logger for fence-limit warnings. Default:
// slog.Default().
func WithLogger(logger *slog.Logger) Option {
	return func(l *Locker) { l.logger = logger }
}

// WithFenceRetention lets the locker forget the fence counter of a key that
// has had no lock for d, so that a long-running process with ever-new keys
// does not grow without bound. Fences stay monotone per key: a forgotten
// key's next fence continues above every counter ever forgotten (so it may
// jump, but never repeats or goes back). Default: 0, counters are kept for
// the life of the locker and every key's first fence is 1.
func WithFenceRetention(d time.Duration) Option {
	return func(l *Locker) { l.retention = d }
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
	now       func() time.Time
	cleanup   bool
	logger    *slog.Logger
	retention time.Duration

	mu       sync.Mutex
	closed   bool
	locks    map[string]*entry                   // normalised key → lock record (live or expired)
	ids      map[string]string                   // lock id → key
	fences   map[string]*counter                 // key → fence counter
	floor    lock.Fence                          // highest counter ever forgotten
	watchers map[string]map[chan struct{}]func() // key → waiting channels
	untilGC  int                                 // operations until the next sweep
}

type entry struct {
	id       string
	fence    lock.Fence
	acquired time.Time
	expires  time.Time
}

type counter struct {
	fence lock.Fence
	used  time.Time // last acquire or release
}

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
		fences:   make(map[string]*counter),
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
	return lock.Capabilities{Backend: "memory", Fencing: true, TimeAuthority: lock.TimeServer}
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
	if old != nil && lock.Live(old.expires, now) {
		return lock.Lease{}, false, nil
	}
	c := l.fences[key]
	next := l.floor + 1
	if c != nil {
		next = c.fence + 1
	}
	if err := lock.CheckFence(ctx, l.logger, nil, key, next); err != nil {
		return lock.Lease{}, false, err
	}
	if old != nil {
		delete(l.ids, old.id)
	}
	if c == nil {
		c = &counter{}
		l.fences[key] = c
	}
	c.fence, c.used = next, now
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

// release deletes the live lock with id. The caller holds l.mu.
func (l *Locker) release(id string) func(key string, e *entry, now time.Time) lock.Outcome {
	return func(key string, e *entry, now time.Time) lock.Outcome {
		delete(l.locks, key)
		delete(l.ids, id)
		if c := l.fences[key]; c != nil {
			c.used = now
		}
		l.notify(key)
		return lock.Outcome{OK: true}
	}
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
	if e == nil || e.id != id {
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
	if lock.Live(e.expires, now) {
		return true, nil
	}
	if l.cleanup && now.Sub(e.expires) > lock.CleanupGrace {
		delete(l.locks, key)
		delete(l.ids, e.id)
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
	if !ok || l.locks[key] == nil || l.locks[key].id != id {
		return lock.Info{}, false, nil
	}
	return l.info(key)
}

// info returns the live lock on key. The caller holds l.mu.
func (l *Locker) info(key string) (lock.Info, bool, error) {
	e := l.locks[key]
	if e == nil || !lock.Live(e.expires, l.now()) {
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
	if l.closed || e == nil || !lock.Live(e.expires, l.now()) {
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

// maybeSweep deletes lock records that expired more than
// lock.CleanupGrace ago and, with a fence retention, forgets idle counters.
// It runs after every len(locks) acquires or so. The caller holds l.mu.
func (l *Locker) maybeSweep(now time.Time) {
	l.untilGC--
	if l.untilGC > 0 {
		return
	}
	for key, e := range l.locks {
		if now.Sub(e.expires) > lock.CleanupGrace {
			delete(l.locks, key)
			delete(l.ids, e.id)
		}
	}
	if l.retention > 0 {
		for key, c := range l.fences {
			if _, held := l.locks[key]; !held && now.Sub(c.used) > l.retention {
				l.floor = max(l.floor, c.fence)
				delete(l.fences, key)
			}
		}
	}
	l.untilGC = max(minSweep, len(l.locks))
}

// Close makes every later operation fail with ServiceUnavailable (wrapping
// [ErrClosed]) and wakes all watchers. It is safe to call more than once.
func (l *Locker) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	for key := range l.watchers {
		l.notify(key)
	}
	return nil
}

// Stored reports whether a lock record for key is kept, live or expired. It
// is a diagnostic for tests of expiry and cleanup.
func (l *Locker) Stored(key string) bool {
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.locks[key]
	return ok
}

// Fence returns the current value of key's fence counter: the fence of the
// last lease granted for key (0 if none). It is a diagnostic.
func (l *Locker) Fence(key string) lock.Fence {
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.fences[key]; c != nil {
		return c.fence
	}
	return 0
}

// RaiseFence sets key's fence counter to f, so the next lease for key gets
// f+1. It only raises: an f at or below the current counter is refused with
// InvalidArgument, so fences stay monotone. It exists for tests of the
// fence limits.
func (l *Locker) RaiseFence(key string, f lock.Fence) error {
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.fences[key]
	cur := l.floor
	if c != nil {
		cur = c.fence
	}
	if f <= cur {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "raise-fence", "a fence counter can only be raised", nil)
	}
	if c == nil {
		c = &counter{}
		l.fences[key] = c
	}
	c.fence, c.used = f, l.now()
	return nil
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
		return idemkit.NewError(idemkit.CodeServiceUnavailable, op, "locker closed", ErrClosed)
	}
	return nil
}
