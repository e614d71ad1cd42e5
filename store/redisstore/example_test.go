package redisstore_test

import (
	"context"
	"fmt"
	"log"
	"net/http"

	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/nethttp"
	"github.com/idemkit/idemkit/store/redisstore"
	"github.com/redis/go-redis/v9"
)

// A guard on Redis. The client must honour ctx deadlines
// (ContextTimeoutEnabled), or New refuses it: a stalled server then fails
// a request within the guard's op timeout instead of hanging it. A replay
// costs one round trip, a first execution two; a duplicate of a running
// request is woken by pub/sub as soon as the request's outcome is stored.
func ExampleNew() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	backend, err := redisstore.New(client)
	if err != nil {
		log.Fatal(err)
	}
	guard, err := middleware.New(backend)
	if err != nil {
		log.Fatal(err)
	}
	type Receipt struct{ ID string }
	r, replayed, err := middleware.Do(context.Background(), guard, "payment:order-7", map[string]int{"amount": 1250},
		func(ctx context.Context) (Receipt, error) { return Receipt{ID: "rcpt_1"}, nil })
	fmt.Println(r.ID, replayed, err)
}

// A guard on Redis Cluster behind net/http, with its keys under "shop:":
// POSTs with an Idempotency-Key run once across every instance of the
// service. Each record is one key, so no hash tags are needed.
func ExampleWithKeyPrefix() {
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 []string{"localhost:7000", "localhost:7001", "localhost:7002"},
		ContextTimeoutEnabled: true,
	})
	defer client.Close()
	backend, err := redisstore.New(client, redisstore.WithKeyPrefix("shop:"))
	if err != nil {
		log.Fatal(err)
	}
	guard, err := middleware.New(backend)
	if err != nil {
		log.Fatal(err)
	}
	idem, err := nethttp.New(guard)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", idem(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))
	log.Fatal(http.ListenAndServe("localhost:8080", mux))
}
