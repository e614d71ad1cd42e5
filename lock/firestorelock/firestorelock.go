package firestorelock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/idemkit/idemkit/lock/provider"

	"cloud.google.com/go/firestore"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
)

var (
	_ lock.Locker      = (*Locker)(nil)
	_ lock.KeyedLocker = (*Locker)(nil)
	_ lock.Watcher     = (*Locker)(nil)
)

// Option configures [New].
type Option func(*config)

type config struct {
	collection string
	cleanup    bool
	logger     *slog.Logger
	hasher     idemkit.Hasher
	sweepBatch int
	watchLimit int
}

// Sweep batch limits.
const (
	defaultSweepBatch = 100
	maxSweepBatch     = 500 // Firestore's historical limit of writes per commit
)

// WithCollection sets the collection of the lock documents: 1 to 100
// bytes of ASCII letters, digits, "_", "-" and ".", neither "." nor "..",
// and not of Firestore's reserved form "__...__". Default:
// "idemkit_locks".
func WithCollection(name string) Option { return func(c *config) { c.collection = name } }

// WithCleanupInIsLocked makes IsLocked also collect the key's lock
// document when its lease expired more than [lock.CleanupGrace] ago
// (judged by Firestore's read time): it is deleted, or reduced to a
// tombstone while the server clock has not passed its fence. Default: off
// (IsLocked is a pure read; a TTL policy or Sweep collects expired
// documents).
func WithCleanupInIsLocked(on bool) Option { return func(c *config) { c.cleanup = on } }

// WithLogger sets the logger for fence-limit warnings, failed cleanups and
// sweeper failures. Log lines never contain a raw key or lock id. Default:
// slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithHasher sets how log lines name their key. Default:
// idemkit.DefaultHasher().
func WithHasher(h idemkit.Hasher) Option { return func(c *config) { c.hasher = h } }

// WithSweepBatch sets how many documents one batch of [Locker.Sweep]
// collects at most (one query and one transaction), 1 to 500. Default:
// 100.
func WithSweepBatch(n int) Option { return func(c *config) { c.sweepBatch = n } }

// WithWatchLimit sets how many keys at most have a snapshot listener at
// once (see [Locker.Watch]): one per watched key, shared by all its
// watches, each a stream on the client's connection. Watches of further
// keys never fire, and their waiters sleep out their back-off; 0 turns
// watching off. Default: 32.
func WithWatchLimit(n int) Option { return func(c *config) { c.watchLimit = n } }

