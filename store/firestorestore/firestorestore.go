package firestorestore

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/engine"
)

var (
	_ store.Store   = (*Store)(nil)
	_ store.Records = (*Store)(nil)
	_ store.Stepper = (*Store)(nil)
)

const (
	defaultCollection   = "idemkit_records"
	defaultSweepBatch   = 100
	maxSweepBatch       = 500
	defaultMaxClockStep = time.Minute
)

// maxAttempts is how many conditional writes one operation tries while the
// document keeps changing under it (each loss means another write landed)
// before it gives up (ServiceUnavailable).
const maxAttempts = 16

// contendedBackoff spaces a lost write's next attempt, so that contenders
// read after the winner's write rather than in lockstep.
var contendedBackoff = idemkit.Backoff{Base: 2 * time.Millisecond, Max: 32 * time.Millisecond}

// pause waits before attempt n+1 of a write that lost attempt n.
func pause(ctx context.Context, op string, n int) error {
	t := time.NewTimer(contendedBackoff.Delay(n))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return mapError(ctx, op, ctx.Err())
	}
}

const (
	maxCollectionBytes = 100
	collectionChars    = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-."
)

// Option configures [New].
type Option func(*config)

type config struct {
	collection  string
	logger      *slog.Logger
	maxResponse int
	sweepBatch  int
	docLimit    int           // the largest document, by the store's count; tests raise it
	listeners   int           // the most snapshot listeners at once
	linger      time.Duration // how long a listener outlives its last watch; tests shorten it
	step        time.Duration // the largest clock step fences survive
}

// WithCollection sets the collection of the record documents: 1 to 100
// bytes of ASCII letters, digits, "_", "-" and ".", neither "." nor ".."
// nor of Firestore's reserved form "__...__". Default: "idemkit_records".
func WithCollection(name string) Option { return func(c *config) { c.collection = name } }

// WithLogger sets the logger of the sweeper's failures
// ([Store.StartSweeper]). Default: slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithMaxResponseBytes sets the largest response Complete and Put accept,
// 1 to 1,048,576; a larger one, or one whose record document would not fit
// Firestore's 1 MiB, is refused with an error matching [store.ErrTooLarge]
// before any write. Default: 1 MiB, so only the document limit applies.
func WithMaxResponseBytes(n int) Option { return func(c *config) { c.maxResponse = n } }

// WithSweepBatch sets the documents one query of [Store.Sweep] reads, 1 to
// 500. Default: 100.
func WithSweepBatch(n int) Option { return func(c *config) { c.sweepBatch = n } }

// WithMaxListeners sets how many snapshot listeners the store runs at
// once, 0 or more (0 turns notification off): one per watched key (see
// [Store.Watch]), each holding a stream of the client's gRPC connection; a
// watch of a further key is not set up, and its caller polls. A connection
// carries about 100 concurrent streams on Google's servers (past it, the
// client's calls queue): keep the bound well below, or give the client a
// connection pool (option.WithGRPCConnectionPool). Default: 50.
func WithMaxListeners(n int) Option { return func(c *config) { c.listeners = n } }

// WithMaxClockStep sets the largest step back of Firestore's clock that
// fences survive ([store.Store]): a tombstone is kept until Firestore's
// clock passes its fence (in Unix ms) plus d. 0 or more. Default: a minute.
func WithMaxClockStep(d time.Duration) Option { return func(c *config) { c.step = d } }

