package firestorelock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
)

var (
	_ lock.Locker      = (*Locker)(nil)
	_ lock.KeyedLocker = (*Locker)(nil)
)

// Option configures [New].
type Option func(*config)

type config struct {
	collection, fenceCollection string
	cleanup                     bool
	logger                      *slog.Logger
	hasher                      lock.Hasher
	clock                       func() time.Time
	skewTolerance               time.Duration
	sweepBatch                  int
}

// WithCollection sets the collection of the lock documents: 1 to 100
// bytes of ASCII letters, digits, "_", "-" and "." (see
// [CheckCollection]). Default: "idemkit_locks".
func WithCollection(name string) Option { return func(c *config) { c.collection = name } }

// WithFenceCollection sets the collection of the fence counters, named as
// for [WithCollection]. It must differ from the lock collection: New
// refuses the same name. Default: "idemkit_lock_fences".
func WithFenceCollection(name string) Option { return func(c *config) { c.fenceCollection = name } }

// WithCleanupInIsLocked makes IsLocked also delete the key's lock document
// when it expired more than [lock.CleanupGrace] ago (never the fence
// counter). Default: off (IsLocked is a pure read; a TTL policy or Sweep
// collects expired documents).
func WithCleanupInIsLocked(on bool) Option { return func(c *config) { c.cleanup = on } }

// WithLogger sets the logger for fence-limit and clock-skew warnings and
// sweeper failures. Log lines never contain a raw key or lock id. Default:
// slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithHasher sets how warnings name their key. Default:
// lock.DefaultHasher().
func WithHasher(h lock.Hasher) Option { return func(c *config) { c.hasher = h } }

// WithClock sets the clock that judges expiry and stamps leases: the
// client's clock is Firestore's time authority (see the package
// documentation). Tests inject a fake one. Default: time.Now.
func WithClock(now func() time.Time) Option { return func(c *config) { c.clock = now } }

// WithSkewTolerance sets how far the client clock may differ from
// Firestore's, as measured at each write, before a warning is logged (at
// most once a minute); 0 turns the warning off. Negative values are
// refused. Default: [DefaultSkewTolerance] (500 ms).
func WithSkewTolerance(d time.Duration) Option { return func(c *config) { c.skewTolerance = d } }

// WithSweepBatch sets how many expired documents one batch of
// [Locker.Sweep] collects and deletes at most (one query and one
// transaction), 1 to [MaxSweepBatch]. Default: [DefaultSweepBatch] (100).
func WithSweepBatch(n int) Option { return func(c *config) { c.sweepBatch = n } }

// Sweep batch limits.
const (
	DefaultSweepBatch = 100 // the default of WithSweepBatch
	MaxSweepBatch     = 500 // the largest WithSweepBatch: Firestore's historical limit of writes per commit
)

func newConfig(opts []Option) (config, error) {
	c := config{
		collection: DefaultCollection, fenceCollection: DefaultFenceCollection,
		clock: time.Now, skewTolerance: DefaultSkewTolerance, sweepBatch: DefaultSweepBatch,
	}
	for _, o := range opts {
		o(&c)
	}
	if err := CheckCollection("lock collection", c.collection); err != nil {
		return config{}, err
	}
	if err := CheckCollection("fence collection", c.fenceCollection); err != nil {
		return config{}, err
	}
	bad := func(detail string) (config, error) {
		return config{}, idemkit.NewError(idemkit.CodeInvalidArgument, "new", detail, nil)
	}
	switch {
	case c.collection == c.fenceCollection:
		return bad("the lock collection and the fence-counter collection must differ")
	case c.clock == nil:
		return bad("the clock must not be nil")
	case c.skewTolerance < 0:
		return bad("the skew tolerance must not be negative")
	case c.sweepBatch < 1 || c.sweepBatch > MaxSweepBatch:
		return bad(fmt.Sprintf("the sweep batch must be 1 to %d", MaxSweepBatch))
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	if c.hasher == nil {
		c.hasher = lock.DefaultHasher()
	}
	return c, nil
}

// Locker is a [lock.Locker] and [lock.KeyedLocker] on Firestore, with the
// client's clock as the time authority (see the package documentation).
// Its methods are safe for concurrent use.
type Locker struct {
	client        *firestore.Client
	locks, fences *firestore.CollectionRef
	cfg           config
	skew          *SkewMonitor

	// beforeSweepTx, when set (only by this package's tests), runs between
	// a sweep's query and its transaction.
	beforeSweepTx func()
}

// New returns a locker on client, with the collections named by opts. It
// validates the options (InvalidArgument) and sends nothing to Firestore.
// Nothing needs creating beforehand: Firestore creates collections as
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
	return &Locker{
		client: client,
		locks:  client.Collection(cfg.collection),
		fences: client.Collection(cfg.fenceCollection),
		cfg:    cfg,
		skew:   NewSkewMonitor(cfg.logger, cfg.hasher, cfg.skewTolerance),
	}, nil
}

