package memstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/leased"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/engine"
)

// ErrClosed is the cause of the ServiceUnavailable error every operation
// returns after [Store.Close].
var ErrClosed = errors.New("memstore: store closed")

// Option configures [New].
type Option func(*Store)

// WithClock sets the clock that judges leases and expiry and stamps
// records and fences. Default: time.Now.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// WithMaxResponseBytes refuses responses larger than n bytes with an error
// matching [store.ErrTooLarge], as a network store with a size limit
// would. Default: 0, no limit.
func WithMaxResponseBytes(n int) Option { return func(s *Store) { s.maxResponse = n } }

// WithMaxEntries bounds the keys the store keeps, live records and
// expired ones not yet swept. A write that would go beyond it sweeps
// what expired at once and, if the store is still full, fails with
// RateLimited. Default: 1,000,000; 0 for no limit.
func WithMaxEntries(n int) Option { return func(s *Store) { s.maxEntries = n } }

// WithMaxBytes bounds the bytes the store keeps: keys, fingerprints and
// responses, plus a fixed overhead per key. A claim or a write that would
// go beyond it sweeps what expired at once and, if the store is still
// full, fails with RateLimited. The outcome of a claim the store granted
// (Complete) always lands: its work already ran, and refusing the outcome
// would let a retry run it again. So the store can hold more than n bytes
// by at most the responses of the claims running when it filled up, each
// bounded by [WithMaxResponseBytes] (or the adapter's response limit).
// Default: 1 GiB; 0 for no limit.
func WithMaxBytes(n int) Option { return func(s *Store) { s.maxBytes = n } }

// Store is an in-process [store.Store] (records that carry their own
// lease) and [store.Records] (fenced plain records) for tests and
// single-node services. Records are copied in and out, so callers never
// share memory with it. Leases and expiry are judged by the store's clock
// ([WithClock]); fences, sweeping and the lock-id index are as the package
// doc says.
//
// The zero value is not usable; call [New].
type Store struct {
	now         func() time.Time
	maxResponse int
	maxEntries  int
	maxBytes    int

	mu      sync.RWMutex
	closed  bool
	entries map[string]*entry
	byID    map[string]string // lock id → key: the claims whose fingerprint is a lock id
	floor   idemkit.Fence     // the highest fence of a record the store removed or overwrote with a lower one
	bytes   int               // the sizes of all entries
	untilGC int               // writes until the next sweep
	sweepAt time.Time         // no entry may be removed before it (when removable)
	// removable is false only while the store holds no entry: nothing may
	// be removed at all.
	removable bool

	watches map[string]*keyWatch // the watched keys (see Watch)
}

// keyWatch is the one channel every watch of a key shares: closed when the
// key's claim ends.
type keyWatch struct {
	ch chan struct{}
	n  int // watches not yet stopped
}

// entry is what the store keeps under one key: a record, visible while it
// is live, kept until keepUntil.
type entry struct {
	rec store.Record
	// stepsUntil is the latest keep a step of the claim (or of the claims
	// it carried its steps from) asked for: the entry is kept until then
	// at least. Zero without steps.
	stepsUntil time.Time
	// released marks what a Release of a claim with steps leaves behind:
	// its fingerprint, fence and steps, invisible and claimable at once,
	// for the next claim of the same fingerprint.
	released bool
}

// entryOverhead is what an entry counts against [WithMaxBytes] besides its
// key, fingerprint and response: the map slot, the entry and its times.
const entryOverhead = 128

// sizeOf returns what an entry holding rec counts against [WithMaxBytes]:
// its key, fingerprint, response and steps. Only a write changes it: an
// extension changes no length.
func sizeOf(rec *store.Record) int {
	n := entryOverhead + len(rec.Key) + len(rec.Fingerprint) + len(rec.Response)
	for _, st := range rec.Steps {
		n += st.Size()
	}
	return n
}

// keepUntil is when the entry may be removed: at its expiry, and for a
// claim [store.ClaimRetention] later (it still completes meanwhile) or,
// when its steps asked for longer, at their keep. No fence needs it
// longer: the store's floor carries them all.
func (e *entry) keepUntil() time.Time {
	if e.rec.State == store.StateClaimed {
		until := e.rec.ExpiresAt.Add(store.ClaimRetention)
		if e.stepsUntil.After(until) {
			return e.stepsUntil
		}
		return until
	}
	return e.rec.ExpiresAt
}

