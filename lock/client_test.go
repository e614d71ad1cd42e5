package lock

import (
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
)

func newClient(t *testing.T, s store.Store) *Client {
	t.Helper()
	c, err := New(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Without the engine's Finder, a Client resolves only the ids it issued:
// another's is not found by id, and still released and extended with its
// key.
func TestWithoutFinderOnlyOwnIDsResolve(t *testing.T) {
	ctx := t.Context()
	s := struct{ store.Store }{memstore.New()} // hides Finder and Watcher
	mine, theirs := newClient(t, s), newClient(t, s)
	lease, ok, err := mine.Acquire(ctx, "k", time.Minute)
	if err != nil || !ok {
		t.Fatalf("Acquire = %v, %v", ok, err)
	}
	if _, found, err := theirs.LookupID(ctx, lease.ID); found || err != nil {
		t.Fatalf("another client's LookupID = %v, %v; want not found", found, err)
	}
	if st, err := theirs.Release(ctx, lease.ID); st.OK || st.Expired || err != nil {
		t.Fatalf("another client's Release = %+v, %v; want not found", st, err)
	}
	if st, err := theirs.ExtendKey(ctx, "k", lease.ID, time.Hour); !st.OK || err != nil {
		t.Fatalf("another client's ExtendKey = %+v, %v; want OK", st, err)
	}
	if st, err := mine.Release(ctx, lease.ID); !st.OK || err != nil {
		t.Fatalf("the issuer's Release = %+v, %v; want OK", st, err)
	}
}

// A refused release reports Expired once the lease's time has passed by
// the Client's clock, and not found for a lease that ended before.
func TestRefusalsTellExpiredFromGone(t *testing.T) {
	ctx := t.Context()
	s := memstore.New()
	c := newClient(t, s)
	short, _, _ := c.Acquire(ctx, "short", time.Millisecond)
	time.Sleep(5 * time.Millisecond)
	if st, err := c.Release(ctx, short.ID); st.OK || !st.Expired || err != nil {
		t.Fatalf("Release after the lease ran out = %+v, %v; want expired", st, err)
	}
	gone, _, _ := c.Acquire(ctx, "gone", time.Hour)
	_, _ = s.Delete(ctx, "gone")
	if st, err := c.Extend(ctx, gone.ID, time.Hour); st.OK || st.Expired || err != nil {
		t.Fatalf("Extend of a deleted lease = %+v, %v; want not found", st, err)
	}
}

// The table of issued leases keeps only what may still be live: released
// and refused leases leave it at once, and leases certainly run out are
// swept as others are added.
func TestLeaseTableIsBounded(t *testing.T) {
	ctx := t.Context()
	c := newClient(t, memstore.New())
	size := func() int { c.mu.Lock(); defer c.mu.Unlock(); return len(c.leases) }
	for i := range 200 {
		_, _, _ = c.Acquire(ctx, fmt.Sprint("short", i), time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond) // they have all certainly run out
	var live []Lease
	for i := range 200 {
		l, _, _ := c.Acquire(ctx, fmt.Sprint("long", i), time.Hour)
		live = append(live, l)
	}
	if n := size(); n != 200 {
		t.Fatalf("%d leases in the table; want the 200 live ones", n)
	}
	for _, l := range live[:100] {
		_, _ = c.Release(ctx, l.ID)
	}
	if n := size(); n != 100 {
		t.Fatalf("%d leases in the table after 100 releases; want 100", n)
	}
}