// Capabilities reports fencing, with the client's clock as the time
// authority ([lock.TimeClient]): every operation judges a lease by the
// clock of the process calling it (the one [WithClock] sets), with the one
// liveness rule of every backend, live ⇔ now < expiresAt ([lock.Live]).
// Firestore's own clock judges nothing; it only stamps update times, which
// the skew monitor compares with the client's (see [SkewMonitor]).
func (l *Locker) Capabilities() lock.Capabilities {
	return lock.Capabilities{Backend: "firestore", Fencing: true, TimeAuthority: lock.TimeClient}
}

// Client returns the Firestore client the locker was built on.
func (l *Locker) Client() *firestore.Client { return l.client }

// Collections returns the names of the lock and fence-counter collections.
func (l *Locker) Collections() (locks, fences string) {
	return l.cfg.collection, l.cfg.fenceCollection
}

// Skew returns the clock skew measured at the locker's last write (see
// [SkewMonitor.Last]).
func (l *Locker) Skew() time.Duration { return l.skew.Last() }

// now reads the clock at Firestore's resolution.
func (l *Locker) now() time.Time { return Micro(l.cfg.clock()) }

// refs returns the lock document and fence counter of a normalised key.
func (l *Locker) refs(key string) (*firestore.DocumentRef, *firestore.DocumentRef) {
	id := DocID(key)
	return l.locks.Doc(id), l.fences.Doc(id)
}

// get reads one document; a missing one is a snapshot that does not exist,
// not an error.
func (l *Locker) get(ctx context.Context, ref *firestore.DocumentRef) (*firestore.DocumentSnapshot, error) {
	snaps, err := l.client.GetAll(ctx, []*firestore.DocumentRef{ref})
	if err != nil {
		return nil, err
	}
	return snaps[0], nil
}

