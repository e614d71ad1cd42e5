package pgstore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/engine"
)

// DB is what the store needs of a PostgreSQL client: a *pgxpool.Pool, a
// *pgx.Conn (never used by two goroutines at once) or a pgx.Tx (whose
// commit carries every operation).
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

var (
	_ DB = (*pgxpool.Pool)(nil)
	_ DB = (*pgx.Conn)(nil)
	_ DB = (pgx.Tx)(nil)

	_ store.Store   = (*Store)(nil)
	_ store.Records = (*Store)(nil)
	_ store.Watcher = (*Store)(nil)
	_ store.Stepper = (*Store)(nil)
)

// Option configures [New] and [SetupSchema].
type Option func(*config)

type config struct {
	tableName   string
	table       tableName
	maxResponse int
	logger      *slog.Logger
	sweepBatch  int
	maxStep     time.Duration // the largest clock step fences survive

	txIso pgx.TxIsoLevel // of the work's transactions (Tx)

	listenSet  bool                                         // WithListenConn was given
	listenConn func(ctx context.Context) (*pgx.Conn, error) // nil: none
	listenIdle time.Duration                                // how long the listener outlives its last watch
}

// WithTable sets the record table: "table" or "schema.table", each part
// matching [A-Za-z_][A-Za-z0-9_]* (the table at most 48 bytes, the schema
// 63), always quoted. Default: "idemkit_records".
func WithTable(name string) Option { return func(c *config) { c.tableName = name } }

// WithMaxResponseBytes sets the largest response Complete and Put accept,
// 1 to 1,073,741,823 bytes (a bytea's limit); a larger one fails with
// [store.ErrTooLarge] before any I/O. Default: 8 MiB, enough for any
// response worth replaying.
func WithMaxResponseBytes(n int) Option { return func(c *config) { c.maxResponse = n } }

// WithLogger sets the logger for sweeper failures. Log lines never contain
// a record key. Default: slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithMaxClockStep sets the largest step back of the server's clock (or
// of a failover's against the old primary's) that fences survive: the
// step of [store.Store]'s fence rule, for which rows and tombstones are
// kept. Give every store on a table the same. At least 0. Default: one
// minute.
func WithMaxClockStep(d time.Duration) Option { return func(c *config) { c.maxStep = d } }

// WithSweepBatch sets how many rows one DELETE of [Store.Sweep] removes at
// most, at least 1. Default: 1000.
func WithSweepBatch(n int) Option { return func(c *config) { c.sweepBatch = n } }

// WithListenConn sets how the store opens the connection it listens on
// ([Store.Watch]), one of its own that it closes when it stops listening.
// nil turns listening off (waiters poll), as behind a proxy that pools
// connections per transaction. Default: on a *pgxpool.Pool, a connection
// taken out of the pool (Acquire, then Hijack); on any other [DB], none.
func WithListenConn(connect func(ctx context.Context) (*pgx.Conn, error)) Option {
	return func(c *config) { c.listenSet, c.listenConn = true, connect }
}

// WithTxIsolation sets the isolation level of the transactions [Tx]
// begins: pgx.ReadCommitted, pgx.RepeatableRead or pgx.Serializable (then
// work must end before the guard first renews its lease, which changes the
// record's row after the snapshot). Default: pgx.ReadCommitted.
func WithTxIsolation(level pgx.TxIsoLevel) Option { return func(c *config) { c.txIso = level } }

// Defaults and bounds of the options, as their documentation states them.
const (
	defaultMaxResponseBytes = 8 << 20
	maxResponseLimit        = 1<<30 - 1 // the largest bytea value
	defaultSweepBatch       = 1000
	defaultListenIdle       = time.Minute
	defaultMaxClockStep     = time.Minute
)

