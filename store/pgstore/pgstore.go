package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/pglock"
	"github.com/idemkit/idemkit/store"
)

// DB is what the store needs of a PostgreSQL client: pglock's client
// interface ([pglock.DB]), which *pgxpool.Pool, *pgx.Conn and pgx.Tx all
// satisfy, so that a store and a locker can share one pool.
//
// A *pgxpool.Pool is the usual choice. A *pgx.Conn is one connection and
// not safe for concurrent use: a store built on one must not be used from
// several goroutines at once (nor with a sweeper running). In a pgx.Tx,
// writes take effect when that transaction commits.
type DB = pglock.DB

var _ store.Store = (*Store)(nil)

// Option configures [New] and [SetupSchema].
type Option func(*config)

type config struct {
	tableName   string
	table       pglock.TableName
	maxResponse int
	logger      *slog.Logger
	sweepBatch  int
}

// WithTable sets the record table: "table" or "schema.table", each part a
// letter or underscore followed by letters, digits and underscores (the
// table part at most 48 bytes, the schema 63), as [pglock.ParseTableName]
// validates it. Names are always quoted, so their case is kept. Default:
// "idemkit_records".
func WithTable(name string) Option { return func(c *config) { c.tableName = name } }

// WithMaxResponseBytes sets the largest response Put accepts; a larger one
// is refused with an error matching [store.ErrTooLarge] before any I/O (the
// guard then records the execution as not replayable). At most
// [MaxResponseLimit]. Default: [DefaultMaxResponseBytes] (8 MiB).
func WithMaxResponseBytes(n int) Option { return func(c *config) { c.maxResponse = n } }

// WithLogger sets the logger for sweeper failures. Log lines never contain
// a record key. Default: slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithSweepBatch sets how many expired rows one DELETE of [Store.Sweep]
// removes at most. Default: 1000.
func WithSweepBatch(n int) Option { return func(c *config) { c.sweepBatch = n } }

// Limits and defaults.
const (
	// DefaultMaxResponseBytes is the default of [WithMaxResponseBytes]:
	// large enough for any response worth replaying, small enough that a
	// replay does not move a huge value through the database.
	DefaultMaxResponseBytes = 8 << 20
	// MaxResponseLimit is the largest [WithMaxResponseBytes]: a bytea
	// value holds at most 1 GiB.
	MaxResponseLimit = 1<<30 - 1
	// DefaultSweepBatch is the default of [WithSweepBatch].
	DefaultSweepBatch = 1000
)

func newConfig(opts []Option) (config, error) {
	c := config{tableName: DefaultTable, maxResponse: DefaultMaxResponseBytes, sweepBatch: DefaultSweepBatch}
	for _, o := range opts {
		o(&c)
	}
	var err error
	if c.table, err = pglock.ParseTableName("record table", c.tableName); err != nil {
		return config{}, err
	}
	bad := func(detail string) (config, error) {
		return config{}, idemkit.NewError(idemkit.CodeInvalidArgument, "new", detail, nil)
	}
	switch {
	case c.maxResponse < 1 || c.maxResponse > MaxResponseLimit:
		return bad(fmt.Sprintf("the maximum response size must be 1 to %d bytes", MaxResponseLimit))
	case c.sweepBatch < 1:
		return bad("the sweep batch must be at least 1")
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	return c, nil
}

// Store is a [store.Store] on PostgreSQL. Its methods are safe for
// concurrent use when its [DB] is (a pool is; a *pgx.Conn or a pgx.Tx is
// not).
type Store struct {
	db   DB
	inTx bool // db is a caller's transaction: no retries, no async commit
	cfg  config
	q    queries
}

// New returns a store on db, with the table named by opts, which must exist
// (see [SetupSchema]). It validates the options (InvalidArgument) and sends
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
	return &Store{db: db, inTx: inTx, cfg: cfg, q: buildQueries(cfg.table, !inTx)}, nil
}

// maxVerbatim is the longest storage key kept verbatim ("k:" + key).
const maxVerbatim = 256

// storageKey returns the key column's value for a record key (any bytes).
func storageKey(key string) string { return lock.StorageKey(key, maxVerbatim, textSafe) }

// textSafe reports whether a text column holds s exactly: valid UTF-8
// without NUL.
func textSafe(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// Get implements [store.Store]: one read; a record is visible while
// clock_timestamp() < expires_at.
func (s *Store) Get(ctx context.Context, key string) (store.Record, bool, error) {
	const op = "get"
	if err := store.ValidateKey(key); err != nil {
		return store.Record{}, false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return store.Record{}, false, err
	}
	var (
		rec   = store.Record{Key: key}
		fp    []byte
		state int16
		fence int64
		found bool
	)
	err := pglock.Retry(ctx, op, s.inTx, func(ctx context.Context) (bool, error) {
		err := s.db.QueryRow(ctx, s.q.get, storageKey(key)).
			Scan(&fp, &state, &rec.Response, &fence, &rec.CreatedAt, &rec.ExpiresAt)
		found = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
		return true, err
	})
	if err != nil || !found {
		return store.Record{}, false, err
	}
	rec.Fingerprint, rec.State, rec.Fence = string(fp), store.State(state), lock.Fence(fence)
	if !rec.State.Valid() || fence < 0 {
		return store.Record{}, false, idemkit.NewError(idemkit.CodeInternal, op, fmt.Sprintf("the stored record has state %d and fence %d", state, fence), nil)
	}
	return rec, true, nil
}

// Put implements [store.Store]: one upsert that writes the record unless
// the stored row is live (clock_timestamp() < expires_at) and carries a
// higher fence, with a durable commit. created_at is clock_timestamp() and
// expires_at created_at + ttl.
func (s *Store) Put(ctx context.Context, rec store.Record, ttl time.Duration) (bool, error) {
	const op = "put"
	if err := store.ValidatePut(rec, ttl); err != nil {
		return false, err
	}
	if len(rec.Response) > s.cfg.maxResponse {
		return false, store.TooLarge(op, len(rec.Response), s.cfg.maxResponse)
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return false, err
	}
	if rec.Fence > lock.FenceMax {
		return false, idemkit.NewError(idemkit.CodeInvalidArgument, op, fmt.Sprintf("fence %s exceeds the maximum %s", rec.Fence, lock.FenceMax), nil)
	}
	response := rec.Response
	if response == nil {
		response = []byte{}
	}
	var stored bool
	err := pglock.Retry(ctx, op, s.inTx, func(ctx context.Context) (bool, error) {
		err := s.db.QueryRow(ctx, s.q.put, storageKey(rec.Key), []byte(rec.Fingerprint), int16(rec.State),
			response, int64(rec.Fence), ttl.Microseconds()).Scan(&stored)
		if errors.Is(err, pgx.ErrNoRows) {
			stored, err = false, nil
		}
		// Repeatable: writing the same record twice leaves what writing
		// it once does.
		return true, err
	})
	if err != nil {
		return false, err
	}
	return stored, nil
}

// Delete implements [store.Store]: one statement that deletes the row and
// reports whether it was live.
func (s *Store) Delete(ctx context.Context, key string) (bool, error) {
	const op = "delete"
	if err := store.ValidateKey(key); err != nil {
		return false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return false, err
	}
	var deleted bool
	err := pglock.Retry(ctx, op, s.inTx, func(ctx context.Context) (bool, error) {
		// Not repeatable: a delete that committed before the connection
		// was lost would be reported as finding nothing.
		return false, s.db.QueryRow(ctx, s.q.delete, storageKey(key)).Scan(&deleted)
	})
	return deleted, err
}