// Acquire implements [lock.Locker]. A free key costs two round trips,
// neither of which takes a document lock:
//
//  1. One read of the lock document and the key's fence counter (outside
//     any transaction). A live lease (by the client clock: now <
//     expiresAt) answers "locked" at once: a refused acquire writes
//     nothing and consumes no fence.
//  2. When there is no lock document, one atomic write-only commit: a
//     Create of the lock document (it must not exist) and the fence
//     counter bumped by a server-side increment on the condition that its
//     update time is still the one read (or created, when there was none).
//     The fence is the counter read plus one (past [lock.FenceMax] the
//     acquire fails with Internal before writing anything), and the
//     condition makes the increment land on exactly that value.
//
// A contender that loses the commit fails fast, without waiting for
// document locks: AlreadyExists (another lease was created) or
// FailedPrecondition (the counter moved: another lease was granted in
// between), and the answer is "locked". One more read settles every failed
// commit first (see [Locker.settle]): a commit whose answer was lost and
// that the client retried meets its own documents, and the lease is
// returned if the lock document carries this call's lock id.
//
// When the lock document holds an expired lease, the lease is replaced in
// a read-write transaction (begin, one read of both documents, commit:
// three round trips), which reads both documents again, judges liveness
// after its reads and writes only then. Contention on the documents that
// outlasts the client's transaction retries answers "locked", like any
// other contention; [lock.Do] retries it. A failed commit of a transaction
// that wrote a lease is settled by a read, as above.
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
	ref, fref := l.refs(key)
	snaps, err := l.client.GetAll(ctx, []*firestore.DocumentRef{ref, fref})
	if err != nil {
		return lock.Lease{}, false, MapError(ctx, op, err)
	}
	held, counter := snaps[0], snaps[1]
	if held.Exists() {
		prev, err := decodeLock(op, held)
		if err != nil {
			return lock.Lease{}, false, err
		}
		if lock.Live(prev.expires, l.now()) {
			return lock.Lease{}, false, nil
		}
		return l.replace(ctx, key, ttl)
	}
	f, err := decodeCounter(op, counter)
	if err != nil {
		return lock.Lease{}, false, err
	}
	now := l.now()
	next := f + 1
	if err := lock.CheckFence(ctx, l.cfg.logger, l.cfg.hasher, key, next); err != nil {
		return lock.Lease{}, false, err
	}
	d := lockDoc{key: key, id: lock.NewID(), fence: next, acquired: now, expires: Micro(now.Add(ttl))}

	// WriteBatch is the client's one atomic multi-document commit outside a
	// transaction, in one round trip. The client marks it deprecated in
	// favour of transactions, whose BeginTransaction costs another round
	// trip and whose reads take the document locks this path exists to
	// avoid; the API stays supported in the v1 module.
	b := l.client.Batch()
	b.Create(ref, d.data())
	if counter.Exists() {
		b.Update(fref, []firestore.Update{{Path: FieldFence, Value: firestore.Increment(int64(next - f))}},
			firestore.LastUpdateTime(counter.UpdateTime))
	} else {
		b.Create(fref, counterData(key, next))
	}
	wrs, err := b.Commit(ctx)
	received := l.cfg.clock()
	if err != nil {
		return l.settle(ctx, ref, err, d.id)
	}
	if len(wrs) > 0 {
		l.skew.Observe(ctx, op, key, now, received, wrs[0].UpdateTime)
	}
	return d.lease(), true, nil
}

// replace takes the lock of a normalised key whose document held an
// expired lease when it was read, in a read-write transaction: it reads
// the lock document and the counter again (reads before writes), judges
// the lease by the clock read after those reads, and writes the new lease
// and the counter only if the lease is still expired or gone. A lease that
// came alive in between answers "locked" and writes nothing.
//
// The client runs the function again when the commit is aborted, and an
// aborted commit can be the retry of one that landed but whose answer was
// lost: a run that finds a live lease written by an earlier run of this
// very call returns that lease. A commit that fails after a run wrote a
// lease is settled by a read (see [Locker.settle]).
func (l *Locker) replace(ctx context.Context, key string, ttl time.Duration) (lock.Lease, bool, error) {
	const op = "acquire"
	ref, fref := l.refs(key)
	var (
		lease  lock.Lease
		ok     bool
		ids    []string // the lock ids of the leases the runs wrote
		sent   time.Time
		commit firestore.CommitResponse
	)
	err := l.client.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		lease, ok = lock.Lease{}, false // the function may run more than once
		snaps, err := tx.GetAll([]*firestore.DocumentRef{ref, fref})
		if err != nil {
			return err
		}
		held, counter := snaps[0], snaps[1]
		now := l.now()
		var prev lockDoc
		if held.Exists() {
			if prev, err = decodeLock(op, held); err != nil {
				return err
			}
			if lock.Live(prev.expires, now) {
				if slices.Contains(ids, prev.id) {
					lease, ok = prev.lease(), true // an earlier run's commit landed
				}
				return nil // nothing written, an empty commit ends the transaction
			}
		}
		f, err := decodeCounter(op, counter)
		if err != nil {
			return err
		}
		next := max(f, prev.fence) + 1
		if err := lock.CheckFence(ctx, l.cfg.logger, l.cfg.hasher, key, next); err != nil {
			return err
		}
		d := lockDoc{key: key, id: lock.NewID(), fence: next, acquired: now, expires: Micro(now.Add(ttl))}
		if held.Exists() {
			err = tx.Set(ref, d.data())
		} else {
			err = tx.Create(ref, d.data())
		}
		if err == nil {
			err = tx.Set(fref, counterData(key, next))
		}
		if err != nil {
			return err
		}
		lease, ok, sent = d.lease(), true, now
		ids = append(ids, d.id)
		return nil
	}, firestore.WithCommitResponseTo(&commit))
	received := l.cfg.clock()
	if err != nil {
		var le *idemkit.Error
		if len(ids) == 0 || errors.As(err, &le) {
			// No run wrote a lease, or the function itself failed (a
			// malformed document, the fence limit): nothing to settle.
			if IsContention(err) && ctx.Err() == nil {
				return lock.Lease{}, false, nil // another acquire won the documents
			}
			return lock.Lease{}, false, MapError(ctx, op, err)
		}
		return l.settle(ctx, ref, err, ids...)
	}
	if !ok {
		return lock.Lease{}, false, nil
	}
	if wrs, err := commit.WriteResults(); err == nil && len(wrs) > 0 {
		l.skew.Observe(ctx, op, key, sent, received, wrs[0].UpdateTime)
	}
	return lease, true, nil
}