func newConfig(opts []Option) (config, error) {
	c := config{
		collection: defaultCollection, maxResponse: maxDocumentBytes,
		sweepBatch: defaultSweepBatch, docLimit: maxDocumentBytes - documentMargin,
		listeners: defaultMaxListeners, linger: defaultLinger, step: defaultMaxClockStep,
	}
	for _, o := range opts {
		o(&c)
	}
	bad := func(detail string) (config, error) {
		return config{}, idemkit.NewError(idemkit.CodeInvalidArgument, "new", detail, nil)
	}
	if detail := checkCollection(c.collection); detail != "" {
		return bad("the record collection " + detail)
	}
	switch {
	case c.maxResponse < 1 || c.maxResponse > maxDocumentBytes:
		return bad(fmt.Sprintf("the maximum response size must be 1 to %d bytes", maxDocumentBytes))
	case c.sweepBatch < 1 || c.sweepBatch > maxSweepBatch:
		return bad(fmt.Sprintf("the sweep batch must be 1 to %d", maxSweepBatch))
	case c.listeners < 0:
		return bad("the maximum number of listeners must not be negative")
	case c.step < 0:
		return bad("the largest clock step must not be negative (0 trusts Firestore's clock never to step back)")
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	return c, nil
}

// checkCollection returns what is wrong with a collection name, or "".
func checkCollection(name string) string {
	switch {
	case name == "":
		return "must not be empty"
	case len(name) > maxCollectionBytes:
		return fmt.Sprintf("exceeds %d bytes", maxCollectionBytes)
	case name == "." || name == "..":
		return `must not be "." or ".."`
	case len(name) >= 4 && strings.HasPrefix(name, "__") && strings.HasSuffix(name, "__"):
		return "must not have Firestore's reserved form __...__"
	}
	if i := strings.IndexFunc(name, func(r rune) bool { return !strings.ContainsRune(collectionChars, r) }); i >= 0 {
		return fmt.Sprintf("has a character outside [A-Za-z0-9_.-] at byte %d", i)
	}
	return ""
}

// Store is the Firestore engine: a [store.Store], [store.Stepper],
// [store.Watcher] and [store.Records], and a finder of lock claims
// ([Store.FindClaim]). Its methods are safe for concurrent use. The zero
// value is not usable; call [New].
type Store struct {
	client    *firestore.Client
	records   *firestore.CollectionRef
	cfg       config
	claims    claims
	listeners listeners
}

// New returns a store on client. It validates the options
// (InvalidArgument) and sends nothing to Firestore; nothing needs creating
// beforehand.
func New(client *firestore.Client, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "new", "a Firestore client is required", nil)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return &Store{client: client, records: client.Collection(cfg.collection), cfg: cfg}, nil
}

// ref returns the document of a record key.
func (s *Store) ref(key string) *firestore.DocumentRef { return s.records.Doc(docID(key)) }

// read reads the record document of key, outside any transaction (no
// document lock), and tells its listener.
func (s *Store) read(ctx context.Context, op, key string, ref *firestore.DocumentRef) (*doc, error) {
	sent := time.Now()
	snaps, err := s.client.GetAll(ctx, []*firestore.DocumentRef{ref})
	if err != nil {
		return nil, mapError(ctx, op, err)
	}
	d, err := decode(op, key, snaps[0])
	if err == nil {
		d.readLocally = sent
		s.listeners.news(d)
	}
	return d, err
}

// wrote tells the key's listener of c, committed at at.
func (s *Store) wrote(c *contents, at time.Time) {
	s.listeners.news(&doc{exists: true, key: c.key, fp: c.fp, state: c.state, fence: c.fence, ttl: micros(c.ttl), createdAt: at, updateTime: at, readTime: at})
}

// write commits c to the document d was read from while it is as read.
func write(ctx context.Context, ref *firestore.DocumentRef, d *doc, c *contents) (*firestore.WriteResult, error) {
	if !d.exists {
		return ref.Create(ctx, c.data())
	}
	return ref.Update(ctx, c.fields(), firestore.LastUpdateTime(d.updateTime))
}

// outcome is the document of rec, living ttl from a commit after now.
func (s *Store) outcome(rec store.Record, ttl time.Duration, now time.Time) *contents {
	return &contents{
		key: rec.Key, fp: rec.Fingerprint, state: rec.State, response: rec.Response, fence: rec.Fence, ttl: ttl,
		expireAt: lifetimeEnd(now, ttl, rec.Fence, false, s.cfg.step), writeID: newWriteID(),
	}
}

// tombstone is what a release or delete leaves: the fence alone, until
// Firestore's clock has passed its floor.
func (s *Store) tombstone(key string, fence idemkit.Fence, writeID string) *contents {
	return &contents{key: key, state: released, fence: fence, expireAt: fenceFloor(fence, s.cfg.step), writeID: writeID}
}

