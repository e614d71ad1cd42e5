package pgstore

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/pglock/pgtest"
	"github.com/idemkit/idemkit/store"
)

// TestSchemaSQLMatchesSetupSchema checks that the shipped schema.sql is the
// DDL SetupSchema runs for the default name, below a header of comments.
func TestSchemaSQLMatchesSetupSchema(t *testing.T) {
	cfg, err := newConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	pgtest.SchemaSQLMatches(t, SchemaSQL(), renderDDL(cfg.table), SchemaLockID)
}

// TestSchemaSQLAppliesLikeSetupSchema applies schema.sql as a migration
// tool would and compares the catalog with what SetupSchema creates.
func TestSchemaSQLAppliesLikeSetupSchema(t *testing.T) {
	t.Parallel()
	admin := pgtest.NewPool(t, testenv.Postgres(t).URL, 2)
	a := pgtest.AppliesLikeSetup(t, admin, SchemaSQL(), func(ctx context.Context, schema string) error {
		return SetupSchema(ctx, admin, WithTable(schema+"."+DefaultTable))
	})
	if !strings.Contains(a, "idemkit_records_expires_at_idx") || !strings.Contains(a, "response bytea NO") {
		t.Fatalf("the catalog lacks what the schema declares:\n%s", a)
	}
}

// TestSetupSchemaIdempotent runs SetupSchema twice, then from several
// goroutines at once on a fresh name.
func TestSetupSchemaIdempotent(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := pgtest.NewPool(t, srv.URL, 2)
	ctx := t.Context()
	opt := table(t, admin)
	if err := SetupSchema(ctx, admin, opt); err != nil {
		t.Fatalf("second SetupSchema: %v", err)
	}
	fresh := WithTable(pgtest.Schema(t, admin) + ".records")
	pool := pgtest.SetupConcurrently(t, srv.URL, 8, func(ctx context.Context, db *pgxpool.Pool) error {
		return SetupSchema(ctx, db, fresh)
	})
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
	closed := pgtest.NewPool(t, testenv.Postgres(t).URL, 1)
	closed.Close()
	long := strings.Repeat("t", maxTableLen+1)
	for _, name := range []string{"", "1r", "r;drop table x", `r"`, "r-x", "a.b.c", ".r", "r.", "ü", long, "s." + long} {
		if _, err := New(closed, WithTable(name)); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("New with table %q: %v; want InvalidArgument", name, err)
		}
		if err := SetupSchema(t.Context(), closed, WithTable(name)); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("SetupSchema with table %q: %v; want InvalidArgument", name, err)
		}
	}
	for _, opts := range [][]Option{{WithMaxResponseBytes(0)}, {WithMaxResponseBytes(MaxResponseLimit + 1)}, {WithSweepBatch(0)}} {
		if _, err := New(closed, opts...); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
			t.Fatalf("New with a bad limit: %v; want InvalidArgument", err)
		}
	}
	if _, err := New(nil); idemkit.CodeOf(err) != idemkit.CodeInvalidArgument {
		t.Fatalf("New(nil): %v", err)
	}
	for _, name := range []string{"records", "S.R_1", strings.Repeat("t", maxTableLen)} {
		if _, err := New(closed, WithTable(name), WithMaxResponseBytes(MaxResponseLimit)); err != nil {
			t.Fatalf("New with table %q: %v", name, err)
		}
	}
}
