package pgstore

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testenv"
	"github.com/idemkit/idemkit/store"
)

// BenchmarkStore measures, on one connection: Get of a present record, a
// Claim that replays an outcome (a retry), a Claim refused by a live claim
// (a waiting duplicate), a first execution (Claim of a free key, then
// Complete with a 1 KiB response, durable), Claim then Release, and Put.
// Against the test server (fsync off) writes look cheaper than on a
// durable server; set IDEMKIT_POSTGRES_URL to measure one.
func BenchmarkStore(b *testing.B) {
	srv := testenv.Postgres(b)
	admin := newPool(b, srv.URL, 1)
	s, err := New(newPool(b, srv.URL, 1), table(b, admin))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	fp := "sha256:" + string(bytes.Repeat([]byte("ab"), 32))
	body := bytes.Repeat([]byte("x"), 1024)
	c, _, err := s.Claim(ctx, "done", fp, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	c.State, c.Response = store.StateCompleted, body
	if ok, err := s.Complete(ctx, c, time.Hour); err != nil || !ok {
		b.Fatal(ok, err)
	}
	if _, _, err := s.Claim(ctx, "busy", fp, time.Hour); err != nil {
		b.Fatal(err)
	}
	b.Run("Get", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok, err := s.Get(ctx, "done"); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("ClaimReplay", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if rec, claimed, err := s.Claim(ctx, "done", fp, time.Hour); err != nil || claimed || rec.State != store.StateCompleted {
				b.Fatal(claimed, err)
			}
		}
	})
	b.Run("ClaimBusy", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, claimed, err := s.Claim(ctx, "busy", fp, time.Hour); err != nil || claimed {
				b.Fatal(claimed, err)
			}
		}
	})
	b.Run("ClaimComplete", func(b *testing.B) {
		b.ReportAllocs()
		run, i := time.Now().UnixNano(), 0
		for b.Loop() {
			i++
			c, claimed, err := s.Claim(ctx, fmt.Sprint("first/", run, "/", i), fp, time.Hour)
			if err != nil || !claimed {
				b.Fatal(claimed, err)
			}
			c.State, c.Response = store.StateCompleted, body
			if ok, err := s.Complete(ctx, c, time.Hour); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("ClaimRelease", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c, claimed, err := s.Claim(ctx, "cycle", fp, time.Hour)
			if err != nil || !claimed {
				b.Fatal(claimed, err)
			}
			if ok, err := s.Release(ctx, "cycle", c.Fence); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("Put", func(b *testing.B) {
		b.ReportAllocs()
		rec := store.Record{Fingerprint: fp, State: store.StateCompleted, Response: body, Fence: 1}
		i := 0
		for b.Loop() {
			i++
			rec.Key = fmt.Sprint("put/", i%1000)
			if ok, err := s.Put(ctx, rec, time.Hour); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
}
