package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
)

// TestSchemaSQLRendered checks that SetupSchema's DDL is schema.sql
// itself for the default name and carries another name everywhere, that
// schema.sql names the advisory lock SetupSchema holds, and that its
// partial index has the predicate FindClaim repeats, and that the fence
// is bounded by idemkit.FenceMax.
func TestSchemaSQLRendered(t *testing.T) {
	t.Parallel()
	cfg, err := newConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if renderDDL(cfg.table) != SchemaSQL() {
		t.Fatal("the DDL for the default name is not schema.sql")
	}
	other, err := parseTableName("s.t")
	if err != nil {
		t.Fatal(err)
	}
	ddl := renderDDL(other)
	for _, want := range []string{`EXISTS "s"."t" (`, `EXISTS "t_keep_until_idx" ON "s"."t"`, `EXISTS "t_lock_id_idx" ON "s"."t"`,
		`FUNCTION "s"."t_claim"(`, `FROM "s"."t" AS r WHERE`, `pg_notify('idemkit:s.t', k)`} {
		if !strings.Contains(ddl, want) {
			t.Fatalf("the DDL for s.t lacks %s:\n%s", want, ddl)
		}
	}
	if strings.Contains(ddl, `"`+defaultTable) {
		t.Fatalf("the DDL for s.t still names %s:\n%s", defaultTable, ddl)
	}
	if !strings.Contains(SchemaSQL(), fmt.Sprint(schemaLockID)) || !strings.Contains(SchemaSQL(), "WHERE "+lockIDRows+";") {
		t.Fatal("schema.sql does not name the advisory lock SetupSchema holds, or its lock-id index has another predicate than FindClaim's")
	}
	if !strings.Contains(SchemaSQL(), fmt.Sprintf("CHECK (fence <= %d)", idemkit.FenceMax)) {
		t.Fatal("schema.sql does not bound the fence by idemkit.FenceMax")
	}
}

// TestQueriesRendered checks that every statement was rendered: no
// placeholder is left, and each names the table.
func TestQueriesRendered(t *testing.T) {
	t.Parallel()
	tn, err := parseTableName("s.records")
	if err != nil {
		t.Fatal(err)
	}
	for _, async := range []bool{false, true} {
		q := buildQueries(tn, time.Minute, async)
		for i, s := range []string{q.claim, q.extend, q.complete, q.release, q.releaseAgain, q.get, q.delete, q.put, q.sweep} {
			if strings.Contains(s, "{{") || !strings.Contains(s, `"s"."records"`) && !strings.Contains(s, `"s"."records_claim"(`) {
				t.Fatalf("statement %d is not rendered:\n%s", i, s)
			}
		}
		if strings.Contains(q.release, "synchronous_commit") != async || strings.Contains(q.sweep, "synchronous_commit") != async {
			t.Fatalf("async %v: release and sweep set synchronous_commit = %v", async, !async)
		}
	}
}

