package firestorelock_test

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/idemkit/idemkit"
	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/firestorelock"
	"github.com/idemkit/idemkit/lock/firestorelock/firestoretest"
)

func TestMain(m *testing.M) { firestoretest.Main(m) }

// newLocker builds a locker on a client of its own in project, warmed up.
func newLocker(t testing.TB, project string, opts ...firestorelock.Option) *firestorelock.Locker {
	t.Helper()
	l, err := firestorelock.New(firestoretest.Client(t, project), opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	warm(t, l)
	return l
}

// warm sends a locker's first read and first query: on a fresh project
// the emulator takes hundreds of milliseconds over each, which would eat
// the real-clock tests' margins.
func warm(t testing.TB, l *firestorelock.Locker) {
	t.Helper()
	if _, err := l.IsLocked(t.Context(), "warm-up"); err != nil {
		t.Fatalf("warm-up read: %v", err)
	}
	if _, _, err := l.LookupID(t.Context(), lock.NewID()); err != nil {
		t.Fatalf("warm-up query: %v", err)
	}
}

// probes reads and writes a locker's documents behind its back, through a
// client of their own (a locktest Env's Break closes the locker's).
type probes struct {
	client        *firestore.Client
	locks, fences *firestore.CollectionRef
}

func newProbes(t testing.TB, project string, l *firestorelock.Locker) probes {
	c := firestoretest.Client(t, project)
	locks, fences := l.Collections()
	return probes{client: c, locks: c.Collection(locks), fences: c.Collection(fences)}
}

func docID(key string) (string, error) {
	n, err := lock.NormalizeKey(key)
	if err != nil {
		return "", err
	}
	return firestorelock.DocID(n), nil
}

// read returns the document, or nil when it does not exist.
func (p probes) read(ctx context.Context, ref *firestore.DocumentRef) (*firestore.DocumentSnapshot, error) {
	snaps, err := p.client.GetAll(ctx, []*firestore.DocumentRef{ref})
	if err != nil || !snaps[0].Exists() {
		return nil, err
	}
	return snaps[0], nil
}

// raiseFence sets key's fence counter to f; it only ever raises it.
func (p probes) raiseFence(ctx context.Context, key string, f lock.Fence) error {
	id, err := docID(key)
	if err != nil {
		return err
	}
	cur, err := p.fence(ctx, key)
	if err != nil {
		return err
	}
	if f < cur {
		return idemkit.NewError(idemkit.CodeInvalidArgument, "raise-fence", "a fence counter can only be raised", nil)
	}
	_, err = p.fences.Doc(id).Set(ctx, map[string]any{firestorelock.FieldFence: int64(f)}, firestore.MergeAll)
	return err
}

// fence reads key's fence counter: 0 when there is none.
func (p probes) fence(ctx context.Context, key string) (lock.Fence, error) {
	id, err := docID(key)
	if err != nil {
		return 0, err
	}
	snap, err := p.read(ctx, p.fences.Doc(id))
	if err != nil || snap == nil {
		return 0, err
	}
	f, ok := firestorelock.DecodeFence(snap.Data()[firestorelock.FieldFence])
	if !ok {
		return 0, idemkit.NewError(idemkit.CodeInternal, "probe", "malformed fence counter", nil)
	}
	return f, nil
}

// stored reports whether key's lock document exists, live or expired.
func (p probes) stored(ctx context.Context, key string) (bool, error) {
	id, err := docID(key)
	if err != nil {
		return false, err
	}
	snap, err := p.read(ctx, p.locks.Doc(id))
	return snap != nil, err
}

// count returns how many documents a collection holds.
func count(t testing.TB, c *firestore.CollectionRef) int {
	t.Helper()
	snaps, err := c.Select().Documents(t.Context()).GetAll()
	if err != nil {
		t.Fatalf("list %s: %v", c.ID, err)
	}
	return len(snaps)
}

// acquireOK takes the lock on key through l and fails the test unless it
// gets it.
func acquireOK(t testing.TB, l lock.Locker, key string, ttl time.Duration) lock.Lease {
	t.Helper()
	lease, ok, err := l.Acquire(t.Context(), key, ttl)
	if err != nil || !ok {
		t.Fatalf("Acquire = %v, %v; want a lease", ok, err)
	}
	return lease
}
