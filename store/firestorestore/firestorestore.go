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
)

var (
	_ store.Store   = (*Store)(nil)
	_ store.Records = (*Store)(nil)
)

// Defaults and bounds of the options, as their documentation states them.
const (
	defaultCollection   = "idemkit_records"
	defaultSweepBatch   = 100
	maxSweepBatch       = 500
	defaultMaxClockStep = time.Minute
)

// maxAttempts is how many conditional writes one operation tries when the
// document keeps changing under it before it gives up (ServiceUnavailable).
// Every lost write means another one landed, so the bound only matters
// under sustained writes to one document; it is generous enough for a
// burst of writers with distinct fences to settle (each loses at most once
// per writer with a lower fence that lands first).
const maxAttempts = 16

// contendedBackoff spaces the attempts of a write that lost to a
// concurrent one, so that contenders re-read after the winner's write
// rather than in lockstep with each other.
var contendedBackoff = idemkit.Backoff{Base: 2 * time.Millisecond, Max: 32 * time.Millisecond}

// pause waits before attempt n+1 of a write that lost attempt n to a
// concurrent write; it returns ctx's error when ctx ends first.
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

// maxCollectionBytes is the longest collection name New accepts.
const maxCollectionBytes = 100

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

// WithLogger sets the logger of the background sweeper's failures
// ([Store.StartSweeper]). Log lines never contain a record key. Default:
// slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithMaxResponseBytes sets the largest response Complete and Put accept,
// 1 to 1,048,576 (1 MiB, Firestore's document limit); a larger one is
// refused with an error matching [store.ErrTooLarge] before any write (the
// guard then records the execution as not replayable). Whatever the limit,
// a response is also refused when its record document would not fit
// Firestore's document limit (see "Size" in the package documentation).
// Default: 1 MiB, so only the document limit applies.
func WithMaxResponseBytes(n int) Option { return func(c *config) { c.maxResponse = n } }

// WithSweepBatch sets how many documents one query of [Store.Sweep] reads
// at most, 1 to 500. Default: 100.
func WithSweepBatch(n int) Option { return func(c *config) { c.sweepBatch = n } }

// WithMaxListeners sets how many snapshot listeners the store runs at
// once, 0 or more: one per watched key (see [Store.Watch]), each holding
// one stream of the client's gRPC connection while a duplicate request
// waits on the key. A watch of a further key is not set up, and its caller
// polls. A connection carries a bounded number of concurrent streams
// (typically 100 on Google's servers; past it, the client's further calls
// queue), so keep the bound well below it, or give the client a pool of
// connections (option.WithGRPCConnectionPool). 0 turns notification off.
// Default: 50.
func WithMaxListeners(n int) Option { return func(c *config) { c.listeners = n } }

// WithMaxClockStep sets the largest step back of Firestore's clock (or of a
// failover's) that fences survive: no document is removed before
// Firestore's clock has passed its fence, read as Unix milliseconds, plus
// d (the rule in [store.Store]), so a release or delete leaves a tombstone
// that long. 0 or more. Default: one minute.
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
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Sprintf("has a character outside [A-Za-z0-9_.-] at byte %d", i)
		}
	}
	return ""
}

// Store is a [store.Store] (records that carry their own lease), a
// [store.Watcher] (snapshot listeners that wake waiting duplicates) and a
// [store.Records] (plain fenced records) on Firestore, one document per
// record. Its methods are safe for concurrent use.
//
// The zero value is not usable; call [New].
type Store struct {
	client    *firestore.Client
	records   *firestore.CollectionRef
	cfg       config
	claims    claims
	listeners listeners
}

// New returns a store on client, with the record collection named by opts.
// It validates the options (InvalidArgument) and sends nothing to
// Firestore. Nothing needs creating beforehand: Firestore creates the
// collection with its first document, and its automatic single-field
// indexes serve [Store.Sweep].
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

// read reads the record document of key: one BatchGetDocuments, outside
// any transaction (it takes no document lock).
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