func newConfig(opts []Option) (config, error) {
	c := config{collection: defaultCollection, sweepBatch: defaultSweepBatch, watchLimit: defaultWatchLimit}
	for _, o := range opts {
		o(&c)
	}
	if err := checkCollection(c.collection); err != nil {
		return config{}, err
	}
	if c.sweepBatch < 1 || c.sweepBatch > maxSweepBatch {
		return config{}, idemkit.NewError(idemkit.CodeInvalidArgument, "new", fmt.Sprintf("the sweep batch must be 1 to %d", maxSweepBatch), nil)
	}
	if c.watchLimit < 0 {
		return config{}, idemkit.NewError(idemkit.CodeInvalidArgument, "new", "the watch limit must not be negative", nil)
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	if c.hasher == nil {
		c.hasher = idemkit.DefaultHasher()
	}
	return c, nil
}

// Locker is a [lock.Locker], [lock.KeyedLocker] and [lock.Watcher] on
// Firestore, with Firestore's own times as the time authority (see the
// package documentation). Its methods are safe for concurrent use.
type Locker struct {
	share  sharing
	client *firestore.Client
	locks  *firestore.CollectionRef
	cfg    config
	watch  watchers

	// beforeSweepTx, when set (only by this package's tests), runs between
	// a sweep's query and its transaction.
	beforeSweepTx func()
}

// New returns a locker on client, with the collection named by opts. It
// validates the options (InvalidArgument) and sends nothing to Firestore.
// Nothing needs creating beforehand: Firestore creates the collection as
// documents are written, and the automatic single-field indexes serve
// every query (see the package documentation for production setup).
func New(client *firestore.Client, opts ...Option) (*Locker, error) {
	if client == nil {
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "new", "a Firestore client is required", nil)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return &Locker{client: client, locks: client.Collection(cfg.collection), cfg: cfg}, nil
}

// Capabilities reports fencing. Firestore's times are the time authority:
// a lease is judged by the read time
// Firestore reports for the snapshot that shows it, with the one liveness
// rule of every backend, live ⇔ now < expiresAt ([lock.Live]). No
// operation reads the process clock.
func (l *Locker) Capabilities() lock.Capabilities {
	return lock.Capabilities{Backend: "firestore", Fencing: true}
}

// ref returns the lock document of a normalised key.
func (l *Locker) ref(key string) *firestore.DocumentRef { return l.locks.Doc(docID(key)) }

// get reads one document: a snapshot that may not exist, with the time
// Firestore read it.
func (l *Locker) get(ctx context.Context, ref *firestore.DocumentRef) (*firestore.DocumentSnapshot, error) {
	snaps, err := l.client.GetAll(ctx, []*firestore.DocumentRef{ref})
	if err != nil {
		return nil, err
	}
	return snaps[0], nil
}

// Acquire implements [lock.Locker]. It reads the key's document first
// (one round trip); the read's time is the "now" that judges it:
//
//   - A live lease answers "locked" at once: a refused acquire writes
//     nothing and consumes no fence.
//   - No document: one write-only commit, a Create (the document must not
//     exist). The lease runs from the read time for ttl; its fence is the
//     document's create time in Unix milliseconds, above every fence the
//     key carried, since a document is deleted only once the server clock
//     has passed its fence. Two round trips in all, without document
//     locks: a contender that loses the Create fails fast (AlreadyExists)
//     and answers "locked".
//   - A tombstone (a released or collected lock whose fence the server
//     clock has not passed): one write-only update on the condition that
//     the tombstone is unchanged since the read, with the fence
//     [provider.NextFence] of the tombstone's at the read time. Two round
//     trips; a contender that loses fails fast (FailedPrecondition).
//   - An expired lease: a read-write transaction (begin, one read, commit:
//     three round trips) reads the document again, judges it by that
//     read's time and only then writes the new lease, with the fence
//     [provider.NextFence] of the old one. Contention that outlasts the
//     client's transaction retries answers "locked", which [lock.Do]
//     retries.
//
// A failed commit may have landed: the client retries a commit whose
// answer was lost, and the retry meets what the first try wrote. So one
// more read settles every failed commit that wrote a lease: the lease is
// returned if the live lease in the document carries this call's lock id.
//
// Acquires of one key that run at once in this process (the waiters of a
// hot key that its release woke together) share their work: each joins
// the next read of the document, sent once the read in flight, if any,
// has come back (so it was sent after every call it answers began), and
// only one of them writes at a time. A call whose read found the key
// free answers "locked" without writing if an acquire in this process
// got the lease by a commit after that read (so the key was held within
// this call), and otherwise writes in turn. A call whose shared read
// failed reads again by itself, so it never reports another call's
// failure.
func (l *Locker) Acquire(ctx context.Context, key string, ttl time.Duration) (lock.Lease, bool, error) {
	const op = "acquire"
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return lock.Lease{}, false, err
	}
	if err := lock.ValidateTTL(ttl); err != nil {
		return lock.Lease{}, false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return lock.Lease{}, false, err
	}
	ref := l.ref(key)
	ks := l.share.enter(ref.ID)
	defer l.share.leave(ref.ID, ks)
	snap, err := l.share.read(ctx, ks, ref, l.get)
	if err != nil {
		return lock.Lease{}, false, mapError(ctx, op, err)
	}
	l.watch.read(snap)
	if seen(snap).live {
		return lock.Lease{}, false, nil
	}
	lease, ok, err := l.share.write(ctx, ks, snap.ReadTime, func() (lock.Lease, bool, error) { return l.take(ctx, key, ttl, snap) })
	return lease, ok, mapError(ctx, op, err)
}

