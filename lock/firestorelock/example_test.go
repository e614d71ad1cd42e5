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

// Collections of one's own, and a warning as soon as this process's clock
// (Firestore's time authority for locks) drifts 200 ms from Google's.
func ExampleWithCollection() {
	client, err := firestore.NewClient(context.Background(), "my-project")
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	locker, err := firestorelock.New(client,
		firestorelock.WithCollection("billing_locks"),
		firestorelock.WithFenceCollection("billing_lock_fences"),
		firestorelock.WithSkewTolerance(200*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	lease, ok, err := locker.Acquire(context.Background(), "report:2026-11", time.Minute)
	if err != nil || !ok {
		log.Fatal("not acquired: ", err)
	}
	defer locker.ReleaseKey(context.Background(), lease.Key, lease.ID)
}

// Without a TTL policy on expireAt, a sweeper deletes expired lock
// documents (never fence counters) in the background.
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
	fmt.Println("deleted", n, "expired locks")
}
