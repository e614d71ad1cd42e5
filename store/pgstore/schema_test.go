package pgstore

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/store"
)

// TestSchemaSQLMatchesSetupSchema checks that the shipped schema.sql is the
// DDL SetupSchema runs for the default name, below a header of comments.
func TestSchemaSQLMatchesSetupSchema(t *testing.T) {
	cfg, err := newConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	body := renderDDL(cfg.table)
	header, ok := strings.CutSuffix(SchemaSQL(), body)
	if !ok {
		t.Fatalf("schema.sql is not the DDL of SetupSchema with the default name; want it to end with:\n%s", body)
	}
	for _, line := range strings.Split(strings.TrimSpace(header), "\n") {
		if !strings.HasPrefix(line, "--") {
			t.Fatalf("schema.sql has a line that is not a comment before the DDL: %q", line)
		}
	}
	if !strings.Contains(header, fmt.Sprint(SchemaLockID)) {
		t.Fatal("the header of schema.sql does not name the advisory lock SetupSchema holds")
	}
}

// TestSchemaSQLAppliesLikeSetupSchema applies schema.sql as a migration
// tool would and compares the catalog with what SetupSchema creates.
func TestSchemaSQLAppliesLikeSetupSchema(t *testing.T) {
	t.Parallel()
	admin := newPool(t, testenv.Postgres(t).URL, 2)
	ctx := t.Context()
	viaFile, viaSetup := newSchema(t, admin), newSchema(t, admin)
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SET LOCAL search_path = "+viaFile); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, SchemaSQL()); err != nil {
		t.Fatalf("applying schema.sql: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := SetupSchema(ctx, admin, WithTable(viaSetup+"."+DefaultTable)); err != nil {
		t.Fatal(err)
	}
	a, b := catalog(t, admin, viaFile), catalog(t, admin, viaSetup)
	if a != b {
		t.Fatalf("schema.sql and SetupSchema disagree:\nschema.sql:\n%s\nSetupSchema:\n%s", a, b)
	}
	if !strings.Contains(a, "idemkit_records_expires_at_idx") || !strings.Contains(a, "response bytea NO") {
		t.Fatalf("the catalog lacks what the schema declares:\n%s", a)
	}
}

// catalog describes the columns and indexes of a schema, without its name.
func catalog(t *testing.T, db *pgxpool.Pool, schema string) string {
	t.Helper()
	rows, err := db.Query(t.Context(), `
		SELECT table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable
		FROM information_schema.columns WHERE table_schema = $1
		UNION ALL
		SELECT indexname || ': ' || replace(indexdef, $1 || '.', '')
		FROM pg_indexes WHERE schemaname = $1
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

// TestSetupSchemaIdempotent runs SetupSchema twice, then from several
// goroutines at once on a fresh name.
func TestSetupSchemaIdempotent(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	ctx := t.Context()
	opt := table(t, admin)
	if err := SetupSchema(ctx, admin, opt); err != nil {
		t.Fatalf("second SetupSchema: %v", err)
	}
	fresh := WithTable(newSchema(t, admin) + ".records")
	const runners = 8
	pool := newPool(t, srv.URL, runners)
	var wg sync.WaitGroup
	errs := make(chan error, runners)
	start := make(chan struct{})
	for range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs <- SetupSchema(ctx, pool, fresh)
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent SetupSchema: %v", err)
		}
	}
	for _, o := range []Option{opt, fresh} {
		s, _ := New(pool, o)
		if ok, err := s.Put(ctx, store.Record{Key: "k", State: store.StateCompleted, Fence: 1}, lock.CleanupGrace); err != nil || !ok {
			t.Fatalf("Put after SetupSchema: %v, %v", ok, err)
		}
	}
}

// maxTableLen is the longest table part of a name, as WithTable documents
// it.
const maxTableLen = 48

// TestInvalidOptions checks that bad names and limits are refused with
// InvalidArgument before any SQL: the client is a closed pool, so any I/O
// would fail with ServiceUnavailable instead.
func TestInvalidOptions(t *testing.T) {
	t.Parallel()
	closed := newPool(t, testenv.Postgres(t).URL, 1)
	closed.Close()
	long := strings.Repeat("t", maxTableLen+1)
	for _, name := range []string{"", "1r", "r;drop table x", `r"`, "r-x", "a.b.c", ".r", "r.", "ü", long, "s." + long} {
		if _, err := New(closed, WithTable(name)); lock.CodeOf(err) != lock.CodeInvalidArgument {
			t.Fatalf("New with table %q: %v; want InvalidArgument", name, err)
		}
		if err := SetupSchema(t.Context(), closed, WithTable(name)); lock.CodeOf(err) != lock.CodeInvalidArgument {
			t.Fatalf("SetupSchema with table %q: %v; want InvalidArgument", name, err)
		}
	}
	for _, opts := range [][]Option{{WithMaxResponseBytes(0)}, {WithMaxResponseBytes(MaxResponseLimit + 1)}, {WithSweepBatch(0)}} {
		if _, err := New(closed, opts...); lock.CodeOf(err) != lock.CodeInvalidArgument {
			t.Fatalf("New with a bad limit: %v; want InvalidArgument", err)
		}
	}
	if _, err := New(nil); lock.CodeOf(err) != lock.CodeInvalidArgument {
		t.Fatalf("New(nil): %v", err)
	}
	for _, name := range []string{"records", "S.R_1", strings.Repeat("t", maxTableLen)} {
		if _, err := New(closed, WithTable(name), WithMaxResponseBytes(MaxResponseLimit)); err != nil {
			t.Fatalf("New with table %q: %v", name, err)
		}
	}
}
