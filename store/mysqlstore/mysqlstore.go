package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/engine"
)

// DB is what the store needs of a MySQL or MariaDB client through
// database/sql (github.com/go-sql-driver/mysql): a *sql.DB (the only one
// that offers [Tx]), a *sql.Conn (never used by two goroutines at once) or
// a *sql.Tx (whose commit carries every operation). Its autocommit must be
// on.
type DB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

var (
	_ DB = (*sql.DB)(nil)
	_ DB = (*sql.Conn)(nil)
	_ DB = (*sql.Tx)(nil)

	_ store.Store   = (*Store)(nil)
	_ store.Records = (*Store)(nil)
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
	txIso       sql.IsolationLevel
}

// WithTable sets the record table: "table" or "database.table", each part
// matching [A-Za-z_][A-Za-z0-9_]* (the table at most 40 bytes, the
// database 64), always quoted; unqualified, the connection's current
// database. Default: "idemkit_records".
func WithTable(name string) Option { return func(c *config) { c.tableName = name } }

// WithMaxResponseBytes sets the largest response Complete and Put accept,
// 1 to 256 MiB; a larger one fails with [store.ErrTooLarge] before any
// I/O. A statement carries its response in hex, twice its size: the
// server's max_allowed_packet (MariaDB's default 16 MiB, MySQL 8's 64 MiB)
// must exceed twice this plus a few KiB. Default: 4 MiB.
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

// WithTxIsolation sets the isolation level of the transactions [Tx]
// begins: sql.LevelReadCommitted, sql.LevelRepeatableRead or
// sql.LevelSerializable. Default: sql.LevelReadCommitted.
func WithTxIsolation(level sql.IsolationLevel) Option { return func(c *config) { c.txIso = level } }

// Defaults and bounds of the options, as their documentation states them.
const (
	defaultMaxResponseBytes = 4 << 20
	maxResponseLimit        = 256 << 20
	defaultSweepBatch       = 1000
	defaultMaxClockStep     = time.Minute
)

func newConfig(opts []Option) (config, error) {
	c := config{tableName: defaultTable, maxResponse: defaultMaxResponseBytes, sweepBatch: defaultSweepBatch,
		maxStep: defaultMaxClockStep, txIso: sql.LevelReadCommitted}
	for _, o := range opts {
		if o == nil {
			return config{}, idemkit.NewError(idemkit.CodeInvalidArgument, "new", "an option is nil", nil)
		}
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
		return bad(fmt.Sprintf("the maximum response size (WithMaxResponseBytes) must be 1 to %d bytes", maxResponseLimit))
	case c.sweepBatch < 1:
		return bad("the sweep batch (WithSweepBatch) must be at least 1")
	case c.maxStep < 0:
		return bad("the largest clock step (WithMaxClockStep) must be 0 or more")
	case c.txIso != sql.LevelReadCommitted && c.txIso != sql.LevelRepeatableRead && c.txIso != sql.LevelSerializable:
		return bad("the isolation level of the work's transactions (WithTxIsolation) must be sql.LevelReadCommitted, sql.LevelRepeatableRead or sql.LevelSerializable")
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	return c, nil
}

// Store is the MySQL/MariaDB engine: a [store.Store], [store.Records],
// [store.Lister], [store.Transactor] and [store.Stepper], with [Store.FindClaim] for the
// lock library, one row per record key. It is safe for concurrent use when
// its [DB] is (a *sql.DB is; a *sql.Conn or a *sql.Tx is not).
type Store struct {
	db   DB
	inTx bool // db is a caller's transaction: no retries
	cfg  config
	q    queries

	renewer *renewer    // on a *sql.DB: renews leases while works hold transactions (see Tx)
	starved atomic.Bool // a starved pool was logged
}

// New returns a store on db and the table named by opts, which must exist
// ([SetupSchema]). It validates the options (InvalidArgument) and sends
// nothing to the server.
func New(db DB, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "new", "a database client (a *sql.DB, *sql.Conn or *sql.Tx) is required", nil)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	_, inTx := db.(*sql.Tx)
	s := &Store{db: db, inTx: inTx, cfg: cfg, q: buildQueries(cfg.table, cfg.maxStep)}
	if pool, ok := db.(*sql.DB); ok {
		s.renewer = newRenewer(pool)
	}
	return s, nil
}