// live reports whether the entry's record is visible at now.
func (e *entry) live(now time.Time) bool {
	return !e.released && now.Before(e.rec.ExpiresAt)
}

// holds reports whether the entry still carries the claim fence: a claim
// with that fence, live or run out, that nobody replaced or released.
func (e *entry) holds(fence idemkit.Fence) bool {
	return !e.released && e.rec.State == store.StateClaimed && e.rec.Fence == fence
}

// carries reports whether a new claim of fp at now takes over e's steps:
// e is a claim that ended without an outcome (its lease ran out, or it
// was released) of the same fingerprint, still within its keep.
func (e *entry) carries(fp string, now time.Time) bool {
	return len(e.rec.Steps) > 0 && e.rec.State == store.StateClaimed && e.rec.Fingerprint == fp && now.Before(e.keepUntil())
}

var (
	_ store.Store   = (*Store)(nil)
	_ store.Records = (*Store)(nil)
	_ store.Stepper = (*Store)(nil)
)

// New returns an empty in-memory store.
func New(opts ...Option) *Store {
	s := &Store{now: time.Now, maxEntries: 1_000_000, maxBytes: 1 << 30, entries: make(map[string]*entry), byID: make(map[string]string), untilGC: minSweep}
	for _, o := range opts {
		o(s)
	}
	return s
}

// minSweep is the fewest writes between two sweeps of expired entries;
// sweeps are otherwise spaced by the number of entries (amortised O(1) per
// write).
const minSweep = 256

// Claim implements [store.Store].
func (s *Store) Claim(ctx context.Context, key, fp string, ttl time.Duration) (store.Record, bool, error) {
	const op = "claim"
	if err := engine.ValidateKey(key); err != nil {
		return store.Record{}, false, err
	}
	if err := engine.ValidateTTL(op, ttl); err != nil {
		return store.Record{}, false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return store.Record{}, false, err
	}
	// A live record (a replay, a busy key) is answered under the read
	// lock, so that replays run in parallel; any other claim writes.
	if rec, ok, err := s.live(op, key); ok || err != nil {
		return rec, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.Record{}, false, closedErr(op)
	}
	now := s.now()
	e := s.entries[key]
	if e != nil && e.live(now) {
		return clone(&e.rec), false, nil
	}
	var prev idemkit.Fence
	if e != nil {
		prev = e.rec.Fence
	}
	fence := max(leased.NextFence(prev, now), s.floor+1)
	if fence > idemkit.FenceMax {
		return store.Record{}, false, idemkit.NewError(idemkit.CodeInternal, op, fmt.Sprintf("fence overflow: the next fence %s exceeds the maximum %s", fence, idemkit.FenceMax), nil)
	}
	rec := store.Record{
		Key:         key,
		Fingerprint: fp,
		State:       store.StateClaimed,
		Fence:       fence,
		CreatedAt:   now,
		ExpiresAt:   now.Add(ttl),
	}
	var replaced *store.Record
	if e != nil && len(e.rec.Response) > 0 {
		// Taken over below: the expired outcome's fingerprint and response.
		replaced = &store.Record{Fingerprint: e.rec.Fingerprint, Response: e.rec.Response}
	}
	var stepsUntil time.Time
	if e != nil && e.carries(fp, now) {
		// The steps move to the new claim, with the keep they asked for.
		rec.Steps, stepsUntil = e.rec.Steps, e.stepsUntil
	}
	if err := s.set(op, key, e, rec, now, false); err != nil {
		return store.Record{}, false, err
	}
	s.entries[key].stepsUntil = stepsUntil
	rec.Replaced = replaced
	rec.Steps = cloneSteps(rec.Steps)
	return rec, true, nil
}

// live returns a copy of key's record, under the read lock, when it is
// live.
func (s *Store) live(op, key string) (store.Record, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return store.Record{}, false, closedErr(op)
	}
	if e := s.entries[key]; e != nil && e.live(s.now()) {
		return clone(&e.rec), true, nil
	}
	return store.Record{}, false, nil
}

