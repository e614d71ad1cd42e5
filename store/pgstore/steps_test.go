package pgstore

import (
	"bytes"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store"
)

// stepStore returns a store on a pool of its own, over a table of the
// test's own, with the admin pool and the orders table (see ordersTable).
func stepStore(t *testing.T) (s *Store, admin *pgxpool.Pool, orders string) {
	t.Helper()
	srv := testenv.Postgres(t)
	admin = newPool(t, srv.URL, 2)
	opt := table(t, admin)
	s, err := New(newPool(t, srv.URL, 4), opt)
	if err != nil {
		t.Fatal(err)
	}
	return s, admin, ordersTable(t, admin, s)
}

// keepUntil returns the keep_until of key's row and the server's clock.
func keepUntil(t *testing.T, admin *pgxpool.Pool, s *Store, key string) (keep, now time.Time) {
	t.Helper()
	if err := admin.QueryRow(t.Context(), `SELECT keep_until, clock_timestamp() FROM `+tableOf(s)+` WHERE key = $1`,
		storedKey(key)).Scan(&keep, &now); err != nil {
		t.Fatal(err)
	}
	return keep, now
}

func mustClaimKey(t *testing.T, s *Store, key, fp string, ttl time.Duration) store.Record {
	t.Helper()
	c, claimed, err := s.Claim(t.Context(), key, fp, ttl)
	if err != nil || !claimed {
		t.Fatalf("Claim %q: %+v, %v, %v", key, c, claimed, err)
	}
	return c
}

// TestStepsKeepUntil checks the keep a step asks for on the row itself:
// RecordStep raises keep_until to at least now + keep and never lowers
// it; Extend, Release and a take-over that carries the steps keep it; a
// dead row past its keep_until (one Sweep may delete at any moment)
// carries nothing, so that what a claim gets does not depend on when the
// sweeper ran.
func TestStepsKeepUntil(t *testing.T) {
	t.Parallel()
	s, admin, _ := stepStore(t)
	ctx := t.Context()
	const k, keep = "steps-keep", 3 * time.Hour
	c := mustClaimKey(t, s, k, fp, time.Minute)
	if ok, err := s.RecordStep(ctx, k, c.Fence, 0, store.Step{Name: "reserve", Result: []byte("r-1")}, keep); !ok || err != nil {
		t.Fatalf("RecordStep: %v, %v", ok, err)
	}
	atLeast := func(what string) time.Time {
		t.Helper()
		until, now := keepUntil(t, admin, s, k)
		if until.Before(now.Add(keep - time.Minute)) {
			t.Fatalf("%s: keep_until %v, %v after the server's clock; want about the step's keep of %v", what, until, until.Sub(now), keep)
		}
		return until
	}
	first := atLeast("after the step")
	// A shorter keep does not shorten it.
	if ok, err := s.RecordStep(ctx, k, c.Fence, 1, store.Step{Name: "charge"}, time.Second); !ok || err != nil {
		t.Fatalf("RecordStep: %v, %v", ok, err)
	}
	if until, _ := keepUntil(t, admin, s, k); until.Before(first) {
		t.Fatalf("a step with a shorter keep lowered keep_until from %v to %v", first, until)
	}
	if _, ok, err := s.Extend(ctx, k, c.Fence, time.Second); !ok || err != nil {
		t.Fatalf("Extend: %v, %v", ok, err)
	}
	atLeast("after Extend")
	if ok, err := s.Release(ctx, k, c.Fence); !ok || err != nil {
		t.Fatalf("Release: %v, %v", ok, err)
	}
	atLeast("after Release")
	n := mustClaimKey(t, s, k, fp, time.Second)
	if len(n.Steps) != 2 {
		t.Fatalf("the claim after the release carried %d steps; want 2", len(n.Steps))
	}
	atLeast("after the take-over")

	// Past its keep_until the dead row's steps are not carried.
	if ok, err := s.Release(ctx, k, n.Fence); !ok || err != nil {
		t.Fatalf("Release: %v, %v", ok, err)
	}
	if _, err := admin.Exec(ctx, `UPDATE `+tableOf(s)+` SET keep_until = clock_timestamp() - interval '1 second' WHERE key = $1`, k); err != nil {
		t.Fatal(err)
	}
	m := mustClaimKey(t, s, k, fp, time.Minute)
	if len(m.Steps) != 0 || m.Fence <= n.Fence {
		t.Fatalf("the claim of a row past its keep_until: %+v; want no steps, a fence above %v", m, n.Fence)
	}
}

