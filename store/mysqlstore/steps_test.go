package mysqlstore

import (
	"bytes"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store"
)

// stepStore returns a store on a table of the test's own on the shared
// server, and the pool that reaches its table as an operator would.
func stepStore(t *testing.T) (*Store, DB) {
	t.Helper()
	admin := newDB(t, testenv.MySQL(t).DSN, 4, nil)
	s, err := New(admin, table(t, admin))
	if err != nil {
		t.Fatal(err)
	}
	return s, admin
}

// mustClaimKey claims key for fp or fails the test.
func mustClaimKey(t *testing.T, s *Store, key, fingerprint string, ttl time.Duration) store.Record {
	t.Helper()
	c, claimed, err := s.Claim(t.Context(), key, fingerprint, ttl)
	if err != nil || !claimed {
		t.Fatalf("Claim %q: %+v, %v, %v", key, c, claimed, err)
	}
	return c
}

func mustStep(t *testing.T, s *Store, c store.Record, index int, name, result string, keep time.Duration) {
	t.Helper()
	if ok, err := s.RecordStep(t.Context(), c.Key, c.Fence, index, store.Step{Name: name, Result: []byte(result)}, keep); err != nil || !ok {
		t.Fatalf("RecordStep %d %q: %v, %v", index, name, ok, err)
	}
}

func stepNames(steps []store.Step) string {
	var b strings.Builder
	for i, s := range steps {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(s.Name + "=" + string(s.Result))
	}
	return b.String()
}