func newConfig(opts []Option) (config, error) {
	c := config{tableName: defaultTable, maxResponse: defaultMaxResponseBytes, sweepBatch: defaultSweepBatch, listenIdle: defaultListenIdle,
		txIso: pgx.ReadCommitted, maxStep: defaultMaxClockStep}
	for _, o := range opts {
		o(&c)
	}
	var err error
	if c.table, err = parseTableName(c.tableName); err != nil {
		return config{}, err
	}
	bad := func(detail string) (config, error) {
		return config{}, idemkit.NewError(idemkit.CodeInvalidArgument, "new", detail, nil)
	}
	switch {
	case c.maxResponse < 1 || c.maxResponse > maxResponseLimit:
		return bad(fmt.Sprintf("the maximum response size must be 1 to %d bytes", maxResponseLimit))
	case c.sweepBatch < 1:
		return bad("the sweep batch must be at least 1")
	case c.maxStep < 0:
		return bad("the largest clock step (WithMaxClockStep) must be 0 or more")
	case c.txIso != pgx.ReadCommitted && c.txIso != pgx.RepeatableRead && c.txIso != pgx.Serializable:
		return bad("the isolation level of the work's transactions must be pgx.ReadCommitted, pgx.RepeatableRead or pgx.Serializable")
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	return c, nil
}

// Store is the PostgreSQL engine: a [store.Store], [store.Watcher],
// [store.Records] and [store.Lister], with [Store.FindClaim] for the lock
// library, one row per record key. It is safe for concurrent use when its
// [DB] is (a pool is; a *pgx.Conn or a pgx.Tx is not).
type Store struct {
	db     DB
	inTx   bool // db is a caller's transaction: no retries, no asynchronous commits
	cfg    config
	q      queries
	lis    *listener // nil: the store does not listen (Watch never fires)
	shared sharing   // claims of one key in flight together

	// The claims whose work holds a transaction (see Tx), by workID, and
	// the connection that renews their leases (nil: the DB renews them).
	held    sync.Map
	renewer *renewer
	starved atomic.Bool // a starved pool was logged
}

// New returns a store on db and the table named by opts, which must exist
// ([SetupSchema]). It validates the options (InvalidArgument) and sends
// nothing to the server.
func New(db DB, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "new", "a database client is required", nil)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	_, inTx := db.(pgx.Tx)
	s := &Store{db: db, inTx: inTx, cfg: cfg, q: buildQueries(cfg.table, cfg.maxStep, !inTx)}
	connect := cfg.listenConn
	if pool, ok := db.(*pgxpool.Pool); ok && !cfg.listenSet {
		connect = hijack(pool)
	}
	if connect != nil && !inTx {
		s.lis = newListener(cfg.table.channel(), connect, cfg.listenIdle, cfg.logger)
	}
	switch c := db.(type) {
	case *pgxpool.Pool:
		s.renewer = &renewer{config: c.Config().ConnConfig, sem: make(chan struct{}, 1)}
	case *pgx.Conn:
		s.renewer = &renewer{config: c.Config(), sem: make(chan struct{}, 1)}
	}
	return s, nil
}

// storedKey returns the key column's value: the key itself when it is
// printable ASCII not starting with `\x` (alike in every server encoding),
// else `\x` and the hex of its bytes, which no verbatim key equals.
func storedKey(key string) string {
	if verbatim(key) {
		return key
	}
	return `\x` + hex.EncodeToString([]byte(key))
}

func verbatim(key string) bool {
	if strings.HasPrefix(key, `\x`) {
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return false
		}
	}
	return true
}

// checkFence refuses a fence no record can carry (above idemkit.FenceMax,
// which also keeps it within a bigint).
func checkFence(op string, f idemkit.Fence) error {
	if f > idemkit.FenceMax {
		return idemkit.NewError(idemkit.CodeInvalidArgument, op, fmt.Sprintf("fence %s exceeds the maximum %s", f, idemkit.FenceMax), nil)
	}
	return nil
}

// row holds the columns of a record as the queries return them.
type row struct {
	fp                   []byte
	state                int16
	response             []byte
	fence                int64
	createdAt, expiresAt time.Time
	steps                []byte // the steps column (see encodeStep); nil when NULL
}

// dest returns the scan destinations of the record's columns without
// steps; withSteps, with them.
func (r *row) dest() []any {
	return []any{&r.fp, &r.state, &r.response, &r.fence, &r.createdAt, &r.expiresAt}
}

func (r *row) withSteps() []any { return append(r.dest(), &r.steps) }

