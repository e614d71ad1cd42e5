package pgstore

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/guardtest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/middleware"
)

// loggingGuard returns a guard on s that logs to log, with a failure log
// interval longer than any test.
func loggingGuard(t *testing.T, s *Store, log *guardtest.Log) *middleware.Guard {
	t.Helper()
	g, err := middleware.New(s, middleware.WithLogger(log.Logger()), middleware.WithFailureLogInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestDroppedTableUnderRunningService: a service whose record table is
// dropped while it runs answers every request 500 of its own problem type,
// without Retry-After (retrying cannot help), and its guard logs the fix
// (run pgstore.SetupSchema) once.
func TestDroppedTableUnderRunningService(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 4)
	opt := table(t, admin)
	s, err := New(admin, opt)
	if err != nil {
		t.Fatal(err)
	}
	var log guardtest.Log
	url := guardtest.Serve(t, loggingGuard(t, s, &log))
	if a := guardtest.Post(t, url, "before"); a.Status != http.StatusCreated {
		t.Fatalf("before the drop: %+v", a)
	}
	if _, err := admin.Exec(t.Context(), "DROP TABLE "+tableOf(s)); err != nil {
		t.Fatal(err)
	}
	guardtest.CheckOutage(t, url, &log, guardtest.Outage{
		Requests: 20, Status: http.StatusInternalServerError, Kind: "idempotency-misconfigured",
		Code: "Misconfigured", Words: []string{"run pgstore.SetupSchema", "42P01"},
	})
}

// TestNoPrivilegeUnderRunningService: a service whose role has no
// privilege on the record table answers every request 500 of its own
// problem type, without Retry-After, and its guard logs the grants the
// role needs once.
func TestNoPrivilegeUnderRunningService(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	schema := newSchema(t, admin)
	opt := WithTable(schema + ".records")
	if err := SetupSchema(t.Context(), admin, opt); err != nil {
		t.Fatal(err)
	}
	s, err := New(unprivileged(t, srv, admin, schema), opt)
	if err != nil {
		t.Fatal(err)
	}
	var log guardtest.Log
	url := guardtest.Serve(t, loggingGuard(t, s, &log))
	guardtest.CheckOutage(t, url, &log, guardtest.Outage{
		Requests: 20, Status: http.StatusInternalServerError, Kind: "idempotency-misconfigured",
		Code: "AuthFailed", Words: []string{"grant the store's role SELECT, INSERT, UPDATE and DELETE", "42501"},
	})
}

// TestGuardCheck: the startup check passes on a good setup, and names the
// fix on a missing table and on a role without privileges.
func TestGuardCheck(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 4)
	schema := newSchema(t, admin)
	opt := WithTable(schema + ".records")
	check := func(db DB) error {
		s, err := New(db, opt)
		if err != nil {
			t.Fatal(err)
		}
		g, err := middleware.New(s)
		if err != nil {
			t.Fatal(err)
		}
		return g.Check(ctx)
	}

	err := check(admin)
	if idemkit.CodeOf(err) != idemkit.CodeMisconfigured || !strings.Contains(err.Error(), "run pgstore.SetupSchema") {
		t.Fatalf("Check before SetupSchema: %v; want Misconfigured saying to run pgstore.SetupSchema", err)
	}
	t.Logf("no table: %v", err)

	if err := SetupSchema(ctx, admin, opt); err != nil {
		t.Fatal(err)
	}
	if err := check(admin); err != nil {
		t.Fatalf("Check on a good setup: %v", err)
	}

	err = check(unprivileged(t, srv, admin, schema))
	if idemkit.CodeOf(err) != idemkit.CodeAuthFailed || !errors.Is(err, middleware.ErrUnavailable) || !strings.Contains(err.Error(), "grant the store's role") {
		t.Fatalf("Check by a role without privileges: %v; want AuthFailed naming the grants", err)
	}
	t.Logf("no privileges: %v", err)
}
