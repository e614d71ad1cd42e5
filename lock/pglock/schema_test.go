package pglock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
)

// TestSchemaSQLMatchesSetupSchema checks that the shipped schema.sql is the
// DDL SetupSchema runs for the default name, below a header of comments
// that names the advisory lock SetupSchema holds.
func TestSchemaSQLMatchesSetupSchema(t *testing.T) {
	cfg, err := newConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := renderDDL(cfg.table)
	header, ok := strings.CutSuffix(SchemaSQL(), want)
	if !ok {
		t.Fatalf("schema.sql is not the DDL of SetupSchema with the default name; want it to end with:\n%s", want)
	}
	for _, line := range strings.Split(strings.TrimSpace(header), "\n") {
		if line != "" && !strings.HasPrefix(line, "--") {
			t.Fatalf("schema.sql has a line that is not a comment before the DDL: %q", line)
		}
	}
	if !strings.Contains(header, fmt.Sprint(schemaLockID)) {
		t.Fatal("the header of schema.sql does not name the advisory lock SetupSchema holds")
	}
}

// TestSchemaSQLAppliesLikeSetupSchema applies schema.sql as a migration
// tool would (in a schema of its own, through the search path) and compares
// the catalog with what SetupSchema creates in another schema.
func TestSchemaSQLAppliesLikeSetupSchema(t *testing.T) {
	t.Parallel()
	admin := newPool(t, testenv.Postgres(t).URL, 2)
	ctx := t.Context()
	viaFile, viaSetup := newSchema(t, admin), newSchema(t, admin)
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SET LOCAL search_path = "+pgx.Identifier{viaFile}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, SchemaSQL()); err != nil {
		t.Fatalf("applying schema.sql: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := SetupSchema(ctx, admin, WithTable(viaSetup+"."+defaultTable)); err != nil {
		t.Fatal(err)
	}
	a, b := catalog(t, admin, viaFile), catalog(t, admin, viaSetup)
	if a != b {
		t.Fatalf("schema.sql and SetupSchema disagree:\nschema.sql:\n%s\nSetupSchema:\n%s", a, b)
	}
	for _, want := range []string{
		"idemkit_locks_lock_id_key", "idemkit_locks_expires_at_idx",
		"idemkit_locks.fence bigint NO", "idemkit_locks.lock_id text YES", "idemkit_locks.expires_at timestamp with time zone NO",
		"idemkit_locks_fence_max: CHECK ((fence <= '900000000000000'::bigint))",
	} {
		if !strings.Contains(a, want) {
			t.Fatalf("the catalog lacks %q:\n%s", want, a)
		}
	}
	if strings.Contains(a, "fences") {
		t.Fatalf("the catalog has a fence table:\n%s", a)
	}
}

