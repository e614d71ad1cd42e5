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
)

// Defaults and bounds of the options, as their documentation states them.
const (
	defaultCollection = "idemkit_records"
	defaultSweepBatch = 100
	maxSweepBatch     = 500
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
	docLimit    int // the largest document, by the store's count; tests raise it
	listeners   int // the most snapshot listeners at once
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

func newConfig(opts []Option) (config, error) {
	c := config{
		collection: defaultCollection, maxResponse: maxDocumentBytes,
		sweepBatch: defaultSweepBatch, docLimit: maxDocumentBytes - documentMargin,
		listeners: defaultMaxListeners,
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
	snaps, err := s.client.GetAll(ctx, []*firestore.DocumentRef{ref})
	if err != nil {
		return nil, mapError(ctx, op, err)
	}
	return decode(op, key, snaps[0])
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
// fence: the fence alone, until Firestore's clock has passed it.
func tombstone(key string, fence idemkit.Fence, writeID string) *contents {
	return &contents{key: key, state: released, fence: fence, expireAt: fenceEnd(fence), writeID: writeID}
}

// Claim implements [store.Store]. It reads the record document (one RPC);
// an outcome or a live claim, judged by the read time Firestore reports,
// is the answer, and nothing is written. Otherwise one commit writes the
// new claim, conditioned on the document being as read: a Create when
// there was none, else an update conditioned on its update time (taking
// over a run-out claim, an expired outcome or a tombstone). The claim's
// fence is max(the fence read + 1, the read time in Unix ms); its
// CreatedAt is the commit time (the document's update time) and its
// ExpiresAt the commit time + ttl. Taking over a document that still held
// a response, it reports that response and its fingerprint
// ([store.Record].Replaced).
//
// A contender that loses the commit fails fast (AlreadyExists or
// FailedPrecondition, no document locks), reads again and answers with
// what it finds: the winner's live claim (busy). The same read settles a
// commit whose answer was lost: the claim is this call's when the document
// carries its write id.
func (s *Store) Claim(ctx context.Context, key, fp string, ttl time.Duration) (store.Record, bool, error) {
	const op = "claim"
	if err := engine.ValidateKey(key); err != nil {
		return store.Record{}, false, err
	}
	if err := engine.ValidateTTL(op, ttl); err != nil {
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
				s.claims.put(key, d.fence, d.createdAt, d.updateTime) // a commit whose answer was lost
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
			expireAt: lifetimeEnd(d.now(), ttl, fence, true), writeID: newWriteID(),
		}
		var r *store.Record
		if d.exists && len(d.response) > 0 {
			r = &store.Record{Fingerprint: d.fp, Response: d.response}
		}
		ids, replaced = append(ids, c.writeID), append(replaced, r)
		wr, err := write(ctx, ref, d, c)
		if err == nil {
			s.claims.put(key, fence, wr.UpdateTime, wr.UpdateTime)
			return store.Record{
				Key: key, Fingerprint: fp, State: store.StateClaimed, Fence: fence,
				CreatedAt: wr.UpdateTime, ExpiresAt: wr.UpdateTime.Add(micros(ttl)),
				Replaced: r,
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

// Extend implements [store.Store]. For a claim this store made, it is one
// commit conditioned on the update time of the store's last write to the
// claim; otherwise (or when that write is no longer the last) a read and a
// commit conditioned on the update time read, only while the document
// still carries the claim. The new lease runs from the commit time.
func (s *Store) Extend(ctx context.Context, key string, fence idemkit.Fence, ttl time.Duration) (bool, error) {
	const op = "extend"
	if err := engine.ValidateFenced(op, key, fence); err != nil {
		return false, err
	}
	if err := engine.ValidateTTL(op, ttl); err != nil {
		return false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return false, err
	}
	return s.writeClaim(ctx, key, fence, claimWrite{
		op: op,
		update: func(now, createdAt time.Time) []firestore.Update {
			return extension(ttl, createdAt, lifetimeEnd(now, ttl, fence, true), newWriteID())
		},
		// An extension whose answer was lost is written again: harmless.
		commitErr: func(ctx context.Context, err error) error { return mapCommitError(ctx, op, err) },
		keep:      true,
	})
}

// Complete implements [store.Store]. For a claim this store made, it is
// one commit: the whole outcome record, conditioned on the update time of
// the store's last write to the claim, so it lands only while the document
// is exactly as this claim left it. Otherwise (the store does not know the
// claim, or the document changed: an extension by another instance, a
// commit whose answer was lost) it reads the document and, only while it
// still carries the claim, writes the outcome conditioned on the update
// time read. A read also settles a failed commit: the outcome landed when
// the document carries one of this call's write ids. createdAt and the
// record's lifetime start at the commit time.
//
// A response whose record document would not fit (see "Size" in the
// package documentation) is refused with [store.ErrTooLarge] before any
// write.
func (s *Store) Complete(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	const op = "complete"
	if err := engine.ValidateComplete(rec, ttl); err != nil {
		return false, err
	}
	if err := s.checkOutcome(op, rec); err != nil {
		return false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return false, err
	}
	var ids []string // the write ids of this call's commits
	return s.writeClaim(ctx, rec.Key, rec.Fence, claimWrite{
		op: op,
		update: func(now, _ time.Time) []firestore.Update {
			c := &contents{
				key: rec.Key, fp: rec.Fingerprint, state: rec.State, response: rec.Response, fence: rec.Fence, ttl: ttl,
				expireAt: lifetimeEnd(now, ttl, rec.Fence, false), writeID: newWriteID(),
			}
			ids = append(ids, c.writeID)
			return c.fields()
		},
		landed:    func(d *doc) bool { return d.wrote(ids, store.State.Done) },
		commitErr: func(ctx context.Context, err error) error { return s.outcomeError(ctx, op, rec, err) },
	})
}

// checkOutcome refuses, before any I/O, an outcome record whose fence or
// response a record document cannot hold.
func (s *Store) checkOutcome(op string, rec store.Record) error {
	if rec.Fence > maxFence {
		return idemkit.NewError(idemkit.CodeInvalidArgument, op, fmt.Sprintf("fence %d exceeds the largest a record document holds (%d)", rec.Fence, idemkit.Fence(maxFence)), nil)
	}
	if limit := s.maxResponse(rec.Key, rec.Fingerprint); len(rec.Response) > limit {
		return engine.TooLarge(op, len(rec.Response), max(limit, 0))
	}
	return nil
}

// outcomeError maps the error of an outcome's write that a read has shown
// not to have landed. Firestore refuses a document over its size limit
// with InvalidArgument. The store's own exact count refuses such a record
// before any I/O, but should a Firestore release count differently, an
// InvalidArgument answer to the write of a large document (over half the
// limit: nothing else in a record this store writes can be invalid) is
// reported as [store.ErrTooLarge], so the guard records the execution as
// not replayable. Any other error maps as [mapCommitError] maps it. The
// read comes first because the retry of a write that did land is refused
// too, and taking that for ErrTooLarge would overwrite a completed record
// as not replayable.
func (s *Store) outcomeError(ctx context.Context, op string, rec store.Record, err error) error {
	size := documentSize(s.cfg.collection, rec.Key, rec.Fingerprint, len(rec.Response))
	if status.Code(err) == codes.InvalidArgument && ctx.Err() == nil && size > maxDocumentBytes/2 {
		return tooLargeRefused(ctx, op, size, err)
	}
	return mapCommitError(ctx, op, err)
}

// Release implements [store.Store]: it leaves a tombstone (the fence
// alone, invisible and claimable, expiring when Firestore's clock passes
// the fence), only while the document still carries the claim. For a claim
// this store made it is one commit conditioned on the update time of its
// last write; otherwise a read and a conditioned commit.
func (s *Store) Release(ctx context.Context, key string, fence idemkit.Fence) (bool, error) {
	const op = "release"
	if err := engine.ValidateFenced(op, key, fence); err != nil {
		return false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return false, err
	}
	var ids []string // the write ids of this call's commits
	return s.writeClaim(ctx, key, fence, claimWrite{
		op: op,
		update: func(time.Time, time.Time) []firestore.Update {
			c := tombstone(key, fence, newWriteID())
			ids = append(ids, c.writeID)
			return c.fields()
		},
		landed:    func(d *doc) bool { return d.wrote(ids, isReleased) },
		commitErr: func(ctx context.Context, err error) error { return mapCommitError(ctx, op, err) },
	})
}

// claimWrite is one write to a claim: an extension, an outcome or a
// tombstone.
type claimWrite struct {
	op string
	// update returns what to write, from the Firestore time the write
	// starts at and the claim's creation time.
	update func(now, createdAt time.Time) []firestore.Update
	// landed reports whether a document read shows one of this call's
	// writes (a commit whose answer was lost); nil when writing again is
	// harmless.
	landed func(d *doc) bool
	// commitErr maps a failed commit that was not lost to contention.
	commitErr func(ctx context.Context, err error) error
	// keep: after the write the store still knows the claim, at the new
	// update time (an extension); otherwise it forgets it.
	keep bool
}

// writeClaim makes w to the claim (key, fence). For a claim this store made
// it is one commit conditioned on the update time of the store's last write
// to it; otherwise (or when that write is no longer the last) a read and a
// commit conditioned on the update time read, only while the document still
// carries the claim: ok = false once it does not. A read also settles a
// failed commit (w.landed). Contention is retried up to maxAttempts.
func (s *Store) writeClaim(ctx context.Context, key string, fence idemkit.Fence, w claimWrite) (bool, error) {
	ref := s.ref(key)
	wrote := func(createdAt time.Time, wr *firestore.WriteResult) (bool, error) {
		if w.keep {
			s.claims.put(key, fence, createdAt, wr.UpdateTime)
		} else {
			s.claims.drop(key, fence)
		}
		return true, nil
	}
	var lastErr error // the error of the last commit
	if k, ok := s.claims.get(key, fence); ok {
		wr, err := ref.Update(ctx, w.update(k.now(), k.createdAt), firestore.LastUpdateTime(k.updateTime))
		if err == nil {
			return wrote(k.createdAt, wr)
		}
		if ctx.Err() != nil {
			return false, mapError(ctx, w.op, err)
		}
		lastErr = err
	}
	for attempt := 0; ; attempt++ {
		d, err := s.read(ctx, w.op, key, ref)
		if err != nil {
			return false, err
		}
		if w.landed != nil && w.landed(d) {
			s.claims.drop(key, fence)
			return true, nil // a commit whose answer was lost
		}
		if !d.holds(fence) {
			s.claims.drop(key, fence)
			return false, nil
		}
		if lastErr != nil && !contended(lastErr) {
			return false, w.commitErr(ctx, lastErr)
		}
		if attempt == maxAttempts {
			return false, contention(w.op)
		}
		wr, err := ref.Update(ctx, w.update(d.now(), d.createdAt), firestore.LastUpdateTime(d.updateTime))
		if err == nil {
			return wrote(d.createdAt, wr)
		}
		if ctx.Err() != nil {
			return false, mapError(ctx, w.op, err)
		}
		lastErr = err
		if contended(err) {
			if err := pause(ctx, w.op, attempt+1); err != nil {
				return false, err
			}
		}
	}
}

// Get implements [store.Store] and [store.Records]: one read (one RPC,
// outside any transaction). A record is live while the read time Firestore
// reports is before its expiry.
func (s *Store) Get(ctx context.Context, key string) (store.Record, bool, error) {
	const op = "get"
	if err := engine.ValidateKey(key); err != nil {
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
	if err := engine.ValidateKey(key); err != nil {
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
		c := tombstone(key, d.fence, newWriteID())
		ids = append(ids, c.writeID)
		_, err = ref.Update(ctx, c.fields(), firestore.LastUpdateTime(d.updateTime))
		if err == nil {
			s.claims.drop(key, d.fence)
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
			expireAt: lifetimeEnd(d.now(), ttl, rec.Fence, false), writeID: newWriteID(),
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
	if err := engine.ValidateKey(rec.Key); err != nil {
		return err
	}
	if !rec.State.Done() {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "put", fmt.Sprintf("a record needs an outcome state (completed or not-replayable, got %v)", rec.State), nil)
	}
	return engine.ValidateTTL("put", ttl)
}