// Claim implements [store.Store] and [store.Stepper]: one read, judged by
// its read time, then for a free key one commit conditioned on the
// document being as read. A contender that loses fails fast, reads again
// and answers with the winner's claim; that read also settles a commit
// whose answer was lost; from its third loss in a row it waits a little
// before it reads again. A take-over of a claim of fp whose lease ran
// out, or of its release's tombstone, leaves the document's steps in
// place (the commit does not touch them; its precondition keeps them as
// read) and returns them; any other claim removes them.
func (s *Store) Claim(ctx context.Context, key, fp string, ttl time.Duration) (store.Record, bool, error) {
	const op = "claim"
	if err := engine.Ready(ctx, op, engine.ValidateKey(key), engine.ValidateTTL(op, ttl), s.checkFingerprint(op, key, fp)); err != nil {
		return store.Record{}, false, err
	}
	ref := s.ref(key)
	var (
		ids      []string        // the write ids of this call's commits
		replaced []*store.Record // what each of them took over (see store.Record.Replaced)
		lastErr  error           // the error of the last commit
	)
	for attempt := 0; ; attempt++ {
		d, err := s.read(ctx, op, key, ref)
		if err != nil {
			return store.Record{}, false, err
		}
		if d.live() {
			if d.wrote(ids, isClaimed) {
				s.claims.put(key, d.fence, d.known()) // a commit whose answer was lost
				rec := d.record()
				rec.Replaced = replaced[slices.Index(ids, d.writeID)]
				return rec, true, nil
			}
			return d.record(), false, nil
		}
		if lastErr != nil && !contended(lastErr) {
			return store.Record{}, false, mapCommitError(ctx, op, lastErr)
		}
		if attempt == maxAttempts {
			return store.Record{}, false, contention(op)
		}
		if w, ok := s.listeners.claimedSince(key, d.readTime); ok {
			return w.record(), false, nil // claimed since the read: spare a write bound to lose
		}
		fence := max(d.fence+1, idemkit.Fence(d.readTime.UnixMilli()))
		if fence > idemkit.FenceMax {
			return store.Record{}, false, idemkit.NewError(idemkit.CodeInternal, op, fmt.Sprintf("fence overflow: the next fence %s exceeds the maximum %s", fence, idemkit.FenceMax), nil)
		}
		c := &contents{
			key: key, fp: fp, state: store.StateClaimed, fence: fence, ttl: ttl,
			expireAt: lifetimeEnd(d.now(), ttl, fence, true, s.cfg.step), writeID: newWriteID(),
			stepped: len(d.steps) > 0,
		}
		var steps []store.Step // the steps the claim carries over
		if d.carries(fp) {
			steps, c.carry = d.steps, true
			c.expireAt = later(c.expireAt, d.expireAt) // what the steps were kept for
		}
		var r *store.Record
		if d.exists && len(d.response) > 0 {
			r = &store.Record{Fingerprint: d.fp, Response: d.response}
		}
		ids, replaced = append(ids, c.writeID), append(replaced, r)
		sent := time.Now()
		wr, err := write(ctx, ref, d, c)
		if err == nil {
			k := known{
				createdAt: wr.UpdateTime, updateTime: wr.UpdateTime, expiresAt: wr.UpdateTime.Add(micros(ttl)), at: wr.UpdateTime, sent: sent,
				fp: fp, keep: c.expireAt, steps: len(steps), stepBytes: stepsSize(steps),
			}
			s.claims.put(key, fence, k)
			s.wrote(c, k.updateTime)
			return store.Record{
				Key: key, Fingerprint: fp, State: store.StateClaimed, Fence: fence,
				CreatedAt: k.createdAt, ExpiresAt: k.expiresAt, Steps: cloneSteps(steps), Replaced: r,
			}, true, nil
		}
		if ctx.Err() != nil {
			return store.Record{}, false, mapError(ctx, op, err)
		}
		lastErr = err
		if contended(err) && attempt >= 2 {
			// A third loss in a row: the key is being claimed and released
			// faster than this read and write go round. Spaced out, the
			// next read finds the winner's claim instead of racing on.
			if err := pause(ctx, op, attempt-1); err != nil {
				return store.Record{}, false, err
			}
		}
	}
}

