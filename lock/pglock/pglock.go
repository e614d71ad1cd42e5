package pglock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idemkit/lock/provider"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
)

// DB is what the locker needs of a PostgreSQL client, and no more: methods
// that *pgxpool.Pool, *pgx.Conn and pgx.Tx all have.
//
// A *pgxpool.Pool is the usual choice. A *pgx.Conn is one connection and
// not safe for concurrent use: a locker built on one must not be used from
// several goroutines at once (nor with a sweeper running). A pgx.Tx makes
// every lock operation part of that transaction: locks are taken, extended
// and released only when it commits (Acquire runs in a savepoint, so that a
// failed acquire leaves the transaction usable).
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

var (
	_ DB = (*pgxpool.Pool)(nil)
	_ DB = (*pgx.Conn)(nil)
	_ DB = (pgx.Tx)(nil)

	_ lock.Locker      = (*Locker)(nil)
	_ lock.KeyedLocker = (*Locker)(nil)
	_ lock.Watcher     = (*Locker)(nil)

	_ connPool   = (*pgxpool.Pool)(nil)
	_ connConfig = (*pgx.Conn)(nil)
)

// Option configures [New] and [SetupSchema].
type Option func(*config)

type config struct {
	tableName  string
	table      tableName
	cleanup    bool
	logger     *slog.Logger
	sweepBatch int
}

// WithTable sets the lock table: "table" or "schema.table", each part a
// letter or underscore followed by letters, digits and underscores (the
// table part at most 48 bytes, the schema 63). Names are always quoted, so
// their case is kept. Default: "idemkit_locks".
func WithTable(name string) Option { return func(c *config) { c.tableName = name } }

// WithCleanupInIsLocked makes IsLocked also delete the key's row when
// [Locker.Sweep] would: it expired more than [lock.CleanupGrace] ago and
// the server clock has passed its fence. Default: off (IsLocked is a pure
// read; Sweep collects expired rows).
func WithCleanupInIsLocked(on bool) Option { return func(c *config) { c.cleanup = on } }

// WithLogger sets the logger for fence-limit warnings and sweeper failures.
// Log lines never contain a raw key or lock id. Default: slog.Default().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithSweepBatch sets how many expired rows one DELETE of [Locker.Sweep]
// removes at most, so that collecting a large backlog never holds many
// locks at once (a row lock and an advisory lock per row). Default: 100.
func WithSweepBatch(n int) Option { return func(c *config) { c.sweepBatch = n } }

