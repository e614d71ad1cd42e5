package pgstore

import (
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store"
)

// lockID is a lock id as the lock library makes them: 22 base64url
// characters.
const lockID = "AbCdEfGhIjKlMnOpQr-_09"

// TestFindClaim checks that FindClaim finds a live claim by its lock id,
// with the key (hex-stored too) and the fence and lease the claim got, and
// finds nothing once it was released, ran out, or for an id nobody holds.
func TestFindClaim(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	admin := newPool(t, srv.URL, 2)
	s, err := New(admin, table(t, admin))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, key := range []string{"locks/a", "ключ\x00"} {
		c, claimed, err := s.Claim(ctx, key, lockID, time.Hour)
		if err != nil || !claimed {
			t.Fatalf("Claim: %v, %v", claimed, err)
		}
		got, ok, err := s.FindClaim(ctx, lockID)
		if err != nil || !ok || got.Key != key || got.Fence != c.Fence || !got.ExpiresAt.Equal(c.ExpiresAt) ||
			got.Fingerprint != lockID || got.State != store.StateClaimed {
			t.Fatalf("FindClaim = %+v, %v, %v; want the claim %+v", got, ok, err, c)
		}
		if ok, err := s.Release(ctx, key, c.Fence); err != nil || !ok {
			t.Fatalf("Release: %v, %v", ok, err)
		}
		if got, ok, err := s.FindClaim(ctx, lockID); err != nil || ok {
			t.Fatalf("FindClaim after Release = %+v, %v, %v; want nothing", got, ok, err)
		}
	}
	if _, claimed, err := s.Claim(ctx, "run-out", lockID, time.Millisecond); err != nil || !claimed {
		t.Fatalf("Claim: %v, %v", claimed, err)
	}
	time.Sleep(margin)
	if got, ok, err := s.FindClaim(ctx, lockID); err != nil || ok {
		t.Fatalf("FindClaim of a run-out claim = %+v, %v, %v; want nothing", got, ok, err)
	}
	if got, ok, err := s.FindClaim(ctx, "ZZZZZZZZZZZZZZZZZZZZZZ"); err != nil || ok {
		t.Fatalf("FindClaim of an id nobody holds = %+v, %v, %v", got, ok, err)
	}
}

// TestFindClaimOnlyLockIDs checks that a fingerprint that is not a lock id
// is answered "not found" without I/O (the store's pool is closed), and
// that the guard's fingerprints and other near misses stay out of the
// partial index that FindClaim reads, while lock ids are in it.
func TestFindClaimOnlyLockIDs(t *testing.T) {
	t.Parallel()
	srv := testenv.Postgres(t)
	closed := newPool(t, srv.URL, 1)
	closed.Close()
	cs, err := New(closed)
	if err != nil {
		t.Fatal(err)
	}
	notIDs := []string{"", "short", lockID + "x", lockID[:21] + "=", lockID[:21] + "é"[:1], "http-v2:" + strings.Repeat("ab", 32)}
	for _, fp := range notIDs {
		if _, ok, err := cs.FindClaim(t.Context(), fp); err != nil || ok {
			t.Fatalf("FindClaim(%q) on a closed pool: %v, %v; want nothing, without I/O", fp, ok, err)
		}
	}

	admin := newPool(t, srv.URL, 2)
	s, err := New(admin, table(t, admin))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for i, fp := range append(notIDs, lockID) {
		if _, claimed, err := s.Claim(ctx, "k"+string(rune('a'+i)), fp, time.Hour); err != nil || !claimed {
			t.Fatalf("Claim: %v, %v", claimed, err)
		}
	}
	var indexed int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM `+tableOf(s)+` WHERE `+lockIDRows).Scan(&indexed); err != nil || indexed != 1 {
		t.Fatalf("%d rows match the lock-id index, %v; want only the lock's", indexed, err)
	}
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
		t.Fatal(err)
	}
	var plan strings.Builder
	rows, err := tx.Query(ctx, "EXPLAIN "+s.q.findClaim, []byte(lockID))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan.String(), "records_lock_id_idx") {
		t.Fatalf("FindClaim does not read the lock-id index:\n%s", plan.String())
	}
}