// take takes the lock of a normalised key whose document snap (read by
// the acquire) held no live lease: it creates the document, turns the
// tombstone into a lease, or replaces the expired lease (see
// [Locker.Acquire]).
func (l *Locker) take(ctx context.Context, key string, ttl time.Duration, snap *firestore.DocumentSnapshot) (lock.Lease, bool, error) {
	const op = "acquire"
	ref := snap.Ref
	now := snap.ReadTime
	if !snap.Exists() {
		// The fence is the create time, unknown until the commit; the
		// read time is a lower bound of it, checked as every fence is.
		if err := provider.CheckFence(ctx, l.cfg.logger, l.cfg.hasher, key, provider.NextFence(0, now)); err != nil {
			return lock.Lease{}, false, err
		}
		d := l.newLease(key, now, ttl)
		d.implicit = true
		wr, err := ref.Create(ctx, d.data())
		if err != nil {
			return l.settle(ctx, ref, err, d.id)
		}
		d.fence = fenceAt(wr.UpdateTime)
		l.granted(ref.ID, d, wr.UpdateTime)
		return d.lease(), true, nil
	}
	prev, err := decode(op, snap)
	switch {
	case err != nil:
		return lock.Lease{}, false, err
	case prev.live(now):
		return lock.Lease{}, false, nil
	case !prev.tombstone():
		return l.replace(ctx, ref, key, ttl)
	}
	d := l.newLease(key, now, ttl)
	d.fence = provider.NextFence(prev.fence, now)
	if err := provider.CheckFence(ctx, l.cfg.logger, l.cfg.hasher, key, d.fence); err != nil {
		return lock.Lease{}, false, err
	}
	wr, err := ref.Update(ctx, d.updates(), firestore.LastUpdateTime(snap.UpdateTime))
	if err != nil {
		return l.settle(ctx, ref, err, d.id)
	}
	l.granted(ref.ID, d, wr.UpdateTime)
	return d.lease(), true, nil
}

// newLease is a new lease on a normalised key granted at the server time
// now for ttl, without its fence.
func (l *Locker) newLease(key string, now time.Time, ttl time.Duration) lockDoc {
	return lockDoc{key: key, id: lock.NewID(), acquired: now, expires: clamp(now.Add(ttl))}
}

// replace takes the lock of a normalised key whose document held an
// expired lease when it was read, in a read-write transaction: it reads
// the document again (reads before writes), judges it by that read's time,
// and writes the new lease only if the old one is still expired (or has
// become a tombstone, or is gone). A lease that came alive in between
// answers "locked" and writes nothing.
//
// The client runs the function again when the commit is aborted, and an
// aborted commit can be the retry of one that landed but whose answer was
// lost: a run that finds a live lease written by an earlier run of this
// very call returns that lease. A commit that fails after a run wrote a
// lease is settled by a read (see [Locker.settle]).
func (l *Locker) replace(ctx context.Context, ref *firestore.DocumentRef, key string, ttl time.Duration) (lock.Lease, bool, error) {
	const op = "acquire"
	var (
		d       lockDoc
		ok      bool
		ids     []string // the lock ids of the leases the runs wrote
		created bool     // the last run created the document: its fence is the commit time
		commit  firestore.CommitResponse
	)
	err := l.client.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		d, ok, created = lockDoc{}, false, false // the function may run more than once
		snaps, err := tx.GetAll([]*firestore.DocumentRef{ref})
		if err != nil {
			return err
		}
		snap := snaps[0]
		now := snap.ReadTime
		var prev lockDoc
		if snap.Exists() {
			if prev, err = decode(op, snap); err != nil {
				return err
			}
			if prev.live(now) {
				if slices.Contains(ids, prev.id) {
					d, ok = prev, true // an earlier run's commit landed
				}
				return nil // nothing written: an empty commit ends the transaction
			}
		}
		next := l.newLease(key, now, ttl)
		next.fence = provider.NextFence(prev.fence, now)
		if err := provider.CheckFence(ctx, l.cfg.logger, l.cfg.hasher, key, next.fence); err != nil {
			return err
		}
		if snap.Exists() {
			err = tx.Set(ref, next.data())
		} else {
			next.fence, next.implicit, created = 0, true, true
			err = tx.Create(ref, next.data())
		}
		if err != nil {
			return err
		}
		d, ok = next, true
		ids = append(ids, next.id)
		return nil
	}, firestore.WithCommitResponseTo(&commit))
	if err != nil {
		var le *idemkit.Error
		if len(ids) == 0 || errors.As(err, &le) {
			// No run wrote a lease, or the function itself failed (a
			// malformed document, the fence limit): nothing to settle.
			if isContention(err) && ctx.Err() == nil {
				return lock.Lease{}, false, nil // another acquire won the document
			}
			return lock.Lease{}, false, mapError(ctx, op, err)
		}
		return l.settle(ctx, ref, err, ids...)
	}
	if !ok {
		return lock.Lease{}, false, nil
	}
	if created {
		wrs, err := commit.WriteResults()
		if err != nil || len(wrs) == 0 {
			return l.settle(ctx, ref, errors.New("firestorelock: a commit without its write result"), d.id)
		}
		d.fence = fenceAt(wrs[0].UpdateTime)
	}
	l.granted(ref.ID, d, commit.CommitTime())
	return d.lease(), true, nil
}