// catalog describes the tables, columns, indexes and functions of schema
// (a function by its arguments and a hash of its body), one line each in
// a stable order, with the schema's name left out.
func catalog(t testing.TB, db *pgxpool.Pool, schema string) string {
	t.Helper()
	rows, err := db.Query(t.Context(), `
		SELECT table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(collation_name, '-')
		FROM information_schema.columns WHERE table_schema = $1
		UNION ALL
		SELECT indexname || ': ' || replace(indexdef, $1 || '.', '')
		FROM pg_indexes WHERE schemaname = $1
		UNION ALL
		SELECT 'function ' || p.proname || '(' || pg_get_function_arguments(p.oid) || ') returns ' ||
			pg_get_function_result(p.oid) || ' ' || md5(replace(replace(p.prosrc, '"' || $1 || '".', ''), $1 || '.', ''))
		FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace WHERE n.nspname = $1
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

// applySQL runs sql in one transaction with schema first on the search
// path, as a migration tool would apply a file.
func applySQL(t testing.TB, db *pgxpool.Pool, schema, sql string) {
	t.Helper()
	ctx := t.Context()
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SET LOCAL search_path = "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, sql); err != nil {
		t.Fatalf("applying SQL: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSchemaSQLAppliesLikeSetupSchema applies schema.sql as a migration
// tool would and compares the catalog with what SetupSchema creates.
func TestSchemaSQLAppliesLikeSetupSchema(t *testing.T) {
	t.Parallel()
	admin := newPool(t, testenv.Postgres(t).URL, 2)
	viaFile, viaSetup := newSchema(t, admin), newSchema(t, admin)
	applySQL(t, admin, viaFile, SchemaSQL())
	if err := SetupSchema(t.Context(), admin, WithTable(viaSetup+"."+defaultTable)); err != nil {
		t.Fatal(err)
	}
	a, b := catalog(t, admin, viaFile), catalog(t, admin, viaSetup)
	if a != b {
		t.Fatalf("schema.sql and SetupSchema disagree:\nschema.sql:\n%s\nSetupSchema:\n%s", a, b)
	}
	for _, want := range []string{"idemkit_records_keep_until_idx", "idemkit_records_lock_id_idx", "idemkit_records.key text NO C", "idemkit_records.keep_until timestamp with time zone NO", "idemkit_records.response bytea NO",
		"function idemkit_records_claim(k text, fp bytea, lease bigint, retain bigint, step bigint) returns TABLE(claimed boolean"} {
		if !strings.Contains(a, want) {
			t.Fatalf("the catalog lacks %q:\n%s", want, a)
		}
	}
}

// TestSetupSchemaIdempotent runs SetupSchema twice, then from 8
// connections at once on a fresh name, and in a caller's transaction.
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
	pool := newPool(t, srv.URL, 8)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	start := make(chan struct{})
	for range 8 {
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
	inTx := WithTable(newSchema(t, admin) + ".records")
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := SetupSchema(ctx, tx, inTx); err != nil {
		t.Fatalf("SetupSchema in a transaction: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for _, o := range []Option{opt, fresh, inTx} {
		s, _ := New(pool, o)
		if _, claimed, err := s.Claim(ctx, "k", fp, time.Minute); err != nil || !claimed {
			t.Fatalf("Claim after SetupSchema: %v, %v", claimed, err)
		}
	}
}

// TestInvalidOptions checks that bad names and limits are refused with
// InvalidArgument before any SQL: the client is a closed pool, so any I/O
// would fail with ServiceUnavailable instead.
func TestInvalidOptions(t *testing.T) {
	t.Parallel()
	closed := newPool(t, testenv.Postgres(t).URL, 1)
	closed.Close()
	long := strings.Repeat("t", maxTableLen+1)
	for _, name := range []string{"", "1r", "r;drop table x", `r"`, "r-x", "a.b.c", ".r", "r.", "ü", long, "s." + long, strings.Repeat("s", maxSchemaLen+1) + ".r"} {
		if _, err := New(closed, WithTable(name)); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("New with table %q: %v; want InvalidArgument", name, err)
		}
		if err := SetupSchema(t.Context(), closed, WithTable(name)); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("SetupSchema with table %q: %v; want InvalidArgument", name, err)
		}
	}
	for _, opts := range [][]Option{{WithMaxResponseBytes(0)}, {WithMaxResponseBytes(maxResponseLimit + 1)}, {WithSweepBatch(0)}, {WithMaxClockStep(-time.Millisecond)}} {
		if _, err := New(closed, opts...); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("New with a bad limit: %v; want InvalidArgument", err)
		}
	}
	if _, err := New(nil); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("New(nil): %v", err)
	}
	if err := SetupSchema(t.Context(), nil); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("SetupSchema(nil): %v", err)
	}
	for _, name := range []string{"records", "S.R_1", strings.Repeat("t", maxTableLen)} {
		if _, err := New(closed, WithTable(name), WithMaxResponseBytes(maxResponseLimit), WithMaxClockStep(0)); err != nil {
			t.Fatalf("New with table %q: %v", name, err)
		}
	}
}

// otherLayoutDDL is a record table named like the default one, in a
// layout this package never wrote: no keep_until column.
const otherLayoutDDL = `CREATE TABLE IF NOT EXISTS "idemkit_records" (
    key         text        PRIMARY KEY,
    fingerprint bytea       NOT NULL,
    state       smallint    NOT NULL,
    response    bytea       NOT NULL,
    fence       bigint      NOT NULL,
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);
`

// TestSchemaOfAnotherLayout checks that SetupSchema and the store, on a
// table of the record table's name but another layout, fail with
// Misconfigured pointing at the schema, not with an internal error.
func TestSchemaOfAnotherLayout(t *testing.T) {
	t.Parallel()
	admin := newPool(t, testenv.Postgres(t).URL, 2)
	schema := newSchema(t, admin)
	applySQL(t, admin, schema, otherLayoutDDL)
	opt := WithTable(schema + "." + defaultTable)
	// CREATE TABLE IF NOT EXISTS keeps the table; its index on keep_until
	// then fails.
	if err := SetupSchema(t.Context(), admin, opt); idemkit.CodeOf(err) != idemkit.CodeMisconfigured || !strings.Contains(err.Error(), "schema.sql") {
		t.Fatalf("SetupSchema on another layout: %v; want Misconfigured about the schema", err)
	}
	s, _ := New(admin, opt)
	_, _, err := s.Claim(context.Background(), "k", fp, time.Minute)
	if idemkit.CodeOf(err) != idemkit.CodeMisconfigured || !strings.Contains(err.Error(), "schema.sql") {
		t.Fatalf("Claim on another layout: %v; want Misconfigured about the schema", err)
	}
}

// TestClaimWithoutClaimFunction checks that a table whose claim function
// is missing (a table created by hand, or by an older schema.sql) makes a
// claim fail with Misconfigured pointing at the schema, not with an
// internal error.
func TestClaimWithoutClaimFunction(t *testing.T) {
	t.Parallel()
	admin := newPool(t, testenv.Postgres(t).URL, 2)
	opt := table(t, admin)
	s, err := New(admin, opt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(t.Context(), "DROP FUNCTION "+s.cfg.table.claimFunc()); err != nil {
		t.Fatal(err)
	}
	_, _, err = s.Claim(t.Context(), "k", fp, time.Minute)
	var pe *pgconn.PgError
	if idemkit.CodeOf(err) != idemkit.CodeMisconfigured || !strings.Contains(err.Error(), "schema.sql") || !errors.As(err, &pe) || pe.Code != "42883" {
		t.Fatalf("Claim without the claim function: %v; want Misconfigured about the schema, caused by SQLSTATE 42883", err)
	}
}
