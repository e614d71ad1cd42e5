package pgstore

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store"
)

// TestSchemaSQLMatchesSetupSchema checks that the shipped schema.sql is the
// DDL SetupSchema runs for the default name, below a header of comments
// that names the advisory lock SetupSchema holds.
func TestSchemaSQLMatchesSetupSchema(t *testing.T) {
	t.Parallel()
	cfg, err := newConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	ddl := renderDDL(cfg.table)
	header, ok := strings.CutSuffix(SchemaSQL(), ddl)
	if !ok {
		t.Fatalf("schema.sql is not the DDL of SetupSchema with the default name; want it to end with:\n%s", ddl)
	}
	for _, line := range strings.Split(strings.TrimSpace(header), "\n") {
		if !strings.HasPrefix(line, "--") {
			t.Fatalf("schema.sql has a line that is not a comment before the DDL: %q", line)
		}
	}
	if !strings.Contains(header, fmt.Sprint(schemaLockID)) {
		t.Fatal("the header of schema.sql does not name the advisory lock SetupSchema holds")
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
		q := buildQueries(tn, async)
		for i, s := range []string{q.claim, q.extend, q.complete, q.release, q.releaseAgain, q.get, q.delete, q.put, q.sweep} {
			if strings.Contains(s, "{{") || !strings.Contains(s, `"s"."records"`) {
				t.Fatalf("statement %d is not rendered:\n%s", i, s)
			}
		}
		if strings.Contains(q.release, "synchronous_commit") != async || strings.Contains(q.sweep, "synchronous_commit") != async {
			t.Fatalf("async %v: release and sweep set synchronous_commit = %v", async, !async)
		}
	}
}