// wrote tells the key's listener, if it has one, what a write of this
// store committed at the time at left in the document.
func (s *Store) wrote(key string, at time.Time, state store.State, fence idemkit.Fence, ttl time.Duration) {
	s.listeners.news(&doc{exists: true, key: key, state: state, fence: fence, ttl: micros(ttl), updateTime: at, readTime: at})
}

// write commits c to the document d was read from, on the condition that
// it is still as read: a Create when it did not exist, else an update of
// every field conditioned on its update time.
func write(ctx context.Context, ref *firestore.DocumentRef, d *doc, c *contents) (*firestore.WriteResult, error) {
	if !d.exists {
		return ref.Create(ctx, c.data())
	}
	return ref.Update(ctx, c.fields(), firestore.LastUpdateTime(d.updateTime))
}

// tombstone is what a release or delete leaves of the record of key with
// fence: the fence alone, until Firestore's clock has passed its floor.
func (s *Store) tombstone(key string, fence idemkit.Fence, writeID string) *contents {
	return &contents{key: key, state: released, fence: fence, expireAt: fenceFloor(fence, s.cfg.step), writeID: writeID}
}

// Claim implements [store.Store]: one read, judged by its read time; then,
// for a free key, one write-only commit conditioned on the document being
// as read (a Create, or an update conditioned on its update time when it
// takes over a run-out claim, an expired outcome or a tombstone). A
// contender that loses fails fast (no document locks), reads again and
// answers with the winner's claim; the same read settles a commit whose
// answer was lost (its write id).
func (s *Store) Claim(ctx context.Context, key, fp string, ttl time.Duration) (store.Record, bool, error) {
	const op = "claim"
	if err := store.ValidateKey(key); err != nil {
		return store.Record{}, false, err
	}
	if err := store.ValidateTTL(op, ttl); err != nil {
		return store.Record{}, false, err
	}
	if s.maxResponse(key, fp) < 0 {
		return store.Record{}, false, idemkit.NewError(idemkit.CodeInvalidArgument, op,
			fmt.Sprintf("a %d-byte fingerprint does not fit a record document", len(fp)), nil)
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
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
		fence := max(d.fence+1, idemkit.Fence(d.readTime.UnixMilli()))
		if fence > maxFence {
			return store.Record{}, false, idemkit.NewError(idemkit.CodeInternal, op, "the next fence exceeds what a record document holds", nil)
		}
		c := &contents{
			key: key, fp: fp, state: store.StateClaimed, fence: fence, ttl: ttl,
			expireAt: lifetimeEnd(d.now(), ttl, fence, true, s.cfg.step), writeID: newWriteID(),
		}
		var r *store.Record
		if d.exists && len(d.response) > 0 {
			r = &store.Record{Fingerprint: d.fp, Response: d.response}
		}
		ids, replaced = append(ids, c.writeID), append(replaced, r)
		sent := time.Now()
		wr, err := write(ctx, ref, d, c)
		if err == nil {
			k := known{createdAt: wr.UpdateTime, updateTime: wr.UpdateTime, expiresAt: wr.UpdateTime.Add(micros(ttl)), at: wr.UpdateTime, sent: sent}
			s.claims.put(key, fence, k)
			s.wrote(key, k.updateTime, store.StateClaimed, fence, ttl)
			return store.Record{
				Key: key, Fingerprint: fp, State: store.StateClaimed, Fence: fence,
				CreatedAt: k.createdAt, ExpiresAt: k.expiresAt, Replaced: r,
			}, true, nil
		}
		if ctx.Err() != nil {
			return store.Record{}, false, mapError(ctx, op, err)
		}
		lastErr = err
	}
}

func isClaimed(s store.State) bool  { return s == store.StateClaimed }
func isReleased(s store.State) bool { return s == released }