// TestStepsKeptForTheirKeep: on a server whose clock the test moves on,
// with a sweep wherever a sweeper might run, a step's keep outlives the
// claim's lease and retention and an Extend, a take-over keeps it, and a release's
// tombstone keeps it (and its fingerprint) past the fence rule's time;
// past every keep the steps are gone and the fence still grows.
func TestStepsKeptForTheirKeep(t *testing.T) {
	t.Parallel()
	clock := testenv.NewClock(t)
	srv := testenv.NewMySQLWithClock(t, clock)
	admin := newDB(t, srv.DSN, 2, nil)
	s, err := New(admin, table(t, admin), WithMaxClockStep(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	sweep := func() {
		t.Helper()
		if _, err := s.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	const k = "keep"
	lease := 10 * time.Second
	keep := store.ClaimRetention + 10*time.Minute
	c := mustClaimKey(t, s, k, fp, lease)
	mustStep(t, s, c, 0, "reserve", "r-1", keep)
	// An extension of the lease keeps the keep the step set.
	if _, ok, err := s.Extend(ctx, k, c.Fence, lease); err != nil || !ok {
		t.Fatalf("Extend: %v, %v", ok, err)
	}
	// The holder crashed: past its lease and the claim retention, the
	// row (else swept) keeps its steps for the retry.
	clock.Step(lease + store.ClaimRetention + 5*time.Minute)
	sweep()
	n := mustClaimKey(t, s, k, fp, lease)
	if got := stepNames(n.Steps); got != "reserve=r-1" {
		t.Fatalf("the take-over within the steps' keep: steps %q; want reserve=r-1", got)
	}
	// Its own lease and retention are shorter than the keep it carries.
	clock.Step(lease + store.ClaimRetention + time.Minute)
	sweep()
	m := mustClaimKey(t, s, k, fp, lease)
	if got := stepNames(m.Steps); got != "reserve=r-1" {
		t.Fatalf("the second take-over within the steps' keep: steps %q; want reserve=r-1", got)
	}
	if ok, err := s.Release(ctx, k, m.Fence); err != nil || !ok {
		t.Fatalf("Release: %v, %v", ok, err)
	}
	// A release's tombstone keeps them past the fence rule's time (one
	// second here).
	clock.Step(time.Minute)
	sweep()
	m2 := mustClaimKey(t, s, k, fp, lease)
	if got := stepNames(m2.Steps); got != "reserve=r-1" {
		t.Fatalf("the claim after a release, within the keep: steps %q; want reserve=r-1", got)
	}
	if ok, err := s.Release(ctx, k, m2.Fence); err != nil || !ok {
		t.Fatalf("Release: %v, %v", ok, err)
	}
	clock.Step(keep)
	sweep()
	last := mustClaimKey(t, s, k, fp, lease)
	if len(last.Steps) != 0 || last.Fence <= m2.Fence {
		t.Fatalf("the claim past the steps' keep: steps %q, fence %v; want none, above %v", stepNames(last.Steps), last.Fence, m2.Fence)
	}
}

// TestDeleteForgetsTheStepsOfAReleasedClaim: a Delete of a key whose
// claim was released (its tombstone invisible, so Delete finds nothing)
// still drops the steps the tombstone kept: the key's next claim of the
// same fingerprint starts afresh.
func TestDeleteForgetsTheStepsOfAReleasedClaim(t *testing.T) {
	t.Parallel()
	s, _ := stepStore(t)
	ctx := t.Context()
	for _, end := range []string{"release", "lease"} {
		k := "deleted-" + end
		ttl := time.Minute
		if end == "lease" {
			ttl = 50 * time.Millisecond
		}
		c := mustClaimKey(t, s, k, fp, ttl)
		mustStep(t, s, c, 0, "reserve", "r-1", time.Hour)
		if end == "release" {
			if ok, err := s.Release(ctx, k, c.Fence); err != nil || !ok {
				t.Fatalf("Release: %v, %v", ok, err)
			}
		} else {
			time.Sleep(ttl + margin)
		}
		if found, err := s.Delete(ctx, k); err != nil || found {
			t.Fatalf("%s: Delete of a key with no live record: %v, %v; want not found", end, found, err)
		}
		n := mustClaimKey(t, s, k, fp, time.Minute)
		if len(n.Steps) != 0 || n.Fence <= c.Fence {
			t.Fatalf("%s: the claim after the Delete: steps %q, fence %v; want none, above %v", end, stepNames(n.Steps), n.Fence, c.Fence)
		}
	}
}

// TestRecordStepAgainAfterALostAnswer: the statement a RecordStep sends
// again after a lost connection reports the step landed when the try
// before recorded it (and does not append it twice), and refuses another
// step at that index, or a step whose index is not the next.
func TestRecordStepAgainAfterALostAnswer(t *testing.T) {
	t.Parallel()
	s, admin := stepStore(t)
	ctx := t.Context()
	c := mustClaimKey(t, s, "again", fp, time.Minute)
	mustStep(t, s, c, 0, "reserve", "r-1", time.Hour)
	step := store.Step{Name: "charge", Result: []byte("ch_1")}
	again := func(index int, st store.Step) int64 {
		t.Helper()
		n, err := lastID(admin.ExecContext(ctx, s.q.recordStepSQL(c.Key, c.Fence, index, encodeStep(st), time.Hour, true)))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := again(1, step); n != 2 {
		t.Fatalf("the first try sent again: LAST_INSERT_ID %d; want 2 (recorded)", n)
	}
	if n := again(1, step); n != 2 {
		t.Fatalf("the step sent again once it landed: LAST_INSERT_ID %d; want 2 (landed)", n)
	}
	// Another step at index 1, one whose encoding ends like this one's,
	// and a step not next are refused.
	for _, tc := range []struct {
		index int
		st    store.Step
	}{
		{1, store.Step{Name: "charge", Result: []byte("ch_2")}},
		{1, store.Step{Name: "arge", Result: []byte("ch_1")}},
		{1, store.Step{Name: "e", Result: []byte("ch_1")}},
		{0, store.Step{Name: "reserve", Result: []byte("r-1")}},
		{3, step},
	} {
		if n := again(tc.index, tc.st); n != 0 {
			t.Fatalf("step %d %q=%q sent again: LAST_INSERT_ID %d; want 0 (refused)", tc.index, tc.st.Name, tc.st.Result, n)
		}
	}
	got, ok, err := s.Get(ctx, c.Key)
	if err != nil || !ok || stepNames(got.Steps) != "reserve=r-1,charge=ch_1" {
		t.Fatalf("Get: %q, %v, %v; want reserve=r-1,charge=ch_1 once", stepNames(got.Steps), ok, err)
	}
}

// TestStepsCostNothingWithout: a claim, a completion, a release and a
// delete without steps leave the steps column NULL and the count 0, as a
// row that never had any; a row whose steps ended (a completion, a
// delete) is back to that.
func TestStepsCostNothingWithout(t *testing.T) {
	t.Parallel()
	s, admin := stepStore(t)
	ctx := t.Context()
	writeEveryKindOfRow(t, s)
	c := mustClaimKey(t, s, "stepped-then-completed", fp, time.Minute)
	mustStep(t, s, c, 0, "reserve", "r-1", time.Hour)
	c.State, c.Response = store.StateCompleted, []byte("done")
	if ok, err := s.Complete(ctx, c, time.Hour); err != nil || !ok {
		t.Fatalf("Complete: %v, %v", ok, err)
	}
	d := mustClaimKey(t, s, "stepped-then-deleted", fp, time.Minute)
	mustStep(t, s, d, 0, "reserve", "r-1", time.Hour)
	if ok, err := s.Delete(ctx, d.Key); err != nil || !ok {
		t.Fatalf("Delete: %v, %v", ok, err)
	}
	var n int
	if err := admin.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+tableOf(s)+` WHERE steps IS NOT NULL OR step_count <> 0`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d rows without steps hold some", n)
	}
}

// TestSetupSchemaUpgradesATableWithoutSteps: a table made before the
// steps columns, with its claim procedure of that time (here one that
// answers as that did, without steps), is brought to schema.sql's by
// SetupSchema: its rows are kept, a claim then carries steps, and
// SetupSchema again changes nothing.
func TestSetupSchemaUpgradesATableWithoutSteps(t *testing.T) {
	t.Parallel()
	s, db := stepStore(t)
	admin := db.(*sql.DB)
	ctx := t.Context()
	c := mustClaimKey(t, s, "before", fp, time.Minute)
	c.State, c.Response = store.StateCompleted, []byte("kept")
	if ok, err := s.Complete(ctx, c, time.Hour); err != nil || !ok {
		t.Fatalf("Complete: %v, %v", ok, err)
	}
	for _, stmt := range []string{
		"ALTER TABLE " + tableOf(s) + " DROP COLUMN steps, DROP COLUMN step_count",
		"DROP PROCEDURE " + s.cfg.table.claimProc(),
		"CREATE PROCEDURE " + s.cfg.table.claimProc() + "(k VARBINARY(1024), fp BLOB, lid VARBINARY(22), lease BIGINT, retain BIGINT, step BIGINT)" +
			" SELECT 1, fp, 1, '', 1, 0, lease",
	} {
		if _, err := admin.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	opt := WithTable(strings.ReplaceAll(tableOf(s), "`", ""))
	for range 2 {
		if err := SetupSchema(ctx, admin, opt); err != nil {
			t.Fatalf("SetupSchema: %v", err)
		}
		if got, ok, err := s.Get(ctx, "before"); err != nil || !ok || !bytes.Equal(got.Response, []byte("kept")) {
			t.Fatalf("the outcome written before the upgrade: %+v, %v, %v", got, ok, err)
		}
	}
	n := mustClaimKey(t, s, "after", fp, 50*time.Millisecond)
	mustStep(t, s, n, 0, "reserve", "r-1", time.Hour)
	time.Sleep(50*time.Millisecond + margin)
	m := mustClaimKey(t, s, "after", fp, time.Minute)
	if stepNames(m.Steps) != "reserve=r-1" {
		t.Fatalf("the take-over on the upgraded table: steps %q; want reserve=r-1", stepNames(m.Steps))
	}
	var def string
	if err := admin.QueryRowContext(ctx, `SELECT COLUMN_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'records' AND COLUMN_NAME = 'steps'`,
		s.cfg.table.database).Scan(&def); err != nil || def != "mediumblob" {
		t.Fatalf("the upgraded table's steps column: %q, %v; want mediumblob", def, err)
	}
}

// TestSchemaDefinesTheUpgradesColumns: the columns SetupSchema adds to a
// table made before steps are defined as schema.sql's table defines them.
func TestSchemaDefinesTheUpgradesColumns(t *testing.T) {
	create := statements(tableName{table: defaultTable})[0]
	for _, col := range strings.Split(strings.TrimPrefix(stepColumns, "ADD COLUMN "), ", ADD COLUMN ") {
		name, def, _ := strings.Cut(col, " ")
		if !strings.Contains(strings.Join(strings.Fields(create), " "), name+" "+def+",") {
			t.Errorf("schema.sql's table does not define %s as %s", name, def)
		}
	}
}

// TestDecodeStepsRefusesWhatNoStoreWrote: steps bytes that do not end in
// a whole step are Internal, never a panic or a made-up step.
func TestDecodeStepsRefusesWhatNoStoreWrote(t *testing.T) {
	good := append(encodeStep(store.Step{Name: "a", Result: []byte("x")}), encodeStep(store.Step{Name: "bb"})...)
	if steps, err := decodeSteps("get", good); err != nil || stepNames(steps) != "a=x,bb=" {
		t.Fatalf("decodeSteps: %q, %v", stepNames(steps), err)
	}
	for _, bad := range [][]byte{{1}, {0, 0, 0, 0, 0}, {'a', 1, 0, 0, 0, 9}, append([]byte{'a', 1, 0xff, 0xff, 0xff, 0xff}, good...)[:6]} {
		if _, err := decodeSteps("get", bad); err == nil {
			t.Errorf("decodeSteps(%x): no error", bad)
		}
	}
}

// TestListAndGetReturnALiveClaimsSteps: List, like Get, returns a live
// claim's steps, and no steps of an outcome.
func TestListAndGetReturnALiveClaimsSteps(t *testing.T) {
	t.Parallel()
	s, _ := stepStore(t)
	ctx := t.Context()
	c := mustClaimKey(t, s, "list:claim", fp, time.Minute)
	mustStep(t, s, c, 0, "reserve", "r-1", time.Hour)
	mustStep(t, s, c, 1, "charge", "ch_1", time.Hour)
	o := mustClaimKey(t, s, "list:outcome", fp, time.Minute)
	mustStep(t, s, o, 0, "reserve", "r-2", time.Hour)
	o.State, o.Response = store.StateCompleted, []byte("done")
	if ok, err := s.Complete(ctx, o, time.Hour); err != nil || !ok {
		t.Fatalf("Complete: %v, %v", ok, err)
	}
	recs, _, err := s.List(ctx, "list:", "", 10)
	if err != nil || len(recs) != 2 {
		t.Fatalf("List: %d records, %v; want 2", len(recs), err)
	}
	if got := stepNames(recs[0].Steps); recs[0].Key != "list:claim" || got != "reserve=r-1,charge=ch_1" {
		t.Fatalf("List's claim %q: steps %q; want reserve=r-1,charge=ch_1", recs[0].Key, got)
	}
	if recs[1].Steps != nil {
		t.Fatalf("List's outcome: steps %q; want none", stepNames(recs[1].Steps))
	}
	if got, ok, err := s.Get(ctx, "list:claim"); err != nil || !ok || stepNames(got.Steps) != "reserve=r-1,charge=ch_1" {
		t.Fatalf("Get: %q, %v, %v", stepNames(got.Steps), ok, err)
	}
}