// checkFence refuses a fence no record can carry (above idemkit.FenceMax,
// which also keeps it within a BIGINT).
func checkFence(op string, f idemkit.Fence) error {
	if f > idemkit.FenceMax {
		return idemkit.NewError(idemkit.CodeInvalidArgument, op, fmt.Sprintf("fence %s exceeds the maximum %s", f, idemkit.FenceMax), nil)
	}
	return nil
}

// row holds the columns of a record as the queries return them.
type row struct {
	fp                   []byte
	state                int64
	response             []byte
	fence                int64
	createdAt, expiresAt int64  // Unix microseconds
	steps                []byte // a claim's steps (see encodeStep); NULL (nil) when it has none
}

// dest is where a row is scanned: the claim procedure's answer (after its
// claimed column) has no steps column; the selects end with it.
func (r *row) dest(steps bool) []any {
	d := []any{&r.fp, &r.state, &r.response, &r.fence, &r.createdAt, &r.expiresAt}
	if steps {
		d = append(d, &r.steps)
	}
	return d
}

// micros is a time the table holds, in Unix microseconds.
func micros(us int64) time.Time { return time.UnixMicro(us) }

// record checks the row and turns it into the record under key.
func (r *row) record(op, key string) (store.Record, error) {
	st := store.State(r.state)
	if r.state < 0 || r.state > 255 || !st.Valid() || r.fence < 0 {
		return store.Record{}, idemkit.NewError(idemkit.CodeInternal, op, fmt.Sprintf("the stored record has state %d and fence %d", r.state, r.fence), nil)
	}
	rec := store.Record{
		Key: key, Fingerprint: string(r.fp), State: st, Fence: idemkit.Fence(r.fence),
		CreatedAt: micros(r.createdAt), ExpiresAt: micros(r.expiresAt),
	}
	if st.Done() && len(r.response) > 0 {
		rec.Response = r.response
	} else if st == store.StateCompleted {
		rec.Response = []byte{}
	}
	if st == store.StateClaimed && len(r.steps) > 0 {
		steps, err := decodeSteps(op, r.steps)
		if err != nil {
			return store.Record{}, err
		}
		rec.Steps = steps
	}
	return rec, nil
}

// maxClaimTries bounds the tries of a claim whose row kept changing under
// the claim procedure (racing claims that won and ended at once).
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

// lockID is the lock_id column's value for a claim with fingerprint fp:
// fp when it is a lock id, else NULL.
func lockID(fp string) string {
	if engine.LockID(fp) {
		return bytesLit([]byte(fp))
	}
	return "NULL"
}