// settle decides an acquire whose commit of a lease with one of ids
// failed with commitErr. Whatever the error, the commit may have landed:
// when its answer is lost, the client retries it, and the retry meets what
// the first try wrote (AlreadyExists or FailedPrecondition outside a
// transaction, InvalidArgument "transaction closed" inside one). So one
// read decides, unless ctx has ended: the lease is this call's if the live
// lock document carries one of ids. Otherwise contention answers "locked"
// and any other failure is reported ([MapCommitError]: never a
// configuration error). When the read fails too, its error is returned.
func (l *Locker) settle(ctx context.Context, ref *firestore.DocumentRef, commitErr error, ids ...string) (lock.Lease, bool, error) {
	const op = "acquire"
	if ctx.Err() != nil {
		return lock.Lease{}, false, MapError(ctx, op, commitErr)
	}
	snap, err := l.get(ctx, ref)
	if err != nil {
		return lock.Lease{}, false, MapError(ctx, op, err)
	}
	if snap.Exists() {
		d, err := decodeLock(op, snap)
		if err != nil {
			return lock.Lease{}, false, err
		}
		if slices.Contains(ids, d.id) && lock.Live(d.expires, l.now()) {
			return d.lease(), true, nil
		}
	}
	if IsContention(commitErr) {
		return lock.Lease{}, false, nil
	}
	return lock.Lease{}, false, MapCommitError(ctx, op, commitErr)
}

// maxChanges is how many times a release, extend or cleanup reads the lock
// document again after its conditional write found it changed since the
// read (each such change is another operation succeeding).
const maxChanges = 5

// finder reads the lock document an operation acts on: nil when there is
// none.
type finder func(ctx context.Context) (*firestore.DocumentSnapshot, error)

// byKey finds the lock document of a normalised key.
func (l *Locker) byKey(key string) finder {
	ref, _ := l.refs(key)
	return func(ctx context.Context) (*firestore.DocumentSnapshot, error) {
		snap, err := l.get(ctx, ref)
		if err != nil || !snap.Exists() {
			return nil, err
		}
		return snap, nil
	}
}

