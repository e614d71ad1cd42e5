package redislock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/idemkit/idemkit/lock"
	"github.com/idemkit/idemkit/lock/redislock"
	"github.com/redis/go-redis/v9"
)

// A lock on a single Redis server, held while fn runs and renewed in the
// background; the fence goes to the resource the work writes to. The
// client must honour ctx deadlines (ContextTimeoutEnabled), so that a
// stalled server fails the call at its deadline.
func ExampleNew() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	locker, err := redislock.New(client, redislock.WithKeyPrefix("billing"))
	if err != nil {
		log.Fatal(err)
	}
	err = lock.Do(context.Background(), locker, "invoice:42", func(ctx context.Context, lease lock.Lease) error {
		fmt.Println("issuing invoice 42 under fence", lease.Fence)
		return nil
	}, lock.WithTTL(10*time.Second), lock.WithTimeout(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
}

// The same locker on Redis Cluster, with acquires that wait until a replica
// has the lease, so a failover cannot lose it.
func ExampleWithWaitForReplicas() {
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 []string{"localhost:7000", "localhost:7001", "localhost:7002"},
		ContextTimeoutEnabled: true,
	})
	defer client.Close()
	locker, err := redislock.New(client, redislock.WithWaitForReplicas(1, 500*time.Millisecond))
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
	fmt.Println("generating the report under fence", lease.Fence)
}

// Lock ids that travel between processes: the process that acquires
// writes an index hint for each lease, so that another process (here a
// second locker with a client of its own) can release the lease by its id
// alone.
func ExampleWithIDIndex() {
	ctx := context.Background()
	acquirer, err := redislock.New(redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true}),
		redislock.WithIDIndex(true))
	if err != nil {
		log.Fatal(err)
	}
	lease, ok, err := acquirer.Acquire(ctx, "export:7", time.Minute)
	if err != nil || !ok {
		log.Fatal("not acquired: ", err)
	}

	// Elsewhere, with only the lock id in hand:
	worker, err := redislock.New(redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true}))
	if err != nil {
		log.Fatal(err)
	}
	out, err := worker.Release(ctx, lease.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("released by id:", out.OK)
}
