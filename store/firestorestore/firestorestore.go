package firestorestore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"cloud.google.com/go/firestore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/firestorelock"
	"github.com/idemkit/idemkit/store"
)

var _ store.Store = (*Store)(nil)

// DefaultCollection is the default of [WithCollection].
const DefaultCollection = "idemkit_records"

// Field names of a record document. [FieldExpireAt] is the field to name
// in a TTL policy; [Store.Sweep] queries it through Firestore's automatic
// single-field index. [FieldResponse] needs no index and can be exempted
// from indexing (see the package documentation).
const (
	FieldKey         = firestorelock.FieldKey       // the record key: a string, or bytes when it is not valid UTF-8
	FieldFingerprint = "fingerprint"                // the request's fingerprint: a string, or bytes when it is not valid UTF-8
	FieldState       = "state"                      // the record's state (an integer: 1 completed, 2 not replayable)
	FieldResponse    = "response"                   // the encoded response (bytes)
	FieldFence       = firestorelock.FieldFence     // the fence the record was written under (an integer)
	FieldCreatedAt   = "createdAt"                  // when the record was written (client clock)
	FieldExpiresAt   = firestorelock.FieldExpiresAt // when the record expires (client clock)
	FieldExpireAt    = firestorelock.FieldExpireAt  // expiresAt + lock.CleanupGrace: when the document may be deleted
	FieldWriteID     = "writeId"                    // a random id of the Put that wrote the record, by which a Put whose answer was lost recognises its own write
)

// writeIDBytes is the length of a write id: a fresh [lock.NewID].
const writeIDBytes = lock.IDLen

// Size limits and defaults.
const (
	// MaxDocumentBytes is Firestore's limit on a document's size (1 MiB),
	// counted as Firestore counts storage size: the document name, each
	// field's name and value, and 32 bytes.
	MaxDocumentBytes = 1 << 20
	// DocumentMargin is how far below [MaxDocumentBytes] the store keeps
	// every record document, by its own count, so that a small difference
	// in how a Firestore release counts never turns into a failed write.
	DocumentMargin = 1 << 10
	// DefaultMaxResponseBytes is the default of [WithMaxResponseBytes]: no
	// limit of its own below what fits in a document.
	DefaultMaxResponseBytes = MaxDocumentBytes
	// DefaultSweepBatch is the default of [WithSweepBatch].
	DefaultSweepBatch = 100
	// MaxSweepBatch is the largest [WithSweepBatch]: the deletes of one
	// batch are one commit, and a commit holds at most 500 writes.
	MaxSweepBatch = 500
	// DefaultTransactionAttempts is the default of
	// [WithTransactionAttempts].
	DefaultTransactionAttempts = 10
)

// Option configures [New].
type Option func(*config)

type config struct {
	collection    string
	logger        *slog.Logger
	hasher        lock.Hasher
	clock         func() time.Time
	maxResponse   int
	sweepBatch    int
	skewTolerance time.Duration
	attempts      int
	docLimit      int // the largest document, by the store's count; tests raise it
}

// WithCollection sets the collection of the record documents: 1 to 100
// bytes of ASCII letters, digits, "_", "-" and "." (see
// [firestorelock.CheckCollection]). Keep it apart from the locker's
// collections. Default: "idemkit_records".
func WithCollection(name string) Option { return func(c *config) { c.collection = name } }

// WithLogger sets the logger for clock-skew warnings and sweeper failures.
// Log lines never contain a raw record key. Default: slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithHasher sets how warnings name their record key. Default:
// lock.DefaultHasher().
func WithHasher(h lock.Hasher) Option { return func(c *config) { c.hasher = h } }

// WithClock sets the clock that stamps records and judges their expiry:
// the client's clock is the time authority on Firestore (see the package
// documentation). Tests inject a fake one. Default: time.Now.
func WithClock(now func() time.Time) Option { return func(c *config) { c.clock = now } }

// WithMaxResponseBytes sets the largest response Put accepts, 1 to
// [MaxDocumentBytes]; a larger one is refused with an error matching
// [store.ErrTooLarge] before any I/O (the guard then records the execution
// as not replayable). Whatever the limit, a response is also refused when
// its record document would not fit Firestore's document limit (see
// [Store.MaxResponseBytes]). Default: [DefaultMaxResponseBytes], so only the
// document limit applies.
func WithMaxResponseBytes(n int) Option { return func(c *config) { c.maxResponse = n } }

// WithSweepBatch sets how many expired records one transaction of
// [Store.Sweep] deletes at most, 1 to [MaxSweepBatch]. Default: 100.
func WithSweepBatch(n int) Option { return func(c *config) { c.sweepBatch = n } }