// record checks the row and turns it into the record under key.
func (r *row) record(op, key string) (store.Record, error) {
	st := store.State(r.state)
	if r.state < 0 || !st.Valid() || r.fence < 0 {
		return store.Record{}, idemkit.NewError(idemkit.CodeInternal, op, fmt.Sprintf("the stored record has state %d and fence %d", r.state, r.fence), nil)
	}
	rec := store.Record{
		Key: key, Fingerprint: string(r.fp), State: st, Fence: idemkit.Fence(r.fence),
		CreatedAt: r.createdAt, ExpiresAt: r.expiresAt,
	}
	if st.Done() && len(r.response) > 0 {
		rec.Response = r.response
	} else if st == store.StateCompleted {
		rec.Response = []byte{}
	}
	if st == store.StateClaimed && r.steps != nil {
		steps, err := decodeSteps(r.steps)
		if err != nil {
			return store.Record{}, idemkit.NewError(idemkit.CodeInternal, op, "the stored steps are not as pgstore writes them", err)
		}
		rec.Steps = steps
	}
	return rec, nil
}

// maxClaimTries bounds the tries of a claim whose row changed under it
// unreadably (see [claimSQL]): a racing claim won and ended at once.
const maxClaimTries = 4

// checkOutcome refuses an outcome no row can hold.
func (s *Store) checkOutcome(op string, rec store.Record) error {
	if err := checkFence(op, rec.Fence); err != nil {
		return err
	}
	if len(rec.Response) > s.cfg.maxResponse {
		return engine.TooLarge(op, len(rec.Response), s.cfg.maxResponse)
	}
	return nil
}

// response is rec's response for a NOT NULL bytea column.
func response(rec store.Record) []byte {
	if rec.Response == nil {
		return []byte{}
	}
	return rec.Response
}

// Claim implements [store.Store] in one statement ([claimSQL]); a refused
// claim writes nothing and locks nothing. Claims of one key that run at
// once in this process share a statement (see sharing), except in a
// caller's transaction.
func (s *Store) Claim(ctx context.Context, key, fp string, ttl time.Duration) (store.Record, bool, error) {
	const op = "claim"
	if err := engine.Ready(ctx, op, engine.ValidateKey(key), engine.ValidateTTL(op, ttl)); err != nil {
		return store.Record{}, false, err
	}
	sk := storedKey(key)
	if s.inTx {
		return s.claim(ctx, key, sk, fp, ttl)
	}
	return s.shared.claim(ctx, sk, func() (store.Record, bool, error) { return s.claim(ctx, key, sk, fp, ttl) })
}

func (s *Store) claim(ctx context.Context, key, sk, fp string, ttl time.Duration) (store.Record, bool, error) {
	const op = "claim"
	fpb, micros := []byte(fp), ttl.Microseconds()
	for try := 1; ; try++ {
		var (
			r       row
			claimed bool
		)
		// Repeated after a lost connection too: should the lost try have
		// committed, the next finds its claim and answers busy until the
		// lease runs out, a delay, never a second execution.
		found, err := s.read(ctx, op, s.q.claim, []any{sk, fpb, micros}, append([]any{&claimed}, r.withSteps()...)...)
		if err != nil {
			return store.Record{}, false, s.starvedPool(ctx, err)
		}
		if found {
			rec, err := r.record(op, key)
			if err != nil || !claimed {
				return rec, false, err
			}
			// A take-over answers with the replaced row's fingerprint
			// and response (see claimSQL); a new claim's are fp and empty.
			if len(r.response) > 0 {
				rec.Replaced = &store.Record{Fingerprint: string(r.fp), Response: r.response}
			}
			rec.Fingerprint = fp
			return rec, true, nil
		}
		if try == maxClaimTries {
			return store.Record{}, false, idemkit.NewError(idemkit.CodeServiceUnavailable, op,
				fmt.Sprintf("the key's record changed under %d claims in a row", try), nil)
		}
		if err := idemkit.CheckContext(ctx, op); err != nil {
			return store.Record{}, false, err
		}
	}
}