func isClaimed(s store.State) bool  { return s == store.StateClaimed }
func isReleased(s store.State) bool { return s == released }

// Extend implements [store.Store]; see [Store.writeClaim] for its RPCs.
// The new lease runs from the commit time. An extension that commits once
// the lease ran out is void ([doc.expiresAt]): Extend answers false. It
// leaves the claim's steps alone and, when it has some, never moves the
// document's expireAt earlier (a step's keep stands).
func (s *Store) Extend(ctx context.Context, key string, fence idemkit.Fence, ttl time.Duration) (time.Time, bool, error) {
	const op = "extend"
	if err := engine.Ready(ctx, op, engine.ValidateFenced(op, key, fence), engine.ValidateTTL(op, ttl)); err != nil {
		return time.Time{}, false, err
	}
	var (
		sent time.Time // when the write that landed was sent
		keep time.Time // the expireAt it wrote
	)
	at, was, ok, err := s.writeClaim(ctx, key, fence, claimWrite{
		op: op, live: true,
		update: func(k known) []firestore.Update {
			sent = time.Now()
			keep = lifetimeEnd(k.now(), ttl, fence, true, s.cfg.step)
			if k.steps == 0 {
				return extension(ttl, k.createdAt, k.expiresAt, keep, newWriteID())
			}
			keep = later(keep, k.keep)
			// The lease runs from this commit, not until a step's
			// leaseUntil.
			return append(extension(ttl, k.createdAt, k.expiresAt, keep, newWriteID()), firestore.Update{Path: fieldLeaseUntil, Value: firestore.Delete})
		},
	})
	if err != nil || !ok {
		return time.Time{}, false, err
	}
	was.updateTime, was.keep = at, keep
	if !at.Before(was.expiresAt) {
		s.claims.put(key, fence, was) // void: the claim still runs out when it did
		return time.Time{}, false, nil
	}
	was.expiresAt, was.at, was.sent = at.Add(micros(ttl)), at, sent
	s.claims.put(key, fence, was) // the listener's snapshot brings the new lease
	return was.expiresAt, true, nil
}

// Complete implements [store.Store]; see [Store.writeClaim] for its RPCs.
// The record's lifetime starts at the commit time. A response whose record
// document would not fit is refused with [store.ErrTooLarge] before any
// write.
func (s *Store) Complete(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	const op = "complete"
	if err := engine.Ready(ctx, op, engine.ValidateComplete(rec, ttl), s.checkOutcome(op, rec)); err != nil {
		return false, err
	}
	var (
		ids []string // the write ids of this call's commits
		c   *contents
	)
	at, _, ok, err := s.writeClaim(ctx, rec.Key, rec.Fence, claimWrite{
		op: op,
		update: func(k known) []firestore.Update {
			c = s.outcome(rec, ttl, k.now())
			c.stepped = k.steps > 0
			ids = append(ids, c.writeID)
			return c.fields()
		},
		landed:    func(d *doc) bool { return d.wrote(ids, store.State.Done) },
		commitErr: func(ctx context.Context, err error) error { return s.outcomeError(ctx, op, rec, err) },
	})
	s.claims.drop(rec.Key, rec.Fence)
	if ok {
		s.wrote(c, at)
	}
	return ok, err
}

// checkFingerprint refuses a fingerprint a record document cannot hold.
func (s *Store) checkFingerprint(op, key, fp string) error {
	if s.maxResponse(key, fp) < 0 {
		return idemkit.NewError(idemkit.CodeInvalidArgument, op, fmt.Sprintf("a %d-byte fingerprint does not fit a record document", len(fp)), nil)
	}
	return nil
}

// checkOutcome refuses, before any I/O, an outcome record whose fence or
// response a record document cannot hold.
func (s *Store) checkOutcome(op string, rec store.Record) error {
	if rec.Fence > idemkit.FenceMax {
		return idemkit.NewError(idemkit.CodeInvalidArgument, op, fmt.Sprintf("fence %s exceeds the maximum %s", rec.Fence, idemkit.FenceMax), nil)
	}
	if limit := s.maxResponse(rec.Key, rec.Fingerprint); len(rec.Response) > limit {
		return engine.TooLarge(op, len(rec.Response), max(limit, 0))
	}
	return nil
}