func newConfig(opts []Option) (config, error) {
	c := config{tableName: defaultTable, sweepBatch: 100}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	var err error
	if c.table, err = parseTableName(c.tableName); err != nil {
		return config{}, err
	}
	if c.sweepBatch < 1 {
		return config{}, idemkit.NewError(idemkit.CodeInvalidArgument, "new", "the sweep batch must be at least 1", nil)
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	return c, nil
}

// Locker is a [lock.Locker], [lock.KeyedLocker] and [lock.Watcher] on
// PostgreSQL. Its methods are safe for concurrent use when its [DB] is (a
// pool is; a *pgx.Conn or a pgx.Tx is not).
type Locker struct {
	db     DB
	inTx   bool // db is a caller's transaction: no retries, no async commit
	cfg    config
	q      queries
	notes  *notifier // nil when db cannot spare a listening connection
	shared attempts
}

// New returns a locker on db, with the table named by opts, which must
// exist (see [SetupSchema]). It validates the options (InvalidArgument) and
// sends nothing to the server.
func New(db DB, opts ...Option) (*Locker, error) {
	if db == nil {
		return nil, idemkit.NewError(idemkit.CodeInvalidArgument, "new", "a database client is required", nil)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	_, inTx := db.(pgx.Tx)
	l := &Locker{db: db, inTx: inTx, cfg: cfg, q: buildQueries(cfg.table, !inTx)}
	if connect := listenConn(db); connect != nil {
		l.notes = newNotifier(connect, cfg.table.channel(), cfg.logger)
	}
	return l, nil
}

// Capabilities reports fencing, with the PostgreSQL server's clock
// (clock_timestamp()) as the time authority.
func (l *Locker) Capabilities() lock.Capabilities {
	return lock.Capabilities{Backend: "postgres", Fencing: true}
}

// maxVerbatim is the longest storage key kept verbatim ("k:" + key); longer
// keys are hashed, which keeps the primary-key index compact.
const maxVerbatim = 256

// storageKey returns the key column's value for a normalised key and, when
// that value is a hash, the key itself for the user_key column.
func storageKey(key string) (string, []byte) {
	sk := provider.StorageKey(key, maxVerbatim, textSafe)
	if strings.HasPrefix(sk, provider.HashedPrefix) {
		return sk, []byte(key)
	}
	return sk, nil
}

// textSafe reports whether a text column holds s exactly: valid UTF-8
// without NUL.
func textSafe(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// userKey reverses storageKey given the row's two columns.
func userKey(sk string, raw []byte) string {
	if raw != nil {
		return string(raw)
	}
	return strings.TrimPrefix(sk, provider.VerbatimPrefix)
}

// micros is d in whole microseconds, the resolution of timestamptz.
func micros(d time.Duration) int64 { return d.Microseconds() }

// Acquire implements [lock.Locker] in one statement (one round trip, one
// implicit transaction):
//
//   - If a live lease holds the key by the statement's snapshot, or another
//     acquire of the key is in flight (a transaction-scoped advisory lock on
//     the key's hash, tried without waiting), it answers "locked" having
//     written nothing, taken no row lock and been given no transaction id.
//   - Otherwise it inserts the key's row, or takes it over on the condition
//     that it is a tombstone or an expired lease once its row lock is held.
//     The fence is the greater of the row's fence + 1 and the server clock
//     in Unix milliseconds ([provider.NextFence]); acquired_at and expires_at
//     come from clock_timestamp() read after those locks. A fence past
//     [idemkit.FenceMax] fails the column's CHECK constraint and the whole
//     statement: nothing is written. The commit is durable before the
//     lease is returned.
//
// Acquires of one key that run at once in this process (the waiters of a
// hot key, which its release wakes together) share that statement: each
// joins the next one, sent once the one in flight, if any, has come back
// (so it was sent after every call it answers began), on behalf of the
// call that sends it; the others answer "locked", since the key was held
// when it ran, by another lease or by the lease it took. A call whose
// shared statement failed runs its own, so it never reports another
// call's failure. Inside a caller's pgx.Tx nothing is shared.
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
	if l.inTx {
		return l.acquireOnce(ctx, key, ttl)
	}
	sk, _ := storageKey(key)
	lease, ok, err := l.shared.do(ctx, sk, func() (lock.Lease, bool, error) { return l.acquireOnce(ctx, key, ttl) })
	return lease, ok, mapError(ctx, op, err)
}

// acquireOnce runs the acquire statement for a normalised key.
func (l *Locker) acquireOnce(ctx context.Context, key string, ttl time.Duration) (lock.Lease, bool, error) {
	const op = "acquire"
	sk, raw := storageKey(key)
	id := lock.NewID()
	var (
		err               error
		fence             int64
		acquired, expires time.Time
		ok                bool
	)
	err = retry(ctx, op, l.inTx, func(ctx context.Context) (bool, error) {
		ok = false
		err := l.acquire(ctx, sk, id, micros(ttl), raw, &fence, &acquired, &expires)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return true, nil
		case err != nil:
			// Not repeatable: the statement may have committed before
			// the connection was lost.
			return false, overflow(err)
		}
		ok = true
		return false, nil
	})
	if err != nil || !ok {
		return lock.Lease{}, false, err
	}
	if fence < 1 {
		return lock.Lease{}, false, idemkit.NewError(idemkit.CodeInternal, op, fmt.Sprintf("the lock row holds the fence %d", fence), nil)
	}
	f := idemkit.Fence(fence)
	if err := provider.CheckFence(ctx, l.cfg.logger, nil, key, f); err != nil {
		return lock.Lease{}, false, err // only if the CHECK constraint was dropped from the table
	}
	return lock.Lease{Key: key, ID: id, Fence: f, AcquiredAt: acquired, ExpiresAt: expires}, true, nil
}

// acquire runs the acquire statement. Inside a caller's transaction it runs
// in a savepoint, so that a failed acquire (fence overflow) leaves that
// transaction usable.
func (l *Locker) acquire(ctx context.Context, sk, id string, ttl int64, raw []byte, dest ...any) error {
	if !l.inTx {
		return l.db.QueryRow(ctx, l.q.acquire, sk, id, ttl, raw).Scan(dest...)
	}
	sp, err := l.db.Begin(ctx)
	if err != nil {
		return err
	}
	if err := sp.QueryRow(ctx, l.q.acquire, sk, id, ttl, raw).Scan(dest...); err != nil {
		_ = sp.Rollback(ctx)
		return err
	}
	return sp.Commit(ctx)
}

// overflow turns the fence column's CHECK violation into the Internal
// error of a refused fence.
func overflow(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23514" {
		return idemkit.NewError(idemkit.CodeInternal, "acquire", fmt.Sprintf("fence overflow: the next fence exceeds the maximum %s", idemkit.FenceMax), err)
	}
	return err
}