// TestStepsOfARowWithoutAreNULL checks that records without steps store
// none (NULL), that a release without steps leaves the tombstone it left
// before (no fingerprint), and that one with steps keeps the fingerprint.
func TestStepsOfARowWithoutAreNULL(t *testing.T) {
	t.Parallel()
	s, admin, _ := stepStore(t)
	ctx := t.Context()
	column := func(key string) (steps, fingerprint []byte) {
		t.Helper()
		if err := admin.QueryRow(ctx, `SELECT steps, fingerprint FROM `+tableOf(s)+` WHERE key = $1`, key).Scan(&steps, &fingerprint); err != nil {
			t.Fatal(err)
		}
		return steps, fingerprint
	}
	c := mustClaimKey(t, s, "plain", fp, time.Minute)
	if steps, _ := column("plain"); steps != nil {
		t.Fatalf("a claim without steps stores %x; want NULL", steps)
	}
	if ok, err := s.Release(ctx, "plain", c.Fence); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if steps, f := column("plain"); steps != nil || len(f) != 0 {
		t.Fatalf("the tombstone of a release without steps holds steps %x, fingerprint %q; want NULL and none", steps, f)
	}
	c = mustClaimKey(t, s, "stepped", fp, time.Minute)
	if ok, err := s.RecordStep(ctx, "stepped", c.Fence, 0, store.Step{Name: "a", Result: []byte("b")}, time.Minute); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if steps, _ := column("stepped"); !bytes.Equal(steps, []byte{1, 1, 'a', 1, 'b'}) {
		t.Fatalf("the steps column holds %x; want 01 01 61 01 62 (one step: name a, result b)", steps)
	}
	if ok, err := s.Release(ctx, "stepped", c.Fence); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if steps, f := column("stepped"); steps == nil || string(f) != fp {
		t.Fatalf("the tombstone of a release with steps holds steps %x, fingerprint %q; want both kept", steps, f)
	}
	n := mustClaimKey(t, s, "stepped", fp, time.Minute)
	if ok, err := s.Complete(ctx, store.Record{Key: "stepped", Fingerprint: fp, State: store.StateCompleted, Fence: n.Fence, Response: []byte("ok")}, time.Minute); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if steps, _ := column("stepped"); steps != nil {
		t.Fatalf("an outcome stores steps %x; want NULL", steps)
	}
}

// TestStepsListAndFindClaim checks that List and FindClaim return a live
// claim's steps too.
func TestStepsListAndFindClaim(t *testing.T) {
	t.Parallel()
	s, _, _ := stepStore(t)
	ctx := t.Context()
	const lockID = "AAAAAAAAAAAAAAAAAAAAAA"
	c := mustClaimKey(t, s, "list-a", lockID, time.Minute)
	if ok, err := s.RecordStep(ctx, "list-a", c.Fence, 0, store.Step{Name: "s", Result: []byte("1")}, time.Minute); !ok || err != nil {
		t.Fatal(ok, err)
	}
	mustClaimKey(t, s, "list-b", fp, time.Minute)
	recs, _, err := s.List(ctx, "list-", "", 10)
	if err != nil || len(recs) != 2 {
		t.Fatalf("List: %+v, %v", recs, err)
	}
	if len(recs[0].Steps) != 1 || recs[0].Steps[0].Name != "s" || string(recs[0].Steps[0].Result) != "1" || len(recs[1].Steps) != 0 {
		t.Fatalf("List's steps: %+v and %+v; want s=1 and none", recs[0].Steps, recs[1].Steps)
	}
	got, ok, err := s.FindClaim(ctx, lockID)
	if err != nil || !ok || len(got.Steps) != 1 || got.Steps[0].Name != "s" {
		t.Fatalf("FindClaim: %+v, %v, %v; want the claim with its step", got, ok, err)
	}
}

// TestStepsSchemaMigratesATableFromBeforeSteps checks that SetupSchema
// brings a table and claim function made before steps (no steps column, a
// claim function that answers none) to the current schema, whose store
// then records and carries steps; CREATE OR REPLACE alone would fail
// (a function's result cannot change).
func TestStepsSchemaMigratesATableFromBeforeSteps(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	ctx := t.Context()
	opt := WithTable(newSchema(t, admin) + ".records")
	cfg, err := newConfig([]Option{opt})
	if err != nil {
		t.Fatal(err)
	}
	tbl, fn := cfg.table.sanitize(), cfg.table.claimFunc()
	// The table and claim function as the schema before steps made them
	// (the function's body does not matter here, its result does).
	if _, err := admin.Exec(ctx, `CREATE TABLE `+tbl+` (key text COLLATE "C" PRIMARY KEY, fingerprint bytea NOT NULL,
	state smallint NOT NULL, response bytea NOT NULL, fence bigint NOT NULL, created_at timestamptz NOT NULL,
	expires_at timestamptz NOT NULL, keep_until timestamptz NOT NULL);
INSERT INTO `+tbl+` VALUES ('old', '', 2, 'x', 1, now(), now() + interval '1 hour', now() + interval '1 hour');
CREATE FUNCTION `+fn+`(k text, fp bytea, lease bigint, retain bigint, step bigint)
RETURNS TABLE (claimed boolean, fingerprint bytea, state smallint, response bytea, fence bigint, created_at timestamptz, expires_at timestamptz)
LANGUAGE sql AS 'SELECT NULL::boolean, NULL::bytea, NULL::smallint, NULL::bytea, NULL::bigint, NULL::timestamptz, NULL::timestamptz WHERE false'`); err != nil {
		t.Fatal(err)
	}
	for range 2 { // and again, once migrated
		if err := SetupSchema(ctx, admin, opt); err != nil {
			t.Fatalf("SetupSchema over a table from before steps: %v", err)
		}
	}
	s, err := New(admin, opt)
	if err != nil {
		t.Fatal(err)
	}
	if old, ok, err := s.Get(ctx, "old"); err != nil || !ok || string(old.Response) != "x" {
		t.Fatalf("the row from before steps: %+v, %v, %v", old, ok, err)
	}
	c := mustClaimKey(t, s, "k", fp, time.Minute)
	if ok, err := s.RecordStep(ctx, "k", c.Fence, 0, store.Step{Name: "reserve"}, time.Minute); !ok || err != nil {
		t.Fatalf("RecordStep on the migrated table: %v, %v", ok, err)
	}
	if ok, err := s.Release(ctx, "k", c.Fence); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if n := mustClaimKey(t, s, "k", fp, time.Minute); len(n.Steps) != 1 || n.Steps[0].Name != "reserve" {
		t.Fatalf("the claim after the release on the migrated table: steps %+v; want reserve", n.Steps)
	}
}