// Extend implements [store.Store]; see [Store.writeClaim] for its RPCs.
// The new lease runs from the commit time. An extension that commits once
// the lease ran out (a write sent just before) is void: the document then
// records the expiry it extended (heldUntil) and every reader judges the
// claim run out at that instant, so Extend answers false.
func (s *Store) Extend(ctx context.Context, key string, fence idemkit.Fence, ttl time.Duration) (time.Time, bool, error) {
	const op = "extend"
	if err := store.ValidateFenced(op, key, fence); err != nil {
		return time.Time{}, false, err
	}
	if err := store.ValidateTTL(op, ttl); err != nil {
		return time.Time{}, false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return time.Time{}, false, err
	}
	at, was, ok, err := s.writeClaim(ctx, key, fence, claimWrite{
		op: op, live: true,
		update: func(k known) []firestore.Update {
			return extension(ttl, k.createdAt, k.expiresAt, lifetimeEnd(k.now(), ttl, fence, true, s.cfg.step), newWriteID())
		},
		// An extension whose answer was lost is written again: harmless.
		commitErr: func(ctx context.Context, err error) error { return mapCommitError(ctx, op, err) },
	})
	if err != nil || !ok {
		return time.Time{}, false, err
	}
	was.updateTime = at
	if !at.Before(was.expiresAt) {
		s.claims.put(key, fence, was) // void: the claim still runs out when it did
		return time.Time{}, false, nil
	}
	was.expiresAt, was.at, was.sent = at.Add(micros(ttl)), at, time.Now()
	s.claims.put(key, fence, was)
	s.wrote(key, at, store.StateClaimed, fence, ttl)
	return was.expiresAt, true, nil
}

// Complete implements [store.Store]; see [Store.writeClaim] for its RPCs
// (one commit of the whole outcome for a claim this store made). createdAt
// and the record's lifetime start at the commit time. A response whose
// record document would not fit ("Size" in docs/backends.md) is refused
// with [store.ErrTooLarge] before any write.
func (s *Store) Complete(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	const op = "complete"
	if err := store.ValidateComplete(rec, ttl); err != nil {
		return false, err
	}
	if err := s.checkOutcome(op, rec); err != nil {
		return false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return false, err
	}
	var ids []string // the write ids of this call's commits
	at, _, ok, err := s.writeClaim(ctx, rec.Key, rec.Fence, claimWrite{
		op: op,
		update: func(k known) []firestore.Update {
			c := &contents{
				key: rec.Key, fp: rec.Fingerprint, state: rec.State, response: rec.Response, fence: rec.Fence, ttl: ttl,
				expireAt: lifetimeEnd(k.now(), ttl, rec.Fence, false, s.cfg.step), writeID: newWriteID(),
			}
			ids = append(ids, c.writeID)
			return c.fields()
		},
		landed:    func(d *doc) bool { return d.wrote(ids, store.State.Done) },
		commitErr: func(ctx context.Context, err error) error { return s.outcomeError(ctx, op, rec, err) },
	})
	s.claims.drop(rec.Key, rec.Fence)
	if ok {
		s.wrote(rec.Key, at, rec.State, rec.Fence, ttl)
	}
	return ok, err
}

// checkOutcome refuses, before any I/O, an outcome record whose fence or
// response a record document cannot hold.
func (s *Store) checkOutcome(op string, rec store.Record) error {
	if rec.Fence > maxFence {
		return idemkit.NewError(idemkit.CodeInvalidArgument, op, fmt.Sprintf("fence %d exceeds the largest a record document holds (%d)", rec.Fence, idemkit.Fence(maxFence)), nil)
	}
	if limit := s.maxResponse(rec.Key, rec.Fingerprint); len(rec.Response) > limit {
		return store.TooLarge(op, len(rec.Response), max(limit, 0))
	}
	return nil
}

