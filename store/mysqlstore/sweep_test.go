package mysqlstore

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/internal/leased"
	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store"
)

// fp is the fingerprint the package's tests claim with.
const fp = "test-v1:abab"

// TestKeepUntil checks every row's keep_until against
// leased.KeepUntil(row, the store's largest clock step), for each kind of
// row (a claim, an extended claim, an outcome, a not-replayable outcome, a
// put record, and the tombstones of a release and a delete), with the
// default step, none, and a step longer than the leases.
func TestKeepUntil(t *testing.T) {
	t.Parallel()
	srv := testenv.MySQL(t)
	admin := newDB(t, srv.DSN, 2, nil)
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
			rows, err := admin.QueryContext(t.Context(), `SELECT record_key, state, fence, expires_at, keep_until FROM `+tableOf(s))
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			seen := 0
			for rows.Next() {
				var (
					key                  string
					state                int
					fence, expires, keep int64
				)
				if err := rows.Scan(&key, &state, &fence, &expires, &keep); err != nil {
					t.Fatal(err)
				}
				seen++
				want := leased.KeepUntil(store.Record{State: store.State(state), Fence: idemkit.Fence(fence), ExpiresAt: time.UnixMicro(expires)}, c.step)
				if !time.UnixMicro(keep).Equal(want) {
					t.Errorf("%s (state %d): kept until %v; want leased.KeepUntil = %v", key, state, time.UnixMicro(keep), want)
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
	srv := testenv.MySQL(t)
	admin := newDB(t, srv.DSN, 2, nil)
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
	if err := admin.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+tableOf(s)+` WHERE state = 0`).Scan(&left); err != nil || left != 2 {
		t.Fatalf("%d tombstones, %v; want 2", left, err)
	}
	time.Sleep(time.Until(time.UnixMilli(int64(max(fences[0], fences[1])) + 1).Add(step + margin)))
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
	srv := testenv.MySQL(t)
	admin := newDB(t, srv.DSN, 2, nil)
	opt := table(t, admin)
	s, err := New(newDB(t, srv.DSN, 2, nil), opt, WithSweepBatch(2), WithMaxClockStep(0))
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
	if _, err := admin.ExecContext(ctx, `UPDATE `+tableOf(s)+` SET keep_until = `+nowSQL+` - 1000000 WHERE record_key = 'retention-over'`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(margin)
	n, err := s.Sweep(ctx)
	if err != nil || n != expired+1 {
		t.Fatalf("Sweep = %d, %v; want %d", n, err, expired+1)
	}
	var left []string
	rows, err := admin.QueryContext(ctx, "SELECT record_key FROM "+tableOf(s)+" ORDER BY record_key")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		left = append(left, k)
	}
	if want := []string{"live", "run-out"}; !slices.Equal(left, want) {
		t.Fatalf("rows left after Sweep: %v; want %v", left, want)
	}
}
