package pgstore

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/lock/pglock/pgtest"
	"github.com/idemkit/idemkit/store"
)

// BenchmarkStore measures Get of a present record (a replay) and Put (a
// fenced upsert with a durable commit) of a 1 KiB response, on one
// connection. Against the test server (fsync off) Put looks cheaper than on
// a durable server; set IDEMKIT_POSTGRES_URL to measure one.
func BenchmarkStore(b *testing.B) {
	srv := testenv.Postgres(b)
	admin := pgtest.NewPool(b, srv.URL, 1)
	s, err := New(pgtest.NewPool(b, srv.URL, 1), table(b, admin))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	rec := store.Record{Key: "bench", Fingerprint: "sha256:" + string(bytes.Repeat([]byte("ab"), 32)),
		State: store.StateCompleted, Response: bytes.Repeat([]byte("x"), 1024), Fence: 1}
	if _, err := s.Put(ctx, rec, time.Hour); err != nil {
		b.Fatal(err)
	}
	b.Run("Get", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok, err := s.Get(ctx, "bench"); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("Put", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			rec.Key = fmt.Sprint("bench/", i%1000)
			if ok, err := s.Put(ctx, rec, time.Hour); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
}