// byID finds the lock document holding a lock id, through the automatic
// single-field index on [FieldLockID].
func (l *Locker) byID(op, id string) finder {
	return func(ctx context.Context) (*firestore.DocumentSnapshot, error) {
		snaps, err := l.locks.Where(FieldLockID, "==", id).Limit(2).Documents(ctx).GetAll()
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

// Release implements [lock.Locker]: a query by lock id, then a delete on
// the condition that the document is unchanged since the read that found
// it live and carrying id (two round trips; the condition makes the
// ownership check and the delete one atomic step). A document changed in
// between is read again. The fence counter is never touched.
//
// A failed delete may have landed: the client retries a delete whose
// answer was lost, and the retry fails its own condition on the document
// the first try removed. So the document is read again, and when it no
// longer holds the lease (it is gone, or holds another lease), the delete
// is settled by this rule: only this call's delete, a sweep or cleanup (of
// leases expired more than [lock.CleanupGrace] ago) or an acquire that
// replaces an expired lease removes a lease, so the release took effect
// (OK) if the lease was still live by the client clock when the failed
// delete's answer came back, and otherwise the answer is expired (the
// lease ran out while the delete was in flight, and something else may
// have removed it). A failure other than a changed document is returned
// unless that read settles the release.
func (l *Locker) Release(ctx context.Context, id string) (lock.Outcome, error) {
	if err := lock.ValidateID(id); err != nil {
		return lock.Outcome{}, err
	}
	return l.release(ctx, id, l.byID("release", id))
}

// ReleaseKey implements [lock.KeyedLocker]: Release through the key's
// document, without the query (a read and a conditional delete; two round
// trips). A key whose lock does not carry id gives not found.
func (l *Locker) ReleaseKey(ctx context.Context, key, id string) (lock.Outcome, error) {
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return lock.Outcome{}, err
	}
	if err := lock.ValidateID(id); err != nil {
		return lock.Outcome{}, err
	}
	return l.release(ctx, id, l.byKey(key))
}

func (l *Locker) release(ctx context.Context, id string, find finder) (lock.Outcome, error) {
	const op = "release"
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return lock.Outcome{}, err
	}
	var (
		tried   bool  // a delete of the live lease failed: it may have landed
		live    bool  // the lease was live when the answer of that delete came
		failure error // that delete's error, unless it only found the document changed
	)
	for try := 1; ; try++ {
		snap, d, out, err := l.owned(ctx, op, id, find)
		switch {
		case failure != nil && (err != nil || snap != nil):
			return lock.Outcome{}, failure // the read does not settle the delete
		case snap == nil && err == nil && tried && out.Reason == lock.ReasonNotFound:
			if live {
				return lock.Outcome{OK: true}, nil // this call's delete removed it
			}
			return lock.Outcome{Reason: lock.ReasonExpired}, nil
		case snap == nil:
			return out, err
		}
		_, err = snap.Ref.Delete(ctx, firestore.LastUpdateTime(snap.UpdateTime))
		if err == nil {
			return lock.Outcome{OK: true}, nil
		}
		tried, live = true, lock.Live(d.expires, l.now())
		if failure = l.retryChanged(ctx, op, try, err); failure != nil && ctx.Err() != nil {
			return lock.Outcome{}, failure
		}
	}
}

// owned finds the live lock document holding id. It returns the snapshot
// and the document when there is one; otherwise a nil snapshot, with the
// outcome (not found, expired) or the error to answer.
func (l *Locker) owned(ctx context.Context, op, id string, find finder) (*firestore.DocumentSnapshot, lockDoc, lock.Outcome, error) {
	snap, err := find(ctx)
	if err != nil {
		return nil, lockDoc{}, lock.Outcome{}, MapError(ctx, op, err)
	}
	if snap == nil {
		return nil, lockDoc{}, lock.Outcome{Reason: lock.ReasonNotFound}, nil
	}
	d, err := decodeLock(op, snap)
	if err != nil {
		return nil, lockDoc{}, lock.Outcome{}, err
	}
	if d.id != id {
		return nil, lockDoc{}, lock.Outcome{Reason: lock.ReasonNotFound}, nil
	}
	if !lock.Live(d.expires, l.now()) {
		return nil, lockDoc{}, lock.Outcome{Reason: lock.ReasonExpired}, nil
	}
	return snap, d, lock.Outcome{}, nil
}

// retryChanged decides what follows a failed conditional write: nil to
// read the document again (it changed since it was read, and tries are
// left), else the error to return. The callers read the document once
// more before they return such an error, unless ctx has ended: the write
// may have landed with its answer lost, so the error is mapped as one of a
// commit that did not land ([MapCommitError]).
func (l *Locker) retryChanged(ctx context.Context, op string, try int, err error) error {
	if !changed(err) || ctx.Err() != nil {
		return MapCommitError(ctx, op, err)
	}
	if try == maxChanges {
		return idemkit.NewError(idemkit.CodeServiceUnavailable, op, "the lock document kept changing between read and write", redact(err))
	}
	return nil
}

