package firestorelock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"cloud.google.com/go/firestore"

	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/firestorelock"
)

// A lock on Firestore, held while fn runs and renewed in the background;
// the fence goes to the resource the work writes to. With
// FIRESTORE_EMULATOR_HOST set, the client talks to the emulator.
func ExampleNew() {
	ctx := context.Background()
	client, err := firestore.NewClient(ctx, "my-project")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	locker, err := firestorelock.New(client)
	if err != nil {
		log.Fatal(err)
	}
	err = lock.Do(ctx, locker, "POST:/v1/invoices/42", func(ctx context.Context, lease lock.Lease) error {
		fmt.Println("issuing invoice 42 under fence", lease.Fence)
		return nil
	}, lock.WithTTL(10*time.Second), lock.WithTimeout(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
}

// A collection of one's own, one attempt, and a release through the key
// (without the query by lock id). Every call is bounded by its ctx: a
// stalled Firestore gives a NetworkTimeout error at the deadline.
func ExampleWithCollection() {
	client, err := firestore.NewClient(context.Background(), "my-project")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	locker, err := firestorelock.New(client, firestorelock.WithCollection("billing_locks"))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	lease, ok, err := locker.Acquire(ctx, "report:2026-11", time.Minute)
	if err != nil || !ok {
		log.Fatal("not acquired: ", err)
	}
	defer locker.ReleaseKey(context.Background(), lease.Key, lease.ID)
}

// Without a TTL policy on expireAt, a sweeper collects expired lock
// documents and tombstones the server clock has passed.
func ExampleLocker_StartSweeper() {
	ctx := context.Background()
	client, err := firestore.NewClient(ctx, "my-project")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	locker, err := firestorelock.New(client)
	if err != nil {
		log.Fatal(err)
	}
	stop := locker.StartSweeper(ctx, time.Minute)
	defer stop()

	// Or once, from a cron job:
	n, err := locker.Sweep(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("collected", n, "expired locks")
}