// granted records that this Locker's acquire of the document id got the
// lease d, whose write committed at the server time at.
func (l *Locker) granted(id string, d lockDoc, at time.Time) {
	l.watch.learned(id, d.at(at))
	l.share.granted(id, at)
}

// settle decides an acquire whose commit of a lease with one of ids
// failed with commitErr. Whatever the error, the commit may have landed:
// when its answer is lost, the client retries it, and the retry meets what
// the first try wrote (AlreadyExists or FailedPrecondition outside a
// transaction, InvalidArgument "transaction closed" inside one). So one
// read decides, unless ctx has ended: the lease is this call's if the
// document holds a lease live at the read's time with one of ids.
// Otherwise contention answers "locked" and any other failure is reported
// (as a commit's failure: never a configuration error). When the read
// fails too, its error is returned.
func (l *Locker) settle(ctx context.Context, ref *firestore.DocumentRef, commitErr error, ids ...string) (lock.Lease, bool, error) {
	const op = "acquire"
	if ctx.Err() != nil {
		return lock.Lease{}, false, mapError(ctx, op, commitErr)
	}
	snap, err := l.get(ctx, ref)
	if err != nil {
		return lock.Lease{}, false, mapError(ctx, op, err)
	}
	l.watch.read(snap)
	if snap.Exists() {
		d, err := decode(op, snap)
		if err != nil {
			return lock.Lease{}, false, err
		}
		if slices.Contains(ids, d.id) && d.live(snap.ReadTime) {
			l.share.granted(ref.ID, snap.UpdateTime)
			return d.lease(), true, nil
		}
	}
	if isContention(commitErr) {
		return lock.Lease{}, false, nil
	}
	return lock.Lease{}, false, mapCommitError(ctx, op, commitErr)
}

// maxChanges is how many times a release or extend reads the lock
// document again after its conditional write found it changed since the
// read (each such change is another operation succeeding).
const maxChanges = 5

// finder reads the lock document an operation acts on. It returns a
// snapshot (which may not exist) with the time Firestore read it, or nil
// when a query found no document.
type finder func(ctx context.Context) (*firestore.DocumentSnapshot, error)

// byRef reads a document by its name.
func (l *Locker) byRef(ref *firestore.DocumentRef) finder {
	return func(ctx context.Context) (*firestore.DocumentSnapshot, error) { return l.get(ctx, ref) }
}

// byID finds the lock document holding a lock id, through the automatic
// single-field index on lockId.
func (l *Locker) byID(op, id string) finder {
	return func(ctx context.Context) (*firestore.DocumentSnapshot, error) {
		snaps, err := l.locks.Where(fieldLockID, "==", id).Limit(2).Documents(ctx).GetAll()
		switch {
		case err != nil:
			return nil, err
		case len(snaps) == 0:
			return nil, nil
		case len(snaps) > 1:
			return nil, idemkit.NewError(idemkit.CodeInternal, op, "two lock documents carry the same lock id (written by something other than this package?)", nil)
		}
		return snaps[0], nil
	}
}

