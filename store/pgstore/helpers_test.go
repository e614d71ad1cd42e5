package pgstore

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// newPool connects a pool of at most conns connections to url, closed when
// the test ends.
func newPool(t testing.TB, url string, conns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = conns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// connect opens one connection, closed when the test ends.
func connect(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// newSchema creates a schema of the test's own and returns its name.
func newSchema(t testing.TB, admin DB) string {
	t.Helper()
	schema := testenv.Name(t)
	if _, err := admin.Exec(context.Background(), "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	return schema
}

// table creates a record table in a schema of the test's own and returns
// the option that names it.
func table(t testing.TB, admin DB) Option {
	t.Helper()
	opt := WithTable(newSchema(t, admin) + ".records")
	if err := SetupSchema(context.Background(), admin, opt); err != nil {
		t.Fatalf("SetupSchema: %v", err)
	}
	return opt
}
