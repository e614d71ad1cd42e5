package pgstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/leased"
	"github.com/idemkit/idemkit/internal/sweepertest"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store"
)

// TestKeepUntil checks every row's keep_until against
// leased.KeepUntil(row, the store's largest clock step), for each kind of
// row (a claim, an extended claim, an outcome, a not-replayable outcome, a
// put record, and the tombstones of a release and a delete), with the
// default step, none, and a step longer than the leases.
func TestKeepUntil(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	for _, c := range []struct {
		name string
		opts []Option
		step time.Duration
	}{
		{"default", nil, leased.DefaultMaxClockStep},
		{"none", []Option{WithMaxClockStep(0)}, 0},
		{"longer than the leases", []Option{WithMaxClockStep(5 * time.Hour)}, 5 * time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := New(admin, append(c.opts, table(t, admin))...)
			if err != nil {
				t.Fatal(err)
			}
			writeEveryKindOfRow(t, s)
			rows, err := admin.Query(t.Context(), `SELECT key, state, fence, expires_at, keep_until FROM `+tableOf(s))
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			seen := 0
			for rows.Next() {
				var (
					key           string
					state         int16
					fence         int64
					expires, keep time.Time
				)
				if err := rows.Scan(&key, &state, &fence, &expires, &keep); err != nil {
					t.Fatal(err)
				}
				seen++
				want := leased.KeepUntil(store.Record{State: store.State(state), Fence: idemkit.Fence(fence), ExpiresAt: expires}, c.step)
				if !keep.Equal(want) {
					t.Errorf("%s (state %d): kept until %v; want leased.KeepUntil = %v", key, state, keep, want)
				}
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if seen != 7 {
				t.Fatalf("%d rows; want 7", seen)
			}
		})
	}
}

// writeEveryKindOfRow leaves in s's table a claim, an extended claim, two
// outcomes, a put record and the tombstones of a release and a delete.
func writeEveryKindOfRow(t *testing.T, s *Store) {
	t.Helper()
	ctx := t.Context()
	claim := func(k string, ttl time.Duration) store.Record {
		t.Helper()
		c, claimed, err := s.Claim(ctx, k, fp, ttl)
		if err != nil || !claimed {
			t.Fatalf("Claim(%s): %v, %v", k, claimed, err)
		}
		return c
	}
	claim("claim", time.Hour)
	c := claim("extended", time.Minute)
	if _, ok, err := s.Extend(ctx, "extended", c.Fence, 2*time.Hour); err != nil || !ok {
		t.Fatalf("Extend: %v, %v", ok, err)
	}
	for k, st := range map[string]store.State{"completed": store.StateCompleted, "not-replayable": store.StateNotReplayable} {
		c := claim(k, time.Hour)
		c.State, c.Response = st, []byte("r")
		if ok, err := s.Complete(ctx, c, 3*time.Hour); err != nil || !ok {
			t.Fatalf("Complete: %v, %v", ok, err)
		}
	}
	if ok, err := s.Put(ctx, store.Record{Key: "put", State: store.StateCompleted, Fence: 5}, time.Hour); err != nil || !ok {
		t.Fatalf("Put: %v, %v", ok, err)
	}
	c = claim("released", time.Hour)
	if ok, err := s.Release(ctx, "released", c.Fence); err != nil || !ok {
		t.Fatalf("Release: %v, %v", ok, err)
	}
	claim("deleted", time.Hour)
	if ok, err := s.Delete(ctx, "deleted"); err != nil || !ok {
		t.Fatalf("Delete: %v, %v", ok, err)
	}
}