// found reads what find finds: the decoded document (zero when there is
// none) and the snapshot (nil when a query found nothing).
func found(ctx context.Context, op string, find finder) (*firestore.DocumentSnapshot, lockDoc, error) {
	snap, err := find(ctx)
	if err != nil {
		return nil, lockDoc{}, mapError(ctx, op, err)
	}
	if snap == nil || !snap.Exists() {
		return snap, lockDoc{}, nil
	}
	d, err := decode(op, snap)
	if err != nil {
		return nil, lockDoc{}, err
	}
	return snap, d, nil
}

// Release implements [lock.Locker]: a query by lock id, then one write on
// the condition that the document is unchanged since the read that found
// it holding id and live at the read's time (two round trips; the
// condition makes the ownership check and the write one atomic step). The
// write deletes the document once the server clock (the read's time) has
// passed the lease's fence, and otherwise reduces it to a tombstone that
// keeps the fence until then. A document changed in between is read again.
//
// A failed write may have landed: the client retries a write whose answer
// was lost, and the retry fails its own condition. So the document is read
// again, and when it no longer holds the lease, the release is settled by
// this rule: only a release removes a live lease (a takeover, a cleanup or
// a sweep needs it expired), so the release took effect (OK) if that read
// happened before the lease's expiry, and otherwise the answer is expired
// (the lease ran out while the write was in flight, and something else may
// have removed it). A failure other than a changed document is returned
// unless that read settles the release.
//
// A release that took effect wakes the key's watches in this process
// as soon as it returns, before the listener reports it (see
// [Locker.Watch]).
func (l *Locker) Release(ctx context.Context, id string) (lock.Outcome, error) {
	if err := lock.ValidateID(id); err != nil {
		return lock.Outcome{}, err
	}
	return l.release(ctx, id, l.byID("release", id))
}

// ReleaseKey implements [lock.KeyedLocker]: Release through the key's
// document, without the query (a read and a conditional write; two round
// trips). A key whose lock does not carry id gives not found.
func (l *Locker) ReleaseKey(ctx context.Context, key, id string) (lock.Outcome, error) {
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return lock.Outcome{}, err
	}
	if err := lock.ValidateID(id); err != nil {
		return lock.Outcome{}, err
	}
	return l.release(ctx, id, l.byRef(l.ref(key)))
}

func (l *Locker) release(ctx context.Context, id string, find finder) (lock.Outcome, error) {
	const op = "release"
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return lock.Outcome{}, err
	}
	var (
		tried   bool      // a write ending the lease failed: it may have landed
		expires time.Time // the lease's expiry when it was last read
		failure error     // that write's error, unless it only found the document changed
	)
	for try := 1; ; try++ {
		snap, d, err := found(ctx, op, find)
		switch {
		case err != nil && failure != nil:
			return lock.Outcome{}, failure // the read does not settle the write
		case err != nil:
			return lock.Outcome{}, err
		case d.id == id && d.live(snap.ReadTime):
			if failure != nil {
				return lock.Outcome{}, failure // still held: the write did not land
			}
		case d.id == id:
			return lock.Outcome{Reason: lock.ReasonExpired}, nil
		case tried && snap.ReadTime.Before(expires):
			return lock.Outcome{OK: true}, nil // only this call can have ended the live lease
		case tried:
			return lock.Outcome{Reason: lock.ReasonExpired}, nil
		default:
			return lock.Outcome{Reason: lock.ReasonNotFound}, nil
		}
		find, expires = l.byRef(snap.Ref), d.expires
		cond := firestore.LastUpdateTime(snap.UpdateTime)
		var wr *firestore.WriteResult
		if snap.ReadTime.Before(provider.KeepUntil(d.fence, time.Time{})) {
			wr, err = snap.Ref.Update(ctx, tombstoneUpdates(d.fence), cond)
		} else {
			wr, err = snap.Ref.Delete(ctx, cond)
		}
		if err == nil {
			// A delete's result carries no time: the read's time stands
			// for it (the lease was there then, and gone by the commit).
			at := snap.ReadTime
			if wr != nil && wr.UpdateTime.After(at) {
				at = wr.UpdateTime
			}
			l.watch.learned(snap.Ref.ID, leaseAt{at: at})
			return lock.Outcome{OK: true}, nil
		}
		tried = true
		if failure = retryChanged(ctx, op, try, err); failure != nil && ctx.Err() != nil {
			return lock.Outcome{}, failure
		}
	}
}

