package firestorestore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock/firestorelock/firestoretest"
	"github.com/idemkit/idemkit/store/firestorestore"
)

func TestMain(m *testing.M) { firestoretest.Main(m) }

// newClient returns a client of its own (its own connection) on project,
// on the emulator the tests start, closed when the test ends.
func newClient(t testing.TB, project string) *firestore.Client {
	t.Helper()
	testenv.Firestore(t)
	c, err := firestore.NewClient(context.Background(), project)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newStore returns a store on c with opts.
func newStore(t testing.TB, c *firestore.Client, opts ...firestorestore.Option) *firestorestore.Store {
	t.Helper()
	s, err := firestorestore.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fakeClock stands still at the time it was made until advance moves it.
type fakeClock struct {
	start  time.Time
	offset atomic.Int64
}

func newFakeClock() *fakeClock { return &fakeClock{start: time.Now().Round(0)} }

func (c *fakeClock) now() time.Time          { return c.start.Add(time.Duration(c.offset.Load())) }
func (c *fakeClock) advance(d time.Duration) { c.offset.Add(int64(d)) }

// count returns how many documents the collection holds.
func count(t testing.TB, c *firestore.Client, collection string) int {
	t.Helper()
	docs, err := c.Collection(collection).Documents(context.Background()).GetAll()
	if err != nil {
		t.Fatal(err)
	}
	return len(docs)
}