// Release implements [lock.Locker]: one statement that ends the live lease
// with this lock id (through its unique index) and tells an expired lease
// from a missing one. It deletes the row if the server clock has passed the
// lease's fence (read as Unix milliseconds) and no acquire of the key is in
// flight, and otherwise leaves a tombstone (the fence alone, no lock id)
// that expires once the clock passes it, so the key's next fence is still
// greater. The same statement notifies the key's watchers (pg_notify on
// the table's channel, delivered when it commits; see [Locker.Watch]), and
// the key's watches in this process are woken as soon as it returns. Its
// commit is asynchronous (synchronous_commit off for that transaction
// only): a release lost in a server crash only lets the lease run out, and
// the next durable commit flushes it anyway.
func (l *Locker) Release(ctx context.Context, id string) (lock.Outcome, error) {
	if err := lock.ValidateID(id); err != nil {
		return lock.Outcome{}, err
	}
	return l.release(ctx, l.q.release, id)
}

// ReleaseKey implements [lock.KeyedLocker]: Release through the primary
// key, refusing (not found) when the lock with this id is not on key.
func (l *Locker) ReleaseKey(ctx context.Context, key, id string) (lock.Outcome, error) {
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return lock.Outcome{}, err
	}
	if err := lock.ValidateID(id); err != nil {
		return lock.Outcome{}, err
	}
	sk, _ := storageKey(key)
	return l.release(ctx, l.q.releaseKey, id, sk)
}

func (l *Locker) release(ctx context.Context, sql string, args ...any) (lock.Outcome, error) {
	const op = "release"
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return lock.Outcome{}, err
	}
	var (
		released, present bool
		sk                *string
	)
	err := retry(ctx, op, l.inTx, func(ctx context.Context) (bool, error) {
		// Not repeatable: a release that committed before the connection
		// was lost would be reported as not found.
		return false, l.db.QueryRow(ctx, sql, args...).Scan(&released, &present, &sk)
	})
	switch {
	case err != nil:
		return lock.Outcome{}, err
	case released:
		if l.notes != nil && sk != nil {
			// The release has committed: the key's watches in this
			// process need not wait for its notification.
			l.notes.dispatch(*sk)
		}
		return lock.Outcome{OK: true}, nil
	case present:
		return lock.Outcome{Reason: lock.ReasonExpired}, nil
	}
	return lock.Outcome{Reason: lock.ReasonNotFound}, nil
}