// retryChanged decides what follows a failed conditional write: nil to
// read the document again (it changed since it was read, and tries are
// left), else the error to return. The callers read the document once
// more before they return such an error, unless ctx has ended: the write
// may have landed with its answer lost, so the error is mapped as one of a
// commit that did not land ([mapCommitError]).
func retryChanged(ctx context.Context, op string, try int, err error) error {
	if !changed(err) || ctx.Err() != nil {
		return mapCommitError(ctx, op, err)
	}
	if try == maxChanges {
		return idemkit.NewError(idemkit.CodeServiceUnavailable, op, "the lock document kept changing between read and write", redact(err))
	}
	return nil
}

// Extend implements [lock.Locker]: a query by lock id, then an update of
// expiresAt (and expireAt) to the read's time + ttl, on the condition
// that the document is unchanged since the read that found it holding id
// and live at the read's time (two round trips; the condition makes the
// ownership check and the write one atomic step). acquiredAt and the fence
// stay.
//
// Should the lease run out while the update is in flight, the update
// still lands and Extend reports OK: the condition proves that nothing
// replaced, released or swept the lease between the read and the write,
// so the lease never changed hands, and the extended lease is the one in
// storage (answering "expired" would strand a lease that stays live until
// its new expiry).
//
// A failed update may have landed: the client retries an update whose
// answer was lost, and the retry fails its own condition. So the document
// is read again, and when it holds the lease with the expiry this call
// wrote, the answer is OK. A failure other than a changed document is
// returned unless that read shows the update landed.
func (l *Locker) Extend(ctx context.Context, id string, ttl time.Duration) (lock.Outcome, error) {
	if err := lock.ValidateID(id); err != nil {
		return lock.Outcome{}, err
	}
	if err := lock.ValidateTTL(ttl); err != nil {
		return lock.Outcome{}, err
	}
	return l.extend(ctx, id, ttl, l.byID("extend", id))
}

// ExtendKey implements [lock.KeyedLocker]: Extend through the key's
// document, without the query (two round trips). A key whose lock does not
// carry id gives not found.
func (l *Locker) ExtendKey(ctx context.Context, key, id string, ttl time.Duration) (lock.Outcome, error) {
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return lock.Outcome{}, err
	}
	if err := lock.ValidateID(id); err != nil {
		return lock.Outcome{}, err
	}
	if err := lock.ValidateTTL(ttl); err != nil {
		return lock.Outcome{}, err
	}
	return l.extend(ctx, id, ttl, l.byRef(l.ref(key)))
}

func (l *Locker) extend(ctx context.Context, id string, ttl time.Duration, find finder) (lock.Outcome, error) {
	const op = "extend"
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return lock.Outcome{}, err
	}
	var (
		tried   bool      // an update failed: it may have landed
		expires time.Time // the expiry this call writes
		failure error     // that update's error, unless it only found the document changed
	)
	for try := 1; ; try++ {
		snap, d, err := found(ctx, op, find)
		switch {
		case err != nil && failure != nil:
			return lock.Outcome{}, failure
		case err != nil:
			return lock.Outcome{}, err
		case tried && d.id == id && d.expires.Equal(expires):
			return lock.Outcome{OK: true, ExpiresAt: expires}, nil // this call's update landed
		case d.id == id && d.live(snap.ReadTime):
			if failure != nil {
				return lock.Outcome{}, failure
			}
		case d.id == id:
			return lock.Outcome{Reason: lock.ReasonExpired}, nil
		default:
			return lock.Outcome{Reason: lock.ReasonNotFound}, nil
		}
		if expires.IsZero() {
			// The new expiry counts from the first read that found the
			// lease live: the same on every try, so a landed update can be
			// recognised.
			expires = clamp(snap.ReadTime.Add(ttl))
		}
		find, d.expires = l.byRef(snap.Ref), expires
		wr, err := snap.Ref.Update(ctx, []firestore.Update{
			{Path: fieldExpiresAt, Value: expires},
			{Path: fieldExpireAt, Value: d.expireAt()},
		}, firestore.LastUpdateTime(snap.UpdateTime))
		if err == nil {
			l.watch.learned(snap.Ref.ID, d.at(wr.UpdateTime))
			return lock.Outcome{OK: true, ExpiresAt: expires}, nil
		}
		tried = true
		if failure = retryChanged(ctx, op, try, err); failure != nil && ctx.Err() != nil {
			return lock.Outcome{}, failure
		}
	}
}