// WithSkewTolerance sets how far the client clock may differ from
// Firestore's, as measured at each Put, before a warning is logged (at
// most once a minute, see [firestorelock.SkewMonitor]); 0 turns the warning
// off. Negative values are refused. Default:
// [firestorelock.DefaultSkewTolerance] (500 ms).
func WithSkewTolerance(d time.Duration) Option { return func(c *config) { c.skewTolerance = d } }

// WithTransactionAttempts sets how many times the client tries a
// transaction of Put, Delete or Sweep that Firestore aborted for
// contention (another transaction on the same document) before the
// operation fails with ServiceUnavailable, 1 to 100. Default: 10.
func WithTransactionAttempts(n int) Option { return func(c *config) { c.attempts = n } }

func newConfig(opts []Option) (config, error) {
	c := config{
		collection: DefaultCollection, clock: time.Now, maxResponse: DefaultMaxResponseBytes,
		sweepBatch: DefaultSweepBatch, skewTolerance: firestorelock.DefaultSkewTolerance,
		attempts: DefaultTransactionAttempts, docLimit: MaxDocumentBytes - DocumentMargin,
	}
	for _, o := range opts {
		o(&c)
	}
	if err := firestorelock.CheckCollection("record collection", c.collection); err != nil {
		return config{}, err
	}
	bad := func(detail string) (config, error) {
		return config{}, idemkit.NewError(idemkit.CodeInvalidArgument, "new", detail, nil)
	}
	switch {
	case c.clock == nil:
		return bad("the clock must not be nil")
	case c.maxResponse < 1 || c.maxResponse > MaxDocumentBytes:
		return bad(fmt.Sprintf("the maximum response size must be 1 to %d bytes", MaxDocumentBytes))
	case c.sweepBatch < 1 || c.sweepBatch > MaxSweepBatch:
		return bad(fmt.Sprintf("the sweep batch must be 1 to %d", MaxSweepBatch))
	case c.skewTolerance < 0:
		return bad("the skew tolerance must not be negative")
	case c.attempts < 1 || c.attempts > 100:
		return bad("the transaction attempts must be 1 to 100")
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	if c.hasher == nil {
		c.hasher = lock.DefaultHasher()
	}
	return c, nil
}

// Store is a [store.Store] on Firestore. Its methods are safe for
// concurrent use.
//
// The zero value is not usable; call [New].
type Store struct {
	client  *firestore.Client
	records *firestore.CollectionRef
	cfg     config
	skew    *firestorelock.SkewMonitor
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
	return &Store{
		client:  client,
		records: client.Collection(cfg.collection),
		cfg:     cfg,
		skew:    firestorelock.NewSkewMonitor(cfg.logger, cfg.hasher, cfg.skewTolerance),
	}, nil
}

// Client returns the Firestore client the store was built on.
func (s *Store) Client() *firestore.Client { return s.client }

// Collection returns the name of the record collection.
func (s *Store) Collection() string { return s.cfg.collection }

// Skew returns the clock skew measured at the store's last Put (see
// [firestorelock.SkewMonitor.Last]).
func (s *Store) Skew() time.Duration { return s.skew.Last() }

// now reads the clock at Firestore's resolution.
func (s *Store) now() time.Time { return firestorelock.Micro(s.cfg.clock()) }

// ref returns the document of a record key (any bytes, taken as it is).
func (s *Store) ref(key string) *firestore.DocumentRef {
	return s.records.Doc(firestorelock.DocID(key))
}

// Get implements [store.Store]: one read, outside any transaction (it
// takes no document lock). A record is visible while the client clock is
// before its expiresAt.
func (s *Store) Get(ctx context.Context, key string) (store.Record, bool, error) {
	const op = "get"
	if err := store.ValidateKey(key); err != nil {
		return store.Record{}, false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return store.Record{}, false, err
	}
	snaps, err := s.client.GetAll(ctx, []*firestore.DocumentRef{s.ref(key)})
	if err != nil {
		return store.Record{}, false, firestorelock.MapError(ctx, op, err)
	}
	if !snaps[0].Exists() {
		return store.Record{}, false, nil
	}
	rec, err := decode(op, key, snaps[0])
	if err != nil || !lock.Live(rec.ExpiresAt, s.now()) {
		return store.Record{}, false, err
	}
	return rec, true, nil
}

// Put implements [store.Store]: one read-write transaction that reads the
// record document and writes the whole record unless the stored one is
// live (by the client clock) and carries a higher fence; then it writes
// nothing and answers false. createdAt is the client clock at the read,
// expiresAt createdAt + ttl, and expireAt expiresAt + [lock.CleanupGrace].
//
// A response whose record document would not fit (see [Store.MaxResponseBytes])
// is refused with [store.ErrTooLarge] before any I/O.
//
// Every run of the transaction writes a fresh random write id with the
// record ([FieldWriteID]). A failed transaction that got as far as its
// write is an unknown outcome: the client retries a commit whose answer was
// lost, and the retry of a transaction that has committed fails
// (InvalidArgument, "the transaction is invalid or closed"). So, unless ctx
// has ended, one read settles it: the record landed if the document now
// carries one of this call's write ids, and Put answers true. Otherwise the
// failure is reported (see [Store.putError]), and never as a configuration
// error.
func (s *Store) Put(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	const op = "put"
	if err := store.ValidatePut(rec, ttl); err != nil {
		return false, err
	}
	if rec.Fence > lock.FenceMax {
		return false, idemkit.NewError(idemkit.CodeInvalidArgument, op, fmt.Sprintf("fence %s exceeds the maximum %s", rec.Fence, lock.FenceMax), nil)
	}
	if limit := s.maxResponse(rec.Key, rec.Fingerprint); len(rec.Response) > limit {
		return false, store.TooLarge(op, len(rec.Response), limit)
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return false, err
	}
	ref := s.ref(rec.Key)
	var (
		stored    bool
		writes    []string // the write ids of the runs that wrote the record
		sent      time.Time
		committed firestore.CommitResponse
	)
	err := s.client.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		stored = false
		snaps, err := tx.GetAll([]*firestore.DocumentRef{ref})
		if err != nil {
			return err
		}
		now := s.now()
		if snaps[0].Exists() {
			old, err := decode(op, rec.Key, snaps[0])
			if err != nil {
				return err
			}
			if lock.Live(old.ExpiresAt, now) && old.Fence > rec.Fence {
				return nil // refused: nothing to write
			}
		}
		stored = true
		sent = s.cfg.clock()
		id := lock.NewID()
		writes = append(writes, id)
		return tx.Set(ref, recordData(rec, now, firestorelock.Micro(now.Add(ttl)), id))
	}, firestore.MaxAttempts(s.cfg.attempts), firestore.WithCommitResponseTo(&committed))
	received := s.cfg.clock()
	if err != nil {
		return s.putFailed(ctx, op, rec, writes, err)
	}
	if stored {
		if wrs, _ := committed.WriteResults(); len(wrs) > 0 {
			s.skew.Observe(ctx, op, rec.Key, sent, received, wrs[0].UpdateTime)
		}
	}
	return stored, nil
}