// Extend implements [lock.Locker]: one statement that sets the live row's
// expires_at to clock_timestamp() + ttl through the lock-id index and tells
// an expired row from a missing one. Its commit is durable.
func (l *Locker) Extend(ctx context.Context, id string, ttl time.Duration) (lock.Outcome, error) {
	if err := lock.ValidateID(id); err != nil {
		return lock.Outcome{}, err
	}
	if err := lock.ValidateTTL(ttl); err != nil {
		return lock.Outcome{}, err
	}
	return l.extend(ctx, l.q.extend, id, micros(ttl))
}

// ExtendKey implements [lock.KeyedLocker]: Extend through the primary key,
// refusing (not found) when the lock with this id is not on key.
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
	sk, _ := storageKey(key)
	return l.extend(ctx, l.q.extendKey, id, micros(ttl), sk)
}

func (l *Locker) extend(ctx context.Context, sql string, args ...any) (lock.Outcome, error) {
	const op = "extend"
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return lock.Outcome{}, err
	}
	var (
		expires *time.Time
		present bool
	)
	err := retry(ctx, op, l.inTx, func(ctx context.Context) (bool, error) {
		// Repeatable: extending twice leaves the same state as once.
		return true, l.db.QueryRow(ctx, sql, args...).Scan(&expires, &present)
	})
	switch {
	case err != nil:
		return lock.Outcome{}, err
	case expires != nil:
		return lock.Outcome{OK: true, ExpiresAt: *expires}, nil
	case present:
		return lock.Outcome{Reason: lock.ReasonExpired}, nil
	}
	return lock.Outcome{Reason: lock.ReasonNotFound}, nil
}

// IsLocked implements [lock.Locker]: one read. With
// [WithCleanupInIsLocked], the same statement also deletes the key's row if
// [Locker.Sweep] would (asynchronous commit).
func (l *Locker) IsLocked(ctx context.Context, key string) (bool, error) {
	const op = "is-locked"
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return false, err
	}
	sk, _ := storageKey(key)
	sql := l.q.isLocked
	if l.cfg.cleanup {
		sql = l.q.isLockedCleanup
	}
	var locked bool
	err = retry(ctx, op, l.inTx, func(ctx context.Context) (bool, error) {
		return true, l.db.QueryRow(ctx, sql, sk).Scan(&locked)
	})
	return locked, err
}

// LookupKey implements [lock.Locker]: one read by primary key.
func (l *Locker) LookupKey(ctx context.Context, key string) (lock.Info, bool, error) {
	const op = "lookup"
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return lock.Info{}, false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return lock.Info{}, false, err
	}
	sk, _ := storageKey(key)
	return l.lookup(ctx, l.q.lookupKey, sk)
}

// LookupID implements [lock.Locker]: one read through the lock-id index.
func (l *Locker) LookupID(ctx context.Context, id string) (lock.Info, bool, error) {
	const op = "lookup"
	if err := lock.ValidateID(id); err != nil {
		return lock.Info{}, false, err
	}
	if err := idemkit.CheckContext(ctx, op); err != nil {
		return lock.Info{}, false, err
	}
	return l.lookup(ctx, l.q.lookupID, id)
}

func (l *Locker) lookup(ctx context.Context, sql string, arg string) (lock.Info, bool, error) {
	var (
		sk, id            string
		raw               []byte
		fence             int64
		acquired, expires time.Time
		found             bool
	)
	err := retry(ctx, "lookup", l.inTx, func(ctx context.Context) (bool, error) {
		err := l.db.QueryRow(ctx, sql, arg).Scan(&sk, &raw, &id, &fence, &acquired, &expires)
		found = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
		return true, err
	})
	if err != nil || !found {
		return lock.Info{}, false, err
	}
	return lock.NewInfo(userKey(sk, raw), id, idemkit.Fence(fence), acquired, expires), true, nil
}
