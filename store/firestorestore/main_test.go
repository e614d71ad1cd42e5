package firestorestore_test

import (
	"context"
	"testing"

	"cloud.google.com/go/firestore"

	"github.com/idemkit/idemkit/lock/firestorelock/firestoretest"
	"github.com/idemkit/idemkit/store/firestorestore"
)

func TestMain(m *testing.M) { firestoretest.Main(m) }

// newStore returns a store on c with opts.
func newStore(t testing.TB, c *firestore.Client, opts ...firestorestore.Option) *firestorestore.Store {
	t.Helper()
	s, err := firestorestore.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// count returns how many documents the collection holds.
func count(t testing.TB, c *firestore.Client, collection string) int {
	t.Helper()
	docs, err := c.Collection(collection).Documents(context.Background()).GetAll()
	if err != nil {
		t.Fatal(err)
	}
	return len(docs)
}
