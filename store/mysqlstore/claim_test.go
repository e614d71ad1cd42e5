package mysqlstore

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store"
)

// innodbWrites returns the server's count of rows written, updated and
// deleted (Handler_*, MariaDB's, without temporary tables) and of row locks
// InnoDB waited for.
func innodbWrites(t *testing.T, admin *sql.DB) int64 {
	t.Helper()
	rows, err := admin.QueryContext(t.Context(), `SHOW GLOBAL STATUS WHERE Variable_name IN
		('Handler_write', 'Handler_update', 'Handler_delete', 'Innodb_row_lock_waits')`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var total int64
	seen := 0
	for rows.Next() {
		var (
			name string
			n    int64
		)
		if err := rows.Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		total += n
		seen++
	}
	if err := rows.Err(); err != nil || seen != 4 {
		t.Fatalf("the server's row counters: %d of 4, %v", seen, err)
	}
	return total
}

// TestClaimOfALiveRecordWritesNothing: on a server of its own, claims
// answered by a live record (replays of an outcome, and a busy key) write
// no row and wait for no lock, by the server's own counters; a claim of a free
// key and a take-over of a released one do write (the counters see them).
func TestClaimOfALiveRecordWritesNothing(t *testing.T) {
	t.Parallel()
	srv := testenv.NewMySQL(t)
	admin := newDB(t, srv.DSN, 2, nil)
	s, err := New(newDB(t, srv.DSN, 4, nil), table(t, admin))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	done, claimed, err := s.Claim(ctx, "done", fp, time.Minute)
	if err != nil || !claimed {
		t.Fatalf("Claim: %v, %v", claimed, err)
	}
	done.State, done.Response = store.StateCompleted, []byte("r")
	if ok, err := s.Complete(ctx, done, time.Hour); err != nil || !ok {
		t.Fatalf("Complete: %v, %v", ok, err)
	}
	busy, claimed, err := s.Claim(ctx, "busy", fp, time.Hour)
	if err != nil || !claimed {
		t.Fatalf("Claim: %v, %v", claimed, err)
	}
	before := innodbWrites(t, admin)
	for range 50 {
		for _, k := range []string{"done", "busy"} {
			if rec, claimed, err := s.Claim(ctx, k, fp, time.Minute); err != nil || claimed {
				t.Fatalf("Claim of the live %s: %+v, %v, %v; want it answered as it is", k, rec, claimed, err)
			}
		}
	}
	if n := innodbWrites(t, admin) - before; n != 0 {
		t.Fatalf("100 claims answered by a live record wrote or waited for %d rows; want none", n)
	}
	before = innodbWrites(t, admin)
	if ok, err := s.Release(ctx, "busy", busy.Fence); err != nil || !ok {
		t.Fatalf("Release: %v, %v", ok, err)
	}
	for _, k := range []string{"busy", "free"} {
		if _, claimed, err := s.Claim(ctx, k, fp, time.Minute); err != nil || !claimed {
			t.Fatalf("Claim of %s: %v, %v", k, claimed, err)
		}
	}
	if n := innodbWrites(t, admin) - before; n < 3 {
		t.Fatalf("a release, a take-over and a new claim wrote %d rows by InnoDB's counters; want at least 3 (the counters do not count?)", n)
	}
}

// TestRacingTakeOversOneWinner: 16 stores on pools of their own take over
// one key's run-out claim at once, 20 times: exactly one wins each time,
// with a fence above the last, and the others are answered busy with the
// winner's claim.
func TestRacingTakeOversOneWinner(t *testing.T) {
	t.Parallel()
	srv := testenv.MySQL(t)
	admin := newDB(t, srv.DSN, 2, nil)
	opt := table(t, admin)
	stores := make([]*Store, 16)
	for i := range stores {
		s, err := New(newDB(t, srv.DSN, 1, nil), opt)
		if err != nil {
			t.Fatal(err)
		}
		stores[i] = s
	}
	ctx := t.Context()
	last, claimed, err := stores[0].Claim(ctx, "k", fp, time.Millisecond)
	if err != nil || !claimed {
		t.Fatalf("Claim: %v, %v", claimed, err)
	}
	for round := range 20 {
		time.Sleep(5 * time.Millisecond) // the last claim's lease runs out
		type answer struct {
			rec     store.Record
			claimed bool
			err     error
		}
		answers := make(chan answer, len(stores))
		start := make(chan struct{})
		for _, s := range stores {
			go func() {
				<-start
				rec, claimed, err := s.Claim(context.WithoutCancel(ctx), "k", fp, time.Hour)
				answers <- answer{rec, claimed, err}
			}()
		}
		close(start)
		var winner *store.Record
		var busy []store.Record
		for range stores {
			a := <-answers
			switch {
			case a.err != nil:
				t.Fatalf("round %d: Claim: %v", round, a.err)
			case a.claimed && winner != nil:
				t.Fatalf("round %d: two claims won: fences %v and %v", round, winner.Fence, a.rec.Fence)
			case a.claimed:
				winner = &a.rec
			default:
				busy = append(busy, a.rec)
			}
		}
		if winner == nil || winner.Fence <= last.Fence {
			t.Fatalf("round %d: winner %+v; want one, with a fence above %v", round, winner, last.Fence)
		}
		for _, b := range busy {
			if b.State != store.StateClaimed || b.Fence != winner.Fence {
				t.Fatalf("round %d: a losing claim was answered %+v; want the winner's claim (fence %v)", round, b, winner.Fence)
			}
		}
		// End the winner's claim by expiry for the next round.
		if _, ok, err := stores[0].Extend(ctx, "k", winner.Fence, time.Millisecond); err != nil || !ok {
			t.Fatalf("round %d: Extend to run out: %v, %v", round, ok, err)
		}
		last = *winner
	}
}