// outcomeError maps the error of an outcome's write that a read has shown
// did not land. A Firestore release counting sizes differently from
// [documentSize] refuses a large document with InvalidArgument: that is
// [store.ErrTooLarge] for a document over half the limit (nothing else in
// a record can be invalid).
func (s *Store) outcomeError(ctx context.Context, op string, rec store.Record, err error) error {
	size := documentSize(s.cfg.collection, rec.Key, rec.Fingerprint, len(rec.Response))
	if status.Code(err) == codes.InvalidArgument && ctx.Err() == nil && size > maxDocumentBytes/2 {
		return tooLargeRefused(ctx, op, size, err)
	}
	return mapCommitError(ctx, op, err)
}

// Release implements [store.Store]: it leaves a tombstone; see
// [Store.writeClaim] for its RPCs. A tombstone that commits once the lease
// ran out stands, but Release answers false: the key was free either way.
// The tombstone of a claim with steps keeps its fingerprint and steps (the
// commit does not touch them) for the next claim of that fingerprint, and
// the document's expireAt when later than its fence's floor.
func (s *Store) Release(ctx context.Context, key string, fence idemkit.Fence) (bool, error) {
	const op = "release"
	if err := engine.Ready(ctx, op, engine.ValidateFenced(op, key, fence)); err != nil {
		return false, err
	}
	var ids []string // the write ids of this call's commits
	at, was, ok, err := s.writeClaim(ctx, key, fence, claimWrite{
		op: op, live: true,
		update: func(k known) []firestore.Update {
			c := s.tombstone(key, fence, newWriteID())
			if k.steps > 0 {
				c.fp, c.stepped, c.carry, c.expireAt = k.fp, true, true, later(c.expireAt, k.keep)
			}
			ids = append(ids, c.writeID)
			return c.fields()
		},
		landed: func(d *doc) bool { return d.wrote(ids, isReleased) },
	})
	s.claims.drop(key, fence)
	if ok {
		s.wrote(s.tombstone(key, fence, ""), at)
	}
	return ok && at.Before(was.expiresAt), err
}

// RecordStep implements [store.Stepper]; see [Store.writeClaim] for its
// RPCs: for a claim this store made or last wrote, one commit conditioned
// on the update time of its last write, which is as good as a fence and a
// step count (the store knows both as of that write). It writes the step
// alone, under its index in the steps field, with the document's expireAt
// moved to at least keep past the commit. A step the record document could
// not hold (a fingerprint near Firestore's 1 MiB) is refused with
// InvalidArgument matching [store.ErrTooLarge], without a write.
func (s *Store) RecordStep(ctx context.Context, key string, fence idemkit.Fence, index int, step store.Step, keep time.Duration) (bool, error) {
	const op = "record-step"
	if err := engine.Ready(ctx, op, engine.ValidateStep(key, fence, index, step, keep)); err != nil {
		return false, err
	}
	var (
		ids   []string  // the write ids of this call's commits
		until time.Time // the expireAt of the last one
	)
	at, was, ok, err := s.writeClaim(ctx, key, fence, claimWrite{
		op: op,
		applies: func(k known) (bool, error) {
			if k.steps != index {
				return false, nil
			}
			if size := claimSize(s.cfg.collection, key, k.fp, k.stepBytes+stepSize(index, step)); size > s.cfg.docLimit {
				return false, idemkit.NewError(idemkit.CodeInvalidArgument, op,
					fmt.Sprintf("with this step the claim's record document would be %d bytes, over the %d the store writes", size, s.cfg.docLimit), store.ErrTooLarge)
			}
			return true, nil
		},
		update: func(k known) []firestore.Update {
			until = later(k.keep, clampTime(k.now().Add(micros(keep)+expireSlack)))
			id := newWriteID()
			ids = append(ids, id)
			return []firestore.Update{
				{FieldPath: stepPath(index), Value: stepValue(step)},
				// The lease as it was: the commit moves the update time
				// the lease and the claim's time are read from.
				{Path: fieldCreatedAt, Value: k.createdAt},
				{Path: fieldLeaseUntil, Value: k.expiresAt},
				{Path: fieldExpireAt, Value: until},
				{Path: fieldWriteID, Value: id},
			}
		},
		landed: func(d *doc) bool { return d.wrote(ids, isClaimed) },
	})
	if ok {
		was.updateTime, was.keep = at, until
		was.steps, was.stepBytes = index+1, was.stepBytes+stepSize(index, step)
		s.claims.put(key, fence, was)
	}
	return ok, err
}