// putFailed settles a Put whose transaction failed with err after runs
// that wrote the record under the write ids writes (none when no run got
// as far as its write). Unless no run wrote, the function itself failed
// (a malformed document) or ctx has ended, one read decides: the record
// landed, and Put answers true, when the document carries one of writes.
// When the read fails, the outcome stays unknown and the error is
// transient ([firestorelock.MapCommitError]).
func (s *Store) putFailed(ctx context.Context, op string, rec store.Record, writes []string, err error) (bool, error) {
	var le *idemkit.Error
	if len(writes) == 0 || ctx.Err() != nil || errors.As(err, &le) {
		return false, firestorelock.MapError(ctx, op, err)
	}
	snaps, rerr := s.client.GetAll(ctx, []*firestore.DocumentRef{s.ref(rec.Key)})
	if rerr != nil {
		return false, firestorelock.MapCommitError(ctx, op, err)
	}
	if id, ok := snaps[0].Data()[FieldWriteID].(string); ok && slices.Contains(writes, id) {
		return true, nil // the commit landed; its answer was lost
	}
	return false, s.putError(ctx, op, rec, err)
}

// putError maps the error of a Put whose commit a read has shown not to
// have landed. Firestore refuses a document over its size limit with
// InvalidArgument. The store's own exact count refuses such a record before
// any I/O, but should a Firestore release count differently, an
// InvalidArgument answer to the write of a large document (over half the
// limit: nothing else in a record this store writes can be invalid) is
// reported as [store.ErrTooLarge], so the guard records the execution as
// not replayable. Any other InvalidArgument (say, the retry of a commit
// whose transaction was closed without landing) is transient, never a
// configuration error ([firestorelock.MapCommitError]). The read comes
// first because the retry of a commit that did land gets InvalidArgument
// too, and taking that for ErrTooLarge would overwrite a completed record
// as not replayable.
func (s *Store) putError(ctx context.Context, op string, rec store.Record, err error) error {
	if status.Code(err) == codes.InvalidArgument && ctx.Err() == nil &&
		documentSize(s.cfg.collection, rec.Key, rec.Fingerprint, len(rec.Response)) > MaxDocumentBytes/2 {
		return idemkit.NewError(idemkit.CodeInvalidArgument, op,
			fmt.Sprintf("Firestore refused the record document of a %d-byte response (its document limit is %d bytes)", len(rec.Response), MaxDocumentBytes),
			fmt.Errorf("%w: %w", store.ErrTooLarge, firestorelock.MapError(ctx, op, err)))
	}
	return firestorelock.MapCommitError(ctx, op, err)
}