// Extend implements [store.Store].
func (s *Store) Extend(ctx context.Context, key string, fence idemkit.Fence, ttl time.Duration) (time.Time, bool, error) {
	const op = "extend"
	if err := engine.ValidateFenced(op, key, fence); err != nil {
		return time.Time{}, false, err
	}
	if err := engine.ValidateTTL(op, ttl); err != nil {
		return time.Time{}, false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return time.Time{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return time.Time{}, false, closedErr(op)
	}
	now := s.now()
	e := s.entries[key]
	if e == nil || !e.holds(fence) || !e.live(now) {
		return time.Time{}, false, nil
	}
	e.rec.ExpiresAt = now.Add(ttl)
	s.changed(e) // a shorter TTL than the claim's brings the entry's removal forward
	return e.rec.ExpiresAt, true, nil
}

// Complete implements [store.Store].
func (s *Store) Complete(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	const op = "complete"
	if err := engine.ValidateComplete(rec, ttl); err != nil {
		return false, err
	}
	if s.maxResponse > 0 && len(rec.Response) > s.maxResponse {
		return false, engine.TooLarge(op, len(rec.Response), s.maxResponse)
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, closedErr(op)
	}
	e := s.entries[rec.Key]
	if e == nil || !e.holds(rec.Fence) {
		return false, nil
	}
	now := s.now()
	// The outcome of a claim this store granted always lands, even beyond
	// the byte limit: the work already ran, and refusing its outcome would
	// let a retry run it again once the lease ran out.
	if err := s.set(op, rec.Key, e, outcome(&rec, now, ttl), now, true); err != nil {
		return false, err
	}
	s.notify(rec.Key)
	return true, nil
}

// Release implements [store.Store].
func (s *Store) Release(ctx context.Context, key string, fence idemkit.Fence) (bool, error) {
	const op = "release"
	if err := engine.ValidateFenced(op, key, fence); err != nil {
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
	now := s.now()
	e := s.entries[key]
	if e == nil || !e.holds(fence) || !e.live(now) {
		return false, nil
	}
	if len(e.rec.Steps) > 0 {
		// What is left for the next claim of the fingerprint: kept as
		// long as the claim would have been, and as its steps asked.
		s.unindex(e)
		e.released = true
	} else {
		s.remove(key, e)
	}
	s.notify(key)
	return true, nil
}

// RecordStep implements [store.Stepper]. A step always lands, even beyond
// the byte limit, as an outcome does: its work already ran.
func (s *Store) RecordStep(ctx context.Context, key string, fence idemkit.Fence, index int, step store.Step, keep time.Duration) (bool, error) {
	const op = "record-step"
	if err := engine.ValidateStep(key, fence, index, step, keep); err != nil {
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
	e := s.entries[key]
	if e == nil || !e.holds(fence) || len(e.rec.Steps) != index {
		return false, nil
	}
	total := step.Size()
	for _, st := range e.rec.Steps {
		total += st.Size()
	}
	if total > store.MaxStepBytes {
		return false, idemkit.NewError(idemkit.CodeInvalidArgument, op, fmt.Sprintf("the claim's steps would take %d bytes, over the limit of %d", total, store.MaxStepBytes), store.ErrTooLarge)
	}
	// Readers get copies (clone), so the slice grows in place.
	e.rec.Steps = append(e.rec.Steps, store.Step{Name: step.Name, Result: bytes.Clone(step.Result)})
	s.bytes += step.Size()
	if until := s.now().Add(keep); until.After(e.stepsUntil) {
		e.stepsUntil = until // never shortened; keepUntil only grows
	}
	return true, nil
}

// Get implements [store.Store] and [store.Records].
func (s *Store) Get(ctx context.Context, key string) (store.Record, bool, error) {
	const op = "get"
	if err := engine.ValidateKey(key); err != nil {
		return store.Record{}, false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return store.Record{}, false, err
	}
	return s.live(op, key)
}

// FindClaim implements lock.Finder: the live claim whose fingerprint is the
// lock id fp, or ok = false (also for a fingerprint that is no lock id).
func (s *Store) FindClaim(ctx context.Context, fp string) (store.Record, bool, error) {
	const op = "find"
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return store.Record{}, false, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return store.Record{}, false, closedErr(op)
	}
	e := s.entries[s.byID[fp]]
	if e == nil || e.rec.Fingerprint != fp || e.rec.State != store.StateClaimed || !e.live(s.now()) {
		return store.Record{}, false, nil
	}
	return clone(&e.rec), true, nil
}

// Put implements [store.Records]: it writes the outcome rec unless the live
// record under its key carries a higher fence.
func (s *Store) Put(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	const op = "put"
	if err := validatePut(rec, ttl); err != nil {
		return false, err
	}
	if s.maxResponse > 0 && len(rec.Response) > s.maxResponse {
		return false, engine.TooLarge(op, len(rec.Response), s.maxResponse)
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
	e := s.entries[rec.Key]
	if e != nil && e.live(now) && e.rec.Fence > rec.Fence {
		return false, nil
	}
	if err := s.set(op, rec.Key, e, outcome(&rec, now, ttl), now, false); err != nil {
		return false, err
	}
	return true, nil
}

// Delete implements [store.Store] and [store.Records].
func (s *Store) Delete(ctx context.Context, key string) (bool, error) {
	const op = "delete"
	if err := engine.ValidateKey(key); err != nil {
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
	now := s.now()
	e := s.entries[key]
	if e == nil || !e.live(now) {
		if e != nil && len(e.rec.Steps) > 0 {
			// Steps left for a next claim (after a release or a lease
			// that ran out) go with the key.
			s.remove(key, e)
		}
		return false, nil
	}
	s.remove(key, e)
	s.notify(key)
	return true, nil
}

// Watch implements [store.Watcher]: the channel closes when the key's
// claim ends (Complete, Release or Delete). Every watch of one key shares
// one channel, so waiting requests cost a counter each.
func (s *Store) Watch(_ context.Context, key string) (<-chan struct{}, func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watches == nil {
		s.watches = make(map[string]*keyWatch)
	}
	w := s.watches[key]
	if w == nil {
		w = &keyWatch{ch: make(chan struct{})}
		s.watches[key] = w
	}
	w.n++
	stopped := false
	return w.ch, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if stopped {
			return
		}
		stopped = true
		w.n--
		if w.n == 0 && s.watches[key] == w {
			delete(s.watches, key) // not fired: nobody else waits on it
		}
	}
}

// notify wakes the watches of key. The caller holds s.mu.
func (s *Store) notify(key string) {
	if w := s.watches[key]; w != nil {
		close(w.ch)
		delete(s.watches, key)
	}
}

// Close makes every later operation fail with ServiceUnavailable (wrapping
// [ErrClosed]). It is safe to call more than once.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// set writes rec as the record of key, whose entry is e (nil for a new
// key), keeping the highest fence the key carried. A write that would go
// beyond the store's limits sweeps at once, and fails if the store is
// still full; with overBytes, the write of an existing key's record goes
// beyond the byte limit rather than fail. The caller holds s.mu for
// writing.
func (s *Store) set(op, key string, e *entry, rec store.Record, now time.Time, overBytes bool) error {
	size, old := sizeOf(&rec), 0
	if e != nil {
		old = sizeOf(&e.rec)
	}
	grow := size - old
	if overBytes && e != nil {
		grow = 0 // no new key, and the byte limit does not apply
	}
	if s.full(e == nil, grow) {
		s.sweep(now)
		if e != nil && s.entries[key] != e {
			e, old = nil, 0 // swept
		}
		if s.full(e == nil, grow) {
			return idemkit.NewError(idemkit.CodeRateLimited, op, fmt.Sprintf("the memory store is full (%d keys, %d bytes; limits %d keys, %d bytes)", len(s.entries), s.bytes, s.maxEntries, s.maxBytes), nil)
		}
	}
	if e == nil {
		e = &entry{}
		s.entries[key] = e
	}
	s.unindex(e)
	if e.rec.Fence > rec.Fence { // a Put of a lower fence over an expired record
		s.floor = max(s.floor, e.rec.Fence)
	}
	e.rec, e.stepsUntil, e.released = rec, time.Time{}, false
	if rec.State == store.StateClaimed && engine.LockID(rec.Fingerprint) {
		s.byID[rec.Fingerprint] = key
	}
	s.bytes += size - old
	s.changed(e)
	s.untilGC--
	if s.untilGC <= 0 {
		s.sweep(now)
	}
	return nil
}

// full reports whether adding a key (when add) and grow bytes would go
// beyond the store's limits. The caller holds s.mu.
func (s *Store) full(add bool, grow int) bool {
	return add && s.maxEntries > 0 && len(s.entries) >= s.maxEntries ||
		grow > 0 && s.maxBytes > 0 && s.bytes+grow > s.maxBytes
}

// remove drops the entry e of key, raising the floor to its fence. The
// caller holds s.mu for writing.
func (s *Store) remove(key string, e *entry) {
	s.floor = max(s.floor, e.rec.Fence)
	s.unindex(e)
	delete(s.entries, key)
	s.bytes -= sizeOf(&e.rec)
}

// unindex drops e's record from the lock-id index. The caller holds s.mu
// for writing.
func (s *Store) unindex(e *entry) {
	if fp := e.rec.Fingerprint; s.byID[fp] == e.rec.Key && e.rec.State == store.StateClaimed {
		delete(s.byID, fp)
	}
}

// changed notes that e, just written, may be removed from its record's
// expiry on (its keep-until time is never earlier), so that sweeps before
// the earliest such time are skipped: every change to an entry calls it,
// which keeps s.sweepAt a lower bound of every entry's keep-until time.
// The caller holds s.mu for writing.
func (s *Store) changed(e *entry) {
	if until := e.rec.ExpiresAt; !s.removable || until.Before(s.sweepAt) {
		s.sweepAt, s.removable = until, true
	}
}

// sweep drops the entries past their keep-until time. Writes call it every
// len(entries) writes or so (amortised O(1) per write), and at once when
// the store is full. Before the earliest time an entry may be removed
// (s.sweepAt) it has nothing to drop and looks at no entry. The caller
// holds s.mu for writing.
func (s *Store) sweep(now time.Time) {
	s.untilGC = max(minSweep, len(s.entries))
	if !s.removable || now.Before(s.sweepAt) {
		return
	}
	s.removable = false
	for k, e := range s.entries {
		until := e.keepUntil()
		switch {
		case !now.Before(until):
			s.remove(k, e)
		case !s.removable || until.Before(s.sweepAt):
			s.sweepAt, s.removable = until, true
		}
	}
	s.untilGC = max(minSweep, len(s.entries))
}

// validatePut checks a Put's arguments: a valid key, an outcome state and a
// TTL of at least one millisecond. The fence may be zero (an unfenced
// writer).
func validatePut(rec store.Record, ttl time.Duration) error {
	if err := engine.ValidateKey(rec.Key); err != nil {
		return err
	}
	if !rec.State.Done() {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "put", "a record needs an outcome state (completed or not-replayable, got "+rec.State.String()+")", nil)
	}
	return engine.ValidateTTL("put", ttl)
}

// outcome returns a private copy of rec stamped with now and ttl, without
// steps (an outcome has none).
func outcome(rec *store.Record, now time.Time, ttl time.Duration) store.Record {
	c := *rec
	c.Steps = nil
	c = clone(&c)
	c.CreatedAt, c.ExpiresAt = now, now.Add(ttl)
	return c
}

func clone(r *store.Record) store.Record {
	c := *r
	c.Replaced = nil // a Claim's report, never stored
	if r.Response != nil {
		c.Response = append([]byte(nil), r.Response...)
	}
	c.Steps = cloneSteps(r.Steps)
	return c
}

// cloneSteps returns a copy of steps that shares no memory with them: the
// results in one allocation. It costs nothing without steps.
func cloneSteps(steps []store.Step) []store.Step {
	if len(steps) == 0 {
		return nil
	}
	n := 0
	for _, st := range steps {
		n += len(st.Result)
	}
	buf := make([]byte, 0, n)
	c := make([]store.Step, len(steps))
	for i, st := range steps {
		c[i].Name = st.Name
		if st.Result != nil {
			buf = append(buf, st.Result...)
			c[i].Result = buf[len(buf)-len(st.Result) : len(buf) : len(buf)]
		}
	}
	return c
}

func closedErr(op string) error {
	return idemkit.NewError(idemkit.CodeServiceUnavailable, op, "store closed", ErrClosed)
}