// claimWrite is one write to a claim.
type claimWrite struct {
	op        string
	live      bool                               // only while the lease has not run out (else while nobody claimed since)
	applies   func(k known) (bool, error)        // whether to write over the claim k (nil: always); known claims for which it is false are read first
	update    func(k known) []firestore.Update   // what to write over the claim k
	landed    func(d *doc) bool                  // whether a read shows this call's write (nil: writing again is harmless)
	commitErr func(context.Context, error) error // maps a failed commit; nil: mapCommitError
}

// writeClaim makes w to the claim (key, fence) and returns the commit time
// of the write that landed and the claim as it was before it. For a claim
// this store made or last wrote (for w.live: while [known.now] is before
// its expiry), when w applies to it as the store knows it, it is one
// commit conditioned on the update time of the store's last write;
// otherwise, or when that write is no longer the last, a read and a
// commit conditioned on the update time read: ok = false, nothing written,
// once the document no longer carries the claim (for w.live: live at the
// read time) or w does not apply to it as read. The read also settles a
// failed commit (w.landed).
func (s *Store) writeClaim(ctx context.Context, key string, fence idemkit.Fence, w claimWrite) (at time.Time, was known, ok bool, err error) {
	ref := s.ref(key)
	var lastErr error // the error of the last commit
	if k, ok := s.claims.get(key, fence); ok && (!w.live || k.now().Before(k.expiresAt)) {
		write, err := w.judge(k)
		if err != nil {
			return at, was, false, err
		}
		if write {
			was = k
			wr, err := ref.Update(ctx, w.update(k), firestore.LastUpdateTime(k.updateTime))
			if err == nil {
				return wr.UpdateTime, k, true, nil
			}
			if ctx.Err() != nil {
				return at, was, false, mapError(ctx, w.op, err)
			}
			lastErr = err
		}
	}
	for attempt := 0; ; attempt++ {
		d, err := s.read(ctx, w.op, key, ref)
		if err != nil {
			return at, was, false, err
		}
		if w.landed != nil && w.landed(d) {
			return d.updateTime, was, true, nil // a commit whose answer was lost
		}
		if !d.holds(fence) {
			s.claims.drop(key, fence)
			return at, was, false, nil
		}
		if w.live && !d.live() {
			return at, was, false, nil
		}
		if write, err := w.judge(d.known()); err != nil || !write {
			return at, was, false, err
		}
		if lastErr != nil && !contended(lastErr) {
			if w.commitErr == nil {
				return at, was, false, mapCommitError(ctx, w.op, lastErr)
			}
			return at, was, false, w.commitErr(ctx, lastErr)
		}
		if attempt == maxAttempts {
			return at, was, false, contention(w.op)
		}
		was = d.known()
		wr, err := ref.Update(ctx, w.update(was), firestore.LastUpdateTime(d.updateTime))
		if err == nil {
			return wr.UpdateTime, was, true, nil
		}
		if ctx.Err() != nil {
			return at, was, false, mapError(ctx, w.op, err)
		}
		lastErr = err
		if contended(err) {
			if err := pause(ctx, w.op, attempt+1); err != nil {
				return at, was, false, err
			}
		}
	}
}

// judge reports whether w writes over the claim k.
func (w claimWrite) judge(k known) (bool, error) {
	if w.applies == nil {
		return true, nil
	}
	return w.applies(k)
}

// Get implements [store.Store] and [store.Records]: one read.
func (s *Store) Get(ctx context.Context, key string) (store.Record, bool, error) {
	const op = "get"
	if err := engine.Ready(ctx, op, engine.ValidateKey(key)); err != nil {
		return store.Record{}, false, err
	}
	d, err := s.read(ctx, op, key, s.ref(key))
	if err != nil || !d.live() {
		return store.Record{}, false, err
	}
	return d.record(), true, nil
}