// Delete implements [store.Store]: one read-write transaction that reads
// the record document and deletes it, and reports whether it held a live
// record.
//
// A failed transaction that got as far as its delete is an unknown
// outcome (the retry of a commit whose answer was lost fails once the
// transaction has committed), settled by one read unless ctx has ended:
// when the document is gone, Delete answers what the transaction saw. So
// does a run of the transaction that the client repeats and that finds the
// document gone after an earlier run reached its delete (that run's commit
// may have landed; the answer is the earlier run's, even if another caller
// deleted the record in between).
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
		live    bool // whether the last run that reached its delete saw a live record
		reached bool // whether a run reached its delete
	)
	err := s.client.RunTransaction(ctx, func(ctx context.Context, tx *firestore.Transaction) error {
		snaps, err := tx.GetAll([]*firestore.DocumentRef{ref})
		if err != nil || !snaps[0].Exists() {
			return err // gone: live stays what an earlier run saw
		}
		expires, ok := snaps[0].Data()[FieldExpiresAt].(time.Time)
		live, reached = ok && lock.Live(expires, s.now()), true
		return tx.Delete(ref)
	}, firestore.MaxAttempts(s.cfg.attempts))
	if err != nil {
		if !reached || ctx.Err() != nil {
			return false, firestorelock.MapError(ctx, op, err)
		}
		snaps, rerr := s.client.GetAll(ctx, []*firestore.DocumentRef{ref})
		if rerr == nil && !snaps[0].Exists() {
			return live, nil // the delete landed; its answer was lost
		}
		return false, firestorelock.MapCommitError(ctx, op, err)
	}
	return live, nil
}

// recordData is the whole record document.
func recordData(rec store.Record, created, expires time.Time, writeID string) map[string]any {
	response := rec.Response
	if response == nil {
		response = []byte{}
	}
	return map[string]any{
		FieldKey:         firestorelock.Text(rec.Key),
		FieldFingerprint: firestorelock.Text(rec.Fingerprint),
		FieldState:       int64(rec.State),
		FieldResponse:    response,
		FieldFence:       int64(rec.Fence),
		FieldCreatedAt:   created,
		FieldExpiresAt:   expires,
		FieldExpireAt:    expires.Add(lock.CleanupGrace),
		FieldWriteID:     writeID,
	}
}

// malformed is the error for a record document this package did not
// write as it reads it. The detail names the field, never a key.
func malformed(op, what string) error {
	return idemkit.NewError(idemkit.CodeInternal, op, "malformed record document: "+what, nil)
}

// decode reads the record document of key. It checks that the document
// holds that very key, so a document copied or edited by hand under
// another id is reported rather than trusted.
func decode(op, key string, snap *firestore.DocumentSnapshot) (store.Record, error) {
	m := snap.Data()
	rec := store.Record{Key: key}
	stored, ok := firestorelock.FromText(m[FieldKey])
	switch {
	case !ok:
		return store.Record{}, malformed(op, "the key field is missing or not text")
	case stored != key || firestorelock.DocID(stored) != snap.Ref.ID:
		return store.Record{}, malformed(op, "the record's key does not match its document id")
	}
	if rec.Fingerprint, ok = firestorelock.FromText(m[FieldFingerprint]); !ok {
		return store.Record{}, malformed(op, "the fingerprint field is missing or not text")
	}
	state, ok := m[FieldState].(int64)
	if rec.State = store.State(state); !ok || state < 0 || state > 255 || !rec.State.Valid() {
		return store.Record{}, malformed(op, "the state field is missing or not a known state")
	}
	switch v := m[FieldResponse].(type) {
	case []byte:
		if len(v) > 0 {
			rec.Response = v
		}
	case nil:
	default:
		return store.Record{}, malformed(op, "the response field is not bytes")
	}
	if rec.Fence, ok = firestorelock.DecodeFence(m[FieldFence]); !ok {
		return store.Record{}, malformed(op, "the fence field is missing or not a non-negative integer")
	}
	if rec.CreatedAt, ok = m[FieldCreatedAt].(time.Time); !ok {
		return store.Record{}, malformed(op, "the createdAt field is missing or not a timestamp")
	}
	if rec.ExpiresAt, ok = m[FieldExpiresAt].(time.Time); !ok {
		return store.Record{}, malformed(op, "the expiresAt field is missing or not a timestamp")
	}
	return rec, nil
}
