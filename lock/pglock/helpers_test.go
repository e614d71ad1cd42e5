package pglock

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/pglock/pgtest"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// tables creates a schema of the test's own on the server behind admin and
// the lock tables in it, and returns the options that name them.
func tables(t testing.TB, admin DB) []Option {
	t.Helper()
	schema := pgtest.Schema(t, admin)
	ctx := context.Background()
	opts := []Option{WithTable(schema + ".locks"), WithFenceTable(schema + ".fences")}
	if err := SetupSchema(ctx, admin, opts...); err != nil {
		t.Fatalf("SetupSchema: %v", err)
	}
	return opts
}

// probes reads and writes the tables of a locker behind its back, for the
// conformance suite's Env.
type probes struct {
	db DB
	n  names
}

func newProbes(t testing.TB, db DB, opts []Option) probes {
	cfg, err := newConfig(opts)
	if err != nil {
		t.Fatal(err)
	}
	return probes{db: db, n: cfg.names}
}

func (p probes) raiseFence(ctx context.Context, key string, f lock.Fence) error {
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return err
	}
	sk, _ := storageKey(key)
	tag, err := p.db.Exec(ctx, "INSERT INTO "+p.n.fences.Sanitize()+` AS f (key, fence) VALUES ($1, $2)
		ON CONFLICT (key) DO UPDATE SET fence = EXCLUDED.fence WHERE f.fence < EXCLUDED.fence`, sk, int64(f))
	if err == nil && tag.RowsAffected() != 1 {
		err = idemkit.NewError(idemkit.CodeInvalidArgument, "raise-fence", "a fence counter can only be raised", nil)
	}
	return err
}

func (p probes) fence(ctx context.Context, key string) (lock.Fence, error) {
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return 0, err
	}
	sk, _ := storageKey(key)
	var f int64
	err = p.db.QueryRow(ctx, "SELECT fence FROM "+p.n.fences.Sanitize()+" WHERE key = $1", sk).Scan(&f)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return lock.Fence(f), err
}

func (p probes) stored(ctx context.Context, key string) (bool, error) {
	key, err := lock.NormalizeKey(key)
	if err != nil {
		return false, err
	}
	sk, _ := storageKey(key)
	var ok bool
	err = p.db.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+p.n.locks.Sanitize()+" WHERE key = $1)", sk).Scan(&ok)
	return ok, err
}

// rows counts the rows of a table.
func (p probes) rows(t testing.TB, table TableName) int {
	t.Helper()
	var n int
	if err := p.db.QueryRow(context.Background(), "SELECT count(*) FROM "+table.Sanitize()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// needsRestart reports whether a conformance case restarts the server, and
// so needs one of its own.
func needsRestart(t *testing.T) bool { return strings.Contains(t.Name(), "/SG10_") }