// outcomeError maps the error of an outcome's write that a read has shown
// not to have landed. Should a Firestore release count sizes differently
// from [documentSize], it refuses a large document with InvalidArgument:
// that is [store.ErrTooLarge] (so the guard records the execution as not
// replayable) when the document is over half the limit, since nothing else
// in a record can be invalid. Any other error maps as [mapCommitError]
// maps it.
func (s *Store) outcomeError(ctx context.Context, op string, rec store.Record, err error) error {
	size := documentSize(s.cfg.collection, rec.Key, rec.Fingerprint, len(rec.Response))
	if status.Code(err) == codes.InvalidArgument && ctx.Err() == nil && size > maxDocumentBytes/2 {
		return tooLargeRefused(ctx, op, size, err)
	}
	return mapCommitError(ctx, op, err)
}

// Release implements [store.Store]: it leaves a tombstone (the fence
// alone, invisible and claimable, kept until Firestore's clock passes the
// fence's floor); see [Store.writeClaim] for its RPCs. A tombstone that
// commits once the lease ran out (a write sent just before) stands, but
// Release answers false: the key was free to claim either way.
func (s *Store) Release(ctx context.Context, key string, fence idemkit.Fence) (bool, error) {
	const op = "release"
	if err := store.ValidateFenced(op, key, fence); err != nil {
		return false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return false, err
	}
	var ids []string // the write ids of this call's commits
	at, was, ok, err := s.writeClaim(ctx, key, fence, claimWrite{
		op: op, live: true,
		update: func(known) []firestore.Update {
			c := s.tombstone(key, fence, newWriteID())
			ids = append(ids, c.writeID)
			return c.fields()
		},
		landed:    func(d *doc) bool { return d.wrote(ids, isReleased) },
		commitErr: func(ctx context.Context, err error) error { return mapCommitError(ctx, op, err) },
	})
	s.claims.drop(key, fence)
	if ok {
		s.wrote(key, at, released, fence, 0)
	}
	return ok && at.Before(was.expiresAt), err
}

// claimWrite is one write to a claim: an extension, an outcome or a
// tombstone.
type claimWrite struct {
	op string
	// live: only while the claim's lease has not run out (Extend, Release);
	// otherwise also once it has, while nobody claimed since (Complete).
	live bool
	// update returns what to write over the claim as k describes it.
	update func(k known) []firestore.Update
	// landed reports whether a document read shows one of this call's
	// writes (a commit whose answer was lost); nil when writing again is
	// harmless.
	landed func(d *doc) bool
	// commitErr maps a failed commit that was not lost to contention.
	commitErr func(ctx context.Context, err error) error
}