// IsLocked implements [lock.Locker]: one read. With
// [WithCleanupInIsLocked], a document whose lease expired more than
// [lock.CleanupGrace] before the read is also collected, on the condition
// that it is unchanged since the read (a second round trip): deleted, or
// reduced to a tombstone while the read's time has not passed its fence.
// A cleanup that fails changes neither the answer nor the error.
func (l *Locker) IsLocked(ctx context.Context, key string) (bool, error) {
	const op = "is-locked"
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return false, err
	}
	snap, d, err := found(ctx, op, l.byRef(l.ref(key)))
	switch {
	case err != nil:
		return false, err
	case !snap.Exists():
		return false, nil
	case d.live(snap.ReadTime):
		return true, nil
	}
	if !l.cfg.cleanup {
		return false, nil
	}
	cond := firestore.LastUpdateTime(snap.UpdateTime)
	switch verdict(d, snap.ReadTime) {
	case remove:
		_, err = snap.Ref.Delete(ctx, cond)
	case bury:
		_, err = snap.Ref.Update(ctx, tombstoneUpdates(d.fence), cond)
	}
	if err != nil && !changed(err) {
		l.cfg.logger.DebugContext(ctx, "firestorelock: cleanup of an expired lock failed",
			slog.String("key_hash", l.cfg.hasher.Hash(key)), slog.String("code", idemkit.CodeOf(mapError(ctx, op, err)).String()))
	}
	return false, nil
}

// action is what collecting a document may do.
type action int

const (
	keep   action = iota // a live lease, one expired for no longer than the grace, or a tombstone the clock has not passed
	remove               // delete it: no live lease, and the clock has passed its fence
	bury                 // reduce an expired lease to its tombstone: the clock has not passed its fence
)

// verdict says what collecting d may do at the server time now.
func verdict(d lockDoc, now time.Time) action {
	var expires time.Time
	if !d.tombstone() {
		if now.Sub(d.expires) <= lock.CleanupGrace {
			return keep
		}
		expires = d.expires
	}
	switch {
	case !now.Before(provider.KeepUntil(d.fence, expires)):
		return remove
	case d.tombstone():
		return keep
	}
	return bury
}

// LookupKey implements [lock.Locker]: one read of the key's document.
func (l *Locker) LookupKey(ctx context.Context, key string) (lock.Info, bool, error) {
	const op = "lookup"
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return lock.Info{}, false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return lock.Info{}, false, err
	}
	return lookup(ctx, op, l.byRef(l.ref(key)))
}

// LookupID implements [lock.Locker]: one query by lock id.
func (l *Locker) LookupID(ctx context.Context, id string) (lock.Info, bool, error) {
	const op = "lookup"
	if err := lock.ValidateID(id); err != nil {
		return lock.Info{}, false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return lock.Info{}, false, err
	}
	return lookup(ctx, op, l.byID(op, id))
}

func lookup(ctx context.Context, op string, find finder) (lock.Info, bool, error) {
	snap, d, err := found(ctx, op, find)
	if err != nil || snap == nil || !d.live(snap.ReadTime) {
		return lock.Info{}, false, err
	}
	return d.info(), true, nil
}