// TestSweepKeepsTombstonesForTheClockStep checks that the tombstones of a
// release and a delete stay, through sweeps, until the server's clock has
// passed their fence plus the largest clock step, and go with the next
// sweep after that.
func TestSweepKeepsTombstonesForTheClockStep(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	const step = 2 * time.Second
	s, err := New(admin, table(t, admin), WithMaxClockStep(step))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	var fences []idemkit.Fence
	for _, k := range []string{"released", "deleted"} {
		c, claimed, err := s.Claim(ctx, k, fp, time.Hour)
		if err != nil || !claimed {
			t.Fatalf("Claim: %v, %v", claimed, err)
		}
		fences = append(fences, c.Fence)
	}
	if ok, err := s.Release(ctx, "released", fences[0]); err != nil || !ok {
		t.Fatalf("Release: %v, %v", ok, err)
	}
	if ok, err := s.Delete(ctx, "deleted"); err != nil || !ok {
		t.Fatalf("Delete: %v, %v", ok, err)
	}
	if n, err := s.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("Sweep within the clock step = %d, %v; want the two tombstones kept", n, err)
	}
	var left int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM `+tableOf(s)+` WHERE state = 0`).Scan(&left); err != nil || left != 2 {
		t.Fatalf("%d tombstones, %v; want 2", left, err)
	}
	time.Sleep(time.UnixMilli(int64(max(fences[0], fences[1])) + 1).Add(step + margin).Sub(time.Now()))
	if n, err := s.Sweep(ctx); err != nil || n != 2 {
		t.Fatalf("Sweep past the clock step = %d, %v; want the two tombstones gone", n, err)
	}
}

// TestSweep checks that Sweep deletes, in batches, exactly the rows past
// their keep_until: expired put records and a run-out claim once its
// retention is over, not a run-out claim within its retention nor a live
// record.
func TestSweep(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	opt := table(t, admin)
	s, err := New(newPool(t, srv.URL, 2), opt, WithSweepBatch(2))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	const expired = 5
	for i := range expired {
		if ok, err := s.Put(ctx, store.Record{Key: fmt.Sprint("old/", i), State: store.StateCompleted}, time.Millisecond); err != nil || !ok {
			t.Fatalf("Put: %v, %v", ok, err)
		}
	}
	if ok, err := s.Put(ctx, store.Record{Key: "live", State: store.StateCompleted}, time.Hour); err != nil || !ok {
		t.Fatalf("Put: %v, %v", ok, err)
	}
	for _, k := range []string{"run-out", "retention-over"} {
		if _, claimed, err := s.Claim(ctx, k, fp, time.Millisecond); err != nil || !claimed {
			t.Fatalf("Claim: %v, %v", claimed, err)
		}
	}
	// As if store.ClaimRetention had passed for one of the run-out claims.
	if _, err := admin.Exec(ctx, `UPDATE `+tableOf(s)+` SET keep_until = clock_timestamp() - interval '1 second' WHERE key = 'retention-over'`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(margin)
	n, err := s.Sweep(ctx)
	if err != nil || n != expired+1 {
		t.Fatalf("Sweep = %d, %v; want %d", n, err, expired+1)
	}
	var left []string
	rows, err := admin.Query(ctx, "SELECT key FROM "+tableOf(s)+" ORDER BY key")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		left = append(left, k)
	}
	if fmt.Sprint(left) != "[live run-out]" {
		t.Fatalf("rows left: %v; want the live record and the claim within its retention", left)
	}
	if n, err := s.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("second Sweep = %d, %v", n, err)
	}
}

// TestSweeper checks the background sweeper collects expired records, logs
// failures without keys, and stops.
func TestSweeper(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	opt := table(t, admin)
	var logs sweepertest.Logs
	pool := newPool(t, srv.URL, 2)
	s, err := New(pool, opt, WithLogger(logs.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(t.Context(), store.Record{Key: "secret-key", State: store.StateCompleted}, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	sweepertest.Run(t, sweepertest.Sweeper{
		Start: s.StartSweeper,
		Collected: func(ctx context.Context) (bool, error) {
			var rows int
			err := admin.QueryRow(ctx, "SELECT count(*) FROM "+tableOf(s)).Scan(&rows)
			return rows == 0, err
		},
		Break:   pool.Close,
		Logs:    &logs,
		Message: "pgstore: sweeping expired records failed",
		Secret:  "secret-key",
	})
}

// TestInTransaction uses a store on a pgx.Tx: its claims and outcomes are
// visible to others only after the commit, and it leaves the caller's
// synchronous_commit alone.
func TestInTransaction(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	opt := table(t, admin)
	observer, _ := New(admin, opt)
	ctx := t.Context()
	conn := connect(t, srv.URL)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	s, err := New(tx, opt)
	if err != nil {
		t.Fatal(err)
	}
	c, claimed, err := s.Claim(ctx, "k", fp, time.Hour)
	if err != nil || !claimed {
		t.Fatalf("Claim in a transaction: %v, %v", claimed, err)
	}
	r, _, err := s.Claim(ctx, "r", fp, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Release(ctx, "r", r.Fence); err != nil || !ok {
		t.Fatalf("Release in a transaction: %v, %v", ok, err)
	}
	c.State, c.Response = store.StateCompleted, []byte("r")
	if ok, err := s.Complete(ctx, c, time.Hour); err != nil || !ok {
		t.Fatalf("Complete in a transaction: %v, %v", ok, err)
	}
	if got, ok, err := s.Get(ctx, "k"); err != nil || !ok || string(got.Response) != "r" {
		t.Fatalf("Get in the transaction: %+v, %v, %v", got, ok, err)
	}
	if _, ok, err := observer.Get(ctx, "k"); err != nil || ok {
		t.Fatalf("another connection sees the record before the commit: %v, %v", ok, err)
	}
	if n, err := s.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("Sweep in a transaction: %d, %v", n, err)
	}
	var sc string
	if err := tx.QueryRow(ctx, "SHOW synchronous_commit").Scan(&sc); err != nil || sc != "on" {
		t.Fatalf("synchronous_commit in the caller's transaction: %q, %v", sc, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := observer.Get(ctx, "k"); err != nil || !ok || got.Fence != c.Fence {
		t.Fatalf("the committed record: %+v, %v, %v", got, ok, err)
	}
}

// TestReleaseCommitsAsynchronously checks that a release turns
// synchronous_commit off for its own transaction only: the statement reads
// it as off, and the connection's next statement as on.
func TestReleaseCommitsAsynchronously(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	conn := connect(t, srv.URL)
	s, err := New(conn, table(t, conn))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	c, _, err := s.Claim(ctx, "k", fp, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// The release statement, returning the setting it ran under.
	probe := s.q.release[:strings.LastIndex(s.q.release, "RETURNING ")] + "RETURNING current_setting('synchronous_commit')"
	var during, after string
	if err := conn.QueryRow(ctx, probe, "k", int64(c.Fence)).Scan(&during); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SHOW synchronous_commit").Scan(&after); err != nil {
		t.Fatal(err)
	}
	if during != "off" || after != "on" {
		t.Fatalf("synchronous_commit during the release %q, after it %q; want off, then on", during, after)
	}
}
