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

// DB is what the store needs of a PostgreSQL client, and no more: methods
// that *pgxpool.Pool, *pgx.Conn and pgx.Tx all have.
//
// A *pgxpool.Pool is the usual choice. A *pgx.Conn is one connection and
// not safe for concurrent use: a store built on one must not be used from
// several goroutines at once (nor with a sweeper running). On a pgx.Tx
// every operation is part of that transaction and takes effect when it
// commits.
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
)

// Option configures [New] and [SetupSchema].
type Option func(*config)

type config struct {
	tableName   string
	table       tableName
	maxResponse int
	logger      *slog.Logger
	sweepBatch  int

	txIso pgx.TxIsoLevel // of the work's transactions (Tx)

	listenSet  bool                                         // WithListenConn was given
	listenConn func(ctx context.Context) (*pgx.Conn, error) // nil: none
	listenIdle time.Duration                                // how long the listener outlives its last watch
}

// WithTable sets the record table: "table" or "schema.table", each part a
// letter or underscore followed by letters, digits and underscores (the
// table part at most 48 bytes, the schema 63). Names are always quoted, so
// their case is kept. Default: "idemkit_records".
func WithTable(name string) Option { return func(c *config) { c.tableName = name } }

// WithMaxResponseBytes sets the largest response Complete and Put accept;
// a larger one is refused with an error matching [store.ErrTooLarge] before
// any I/O (the guard then records the execution as not replayable). 1 to
// 1,073,741,823 bytes (the largest bytea value). Default: 8 MiB,
// large enough for any response worth replaying, small enough that a replay
// does not move a huge value through the database.
func WithMaxResponseBytes(n int) Option { return func(c *config) { c.maxResponse = n } }

// WithLogger sets the logger for sweeper failures. Log lines never contain
// a record key. Default: slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithSweepBatch sets how many rows one DELETE of [Store.Sweep] removes at
// most, at least 1. Default: 1000.
func WithSweepBatch(n int) Option { return func(c *config) { c.sweepBatch = n } }

// WithListenConn sets how the store opens the connection it listens on for
// notifications ([Store.Watch]): connect must return a new connection of
// its own, used for nothing else, which the store closes when it stops
// listening. It is called on the first Watch, and again (with back-off:
// 50 ms to 5 s) after the connection was lost; a call that fails or does
// not return within 10 s is retried the same way. nil turns listening off:
// Watch returns a channel that never closes, and waiting duplicates poll,
// as they must behind a proxy that pools connections per transaction
// (where LISTEN does not last beyond its statement).
//
// Default: on a *pgxpool.Pool, a connection taken out of the pool (Acquire,
// then Hijack: the pool no longer counts it and may open another in its
// place, so the server sees at most MaxConns + 1 connections of the pool);
// on any other [DB], none.
func WithListenConn(connect func(ctx context.Context) (*pgx.Conn, error)) Option {
	return func(c *config) { c.listenSet, c.listenConn = true, connect }
}

// WithTxIsolation sets the isolation level of the transactions [Tx]
// begins for guarded work: pgx.ReadCommitted, pgx.RepeatableRead or
// pgx.Serializable. It is set on each BEGIN, whatever the server's or the
// session's default_transaction_isolation says. Above read committed a
// transaction may fail with a serialization failure, which the guard
// answers as a conflict the client may retry (see the package
// documentation, Exactly-once effects); and its work must end before the
// guard renews the claim's lease (every third of the guard's lease TTL):
// a renewal changes the record's row after the transaction's snapshot, so
// the transaction could no longer complete it, and it fails for good,
// saying so. Default: pgx.ReadCommitted.
func WithTxIsolation(level pgx.TxIsoLevel) Option { return func(c *config) { c.txIso = level } }

// Defaults and bounds of the options, as their documentation states them.
const (
	defaultMaxResponseBytes = 8 << 20
	maxResponseLimit        = 1<<30 - 1 // the largest bytea value
	defaultSweepBatch       = 1000
	defaultListenIdle       = time.Minute
)

func newConfig(opts []Option) (config, error) {
	c := config{tableName: defaultTable, maxResponse: defaultMaxResponseBytes, sweepBatch: defaultSweepBatch, listenIdle: defaultListenIdle,
		txIso: pgx.ReadCommitted}
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
	case c.txIso != pgx.ReadCommitted && c.txIso != pgx.RepeatableRead && c.txIso != pgx.Serializable:
		return bad("the isolation level of the work's transactions must be pgx.ReadCommitted, pgx.RepeatableRead or pgx.Serializable")
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	return c, nil
}

