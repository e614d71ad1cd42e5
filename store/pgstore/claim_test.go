package pgstore

import (
	"context"
	"fmt"
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

const fp = "test-v1:abababababababababababababababababababababababababababababababab"

// TestRefusedClaimTakesNoTransactionID runs refused claims (a busy key, a
// completed key, a not-replayable key) in a caller's transaction and
// checks that none took a transaction id: PostgreSQL assigns one to a
// transaction at its first write or row lock, so the claims wrote nothing
// and locked nothing. A claim that does take the key is checked to take
// one, so the check can tell.
func TestRefusedClaimTakesNoTransactionID(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	opt := table(t, admin)
	s, err := New(admin, opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	busy, _, err := s.Claim(ctx, "busy", fp, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []store.State{store.StateCompleted, store.StateNotReplayable} {
		c, _, err := s.Claim(ctx, st.String(), fp, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		c.State, c.Response = st, []byte("r")
		if ok, err := s.Complete(ctx, c, time.Hour); err != nil || !ok {
			t.Fatalf("Complete: %v, %v", ok, err)
		}
	}
	conn := connect(t, srv.URL)
	xid := func(tx pgx.Tx) (assigned bool) {
		t.Helper()
		var id *string
		if err := tx.QueryRow(ctx, "SELECT pg_current_xact_id_if_assigned()::text").Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id != nil
	}
	for _, k := range []string{"busy", "completed", "not-replayable"} {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ts, err := New(tx, opt)
		if err != nil {
			t.Fatal(err)
		}
		rec, claimed, err := ts.Claim(ctx, k, "test-v1:other", time.Hour)
		if err != nil || claimed {
			t.Fatalf("%s: Claim = %+v, %v, %v; want refused", k, rec, claimed, err)
		}
		if k == "busy" && rec.Fence != busy.Fence {
			t.Fatalf("busy: the refused claim returned %+v; want the live claim %+v", rec, busy)
		}
		if xid(tx) {
			t.Fatalf("%s: a refused claim took a transaction id: it wrote or locked a row", k)
		}
		_ = tx.Rollback(ctx)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	ts, _ := New(tx, opt)
	if _, claimed, err := ts.Claim(ctx, "free", fp, time.Hour); err != nil || !claimed {
		t.Fatalf("Claim of a free key: %v, %v", claimed, err)
	}
	if !xid(tx) {
		t.Fatal("a claim that took a key took no transaction id: the check cannot tell")
	}
}

// TestRefusedClaimWritesNoWAL claims a busy and a completed key 200 times
// each on a server of the test's own and checks that the WAL insert
// position did not move: a refused claim writes nothing to the log, not
// even a lock record. Background processes may write a record now and
// then, so a window with a move is measured again (each take-over, by
// contrast, moves the position every time).
func TestRefusedClaimWritesNoWAL(t *testing.T) {
	t.Parallel()
	srv := testenv.NewPostgres(t)
	admin := newPool(t, srv.URL, 1)
	opt := table(t, admin)
	s, err := New(newPool(t, srv.URL, 1), opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	busyAndDone(t, s)
	lsn := func() string {
		t.Helper()
		var l string
		if err := admin.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	window := func(f func(i int)) bool {
		before := lsn()
		for i := range 200 {
			f(i)
		}
		return lsn() == before
	}
	refused := func(int) {
		for _, k := range []string{"busy", "done"} {
			if _, claimed, err := s.Claim(ctx, k, fp, time.Hour); err != nil || claimed {
				t.Fatalf("Claim of %s: %v, %v; want refused", k, claimed, err)
			}
		}
	}
	still := false
	for try := 0; try < 5 && !still; try++ {
		still = window(refused)
	}
	if !still {
		t.Fatal("the WAL position moved during each of 5 windows of 400 refused claims: refused claims write")
	}
	if window(func(i int) {
		if _, claimed, err := s.Claim(ctx, fmt.Sprint("free-", i), fp, time.Hour); err != nil || !claimed {
			t.Fatalf("Claim of a free key: %v, %v", claimed, err)
		}
	}) {
		t.Fatal("200 claims of free keys left the WAL position where it was: the check cannot tell")
	}
}

// raceClaims races n claims of key, claim i on stores[i%len(stores)], and
// returns the winner, failing unless exactly one claimed and every other
// returned its claim.
func raceClaims(t *testing.T, stores []*Store, key string, n int) (winner store.Record) {
	t.Helper()
	recs := make([]store.Record, n)
	won := make([]bool, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			recs[i], won[i], errs[i] = stores[i%len(stores)].Claim(t.Context(), key, fmt.Sprint("fp-", i), time.Hour)
		}()
	}
	close(start)
	wg.Wait()
	w := -1
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Claim: %v", errs[i])
		}
		if won[i] {
			if w >= 0 {
				t.Fatalf("two claims won (fences %v and %v)", recs[w].Fence, recs[i].Fence)
			}
			w = i
		}
	}
	if w < 0 {
		t.Fatal("no claim won")
	}
	for i := range n {
		if i != w && (recs[i].State != store.StateClaimed || recs[i].Fence != recs[w].Fence || recs[i].Fingerprint != recs[w].Fingerprint) {
			t.Fatalf("a losing claim returned %+v; want the winner's %+v", recs[i], recs[w])
		}
	}
	return recs[w]
}

// TestRacingClaimsOneStatementEach races 16 claims, through 16 stores (so
// that none share a statement) on 16 connections, of a free key, of a key
// whose claim ran out, of a released key and of an expired outcome, and
// checks that one wins, the others answer with the
// winner's claim, and that every claim, winner or loser, was one statement:
// the losers read the winner's row within their statement (ON CONFLICT DO
// UPDATE for a row inserted after their snapshot, FOR SHARE for one
// updated after it) rather than running again.
func TestRacingClaimsOneStatementEach(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	opt := table(t, admin)
	var st statements
	pool := newPool(t, srv.URL, 16, traced(&st))
	const n, rounds = 16, 10
	stores := make([]*Store, n) // each its own, so that no two claims share a statement
	for i := range stores {
		var err error
		if stores[i], err = New(pool, opt); err != nil {
			t.Fatal(err)
		}
	}
	s := stores[0]
	ctx := t.Context()
	for round := range rounds {
		keys := map[string]func(k string) idemkit.Fence{
			"free": func(string) idemkit.Fence { return 0 },
			"run-out": func(k string) idemkit.Fence {
				c, _, err := s.Claim(ctx, k, fp, time.Millisecond)
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(5 * time.Millisecond)
				return c.Fence
			},
			"released": func(k string) idemkit.Fence {
				c, _, err := s.Claim(ctx, k, fp, time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				if ok, err := s.Release(ctx, k, c.Fence); err != nil || !ok {
					t.Fatalf("Release: %v, %v", ok, err)
				}
				return c.Fence
			},
			"expired-outcome": func(k string) idemkit.Fence {
				c, _, err := s.Claim(ctx, k, fp, time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				c.State, c.Response = store.StateCompleted, []byte("r")
				if ok, err := s.Complete(ctx, c, time.Millisecond); err != nil || !ok {
					t.Fatalf("Complete: %v, %v", ok, err)
				}
				time.Sleep(5 * time.Millisecond)
				return c.Fence
			},
		}
		for kind, prepare := range keys {
			k := fmt.Sprintf("%s-%d", kind, round)
			prev := prepare(k)
			before := st.count()
			w := raceClaims(t, stores, k, n)
			if got := st.count() - before; got != n {
				t.Fatalf("%s: %d racing claims ran %d statements; want one each", kind, n, got)
			}
			if w.Fence <= prev {
				t.Fatalf("%s: the winner's fence %v is not above the previous %v", kind, w.Fence, prev)
			}
		}
	}
}

// TestFencesFromTheServerClock checks that a new key's fence is the
// server's clock in Unix milliseconds, and that claims of one key within
// one millisecond still get growing fences (previous + 1).
func TestFencesFromTheServerClock(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	s, err := New(admin, table(t, admin))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	var before, after int64
	if err := admin.QueryRow(ctx, "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint").Scan(&before); err != nil {
		t.Fatal(err)
	}
	c, _, err := s.Claim(ctx, "k", fp, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.QueryRow(ctx, "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint").Scan(&after); err != nil {
		t.Fatal(err)
	}
	if int64(c.Fence) < before || int64(c.Fence) > after {
		t.Fatalf("the first fence %v is not the server clock in ms (between %d and %d)", c.Fence, before, after)
	}
	if !c.CreatedAt.Equal(time.UnixMicro(c.CreatedAt.UnixMicro())) || c.Fence != idemkit.Fence(c.CreatedAt.UnixMilli()) {
		t.Fatalf("the fence %v is not the claim's time %v in ms", c.Fence, c.CreatedAt)
	}
	prev := c.Fence
	for i := range 200 {
		if ok, err := s.Release(ctx, "k", prev); err != nil || !ok {
			t.Fatalf("Release: %v, %v", ok, err)
		}
		next, claimed, err := s.Claim(ctx, "k", fp, time.Hour)
		if err != nil || !claimed || next.Fence <= prev {
			t.Fatalf("cycle %d: %+v, %v, %v; want a fence above %v", i, next, claimed, err, prev)
		}
		prev = next.Fence
	}
}

// TestStoredKeys checks the key column: printable ASCII verbatim, anything
// else (and a leading \x) as \x and hex, and each key its own row.
func TestStoredKeys(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	s, err := New(admin, table(t, admin))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, c := range []struct{ key, stored string }{
		{"idempotency:tenant-1:order-42", "idempotency:tenant-1:order-42"},
		{" ~!\"'%_*?", " ~!\"'%_*?"},
		{`a\xb`, `a\xb`},
		{`\x00`, `\x5c783030`},
		{"\x00", `\x00`},
		{"caf\u00e9", `\x636166c3a9`},
		{"\xff\xfe", `\xfffe`},
		{"tab\there", `\x7461620968657265`},
		{"\x7f", `\x7f`},
	} {
		if got := storedKey(c.key); got != c.stored {
			t.Errorf("storedKey(%q) = %q; want %q", c.key, got, c.stored)
			continue
		}
		if _, claimed, err := s.Claim(ctx, c.key, fp, time.Hour); err != nil || !claimed {
			t.Fatalf("Claim(%q): %v, %v", c.key, claimed, err)
		}
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM "+tableOf(s)+" WHERE key = $1", c.stored).Scan(&n); err != nil || n != 1 {
			t.Fatalf("rows stored under %q: %d, %v", c.stored, n, err)
		}
	}
}

// TestClaimsOfOneKeyShareAStatement holds a first claim of a key in flight
// (it waits for another transaction's uncommitted insert of the key's row),
// lets 15 more claims of the key join, one of them with a ctx it then
// cancels, and checks that the 14 left were answered by one more
// statement: busy, with the committed claim; the cancelled one Aborted.
func TestClaimsOfOneKeyShareAStatement(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	opt := table(t, admin)
	var st statements
	s, err := New(newPool(t, srv.URL, 16, traced(&st)), opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	const fence = 123
	if _, err := tx.Exec(ctx, `INSERT INTO `+tableOf(s)+` (key, fingerprint, state, response, fence, created_at, expires_at, keep_until)
		VALUES ('k', 'held', 1, '', $1, clock_timestamp(), clock_timestamp() + interval '1 hour', clock_timestamp() + interval '2 hours')`, fence); err != nil {
		t.Fatal(err)
	}
	// members returns the claims of k that joined the next statement, and
	// whether one is in flight.
	members := func() (int, bool) {
		s.shared.mu.Lock()
		defer s.shared.mu.Unlock()
		k := s.shared.keys["k"]
		if k == nil || k.pending == nil {
			return 0, k != nil && k.inflight != nil
		}
		return k.pending.members, k.inflight != nil
	}
	const n = 16
	type answer struct {
		rec     store.Record
		claimed bool
		err     error
	}
	answers := make(chan answer, n)
	claim := func(ctx context.Context, i int) {
		rec, claimed, err := s.Claim(ctx, "k", fmt.Sprint("fp-", i), time.Hour)
		answers <- answer{rec, claimed, err}
	}
	before := st.count()
	go claim(ctx, 0)
	for _, inflight := members(); !inflight; _, inflight = members() {
		time.Sleep(time.Millisecond)
	}
	cancelled, cancel := context.WithCancel(ctx)
	go claim(cancelled, n-1)
	for i := 1; i < n-1; i++ {
		go claim(ctx, i)
	}
	for m, _ := members(); m < n-1; m, _ = members() {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if a := <-answers; idemkit.CodeOf(a.err) != idemkit.CodeAborted {
		t.Fatalf("the cancelled claim answered %+v, %v, %v; want Aborted", a.rec, a.claimed, a.err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for range n - 1 {
		a := <-answers
		if a.err != nil || a.claimed || a.rec.Fence != fence || a.rec.Fingerprint != "held" {
			t.Fatalf("a claim answered %+v, %v, %v; want busy with the committed claim", a.rec, a.claimed, a.err)
		}
	}
	if got := st.count() - before; got != 2 {
		t.Fatalf("%d claims of one key ran %d statements; want 2 (the one in flight, and one shared by the rest)", n-1, got)
	}
}

// TestClaimOfALiveRecordIsReadOnly claims a completed key and a busy key
// on connections whose transactions are read-only (as on a standby): a
// claim answered by a live record is a read-only statement, so both
// answer (the outcome, and the live claim), while a claim that must write
// is refused by the server, so the check can tell.
func TestClaimOfALiveRecordIsReadOnly(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	opt := table(t, admin)
	rw, err := New(admin, opt)
	if err != nil {
		t.Fatal(err)
	}
	busy, _, err := rw.Claim(ctx, "busy", fp, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	done, _, err := rw.Claim(ctx, "done", fp, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	done.State, done.Response = store.StateCompleted, []byte("the response")
	if ok, err := rw.Complete(ctx, done, time.Hour); err != nil || !ok {
		t.Fatalf("Complete: %v, %v", ok, err)
	}
	ro, err := New(newPool(t, srv.URL, 2, func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	}), opt)
	if err != nil {
		t.Fatal(err)
	}
	rec, claimed, err := ro.Claim(ctx, "done", fp, time.Minute)
	if err != nil || claimed || rec.State != store.StateCompleted || string(rec.Response) != "the response" || rec.Fence != done.Fence {
		t.Fatalf("replay on read-only connections: %+v, %v, %v; want the outcome", rec, claimed, err)
	}
	rec, claimed, err = ro.Claim(ctx, "busy", fp, time.Minute)
	if err != nil || claimed || rec.State != store.StateClaimed || rec.Fence != busy.Fence {
		t.Fatalf("busy claim on read-only connections: %+v, %v, %v; want the live claim %+v", rec, claimed, err, busy)
	}
	if _, claimed, err := ro.Claim(ctx, "free", fp, time.Minute); claimed || idemkit.CodeOf(err) != idemkit.CodeServiceUnavailable {
		t.Fatalf("claim of a free key on read-only connections: %v, %v; want ServiceUnavailable (read-only)", claimed, err)
	}
}

// TestEndsOfClaimsLockNoRow checks, on a server of the test's own, that a
// first execution (Claim, Complete) and the other ends of claims (Release,
// Delete) write their rows without a row lock of their own: the WAL of
// each holds no lock record, only the writes.
func TestEndsOfClaimsLockNoRow(t *testing.T) {
	t.Parallel()
	srv := testenv.NewPostgres(t)
	admin := newPool(t, srv.URL, 1)
	ctx := t.Context()
	if _, err := admin.Exec(ctx, "CREATE EXTENSION pg_walinspect"); err != nil {
		t.Fatal(err)
	}
	opt := table(t, admin)
	s, err := New(newPool(t, srv.URL, 1), opt)
	if err != nil {
		t.Fatal(err)
	}
	ends := map[string]func(c store.Record) (bool, error){
		"complete": func(c store.Record) (bool, error) {
			c.State, c.Response = store.StateCompleted, []byte("r")
			return s.Complete(ctx, c, time.Hour)
		},
		"release": func(c store.Record) (bool, error) { return s.Release(ctx, c.Key, c.Fence) },
		"delete":  func(c store.Record) (bool, error) { return s.Delete(ctx, c.Key) },
	}
	for what, end := range ends {
		var start string
		if err := admin.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&start); err != nil {
			t.Fatal(err)
		}
		c, claimed, err := s.Claim(ctx, what, fp, time.Hour)
		if err != nil || !claimed {
			t.Fatalf("%s: Claim: %v, %v", what, claimed, err)
		}
		if ok, err := end(c); err != nil || !ok {
			t.Fatalf("%s: %v, %v", what, ok, err)
		}
		// An asynchronous commit (Release) may still be in the WAL
		// buffers: the WAL writer flushes it within its delay.
		var end string
		if err := admin.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&end); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); ; {
			var flushed bool
			if err := admin.QueryRow(ctx, "SELECT pg_current_wal_flush_lsn() >= $1::pg_lsn", end).Scan(&flushed); err != nil {
				t.Fatal(err)
			}
			if flushed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the WAL was not flushed")
			}
			time.Sleep(10 * time.Millisecond)
		}
		var locks, heap int
		if err := admin.QueryRow(ctx, `SELECT count(*) FILTER (WHERE record_type LIKE 'LOCK%'),
	count(*) FILTER (WHERE record_type IN ('INSERT', 'INSERT+INIT', 'UPDATE', 'HOT_UPDATE'))
FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)
WHERE resource_manager IN ('Heap', 'Heap2')`, start, end).Scan(&locks, &heap); err != nil {
			t.Fatal(err)
		}
		if locks != 0 || heap < 2 {
			t.Fatalf("claim and %s wrote %d lock records and %d heap writes; want no lock and the two writes", what, locks, heap)
		}
	}
}

// TestClaimOfALiveRecordCallsNoFunction checks the claim statement's plan
// as it runs: for a completed key and a busy key the claim function is
// never executed (the statement's read answers), while for a free key it
// is, so the check can tell. Each runs under EXPLAIN ANALYZE in a
// transaction rolled back.
func TestClaimOfALiveRecordCallsNoFunction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	s, err := New(admin, table(t, admin))
	if err != nil {
		t.Fatal(err)
	}
	busyAndDone(t, s)
	functionRan := func(key string) bool {
		t.Helper()
		tx, err := admin.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) "+s.q.claim,
			key, []byte(fp), time.Hour.Microseconds())
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			if strings.Contains(l, "Function Scan") {
				return !strings.Contains(l, "never executed")
			}
		}
		t.Fatalf("the claim's plan has no function scan:\n%s", strings.Join(lines, "\n"))
		return false
	}
	for _, k := range []string{"done", "busy"} {
		if functionRan(k) {
			t.Fatalf("a claim of the live key %s called the claim function", k)
		}
	}
	if !functionRan("free") {
		t.Fatal("a claim of a free key did not call the claim function: the check cannot tell")
	}
}

// busyAndDone leaves two records in s: "busy", a live claim, and "done", a
// completed outcome.
func busyAndDone(t *testing.T, s *Store) {
	t.Helper()
	ctx := t.Context()
	if _, _, err := s.Claim(ctx, "busy", fp, time.Hour); err != nil {
		t.Fatal(err)
	}
	c, _, err := s.Claim(ctx, "done", fp, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c.State, c.Response = store.StateCompleted, []byte("r")
	if ok, err := s.Complete(ctx, c, time.Hour); err != nil || !ok {
		t.Fatalf("Complete: %v, %v", ok, err)
	}
}
