package pgstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/testenv"
)

// refusedKey is the record key the refused claims use; no error may quote
// it.
const refusedKey = "refused-key-5c1e"

// checkRefusal fails t unless err has code want, matches want's sentinel,
// reaches the server's error with SQLSTATE sqlstate, and says words,
// without the record key.
func checkRefusal(t *testing.T, err error, want idemkit.Code, sqlstate, words string) {
	t.Helper()
	var pe *pgconn.PgError
	if idemkit.CodeOf(err) != want || !errors.Is(err, want.Sentinel()) || !errors.As(err, &pe) || pe.Code != sqlstate {
		t.Fatalf("the claim: %v; want %v caused by SQLSTATE %s", err, want, sqlstate)
	}
	if !strings.Contains(err.Error(), words) {
		t.Fatalf("the error does not say %q: %v", words, err)
	}
	if strings.Contains(err.Error(), refusedKey) {
		t.Fatalf("the error quotes the record key: %v", err)
	}
	t.Logf("the error: %v", err)
}

// TestServerErrorReadOnly: a claim on connections whose transactions are
// read-only, as on a standby, is ServiceUnavailable saying so; reads still
// work.
func TestServerErrorReadOnly(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	opt := table(t, admin)
	pool := newPool(t, srv.URL, 2, func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	})
	s, err := New(pool, opt)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = s.Claim(ctx, refusedKey, fp, time.Minute)
	checkRefusal(t, err, idemkit.CodeServiceUnavailable, "25006", "read-only")
	if _, found, err := s.Get(ctx, refusedKey); err != nil || found {
		t.Fatalf("Get on a read-only server: %v, %v; want no record and no error", found, err)
	}
}

// TestServerErrorNoPerm: a claim by a role without privileges on the
// record table is AuthFailed saying permission was denied.
func TestServerErrorNoPerm(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	schema := newSchema(t, admin)
	opt := WithTable(schema + ".records")
	if err := SetupSchema(ctx, admin, opt); err != nil {
		t.Fatal(err)
	}
	pool := unprivileged(t, srv, admin, schema)
	s, err := New(pool, opt)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = s.Claim(ctx, refusedKey, fp, time.Minute)
	checkRefusal(t, err, idemkit.CodeAuthFailed, "42501", "permission denied")
}

// unprivileged returns a pool whose connections act as a role of the
// test's own that may use schema but has no privilege on its tables.
func unprivileged(t *testing.T, srv *testenv.PostgresServer, admin *pgxpool.Pool, schema string) *pgxpool.Pool {
	t.Helper()
	ctx := t.Context()
	role := pgx.Identifier{testenv.Name(t)}.Sanitize()
	if _, err := admin.Exec(ctx, "CREATE ROLE "+role+" NOLOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if _, err := admin.Exec(ctx, "DROP OWNED BY "+role); err != nil {
			t.Errorf("drop owned: %v", err)
		}
		if _, err := admin.Exec(ctx, "DROP ROLE "+role); err != nil {
			t.Errorf("drop role: %v", err)
		}
	})
	// The role may use the schema, so that what it lacks is a privilege on
	// the table itself.
	if _, err := admin.Exec(ctx, "GRANT USAGE ON SCHEMA "+pgx.Identifier{schema}.Sanitize()+" TO "+role); err != nil {
		t.Fatal(err)
	}
	pool := newPool(t, srv.URL, 2, func(c *pgxpool.Config) {
		c.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, "SET ROLE "+role)
			return err
		}
	})
	return pool
}