// Store is a [store.Store] (records that carry their own lease), a
// [store.Watcher] (waiting duplicates woken by LISTEN/NOTIFY, see
// [Store.Watch]) and a [store.Records] (plain fenced records, for
// [github.com/idemkit/idemkit/middleware.Compose]) on PostgreSQL, one row per record key. Its methods are
// safe for concurrent use when its [DB] is (a pool is; a *pgx.Conn or a
// pgx.Tx is not).
type Store struct {
	db   DB
	inTx bool // db is a caller's transaction: no retries, no asynchronous commits
	cfg  config
	q    queries
	lis  *listener // nil: the store does not listen (Watch never fires)

	// The claims whose work holds a transaction (see Tx), by workID, and
	// the connection that renews their leases (nil: the DB renews them).
	held    sync.Map
	renewer *renewer
	starved atomic.Bool // a starved pool was logged
}

// New returns a store on db, with the table named by opts, which must exist
// (see [SetupSchema]). It validates the options (InvalidArgument) and sends
// nothing to the server (the notification listener starts on the first
// [Store.Watch]).
func New(db DB, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "new", "a database client is required", nil)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	_, inTx := db.(pgx.Tx)
	s := &Store{db: db, inTx: inTx, cfg: cfg, q: buildQueries(cfg.table, !inTx)}
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

// storedKey returns the key column's value for a record key (any bytes):
// the key itself when it is printable ASCII (0x20 to 0x7E) and does not
// start with `\x`; otherwise `\x` followed by the lowercase hex of its
// bytes (PostgreSQL's own notation for bytes). Every encoded key starts
// with `\x` and no verbatim one does, so no two keys share a row; ASCII is
// stored alike in every server encoding.
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
}

func (r *row) dest() []any {
	return []any{&r.fp, &r.state, &r.response, &r.fence, &r.createdAt, &r.expiresAt}
}

// record turns the row into the record under key, checking what the
// database returned.
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
	return rec, nil
}

// maxClaimTries bounds the claims run again because the key's row changed
// under the statement in a way it could not read (see [claimSQL]): each
// such try means that another claim won a race and then ended at once.
const maxClaimTries = 4

