package firestorestore_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store/firestorestore"
)

// A guard on Firestore: claims and outcomes live in one document per key,
// one client per process. A TTL policy on expireAt collects what is no
// longer needed (docs/backends.md, "Firestore"); without one, a sweeper
// does it. (It needs Firestore or its emulator, so it does not run as a
// test.)
func Example() {
	ctx := context.Background()
	client, err := firestore.NewClient(ctx, "my-project")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	records, err := firestorestore.New(client, firestorestore.WithCollection("orders_idempotency"))
	if err != nil {
		log.Fatal(err)
	}
	defer records.StartSweeper(ctx, 10*time.Minute)() // only without a TTL policy

	guard, err := middleware.New(records)
	if err != nil {
		log.Fatal(err)
	}
	total, replayed, err := middleware.Do(ctx, guard, "charge:order-42", map[string]int{"cents": 1999},
		func(ctx context.Context) (int, error) {
			return 1999, nil // charge the card once
		})
	fmt.Println(total, replayed, err)
}

// Locks on Firestore: the same engine, through the lock library; waiters
// are woken by snapshot listeners, and any process can release or extend
// a lease by its lock id. (It needs Firestore or its emulator, so it does
// not run as a test.)
func Example_lock() {
	ctx := context.Background()
	client, err := firestore.NewClient(ctx, "my-project")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	records, err := firestorestore.New(client, firestorestore.WithCollection("locks"))
	if err != nil {
		log.Fatal(err)
	}
	locks, err := lock.New(records)
	if err != nil {
		log.Fatal(err)
	}
	err = lock.Do(ctx, locks, "invoice:42", func(ctx context.Context, lease lock.Lease) error {
		fmt.Println("issuing invoice 42 under fence", lease.Fence)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}