// Extend implements [store.Store]: one UPDATE guarded by the fence, the
// claimed state and the lease, returning the expiry it wrote.
func (s *Store) Extend(ctx context.Context, key string, fence idemkit.Fence, ttl time.Duration) (time.Time, bool, error) {
	const op = "extend"
	if err := engine.Ready(ctx, op, engine.ValidateFenced(op, key, fence), engine.ValidateTTL(op, ttl), checkFence(op, fence)); err != nil {
		return time.Time{}, false, err
	}
	sk := storedKey(key)
	var until time.Time
	if w, ok := s.held.Load(workID{sk, int64(fence)}); ok && s.renewer != nil {
		// The work's own transaction holds a connection: the renewal must
		// not wait for another behind it (see renewer).
		done, err := s.renewer.extend(ctx, &until, s.q.extend, sk, int64(fence), ttl.Microseconds())
		if done {
			w.(*work).renewed.Store(true)
		}
		return until, done, s.starvedPool(ctx, err)
	}
	done, err := s.fenced(ctx, op, true, &until, s.q.extend, sk, int64(fence), ttl.Microseconds())
	return until, done, s.starvedPool(ctx, err)
}

// Complete implements [store.Store]: one UPDATE, durable; a repeat of one
// that landed (its answer lost) is reported done.
func (s *Store) Complete(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	const op = "complete"
	if err := engine.Ready(ctx, op, engine.ValidateComplete(rec, ttl), s.checkOutcome(op, rec)); err != nil {
		return false, err
	}
	sk := storedKey(rec.Key)
	var done bool
	err := retry(ctx, op, s.inTx, func(ctx context.Context, _ int) (bool, error) {
		tag, err := s.db.Exec(ctx, s.q.complete, sk, int64(rec.Fence), int16(rec.State),
			response(rec), []byte(rec.Fingerprint), ttl.Microseconds())
		done = err == nil && tag.RowsAffected() == 1
		return true, err
	})
	s.ended(sk, done)
	return done, s.starvedPool(ctx, err)
}

// Release implements [store.Store]: one UPDATE, committed asynchronously,
// that leaves a tombstone; after a lost connection, the claim's tombstone
// says it was done.
func (s *Store) Release(ctx context.Context, key string, fence idemkit.Fence) (bool, error) {
	const op = "release"
	if err := engine.Ready(ctx, op, engine.ValidateFenced(op, key, fence), checkFence(op, fence)); err != nil {
		return false, err
	}
	sk := storedKey(key)
	var done bool
	err := retry(ctx, op, s.inTx, func(ctx context.Context, try int) (bool, error) {
		sql := s.q.release
		if try > 0 {
			sql = s.q.releaseAgain
		}
		var err error
		done, err = scanOne(s.db.QueryRow(ctx, sql, sk, int64(fence)), nil)
		return true, err
	})
	s.ended(sk, done && err == nil)
	return done && err == nil, err
}

// ended wakes the watches of the stored key sk in this process at once
// when a claim on it ended here (done), before its notification arrives.
func (s *Store) ended(sk string, done bool) {
	if done {
		s.lis.wake(sk)
	}
}

// read runs a repeatable statement of one row or none, scanned into dest.
func (s *Store) read(ctx context.Context, op, sql string, args []any, dest ...any) (found bool, err error) {
	err = retry(ctx, op, s.inTx, func(ctx context.Context, _ int) (bool, error) {
		err := s.db.QueryRow(ctx, sql, args...).Scan(dest...)
		found = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
		return true, err
	})
	return found && err == nil, err
}

// fenced runs a statement that returns one row, of one column scanned
// into dest (nil: a boolean), when it took effect.
func (s *Store) fenced(ctx context.Context, op string, repeatable bool, dest any, sql string, args ...any) (bool, error) {
	var done bool
	err := retry(ctx, op, s.inTx, func(ctx context.Context, _ int) (bool, error) {
		var err error
		done, err = scanOne(s.db.QueryRow(ctx, sql, args...), dest)
		return repeatable, err
	})
	return done && err == nil, err
}

// scanOne scans row's one column into dest (nil: a boolean) and reports
// whether there was a row (and, for a boolean, whether it was true).
func scanOne(row pgx.Row, dest any) (bool, error) {
	var b bool
	if dest == nil {
		dest = &b
	} else {
		b = true
	}
	err := row.Scan(dest)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return b && err == nil, err
}