// Claim implements [store.Store]: one statement, so one round trip (see
// the package documentation). A claim that finds the key busy or completed
// writes nothing and takes no lock. Should the key's row change under the
// statement in a way it cannot read (a racing claim that won and ended
// within it), the statement runs again, at most four times in all.
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
	sk, fpb, micros := storedKey(key), []byte(fp), ttl.Microseconds()
	for try := 1; ; try++ {
		var (
			r              row
			claimed, found bool
		)
		err := retry(ctx, op, s.inTx, func(ctx context.Context, _ int) (bool, error) {
			err := s.db.QueryRow(ctx, s.q.claim, sk, fpb, micros).Scan(append([]any{&claimed}, r.dest()...)...)
			found = err == nil
			if errors.Is(err, pgx.ErrNoRows) {
				err = nil
			}
			// Repeated after a lost connection (a pooled connection that
			// died while idle, most often): should the lost try have
			// committed, the next one finds that claim and answers busy
			// until its lease runs out. That delays the request; it never
			// runs it twice.
			return true, err
		})
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

// Extend implements [store.Store]: one UPDATE guarded by the fence and the
// claimed state.
func (s *Store) Extend(ctx context.Context, key string, fence idemkit.Fence, ttl time.Duration) (bool, error) {
	const op = "extend"
	if err := engine.ValidateFenced(op, key, fence); err != nil {
		return false, err
	}
	if err := engine.ValidateTTL(op, ttl); err != nil {
		return false, err
	}
	if err := checkFence(op, fence); err != nil {
		return false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return false, err
	}
	sk := storedKey(key)
	if w, ok := s.held.Load(workID{sk, int64(fence)}); ok && s.renewer != nil {
		// The work's own transaction holds a connection: the renewal must
		// not wait for another behind it (see renewer).
		done, err := s.renewer.extend(ctx, s.q.extend, sk, int64(fence), ttl.Microseconds())
		if done {
			w.(*work).renewed.Store(true)
		}
		return done, s.starvedPool(ctx, err)
	}
	done, err := s.fenced(ctx, op, true, s.q.extend, sk, int64(fence), ttl.Microseconds())
	return done, s.starvedPool(ctx, err)
}

// Complete implements [store.Store]: one UPDATE guarded by the fence and
// the claimed state, with a durable commit. A repeat of a completion that
// landed (the same outcome under the same fence, whose answer was lost with
// its connection) is reported as done: a completion that landed is never
// reported lost.
func (s *Store) Complete(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	const op = "complete"
	if err := engine.ValidateComplete(rec, ttl); err != nil {
		return false, err
	}
	if err := checkFence(op, rec.Fence); err != nil {
		return false, err
	}
	if len(rec.Response) > s.cfg.maxResponse {
		return false, engine.TooLarge(op, len(rec.Response), s.cfg.maxResponse)
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return false, err
	}
	response := rec.Response
	if response == nil {
		response = []byte{}
	}
	done, err := s.fenced(ctx, op, true, s.q.complete, storedKey(rec.Key), int64(rec.Fence), int16(rec.State),
		response, []byte(rec.Fingerprint), ttl.Microseconds())
	return done, s.starvedPool(ctx, err)
}

// Release implements [store.Store]: one UPDATE, guarded by the fence and
// the claimed state, that leaves a tombstone (the fence, nothing visible)
// until the sweeper removes it. It commits asynchronously (a release lost
// in a server crash only lets its claim run out), in the same round trip.
// Repeated after a lost connection, it reports done when it finds the
// claim's tombstone.
func (s *Store) Release(ctx context.Context, key string, fence idemkit.Fence) (bool, error) {
	const op = "release"
	if err := engine.ValidateFenced(op, key, fence); err != nil {
		return false, err
	}
	if err := checkFence(op, fence); err != nil {
		return false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return false, err
	}
	sk := storedKey(key)
	var done bool
	err := retry(ctx, op, s.inTx, func(ctx context.Context, try int) (bool, error) {
		sql := s.q.release
		if try > 0 {
			// After a lost connection the try before may have released
			// the claim: a tombstone with its fence says it is gone.
			sql = s.q.releaseAgain
		}
		err := s.db.QueryRow(ctx, sql, sk, int64(fence)).Scan(&done)
		if errors.Is(err, pgx.ErrNoRows) {
			done, err = false, nil
		}
		return true, err
	})
	return done && err == nil, err
}

// fenced runs a statement that returns one row when it took effect.
func (s *Store) fenced(ctx context.Context, op string, repeatable bool, sql string, args ...any) (bool, error) {
	var done bool
	err := retry(ctx, op, s.inTx, func(ctx context.Context, _ int) (bool, error) {
		err := s.db.QueryRow(ctx, sql, args...).Scan(&done)
		if errors.Is(err, pgx.ErrNoRows) {
			done, err = false, nil
		}
		return repeatable, err
	})
	return done && err == nil, err
}

// Get implements [store.Store] and [store.Records]: one read; a record is
// visible while clock_timestamp() < expires_at.
func (s *Store) Get(ctx context.Context, key string) (store.Record, bool, error) {
	const op = "get"
	if err := engine.ValidateKey(key); err != nil {
		return store.Record{}, false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return store.Record{}, false, err
	}
	var (
		r     row
		found bool
	)
	err := retry(ctx, op, s.inTx, func(ctx context.Context, _ int) (bool, error) {
		err := s.db.QueryRow(ctx, s.q.get, storedKey(key)).Scan(r.dest()...)
		found = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
		return true, err
	})
	if err != nil || !found {
		return store.Record{}, false, err
	}
	rec, err := r.record(op, key)
	return rec, err == nil, err
}

// Delete implements [store.Store] and [store.Records]: one UPDATE that
// turns the live record into a tombstone (its fence kept, nothing
// visible), whatever its state.
func (s *Store) Delete(ctx context.Context, key string) (bool, error) {
	const op = "delete"
	if err := engine.ValidateKey(key); err != nil {
		return false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return false, err
	}
	// Not repeatable: a delete that committed before the connection was
	// lost would be reported as finding nothing.
	return s.fenced(ctx, op, false, s.q.delete, storedKey(key))
}

// Put implements [store.Records]: one upsert that writes the outcome rec
// unless the live record under its key carries a higher fence, with a
// durable commit.
func (s *Store) Put(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	const op = "put"
	if err := validatePut(rec, ttl); err != nil {
		return false, err
	}
	if err := checkFence(op, rec.Fence); err != nil {
		return false, err
	}
	if len(rec.Response) > s.cfg.maxResponse {
		return false, engine.TooLarge(op, len(rec.Response), s.cfg.maxResponse)
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return false, err
	}
	response := rec.Response
	if response == nil {
		response = []byte{}
	}
	// Repeatable: writing the same record twice leaves what writing it
	// once does, and reports it written.
	return s.fenced(ctx, op, true, s.q.put, storedKey(rec.Key), []byte(rec.Fingerprint), int16(rec.State),
		response, int64(rec.Fence), ttl.Microseconds())
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
