package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/memstore"
)

// Sealed records: the backend holds the responses encrypted, retries get
// them back in clear, and a record whose key was retired too early is an
// error, never a replay.
func ExampleSeal() {
	ctx := context.Background()
	backend := memstore.New() // or a Redis, PostgreSQL or Firestore store

	// In production, 32 random bytes from your secret store.
	q3 := store.SealKey{ID: "2025-q3", Secret: []byte("an example secret of 32 bytes!!!")}
	s, err := store.Seal(backend, q3)
	if err != nil {
		log.Fatal(err)
	}

	claim, _, _ := s.Claim(ctx, "orders:42", "fp-1", 30*time.Second)
	claim.State, claim.Response = store.StateCompleted, []byte(`{"card":"4242424242424242"}`)
	if _, err := s.Complete(ctx, claim, 24*time.Hour); err != nil {
		log.Fatal(err)
	}

	stored, _, _ := backend.Get(ctx, "orders:42")
	fmt.Println("card digits on the backend:", bytes.Contains(stored.Response, []byte("4242")))

	retry, _, _ := s.Claim(ctx, "orders:42", "fp-1", 30*time.Second)
	fmt.Println("retry:", retry.State, string(retry.Response))

	// Rotation: the new key is current, the old one still opens.
	q4 := store.SealKey{ID: "2025-q4", Secret: []byte("another example secret (32 b)!!!")}
	rotated, _ := store.Seal(backend, q4, q3)
	rec, _, _ := rotated.Get(ctx, "orders:42")
	fmt.Println("after rotation:", string(rec.Response))

	// The old key dropped before its records expired.
	retired, _ := store.Seal(backend, q4)
	_, _, err = retired.Get(ctx, "orders:42")
	fmt.Println(errors.Is(err, store.ErrUnsealable))
	fmt.Println(err)
	// Output:
	// card digits on the backend: false
	// retry: completed {"card":"4242424242424242"}
	// after rotation: {"card":"4242424242424242"}
	// true
	// idemkit: get: Internal: record sealed with key id "2025-q3", which is not among the keys given: add it back to the older keys until its records expire: store: the recorded response cannot be opened
}