// catalog describes the tables, columns and indexes of schema, one line
// each in a stable order, with the schema's name left out.
func catalog(t testing.TB, db *pgxpool.Pool, schema string) string {
	t.Helper()
	rows, err := db.Query(t.Context(), `
		SELECT table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(collation_name, '-')
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
	for _, want := range []string{"idemkit_records_keep_until_idx", "idemkit_records.key text NO C", "idemkit_records.keep_until timestamp with time zone NO", "idemkit_records.response bytea NO"} {
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
	for _, opts := range [][]Option{{WithMaxResponseBytes(0)}, {WithMaxResponseBytes(maxResponseLimit + 1)}, {WithSweepBatch(0)}} {
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
		if _, err := New(closed, WithTable(name), WithMaxResponseBytes(maxResponseLimit)); err != nil {
			t.Fatalf("New with table %q: %v", name, err)
		}
	}
}

// v1DDL is the record table of the layout before leased records, as its
// schema.sql created it.
const v1DDL = `CREATE TABLE IF NOT EXISTS "idemkit_records" (
    key         text        PRIMARY KEY,
    fingerprint bytea       NOT NULL,
    state       smallint    NOT NULL,
    response    bytea       NOT NULL,
    fence       bigint      NOT NULL,
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS "idemkit_records_expires_at_idx" ON "idemkit_records" (expires_at);
`

// migrationSQL returns the migration of the package documentation: the
// first code block of its migration section, with the schema's DDL where
// the block says so.
func migrationSQL(t testing.TB) string {
	t.Helper()
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "// # Migrating")
	if !ok {
		t.Fatal("doc.go has no migration section")
	}
	var block []string
	for _, line := range strings.Split(section, "\n") {
		if code, ok := strings.CutPrefix(line, "//\t"); ok {
			block = append(block, code)
		} else if len(block) > 0 {
			break
		}
	}
	sql := strings.Join(block, "\n")
	const here = "-- here: the DDL of schema.sql (pgstore.SchemaSQL())"
	if !strings.Contains(sql, here) {
		t.Fatalf("the migration lacks %q:\n%s", here, sql)
	}
	return strings.Replace(sql, here, SchemaSQL(), 1)
}

// TestMigrationFromV1 fills a table of the earlier layout with records of
// every kind, runs the migration of the package documentation, and checks
// that live records under verbatim keys replay, that the rest is gone, and
// that new claims work.
func TestMigrationFromV1(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	schema := newSchema(t, admin)
	applySQL(t, admin, schema, v1DDL)
	ctx := t.Context()
	insert := func(key string, state int, response string, fence int64, ttl time.Duration) {
		t.Helper()
		_, err := admin.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "idemkit_records"}.Sanitize()+`
			VALUES ($1, $2, $3, $4, $5, clock_timestamp(), clock_timestamp() + $6::bigint * interval '1 microsecond')`,
			key, []byte(fp), state, []byte(response), fence, ttl.Microseconds())
		if err != nil {
			t.Fatal(err)
		}
	}
	insert("k:idempotency:t:ascii", 1, "ascii", 7, time.Hour)
	insert("k:idempotency:t:caf\u00e9", 1, "unicode", 8, time.Hour)
	insert(`k:\xab`, 1, "backslash", 9, time.Hour)
	insert("k:idempotency:t:not-replayable", 2, "", 10, time.Hour)
	insert("k:idempotency:t:expired", 1, "old", 11, -time.Second)
	insert("h:0123456789abcdef", 1, "hashed", 12, time.Hour)

	applySQL(t, admin, schema, migrationSQL(t))

	s, err := New(admin, WithTable(schema+"."+defaultTable))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key, response string
		state         store.State
		fence         int64
	}{
		{"idempotency:t:ascii", "ascii", store.StateCompleted, 7},
		{"idempotency:t:caf\u00e9", "unicode", store.StateCompleted, 8},
		{`\xab`, "backslash", store.StateCompleted, 9},
		{"idempotency:t:not-replayable", "", store.StateNotReplayable, 10},
	} {
		rec, claimed, err := s.Claim(ctx, c.key, fp, time.Minute)
		if err != nil || claimed || rec.State != c.state || string(rec.Response) != c.response || int64(rec.Fence) != c.fence || rec.Fingerprint != fp {
			t.Fatalf("migrated %q: %+v, %v, %v; want the %v record", c.key, rec, claimed, err, c.state)
		}
	}
	var rows int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM `+tableOf(s)).Scan(&rows); err != nil || rows != 4 {
		t.Fatalf("%d rows after the migration (%v); want the 4 live records under verbatim keys", rows, err)
	}
	c, claimed, err := s.Claim(ctx, "idempotency:t:expired", fp, time.Minute)
	if err != nil || !claimed || c.Fence < 1e12 {
		t.Fatalf("a new claim after the migration: %+v, %v, %v; want a clock-derived fence", c, claimed, err)
	}
	if !strings.Contains(catalog(t, admin, schema), "idemkit_records_keep_until_idx") {
		t.Fatal("the migration did not create the new index")
	}
}

// TestSchemaNeedsMigration checks that SetupSchema and the store, on a
// table of the earlier layout, fail with InvalidArgument pointing at the
// migration, not with an internal error.
func TestSchemaNeedsMigration(t *testing.T) {
	t.Parallel()
	admin := newPool(t, testenv.Postgres(t).URL, 2)
	schema := newSchema(t, admin)
	applySQL(t, admin, schema, v1DDL)
	opt := WithTable(schema + "." + defaultTable)
	// CREATE TABLE IF NOT EXISTS keeps the earlier table; its index on
	// keep_until then fails.
	if err := SetupSchema(t.Context(), admin, opt); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument || !strings.Contains(err.Error(), "migrating") {
		t.Fatalf("SetupSchema on the earlier layout: %v; want InvalidArgument about migrating", err)
	}
	s, _ := New(admin, opt)
	_, _, err := s.Claim(context.Background(), "k", fp, time.Minute)
	if idemkit.CodeOf(err) != idemkit.CodeInvalidArgument || !strings.Contains(err.Error(), "migrating") {
		t.Fatalf("Claim on the earlier layout: %v; want InvalidArgument about migrating", err)
	}
}
