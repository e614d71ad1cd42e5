package pgtest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SchemaSQLMatches checks that file, the text of a shipped schema.sql, is
// ddl (the DDL that SetupSchema runs with the default names) below a
// header of comment lines, and that the header names lockID, the advisory
// lock SetupSchema holds. It fails the test otherwise.
func SchemaSQLMatches(t testing.TB, file, ddl string, lockID int64) {
	t.Helper()
	header, ok := strings.CutSuffix(file, ddl)
	if !ok {
		t.Fatalf("schema.sql is not the DDL of SetupSchema with the default names; want it to end with:\n%s", ddl)
	}
	for _, line := range strings.Split(strings.TrimSpace(header), "\n") {
		if !strings.HasPrefix(line, "--") {
			t.Fatalf("schema.sql has a line that is not a comment before the DDL: %q", line)
		}
	}
	if !strings.Contains(header, fmt.Sprint(lockID)) {
		t.Fatal("the header of schema.sql does not name the advisory lock SetupSchema holds")
	}
}

// AppliesLikeSetup applies file, the text of a shipped schema.sql, as a
// migration tool would (in a [Schema] of its own, through the search
// path), calls setup to create the same tables with the default names in
// another schema, and checks that the two schemas have the same [Catalog].
// It returns that catalog, for checks of what it must hold.
func AppliesLikeSetup(t testing.TB, db *pgxpool.Pool, file string, setup func(ctx context.Context, schema string) error) string {
	t.Helper()
	ctx := t.Context()
	viaFile, viaSetup := Schema(t, db), Schema(t, db)
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SET LOCAL search_path = "+pgx.Identifier{viaFile}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, file); err != nil {
		t.Fatalf("applying schema.sql: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := setup(ctx, viaSetup); err != nil {
		t.Fatal(err)
	}
	a, b := Catalog(t, db, viaFile), Catalog(t, db, viaSetup)
	if a != b {
		t.Fatalf("schema.sql and SetupSchema disagree:\nschema.sql:\n%s\nSetupSchema:\n%s", a, b)
	}
	return a
}

// Catalog describes the tables, columns and indexes of schema, one line
// each in a stable order, with the schema's name left out: two schemas
// built by the same DDL have the same catalog.
func Catalog(t testing.TB, db *pgxpool.Pool, schema string) string {
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

// SetupConcurrently runs setup from runners goroutines released together,
// on a pool of runners connections to url, so that the setups race each
// on a connection of its own, as processes starting together would. It
// fails the test if any of them fails, and returns the pool.
func SetupConcurrently(t testing.TB, url string, runners int, setup func(ctx context.Context, db *pgxpool.Pool) error) *pgxpool.Pool {
	t.Helper()
	pool := NewPool(t, url, int32(runners))
	ctx := t.Context()
	var wg sync.WaitGroup
	errs := make(chan error, runners)
	start := make(chan struct{})
	for range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs <- setup(ctx, pool)
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
	return pool
}