// Extend implements [lock.Locker]: a query by lock id, then an update of
// expiresAt (and expireAt) to now + ttl, now being the client clock when
// the call began, on the condition that the document is unchanged since the
// read that found it live and carrying id (two round trips; the condition
// makes the ownership check and the write one atomic step). acquiredAt and
// the fence stay.
//
// The lease is judged live at the read. Should it run out (by the client
// clock) while the update is in flight, the update still lands and Extend
// reports OK: the condition proves that nothing replaced, released or
// swept the lease between the read and the write, so the lease never
// changed hands, and the extended lease is the one in storage (answering
// "expired" would strand a lease that stays live until its new expiry).
// Anyone who looked in that window saw the key free; a contender's acquire
// in it serialises with the update (its commit or this update fails).
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
	return l.extend(ctx, id, ttl, l.byKey(key))
}

func (l *Locker) extend(ctx context.Context, id string, ttl time.Duration, find finder) (lock.Outcome, error) {
	const op = "extend"
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return lock.Outcome{}, err
	}
	// The new expiry counts from the call, not from the end of the read
	// that finds the lock: a slow read never lengthens a lease beyond what
	// its holder asked for at the time it asked.
	expires := Micro(l.now().Add(ttl))
	var (
		tried   bool  // an update failed: it may have landed
		failure error // its error, unless it only found the document changed
	)
	for try := 1; ; try++ {
		snap, d, out, err := l.owned(ctx, op, id, find)
		switch {
		case tried && snap != nil && d.expires.Equal(expires):
			return lock.Outcome{OK: true, ExpiresAt: expires}, nil // this call's update landed
		case failure != nil && (err != nil || snap != nil):
			return lock.Outcome{}, failure
		case snap == nil:
			return out, err
		}
		now := l.now()
		wr, err := snap.Ref.Update(ctx, []firestore.Update{
			{Path: FieldExpiresAt, Value: expires},
			{Path: FieldExpireAt, Value: expires.Add(lock.CleanupGrace)},
		}, firestore.LastUpdateTime(snap.UpdateTime))
		if err == nil {
			l.skew.Observe(ctx, op, d.key, now, l.cfg.clock(), wr.UpdateTime)
			return lock.Outcome{OK: true, ExpiresAt: expires}, nil
		}
		tried = true
		if failure = l.retryChanged(ctx, op, try, err); failure != nil && ctx.Err() != nil {
			return lock.Outcome{}, failure
		}
	}
}

// IsLocked implements [lock.Locker]: one read. With
// [WithCleanupInIsLocked], a document expired more than
// [lock.CleanupGrace] ago is also deleted, on the condition that it is
// unchanged since the read (a second round trip); a cleanup that fails
// changes neither the answer nor the error.
func (l *Locker) IsLocked(ctx context.Context, key string) (bool, error) {
	const op = "is-locked"
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return false, err
	}
	snap, err := l.byKey(key)(ctx)
	if err != nil {
		return false, MapError(ctx, op, err)
	}
	if snap == nil {
		return false, nil
	}
	d, err := decodeLock(op, snap)
	if err != nil {
		return false, err
	}
	now := l.now()
	if lock.Live(d.expires, now) {
		return true, nil
	}
	if l.cfg.cleanup && now.Sub(d.expires) > lock.CleanupGrace {
		if _, err := snap.Ref.Delete(ctx, firestore.LastUpdateTime(snap.UpdateTime)); err != nil && !changed(err) {
			l.cfg.logger.DebugContext(ctx, "firestorelock: cleanup of an expired lock failed",
				slog.String("key_hash", l.cfg.hasher.Hash(key)), slog.String("code", idemkit.CodeOf(MapError(ctx, op, err)).String()))
		}
	}
	return false, nil
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
	return l.lookup(ctx, op, l.byKey(key))
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
	return l.lookup(ctx, op, l.byID(op, id))
}

func (l *Locker) lookup(ctx context.Context, op string, find finder) (lock.Info, bool, error) {
	snap, err := find(ctx)
	if err != nil {
		return lock.Info{}, false, MapError(ctx, op, err)
	}
	if snap == nil {
		return lock.Info{}, false, nil
	}
	d, err := decodeLock(op, snap)
	if err != nil {
		return lock.Info{}, false, err
	}
	if !lock.Live(d.expires, l.now()) {
		return lock.Info{}, false, nil
	}
	return d.info(), true, nil
}