// writeClaim makes w to the claim (key, fence) and returns the commit time
// of the write that landed and the claim as it was before it. For a claim
// this store made (and, for w.live, whose lease the local monotonic clock
// does not show run out) it is one commit conditioned on the update time
// of the store's last write to it; otherwise, or when that write is no
// longer the last, a read (judged by its read time) and a commit
// conditioned on the update time read: ok = false, nothing written, once
// the document no longer carries the claim (or, for w.live, its lease ran
// out). The read also settles a failed commit (w.landed). Contention is
// retried up to maxAttempts.
func (s *Store) writeClaim(ctx context.Context, key string, fence idemkit.Fence, w claimWrite) (at time.Time, was known, ok bool, err error) {
	ref := s.ref(key)
	var lastErr error // the error of the last commit
	if k, ok := s.claims.get(key, fence); ok && (!w.live || k.now().Before(k.expiresAt)) {
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
		if lastErr != nil && !contended(lastErr) {
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

// Get implements [store.Store] and [store.Records]: one read (one RPC,
// outside any transaction). A record is live while the read time Firestore
// reports is before its expiry.
func (s *Store) Get(ctx context.Context, key string) (store.Record, bool, error) {
	const op = "get"
	if err := store.ValidateKey(key); err != nil {
		return store.Record{}, false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return store.Record{}, false, err
	}
	d, err := s.read(ctx, op, key, s.ref(key))
	if err != nil || !d.live() {
		return store.Record{}, false, err
	}
	return d.record(), true, nil
}

// Delete implements [store.Store] and [store.Records]: a read and, when it
// finds a live record, a commit conditioned on the update time read that
// leaves a tombstone in its place (as [Store.Release] does), so a later
// claim's fence is still greater than the deleted record's. A read settles
// a failed commit: the tombstone is this call's when the document carries
// its write id.
func (s *Store) Delete(ctx context.Context, key string) (bool, error) {
	const op = "delete"
	if err := store.ValidateKey(key); err != nil {
		return false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return false, err
	}
	ref := s.ref(key)
	var (
		ids     []string
		lastErr error
	)
	for attempt := 0; ; attempt++ {
		d, err := s.read(ctx, op, key, ref)
		if err != nil {
			return false, err
		}
		if d.wrote(ids, isReleased) {
			return true, nil // a commit whose answer was lost
		}
		if !d.live() {
			return false, nil
		}
		if lastErr != nil && !contended(lastErr) {
			return false, mapCommitError(ctx, op, lastErr)
		}
		if attempt == maxAttempts {
			return false, contention(op)
		}
		c := s.tombstone(key, d.fence, newWriteID())
		ids = append(ids, c.writeID)
		wr, err := ref.Update(ctx, c.fields(), firestore.LastUpdateTime(d.updateTime))
		if err == nil {
			s.claims.drop(key, d.fence)
			s.wrote(key, wr.UpdateTime, released, d.fence, 0)
			return true, nil
		}
		if ctx.Err() != nil {
			return false, mapError(ctx, op, err)
		}
		lastErr = err
		if contended(err) {
			if err := pause(ctx, op, attempt+1); err != nil {
				return false, err
			}
		}
	}
}

// Put implements [store.Records]: a read and, unless the live record there
// carries a higher fence, one commit of the whole record conditioned on
// the document being as read (a Create when there was none). A contender
// that changed the document in between makes Put read again. A read
// settles a failed commit: the record landed when the document carries
// one of this call's write ids. createdAt and the record's lifetime start
// at the commit time.
//
// Put's fences are a lock's; do not mix Put and [Store.Claim] on one key.
//
// A response whose record document would not fit (see "Size" in the
// package documentation) is refused with [store.ErrTooLarge] before any
// write.
func (s *Store) Put(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	const op = "put"
	if err := validatePut(rec, ttl); err != nil {
		return false, err
	}
	if err := s.checkOutcome(op, rec); err != nil {
		return false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return false, err
	}
	ref := s.ref(rec.Key)
	var (
		ids     []string
		lastErr error
	)
	for attempt := 0; ; attempt++ {
		d, err := s.read(ctx, op, rec.Key, ref)
		if err != nil {
			return false, err
		}
		if d.wrote(ids, store.State.Done) {
			return true, nil // a commit whose answer was lost
		}
		if d.live() && d.fence > rec.Fence {
			return false, nil
		}
		if lastErr != nil && !contended(lastErr) {
			return false, s.outcomeError(ctx, op, rec, lastErr)
		}
		if attempt == maxAttempts {
			return false, contention(op)
		}
		c := &contents{
			key: rec.Key, fp: rec.Fingerprint, state: rec.State, response: rec.Response, fence: rec.Fence, ttl: ttl,
			expireAt: lifetimeEnd(d.now(), ttl, rec.Fence, false, s.cfg.step), writeID: newWriteID(),
		}
		ids = append(ids, c.writeID)
		if _, err = write(ctx, ref, d, c); err == nil {
			return true, nil
		}
		if ctx.Err() != nil {
			return false, mapError(ctx, op, err)
		}
		lastErr = err
		if contended(err) {
			if err := pause(ctx, op, attempt+1); err != nil {
				return false, err
			}
		}
	}
}

// validatePut checks a Put's arguments: a valid key, an outcome state and a
// TTL of at least one millisecond. The fence may be zero (an unfenced
// writer).
func validatePut(rec store.Record, ttl time.Duration) error {
	if err := store.ValidateKey(rec.Key); err != nil {
		return err
	}
	if !rec.State.Done() {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "put", fmt.Sprintf("a record needs an outcome state (completed or not-replayable, got %v)", rec.State), nil)
	}
	return store.ValidateTTL("put", ttl)
}
