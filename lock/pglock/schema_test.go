package pglock

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/pglock/pgtest"
)

// TestSchemaSQLMatchesSetupSchema checks that the shipped schema.sql is the
// DDL SetupSchema runs for the default names, below a header of comments.
func TestSchemaSQLMatchesSetupSchema(t *testing.T) {
	cfg, err := newConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	pgtest.SchemaSQLMatches(t, SchemaSQL(), renderDDL(cfg.names), SchemaLockID)
}

// TestSchemaSQLAppliesLikeSetupSchema applies schema.sql as a migration
// tool would (in a schema of its own, through the search path) and compares
// the catalog with what SetupSchema creates.
func TestSchemaSQLAppliesLikeSetupSchema(t *testing.T) {
	t.Parallel()
	admin := pgtest.NewPool(t, testenv.Postgres(t).URL, 2)
	a := pgtest.AppliesLikeSetup(t, admin, SchemaSQL(), func(ctx context.Context, schema string) error {
		return SetupSchema(ctx, admin, WithTable(schema+"."+DefaultTable), WithFenceTable(schema+"."+DefaultFenceTable))
	})
	if !strings.Contains(a, "idemkit_locks_lock_id_key") || !strings.Contains(a, "fence bigint NO") {
		t.Fatalf("the catalog lacks what the schema declares:\n%s", a)
	}
}

// TestSetupSchemaIdempotent runs SetupSchema twice in a row, then from
// several goroutines at once on fresh names, each on a connection of its
// own.
func TestSetupSchemaIdempotent(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := pgtest.NewPool(t, srv.URL, 2)
	ctx := t.Context()
	opts := tables(t, admin) // the first run
	if err := SetupSchema(ctx, admin, opts...); err != nil {
		t.Fatalf("second SetupSchema: %v", err)
	}
	l, err := New(admin, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := l.Acquire(ctx, "k", lock.CleanupGrace); err != nil || !ok {
		t.Fatalf("Acquire after two SetupSchema runs: %v, %v", ok, err)
	}

	schema := pgtest.Schema(t, admin)
	fresh := []Option{WithTable(schema + ".locks"), WithFenceTable(schema + ".fences")}
	pool := pgtest.SetupConcurrently(t, srv.URL, 8, func(ctx context.Context, db *pgxpool.Pool) error {
		return SetupSchema(ctx, db, fresh...)
	})
	l, _ = New(pool, fresh...)
	if _, ok, err := l.Acquire(ctx, "k", lock.CleanupGrace); err != nil || !ok {
		t.Fatalf("Acquire after concurrent SetupSchema: %v, %v", ok, err)
	}
}

// TestInvalidTableNames checks that bad names are refused with
// InvalidArgument before any SQL: the client is a closed pool, so any I/O
// would fail with ServiceUnavailable instead.
func TestInvalidTableNames(t *testing.T) {
	t.Parallel()
	closed := pgtest.NewPool(t, testenv.Postgres(t).URL, 1)
	closed.Close()
	long := strings.Repeat("t", maxTableLen+1)
	bad := []string{
		"", " ", "1locks", "locks;drop table x", `lo"cks`, "lo-cks", "lo cks", "a.b.c", ".locks", "locks.",
		"sch.1t", "s.", "ünïcode", "locks\x00", long, "s." + long, strings.Repeat("s", maxSchemaLen+1) + ".t",
	}
	for _, name := range bad {
		for _, opt := range []Option{WithTable(name), WithFenceTable(name)} {
			if _, err := New(closed, opt); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
				t.Fatalf("New with table %q: %v; want InvalidArgument", name, err)
			}
			if err := SetupSchema(t.Context(), closed, opt); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
				t.Fatalf("SetupSchema with table %q: %v; want InvalidArgument", name, err)
			}
		}
	}
	good := []string{"locks", "_l", "L0cks", "s.locks", "S_1.T_2", strings.Repeat("t", maxTableLen), strings.Repeat("s", maxSchemaLen) + ".t"}
	for _, name := range good {
		if _, err := New(closed, WithTable(name)); err != nil {
			t.Fatalf("New with table %q: %v", name, err)
		}
	}
	if _, err := New(nil); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("New(nil): %v", err)
	}
	if _, err := New(closed, WithSweepBatch(0)); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("New with a zero sweep batch: %v", err)
	}
	// The lock and fence-counter tables must differ (SyncGuard checklist
	// item 37), also when one name leaves the schema to the search path.
	for _, pair := range [][2]string{{"x", "x"}, {"s.x", "s.x"}, {"s.x", "x"}, {"x", "s.x"}, {DefaultFenceTable, DefaultFenceTable}} {
		_, err := New(closed, WithTable(pair[0]), WithFenceTable(pair[1]))
		if idemkit.CodeOf(err) != idemkit.CodeInvalidArgument || !errors.Is(err, idemkit.ErrInvalidArgument) {
			t.Fatalf("New with lock table %q and fence table %q: %v; want InvalidArgument", pair[0], pair[1], err)
		}
		if err := SetupSchema(context.Background(), closed, WithTable(pair[0]), WithFenceTable(pair[1])); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("SetupSchema with one table for both: %v", err)
		}
	}
	for _, pair := range [][2]string{{"a.x", "b.x"}, {"x", "X"}, {"locks", "fences"}} {
		if _, err := New(closed, WithTable(pair[0]), WithFenceTable(pair[1])); err != nil {
			t.Fatalf("New with lock table %q and fence table %q: %v", pair[0], pair[1], err)
		}
	}
}

// TestParseTableName checks the names a valid TableName renders, and that a
// refusal names the table it is about.
func TestParseTableName(t *testing.T) {
	for _, c := range []struct {
		name, sanitized, derived string
	}{
		{"records", `"records"`, `"records_expires_at_idx"`},
		{"S_1.T_2", `"S_1"."T_2"`, `"T_2_expires_at_idx"`},
	} {
		n, err := ParseTableName("record table", c.name)
		if err != nil {
			t.Fatalf("ParseTableName(%q): %v", c.name, err)
		}
		if got := n.Sanitize(); got != c.sanitized {
			t.Fatalf("%q sanitized: %s; want %s", c.name, got, c.sanitized)
		}
		if got := n.Derived("_expires_at_idx"); got != c.derived {
			t.Fatalf("%q derived: %s; want %s", c.name, got, c.derived)
		}
	}
	_, err := ParseTableName("record table", "r;drop table x")
	if idemkit.CodeOf(err) != idemkit.CodeInvalidArgument || !strings.Contains(err.Error(), `record table "r;drop table x"`) {
		t.Fatalf("ParseTableName of a bad name: %v; want InvalidArgument naming the record table", err)
	}
}

// TestSetupDDLEndedContext checks that SetupDDL sends nothing under an
// ended ctx: the client is a closed pool, so any I/O would fail with
// ServiceUnavailable instead.
func TestSetupDDLEndedContext(t *testing.T) {
	t.Parallel()
	closed := pgtest.NewPool(t, testenv.Postgres(t).URL, 1)
	closed.Close()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := SetupDDL(ctx, closed, "SELECT 1"); idemkit.CodeOf(err) != idemkit.CodeAborted || !errors.Is(err, context.Canceled) {
		t.Fatalf("SetupDDL under a cancelled ctx: %v; want Aborted", err)
	}
	if err := SetupDDL(t.Context(), closed, "SELECT 1"); idemkit.CodeOf(err) != idemkit.CodeServiceUnavailable {
		t.Fatalf("SetupDDL on a closed pool: %v; want ServiceUnavailable", err)
	}
}