// Claim implements [store.Store]: one CALL of the table's claim procedure
// ([SetupSchema]); a claim answered by a live record reads it and writes
// nothing. A take-over that carries steps ([store.Stepper]) answers them
// in the same CALL.
func (s *Store) Claim(ctx context.Context, key, fp string, ttl time.Duration) (store.Record, bool, error) {
	const op = "claim"
	if err := engine.Ready(ctx, op, engine.ValidateKey(key), engine.ValidateTTL(op, ttl)); err != nil {
		return store.Record{}, false, err
	}
	query := s.q.claimCall(key, fp, ttl)
	for try := 1; ; try++ {
		var (
			r       row
			claimed int64
		)
		// Repeated after a lost connection too: should the lost try have
		// committed, the next finds its claim and answers busy until the
		// lease runs out, a delay, never a second execution.
		found, err := s.read(ctx, op, query, append([]any{&claimed}, r.dest(false)...)...)
		if err != nil {
			return store.Record{}, false, s.starvedPool(ctx, err)
		}
		if found {
			if claimed == 2 {
				// A take-over that carried steps answers them in the
				// response column (what it replaced had no response).
				r.steps, r.response = r.response, nil
			}
			rec, err := r.record(op, key)
			if err != nil || claimed == 0 {
				return rec, false, err
			}
			// A take-over answers with the replaced row's fingerprint and
			// response; a new claim's are fp and empty.
			if len(r.response) > 0 {
				rec.Replaced = &store.Record{Fingerprint: string(r.fp), Response: r.response}
			}
			rec.Fingerprint, rec.Response = fp, nil
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
// claimed state and the lease, which reports the expiry it wrote through
// LAST_INSERT_ID(expr).
func (s *Store) Extend(ctx context.Context, key string, fence idemkit.Fence, ttl time.Duration) (time.Time, bool, error) {
	const op = "extend"
	if err := engine.Ready(ctx, op, engine.ValidateFenced(op, key, fence), engine.ValidateTTL(op, ttl), checkFence(op, fence)); err != nil {
		return time.Time{}, false, err
	}
	var (
		until int64
		err   error
	)
	if s.renewer.active() {
		// Works hold transactions, and may hold every connection of the
		// pool: renew on the connection kept for it.
		q := s.q.extendSQL(key, fence, ttl)
		until, err = s.renewer.exec(ctx, op, func(int) string { return q })
	} else {
		until, err = s.exec(ctx, op, true, s.q.extendSQL(key, fence, ttl))
	}
	if err != nil || until == 0 {
		return time.Time{}, false, s.starvedPool(ctx, err)
	}
	return micros(until), true, nil
}

// Complete implements [store.Store]: one UPDATE; a repeat of one that
// landed (its answer lost) is reported done.
func (s *Store) Complete(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	const op = "complete"
	if err := engine.Ready(ctx, op, engine.ValidateComplete(rec, ttl), s.checkOutcome(op, rec)); err != nil {
		return false, err
	}
	n, err := s.exec(ctx, op, true, s.q.completeSQL(rec, ttl))
	return n != 0 && err == nil, s.starvedPool(ctx, err)
}

// Release implements [store.Store]: one UPDATE that leaves a tombstone;
// after a lost connection, the claim's tombstone says it was done.
func (s *Store) Release(ctx context.Context, key string, fence idemkit.Fence) (bool, error) {
	const op = "release"
	if err := engine.Ready(ctx, op, engine.ValidateFenced(op, key, fence), checkFence(op, fence)); err != nil {
		return false, err
	}
	var n int64
	err := retry(ctx, op, s.inTx, func(ctx context.Context, try int) (bool, error) {
		q := s.q.releaseSQL(key, fence, try > 0)
		var err error
		n, err = lastID(s.db.ExecContext(ctx, q))
		return true, err
	})
	return n != 0 && err == nil, err
}

// Get implements [store.Store] and [store.Records]: one SELECT.
func (s *Store) Get(ctx context.Context, key string) (store.Record, bool, error) {
	const op = "get"
	if err := engine.Ready(ctx, op, engine.ValidateKey(key)); err != nil {
		return store.Record{}, false, err
	}
	var r row
	found, err := s.read(ctx, op, s.q.getSQL(key), r.dest(true)...)
	if err != nil || !found {
		return store.Record{}, false, err
	}
	rec, err := r.record(op, key)
	return rec, err == nil, err
}

// FindClaim returns the live claim whose fingerprint is fp, a lock id (22
// characters of A-Z, a-z, 0-9, - and _), for the lock library: one SELECT
// by the index on the lock_id column, which only claims whose fingerprint
// is a lock id fill (a guard's rows hold NULL there). Any other fp finds
// nothing, without I/O.
func (s *Store) FindClaim(ctx context.Context, fp string) (store.Record, bool, error) {
	const op = "find-claim"
	if !engine.LockID(fp) {
		return store.Record{}, false, nil
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return store.Record{}, false, err
	}
	var (
		r   row
		key []byte
	)
	found, err := s.read(ctx, op, s.q.findClaimSQL(fp), append([]any{&key}, r.dest(true)...)...)
	if err != nil || !found {
		return store.Record{}, false, err
	}
	rec, err := r.record(op, string(key))
	return rec, err == nil, err
}

// Delete implements [store.Store] and [store.Records]: one UPDATE that
// leaves a tombstone; not repeated after a lost connection (it would find
// nothing).
func (s *Store) Delete(ctx context.Context, key string) (bool, error) {
	const op = "delete"
	if err := engine.Ready(ctx, op, engine.ValidateKey(key)); err != nil {
		return false, err
	}
	n, err := s.exec(ctx, op, false, s.q.deleteSQL(key))
	return n != 0 && err == nil, err
}

// Put implements [store.Records]: one INSERT … ON DUPLICATE KEY UPDATE
// (repeatable: twice leaves what once does).
func (s *Store) Put(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	const op = "put"
	if err := engine.Ready(ctx, op, validatePut(rec, ttl), s.checkOutcome(op, rec)); err != nil {
		return false, err
	}
	var done bool
	err := retry(ctx, op, s.inTx, func(ctx context.Context, _ int) (bool, error) {
		res, err := s.db.ExecContext(ctx, s.q.putSQL(rec, ttl))
		if err != nil {
			return true, err
		}
		// LAST_INSERT_ID is 2 when the row was replaced, 1 when it was
		// kept, 0 (the UPDATE clause never ran) when it was inserted.
		id, err := res.LastInsertId()
		done = id != 1
		return true, err
	})
	return done && err == nil, err
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

// read runs a repeatable query of one row or none, scanned into dest.
func (s *Store) read(ctx context.Context, op, query string, dest ...any) (found bool, err error) {
	err = retry(ctx, op, s.inTx, func(ctx context.Context, _ int) (bool, error) {
		err := s.db.QueryRowContext(ctx, query).Scan(dest...)
		found = err == nil
		if errors.Is(err, sql.ErrNoRows) {
			err = nil
		}
		return true, err
	})
	return found && err == nil, err
}

// exec runs a fenced statement and returns the value it set with
// LAST_INSERT_ID(expr): 0 when it matched no row.
func (s *Store) exec(ctx context.Context, op string, repeatable bool, query string) (int64, error) {
	var n int64
	err := retry(ctx, op, s.inTx, func(ctx context.Context, _ int) (bool, error) {
		var err error
		n, err = lastID(s.db.ExecContext(ctx, query))
		return repeatable, err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// lastID returns the LAST_INSERT_ID(expr) a statement reported in its
// answer, 0 when it matched no row: the server reports it only from a
// statement that evaluated the expression.
func lastID(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

// starvedPool returns a timeout while every connection of the store's
// *sql.DB is in use with a detail that says so and names the setting to
// raise, logged the first time; anything else as it is.
func (s *Store) starvedPool(ctx context.Context, err error) error {
	pool, ok := s.db.(*sql.DB)
	if err == nil || !ok {
		return err
	}
	var e *idemkit.Error
	if !errors.As(err, &e) || e.Code != idemkit.CodeNetworkTimeout {
		return err
	}
	st := pool.Stats()
	if st.MaxOpenConnections == 0 || st.InUse < st.MaxOpenConnections {
		return err
	}
	detail := fmt.Sprintf("the connection pool is too small: all %d of its connections (sql.DB.SetMaxOpenConns) were in use, "+
		"%d callers waiting; the transactions of guarded work (mysqlstore.Tx) each hold one until their work ends, and one more is kept for their lease renewals: "+
		"raise SetMaxOpenConns above the number of transactional requests that run at once, plus one", st.MaxOpenConnections, st.WaitCount)
	if s.starved.CompareAndSwap(false, true) {
		s.cfg.logger.ErrorContext(ctx, "mysqlstore: "+detail, slog.String("error", err.Error()))
	}
	if e.Detail != "" {
		detail = e.Detail + ": " + detail
	}
	return idemkit.NewError(e.Code, e.Op, detail, e.Err)
}