// Delete implements [store.Store] and [store.Records]: a read and, when it
// finds a live record, a conditioned commit of a tombstone in its place
// (as [Store.Release] leaves), so later fences stay greater. A document
// that is not live but keeps steps for a next claim (a release's
// tombstone, or a claim whose lease ran out, with steps) is replaced the
// same way, so the steps and the fingerprint kept for them go and a claim
// that ran out can no longer complete; Delete still reports false. Any
// other document (none, or one without steps) costs the read alone.
func (s *Store) Delete(ctx context.Context, key string) (bool, error) {
	const op = "delete"
	if err := engine.Ready(ctx, op, engine.ValidateKey(key)); err != nil {
		return false, err
	}
	var deletes []string // the write ids of this call's commits over a live record
	id, err := s.rewrite(ctx, op, key, isReleased, func(d *doc) *contents {
		live := d.live()
		if !live && !d.keepsSteps() {
			return nil
		}
		c := s.tombstone(key, d.fence, newWriteID())
		c.stepped = len(d.steps) > 0
		if live {
			deletes = append(deletes, c.writeID)
		}
		return c
	}, func(ctx context.Context, err error) error { return mapCommitError(ctx, op, err) })
	return slices.Contains(deletes, id), err
}

// Put implements [store.Records]: a read and, unless the live record there
// carries a higher fence, one commit of the whole record conditioned on
// the document being as read. Put's fences are a lock's; do not mix Put
// and [Store.Claim] on one key. A response whose record document would
// not fit is refused with [store.ErrTooLarge] before any write.
func (s *Store) Put(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	const op = "put"
	if err := engine.Ready(ctx, op, validatePut(rec, ttl), s.checkOutcome(op, rec)); err != nil {
		return false, err
	}
	id, err := s.rewrite(ctx, op, rec.Key, store.State.Done, func(d *doc) *contents {
		if d.live() && d.fence > rec.Fence {
			return nil
		}
		c := s.outcome(rec, ttl, d.now())
		c.stepped = len(d.steps) > 0
		return c
	}, func(ctx context.Context, err error) error { return s.outcomeError(ctx, op, rec, err) })
	return id != "", err
}

// rewrite reads key's document and commits what next makes of it (nil:
// nothing), conditioned on the document being as read, and returns the
// write id of the commit that landed ("" when none did). A read settles
// a failed commit: it landed when the document carries one of the call's
// write ids with a state done accepts. Contention is retried up to
// maxAttempts; commitErr maps any other failed commit.
func (s *Store) rewrite(ctx context.Context, op, key string, done func(store.State) bool, next func(*doc) *contents, commitErr func(context.Context, error) error) (string, error) {
	ref := s.ref(key)
	var (
		ids     []string
		lastErr error
	)
	for attempt := 0; ; attempt++ {
		d, err := s.read(ctx, op, key, ref)
		if err != nil {
			return "", err
		}
		if d.wrote(ids, done) {
			return d.writeID, nil // a commit whose answer was lost
		}
		c := next(d)
		if c == nil {
			return "", nil
		}
		if lastErr != nil && !contended(lastErr) {
			return "", commitErr(ctx, lastErr)
		}
		if attempt == maxAttempts {
			return "", contention(op)
		}
		ids = append(ids, c.writeID)
		wr, err := write(ctx, ref, d, c)
		if err == nil {
			s.claims.drop(key, d.fence)
			s.wrote(c, wr.UpdateTime)
			return c.writeID, nil
		}
		if ctx.Err() != nil {
			return "", mapError(ctx, op, err)
		}
		lastErr = err
		if contended(err) {
			if err := pause(ctx, op, attempt+1); err != nil {
				return "", err
			}
		}
	}
}

// validatePut checks a Put's arguments; its fence may be zero (an
// unfenced writer).
func validatePut(rec store.Record, ttl time.Duration) error {
	if err := engine.ValidateKey(rec.Key); err != nil {
		return err
	}
	if !rec.State.Done() {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "put", fmt.Sprintf("a record needs an outcome state (completed or not-replayable, got %v)", rec.State), nil)
	}
	return engine.ValidateTTL("put", ttl)
}