// RecordStep implements [store.Stepper]: one UPDATE guarded by the fence,
// the claimed state and the number of steps, that appends the step and
// keeps the row at least keep from now. Not repeated after a lost
// connection: a repeat of one that landed would be refused, as the step
// it recorded is there.
func (s *Store) RecordStep(ctx context.Context, key string, fence idemkit.Fence, index int, step store.Step, keep time.Duration) (bool, error) {
	const op = "record-step"
	if err := engine.Ready(ctx, op, engine.ValidateStep(key, fence, index, step, keep), checkFence(op, fence)); err != nil {
		return false, err
	}
	return s.fenced(ctx, op, false, nil, s.q.recordStep, storedKey(key), int64(fence), index, encodeStep(step), keep.Microseconds())
}

// Get implements [store.Store] and [store.Records]: one read.
func (s *Store) Get(ctx context.Context, key string) (store.Record, bool, error) {
	const op = "get"
	if err := engine.Ready(ctx, op, engine.ValidateKey(key)); err != nil {
		return store.Record{}, false, err
	}
	var r row
	found, err := s.read(ctx, op, s.q.get, []any{storedKey(key)}, r.withSteps()...)
	if err != nil || !found {
		return store.Record{}, false, err
	}
	rec, err := r.record(op, key)
	return rec, err == nil, err
}

// FindClaim returns the live claim whose fingerprint is fp, a lock id (22
// characters of A-Z, a-z, 0-9, - and _), for the lock library: one read by
// a partial index that only lock ids enter (the guard's writes never do).
// Any other fp finds nothing, without I/O.
func (s *Store) FindClaim(ctx context.Context, fp string) (store.Record, bool, error) {
	const op = "find-claim"
	if !engine.LockID(fp) {
		return store.Record{}, false, nil
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return store.Record{}, false, err
	}
	var (
		r  row
		sk string
	)
	found, err := s.read(ctx, op, s.q.findClaim, []any{[]byte(fp)}, append([]any{&sk}, r.withSteps()...)...)
	if err != nil || !found {
		return store.Record{}, false, err
	}
	key, ok := recordKey(sk)
	if !ok {
		return store.Record{}, false, idemkit.NewError(idemkit.CodeInternal, op, "a stored key is neither verbatim nor \\x and hex", nil)
	}
	rec, err := r.record(op, key)
	return rec, err == nil, err
}

// Delete implements [store.Store] and [store.Records]: one UPDATE that
// leaves a tombstone; not repeated after a lost connection (it would find
// nothing). When nothing live was there, a second UPDATE drops the steps
// a released or run-out claim may have left.
func (s *Store) Delete(ctx context.Context, key string) (bool, error) {
	const op = "delete"
	if err := engine.Ready(ctx, op, engine.ValidateKey(key)); err != nil {
		return false, err
	}
	sk := storedKey(key)
	done, err := s.fenced(ctx, op, false, nil, s.q.delete, sk)
	s.ended(sk, done)
	if err == nil && !done {
		// Nothing live: the steps a released or run-out claim left go
		// too (a second statement, on this operator's path only).
		_, err = s.fenced(ctx, op, false, nil, s.q.dropSteps, sk)
	}
	return done, err
}

// Put implements [store.Records]: one durable upsert (repeatable: twice
// leaves what once does).
func (s *Store) Put(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	const op = "put"
	if err := engine.Ready(ctx, op, validatePut(rec, ttl), s.checkOutcome(op, rec)); err != nil {
		return false, err
	}
	return s.fenced(ctx, op, true, nil, s.q.put, storedKey(rec.Key), []byte(rec.Fingerprint), int16(rec.State),
		response(rec), int64(rec.Fence), ttl.Microseconds())
}

// validatePut checks a Put's arguments; the fence may be zero (an
// unfenced writer).
func validatePut(rec store.Record, ttl time.Duration) error {
	if err := engine.ValidateKey(rec.Key); err != nil {
		return err
	}
	if !rec.State.Done() {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "put", "a record needs an outcome state (completed or not-replayable, got "+rec.State.String()+")", nil)
	}
	return engine.ValidateTTL("put", ttl)
}
