package redisstore_test

import (
	"context"
	"fmt"
	"log"
	"net/http"

	"github.com/idemkit/idemkit/lock/redislock"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/store/redisstore"
	"github.com/redis/go-redis/v9"
)

// A guard on Redis: records and locks on one client, so that the guard
// combines them (three round trips for a first execution, one for a
// replay).
func ExampleNew() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer client.Close()
	locker, err := redislock.New(client)
	if err != nil {
		log.Fatal(err)
	}
	records, err := redisstore.New(client)
	if err != nil {
		log.Fatal(err)
	}
	guard, err := middleware.New(records, locker)
	if err != nil {
		log.Fatal(err)
	}
	type Receipt struct{ ID string }
	r, replayed, err := middleware.Do(context.Background(), guard, "payment:order-7", map[string]int{"amount": 1250},
		func(ctx context.Context) (Receipt, error) { return Receipt{ID: "rcpt_1"}, nil })
	fmt.Println(r.ID, replayed, err)
}

// The same guard behind net/http: POSTs with an Idempotency-Key run once
// across every instance of the service.
func ExampleStore_Combines() {
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"localhost:7000", "localhost:7001", "localhost:7002"}})
	defer client.Close()
	locker, _ := redislock.New(client, redislock.WithKeyPrefix("shop"))
	records, _ := redisstore.New(client, redisstore.WithKeyPrefix("shop"))
	fmt.Println("combined:", records.Combines(locker))
	guard, err := middleware.New(records, locker)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", nethttp.Middleware(guard)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))
	log.Fatal(http.ListenAndServe("localhost:8080", mux))
}