// catalog describes the tables, columns, indexes and check constraints of
// schema, one line each in a stable order, with the schema's name left
// out: two schemas built by the same DDL have the same catalog.
func catalog(t testing.TB, db *pgxpool.Pool, schema string) string {
	t.Helper()
	rows, err := db.Query(t.Context(), `
		SELECT table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable
		FROM information_schema.columns WHERE table_schema = $1
		UNION ALL
		SELECT indexname || ': ' || replace(indexdef, $1 || '.', '')
		FROM pg_indexes WHERE schemaname = $1
		UNION ALL
		SELECT c.conname || ': ' || pg_get_constraintdef(c.oid)
		FROM pg_constraint AS c JOIN pg_namespace AS n ON n.oid = c.connamespace
		WHERE n.nspname = $1 AND c.contype = 'c'
		ORDER BY 1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// TestSetupSchemaIdempotent runs SetupSchema twice in a row, then from
// several goroutines at once on a fresh name, each on a connection of its
// own, as processes starting together would.
func TestSetupSchemaIdempotent(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
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

	const runners = 8
	fresh := WithTable(newSchema(t, admin) + ".locks")
	pool := newPool(t, srv.URL, runners)
	var wg sync.WaitGroup
	errs := make(chan error, runners)
	start := make(chan struct{})
	for range runners {
		wg.Go(func() {
			<-start
			errs <- SetupSchema(ctx, pool, fresh)
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent SetupSchema: %v", err)
		}
	}
	l, _ = New(pool, fresh)
	if _, ok, err := l.Acquire(ctx, "k", lock.CleanupGrace); err != nil || !ok {
		t.Fatalf("Acquire after concurrent SetupSchema: %v, %v", ok, err)
	}
}

// TestInvalidTableNames checks that bad names are refused with
// InvalidArgument before any SQL: the client is a closed pool, so any I/O
// would fail with ServiceUnavailable instead.
func TestInvalidTableNames(t *testing.T) {
	t.Parallel()
	closed := newPool(t, testenv.Postgres(t).URL, 1)
	closed.Close()
	long := strings.Repeat("t", maxTableLen+1)
	bad := []string{
		"", " ", "1locks", "locks;drop table x", `lo"cks`, "lo-cks", "lo cks", "a.b.c", ".locks", "locks.",
		"sch.1t", "s.", "ünïcode", "locks\x00", long, "s." + long, strings.Repeat("s", maxSchemaLen+1) + ".t",
	}
	for _, name := range bad {
		_, err := New(closed, WithTable(name))
		if idemkit.CodeOf(err) != idemkit.CodeInvalidArgument || !errors.Is(err, idemkit.ErrInvalidArgument) {
			t.Fatalf("New with table %q: %v; want InvalidArgument", name, err)
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("lock table %q", name)) {
			t.Fatalf("the refusal of %q does not name the table: %v", name, err)
		}
		if err := SetupSchema(t.Context(), closed, WithTable(name)); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("SetupSchema with table %q: %v; want InvalidArgument", name, err)
		}
	}
	good := []struct{ name, sanitized, derived string }{
		{"locks", `"locks"`, `"locks_expires_at_idx"`},
		{"_l", `"_l"`, `"_l_expires_at_idx"`},
		{"S_1.T_2", `"S_1"."T_2"`, `"T_2_expires_at_idx"`},
		{strings.Repeat("t", maxTableLen), `"` + strings.Repeat("t", maxTableLen) + `"`, `"` + strings.Repeat("t", maxTableLen) + `_expires_at_idx"`},
		{strings.Repeat("s", maxSchemaLen) + ".t", `"` + strings.Repeat("s", maxSchemaLen) + `"."t"`, `"t_expires_at_idx"`},
	}
	for _, g := range good {
		if _, err := New(closed, WithTable(g.name)); err != nil {
			t.Fatalf("New with table %q: %v", g.name, err)
		}
		n, err := parseTableName(g.name)
		if err != nil || n.sanitize() != g.sanitized || n.derived("_expires_at_idx") != g.derived {
			t.Fatalf("table %q renders as %s, %s (%v); want %s, %s", g.name, n.sanitize(), n.derived("_expires_at_idx"), err, g.sanitized, g.derived)
		}
	}
	if _, err := New(nil); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("New(nil): %v", err)
	}
	if _, err := New(closed, WithSweepBatch(0)); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("New with a zero sweep batch: %v", err)
	}
}

// TestSetupSchemaEndedContext checks that SetupSchema sends nothing under
// an ended ctx: the client is a closed pool, so any I/O would fail with
// ServiceUnavailable instead.
func TestSetupSchemaEndedContext(t *testing.T) {
	t.Parallel()
	closed := newPool(t, testenv.Postgres(t).URL, 1)
	closed.Close()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := SetupSchema(ctx, closed); idemkit.CodeOf(err) != idemkit.CodeAborted || !errors.Is(err, context.Canceled) {
		t.Fatalf("SetupSchema under a cancelled ctx: %v; want Aborted", err)
	}
	if err := SetupSchema(t.Context(), closed); idemkit.CodeOf(err) != idemkit.CodeServiceUnavailable {
		t.Fatalf("SetupSchema on a closed pool: %v; want ServiceUnavailable", err)
	}
}
