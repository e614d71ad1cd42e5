package redisstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock/redislock"
	"github.com/idemkit/idemkit/lock/redislock/redistest"
	"github.com/idemkit/idemkit/middleware"
	"github.com/idemkit/idemkit/store"
	"github.com/idemkit/idemkit/store/redisstore"
	"github.com/redis/go-redis/v9"
)

// BenchmarkStore measures Get (of a 1 KiB record) and Put (1 KiB).
func BenchmarkStore(b *testing.B) {
	body := make([]byte, 1024)
	for _, kind := range redistest.BenchKinds() {
		for _, par := range []int{1, 32} {
			b.Run(fmt.Sprintf("%s/goroutines=%d", kind, par), func(b *testing.B) {
				s, err := redisstore.New(redistest.BenchClients(b, kind)(b), redisstore.WithKeyPrefix(testenv.Name(b)))
				if err != nil {
					b.Fatal(err)
				}
				rec := store.Record{Key: "k", Fingerprint: fp.String(), State: store.StateCompleted, Response: body, Fence: 1}
				if _, err := s.Put(b.Context(), rec, time.Hour); err != nil {
					b.Fatal(err)
				}
				b.Run("get", func(b *testing.B) {
					redistest.Parallel(b, par, func() {
						if _, ok, err := s.Get(b.Context(), "k"); err != nil || !ok {
							b.Error(ok, err)
						}
					})
				})
				var seq atomic.Int64
				b.Run("put", func(b *testing.B) {
					redistest.Parallel(b, par, func() {
						r := rec
						r.Key = fmt.Sprint("k", seq.Add(1))
						if _, err := s.Put(b.Context(), r, time.Hour); err != nil {
							b.Error(err)
						}
					})
				})
			})
		}
	}
}

// BenchmarkGuard measures a guard over Redis: a first execution (a new key
// each time) and a replay, combined and not.
func BenchmarkGuard(b *testing.B) {
	for _, kind := range redistest.BenchKinds() {
		newClient := redistest.BenchClients(b, kind)
		for _, combined := range []bool{true, false} {
			for _, par := range []int{1, 32} {
				b.Run(fmt.Sprintf("%s/combined=%v/goroutines=%d", kind, combined, par), func(b *testing.B) {
					n := newBenchNode(b, newClient, combined)
					fn := func(context.Context) (middleware.Result, error) {
						return middleware.Result{Value: []byte(`{"id":"rcpt_1"}`)}, nil
					}
					var seq atomic.Int64
					b.Run("first", func(b *testing.B) {
						redistest.Parallel(b, par, func() {
							if _, err := n.Execute(b.Context(), fmt.Sprint("first-", seq.Add(1)), fp, fn); err != nil {
								b.Error(err)
							}
						})
					})
					if _, err := n.Execute(b.Context(), "replayed", fp, fn); err != nil {
						b.Fatal(err)
					}
					b.Run("replay", func(b *testing.B) {
						redistest.Parallel(b, par, func() {
							if out, err := n.Execute(b.Context(), "replayed", fp, fn); err != nil || !out.Replayed {
								b.Error(out, err)
							}
						})
					})
				})
			}
		}
	}
}

func newBenchNode(b *testing.B, newClient func(testing.TB) redis.UniversalClient, combined bool) *middleware.Guard {
	sc := newClient(b)
	lc := sc
	if !combined {
		lc = newClient(b)
	}
	prefix := testenv.Name(b)
	l, err := redislock.New(lc, redislock.WithKeyPrefix(prefix))
	if err != nil {
		b.Fatal(err)
	}
	s, err := redisstore.New(sc, redisstore.WithKeyPrefix(prefix))
	if err != nil {
		b.Fatal(err)
	}
	if s.Combines(l) != combined {
		b.Fatal("unexpected combining")
	}
	g, err := middleware.New(s, l)
	if err != nil {
		b.Fatal(err)
	}
	return g
}
